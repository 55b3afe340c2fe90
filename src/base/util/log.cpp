#include "util/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace tessera::log {
namespace {
int g_rank = 0;
int g_size = 1;
int g_verbosity = 1;
}  // namespace

void set_rank(int r, int s) {
  g_rank = r;
  g_size = s;
}
int rank() {
  return g_rank;
}
void set_verbosity(int v) {
  g_verbosity = v;
}
int verbosity() {
  return g_verbosity;
}

void info(const std::string& msg) {
  if (g_rank == 0 && g_verbosity >= 1) {
    std::fputs(msg.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}
void debug(const std::string& msg) {
  if (g_rank == 0 && g_verbosity >= 2) info(msg);
}
void warn(const std::string& msg) {
  if (g_rank == 0) {
    std::fprintf(stderr, "warning: %s\n", msg.c_str());
    std::fflush(stderr);
  }
}
void error_here(const std::string& msg) {
  std::fprintf(stderr, "tessera: error on rank %d of %d (%s): %s\n", g_rank, g_size,
               hostname().c_str(), msg.c_str());
  std::fflush(stderr);
}
std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}
bool stderr_is_tty() {
  return isatty(fileno(stderr)) != 0;
}

}  // namespace tessera::log
