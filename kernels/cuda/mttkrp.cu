// CUDA MTTKRP on per-mode sorted COO copies, without per-nonzero atomics.
//
// Format: for every mode n one copy of the nonzeros sorted by (i_n, i_{n+1 mod N}),
// stored as uint32 coordinate arrays (structure of arrays) followed by the values.
//
// Kernel: each warp owns a contiguous tile of kTileNnz nonzeros of the copy sorted by the
// output mode, and lanes own output columns (32 per pass; R > 32 loops over column
// blocks). A batch of 32 nonzeros is loaded cooperatively (lane j loads nonzero j's
// coordinates and value; coalesced) and broadcast with __shfl_sync. Each lane keeps the
// Khatri-Rao products of the batch in registers and accumulates them while the output
// row stays the same. A finished row is written once: rows wholly inside the tile with a
// plain store (no other tile touches them), the first and last row of the tile (which a
// neighbouring tile may share) with atomicAdd. So a tile costs at most two atomics per
// column, whatever the skew of the tensor, and every warp does the same amount of work.
// The kernel needs only that its nonzeros are a contiguous range of the sorted copy:
// a row written with a plain store has its whole run inside one tile, so no other tile,
// in this launch or another, touches it.
//
// Memory tiers (DESIGN §8): tier 1 keeps the sorted copies in device memory. When they
// exceed the memory budget, tier 2 keeps them in pinned host memory, cut into chunks of
// whole tiles, and each MTTKRP streams its mode's chunks through two device buffers:
// the copy of chunk k + 1 (on a copy stream of the handle) overlaps the kernel of chunk
// k (on the backend's stream), one launch per chunk into the same output.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#include "kernels/cuda/detail.cuh"
#include "kernels/mttkrp.hpp"

namespace tessera::kernels::cuda {

namespace {

constexpr int kWarp = 32;
/// Batches of 32 nonzeros per warp tile. Larger tiles mean fewer boundary atomics and
/// launch blocks; smaller tiles mean more parallelism on small tensors.
constexpr int kBatchesPerTile = 8;
constexpr int kTileNnz = kWarp * kBatchesPerTile;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------
// Host side: sorting and the handle
// ---------------------------------------------------------------------------

/// Stable sort of the permutation `perm` by key[perm[k]] (keys < dim): one counting-sort
/// pass when the key range is small, else two LSD radix passes of 16 bits (any uint32).
void stable_sort_by_key(const index_t* key, std::uint64_t dim, std::vector<nnz_t>& perm,
                        std::vector<nnz_t>& tmp) {
  const std::size_t n = perm.size();
  tmp.resize(n);
  auto pass = [&](std::uint64_t buckets, auto digit) {
    std::vector<nnz_t> count(buckets + 1, 0);
    for (std::size_t k = 0; k < n; ++k) ++count[digit(key[perm[k]]) + 1];
    for (std::uint64_t b = 0; b < buckets; ++b) count[b + 1] += count[b];
    for (std::size_t k = 0; k < n; ++k) tmp[count[digit(key[perm[k]])]++] = perm[k];
    perm.swap(tmp);
  };
  if (dim <= std::max<std::uint64_t>(std::uint64_t(1) << 16, 2 * n)) {
    pass(std::max<std::uint64_t>(dim, 1), [](index_t v) { return static_cast<std::uint64_t>(v); });
  } else {
    pass(std::uint64_t(1) << 16, [](index_t v) { return static_cast<std::uint64_t>(v & 0xffffu); });
    pass(std::uint64_t(1) << 16, [](index_t v) { return static_cast<std::uint64_t>(v >> 16); });
  }
}

/// Bytes before the values in a block of `cnt` nonzeros (a tier-1 sorted copy, or a tier-2
/// chunk): `order` index arrays of cnt uint32, padded to 256 bytes.
inline std::size_t values_offset(int order, std::size_t cnt) {
  const std::size_t idx_bytes = static_cast<std::size_t>(order) * cnt * sizeof(index_t);
  return (idx_bytes + 255) / 256 * 256;
}
/// Bytes of a block of `cnt` nonzeros: index arrays, padding, values.
template <typename T>
std::size_t block_bytes(int order, std::size_t cnt) {
  return values_offset(order, cnt) + cnt * sizeof(T);
}
inline std::size_t round_up_256(std::size_t b) {
  return (b + 255) / 256 * 256;
}

/// Tier 2: the per-mode sorted copies in pinned host memory, cut into chunks of
/// `chunk_nnz` consecutive nonzeros (the last one shorter). Each chunk is laid out as a
/// block of its own (index arrays then values), at a 256-byte aligned offset, so one
/// cudaMemcpyAsync moves it. Two device buffers of one full chunk each take turns.
template <typename T>
struct StreamedStore {
  int order = 0;
  nnz_t nnz = 0;
  nnz_t chunk_nnz = 0;  ///< nonzeros per full chunk
  int chunks = 0;       ///< chunks per mode
  std::size_t budget = 0;
  std::vector<PinnedMemory> host;  ///< one block per mode, chunk after chunk
  DeviceMemory buffer[2];          ///< device chunk buffers (the second unused if chunks == 1)
  int buffers = 0;
  cudaStream_t copy_stream = nullptr;

