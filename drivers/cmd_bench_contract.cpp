// tessera bench contract: sparse tensor contraction throughput (docs/sptc.md).
//
// Reports the products (pairs of matching nonzeros multiplied) per second, the output
// nonzeros, the time split into matching, counting, multiplication and assembly (the
// slowest rank's kernel) and routing, the ratio to the reference backend (and to the cpu
// backend for other backends), and a floor: bytes that must move (every input nonzero read
// once, every output nonzero written once) over the measured copy bandwidth of the
// backend's memory (the method of cmd_bench.cpp); for a device backend also the host link
// floor: the inputs up and the output down the host link at its measured page-locked rate
// (every rank copying at once), the bound of an end-to-end run from host memory.
//
// Host buffers are kept across the timed runs by default (algo::ContractBuffers: inputs
// page-locked once, before the runs and not timed; output arrays sized and page-locked by
// the first run, the warm-up when --repeat > 1, and reused): a caller that contracts
// repeatedly does the same. --fresh-buffers times a new output and staged copies each run.
//
// Inputs: two files and --einsum, or --generate: uniform random coordinates for the spec
// (default "ijk,jkl->il", a 3-mode x 3-mode contraction), --nnz nonzeros per input and the
// matched letters' lengths chosen so that the expected products are --products:
// E[products] = nnz_X * nnz_Y / (product of the matched lengths). Free letters get
// --free-dim (default: about products / 16 output cells, so each output entry sums ~16
// products). --block-size B --block-density D makes them blocky instead: every nonzero lies
// in an aligned box of B cells per mode (fewer for shorter modes) filled at density D
// (lengths rounded up to multiples of B), the input of the tensor-core path.
//
// --tc PREC, --tc-threshold X and --assembly rows|sort choose the device kernel's paths
// (kernels/sptc.hpp, ContractDeviceOptions). --tc-sweep (cuda backend, one rank) times the
// tensor-core path against the sparse path on blocky inputs of increasing block density,
// prints the crossover density (the threshold to use) and the error of each tensor-core
// precision against the float64 sparse result.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "algo/contract.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "contract_common.hpp"
#include "io/output.hpp"
#include "kernels/sptc.hpp"
#include "record.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace tessera::driver {
namespace {

struct BenchContractArgs {
  std::string x, y, einsum;
  bool generate = false;
  double nnz = 1e6, products = 1e8, free_dim = 0;
  std::uint64_t seed = 1;
  int repeat = 3;
  bool no_reference = false, compare_cpu = false, extend_dims = false;
  bool fresh_buffers = false;  // a new output and staged copies every run
  std::string mem_limit;
  std::string tc = "fp64", assembly = "rows";
  double tc_threshold = -1;
  std::uint64_t block_size = 0;  ///< 0: uniform coordinates
  double block_density = 0.25;
  bool tc_sweep = false;
  std::string sweep_densities = "0.01,0.02,0.05,0.1,0.2,0.3,0.5,0.75,1";
  LoadOptions load;
  ComputeOptions run;
};

/// The device options from the command line.
kernels::ContractDeviceOptions device_options(const BenchContractArgs& a) {
  kernels::ContractDeviceOptions d;
  d.tensor_cores = kernels::parse_tensor_core_precision(a.tc);
  d.tc_threshold = a.tc_threshold;
  d.assembly = kernels::parse_contract_assembly(a.assembly);
  return d;
}

/// This rank's share (ids [r n / P, (r + 1) n / P)) of a random tensor with subscripts
/// `sub`: coordinate m of nonzero id uniform in [0, len) from a counter-based hash of
/// (seed, id, m), value in [0.5, 1.5). Repeated coordinates are kept (the kernels sum them).
template <typename T>
SparseTensor<T> generate_share(const std::string& sub, const std::map<char, std::uint64_t>& len,
                               std::uint64_t nnz, std::uint64_t seed, int rank, int P) {
  std::vector<std::uint64_t> dims;
  for (char c : sub) dims.push_back(len.at(c));
  const auto lo = static_cast<std::uint64_t>(static_cast<unsigned __int128>(nnz) * rank / P);
  const auto hi = static_cast<std::uint64_t>(static_cast<unsigned __int128>(nnz) * (rank + 1) / P);
  SparseTensor<T> t(dims);
  const auto n = static_cast<std::int64_t>(hi - lo);
  for (auto& v : t.idx) v.resize(static_cast<std::size_t>(n));
  t.vals.resize(static_cast<std::size_t>(n));
  const int N = static_cast<int>(dims.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const std::uint64_t id = lo + static_cast<std::uint64_t>(k);
    for (int m = 0; m < N; ++m) {
      const std::uint64_t h = hash_keys(seed, id, static_cast<std::uint64_t>(m));
      t.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] = static_cast<index_t>(
          (static_cast<unsigned __int128>(h) * dims[static_cast<std::size_t>(m)]) >> 64);
    }
    t.vals[static_cast<std::size_t>(k)] =
        static_cast<T>(0.5 + uniform01(hash_keys(seed, id, 0xFA1ull)));
  }
  return t;
}

