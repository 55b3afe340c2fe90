// tessera bench mttkrp: every mode's MTTKRP against its floor.
//
// Floor of one MTTKRP of mode n on one rank = bytes that must move / measured bandwidth:
//   the stored tensor format read once (TensorHandle::mttkrp_stream_bytes)
// + each factor row the block touches, read once (distinct indices per mode x R x sizeof(T))
// + the output (dims[n] x R x sizeof(T)) written once.
// The "no-reuse" floor instead charges every nonzero a gather of its N-1 factor rows.
#include "kernels/ops/mttkrp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "algo/cp_als.hpp"
#include "bench/bench.hpp"
#include "bench/harness.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

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

/// Rows sampled per mode for the double-precision check of --gather-precision.
constexpr int kSampleRows = 64;

/// Double-precision MTTKRP rows of a tensor generated on the backend (BenchInput::spec),
/// recomputed on the host from the nonzero ids, the stored (T) values and the bench's (T)
/// factors: for each mode n, rows[n] (at most kSampleRows, ascending) get sums[n] (rows x R,
/// this rank's ids only). One OpenMP pass over the ids for every mode.
template <typename T>
void sampled_rows_fp64(const synthetic::Spec& spec, std::uint64_t first_id, std::uint64_t count,
                       const std::vector<std::vector<T>>& F, int R,
                       const std::vector<std::vector<std::uint64_t>>& rows,
                       std::vector<std::vector<double>>& sums) {
  const int N = spec.order;
  std::vector<std::vector<std::int16_t>> slot(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    const auto sn = static_cast<std::size_t>(n);
    slot[sn].assign(static_cast<std::size_t>(spec.dims[n]), -1);
    for (std::size_t k = 0; k < rows[sn].size(); ++k)
      slot[sn][static_cast<std::size_t>(rows[sn][k])] = static_cast<std::int16_t>(k);
    sums[sn].assign(rows[sn].size() * static_cast<std::size_t>(R), 0.0);
  }
  const auto n_ids = static_cast<std::int64_t>(count);
#pragma omp parallel
  {
    std::vector<std::vector<double>> mine = sums;
    index_t c[kMaxOrder];
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < n_ids; ++k) {
      const std::uint64_t id = first_id + static_cast<std::uint64_t>(k);
      bool any = false;
      for (int n = 0; n < N; ++n) {
        c[n] = synthetic::coordinate(spec, id, n);
        any = any || slot[static_cast<std::size_t>(n)][c[n]] >= 0;
      }
      if (!any) continue;
      const double v = static_cast<double>(static_cast<T>(synthetic::model_value(spec, c)));
      for (int n = 0; n < N; ++n) {
        const int s = slot[static_cast<std::size_t>(n)][c[n]];
        if (s < 0) continue;
        double* o = mine[static_cast<std::size_t>(n)].data() + static_cast<std::size_t>(s) * R;
        for (int r = 0; r < R; ++r) {
          double p = v;
          for (int m = 0; m < N; ++m)
            if (m != n)
              p *= static_cast<double>(
                  F[static_cast<std::size_t>(m)][static_cast<std::size_t>(c[m]) * R + r]);
          o[r] += p;
        }
      }
    }
#pragma omp critical
    for (int n = 0; n < N; ++n)
      for (std::size_t k = 0; k < sums[static_cast<std::size_t>(n)].size(); ++k)
        sums[static_cast<std::size_t>(n)][k] += mine[static_cast<std::size_t>(n)][k];
  }
}