  StreamedStore() = default;
  StreamedStore(const StreamedStore&) = delete;
  StreamedStore& operator=(const StreamedStore&) = delete;
  ~StreamedStore() {
    // The owner has waited for the kernels; copies may still be queued if an error
    // interrupted mttkrp. Buffers and pinned memory are released after this.
    if (copy_stream) {
      TESSERA_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(copy_stream));
      TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(copy_stream));
    }
  }

  nnz_t chunk_count(int k) const {
    return std::min<nnz_t>(chunk_nnz, nnz - static_cast<nnz_t>(k) * chunk_nnz);
  }
  std::size_t chunk_stride() const {
    return round_up_256(block_bytes<T>(order, static_cast<std::size_t>(chunk_nnz)));
  }
  std::size_t chunk_offset(int k) const { return static_cast<std::size_t>(k) * chunk_stride(); }
  std::size_t chunk_bytes(int k) const {
    return block_bytes<T>(order, static_cast<std::size_t>(chunk_count(k)));
  }
  std::size_t host_bytes_per_mode() const {
    return chunk_offset(chunks - 1) + chunk_bytes(chunks - 1);
  }
  std::size_t device_bytes() const { return buffer[0].bytes() + buffer[1].bytes(); }
  std::size_t host_bytes() const {
    std::size_t b = 0;
    for (const auto& h : host) b += h.bytes();
    return b;
  }
};

template <typename T>
class CudaTensorHandle final : public TensorHandle<T> {
 public:
  CudaTensorHandle(std::vector<std::uint64_t> dims, nnz_t nnz, int device)
      : dims_(std::move(dims)), nnz_(nnz), device_(device) {}
  ~CudaTensorHandle() override {
    DeviceGuardNoThrow g(device_);
    // Kernels of the last mttkrp may still read the buffers (and, in tier 2, copies
    // still read the pinned memory): wait for them, then release everything while the
    // handle's device is current.
    if (recorded_events_ > 0) TESSERA_CUDA_CHECK_NOTHROW(cudaEventSynchronize(end_event()));
    streamed_.reset();
    copies_.clear();
    events_.clear();
  }

