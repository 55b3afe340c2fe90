// tessera bench ttmc: every mode's TTMc against its floor.
//
// TTMc of mode n on one rank moves the stored format once, each touched row of the other
// modes' factors once (R_m values each), the semi-sparse output (present rows x prod R_m)
// once; its no-reuse floor charges every nonzero its N-1 factor rows (mttkrp.cpp has the
// MTTKRP's).
#include "kernels/ttmc.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "algo/tucker.hpp"
#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "kernels/ops/ttmc.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {

double ttmc_floor_bytes(double stream_bytes, const std::vector<double>& distinct,
                        const std::vector<int>& ranks, int mode, double out_rows,
                        std::size_t value_size) {
  double b = stream_bytes + out_rows * static_cast<double>(kernels::ttmc_output_cols(ranks, mode)) *
                                static_cast<double>(value_size);
  for (std::size_t m = 0; m < distinct.size(); ++m)
    if (static_cast<int>(m) != mode) b += distinct[m] * ranks[m] * static_cast<double>(value_size);
  return b;
}

std::vector<int> bench_ranks(const BenchArgs& a, int N) {
  return algo::parse_ranks(a.ranks.empty() ? std::to_string(a.rank) : a.ranks, N);
}

/// --gather-precision fp16 | bf16 (float): each mode's TTMc with the 16-bit gathers against
/// the same with float gathers (relative Frobenius error over every output row), printed and
/// in the record ("gather_relative_error", one per mode).
template <typename T>
void ttmc_gather_error(Context<T>& c, const std::vector<const T*>& fp,
                       const std::vector<int>& ranks) {
  auto& be = *c.cx.backend;
  const kernels::Tuning low = be.tuning();
  if (low.gather_precision == kernels::GatherPrecision::full || !std::is_same_v<T, float>) return;
  kernels::Tuning full = low;
  full.gather_precision = kernels::GatherPrecision::full;
  const auto& X = *c.in.X;
  const int N = static_cast<int>(c.in.dims.size());
  std::vector<double> errors;
  for (int n = 0; n < N; ++n) {
    const std::size_t len = kernels::ops::ttmc_rows(be, X, n).size() *
                            static_cast<std::size_t>(kernels::ttmc_output_cols(ranks, n));
    kernels::Array<T> out = be.allocate(std::max<std::size_t>(len, 1));
    std::vector<T> a(len), b(len);
    kernels::ops::ttmc(be, X, n, fp, ranks, out.data());
    be.download(out.data(), len, a.data());
    be.set_tuning(full);
    kernels::ops::ttmc(be, X, n, fp, ranks, out.data());
    be.download(out.data(), len, b.data());
    be.set_tuning(low);
    double sums[2] = {0, 0};  // |a - b|^2, |b|^2
    for (std::size_t k = 0; k < len; ++k) {
      const double d = static_cast<double>(a[k]) - static_cast<double>(b[k]);
      sums[0] += d * d;
      sums[1] += static_cast<double>(b[k]) * static_cast<double>(b[k]);
    }
    c.world.allreduce(sums, 2);
    errors.push_back(sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : 0.0);
  }
  const std::string name(kernels::name_of(low.gather_precision));
  c.j["gather_precision"] = name;
  c.j["gather_relative_error"] = errors;
  if (log::rank() == 0) {
    std::printf("--gather-precision %s: relative error against float gathers, per mode:",
                name.c_str());
    for (double e : errors) std::printf(" %.3g", e);
    std::printf("\n");
  }
}

