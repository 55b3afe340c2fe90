// Thin row-major wrappers over the BLAS/LAPACK calls the Tucker factor updates need
// (double only: the dense stages of HOOI run in double for every value type).
#pragma once

#include <cstdint>

namespace tessera::linalg {

/// C (m x n) = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k (A is k x m when
/// trans_a), op(B) is k x n. lda/ldb/ldc are row strides. BLAS dgemm. Dimensions must fit
/// in int (callers pass row chunks).
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta,
          double* C, std::int64_t ldc);

/// C (n x n) = alpha * A^T A + beta * C for A (k x n, row stride lda), row-major; only the
/// lower triangle of C (row-major) is updated. BLAS dsyrk. Call symmetrize_lower after the
/// last update.
void syrk_lower(std::int64_t n, std::int64_t k, double alpha, const double* A, std::int64_t lda,
                double beta, double* C);

/// Copies the lower triangle of C (n x n, row-major) onto the upper one.
void symmetrize_lower(std::int64_t n, double* C);

/// The k largest eigenpairs of symmetric S (n x n, row-major, both triangles stored):
/// w[0] >= ... >= w[k-1], Q (n x k, row-major) holds the eigenvectors as columns.
/// 1 <= k <= n. LAPACK dsyevr (range 'I'). Throws Error when it fails.
void symmetric_eig_top(const double* S, int n, int k, double* w, double* Q);

}  // namespace tessera::linalg