  int order() const override { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const override { return dims_; }
  nnz_t nnz() const override { return nnz_; }
  std::size_t bytes() const override {
    if (streamed_) return streamed_->device_bytes();
    std::size_t b = 0;
    for (const auto& c : copies_) b += c.bytes();
    return b;
  }
  std::size_t mttkrp_stream_bytes(int mode) const override {
    TESSERA_EXPECTS(mode >= 0 && mode < order(),
                    "mode " << mode << " of an order-" << order() << " tensor");
    return (static_cast<std::size_t>(order()) * sizeof(index_t) + sizeof(T)) *
           static_cast<std::size_t>(nnz_);
  }

  int tier() const override { return streamed_ ? 2 : 1; }
  std::string describe() const override {
    std::ostringstream os;
    if (!streamed_) {
      os << "tier 1 (device-resident): " << copies_.size() << " sorted copies, " << bytes()
         << " bytes on device " << device_;
      return os.str();
    }
    const auto& s = *streamed_;
    os << "tier 2 (host-resident, GPU-streamed): " << s.buffers << " chunk buffer"
       << (s.buffers == 1 ? "" : "s") << " of " << s.chunk_nnz << " nonzeros ("
       << s.buffer[0].bytes() << " bytes each, " << s.device_bytes() << " bytes on device "
       << device_ << "), " << s.chunks << " chunk" << (s.chunks == 1 ? "" : "s") << " per mode x "
       << order() << " modes, " << s.host_bytes() << " bytes pinned on host, budget ";
    if (s.budget == 0)
      os << "free device memory";
    else
      os << s.budget << " bytes";
    return os.str();
  }
  double overlap_fraction() const override {
    collect();
    if (copy_s_ <= 0) return 1.0;
    return std::clamp((copy_s_ + compute_s_ - wall_s_) / copy_s_, 0.0, 1.0);
  }
  double last_copy_seconds() const override {
    collect();
    return copy_s_;
  }
  double last_compute_seconds() const override {
    collect();
    return compute_s_;
  }

  int device() const { return device_; }

  // ---- tier 1: one sorted copy per mode in device memory ----
  std::size_t copy_bytes() const { return block_bytes<T>(order(), static_cast<std::size_t>(nnz_)); }
  std::size_t resident_bytes() const { return dims_.size() * copy_bytes(); }
  void make_resident() { copies_.resize(dims_.size()); }
  const index_t* idx(int sorted_by, int m) const {
    return static_cast<const index_t*>(copies_[sorted_by].get()) +
           static_cast<std::size_t>(m) * static_cast<std::size_t>(nnz_);
  }
  const T* vals(int sorted_by) const {
    return reinterpret_cast<const T*>(static_cast<const char*>(copies_[sorted_by].get()) +
                                      values_offset(order(), static_cast<std::size_t>(nnz_)));
  }
  DeviceMemory& copy(int sorted_by) { return copies_[sorted_by]; }

  // ---- tier 2 ----
  void make_streamed(std::unique_ptr<StreamedStore<T>> s, cudaStream_t compute_stream) {
    streamed_ = std::move(s);
    compute_stream_ = compute_stream;
  }
  const StreamedStore<T>* streamed() const { return streamed_.get(); }
  /// The backend stream the chunk pipeline is ordered against (tier 2).
  cudaStream_t compute_stream() const { return compute_stream_; }

  // ---- timing of the last mttkrp ----
  // Events: [0] start (backend stream, before anything of this mttkrp), then tier 1: [1]
  // end; tier 2: 4 per chunk k at 1 + 4k: copy begin, copy end (copy stream), compute
  // begin, compute end (backend stream). The last one recorded marks the end.
  /// Makes room for the events of an mttkrp over `chunks` chunks (0: tier 1) and
  /// invalidates the previous measurement.
  void begin_timing(int chunks) const {
    events_.ensure(chunks == 0 ? 2 : 1 + 4 * static_cast<std::size_t>(chunks));
    recorded_events_ = 0;
    collected_ = false;
  }
  cudaEvent_t event(std::size_t k) const { return events_[k]; }
  /// Declares the events [0, n) recorded (the last one is the end).
  void end_timing(std::size_t n, int chunks) const {
    recorded_events_ = n;
    timed_chunks_ = chunks;
  }

 private:
  cudaEvent_t end_event() const { return events_[recorded_events_ - 1]; }

  /// Waits for the last mttkrp and turns its events into seconds (once per mttkrp).
  void collect() const {
    if (collected_) return;
    copy_s_ = compute_s_ = wall_s_ = 0;
    if (recorded_events_ >= 2) {
      DeviceGuard g(device_);
      TESSERA_CUDA_CHECK(cudaEventSynchronize(end_event()));
      auto seconds = [&](std::size_t a, std::size_t b) {
        float ms = 0;
        TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[a], events_[b]));
        return static_cast<double>(ms) * 1e-3;
      };
      wall_s_ = seconds(0, recorded_events_ - 1);
      if (timed_chunks_ == 0) {
        compute_s_ = wall_s_;
      } else {
        for (int k = 0; k < timed_chunks_; ++k) {
          const std::size_t e = 1 + 4 * static_cast<std::size_t>(k);
          copy_s_ += seconds(e, e + 1);
          compute_s_ += seconds(e + 2, e + 3);
        }
      }
    }
    collected_ = true;
  }

  std::vector<std::uint64_t> dims_;
  nnz_t nnz_;
  int device_;
  std::vector<DeviceMemory> copies_;            ///< tier 1
  std::unique_ptr<StreamedStore<T>> streamed_;  ///< tier 2
  cudaStream_t compute_stream_ = nullptr;

  mutable EventPool events_;
  mutable std::size_t recorded_events_ = 0;
  mutable int timed_chunks_ = 0;
  mutable bool collected_ = true;
  mutable double copy_s_ = 0, compute_s_ = 0, wall_s_ = 0;
};

