// Small dense operations on host memory. R x R factorisations run in double through
// LAPACK; the tall-skinny passes (rows x R) are OpenMP-parallel over rows.
#include "linalg/dense.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/error.hpp"

extern "C" {
// Fortran LAPACK (column-major); trailing size_t arguments are the hidden lengths of the
// CHARACTER arguments that gfortran-compiled libraries expect.
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info,
             std::size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
             double* work, const int* lwork, int* iwork, const int* liwork, int* info,
             std::size_t jobz_len, std::size_t uplo_len);
}

namespace tessera::linalg {

namespace {

/// Team size for a pass of `work` multiply-adds (or elements): one thread below ~4M,
/// which takes well under a millisecond, else `threads` (0 = OpenMP default). Small
/// passes stay serial on purpose: a fork/join costs little on an idle machine, but on a
/// shared or oversubscribed one every barrier can wait a scheduler time slice.
int pass_threads(double work, int threads) {
  if (work < 4194304.0) return 1;
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  return std::max(1, nt);
}

double work_of(std::int64_t rows, double per_row) {
  return static_cast<double>(rows) * per_row;
}

}  // namespace

template <typename T>
void gram(const T* A, std::int64_t rows, int R, T* G, int threads) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "gram: R and rows must be non-negative");
  const std::size_t RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  std::vector<double> total(RR, 0.0);
  const int nt = pass_threads(work_of(rows, static_cast<double>(R) * R), threads);
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(RR, 0.0);
    double* __restrict a = acc.data();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* __restrict row = A + i * R;
      for (int p = 0; p < R; ++p) {
        const double rp = static_cast<double>(row[p]);
        double* __restrict ap = a + static_cast<std::size_t>(p) * R;
#pragma omp simd
        for (int q = 0; q < R; ++q) ap[q] += rp * static_cast<double>(row[q]);
      }
    }
#pragma omp critical(tessera_gram_reduce)
    for (std::size_t k = 0; k < RR; ++k) total[k] += acc[k];
  }
  // The per-thread sums are symmetric term by term; symmetrise anyway so G is exactly
  // symmetric whatever order the reduction took.
  for (int p = 0; p < R; ++p)
    for (int q = 0; q < R; ++q) {
      const double v = p <= q ? total[static_cast<std::size_t>(p) * R + q]
                              : total[static_cast<std::size_t>(q) * R + p];
      G[static_cast<std::size_t>(p) * R + q] = static_cast<T>(v);
    }
}

template <typename T>
void hadamard(const std::vector<const T*>& Gs, int R, T* V) {
  TESSERA_EXPECTS(!Gs.empty(), "hadamard needs at least one matrix");
  const std::size_t RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  std::memmove(V, Gs[0], RR * sizeof(T));
  for (std::size_t g = 1; g < Gs.size(); ++g) {
    const T* G = Gs[g];
    for (std::size_t k = 0; k < RR; ++k) V[k] *= G[k];
  }
}

void symmetric_eig(const double* S, int n, double* w, double* Q) {
  TESSERA_EXPECTS(n >= 0, "symmetric_eig: n must be non-negative");
  if (n == 0) return;
  // Row-major symmetric S is its own column-major transpose.
  std::vector<double> a(S, S + static_cast<std::size_t>(n) * n);
  const char jobz = 'V', uplo = 'U';
  int info = 0, lwork = -1, liwork = -1, iwq = 0;
  double wq = 0;
  dsyevd_(&jobz, &uplo, &n, a.data(), &n, w, &wq, &lwork, &iwq, &liwork, &info, 1, 1);
  TESSERA_EXPECTS(info == 0, "LAPACK dsyevd workspace query failed (info " << info << ")");
  lwork = std::max(1, static_cast<int>(wq));
  liwork = std::max(1, iwq);
  std::vector<double> work(static_cast<std::size_t>(lwork));
  std::vector<int> iwork(static_cast<std::size_t>(liwork));
  dsyevd_(&jobz, &uplo, &n, a.data(), &n, w, work.data(), &lwork, iwork.data(), &liwork, &info, 1,
          1);
  if (info != 0) TESSERA_THROW("LAPACK dsyevd failed to converge (info " << info << ")");
  // a holds the eigenvectors as columns, column-major: Q(i,j) = a[i + j n].
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      Q[static_cast<std::size_t>(i) * n + j] = a[i + static_cast<std::size_t>(j) * n];
}

