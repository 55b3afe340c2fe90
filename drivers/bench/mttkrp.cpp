// tessera bench mttkrp: every mode's MTTKRP against its floor.
//
// Floor of one MTTKRP of mode n on one rank = bytes that must move / measured bandwidth:
//   the stored tensor format read once (TensorHandle::mttkrp_stream_bytes)
// + each factor row the block touches, read once (distinct indices per mode x R x sizeof(T))
// + the output (dims[n] x R x sizeof(T)) written once.
// The "no-reuse" floor instead charges every nonzero a gather of its N-1 factor rows.
#include "kernels/ops/mttkrp.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "algo/cp_als.hpp"
#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {

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
std::vector<T> bench_factor_values(std::uint64_t rows, int R, int n) {
  std::vector<T> h(static_cast<std::size_t>(rows) * static_cast<std::size_t>(R));
  for (std::uint64_t i = 0; i < rows; ++i)
    for (int r = 0; r < R; ++r)
      h[static_cast<std::size_t>(i) * static_cast<std::size_t>(R) + static_cast<std::size_t>(r)] =
          static_cast<T>(algo::initial_factor_value(7, n, i, r));
  return h;
}

template <typename T>
kernels::Array<T> bench_factor(kernels::Backend<T>& be, std::uint64_t rows, int R, int n) {
  const std::vector<T> h = bench_factor_values<T>(rows, R, n);
  auto f = be.allocate(h.size());
  be.upload(h.data(), h.size(), f.data());
  return f;
}

