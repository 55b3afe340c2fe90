// Memory tiers 2-3 on the CUDA backend: ops::mttkrp_accumulate, out += the MTTKRP of one
// chunk of a tensor streamed from host memory or disk (the StreamedOps hooks of
// algo::HostTensor and algo::DiskTensor). Inside a CUDA graph capture (the CP device loop at
// tier 2) the same pipeline is captured, ordered by events recorded in the capture, and
// timed by event nodes read after each replay (ChunkAccumulator::accumulate,
// docs/cp-device-loop.md).
//
// A chunk holds nonzeros in store order (global coordinates). It is handled in pieces of at
// most piece_nnz nonzeros (one piece for the default 16 Mi-nonzero chunk), each alike:
//  1. copy (the accumulator's copy stream): the order index arrays and the values, one
//     cudaMemcpyAsync each, into device chunk buffer i % 2 (i counts pieces), after the
//     last work that read that buffer (piece i - 2's compute). The host arrays should be
//     page-locked (Backend::pin_host; DiskTensor does it once for its two chunk buffers).
//     The call returns when its copies are done, so the caller refills its host buffer
//     while the device computes, and the copy of chunk k + 1 overlaps the work of chunk k.
//  2. sort (backend stream, after the copy): the mode's index array, as uploaded, is the
//     key of a CUB radix sort over bits [0, bits(dims[mode] - 1)) (stable: a row's
//     nonzeros keep their chunk order). When the other indices and the value fill 3 or 4
//     32-bit words (order 3 float or double, order 4 float, order 2 double) they are
//     packed into one payload and sorted with the key, so every pass streams; otherwise
//     the payload is the position and one gather kernel reads the arrays through it.
//  3. check and unpack: every coordinate is compared with its dimension (the keys in
//     place); a nonzero with one outside contributes nothing and sets an error flag in
//     mapped host memory, which the next call or take_times() turns into an InputError.
//  4. kernel: launch_mttkrp_sorted (mttkrp.cu), the tile kernels of tier 1 in their
//     accumulating form: rows inside one tile read, add and store, tile-boundary rows
//     add with atomics; nothing zeroes or copies the whole output.
//
// Device bytes moved per nonzero, order 3 float (16 bytes of input per nonzero) and one
// sort of b key bits (p = ceil(b / 8) onesweep passes, 3 for b = 23 as on the amazon
// shape): copy 16 over the host link; pack 12 read + 12 written; sort about 4 (histogram)
// + p x 32 (read and write key and payload); unpack 16 read + 12 written; kernel 16
// streamed + 2 factor-row gathers of 4R bytes + a read and write of 4R bytes per distinct
// row of the piece. For R = 32 and 3 passes: about 150 bytes of streaming traffic for the
// sort against 256 gathered bytes for the kernel, so the piece costs about 1.5-2x the
// tier-1 kernel on the same nonzeros when the gathers miss L2 (hot rows of a power-law
// tensor that hit L2 make the tier-1 kernel cheaper and this ratio larger). The copy
// (16 bytes at the host link's ~50 GB/s) is hidden behind the previous piece's work when
// the work is longer, and the disk read (DiskTensor's prefetch thread) behind both.
#include <algorithm>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <string>
#include <type_traits>

#include "kernels/cuda/mttkrp/stream.cuh"
#include "kernels/cuda/runtime/host_sort.hpp"
#include "kernels/mttkrp.hpp"

