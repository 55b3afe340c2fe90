// Progress of long I/O on rank 0: a bar on stderr when stdout is a terminal, a log line
// every ~10 s otherwise (batch jobs), nothing for work that ends within half a second.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera {

class Progress {
 public:
  /// `on`: report at all (usually rank 0 only); `verb`: "writing", "reading", ...;
  /// `label`: what (a file name); `total`: units of work (bytes), 0 = no report.
  Progress(bool on, std::string verb, std::string label, std::uint64_t total)
      : on_(on && total > 0),
        tty_(on_ && log::stderr_is_tty()),
        verb_(std::move(verb)),
        label_(std::move(label)),
        total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { finish(); }

  /// `done` units of `total` are complete.
  void update(std::uint64_t done) {
    if (!on_) return;
    const double t = timer_.seconds();
    if (tty_) {
      if (t < 0.5 || t - last_ < 0.1) return;
      last_ = t;
      draw(done, t);
    } else if (t - last_ >= 10.0) {
      last_ = t;
      char buf[128];
      std::snprintf(
          buf, sizeof(buf), ": %.0f%% (%.1f of %.1f MB, %.0f s)",
          100.0 * static_cast<double>(std::min(done, total_)) / static_cast<double>(total_),
          static_cast<double>(done) / 1e6, static_cast<double>(total_) / 1e6, t);
      log::info(verb_ + " " + label_ + buf);
    }
  }
  /// Completes the bar (if one was drawn) and stops reporting.
  void finish() {
    if (drawn_) {
      draw(total_, timer_.seconds());
      std::fputc('\n', stderr);
      std::fflush(stderr);
      drawn_ = false;
    }
    on_ = false;
  }

 private:
  void draw(std::uint64_t done, double t) {
    constexpr int kWidth = 30;
    const double f = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    char bar[kWidth + 1];
    const int full = static_cast<int>(f * kWidth);
    for (int i = 0; i < kWidth; ++i) bar[i] = i < full ? '#' : '.';
    bar[kWidth] = '\0';
    std::fprintf(stderr, "\r%s %s [%s] %3.0f%% %.1f MB/s", verb_.c_str(), label_.c_str(), bar,
                 100 * f, t > 0 ? static_cast<double>(done) / 1e6 / t : 0.0);
    std::fflush(stderr);
    drawn_ = true;
  }

  bool on_, tty_;
  std::string verb_, label_;
  std::uint64_t total_;
  Timer timer_;
  double last_ = 0;
  bool drawn_ = false;
};

}  // namespace tessera
