// The OpenMP team size of the cpu backend's kernels, shared by kernels/cpu. Internal.
#pragma once

#include <omp.h>

namespace tessera::kernels::cpu {

/// OpenMP team size for a `threads` option (0: omp_get_max_threads()); at least 1.
inline int team_size(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace tessera::kernels::cpu
