// A request to stop a run after its current iteration, made asynchronously: by a signal
// handler (SIGINT, SIGTERM; the CLI installs StopOnSignals for cp and tucker) or by any
// thread. The ALS loops read it at the end of every iteration and agree over the ranks
// (docs/reliability.md, "Stopping a run").
#pragma once

#include <atomic>
#include <csignal>
#include <string>

namespace tessera::util {

/// The signal number that asked for the stop, 0 while none did. Lock-free, so that a
/// signal handler may set it (async-signal-safe).
class StopRequest {
 public:
  /// Async-signal-safe: records `signal` (> 0) unless a stop was already requested.
  void request(int signal) noexcept {
    int none = 0;
    signal_.compare_exchange_strong(none, signal, std::memory_order_relaxed);
  }
  /// The signal of the first request, 0 while none.
  int signal() const noexcept { return signal_.load(std::memory_order_relaxed); }

 private:
  static_assert(std::atomic<int>::is_always_lock_free);
  std::atomic<int> signal_{0};
};

/// For its lifetime, the first SIGINT or SIGTERM records itself in `request`, and both
/// signals go back to their default action, so that a second one ends the process at once
/// (a user can still kill a run that is stopping), and SIGPIPE is ignored from then on (a
/// stdout that went away first must not kill a rank that is writing its model). The destructor
/// restores the SIGINT and SIGTERM handlers it replaced. One at a time per process (the handler
/// reaches `request` through a static).
class StopOnSignals {
 public:
  explicit StopOnSignals(StopRequest& request);
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

/// The first SIGINT or SIGTERM a StopOnSignals of this process caught, 0 while none (for
/// code outside the loop that must know the run is stopping: the watchdog).
int stop_signal_seen();

/// "SIGINT", "SIGTERM", ... ("signal N" for others).
std::string signal_name(int signal);

}  // namespace tessera::util
