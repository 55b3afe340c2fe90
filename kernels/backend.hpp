// The executor of a backend (reference loops, OpenMP CPU, CUDA): its memory, tensor handles,
// memory budget and kernel tuning. The operations on them (MTTKRP, TTMc, SpTC, dense and
// Tucker steps) are not members: each is declared once in kernels/ops/ and implemented by
// every backend, and algorithms call them as kernels::ops::<name>(backend, ...)
// (kernels/ops/common.hpp). Buffers live in the backend's memory space.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cp_device.hpp"
#include "kernels/tuning.hpp"
#include "linalg/dense.hpp"
#include "linalg/row_update.hpp"
#include "tensor/sparse_tensor.hpp"
#include "tensor/synthetic.hpp"
#include "util/memory_space.hpp"

namespace tessera::kernels {

enum class BackendKind { reference, cpu, cuda };

/// What a prepared tensor will mostly be used for. A backend may choose the order of its
/// sorted copies by it (the cuda backend blocks one input mode into L1-sized ranges for
/// MTTKRP, which would cost TTMc's wide output rows an atomic flush per short run).
/// Results do not depend on it beyond rounding.
enum class Workload { mttkrp, ttmc };

/// "reference" | "cpu" | "cuda" | "auto" (auto: cuda when built with CUDA and a GPU is
/// present, else cpu). Throws InputError on an unknown name.
BackendKind parse_backend(const std::string& name);
std::string to_string(BackendKind k);

/// True when this build has the CUDA backend and at least one GPU is visible.
bool cuda_device_available();

/// Owning pointer to backend memory (host or device).
template <typename T>
class Array {
 public:
  Array() = default;
  Array(T* p, std::size_t n, std::function<void(T*)> del) : p_(p, std::move(del)), n_(n) {}
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }

 private:
  std::unique_ptr<T, std::function<void(T*)>> p_{nullptr, [](T*) {}};
  std::size_t n_ = 0;
};

/// A rank's nonzeros prepared in a backend's kernel format (sorted copies, CSF, ...).
template <typename T>
class StreamedOps;  // kernels/ops/streamed.hpp

/// The nonzeros of a handle in each row range [bounds[j], bounds[j + 1]) of one mode
/// (bounds non-decreasing, bounds.back() <= dims[mode]; a range may be empty), and whether
/// mttkrp_rows() over these ranges reads only each range's nonzeros (`pieces`: the cuda
/// backend on resident sorted copies without tensor-core tiles for the mode) or computes the
/// whole MTTKRP for each (host backends, streamed handles). The cuda backend keeps the
/// ranges' positions in its sorted copy for mttkrp_rows() (one set per mode: the last call's).
struct RowRanges {
  std::vector<nnz_t> nnz;  ///< bounds.size() - 1 counts
  bool pieces = false;
};

/// The tensor-core split of one mode's MTTKRP (issue 18, docs/tensor-core-mttkrp.md): the
/// nonzeros in dense 16 x 16 tiles (16 output rows x 16 rows of `tile_mode`, all other
/// indices fixed) run on tensor cores, the rest on CUDA cores.
struct TcSplit {
  int mode = 0;
  bool built = false;       ///< the mode has a hybrid layout
  int tile_mode = -1;       ///< the tiles' second mode
  std::uint64_t tiles = 0;  ///< dense tiles
  std::uint64_t tile_nnz = 0;
  double fraction = 0;           ///< tile_nnz / nnz
  double padding = 0;            ///< zero slots / all slots of the tiles (1 - mean tile density)
  std::size_t bytes = 0;         ///< device bytes of the tiles and the rest copy
  double predicted_speedup = 0;  ///< the cost model's, at the last R asked (0: none asked)
  bool used = false;             ///< the last MTTKRP of the mode ran the hybrid
  std::string precision;         ///< of the last hybrid run
  double tile_seconds = 0;       ///< last hybrid run: the tile kernel (device events)
  double rest_seconds = 0;       ///< last hybrid run: the CUDA-core kernel on the rest
  std::string why;               ///< why it is (not) built or (not) used
};

