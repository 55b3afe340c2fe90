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
// For order 3-6 and R a power of two times the 16-byte pack, a register-blocked kernel
// with the same tiles and the same write rule takes over (mttkrp_blocked.cuh: R / 4 lanes
// per row, indices staged in shared memory, 4 nonzeros per lane step); the one here (the
// "classic" kernel) runs the other shapes, or every shape with
// TESSERA_CUDA_MTTKRP_KERNEL=classic. describe() names the kernel of each mode's last run.
//
// Memory tiers (DESIGN §8): tier 1 keeps the sorted copies in device memory. When they
// exceed the memory budget, tier 2 keeps them in pinned host memory, cut into chunks of
// whole tiles, and each MTTKRP streams its mode's chunks through two device buffers:
// the copy of chunk k + 1 (on a copy stream of the handle) overlaps the kernel of chunk
// k (on the backend's stream), one launch per chunk into the same output. Tier 3 (chunks
// of a tensor on disk, Backend::mttkrp_accumulate) sorts each chunk on the device
// (mttkrp_stream.cu) and runs the same tile kernels through launch_mttkrp_sorted, with
// `accumulate` set: a row inside one tile is read, added to and stored.
//
// Building the sorted copies (prepare): tier 1 sorts on the device when the peak memory
// of the device sort fits the limit (see prepare_resident_on_device), else on the host;
// tier 2 sorts on the host. Both give the same order: (i_n, i_{n+1 mod N}, position in
// the input), and the host sorts run in parallel (host_sort.cpp).
//
// Synthetic tensors (prepare_synthetic): a kernel writes the COO block the device sort
// would upload (nonzero k = id first_id + k, coordinates and value from
// tensor/synthetic.hpp), and the same device sort builds the tier-1 copies. When that
// does not fit (tier 2, or the device sort's peak over the limit), the COO is built on
// the host and prepared like any other input.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/cuda/detail.cuh"
#include "kernels/cuda/host_sort.hpp"
#include "kernels/cuda/mttkrp_blocked.cuh"
#include "kernels/cuda/mttkrp_stream.cuh"
#include "kernels/cuda/ttmc.cuh"
#include "kernels/mttkrp.hpp"
#include "kernels/ttmc.hpp"
#include "tensor/synthetic.hpp"

namespace tessera::kernels::cuda {

namespace {

constexpr int kWarp = 32;
/// Batches of 32 nonzeros per warp tile. Larger tiles mean fewer boundary atomics and
/// launch blocks; smaller tiles mean more parallelism on small tensors.
// 64 batches (2048 nonzeros): under power-law indices a hot row spans many tiles, and each
// tile adds it with atomics; 512 -> 2048 took the amazon-shaped power-law MTTKRP from 115
// to 80 ms and left uniform tensors unchanged (docs/perf/gpu-h200-layouts.md). Tuning:
// -DTESSERA_MTTKRP_TILE_BATCHES=N.
#ifndef TESSERA_MTTKRP_TILE_BATCHES
#define TESSERA_MTTKRP_TILE_BATCHES 64
#endif
constexpr int kBatchesPerTile = TESSERA_MTTKRP_TILE_BATCHES;
constexpr int kTileNnz = kWarp * kBatchesPerTile;
constexpr int kWarpsPerBlock = 8;
/// Resident blocks per SM the tile kernel is compiled for (registers capped to fit): the
/// gathers are latency-bound, so occupancy is what keeps enough of them in flight.
constexpr int kTileBlocksPerSm = 4;
constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------
// Host side: the handle
// ---------------------------------------------------------------------------

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

// ---- blocked layouts of a tier-1 copy (see "Blocked layouts" above mttkrp_smem_kernel) ----

/// Which kernel reads the copy sorted by one mode, and how that copy is ordered.
enum class Layout {
  plain,  ///< sorted by (i_n, i_s): the tile kernel, factor rows gathered through L1/L2
  smem,   ///< sorted by (block of all input modes, i_n, i_s): factor tiles in shared memory
  l2,     ///< sorted by (block of one input mode, i_n, i_s): that block kept in L2
};
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::plain:
      return "plain";
    case Layout::smem:
      return "smem";
    case Layout::l2:
      return "l2";
  }
  return "?";
}

/// Which tile kernel MTTKRP runs on the plain and l2 layouts, from
/// TESSERA_CUDA_MTTKRP_KERNEL (read at every call, so tests and benchmarks can switch):
/// auto (the default) or blocked = the register-blocked kernel (mttkrp_blocked.cuh) where
/// it supports the call (blocked::supports), else the classic tile kernel; classic = the
/// classic tile kernel always. The smem layout has its own kernel either way.
enum class KernelSelection { automatic, classic, invalid };
inline KernelSelection parse_kernel_selection() {
  const char* e = std::getenv("TESSERA_CUDA_MTTKRP_KERNEL");
  if (e == nullptr || *e == '\0') return KernelSelection::automatic;
  const std::string v = e;
  if (v == "auto" || v == "blocked") return KernelSelection::automatic;
  if (v == "classic") return KernelSelection::classic;
  return KernelSelection::invalid;
}
inline KernelSelection kernel_selection() {
  const KernelSelection k = parse_kernel_selection();
  TESSERA_INPUT_CHECK(k != KernelSelection::invalid,
                      "TESSERA_CUDA_MTTKRP_KERNEL must be auto, blocked or classic (got '"
                          << std::getenv("TESSERA_CUDA_MTTKRP_KERNEL") << "')");
  return k;
}
inline const char* kernel_selection_name() {
  switch (parse_kernel_selection()) {
    case KernelSelection::automatic:
      return "blocked where supported";
    case KernelSelection::classic:
      return "classic (TESSERA_CUDA_MTTKRP_KERNEL=classic)";
    case KernelSelection::invalid:
      break;
  }
  return "invalid TESSERA_CUDA_MTTKRP_KERNEL";
}

/// The blocked input modes of a copy: slot s covers mode in_mode[s], cut into nblk[s]
/// ranges of rows[s] consecutive indices (the last one shorter). A nonzero's block is the
/// mixed-radix number (..((c_0) nblk_1 + c_1) nblk_2 + ...) of c_s = i_{in_mode[s]} / rows[s].
struct BlockSpec {
  int nin = 0;
  int in_mode[kMaxOrder] = {};
  std::uint32_t rows[kMaxOrder] = {};
  std::uint32_t nblk[kMaxOrder] = {};
};

/// Block of nonzero k of a block of n nonzeros laid out as index arrays (stride n).
__host__ __device__ inline std::uint64_t block_of(const BlockSpec& b, const index_t* idx,
                                                  std::size_t n, std::size_t k) {
  std::uint64_t id = 0;
  for (int s = 0; s < b.nin; ++s)
    id = id * b.nblk[s] + idx[static_cast<std::size_t>(b.in_mode[s]) * n + k] / b.rows[s];
  return id;
}

/// A range of one block's nonzeros, handled by one thread block of the smem kernel.
struct WorkItem {
  std::int64_t begin = 0, end = 0;
  std::uint64_t block = 0;
};

/// The layout of one mode's copy. Built by plan_mode before the sort; the smem work
/// items after it.
struct ModePlan {
  Layout layout = Layout::plain;
  BlockSpec spec;
  std::uint64_t blocks = 1;  ///< prod nblk
  int tile_rows = 0;         ///< smem: sum of rows (rows of the shared-memory tile)
  double expected_run = 0;   ///< planner's estimate of nonzeros per (block, output row)
  int hint_mode = -1;        ///< l2: the mode read with the evict-last hint (-1: none)
  std::int64_t items = 0;    ///< smem: work items
  DeviceMemory item_buf;     ///< smem: the work items
  std::string why;           ///< one clause for describe()
};

/// TTMc output rows of one mode: the distinct indices present (host, ascending) and, on
/// the device, the output row of every index (built on first use, kept by the handle).
struct TtmcRowMap {
  bool ready = false;
  std::vector<index_t> rows;
  DeviceMemory pos;  ///< dims[mode] uint32
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
    ttmc_maps_.clear();
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
  std::vector<std::uint64_t> distinct_rows() const override;  // after the kernels

