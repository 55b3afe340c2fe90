// Tucker-HOOI's dense stage on TTMc output rows in backend memory (DESIGN §6): the wide
// products of a TTMc output, the symmetric eigensolver, and the tall-skinny double
// operations (factor updates, CholeskyQR2, the core) that run where the TTMc rows are, so
// only R x R matrices and scalars reach the host. One declaration per operation, implemented
// by every backend (kernels/ops/common.hpp): the host backends share the loops and BLAS/LAPACK
// calls of kernels/reference/tucker_dense.cpp (the cpu backend calls them); the cuda backend runs
// kernels, cuBLAS and cuSOLVER in double on its stream (kernels/cuda/dense/tucker_dense.cu).
// Results agree to rounding.
//
// Y is rows x C, row-major, in backend memory, of the tensor's type T (C may be large: the
// product of the other modes' ranks); the other operands are doubles in backend memory and
// every product accumulates in double. U, Z, P are row-major rows x R doubles in backend
// memory (R small: 1..~4096), G and M R x R.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops/common.hpp"

/// S (C x C, row-major, both triangles) = Y^T Y. rows may be 0 (S = 0).
#define TESSERA_WIDE_GRAM_OP(T) \
  void wide_gram(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, double* S)
/// Z (rows x R, row-major) = Y W for W (C x R, row-major).
#define TESSERA_WIDE_TIMES_OP(T)                                                                  \
  void wide_times(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* W, \
                  int R, double* Z)
/// B (C x R, row-major) = Y^T P for P (rows x R, row-major). rows may be 0 (B = 0).
#define TESSERA_WIDE_TIMES_T_OP(T)                                                 \
  void wide_times_t(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, \
                    const double* P, int R, double* B)
/// Backend memory, in bytes, the wide products allocate for a Y of C columns besides their
/// operands (conversion of float rows to double, in chunks).
#define TESSERA_WIDE_SCRATCH_BYTES_OP(T) \
  std::size_t wide_scratch_bytes(const Backend<T>& be, std::int64_t C)
/// The k largest eigenpairs of the symmetric S (n x n, backend memory, both triangles; S may
/// be overwritten): w_host[j] descending, V (n x k, row-major, backend memory) column j the
/// unit eigenvector of w_host[j] (sign unspecified). Host backends run LAPACK dsyevr. The
/// cuda backend runs cuSOLVER dsyevdx on the device, except for float where
/// block_eig_applies(n, k) and the device's shared memory holds it (eig_in_one_block): there
/// the one-block solver (kernels/cuda/dense/block_eig.cuh, single-precision tridiagonal
/// reduction, about 1e-7 ||S|| backward error), tried first by Lanczos for n >= 192 under
/// Tuning::eig_solver auto (block_lanczos.cuh: residuals <= 1e-7 ||S||, or declined to it).
#define TESSERA_SYMMETRIC_EIG_TOP_OP(T) \
  void symmetric_eig_top(Backend<T>& be, double* S, int n, int k, double* w_host, double* V)
/// Whether symmetric_eig_top(n, k) runs the one-block solver on this backend: the cuda
/// backend's float runs where block_eig_applies(n, k) and its device's shared memory holds
/// the solver (an A100's does not at n = 256); false elsewhere. For the run record.
#define TESSERA_EIG_IN_ONE_BLOCK_OP(T) bool eig_in_one_block(const Backend<T>& be, int n, int k)
/// How many of this backend's symmetric_eig_top calls so far the one-block solver's Lanczos
/// kernel answered, and how many it declined to the exact one-block solver (the cuda backend's
/// float, n >= 192: kernels/cuda/dense/block_lanczos.cuh); both zero elsewhere. For the run record.
#define TESSERA_EIG_LANCZOS_COUNTS_OP(T) EigLanczosCounts eig_lanczos_counts(const Backend<T>& be)
/// P (rows x R) row j = U row pos[j]; pos (rows entries, backend memory, Backend::upload_index)
/// null means the identity map.
#define TESSERA_GATHER_ROWS_DOUBLE_OP(T)                                                   \
  void gather_rows_double(Backend<T>& be, const double* U, int R, const std::int64_t* pos, \
                          std::int64_t rows, double* P)