namespace tessera::kernels::cuda {
namespace {

/// Largest piece: 2^25 nonzeros (order 3 float: 512 MiB per chunk buffer).
constexpr nnz_t kMaxPieceNnz = nnz_t(1) << 25;
/// Smallest piece a memory budget may impose.
constexpr nnz_t kMinPieceNnz = 4096;
/// Pieces are allocated in multiples of this (every array 256-byte aligned).
constexpr nnz_t kPieceAlign = 64;
/// Event sets kept: piece i's set is recorded again by piece i + kRing (>= 3: the copy of
/// piece i waits on the compute end of piece i - 2).
constexpr int kRing = 4;
enum { kCopyBegin = 0, kCopyEnd, kComputeBegin, kComputeEnd, kEventsPerPiece };
static_assert(static_cast<int>(kCopyBegin) == GraphTimer::kCopyBegin &&
                  static_cast<int>(kCopyEnd) == GraphTimer::kCopyEnd &&
                  static_cast<int>(kComputeBegin) == GraphTimer::kComputeBegin &&
                  static_cast<int>(kComputeEnd) == GraphTimer::kComputeEnd,
              "a piece's timing points: the same order eagerly and in a graph");

/// W 32-bit words: the payload sorted with the key.
template <int W>
struct alignas(W == 4 ? 16 : 4) Words {
  std::uint32_t w[W];
};

/// Payload words of a nonzero of an order-`order` tensor of T: the other indices, the value.
template <typename T>
constexpr int payload_words(int order) {
  return order - 1 + static_cast<int>(sizeof(T) / sizeof(std::uint32_t));
}

/// How a piece is sorted: (key, payload of 3 or 4 words), or (key, position) and a gather.
/// `none`: the mode has one index (no key bits): no sort, the gather reads in place.
enum class SortPath { none, payload3, payload4, perm };

template <typename T>
SortPath sort_path(int order, int bits) {
  if (bits == 0) return SortPath::none;
  const int w = payload_words<T>(order);
  return w == 3 ? SortPath::payload3 : w == 4 ? SortPath::payload4 : SortPath::perm;
}

/// Bytes of one value of the sort (the payload or the position).
template <typename T>
std::size_t sort_value_bytes(int order) {
  const int w = payload_words<T>(order);
  return (w == 3 || w == 4) ? static_cast<std::size_t>(w) * 4 : sizeof(std::uint32_t);
}

// ---- kernels ----

template <int W>
struct PackParams {
  const std::uint32_t* src[W];  ///< word i of nonzero k is src[i][k * stride[i]]
  int stride[W];
  std::int64_t n;
};

/// out[k] = the payload words of nonzero k.
template <int W>
__global__ void pack_payload(const __grid_constant__ PackParams<W> p, Words<W>* __restrict__ out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    Words<W> q;
#pragma unroll
    for (int i = 0; i < W; ++i) q.w[i] = __ldcs(p.src[i] + k * p.stride[i]);
    out[k] = q;
  }
}

/// p[k] = k.
__global__ void iota_u32(std::uint32_t* __restrict__ p, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    p[k] = static_cast<std::uint32_t>(k);
}

/// The check-and-unpack step: sorted keys (fixed in place) and the input slots' arrays.
template <typename T>
struct FinishParams {
  index_t* keys;                  ///< sorted mode indices; one outside the mode is clamped in place
  std::uint64_t mode_dim;         ///< dims[mode] (>= 1)
  std::uint32_t mask;             ///< the key bits the sort ordered by
  int nin;                        ///< input slots: the other modes, ascending
  const index_t* src[kMaxOrder];  ///< gather: slot arrays in chunk order
  index_t* dst[kMaxOrder];        ///< slot arrays in sorted order
  std::uint64_t dim[kMaxOrder];   ///< slot dims
  const T* src_vals;              ///< gather: values in chunk order
  T* dst_vals;                    ///< values in sorted order
  const std::uint32_t* perm;      ///< gather: chunk position of sorted nonzero k (null: k)
  std::int64_t n;
  int* error;  ///< mapped host memory, set to 1 on a coordinate outside its mode
};

/// Key k, checked: a key >= mode_dim is replaced by min(key & mask, mode_dim - 1), which
/// keeps the keys sorted (the sort ordered them by key & mask) and inside the output.
template <typename T>
__device__ __forceinline__ bool fix_key(const FinishParams<T>& p, std::int64_t k) {
  const index_t key = p.keys[k];
  if (static_cast<std::uint64_t>(key) < p.mode_dim) return false;
  const std::uint64_t low = key & p.mask;
  p.keys[k] = static_cast<index_t>(low < p.mode_dim ? low : p.mode_dim - 1);
  return true;
}

/// dst slot s [k] = src slot s [perm[k]], values likewise, every coordinate checked.
template <typename T>
__global__ void gather_checked(const __grid_constant__ FinishParams<T> p) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    bool bad = fix_key(p, k);
    const std::int64_t j = p.perm != nullptr ? static_cast<std::int64_t>(p.perm[k]) : k;
    for (int s = 0; s < p.nin; ++s) {
      index_t c = __ldg(p.src[s] + j);
      if (static_cast<std::uint64_t>(c) >= p.dim[s]) {
        bad = true;
        c = 0;
      }
      p.dst[s][k] = c;
    }
    const T v = __ldg(p.src_vals + j);
    p.dst_vals[k] = bad ? T(0) : v;
    if (bad) *reinterpret_cast<volatile int*>(p.error) = 1;
  }
}

