// Progress of long phases on rank 0: a bar on stderr when stderr is a terminal, a log line
// every ~10 s otherwise (batch jobs), nothing for work that ends within half a second and
// nothing at all with -q (log::verbosity() == 0). Both show done/total in the phase's units
// (bytes as kB/MB/GB/TB, or a count of named things such as nonzeros), the rate and an ETA:
//   reading amz.h5: 41% (11.4 of 27.9 GB), 1.52 GB/s, ETA 11 s
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera {

namespace progress_detail {

/// The scale of `x`: divisor and its name ("" for units) for bytes (decimal kB, MB, GB,
/// TB) or counts (thousand, million, billion, trillion).
inline std::pair<double, const char*> scale_of(double x, bool bytes) {
  static const char* const kBytes[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  static const char* const kCounts[] = {"",        "thousand", "million",
                                        "billion", "trillion", "quadrillion"};
  int i = 0;
  double d = 1;
  while (i < 5 && x >= 1000 * d) {
    d *= 1000;
    ++i;
  }
  return {d, bytes ? kBytes[i] : kCounts[i]};
}

/// "<value> <scale+unit>" with three significant digits ("1.52 GB", "52.1 million
/// nonzeros", "812 nonzeros", "0 B").
inline std::string amount(double x, const std::string& unit) {
  const bool bytes = unit.empty() || unit == "bytes";
  const auto [d, name] = scale_of(x, bytes);
  const double v = x / d;
  char buf[48];
  std::snprintf(buf, sizeof(buf), v < 10 && d > 1 ? "%.2f" : v < 100 && d > 1 ? "%.1f" : "%.0f", v);
  std::string s = buf;
  if (bytes) return s + " " + name;
  return s + (name[0] ? std::string(" ") + name : std::string()) + " " + unit;
}

/// "11 s", "3 min 20 s", "2 h 05 min".
inline std::string duration(double s) {
  char buf[48];
  const auto t = static_cast<long long>(std::llround(std::max(0.0, s)));
  if (t < 60)
    std::snprintf(buf, sizeof(buf), "%lld s", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", t / 3600, (t % 3600) / 60);
  return buf;
}

}  // namespace progress_detail

/// The parts of a progress report, as text: "41%", "11.4 of 27.9 GB", "1.52 GB/s",
/// "ETA 11 s" ("ETA unknown" before anything is done). unit: "" or "bytes" for bytes, else
/// the name of what is counted ("nonzeros"). elapsed in seconds.
struct ProgressText {
  std::string percent, amounts, rate, eta;
};

inline ProgressText progress_text(std::uint64_t done, std::uint64_t total, double elapsed,
                                  const std::string& unit) {
  using namespace progress_detail;
  const bool bytes = unit.empty() || unit == "bytes";
  const double d = static_cast<double>(std::min(done, total));
  const double t = static_cast<double>(total);
  ProgressText p;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f%%", t > 0 ? 100.0 * d / t : 100.0);
  p.percent = buf;
  // done and total on the total's scale: "11.4 of 27.9 GB", "0.71 of 1.74 billion nonzeros".
  const auto [div, name] = scale_of(t, bytes);
  const double tv = t / div;
  const char* fmt = tv < 10 && div > 1 ? "%.2f" : tv < 100 && div > 1 ? "%.1f" : "%.0f";
  char a[32], b[32];
  std::snprintf(a, sizeof(a), fmt, d / div);
  std::snprintf(b, sizeof(b), fmt, tv);
  p.amounts = std::string(a) + " of " + b;
  if (bytes)
    p.amounts += std::string(" ") + name;
  else
    p.amounts += (name[0] ? std::string(" ") + name : std::string()) + " " + unit;
  const double rate = elapsed > 0 ? d / elapsed : 0;
  p.rate = amount(rate, unit) + "/s";
  if (d >= t)
    p.eta = "ETA 0 s";
  else if (d <= 0 || elapsed <= 0)
    p.eta = "ETA unknown";
  else
    p.eta = "ETA " + duration((t - d) / rate);
  return p;
}

/// The log line of a phase: "reading amz.h5: 41% (11.4 of 27.9 GB), 1.52 GB/s, ETA 11 s".
/// `label` may be empty ("sorting: 12% ...").
inline std::string progress_line(const std::string& verb, const std::string& label,
                                 std::uint64_t done, std::uint64_t total, double elapsed,
                                 const std::string& unit = "bytes") {
  const ProgressText p = progress_text(done, total, elapsed, unit);
  return verb + (label.empty() ? "" : " " + label) + ": " + p.percent + " (" + p.amounts + "), " +
         p.rate + ", " + p.eta;
}

/// The terminal bar (without the leading carriage return):
/// "reading amz.h5 [############..................]  41% 11.4 of 27.9 GB, 1.52 GB/s, ETA 11 s".
inline std::string progress_bar(const std::string& verb, const std::string& label,
                                std::uint64_t done, std::uint64_t total, double elapsed,
                                const std::string& unit = "bytes") {
  constexpr int kWidth = 30;
  const double f =
      total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int full = static_cast<int>(f * kWidth);
  std::string bar(static_cast<std::size_t>(kWidth), '.');
  std::fill(bar.begin(), bar.begin() + full, '#');
  const ProgressText p = progress_text(done, total, elapsed, unit);
  std::string pct = p.percent;
  while (pct.size() < 4) pct.insert(pct.begin(), ' ');
  return verb + (label.empty() ? "" : " " + label) + " [" + bar + "] " + pct + " " + p.amounts +
         ", " + p.rate + ", " + p.eta;
}

class Progress {
 public:
  /// `on`: report at all (usually rank 0 only; off anyway with -q, log::verbosity() == 0);
  /// `verb`: "writing", "reading", ...; `label`: what (a file name); `total`: bytes of
  /// work, 0 = no report.
  Progress(bool on, std::string verb, std::string label, std::uint64_t total)
      : Progress(on, std::move(verb), std::move(label), total, "bytes") {}
  /// As above with `total` in `unit`s: "bytes", or the name of what is counted
  /// ("nonzeros"), shown as "0.71 of 1.74 billion nonzeros, 52.1 million nonzeros/s".
  Progress(bool on, std::string verb, std::string label, std::uint64_t total, std::string unit)
      : on_(on && total > 0 && log::verbosity() >= 1),
        tty_(on_ && log::stderr_is_tty()),
        verb_(std::move(verb)),
        label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { finish(); }

  /// Whether this object reports (on, total > 0, not quiet, not finished).
  bool active() const { return on_; }
  /// Log lines (no bar, even on a terminal) every `seconds` (10 by default): for callers
  /// that want lines, and tests.
  void use_lines(double seconds) {
    tty_ = false;
    interval_ = seconds;
  }

  /// `done` units of `total` are complete.
  void update(std::uint64_t done) {
    if (!on_) return;
    const double t = timer_.seconds();
    if (tty_) {
      if (t < 0.5 || t - last_ < 0.1) return;
      last_ = t;
      draw(done, t);
    } else if (t - last_ >= interval_) {
      last_ = t;
      log::info(progress_line(verb_, label_, done, total_, t, unit_));
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
    const std::string s = progress_bar(verb_, label_, done, total_, t, unit_);
    // Pad over a longer previous bar (the ETA's length changes).
    const std::size_t pad = width_ > s.size() ? width_ - s.size() : 0;
    width_ = s.size();
    std::fprintf(stderr, "\r%s%*s", s.c_str(), static_cast<int>(pad), "");
    std::fflush(stderr);
    drawn_ = true;
  }

  bool on_, tty_;
  std::string verb_, label_, unit_;
  std::uint64_t total_;
  Timer timer_;
  double last_ = 0;
  double interval_ = 10.0;
  std::size_t width_ = 0;
  bool drawn_ = false;
};

}  // namespace tessera
