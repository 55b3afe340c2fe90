#include "kernels/backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "kernels/factories.hpp"
#include "kernels/row_chunks.hpp"
#include "kernels/sptc.hpp"
#include "linalg/blas.hpp"
#include "tensor/synthetic.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

BackendKind parse_backend(const std::string& name) {
  if (name == "reference") return BackendKind::reference;
  if (name == "cpu") return BackendKind::cpu;
  if (name == "cuda") return BackendKind::cuda;
  if (name == "auto") return cuda_device_available() ? BackendKind::cuda : BackendKind::cpu;
  TESSERA_INPUT_CHECK(false,
                      "unknown backend '" << name << "': expected auto, reference, cpu or cuda");
  return BackendKind::cpu;
}

std::string to_string(BackendKind k) {
  switch (k) {
    case BackendKind::reference:
      return "reference";
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

bool cuda_device_available() {
  return cuda_built() && cuda_device_count() > 0;
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads, const Tuning& tuning) {
  check(tuning);
  std::unique_ptr<Backend<T>> be;
  switch (kind) {
    case BackendKind::reference:
      be = make_reference_backend<T>();
      break;
    case BackendKind::cpu:
      be = make_cpu_backend<T>(threads);
      break;
    case BackendKind::cuda:
      be = make_cuda_backend<T>();
      break;
  }
  if (!be) TESSERA_THROW("unknown backend kind");
  be->set_tuning(tuning);
  return be;
}

void check(const Tuning& t) {
  auto one_of = [](const std::string& v, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (v == n) return true;
    return false;
  };
  TESSERA_INPUT_CHECK(
      one_of(t.cuda_layout, {"default", "auto", "plain", "smem", "l2"}),
      "--cuda-layout must be default, auto, plain, smem or l2 (got '" << t.cuda_layout << "')");
  TESSERA_INPUT_CHECK(t.cuda_block_rows < (std::uint64_t(1) << 32),
                      "--cuda-block-rows must be below 2^32 (got " << t.cuda_block_rows << ")");
  TESSERA_INPUT_CHECK(
      one_of(t.mttkrp_kernel, {"auto", "blocked", "classic"}),
      "--mttkrp-kernel must be auto, blocked or classic (got '" << t.mttkrp_kernel << "')");
  TESSERA_INPUT_CHECK(one_of(t.ttmc_kernel, {"auto", "cores"}),
                      "--ttmc-kernel must be auto or cores (got '" << t.ttmc_kernel << "')");
  TESSERA_INPUT_CHECK(
      t.ttmc_tile == 0 || (t.ttmc_tile >= 64 && t.ttmc_tile <= 65536 && t.ttmc_tile % 32 == 0),
      "--ttmc-tile must be 0 (built-in) or a multiple of 32 in 64..65536 (got " << t.ttmc_tile
                                                                                << ")");
  TESSERA_INPUT_CHECK(!std::isnan(t.sptc_tc_threshold),
                      "--tc-threshold must be a block density >= 0, or < 0 for the default");
  TESSERA_INPUT_CHECK(one_of(t.cpu_isa, {"auto", "base", "avx2", "avx512"}),
                      "--cpu-isa must be auto, base, avx2 or avx512 (got '" << t.cpu_isa << "')");
}

void check_synthetic(const synthetic::Spec& spec, std::uint64_t first_id, std::uint64_t count) {
  TESSERA_INPUT_CHECK(
      spec.order >= 1 && spec.order <= kMaxOrder,
      "synthetic tensor: order must be 1.." << kMaxOrder << " (got " << spec.order << ")");
  for (int n = 0; n < spec.order; ++n)
    TESSERA_INPUT_CHECK(
        spec.dims[n] >= 1 && spec.dims[n] <= (std::uint64_t(1) << 32),
        "synthetic tensor: dimension " << n << " is " << spec.dims[n] << ", outside 1..2^32");
  TESSERA_INPUT_CHECK(spec.rank >= 1, "synthetic tensor: model rank " << spec.rank << " < 1");
  TESSERA_INPUT_CHECK(
      !spec.powerlaw || (spec.alpha > 0 && spec.alpha < 1e300),
      "synthetic tensor: power-law exponent must be > 0 (got " << spec.alpha << ")");
  TESSERA_INPUT_CHECK(count <= static_cast<std::uint64_t>(std::numeric_limits<nnz_t>::max()) &&
                          first_id <= std::numeric_limits<std::uint64_t>::max() - count,
                      "synthetic tensor: id range [" << first_id << ", " << first_id << " + "
                                                     << count << ") out of range");
}

template <typename T>
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, std::uint64_t first_id,
                                      std::uint64_t count) {
  check_synthetic(spec, first_id, count);
  const int N = spec.order;
  SparseTensor<T> x(std::vector<std::uint64_t>(spec.dims, spec.dims + N));
  const auto n = static_cast<std::size_t>(count);
  for (auto& v : x.idx) v.resize(n);
  x.vals.resize(n);
  const auto cnt = static_cast<std::int64_t>(count);
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < cnt; ++k) {
    const std::uint64_t id = first_id + static_cast<std::uint64_t>(k);
    index_t c[kMaxOrder];
    for (int m = 0; m < N; ++m) {
      c[m] = synthetic::coordinate(spec, id, m);
      x.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] = c[m];
    }
    x.vals[static_cast<std::size_t>(k)] = static_cast<T>(synthetic::model_value(spec, c));
  }
  return x;
}

