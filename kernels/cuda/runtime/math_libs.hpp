// cuBLAS and cuSOLVER are opened on first use, not linked (math_libs.cpp says why and how).
#pragma once

namespace tessera::kernels::cuda::detail {

/// dlopen of `soname` through the loader's search path (LD_LIBRARY_PATH, RUNPATH, the
/// cache), else from `dir`. Throws tessera::Error naming `label` (e.g. "cuBLAS"), the soname
/// and both of the loader's reasons when neither opens.
void* open_math_library(const char* label, const char* dir, const char* soname);

}  // namespace tessera::kernels::cuda::detail
