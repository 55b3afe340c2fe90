#include "util/stop_request.hpp"

#include <cstring>
#include <stdexcept>

namespace tessera::util {

namespace {

std::atomic<StopRequest*> g_request{nullptr};
static_assert(std::atomic<StopRequest*>::is_always_lock_free);
std::atomic<int> g_seen{0};  // the first stop signal this process caught

/// Async-signal-safe: an atomic store and sigaction only.
extern "C" void on_stop_signal(int sig) {
  if (StopRequest* r = g_request.load(std::memory_order_relaxed); r != nullptr) r->request(sig);
  int none = 0;
  g_seen.compare_exchange_strong(none, sig, std::memory_order_relaxed);
  // A second signal is not caught: it ends the process (the default action).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
  // Stopping, a lost stdout (a launcher or a pipe that went away first) is no reason to die
  // before the model is written: a log line's write then fails (EPIPE) instead.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, nullptr);
}

}  // namespace

StopOnSignals::StopOnSignals(StopRequest& request) {
  StopRequest* none = nullptr;
  if (!g_request.compare_exchange_strong(none, &request))
    throw std::logic_error("StopOnSignals: another one is installed");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls (file writes, MPI's polls) continue
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopOnSignals::~StopOnSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_request.store(nullptr);
}

int stop_signal_seen() {
  return g_seen.load(std::memory_order_relaxed);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(signal);
  }
}

}  // namespace tessera::util
