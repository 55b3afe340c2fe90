#include "kernels/backend.hpp"

#include "kernels/factories.hpp"
#include "util/error.hpp"

namespace tessera::kernels {

BackendKind parse_backend(const std::string& name) {
  if (name == "reference") return BackendKind::reference;
  if (name == "cpu") return BackendKind::cpu;
  if (name == "cuda") return BackendKind::cuda;
  if (name == "auto") return cuda_device_available() ? BackendKind::cuda : BackendKind::cpu;
  TESSERA_INPUT_CHECK(false,
                      "unknown backend '" << name << "': expected auto, reference, cpu or cuda");
  return BackendKind::cpu;
}

std::string to_string(BackendKind k) {
  switch (k) {
    case BackendKind::reference:
      return "reference";
    case BackendKind::cpu:
      return "cpu";
    case BackendKind::cuda:
      return "cuda";
  }
  return "?";
}

bool cuda_device_available() {
  return cuda_built() && cuda_device_count() > 0;
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads) {
  switch (kind) {
    case BackendKind::reference:
      return make_reference_backend<T>();
    case BackendKind::cpu:
      return make_cpu_backend<T>(threads);
    case BackendKind::cuda:
      return make_cuda_backend<T>();
  }
  TESSERA_THROW("unknown backend kind");
}

template std::unique_ptr<Backend<float>> make_backend<float>(BackendKind, int);
template std::unique_ptr<Backend<double>> make_backend<double>(BackendKind, int);

}  // namespace tessera::kernels
