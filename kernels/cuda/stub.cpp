// CPU-only build: the CUDA backend's entry points exist and say why they cannot run.
#include "kernels/factories.hpp"
#include "util/error.hpp"

namespace tessera::kernels {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
DeviceMemory cuda_memory_info(bool) {
  return {};
}

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend() {
  TESSERA_THROW(
      "the cuda backend was requested, but Tessera was built without CUDA "
      "(reconfigure with -DTESSERA_WITH_CUDA=ON where the CUDA toolkit is installed)");
}
template std::unique_ptr<Backend<float>> make_cuda_backend<float>();
template std::unique_ptr<Backend<double>> make_cuda_backend<double>();

}  // namespace tessera::kernels
