// Small dense operations on host memory (R x R systems, tall-skinny factors).
// The reference and CPU backends use these; row-major storage throughout.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

enum class NormKind { two, max };

namespace linalg {

// The passes over rows (gram, solve_normal, column_norms, scale_columns, column_dots) are
// OpenMP-parallel when the work is large enough; `threads` caps their team (0 = OpenMP's
// default, i.e. omp_get_max_threads()). Results agree across thread counts to rounding.

/// G (R x R) = A^T A, A is rows x R, accumulated in double; G is exactly symmetric.
template <typename T>
void gram(const T* A, std::int64_t rows, int R, T* G, int threads = 0);
/// V = elementwise product of Gs (each R x R); Gs non-empty.
template <typename T>
void hadamard(const std::vector<const T*>& Gs, int R, T* V);
/// M (rows x R) := M V^+ (see kernels::Backend::solve_normal). Factorises in double
/// (LAPACK dpotrf; dsyevd pseudo-inverse fallback). Returns true when the fallback ran.
/// V is treated as singular when dpotrf fails or min L_ii^2 <= R eps max L_ii^2; the
/// fallback drops eigenvalues <= R eps max|eigenvalue|. V = 0 (or non-finite V) gives M = 0.
template <typename T>
bool solve_normal(T* M, std::int64_t rows, const T* V, int R, int threads = 0);
/// out[r] = sum_i A(i,r)^2 (two) or max_i |A(i,r)| (max).
template <typename T>
void column_norms(const T* A, std::int64_t rows, int R, NormKind kind, double* out,
                  int threads = 0);
/// A(i,r) *= scale[r].
template <typename T>
void scale_columns(T* A, std::int64_t rows, int R, const double* scale, int threads = 0);
/// out[r] = sum_i A(i,r) B(i,r).
template <typename T>
void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* out, int threads = 0);

/// Symmetric eigendecomposition of S (n x n, row-major, double): eigenvalues ascending in
/// w, eigenvectors as columns of Q (row-major n x n). LAPACK dsyevd.
void symmetric_eig(const double* S, int n, double* w, double* Q);
/// Cholesky factor in place (lower, row-major); returns false if not positive definite.
bool cholesky(double* S, int n);

}  // namespace linalg
}  // namespace tessera