/// This rank's share of a blocky random tensor. Nonzero id lies in block id / per_block, an
/// aligned box of ext_m = min(B, len_m) cells per mode at a position drawn from (seed,
/// block, m); the block's nonzeros are distinct cells of the box (k = id % per_block maps
/// to cell (a k + offset) mod cells with a coprime to cells), per_block = round(D cells):
/// every box is filled at density D. Values in [0.5, 1.5).
template <typename T>
SparseTensor<T> generate_blocky_share(const std::string& sub,
                                      const std::map<char, std::uint64_t>& len, std::uint64_t nnz,
                                      std::uint64_t seed, int rank, int P, std::uint64_t B,
                                      double D) {
  using u128 = unsigned __int128;
  std::vector<std::uint64_t> dims, ext, nblk;
  u128 cells = 1;
  for (char c : sub) {
    dims.push_back(len.at(c));
    ext.push_back(std::min<std::uint64_t>(B, dims.back()));
    nblk.push_back(std::max<std::uint64_t>(1, dims.back() / ext.back()));
    cells *= ext.back();
    TESSERA_INPUT_CHECK(cells < (u128{1} << 62), "--block-size " << B << " over " << sub.size()
                                                                 << " modes gives blocks of more "
                                                                    "than 2^62 cells");
  }
  const auto ncell = static_cast<std::uint64_t>(cells);
  const auto per_block = static_cast<std::uint64_t>(
      std::clamp(std::llround(D * static_cast<double>(ncell)), 1LL,
                 static_cast<long long>(std::min<std::uint64_t>(ncell, 1ull << 62))));
  std::uint64_t mult = (0x9E3779B97F4A7C15ull % ncell) | 1u;
  while (std::gcd(mult, ncell) != 1) mult += 2;
  const auto lo = static_cast<std::uint64_t>(static_cast<u128>(nnz) * rank / P);
  const auto hi = static_cast<std::uint64_t>(static_cast<u128>(nnz) * (rank + 1) / P);
  SparseTensor<T> t(dims);
  const auto n = static_cast<std::int64_t>(hi - lo);
  for (auto& v : t.idx) v.resize(static_cast<std::size_t>(n));
  t.vals.resize(static_cast<std::size_t>(n));
  const int N = static_cast<int>(dims.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const std::uint64_t id = lo + static_cast<std::uint64_t>(k);
    const std::uint64_t blk = id / per_block, j = id % per_block;
    std::uint64_t cell = static_cast<std::uint64_t>(
        (static_cast<u128>(mult) * j + hash_keys(seed, blk, 0xB10Cull) % ncell) % ncell);
    for (int m = N - 1; m >= 0; --m) {
      const auto ms = static_cast<std::size_t>(m);
      const std::uint64_t off = cell % ext[ms];
      cell /= ext[ms];
      const std::uint64_t origin =
          hash_keys(seed, blk, static_cast<std::uint64_t>(m) + 1) % nblk[ms] * ext[ms];
      t.idx[ms][static_cast<std::size_t>(k)] = static_cast<index_t>(origin + off);
    }
    t.vals[static_cast<std::size_t>(k)] =
        static_cast<T>(0.5 + uniform01(hash_keys(seed, id, 0xFA1ull)));
  }
  return t;
}

