// Wall-clock timers and per-phase accumulators.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace tessera {

/// Monotonic wall-clock stopwatch, seconds.
class Timer {
 public:
  Timer() : start_(clock::now()) {}
  void reset() { start_ = clock::now(); }
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_;
};

/// Named phase -> accumulated seconds. Phases used by the algorithms:
/// "kernel", "comm", "solve", "io", "other".
class PhaseTimes {
 public:
  void add(const std::string& phase, double s) { t_[phase] += s; }
  double get(const std::string& phase) const {
    auto it = t_.find(phase);
    return it == t_.end() ? 0.0 : it->second;
  }
  const std::map<std::string, double>& all() const { return t_; }
  void clear() { t_.clear(); }

 private:
  std::map<std::string, double> t_;
};

}  // namespace tessera