/// --gather-precision fp16 | bf16: each mode's MTTKRP with the 16-bit gathers against the
/// same with float gathers (relative Frobenius error over the ranks' outputs), printed and in
/// the record ("gather_relative_error", one per mode). The float kernel's own distance to
/// double arithmetic is of float's rounding (tests/gpu: CudaBackendTest.ReducedGathers).
template <typename T>
void gather_error(Context<T>& c, const std::vector<const T*>& fp, kernels::Array<T>& out,
                  std::uint64_t max_rows) {
  auto& be = *c.cx.backend;
  const kernels::Tuning low = be.tuning();
  if (low.gather_precision == kernels::GatherPrecision::full || !std::is_same_v<T, float>) return;
  kernels::Tuning full = low;
  full.gather_precision = kernels::GatherPrecision::full;
  const auto& X = *c.in.X;
  const int N = static_cast<int>(c.in.dims.size()), R = c.a.rank;
  std::vector<T> a(static_cast<std::size_t>(max_rows) * static_cast<std::size_t>(R)), b(a.size());
  std::vector<double> errors;
  for (int n = 0; n < N; ++n) {
    const std::size_t len = static_cast<std::size_t>(c.in.dims[static_cast<std::size_t>(n)]) *
                            static_cast<std::size_t>(R);
    kernels::ops::mttkrp(be, X, n, fp, R, out.data());
    be.download(out.data(), len, a.data());
    be.set_tuning(full);
    kernels::ops::mttkrp(be, X, n, fp, R, out.data());
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
  c.j["gather_precision"] = std::string(kernels::name_of(low.gather_precision));
  c.j["gather_relative_error"] = errors;
  if (log::rank() == 0) {
    std::printf("--gather-precision %s: relative error against float gathers, per mode:",
                std::string(kernels::name_of(low.gather_precision)).c_str());
    for (double e : errors) std::printf(" %.3g", e);
    std::printf("\n");
  }
}

template <typename T>
void bench_mttkrp(Context<T>& c) {
  const auto& X = *c.in.X;
  auto& be = *c.cx.backend;
  const auto& dims = c.in.dims;
  const int N = static_cast<int>(dims.size());
  const int R = c.a.rank;
  std::vector<kernels::Array<T>> F;
  std::vector<const T*> fp;
  std::uint64_t max_rows = 1;
  for (int n = 0; n < N; ++n) {
    F.push_back(bench_factor(be, dims[static_cast<std::size_t>(n)], R, n));
    max_rows = std::max(max_rows, dims[static_cast<std::size_t>(n)]);
  }
  for (auto& f : F) fp.push_back(f.data());
  auto out = be.allocate(static_cast<std::size_t>(max_rows) * static_cast<std::size_t>(R));
  const std::vector<double> distinct = distinct_rows(X);
  log::info("prepare: " + std::to_string(c.in.prepare_seconds) + " s, stored format " +
            human_bytes(static_cast<double>(X.bytes())) + ", " + X.describe());
  const double nnz = static_cast<double>(c.in.global_nnz), bw = c.bw;
  PerModeOp op;
  op.columns = {{"mode", 6, true}, {"time_ms", 10},    {"nnz/s", 12},
                {"bytes", 12},     {"floor_ms", 12},   {"ratio", 8},
                {"GB/s", 10},      {"noreuse_ms", 12}, {"ratio", 8}};
  op.step = [&](int n) { kernels::ops::mttkrp(be, X, n, fp, R, out.data()); };
  op.sync = [&] { be.synchronize(); };
  op.bytes = [&](int n) {
    const double stream = static_cast<double>(X.mttkrp_stream_bytes(n));
    const double out_bytes = static_cast<double>(dims[static_cast<std::size_t>(n)]) * R * sizeof(T);
    return std::pair{mttkrp_floor_bytes(stream, distinct, dims, n, R, sizeof(T)),
                     stream + static_cast<double>(X.nnz()) * (N - 1) * R * sizeof(T) + out_bytes};
  };
  op.row = [&](const ModeResult& r, nlohmann::json& rec) {
    const double t = r.seconds;
    rec["nnz_per_s"] = nnz / t;
    // The floor's bytes over the time: the bandwidth achieved at the floor's traffic (the
    // machine's measured bandwidth is the bound).
    rec["achieved_bytes_per_s"] = r.floor.bytes / t;
    return std::vector<std::string>{cell("%d", r.mode),
                                    cell("%.3f", t * 1e3),
                                    cell("%.3g", nnz / t),
                                    human_bytes(r.floor.bytes),
                                    cell("%.3f", r.floor.seconds * 1e3),
                                    cell("%.2f", r.floor.ratio(t)),
                                    cell("%.1f", r.floor.bytes / t / 1e9),
                                    cell("%.3f", r.noreuse.seconds * 1e3),
                                    cell("%.2f", r.noreuse.ratio(t))};
  };
  op.mean_row = [&](const ModeSums& s) {
    return std::vector<std::string>{"mean",
                                    cell("%.3f", s.seconds / N * 1e3),
                                    "",
                                    "",
                                    cell("%.3f", s.floor / N * 1e3),
                                    cell("%.2f", s.seconds / s.floor),
                                    cell("%.1f", bw / 1e9 * s.floor / s.seconds),
                                    cell("%.3f", s.noreuse / N * 1e3),
                                    cell("%.2f", s.seconds / s.noreuse)};
  };
  run_modes(op, N, c.a.repeat, bw, c.world, c.j);
  if (log::rank() == 0) std::printf("measured bandwidth (the floor's): %.1f GB/s\n", bw / 1e9);
  gather_error(c, fp, out, max_rows);
  flush();
  c.j["prepare_seconds"] = c.in.prepare_seconds;
}

template std::vector<float> bench_factor_values<float>(std::uint64_t, int, int);
template std::vector<double> bench_factor_values<double>(std::uint64_t, int, int);
template kernels::Array<float> bench_factor(kernels::Backend<float>&, std::uint64_t, int, int);
template kernels::Array<double> bench_factor(kernels::Backend<double>&, std::uint64_t, int, int);
template void bench_mttkrp(Context<float>&);
template void bench_mttkrp(Context<double>&);

}  // namespace tessera::driver::bench
