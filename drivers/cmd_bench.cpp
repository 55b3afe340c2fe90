// tessera bench mttkrp|cp|ttmc|tucker: time against the memory-bandwidth floor.
//
// Floor of one MTTKRP of mode n on one rank = bytes that must move / measured bandwidth:
//   the stored tensor format read once (TensorHandle::mttkrp_stream_bytes)
// + each factor row the block touches, read once (distinct indices per mode x R x sizeof(T))
// + the output (dims[n] x R x sizeof(T)) written once.
// The "no-reuse" floor instead charges every nonzero a gather of its N-1 factor rows.
// TTMc of mode n likewise: the stored format once, each touched row of the other modes'
// factors once (R_m values each), the semi-sparse output (present rows x prod R_m) once;
// its no-reuse floor charges every nonzero its N-1 factor rows. bench tucker: an
// iteration against the floor of its N TTMcs (the SVD and the collectives are beside it,
// with their shares printed).
// Bandwidth: a large copy in the backend's memory (bytes read + bytes written), best of 5.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_set>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "comm/nccl_communicator.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "kernels/ttmc.hpp"
#include "tensor/synthetic.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct BenchArgs {
  std::string what;  // mttkrp | cp
  LoadOptions load;
  std::string gen_dims, dist = "uniform";
  double gen_nnz = 0, alpha = 1.0;
  int rank = 16, repeat = 5, iters = 5;
  std::string ranks;         ///< Tucker ranks (bench ttmc|tucker); empty: --rank for every mode
  std::string svd = "gram";  ///< bench tucker
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

/// Bytes one TTMc of `mode` must move on this rank: the stored format once, each touched
/// row of the other modes' factors once, the output rows once.
double ttmc_floor_bytes(double stream_bytes, const std::vector<double>& distinct,
                        const std::vector<int>& ranks, int mode, double out_rows,
                        std::size_t value_size) {
  double b = stream_bytes + out_rows * static_cast<double>(kernels::ttmc_output_cols(ranks, mode)) *
                                static_cast<double>(value_size);
  for (std::size_t m = 0; m < distinct.size(); ++m)
    if (static_cast<int>(m) != mode) b += distinct[m] * ranks[m] * static_cast<double>(value_size);
  return b;
}

/// This rank's benchmark input: the prepared handle X (bench mttkrp, and bench cp on a
/// generated tensor with the allreduce strategy; the host block is not kept), or the
/// distributed block d (bench cp otherwise: cp_als prepares it itself).
template <typename T>
struct BenchInput {
  std::vector<std::uint64_t> dims;  ///< global mode lengths
  std::int64_t global_nnz = 0;
  std::optional<partition::Distributed<T>> d;   ///< bench cp from a file, or layer
  std::unique_ptr<kernels::TensorHandle<T>> X;  ///< prepared (or generated) handle
  double prepare_seconds = 0;                   ///< with X: prepare (or generate)
};