  int tier() const override { return streamed_ ? 2 : 1; }
  std::string describe() const override {
    std::ostringstream os;
    if (!streamed_) {
      os << "tier 1 (device-resident): " << copies_.size() << " sorted copies, " << bytes()
         << " bytes on device " << device_;
      if (!how_sorted_.empty()) os << ", " << how_sorted_;
      if (!plans_.empty()) {
        os << "; layouts:";
        for (std::size_t m = 0; m < plans_.size(); ++m)
          os << (m ? "," : "") << " mode " << m << " " << layout_name(plans_[m].layout)
             << (plans_[m].why.empty() ? "" : " (" + plans_[m].why + ")");
      }
      describe_kernels(os);
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
    if (!how_sorted_.empty()) os << ", " << how_sorted_;
    describe_kernels(os);
    return os.str();
  }
  /// Records the MTTKRP kernel that ran for `mode` (for describe()).
  void note_kernel(int mode, const char* name, int R) const {
    if (kernels_.size() != dims_.size()) kernels_.resize(dims_.size());
    kernels_[static_cast<std::size_t>(mode)] = std::string(name) + " (R " + std::to_string(R) + ")";
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
  void make_resident() {
    copies_.resize(dims_.size());
    if (plans_.size() != dims_.size()) plans_.resize(dims_.size());
  }
  /// Releases the tier-1 copies (a device build that ran out of memory); layouts fall
  /// back to plain (the host sort's order).
  void drop_resident() {
    copies_.clear();
    plans_.clear();
    plans_.resize(dims_.size());
  }
  /// How the copies were built, for describe() ("sorted on the device ...").
  void set_how_sorted(std::string s) { how_sorted_ = std::move(s); }
  void append_how_sorted(const std::string& s) { how_sorted_ += s; }
  /// Adds a clause to the describe() text ("; " separated).
  void add_note(const std::string& s) { how_sorted_ += (how_sorted_.empty() ? "" : "; ") + s; }
  const index_t* idx(int sorted_by, int m) const {
    return static_cast<const index_t*>(copies_[sorted_by].get()) +
           static_cast<std::size_t>(m) * static_cast<std::size_t>(nnz_);
  }
  const T* vals(int sorted_by) const {
    return reinterpret_cast<const T*>(static_cast<const char*>(copies_[sorted_by].get()) +
                                      values_offset(order(), static_cast<std::size_t>(nnz_)));
  }
  DeviceMemory& copy(int sorted_by) { return copies_[sorted_by]; }
  /// Layout of the copy sorted by `mode` (plain for tier 2 and host-sorted copies).
  const ModePlan& plan(int mode) const { return plans_[static_cast<std::size_t>(mode)]; }
  ModePlan& plan(int mode) { return plans_[static_cast<std::size_t>(mode)]; }
  void set_plans(std::vector<ModePlan> p) { plans_ = std::move(p); }
  double value_norm_squared() const override;
  /// The TTMc row map of `mode` (built on the first call, on ctx's stream).
  const TtmcRowMap& ttmc_map(Context& ctx, int mode) const;

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

  /// "; MTTKRP kernel ...": the selection rule, and the kernel of the last MTTKRP per mode.
  void describe_kernels(std::ostream& os) const {
    os << "; MTTKRP kernel: " << kernel_selection_name()
       << " (blocked: " << blocked::supported_shapes<T>()
       << ", plain and l2 layouts; else classic)";
    bool any = false;
    for (std::size_t m = 0; m < kernels_.size(); ++m) {
      if (kernels_[m].empty()) continue;
      os << (any ? "," : ", last run:") << " mode " << m << " " << kernels_[m];
      any = true;
    }
  }

  std::vector<std::uint64_t> dims_;
  nnz_t nnz_;
  int device_;
  mutable std::vector<std::string> kernels_;    ///< per mode: kernel of the last MTTKRP
  std::vector<DeviceMemory> copies_;            ///< tier 1
  std::vector<ModePlan> plans_;                 ///< tier 1: layout per mode
  std::string how_sorted_;                      ///< tier 1: device or host sort, time
  std::unique_ptr<StreamedStore<T>> streamed_;  ///< tier 2
  cudaStream_t compute_stream_ = nullptr;
  mutable std::vector<TtmcRowMap> ttmc_maps_;  ///< per mode, built by ttmc_map

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
  int hot_mode;  ///< l2 layout: the blocked input mode, read with an L2 evict-last hint
};

// ---- vector access to factor rows ----
//
// A lane handles V consecutive columns (V = 16 / sizeof(T) when R is a multiple of V and
// every factor and output row is 16-byte aligned, else 1), so a group of 32 / V lanes
// covers a pass of 32 columns and a warp works on V nonzeros at once, each group on its
// own sub-tile. Index broadcasts (__shfl_sync with width 32 / V) and address arithmetic
// are shared by the V nonzeros, and each row is read with 16-byte loads.

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_global(const T* p) {
  Pack<T, V> r;
  if constexpr (V == 1) {
    r.v[0] = __ldg(p);
  } else if constexpr (std::is_same_v<T, float> && V == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
  } else {
    static_assert(std::is_same_v<T, double> && V == 2, "unsupported vector width");
    const double2 q = __ldg(reinterpret_cast<const double2*>(p));
    r.v[0] = q.x, r.v[1] = q.y;
  }
  return r;
}

/// L2 policy "evict last" for the whole access (PTX createpolicy, sm_80+).
__device__ __forceinline__ std::uint64_t evict_last_policy() {
  std::uint64_t pol;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_global_hint(const T* p, std::uint64_t pol) {
  Pack<T, V> r;
  if constexpr (std::is_same_v<T, float> && V == 1) {
    asm("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(r.v[0]) : "l"(p), "l"(pol));
  } else if constexpr (std::is_same_v<T, float> && V == 4) {
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(r.v[0]), "=f"(r.v[1]), "=f"(r.v[2]), "=f"(r.v[3])
        : "l"(p), "l"(pol));
  } else if constexpr (std::is_same_v<T, double> && V == 1) {
    asm("ld.global.nc.L2::cache_hint.f64 %0, [%1], %2;" : "=d"(r.v[0]) : "l"(p), "l"(pol));
  } else {
    static_assert(std::is_same_v<T, double> && V == 2, "unsupported vector width");
    asm("ld.global.nc.L2::cache_hint.v2.f64 {%0, %1}, [%2], %3;"
        : "=d"(r.v[0]), "=d"(r.v[1])
        : "l"(p), "l"(pol));
  }
  return r;
}

/// Adds (shared_row: with atomics; add: with a plain read and store) or stores the V
/// columns at `col` of output row `row`.
template <typename T, int V>
__device__ __forceinline__ void write_pack(T* out, index_t row, int R, int col, bool col_ok,
                                           const T (&acc)[V], bool shared_row, bool add) {
  if (!col_ok) return;
  T* p = out + static_cast<std::size_t>(row) * static_cast<std::size_t>(R) + col;
  if (shared_row) {
#pragma unroll
    for (int u = 0; u < V; ++u) atomicAdd(p + u, acc[u]);
  } else {
    Pack<T, V> q;
    if (add) q = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
    for (int u = 0; u < V; ++u) q.v[u] = add ? q.v[u] + acc[u] : acc[u];
    *reinterpret_cast<Pack<T, V>*>(p) = q;
  }
}

/// Where the tile loop reads factor rows: global memory (optionally one mode with an
/// L2 evict-last hint), or the shared-memory tile of the smem kernel.
template <typename T>
struct RowSource {
  const T* tile = nullptr;             ///< smem: the tile, 32 columns per row
  const std::uint32_t* lo = nullptr;   ///< smem: first global row of each mode's range
  const std::uint32_t* off = nullptr;  ///< smem: first tile row of each mode's range
  int hot_mode = -1;                   ///< global: the mode read with the hint
  std::uint64_t pol = 0;
};

/// One column pass of the tile loop for this lane's group: the group's nonzeros
/// [begin, begin + len) of the copy (len may be 0), `steps` batches of G = 32 / V (the
/// longest group's count, so every lane runs the same batches: the shuffles are
/// warp-wide). Finished rows are stored, or added with atomics when they may be shared:
/// always with kAllShared, else the group's first and last rows. kAcc: a stored row is
/// added to what `out` holds (read, add, store) instead (tier 3: earlier chunks' sums).
template <typename T, int V, bool kSmem, bool kAllShared, bool kAcc = false>
__device__ __forceinline__ void group_pass(const MttkrpParams<T>& p, const RowSource<T>& src,
                                           std::int64_t begin, std::int64_t len, std::int64_t steps,
                                           int c0, int gl) {
  constexpr int G = kWarp / V;
  const int col = c0 + gl * V;
  const bool col_ok = col < p.R;  // R % V == 0 when V > 1: the whole pack or nothing
  const index_t* rows = p.idx[p.mode];
  index_t cur = len > 0 ? __ldcs(rows + begin) : 0;
  bool cur_shared = true;  // the first row may continue from the previous sub-tile
  T acc[V];
#pragma unroll
  for (int u = 0; u < V; ++u) acc[u] = T(0);

  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t off = step * G;
    const std::int64_t rem = len - off;
    const int cnt = rem <= 0 ? 0 : (rem < G ? static_cast<int>(rem) : G);
    const std::int64_t k = begin + off + gl;
    const bool valid = gl < cnt;
    // Cooperative, coalesced loads: lane gl of the group holds its nonzero off + gl.
    const T my_val = valid ? __ldcs(p.vals + k) : T(0);
    const index_t my_row = valid ? __ldcs(rows + k) : 0;

    T prod[G][V];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const T v = __shfl_sync(kFullMask, my_val, j, G);
#pragma unroll
      for (int u = 0; u < V; ++u) prod[j][u] = v;
    }
    for (int m = 0; m < p.order; ++m) {
      if (m == p.mode) continue;
      index_t my_c = valid ? __ldcs(p.idx[m] + k) : 0;
      if constexpr (kSmem) {
        if (valid) my_c -= src.lo[m];
        const T* S = src.tile + static_cast<std::size_t>(src.off[m]) * kWarp + gl * V;
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j, G);
          // Lanes past cnt read tile row 0 and multiply a zero.
          const Pack<T, V> a =
              *reinterpret_cast<const Pack<T, V>*>(S + static_cast<std::size_t>(cj) * kWarp);
#pragma unroll
          for (int u = 0; u < V; ++u) prod[j][u] *= a.v[u];
        }
      } else {
        const T* A = p.factors[m] + col;
        const bool hot = m == src.hot_mode;
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j, G);
          if (col_ok && j < cnt) {
            const T* a = A + static_cast<std::size_t>(cj) * static_cast<std::size_t>(p.R);
            const Pack<T, V> q = hot ? load_global_hint<T, V>(a, src.pol) : load_global<T, V>(a);
#pragma unroll
            for (int u = 0; u < V; ++u) prod[j][u] *= q.v[u];
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const index_t rj = __shfl_sync(kFullMask, my_row, j, G);
      if (j < cnt) {  // uniform within the group
        if (rj != cur) {
          write_pack<T, V>(p.out, cur, p.R, col, col_ok, acc, kAllShared || cur_shared, kAcc);
          cur = rj;
          cur_shared = false;
#pragma unroll
          for (int u = 0; u < V; ++u) acc[u] = T(0);
        }
#pragma unroll
        for (int u = 0; u < V; ++u) acc[u] += prod[j][u];
      }
    }
  }
  // The last row may continue in the next sub-tile.
  if (len > 0) write_pack<T, V>(p.out, cur, p.R, col, col_ok, acc, true, false);
}

/// The tile kernel (plain layout, and the l2 layout with kL2). Warp w owns the tile of
/// kTileNnz nonzeros at w kTileNnz, cut into V sub-tiles, one per group of 32 / V
/// lanes. The tensor's own arrays are read once, with the streaming hint (__ldcs: evict
/// first), so they do not push factor rows out of L2. kL2: the copy is ordered by blocks
/// of p.hot_mode's indices (plan_mode), whose rows are read with an evict-last hint so
/// the current block's rows stay in L2 while the other modes' rows stream past; an
/// output row recurs in every block, so every finished row is added with atomics. kAcc:
/// see group_pass.
template <typename T, int V, bool kL2, bool kAcc = false>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kTileBlocksPerSm)
    mttkrp_tile_kernel(const __grid_constant__ MttkrpParams<T> p) {
  constexpr int G = kWarp / V;
  constexpr std::int64_t kSub = kTileNnz / V;
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int gl = lane % G, grp = lane / G;
  const std::int64_t warp =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x / kWarp);
  const std::int64_t wbegin = warp * kTileNnz;
  if (wbegin >= p.nnz) return;  // whole warp leaves together
  const std::int64_t begin = wbegin + grp * kSub;
  const std::int64_t rest = p.nnz - begin;
  const std::int64_t len = rest <= 0 ? 0 : (rest < kSub ? rest : kSub);
  const std::int64_t wrest = p.nnz - wbegin;  // group 0's count sets the batches
  const std::int64_t steps = ((wrest < kSub ? wrest : kSub) + G - 1) / G;
  RowSource<T> src;
  if constexpr (kL2) {
    src.hot_mode = p.hot_mode;
    src.pol = evict_last_policy();
  }
  for (int c0 = 0; c0 < p.R; c0 += kWarp)
    group_pass<T, V, false, kL2, kAcc>(p, src, begin, len, steps, c0, gl);
}

/// Vector width of the kernels for this call: 16-byte packs when R allows and every
/// factor read and the output are 16-byte aligned.
template <typename T>
int vector_width(const MttkrpParams<T>& p) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  if (p.R % kV != 0) return 1;
  auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  if (!aligned(p.out)) return 1;
  for (int m = 0; m < p.order; ++m)
    if (m != p.mode && !aligned(p.factors[m])) return 1;
  return kV;
}