/// Lengths of the generated inputs' letters: matched letters share the key space
/// nnz^2 / products evenly, free letters get --free-dim or about products / 16 output
/// cells; with blocks of B, lengths are rounded up to multiples of B. Returns the expected
/// products (nnz^2 / key space).
double generated_lengths(const kernels::ContractSpec& spec, const BenchContractArgs& a,
                         std::uint64_t block, std::map<char, std::uint64_t>& len) {
  len.clear();
  const int m = spec.contracted() + spec.batch();
  const double key_space = std::max(1.0, a.nnz * a.nnz / a.products);
  const auto klen = static_cast<std::uint64_t>(
      std::clamp(std::round(std::pow(key_space, 1.0 / std::max(m, 1))), 1.0, 4294967296.0));
  int nfree = 0;
  for (char c : spec.x + spec.y)
    if (spec.x.find(c) == std::string::npos || spec.y.find(c) == std::string::npos) ++nfree;
  const double f =
      a.free_dim > 0 ? a.free_dim
                     : std::round(std::pow(
                           std::max(1.0, a.products / 16.0 / std::pow(double(klen), spec.batch())),
                           1.0 / std::max(nfree, 1)));
  auto flen = static_cast<std::uint64_t>(std::clamp(f, 1.0, 4294967296.0));
  auto klen_b = klen;
  if (block > 1) {  // whole blocks per mode
    flen = std::max<std::uint64_t>(block, (flen + block - 1) / block * block);
    klen_b = std::max<std::uint64_t>(block, (klen + block - 1) / block * block);
  }
  double expected = a.nnz * a.nnz;
  for (char c : spec.x) {
    const bool matched = spec.y.find(c) != std::string::npos;
    len[c] = matched ? klen_b : flen;
    if (matched) expected /= static_cast<double>(klen_b);
  }
  for (char c : spec.y)
    if (!len.count(c)) len[c] = flen;
  return expected;
}

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
  std::vector<Timing> runs;
  const int warm = repeat > 1 ? 1 : 0;
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
  for (int r = 0; r < warm + repeat; ++r) {
    algo::ContractOptions o = base;
    o.print = base.print && r == 0;
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
    if (r < warm) continue;
    Timing tm;
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
    runs.push_back(tm);
  }
  std::sort(runs.begin(), runs.end(),
            [](const Timing& a, const Timing& b) { return a.total < b.total; });
  Timing med = runs[runs.size() / 2];
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
  log::info("bench contract " + spec.text + ": backend " + kernels::to_string(kind) + ", " +
            std::to_string(world.size()) + " rank(s) x " +
            std::to_string(effective_threads(a.run.threads)) + " thread(s), " + a.run.precision +
            ", measured copy bandwidth " + human_bytes(bw) + "/s per rank");

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
  if (cpu_too) {
    auto be = kernels::make_backend<T>(kernels::BackendKind::cpu, a.run.threads);
    rows.push_back(time_backend("cpu", *be, X, Y, spec, a.repeat, world, base, keep));
  }
  if (!a.no_reference && kind != kernels::BackendKind::reference) {
    auto be = kernels::make_backend<T>(kernels::BackendKind::reference);
    rows.push_back(time_backend("reference", *be, X, Y, spec, 1, world, base, keep));
  }

  // Floor: every input nonzero read once, every output nonzero written once (slowest rank's
  // share), over the copy bandwidth.
  const auto ebytes = [](int order) {
    return static_cast<double>(order) * sizeof(index_t) + static_cast<double>(sizeof(T));
  };
  double bytes = static_cast<double>(X.nnz()) * ebytes(X.order()) +
                 (in.same ? 0.0 : static_cast<double>(Y.nnz()) * ebytes(Y.order())) +
                 static_cast<double>(rows[0].out_nnz) / world.size() * ebytes(spec.out_order());
  world.allreduce(&bytes, 1, comm::ReduceOp::max);
  const double floor_s = bytes / bw;
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
  if (log::rank() == 0) {
    std::printf("%-10s %12s %10s %10s %12s %12s %9s %9s %9s %9s %9s %9s %8s\n", "backend",
                "products", "total_s", "kernel_s", "products/s", "out_nnz", "match_s", "count_s",
                "mult_s", "assem_s", "route_s", "merge_s", "speedup");
  }
  for (const Timing& r : rows) {
    const double speedup = r.total / me.total;  // how much faster the benchmarked backend is
    if (log::rank() == 0)
      std::printf(
          "%-10s %12.4g %10.4f %10.4f %12.4g %12lld %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %8.2f\n",
          r.backend.c_str(), static_cast<double>(r.products), r.total, r.kernel(),
          r.kernel() > 0 ? static_cast<double>(r.products) / r.kernel() : 0.0,
          static_cast<long long>(r.out_nnz), r.match, r.count, r.multiply, r.assemble, r.route,
          r.merge, speedup);
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
        human_bytes(bytes).c_str(), human_bytes(bw).c_str(), floor_s, me.kernel() / floor_s,
        me.total / floor_s);
    if (link_s > 0)
      std::printf(
          "host link floor: inputs up at %s/s, output down at %s/s per rank (%s, every rank at "
          "once) = %.4f s; total / host link floor = %.2f\n",
          human_bytes(link.up).c_str(), human_bytes(link.down).c_str(),
          link.locked ? "page-locked" : "staged: page-locking refused", link_s, me.total / link_s);
    std::fflush(stdout);
  }
  if (a.run.json.empty()) return;
  nlohmann::json j = record_envelope("bench contract", nlohmann::json::object(), world,
                                     kernels::to_string(kind), a.run.threads);
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  // One contraction of the benchmarked backend end to end (median run, slowest rank): the
  // kernel (match, count, multiply, assemble), routing and merge.
  j["timing"] =
      timing_record("contraction", me.total, {{"kernel", me.kernel()}, {"comm", me.route}});
  j["einsum"] = spec.text;
  j["precision"] = a.run.precision;
  j["device_options"] = {{"tensor_cores", kernels::to_string(spec.device.tensor_cores)},
                         {"tc_threshold", kernels::resolve_tc_threshold(spec.device)},
                         {"assembly", kernels::to_string(spec.device.assembly)}};
  if (a.block_size > 0) j["blocks"] = {{"size", a.block_size}, {"density", a.block_density}};
  j["inputs"] = {{"x", {{"dims", X.dims}, {"nnz", in.nnz[0]}, {"file", a.x}}},
                 {"y", {{"dims", Y.dims}, {"nnz", in.nnz[1]}, {"file", a.y}}},
                 {"generated", a.generate},
                 {"self_contraction", in.same}};
  if (a.generate) j["expected_products"] = expected_products;
  j["output"] = {{"nnz", me.out_nnz}};
  j["runs"] = runs;
  j["floor"] = {{"bytes", bytes},
                {"seconds", floor_s},
                {"kernel_ratio", me.kernel() / floor_s},
                {"total_ratio", me.total / floor_s}};
  if (link_s > 0)
    j["host_link_floor"] = {{"page_locked", link.locked},
                            {"up_bytes_per_s", link.up},
                            {"down_bytes_per_s", link.down},
                            {"seconds", link_s},
                            {"total_ratio", me.total / link_s}};
  write_json(a.run.json, j, world);
}

