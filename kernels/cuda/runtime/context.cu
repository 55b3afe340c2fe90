// The CUDA backend's context (detail.cuh: device, blocking stream, cuBLAS and cuSOLVER
// handles, scratch) and what the build and the device report (kernels/factories.hpp).
#include "kernels/cuda/runtime/context.cuh"
#include "kernels/factories.hpp"

namespace tessera::kernels {

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not sticky, clear it
    return 0;
  }
  return n;
}

DeviceMemory cuda_memory_info(bool trim, int device) {
  if (cuda_device_count() == 0) return {};
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  if (trim) cuda::trim_pool();  // memory cached by the stream-ordered pool is free for the plan
  DeviceMemory m;
  if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return m;
}

int cuda_current_device() {
  if (cuda_device_count() == 0) return -1;
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

namespace cuda {

Context::Context() {
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
  try {
    TESSERA_CUBLAS_CHECK(cublasCreate(&cublas));
    TESSERA_CUBLAS_CHECK(cublasSetStream(cublas, stream));
    // Plain IEEE arithmetic: no TF32 for the float Gram/solve products.
    TESSERA_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
    TESSERA_CUSOLVER_CHECK(cusolverDnCreate(&cusolver));
    TESSERA_CUSOLVER_CHECK(cusolverDnSetStream(cusolver, stream));
  } catch (...) {
    if (cusolver) cusolverDnDestroy(cusolver);
    if (cublas) cublasDestroy(cublas);
    TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
    throw;
  }
}

Context::~Context() {
  int prev = device;
  TESSERA_CUDA_CHECK_NOTHROW(cudaGetDevice(&prev));
  if (prev != device) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream));
  scratch = DeviceMemory();
  small = DeviceMemory();
  if (cusolver) cusolverDnDestroy(cusolver);
  if (cublas) cublasDestroy(cublas);
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  if (prev != device) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(prev));
}

}  // namespace cuda
}  // namespace tessera::kernels