/// File input: loaded and distributed, then (bench mttkrp) prepared. --generate with
/// bench mttkrp, or with bench cp and the allreduce strategy: generated by the backend
/// (prepare_synthetic; on the GPU for cuda), rank r of P taking the ids [r nnz / P,
/// (r + 1) nnz / P) of the sampled tensor; repeated coordinates are not merged, so the
/// tensor has exactly --nnz nonzeros. --generate with bench cp and the layer strategy
/// (which needs a grid partition): algo::generate on the host (merges repeats) and
/// partition::distribute, as that cp_als takes a partition::Distributed.
template <typename T>
BenchInput<T> bench_input(const BenchArgs& a, partition::Scheme scheme,
                          const comm::Communicator& world, kernels::Backend<T>& be) {
  BenchInput<T> in;
  const bool handle_kind = a.what == "mttkrp" || a.what == "ttmc";
  const bool on_backend = a.load.path.empty() &&
                          (handle_kind || a.what == "tucker" || scheme == partition::Scheme::nnz);
  if (a.load.path.empty()) {
    TESSERA_INPUT_CHECK(!a.gen_dims.empty() && a.gen_nnz >= 1,
                        "bench needs a FILE or --generate DIMS with --nnz N");
  }
  const auto dist = a.load.path.empty() ? algo::parse_index_dist(a.dist) : algo::IndexDist{};

  if (on_backend) {
    synthetic::Spec spec;
    const auto dims = parse_dims(a.gen_dims);
    TESSERA_INPUT_CHECK(dims.size() >= 1 && dims.size() <= static_cast<std::size_t>(kMaxOrder),
                        "--generate: order must be 1.." << kMaxOrder);
    TESSERA_INPUT_CHECK(a.gen_nnz < 9.2e18, "--nnz " << a.gen_nnz << " is too large");
    spec.order = static_cast<int>(dims.size());
    for (int n = 0; n < spec.order; ++n) spec.dims[n] = dims[static_cast<std::size_t>(n)];
    spec.powerlaw = dist == algo::IndexDist::powerlaw;
    spec.alpha = a.alpha;
    spec.rank = 4;
    spec.seed = 1;
    const auto nnz = static_cast<std::uint64_t>(a.gen_nnz);
    const auto P = static_cast<unsigned __int128>(world.size());
    const auto r = static_cast<unsigned __int128>(world.rank());
    const auto lo = static_cast<std::uint64_t>(nnz * r / P);
    const auto hi = static_cast<std::uint64_t>(nnz * (r + 1) / P);
    Timer t;
    in.X = be.prepare_synthetic(spec, lo, hi - lo);
    be.synchronize();
    in.prepare_seconds = t.seconds();
    in.dims = dims;
    in.global_nnz = static_cast<std::int64_t>(nnz);
    log::info("generated " + format_dims(dims) + " with " + std::to_string(nnz) + " nonzeros (" +
              a.dist + " indices, repeats not merged) on the backend in " +
              std::to_string(in.prepare_seconds) + " s (ids " + std::to_string(lo) + ".." +
              std::to_string(hi) + " on this rank)");
    return in;
  }

  partition::Distributed<T> d;
  if (!a.load.path.empty()) {
    d = load_and_distribute<T>(a.load, scheme, world, nullptr);
  } else {  // bench cp, layer strategy
    log::info(
        "bench cp --generate with --comm-strategy layer: generating on the host "
        "(algo::generate, repeated coordinates merged) and distributing on a grid, as the "
        "layer strategy needs a grid partition (the allreduce strategy generates on the "
        "backend)");
    algo::GenerateOptions o;
    o.dims = parse_dims(a.gen_dims);
    o.nnz = static_cast<std::int64_t>(a.gen_nnz);
    o.structure = algo::Structure::sampled;
    o.dist = dist;
    o.alpha = a.alpha;
    o.rank = 4;
    Timer t;
    auto g = algo::generate(o, world, nullptr);
    log::info("generated " + format_dims(o.dims) + " with " + std::to_string(g.dist.global_nnz) +
              " nonzeros (" + a.dist + " indices) in " + std::to_string(t.seconds()) + " s");
    d = partition::distribute(g.block.template cast<T>(), scheme, {}, world);
  }
  in.dims = d.dist.dims;
  in.global_nnz = static_cast<std::int64_t>(d.dist.global_nnz);
  if (handle_kind) {
    Timer tp;
    in.X = be.prepare(d.block);
    be.synchronize();
    in.prepare_seconds = tp.seconds();
  } else {
    in.d = std::move(d);
  }
  return in;
}

/// Tucker ranks of the benchmark: --ranks, or --rank for every mode.
std::vector<int> bench_ranks(const BenchArgs& a, int N) {
  return algo::parse_ranks(a.ranks.empty() ? std::to_string(a.rank) : a.ranks, N);
}

/// Factor of mode n (dims[n] x R, keyed values) in backend memory.
template <typename T>
kernels::Array<T> bench_factor(kernels::Backend<T>& be, std::uint64_t rows, int R, int n) {
  std::vector<T> h(static_cast<std::size_t>(rows) * static_cast<std::size_t>(R));
  for (std::uint64_t i = 0; i < rows; ++i)
    for (int r = 0; r < R; ++r)
      h[static_cast<std::size_t>(i) * static_cast<std::size_t>(R) + static_cast<std::size_t>(r)] =
          static_cast<T>(algo::initial_factor_value(7, n, i, r));
  auto f = be.allocate(h.size());
  be.upload(h.data(), h.size(), f.data());
  return f;
}

