// CPU-only build: the CUDA backend's entry points exist and say why they cannot run. The
// cuda:: operations (kernels/ops/) are never reached (no cuda executor can be made here);
// they link, and throw Error "built without CUDA" if called directly.
#include "kernels/factories.hpp"
#include "kernels/ops.hpp"
#include "kernels/ops/apr.hpp"
#include "util/error.hpp"

namespace tessera::kernels {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
DeviceMemory cuda_memory_info(bool, int) {
  return {};
}
int cuda_current_device() {
  return -1;
}

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend() {
  TESSERA_THROW(
      "the cuda backend was requested, but Tessera was built without CUDA "
      "(reconfigure with -DTESSERA_WITH_CUDA=ON where the CUDA toolkit is installed)");
}
template std::unique_ptr<Backend<float>> make_cuda_backend<float>();
template std::unique_ptr<Backend<double>> make_cuda_backend<double>();

namespace cuda {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
// kernels/ops/mttkrp.hpp
TESSERA_STUB_OP(TESSERA_MTTKRP_OP);
TESSERA_STUB_OP(TESSERA_MTTKRP_ROW_RANGES_OP);
TESSERA_STUB_OP(TESSERA_MTTKRP_ROWS_OP);
TESSERA_STUB_OP(TESSERA_MTTKRP_ACCUMULATE_OP);
TESSERA_STUB_OP(TESSERA_PREPARE_STREAM_CHUNK_OP);
TESSERA_STUB_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP);
TESSERA_STUB_OP(TESSERA_ROW_GRAMS_OP);
TESSERA_STUB_OP(TESSERA_FUSES_COMPLETION_OP);
TESSERA_STUB_OP(TESSERA_COMPLETION_ROWS_OP);
TESSERA_STUB_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP);
// kernels/ops/ttmc.hpp
TESSERA_STUB_OP(TESSERA_TTMC_ROWS_OP);
TESSERA_STUB_OP(TESSERA_TTMC_SCRATCH_BYTES_OP);
TESSERA_STUB_OP(TESSERA_TTMC_OP);
// kernels/ops/sptc.hpp
TESSERA_STUB_OP(TESSERA_CONTRACT_PLAN_OP);
TESSERA_STUB_OP(TESSERA_CONTRACT_OP);
TESSERA_STUB_OP(TESSERA_CONTRACT_INTO_OP);
TESSERA_STUB_OP(TESSERA_CONTRACT_ROUTE_OP);
// kernels/ops/dense.hpp
TESSERA_STUB_OP(TESSERA_GRAM_OP);
TESSERA_STUB_OP(TESSERA_HADAMARD_OP);
TESSERA_STUB_OP(TESSERA_SOLVE_NORMAL_OP);
TESSERA_STUB_OP(TESSERA_COLUMN_NORMS_OP);
TESSERA_STUB_OP(TESSERA_SCALE_COLUMNS_OP);
TESSERA_STUB_OP(TESSERA_COLUMN_DOTS_OP);
TESSERA_STUB_OP(TESSERA_PACK_OUTER_OP);
// kernels/ops/gcp.hpp
TESSERA_STUB_OP(TESSERA_GCP_GRADIENT_OP);
TESSERA_STUB_OP(TESSERA_GCP_ENTRIES_OP);
TESSERA_STUB_OP(TESSERA_GCP_SAMPLED_GRADIENT_OP);
TESSERA_STUB_OP(TESSERA_ADAM_STEP_OP);
// kernels/ops/row_update.hpp
TESSERA_STUB_OP(TESSERA_ROW_UPDATE_OP);
// kernels/ops/cp_device.hpp
TESSERA_STUB_OP(TESSERA_CP_DEVICE_LOOP_OP);
// kernels/ops/tucker_dense.hpp
TESSERA_STUB_OP(TESSERA_WIDE_GRAM_OP);
TESSERA_STUB_OP(TESSERA_WIDE_TIMES_OP);
TESSERA_STUB_OP(TESSERA_WIDE_TIMES_T_OP);
TESSERA_STUB_OP(TESSERA_WIDE_SCRATCH_BYTES_OP);
TESSERA_STUB_OP(TESSERA_SYMMETRIC_EIG_TOP_OP);
TESSERA_STUB_OP(TESSERA_EIG_IN_ONE_BLOCK_OP);
TESSERA_STUB_OP(TESSERA_GATHER_ROWS_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_SCATTER_ROWS_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_GRAM_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_INNER_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_TIMES_SMALL_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_CHOLQR_STEP_OP);
TESSERA_STUB_OP(TESSERA_SUBSPACE_CHANGE_OP);
TESSERA_STUB_OP(TESSERA_SUM_SQUARES_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_CONVERT_FROM_DOUBLE_OP);
TESSERA_STUB_OP(TESSERA_SUM_ROWS_OP);
TESSERA_STUB_OP(TESSERA_ADD_ROWS_OP);
// kernels/ops/apr.hpp
TESSERA_STUB_OP(TESSERA_POISSON_PHI_OP);
TESSERA_STUB_OP(TESSERA_APR_KKT_UPDATE_OP);
TESSERA_STUB_OP(TESSERA_APR_SHIFT_OP);
TESSERA_STUB_OP(TESSERA_COLUMN_SUMS_OP);
#pragma GCC diagnostic pop

}  // namespace cuda

}  // namespace tessera::kernels