// ---------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------

template <typename T>
struct MttkrpParams {
  const index_t* idx[kMaxOrder];  ///< coordinate arrays of the copy sorted by `mode`
  const T* factors[kMaxOrder];    ///< factors[m]: dims[m] x R row-major (unused for `mode`)
  const T* vals;
  T* out;  ///< dims[mode] x R row-major, zeroed before the launch
  std::int64_t nnz;
  int order;
  int mode;
  int R;
};

template <typename T>
__device__ __forceinline__ void write_row(T* out, index_t row, int R, int col, bool col_ok, T value,
                                          bool shared_row) {
  if (!col_ok) return;
  T* p = out + static_cast<std::size_t>(row) * static_cast<std::size_t>(R) + col;
  if (shared_row)
    atomicAdd(p, value);
  else
    *p = value;
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    mttkrp_tile_kernel(const __grid_constant__ MttkrpParams<T> p) {
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const std::int64_t warp =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x / kWarp);
  const std::int64_t begin = warp * kTileNnz;
  if (begin >= p.nnz) return;  // whole warp leaves together
  const std::int64_t end = min(begin + static_cast<std::int64_t>(kTileNnz), p.nnz);
  const index_t* rows = p.idx[p.mode];
  const index_t first_row = rows[begin];

  for (int c0 = 0; c0 < p.R; c0 += kWarp) {
    const int col = c0 + lane;
    const bool col_ok = col < p.R;
    index_t cur = first_row;
    bool cur_shared = true;  // the tile's first row may continue from the previous tile
    T acc = T(0);

    for (std::int64_t base = begin; base < end; base += kWarp) {
      const int cnt = static_cast<int>(min(static_cast<std::int64_t>(kWarp), end - base));
      const std::int64_t k = base + lane;
      const bool valid = lane < cnt;
      // Cooperative, coalesced loads: lane j holds nonzero base + j.
      const T my_val = valid ? p.vals[k] : T(0);
      const index_t my_row = valid ? rows[k] : 0;

      T prod[kWarp];
#pragma unroll
      for (int j = 0; j < kWarp; ++j) prod[j] = __shfl_sync(kFullMask, my_val, j);

      for (int m = 0; m < p.order; ++m) {
        if (m == p.mode) continue;
        const index_t my_c = valid ? p.idx[m][k] : 0;
        const T* A = p.factors[m] + col;
#pragma unroll
        for (int j = 0; j < kWarp; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j);
          if (col_ok && j < cnt)
            prod[j] *= __ldg(A + static_cast<std::size_t>(cj) * static_cast<std::size_t>(p.R));
        }
      }

#pragma unroll
      for (int j = 0; j < kWarp; ++j) {
        const index_t rj = __shfl_sync(kFullMask, my_row, j);
        if (j < cnt) {  // warp-uniform
          if (rj != cur) {
            write_row(p.out, cur, p.R, col, col_ok, acc, cur_shared);
            cur = rj;
            cur_shared = false;
            acc = T(0);
          }
          acc += prod[j];
        }
      }
    }
    // The tile's last row may continue in the next tile.
    write_row(p.out, cur, p.R, col, col_ok, acc, true);
  }
}

