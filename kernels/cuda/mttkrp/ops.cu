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
void mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode,
            const std::vector<const T*>& factors, int R, T* out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::mttkrp(ctx, x, mode, factors, R, out);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_OP);

template <typename T>
RowRanges mttkrp_row_ranges(Backend<T>& be, const TensorHandle<T>& x, int mode,
                            const std::vector<std::int64_t>& bounds) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  return cuda::mttkrp_row_ranges(ctx, x, mode, bounds);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROW_RANGES_OP);

template <typename T>
void mttkrp_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo,
                 std::int64_t row_hi) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::mttkrp_rows(ctx, x, mode, factors, R, out, row_lo, row_hi);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROWS_OP);

template <typename T>
void row_grams(Backend<T>& be, const TensorHandle<T>& x, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::row_grams(ctx, x, mode, factors, packed, R, out);
}
TESSERA_INSTANTIATE_OP(TESSERA_ROW_GRAMS_OP);

template <typename T>
bool fuses_completion(const Backend<T>& be, int R) {
  return cuda::fuses_completion<T>(executor(be).ctx(), R);
}
TESSERA_INSTANTIATE_OP(TESSERA_FUSES_COMPLETION_OP);

template <typename T>
void completion_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                     const std::vector<const T*>& factors, int R, T* out, T* grams) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  cuda::completion_rows(ctx, x, mode, factors, R, out, grams);
}
TESSERA_INSTANTIATE_OP(TESSERA_COMPLETION_ROWS_OP);

template <typename T>
void mttkrp_accumulate(Backend<T>& be, const SparseTensor<T>& chunk, int mode,
                       const std::vector<const T*>& factors, int R, T* out, int sorted_mode,
                       bool persistent) {
  CudaBackend<T>& b = executor(be);
  DeviceGuard g(b.ctx().device);
  b.accumulator().accumulate(chunk, mode, factors, R, out, b.memory_budget(), sorted_mode,
                             persistent);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ACCUMULATE_OP);

template <typename T>
int prepare_stream_chunk(Backend<T>& be, SparseTensor<T>& chunk) {
  (void)be;
  return cuda::sort_stream_chunk(chunk);
}
TESSERA_INSTANTIATE_OP(TESSERA_PREPARE_STREAM_CHUNK_OP);

template <typename T>
std::size_t stream_chunk_scratch_bytes(const Backend<T>& be, nnz_t chunk_nnz) {
  (void)be;
  return static_cast<std::size_t>(chunk_nnz) * 2 * sizeof(std::int64_t);
}
TESSERA_INSTANTIATE_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP);

template <typename T>
AccumulateTimes take_accumulate_times(Backend<T>& be) {
  CudaBackend<T>& b = executor(be);
  DeviceGuard g(b.ctx().device);
  if (b.ctx().capturing) return {};  // nothing has run yet
  ChunkAccumulator<T>* a = b.accumulator_if_made();
  AccumulateTimes t;
  if (a)
    t = a->take_times();  // waits for the backend's stream too
  else
    b.ctx().sync();
  // The replays of captured streamed pieces (the accumulator's and the streamed format's).
  const AccumulateTimes replays = b.ctx().graph_timer.take();
  t.copy += replays.copy;
  t.compute += replays.compute;
  t.chunks += replays.chunks;
  return t;
}
TESSERA_INSTANTIATE_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP);

}  // namespace tessera::kernels::cuda
