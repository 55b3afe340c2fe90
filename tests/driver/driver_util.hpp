// Shared by the driver tests (tests/driver): run a command line and capture its output
// and exit code, and the tessera binary under mpiexec with a timeout (a hang fails the
// test instead of blocking the suite). TESSERA_BIN_PATH and MPIEXEC_PATH come from CMake.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>

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

/// Writes `count` distinct random coordinates of a d0 x d1 x d2 tensor (FROSTT text, 1-based)
/// with values in [0.5, 1.5) to `path`: a small tensor whose iterations are quick.
inline void write_random_tns(const std::string& path, unsigned seed, std::size_t count, int d0,
                             int d1, int d2) {
  std::ofstream f(path);
  std::mt19937 gen(seed);
  std::set<std::tuple<int, int, int>> seen;
  while (seen.size() < count) {
    const auto c = std::make_tuple(1 + static_cast<int>(gen() % static_cast<unsigned>(d0)),
                                   1 + static_cast<int>(gen() % static_cast<unsigned>(d1)),
                                   1 + static_cast<int>(gen() % static_cast<unsigned>(d2)));
    if (!seen.insert(c).second) continue;
    f << std::get<0>(c) << ' ' << std::get<1>(c) << ' ' << std::get<2>(c) << ' '
      << 0.5 + static_cast<double>(gen() % 1000) / 1000.0 << '\n';
  }
}

inline std::string tessera() {
  return TESSERA_BIN_PATH;
}

inline std::string mpirun(int np) {
  return std::string("timeout 120 ") + MPIEXEC_PATH + " -n " + std::to_string(np) +
         " --oversubscribe " + tessera();
}

}  // namespace tessera::test
