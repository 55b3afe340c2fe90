// Error checks for the CUDA runtime, cuBLAS and cuSOLVER: each failing call throws
// tessera::Error naming the call, the library's error string, file and line. The
// *_NOTHROW variants print to stderr instead and are for destructors and deleters.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "util/error.hpp"

namespace tessera::kernels::cuda::detail {

inline const char* cusolver_status_string(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS:
      return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED (library not initialised)";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED (out of device memory)";
    case CUSOLVER_STATUS_INVALID_VALUE:
      return "CUSOLVER_STATUS_INVALID_VALUE (invalid argument)";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return "CUSOLVER_STATUS_ARCH_MISMATCH (device architecture not supported)";
    case CUSOLVER_STATUS_MAPPING_ERROR:
      return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED (kernel failed to launch or run)";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_ZERO_PIVOT:
      return "CUSOLVER_STATUS_ZERO_PIVOT";
    case CUSOLVER_STATUS_INVALID_WORKSPACE:
      return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default:
      return "cuSOLVER error";
  }
}

[[noreturn]] inline void throw_gpu(const char* lib, const std::string& what, const char* call,
                                   const char* file, int line) {
  std::ostringstream os;
  os << lib << " call failed: " << call << ": " << what << " [" << file << ":" << line << "]";
  throw ::tessera::Error(os.str());
}

inline std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw_gpu("CUDA", cuda_error_text(e), call, file, line);
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* call, const char* file,
                                      int line) {
  throw_gpu("cuBLAS", std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s), call,
            file, line);
}

[[noreturn]] inline void throw_cusolver(cusolverStatus_t s, const char* call, const char* file,
                                        int line) {
  throw_gpu("cuSOLVER", cusolver_status_string(s), call, file, line);
}

/// No-throw report for destructors. Errors at process teardown (runtime already
/// unloaded) are expected and stay silent.
inline void warn_cuda(cudaError_t e, const char* call, const char* file, int line) noexcept {
  if (e == cudaSuccess || e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed) return;
  std::fprintf(stderr, "warning: CUDA call failed in cleanup: %s: %s: %s [%s:%d]\n", call,
               cudaGetErrorName(e), cudaGetErrorString(e), file, line);
}

}  // namespace tessera::kernels::cuda::detail

/// Throws tessera::Error when a CUDA runtime call does not return cudaSuccess.
#define TESSERA_CUDA_CHECK(call)                                                                 \
  do {                                                                                           \
    cudaError_t tessera_cuda_rc_ = (call);                                                       \
    if (tessera_cuda_rc_ != cudaSuccess)                                                         \
      ::tessera::kernels::cuda::detail::throw_cuda(tessera_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch of the kernel just enqueued (bad configuration, missing image).
#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())

/// Prints instead of throwing; for destructors and deleters.
#define TESSERA_CUDA_CHECK_NOTHROW(call) \
  ::tessera::kernels::cuda::detail::warn_cuda((call), #call, __FILE__, __LINE__)

#define TESSERA_CUBLAS_CHECK(call)                                                        \
  do {                                                                                    \
    cublasStatus_t tessera_cublas_rc_ = (call);                                           \
    if (tessera_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::tessera::kernels::cuda::detail::throw_cublas(tessera_cublas_rc_, #call, __FILE__, \
                                                     __LINE__);                           \
  } while (0)

#define TESSERA_CUSOLVER_CHECK(call)                                                          \
  do {                                                                                        \
    cusolverStatus_t tessera_cusolver_rc_ = (call);                                           \
    if (tessera_cusolver_rc_ != CUSOLVER_STATUS_SUCCESS)                                      \
      ::tessera::kernels::cuda::detail::throw_cusolver(tessera_cusolver_rc_, #call, __FILE__, \
                                                       __LINE__);                             \
  } while (0)