template <typename T>
std::unique_ptr<TensorHandle<T>> Backend<T>::prepare_synthetic(const synthetic::Spec& spec,
                                                               std::uint64_t first_id,
                                                               std::uint64_t count) {
  return prepare(make_synthetic_tensor<T>(spec, first_id, count));
}

template <typename T>
int Backend<T>::prepare_stream_chunk(SparseTensor<T>&) {
  return -1;
}

template <typename T>
std::size_t Backend<T>::stream_chunk_scratch_bytes(nnz_t) const {
  return 0;
}

template <typename T>
void Backend<T>::mttkrp_accumulate(const SparseTensor<T>& chunk, int mode,
                                   const std::vector<const T*>& factors, int R, T* out, int) {
  TESSERA_EXPECTS(mode >= 0 && mode < chunk.order(), "mttkrp_accumulate: mode "
                                                         << mode << " of an order-" << chunk.order()
                                                         << " chunk");
  TESSERA_EXPECTS(R >= 1, "mttkrp_accumulate: rank R = " << R);
  if (chunk.nnz() == 0) return;
  Timer t;
  const auto rows = static_cast<std::int64_t>(chunk.dims[static_cast<std::size_t>(mode)]);
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  if (accumulate_scratch_.size() < n) {
    accumulate_scratch_ = Array<T>();  // free first: the old buffer is too small
    accumulate_scratch_ = allocate(n);
  }
  {
    auto h = prepare(chunk);
    mttkrp(*h, mode, factors, R, accumulate_scratch_.data());
    add_rows(accumulate_scratch_.data(), rows, R, {}, out);
    synchronize();  // the chunk's handle is released after this
  }
  accumulate_times_.compute += t.seconds();
  ++accumulate_times_.chunks;
}

template <typename T>
AccumulateTimes Backend<T>::take_accumulate_times() {
  synchronize();
  const AccumulateTimes t = accumulate_times_;
  accumulate_times_ = AccumulateTimes{};
  return t;
}

template <typename T>
std::vector<index_t> Backend<T>::ttmc_rows(const TensorHandle<T>&, int) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}
template <typename T>
std::size_t Backend<T>::ttmc_scratch_bytes(const TensorHandle<T>&, int, const std::vector<int>&) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}
template <typename T>
void Backend<T>::ttmc(const TensorHandle<T>&, int, const std::vector<const T*>&,
                      const std::vector<int>&, T*) {
  TESSERA_THROW("ttmc is not implemented by the " << name() << " backend yet");
}

// ---- double work buffers and wide products: host defaults ----

template <typename T>
Array<double> Backend<T>::allocate_double(std::size_t n) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement allocate_double");
  if (n == 0) return Array<double>();
  return Array<double>(new double[n], n, [](double* p) { delete[] p; });
}
template <typename T>
void Backend<T>::upload_double(const double* host, std::size_t n, double* dst) {
  if (n > 0 && host != dst) std::memcpy(dst, host, n * sizeof(double));
}
template <typename T>
void Backend<T>::download_double(const double* src, std::size_t n, double* host) {
  if (n > 0 && host != src) std::memcpy(host, src, n * sizeof(double));
}