template <typename T>
class TensorHandle {
 public:
  virtual ~TensorHandle() = default;
  virtual int order() const = 0;
  virtual const std::vector<std::uint64_t>& dims() const = 0;
  virtual nnz_t nnz() const = 0;
  /// Bytes of the stored format (backend memory).
  virtual std::size_t bytes() const = 0;
  /// Bytes one MTTKRP of `mode` must read from the stored format (for the floor).
  virtual std::size_t mttkrp_stream_bytes(int mode) const = 0;
  /// Per mode, the number of distinct indices among the handle's nonzeros (the factor
  /// rows an MTTKRP of another mode reads). May wait for queued work (cuda backend: it
  /// counts row starts of the sorted copies on the device).
  virtual std::vector<std::uint64_t> distinct_rows() const = 0;
  /// Sum of the squared values of the handle's nonzeros, accumulated in double (for the
  /// fit of a tensor that exists only in the backend, e.g. generated on the GPU). May wait
  /// for queued work.
  virtual double value_norm_squared() const = 0;
  /// 2-norm of the handle's values, computed with scaling so that it neither overflows nor
  /// underflows while the norm is a finite double (values near 1e200 or 1e-200 in double
  /// precision). The default, sqrt(value_norm_squared()), is exact only for norms in about
  /// [1e-154, 1e154]: handles that can hold other values override it. May wait for queued
  /// work.
  virtual double value_norm() const { return std::sqrt(value_norm_squared()); }

  // ---- memory tier (DESIGN §8) and streaming report ----
  /// 1: the stored format is resident in backend memory (host backends always; the
  /// cuda backend when it fits the budget). 2: host-resident in pinned memory and
  /// streamed to the device in chunks by every MTTKRP.
  virtual int tier() const = 0;
  /// One line for logs: tier, bytes resident in backend memory, chunk size and count,
  /// pinned host bytes (tier 2).
  virtual std::string describe() const = 0;
  /// Fraction, in [0, 1], of the last MTTKRP's host-to-device copy time hidden behind
  /// compute: (copy + compute - wall) / copy. 1 when nothing was copied (tier 1, or no
  /// MTTKRP yet). When the copies take longer than the kernels (the usual tier-2 case),
  /// this is at most compute / copy even for a perfect pipeline. May wait for the last
  /// MTTKRP to finish.
  virtual double overlap_fraction() const = 0;
  /// Seconds the last MTTKRP spent copying the tensor to the device (summed over chunks;
  /// 0 in tier 1 and before the first MTTKRP). May wait for it to finish.
  virtual double last_copy_seconds() const = 0;
  /// Seconds of compute of the last MTTKRP (kernels, summed over chunks; 0 before the
  /// first MTTKRP). May wait for it to finish.
  virtual double last_compute_seconds() const = 0;
  /// Non-null for a handle whose nonzeros the backend never holds whole (memory tier 3:
  /// algo::DiskTensor, algo::HostTensor): the ops:: dispatchers of the handle operations
  /// then run its hooks, which stream the nonzeros through the backend chunk by chunk.
  virtual const StreamedOps<T>* streamed() const { return nullptr; }
  /// Per mode, the tensor-core split of the MTTKRP (empty: the backend has none). May wait
  /// for the last MTTKRP to finish.
  virtual std::vector<TcSplit> tc_split() const { return {}; }
};

using ::tessera::NormKind;

/// Seconds of ops::mttkrp_accumulate calls (ops::take_accumulate_times).
struct AccumulateTimes {
  double copy = 0;     ///< host -> device copies of the chunks (0 on host backends)
  double compute = 0;  ///< sorts and kernels (device events; host backends: the calls)
  std::int64_t chunks = 0;
};

