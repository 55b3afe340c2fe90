// The CP-ALS iteration kept on the device (kernels/cp_device.hpp, docs/cp-device-loop.md):
// one declaration, implemented by every backend (kernels/ops/common.hpp).
#pragma once

#include <memory>
#include <string>

#include "kernels/cp_device.hpp"
#include "kernels/ops/common.hpp"

/// A CP-ALS iteration kept on the device, or nullptr with *why set when this backend has
/// none for the spec (host backends; R above the kernels' limit): the algorithm then runs
/// the per-operation calls of ops/dense.hpp.
#define TESSERA_CP_DEVICE_LOOP_OP(T)                                                         \
  std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(Backend<T>& be, const CpLoopSpec<T>& spec, \
                                                  std::string* why)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_CP_DEVICE_LOOP_OP)

namespace ops {
template <typename T>
inline TESSERA_CP_DEVICE_LOOP_OP(T) {
  TESSERA_DISPATCH(be, cp_device_loop, spec, why);
}
}  // namespace ops
}  // namespace tessera::kernels
