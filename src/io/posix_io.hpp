// Whole-range pread/pwrite with retries on EINTR and messages that name the file, shared by
// the text reader/writer (tns.cpp) and the HDF5 store (h5store.cpp). Internal to the io
// library.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/error.hpp"

namespace tessera::io::posix {

inline std::string errno_text(int e) { return std::strerror(e); }

/// Reads exactly n bytes at `off`; throws InputError naming `path` on an error or an early
/// end of file.
inline void pread_full(int fd, void* dst, std::size_t n, std::uint64_t off,
                       const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw InputError(path + ": read error at byte " + std::to_string(off) + ": " +
                       errno_text(errno));
    }
    if (r == 0)
      throw InputError(path + ": file ended at byte " + std::to_string(off) +
                       " while reading (was it changed during the read?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
}

/// Writes exactly n bytes at `off` (at most 1 GiB per call); throws InputError naming
/// `path` on an error.
inline void pwrite_full(int fd, const void* src, std::size_t n, std::uint64_t off,
                        const std::string& path) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w =
        ::pwrite(fd, p, std::min<std::size_t>(n, std::size_t(1) << 30), static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw InputError(path + ": write error at byte " + std::to_string(off) + ": " +
                       errno_text(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
}

}  // namespace tessera::io::posix
