// The benchmark harness of `tessera bench` (internal to drivers/bench/): what every
// benchmarked operation shares (the model: nccl-tests' src/common.h). An operation's file
// (mttkrp.cpp, cp.cpp, ttmc.cpp, tucker.cpp, contract.cpp, tc_sweep.cpp) describes only its
// setup, the step to time, the bytes of its floor and its own columns and record fields.
//
// The floor of a step = the bytes it must move (the largest over ranks: the slowest rank
// sets the time) / the measured copy bandwidth of the backend's memory (measure_bandwidth);
// the ratio = the measured time / the floor.
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/tuning.hpp"

namespace tessera::driver::bench {

// ---- the printed table (rank 0) -------------------------------------------------------

/// One column of a printed table: its header, its width, right-aligned unless `left`.
struct Column {
  const char* name;
  int width;
  bool left = false;
};

/// A table printed on rank 0: columns separated by one space, each cell padded to its
/// column's width ("%10s" of the cell, "%-6s" for a left column).
class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  /// Prints the header line (rank 0).
  void header() const;
  /// Prints one row of cells (rank 0); cells beyond the columns are an error of the caller.
  void row(const std::vector<std::string>& cells) const;

 private:
  std::vector<Column> columns_;
};

/// printf-style text of one cell: cell("%.3f", x).
std::string cell(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Flushes stdout on rank 0 (the tables are printed there).
void flush();

// ---- the repeat loop -----------------------------------------------------------------

/// Calls step(false) `warmup` times and step(true) `repeat` times (repeat >= 1); returns the
/// median of the timed results (the element at size / 2 after sorting by `less`).
template <typename R, typename Step, typename Less = std::less<R>>
R median_run(int warmup, int repeat, Step&& step, Less less = {}) {
  std::vector<R> runs;
  for (int k = 0; k < warmup + repeat; ++k) {
    R r = step(k >= warmup);
    if (k >= warmup) runs.push_back(std::move(r));
  }
  std::sort(runs.begin(), runs.end(), less);
  return runs[runs.size() / 2];
}

/// Collective: the median over `repeat` runs of the slowest rank's seconds of run() then
/// sync(), each timed run between a barrier and sync(), after `warmup` runs (run() then
/// sync(), untimed).
double median_seconds(const comm::Communicator& world, int warmup, int repeat,
                      const std::function<void()>& run, const std::function<void()>& sync);

// ---- floor and ratio ------------------------------------------------------------------

/// Bytes that must move and their time at the measured bandwidth.
struct Floor {
  double bytes = 0, seconds = 0;
  double ratio(double measured_seconds) const { return measured_seconds / seconds; }
};
/// Collective: the largest of this rank's `bytes` over the ranks, over bandwidth `bw`
/// (bytes/s).
Floor floor_of(double bytes, double bw, const comm::Communicator& world);

// ---- a kernel timed per mode (bench mttkrp, bench ttmc) --------------------------------

/// One mode's result: the median seconds (slowest rank), the floor and the no-reuse floor.
struct ModeResult {
  int mode = 0;
  double seconds = 0;
  Floor floor, noreuse;
};
/// Sums over the modes of the median seconds, the floor and the no-reuse floor seconds.
struct ModeSums {
  int modes = 0;
  double seconds = 0, floor = 0, noreuse = 0;
};
/// The description of a per-mode benchmark.
struct PerModeOp {
  std::vector<Column> columns;
  std::function<void(int mode)> begin;  ///< optional: per-mode setup before the warm-up
  std::function<void(int mode)> step;   ///< the operation timed
  std::function<void()> sync;           ///< waits for the backend
  /// This rank's bytes of the floor and of the no-reuse floor of mode n.
  std::function<std::pair<double, double>(int mode)> bytes;
  /// The printed row of a mode; adds the operation's own fields to the mode's JSON object.
  std::function<std::vector<std::string>(const ModeResult&, nlohmann::json& record)> row;
  std::function<std::vector<std::string>(const ModeSums&)> mean_row;
};
/// Collective: every mode timed (one warm-up, `repeat` timed runs, the median), against its
/// floors, printed as a table with a mean row; fills j's "modes", "mean_seconds_per_mode",
/// "mean_ratio_to_floor", "mean_ratio_to_noreuse_floor" and "timing" (unit "mode").
ModeSums run_modes(const PerModeOp& op, int modes, int repeat, double bw,
                   const comm::Communicator& world, nlohmann::json& j);

// ---- an algorithm timed per iteration (bench cp, bench tucker) -------------------------

/// The first iteration counted: the first one (2-norm normalisation, first touches) is
/// skipped when there are more.
inline std::size_t first_counted(std::size_t iterations) {
  return iterations > 1 ? 1 : 0;
}

/// Means over the counted iterations of each of `fields` of the history (this rank).
template <typename H>
std::vector<double> iteration_means(const std::vector<H>& history,
                                    std::initializer_list<double H::*> fields) {
  std::vector<double> m(fields.size(), 0.0);
  const std::size_t first = first_counted(history.size());
  for (std::size_t i = first; i < history.size(); ++i) {
    std::size_t f = 0;
    for (double H::*p : fields) m[f++] += history[i].*p;
  }
  for (double& v : m) v /= static_cast<double>(history.size() - first);
  return m;
}

/// Median of one field over the counted iterations (this rank): robust to a slow outlier.
template <typename H>
double iteration_median(const std::vector<H>& history, double H::*field) {
  std::vector<double> v;
  for (std::size_t i = first_counted(history.size()); i < history.size(); ++i)
    v.push_back(history[i].*field);
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// An iteration against its floor: the slowest rank's seconds, the floor of its bytes.
struct IterationResult {
  double seconds = 0;
  Floor floor;
};
/// Collective: this rank's mean iteration seconds and floor bytes -> the slowest rank's
/// seconds and the largest bytes over bandwidth `bw`.
IterationResult iteration_vs_floor(double seconds, double bytes, double bw,
                                   const comm::Communicator& world);
/// The record's "iterations", "seconds_per_iteration", "bytes_per_iteration",
/// "floor_seconds", "ratio_to_floor" and "fit".
void iteration_record(nlohmann::json& j, const IterationResult& r, int iterations, double fit);

// ---- the run record -------------------------------------------------------------------

/// Collective: the record of `command` (docs/run-record.md; record_envelope) with `body`
/// merged over it (its objects, such as "machine", merged into the envelope's), written to
/// `path` by rank 0. Nothing without a path.
/// `tuning` is the benchmarked backend's (its "tuning" object), `device_peak` this rank's
/// measured device peak (PeakSampler::device_peak(); 0 when not sampled).
void write_record(const std::string& path, const std::string& command, const nlohmann::json& body,
                  const comm::Communicator& world, const std::string& backend, int threads,
                  const kernels::Tuning& tuning, std::uint64_t device_peak = 0);

/// The record's copy bandwidth: machine.bandwidth_bytes_per_s and machine.bandwidth_source
/// ("given" by --bandwidth, else "measured").
void bandwidth_record(nlohmann::json& j, double bw, bool given);

/// The log line that opens a benchmark: what, backend, ranks x threads, precision, the
/// extra text, the copy bandwidth (measured, or `given` by --bandwidth).
void log_setup(const std::string& what, const std::string& backend, int ranks, int threads,
               const std::string& precision, const std::string& extra, double bw,
               bool given = false);

}  // namespace tessera::driver::bench
