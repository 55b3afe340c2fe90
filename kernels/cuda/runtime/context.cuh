// Internal to the CUDA backend: the per-backend context (device, blocking stream, cuBLAS
// and cuSOLVER handles, scratch; defined in context.cu), the device guards and the grid
// size of grid-stride loops.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstdint>
#include <functional>

#include "kernels/backend.hpp"
#include "kernels/cuda/runtime/cuda_check.cuh"
#include "kernels/cuda/runtime/memory.cuh"

namespace tessera::kernels::cuda {

struct Context;

/// Times of streamed pieces captured into a CUDA graph (the CP device loop at memory tier 2:
/// the chunk accumulator of mttkrp/stream.cu and the backend's streamed format,
/// mttkrp/handle.cuh). Each captured piece records its copy begin and end and its compute
/// begin and end as event nodes (cudaEventRecordExternal); a capture's first piece also adds
/// a one-thread kernel that counts the graph's replays in mapped host memory. take(), once
/// the device has finished, sums the last replay's pieces, once per replay since the last
/// take() (only the last replay's events can be read; the CP loop takes after every replay).
class GraphTimer {
 public:
  enum { kCopyBegin = 0, kCopyEnd, kComputeBegin, kComputeEnd, kPoints };
  GraphTimer() = default;
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;
  /// Inside a capture from ctx.stream: the index of a new piece. The first piece of a new
  /// capture (Context::capture_seq) forgets the earlier ones and adds the counting node.
  std::int64_t begin_piece(Context& ctx);
  /// Records point `which` of `piece` on `s` (a stream that takes part in the capture).
  void mark(std::int64_t piece, int which, cudaStream_t s);
  /// One more chunk handed to the captured work (AccumulateTimes::chunks per replay).
  void count_chunk() { ++chunks_; }
  /// The replays' times since the last call (zeros if none). Call when the device is done.
  AccumulateTimes take();

 private:
  EventPool events_;  ///< kPoints per piece
  PinnedMemory replays_;
  unsigned* replays_dev_ = nullptr;
  unsigned seen_ = 0;
  std::uint64_t capture_seq_ = 0;
  std::int64_t pieces_ = 0, chunks_ = 0;
};

/// Everything a CudaBackend owns: the device it was created on, one (blocking) stream
/// all its work is ordered on, cuBLAS and cuSOLVER handles bound to that stream, and
/// grow-only scratch for the dense operations.
struct Context {
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device = 0;
  Workload workload = Workload::mttkrp;  ///< of tensors prepared from now on (plan_modes)
  int rank_hint = 0;  ///< R of tensors prepared from now on (Backend::set_rank_hint; 0: unknown)
  /// The backend's kernel tuning options (Backend::set_tuning, already checked): layout
  /// fields apply to tensors prepared from now on, kernel choices to every call.
  Tuning tuning;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cusolverDnHandle_t cusolver = nullptr;
  DeviceMemory scratch;  ///< large pieces (row chunks, partial sums, solver workspace)
  DeviceMemory small;    ///< R x R pieces that must outlive a workspace query
  /// The MTTKRP's 16-bit copies of its input factors (--gather-precision; mttkrp.cu).
  DeviceMemory gathers;
  /// A CUDA graph is being captured from `stream` (dense/cp_device.cu): operations skip their
  /// timing events, which a captured stream cannot give back.
  bool capturing = false;
  /// Counts the captures begun from `stream` (dense/cp_device.cu): an operation that keeps
  /// state across the calls of one capture (the chunk accumulator, mttkrp/stream.cu) sees a
  /// new capture by a new value.
  std::uint64_t capture_seq = 0;
  /// Bumped whenever the chunk accumulator's device buffers move (mttkrp/stream.cu): a graph
  /// that captured its pieces must be captured again.
  std::uint64_t stream_epoch = 0;
  /// The captured streamed pieces' times (read by ops::take_accumulate_times).
  GraphTimer graph_timer;
  /// The one-block eigen-solves of this context where Lanczos was tried (dense/block_eig.cu):
  /// answered by it, or declined (the exact solver ran); the declines in a row since the last
  /// answer, and the solves since then that did not try it.
  struct EigLanczos {
    std::int64_t answered = 0, declined = 0;
    int streak = 0;
    std::int64_t skipped = 0;
  } eig_lanczos;

  /// Backend::stream_mark's events, recorded on `stream`; the first marks_used are taken.
  EventPool marks;
  std::size_t marks_used = 0;

  /// Backend::set_stream_waiter's: when set, sync() calls it instead of waiting itself.
  std::function<void(void*)> waiter;

  /// Every host wait of the backend for its stream.
  void sync() const {
    if (waiter)
      waiter(stream);
    else
      TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

/// Makes `device` current for the lifetime of the guard and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TESSERA_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) TESSERA_CUDA_CHECK(cudaSetDevice(device));
    changed_ = prev_ != device;
  }
  ~DeviceGuard() {
    if (changed_) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(prev_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

/// Threads per block and a grid size for a grid-stride loop over n elements.
inline constexpr int kBlock = 256;
inline unsigned grid_for(std::int64_t n, std::int64_t max_blocks = 65536) {
  std::int64_t b = (n + kBlock - 1) / kBlock;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

/// Like DeviceGuard, for destructors: failures are reported, not thrown.
class DeviceGuardNoThrow {
 public:
  explicit DeviceGuardNoThrow(int device) noexcept {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (prev_ != device) {
      TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
      changed_ = true;
    }
  }
  ~DeviceGuardNoThrow() {
    if (changed_) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(prev_));
  }
  DeviceGuardNoThrow(const DeviceGuardNoThrow&) = delete;
  DeviceGuardNoThrow& operator=(const DeviceGuardNoThrow&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

}  // namespace tessera::kernels::cuda
