// tessera bench contract: sparse tensor contraction throughput (docs/sptc.md).
//
// Reports the products (pairs of matching nonzeros multiplied) per second, the output
// nonzeros, the time split into matching, counting, multiplication and assembly (the
// slowest rank's kernel) and routing, the ratio to the reference backend (and to the cpu
// backend for other backends), and a floor: bytes that must move (every input nonzero read
// once, every output nonzero written once) over the measured copy bandwidth of the
// backend's memory (the method of cmd_bench.cpp).
//
// Inputs: two files and --einsum, or --generate: uniform random coordinates for the spec
// (default "ijk,jkl->il", a 3-mode x 3-mode contraction), --nnz nonzeros per input and the
// matched letters' lengths chosen so that the expected products are --products:
// E[products] = nnz_X * nnz_Y / (product of the matched lengths). Free letters get
// --free-dim (default: about products / 16 output cells, so each output entry sums ~16
// products).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "algo/contract.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "contract_common.hpp"
#include "kernels/sptc.hpp"
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
  std::string mem_limit;
  LoadOptions load;
  ComputeOptions run;
};

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

/// One timed contraction on a backend: the median run of `repeat` (after a warm-up when
/// repeat > 1), times as the slowest rank's.
struct Timing {
  std::string backend;
  double total = 0;  ///< end to end: routing, kernel, merge
  double match = 0, count = 0, multiply = 0, assemble = 0, route = 0, merge = 0;
  double kernel() const { return match + count + multiply + assemble; }
  std::int64_t products = 0, out_nnz = 0, partial = 0;
  double value_sum = 0, value_sq = 0;  ///< checksums of the output (all ranks)
  std::size_t memory = 0;
  int runs = 0;
};

template <typename T>
Timing time_backend(const std::string& name, kernels::Backend<T>& be, const SparseTensor<T>& x,
                    const SparseTensor<T>& y, const kernels::ContractSpec& spec, int repeat,
                    const comm::Communicator& world, const algo::ContractOptions& base) {
  std::vector<Timing> runs;
  const int warm = repeat > 1 ? 1 : 0;
  for (int r = 0; r < warm + repeat; ++r) {
    algo::ContractOptions o = base;
    o.print = base.print && r == 0;
    world.barrier();
    Timer t;
    algo::ContractResult<T> res;
    try {
      res = algo::contract(x, y, spec, be, world, o);
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
                   0};
    world.allreduce(v, 8, comm::ReduceOp::max);
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
    tm.memory = res.memory.total_bytes;
    double sums[2] = {0, 0};
    for (T val : res.local.vals) {
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
  return med;
}

template <typename T>
void run_bench_contract(const BenchContractArgs& a, const comm::MpiCommunicator& world) {
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
    if (files) {
      contract_check_input_file(a.x, "X");
      contract_check_input_file(a.y, "Y");
    } else {
      TESSERA_INPUT_CHECK(a.nnz >= 1 && a.nnz < 4e9, "--nnz must be in 1 .. 4e9 per input");
      TESSERA_INPUT_CHECK(a.products >= 1 && a.products < 1e15, "--products must be in 1 .. 1e15");
      // Matched letters: key space nnz^2 / products, split evenly.
      const int m = spec.contracted() + spec.batch();
      const double key_space = std::max(1.0, a.nnz * a.nnz / a.products);
      const auto klen = static_cast<std::uint64_t>(
          std::clamp(std::round(std::pow(key_space, 1.0 / std::max(m, 1))), 1.0, 4294967296.0));
      int nfree = 0;
      for (char c : spec.x + spec.y)
        if (spec.x.find(c) == std::string::npos || spec.y.find(c) == std::string::npos) ++nfree;
      // Free letters: about products / 16 output cells unless given.
      const double f =
          a.free_dim > 0
              ? a.free_dim
              : std::round(std::pow(
                    std::max(1.0, a.products / 16.0 / std::pow(double(klen), spec.batch())),
                    1.0 / std::max(nfree, 1)));
      const auto flen = static_cast<std::uint64_t>(std::clamp(f, 1.0, 4294967296.0));
      expected_products = a.nnz * a.nnz;
      for (char c : spec.x) {
        const bool matched = spec.y.find(c) != std::string::npos;
        len[c] = matched ? klen : flen;
        if (matched) expected_products /= static_cast<double>(klen);
      }
      for (char c : spec.y)
        if (!len.count(c)) len[c] = flen;
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
    in.x = generate_share<T>(spec.x, len, n, a.seed, world.rank(), world.size());
    in.y = generate_share<T>(spec.y, len, n, a.seed + 0x5EED, world.rank(), world.size());
    in.nnz[0] = in.nnz[1] = static_cast<nnz_t>(n);
    std::string shape;
    for (const auto& [c, l] : len)
      shape += std::string(shape.empty() ? "" : ", ") + c + "=" + std::to_string(l);
    char line[400];
    std::snprintf(line, sizeof(line),
                  "generated %s: %llu nonzeros per input, uniform coordinates, lengths %s; "
                  "expected products %.4g (nnz^2 / matched key space) in %.2f s",
                  spec.text.c_str(), static_cast<unsigned long long>(n), shape.c_str(),
                  expected_products, t.seconds());
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
  rows.push_back(
      time_backend(kernels::to_string(kind), *cx.backend, X, Y, spec, a.repeat, world, o));
  auto base = o;
  base.print = false;
  const bool cpu_too =
      kind != kernels::BackendKind::cpu && (a.compare_cpu || kind == kernels::BackendKind::cuda);
  if (cpu_too) {
    auto be = kernels::make_backend<T>(kernels::BackendKind::cpu, a.run.threads);
    rows.push_back(time_backend("cpu", *be, X, Y, spec, a.repeat, world, base));
  }
  if (!a.no_reference && kind != kernels::BackendKind::reference) {
    auto be = kernels::make_backend<T>(kernels::BackendKind::reference);
    rows.push_back(time_backend("reference", *be, X, Y, spec, 1, world, base));
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
                    {"products_per_s_kernel", r.kernel() > 0 ? r.products / r.kernel() : 0.0},
                    {"products_per_s_total", r.total > 0 ? r.products / r.total : 0.0},
                    {"output_nnz", r.out_nnz},
                    {"partial_output_entries", r.partial},
                    {"memory_estimate_bytes", r.memory},
                    {"speedup_of_benchmarked_backend", speedup}});
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
    std::printf(
        "floor: %s (inputs read once, output written once, slowest rank) / %s/s = %.4f s; "
        "kernel / floor = %.1f, total / floor = %.1f\n",
        human_bytes(bytes).c_str(), human_bytes(bw).c_str(), floor_s, me.kernel() / floor_s,
        me.total / floor_s);
    std::fflush(stdout);
  }
  nlohmann::json j;
  j["command"] = "bench contract";
  j["machine"] = machine_json(world, kernels::to_string(kind), a.run.threads);
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  j["einsum"] = spec.text;
  j["precision"] = a.run.precision;
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
  sub->add_flag("--compare-cpu", a->compare_cpu,
                "Also time the cpu backend (automatic for --backend cuda)");
  sub->add_flag("--extend-dims", a->extend_dims,
                "Give matched modes of unequal lengths the larger one");
  sub->add_option("--mem-limit,--max-mem", a->mem_limit,
                  "Memory per rank the contraction may use (default: 3/4 of the node's share)");
  add_compute_options(sub, a->run, a->load);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_bench_contract<T>(*a, world); });
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
