// Which BLAS and LAPACK this process runs (`python -m tessera`, run::build_info): the shared
// object that provides dgemm_ and dsyevd_ at run time. On Debian the linked libblas.so.3 /
// liblapack.so.3 are alternatives (reference, OpenBLAS, BLIS, MKL), so the library a build
// was linked with says less than the one the loader resolved.
#pragma once

#include <string>

namespace tessera::linalg {

struct LibraryInfo {
  /// "OpenBLAS", "MKL", "BLIS", "FlexiBLAS", "ATLAS", "reference" (Netlib) or "unknown".
  std::string vendor;
  /// Canonical path of the shared object ("" when linked statically or not found).
  std::string path;
  /// The library's own description where it has one (OpenBLAS: openblas_get_config()).
  std::string config;
};

/// The library that provides dgemm_ in this process.
LibraryInfo blas_library();
/// The library that provides dsyevd_ in this process.
LibraryInfo lapack_library();

}  // namespace tessera::linalg
