// Sanitizer builds (TESSERA_SANITIZE, docs/reliability.md "Sanitizers and fuzzing"). Nothing
// here does anything in a build without AddressSanitizer/LeakSanitizer.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_LEAK_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define TESSERA_LEAK_SANITIZER 1
#endif
#endif

#ifdef TESSERA_LEAK_SANITIZER
#include <sanitizer/lsan_interface.h>
#endif

namespace tessera::util {

/// While one lives, this thread's allocations are left out of LeakSanitizer's reports (and
/// what they point to counts as reachable). Wraps MPI_Init: OpenMPI keeps memory allocated
/// there, some of it by components it unloads before MPI_Init returns (whose frames can
/// then not be named by a suppression). A no-op in other builds.
class LeakCheckPause {
 public:
  LeakCheckPause() {
#ifdef TESSERA_LEAK_SANITIZER
    __lsan_disable();
#endif
  }
  ~LeakCheckPause() {
#ifdef TESSERA_LEAK_SANITIZER
    __lsan_enable();
#endif
  }
  LeakCheckPause(const LeakCheckPause&) = delete;
  LeakCheckPause& operator=(const LeakCheckPause&) = delete;
};

/// Runs LeakSanitizer's leak check now (when the process was started with leak detection on)
/// instead of at exit; the process exits with LeakSanitizer's status when it finds a leak.
/// Called right before MPI_Finalize: OpenMPI unloads its components there, and the leaks it
/// keeps in them could then no longer be named and suppressed (tests/sanitizers/lsan.supp),
/// while every Tessera object is already freed. A no-op in other builds.
inline void leak_check_before_mpi_finalize() {
#ifdef TESSERA_LEAK_SANITIZER
  __lsan_do_leak_check();
#endif
}

}  // namespace tessera::util
