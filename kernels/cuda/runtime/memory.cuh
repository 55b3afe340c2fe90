// Internal to the CUDA backend: device and pinned memory ownership, the device's
// stream-ordered pool, event pools and scratch arenas, with the time spent allocating
// (read by PhaseTrace, trace.cuh).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/runtime/cuda_check.cuh"

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

}  // namespace tessera::kernels::cuda