template <typename T, bool kL2, bool kAcc = false>
void launch_tiles(cudaStream_t stream, const MttkrpParams<T>& p) {
  const std::int64_t tiles = (p.nnz + kTileNnz - 1) / kTileNnz;
  const std::int64_t blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  if (vector_width(p) == kV)
    mttkrp_tile_kernel<T, kV, kL2, kAcc>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(p);
  else
    mttkrp_tile_kernel<T, 1, kL2, kAcc>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

/// Nonzeros per warp of the blocked kernel: the classic tile, in whole staging batches.
constexpr int kBlockedTile =
    std::max(blocked::kStage, kTileNnz / blocked::kStage * blocked::kStage);

/// Nonzeros per warp of the blocked kernel for a launch over nnz nonzeros: kBlockedTile,
/// or less (whole staging batches, at least one) when that would leave fewer than two
/// full waves of warps on the device: the gathers are latency-bound, so a small tensor
/// (congress: 2.86M nonzeros, 175 blocks of 2048-nonzero warps for 528 resident blocks on
/// an H100) needs more, shorter tiles to keep enough of them in flight.
int blocked_tile(std::int64_t nnz) {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::int64_t want = 2 * static_cast<std::int64_t>(std::max(sms, 1)) *
                            blocked::kBlocksPerSm * blocked::kWarpsPerBlock;
  if (nnz >= want * kBlockedTile) return kBlockedTile;
  const std::int64_t per = nnz / want / blocked::kStage * blocked::kStage;
  return static_cast<int>(std::clamp<std::int64_t>(per, blocked::kStage, kBlockedTile));
}

/// The blocked kernel over p (blocked::supports must hold). l2: the l2 layout, whose
/// blocked mode `hint_mode` (-1: no hint) becomes input slot 0. accumulate (plain layout
/// only): rows inside one sub-tile are added to `out` (blocked::Params::accumulate).
template <typename T>
void launch_blocked(cudaStream_t stream, const MttkrpParams<T>& p, bool l2, int hint_mode,
                    bool accumulate = false) {
  blocked::Params<T> q;
  q.rows = p.idx[p.mode];
  int nin = 0;
  auto add = [&](int m) {
    q.in_idx[nin] = p.idx[m];
    q.in_fac[nin] = p.factors[m];
    ++nin;
  };
  const bool hint = l2 && hint_mode >= 0 && hint_mode != p.mode;
  if (hint) add(hint_mode);
  for (int m = 0; m < p.order; ++m)
    if (m != p.mode && !(hint && m == hint_mode)) add(m);
  q.vals = p.vals;
  q.out = p.out;
  q.nnz = p.nnz;
  q.R = p.R;
  int lanes = p.R / blocked::kVec<T>;
  while (lanes > 1) {
    lanes /= 2;
    ++q.log_lanes;
  }
  q.tile = blocked_tile(p.nnz);
  q.hint = hint;
  q.accumulate = accumulate;
  auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  q.aligned16 = aligned(q.rows) && aligned(q.vals);
  for (int s = 0; s < nin; ++s) q.aligned16 = q.aligned16 && aligned(q.in_idx[s]);
  blocked::launch(stream, q, nin, l2);
}

// ---------------------------------------------------------------------------
// Blocked layouts (tier 1, copies sorted on the device)
// ---------------------------------------------------------------------------
//
// The tile kernel gathers two factor rows (order 3) per nonzero. When the factors fit in
// L2 those gathers are served at L2 bandwidth, and when they do not, each one is a random
// HBM read: either way the gathers, not the tensor, set the time. Two layouts cut them,
// chosen per mode by plan_mode from the shape (or forced, see layout_override):
//
// smem: every input mode m is cut into ranges of rows[m] indices such that one range of
//   each input mode fits in shared memory together (sum rows[m] x 32 columns). The copy
//   is sorted by (block, i_n, i_s); work items of at most kItemNnz nonzeros of one block
//   each go to one thread block of kSmemWarps warps, which loads the block's factor rows
//   (32 columns at a time) into shared memory and then runs the tile loop over its
//   nonzeros with every gather from shared memory. The items of a block share its output
//   rows, so finished rows are added with atomics; the planner takes this layout only
//   when a block's nonzeros come in runs of several per output row (expected_run) and
//   outnumber the tile rows loaded for them.
// l2: one input mode (the shortest whose factor does not fit in L2 with the rest) is
//   cut into ranges that fit in a part of L2; the copy is sorted by (block, i_n, i_s)
//   and read by the tile kernel with kL2 (evict-last hint on that mode's rows, atomics
//   for every finished row). The whole device works through one block at a time, so
//   that mode's gathers hit L2 and only the other modes' rows come from HBM.
// Both are orders of the same nonzeros, so results equal the plain layout's to rounding
// (sums are taken in a different order).

constexpr int kSmemWarps = 16;
/// Largest work item of the smem kernel (nonzeros). Smaller items balance better, larger
/// ones load the shared-memory tile less often.
constexpr std::int64_t kItemNnz = 65536;
/// Factor rows each warp loads at once when it fills the shared-memory tile.
constexpr int kFillDepth = 8;

template <typename T>
struct SmemParams {
  MttkrpParams<T> p;
  BlockSpec b;  ///< every input mode, in slot order
  std::uint32_t in_dims[kMaxOrder];
  const WorkItem* items;
};

template <typename T, int V>
__global__ void __launch_bounds__(kSmemWarps* kWarp, 1)
    mttkrp_smem_kernel(const __grid_constant__ SmemParams<T> q) {
  constexpr int G = kWarp / V;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);
  // Per mode (indexed by mode, not slot): first global row and first tile row.
  __shared__ std::uint32_t s_lo[kMaxOrder], s_len[kMaxOrder], s_off[kMaxOrder];
  const MttkrpParams<T>& p = q.p;
  const int nin = q.b.nin;
  const WorkItem it = q.items[blockIdx.x];
  if (threadIdx.x == 0) {
    std::uint64_t b = it.block;
    for (int s = nin - 1; s >= 0; --s) {
      const auto c = static_cast<std::uint32_t>(b % q.b.nblk[s]);
      b /= q.b.nblk[s];
      const int m = q.b.in_mode[s];
      const std::uint32_t lo = c * q.b.rows[s];
      s_lo[m] = lo;
      s_len[m] = min(q.b.rows[s], q.in_dims[s] - lo);
    }
    std::uint32_t off = 0;
    for (int s = 0; s < nin; ++s) {
      s_off[q.b.in_mode[s]] = off;
      off += q.b.rows[s];
    }
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int gl = lane % G, grp = lane / G;
  // Each group takes a contiguous share of the item, so runs of an output row stay whole.
  const std::int64_t n = it.end - it.begin;
  constexpr int kParts = kSmemWarps * V;
  const int part = warp * V + grp;
  const std::int64_t begin = it.begin + n * part / kParts;
  const std::int64_t len = it.begin + n * (part + 1) / kParts - begin;
  const std::int64_t steps =
      (static_cast<std::int64_t>(__reduce_max_sync(kFullMask, static_cast<unsigned>(len))) + G -
       1) /
      G;
  RowSource<T> src;
  src.tile = tile;
  src.lo = s_lo;
  src.off = s_off;

  for (int c0 = 0; c0 < p.R; c0 += kWarp) {
    if (c0 > 0) __syncthreads();  // every warp is done with the previous columns
    for (int s = 0; s < nin; ++s) {
      const int m = q.b.in_mode[s];
      const T* A = p.factors[m] + c0 + lane;
      T* dst = tile + static_cast<std::size_t>(s_off[m]) * kWarp;
      const std::uint32_t lo = s_lo[m], len_m = s_len[m];
      const bool col_ok = c0 + lane < p.R;
      // kFillDepth rows per warp in flight: the fill is latency-bound otherwise.
      for (std::uint32_t r0 = static_cast<std::uint32_t>(warp); r0 < len_m;
           r0 += kSmemWarps * kFillDepth) {
        T v[kFillDepth];
#pragma unroll
        for (int u = 0; u < kFillDepth; ++u) {
          const std::uint32_t r = r0 + static_cast<std::uint32_t>(u * kSmemWarps);
          v[u] = (col_ok && r < len_m)
                     ? __ldg(A + static_cast<std::size_t>(lo + r) * static_cast<std::size_t>(p.R))
                     : T(0);
        }
#pragma unroll
        for (int u = 0; u < kFillDepth; ++u) {
          const std::uint32_t r = r0 + static_cast<std::uint32_t>(u * kSmemWarps);
          if (r < len_m) dst[static_cast<std::size_t>(r) * kWarp + lane] = v[u];
        }
      }
    }
    __syncthreads();
    group_pass<T, V, true, true>(p, src, begin, len, steps, c0, gl);
  }
}

template <typename T>
void launch_smem(cudaStream_t stream, const MttkrpParams<T>& p, const ModePlan& plan,
                 const std::vector<std::uint64_t>& dims) {
  SmemParams<T> q{};
  q.p = p;
  q.b = plan.spec;
  for (int s = 0; s < plan.spec.nin; ++s)
    q.in_dims[s] = static_cast<std::uint32_t>(dims[static_cast<std::size_t>(plan.spec.in_mode[s])]);
  q.items = static_cast<const WorkItem*>(plan.item_buf.get());
  const std::size_t smem = static_cast<std::size_t>(plan.tile_rows) * kWarp * sizeof(T);
  TESSERA_EXPECTS(plan.items <= std::numeric_limits<int>::max(), "too many work items");
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  // The tile's rows are 32 columns (16-byte aligned); only R and the output decide.
  const bool vec = p.R % kV == 0 && reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0;
  auto launch = [&](auto kernel) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    kernel<<<static_cast<unsigned>(plan.items), kSmemWarps * kWarp, smem, stream>>>(q);
  };
  if (vec)
    launch(mttkrp_smem_kernel<T, kV>);
  else
    launch(mttkrp_smem_kernel<T, 1>);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// distinct_rows: row starts of the sorted copies
// ---------------------------------------------------------------------------

/// *count += number of k in [0, n) with k == 0 or rows[k] != rows[k - 1] (rows sorted).
__global__ void count_row_starts(const index_t* __restrict__ rows, std::int64_t n,
                                 unsigned long long* count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    c += (k == 0 || rows[k] != rows[k - 1]) ? 1ull : 0ull;
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(count, c);
}

/// flags[rows[k]] = 1 for every k in [0, n) (rows in any order).
__global__ void mark_rows(const index_t* __restrict__ rows, std::int64_t n, unsigned char* flags) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    flags[rows[k]] = 1;
}

/// *count += number of nonzero flags among n.
__global__ void count_flags(const unsigned char* __restrict__ flags, std::int64_t n,
                            unsigned long long* count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    c += flags[k] != 0 ? 1ull : 0ull;
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(count, c);
}