/// --gather-precision fp16 | bf16: each mode's MTTKRP with the 16-bit gathers against the
/// same with float gathers (relative Frobenius error over the ranks' outputs), printed and in
/// the record ("gather_relative_error", one per mode). For a tensor generated on the backend
/// also both against double arithmetic on kSampleRows rows per mode, recomputed on the host
/// ("gather_relative_error_fp64", "float_relative_error_fp64").
template <typename T>
void gather_error(Context<T>& c, const std::vector<const T*>& fp, kernels::Array<T>& out,
                  std::uint64_t max_rows) {
  auto& be = *c.cx.backend;
  const kernels::Tuning low = be.tuning();
  if (low.gather_precision == kernels::GatherPrecision::full || !std::is_same_v<T, float>) return;
  kernels::Tuning full = low;
  full.gather_precision = kernels::GatherPrecision::full;
  const auto& X = *c.in.X;
  const auto& dims = c.in.dims;
  const int N = static_cast<int>(dims.size()), R = c.a.rank;
  const auto Rs = static_cast<std::size_t>(R);
  // The sampled rows (evenly spread, the first and last included) and their double sums.
  std::vector<std::vector<std::uint64_t>> rows(static_cast<std::size_t>(N));
  std::vector<std::vector<double>> fp64(static_cast<std::size_t>(N));
  if (c.in.spec) {
    std::vector<std::vector<T>> F;
    for (int n = 0; n < N; ++n) {
      const std::uint64_t I = dims[static_cast<std::size_t>(n)];
      F.push_back(bench_factor_values<T>(I, R, n));
      const std::uint64_t k_rows = std::min<std::uint64_t>(I, kSampleRows);
      for (std::uint64_t k = 0; k < k_rows; ++k)
        rows[static_cast<std::size_t>(n)].push_back(k_rows == 1 ? 0 : k * (I - 1) / (k_rows - 1));
    }
    Timer t;
    sampled_rows_fp64(*c.in.spec, c.in.first_id, c.in.count, F, R, rows, fp64);
    for (auto& v : fp64) c.world.allreduce(v.data(), v.size());
    log::info("--gather-precision: " + std::to_string(kSampleRows) +
              " rows per mode recomputed in double on the host in " + std::to_string(t.seconds()) +
              " s");
  }
  std::vector<T> a(static_cast<std::size_t>(max_rows) * Rs), b(a.size());
  std::vector<double> errors, low64, full64;
  // Relative error of `got` (this rank's rows) on the sampled rows against fp64[n].
  auto sampled_error = [&](int n, const std::vector<T>& got) {
    const auto sn = static_cast<std::size_t>(n);
    std::vector<double> g(rows[sn].size() * Rs);
    for (std::size_t k = 0; k < rows[sn].size(); ++k)
      for (std::size_t r = 0; r < Rs; ++r)
        g[k * Rs + r] = static_cast<double>(got[static_cast<std::size_t>(rows[sn][k]) * Rs + r]);
    c.world.allreduce(g.data(), g.size());  // the ranks' partial rows
    double d2 = 0, w2 = 0;
    for (std::size_t k = 0; k < g.size(); ++k) {
      d2 += (g[k] - fp64[sn][k]) * (g[k] - fp64[sn][k]);
      w2 += fp64[sn][k] * fp64[sn][k];
    }
    return w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
  };
  for (int n = 0; n < N; ++n) {
    const std::size_t len = static_cast<std::size_t>(dims[static_cast<std::size_t>(n)]) * Rs;
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
    if (c.in.spec) {
      low64.push_back(sampled_error(n, a));
      full64.push_back(sampled_error(n, b));
    }
  }
  const std::string name(kernels::name_of(low.gather_precision));
  c.j["gather_precision"] = name;
  c.j["gather_relative_error"] = errors;
  if (c.in.spec) {
    c.j["gather_relative_error_fp64"] = low64;
    c.j["float_relative_error_fp64"] = full64;
  }
  if (log::rank() == 0) {
    auto line = [](const char* what, const std::vector<double>& v) {
      std::printf("%s", what);
      for (double e : v) std::printf(" %.3g", e);
      std::printf("\n");
    };
    line(("--gather-precision " + name + ": relative error against float gathers, per mode:")
             .c_str(),
         errors);
    if (c.in.spec) {
      line(("--gather-precision " + name + ": relative error against double arithmetic, " +
            std::to_string(kSampleRows) + " rows per mode:")
               .c_str(),
           low64);
      line("float gathers: relative error against double arithmetic, the same rows:", full64);
    }
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