bool cholesky(double* S, int n) {
  TESSERA_EXPECTS(n >= 0, "cholesky: n must be non-negative");
  if (n == 0) return true;
  // Column-major 'U' (A = U^T U) of the row-major buffer is the row-major lower L = U^T.
  const char uplo = 'U';
  int info = 0;
  dpotrf_(&uplo, &n, S, &n, &info, 1);
  if (info != 0) return false;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) S[static_cast<std::size_t>(i) * n + j] = 0.0;
  return true;
}

template <typename T>
bool solve_normal(T* M, std::int64_t rows, const T* V, int R, int threads) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "solve_normal: R and rows must be non-negative");
  if (R == 0) return false;
  const std::size_t RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  const double eps = std::numeric_limits<double>::epsilon();
  std::vector<double> L(V, V + RR);
  bool spd = true;
  for (std::size_t k = 0; k < RR && spd; ++k) spd = std::isfinite(L[k]);
  if (spd) spd = cholesky(L.data(), R);
  if (spd) {
    // dpotrf only fails on a non-positive pivot; a tiny pivot means V is numerically
    // singular and the triangular solves would amplify rounding into garbage.
    double dmin = std::numeric_limits<double>::infinity(), dmax = 0;
    for (int i = 0; i < R; ++i) {
      const double d = L[static_cast<std::size_t>(i) * R + i];
      dmin = std::min(dmin, d * d);
      dmax = std::max(dmax, d * d);
    }
    spd = dmax > 0 && dmin > static_cast<double>(R) * eps * dmax;
  }

  const int nt = pass_threads(work_of(rows, static_cast<double>(R) * R), threads);
  if (spd) {
    std::vector<double> inv_diag(static_cast<std::size_t>(R));
    for (int i = 0; i < R; ++i) inv_diag[i] = 1.0 / L[static_cast<std::size_t>(i) * R + i];
    constexpr std::int64_t kBlock = 64;
    const std::int64_t nblocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel num_threads(nt)
    {
      // X is R x kBlock: a block of rows transposed, so the triangular solves
      // (V x^T = m^T with V = L L^T) run vectorised across the rows of the block.
      std::vector<double> Xbuf(static_cast<std::size_t>(R) * kBlock);
      double* __restrict X = Xbuf.data();
      const double* __restrict Lp = L.data();
#pragma omp for schedule(static)
      for (std::int64_t blk = 0; blk < nblocks; ++blk) {
        const std::int64_t r0 = blk * kBlock;
        const int nb = static_cast<int>(std::min<std::int64_t>(kBlock, rows - r0));
        for (int b = 0; b < nb; ++b)
          for (int i = 0; i < R; ++i)
            X[static_cast<std::size_t>(i) * kBlock + b] = static_cast<double>(M[(r0 + b) * R + i]);
        for (int i = 0; i < R; ++i) {  // forward: L y = m
          double* __restrict xi = X + static_cast<std::size_t>(i) * kBlock;
          for (int j = 0; j < i; ++j) {
            const double lij = Lp[static_cast<std::size_t>(i) * R + j];
            const double* __restrict xj = X + static_cast<std::size_t>(j) * kBlock;
#pragma omp simd
            for (int b = 0; b < nb; ++b) xi[b] -= lij * xj[b];
          }
          const double d = inv_diag[i];
#pragma omp simd
          for (int b = 0; b < nb; ++b) xi[b] *= d;
        }
        for (int i = R - 1; i >= 0; --i) {  // backward: L^T x = y
          double* __restrict xi = X + static_cast<std::size_t>(i) * kBlock;
          for (int j = i + 1; j < R; ++j) {
            const double lji = Lp[static_cast<std::size_t>(j) * R + i];
            const double* __restrict xj = X + static_cast<std::size_t>(j) * kBlock;
#pragma omp simd
            for (int b = 0; b < nb; ++b) xi[b] -= lji * xj[b];
          }
          const double d = inv_diag[i];
#pragma omp simd
          for (int b = 0; b < nb; ++b) xi[b] *= d;
        }
        for (int b = 0; b < nb; ++b)
          for (int i = 0; i < R; ++i)
            M[(r0 + b) * R + i] = static_cast<T>(X[static_cast<std::size_t>(i) * kBlock + b]);
      }
    }
    return false;
  }

  // Pseudo-inverse V^+ = Q diag(1/w_i for w_i > tol) Q^T, tol = R eps max|w|. Eigenvalues
  // at or under tol (including rounding-negative ones) span the null space and are dropped.
  std::vector<double> Vp(RR, 0.0);
  bool finite = true;
  for (std::size_t k = 0; k < RR && finite; ++k) finite = std::isfinite(static_cast<double>(V[k]));
  if (finite) {
    std::vector<double> S(V, V + RR), w(static_cast<std::size_t>(R)), Q(RR);
    // Symmetrise: V is symmetric in exact arithmetic; dsyevd reads only one triangle.
    for (int i = 0; i < R; ++i)
      for (int j = i + 1; j < R; ++j) {
        const double s =
            0.5 * (S[static_cast<std::size_t>(i) * R + j] + S[static_cast<std::size_t>(j) * R + i]);
        S[static_cast<std::size_t>(i) * R + j] = S[static_cast<std::size_t>(j) * R + i] = s;
      }
    symmetric_eig(S.data(), R, w.data(), Q.data());
    double wmax = 0;
    for (double x : w) wmax = std::max(wmax, std::abs(x));
    const double tol = static_cast<double>(R) * eps * wmax;
    for (int k = 0; k < R; ++k) {
      if (!(w[k] > tol)) continue;
      const double inv = 1.0 / w[k];
      for (int i = 0; i < R; ++i) {
        const double qi = Q[static_cast<std::size_t>(i) * R + k] * inv;
        for (int j = 0; j < R; ++j)
          Vp[static_cast<std::size_t>(i) * R + j] += qi * Q[static_cast<std::size_t>(j) * R + k];
      }
    }
  }
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> x(static_cast<std::size_t>(R)), y(static_cast<std::size_t>(R));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = M + r * R;
      for (int i = 0; i < R; ++i) x[i] = static_cast<double>(row[i]);
      std::fill(y.begin(), y.end(), 0.0);
      for (int i = 0; i < R; ++i) {
        const double xi = x[i];
        const double* __restrict vp = Vp.data() + static_cast<std::size_t>(i) * R;
        double* __restrict yp = y.data();
#pragma omp simd
        for (int j = 0; j < R; ++j) yp[j] += xi * vp[j];
      }
      for (int j = 0; j < R; ++j) row[j] = static_cast<T>(y[j]);
    }
  }
  return true;
}

