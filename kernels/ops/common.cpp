// The dispatchers' error paths (kernels/ops/common.hpp).
#include "kernels/ops/common.hpp"

#include "util/error.hpp"

namespace tessera::kernels::ops {

void unknown_backend(int kind) {
  TESSERA_THROW("internal error: backend kind " << kind << " is none of reference, cpu, cuda");
}

void cuda_not_built(const char* operation) {
  TESSERA_THROW(operation << ": the cuda backend was requested, but Tessera was built without "
                             "CUDA (reconfigure with -DTESSERA_WITH_CUDA=ON where the CUDA "
                             "toolkit is installed)");
}

}  // namespace tessera::kernels::ops
