// Internal to the CUDA MTTKRP (kernels/cuda/mttkrp/): the prepared tensor. A
// CudaTensorHandle holds one sorted copy of the nonzeros per mode, in device memory (tier
// 1, with the layout of each copy) or in pinned host memory cut into chunks (tier 2,
// StreamedStore); over_copy runs a launch over the copy of one mode in either tier, for
// the MTTKRP (mttkrp.cu) and TTMc (kernels/cuda/ttmc/ttmc.cu) entry points.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/mttkrp/blocked.cuh"
#include "kernels/cuda/mttkrp/hybrid.cuh"
#include "kernels/cuda/mttkrp/internal.cuh"
#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

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
  /// `selection`: the MTTKRP kernel selection of the backend at prepare time, until the
  /// first MTTKRP records its own (for describe()).
  CudaTensorHandle(std::vector<std::uint64_t> dims, nnz_t nnz, int device,
                   KernelSelection selection)
      : dims_(std::move(dims)), nnz_(nnz), device_(device), selection_(selection) {}
  ~CudaTensorHandle() override {
    DeviceGuardNoThrow g(device_);
    // Kernels of the last mttkrp may still read the buffers (and, in tier 2, copies
    // still read the pinned memory): wait for them, then release everything while the
    // handle's device is current.
    if (recorded_events_ > 0) TESSERA_CUDA_CHECK_NOTHROW(cudaEventSynchronize(end_event()));
    streamed_.reset();
    hybrid_.clear();
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
    for (const auto& hy : hybrid_)
      if (hy) b += hy->bytes();
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
      describe_hybrid(os);
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
  /// Records the MTTKRP kernel that ran for `mode` and the selection it ran under (for
  /// describe()).
  void note_kernel(int mode, const char* name, int R, KernelSelection selection) const {
    selection_ = selection;
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
  /// (A handle with no plans, as an empty tensor's: the plain layout.)
  const ModePlan& plan(int mode) const {
    static const ModePlan kPlain{};
    return static_cast<std::size_t>(mode) < plans_.size() ? plans_[static_cast<std::size_t>(mode)]
                                                          : kPlain;
  }
  ModePlan& plan(int mode) { return plans_[static_cast<std::size_t>(mode)]; }
  void set_plans(std::vector<ModePlan> p) { plans_ = std::move(p); }
  // ---- tier 1: the tensor-core hybrid layout of each mode (hybrid.cuh) ----
  /// Mode m's hybrid layout (null: none built).
  const HybridMode<T>* hybrid(int m) const {
    return static_cast<std::size_t>(m) < hybrid_.size() ? hybrid_[static_cast<std::size_t>(m)].get()
                                                        : nullptr;
  }
  /// Sets mode m's hybrid layout (null: none) and the reason for describe() and tc_split().
  void set_hybrid(int m, std::unique_ptr<HybridMode<T>> hy, std::string why) {
    hybrid_.resize(dims_.size());
    hybrid_why_.resize(dims_.size());
    hybrid_[static_cast<std::size_t>(m)] = std::move(hy);
    hybrid_why_[static_cast<std::size_t>(m)] = std::move(why);
  }
  /// Why the tensor has no hybrid layout at all (tier 2, --tensor-cores off).
  void set_hybrid_note(std::string why) { hybrid_note_ = std::move(why); }
  std::vector<TcSplit> tc_split() const override;
  double value_norm_squared() const override;
  /// Whether every stored value is 1 (a pattern, as completion's): computed on the first
  /// call, then remembered. The row Grams' tensor-core kernel then takes one operand for both.
  bool unit_values() const;
  /// The TTMc row map of `mode` (built on the first call, on ctx's stream).
  const TtmcRowMap& ttmc_map(Context& ctx, int mode) const;

  // ---- row pieces (ops::mttkrp_row_ranges / mttkrp_rows) ----
  /// Mode m's row ranges and their first positions in its sorted copy (bounds.size()
  /// positions), set by the last mttkrp_row_ranges() that answered `pieces`.
  struct RowPieces {
    std::vector<std::int64_t> bounds;
    std::vector<nnz_t> first;
  };
  const RowPieces* row_pieces(int m) const {
    const auto& p = row_pieces_[static_cast<std::size_t>(m)];
    return p.bounds.empty() ? nullptr : &p;
  }
  void set_row_pieces(int m, RowPieces p) const {
    row_pieces_.resize(dims_.size());
    row_pieces_[static_cast<std::size_t>(m)] = std::move(p);
  }

  // ---- tier 2 ----
  void make_streamed(std::unique_ptr<StreamedStore<T>> s, cudaStream_t compute_stream) {
    streamed_ = std::move(s);
    compute_stream_ = compute_stream;
  }
  /// The tier-2 store (null in tier 1). Not TensorHandle::streamed(): that is tier 3.
  const StreamedStore<T>* streamed_store() const { return streamed_.get(); }
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

  /// "; MTTKRP kernel ...": the selection rule (of the last MTTKRP, or of the backend at
  /// prepare time), and the kernel of the last MTTKRP per mode.
  void describe_hybrid(std::ostream& os) const {
    if (hybrid_.empty()) {
      if (!hybrid_note_.empty()) os << "; tensor cores: " << hybrid_note_;
      return;
    }
    os << "; tensor cores:";
    for (std::size_t m = 0; m < hybrid_.size(); ++m) {
      os << (m ? "," : "") << " mode " << m;
      if (const auto* hy = hybrid_[m].get())
        os << " " << hy->tiles << " tiles over mode " << hy->tile_mode << " ("
           << 100.0 * static_cast<double>(hy->tile_nnz) / static_cast<double>(nnz_)
           << "% of nonzeros, padding " << 100.0 * hy->padding() << "%)";
      else
        os << " none (" << hybrid_why_[m] << ")";
    }
  }
  void describe_kernels(std::ostream& os) const {
    os << "; MTTKRP kernel: " << kernel_selection_name(selection_)
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
  mutable KernelSelection selection_;                   ///< of the last MTTKRP (describe())
  mutable std::vector<std::string> kernels_;            ///< per mode: kernel of the last MTTKRP
  std::vector<DeviceMemory> copies_;                    ///< tier 1
  std::vector<ModePlan> plans_;                         ///< tier 1: layout per mode
  std::vector<std::unique_ptr<HybridMode<T>>> hybrid_;  ///< tier 1: tensor-core layouts
  std::vector<std::string> hybrid_why_;                 ///< per mode, for tc_split()
  std::string hybrid_note_;                             ///< no hybrid at all: why
  std::string how_sorted_;                              ///< tier 1: device or host sort, time
  std::unique_ptr<StreamedStore<T>> streamed_;          ///< tier 2
  cudaStream_t compute_stream_ = nullptr;
  mutable std::vector<TtmcRowMap> ttmc_maps_;  ///< per mode, built by ttmc_map
  mutable int unit_values_ = -1;               ///< unit_values(): -1 not known yet
  mutable std::vector<RowPieces> row_pieces_ = std::vector<RowPieces>(dims_.size());

  mutable EventPool events_;
  mutable std::size_t recorded_events_ = 0;
  mutable int timed_chunks_ = 0;
  mutable bool collected_ = true;
  mutable double copy_s_ = 0, compute_s_ = 0, wall_s_ = 0;
};

/// The cuda handle of an MTTKRP-shaped call (ops::mttkrp, ops::row_grams) on `mode`, its
/// arguments checked: prepared by this backend, mode and R in range, one factor per mode
/// (all but mode's non-null; copied into fac[0..N)), and a tier-2 handle used with the stream
/// it was prepared on (over_copy's chunk pipeline is ordered against it).
template <typename T, typename P>
const CudaTensorHandle<T>& checked_handle(const Context& ctx, const TensorHandle<T>& xh, int mode,
                                          const std::vector<const T*>& factors, int R, P* fac) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  const int N = x->order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " tensor");
  TESSERA_EXPECTS(R >= 1, "rank R = " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  factors.size() << " factors for an order-" << N << " tensor");
  TESSERA_EXPECTS(x->streamed_store() == nullptr ||
                      (x->compute_stream() == ctx.stream && x->device() == ctx.device),
                  "a tier-2 tensor handle must be used with the CUDA backend that prepared it");
  for (int m = 0; m < N; ++m) {
    TESSERA_EXPECTS(m == mode || factors[m] != nullptr, "factor " << m << " is null");
    fac[m] = factors[m];
  }
  return *x;
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
  const auto* st = x->streamed_store();
  const nnz_t nnz = x->nnz();
  const int chunks = (st != nullptr && nnz > 0) ? st->chunks : 0;
  const index_t* idx[kMaxOrder] = {};
  if (chunks == 0 && ctx.capturing) {
    // Tier 1 inside a CUDA graph capture (dense/cp_device.cu): no timing events, which could
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
  // Tier 2 inside a capture (the CP device loop, dense/cp_device.cu): the same pipeline. Its
  // events, recorded in the capture, only order it (the handle's host copies and device
  // buffers live as long as the handle, so every replay may copy again); the chunks are
  // timed by ctx.graph_timer's event nodes, and the handle's own measurement is not made.
  const bool capture = ctx.capturing;
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
  std::vector<std::int64_t> timed(capture ? static_cast<std::size_t>(chunks) : 0);
  auto mark = [&](int k, int which, cudaStream_t s) {
    if (capture) ctx.graph_timer.mark(timed[static_cast<std::size_t>(k)], which, s);
  };
  auto enqueue_copy = [&](int k) {
    if (k >= 2) TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cs, ev(k - 2, kComputeEnd), 0));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kCopyBegin), cs));
    if (capture) timed[static_cast<std::size_t>(k)] = ctx.graph_timer.begin_piece(ctx);
    mark(k, GraphTimer::kCopyBegin, cs);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(st->buffer[k % 2].get(), host + st->chunk_offset(k),
                                       st->chunk_bytes(k), cudaMemcpyHostToDevice, cs));
    // The timing node first: the backend's stream waits for ev(k, kCopyEnd), which then
    // follows it (a capture must join every node of the copy stream).
    mark(k, GraphTimer::kCopyEnd, cs);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kCopyEnd), cs));
  };
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cs, x->event(0), 0));
  enqueue_copy(0);
  for (int k = 0; k < chunks; ++k) {
    if (k + 1 < chunks) enqueue_copy(k + 1);
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, ev(k, kCopyEnd), 0));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kComputeBegin), ctx.stream));
    mark(k, GraphTimer::kComputeBegin, ctx.stream);
    const nnz_t cnt = st->chunk_count(k);
    auto* base = static_cast<char*>(st->buffer[k % 2].get());
    for (int m = 0; m < N; ++m)
      idx[m] = reinterpret_cast<const index_t*>(base) +
               static_cast<std::size_t>(m) * static_cast<std::size_t>(cnt);
    launch(static_cast<const index_t* const*>(idx),
           reinterpret_cast<const T*>(base + values_offset(N, static_cast<std::size_t>(cnt))), cnt,
           false);
    mark(k, GraphTimer::kComputeEnd, ctx.stream);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev(k, kComputeEnd), ctx.stream));
    if (capture) ctx.graph_timer.count_chunk();
  }
  if (capture)
    x->end_timing(0, 0);  // nothing of this call to measure: the replays are timed
  else
    x->end_timing(1 + 4 * static_cast<std::size_t>(chunks), chunks);
}