/// *sum += sum of v[k]^2 in double.
template <typename T>
__global__ void sum_squares(const T* __restrict__ v, std::int64_t n, double* sum) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  double c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const double x = static_cast<double>(v[k]);
    c += x * x;
  }
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(sum, c);
}

template <typename T>
double CudaTensorHandle<T>::value_norm_squared() const {
  if (nnz_ == 0) return 0;
  if (streamed_) {  // tier 2: the values of mode 0's chunks in pinned host memory
    const auto& s = *streamed_;
    double sum = 0;
    for (int k = 0; k < s.chunks; ++k) {
      const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
      const auto* v = reinterpret_cast<const T*>(s.host[0].get() + s.chunk_offset(k) +
                                                 values_offset(order(), cnt));
      for (std::size_t j = 0; j < cnt; ++j)
        sum += static_cast<double>(v[j]) * static_cast<double>(v[j]);
    }
    return sum;
  }
  DeviceGuard g(device_);
  DeviceMemory acc(sizeof(double));
  TESSERA_CUDA_CHECK(cudaMemset(acc.get(), 0, sizeof(double)));
  const auto n64 = static_cast<std::int64_t>(nnz_);
  sum_squares<T><<<grid_for(n64, 4096), kBlock>>>(vals(0), n64, static_cast<double*>(acc.get()));
  TESSERA_CUDA_CHECK_LAUNCH();
  double host = 0;
  TESSERA_CUDA_CHECK(cudaMemcpy(&host, acc.get(), sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
std::vector<std::uint64_t> CudaTensorHandle<T>::distinct_rows() const {
  const int N = order();
  std::vector<std::uint64_t> out(static_cast<std::size_t>(N), 0);
  if (nnz_ == 0) return out;
  if (streamed_) {
    // Tier 2: the sorted copies are in pinned host memory, chunk after chunk. The
    // copy stream may still read them, which does not matter for reading here.
    const auto& s = *streamed_;
    for (int n = 0; n < N; ++n) {
      std::uint64_t c = 0;
      bool have_prev = false;
      index_t prev = 0;
      for (int k = 0; k < s.chunks; ++k) {
        const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
        const auto* rows = reinterpret_cast<const index_t*>(
                               s.host[static_cast<std::size_t>(n)].get() + s.chunk_offset(k)) +
                           static_cast<std::size_t>(n) * cnt;
        for (std::size_t j = 0; j < cnt; ++j) {
          if (!have_prev || rows[j] != prev) ++c;
          prev = rows[j];
          have_prev = true;
        }
      }
      out[static_cast<std::size_t>(n)] = c;
    }
    return out;
  }
  // Tier 1: the copy sorted by mode n has its mode-n indices in order. The legacy
  // default stream used here is ordered after the backend's (blocking) stream.
  DeviceGuard g(device_);
  DeviceMemory counts(static_cast<std::size_t>(N) * sizeof(unsigned long long));
  auto* dc = static_cast<unsigned long long*>(counts.get());
  TESSERA_CUDA_CHECK(cudaMemset(dc, 0, static_cast<std::size_t>(N) * sizeof(unsigned long long)));
  const auto n64 = static_cast<std::int64_t>(nnz_);
  for (int n = 0; n < N; ++n) {
    if (plans_.empty() || plans_[static_cast<std::size_t>(n)].layout == Layout::plain) {
      count_row_starts<<<grid_for(n64, 4096), kBlock>>>(idx(n, n), n64, dc + n);
      TESSERA_CUDA_CHECK_LAUNCH();
      continue;
    }
    // A blocked copy repeats its rows once per block: mark them in a flag array instead.
    const auto dim = static_cast<std::int64_t>(dims_[static_cast<std::size_t>(n)]);
    DeviceMemory flags(static_cast<std::size_t>(std::max<std::int64_t>(dim, 1)));
    TESSERA_CUDA_CHECK(cudaMemset(flags.get(), 0, flags.bytes()));
    auto* f = static_cast<unsigned char*>(flags.get());
    mark_rows<<<grid_for(n64, 4096), kBlock>>>(idx(n, n), n64, f);
    TESSERA_CUDA_CHECK_LAUNCH();
    count_flags<<<grid_for(dim, 4096), kBlock>>>(f, dim, dc + n);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  std::vector<unsigned long long> host(static_cast<std::size_t>(N));
  TESSERA_CUDA_CHECK(cudaMemcpy(host.data(), dc, host.size() * sizeof(unsigned long long),
                                cudaMemcpyDeviceToHost));
  for (int n = 0; n < N; ++n) out[static_cast<std::size_t>(n)] = host[static_cast<std::size_t>(n)];
  return out;
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

// ---- host sort (tier 1 fallback and tier 2) ----

/// Sorts the nonzeros lexicographically by (i_n, i_{n+1 mod N}, position) into `perm`
/// (parallel; host_sort.cpp). The secondary key groups a row's nonzeros by their
/// next-mode factor row (cache reuse).
/// perm and tmp: nnz entries each (tmp is scratch).
template <typename T>
void sort_for_mode(const SparseTensor<T>& x, int n, nnz_t* perm, nnz_t* tmp) {
  const int N = x.order();
  const int s = (n + 1) % N;
  host_sort::sort_lexicographic(x.idx[n].data(), x.dims[n], N > 1 ? x.idx[s].data() : nullptr,
                                x.dims[s], perm, tmp, static_cast<std::size_t>(x.nnz()));
}

/// Uninitialised host array (no serial zeroing of what the parallel code overwrites).
template <typename U>
std::unique_ptr<U[]> host_array(std::size_t n) {
  return std::unique_ptr<U[]>(new U[n]);
}

/// Writes nonzeros perm[first .. first + cnt) as one block (index arrays, values) at dst.
template <typename T>
void write_block(const SparseTensor<T>& x, const nnz_t* perm, nnz_t first, nnz_t cnt, char* dst) {
  const int N = x.order();
  const nnz_t* pk = perm + first;
  const auto c = static_cast<std::size_t>(cnt);
  auto* hidx = reinterpret_cast<index_t*>(dst);
  for (int m = 0; m < N; ++m)
    host_sort::gather(x.idx[m].data(), pk, c, hidx + static_cast<std::size_t>(m) * c);
  host_sort::gather(x.vals.data(), pk, c, reinterpret_cast<T*>(dst + values_offset(N, c)));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Tier 1 with the sorts on the host: one sorted copy at a time in a host staging
/// block, uploaded to its device copy. Device memory: the final copies only.
template <typename T>
void prepare_resident(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h) {
  const auto t0 = std::chrono::steady_clock::now();
  const int N = x.order();
  const nnz_t nnz = x.nnz();
  h.make_resident();
  auto staging = host_array<char>(h.copy_bytes());
  auto perm = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  auto tmp = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  for (int n = 0; n < N; ++n) {
    sort_for_mode(x, n, perm.get(), tmp.get());
    write_block(x, perm.get(), 0, nnz, staging.get());
    DeviceMemory& dm = h.copy(n);
    dm.reserve(h.copy_bytes());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dm.get(), staging.get(), h.copy_bytes(),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();  // staging is reused for the next mode
  }
  std::ostringstream os;
  os.precision(3);
  os << "sorted on the host in " << seconds_since(t0) << " s";
  h.set_how_sorted(os.str());
}

// ---- device sort (tier 1) ----
//
// The COO (index arrays and values, laid out like a sorted copy) is uploaded once. Per
// mode n, with s = n + 1 mod N:
//   1. key[k] = i_n[k] << bits(s) | i_s[k] and perm[k] = k, where bits(m) is the number
//      of bits of dims[m] - 1; the key is uint32 when bits(n) + bits(s) <= 32, else
//      uint64 (dims <= 2^32, so it always fits);
//   2. one cub::DeviceRadixSort::SortPairs (key, perm) over bits [0, bits(n) + bits(s)):
//      LSD radix sort is stable, so equal keys keep position order and the result is the
//      order of the host sort, (i_n, i_s, k);
//   3. the keys, the sort's temporary storage and the other perm buffer are freed, the
//      copy of mode n is allocated, and one kernel gathers every index array and the
//      values through perm into it; perm is freed.
// When bits(n) + bits(s) == 0 (both modes of length 1) the order is the input order and
// the copy is the COO block itself, copied.
// Counts: perm is uint32 and CUB's num_items an int while nnz <= INT_MAX; beyond that
// both are 64-bit (CUB picks 64-bit offsets for a 64-bit num_items and sorts in portions
// of < 2^28 items, so any nnz works). Kernels use grid-stride loops over int64.
// Peak device memory (device_sort_peak): the largest of, over the modes n,
//   n copies + COO + 2 nnz (sizeof key + sizeof perm) + CUB temporary   (sort of mode n)
//   (n + 1) copies + COO + nnz sizeof perm                               (gather of mode n)
// i.e. at most (final copies) + (one COO, the size of one copy) + (sort temporaries).
// For order 3, float, uint32 keys: 4 copies + 8 bytes per nonzero (the copies are 16).

/// bits(m): number of bits of every index below `dim` (0 when dim <= 1).
int index_bits(std::uint64_t dim) {
  return host_sort::key_bits(dim);
}

/// The sort key of mode n: (block, i_n, i_s) packed as block << (bits(n) + shift) |
/// i_n << shift | i_s, where the block term exists for the blocked layouts only.
struct ModeKey {
  int primary = -1;     ///< mode n, or -1 when it has no bits
  int secondary = -1;   ///< mode s, or -1 when it has no bits (or N == 1, or no room)
  int shift = 0;        ///< bits of the secondary
  int block_shift = 0;  ///< bits of primary and secondary
  int block_bits = 0;   ///< bits of the block number (0: plain layout)
  BlockSpec block;
  int end_bit = 0;  ///< bits of the whole key
  bool wide() const { return end_bit > 32; }
};

/// The key of mode n under `plan` (plain when plan is null). A blocked key drops the
/// secondary when it would not fit in 64 bits (plan_mode refuses layouts whose block
/// and primary bits alone do not fit).
ModeKey mode_key(const std::vector<std::uint64_t>& dims, int n, const ModePlan* plan = nullptr) {
  const int N = static_cast<int>(dims.size());
  ModeKey k;
  const int bn = index_bits(dims[n]);
  int bs = N > 1 ? index_bits(dims[(n + 1) % N]) : 0;
  int bb = 0;
  if (plan != nullptr && plan->layout != Layout::plain) {
    bb = index_bits(plan->blocks);
    k.block = plan->spec;
    if (bb + bn + bs > 64) bs = 0;
  }
  if (bn > 0) k.primary = n;
  if (bs > 0) {
    k.secondary = (n + 1) % N;
    k.shift = bs;
  }
  k.block_shift = bn + bs;
  k.block_bits = bb;
  k.end_bit = bb + bn + bs;
  return k;
}

struct KeyParams {
  const index_t* coo;  ///< index arrays of the COO, stride n
  std::int64_t n;
  ModeKey key;
};

/// key[k] = block << block_shift | primary[k] << shift | secondary[k], perm[k] = k.
template <typename K, typename P>
__global__ void make_sort_keys(const __grid_constant__ KeyParams p, K* __restrict__ key,
                               P* __restrict__ perm) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(p.n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    const auto uk = static_cast<std::size_t>(k);
    K v = 0;
    if (p.key.block_bits > 0)
      v = static_cast<K>(block_of(p.key.block, p.coo, un, uk)) << p.key.block_shift;
    if (p.key.primary >= 0)
      v |= static_cast<K>(p.coo[static_cast<std::size_t>(p.key.primary) * un + uk]) << p.key.shift;
    if (p.key.secondary >= 0)
      v |= static_cast<K>(p.coo[static_cast<std::size_t>(p.key.secondary) * un + uk]);
    key[k] = v;
    perm[k] = static_cast<P>(k);
  }
}

/// starts[b] = first position of block b in a copy sorted by blocks (blocks without
/// nonzeros keep their initial value).
__global__ void mark_block_starts(const __grid_constant__ BlockSpec b, const index_t* idx,
                                  std::int64_t n, std::int64_t* starts) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const std::uint64_t bk = block_of(b, idx, un, static_cast<std::size_t>(k));
    if (k == 0 || block_of(b, idx, un, static_cast<std::size_t>(k - 1)) != bk) starts[bk] = k;
  }
}

// ---- choosing the layout of each mode ----

/// What the planner needs to know of the device.
struct DeviceLimits {
  std::size_t smem_per_block = 0;  ///< opt-in shared memory per thread block
  std::size_t l2 = 0;              ///< L2 bytes
  int sms = 1;
};

DeviceLimits device_limits(int device) {
  int smem = 0, l2 = 0, sms = 0;
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return {static_cast<std::size_t>(smem), static_cast<std::size_t>(l2), std::max(sms, 1)};
}

/// Layout chosen by the environment (tuning and tests): TESSERA_CUDA_LAYOUT =
/// default | plain | auto | smem | l2, and TESSERA_CUDA_BLOCK_ROWS = the tile rows of
/// smem (sum over input modes) or the rows of l2's blocked mode. auto lets plan_mode
/// choose from the shape; forced layouts skip its profitability tests (not its limits).
/// default: the l1 plan (below) where it applies, else plain. Measured on an H200
/// (docs/perf/gpu-h200-layouts.md): with every factor in L2 the l1 plan cut the nell-2
/// shaped MTTKRP from 1.87 to 1.19 ms (uniform, R = 32); the smem and L2-sized l2 plans
/// of auto beat plain by no more than the run-to-run spread once the tile kernel ran at
/// full occupancy, so they stay opt-in.
struct LayoutOverride {
  std::string layout = "default";
  std::uint64_t block_rows = 0;
  bool l2_hint = true;  ///< TESSERA_CUDA_L2_HINT=0: l2 layout without the evict-last hint
};

LayoutOverride layout_override() {
  LayoutOverride o;
  if (const char* e = std::getenv("TESSERA_CUDA_LAYOUT"); e != nullptr && *e != '\0') o.layout = e;
  TESSERA_INPUT_CHECK(
      o.layout == "default" || o.layout == "auto" || o.layout == "plain" || o.layout == "smem" ||
          o.layout == "l2",
      "TESSERA_CUDA_LAYOUT must be default, auto, plain, smem or l2 (got '" << o.layout << "')");
  if (const char* e = std::getenv("TESSERA_CUDA_BLOCK_ROWS"); e != nullptr && *e != '\0') {
    char* endp = nullptr;
    const unsigned long long v = std::strtoull(e, &endp, 10);
    TESSERA_INPUT_CHECK(endp != e && *endp == '\0' && v >= 1 && v < (1ull << 32),
                        "TESSERA_CUDA_BLOCK_ROWS must be a positive integer (got '" << e << "')");
    o.block_rows = v;
  }
  if (const char* e = std::getenv("TESSERA_CUDA_L2_HINT"); e != nullptr && std::string(e) == "0")
    o.l2_hint = false;
  return o;
}

/// Expected nonzeros per (block, output row) when nnz_pb nonzeros fall uniformly on
/// `out_dim` output rows.
double expected_run(double nnz_pb, double out_dim) {
  if (nnz_pb <= 0 || out_dim <= 0) return 0;
  const double touched = out_dim * -std::expm1(-nnz_pb / out_dim);
  return nnz_pb / std::max(touched, 1.0);
}

/// Rows of the blocked mode in the l1 plan: 64 rows (8 KB of a float row of 32 columns)
/// measured fastest on an H200 for R = 16, 32 and 64 among 64 .. 4096 (nell-2 shape,
/// uniform and power-law; docs/perf/gpu-h200-layouts.md).
constexpr std::uint64_t kL1BlockRows = 64;
/// Shortest expected run (nonzeros per block and output row) for which the l1 plan is
/// taken: each run ends in one atomic flush of its output row.
constexpr double kL1MinRun = 8.0;

/// The layout of mode n's copy (see "Blocked layouts"). `row_bytes` is one factor row
/// slice of 32 columns (the kernels' column block).
ModePlan plan_mode(const std::vector<std::uint64_t>& dims, int n, nnz_t nnz, std::size_t value_size,
                   const DeviceLimits& lim, const LayoutOverride& ov, Workload workload) {
  ModePlan plan;
  const int N = static_cast<int>(dims.size());
  if (N < 2 || nnz == 0 || ov.layout == "plain") return plan;
  const std::size_t row_bytes = static_cast<std::size_t>(kWarp) * value_size;
  const int bn = index_bits(dims[static_cast<std::size_t>(n)]);
  const double out_dim = static_cast<double>(dims[static_cast<std::size_t>(n)]);
  std::vector<int> inputs;
  for (int m = 0; m < N; ++m)
    if (m != n) inputs.push_back(m);
  std::sort(inputs.begin(), inputs.end(), [&](int a, int b) {
    return dims[static_cast<std::size_t>(a)] < dims[static_cast<std::size_t>(b)] ||
           (dims[static_cast<std::size_t>(a)] == dims[static_cast<std::size_t>(b)] && a < b);
  });
  auto finish = [&](ModePlan& p) {
    p.blocks = 1;
    for (int s = 0; s < p.spec.nin; ++s) {
      const std::uint64_t d = dims[static_cast<std::size_t>(p.spec.in_mode[s])];
      p.spec.nblk[s] = static_cast<std::uint32_t>((d + p.spec.rows[s] - 1) / p.spec.rows[s]);
      p.blocks *= p.spec.nblk[s];
    }
    p.expected_run =
        expected_run(static_cast<double>(nnz) / static_cast<double>(p.blocks), out_dim);
  };
  const bool force_smem = ov.layout == "smem", force_l2 = ov.layout == "l2";

  // The l2 layout with `rows` rows of the shortest input mode longer than `rows` (any
  // mode longer than 1 when forced): taken when forced or when runs average min_run.
  auto blocked_mode = [&](std::uint64_t rows, double min_run, const char* what) {
    int hot = -1;
    for (int m : inputs)
      if (dims[static_cast<std::size_t>(m)] > (force_l2 ? 1 : rows)) {
        hot = m;
        break;
      }
    if (hot < 0) return ModePlan{};
    ModePlan p;
    p.layout = Layout::l2;
    p.spec.nin = 1;
    p.spec.in_mode[0] = hot;
    p.spec.rows[0] = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(rows, dims[static_cast<std::size_t>(hot)]));
    p.hint_mode = ov.l2_hint ? hot : -1;
    finish(p);
    const bool fits = index_bits(p.blocks) + bn <= 64;
    if (!fits || !(force_l2 || p.expected_run >= min_run)) return ModePlan{};
    std::ostringstream os;
    os.precision(3);
    os << what << ": mode " << hot << " in " << p.blocks << " blocks of " << p.spec.rows[0]
       << " rows, ~" << p.expected_run << " nonzeros per output row and block";
    p.why = os.str();
    return p;
  };
  std::uint64_t all_rows = 0;
  for (int m : inputs) all_rows += dims[static_cast<std::size_t>(m)];
  const bool all_in_l2 = all_rows * row_bytes <= lim.l2 / 2;
  // l1: every input factor fits in L2, so the gathers run at L2 bandwidth, which sets the
  // time. Cutting one input mode into ranges small enough to stay in each SM's L1 while
  // the device works through them serves that mode's gathers from L1: about half the L2
  // traffic at order 3. Not for TTMc, whose wide output rows would each be flushed with
  // atomics once per short run.
  auto l1_plan = [&]() {
    if (workload != Workload::mttkrp) return ModePlan{};
    return blocked_mode(ov.block_rows > 0 ? ov.block_rows : kL1BlockRows, kL1MinRun, "l1");
  };
  if (ov.layout == "default") {
    if (all_in_l2) return l1_plan();
    return plan;
  }

  // smem: all input modes blocked; rows shared out by water-filling (short modes whole).
  if (!force_l2) {
    const std::uint64_t cap_hw =
        lim.smem_per_block > 1024 ? (lim.smem_per_block - 1024) / row_bytes : 0;
    const std::uint64_t cap = ov.block_rows > 0 ? std::min(cap_hw, ov.block_rows) : cap_hw;
    if (cap >= inputs.size() && inputs.size() <= static_cast<std::size_t>(kMaxOrder)) {
      ModePlan p;
      p.layout = Layout::smem;
      p.spec.nin = static_cast<int>(inputs.size());
      std::uint64_t remaining = cap;
      std::vector<std::uint32_t> rows_of(static_cast<std::size_t>(N), 0);
      std::size_t left = inputs.size();
      for (int m : inputs) {  // shortest first
        const std::uint64_t share = remaining / left;
        const std::uint64_t r =
            std::max<std::uint64_t>(1, std::min(dims[static_cast<std::size_t>(m)], share));
        rows_of[static_cast<std::size_t>(m)] = static_cast<std::uint32_t>(r);
        remaining -= std::min(remaining, r);
        --left;
      }
      std::uint64_t tile = 0;
      int s = 0;
      for (int m = 0; m < N; ++m) {  // slots in mode order
        if (m == n) continue;
        p.spec.in_mode[s] = m;
        p.spec.rows[s] = rows_of[static_cast<std::size_t>(m)];
        tile += p.spec.rows[s++];
      }
      p.tile_rows = static_cast<int>(tile);
      double blocks = 1;
      for (int t = 0; t < p.spec.nin; ++t)
        blocks *= std::ceil(static_cast<double>(dims[static_cast<std::size_t>(p.spec.in_mode[t])]) /
                            p.spec.rows[t]);
      if (blocks < 1e15) {
        finish(p);
        const double nnz_pb = static_cast<double>(nnz) / static_cast<double>(p.blocks);
        const bool fits = index_bits(p.blocks) + bn <= 64 && p.blocks <= (std::uint64_t(1) << 26);
        const bool pays = p.expected_run >= 3.0 && nnz_pb >= 2.0 * static_cast<double>(tile) &&
                          p.blocks <= (std::uint64_t(1) << 24);
        if (fits && (force_smem || pays)) {
          std::ostringstream os;
          os.precision(3);
          os << p.blocks << " blocks of " << tile << " tile rows, ~" << p.expected_run
             << " nonzeros per output row and block";
          p.why = os.str();
          return p;
        }
      }
    }
    if (force_smem) return plan;  // cannot: plain
  }

  // l2: one input mode blocked to a part of L2, the shortest one that does not fit.
  const std::uint64_t budget_rows =
      ov.block_rows > 0 ? ov.block_rows : (lim.l2 * 2 / 5) / row_bytes;
  if (budget_rows == 0) return plan;
  if (!force_l2 && all_in_l2) return l1_plan();  // all in L2 already
  return blocked_mode(budget_rows, 4.0, "l2");
}

/// Plans of every mode of a tensor about to be sorted on the device.
std::vector<ModePlan> plan_modes(int device, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                                 std::size_t value_size, Workload workload) {
  const DeviceLimits lim = device_limits(device);
  const LayoutOverride ov = layout_override();
  std::vector<ModePlan> plans;
  for (int n = 0; n < static_cast<int>(dims.size()); ++n)
    plans.push_back(plan_mode(dims, n, nnz, value_size, lim, ov, workload));
  return plans;
}

/// Work items of an smem copy (the copy at `idx`, n nonzeros, sorted by blocks): every
/// non-empty block cut into near-equal items of at most kItemNnz nonzeros, uploaded to
/// plan.item_buf. Waits for the stream.
void build_work_items(Context& ctx, const index_t* idx, std::int64_t n, int sms, ModePlan& plan) {
  DeviceMemory starts(static_cast<std::size_t>(plan.blocks) * sizeof(std::int64_t));
  auto* st = static_cast<std::int64_t*>(starts.get());
  TESSERA_CUDA_CHECK(cudaMemsetAsync(st, 0xff, starts.bytes(), ctx.stream));  // -1
  mark_block_starts<<<grid_for(n), kBlock, 0, ctx.stream>>>(plan.spec, idx, n, st);
  TESSERA_CUDA_CHECK_LAUNCH();
  std::vector<std::int64_t> host(static_cast<std::size_t>(plan.blocks));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), st, starts.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  // Smaller items on small tensors, so every SM gets work, but not below a few tiles.
  const std::int64_t target = std::clamp<std::int64_t>(
      n / (4 * static_cast<std::int64_t>(sms)),
      std::max<std::int64_t>(4096, 2 * static_cast<std::int64_t>(plan.tile_rows)), kItemNnz);
  std::vector<WorkItem> items;
  std::int64_t prev_start = -1;
  std::uint64_t prev_block = 0;
  auto flush = [&](std::int64_t end) {
    if (prev_start < 0) return;
    const std::int64_t len = end - prev_start;
    const std::int64_t parts = (len + target - 1) / target;
    for (std::int64_t q = 0; q < parts; ++q)
      items.push_back(
          {prev_start + len * q / parts, prev_start + len * (q + 1) / parts, prev_block});
  };
  for (std::uint64_t b = 0; b < plan.blocks; ++b) {
    const std::int64_t s0 = host[static_cast<std::size_t>(b)];
    if (s0 < 0) continue;
    flush(s0);
    prev_start = s0;
    prev_block = b;
  }
  flush(n);
  plan.items = static_cast<std::int64_t>(items.size());
  plan.item_buf = DeviceMemory(std::max<std::size_t>(items.size(), 1) * sizeof(WorkItem));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(plan.item_buf.get(), items.data(),
                                     items.size() * sizeof(WorkItem), cudaMemcpyHostToDevice,
                                     ctx.stream));
  ctx.sync();  // items is a host temporary
  std::ostringstream os;
  os << ", " << plan.items << " work items";
  plan.why += os.str();
}

