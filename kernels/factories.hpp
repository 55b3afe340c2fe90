// Internal: per-backend factories behind kernels::make_backend.
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/backend.hpp"

namespace tessera::kernels {

template <typename T>
std::unique_ptr<Backend<T>> make_reference_backend();
template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(int threads);
/// Throws Error "built without CUDA" in a CPU-only build, or when no GPU is visible.
template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend();
/// True when compiled with the CUDA backend.
bool cuda_built();
/// Number of visible CUDA devices (0 in a CPU-only build).
int cuda_device_count();
/// Free and total bytes of the current CUDA device (cudaMemGetInfo, after trimming the
/// stream-ordered pool when `trim`: memory it caches is then counted free), or of `device`
/// when it is >= 0 (made the calling thread's current device first: a new thread starts on
/// device 0, so a sampler thread of a rank on another GPU must name it); {0, 0} in a
/// CPU-only build or without a device. Thread-safe without `trim` (samplers).
struct DeviceMemory {
  std::size_t free = 0, total = 0;
};
DeviceMemory cuda_memory_info(bool trim = true, int device = -1);
/// The calling thread's current CUDA device; -1 in a CPU-only build or without a device.
int cuda_current_device();

}  // namespace tessera::kernels
