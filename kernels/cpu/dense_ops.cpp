// The cpu backend's dense operations (kernels/ops/dense.hpp, row_update.hpp, cp_device.hpp,
// tucker_dense.hpp): tessera::linalg over the backend's OpenMP team for CP-ALS; Tucker's
// dense stage and the (absent) device loop are the reference backend's host versions
// (kernels/reference/tucker_dense.cpp, dense_ops.cpp).
#include "kernels/cpu/backend.hpp"
#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/row_update.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "linalg/dense.hpp"
#include "linalg/row_update.hpp"

namespace tessera::kernels::cpu {

namespace {
template <typename T>
int team_of(const Backend<T>& be) {
  return static_cast<const CpuBackend<T>&>(be).threads();
}
}  // namespace

// ---- CP-ALS ----

template <typename T>
TESSERA_GRAM_OP(T) {
  linalg::gram(A, rows, R, G, team_of(be));
}
template <typename T>
TESSERA_HADAMARD_OP(T) {
  (void)be;
  linalg::hadamard(Gs, R, V);
}
template <typename T>
TESSERA_SOLVE_NORMAL_OP(T) {
  return linalg::solve_normal(M, rows, V, R, team_of(be));
}
template <typename T>
TESSERA_COLUMN_NORMS_OP(T) {
  linalg::column_norms(A, rows, R, kind, host_out, team_of(be));
}
template <typename T>
TESSERA_SCALE_COLUMNS_OP(T) {
  linalg::scale_columns(A, rows, R, host_scale, team_of(be));
}
template <typename T>
TESSERA_COLUMN_DOTS_OP(T) {
  linalg::column_dots(A, B, rows, R, host_out, team_of(be));
}
template <typename T>
TESSERA_PACK_OUTER_OP(T) {
  linalg::pack_outer(A, rows, R, P, team_of(be));
}
template <typename T>
TESSERA_ROW_UPDATE_OP(T) {
  return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, team_of(be));
}
template <typename T>
TESSERA_CP_DEVICE_LOOP_OP(T) {
  return reference::cp_device_loop(be, spec, why);
}

// ---- Tucker's dense stage ----

template <typename T>
TESSERA_WIDE_GRAM_OP(T) {
  reference::wide_gram(be, Y, rows, C, S);
}
template <typename T>
TESSERA_WIDE_TIMES_OP(T) {
  reference::wide_times(be, Y, rows, C, W, R, Z);
}
template <typename T>
TESSERA_WIDE_TIMES_T_OP(T) {
  reference::wide_times_t(be, Y, rows, C, P, R, B);
}
template <typename T>
TESSERA_WIDE_SCRATCH_BYTES_OP(T) {
  return reference::wide_scratch_bytes(be, C);
}
template <typename T>
TESSERA_SYMMETRIC_EIG_TOP_OP(T) {
  reference::symmetric_eig_top(be, S, n, k, w_host, V);
}
template <typename T>
TESSERA_GATHER_ROWS_DOUBLE_OP(T) {
  reference::gather_rows_double(be, U, R, pos, rows, P);
}
template <typename T>
TESSERA_SCATTER_ROWS_DOUBLE_OP(T) {
  reference::scatter_rows_double(be, Z, rows, R, pos, len, host_scale, U);
}
template <typename T>
TESSERA_GRAM_DOUBLE_OP(T) {
  reference::gram_double(be, U, rows, R, G);
}
template <typename T>
TESSERA_INNER_DOUBLE_OP(T) {
  reference::inner_double(be, A, B, rows, R, M);
}
template <typename T>
TESSERA_TIMES_SMALL_DOUBLE_OP(T) {
  reference::times_small_double(be, U, rows, R, M);
}
template <typename T>
TESSERA_CHOLQR_STEP_OP(T) {
  return reference::cholqr_step(be, U, rows, R, G, host_dev);
}
template <typename T>
TESSERA_SUBSPACE_CHANGE_OP(T) {
  return reference::subspace_change(be, U, Unew, M, rows, R);
}
template <typename T>
TESSERA_SUM_SQUARES_DOUBLE_OP(T) {
  return reference::sum_squares_double(be, x, n);
}
template <typename T>
TESSERA_CONVERT_FROM_DOUBLE_OP(T) {
  reference::convert_from_double(be, src, n, dst);
}
template <typename T>
TESSERA_SUM_ROWS_OP(T) {
  reference::sum_rows(be, src, ptr, row, C, dst);
}
template <typename T>
TESSERA_ADD_ROWS_OP(T) {
  reference::add_rows(be, src, rows, C, dst_row, dst);
}

TESSERA_INSTANTIATE_OP(TESSERA_GRAM_OP);
TESSERA_INSTANTIATE_OP(TESSERA_HADAMARD_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SOLVE_NORMAL_OP);
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_NORMS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SCALE_COLUMNS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_DOTS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_PACK_OUTER_OP);
TESSERA_INSTANTIATE_OP(TESSERA_ROW_UPDATE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CP_DEVICE_LOOP_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_GRAM_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_TIMES_T_OP);
TESSERA_INSTANTIATE_OP(TESSERA_WIDE_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_SYMMETRIC_EIG_TOP_OP);
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

}  // namespace tessera::kernels::cpu
