// Backend::pin_host of the cuda backend (runtime/backend.cuh): page-locks host memory with
// cudaHostRegister for the lifetime of the returned handle, so that the copies from it (tier
// 2 and 3 chunks, the SpTC's kept host buffers) are DMA at the full rate of the host link.
#include <atomic>
#include <memory>
#include <string>

#include "kernels/cuda/runtime/detail.cuh"
#include "util/log.hpp"

namespace tessera::kernels::cuda {

namespace {
/// Registered with cudaHostRegisterPortable, so unregistering does not depend on the
/// calling thread's current device; done on the registering device all the same.
class RegisteredHost final : public HostPin {
 public:
  RegisteredHost(void* p, int device) : p_(p), device_(device) {}
  ~RegisteredHost() override {
    DeviceGuardNoThrow g(device_);
    TESSERA_CUDA_CHECK_NOTHROW(cudaHostUnregister(p_));
  }
  RegisteredHost(const RegisteredHost&) = delete;
  RegisteredHost& operator=(const RegisteredHost&) = delete;

 private:
  void* p_;
  int device_;
};
}  // namespace

std::unique_ptr<HostPin> pin_host(int device, const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0) return nullptr;
  DeviceGuard g(device);
  void* h = const_cast<void*>(p);
  const cudaError_t e = cudaHostRegister(h, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // Already locked (the same range locked twice, or a page it shares with a locked
    // neighbour): the copies are DMA anyway, nothing to say. Anything else: said once.
    static std::atomic<bool> said{false};
    if (e != cudaErrorHostMemoryAlreadyRegistered && !said.exchange(true))
      log::info(std::string("cuda backend: page-locking host memory failed (") +
                detail::cuda_error_text(e) + "); its copies stay staged by the driver");
    return nullptr;
  }
  return std::make_unique<RegisteredHost>(h, device);
}

}  // namespace tessera::kernels::cuda
