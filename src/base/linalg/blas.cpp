#include "linalg/blas.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <vector>

#include "util/error.hpp"

extern "C" {
// Fortran BLAS/LAPACK (column-major); trailing size_t arguments are the hidden lengths of
// the CHARACTER arguments.
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc, std::size_t, std::size_t);
void dsyrk_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* beta, double* c, const int* ldc,
            std::size_t, std::size_t);
double dlamch_(const char* cmach, std::size_t);
void dsyevr_(const char* jobz, const char* range, const char* uplo, const int* n, double* a,
             const int* lda, const double* vl, const double* vu, const int* il, const int* iu,
             const double* abstol, int* m, double* w, double* z, const int* ldz, int* isuppz,
             double* work, const int* lwork, int* iwork, const int* liwork, int* info, std::size_t,
             std::size_t, std::size_t);
}

namespace tessera::linalg {

namespace {
int as_int(std::int64_t v, const char* what) {
  TESSERA_EXPECTS(v >= 0 && v <= INT_MAX, what << " = " << v << " does not fit a BLAS int");
  return static_cast<int>(v);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
          double* C, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int M = as_int(m, "m"), Nn = as_int(n, "n"), K = as_int(k, "k");
  const int LDA = std::max(1, as_int(lda, "lda")), LDB = std::max(1, as_int(ldb, "ldb"));
  const int LDC = std::max(1, as_int(ldc, "ldc"));
  if (K == 0) {  // BLAS would still scale C; keep that behaviour without reading A or B
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) C[i * ldc + j] = beta == 0 ? 0.0 : beta * C[i * ldc + j];
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const char tb = trans_b ? 'T' : 'N', ta = trans_a ? 'T' : 'N';
  dgemm_(&tb, &ta, &Nn, &M, &K, &alpha, B, &LDB, A, &LDA, &beta, C, &LDC, 1, 1);
}

void syrk_lower(std::int64_t n, std::int64_t k, double alpha, const double* A, std::int64_t lda,
                double beta, double* C) {
  if (n == 0) return;
  const int Nn = as_int(n, "n"), K = as_int(k, "k"), LDA = std::max(1, as_int(lda, "lda"));
  if (K == 0 && beta == 1.0) return;
  // Row-major A (k x n) is column-major A^T (n x k): C = A^T A is column-major "A A^T"
  // ('N'); the column-major upper triangle is the row-major lower one.
  const char uplo = 'U', trans = 'N';
  dsyrk_(&uplo, &trans, &Nn, &K, &alpha, A, &LDA, &beta, C, &Nn, 1, 1);
}

void symmetrize_lower(std::int64_t n, double* C) {
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < i; ++j) C[j * n + i] = C[i * n + j];
}

void symmetric_eig_top(const double* S, int n, int k, double* w, double* Q) {
  TESSERA_EXPECTS(n >= 1 && k >= 1 && k <= n,
                  "symmetric_eig_top: need 1 <= k <= n (k " << k << ", n " << n << ")");
  std::vector<double> a(S, S + static_cast<std::size_t>(n) * n);  // destroyed by dsyevr
  const char jobz = 'V', range = 'I', uplo = 'L';
  const int il = n - k + 1, iu = n;
  const double vl = 0, vu = 0;
  const double abstol = dlamch_("S", 1);  // safe minimum: most accurate eigenvalues
  int m = 0, info = 0;
  std::vector<double> wa(static_cast<std::size_t>(n)), z(static_cast<std::size_t>(n) * k);
  std::vector<int> isuppz(2 * static_cast<std::size_t>(k));
  int lwork = -1, liwork = -1, iwq = 0;
  double wq = 0;
  dsyevr_(&jobz, &range, &uplo, &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &m, wa.data(),
          z.data(), &n, isuppz.data(), &wq, &lwork, &iwq, &liwork, &info, 1, 1, 1);
  TESSERA_EXPECTS(info == 0, "LAPACK dsyevr workspace query failed (info " << info << ")");
  lwork = static_cast<int>(wq) + 1;
  liwork = iwq;
  std::vector<double> work(static_cast<std::size_t>(lwork));
  std::vector<int> iwork(static_cast<std::size_t>(std::max(liwork, 1)));
  dsyevr_(&jobz, &range, &uplo, &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &m, wa.data(),
          z.data(), &n, isuppz.data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1, 1);
  if (info != 0 || m != k)
    TESSERA_THROW("LAPACK dsyevr failed (info " << info << ", " << m << " of " << k
                                                << " eigenpairs)");
  // Ascending -> descending; z is column-major n x k (column j = eigenvector of wa[j]).
  for (int j = 0; j < k; ++j) {
    const int src = k - 1 - j;
    w[j] = wa[static_cast<std::size_t>(src)];
    for (int i = 0; i < n; ++i)
      Q[static_cast<std::size_t>(i) * k + j] = z[static_cast<std::size_t>(src) * n + i];
  }
}

}  // namespace tessera::linalg
