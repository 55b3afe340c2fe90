// tessera bench ttmc and bench tucker: TTMc and Tucker-HOOI against the floor of their
// TTMcs (the floor's definition is in cmd_bench.cpp's file comment).
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "algo/cp_als.hpp"
#include "algo/tucker.hpp"
#include "bench.hpp"
#include "kernels/ttmc.hpp"
#include "record.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {
namespace {

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

}  // namespace

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
    double it_s = 0, tt = 0, cm = 0, sv = 0, sp = 0, se = 0, so = 0, sc = 0;
    for (std::size_t i = first; i < res.history.size(); ++i) {
      it_s += res.history[i].seconds;
      tt += res.history[i].ttmc;
      cm += res.history[i].comm;
      sv += res.history[i].svd;
      sp += res.history[i].svd_products;
      se += res.history[i].svd_eig;
      so += res.history[i].svd_orth;
      sc += res.history[i].svd_core;
    }
    const double cnt = static_cast<double>(res.history.size() - first);
    it_s /= cnt, tt /= cnt, cm /= cnt, sv /= cnt, sp /= cnt, se /= cnt, so /= cnt, sc /= cnt;
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
          "svd split (rank 0, s/iter, %s): products %.4g, eigen-solves %.4g, "
          "orthonormalisation %.4g, core %.4g, other %.4g\n",
          res.dense_method.c_str(), sp, se, so, sc, sv - sp - se - so - sc);
      std::fflush(stdout);
    }
    j["svd_split"] = {{"products", sp}, {"eigen", se}, {"orthonormalize", so}, {"core", sc}};
    j["dense_stage"] = res.dense_method;
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

template void run_ttmc_bench<float>(const BenchArgs&, BenchInput<float>&, kernels::Backend<float>&,
                                    const comm::MpiCommunicator&, double, nlohmann::json&);
template void run_ttmc_bench<double>(const BenchArgs&, BenchInput<double>&,
                                     kernels::Backend<double>&, const comm::MpiCommunicator&,
                                     double, nlohmann::json&);
template void run_tucker_bench<float>(const BenchArgs&, BenchInput<float>&, Compute<float>&,
                                      const comm::MpiCommunicator&, double, nlohmann::json&);
template void run_tucker_bench<double>(const BenchArgs&, BenchInput<double>&, Compute<double>&,
                                       const comm::MpiCommunicator&, double, nlohmann::json&);

}  // namespace tessera::driver::bench