/// dst slot s [k] and the values from the sorted payloads, every coordinate checked.
template <typename T, int W>
__global__ void unpack_checked(const __grid_constant__ FinishParams<T> p,
                               const Words<W>* __restrict__ pay) {
  constexpr int kNin = W - static_cast<int>(sizeof(T) / sizeof(std::uint32_t));
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    bool bad = fix_key(p, k);
    const Words<W> q = pay[k];
#pragma unroll
    for (int s = 0; s < kNin; ++s) {
      index_t c = q.w[s];
      if (static_cast<std::uint64_t>(c) >= p.dim[s]) {
        bad = true;
        c = 0;
      }
      p.dst[s][k] = c;
    }
    T v;
    std::memcpy(&v, q.w + kNin, sizeof(T));
    p.dst_vals[k] = bad ? T(0) : v;
    if (bad) *reinterpret_cast<volatile int*>(p.error) = 1;
  }
}

/// A piece whose mode-`mode` indices the caller promised non-decreasing (sorted_mode, or a
/// mode of length 1), checked where it lies: a coordinate outside its mode is clamped (the
/// key to mode_dim - 1, which keeps the keys sorted; another to 0), its value zeroed and
/// flag 1 set; keys that are not non-decreasing set flag 2.
template <typename T>
struct InPlaceParams {
  index_t* idx[kMaxOrder];
  std::uint64_t dim[kMaxOrder];
  T* vals;
  int order;
  int mode;
  std::int64_t n;
  int* error;
};

template <typename T>
__global__ void check_in_place(const __grid_constant__ InPlaceParams<T> p) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const index_t* keys = p.idx[p.mode];
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    const index_t key = keys[k];
    if (k + 1 < p.n && key > keys[k + 1]) *reinterpret_cast<volatile int*>(p.error) = 2;
    bool bad = false;
    for (int s = 0; s < p.order; ++s) bad |= static_cast<std::uint64_t>(p.idx[s][k]) >= p.dim[s];
    if (!bad) continue;
    for (int s = 0; s < p.order; ++s)
      if (static_cast<std::uint64_t>(p.idx[s][k]) >= p.dim[s])
        p.idx[s][k] = s == p.mode ? static_cast<index_t>(p.dim[s] - 1) : 0;
    p.vals[k] = T(0);
    *reinterpret_cast<volatile int*>(p.error) = 1;
  }
}

// ---- CUB sorts (one instantiation per value type) ----

template <typename V>
std::size_t sort_temp_bytes(std::int64_t n, int bits, cudaStream_t stream) {
  std::size_t bytes = 0;
  cub::DoubleBuffer<std::uint32_t> k(nullptr, nullptr);
  cub::DoubleBuffer<V> v(nullptr, nullptr);
  TESSERA_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, bytes, k, v, static_cast<int>(n), 0, bits, stream));
  return bytes;
}

template <typename T>
std::size_t path_temp_bytes(SortPath path, std::int64_t n, int bits, cudaStream_t stream) {
  switch (path) {
    case SortPath::none:
      return 0;
    case SortPath::payload3:
      return sort_temp_bytes<Words<3>>(n, bits, stream);
    case SortPath::payload4:
      return sort_temp_bytes<Words<4>>(n, bits, stream);
    case SortPath::perm:
      return sort_temp_bytes<std::uint32_t>(n, bits, stream);
  }
  return 0;
}

