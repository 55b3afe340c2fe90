// Transparent huge pages for large host arrays that are about to be first touched.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tessera::util {

/// Asks the kernel to back the whole 2 MiB pages inside [p, p + bytes) with transparent
/// huge pages (Linux, where THP is in "madvise" or "always" mode; a no-op elsewhere, or
/// where THP is "never", which is how a site turns it off): one page fault per 2 MiB
/// instead of per 4 KiB when the memory is first touched. Used for SpTC outputs (cpu and
/// cuda backends), whose first touch was their slowest host step (docs/sptc.md).
inline void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto lo = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto hi = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace tessera::util
