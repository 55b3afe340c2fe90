// CPU backend: host memory, OpenMP CSF MTTKRP and TTMc (kernels/cpu/mttkrp.cpp, ttmc.cpp),
// the OpenMP SpTC (sptc.cpp) and the tessera::linalg dense operations, every parallel region
// capped at `threads` (the operations: kernels/cpu/ops.cpp, dense_ops.cpp).
#include "kernels/cpu/backend.hpp"

#include "kernels/factories.hpp"

namespace tessera::kernels {

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend<T>>(threads);
}

template std::unique_ptr<Backend<float>> make_cpu_backend<float>(int);
template std::unique_ptr<Backend<double>> make_cpu_backend<double>(int);

}  // namespace tessera::kernels