template <typename T, typename P>
struct GatherParams {
  const index_t* src_idx;  ///< order arrays of n entries (the COO)
  const T* src_vals;
  index_t* dst_idx;  ///< order arrays of n entries (the sorted copy)
  T* dst_vals;
  const P* perm;
  std::int64_t n;
  int order;
};

/// dst[m][k] = src[m][perm[k]] for every mode m, and the values likewise.
template <typename T, typename P>
__global__ void gather_sorted_copy(const __grid_constant__ GatherParams<T, P> p) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto n = static_cast<std::size_t>(p.n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    const auto j = static_cast<std::size_t>(p.perm[k]);
    for (int m = 0; m < p.order; ++m) {
      const std::size_t off = static_cast<std::size_t>(m) * n;
      p.dst_idx[off + static_cast<std::size_t>(k)] = __ldg(p.src_idx + off + j);
    }
    p.dst_vals[k] = __ldg(p.src_vals + j);
  }
}

/// Calls f(K{}, P{}, Num{}) with the key type of `key`, and the perm and CUB num_items
/// types for `nnz` (32-bit while nnz <= INT_MAX, else 64-bit).
template <typename F>
auto with_sort_types(const ModeKey& key, nnz_t nnz, F&& f) {
  const bool narrow = nnz <= std::numeric_limits<int>::max();
  if (!key.wide()) {
    if (narrow) return f(std::uint32_t{}, std::uint32_t{}, int{});
    return f(std::uint32_t{}, std::uint64_t{}, std::int64_t{});
  }
  if (narrow) return f(std::uint64_t{}, std::uint32_t{}, int{});
  return f(std::uint64_t{}, std::uint64_t{}, std::int64_t{});
}

