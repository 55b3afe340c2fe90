// How an operation is declared once and implemented by every backend (issue 17; the model:
// Ginkgo's core/matrix/csr_kernels.hpp with GKO_REGISTER_OPERATION).
//
// Each operation has one signature macro, TESSERA_<NAME>_OP(T), in its kernels/ops/ header.
// The header then
//   - declares it in the namespaces of the three backends, reference::, cpu:: and cuda::
//     (TESSERA_DECLARE_OP), each a function template of T in {float, double} whose first
//     parameter is the executor (kernels/backend.hpp, Backend<T>: memory, handles, budgets,
//     tuning); a backend's definition casts it to its own executor class;
//   - defines the dispatcher in ops:: with the same signature (TESSERA_DISPATCH): it calls
//     the version of the executor's kind. Operations on a tensor handle first ask the handle
//     whether it is streamed (TensorHandle::streamed(): memory tier 3); a streamed handle runs
//     the operation chunk by chunk through the backend's own operations.
// Algorithms call only the ops:: dispatchers. The definitions of a backend live in its folder
// (kernels/reference/, kernels/cpu/, kernels/cuda/) and, as Ginkgo's do, write the signature
// out in full, so that a tags file (jobs/tags.sh), clangd or grep finds e.g.
// tessera::kernels::cuda::mttkrp with its parameters where it is defined:
//     template <typename T>
//     void mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode, ...) { ... }
//     TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_OP);
// The instantiation that follows each definition (float and double) names the declared
// signature: it does not compile unless the written one is the same (an explicit
// instantiation of a declared template without a definition is an error), so the
// declaration stays the one place a signature is decided. jobs/check-ops.py (a test) checks
// that every declared operation has such a definition in every backend. A build without
// CUDA links kernels/cuda/stub.cpp, whose cuda:: definitions (TESSERA_STUB_OP) throw "built
// without CUDA"; no cuda executor can exist in such a build, so they are never reached
// through a dispatcher.
#pragma once

#include "kernels/backend.hpp"

/// Declares the operation with signature macro OP in every backend's namespace.
#define TESSERA_DECLARE_OP(OP) \
  namespace reference {        \
  template <typename T>        \
  OP(T);                       \
  }                            \
  namespace cpu {              \
  template <typename T>        \
  OP(T);                       \
  }                            \
  namespace cuda {             \
  template <typename T>        \
  OP(T);                       \
  }

/// Explicit instantiations of a backend's definition (in its namespace) for float and double;
/// placed after the definition, which writes OP's signature out: a compile error when the
/// two differ.
#define TESSERA_INSTANTIATE_OP(OP) \
  template OP(float);              \
  template OP(double)

/// The body of an ops:: dispatcher: calls NAME(be, args...) of the backend be.kind().
#define TESSERA_DISPATCH(be, NAME, ...)                                          \
  switch ((be).kind()) {                                                         \
    case ::tessera::kernels::BackendKind::reference:                             \
      return ::tessera::kernels::reference::NAME(be __VA_OPT__(, ) __VA_ARGS__); \
    case ::tessera::kernels::BackendKind::cpu:                                   \
      return ::tessera::kernels::cpu::NAME(be __VA_OPT__(, ) __VA_ARGS__);       \
    case ::tessera::kernels::BackendKind::cuda:                                  \
      return ::tessera::kernels::cuda::NAME(be __VA_OPT__(, ) __VA_ARGS__);      \
  }                                                                              \
  ::tessera::kernels::ops::unknown_backend(static_cast<int>((be).kind()))

/// A cuda:: definition for a build without CUDA (kernels/cuda/stub.cpp): throws Error
/// "built without CUDA", instantiated for float and double.
#define TESSERA_STUB_OP(OP)                            \
  template <typename T>                                \
  OP(T) {                                              \
    ::tessera::kernels::ops::cuda_not_built(__func__); \
  }                                                    \
  TESSERA_INSTANTIATE_OP(OP)

namespace tessera::kernels::ops {

/// Throws Error naming a BackendKind value outside the enumeration (a corrupted executor).
[[noreturn]] void unknown_backend(int kind);
/// Throws Error "<operation>: Tessera was built without CUDA ...".
[[noreturn]] void cuda_not_built(const char* operation);

}  // namespace tessera::kernels::ops