template <typename T>
void run_ttmc_bench(const BenchArgs& a, BenchInput<T>& in, kernels::Backend<T>& be,
                    const comm::MpiCommunicator& world, double bw, nlohmann::json& j) {
  const auto& X = in.X;
  const int N = static_cast<int>(in.dims.size());
  const auto ranks = bench_ranks(a, N);
  j["ranks"] = ranks;
  std::vector<kernels::Array<T>> F;
  std::vector<const T*> fp;
  for (int n = 0; n < N; ++n)
    F.push_back(bench_factor(be, in.dims[static_cast<std::size_t>(n)],
                             ranks[static_cast<std::size_t>(n)], n));
  for (auto& f : F) fp.push_back(f.data());
  std::vector<double> distinct;
  for (std::uint64_t c : X->distinct_rows()) distinct.push_back(static_cast<double>(c));
  log::info("prepare: " + std::to_string(in.prepare_seconds) + " s, stored format " +
            human_bytes(static_cast<double>(X->bytes())) + ", " + X->describe());
  if (log::rank() == 0)
    std::printf("%-6s %10s %10s %8s %12s %10s %12s %12s %8s %12s %8s\n", "mode", "rows", "cols",
                "time_ms", "nnz/s", "GFLOP/s", "bytes", "floor_ms", "ratio", "noreuse_ms", "ratio");
  nlohmann::json modes = nlohmann::json::array();
  double sum_t = 0, sum_floor = 0, sum_nr = 0;
  for (int n = 0; n < N; ++n) {
    const auto rows = be.ttmc_rows(*X, n);
    const std::int64_t C = kernels::ttmc_output_cols(ranks, n);
    auto out = be.allocate(std::max<std::size_t>(rows.size() * static_cast<std::size_t>(C), 1));
    be.ttmc(*X, n, fp, ranks, out.data());  // warm-up (builds the row map)
    be.synchronize();
    std::vector<double> ts;
    for (int k = 0; k < a.repeat; ++k) {
      world.barrier();
      Timer t;
      be.ttmc(*X, n, fp, ranks, out.data());
      be.synchronize();
      double s = t.seconds();
      world.allreduce(&s, 1, comm::ReduceOp::max);
      ts.push_back(s);
    }
    std::sort(ts.begin(), ts.end());
    const double med = ts[ts.size() / 2];
    const double stream = static_cast<double>(X->mttkrp_stream_bytes(n));
    double in_rows = 0;
    for (int m = 0; m < N; ++m)
      if (m != n) in_rows += ranks[static_cast<std::size_t>(m)];
    double bytes =
        ttmc_floor_bytes(stream, distinct, ranks, n, static_cast<double>(rows.size()), sizeof(T));
    double noreuse = stream + static_cast<double>(X->nnz()) * in_rows * sizeof(T) +
                     static_cast<double>(rows.size()) * static_cast<double>(C) * sizeof(T);
    // Multiply-adds: C per nonzero for the Kronecker row, plus the prefix products.
    double flops = 2.0 * static_cast<double>(X->nnz()) * static_cast<double>(C);
    world.allreduce(&bytes, 1, comm::ReduceOp::max);
    world.allreduce(&noreuse, 1, comm::ReduceOp::max);
    world.allreduce(&flops, 1, comm::ReduceOp::sum);
    const double floor_s = bytes / bw, nr_s = noreuse / bw;
    if (log::rank() == 0)
      std::printf("%-6d %10zu %10lld %8.3f %12.3g %10.1f %12s %12.3f %8.2f %12.3f %8.2f\n", n,
                  rows.size(), static_cast<long long>(C), med * 1e3,
                  static_cast<double>(in.global_nnz) / med, flops / med * 1e-9,
                  human_bytes(bytes).c_str(), floor_s * 1e3, med / floor_s, nr_s * 1e3, med / nr_s);
    modes.push_back({{"mode", n},
                     {"rows", rows.size()},
                     {"cols", C},
                     {"median_seconds", med},
                     {"gflops", flops / med * 1e-9},
                     {"bytes", bytes},
                     {"floor_seconds", floor_s},
                     {"ratio_to_floor", med / floor_s},
                     {"noreuse_floor_seconds", nr_s},
                     {"ratio_to_noreuse_floor", med / nr_s}});
    sum_t += med;
    sum_floor += floor_s;
    sum_nr += nr_s;
  }
  if (log::rank() == 0) {
    std::printf("%-6s %10s %10s %8.3f %12s %10s %12s %12.3f %8.2f %12.3f %8.2f\n", "mean", "", "",
                sum_t / N * 1e3, "", "", "", sum_floor / N * 1e3, sum_t / sum_floor,
                sum_nr / N * 1e3, sum_t / sum_nr);
    std::fflush(stdout);
  }
  j["prepare_seconds"] = in.prepare_seconds;
  j["modes"] = modes;
  j["mean_seconds_per_mode"] = sum_t / N;
  j["mean_ratio_to_floor"] = sum_t / sum_floor;
  j["mean_ratio_to_noreuse_floor"] = sum_t / sum_nr;
}