/// Temporary storage bytes of CUB's sort of mode key `key` (a size query: no data read).
template <typename K, typename P, typename Num>
std::size_t cub_sort_bytes(const ModeKey& key, nnz_t nnz, cudaStream_t stream) {
  std::size_t bytes = 0;
  cub::DoubleBuffer<K> keys(nullptr, nullptr);
  cub::DoubleBuffer<P> vals(nullptr, nullptr);
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, keys, vals, static_cast<Num>(nnz), 0, key.end_bit, stream));
  return bytes;
}

/// Slack per allocation for the allocator's granularity.
constexpr std::size_t kAllocSlack = std::size_t(2) << 20;

/// Peak device bytes of prepare_resident_on_device (see above), with kAllocSlack per
/// live allocation.
std::size_t device_sort_peak(const std::vector<std::uint64_t>& dims, nnz_t nnz,
                             std::size_t copy_bytes, const std::vector<ModePlan>& plans,
                             cudaStream_t stream) {
  const int N = static_cast<int>(dims.size());
  const auto n = static_cast<std::size_t>(nnz);
  std::size_t peak = 0;
  for (int m = 0; m < N; ++m) {
    const ModeKey key = mode_key(dims, m, &plans[static_cast<std::size_t>(m)]);
    const auto live = static_cast<std::size_t>(m + 1);  // COO and m copies
    std::size_t sort = 0, gather = 0;
    if (key.end_bit == 0) {
      gather = copy_bytes;
    } else {
      with_sort_types(key, nnz, [&](auto k, auto p, auto num) {
        using K = decltype(k);
        using P = decltype(p);
        using Num = decltype(num);
        sort = 2 * n * (sizeof(K) + sizeof(P)) + cub_sort_bytes<K, P, Num>(key, nnz, stream) +
               5 * kAllocSlack;
        gather = n * sizeof(P) + copy_bytes + 2 * kAllocSlack;
        return 0;
      });
    }
    peak = std::max(peak, live * (copy_bytes + kAllocSlack) + std::max(sort, gather));
  }
  return peak;
}

/// Sorts mode key `key` of the COO block `coo` (n nonzeros) and gathers it into `dst`.
/// Returns the error of a failed allocation (nothing else is left allocated), and
/// throws on any other error.
template <typename T, typename K, typename P, typename Num>
cudaError_t sort_and_gather(Context& ctx, const ModeKey& key, int order, const char* coo,
                            std::size_t n, std::size_t copy_bytes, DeviceMemory& dst) {
  const auto* coo_idx = reinterpret_cast<const index_t*>(coo);
  DeviceMemory perm[2];
  int sorted = 0;
  cudaError_t e = cudaSuccess;
  {
    DeviceMemory keys[2], temp;
    for (int b = 0; b < 2; ++b) {
      if ((e = keys[b].try_reserve(n * sizeof(K))) != cudaSuccess) return e;
      if ((e = perm[b].try_reserve(n * sizeof(P))) != cudaSuccess) return e;
    }
    KeyParams kp{coo_idx, static_cast<std::int64_t>(n), key};
    make_sort_keys<K, P><<<grid_for(static_cast<std::int64_t>(n)), kBlock, 0, ctx.stream>>>(
        kp, static_cast<K*>(keys[0].get()), static_cast<P*>(perm[0].get()));
    TESSERA_CUDA_CHECK_LAUNCH();
    cub::DoubleBuffer<K> dk(static_cast<K*>(keys[0].get()), static_cast<K*>(keys[1].get()));
    cub::DoubleBuffer<P> dv(static_cast<P*>(perm[0].get()), static_cast<P*>(perm[1].get()));
    std::size_t temp_bytes = 0;
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, dk, dv, static_cast<Num>(n), 0, key.end_bit, ctx.stream));
    if ((e = temp.try_reserve(std::max<std::size_t>(temp_bytes, 1))) != cudaSuccess) return e;
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        temp.get(), temp_bytes, dk, dv, static_cast<Num>(n), 0, key.end_bit, ctx.stream));
    sorted = dv.selector;
    perm[1 - sorted] = DeviceMemory();  // cudaFree waits for the sort
  }                                     // keys and temp freed
  if ((e = dst.try_reserve(copy_bytes)) != cudaSuccess) return e;
  GatherParams<T, P> g{};
  g.src_idx = coo_idx;
  g.src_vals = reinterpret_cast<const T*>(coo + values_offset(order, n));
  g.dst_idx = static_cast<index_t*>(dst.get());
  g.dst_vals = reinterpret_cast<T*>(static_cast<char*>(dst.get()) + values_offset(order, n));
  g.perm = static_cast<const P*>(perm[sorted].get());
  g.n = static_cast<std::int64_t>(n);
  g.order = order;
  gather_sorted_copy<T, P><<<grid_for(g.n), kBlock, 0, ctx.stream>>>(g);
  TESSERA_CUDA_CHECK_LAUNCH();
  return cudaSuccess;  // perm freed on return (after the gather: cudaFree waits)
}