/// Offsets in the scratch block of a piece of `cap` nonzeros (order N).
struct ScratchLayout {
  std::size_t keys_alt = 0;  ///< cap keys: the sort's second key buffer
  std::size_t val[2] = {};   ///< cap sort values each (payloads or positions)
  std::size_t sorted = 0;    ///< N - 1 slot arrays of cap indices, then cap values
  std::size_t temp = 0;      ///< CUB temporary storage
  std::size_t total = 0;
};

template <typename T>
ScratchLayout scratch_layout(int order, nnz_t cap, std::size_t temp_bytes) {
  const auto c = static_cast<std::size_t>(cap);
  Arena a;
  ScratchLayout l;
  l.keys_alt = a.add<std::uint32_t>(c);
  l.val[0] = a.add<char>(c * sort_value_bytes<T>(order));
  l.val[1] = a.add<char>(c * sort_value_bytes<T>(order));
  l.sorted = a.add<char>(c * (static_cast<std::size_t>(order - 1) * sizeof(index_t) + sizeof(T)));
  l.temp = a.add<char>(std::max<std::size_t>(temp_bytes, 1));
  l.total = a.total();
  return l;
}

/// Bytes of one device chunk buffer of `cap` nonzeros: order index arrays, then values.
template <typename T>
std::size_t slot_bytes(int order, nnz_t cap) {
  return static_cast<std::size_t>(cap) *
         (static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T));
}

}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
struct ChunkAccumulator<T>::State {
  explicit State(Context& c) : ctx(c) {}
  Context& ctx;
  cudaStream_t copy = nullptr;
  DeviceMemory slot[2];  ///< device chunk buffers, used by pieces in turn
  DeviceMemory scratch;  ///< scratch_layout(order, cap, temp_cap)
  int order = 0;         ///< of the layout below (0: none yet)
  nnz_t cap = 0;         ///< nonzeros per piece the buffers hold
  std::size_t temp_cap = 0;
  EventPool events;  ///< kRing sets of kEventsPerPiece
  PinnedMemory flag;
  int* flag_dev = nullptr;
  std::int64_t issued = 0;     ///< pieces enqueued
  std::int64_t harvested = 0;  ///< pieces whose times are in `times`
  AccumulateTimes times;

  // ---- inside a graph capture (Context::capturing) ----
  /// Dependencies inside a capture: the capture's start on the backend's stream (the copy
  /// stream joins the capture there), "piece g's copy done", and "piece g's compute done"
  /// for g % 2 (the next reader of that buffer is piece g + 2's copy). The pieces' times go
  /// to Context::graph_timer.
  EventPool dep;
  enum { kDepFork = 0, kDepCopy, kDepCompute0, kDepCompute1, kDeps };
  std::uint64_t capture_seq = 0;  ///< Context::capture_seq of the pieces below
  std::int64_t graph_pieces = 0;  ///< pieces of that capture

  cudaEvent_t ev(std::int64_t piece, int which) const {
    return events[static_cast<std::size_t>(piece % kRing) * kEventsPerPiece +
                  static_cast<std::size_t>(which)];
  }
  /// Adds piece i's times (waits for it).
  void harvest(std::int64_t i) {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(ev(i, kComputeEnd)));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(ev(i, kCopyEnd)));
    float copy_ms = 0, compute_ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&copy_ms, ev(i, kCopyBegin), ev(i, kCopyEnd)));
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&compute_ms, ev(i, kComputeBegin), ev(i, kComputeEnd)));
    times.copy += static_cast<double>(copy_ms) * 1e-3;
    times.compute += static_cast<double>(compute_ms) * 1e-3;
  }
  /// Throws InputError (after waiting for the queued work and clearing the flag) when a
  /// piece found a coordinate outside its mode.
  void check_flag() {
    auto* f = reinterpret_cast<volatile int*>(flag.get());
    if (*f == 0) return;
    ctx.sync();
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(copy));
    const int code = *f;
    *f = 0;
    TESSERA_EXPECTS(code != 2,
                    "mttkrp_accumulate: a chunk passed as sorted by a mode is not sorted by it "
                    "(its MTTKRP sums are not to be trusted)");
    TESSERA_INPUT_CHECK(false,
                        "memory tier 3: a chunk has a coordinate outside its mode's "
                        "dimension (the store is damaged, or the chunk does not belong "
                        "to this tensor); such nonzeros were left out of the MTTKRP");
  }
};

