// cuBLAS and cuSOLVER, opened on first use instead of linked.
//
// Loading libcublas (and through it libcublasLt) or libcusolver costs every process about
// 0.4 s of CPU before main, whether or not it ever touches a GPU: their initialisers register
// thousands of kernels (docs/reliability.md, "CI time", session 37). A CUDA build of
// `tessera` used to pay that on every start, `--help` and CPU-backend runs included, and so did
// every rank of every `mpiexec` and the Python module's import. Here each entry point the
// library calls is defined with the header's own prototype (the compiler checks it against
// the declaration) and forwards to the real function, looked up with dlsym the first time it
// is called. The library is opened by its soname through the loader's search path
// (LD_LIBRARY_PATH, the binary's RUNPATH, ldconfig), as a linked one would be, else from the
// folder CMake found it in at configure time (TESSERA_CUBLAS_DIR, TESSERA_CUSOLVER_DIR). If
// neither works the first call throws tessera::Error naming the library and both of the
// loader's reasons. The forwarders are hidden: never exported from the binary or the Python
// module, so no other library of the process can bind to them.
//
// A call the library makes to a cuBLAS or cuSOLVER function not listed here fails to link
// (undefined reference): add it below with its prototype from cublas_api.h / cusolverDn.h.
#include "kernels/cuda/runtime/math_libs.hpp"

#include <cublas_v2.h>
#include <cusolverDn.h>
#include <dlfcn.h>

#include <string>

#include "util/error.hpp"

#if !defined(TESSERA_CUBLAS_SONAME) || !defined(TESSERA_CUBLAS_DIR) || \
    !defined(TESSERA_CUSOLVER_SONAME) || !defined(TESSERA_CUSOLVER_DIR)
#error "TESSERA_{CUBLAS,CUSOLVER}_{SONAME,DIR} are set by kernels/CMakeLists.txt"
#endif

