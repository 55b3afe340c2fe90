// Dense operations of CP-ALS on factor matrices in backend memory (R small: 1..~256): one
// declaration per operation, implemented by every backend (kernels/ops/common.hpp). The
// reference backend runs src/base/linalg/dense.hpp serially, the cpu backend the same with
// its OpenMP team, the cuda backend kernels and cuBLAS/cuSOLVER (kernels/cuda/dense/dense.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops/common.hpp"

/// G (R x R) = A^T A for A (rows x R, row-major). rows may be 0 (G = 0).
#define TESSERA_GRAM_OP(T) void gram(Backend<T>& be, const T* A, std::int64_t rows, int R, T* G)
/// V (R x R) = elementwise product of the matrices in Gs (at least one).
#define TESSERA_HADAMARD_OP(T) \
  void hadamard(Backend<T>& be, const std::vector<const T*>& Gs, int R, T* V)
/// M (rows x R) := M * V^+ for symmetric positive semi-definite V (R x R): Cholesky when V
/// is positive definite, else the pseudo-inverse from a symmetric eigendecomposition
/// (eigenvalues under R * eps * max eigenvalue treated as zero). Returns true when the
/// fallback was used. Never produces NaN from finite input.
#define TESSERA_SOLVE_NORMAL_OP(T) \
  bool solve_normal(Backend<T>& be, T* M, std::int64_t rows, const T* V, int R)
/// host_out[r] = sum_i A(i,r)^2 (two) or max_i |A(i,r)| (max), accumulated in double.
#define TESSERA_COLUMN_NORMS_OP(T)                                                       \
  void column_norms(Backend<T>& be, const T* A, std::int64_t rows, int R, NormKind kind, \
                    double* host_out)
/// A(i, r) *= host_scale[r].
#define TESSERA_SCALE_COLUMNS_OP(T) \
  void scale_columns(Backend<T>& be, T* A, std::int64_t rows, int R, const double* host_scale)
/// host_out[r] = sum_i A(i,r) * B(i,r), accumulated in double.
#define TESSERA_COLUMN_DOTS_OP(T)                                                    \
  void column_dots(Backend<T>& be, const T* A, const T* B, std::int64_t rows, int R, \
                   double* host_out)
/// P (rows x R(R+1)/2) = the packed outer products of A's rows (linalg::pack_outer).
#define TESSERA_PACK_OUTER_OP(T) \
  void pack_outer(Backend<T>& be, const T* A, std::int64_t rows, int R, T* P)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_GRAM_OP)
TESSERA_DECLARE_OP(TESSERA_HADAMARD_OP)
TESSERA_DECLARE_OP(TESSERA_SOLVE_NORMAL_OP)
TESSERA_DECLARE_OP(TESSERA_COLUMN_NORMS_OP)
TESSERA_DECLARE_OP(TESSERA_SCALE_COLUMNS_OP)
TESSERA_DECLARE_OP(TESSERA_COLUMN_DOTS_OP)
TESSERA_DECLARE_OP(TESSERA_PACK_OUTER_OP)

namespace ops {

template <typename T>
inline TESSERA_GRAM_OP(T) {
  TESSERA_DISPATCH(be, gram, A, rows, R, G);
}
template <typename T>
inline TESSERA_HADAMARD_OP(T) {
  TESSERA_DISPATCH(be, hadamard, Gs, R, V);
}
template <typename T>
inline TESSERA_SOLVE_NORMAL_OP(T) {
  TESSERA_DISPATCH(be, solve_normal, M, rows, V, R);
}
template <typename T>
inline TESSERA_COLUMN_NORMS_OP(T) {
  TESSERA_DISPATCH(be, column_norms, A, rows, R, kind, host_out);
}
template <typename T>
inline TESSERA_SCALE_COLUMNS_OP(T) {
  TESSERA_DISPATCH(be, scale_columns, A, rows, R, host_scale);
}
template <typename T>
inline TESSERA_COLUMN_DOTS_OP(T) {
  TESSERA_DISPATCH(be, column_dots, A, B, rows, R, host_out);
}
template <typename T>
inline TESSERA_PACK_OUTER_OP(T) {
  TESSERA_DISPATCH(be, pack_outer, A, rows, R, P);
}

}  // namespace ops
}  // namespace tessera::kernels