// ---------------------------------------------------------------------------
// Tier 1 with the sorts on the device (device_sort.cu)
// ---------------------------------------------------------------------------

/// Peak device bytes of prepare_resident_on_device (see device_sort.cu), with an
/// allocator slack per live allocation.
std::size_t device_sort_peak(const std::vector<std::uint64_t>& dims, nnz_t nnz,
                             std::size_t copy_bytes, const std::vector<ModePlan>& plans,
                             cudaStream_t stream);

/// Tier 1 from a COO already in device memory: `coo` (h.copy_bytes() bytes, laid out
/// like a sorted copy: index arrays, padding, values) holds h's nonzeros in input order,
/// written on ctx.stream. Builds every sorted copy on the device (see device_sort.cu) and
/// frees the COO. Returns false, with nothing left allocated and the handle's copies
/// dropped, when a device allocation fails. `what` starts the describe() text ("sorted on
/// the device"), t0 is when the build began.
template <typename T>
bool sort_resident_on_device(Context& ctx, DeviceMemory coo, CudaTensorHandle<T>& h,
                             std::vector<ModePlan> plans, std::size_t peak, const char* what,
                             std::chrono::steady_clock::time_point t0);

/// Tier 1 with the sorts on the device: uploads x as the COO block, then
/// sort_resident_on_device. Returns false as that does; the caller then sorts on the host.
template <typename T>
bool prepare_resident_on_device(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h,
                                std::vector<ModePlan> plans, std::size_t peak);

}  // namespace tessera::kernels::cuda::mttkrp_detail
