// Reference backend: host memory, plain loops and the tessera::linalg dense operations, run
// serially (the operations: kernels/reference/*.cpp). The ground truth the other backends are
// tested against.
#include "kernels/reference/backend.hpp"

#include "kernels/factories.hpp"

namespace tessera::kernels {

template <typename T>
std::unique_ptr<Backend<T>> make_reference_backend() {
  return std::make_unique<reference::ReferenceBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_reference_backend<float>();
template std::unique_ptr<Backend<double>> make_reference_backend<double>();

}  // namespace tessera::kernels