template <typename T>
ChunkAccumulator<T>::ChunkAccumulator(Context& ctx) : s_(std::make_unique<State>(ctx)) {
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_->copy, cudaStreamNonBlocking));
  s_->events.ensure(static_cast<std::size_t>(kRing) * kEventsPerPiece);
  s_->dep.ensure(State::kDeps);
  const cudaError_t e = s_->flag.allocate(sizeof(int));
  TESSERA_EXPECTS(e == cudaSuccess, "memory tier 2-3: cudaHostAlloc of the error flag failed ("
                                        << detail::cuda_error_text(e) << ")");
  *reinterpret_cast<volatile int*>(s_->flag.get()) = 0;
  void* dev = nullptr;
  TESSERA_CUDA_CHECK(cudaHostGetDevicePointer(&dev, s_->flag.get(), 0));
  s_->flag_dev = static_cast<int*>(dev);
}

template <typename T>
ChunkAccumulator<T>::~ChunkAccumulator() {
  DeviceGuardNoThrow g(s_->ctx.device);
  // Queued pieces still use the buffers and the flag: wait, then release on this device.
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(s_->ctx.stream));
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(s_->copy));
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(s_->copy));
  s_->slot[0] = DeviceMemory();
  s_->slot[1] = DeviceMemory();
  s_->scratch = DeviceMemory();
  s_->events.clear();
  s_->dep.clear();
  s_->flag = PinnedMemory();
}

template <typename T>
std::size_t ChunkAccumulator<T>::bytes_per_nnz(int order) {
  const std::size_t in = static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T);
  return 2 * in + sizeof(index_t) + 2 * sort_value_bytes<T>(order) + in - sizeof(index_t);
}