template <typename T>
void launch_tiles(cudaStream_t stream, const MttkrpParams<T>& p) {
  const std::int64_t tiles = (p.nnz + kTileNnz - 1) / kTileNnz;
  const std::int64_t blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  mttkrp_tile_kernel<T><<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// Host side: preparing the format (tier 1 or tier 2)
// ---------------------------------------------------------------------------

/// A tier-2 mode streams in at least this many chunks when it has that many tiles, so
/// the first chunk's copy (which nothing hides) is a small part of the total.
constexpr int kMinChunksPerMode = 4;
/// Upper bound on one chunk buffer: large enough that per-chunk costs (launch, events,
/// the tail of the kernel) vanish next to its copy.
constexpr std::size_t kMaxChunkBytes = std::size_t(512) << 20;
/// Upper bound on the chunks of one mode (each costs a launch and four events).
constexpr nnz_t kMaxChunksPerMode = nnz_t(1) << 20;

/// Device memory a tensor may occupy when no budget is given: the free memory less a
/// reserve for factors, outputs and library workspace (1/16 of the device, >= 512 MiB).
std::size_t automatic_budget(std::size_t free_b, std::size_t total_b) {
  const std::size_t reserve = std::max<std::size_t>(std::size_t(512) << 20, total_b / 16);
  return free_b > reserve ? free_b - reserve : 0;
}

/// Largest chunk (nonzeros) whose block fits in `bytes` (0 when not even one nonzero).
template <typename T>
std::size_t max_chunk_in(int order, std::size_t bytes) {
  const std::size_t per = static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T);
  std::size_t c = bytes > 255 ? (bytes - 255) / per : 0;  // block_bytes(c) <= c*per + 255
  while (block_bytes<T>(order, c + 1) <= bytes) ++c;      // at most ~255/per steps
  return c;
}

/// Chunk size of a tier-2 tensor under `limit` bytes of device memory for the two chunk
/// buffers: the largest that fits, in whole tiles, but no more than a quarter of a mode
/// (kMinChunksPerMode) or kMaxChunkBytes. 0 when `limit` is too small for two one-tile
/// chunks (one chunk of all nonzeros when nnz is under a tile).
template <typename T>
nnz_t tier2_chunk_nnz(int order, nnz_t nnz, std::size_t limit) {
  const std::size_t n = static_cast<std::size_t>(nnz);
  const std::size_t tile = static_cast<std::size_t>(kTileNnz);
  if (n <= tile) return block_bytes<T>(order, n) <= limit ? nnz : 0;
  std::size_t c = max_chunk_in<T>(order, limit / 2);
  if (c < tile) return 0;
  c = c / tile * tile;
  const std::size_t tiles = (n + tile - 1) / tile;
  c = std::min(c, (tiles + kMinChunksPerMode - 1) / kMinChunksPerMode * tile);
  c = std::min(c, std::max(tile, max_chunk_in<T>(order, kMaxChunkBytes) / tile * tile));
  return static_cast<nnz_t>(std::min(c, n));
}

/// Sorts the nonzeros lexicographically by (i_n, i_{n+1 mod N}) into `perm`.
template <typename T>
void sort_for_mode(const SparseTensor<T>& x, int n, std::vector<nnz_t>& perm,
                   std::vector<nnz_t>& tmp) {
  const int N = x.order();
  // LSD order, secondary key first. The secondary key groups a row's nonzeros by their
  // next-mode factor row (cache reuse).
  std::iota(perm.begin(), perm.end(), nnz_t(0));
  if (N > 1) {
    const int s = (n + 1) % N;
    stable_sort_by_key(x.idx[s].data(), x.dims[s], perm, tmp);
  }
  stable_sort_by_key(x.idx[n].data(), x.dims[n], perm, tmp);
}

