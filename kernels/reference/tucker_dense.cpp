// Tucker-HOOI's dense stage on the host backends (kernels/ops/tucker_dense.hpp): the wide
// products through BLAS in double (float rows converted one chunk at a time), LAPACK dsyevr,
// and the loops of the tall-skinny double operations (those src/engine/algo/tucker.cpp ran
// before they moved to the backends). The cpu backend's versions call these.
#include "kernels/ops/tucker_dense.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/row_chunks.hpp"
#include "linalg/blas.hpp"
#include "util/error.hpp"

namespace tessera::kernels::reference {

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

// ---- wide products and the eigensolver ----

template <typename T>
void wide_gram(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement wide_gram");
  std::fill(S, S + C * C, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t, std::int64_t nr) {
    linalg::syrk_lower(C, nr, 1.0, y, C, 1.0, S);
  });
  linalg::symmetrize_lower(C, S);
}
template <typename T>
void wide_times(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* W,
                int R, double* Z) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement wide_times");
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(false, false, nr, R, C, 1.0, y, C, W, R, 0.0, Z + r0 * R, R);
  });
}
template <typename T>
void wide_times_t(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement wide_times_t");
  std::fill(B, B + C * R, 0.0);
  std::vector<double> buf;
  for_double_row_chunks(Y, rows, C, buf, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    linalg::gemm(true, false, C, R, nr, 1.0, y, C, P + r0 * R, R, 1.0, B, R);
  });
}
template <typename T>
std::size_t wide_scratch_bytes(const Backend<T>& be, std::int64_t C) {
  (void)be;
  return std::is_same_v<T, double>
             ? 0
             : static_cast<std::size_t>(kDoubleChunkRows * C) * sizeof(double);
}
template <typename T>
bool eig_in_one_block(const Backend<T>& be, int n, int k) {
  (void)be;
  (void)n;
  (void)k;
  return false;
}
template <typename T>
EigLanczosCounts eig_lanczos_counts(const Backend<T>& be) {
  (void)be;
  return {};
}
template <typename T>
void symmetric_eig_top(Backend<T>& be, double* S, int n, int k, double* w_host, double* V) {
  const auto nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<double> Sh(nn), Vh(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
  be.download_double(S, nn, Sh.data());
  linalg::symmetric_eig_top(Sh.data(), n, k, w_host, Vh.data());
  be.upload_double(Vh.data(), Vh.size(), V);
}

// ---- tall-skinny double operations ----

template <typename T>
void gather_rows_double(Backend<T>& be, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement gather_rows_double");
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t i = pos != nullptr ? pos[j] : j;
    std::copy(U + i * R, U + (i + 1) * R, P + j * R);
  }
}
template <typename T>
void scatter_rows_double(Backend<T>& be, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement scatter_rows_double");
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
void gram_double(Backend<T>& be, const double* U, std::int64_t rows, int R, double* G) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement gram_double");
  std::fill(G, G + static_cast<std::size_t>(R) * static_cast<std::size_t>(R), 0.0);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTallChunkRows) {
    const std::int64_t nr = std::min(kTallChunkRows, rows - r0);
    linalg::syrk_lower(R, nr, 1.0, U + r0 * R, R, 1.0, G);
  }
  linalg::symmetrize_lower(R, G);
}
template <typename T>
void inner_double(Backend<T>& be, const double* A, const double* B, std::int64_t rows, int R,
                  double* M) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement inner_double");
  if (rows == 0) {
    std::fill(M, M + static_cast<std::size_t>(R) * static_cast<std::size_t>(R), 0.0);
    return;
  }
  linalg::gemm(true, false, R, R, rows, 1.0, A, R, B, R, 0.0, M, R);
}
template <typename T>
void times_small_double(Backend<T>& be, double* U, std::int64_t rows, int R, const double* M) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement times_small_double");
  std::vector<double> tmp;
  host_times_small(U, rows, R, M, tmp);
}
template <typename T>
bool cholqr_step(Backend<T>& be, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement cholqr_step");
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
double subspace_change(Backend<T>& be, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement subspace_change");
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  std::vector<double> proj(U, U + n), tmp;
  host_times_small(proj.data(), rows, R, M, tmp);
  double change = 0;
  for (std::size_t k = 0; k < n; ++k) change += (Unew[k] - proj[k]) * (Unew[k] - proj[k]);
  return change;
}
template <typename T>
double sum_squares_double(Backend<T>& be, const double* x, std::size_t n) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement sum_squares_double");
  double s = 0;
  for (std::size_t k = 0; k < n; ++k) s += x[k] * x[k];
  return s;
}
template <typename T>
void convert_from_double(Backend<T>& be, const double* src, std::size_t n, T* dst) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement convert_from_double");
  for (std::size_t k = 0; k < n; ++k) dst[k] = static_cast<T>(src[k]);
}

// ---- rows of TTMc / MTTKRP outputs ----

template <typename T>
void sum_rows(Backend<T>& be, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement sum_rows");
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
void add_rows(Backend<T>& be, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst) {
  TESSERA_EXPECTS(be.memory_space() == MemorySpace::host,
                  "the " << be.name() << " backend must implement add_rows");
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

TESSERA_INSTANTIATE_OP(TESSERA_WIDE_GRAM_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_T_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SYMMETRIC_EIG_TOP_OP);
TESSERA_INSTANTIATE_OP(TESSERA_EIG_IN_ONE_BLOCK_OP);
TESSERA_INSTANTIATE_OP(TESSERA_EIG_LANCZOS_COUNTS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_GATHER_ROWS_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SCATTER_ROWS_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_GRAM_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_INNER_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TIMES_SMALL_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CHOLQR_STEP_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SUBSPACE_CHANGE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SUM_SQUARES_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONVERT_FROM_DOUBLE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SUM_ROWS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_ADD_ROWS_OP);

}  // namespace tessera::kernels::reference