template <typename T>
void run_tucker_bench(const BenchArgs& a, BenchInput<T>& in, Compute<T>& cx,
                      const comm::MpiCommunicator& world, double bw, nlohmann::json& j) {
  const int N = static_cast<int>(in.dims.size());
  algo::TuckerOptions o;
  o.ranks = bench_ranks(a, N);
  o.max_iters = a.iters;
  o.tol = 0;  // run every iteration
  o.svd = algo::parse_svd_method(a.svd);
  o.print_iterations = log::verbosity() >= 2;
  j["ranks"] = o.ranks;
  j["svd"] = a.svd;
  // The floor of an iteration: its N TTMcs (from the handle's counts when generated).
  double bytes = 0;
  std::vector<double> distinct;
  if (in.X) {
    for (std::uint64_t c : in.X->distinct_rows()) distinct.push_back(static_cast<double>(c));
    for (int n = 0; n < N; ++n)
      bytes += ttmc_floor_bytes(static_cast<double>(in.X->mttkrp_stream_bytes(n)), distinct,
                                o.ranks, n, distinct[static_cast<std::size_t>(n)], sizeof(T));
    log::info(
        "fit of the generated tensor: ||X||^2 sums the squares of the stored entries, so it "
        "is approximate where coordinates repeat (often with --dist powerlaw)");
  }
  try {
    auto res = in.X ? algo::tucker_hooi<T>(std::move(in.X), in.dims, *cx.backend, world, o, cx.data)
                    : algo::tucker_hooi<T>(*in.d, *cx.backend, world, o, cx.data);
    if (in.d.has_value()) {
      // File input: the block's distinct indices per mode are its TTMc rows.
      const auto& blk = in.d->block;
      const double stream = static_cast<double>(blk.nnz()) * (N * sizeof(index_t) + sizeof(T));
      for (int n = 0; n < N; ++n) {
        const double rows = static_cast<double>(res.memory.ttmc_rows[static_cast<std::size_t>(n)]);
        std::vector<double> dr;
        for (int m = 0; m < N; ++m)
          dr.push_back(static_cast<double>(res.memory.ttmc_rows[static_cast<std::size_t>(m)]));
        bytes += ttmc_floor_bytes(stream, dr, o.ranks, n, rows, sizeof(T));
      }
    }
    world.allreduce(&bytes, 1, comm::ReduceOp::max);
    const std::size_t first = res.history.size() > 1 ? 1 : 0;
    double it_s = 0, tt = 0, cm = 0, sv = 0, sp = 0, se = 0, so = 0;
    for (std::size_t i = first; i < res.history.size(); ++i) {
      it_s += res.history[i].seconds;
      tt += res.history[i].ttmc;
      cm += res.history[i].comm;
      sv += res.history[i].svd;
      sp += res.history[i].svd_products;
      se += res.history[i].svd_eig;
      so += res.history[i].svd_orth;
    }
    const double cnt = static_cast<double>(res.history.size() - first);
    it_s /= cnt, tt /= cnt, cm /= cnt, sv /= cnt, sp /= cnt, se /= cnt, so /= cnt;
    double max_it = it_s;
    world.allreduce(&max_it, 1, comm::ReduceOp::max);
    const double floor_s = bytes / bw;
    if (log::rank() == 0) {
      std::printf("%-10s %12s %10s %10s %10s %12s %10s %8s %10s\n", "iteration", "seconds", "ttmc%",
                  "comm%", "svd%", "bytes", "floor_s", "ratio", "fit");
      std::printf("%-10s %12.4g %10.1f %10.1f %10.1f %12s %10.4g %8.2f %10.6f\n", "mean", max_it,
                  100 * tt / it_s, 100 * cm / it_s, 100 * sv / it_s, human_bytes(bytes).c_str(),
                  floor_s, max_it / floor_s, res.fit);
      std::printf(
          "svd split (rank 0, s/iter): products %.4g, eigen-solves %.4g, "
          "orthonormalisation %.4g, other %.4g\n",
          sp, se, so, sv - sp - se - so);
      std::fflush(stdout);
    }
    j["svd_split"] = {{"products", sp}, {"eigen", se}, {"orthonormalize", so}};
    j["iterations"] = res.iterations;
    j["seconds_per_iteration"] = max_it;
    j["share"] = {{"ttmc", tt / it_s}, {"comm", cm / it_s}, {"svd", sv / it_s}};
    j["seconds"] = {{"ttmc", tt}, {"comm", cm}, {"svd", sv}};
    j["bytes_per_iteration"] = bytes;
    j["floor_seconds"] = floor_s;
    j["ratio_to_floor"] = max_it / floor_s;
    j["fit"] = res.fit;
    j["prepare_seconds"] = in.prepare_seconds;
  } catch (const InputError& e) {
    throw CollectiveError(e.what());  // decided from shared data: every rank throws it
  }
}

