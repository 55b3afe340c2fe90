// tessera bench contract: sparse tensor contraction throughput (docs/sptc.md).
//
// Reports the products (pairs of matching nonzeros multiplied) per second, the output
// nonzeros, the time split into matching, counting, multiplication and assembly (the
// slowest rank's kernel) and routing, the ratio to the reference backend (and to the cpu
// backend for other backends), and a floor: bytes that must move (every input nonzero read
// once, every output nonzero written once) over the measured copy bandwidth of the
// backend's memory (harness.hpp); for a device backend also the host link floor: the inputs
// up and the output down the host link at its measured page-locked rate (every rank copying
// at once), the bound of an end-to-end run from host memory.
//
// Host buffers are kept across the timed runs by default (algo::ContractBuffers: inputs
// page-locked once, before the runs and not timed; output arrays sized and page-locked by
// the first run, the warm-up when --repeat > 1, and reused): a caller that contracts
// repeatedly does the same. --fresh-buffers times a new output and staged copies each run.
//
// Inputs: two files and --einsum, or --generate (contract_inputs.cpp): uniform random
// coordinates for the spec (default "ijk,jkl->il", a 3-mode x 3-mode contraction), --nnz
// nonzeros per input and the matched letters' lengths chosen so that the expected products
// are --products: E[products] = nnz_X * nnz_Y / (product of the matched lengths). Free
// letters get --free-dim (default: about products / 16 output cells, so each output entry
// sums ~16 products). --block-size B --block-density D makes them blocky instead: every
// nonzero lies in an aligned box of B cells per mode (fewer for shorter modes) filled at
// density D (lengths rounded up to multiples of B), the input of the tensor-core path.
//
// --tc PREC and --assembly rows|sort choose the device kernel's paths (kernels/sptc.hpp,
// ContractDeviceOptions); --tc-threshold X is the "Kernel tuning" option of every computing
// subcommand (kernels::Tuning::sptc_tc_threshold). --tc-sweep (tc_sweep.cpp; cuda backend, one
// rank) times the tensor-core path against the sparse path on blocky inputs of increasing
// block density, prints the crossover density (the threshold to use) and the error of each
// tensor-core precision against the float64 sparse result.
#include "algo/contract.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "bench/contract.hpp"
#include "bench/harness.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "io/output.hpp"
#include "plan/limits.hpp"
#include "run/contract_inputs.hpp"
#include "run/input.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace bench {
namespace {

/// One timed contraction on a backend: the median run of `repeat` (after a warm-up when
/// repeat > 1), times as the slowest rank's.
struct Timing {
  std::string backend;
  double total = 0;  ///< end to end: routing, kernel, merge
  double match = 0, count = 0, multiply = 0, assemble = 0, route = 0, merge = 0;
  double kernel() const { return match + count + multiply + assemble; }
  std::int64_t products = 0, out_nnz = 0, partial = 0;
  std::int64_t tc_products = 0;        ///< summed over ranks
  double tc_seconds = 0;               ///< slowest rank
  std::string path;                    ///< rank 0's kernel path (device backends)
  double value_sum = 0, value_sq = 0;  ///< checksums of the output (all ranks)
  std::size_t memory = 0;
  int runs = 0;
  bool kept = false;        ///< host buffers kept across the runs (algo::ContractBuffers)
  double pinned_bytes = 0;  ///< page-locked by them, summed over ranks (after the runs)
  double pin_input_s = 0;   ///< page-locking the inputs (slowest rank; not in the times)
};

/// Host link rates of a device backend, bytes/s per rank, measured with every rank copying
/// at once (the node's ranks share its memory and PCIe): 256 MiB to the device and back
/// from page-locked host memory (Backend::pin_host), best of 3, the slowest rank's.
struct HostLink {
  double up = 0, down = 0;  ///< 0 for host backends
  bool locked = false;      ///< false: the system refused to page-lock, rates of staged copies
};
template <typename T>
HostLink measure_host_link(kernels::Backend<T>& be, const comm::Communicator& world) {
  HostLink r;
  if (be.memory_space() != comm::MemorySpace::device) return r;
  const std::size_t n = (std::size_t(256) << 20) / sizeof(T);
  std::vector<T> host(n, T(1));
  const auto pin = be.pin_host(host.data(), n * sizeof(T));
  r.locked = pin != nullptr;
  auto dev = be.allocate(n);
  double best[2] = {1e30, 1e30};
  for (int k = 0; k < 4; ++k)
    for (int dir = 0; dir < 2; ++dir) {
      world.barrier();
      Timer t;
      if (dir == 0)
        be.upload(host.data(), n, dev.data());
      else
        be.download(dev.data(), n, host.data());
      const double s = t.seconds();
      if (k > 0) best[dir] = std::min(best[dir], s);  // the first pass warms up
    }
  world.allreduce(best, 2, comm::ReduceOp::max);
  r.up = static_cast<double>(n * sizeof(T)) / best[0];
  r.down = static_cast<double>(n * sizeof(T)) / best[1];
  return r;
}

template <typename T>
Timing time_backend(const std::string& name, kernels::Backend<T>& be, const SparseTensor<T>& x,
                    const SparseTensor<T>& y, const kernels::ContractSpec& spec, int repeat,
                    const comm::Communicator& world, const algo::ContractOptions& base,
                    bool keep_buffers) {
  // Kept buffers: the inputs page-locked once here (not timed, like a tensor's upload in
  // `bench mttkrp`), the output arrays sized and page-locked by the first run (the warm-up
  // when repeat > 1) and reused by the next.
  std::optional<algo::ContractBuffers<T>> buf;
  double pin_s = 0;
  if (keep_buffers) {
    buf.emplace(be);
    pin_s = buf->pin_input(x);
    if (&y != &x) pin_s += buf->pin_input(y);
    pin_s = world.allreduce_value(pin_s, comm::ReduceOp::max);
  }
  int run = 0;
  const auto step = [&](bool timed) {
    algo::ContractOptions o = base;
    o.print = base.print && run++ == 0;
    world.barrier();
    Timer t;
    algo::ContractResult<T> res;
    try {
      res = algo::contract(x, y, spec, be, world, o, buf ? &*buf : nullptr);
    } catch (const InputError& e) {
      throw CollectiveError(e.what());  // decided from shared data: agreed on every rank
    }
    double v[8] = {t.seconds(),
                   res.stats.match_seconds,
                   res.stats.count_seconds,
                   res.stats.multiply_seconds,
                   res.stats.assemble_seconds,
                   res.phases.get("route_inputs") + res.phases.get("route_output"),
                   res.phases.get("merge"),
                   res.stats.tc_seconds};
    world.allreduce(v, 8, comm::ReduceOp::max);
    double tcp = static_cast<double>(res.stats.tc_products);
    world.allreduce(&tcp, 1);
    Timing tm;
    if (!timed) return tm;
    tm.backend = name;
    tm.total = v[0];
    tm.match = v[1];
    tm.count = v[2];
    tm.multiply = v[3];
    tm.assemble = v[4];
    tm.route = v[5];
    tm.merge = v[6];
    tm.products = res.global_products;
    tm.out_nnz = res.global_nnz;
    tm.partial = res.global_partial_entries;
    tm.tc_products = static_cast<std::int64_t>(tcp);
    tm.tc_seconds = v[7];
    tm.path = res.stats.path;
    tm.memory = res.memory.total_bytes;
    double sums[2] = {0, 0};
    for (T val : (buf ? buf->result() : res.local).vals) {
      sums[0] += static_cast<double>(val);
      sums[1] += static_cast<double>(val) * static_cast<double>(val);
    }
    world.allreduce(sums, 2);
    tm.value_sum = sums[0];
    tm.value_sq = sums[1];
    return tm;
  };
  Timing med =
      median_run<Timing>(repeat > 1 ? 1 : 0, repeat, step,
                         [](const Timing& a, const Timing& b) { return a.total < b.total; });
  med.runs = repeat;
  med.kept = keep_buffers;
  med.pin_input_s = pin_s;
  if (buf) med.pinned_bytes = world.allreduce_value(static_cast<double>(buf->pinned_bytes()));
  return med;
}

template <typename T>
void run_bench_contract(const BenchContractArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_input("input X", a.x);
    outputs.add_input("input Y", a.y);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  kernels::ContractSpec spec;
  algo::ContractOptions o;
  std::map<char, std::uint64_t> len;
  double expected_products = 0;
  comm::run_collectively(world, [&] {
    const bool files = !a.x.empty();
    TESSERA_INPUT_CHECK(files != a.generate,
                        "bench contract needs two files X Y with --einsum, or --generate");
    TESSERA_INPUT_CHECK(!files || !a.y.empty(), "bench contract: give both X and Y files");
    TESSERA_INPUT_CHECK(!files || !a.einsum.empty(), "bench contract X Y needs --einsum SPEC");
    spec = kernels::parse_contract_spec(a.einsum.empty() ? "ijk,jkl->il" : a.einsum);
    spec.device = device_options(a);
    TESSERA_INPUT_CHECK(a.block_size == 0 || a.generate,
                        "--block-size makes generated inputs blocky; it needs --generate");
    TESSERA_INPUT_CHECK(a.block_density > 0 && a.block_density <= 1,
                        "--block-density must be in (0, 1], found " << a.block_density);
    if (files) {
      contract_check_input_file(a.x, "X");
      contract_check_input_file(a.y, "Y");
    } else {
      TESSERA_INPUT_CHECK(a.nnz >= 1 && a.nnz < 4e9, "--nnz must be in 1 .. 4e9 per input");
      TESSERA_INPUT_CHECK(a.products >= 1 && a.products < 1e15, "--products must be in 1 .. 1e15");
      expected_products = generated_lengths(spec, a, a.block_size, len);
    }
    if (!a.mem_limit.empty()) o.memory_limit = parse_bytes(a.mem_limit, "--mem-limit");
  });
  if (a.mem_limit.empty()) o.memory_limit = default_memory_limit(world);

  auto cx = make_compute<T>(a.run, world);
  const auto kind = cx.kind;
  // Measured peaks beside the contractions' estimates: the resident set before the inputs
  // are made is the process's baseline, which the estimates do not hold.
  PeakSampler peaks(kind == kernels::BackendKind::cuda);
  const std::uint64_t baseline = plan::process_memory().rss;
  comm::run_collectively(world, [&] { contract_probe_backend(*cx.backend, spec); });
  ContractInputs<T> in;
  if (a.generate) {
    Timer t;
    const auto n = static_cast<std::uint64_t>(a.nnz);
    if (a.block_size > 0) {
      in.x = generate_blocky_share<T>(spec.x, len, n, a.seed, world.rank(), world.size(),
                                      a.block_size, a.block_density);
      in.y = generate_blocky_share<T>(spec.y, len, n, a.seed + 0x5EED, world.rank(), world.size(),
                                      a.block_size, a.block_density);
    } else {
      in.x = generate_share<T>(spec.x, len, n, a.seed, world.rank(), world.size());
      in.y = generate_share<T>(spec.y, len, n, a.seed + 0x5EED, world.rank(), world.size());
    }
    in.nnz[0] = in.nnz[1] = static_cast<nnz_t>(n);
    std::string shape;
    for (const auto& [c, l] : len)
      shape += std::string(shape.empty() ? "" : ", ") + c + "=" + std::to_string(l);
    char line[400];
    std::snprintf(line, sizeof(line),
                  "generated %s: %llu nonzeros per input, %s, lengths %s; "
                  "expected products %.4g (nnz^2 / matched key space) in %.2f s",
                  spec.text.c_str(), static_cast<unsigned long long>(n),
                  a.block_size > 0 ? ("blocks of " + std::to_string(a.block_size) +
                                      " per mode at density " + std::to_string(a.block_density))
                                         .c_str()
                                   : "uniform coordinates",
                  shape.c_str(), expected_products, t.seconds());
    log::info(line);
  } else {
    in = contract_read_inputs<T>(a.x, a.y, a.load.index_base, world);
    comm::run_collectively(world, [&] { contract_fit_dims(spec, a.extend_dims, in); });
  }
  const SparseTensor<T>& X = in.x;
  const SparseTensor<T>& Y = in.same ? in.x : in.y;

  const double bw = measure_bandwidth(*cx.backend, a.run.threads);
  log_setup("contract " + spec.text, kernels::to_string(kind), world.size(), a.run.threads,
            a.run.precision, "", bw);

  std::vector<Timing> rows;
  auto own = o;
  own.data = cx.data;  // nonzeros routed over NCCL on GPUs
  const bool keep = !a.fresh_buffers;
  rows.push_back(
      time_backend(kernels::to_string(kind), *cx.backend, X, Y, spec, a.repeat, world, own, keep));
  auto base = o;  // host backends route over MPI
  base.print = false;
  const bool cpu_too =
      kind != kernels::BackendKind::cpu && (a.compare_cpu || kind == kernels::BackendKind::cuda);
  // The comparison backends are made on every rank alike (a refused option, e.g. a
  // --cpu-isa this CPU lacks, is one agreed error, not one rank's).
  if (cpu_too) {
    std::unique_ptr<kernels::Backend<T>> be;
    comm::run_collectively(world, [&] {
      be = kernels::make_backend<T>(kernels::BackendKind::cpu, a.run.threads, a.run.tuning);
    });
    rows.push_back(time_backend("cpu", *be, X, Y, spec, a.repeat, world, base, keep));
  }
  if (!a.no_reference && kind != kernels::BackendKind::reference) {
    std::unique_ptr<kernels::Backend<T>> be;
    comm::run_collectively(world, [&] {
      be = kernels::make_backend<T>(kernels::BackendKind::reference, 0, a.run.tuning);
    });
    rows.push_back(time_backend("reference", *be, X, Y, spec, 1, world, base, keep));
  }

  // Floor: every input nonzero read once, every output nonzero written once (slowest rank's
  // share), over the copy bandwidth.
  const auto ebytes = [](int order) {
    return static_cast<double>(order) * sizeof(index_t) + static_cast<double>(sizeof(T));
  };
  const Floor floor =
      floor_of(static_cast<double>(X.nnz()) * ebytes(X.order()) +
                   (in.same ? 0.0 : static_cast<double>(Y.nnz()) * ebytes(Y.order())) +
                   static_cast<double>(rows[0].out_nnz) / world.size() * ebytes(spec.out_order()),
               bw, world);
  // A device backend also moves every input nonzero up and every output nonzero down the
  // host link: that floor bounds the end-to-end time (inputs and output in host memory).
  const HostLink link = measure_host_link(*cx.backend, world);
  double link_s = 0;
  if (link.up > 0) {
    link_s =
        (static_cast<double>(X.nnz()) * ebytes(X.order()) +
         (in.same ? 0.0 : static_cast<double>(Y.nnz()) * ebytes(Y.order()))) /
            link.up +
        static_cast<double>(rows[0].out_nnz) / world.size() * ebytes(spec.out_order()) / link.down;
    link_s = world.allreduce_value(link_s, comm::ReduceOp::max);
  }

  const Timing& me = rows[0];
  nlohmann::json runs = nlohmann::json::array();
  const Table table({{"backend", 10, true},
                     {"products", 12},
                     {"total_s", 10},
                     {"kernel_s", 10},
                     {"products/s", 12},
                     {"out_nnz", 12},
                     {"match_s", 9},
                     {"count_s", 9},
                     {"mult_s", 9},
                     {"assem_s", 9},
                     {"route_s", 9},
                     {"merge_s", 9},
                     {"speedup", 8}});
  table.header();
  for (const Timing& r : rows) {
    const double speedup = r.total / me.total;  // how much faster the benchmarked backend is
    table.row({r.backend, cell("%.4g", static_cast<double>(r.products)), cell("%.4f", r.total),
               cell("%.4f", r.kernel()),
               cell("%.4g", r.kernel() > 0 ? static_cast<double>(r.products) / r.kernel() : 0.0),
               cell("%lld", static_cast<long long>(r.out_nnz)), cell("%.4f", r.match),
               cell("%.4f", r.count), cell("%.4f", r.multiply), cell("%.4f", r.assemble),
               cell("%.4f", r.route), cell("%.4f", r.merge), cell("%.2f", speedup)});
    runs.push_back({{"backend", r.backend},
                    {"repeats", r.runs},
                    {"total_seconds", r.total},
                    {"kernel_seconds", r.kernel()},
                    {"match_seconds", r.match},
                    {"count_seconds", r.count},
                    {"multiply_seconds", r.multiply},
                    {"assemble_seconds", r.assemble},
                    {"route_seconds", r.route},
                    {"merge_seconds", r.merge},
                    {"products", r.products},
                    {"tc_products", r.tc_products},
                    {"tc_seconds", r.tc_seconds},
                    {"path", r.path},
                    {"products_per_s_kernel", r.kernel() > 0 ? r.products / r.kernel() : 0.0},
                    {"products_per_s_total", r.total > 0 ? r.products / r.total : 0.0},
                    {"output_nnz", r.out_nnz},
                    {"partial_output_entries", r.partial},
                    {"memory_estimate_bytes", r.memory},
                    {"speedup_of_benchmarked_backend", speedup},
                    {"host_buffers", r.kept ? "kept" : "fresh"},
                    {"pinned_bytes", r.pinned_bytes},
                    {"pin_input_seconds", r.pin_input_s}});
  }
  // The backends must agree (same nonzeros, same value sums up to rounding).
  for (std::size_t k = 1; k < rows.size(); ++k) {
    const double rel = std::fabs(rows[k].value_sum - me.value_sum) /
                       std::max(1e-300, std::sqrt(me.value_sq) * std::sqrt(double(me.out_nnz) + 1));
    const bool same = rows[k].out_nnz == me.out_nnz && rows[k].products == me.products;
    if (log::rank() == 0)
      std::printf(
          "check against %s: %s nonzeros and products, value sums differ by %.2g "
          "(relative to the output norm x sqrt(nnz))\n",
          rows[k].backend.c_str(), same ? "same" : "DIFFERENT", rel);
  }
  if (log::rank() == 0) {
    if (me.kept)
      std::printf(
          "host buffers: kept across the runs (inputs page-locked once in %.3f s, not timed; "
          "output arrays sized by the first run and reused); %s page-locked over all ranks\n",
          me.pin_input_s, human_bytes(me.pinned_bytes).c_str());
    else
      std::printf("host buffers: fresh every run (--fresh-buffers)\n");
  }
  if (log::rank() == 0 && !me.path.empty()) {
    std::printf("%s path (rank 0): %s\n", me.backend.c_str(), me.path.c_str());
    if (me.tc_products > 0)
      std::printf("tensor cores: %lld of %lld products (%.1f%%), %.4f s of the multiplication\n",
                  static_cast<long long>(me.tc_products), static_cast<long long>(me.products),
                  100.0 * static_cast<double>(me.tc_products) /
                      std::max<double>(1.0, static_cast<double>(me.products)),
                  me.tc_seconds);
  }
  if (log::rank() == 0) {
    std::printf(
        "floor: %s (inputs read once, output written once, slowest rank) / %s/s = %.4f s; "
        "kernel / floor = %.1f, total / floor = %.1f\n",
        human_bytes(floor.bytes).c_str(), human_bytes(bw).c_str(), floor.seconds,
        floor.ratio(me.kernel()), floor.ratio(me.total));
    if (link_s > 0)
      std::printf(
          "host link floor: inputs up at %s/s, output down at %s/s per rank (%s, every rank at "
          "once) = %.4f s; total / host link floor = %.2f\n",
          human_bytes(link.up).c_str(), human_bytes(link.down).c_str(),
          link.locked ? "page-locked" : "staged: page-locking refused", link_s, me.total / link_s);
    std::fflush(stdout);
  }
  // Peak memory beside the estimates. The host peak (VmHWM) covers the whole benchmark, every
  // backend it times; the estimates are each backend's busiest rank's, made before its
  // multiplication (algo::ContractMemory: inputs, routed copies, workspace, output, exchange).
  peaks.stop();
  std::size_t estimate = 0;
  for (const Timing& r : rows) estimate = std::max(estimate, r.memory);
  const double host_peak =
      world.allreduce_value(static_cast<double>(peaks.host_peak()), comm::ReduceOp::max);
  const double device_peak =
      world.allreduce_value(static_cast<double>(peaks.device_peak()), comm::ReduceOp::max);
  const double base_rss = world.allreduce_value(static_cast<double>(baseline), comm::ReduceOp::max);
  // measure_bandwidth's two arrays (run/compute.cpp) on a host backend: 512 MiB each, beside
  // the inputs, before the contractions.
  const double probe =
      cx.backend->memory_space() == comm::MemorySpace::host ? double(std::uint64_t(1) << 30) : 0.0;
  const double planned = base_rss + static_cast<double>(estimate) + probe;
  if (log::rank() == 0) {
    std::printf(
        "memory per rank: host peak %s measured (VmHWM, every backend timed) vs %s estimated "
        "(the largest contraction estimate, %s, on the process baseline of %s and the "
        "bandwidth probe's %s) (%.2f)",
        human_bytes(host_peak).c_str(), human_bytes(planned).c_str(),
        human_bytes(static_cast<double>(estimate)).c_str(), human_bytes(base_rss).c_str(),
        human_bytes(probe).c_str(), planned > 0 ? host_peak / planned : 0.0);
    if (kind == kernels::BackendKind::cuda)
      std::printf("; device peak %s measured", human_bytes(device_peak).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  nlohmann::json j;
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  j["memory_estimate_vs_peak"] = {
      {"measured_peak_host_bytes", host_peak}, {"baseline_host_bytes", base_rss},
      {"bandwidth_probe_host_bytes", probe},   {"largest_estimate_bytes", estimate},
      {"estimated_peak_host_bytes", planned},  {"measured_peak_device_bytes", device_peak}};
  // One contraction of the benchmarked backend end to end (median run, slowest rank): the
  // kernel (match, count, multiply, assemble), routing and merge.
  j["timing"] =
      timing_record("contraction", me.total, {{"kernel", me.kernel()}, {"comm", me.route}});
  j["einsum"] = spec.text;
  j["precision"] = a.run.precision;
  j["device_options"] = {
      {"tensor_cores", kernels::to_string(spec.device.tensor_cores)},
      {"tc_threshold", kernels::resolve_tc_threshold(spec.device, cx.backend->tuning())},
      {"assembly", kernels::to_string(spec.device.assembly)}};
  if (a.block_size > 0) j["blocks"] = {{"size", a.block_size}, {"density", a.block_density}};
  j["inputs"] = {{"x", {{"dims", X.dims}, {"nnz", in.nnz[0]}, {"file", a.x}}},
                 {"y", {{"dims", Y.dims}, {"nnz", in.nnz[1]}, {"file", a.y}}},
                 {"generated", a.generate},
                 {"self_contraction", in.same}};
  if (a.generate) j["expected_products"] = expected_products;
  j["output"] = {{"nnz", me.out_nnz}};
  j["runs"] = runs;
  j["floor"] = {{"bytes", floor.bytes},
                {"seconds", floor.seconds},
                {"kernel_ratio", floor.ratio(me.kernel())},
                {"total_ratio", floor.ratio(me.total)}};
  if (link_s > 0)
    j["host_link_floor"] = {{"page_locked", link.locked},
                            {"up_bytes_per_s", link.up},
                            {"down_bytes_per_s", link.down},
                            {"seconds", link_s},
                            {"total_ratio", me.total / link_s}};
  write_record(a.run.json, "bench contract", j, world, kernels::to_string(kind), a.run.threads,
               cx.backend->tuning(), peaks.device_peak());
}

}  // namespace
}  // namespace bench

void add_bench_contract(CLI::App* bench, Runner& run) {
  auto a = std::make_shared<bench::BenchContractArgs>();
  auto* sub = bench->add_subcommand(
      "contract",
      "SpTC throughput: products/s, output nonzeros, time split, ratio to the reference "
      "backend, memory floor (files X Y with --einsum, or --generate)");
  sub->add_option("x", a->x, "First input (.tns, .tns.gz or .h5)");
  sub->add_option("y", a->y, "Second input (the same file as X for a self-contraction)");
  sub->add_option("-e,--einsum", a->einsum,
                  "Spec, e.g. ijy,kjy->ik (default with --generate: ijk,jkl->il)");
  sub->add_flag("--generate", a->generate,
                "Random inputs for the spec: --nnz per input, matched lengths chosen for "
                "--products expected products");
  sub->add_option("--nnz", a->nnz, "Nonzeros per generated input (default 1e6)");
  sub->add_option("--products", a->products, "Expected products of the generated inputs (1e8)");
  sub->add_option("--free-dim", a->free_dim,
                  "Length of the free letters of generated inputs (default: about products / 16 "
                  "output cells)");
  sub->add_option("--seed", a->seed, "Seed of the generated inputs");
  sub->add_option("--repeat", a->repeat, "Timed runs of the benchmarked backend (median)")
      ->check(CLI::Range(1, 1000));
  sub->add_flag("--no-reference", a->no_reference, "Do not run the reference backend");
  sub->add_flag("--fresh-buffers", a->fresh_buffers,
                "A new output tensor every run and inputs not page-locked (default: host buffers "
                "kept across the runs, algo::ContractBuffers)");
  sub->add_flag("--compare-cpu", a->compare_cpu,
                "Also time the cpu backend (automatic for --backend cuda)");
  sub->add_flag("--extend-dims", a->extend_dims,
                "Give matched modes of unequal lengths the larger one");
  sub->add_option("--mem-limit,--max-mem", a->mem_limit,
                  "Memory per rank the contraction may use (default: 3/4 of the node's share)");
  sub->add_option("--tc", a->tc,
                  "Tensor cores of the cuda kernel for dense blocks: off, fp64 (default), tf32, "
                  "bf16, fp16")
      ->check(CLI::IsMember({"off", "fp64", "tf32", "bf16", "fp16"}));
  sub->add_option("--assembly", a->assembly,
                  "Output assembly of the cuda kernel: rows (default: per-row accumulation on "
                  "chip) or sort (every product sorted)")
      ->check(CLI::IsMember({"rows", "sort"}));
  sub->add_option("--block-size", a->block_size,
                  "Generated inputs made of aligned blocks of this many cells per mode (0: "
                  "uniform coordinates)");
  sub->add_option("--block-density", a->block_density,
                  "Fraction of a block's cells that hold a nonzero (default 0.25)");
  sub->add_flag("--tc-sweep", a->tc_sweep,
                "Time the tensor-core path against the sparse path on blocky inputs of "
                "increasing density (--sweep-densities; --block-size, default 16) and print the "
                "crossover and the error of each precision (cuda backend, one rank)");
  sub->add_option("--sweep-densities", a->sweep_densities,
                  "Block densities of --tc-sweep, comma-separated (default "
                  "0.01,0.02,0.05,0.1,0.2,0.3,0.5,0.75,1)");
  add_compute_options(sub, a->run, a->load, 0);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() {
        if (a->tc_sweep)
          bench::run_tc_sweep<T>(*a, world);
        else
          bench::run_bench_contract<T>(*a, world);
      });
    };
  });
}

}  // namespace tessera::driver