/// One configuration of the sweep: median kernel seconds of `repeat` runs (after a warm-up)
/// through the backend's plan and run, the stats of that run and the last output.
template <typename T>
struct SweepRun {
  double kernel = 0;
  kernels::ContractStats stats;
  SparseTensor<T> out;
};

template <typename T>
SweepRun<T> time_direct(kernels::Backend<T>& be, const SparseTensor<T>& x, const SparseTensor<T>& y,
                        const kernels::ContractSpec& spec, int repeat) {
  std::vector<std::pair<double, kernels::ContractStats>> runs;
  SweepRun<T> r;
  const int warm = repeat > 1 ? 1 : 0;
  for (int k = 0; k < warm + repeat; ++k) {
    kernels::ContractStats st;
    auto plan = be.contract_plan(x, y, spec);
    r.out = be.contract(*plan, &st);
    if (k >= warm) runs.emplace_back(st.seconds(), st);
  }
  std::sort(runs.begin(), runs.end(),
            [](const auto& p, const auto& q) { return p.first < q.first; });
  r.kernel = runs[runs.size() / 2].first;
  r.stats = runs[runs.size() / 2].second;
  return r;
}

/// Largest elementwise relative error and the Frobenius relative error of got against the
/// float64 reference; +inf when the coordinates differ.
struct SweepError {
  double max_rel = 0, norm_rel = 0;
  bool same = true;
};
template <typename T>
SweepError sweep_error(const SparseTensor<T>& got, const SparseTensor<double>& want) {
  SweepError e;
  if (got.idx != want.idx) {
    e.same = false;
    e.max_rel = e.norm_rel = std::numeric_limits<double>::infinity();
    return e;
  }
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < want.vals.size(); ++k) {
    const double g = static_cast<double>(got.vals[k]), w = want.vals[k];
    d2 += (g - w) * (g - w);
    w2 += w * w;
    if (w != 0) e.max_rel = std::max(e.max_rel, std::fabs(g - w) / std::fabs(w));
  }
  e.norm_rel = w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
  return e;
}