template <typename T>
void bench_ttmc(Context<T>& c) {
  const auto& X = *c.in.X;
  auto& be = *c.cx.backend;
  const int N = static_cast<int>(c.in.dims.size());
  const auto ranks = bench_ranks(c.a, N);
  c.j["ranks"] = ranks;
  std::vector<kernels::Array<T>> F;
  std::vector<const T*> fp;
  for (int n = 0; n < N; ++n)
    F.push_back(bench_factor(be, c.in.dims[static_cast<std::size_t>(n)],
                             ranks[static_cast<std::size_t>(n)], n));
  for (auto& f : F) fp.push_back(f.data());
  const std::vector<double> distinct = distinct_rows(X);
  log::info("prepare: " + std::to_string(c.in.prepare_seconds) + " s, stored format " +
            human_bytes(static_cast<double>(X.bytes())) + ", " + X.describe());
  const double nnz = static_cast<double>(c.in.global_nnz);
  // The mode being timed: its output rows and columns, the output array.
  std::vector<index_t> rows;
  std::int64_t C = 0;
  kernels::Array<T> out;
  PerModeOp op;
  op.columns = {{"mode", 6, true}, {"rows", 10},       {"cols", 10},  {"time_ms", 8},
                {"nnz/s", 12},     {"GFLOP/s", 10},    {"bytes", 12}, {"floor_ms", 12},
                {"ratio", 8},      {"noreuse_ms", 12}, {"ratio", 8}};
  op.begin = [&](int n) {
    out = kernels::Array<T>();  // the previous mode's output freed first
    rows = kernels::ops::ttmc_rows(be, X, n);
    C = kernels::ttmc_output_cols(ranks, n);
    out = be.allocate(std::max<std::size_t>(rows.size() * static_cast<std::size_t>(C), 1));
  };
  op.step = [&](int n) {
    kernels::ops::ttmc(be, X, n, fp, ranks, out.data());
  };  // warm-up builds the row map
  op.sync = [&] { be.synchronize(); };
  op.bytes = [&](int n) {
    const double stream = static_cast<double>(X.mttkrp_stream_bytes(n));
    double in_rows = 0;
    for (int m = 0; m < N; ++m)
      if (m != n) in_rows += ranks[static_cast<std::size_t>(m)];
    return std::pair{
        ttmc_floor_bytes(stream, distinct, ranks, n, static_cast<double>(rows.size()), sizeof(T)),
        stream + static_cast<double>(X.nnz()) * in_rows * sizeof(T) +
            static_cast<double>(rows.size()) * static_cast<double>(C) * sizeof(T)};
  };
  op.row = [&](const ModeResult& r, nlohmann::json& rec) {
    // Multiply-adds: C per nonzero for the Kronecker row. The prefix products of orders above
    // 3 (the Kronecker row of all input modes but the last) are not counted: a lower bound.
    const double flops = c.world.allreduce_value(
        2.0 * static_cast<double>(X.nnz()) * static_cast<double>(C), comm::ReduceOp::sum);
    const double t = r.seconds;
    rec["rows"] = rows.size();
    rec["cols"] = C;
    rec["gflops"] = flops / t * 1e-9;
    return std::vector<std::string>{cell("%d", r.mode),
                                    cell("%zu", rows.size()),
                                    cell("%lld", static_cast<long long>(C)),
                                    cell("%.3f", t * 1e3),
                                    cell("%.3g", nnz / t),
                                    cell("%.1f", flops / t * 1e-9),
                                    human_bytes(r.floor.bytes),
                                    cell("%.3f", r.floor.seconds * 1e3),
                                    cell("%.2f", r.floor.ratio(t)),
                                    cell("%.3f", r.noreuse.seconds * 1e3),
                                    cell("%.2f", r.noreuse.ratio(t))};
  };
  op.mean_row = [&](const ModeSums& s) {
    return std::vector<std::string>{"mean",
                                    "",
                                    "",
                                    cell("%.3f", s.seconds / N * 1e3),
                                    "",
                                    "",
                                    "",
                                    cell("%.3f", s.floor / N * 1e3),
                                    cell("%.2f", s.seconds / s.floor),
                                    cell("%.3f", s.noreuse / N * 1e3),
                                    cell("%.2f", s.seconds / s.noreuse)};
  };
  run_modes(op, N, c.a.repeat, c.bw, c.world, c.j);
  out = kernels::Array<T>();
  ttmc_gather_error(c, fp, ranks);
  c.j["prepare_seconds"] = c.in.prepare_seconds;
}

template void bench_ttmc(Context<float>&);
template void bench_ttmc(Context<double>&);

}  // namespace tessera::driver::bench
