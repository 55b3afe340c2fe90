// Creates the CUDA backend's executor (backend.cuh) for make_backend (kernels/factories.hpp).
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/factories.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace tessera::kernels {

namespace cuda {
void warn_double_gathers(GatherPrecision g) {
  log::warn("--gather-precision " + std::string(name_of(g)) +
            " applies to float tensors; this double run gathers in double");
}
}  // namespace cuda

namespace {

/// --inject-fault RANK:oom:POINT (util/fault.hpp): takes every byte of `device` that
/// cudaMalloc still gives (as another process on the GPU would), keeps it until the process
/// ends, and then asks for 256 MiB as the backend does: that allocation fails like any on a
/// full device and throws its error.
void fill_device_then_allocate(int device) {
  cuda::DeviceGuard g(device);
  for (std::size_t chunk = std::size_t(1) << 34; chunk >= (std::size_t(1) << 20);) {
    void* p = nullptr;
    if (cudaMalloc(&p, chunk) == cudaSuccess) continue;  // held on purpose (see above)
    (void)cudaGetLastError();
    chunk /= 2;
  }
  void* p = nullptr;
  const std::size_t bytes = std::size_t(256) << 20;
  const cudaError_t e = cuda::malloc_or_trim(&p, bytes);
  if (e == cudaSuccess) {
    cudaFree(p);
    return;
  }
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  throw Error("cudaMalloc of " + std::to_string(bytes) + " bytes failed on device " +
              std::to_string(device) + " (" + cuda::detail::cuda_error_text(e) + "; " +
              std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes free)");
}

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    TESSERA_THROW("the cuda backend was requested, but no CUDA device is visible ("
                  << (e != cudaSuccess ? cuda::detail::cuda_error_text(e) : "0 devices")
                  << "; CUDA_VISIBLE_DEVICES=" << (vis ? vis : "<unset>")
                  << "); use --backend cpu, or run on a GPU node");
  }
  auto be = std::make_unique<cuda::CudaBackend<T>>();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  util::fault::set_oom_action([device] { fill_device_then_allocate(device); });
  return be;
}

template std::unique_ptr<Backend<float>> make_cuda_backend<float>();
template std::unique_ptr<Backend<double>> make_cuda_backend<double>();

}  // namespace tessera::kernels
