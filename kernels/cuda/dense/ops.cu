// The cuda:: definitions of the dense CP operations (kernels/ops/dense.hpp,
// row_update.hpp, cp_device.hpp): on the executor's context (runtime/backend.cuh); the
// work is in dense.cu, row_update.cu and cp_device.cu.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/row_update.hpp"

namespace tessera::kernels::cuda {

template <typename T>
void gram(Backend<T>& be, const T* A, std::int64_t rows, int R, T* G) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::gram(ctx, A, rows, R, G);
}
TESSERA_INSTANTIATE_OP(TESSERA_GRAM_OP);

template <typename T>
void hadamard(Backend<T>& be, const std::vector<const T*>& Gs, int R, T* V) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::hadamard(ctx, Gs, R, V);
}
TESSERA_INSTANTIATE_OP(TESSERA_HADAMARD_OP);

template <typename T>
bool solve_normal(Backend<T>& be, T* M, std::int64_t rows, const T* V, int R) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::solve_normal(ctx, M, rows, V, R);
}
TESSERA_INSTANTIATE_OP(TESSERA_SOLVE_NORMAL_OP);

template <typename T>
void column_norms(Backend<T>& be, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::column_norms(ctx, A, rows, R, kind, host_out);
}
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_NORMS_OP);

template <typename T>
void scale_columns(Backend<T>& be, T* A, std::int64_t rows, int R, const double* host_scale) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::scale_columns(ctx, A, rows, R, host_scale);
}
TESSERA_INSTANTIATE_OP(TESSERA_SCALE_COLUMNS_OP);

template <typename T>
void column_dots(Backend<T>& be, const T* A, const T* B, std::int64_t rows, int R,
                 double* host_out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::column_dots(ctx, A, B, rows, R, host_out);
}
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_DOTS_OP);

template <typename T>
void pack_outer(Backend<T>& be, const T* A, std::int64_t rows, int R, T* P) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::pack_outer(ctx, A, rows, R, P);
}
TESSERA_INSTANTIATE_OP(TESSERA_PACK_OUTER_OP);

template <typename T>
std::int64_t row_update(Backend<T>& be, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::row_update(ctx, A, M, rows, R, V, Gp, u, host_quad);
}
TESSERA_INSTANTIATE_OP(TESSERA_ROW_UPDATE_OP);

template <typename T>
std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(Backend<T>& be, const CpLoopSpec<T>& spec,
                                                std::string* why) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::make_cp_loop(ctx, spec, why);
}
TESSERA_INSTANTIATE_OP(TESSERA_CP_DEVICE_LOOP_OP);

}  // namespace tessera::kernels::cuda