/// --tc-sweep: blocky inputs of increasing block density; per density the cuda kernel with
/// the tensor cores off, forced on (threshold 0: every block holding a nonzero) in each
/// precision, and at the default threshold. Prints kernel seconds, the crossover density
/// and the errors against the float64 sparse result (docs/sptc.md, "Tensor cores").
template <typename T>
void run_tc_sweep(const BenchContractArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  kernels::ContractSpec spec;
  std::vector<double> densities;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(world.size() == 1,
                        "--tc-sweep runs on one rank (found " << world.size() << ")");
    TESSERA_INPUT_CHECK(a.x.empty(), "--tc-sweep generates its inputs; give no files");
    spec = kernels::parse_contract_spec(a.einsum.empty() ? "ijk,jkl->il" : a.einsum);
    spec.device = device_options(a);
    std::stringstream ss(a.sweep_densities);
    for (std::string item; std::getline(ss, item, ',');) {
      char* end = nullptr;
      const double d = std::strtod(item.c_str(), &end);
      TESSERA_INPUT_CHECK(end != item.c_str() && *end == '\0' && d > 0 && d <= 1,
                          "--sweep-densities: '" << item << "' is not a density in (0, 1]");
      densities.push_back(d);
    }
    TESSERA_INPUT_CHECK(!densities.empty(), "--sweep-densities is empty");
    std::sort(densities.begin(), densities.end());
  });
  auto cx = make_compute<T>(a.run, world);
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(cx.kind == kernels::BackendKind::cuda,
                        "--tc-sweep measures the cuda backend's tensor-core path; use --backend "
                        "cuda");
  });
  kernels::Backend<T>& be = *cx.backend;
  std::unique_ptr<kernels::Backend<double>> be64;
  if constexpr (!std::is_same_v<T, double>)
    be64 = kernels::make_backend<double>(kernels::BackendKind::cuda);
  const std::uint64_t B = a.block_size > 0 ? a.block_size : 16;
  std::map<char, std::uint64_t> len;
  const double expected = generated_lengths(spec, a, B, len);
  const auto n = static_cast<std::uint64_t>(a.nnz);
  const kernels::TensorCorePrecision precs[] = {
      kernels::TensorCorePrecision::fp64, kernels::TensorCorePrecision::tf32,
      kernels::TensorCorePrecision::bf16, kernels::TensorCorePrecision::fp16};
  kernels::ContractSpec off = spec;
  off.device.tensor_cores = kernels::TensorCorePrecision::off;
  kernels::ContractSpec autos = spec;
  if (autos.device.tensor_cores == kernels::TensorCorePrecision::off)
    autos.device.tensor_cores = kernels::TensorCorePrecision::fp64;
  const double auto_thr = kernels::resolve_tc_threshold(autos.device);
  std::printf(
      "tc sweep %s: blocks of %llu per mode, %llu nonzeros per input, ~%.3g products; cuda, "
      "%s; kernel seconds (median of %d); tensor cores off, forced on (threshold 0) per "
      "precision, and auto (threshold %.3g); errors: largest elementwise relative error "
      "against the float64 result with tensor cores off\n",
      spec.text.c_str(), static_cast<unsigned long long>(B), static_cast<unsigned long long>(n),
      expected, a.run.precision.c_str(), a.repeat, auto_thr);
  std::printf("%8s %11s %8s %10s %9s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n", "density",
              "products", "tc_share", "pairs", "off_s", "fp64_s", "speedup", "auto_s", "tf32_s",
              "bf16_s", "fp16_s", "err_fp64", "err_tf32", "err_bf16", "err_fp16");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> speedups;
  for (double d : densities) {
    const SparseTensor<T> X = generate_blocky_share<T>(spec.x, len, n, a.seed, 0, 1, B, d);
    const SparseTensor<T> Y = generate_blocky_share<T>(spec.y, len, n, a.seed + 0x5EED, 0, 1, B, d);
    const SweepRun<T> r_off = time_direct(be, X, Y, off, a.repeat);
    SparseTensor<double> ref;
    if constexpr (std::is_same_v<T, double>) {
      ref = r_off.out;
    } else {
      const auto X64 = X.template cast<double>(), Y64 = Y.template cast<double>();
      auto plan = be64->contract_plan(X64, Y64, off);
      ref = be64->contract(*plan, nullptr);
    }
    SweepRun<T> r[4];
    SweepError err[4];
    for (int p = 0; p < 4; ++p) {
      kernels::ContractSpec sp = spec;
      sp.device.tensor_cores = precs[p];
      sp.device.tc_threshold = 0;
      r[p] = time_direct(be, X, Y, sp, a.repeat);
      err[p] = sweep_error(r[p].out, ref);
    }
    const SweepRun<T> r_auto = time_direct(be, X, Y, autos, a.repeat);
    const double speedup = r[0].kernel > 0 ? r_off.kernel / r[0].kernel : 0.0;
    speedups.push_back(speedup);
    const auto P = r_off.stats.products;
    const double share =
        P > 0 ? 100.0 * static_cast<double>(r[0].stats.tc_products) / static_cast<double>(P) : 0;
    std::printf(
        "%8.3g %11.4g %7.1f%% %10lld %9.4f %9.4f %8.2f %9.4f %9.4f %9.4f %9.4f %9.2g %9.2g "
        "%9.2g %9.2g\n",
        d, static_cast<double>(P), share, static_cast<long long>(r[0].stats.tc_block_pairs),
        r_off.kernel, r[0].kernel, speedup, r_auto.kernel, r[1].kernel, r[2].kernel, r[3].kernel,
        err[0].max_rel, err[1].max_rel, err[2].max_rel, err[3].max_rel);
    std::fflush(stdout);
    nlohmann::json row = {{"density", d},
                          {"products", P},
                          {"output_nnz", r_off.stats.output_nnz},
                          {"off",
                           {{"kernel_seconds", r_off.kernel},
                            {"multiply_seconds", r_off.stats.multiply_seconds},
                            {"path", r_off.stats.path}}},
                          {"auto",
                           {{"kernel_seconds", r_auto.kernel},
                            {"tc_products", r_auto.stats.tc_products},
                            {"path", r_auto.stats.path}}}};
    for (int p = 0; p < 4; ++p)
      row[kernels::to_string(precs[p])] = {{"kernel_seconds", r[p].kernel},
                                           {"multiply_seconds", r[p].stats.multiply_seconds},
                                           {"tc_seconds", r[p].stats.tc_seconds},
                                           {"tc_products", r[p].stats.tc_products},
                                           {"tc_block_pairs", r[p].stats.tc_block_pairs},
                                           {"same_coordinates", err[p].same},
                                           {"max_relative_error", err[p].max_rel},
                                           {"frobenius_relative_error", err[p].norm_rel},
                                           {"path", r[p].stats.path}};
    rows.push_back(row);
  }
  // Crossover: the density where the fp64 tensor-core kernel starts to beat the sparse one
  // (linear interpolation of the speedup between the neighbouring densities).
  double crossover = -1;
  std::string verdict;
  std::size_t k = 0;
  while (k < speedups.size() && speedups[k] < 1.0) ++k;
  if (k == speedups.size()) {
    verdict = "the tensor cores never win up to density " + std::to_string(densities.back()) +
              "; keep them off (threshold > 1) for such inputs";
  } else if (k == 0) {
    crossover = densities[0];
    verdict = "the tensor cores win already at the lowest density; the threshold is at most " +
              std::to_string(densities[0]);
  } else {
    const double d0 = densities[k - 1], d1 = densities[k], s0 = speedups[k - 1], s1 = speedups[k];
    crossover = s1 > s0 ? d0 + (1.0 - s0) * (d1 - d0) / (s1 - s0) : d1;
    verdict = "crossover at block density " + std::to_string(crossover) + " (speedup " +
              std::to_string(s0) + " at " + std::to_string(d0) + ", " + std::to_string(s1) +
              " at " + std::to_string(d1) + ")";
  }
  std::printf("%s\n", verdict.c_str());
  if (crossover > 0)
    std::printf(
        "use it: TESSERA_SPTC_TC_THRESHOLD=%.3g (or --tc-threshold %.3g); the built-in default "
        "is %.3g (kernels::kDefaultTensorCoreThreshold)\n",
        crossover, crossover, kernels::kDefaultTensorCoreThreshold);
  std::fflush(stdout);
  if (a.run.json.empty()) return;
  nlohmann::json j =
      record_envelope("bench contract", nlohmann::json::object(), world, "cuda", a.run.threads);
  j["command"] = "bench contract --tc-sweep";
  j["einsum"] = spec.text;
  j["precision"] = a.run.precision;
  j["block_size"] = B;
  j["nnz"] = n;
  j["expected_products"] = expected;
  j["default_threshold"] = auto_thr;
  j["rows"] = rows;
  j["crossover_density"] = crossover;
  j["verdict"] = verdict;
  write_json(a.run.json, j, world);
}
}  // namespace

void add_bench_contract(CLI::App* bench, Runner& run) {
  auto a = std::make_shared<BenchContractArgs>();
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
  sub->add_option("--tc-threshold", a->tc_threshold,
                  "Block density (nonzeros / 256 of a 16 x 16 block) from which a block runs on "
                  "the tensor cores; 0 forces every block (default: TESSERA_SPTC_TC_THRESHOLD, "
                  "else the built-in value; --tc-sweep measures it)");
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
          run_tc_sweep<T>(*a, world);
        else
          run_bench_contract<T>(*a, world);
      });
    };
  });
  // `bench` takes its benchmark as a positional ("bench mttkrp"); "bench contract" is a
  // subcommand of its own (it takes two files). The positional becomes optional, the bench
  // callback runs as soon as bench is parsed (before this subcommand's, which then replaces
  // the runner), and a final check asks for the positional when no subcommand was given.
  CLI::Option* what = bench->get_option("what");
  what->required(false);
  bench->immediate_callback(true);
  bench->final_callback([bench, what] {
    if (bench->get_subcommands().empty() && what->count() == 0) throw CLI::RequiredError("what");
  });
}

}  // namespace tessera::driver
