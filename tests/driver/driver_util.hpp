// Shared by the driver tests (tests/driver): run a command line and capture its output
// and exit code, and the tessera binary under mpiexec with a timeout (a hang fails the
// test instead of blocking the suite). TESSERA_BIN_PATH and MPIEXEC_PATH come from CMake.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tessera::test {

struct Run {
  int code = -1;
  std::string out;  // stdout and stderr together
};

inline Run run(const std::string& cmd) {
  Run r;
  const std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

/// Whether `s` holds `what`.
inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

inline std::string tessera() {
  return TESSERA_BIN_PATH;
}

inline std::string mpirun(int np) {
  return std::string("timeout 120 ") + MPIEXEC_PATH + " -n " + std::to_string(np) +
         " --oversubscribe " + tessera();
}

}  // namespace tessera::test
