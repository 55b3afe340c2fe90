// tessera bench mttkrp|cp: time against the memory-bandwidth floor.
//
// Floor of one MTTKRP of mode n on one rank = bytes that must move / measured bandwidth:
//   the stored tensor format read once (TensorHandle::mttkrp_stream_bytes)
// + each factor row the block touches, read once (distinct indices per mode x R x sizeof(T))
// + the output (dims[n] x R x sizeof(T)) written once.
// The "no-reuse" floor instead charges every nonzero a gather of its N-1 factor rows.
// Bandwidth: a large copy in the backend's memory (bytes read + bytes written), best of 5.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "comm/nccl_communicator.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct BenchArgs {
  std::string what;  // mttkrp | cp
  LoadOptions load;
  std::string gen_dims, dist = "uniform";
  double gen_nnz = 0, alpha = 2.0;
  int rank = 16, repeat = 5, iters = 5;
  ComputeOptions run;
};

/// Copy bandwidth of the backend's memory in bytes/s (read + write), best of 5.
template <typename T>
double measure_bandwidth(kernels::Backend<T>& be, int threads) {
  const std::size_t bytes = be.memory_space() == comm::MemorySpace::host ? (std::size_t(512) << 20)
                                                                         : (std::size_t(2) << 30);
  const std::size_t n = bytes / sizeof(T);
  auto a = be.allocate(n), b = be.allocate(n);
  be.fill(a.data(), n, T(1));
  be.fill(b.data(), n, T(0));
  be.synchronize();
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    Timer t;
    if (be.memory_space() == comm::MemorySpace::host) {
      // All of the rank's threads, as the kernels use them.
      const T* src = a.data();
      T* dst = b.data();
#pragma omp parallel for schedule(static) num_threads(effective_threads(threads))
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) dst[i] = src[i];
    } else {
      be.copy(a.data(), n, b.data());
      be.synchronize();
    }
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(n * sizeof(T)) / best;
}

/// Distinct indices per mode in this rank's block: the factor rows an MTTKRP must read.
template <typename T>
std::vector<double> distinct_rows(const SparseTensor<T>& x) {
  std::vector<double> out(static_cast<std::size_t>(x.order()));
  for (int n = 0; n < x.order(); ++n) {
    std::vector<char> seen(x.dims[static_cast<std::size_t>(n)], 0);
    double c = 0;
    for (index_t i : x.idx[static_cast<std::size_t>(n)])
      if (!seen[i]) {
        seen[i] = 1;
        c += 1;
      }
    out[static_cast<std::size_t>(n)] = c;
  }
  return out;
}

/// Bytes one MTTKRP of `mode` must move on this rank (see the file comment): the stored
/// format once, each touched factor row of the other modes once, the output once.
double mttkrp_floor_bytes(double stream_bytes, const std::vector<double>& distinct,
                          const std::vector<std::uint64_t>& dims, int mode, int R,
                          std::size_t value_size) {
  double b =
      stream_bytes + static_cast<double>(dims[static_cast<std::size_t>(mode)]) * R * value_size;
  for (std::size_t m = 0; m < distinct.size(); ++m)
    if (static_cast<int>(m) != mode) b += distinct[m] * R * value_size;
  return b;
}

template <typename T>
partition::Distributed<T> bench_input(const BenchArgs& a, partition::Scheme scheme,
                                      const comm::Communicator& world) {
  if (!a.load.path.empty()) return load_and_distribute<T>(a.load, scheme, world, nullptr);
  TESSERA_INPUT_CHECK(!a.gen_dims.empty() && a.gen_nnz >= 1,
                      "bench needs a FILE or --generate DIMS with --nnz N");
  algo::GenerateOptions o;
  o.dims = parse_dims(a.gen_dims);
  o.nnz = static_cast<std::int64_t>(a.gen_nnz);
  o.structure = algo::Structure::sampled;
  o.dist = algo::parse_index_dist(a.dist);
  o.alpha = a.alpha;
  o.rank = 4;
  Timer t;
  auto g = algo::generate(o, world, nullptr);
  log::info("generated " + format_dims(o.dims) + " with " + std::to_string(g.dist.global_nnz) +
            " nonzeros (" + a.dist + " indices) in " + std::to_string(t.seconds()) + " s");
  if (scheme == partition::Scheme::nnz) {
    if constexpr (std::is_same_v<T, double>) return g;
    partition::Distributed<T> d{g.block.template cast<T>(), g.dist};
    return d;
  }
  return partition::distribute(g.block.template cast<T>(), scheme, {}, world);
}