template <typename T>
nnz_t ChunkAccumulator<T>::piece_nnz(nnz_t nnz, int order, std::size_t budget) {
  nnz_t c = std::min(std::max<nnz_t>(nnz, 1), kMaxPieceNnz);
  if (budget > 0) {
    const auto fit = static_cast<nnz_t>(budget / bytes_per_nnz(order));
    c = std::min(c, std::max(fit, kMinPieceNnz));
  }
  return (c + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
}

template <typename T>
std::size_t ChunkAccumulator<T>::device_bytes() const {
  return s_->slot[0].bytes() + s_->slot[1].bytes() + s_->scratch.bytes();
}

template <typename T>
void ChunkAccumulator<T>::accumulate(const SparseTensor<T>& chunk, int mode,
                                     const std::vector<const T*>& factors, int R, T* out,
                                     std::size_t budget, int sorted_mode, bool persistent) {
  State& s = *s_;
  const bool capture = s.ctx.capturing;
  TESSERA_EXPECTS(!capture || persistent,
                  "mttkrp_accumulate inside a CUDA graph capture needs chunks whose host arrays "
                  "persist (memory tier 2); a refilled buffer (tier 3) cannot be replayed");
  check_kernel_shape(chunk);  // order, array lengths, dims <= 2^32 (coordinates: on the device)
  const int N = chunk.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " chunk");
  TESSERA_EXPECTS(R >= 1, "rank R = " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  factors.size() << " factors for an order-" << N << " chunk");
  for (int m = 0; m < N; ++m)
    TESSERA_EXPECTS(m == mode || factors[static_cast<std::size_t>(m)] != nullptr,
                    "factor " << m << " is null");
  if (!capture) s.check_flag();  // an earlier piece's bad coordinate (a capture: take_times)
  const nnz_t nnz = chunk.nnz();
  if (nnz == 0) return;
  TESSERA_EXPECTS(out != nullptr, "mttkrp_accumulate: null output");
  for (int m = 0; m < N; ++m)
    TESSERA_INPUT_CHECK(
        chunk.dims[static_cast<std::size_t>(m)] >= 1,
        "memory tier 3: mode " << m << " has length 0, but the chunk has " << nnz << " nonzeros");

  // Buffers: grow-only (a reallocation frees first; cudaFree waits for the device).
  const std::uint64_t mode_dim = chunk.dims[static_cast<std::size_t>(mode)];
  const int bits = host_sort::key_bits(mode_dim);
  const SortPath path = mode == sorted_mode ? SortPath::none : sort_path<T>(N, bits);
  const nnz_t want = piece_nnz(nnz, N, budget);
  if (want > s.cap || N != s.order) {
    s.cap = std::max(want, s.order == N ? s.cap : nnz_t(0));
    s.order = N;
  }
  const nnz_t cap = s.cap;
  const nnz_t piece = std::min(want, cap);
  s.temp_cap =
      std::max(s.temp_cap, path_temp_bytes<T>(path, std::min(piece, nnz), bits, s.ctx.stream));
  const ScratchLayout L = scratch_layout<T>(N, cap, s.temp_cap);
  // A capture replays the buffers it saw: they may not move inside one (the loop's first,
  // eager iteration sized them for every mode), and a later move makes the loop capture
  // again (Context::stream_epoch).
  const bool grow = s.slot[0].bytes() < slot_bytes<T>(N, cap) ||
                    s.slot[1].bytes() < slot_bytes<T>(N, cap) || s.scratch.bytes() < L.total;
  TESSERA_EXPECTS(!capture || !grow,
                  "mttkrp_accumulate: the chunk buffers would grow inside a CUDA graph capture");
  // Growing frees the old block first: the epoch moves before, so a graph never replays a
  // freed buffer, even where the allocation then fails.
  if (grow) ++s.ctx.stream_epoch;
  for (auto& b : s.slot) b.reserve(slot_bytes<T>(N, cap));
  s.scratch.reserve(L.total);
  if (capture && s.capture_seq != s.ctx.capture_seq) {
    // This capture's first chunk: the copy stream joins it at this point of the backend's
    // stream.
    s.capture_seq = s.ctx.capture_seq;
    s.graph_pieces = 0;
    TESSERA_CUDA_CHECK(cudaEventRecord(s.dep[State::kDepFork], s.ctx.stream));
  }

  const auto c = static_cast<std::size_t>(cap);
  const cudaStream_t cs = s.copy, st = s.ctx.stream;
  char* base = static_cast<char*>(s.scratch.get());
  for (nnz_t off = 0; off < nnz; off += piece) {
    const nnz_t cnt = std::min(piece, nnz - off);
    const auto n = static_cast<std::size_t>(cnt);
    // Eagerly: piece i of the ring of timing sets. In a capture: piece i of the capture,
    // ordered by s.dep, timed by Context::graph_timer (event nodes read after a replay).
    const std::int64_t i = capture ? s.graph_pieces : s.issued;
    const std::int64_t timed = capture ? s.ctx.graph_timer.begin_piece(s.ctx) : -1;
    if (!capture)
      while (i - s.harvested >= kRing) s.harvest(s.harvested++);  // its event set is reused
    auto point = [&](int which, cudaStream_t on) {
      if (capture)
        s.ctx.graph_timer.mark(timed, which, on);
      else
        TESSERA_CUDA_CHECK(cudaEventRecord(s.ev(i, which), on));
    };

    // 1. Copy into buffer i % 2 once piece i - 2, its last reader, is done (a capture's first
    // two pieces: once the work before the capture's first chunk is).
    char* buf = static_cast<char*>(s.slot[i % 2].get());
    if (capture)
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(
          cs, s.dep[i >= 2 ? State::kDepCompute0 + static_cast<int>(i % 2) : State::kDepFork], 0));
    else if (i >= 2)
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cs, s.ev(i - 2, kComputeEnd), 0));
    point(kCopyBegin, cs);
    index_t* up[kMaxOrder] = {};
    for (int m = 0; m < N; ++m) {
      up[m] = reinterpret_cast<index_t*>(buf) + static_cast<std::size_t>(m) * c;
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(up[m], chunk.idx[static_cast<std::size_t>(m)].data() + off,
                                         n * sizeof(index_t), cudaMemcpyHostToDevice, cs));
    }
    T* up_vals = reinterpret_cast<T*>(buf + static_cast<std::size_t>(N) * c * sizeof(index_t));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(up_vals, chunk.vals.data() + off, n * sizeof(T),
                                       cudaMemcpyHostToDevice, cs));
    point(kCopyEnd, cs);

    // 2.-4. Sort, check and unpack, kernel: on the backend's stream after the copy.
    if (capture) {
      TESSERA_CUDA_CHECK(cudaEventRecord(s.dep[State::kDepCopy], cs));
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(st, s.dep[State::kDepCopy], 0));
    } else {
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(st, s.ev(i, kCopyEnd), 0));
    }
    point(kComputeBegin, st);
    FinishParams<T> f{};
    f.keys = up[mode];
    f.mode_dim = mode_dim;
    f.mask = bits >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << bits) - 1;
    f.n = static_cast<std::int64_t>(cnt);
    f.error = s.flag_dev;
    auto* sorted = reinterpret_cast<index_t*>(base + L.sorted);
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      f.src[f.nin] = up[m];
      f.dst[f.nin] = sorted + static_cast<std::size_t>(f.nin) * c;
      f.dim[f.nin] = chunk.dims[static_cast<std::size_t>(m)];
      ++f.nin;
    }
    f.src_vals = up_vals;
    f.dst_vals = reinterpret_cast<T*>(sorted + static_cast<std::size_t>(N - 1) * c);
    void* temp = base + L.temp;
    std::size_t temp_bytes = s.temp_cap;
    auto* keys_alt = reinterpret_cast<std::uint32_t*>(base + L.keys_alt);
    const unsigned grid = grid_for(f.n);
    cub::DoubleBuffer<std::uint32_t> dk(f.keys, keys_alt);
    auto sort_payload = [&](auto words) {
      constexpr int W = decltype(words)::value;
      auto* p0 = reinterpret_cast<Words<W>*>(base + L.val[0]);
      auto* p1 = reinterpret_cast<Words<W>*>(base + L.val[1]);
      PackParams<W> pp{};
      for (int q = 0; q < f.nin; ++q) {
        pp.src[q] = f.src[q];
        pp.stride[q] = 1;
      }
      constexpr int kVw = static_cast<int>(sizeof(T) / sizeof(std::uint32_t));
      for (int j = 0; j < kVw; ++j) {
        pp.src[f.nin + j] = reinterpret_cast<const std::uint32_t*>(up_vals) + j;
        pp.stride[f.nin + j] = kVw;
      }
      pp.n = f.n;
      pack_payload<W><<<grid, kBlock, 0, st>>>(pp, p0);
      TESSERA_CUDA_CHECK_LAUNCH();
      cub::DoubleBuffer<Words<W>> dv(p0, p1);
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dv,
                                                         static_cast<int>(cnt), 0, bits, st));
      f.keys = dk.Current();
      unpack_checked<T, W><<<grid, kBlock, 0, st>>>(f, dv.Current());
      TESSERA_CUDA_CHECK_LAUNCH();
    };
    switch (path) {
      case SortPath::payload3:
        sort_payload(std::integral_constant<int, 3>{});
        break;
      case SortPath::payload4:
        sort_payload(std::integral_constant<int, 4>{});
        break;
      case SortPath::perm: {
        auto* q0 = reinterpret_cast<std::uint32_t*>(base + L.val[0]);
        auto* q1 = reinterpret_cast<std::uint32_t*>(base + L.val[1]);
        iota_u32<<<grid, kBlock, 0, st>>>(q0, f.n);
        TESSERA_CUDA_CHECK_LAUNCH();
        cub::DoubleBuffer<std::uint32_t> dp(q0, q1);
        TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, dp,
                                                           static_cast<int>(cnt), 0, bits, st));
        f.keys = dk.Current();
        f.perm = dp.Current();
        gather_checked<T><<<grid, kBlock, 0, st>>>(f);
        TESSERA_CUDA_CHECK_LAUNCH();
        break;
      }
      case SortPath::none: {  // sorted as uploaded (sorted_mode, or one index): check in place
        InPlaceParams<T> q{};
        for (int m = 0; m < N; ++m) {
          q.idx[m] = up[m];
          q.dim[m] = chunk.dims[static_cast<std::size_t>(m)];
        }
        q.vals = up_vals;
        q.order = N;
        q.mode = mode;
        q.n = f.n;
        q.error = s.flag_dev;
        check_in_place<T><<<grid, kBlock, 0, st>>>(q);
        TESSERA_CUDA_CHECK_LAUNCH();
        f.keys = up[mode];
        for (int m = 0, q2 = 0; m < N; ++m)
          if (m != mode) f.dst[q2++] = up[m];
        f.dst_vals = up_vals;
        break;
      }
    }
    const index_t* idx[kMaxOrder] = {};
    for (int m = 0, q = 0; m < N; ++m) idx[m] = m == mode ? f.keys : f.dst[q++];
    (void)launch_mttkrp_sorted<T>(st, idx, f.dst_vals, cnt, N, mode, factors.data(), R, out,
                                  s.ctx.tuning);
    point(kComputeEnd, st);
    if (capture) {
      TESSERA_CUDA_CHECK(cudaEventRecord(s.dep[State::kDepCompute0 + static_cast<int>(i % 2)], st));
      ++s.graph_pieces;
    } else {
      ++s.issued;
    }
  }
  if (capture) {  // the host arrays are read by the graph's copies, at every replay
    s.ctx.graph_timer.count_chunk();
    return;
  }
  ++s.times.chunks;
  // The host arrays have been read once the last copy is done (copies run in order).
  TESSERA_CUDA_CHECK(cudaEventSynchronize(s.ev(s.issued - 1, kCopyEnd)));
}