/// Writes nonzeros perm[first .. first + cnt) as one block (index arrays, values) at dst.
template <typename T>
void write_block(const SparseTensor<T>& x, const std::vector<nnz_t>& perm, nnz_t first, nnz_t cnt,
                 char* dst) {
  const int N = x.order();
  const nnz_t* pk = perm.data() + first;
  auto* hidx = reinterpret_cast<index_t*>(dst);
  for (int m = 0; m < N; ++m) {
    const index_t* src = x.idx[m].data();
    index_t* out = hidx + static_cast<std::size_t>(m) * static_cast<std::size_t>(cnt);
    for (nnz_t k = 0; k < cnt; ++k) out[k] = src[pk[k]];
  }
  auto* hval = reinterpret_cast<T*>(dst + values_offset(N, static_cast<std::size_t>(cnt)));
  for (nnz_t k = 0; k < cnt; ++k) hval[k] = x.vals[pk[k]];
}

template <typename T>
void prepare_resident(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h) {
  const int N = x.order();
  const nnz_t nnz = x.nnz();
  h.make_resident();
  std::vector<char> staging(h.copy_bytes());
  std::vector<nnz_t> perm(static_cast<std::size_t>(nnz)), tmp;
  for (int n = 0; n < N; ++n) {
    sort_for_mode(x, n, perm, tmp);
    write_block(x, perm, 0, nnz, staging.data());
    DeviceMemory& dm = h.copy(n);
    dm.reserve(h.copy_bytes());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dm.get(), staging.data(), h.copy_bytes(),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();  // staging is reused for the next mode
  }
}

template <typename T>
void prepare_streamed(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h,
                      nnz_t chunk_nnz, std::size_t budget) {
  const int N = x.order();
  const nnz_t nnz = x.nnz();
  auto s = std::make_unique<StreamedStore<T>>();
  s->order = N;
  s->nnz = nnz;
  s->chunk_nnz = chunk_nnz;
  s->chunks = static_cast<int>((nnz + chunk_nnz - 1) / chunk_nnz);
  s->budget = budget;
  s->buffers = s->chunks > 1 ? 2 : 1;

  const std::size_t buffer_bytes = block_bytes<T>(N, static_cast<std::size_t>(chunk_nnz));
  for (int b = 0; b < s->buffers; ++b) {
    const cudaError_t e = s->buffer[b].try_reserve(buffer_bytes);
    if (e != cudaSuccess) {
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      TESSERA_THROW("tier 2 (host-resident, GPU-streamed) needs "
                    << s->buffers << " device chunk buffers of " << buffer_bytes
                    << " bytes, but cudaMalloc failed on device " << ctx.device << " ("
                    << detail::cuda_error_text(e) << "; " << free_b << " of " << total_b
                    << " bytes free); lower the memory budget (--mem-budget)");
    }
  }
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));

  s->host.resize(static_cast<std::size_t>(N));
  const std::size_t per_mode = s->host_bytes_per_mode();
  std::vector<nnz_t> perm(static_cast<std::size_t>(nnz)), tmp;
  for (int n = 0; n < N; ++n) {
    const cudaError_t e = s->host[n].allocate(per_mode);
    if (e != cudaSuccess)
      TESSERA_THROW(
          "tier 2 (host-resident, GPU-streamed) keeps one sorted copy of the tensor per "
          "mode in pinned host memory ("
          << N << " x " << per_mode << " bytes), but cudaHostAlloc of " << per_mode
          << " bytes failed (" << detail::cuda_error_text(e)
          << "); free host memory, raise the locked-memory limit (ulimit -l), or "
             "spread the tensor over more ranks");
    sort_for_mode(x, n, perm, tmp);
    for (int k = 0; k < s->chunks; ++k)
      write_block(x, perm, static_cast<nnz_t>(k) * chunk_nnz, s->chunk_count(k),
                  s->host[n].get() + s->chunk_offset(k));
  }
  h.make_streamed(std::move(s), ctx.stream);
}

}  // namespace

