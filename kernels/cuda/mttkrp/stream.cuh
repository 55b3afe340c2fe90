// Internal to the CUDA backend: the MTTKRP of chunks streamed through the backend (memory
// tier 3, ops::mttkrp_accumulate). The chunk pipeline is in stream.cu; the tile
// kernels it launches are those of tiles.cu (entry point in mttkrp.cu).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

/// Enqueues on `stream`: out (rows of R, device) += the MTTKRP of `nnz` nonzeros sorted by
/// their mode-`mode` index (device arrays idx[0 .. order) and vals; the runs of every row
/// contiguous). The tile kernels of tiles.cu (the blocked one where it supports the call,
/// else the classic one; tuning.mttkrp_kernel as for mttkrp) with their write rule: a
/// row wholly inside one tile is added with a plain read and store (no other tile of the
/// launch has it), a row a tile may share with atomics. No per-nonzero atomics. `out` may
/// hold any earlier sums. factors[mode] is not read. Returns the kernel's name. (mttkrp.cu)
template <typename T>
const char* launch_mttkrp_sorted(cudaStream_t stream, const index_t* const* idx, const T* vals,
                                 nnz_t nnz, int order, int mode, const T* const* factors, int R,
                                 T* out, const Tuning& tuning);

/// What CudaBackend keeps for mttkrp_accumulate between calls (stream.cu): two
/// device chunk buffers filled in turn on a copy stream of its own, the sort and gather
/// scratch, timing events, and an error flag in mapped host memory. Grow-only; one per
/// backend, used from one thread at a time.
/// ops::prepare_stream_chunk on the cuda backend: sorts the chunk's arrays by (i_m,
/// i_{m+1 mod N}, position), m the mode with the most key bits (the first such), on the
/// host (host_sort, OpenMP); returns m (-1 for an empty chunk). Throws InputError naming a
/// coordinate outside its mode. Peak scratch: 16 bytes of permutation and one array's
/// copy per nonzero.
template <typename T>
int sort_stream_chunk(SparseTensor<T>& chunk);

template <typename T>
class ChunkAccumulator {
 public:
  explicit ChunkAccumulator(Context& ctx);
  ~ChunkAccumulator();
  ChunkAccumulator(const ChunkAccumulator&) = delete;
  ChunkAccumulator& operator=(const ChunkAccumulator&) = delete;

  /// ops::mttkrp_accumulate. `budget` (bytes, 0 = none): the backend's memory budget,
  /// which caps the device buffers (piece_nnz).
  ///
  /// Inside a CUDA graph capture of the backend's stream (Context::capturing: the CP device
  /// loop at memory tier 2) the pieces are captured instead: their copies (memcpy nodes from
  /// the chunk's page-locked arrays, which every replay reads again, so `persistent` must
  /// say that they stay unchanged and page-locked while the graph lives; tier 3 refills its
  /// buffers and throws here), sorts and kernels, ordered by events as eagerly, with no
  /// host wait. Each piece's four timing points become event nodes of Context::graph_timer,
  /// which ops::take_accumulate_times reads after a replay.
  void accumulate(const SparseTensor<T>& chunk, int mode, const std::vector<const T*>& factors,
                  int R, T* out, std::size_t budget, int sorted_mode = -1, bool persistent = false);
  /// ops::take_accumulate_times (which adds Context::graph_timer's replays): waits for the
  /// queued chunks, sums their event times and resets the sums. Throws InputError when a
  /// chunk since the last call (a replay's included) had a coordinate outside its mode (its
  /// nonzero was left out of the sums). Not inside a capture: ops::take_accumulate_times
  /// returns zeros there without calling it.
  AccumulateTimes take_times();
  /// Device bytes held now (chunk buffers, scratch).
  std::size_t device_bytes() const;

  /// Nonzeros of one device piece for a chunk of `nnz` nonzeros of an order-`order` tensor
  /// under `budget` (0 = none): min(nnz, 2^25) rounded up to 64, capped so the piece's
  /// device bytes (bytes_per_nnz) fit the budget, but at least 4096.
  static nnz_t piece_nnz(nnz_t nnz, int order, std::size_t budget);
  /// Device bytes per nonzero of a piece: two chunk buffers, the sort buffers and the
  /// sorted copy (the CUB temporary comes on top, a few percent).
  static std::size_t bytes_per_nnz(int order);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tessera::kernels::cuda