template <typename T>
AccumulateTimes ChunkAccumulator<T>::take_times() {
  State& s = *s_;
  s.ctx.sync();
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.copy));
  while (s.harvested < s.issued) s.harvest(s.harvested++);
  const AccumulateTimes t = s.times;
  s.times = AccumulateTimes{};
  s.check_flag();
  return t;
}

template <typename T>
int sort_stream_chunk(SparseTensor<T>& c) {
  const int N = c.order();
  const auto n = static_cast<std::size_t>(c.nnz());
  if (n == 0 || N == 0) return -1;
  check_kernel_shape(c);  // dims <= 2^32, array lengths
  int m = 0;
  for (int d = 1; d < N; ++d)
    if (host_sort::key_bits(c.dims[static_cast<std::size_t>(d)]) >
        host_sort::key_bits(c.dims[static_cast<std::size_t>(m)]))
      m = d;
  // The counting sorts index histograms by the keys: every coordinate must be inside.
  for (int d = 0; d < N; ++d) {
    const auto& v = c.idx[static_cast<std::size_t>(d)];
    const std::uint64_t dim = c.dims[static_cast<std::size_t>(d)];
    const auto bad = std::find_if(
        v.begin(), v.end(), [dim](index_t i) { return static_cast<std::uint64_t>(i) >= dim; });
    TESSERA_INPUT_CHECK(bad == v.end(), "memory tier 2: nonzero "
                                            << (bad - v.begin()) << " of a chunk has mode-" << d
                                            << " index " << *bad << ", outside the mode's " << dim);
  }
  const int m2 = (m + 1) % N;
  std::vector<std::int64_t> perm(n);
  {
    std::vector<std::int64_t> tmp(n);
    host_sort::sort_lexicographic(c.idx[static_cast<std::size_t>(m)].data(),
                                  c.dims[static_cast<std::size_t>(m)],
                                  m2 != m ? c.idx[static_cast<std::size_t>(m2)].data() : nullptr,
                                  c.dims[static_cast<std::size_t>(m2)], perm.data(), tmp.data(), n);
  }
  std::vector<index_t> g(n);
  for (auto& v : c.idx) {
    host_sort::gather(v.data(), perm.data(), n, g.data());
    v.swap(g);
  }
  {
    std::vector<T> gv(n);
    host_sort::gather(c.vals.data(), perm.data(), n, gv.data());
    c.vals.swap(gv);
  }
  return m;
}

template int sort_stream_chunk<float>(SparseTensor<float>&);
template int sort_stream_chunk<double>(SparseTensor<double>&);

template class ChunkAccumulator<float>;
template class ChunkAccumulator<double>;

}  // namespace tessera::kernels::cuda