namespace tessera::kernels::cuda::detail {

void* open_math_library(const char* label, const char* dir, const char* soname) {
  // By soname first, as a linked library would be found: LD_LIBRARY_PATH (a `module load`
  // of another toolkit) wins, then the binary's RUNPATH and the loader's cache, and a copy
  // another library of the process already loaded is reused.
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return h;
  const char* e1 = dlerror();
  const std::string by_name = e1 ? e1 : "not found";
  const std::string in_dir = std::string(dir) + "/" + soname;
  if (void* h = dlopen(in_dir.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const char* e2 = dlerror();
  throw tessera::Error(std::string(label) + " could not be loaded: " + by_name + "; " +
                       (e2 ? e2 : in_dir + ": not found") + ". The cuda backend needs the CUDA " +
                       "toolkit's " + soname + ": install it, or add its folder to " +
                       "LD_LIBRARY_PATH");
}

}  // namespace tessera::kernels::cuda::detail

namespace {

using tessera::kernels::cuda::detail::open_math_library;

void* cublas_library() {
  static void* const h = open_math_library("cuBLAS", TESSERA_CUBLAS_DIR, TESSERA_CUBLAS_SONAME);
  return h;
}

void* cusolver_library() {
  static void* const h =
      open_math_library("cuSOLVER", TESSERA_CUSOLVER_DIR, TESSERA_CUSOLVER_SONAME);
  return h;
}

void* symbol(void* library, const char* label, const char* name) {
  dlerror();
  void* p = dlsym(library, name);
  if (p == nullptr) {
    const char* why = dlerror();
    throw tessera::Error(std::string(label) + " has no function " + name + " (" +
                         (why ? why : "dlsym returned null") +
                         "): the library found is older than the headers Tessera was built with");
  }
  return p;
}

}  // namespace

// One forwarding definition per entry point: `params` is the header's parameter list, `args`
// the same names in a call. The function pointer is looked up once (a thread-safe static).
#define TESSERA_FORWARD(lib, label, ret, name, params, args)                                 \
  extern "C" __attribute__((visibility("hidden"))) ret name params {                         \
    static const auto real = reinterpret_cast<decltype(&name)>(symbol(lib(), label, #name)); \
    return real args;                                                                        \
  }

#define TESSERA_CUBLAS(ret, name, params, args) \
  TESSERA_FORWARD(cublas_library, "cuBLAS", ret, name, params, args)
#define TESSERA_CUSOLVER(ret, name, params, args) \
  TESSERA_FORWARD(cusolver_library, "cuSOLVER", ret, name, params, args)

// cuBLAS (cublas_v2.h maps cublasCreate to cublasCreate_v2, cublasDgemm_64 to
// cublasDgemm_v2_64, and so on).
TESSERA_CUBLAS(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
TESSERA_CUBLAS(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
TESSERA_CUBLAS(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
               (handle, stream))
TESSERA_CUBLAS(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),
               (handle, mode))
TESSERA_CUBLAS(const char*, cublasGetStatusName, (cublasStatus_t status), (status))
TESSERA_CUBLAS(const char*, cublasGetStatusString, (cublasStatus_t status), (status))
TESSERA_CUBLAS(cublasStatus_t, cublasDgemm_v2,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                int n, int k, const double* alpha, const double* A, int lda, const double* B,
                int ldb, const double* beta, double* C, int ldc),
               (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
TESSERA_CUBLAS(cublasStatus_t, cublasDgemm_v2_64,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                int64_t m, int64_t n, int64_t k, const double* alpha, const double* A, int64_t lda,
                const double* B, int64_t ldb, const double* beta, double* C, int64_t ldc),
               (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
TESSERA_CUBLAS(cublasStatus_t, cublasDsyrk_v2_64,
               (cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int64_t n,
                int64_t k, const double* alpha, const double* A, int64_t lda, const double* beta,
                double* C, int64_t ldc),
               (handle, uplo, trans, n, k, alpha, A, lda, beta, C, ldc))
TESSERA_CUBLAS(cublasStatus_t, cublasDtrsm_v2_64,
               (cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                cublasOperation_t trans, cublasDiagType_t diag, int64_t m, int64_t n,
                const double* alpha, const double* A, int64_t lda, double* B, int64_t ldb),
               (handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb))

// cuSOLVER (dense).
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnCreate, (cusolverDnHandle_t * handle), (handle))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDestroy, (cusolverDnHandle_t handle), (handle))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnSetStream,
                 (cusolverDnHandle_t handle, cudaStream_t stream), (handle, stream))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDpotrf_bufferSize,
                 (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, double* A, int lda,
                  int* lwork),
                 (handle, uplo, n, A, lda, lwork))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDpotrf,
                 (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, double* A, int lda,
                  double* work, int lwork, int* info),
                 (handle, uplo, n, A, lda, work, lwork, info))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDpotrs,
                 (cusolverDnHandle_t handle, cublasFillMode_t uplo, int n, int nrhs,
                  const double* A, int lda, double* B, int ldb, int* info),
                 (handle, uplo, n, nrhs, A, lda, B, ldb, info))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDsyevd_bufferSize,
                 (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n,
                  const double* A, int lda, const double* W, int* lwork),
                 (handle, jobz, uplo, n, A, lda, W, lwork))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDsyevd,
                 (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n,
                  double* A, int lda, double* W, double* work, int lwork, int* info),
                 (handle, jobz, uplo, n, A, lda, W, work, lwork, info))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDsyevdx_bufferSize,
                 (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cusolverEigRange_t range,
                  cublasFillMode_t uplo, int n, const double* A, int lda, double vl, double vu,
                  int il, int iu, int* meig, const double* W, int* lwork),
                 (handle, jobz, range, uplo, n, A, lda, vl, vu, il, iu, meig, W, lwork))
TESSERA_CUSOLVER(cusolverStatus_t, cusolverDnDsyevdx,
                 (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cusolverEigRange_t range,
                  cublasFillMode_t uplo, int n, double* A, int lda, double vl, double vu, int il,
                  int iu, int* meig, double* W, double* work, int lwork, int* info),
                 (handle, jobz, range, uplo, n, A, lda, vl, vu, il, iu, meig, W, work, lwork, info))