/// Tier 1 from a COO already in device memory: `coo` (h.copy_bytes() bytes, laid out
/// like a sorted copy: index arrays, padding, values) holds h's nonzeros in input order,
/// written on ctx.stream. Builds every sorted copy on the device (see above) and frees
/// the COO. Returns false, with nothing left allocated and the handle's copies dropped,
/// when a device allocation fails. `what` starts the describe() text ("sorted on the
/// device"), t0 is when the build began.
template <typename T>
bool sort_resident_on_device(Context& ctx, DeviceMemory coo, CudaTensorHandle<T>& h,
                             std::vector<ModePlan> plans, std::size_t peak, const char* what,
                             std::chrono::steady_clock::time_point t0) {
  const int N = h.order();
  const nnz_t nnz = h.nnz();
  const auto n = static_cast<std::size_t>(nnz);
  const std::size_t cb = h.copy_bytes();
  char* c = static_cast<char*>(coo.get());
  h.make_resident();
  const int sms = device_limits(ctx.device).sms;
  for (int m = 0; m < N; ++m) {
    const ModeKey key = mode_key(h.dims(), m, &plans[static_cast<std::size_t>(m)]);
    DeviceMemory& dst = h.copy(m);
    cudaError_t e = cudaSuccess;
    if (key.end_bit == 0) {  // every key equal: input order
      e = dst.try_reserve(cb);
      if (e == cudaSuccess)
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.get(), c, cb, cudaMemcpyDeviceToDevice, ctx.stream));
    } else {
      e = with_sort_types(key, nnz, [&](auto k, auto p, auto num) {
        return sort_and_gather<T, decltype(k), decltype(p), decltype(num)>(ctx, key, N, c, n, cb,
                                                                           dst);
      });
    }
    if (e != cudaSuccess) {
      h.drop_resident();
      return false;  // coo freed on return
    }
    if (plans[static_cast<std::size_t>(m)].layout == Layout::smem)
      build_work_items(ctx, h.idx(m, 0), static_cast<std::int64_t>(nnz), sms,
                       plans[static_cast<std::size_t>(m)]);
  }
  ctx.sync();
  h.set_plans(std::move(plans));
  std::ostringstream os;
  os.precision(3);
  os << what << " in " << seconds_since(t0) << " s (peak " << peak << " bytes)";
  h.set_how_sorted(os.str());
  return true;
}

/// Tier 1 with the sorts on the device: uploads x as the COO block, then
/// sort_resident_on_device. Returns false as that does; the caller then sorts on the host.
template <typename T>
bool prepare_resident_on_device(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h,
                                std::vector<ModePlan> plans, std::size_t peak) {
  const auto t0 = std::chrono::steady_clock::now();
  const int N = x.order();
  const auto n = static_cast<std::size_t>(x.nnz());
  DeviceMemory coo;
  if (coo.try_reserve(h.copy_bytes()) != cudaSuccess) return false;
  char* c = static_cast<char*>(coo.get());
  for (int m = 0; m < N; ++m)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(c + static_cast<std::size_t>(m) * n * sizeof(index_t),
                                       x.idx[m].data(), n * sizeof(index_t), cudaMemcpyHostToDevice,
                                       ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(c + values_offset(N, n), x.vals.data(), n * sizeof(T),
                                     cudaMemcpyHostToDevice, ctx.stream));
  return sort_resident_on_device(ctx, std::move(coo), h, std::move(plans), peak,
                                 "sorted on the device", t0);
}

/// Nonzero k of the COO block (n nonzeros, index arrays then values at vals) is id
/// first + k of the synthetic tensor `spec`, computed as the host does
/// (make_synthetic_tensor).
template <typename T>
__global__ void generate_synthetic_coo(const __grid_constant__ synthetic::Spec spec,
                                       std::uint64_t first, std::int64_t n, index_t* idx, T* vals) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const std::uint64_t id = first + static_cast<std::uint64_t>(k);
    index_t c[kMaxOrder];
    for (int m = 0; m < spec.order; ++m) {
      c[m] = synthetic::coordinate(spec, id, m);
      idx[static_cast<std::size_t>(m) * un + static_cast<std::size_t>(k)] = c[m];
    }
    vals[k] = static_cast<T>(synthetic::model_value(spec, c));
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
  auto perm = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  auto tmp = host_array<nnz_t>(static_cast<std::size_t>(nnz));
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
    sort_for_mode(x, n, perm.get(), tmp.get());
    for (int k = 0; k < s->chunks; ++k)
      write_block(x, perm.get(), static_cast<nnz_t>(k) * chunk_nnz, s->chunk_count(k),
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
  trim_pool();  // memory a contraction left cached in the pool is free for the tensor
  std::size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::size_t limit =
      budget == 0 ? automatic_budget(free_b, total_b) : std::min(budget, free_b);
  const std::size_t tier1 = h->resident_bytes();
  if (tier1 <= limit) {
    // Sort on the device when its peak (copies + COO + sort temporaries) fits the same
    // limit, else (or when an allocation fails anyway) on the host: still tier 1.
    auto plans = plan_modes(ctx.device, x.dims, nnz, sizeof(T), ctx.workload);
    const std::size_t peak = device_sort_peak(x.dims, nnz, h->copy_bytes(), plans, ctx.stream);
    if (peak <= limit && prepare_resident_on_device(ctx, x, *h, std::move(plans), peak)) return h;
    prepare_resident(ctx, x, *h);
    std::ostringstream os;
    if (peak > limit)
      os << "; the device sort needs " << peak << " bytes, over the limit of " << limit;
    else
      os << "; the device sort (" << peak << " bytes) failed to allocate device memory";
    h->append_how_sorted(os.str());
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
std::unique_ptr<TensorHandle<T>> prepare_synthetic(Context& ctx, const synthetic::Spec& spec,
                                                   std::uint64_t first_id, std::uint64_t count,
                                                   std::size_t budget) {
  check_synthetic(spec, first_id, count);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> dims(spec.dims, spec.dims + spec.order);
  const auto nnz = static_cast<nnz_t>(count);
  auto h = std::make_unique<CudaTensorHandle<T>>(dims, nnz, ctx.device);
  if (nnz == 0) return h;

  // Tier 1 with the device sort, under the same limit and peak as prepare_tensor; the
  // COO is generated where the upload would have put it.
  trim_pool();  // memory a contraction left cached in the pool is free for the tensor
  std::size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::size_t limit =
      budget == 0 ? automatic_budget(free_b, total_b) : std::min(budget, free_b);
  const std::size_t tier1 = h->resident_bytes();
  std::ostringstream why;
  if (tier1 > limit) {
    why << "tier 1 needs " << tier1 << " bytes, over the limit of " << limit;
  } else {
    auto plans = plan_modes(ctx.device, dims, nnz, sizeof(T), ctx.workload);
    const std::size_t peak = device_sort_peak(dims, nnz, h->copy_bytes(), plans, ctx.stream);
    DeviceMemory coo;
    if (peak > limit) {
      why << "the device sort needs " << peak << " bytes, over the limit of " << limit;
    } else if (coo.try_reserve(h->copy_bytes()) != cudaSuccess) {
      why << "the device sort (" << peak << " bytes) failed to allocate device memory";
    } else {
      const auto n = static_cast<std::size_t>(nnz);
      char* c = static_cast<char*>(coo.get());
      const auto n64 = static_cast<std::int64_t>(nnz);
      generate_synthetic_coo<T><<<grid_for(n64), kBlock, 0, ctx.stream>>>(
          spec, first_id, n64, reinterpret_cast<index_t*>(c),
          reinterpret_cast<T*>(c + values_offset(spec.order, n)));
      TESSERA_CUDA_CHECK_LAUNCH();
      if (sort_resident_on_device(ctx, std::move(coo), *h, std::move(plans), peak,
                                  "generated and sorted on the device", t0))
        return h;
      why << "the device sort (" << peak << " bytes) failed to allocate device memory";
    }
  }
  // Fall back: the COO on the host, then prepare_tensor (host sort in tier 1, or tier 2).
  h.reset();
  auto x = make_synthetic_tensor<T>(spec, first_id, count);
  auto out = prepare_tensor(ctx, x, budget);
  static_cast<CudaTensorHandle<T>&>(*out).add_note("generated on the host (" + why.str() + ")");
  return out;
}

/// Zeroes `out` (out_bytes) and calls launch(idx, vals, cnt, resident) over the copy sorted by
/// `mode`: once over the resident copy (tier 1, resident = true) or once per chunk streamed
/// through the device buffers (tier 2), recording the handle's timing events.
///
/// Tier 2: chunk k is copied into buffer k % 2 on the copy stream while the kernel of
/// chunk k - 1 runs on the backend's stream. Events (also the timing points, see
/// CudaTensorHandle) order the two: the kernel of chunk k waits for "copy k done"; the
/// copy of chunk k waits for "kernel k - 2 done", the last reader of its buffer. The
/// copy stream first waits for the start of this call on the backend's stream, which
/// follows the kernels of earlier calls (the previous readers of both buffers). Each
/// chunk is a contiguous range of the copy sorted by `mode`, so the tile kernels' plain
/// stores (rows whose whole run lies inside one tile) stay exclusive, and rows cut by a
/// chunk boundary are the first/last rows of tiles, added with atomics.
template <typename T, typename Launch>
void over_copy(Context& ctx, const CudaTensorHandle<T>& h, int mode, void* out,
               std::size_t out_bytes, Launch&& launch) {
  const CudaTensorHandle<T>* x = &h;
  const int N = x->order();
  const auto* st = x->streamed();
  const nnz_t nnz = x->nnz();
  const int chunks = (st != nullptr && nnz > 0) ? st->chunks : 0;
  const index_t* idx[kMaxOrder] = {};
  if (chunks == 0 && ctx.capturing) {
    // Tier 1 inside a CUDA graph capture (cp_device.cu): no timing events, which could
    // not be waited for later.
    x->begin_timing(0);
    if (out_bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(out, 0, out_bytes, ctx.stream));
    if (nnz > 0) {
      for (int m = 0; m < N; ++m) idx[m] = x->idx(mode, m);
      launch(static_cast<const index_t* const*>(idx), x->vals(mode), nnz, true);
    }
    x->end_timing(0, 0);
    return;
  }
  TESSERA_EXPECTS(!ctx.capturing, "a streamed (tier 2) MTTKRP cannot be captured in a graph");
  x->begin_timing(chunks);
  TESSERA_CUDA_CHECK(cudaEventRecord(x->event(0), ctx.stream));
  if (out_bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(out, 0, out_bytes, ctx.stream));

  if (chunks == 0) {  // tier 1 (or no nonzeros): one launch over the resident copy
    if (nnz > 0) {
      for (int m = 0; m < N; ++m) idx[m] = x->idx(mode, m);
      launch(static_cast<const index_t* const*>(idx), x->vals(mode), nnz, true);
    }
    TESSERA_CUDA_CHECK(cudaEventRecord(x->event(1), ctx.stream));
    x->end_timing(2, 0);
    return;
  }

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
      idx[m] = reinterpret_cast<const index_t*>(base) +
               static_cast<std::size_t>(m) * static_cast<std::size_t>(cnt);
    launch(static_cast<const index_t* const*>(idx),
           reinterpret_cast<const T*>(base + values_offset(N, static_cast<std::size_t>(cnt))), cnt,
           false);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kComputeEnd), ctx.stream));
  }
  x->end_timing(1 + 4 * static_cast<std::size_t>(chunks), chunks);
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

  const std::size_t out_bytes =
      static_cast<std::size_t>(x->dims()[mode]) * static_cast<std::size_t>(R) * sizeof(T);
  const bool use_blocked = kernel_selection() == KernelSelection::automatic &&
                           blocked::supports<T>(N, R, p.factors, mode, out);
  const char* kernel = use_blocked ? "blocked" : "classic";
  over_copy(ctx, *x, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool resident) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = cnt;
              const ModePlan& plan = x->plan(mode);
              const bool l2 = resident && plan.layout == Layout::l2;
              if (resident && plan.layout == Layout::smem) {
                launch_smem(ctx.stream, p, plan, x->dims());
                kernel = "smem";
              } else if (use_blocked) {
                launch_blocked(ctx.stream, p, l2, l2 ? plan.hint_mode : -1);
              } else if (l2) {
                p.hot_mode = plan.hint_mode;
                launch_tiles<T, true>(ctx.stream, p);
              } else {
                launch_tiles<T, false>(ctx.stream, p);
              }
            });
  x->note_kernel(mode, kernel, R);
}

