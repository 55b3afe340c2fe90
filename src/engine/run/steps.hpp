// The steps run_cp and run_tucker share (run/cp.cpp, run/tucker.cpp): the partition scheme
// of the options, the iteration callback (checkpoints, then the front end's hook), writing
// the model on rank 0. Internal to the run layer.
#pragma once

#include <functional>
#include <string>

#include "comm/communicator.hpp"
#include "io/model_io.hpp"
#include "partition/partition.hpp"
#include "run/checkpoint.hpp"
#include "run/input.hpp"
#include "util/log.hpp"
#include "util/stop_request.hpp"
#include "util/timer.hpp"

namespace tessera::run::detail {

/// The partition scheme: `fallback` unless --partition or --grid names one.
inline partition::Scheme scheme_of(const LoadOptions& load, partition::Scheme fallback) {
  if (load.partition != "auto") return partition::parse_scheme(load.partition);
  if (!load.grid.empty()) return partition::Scheme::grid;
  return fallback;
}

/// The algorithm's callback after an iteration (State: algo::CpState or algo::TuckerState):
/// the checkpoint every `every`-th iteration (and the test kill hook) through `write`, then
/// the front end's `hook` (iteration, fit, change). Empty when neither is wanted. The
/// references must outlive the run.
template <typename State>
std::function<void(const State&)> iteration_callback(
    const std::string& path, int every, const std::function<void(const State&)>& write,
    const std::function<void(int, double, double)>& hook, const comm::Communicator& world) {
  const bool checkpoints = !path.empty() || test_kill_after_iteration() > 0;
  if (!checkpoints && !hook) return {};
  return [=, &world](const State& s) {
    if (checkpoints)
      after_iteration(
          path, every, s.iteration, [&] { write(s); }, world, s.stopping);
    if (!hook) return;
    const auto& f = s.fit_history;
    const double fit = f.empty() ? 0.0 : f.back();
    hook(s.iteration, fit, fit - (f.size() > 1 ? f[f.size() - 2] : 0.0));
  };
}

/// `write` on rank 0 (its errors end every rank), with a log line; nothing when `out` is "".
inline void write_model(const std::string& out, const std::function<void()>& write,
                        const comm::Communicator& world) {
  if (out.empty()) return;
  Timer tw;
  comm::run_collectively(world, [&] {
    if (world.rank() == 0) write();
  });
  log::info("model written to " + out + " (" + std::to_string(tw.seconds()) + " s)");
}

/// The one line of a run stopped by a signal (`signal` != 0; nothing otherwise): after which
/// iteration, where the model is and how to resume. The exit status (128 + signal) is the
/// front end's.
inline void log_signal_stop(int signal, int iteration, const std::string& out,
                            const std::string& checkpoint) {
  if (signal == 0) return;
  std::string line =
      "stopped by " + util::signal_name(signal) + " after iteration " + std::to_string(iteration);
  line += out.empty() ? "; no model written (no --out)" : "; model written to " + out;
  if (!checkpoint.empty()) line += "; resume with --resume " + checkpoint;
  log::info(line);
}

/// A model file's record of a run: fit, iterations, fit history and the options.
template <typename Result>
io::ModelRecord model_record(const Result& res, const std::string& options_json) {
  io::ModelRecord rec;
  rec.fit = res.fit;
  rec.iterations = res.iterations;
  for (const auto& h : res.history) rec.fit_history.push_back(h.fit);
  rec.options_json = options_json;
  return rec;
}

}  // namespace tessera::run::detail