template <typename T>
void Backend<T>::wide_gram(const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement wide_gram");
  std::fill(S, S + C * C, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t, std::int64_t nr) {
    linalg::syrk_lower(C, nr, 1.0, y, C, 1.0, S);
  });
  linalg::symmetrize_lower(C, S);
}
template <typename T>
void Backend<T>::wide_times(const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                            double* Z) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement wide_times");
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(false, false, nr, R, C, 1.0, y, C, W, R, 0.0, Z + r0 * R, R);
  });
}
template <typename T>
void Backend<T>::wide_times_t(const T* Y, std::int64_t rows, std::int64_t C, const double* P, int R,
                              double* B) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement wide_times_t");
  std::fill(B, B + C * R, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(true, false, C, R, nr, 1.0, y, C, P + r0 * R, R, 1.0, B, R);
  });
}
template <typename T>
void Backend<T>::symmetric_eig_top(double* S, int n, int k, double* w_host, double* V) {
  const auto nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<double> Sh(nn), Vh(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
  download_double(S, nn, Sh.data());
  linalg::symmetric_eig_top(Sh.data(), n, k, w_host, Vh.data());
  upload_double(Vh.data(), Vh.size(), V);
}

// ---- Tucker's dense stage: host defaults (the loops src/engine/algo/tucker.cpp ran before) ----

namespace {
/// Rows per BLAS call of the tall-skinny products (bounds the temporary of times_small).
constexpr std::int64_t kTallChunkRows = 16384;

/// U (rows x R) := U M for M (R x R), through tmp (rows x R).
void host_times_small(double* U, std::int64_t rows, int R, const double* M,
                      std::vector<double>& tmp) {
  tmp.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(R));
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTallChunkRows) {
    const std::int64_t nr = std::min(kTallChunkRows, rows - r0);
    linalg::gemm(false, false, nr, R, R, 1.0, U + r0 * R, R, M, R, 0.0, tmp.data() + r0 * R, R);
  }
  std::copy(tmp.begin(), tmp.end(), U);
}

/// Cholesky of G (R x R) and M = L^{-T} (upper, row-major); false when G is not
/// numerically positive definite (pivot ratio under what CholeskyQR tolerates).
bool host_cholesky_inverse_t(const double* G, int R, std::vector<double>& M) {
  const auto RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  std::vector<double> L(G, G + RR);
  if (!linalg::cholesky(L.data(), R)) return false;
  double dmin = std::numeric_limits<double>::infinity(), dmax = 0;
  for (int i = 0; i < R; ++i) {
    const double d = L[static_cast<std::size_t>(i) * R + i];
    if (!(d > 0) || !std::isfinite(d)) return false;
    dmin = std::min(dmin, d);
    dmax = std::max(dmax, d);
  }
  if (dmin * dmin < 1e-13 * dmax * dmax) return false;
  // Linv (lower) by forward substitution, then M = Linv^T (upper).
  std::vector<double> Li(RR, 0.0);
  for (int j = 0; j < R; ++j) {
    for (int i = j; i < R; ++i) {
      double s = i == j ? 1.0 : 0.0;
      for (int k = j; k < i; ++k)
        s -= L[static_cast<std::size_t>(i) * R + k] * Li[static_cast<std::size_t>(k) * R + j];
      Li[static_cast<std::size_t>(i) * R + j] = s / L[static_cast<std::size_t>(i) * R + i];
    }
  }
  M.assign(RR, 0.0);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j)
      M[static_cast<std::size_t>(i) * R + j] = Li[static_cast<std::size_t>(j) * R + i];
  return true;
}
}  // namespace

template <typename T>
Array<std::int64_t> Backend<T>::upload_index(const std::int64_t* host, std::size_t n) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement upload_index");
  if (n == 0) return Array<std::int64_t>();
  auto* p = new std::int64_t[n];
  std::copy(host, host + n, p);
  return Array<std::int64_t>(p, n, [](std::int64_t* q) { delete[] q; });
}
template <typename T>
void Backend<T>::gather_rows_double(const double* U, int R, const std::int64_t* pos,
                                    std::int64_t rows, double* P) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement gather_rows_double");
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t i = pos != nullptr ? pos[j] : j;
    std::copy(U + i * R, U + (i + 1) * R, P + j * R);
  }
}
template <typename T>
void Backend<T>::scatter_rows_double(const double* Z, std::int64_t rows, int R,
                                     const std::int64_t* pos, std::int64_t len,
                                     const double* host_scale, double* U) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement scatter_rows_double");
  std::fill(U, U + len * R, 0.0);
  for (std::int64_t j = 0; j < rows; ++j) {
    double* u = U + (pos != nullptr ? pos[j] : j) * R;
    const double* z = Z + j * R;
    if (host_scale == nullptr)
      std::copy(z, z + R, u);
    else
      for (int c = 0; c < R; ++c) u[c] = z[c] * host_scale[c];
  }
}
template <typename T>
void Backend<T>::gram_double(const double* U, std::int64_t rows, int R, double* G) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement gram_double");
  std::fill(G, G + static_cast<std::size_t>(R) * static_cast<std::size_t>(R), 0.0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTallChunkRows) {
    const std::int64_t nr = std::min(kTallChunkRows, rows - r0);
    linalg::syrk_lower(R, nr, 1.0, U + r0 * R, R, 1.0, G);
  }
  linalg::symmetrize_lower(R, G);
}
template <typename T>
void Backend<T>::inner_double(const double* A, const double* B, std::int64_t rows, int R,
                              double* M) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement inner_double");
  if (rows == 0) {
    std::fill(M, M + static_cast<std::size_t>(R) * static_cast<std::size_t>(R), 0.0);
    return;
  }
  linalg::gemm(true, false, R, R, rows, 1.0, A, R, B, R, 0.0, M, R);
}
template <typename T>
void Backend<T>::times_small_double(double* U, std::int64_t rows, int R, const double* M) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement times_small_double");
  std::vector<double> tmp;
  host_times_small(U, rows, R, M, tmp);
}
template <typename T>
bool Backend<T>::cholqr_step(double* U, std::int64_t rows, int R, const double* G,
                             double* host_dev) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement cholqr_step");
  double dev = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < R; ++j)
      dev = std::max(dev, std::abs(G[static_cast<std::size_t>(i) * R + j] - (i == j ? 1.0 : 0.0)));
  *host_dev = dev;
  std::vector<double> M, tmp;
  if (!host_cholesky_inverse_t(G, R, M)) return false;
  host_times_small(U, rows, R, M.data(), tmp);
  return true;
}
template <typename T>
double Backend<T>::subspace_change(const double* U, const double* Unew, const double* M,
                                   std::int64_t rows, int R) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement subspace_change");
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  std::vector<double> proj(U, U + n), tmp;
  host_times_small(proj.data(), rows, R, M, tmp);
  double change = 0;
  for (std::size_t k = 0; k < n; ++k) change += (Unew[k] - proj[k]) * (Unew[k] - proj[k]);
  return change;
}
template <typename T>
double Backend<T>::sum_squares_double(const double* x, std::size_t n) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement sum_squares_double");
  double s = 0;
  for (std::size_t k = 0; k < n; ++k) s += x[k] * x[k];
  return s;
}
template <typename T>
void Backend<T>::convert_from_double(const double* src, std::size_t n, T* dst) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement convert_from_double");
  for (std::size_t k = 0; k < n; ++k) dst[k] = static_cast<T>(src[k]);
}