template <typename T>
void column_norms(const T* A, std::int64_t rows, int R, NormKind kind, double* out, int threads) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "column_norms: R and rows must be non-negative");
  std::fill(out, out + R, 0.0);
  const int nt = pass_threads(work_of(rows, R), threads);
  const bool two = kind == NormKind::two;
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<std::size_t>(R), 0.0);
    double* __restrict a = acc.data();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* __restrict row = A + i * R;
      if (two) {
#pragma omp simd
        for (int r = 0; r < R; ++r) {
          const double v = static_cast<double>(row[r]);
          a[r] += v * v;
        }
      } else {
        for (int r = 0; r < R; ++r) a[r] = std::max(a[r], std::abs(static_cast<double>(row[r])));
      }
    }
#pragma omp critical(tessera_column_norms_reduce)
    for (int r = 0; r < R; ++r) out[r] = two ? out[r] + a[r] : std::max(out[r], a[r]);
  }
}

template <typename T>
void scale_columns(T* A, std::int64_t rows, int R, const double* scale, int threads) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "scale_columns: R and rows must be non-negative");
  const int nt = pass_threads(work_of(rows, R), threads);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t i = 0; i < rows; ++i) {
    T* __restrict row = A + i * R;
#pragma omp simd
    for (int r = 0; r < R; ++r) row[r] = static_cast<T>(static_cast<double>(row[r]) * scale[r]);
  }
}

template <typename T>
void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* out, int threads) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "column_dots: R and rows must be non-negative");
  std::fill(out, out + R, 0.0);
  const int nt = pass_threads(work_of(rows, R), threads);
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<std::size_t>(R), 0.0);
    double* __restrict a = acc.data();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* __restrict ra = A + i * R;
      const T* __restrict rb = B + i * R;
#pragma omp simd
      for (int r = 0; r < R; ++r) a[r] += static_cast<double>(ra[r]) * static_cast<double>(rb[r]);
    }
#pragma omp critical(tessera_column_dots_reduce)
    for (int r = 0; r < R; ++r) out[r] += a[r];
  }
}

#define TESSERA_DENSE_INSTANTIATE(T)                                                  \
  template void gram<T>(const T*, std::int64_t, int, T*, int);                        \
  template void hadamard<T>(const std::vector<const T*>&, int, T*);                   \
  template bool solve_normal<T>(T*, std::int64_t, const T*, int, int);                \
  template void column_norms<T>(const T*, std::int64_t, int, NormKind, double*, int); \
  template void scale_columns<T>(T*, std::int64_t, int, const double*, int);          \
  template void column_dots<T>(const T*, const T*, std::int64_t, int, double*, int);

TESSERA_DENSE_INSTANTIATE(float)
TESSERA_DENSE_INSTANTIATE(double)
#undef TESSERA_DENSE_INSTANTIATE

}  // namespace tessera::linalg
