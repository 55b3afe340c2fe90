// Reading the kernel's process and cgroup files (/proc, /sys/fs/cgroup) under a root folder,
// so that tests can point the readers at fixture trees: the memory limits of the planner
// (src/engine/plan/limits.cpp) and the CPU quota of the thread cap (util/cpus.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace tessera::util {

/// `abs` (starting with '/') under `root`: ("/", "/proc/x") -> "/proc/x".
std::string under_root(const std::string& root, const std::string& abs);

/// The whole file, or nullopt when it cannot be opened or read.
std::optional<std::string> read_text_file(const std::string& path);

/// /proc/self/cgroup: the cgroup v2 path (line "0::/path") and the v1 path of each
/// controller (lines "id:ctl1,ctl2:/path"). Lines of another form are counted, not used.
struct ProcCgroup {
  std::optional<std::string> v2;
  std::map<std::string, std::string> v1;  ///< controller -> path
  int malformed = 0;
};
ProcCgroup parse_proc_cgroup(const std::string& text);

/// root/proc/self/status's lines in kB ("VmRSS:  1024 kB"), as bytes by key ("VmRSS");
/// empty when the file cannot be read. Lines of another form are left out.
std::map<std::string, std::uint64_t> proc_status_bytes(const std::string& root = "/");

/// This process's private resident memory from root/proc/self/status: RssAnon + RssShmem
/// (heap, pinned and shared-memory segments; not the pages of mapped files), bytes, or
/// nullopt when the file or either line cannot be read. `root` other than "/" only for tests.
std::optional<std::uint64_t> private_resident_bytes(const std::string& root = "/");

}  // namespace tessera::util
