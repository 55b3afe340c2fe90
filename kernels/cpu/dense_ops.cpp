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
/// The backend's --threads as given (0: the dense routines' own default).
template <typename T>
int threads_of(const Backend<T>& be) {
  return static_cast<const CpuBackend<T>&>(be).threads();
}
}  // namespace

// ---- CP-ALS ----

template <typename T>
void gram(Backend<T>& be, const T* A, std::int64_t rows, int R, T* G) {
  linalg::gram(A, rows, R, G, threads_of(be));
}
template <typename T>
void hadamard(Backend<T>& be, const std::vector<const T*>& Gs, int R, T* V) {
  (void)be;
  linalg::hadamard(Gs, R, V);
}
template <typename T>
bool solve_normal(Backend<T>& be, T* M, std::int64_t rows, const T* V, int R) {
  return linalg::solve_normal(M, rows, V, R, threads_of(be));
}
template <typename T>
void column_norms(Backend<T>& be, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out) {
  linalg::column_norms(A, rows, R, kind, host_out, threads_of(be));
}
template <typename T>
void scale_columns(Backend<T>& be, T* A, std::int64_t rows, int R, const double* host_scale) {
  linalg::scale_columns(A, rows, R, host_scale, threads_of(be));
}
template <typename T>
void column_dots(Backend<T>& be, const T* A, const T* B, std::int64_t rows, int R,
                 double* host_out) {
  linalg::column_dots(A, B, rows, R, host_out, threads_of(be));
}
template <typename T>
void pack_outer(Backend<T>& be, const T* A, std::int64_t rows, int R, T* P) {
  linalg::pack_outer(A, rows, R, P, threads_of(be));
}
template <typename T>
std::int64_t row_update(Backend<T>& be, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad) {
  return linalg::row_update(A, M, rows, R, V, Gp, u, host_quad, threads_of(be));
}
template <typename T>
std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(Backend<T>& be, const CpLoopSpec<T>& spec,
                                                std::string* why) {
  return reference::cp_device_loop(be, spec, why);
}

// ---- Tucker's dense stage ----

template <typename T>
void wide_gram(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  reference::wide_gram(be, Y, rows, C, S);
}
template <typename T>
void wide_times(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* W,
                int R, double* Z) {
  reference::wide_times(be, Y, rows, C, W, R, Z);
}
template <typename T>
void wide_times_t(Backend<T>& be, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B) {
  reference::wide_times_t(be, Y, rows, C, P, R, B);
}
template <typename T>
std::size_t wide_scratch_bytes(const Backend<T>& be, std::int64_t C) {
  return reference::wide_scratch_bytes(be, C);
}
template <typename T>
void symmetric_eig_top(Backend<T>& be, double* S, int n, int k, double* w_host, double* V) {
  reference::symmetric_eig_top(be, S, n, k, w_host, V);
}
template <typename T>
bool eig_in_one_block(const Backend<T>& be, int n, int k) {
  return reference::eig_in_one_block(be, n, k);
}
template <typename T>
EigLanczosCounts eig_lanczos_counts(const Backend<T>& be) {
  return reference::eig_lanczos_counts(be);
}
template <typename T>
void gather_rows_double(Backend<T>& be, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P) {
  reference::gather_rows_double(be, U, R, pos, rows, P);
}
template <typename T>
void scatter_rows_double(Backend<T>& be, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U) {
  reference::scatter_rows_double(be, Z, rows, R, pos, len, host_scale, U);
}
template <typename T>
void gram_double(Backend<T>& be, const double* U, std::int64_t rows, int R, double* G) {
  reference::gram_double(be, U, rows, R, G);
}
template <typename T>
void inner_double(Backend<T>& be, const double* A, const double* B, std::int64_t rows, int R,
                  double* M) {
  reference::inner_double(be, A, B, rows, R, M);
}
template <typename T>
void times_small_double(Backend<T>& be, double* U, std::int64_t rows, int R, const double* M) {
  reference::times_small_double(be, U, rows, R, M);
}
template <typename T>
bool cholqr_step(Backend<T>& be, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev) {
  return reference::cholqr_step(be, U, rows, R, G, host_dev);
}
template <typename T>
double subspace_change(Backend<T>& be, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R) {
  return reference::subspace_change(be, U, Unew, M, rows, R);
}
template <typename T>
double sum_squares_double(Backend<T>& be, const double* x, std::size_t n) {
  return reference::sum_squares_double(be, x, n);
}
template <typename T>
void convert_from_double(Backend<T>& be, const double* src, std::size_t n, T* dst) {
  reference::convert_from_double(be, src, n, dst);
}
template <typename T>
void sum_rows(Backend<T>& be, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  reference::sum_rows(be, src, ptr, row, C, dst);
}
template <typename T>
void add_rows(Backend<T>& be, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst) {
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
TESSERA_INSTANTIATE_OP(TESSERA_EIG_IN_ONE_BLOCK_OP);
TESSERA_INSTANTIATE_OP(TESSERA_EIG_LANCZOS_COUNTS_OP);
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