/// Host memory page-locked by Backend::pin_host; unlocked when destroyed.
class HostPin {
 public:
  virtual ~HostPin() = default;
};

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual MemorySpace memory_space() const = 0;
  /// Blocks until queued work is done (no-op on host backends).
  virtual void synchronize() {}
  /// The stream all of this backend's work is ordered on (a cudaStream_t), for collectives
  /// enqueued beside its kernels (comm::Communicator::enqueue_*); null on host backends.
  virtual void* native_stream() { return nullptr; }
  /// Whether stream_mark() records points of the work queued on the backend's stream (cuda:
  /// events), so that a caller can time phases of queued work without synchronize() between
  /// them (algo::detail::PhaseTimer). Host backends: false (their calls are done on return).
  virtual bool has_stream_marks() const { return false; }
  /// Makes `w` (a function given native_stream()) the backend's way of waiting for its stream:
  /// every host wait of the backend (synchronize, downloads, results a call needs on the
  /// host, take_marks) then calls it instead of waiting itself. For collectives enqueued in
  /// the stream: comm::Communicator::wait_stream waits and polls the communicator's errors
  /// and timeout, which a plain wait cannot see (algo/tucker.cpp). An empty `w` restores the
  /// backend's own wait. Returns the waiter it replaces. Host backends: nothing to wait for.
  virtual std::function<void(void*)> set_stream_waiter(std::function<void(void*)> w) {
    (void)w;
    return {};
  }
  /// Records the point the stream's work has reached; returns its number since the last
  /// take_marks() (0, 1, ...). Not inside a CUDA graph capture.
  virtual std::size_t stream_mark() { return 0; }
  /// Waits for the stream and returns, for every mark since the last call, its time in
  /// seconds after the first mark; forgets them. Empty when there were none.
  virtual std::vector<double> take_marks() { return {}; }

  // ---- memory ----
  virtual Array<T> allocate(std::size_t n) = 0;
  virtual void upload(const T* host, std::size_t n, T* dst) = 0;
  virtual void download(const T* src, std::size_t n, T* host) = 0;
  virtual void copy(const T* src, std::size_t n, T* dst) = 0;
  virtual void fill(T* dst, std::size_t n, T value) = 0;
  /// n doubles of backend memory, uninitialised (work buffers, for float backends too).
  virtual Array<double> allocate_double(std::size_t n);
  /// Copies n doubles host -> backend memory (complete on return).
  virtual void upload_double(const double* host, std::size_t n, double* dst);
  /// Copies n doubles backend memory -> host (complete on return).
  virtual void download_double(const double* src, std::size_t n, double* host);
  /// A copy of n host indices in backend memory (the row maps of ops::gather_rows_double and
  /// ops::scatter_rows_double).
  virtual Array<std::int64_t> upload_index(const std::int64_t* host, std::size_t n);
  /// Page-locks [p, p + bytes) of host memory until the returned handle is destroyed, so
  /// that this backend's copies from and to it run at the full rate of the host link
  /// (cuda: cudaHostRegister). The memory must stay allocated, in place, while the handle
  /// lives. Null where there is nothing to lock (host backends, bytes == 0) or the system
  /// refuses (logged once; copies then go through the driver's staging, correct and
  /// slower).
  virtual std::unique_ptr<HostPin> pin_host(const void* p, std::size_t bytes) {
    (void)p, (void)bytes;
    return nullptr;
  }

  // ---- budgets and tuning ----
  /// Bytes of backend memory a tensor prepared from now on may occupy; 0 (the default)
  /// means no limit beyond the device's free memory. Call before prepare(). The cuda
  /// backend keeps a tensor over the budget in pinned host memory and streams it (tier
  /// 2); a budget too small for two one-tile chunks makes prepare() throw InputError.
  /// Host backends record the value and otherwise ignore it (their format is already
  /// host-resident).
  void set_memory_budget(std::size_t bytes) { budget_ = bytes; }
  /// The value last given to set_memory_budget (0 when never called).
  std::size_t memory_budget() const { return budget_; }
  /// The workload of tensors prepared from now on (default: mttkrp). Call before prepare().
  virtual void set_workload(Workload w) { workload_ = w; }
  Workload workload() const { return workload_; }
  /// The rank R of the MTTKRPs that tensors prepared from now on will serve (0, the
  /// default: unknown). Call before prepare(). With it the cuda backend's automatic
  /// tensor-core choice is made at prepare: a mode whose tiles its cost model predicts no
  /// gain for at this R gets no tile set (which would take device memory the plan does not
  /// count). The MTTKRP still takes any R.
  virtual void set_rank_hint(int R) { rank_hint_ = R > 0 ? R : 0; }
  int rank_hint() const { return rank_hint_; }
  /// The kernel tuning options (kernels/tuning.hpp) of operations called from now on;
  /// layout choices take effect at the next prepare(). Throws InputError (kernels::check)
  /// on an invalid value, leaving the previous options in place.
  virtual void set_tuning(const Tuning& t) {
    check(t);
    tuning_ = t;
  }
  const Tuning& tuning() const { return tuning_; }

  // ---- tensor handles ----
  /// Prepares `x` (coordinates local to the block: idx[m][k] < x.dims[m]) for repeated
  /// MTTKRP in every mode. The handle keeps what it needs; `x` may be freed after.
  virtual std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) = 0;
  /// The handle prepare() would give for the nonzeros with ids [first_id, first_id +
  /// count) of the "sampled" synthetic tensor `spec` (tensor/synthetic.hpp): nonzero `id`
  /// has coordinates synthetic::coordinate(spec, id, n) and value
  /// synthetic::model_value(spec, coords) cast to T, in id order. Coordinates are global
  /// (dims = spec.dims). Repeated coordinates are NOT merged (unlike algo::generate,
  /// whose distribute step merges them): the MTTKRP sums them, so the tensor is the
  /// merged one with summed values. Throws InputError on an invalid spec (order outside
  /// 1..kMaxOrder, a dimension outside 1..2^32, rank < 1) or an id range past 2^64.
  /// The default builds the COO on the host (OpenMP) and calls prepare(); the cuda
  /// backend generates it on the device.
  std::unique_ptr<TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                     std::uint64_t first_id, std::uint64_t count) {
    return prepare_synthetic(spec, synthetic::whole_window(spec), first_id, count);
  }
  /// As above, keeping only the ids of [first_id, first_id + count) whose nonzeros lie in
  /// window `w` (tensor/synthetic.hpp: the block of one rank of a grid partition, coordinates
  /// shifted to it, dims w.hi - w.lo), in id order. Throws InputError where check_synthetic
  /// does.
  virtual std::unique_ptr<TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                             const synthetic::Window& w,
                                                             std::uint64_t first_id,
                                                             std::uint64_t count);

  /// What the host backends' ops::mttkrp_accumulate keeps between calls: the chunk's
  /// output, and the times since the last ops::take_accumulate_times.
  struct HostAccumulate {
    Array<T> scratch;
    AccumulateTimes times;
  };
  HostAccumulate& host_accumulate() { return host_accumulate_; }

 private:
  std::size_t budget_ = 0;
  Workload workload_ = Workload::mttkrp;
  int rank_hint_ = 0;
  Tuning tuning_;
  HostAccumulate host_accumulate_;
};