/// U (len x R) = 0 except row pos[j] = Z row j (j < rows) times host_scale (R factors on the
/// host; null: 1). pos (backend memory) holds distinct rows < len; null means the identity
/// map (rows <= len).
#define TESSERA_SCATTER_ROWS_DOUBLE_OP(T)                                                       \
  void scatter_rows_double(Backend<T>& be, const double* Z, std::int64_t rows, int R,           \
                           const std::int64_t* pos, std::int64_t len, const double* host_scale, \
                           double* U)
/// G (R x R, both triangles) = U^T U for U (rows x R). rows may be 0 (G = 0).
#define TESSERA_GRAM_DOUBLE_OP(T) \
  void gram_double(Backend<T>& be, const double* U, std::int64_t rows, int R, double* G)
/// M (R x R) = A^T B for A, B (rows x R). rows may be 0 (M = 0).
#define TESSERA_INNER_DOUBLE_OP(T)                                                              \
  void inner_double(Backend<T>& be, const double* A, const double* B, std::int64_t rows, int R, \
                    double* M)
/// U (rows x R) := U M for M (R x R).
#define TESSERA_TIMES_SMALL_DOUBLE_OP(T) \
  void times_small_double(Backend<T>& be, double* U, std::int64_t rows, int R, const double* M)
/// One CholeskyQR pass of U (rows x R) whose Gram, summed over ranks, is G (R x R, both
/// triangles): *host_dev = max_ij |G_ij - delta_ij|; when G = L L^T has a Cholesky factor
/// with finite positive pivots and min L_ii^2 >= 1e-13 max L_ii^2, U := U L^{-T} and true;
/// else false with U unchanged (numerically singular: the caller's eigen fallback). Every
/// rank decides alike from the same G.
#define TESSERA_CHOLQR_STEP_OP(T)                                                        \
  bool cholqr_step(Backend<T>& be, double* U, std::int64_t rows, int R, const double* G, \
                   double* host_dev)
/// ||Unew - U M||_F^2 over these rows (U, Unew rows x R; M R x R), accumulated in double.
#define TESSERA_SUBSPACE_CHANGE_OP(T)                                                          \
  double subspace_change(Backend<T>& be, const double* U, const double* Unew, const double* M, \
                         std::int64_t rows, int R)
/// sum_k x[k]^2 over n doubles in backend memory, accumulated in double.
#define TESSERA_SUM_SQUARES_DOUBLE_OP(T) \
  double sum_squares_double(Backend<T>& be, const double* x, std::size_t n)
/// dst[k] = T(src[k]) for k < n (double to the tensor's type, backend memory).
#define TESSERA_CONVERT_FROM_DOUBLE_OP(T) \
  void convert_from_double(Backend<T>& be, const double* src, std::size_t n, T* dst)
/// dst (rows x C) row j = sum of src rows row[ptr[j]] .. row[ptr[j + 1] - 1], added in that
/// order (deterministic); ptr (rows + 1 entries) and row are on the host, src and dst in
/// backend memory (Tucker: TTMc rows received from other ranks combined on their owner).
#define TESSERA_SUM_ROWS_OP(T)                                                      \
  void sum_rows(Backend<T>& be, const T* src, const std::vector<std::int64_t>& ptr, \
                const std::vector<std::int64_t>& row, std::int64_t C, T* dst)
/// dst row dst_row[i] += src row i for i < rows (rows x C, row-major, backend memory); an
/// empty dst_row means dst row i += src row i. The dst_row entries must be distinct. dst_row
/// is on the host. (Memory tier 3: a chunk's MTTKRP or TTMc rows added into the whole
/// output.)
#define TESSERA_ADD_ROWS_OP(T)                                                   \
  void add_rows(Backend<T>& be, const T* src, std::int64_t rows, std::int64_t C, \
                const std::vector<std::int64_t>& dst_row, T* dst)

