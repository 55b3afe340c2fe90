// The cuda:: definitions of the TTMc operations (kernels/ops/ttmc.hpp): on the executor's
// context (runtime/backend.cuh); the work is in ttmc.cu.
#include <cstddef>
#include <vector>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/ttmc.hpp"

namespace tessera::kernels::cuda {

template <typename T>
std::vector<index_t> ttmc_rows(Backend<T>& be, const TensorHandle<T>& x, int mode) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::ttmc_rows(ctx, x, mode);
}
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_ROWS_OP);

template <typename T>
std::size_t ttmc_scratch_bytes(Backend<T>& be, const TensorHandle<T>& x, int mode,
                               const std::vector<int>& ranks) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::ttmc_scratch_bytes(ctx, x, mode, ranks);
}
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_SCRATCH_BYTES_OP);

template <typename T>
void ttmc(Backend<T>& be, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::ttmc(ctx, x, mode, factors, ranks, out);
}
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_OP);

}  // namespace tessera::kernels::cuda