/// Throws InputError unless prepare_synthetic(spec, first_id, count) is valid (see there).
void check_synthetic(const synthetic::Spec& spec, std::uint64_t first_id, std::uint64_t count);
/// The same, and that window `w` lies inside spec.dims (lo <= hi <= dims in every mode).
void check_synthetic(const synthetic::Spec& spec, const synthetic::Window& w,
                     std::uint64_t first_id, std::uint64_t count);
/// Whether `w` is the whole tensor (no relabelling, lo 0, hi dims): every id is kept.
bool is_whole(const synthetic::Spec& spec, const synthetic::Window& w);

/// The host COO of prepare_synthetic(spec, first_id, count) (OpenMP, OpenMP's default
/// thread count): nonzero k is id first_id + k. Calls check_synthetic.
template <typename T>
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, std::uint64_t first_id,
                                      std::uint64_t count);
/// The host COO of prepare_synthetic(spec, w, first_id, count): the ids of the range in
/// window `w`, in id order (two passes over the range: counts per thread, then the entries).
template <typename T>
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, const synthetic::Window& w,
                                      std::uint64_t first_id, std::uint64_t count);

/// Creates a backend. Throws Error "built without CUDA" for cuda in a CPU-only build.
/// `threads` limits OpenMP threads for the cpu backend (0 = OpenMP's default); `tuning`
/// is given to Backend::set_tuning.
template <typename T>
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads = 0,
                                         const Tuning& tuning = {});

}  // namespace tessera::kernels
