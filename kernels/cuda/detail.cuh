// Internal to the CUDA backend: device memory ownership, the per-backend context
// (device, stream, library handles, scratch) and the operations backend.cu dispatches to.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_check.cuh"

namespace tessera::kernels::cuda {

/// Nanoseconds this process has spent inside cudaMalloc and cudaFree of DeviceMemory
/// (read by PhaseTrace, trace.cuh).
inline std::atomic<std::int64_t>& alloc_nanos() {
  static std::atomic<std::int64_t> n{0};
  return n;
}

/// Adds the lifetime of the clock to alloc_nanos().
class AllocClock {
 public:
  AllocClock() : t0_(std::chrono::steady_clock::now()) {}
  ~AllocClock() {
    alloc_nanos() +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
            .count();
  }
  AllocClock(const AllocClock&) = delete;
  AllocClock& operator=(const AllocClock&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

/// The device's default memory pool, which stream-ordered allocations draw from.
inline cudaMemPool_t default_pool() {
  int dev = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool = nullptr;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  return pool;
}

/// Bytes the current device's default pool holds but no allocation uses (free for a
/// pooled allocation, though cudaMemGetInfo counts them as used).
inline std::size_t pool_idle_bytes() {
  cudaMemPool_t pool = default_pool();
  std::uint64_t reserved = 0, used = 0;
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return reserved > used ? static_cast<std::size_t>(reserved - used) : 0;
}

/// Hands what the default pool holds unused back to the device, so cudaMemGetInfo sees all
/// free memory. Waits for the device first when the pool holds anything, so blocks freed
/// in stream order but not yet reached count too.
inline void trim_pool() {
  cudaMemPool_t pool = default_pool();
  std::uint64_t reserved = 0;
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  if (reserved == 0) return;
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  TESSERA_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

/// cudaMalloc that, when the device is out of memory, trims the default pool (pooled
/// allocations keep their memory cached) and tries once more. The error of a failed
/// attempt is cleared.
inline cudaError_t malloc_or_trim(void** p, std::size_t bytes) {
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    trim_pool();
    e = cudaMalloc(p, bytes);
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

/// Owning, grow-only device allocation: cudaMalloc/cudaFree on the current device, or,
/// for a pooled allocation (try_reserve_pooled), cudaMallocAsync/cudaFreeAsync from the
/// device's default pool in the order of the legacy default stream. Pooled blocks are
/// allocated and returned without waiting for the device (every blocking stream, such as a
/// Context's, is ordered with the legacy stream); the pool keeps returned memory for the
/// next pooled allocation (release threshold raised by enable_pool_caching), and a plain
/// allocation that finds the device full trims it (malloc_or_trim).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes) { reserve(bytes); }
  ~DeviceMemory() { release(); }
  DeviceMemory(DeviceMemory&& o) noexcept : p_(o.p_), bytes_(o.bytes_), pooled_(o.pooled_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
    o.pooled_ = false;
  }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      bytes_ = o.bytes_;
      pooled_ = o.pooled_;
      o.p_ = nullptr;
      o.bytes_ = 0;
      o.pooled_ = false;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  /// Ensures at least `bytes` bytes. Growing frees the old block first (cudaFree waits for
  /// the device, so work still using it has finished); contents are not kept.
  void reserve(std::size_t bytes) { TESSERA_CUDA_CHECK(try_reserve(bytes)); }
  /// Like reserve, but returns the error (cleared from cudaGetLastError, so a later
  /// launch check does not report it again) instead of throwing.
  cudaError_t try_reserve(std::size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    release();
    AllocClock clock;
    const cudaError_t e = malloc_or_trim(&p_, bytes);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  /// Like try_reserve, from the default pool in legacy-stream order (see the class).
  /// Work on non-blocking streams that uses the block must be ordered after the legacy
  /// stream and finished before the block is released.
  cudaError_t try_reserve_pooled(std::size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    release();
    AllocClock clock;
    const cudaError_t e = cudaMallocAsync(&p_, bytes, cudaStreamLegacy);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      p_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    pooled_ = true;
    return cudaSuccess;
  }
  void* get() const { return p_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (p_) {
      AllocClock clock;
      if (pooled_)
        TESSERA_CUDA_CHECK_NOTHROW(cudaFreeAsync(p_, cudaStreamLegacy));
      else
        TESSERA_CUDA_CHECK_NOTHROW(cudaFree(p_));
    }
    p_ = nullptr;
    bytes_ = 0;
    pooled_ = false;
  }
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  bool pooled_ = false;
};

/// Lets the current device's default pool keep returned memory for later pooled
/// allocations instead of handing it back at every synchronisation.
inline void enable_pool_caching() {
  std::uint64_t threshold = ~std::uint64_t{0};
  TESSERA_CUDA_CHECK(
      cudaMemPoolSetAttribute(default_pool(), cudaMemPoolAttrReleaseThreshold, &threshold));
}

/// Owning page-locked host allocation (cudaHostAlloc/cudaFreeHost): the source of the
/// asynchronous chunk copies of tier 2. The owner must make sure no copy still reads it
/// when it is released.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  ~PinnedMemory() { release(); }
  PinnedMemory(PinnedMemory&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  /// Allocates `bytes` (contents undefined); returns the CUDA error instead of throwing
  /// so the caller can say what the memory was for.
  cudaError_t allocate(std::size_t bytes) {
    release();
    if (bytes == 0) return cudaSuccess;
    const cudaError_t e = cudaHostAlloc(&p_, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      p_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }
  char* get() const { return static_cast<char*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (p_) TESSERA_CUDA_CHECK_NOTHROW(cudaFreeHost(p_));
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Grow-only pool of timing-enabled CUDA events (created on the current device).
class EventPool {
 public:
  EventPool() = default;
  ~EventPool() { clear(); }
  void clear() noexcept {
    for (cudaEvent_t e : ev_) TESSERA_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    ev_.clear();
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  void ensure(std::size_t n) {
    ev_.reserve(n);
    while (ev_.size() < n) {
      cudaEvent_t e = nullptr;
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
      ev_.push_back(e);
    }
  }
  cudaEvent_t operator[](std::size_t k) const { return ev_[k]; }
  std::size_t size() const { return ev_.size(); }

 private:
  std::vector<cudaEvent_t> ev_;
};

/// Carves typed pieces out of one scratch block; pieces are 256-byte aligned.
class Arena {
 public:
  /// Reserves room for n elements of U and returns its offset (call before bind()).
  template <typename U>
  std::size_t add(std::size_t n) {
    const std::size_t off = total_;
    total_ += (n * sizeof(U) + 255) / 256 * 256;
    return off;
  }
  std::size_t total() const { return total_; }
  template <typename U>
  static U* at(void* base, std::size_t off) {
    return reinterpret_cast<U*>(static_cast<char*>(base) + off);
  }

 private:
  std::size_t total_ = 0;
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
  /// The backend's kernel tuning options (Backend::set_tuning, already checked): layout
  /// fields apply to tensors prepared from now on, kernel choices to every call.
  Tuning tuning;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cusolverDnHandle_t cusolver = nullptr;
  DeviceMemory scratch;  ///< large pieces (row chunks, partial sums, solver workspace)
  DeviceMemory small;    ///< R x R pieces that must outlive a workspace query
  /// A CUDA graph is being captured from `stream` (cp_device.cu): operations skip their
  /// timing events, which a captured stream cannot give back.
  bool capturing = false;

  void sync() const { TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream)); }
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

// ---- operations (mttkrp/, ttmc/, dense.cu) ----

/// `budget`: bytes of device memory the prepared tensor may occupy (0 = the device's free
/// memory less a reserve). Over the budget the sorted copies stay in pinned host memory
/// and every mttkrp streams them through two device chunk buffers (tier 2). Tier 1 sorts
/// on the device (CUB radix sort) when the peak of that build (copies + one COO + sort
/// temporaries) also fits the budget, else on the host (OpenMP, host_sort.hpp); tier 2
/// sorts on the host.
template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_tensor(Context& ctx, const SparseTensor<T>& x,
                                                std::size_t budget);
/// Backend::prepare_synthetic: generates the COO of ids [first_id, first_id + count) on
/// the device, in the layout the device sort of prepare_tensor uploads into, and builds
/// the tier-1 copies from it there. When tier 1 or the device sort's peak does not fit
/// (or an allocation fails), builds the COO on the host (make_synthetic_tensor) and calls
/// prepare_tensor; describe() then says so.
template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_synthetic(Context& ctx, const synthetic::Spec& spec,
                                                   std::uint64_t first_id, std::uint64_t count,
                                                   std::size_t budget);
template <typename T>
void mttkrp(Context& ctx, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            int R, T* out);

/// Backend::ttmc_rows / ttmc_scratch_bytes / ttmc (ttmc/ttmc.cu). The handle keeps the
/// row map of each mode after its first use.
template <typename T>
std::vector<index_t> ttmc_rows(Context& ctx, const TensorHandle<T>& x, int mode);
template <typename T>
std::size_t ttmc_scratch_bytes(Context& ctx, const TensorHandle<T>& x, int mode,
                               const std::vector<int>& ranks);
template <typename T>
void ttmc(Context& ctx, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out);

/// Backend::wide_gram / wide_times / wide_times_t: cuBLAS DGEMM (float rows widened to
/// double per chunk in ctx.scratch).
template <typename T>
void wide_gram(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, double* S);
template <typename T>
void wide_times(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                double* Z);
template <typename T>
void wide_times_t(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B);
/// Backend::symmetric_eig_top: cuSOLVER dsyevdx (range I) on the device; waits for it.
void symmetric_eig_top(Context& ctx, double* S, int n, int k, double* w_host, double* V);
/// Backend::sum_rows (index arrays copied to ctx.scratch; waits for the copies).
template <typename T>
void sum_rows(Context& ctx, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst);
/// Backend::add_rows (the row map copied to ctx.scratch; waits for the copy).
template <typename T>
void add_rows(Context& ctx, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst);
/// Scratch bytes of the wide products for C columns of value_size-byte values.
std::size_t wide_scratch_bytes(std::int64_t C, std::size_t value_size);

/// Backend::contract_plan / Backend::contract (sptc/plan.cu): sort-based SpTC on the device;
/// keys over 64 bits fall back to the cpu implementation (logged). The plan refers to ctx,
/// x and y, which must outlive it.
template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(Context& ctx, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec);
template <typename T>
SparseTensor<T> contract(Context& ctx, ContractPlan<T>& plan, ContractStats* stats);
/// Backend::contract_into (sptc/plan.cu): the rows assembly writes into the sink; false for the
/// other paths (sort assembly, cpu fallback), with nothing run.
template <typename T>
bool contract_into(Context& ctx, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink);
/// Backend::contract_route (sptc/route.cu): the device side of a routed contraction; its
/// methods set the device themselves.
template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Context& ctx, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks);
/// Backend::pin_host: cudaHostRegister of [p, p + bytes) for the handle's lifetime.
std::unique_ptr<HostPin> pin_host(int device, const void* p, std::size_t bytes);

template <typename T>
void fill(Context& ctx, T* dst, std::size_t n, T value);
template <typename T>
void gram(Context& ctx, const T* A, std::int64_t rows, int R, T* G);
template <typename T>
void hadamard(Context& ctx, const std::vector<const T*>& Gs, int R, T* V);
template <typename T>
bool solve_normal(Context& ctx, T* M, std::int64_t rows, const T* V, int R);
template <typename T>
void column_norms(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out);
template <typename T>
void scale_columns(Context& ctx, T* A, std::int64_t rows, int R, const double* host_scale);
template <typename T>
void column_dots(Context& ctx, const T* A, const T* B, std::int64_t rows, int R, double* host_out);
/// Backend::pack_outer and Backend::row_update (kernels/cuda/row_update.cu).
template <typename T>
void pack_outer(Context& ctx, const T* A, std::int64_t rows, int R, T* P);
template <typename T>
std::int64_t row_update(Context& ctx, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad);

// ---- CP-ALS iteration on the device (cp_device.cu; helpers in dense.cu) ----

/// Backend::cp_device_loop: nullptr (and *why) when R is above the kernels' limit.
template <typename T>
std::unique_ptr<CpDeviceLoop<T>> make_cp_loop(Context& ctx, const CpLoopSpec<T>& spec,
                                              std::string* why);
/// column_norms / column_dots with the R results left in device memory (out_dev); no wait.
template <typename T>
void column_norms_device(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                         double* out_dev);
template <typename T>
void column_dots_device(Context& ctx, const T* A, const T* B, std::int64_t rows, int R,
                        double* out_dev);
/// Whether times_w runs as one kernel at this R (what the device loop needs).
bool times_w_fits(const Context& ctx, int R);
/// D := S W (S == D allowed) for W (R x R, column-major, double, device memory);
/// times_w_fits(ctx, R). With colmax (device, R doubles, zero or earlier maxima on entry):
/// colmax[c] = max(colmax[c], max_row |D(row, c)|), NaN ignored, in the same pass.
template <typename T>
void times_w(Context& ctx, const T* S, T* D, std::int64_t rows, int R, const double* W,
             double* colmax = nullptr);

// Tucker dense stage (kernels/cuda/tucker_dense.cu): the Backend operations of the same
// names, in double on ctx.stream. cholqr_step, subspace_change and sum_squares_double wait
// for their host result; the others return with the work queued.
void gather_rows_double(Context& ctx, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P);
void scatter_rows_double(Context& ctx, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U);
void gram_double(Context& ctx, const double* U, std::int64_t rows, int R, double* G);
void inner_double(Context& ctx, const double* A, const double* B, std::int64_t rows, int R,
                  double* M);
void times_small_double(Context& ctx, double* U, std::int64_t rows, int R, const double* M);
bool cholqr_step(Context& ctx, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev);
double subspace_change(Context& ctx, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R);
double sum_squares_double(Context& ctx, const double* x, std::size_t n);
template <typename T>
void convert_from_double(Context& ctx, const double* src, std::size_t n, T* dst);

}  // namespace tessera::kernels::cuda