template <typename T>
void Backend<T>::sum_rows(const T* src, const std::vector<std::int64_t>& ptr,
                          const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement sum_rows");
  const auto rows = static_cast<std::int64_t>(ptr.empty() ? 0 : ptr.size() - 1);
#pragma omp parallel for schedule(static) if (rows * C > (1 << 16))
  for (std::int64_t j = 0; j < rows; ++j) {
    T* d = dst + j * C;
    const std::int64_t b0 = ptr[static_cast<std::size_t>(j)],
                       b1 = ptr[static_cast<std::size_t>(j + 1)];
    const T* first = src + row[static_cast<std::size_t>(b0)] * C;
    std::copy(first, first + C, d);
    for (std::int64_t q = b0 + 1; q < b1; ++q) {
      const T* s = src + row[static_cast<std::size_t>(q)] * C;
      for (std::int64_t k = 0; k < C; ++k) d[k] += s[k];
    }
  }
}

template <typename T>
void Backend<T>::add_rows(const T* src, std::int64_t rows, std::int64_t C,
                          const std::vector<std::int64_t>& dst_row, T* dst) {
  TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                  "the " << name() << " backend must implement add_rows");
  TESSERA_EXPECTS(dst_row.empty() || static_cast<std::int64_t>(dst_row.size()) == rows,
                  "add_rows: " << dst_row.size() << " destination rows for " << rows << " rows");
#pragma omp parallel for schedule(static) if (rows * C > (1 << 16))
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t j = dst_row.empty() ? i : dst_row[static_cast<std::size_t>(i)];
    T* d = dst + j * C;
    const T* s = src + i * C;
    for (std::int64_t k = 0; k < C; ++k) d[k] += s[k];
  }
}

template <typename T>
std::size_t Backend<T>::wide_scratch_bytes(std::int64_t C) const {
  return std::is_same_v<T, double>
             ? 0
             : static_cast<std::size_t>(kDoubleChunkRows * C) * sizeof(double);
}

template <typename T>
std::unique_ptr<ContractPlan<T>> Backend<T>::contract_plan(const SparseTensor<T>&,
                                                           const SparseTensor<T>&,
                                                           const ContractSpec&) {
  TESSERA_THROW("contract is not implemented by the " << name() << " backend yet");
}
template <typename T>
SparseTensor<T> Backend<T>::contract(ContractPlan<T>&, ContractStats*) {
  TESSERA_THROW("contract is not implemented by the " << name() << " backend yet");
}

template class Backend<float>;
template class Backend<double>;
template SparseTensor<float> make_synthetic_tensor<float>(const synthetic::Spec&, std::uint64_t,
                                                          std::uint64_t);
template SparseTensor<double> make_synthetic_tensor<double>(const synthetic::Spec&, std::uint64_t,
                                                            std::uint64_t);

template std::unique_ptr<Backend<float>> make_backend<float>(BackendKind, int, const Tuning&);
template std::unique_ptr<Backend<double>> make_backend<double>(BackendKind, int, const Tuning&);

}  // namespace tessera::kernels
