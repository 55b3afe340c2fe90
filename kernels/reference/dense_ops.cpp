// The reference backend's dense operations of CP-ALS (kernels/ops/dense.hpp, row_update.hpp,
// cp_device.hpp): tessera::linalg, serially.
#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/row_update.hpp"
#include "linalg/dense.hpp"
#include "linalg/row_update.hpp"

namespace tessera::kernels::reference {

template <typename T>
void gram(Backend<T>& be, const T* A, std::int64_t rows, int R, T* G) {
  (void)be;
  linalg::gram(A, rows, R, G);
}
template <typename T>
void hadamard(Backend<T>& be, const std::vector<const T*>& Gs, int R, T* V) {
  (void)be;
  linalg::hadamard(Gs, R, V);
}
template <typename T>
bool solve_normal(Backend<T>& be, T* M, std::int64_t rows, const T* V, int R) {
  (void)be;
  return linalg::solve_normal(M, rows, V, R);
}
template <typename T>
void column_norms(Backend<T>& be, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out) {
  (void)be;
  linalg::column_norms(A, rows, R, kind, host_out);
}
template <typename T>
void scale_columns(Backend<T>& be, T* A, std::int64_t rows, int R, const double* host_scale) {
  (void)be;
  linalg::scale_columns(A, rows, R, host_scale);
}
template <typename T>
void column_dots(Backend<T>& be, const T* A, const T* B, std::int64_t rows, int R,
                 double* host_out) {
  (void)be;
  linalg::column_dots(A, B, rows, R, host_out);
}
template <typename T>
void pack_outer(Backend<T>& be, const T* A, std::int64_t rows, int R, T* P) {
  (void)be;
  linalg::pack_outer(A, rows, R, P, 1);
}
template <typename T>
std::int64_t row_update(Backend<T>& be, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad) {
  (void)be;
  return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, 1);
}

// The host backends (this one and cpu) run the dense steps per operation.
template <typename T>
std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(Backend<T>& be, const CpLoopSpec<T>& spec,
                                                std::string* why) {
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