template <typename T>
const char* launch_mttkrp_sorted(cudaStream_t stream, const index_t* const* idx, const T* vals,
                                 nnz_t nnz, int order, int mode, const T* const* factors, int R,
                                 T* out) {
  MttkrpParams<T> p{};
  for (int m = 0; m < order; ++m) {
    p.idx[m] = idx[m];
    p.factors[m] = factors[m];
  }
  p.vals = vals;
  p.out = out;
  p.nnz = static_cast<std::int64_t>(nnz);
  p.order = order;
  p.mode = mode;
  p.R = R;
  if (nnz == 0) return "none";
  if (kernel_selection() == KernelSelection::automatic &&
      blocked::supports<T>(order, R, p.factors, mode, out)) {
    launch_blocked(stream, p, false, -1, true);
    return "blocked";
  }
  launch_tiles<T, false, true>(stream, p);
  return "classic";
}

// ---------------------------------------------------------------------------
// TTMc (kernel in ttmc.cu)
// ---------------------------------------------------------------------------

/// Flags of the indices present: flags[rows[k]] = 1.
__global__ void mark_rows_u32(const index_t* __restrict__ rows, std::int64_t n,
                              std::uint32_t* flags) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    flags[rows[k]] = 1;
}

/// rows[pos[i]] = i for the flagged indices i.
__global__ void compact_rows(const std::uint32_t* __restrict__ flags,
                             const std::uint32_t* __restrict__ pos, std::int64_t n, index_t* rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    if (flags[i]) rows[pos[i]] = static_cast<index_t>(i);
}

template <typename T>
const TtmcRowMap& CudaTensorHandle<T>::ttmc_map(Context& ctx, int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(),
                  "mode " << mode << " of an order-" << order() << " tensor");
  if (ttmc_maps_.size() != dims_.size()) ttmc_maps_.resize(dims_.size());
  TtmcRowMap& m = ttmc_maps_[static_cast<std::size_t>(mode)];
  if (m.ready) return m;
  const auto dim = static_cast<std::int64_t>(dims_[static_cast<std::size_t>(mode)]);
  TESSERA_EXPECTS(dim < (std::int64_t(1) << 32), "mode " << mode << " has " << dim << " indices");
  m.rows.clear();
  m.pos = DeviceMemory(static_cast<std::size_t>(std::max<std::int64_t>(dim, 1)) *
                       sizeof(std::uint32_t));
  if (nnz_ > 0 && streamed_) {
    // Tier 2: the copy sorted by `mode` is in pinned host memory, rows ascending.
    const auto& s = *streamed_;
    for (int k = 0; k < s.chunks; ++k) {
      const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
      const auto* r = reinterpret_cast<const index_t*>(
                          s.host[static_cast<std::size_t>(mode)].get() + s.chunk_offset(k)) +
                      static_cast<std::size_t>(mode) * cnt;
      for (std::size_t j = 0; j < cnt; ++j)
        if (m.rows.empty() || m.rows.back() != r[j]) m.rows.push_back(r[j]);
    }
    std::vector<std::uint32_t> pos(static_cast<std::size_t>(dim), 0);
    for (std::size_t j = 0; j < m.rows.size(); ++j) pos[m.rows[j]] = static_cast<std::uint32_t>(j);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(m.pos.get(), pos.data(), pos.size() * sizeof(std::uint32_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();
  } else if (nnz_ > 0) {
    // Tier 1: flag the indices of the copy sorted by `mode`, exclusive scan -> positions.
    const auto n64 = static_cast<std::int64_t>(nnz_);
    DeviceMemory flags(static_cast<std::size_t>(dim) * sizeof(std::uint32_t));
    auto* f = static_cast<std::uint32_t*>(flags.get());
    auto* pos = static_cast<std::uint32_t*>(m.pos.get());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(f, 0, flags.bytes(), ctx.stream));
    mark_rows_u32<<<grid_for(n64, 4096), kBlock, 0, ctx.stream>>>(idx(mode, mode), n64, f);
    TESSERA_CUDA_CHECK_LAUNCH();
    std::size_t tmp_bytes = 0;
    TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, tmp_bytes, f, pos,
                                                     static_cast<int>(dim), ctx.stream));
    DeviceMemory tmp(std::max<std::size_t>(tmp_bytes, 1));
    TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(), tmp_bytes, f, pos,
                                                     static_cast<int>(dim), ctx.stream));
    std::uint32_t last_pos = 0, last_flag = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&last_pos, pos + dim - 1, sizeof(std::uint32_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&last_flag, f + dim - 1, sizeof(std::uint32_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
    const std::size_t count = static_cast<std::size_t>(last_pos) + last_flag;
    DeviceMemory rows_dev(std::max<std::size_t>(count, 1) * sizeof(index_t));
    compact_rows<<<grid_for(dim, 4096), kBlock, 0, ctx.stream>>>(
        f, pos, dim, static_cast<index_t*>(rows_dev.get()));
    TESSERA_CUDA_CHECK_LAUNCH();
    m.rows.resize(count);
    if (count > 0)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(m.rows.data(), rows_dev.get(), count * sizeof(index_t),
                                         cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
  }
  m.ready = true;
  return m;
}

template <typename T>
std::vector<index_t> ttmc_rows(Context& ctx, const TensorHandle<T>& xh, int mode) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  return x->ttmc_map(ctx, mode).rows;
}

template <typename T>
std::size_t ttmc_scratch_bytes(Context&, const TensorHandle<T>& xh, int mode,
                               const std::vector<int>& ranks) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  TESSERA_EXPECTS(mode >= 0 && mode < x->order(),
                  "mode " << mode << " of an order-" << x->order() << " tensor");
  (void)ttmc_output_cols(ranks, mode);  // the argument checks
  // The row map (kept by the handle) and, while it is built, the flags and scan space.
  const auto dim = static_cast<std::size_t>(x->dims()[static_cast<std::size_t>(mode)]);
  return 3 * dim * sizeof(std::uint32_t) + (std::size_t(1) << 20);
}

template <typename T>
void ttmc(Context& ctx, const TensorHandle<T>& xh, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  const int N = x->order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " tensor");
  const auto* st = x->streamed();
  TESSERA_EXPECTS(st == nullptr || (x->compute_stream() == ctx.stream && x->device() == ctx.device),
                  "a tier-2 tensor handle must be used with the CUDA backend that prepared it");
  const TtmcRowMap& map = x->ttmc_map(ctx, mode);
  const std::int64_t C = kernels::detail::ttmc_check_args(
      N, mode, factors, ranks, static_cast<std::int64_t>(map.rows.size()), 0);
  const std::size_t out_bytes = map.rows.size() * static_cast<std::size_t>(C) * sizeof(T);
  TtmcParams<T> p{};
  p.pos = static_cast<const index_t*>(map.pos.get());
  p.out = out;
  p.C = C;
  p.mode = mode;
  DeviceMemory ones;
  if (N == 1) {
    // Y(i, 0) = sum of the values at i (the Kronecker product of no rows is [1]): one
    // input mode of rank 1, the mode itself, whose "factor" is all ones.
    const auto dim = static_cast<std::size_t>(x->dims()[0]);
    ones = DeviceMemory(std::max<std::size_t>(dim, 1) * sizeof(T));
    fill(ctx, static_cast<T*>(ones.get()), dim, T(1));
    p.nin = 1;
    p.in_mode[0] = mode;
    p.in_rank[0] = 1;
    p.factors[mode] = static_cast<const T*>(ones.get());
  } else {
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      p.in_mode[p.nin] = m;
      p.in_rank[p.nin] = ranks[static_cast<std::size_t>(m)];
      p.factors[m] = factors[static_cast<std::size_t>(m)];
      ++p.nin;
    }
  }
  p.exclusive = st != nullptr || x->plan(mode).layout == Layout::plain;
  over_copy(ctx, *x, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = static_cast<std::int64_t>(cnt);
              launch_ttmc(ctx.stream, p);
            });
}

template std::unique_ptr<TensorHandle<float>> prepare_tensor<float>(Context&,
                                                                    const SparseTensor<float>&,
                                                                    std::size_t);
template std::unique_ptr<TensorHandle<double>> prepare_tensor<double>(Context&,
                                                                      const SparseTensor<double>&,
                                                                      std::size_t);
template std::unique_ptr<TensorHandle<float>> prepare_synthetic<float>(Context&,
                                                                       const synthetic::Spec&,
                                                                       std::uint64_t, std::uint64_t,
                                                                       std::size_t);
template std::unique_ptr<TensorHandle<double>> prepare_synthetic<double>(
    Context&, const synthetic::Spec&, std::uint64_t, std::uint64_t, std::size_t);
template const char* launch_mttkrp_sorted<float>(cudaStream_t, const index_t* const*, const float*,
                                                 nnz_t, int, int, const float* const*, int, float*);
template const char* launch_mttkrp_sorted<double>(cudaStream_t, const index_t* const*,
                                                  const double*, nnz_t, int, int,
                                                  const double* const*, int, double*);
template void mttkrp<float>(Context&, const TensorHandle<float>&, int,
                            const std::vector<const float*>&, int, float*);
template void mttkrp<double>(Context&, const TensorHandle<double>&, int,
                             const std::vector<const double*>&, int, double*);
template std::vector<index_t> ttmc_rows<float>(Context&, const TensorHandle<float>&, int);
template std::vector<index_t> ttmc_rows<double>(Context&, const TensorHandle<double>&, int);
template std::size_t ttmc_scratch_bytes<float>(Context&, const TensorHandle<float>&, int,
                                               const std::vector<int>&);
template std::size_t ttmc_scratch_bytes<double>(Context&, const TensorHandle<double>&, int,
                                                const std::vector<int>&);
template void ttmc<float>(Context&, const TensorHandle<float>&, int,
                          const std::vector<const float*>&, const std::vector<int>&, float*);
template void ttmc<double>(Context&, const TensorHandle<double>&, int,
                           const std::vector<const double*>&, const std::vector<int>&, double*);

}  // namespace tessera::kernels::cuda