template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_tensor(Context& ctx, const SparseTensor<T>& x,
                                                std::size_t budget) {
  check_kernel_input(x);  // order, ragged arrays, coordinates < dims < 2^32
  const int N = x.order();
  const nnz_t nnz = x.nnz();

  auto h = std::make_unique<CudaTensorHandle<T>>(x.dims, nnz, ctx.device);
  if (nnz == 0) return h;

  // The first tier the tensor fits in (DESIGN §8). An explicit budget is taken as given
  // (capped by the free memory); without one, a reserve is left for the factors.
  std::size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::size_t limit =
      budget == 0 ? automatic_budget(free_b, total_b) : std::min(budget, free_b);
  const std::size_t tier1 = h->resident_bytes();
  if (tier1 <= limit) {
    prepare_resident(ctx, x, *h);
    return h;
  }

  const nnz_t chunk = tier2_chunk_nnz<T>(N, nnz, limit);
  if (chunk == 0) {
    const nnz_t min_chunk = std::min<nnz_t>(nnz, kTileNnz);
    const std::size_t need =
        (nnz > min_chunk ? 2 : 1) * block_bytes<T>(N, static_cast<std::size_t>(min_chunk));
    const std::size_t per_nnz = static_cast<std::size_t>(N) * sizeof(index_t) + sizeof(T);
    if (budget != 0 && budget < need)
      TESSERA_INPUT_CHECK(false, "memory budget of "
                                     << budget << " bytes is too small for this tensor (" << nnz
                                     << " nonzeros, order " << N << ", " << per_nnz
                                     << " bytes per nonzero): tier 1 (device-resident) needs "
                                     << tier1 << " bytes, tier 2 (host-resident, GPU-streamed) "
                                     << "at least " << need << " bytes for two chunk buffers of "
                                     << min_chunk << " nonzeros; raise the memory budget "
                                     << "(--mem-budget) to at least " << need << " bytes");
    TESSERA_THROW("not enough free device memory on device "
                  << ctx.device << " for the tensor (" << nnz << " nonzeros, order " << N
                  << "): tier 1 (device-resident) needs " << tier1
                  << " bytes, tier 2 (host-resident, GPU-streamed) at least " << need
                  << " bytes for two chunk buffers of " << min_chunk << " nonzeros, plus room for "
                  << "the factors; " << free_b << " of " << total_b << " bytes are free"
                  << (budget == 0 ? " (less a reserve of 1/16 of the device)" : ""));
  }
  const nnz_t chunks = (nnz + chunk - 1) / chunk;
  if (chunks > kMaxChunksPerMode) {
    const nnz_t min_chunk =
        ((nnz + kMaxChunksPerMode - 1) / kMaxChunksPerMode + kTileNnz - 1) / kTileNnz * kTileNnz;
    TESSERA_INPUT_CHECK(false, "a device memory limit of "
                                   << limit << " bytes cuts each mode of the tensor (" << nnz
                                   << " nonzeros) into " << chunks << " chunks, more than "
                                   << kMaxChunksPerMode << "; raise the memory budget "
                                   << "(--mem-budget) to at least "
                                   << 2 * block_bytes<T>(N, static_cast<std::size_t>(min_chunk))
                                   << " bytes");
  }
  prepare_streamed(ctx, x, *h, chunk, budget);
  return h;
}

