// The reference backend's dense operations of CP-ALS (kernels/ops/dense.hpp, row_update.hpp,
// cp_device.hpp): tessera::linalg, serially.
#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/row_update.hpp"
#include "linalg/dense.hpp"
#include "linalg/row_update.hpp"

namespace tessera::kernels::reference {

template <typename T>
TESSERA_GRAM_OP(T) {
  (void)be;
  linalg::gram(A, rows, R, G);
}
template <typename T>
TESSERA_HADAMARD_OP(T) {
  (void)be;
  linalg::hadamard(Gs, R, V);
}
template <typename T>
TESSERA_SOLVE_NORMAL_OP(T) {
  (void)be;
  return linalg::solve_normal(M, rows, V, R);
}
template <typename T>
TESSERA_COLUMN_NORMS_OP(T) {
  (void)be;
  linalg::column_norms(A, rows, R, kind, host_out);
}
template <typename T>
TESSERA_SCALE_COLUMNS_OP(T) {
  (void)be;
  linalg::scale_columns(A, rows, R, host_scale);
}
template <typename T>
TESSERA_COLUMN_DOTS_OP(T) {
  (void)be;
  linalg::column_dots(A, B, rows, R, host_out);
}
template <typename T>
TESSERA_PACK_OUTER_OP(T) {
  (void)be;
  linalg::pack_outer(A, rows, R, P, 1);
}
template <typename T>
TESSERA_ROW_UPDATE_OP(T) {
  (void)be;
  return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, 1);
}

// The host backends (this one and cpu) run the dense steps per operation.
template <typename T>
TESSERA_CP_DEVICE_LOOP_OP(T) {
  (void)spec;
  if (why) *why = "the " + be.name() + " backend runs the dense steps on the host";
  return nullptr;
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

}  // namespace tessera::kernels::reference