namespace tessera::kernels {

/// eig_lanczos_counts' answer.
struct EigLanczosCounts {
  std::int64_t answered = 0, declined = 0;
};

TESSERA_DECLARE_OP(TESSERA_WIDE_GRAM_OP)
TESSERA_DECLARE_OP(TESSERA_WIDE_TIMES_OP)
TESSERA_DECLARE_OP(TESSERA_WIDE_TIMES_T_OP)
TESSERA_DECLARE_OP(TESSERA_WIDE_SCRATCH_BYTES_OP)
TESSERA_DECLARE_OP(TESSERA_SYMMETRIC_EIG_TOP_OP)
TESSERA_DECLARE_OP(TESSERA_EIG_IN_ONE_BLOCK_OP)
TESSERA_DECLARE_OP(TESSERA_EIG_LANCZOS_COUNTS_OP)
TESSERA_DECLARE_OP(TESSERA_GATHER_ROWS_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_SCATTER_ROWS_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_GRAM_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_INNER_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_TIMES_SMALL_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_CHOLQR_STEP_OP)
TESSERA_DECLARE_OP(TESSERA_SUBSPACE_CHANGE_OP)
TESSERA_DECLARE_OP(TESSERA_SUM_SQUARES_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_CONVERT_FROM_DOUBLE_OP)
TESSERA_DECLARE_OP(TESSERA_SUM_ROWS_OP)
TESSERA_DECLARE_OP(TESSERA_ADD_ROWS_OP)

namespace ops {

/// The cuda backend's one-block eigen-solver (float only): n <= 256 and k <= 16. Measured on
/// an H200 it is 3.2x faster than cuSOLVER's dsyevdx at n = 64, 3.1x at 128 and 1.3x at 256
/// (docs/perf/gpu-h200-tucker.md, sessions 34 and 35).
inline constexpr int kBlockEigMaxN = 256;
inline constexpr int kBlockEigMaxK = 16;
constexpr bool block_eig_applies(int n, int k) {
  return n >= 1 && n <= kBlockEigMaxN && k >= 1 && k <= kBlockEigMaxK && k <= n;
}

template <typename T>
inline TESSERA_WIDE_GRAM_OP(T) {
  TESSERA_DISPATCH(be, wide_gram, Y, rows, C, S);
}
template <typename T>
inline TESSERA_WIDE_TIMES_OP(T) {
  TESSERA_DISPATCH(be, wide_times, Y, rows, C, W, R, Z);
}
template <typename T>
inline TESSERA_WIDE_TIMES_T_OP(T) {
  TESSERA_DISPATCH(be, wide_times_t, Y, rows, C, P, R, B);
}
template <typename T>
inline TESSERA_WIDE_SCRATCH_BYTES_OP(T) {
  TESSERA_DISPATCH(be, wide_scratch_bytes, C);
}
template <typename T>
inline TESSERA_SYMMETRIC_EIG_TOP_OP(T) {
  TESSERA_DISPATCH(be, symmetric_eig_top, S, n, k, w_host, V);
}
template <typename T>
inline TESSERA_EIG_IN_ONE_BLOCK_OP(T) {
  TESSERA_DISPATCH(be, eig_in_one_block, n, k);
}
template <typename T>
inline TESSERA_EIG_LANCZOS_COUNTS_OP(T) {
  TESSERA_DISPATCH(be, eig_lanczos_counts);
}
template <typename T>
inline TESSERA_GATHER_ROWS_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, gather_rows_double, U, R, pos, rows, P);
}
template <typename T>
inline TESSERA_SCATTER_ROWS_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, scatter_rows_double, Z, rows, R, pos, len, host_scale, U);
}
template <typename T>
inline TESSERA_GRAM_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, gram_double, U, rows, R, G);
}
template <typename T>
inline TESSERA_INNER_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, inner_double, A, B, rows, R, M);
}
template <typename T>
inline TESSERA_TIMES_SMALL_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, times_small_double, U, rows, R, M);
}
template <typename T>
inline TESSERA_CHOLQR_STEP_OP(T) {
  TESSERA_DISPATCH(be, cholqr_step, U, rows, R, G, host_dev);
}
template <typename T>
inline TESSERA_SUBSPACE_CHANGE_OP(T) {
  TESSERA_DISPATCH(be, subspace_change, U, Unew, M, rows, R);
}
template <typename T>
inline TESSERA_SUM_SQUARES_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, sum_squares_double, x, n);
}
template <typename T>
inline TESSERA_CONVERT_FROM_DOUBLE_OP(T) {
  TESSERA_DISPATCH(be, convert_from_double, src, n, dst);
}
template <typename T>
inline TESSERA_SUM_ROWS_OP(T) {
  TESSERA_DISPATCH(be, sum_rows, src, ptr, row, C, dst);
}
template <typename T>
inline TESSERA_ADD_ROWS_OP(T) {
  TESSERA_DISPATCH(be, add_rows, src, rows, C, dst_row, dst);
}

}  // namespace ops
}  // namespace tessera::kernels
