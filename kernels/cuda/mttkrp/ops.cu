// The cuda:: definitions of the MTTKRP operations (kernels/ops/mttkrp.hpp): on the
// executor's context (runtime/backend.cuh); the work is in mttkrp.cu and stream.cu.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/mttkrp/stream.cuh"
#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/mttkrp.hpp"

namespace tessera::kernels::cuda {

template <typename T>
TESSERA_MTTKRP_OP(T) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::mttkrp(ctx, x, mode, factors, R, out);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_OP);

template <typename T>
TESSERA_MTTKRP_ACCUMULATE_OP(T) {
  CudaBackend<T>& b = executor(be);
  DeviceGuard g(b.ctx().device);
  b.accumulator().accumulate(chunk, mode, factors, R, out, b.memory_budget(), sorted_mode);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ACCUMULATE_OP);

template <typename T>
TESSERA_PREPARE_STREAM_CHUNK_OP(T) {
  (void)be;
  return cuda::sort_stream_chunk(chunk);
}
TESSERA_INSTANTIATE_OP(TESSERA_PREPARE_STREAM_CHUNK_OP);

template <typename T>
TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP(T) {
  (void)be;
  return static_cast<std::size_t>(chunk_nnz) * 2 * sizeof(std::int64_t);
}
TESSERA_INSTANTIATE_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP);

template <typename T>
TESSERA_TAKE_ACCUMULATE_TIMES_OP(T) {
  CudaBackend<T>& b = executor(be);
  DeviceGuard g(b.ctx().device);
  ChunkAccumulator<T>* a = b.accumulator_if_made();
  return a ? a->take_times() : AccumulateTimes{};
}
TESSERA_INSTANTIATE_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP);

}  // namespace tessera::kernels::cuda
