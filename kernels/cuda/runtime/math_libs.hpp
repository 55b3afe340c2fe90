// cuBLAS and cuSOLVER are opened on first use, not linked (math_libs.cpp says why and how).
#pragma once

namespace tessera::kernels::cuda::detail {

/// dlopen of `soname` from `dir`, else through the loader's search path. Throws
/// tessera::Error naming `label` (e.g. "cuBLAS"), the soname and the loader's reason when
/// neither opens.
void* open_math_library(const char* label, const char* dir, const char* soname);

}  // namespace tessera::kernels::cuda::detail
