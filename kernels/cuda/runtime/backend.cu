// Creates the CUDA backend's executor (backend.cuh) for make_backend (kernels/factories.hpp).
#include <cstdlib>
#include <memory>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/factories.hpp"

namespace tessera::kernels {

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
  return std::make_unique<cuda::CudaBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_cuda_backend<float>();
template std::unique_ptr<Backend<double>> make_cuda_backend<double>();

}  // namespace tessera::kernels
