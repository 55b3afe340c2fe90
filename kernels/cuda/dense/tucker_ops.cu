// The cuda:: definitions of Tucker's dense operations (kernels/ops/tucker_dense.hpp): on
// the executor's context (runtime/backend.cuh); the work is in tucker_dense.cu and, for the
// wide products and row sums, dense.cu.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/tucker_dense.hpp"

namespace tessera::kernels::cuda {

template <typename T>
void wide_gram(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::wide_gram(ctx, Y, rows, C, S);
}
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_GRAM_OP);

template <typename T>
void wide_times(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* W,
                int R, double* Z) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::wide_times(ctx, Y, rows, C, W, R, Z);
}
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_OP);

template <typename T>
void wide_times_t(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::wide_times_t(ctx, Y, rows, C, P, R, B);
}
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_T_OP);

template <typename T>
bool eig_in_one_block(const Backend<T>& be, int n, int k) {
  return std::is_same_v<T, float> && cuda::block_eig_fits(executor(be).ctx(), n, k);
}
TESSERA_INSTANTIATE_OP(TESSERA_EIG_IN_ONE_BLOCK_OP);

template <typename T>
EigLanczosCounts eig_lanczos_counts(const Backend<T>& be) {
  const Context& ctx = executor(be).ctx();
  return {ctx.eig_lanczos.answered, ctx.eig_lanczos.declined};
}
TESSERA_INSTANTIATE_OP(TESSERA_EIG_LANCZOS_COUNTS_OP);

template <typename T>
void symmetric_eig_top(Backend<T>& be, double* S, int n, int k, double* w_host, double* V) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  if (eig_in_one_block(be, n, k))  // the run record's answer (dense_method) is this one
    cuda::block_symmetric_eig_top(ctx, S, n, k, w_host, V);
  else
    cuda::symmetric_eig_top(ctx, S, n, k, w_host, V);
}
TESSERA_INSTANTIATE_OP(TESSERA_SYMMETRIC_EIG_TOP_OP);

template <typename T>
std::size_t wide_scratch_bytes(const Backend<T>& be, std::int64_t C) {
  (void)be;
  return cuda::wide_scratch_bytes(C, sizeof(T));
}
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_SCRATCH_BYTES_OP);

template <typename T>
void gather_rows_double(Backend<T>& be, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::gather_rows_double(ctx, U, R, pos, rows, P);
}
TESSERA_INSTANTIATE_OP(TESSERA_GATHER_ROWS_DOUBLE_OP);

template <typename T>
void scatter_rows_double(Backend<T>& be, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::scatter_rows_double(ctx, Z, rows, R, pos, len, host_scale, U);
}
TESSERA_INSTANTIATE_OP(TESSERA_SCATTER_ROWS_DOUBLE_OP);

template <typename T>
void gram_double(Backend<T>& be, const double* U, std::int64_t rows, int R, double* G) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::gram_double(ctx, U, rows, R, G);
}
TESSERA_INSTANTIATE_OP(TESSERA_GRAM_DOUBLE_OP);

template <typename T>
void inner_double(Backend<T>& be, const double* A, const double* B, std::int64_t rows, int R,
                  double* M) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::inner_double(ctx, A, B, rows, R, M);
}
TESSERA_INSTANTIATE_OP(TESSERA_INNER_DOUBLE_OP);

template <typename T>
void times_small_double(Backend<T>& be, double* U, std::int64_t rows, int R, const double* M) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::times_small_double(ctx, U, rows, R, M);
}
TESSERA_INSTANTIATE_OP(TESSERA_TIMES_SMALL_DOUBLE_OP);

template <typename T>
bool cholqr_step(Backend<T>& be, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::cholqr_step(ctx, U, rows, R, G, host_dev);
}
TESSERA_INSTANTIATE_OP(TESSERA_CHOLQR_STEP_OP);

template <typename T>
double subspace_change(Backend<T>& be, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::subspace_change(ctx, U, Unew, M, rows, R);
}
TESSERA_INSTANTIATE_OP(TESSERA_SUBSPACE_CHANGE_OP);

template <typename T>
double sum_squares_double(Backend<T>& be, const double* x, std::size_t n) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::sum_squares_double(ctx, x, n);
}
TESSERA_INSTANTIATE_OP(TESSERA_SUM_SQUARES_DOUBLE_OP);

template <typename T>
void convert_from_double(Backend<T>& be, const double* src, std::size_t n, T* dst) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::convert_from_double<T>(ctx, src, n, dst);
}
TESSERA_INSTANTIATE_OP(TESSERA_CONVERT_FROM_DOUBLE_OP);

template <typename T>
void sum_rows(Backend<T>& be, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::sum_rows(ctx, src, ptr, row, C, dst);
}
TESSERA_INSTANTIATE_OP(TESSERA_SUM_ROWS_OP);

template <typename T>
void add_rows(Backend<T>& be, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::add_rows(ctx, src, rows, C, dst_row, dst);
}
TESSERA_INSTANTIATE_OP(TESSERA_ADD_ROWS_OP);

}  // namespace tessera::kernels::cuda