template <typename T>
void run_bench(const BenchArgs& a, const comm::MpiCommunicator& world) {
  const auto strategy = algo::parse_comm_strategy(a.run.strategy);
  const auto scheme =
      strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto cx = make_compute<T>(a.run, world);
  const auto kind = cx.kind;
  auto& be = cx.backend;
  auto d = bench_input<T>(a, scheme, world);
  const int N = d.block.order();
  const int R = a.rank;
  const double bw = measure_bandwidth(*be, a.run.threads);
  nlohmann::json j;
  j["command"] = "bench " + a.what;
  j["machine"] = machine_json(world, kernels::to_string(kind), a.run.threads);
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  j["tensor"] = {{"dims", d.dist.dims}, {"nnz", d.dist.global_nnz}};
  j["rank"] = R;
  j["precision"] = a.run.precision;
  log::info("bench " + a.what + ": backend " + kernels::to_string(kind) + ", " +
            std::to_string(world.size()) + " rank(s) x " +
            std::to_string(effective_threads(a.run.threads)) + " thread(s), " + a.run.precision +
            ", R = " + std::to_string(R) + ", measured copy bandwidth " + human_bytes(bw) +
            "/s per rank");

  if (a.what == "mttkrp") {
    Timer tp;
    auto X = be->prepare(d.block);
    be->synchronize();
    const double prep = tp.seconds();
    std::vector<kernels::Array<T>> F(static_cast<std::size_t>(N));
    std::vector<const T*> fp(static_cast<std::size_t>(N));
    std::int64_t max_rows = 1;
    for (int n = 0; n < N; ++n) {
      const auto rows = static_cast<std::int64_t>(d.dist.dims[static_cast<std::size_t>(n)]);
      std::vector<T> h(static_cast<std::size_t>(rows * R));
      for (std::int64_t i = 0; i < rows; ++i)
        for (int r = 0; r < R; ++r)
          h[static_cast<std::size_t>(i * R + r)] =
              static_cast<T>(algo::initial_factor_value(7, n, static_cast<std::uint64_t>(i), r));
      F[static_cast<std::size_t>(n)] = be->allocate(h.size());
      be->upload(h.data(), h.size(), F[static_cast<std::size_t>(n)].data());
      fp[static_cast<std::size_t>(n)] = F[static_cast<std::size_t>(n)].data();
      max_rows = std::max(max_rows, rows);
    }
    auto out = be->allocate(static_cast<std::size_t>(max_rows * R));
    const auto distinct = distinct_rows(d.block);
    log::info("prepare: " + std::to_string(prep) + " s, stored format " +
              human_bytes(static_cast<double>(X->bytes())));
    if (log::rank() == 0)
      std::printf("%-6s %10s %12s %12s %12s %8s %12s %8s\n", "mode", "time_ms", "nnz/s", "bytes",
                  "floor_ms", "ratio", "noreuse_ms", "ratio");
    nlohmann::json modes = nlohmann::json::array();
    double sum_t = 0, sum_floor = 0;
    for (int n = 0; n < N; ++n) {
      be->mttkrp(*X, n, fp, R, out.data());  // warm-up
      be->synchronize();
      std::vector<double> ts;
      for (int k = 0; k < a.repeat; ++k) {
        world.barrier();
        Timer t;
        be->mttkrp(*X, n, fp, R, out.data());
        be->synchronize();
        double s = t.seconds();
        world.allreduce(&s, 1, comm::ReduceOp::max);  // slowest rank
        ts.push_back(s);
      }
      std::sort(ts.begin(), ts.end());
      const double med = ts[ts.size() / 2];
      const double out_bytes =
          static_cast<double>(d.dist.dims[static_cast<std::size_t>(n)]) * R * sizeof(T);
      const double stream = static_cast<double>(X->mttkrp_stream_bytes(n));
      double bytes = mttkrp_floor_bytes(stream, distinct, d.dist.dims, n, R, sizeof(T));
      double noreuse =
          stream + static_cast<double>(d.block.nnz()) * (N - 1) * R * sizeof(T) + out_bytes;
      // The slowest rank sets the time; compare with the largest per-rank floor.
      world.allreduce(&bytes, 1, comm::ReduceOp::max);
      world.allreduce(&noreuse, 1, comm::ReduceOp::max);
      const double floor_s = bytes / bw, nr_s = noreuse / bw;
      const double nnzps = static_cast<double>(d.dist.global_nnz) / med;
      if (log::rank() == 0)
        std::printf("%-6d %10.3f %12.3g %12s %12.3f %8.2f %12.3f %8.2f\n", n, med * 1e3, nnzps,
                    human_bytes(bytes).c_str(), floor_s * 1e3, med / floor_s, nr_s * 1e3,
                    med / nr_s);
      modes.push_back({{"mode", n},
                       {"median_seconds", med},
                       {"nnz_per_s", nnzps},
                       {"bytes", bytes},
                       {"floor_seconds", floor_s},
                       {"ratio_to_floor", med / floor_s},
                       {"noreuse_floor_seconds", nr_s},
                       {"ratio_to_noreuse_floor", med / nr_s}});
      sum_t += med;
      sum_floor += floor_s;
    }
    if (log::rank() == 0) {
      std::printf("%-6s %10.3f %12s %12s %12.3f %8.2f\n", "mean", sum_t / N * 1e3, "", "",
                  sum_floor / N * 1e3, sum_t / sum_floor);
      std::fflush(stdout);
    }
    j["prepare_seconds"] = prep;
    j["modes"] = modes;
    j["mean_seconds_per_mode"] = sum_t / N;
    j["mean_ratio_to_floor"] = sum_t / sum_floor;
  } else {
    algo::CpOptions o;
    o.rank = R;
    o.max_iters = a.iters;
    o.tol = 0;  // run every iteration
    o.strategy = strategy;
    o.print_iterations = log::verbosity() >= 2;
    auto res = algo::cp_als<T>(d, *be, world, *cx.data, o);
    // Skip the first iteration (2-norm normalisation, first touches) when there are more.
    const std::size_t first = res.history.size() > 1 ? 1 : 0;
    double it_s = 0, k = 0, c = 0, s = 0;
    for (std::size_t i = first; i < res.history.size(); ++i) {
      it_s += res.history[i].seconds;
      k += res.history[i].kernel;
      c += res.history[i].comm;
      s += res.history[i].solve;
    }
    const double cnt = static_cast<double>(res.history.size() - first);
    it_s /= cnt;
    k /= cnt;
    c /= cnt;
    s /= cnt;
    double max_it = it_s;
    world.allreduce(&max_it, 1, comm::ReduceOp::max);
    const double nnzps = static_cast<double>(d.dist.global_nnz) * N / std::max(max_it, 1e-12);
    // Memory floor of an iteration: the N MTTKRPs' bytes (the dense R x R work and the
    // collectives are not in it; their share is printed beside).
    const auto distinct = distinct_rows(d.block);
    double bytes = 0;
    for (int n = 0; n < N; ++n)
      bytes += mttkrp_floor_bytes(res.mttkrp_stream_bytes[static_cast<std::size_t>(n)], distinct,
                                  res.rows_held, n, R, sizeof(T));
    world.allreduce(&bytes, 1, comm::ReduceOp::max);
    const double floor_s = bytes / bw;
    if (log::rank() == 0) {
      std::printf("%-10s %12s %10s %10s %10s %12s %12s %10s %8s %10s\n", "iteration", "seconds",
                  "kernel%", "comm%", "solve%", "nnz*N/s", "bytes", "floor_s", "ratio", "fit");
      std::printf("%-10s %12.4f %10.1f %10.1f %10.1f %12.3g %12s %10.4f %8.2f %10.6f\n", "mean",
                  max_it, 100 * k / it_s, 100 * c / it_s, 100 * s / it_s, nnzps,
                  human_bytes(bytes).c_str(), floor_s, max_it / floor_s, res.fit);
      std::fflush(stdout);
    }
    if (res.tier > 1) {
      // Tier 2: the iteration against the larger of its copy and compute times.
      const double it_n = static_cast<double>(res.iterations);
      const double copy = res.stream_copy_seconds / it_n,
                   compute = res.stream_compute_seconds / it_n;
      if (log::rank() == 0)
        std::printf(
            "tier 2 (rank 0): copy %.4f s/iter, compute %.4f s/iter, overlap %.0f%%, "
            "iteration / max(copy, compute) = %.2f\n",
            copy, compute, 100 * res.stream_overlap, it_s / std::max(copy, compute));
      j["tier2"] = {{"copy_seconds_per_iteration", copy},
                    {"compute_seconds_per_iteration", compute},
                    {"overlap_fraction", res.stream_overlap},
                    {"ratio_to_max_copy_compute", it_s / std::max(copy, compute)}};
    }
    j["memory_tier"] = res.tier;
    j["bytes_per_iteration"] = bytes;
    j["floor_seconds"] = floor_s;
    j["ratio_to_floor"] = max_it / floor_s;
    j["iterations"] = res.iterations;
    j["seconds_per_iteration"] = max_it;
    j["share"] = {{"kernel", k / it_s}, {"comm", c / it_s}, {"solve", s / it_s}};
    j["fit"] = res.fit;
    j["strategy"] = a.run.strategy;
  }
  write_json(a.run.json, j, world);
}

}  // namespace

void add_bench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Benchmarks: time next to the memory-bandwidth floor");
  sub->add_option("what", a->what, "mttkrp | cp")
      ->required()
      ->check(CLI::IsMember({"mttkrp", "cp"}));
  sub->add_option("file", a->load.path, "Tensor file (or use --generate)");
  sub->add_option("--generate", a->gen_dims,
                  "Generate a tensor of these dims instead (e.g. 12092x9184x28818)");
  sub->add_option("--nnz", a->gen_nnz, "Nonzeros of the generated tensor");
  sub->add_option("--dist", a->dist, "uniform | powerlaw")
      ->check(CLI::IsMember({"uniform", "powerlaw"}));
  sub->add_option("--alpha", a->alpha, "Power-law exponent")->check(CLI::Range(1.0, 100.0));
  sub->add_option("-r,--rank", a->rank, "CP rank R")->check(CLI::Range(1, 4096));
  sub->add_option("--repeat", a->repeat, "Timed repetitions per mode (median reported)")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--iters", a->iters, "CP-ALS iterations (bench cp)")->check(CLI::Range(1, 10000));
  add_compute_options(sub, a->run, a->load);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_bench<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