template <typename T>
void run_bench(const BenchArgs& a, const comm::MpiCommunicator& world) {
  const auto strategy = algo::parse_comm_strategy(a.run.strategy);
  const auto scheme =
      strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto cx = make_compute<T>(a.run, world);
  const auto kind = cx.kind;
  auto& be = cx.backend;
  auto in = bench_input<T>(a, scheme, world, *be);
  const int N = static_cast<int>(in.dims.size());
  const int R = a.rank;
  const double bw = measure_bandwidth(*be, a.run.threads);
  nlohmann::json j;
  j["command"] = "bench " + a.what;
  j["machine"] = machine_json(world, kernels::to_string(kind), a.run.threads);
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  j["tensor"] = {{"dims", in.dims}, {"nnz", in.global_nnz}};
  j["rank"] = R;
  j["precision"] = a.run.precision;
  log::info("bench " + a.what + ": backend " + kernels::to_string(kind) + ", " +
            std::to_string(world.size()) + " rank(s) x " +
            std::to_string(effective_threads(a.run.threads)) + " thread(s), " + a.run.precision +
            ", R = " + std::to_string(R) + ", measured copy bandwidth " + human_bytes(bw) +
            "/s per rank");

  if (a.what == "mttkrp") {
    const auto& X = in.X;
    const double prep = in.prepare_seconds;
    std::vector<kernels::Array<T>> F(static_cast<std::size_t>(N));
    std::vector<const T*> fp(static_cast<std::size_t>(N));
    std::int64_t max_rows = 1;
    for (int n = 0; n < N; ++n) {
      const auto rows = static_cast<std::int64_t>(in.dims[static_cast<std::size_t>(n)]);
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
    std::vector<double> distinct;
    for (std::uint64_t c : X->distinct_rows()) distinct.push_back(static_cast<double>(c));
    log::info("prepare: " + std::to_string(prep) + " s, stored format " +
              human_bytes(static_cast<double>(X->bytes())) + ", " + X->describe());
    if (log::rank() == 0)
      std::printf("%-6s %10s %12s %12s %12s %8s %12s %8s\n", "mode", "time_ms", "nnz/s", "bytes",
                  "floor_ms", "ratio", "noreuse_ms", "ratio");
    nlohmann::json modes = nlohmann::json::array();
    double sum_t = 0, sum_floor = 0, sum_noreuse = 0;
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
          static_cast<double>(in.dims[static_cast<std::size_t>(n)]) * R * sizeof(T);
      const double stream = static_cast<double>(X->mttkrp_stream_bytes(n));
      double bytes = mttkrp_floor_bytes(stream, distinct, in.dims, n, R, sizeof(T));
      double noreuse = stream + static_cast<double>(X->nnz()) * (N - 1) * R * sizeof(T) + out_bytes;
      // The slowest rank sets the time; compare with the largest per-rank floor.
      world.allreduce(&bytes, 1, comm::ReduceOp::max);
      world.allreduce(&noreuse, 1, comm::ReduceOp::max);
      const double floor_s = bytes / bw, nr_s = noreuse / bw;
      const double nnzps = static_cast<double>(in.global_nnz) / med;
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
      sum_noreuse += nr_s;
    }
    if (log::rank() == 0) {
      std::printf("%-6s %10.3f %12s %12s %12.3f %8.2f %12.3f %8.2f\n", "mean", sum_t / N * 1e3, "",
                  "", sum_floor / N * 1e3, sum_t / sum_floor, sum_noreuse / N * 1e3,
                  sum_t / sum_noreuse);
      std::fflush(stdout);
    }
    j["prepare_seconds"] = prep;
    j["modes"] = modes;
    j["mean_seconds_per_mode"] = sum_t / N;
    j["mean_ratio_to_floor"] = sum_t / sum_floor;
    j["mean_ratio_to_noreuse_floor"] = sum_t / sum_noreuse;
  } else if (a.what == "ttmc") {
    run_ttmc_bench<T>(a, in, *be, world, bw, j);
  } else if (a.what == "tucker") {
    run_tucker_bench<T>(a, in, cx, world, bw, j);
  } else {
    algo::CpOptions o;
    o.rank = R;
    o.max_iters = a.iters;
    o.tol = 0;  // run every iteration
    o.strategy = strategy;
    o.print_iterations = log::verbosity() >= 2;
    o.count_distinct_rows = true;  // for the floor
    // A generated tensor (allreduce) runs on its backend handle; otherwise cp_als
    // prepares the distributed block.
    if (in.X)
      log::info(
          "fit of the generated tensor: ||X||^2 sums the squares of the stored entries, so it "
          "is approximate where coordinates repeat (often with --dist powerlaw): the MTTKRP "
          "sums repeats, ||X|| does not merge them");
    auto res = in.X ? algo::cp_als<T>(*in.X, in.dims, in.global_nnz, *be, world, *cx.data, o)
                    : algo::cp_als<T>(*in.d, *be, world, *cx.data, o);
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
    const double nnzps = static_cast<double>(in.global_nnz) * N / std::max(max_it, 1e-12);
    // Memory floor of an iteration: the N MTTKRPs' bytes (the dense R x R work and the
    // collectives are not in it; their share is printed beside).
    const std::vector<double> distinct(res.distinct_rows.begin(), res.distinct_rows.end());
    double bytes = 0;
    for (int n = 0; n < N; ++n)
      bytes += mttkrp_floor_bytes(res.mttkrp_stream_bytes[static_cast<std::size_t>(n)], distinct,
                                  res.rows_held, n, R, sizeof(T));
    world.allreduce(&bytes, 1, comm::ReduceOp::max);
    const double floor_s = bytes / bw;
    if (log::rank() == 0) {
      std::printf("%-10s %12s %10s %10s %10s %12s %12s %10s %8s %10s\n", "iteration", "seconds",
                  "kernel%", "comm%", "solve%", "nnz*N/s", "bytes", "floor_s", "ratio", "fit");
      std::printf("%-10s %12.4g %10.1f %10.1f %10.1f %12.3g %12s %10.4g %8.2f %10.6f\n", "mean",
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
    if (in.X) {
      j["tensor"]["generated_on_backend"] = true;
      j["prepare_seconds"] = in.prepare_seconds;
    }
  }
  write_json(a.run.json, j, world);
}

}  // namespace

void add_bench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Benchmarks: time next to the memory-bandwidth floor");
  sub->add_option("what", a->what, "mttkrp | cp | ttmc | tucker")
      ->required()
      ->check(CLI::IsMember({"mttkrp", "cp", "ttmc", "tucker"}));
  sub->add_option("file", a->load.path, "Tensor file (or use --generate)");
  sub->add_option("--generate", a->gen_dims,
                  "Generate a tensor of these dims instead (e.g. 12092x9184x28818)");
  sub->add_option("--nnz", a->gen_nnz, "Nonzeros of the generated tensor");
  sub->add_option("--dist", a->dist, "uniform | powerlaw")
      ->check(CLI::IsMember({"uniform", "powerlaw"}));
  sub->add_option("--alpha", a->alpha,
                  "Power-law exponent (--dist powerlaw): P(index = i) ~ (i + 1)^-alpha")
      ->check(CLI::Range(0.05, 100.0));
  sub->add_option("-r,--rank", a->rank, "CP rank R")->check(CLI::Range(1, 4096));
  sub->add_option("--repeat", a->repeat, "Timed repetitions per mode (median reported)")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--iters", a->iters, "Iterations (bench cp, bench tucker)")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--ranks", a->ranks,
                  "Tucker ranks per mode (bench ttmc|tucker), e.g. 16,16,16; default --rank");
  sub->add_option("--svd", a->svd,
                  "Tucker factor update (bench tucker): gram | subspace | scalapack");
  add_compute_options(sub, a->run, a->load);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_bench<T>(*a, world); });
    };
  });
  add_bench_contract(sub, run);  // `bench contract` (cmd_bench_contract.cpp)
}

}  // namespace tessera::driver
