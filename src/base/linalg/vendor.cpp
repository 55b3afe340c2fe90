#include "linalg/vendor.hpp"

#include <dlfcn.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <system_error>

extern "C" {
// The same declarations as blas.cpp and dense.cpp: only their addresses are taken here.
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc, std::size_t, std::size_t);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
             double* work, const int* lwork, int* iwork, const int* liwork, int* info,
             std::size_t jobz_len, std::size_t uplo_len);
}

namespace tessera::linalg {
namespace {

bool contains(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}

/// The vendor a library's canonical path names (Debian: /usr/lib/<triplet>/openblas-pthread/
/// libblas.so.3, blas/libblas.so.3 for the reference BLAS, lapack/liblapack.so.3, ...).
std::string vendor_of(const std::string& path) {
  if (contains(path, "openblas")) return "OpenBLAS";
  if (contains(path, "mkl")) return "MKL";
  if (contains(path, "blis")) return "BLIS";
  if (contains(path, "flexiblas")) return "FlexiBLAS";
  if (contains(path, "atlas")) return "ATLAS";
  if (contains(path, "/blas/") || contains(path, "/lapack/") || contains(path, "libblas") ||
      contains(path, "liblapack"))
    return "reference";
  return "unknown";
}

LibraryInfo library_of(void* symbol) {
  LibraryInfo info{"unknown", "", ""};
  Dl_info dl{};
  if (dladdr(symbol, &dl) == 0 || dl.dli_fname == nullptr) return info;
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(dl.dli_fname, ec);
  info.path = ec ? std::string(dl.dli_fname) : canonical.string();
  // Symbols of the main program (a static BLAS) report the executable itself.
  info.vendor = vendor_of(info.path);
  if (void* handle = dlopen(dl.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
    using ConfigFn = const char* (*)();
    if (auto fn = reinterpret_cast<ConfigFn>(dlsym(handle, "openblas_get_config"))) {
      info.vendor = "OpenBLAS";
      if (const char* c = fn()) info.config = c;
    } else if (dlsym(handle, "mkl_get_version") != nullptr) {
      info.vendor = "MKL";
    } else if (dlsym(handle, "bli_info_get_version_str") != nullptr) {
      info.vendor = "BLIS";
    }
    dlclose(handle);
  }
  return info;
}

}  // namespace

LibraryInfo blas_library() {
  return library_of(reinterpret_cast<void*>(&dgemm_));
}

LibraryInfo lapack_library() {
  return library_of(reinterpret_cast<void*>(&dsyevd_));
}

}  // namespace tessera::linalg