template <typename T>
void mttkrp(Context& ctx, const TensorHandle<T>& xh, int mode, const std::vector<const T*>& factors,
            int R, T* out) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  const int N = x->order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " tensor");
  TESSERA_EXPECTS(R >= 1, "rank R = " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  factors.size() << " factors for an order-" << N << " tensor");
  const auto* st = x->streamed();
  // The chunk pipeline is ordered against the stream the handle was prepared on.
  TESSERA_EXPECTS(st == nullptr || (x->compute_stream() == ctx.stream && x->device() == ctx.device),
                  "a tier-2 tensor handle must be used with the CUDA backend that prepared it");

  MttkrpParams<T> p{};
  for (int m = 0; m < N; ++m) {
    TESSERA_EXPECTS(m == mode || factors[m] != nullptr, "factor " << m << " is null");
    p.factors[m] = factors[m];
  }
  p.out = out;
  p.order = N;
  p.mode = mode;
  p.R = R;

  const nnz_t nnz = x->nnz();
  const int chunks = (st != nullptr && nnz > 0) ? st->chunks : 0;
  x->begin_timing(chunks);
  TESSERA_CUDA_CHECK(cudaEventRecord(x->event(0), ctx.stream));
  const std::size_t out_elems =
      static_cast<std::size_t>(x->dims()[mode]) * static_cast<std::size_t>(R);
  if (out_elems > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(out, 0, out_elems * sizeof(T), ctx.stream));

  if (chunks == 0) {  // tier 1 (or no nonzeros): one launch over the resident copy
    if (nnz > 0) {
      for (int m = 0; m < N; ++m) p.idx[m] = x->idx(mode, m);
      p.vals = x->vals(mode);
      p.nnz = nnz;
      launch_tiles(ctx.stream, p);
    }
    TESSERA_CUDA_CHECK(cudaEventRecord(x->event(1), ctx.stream));
    x->end_timing(2, 0);
    return;
  }

  // Tier 2: chunk k is copied into buffer k % 2 on the copy stream while the kernel of
  // chunk k - 1 runs on the backend's stream. Events (also the timing points, see
  // CudaTensorHandle) order the two: the kernel of chunk k waits for "copy k done"; the
  // copy of chunk k waits for "kernel k - 2 done", the last reader of its buffer. The
  // copy stream first waits for the start of this mttkrp on the backend's stream, which
  // follows the kernels of earlier calls (the previous readers of both buffers). Each
  // chunk is a contiguous range of the copy sorted by `mode`, so the tile kernel's
  // plain stores (rows whose whole run lies inside one tile) stay exclusive, and rows cut
  // by a chunk boundary are the first/last rows of tiles, added with atomics.
  const cudaStream_t cs = st->copy_stream;
  const char* host = st->host[static_cast<std::size_t>(mode)].get();
  auto ev = [&](int k, int which) {
    return x->event(1 + 4 * static_cast<std::size_t>(k) + static_cast<std::size_t>(which));
  };
  enum { kCopyBegin = 0, kCopyEnd = 1, kComputeBegin = 2, kComputeEnd = 3 };
  auto enqueue_copy = [&](int k) {
    if (k >= 2) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cs, ev(k - 2, kComputeEnd), 0));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kCopyBegin), cs));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(st->buffer[k % 2].get(), host + st->chunk_offset(k),
                                       st->chunk_bytes(k), cudaMemcpyHostToDevice, cs));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kCopyEnd), cs));
  };
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cs, x->event(0), 0));
  enqueue_copy(0);
  for (int k = 0; k < chunks; ++k) {
    if (k + 1 < chunks) enqueue_copy(k + 1);
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, ev(k, kCopyEnd), 0));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kComputeBegin), ctx.stream));
    const nnz_t cnt = st->chunk_count(k);
    auto* base = static_cast<char*>(st->buffer[k % 2].get());
    for (int m = 0; m < N; ++m)
      p.idx[m] = reinterpret_cast<const index_t*>(base) +
                 static_cast<std::size_t>(m) * static_cast<std::size_t>(cnt);
    p.vals = reinterpret_cast<const T*>(base + values_offset(N, static_cast<std::size_t>(cnt)));
    p.nnz = cnt;
    launch_tiles(ctx.stream, p);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kComputeEnd), ctx.stream));
  }
  x->end_timing(1 + 4 * static_cast<std::size_t>(chunks), chunks);
}

template std::unique_ptr<TensorHandle<float>> prepare_tensor<float>(Context&,
                                                                    const SparseTensor<float>&,
                                                                    std::size_t);
template std::unique_ptr<TensorHandle<double>> prepare_tensor<double>(Context&,
                                                                      const SparseTensor<double>&,
                                                                      std::size_t);
template void mttkrp<float>(Context&, const TensorHandle<float>&, int,
                            const std::vector<const float*>&, int, float*);
template void mttkrp<double>(Context&, const TensorHandle<double>&, int,
                             const std::vector<const double*>&, int, double*);

}  // namespace tessera::kernels::cuda
