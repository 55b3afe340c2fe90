// Whole-range pread/pwrite with retries on EINTR and messages that name the file, shared by
// the text reader/writer (tns.cpp) and the HDF5 store (h5store.cpp). Internal to the io
// library.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/error.hpp"

namespace tessera::io::posix {

inline std::string errno_text(int e) {
  return std::strerror(e);
}

/// A file descriptor closed when the guard goes out of scope (-1: none).
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// What a file of mode `m` is, for messages: "a directory", "a FIFO (named pipe)", ...
inline const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/// Message for an input that is not a regular file (`expected`: "a .tns file", ...).
inline std::string not_regular_message(const std::string& path, mode_t m,
                                       const std::string& expected) {
  std::string s = path + ": is " + file_kind(m) + ", expected " + expected;
  if (!S_ISDIR(m))
    s += " (inputs are read at byte offsets by every rank, so pipes, devices and sockets are "
         "refused rather than waited on: save the data to a file first)";
  return s;
}

/// Opens `path` for reading without ever blocking (a FIFO with no writer would block a
/// plain open forever): stat() first, then open(O_NONBLOCK) and fstat() again (the path may
/// have changed in between). Throws InputError "PATH: cannot open: ..." when it does not
/// exist or cannot be opened, and not_regular_message() for anything but a regular file.
/// Returns the descriptor (the caller closes it); `*st` receives its fstat().
inline int open_regular_input(const std::string& path, const std::string& expected,
                              struct stat* st) {
  if (::stat(path.c_str(), st) != 0) throw InputError(path + ": cannot open: " + errno_text(errno));
  if (!S_ISREG(st->st_mode)) throw InputError(not_regular_message(path, st->st_mode, expected));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(path + ": cannot open: " + errno_text(errno));
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    const int e = errno;
    const mode_t m = st->st_mode;
    ::close(fd);
    if (!S_ISREG(m)) throw InputError(not_regular_message(path, m, expected));
    throw InputError(path + ": cannot stat: " + errno_text(e));
  }
  return fd;
}

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
