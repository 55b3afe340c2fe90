// Checkpoint and restart options shared by `tessera cp` and `tessera tucker`
// (--checkpoint-every, --checkpoint, --resume; docs/formats.md "Checkpoint file").
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.hpp"
#include "io/checkpoint.hpp"
#include "partition/partition.hpp"

namespace tessera::run {

struct CheckpointArgs {
  int every = 0;       ///< write after every K-th iteration; 0 = never
  std::string path;    ///< checkpoint file; "" = derived from --out
  std::string resume;  ///< checkpoint to continue from; "" = fresh run
  /// A model file a fresh run starts from (cp --init file:PATH); an input like --resume.
  std::string init_model;
};

/// Collective: resolves the checkpoint path (--checkpoint, else from --out `out`, "" when
/// not checkpointing) and checks on rank 0 that it can be written, so a bad path fails on
/// every rank before any work.
std::string prepare_checkpoint_path(const CheckpointArgs& a, const std::string& out,
                                    const comm::Communicator& world);

/// Collective, for cp and tucker: resolves the checkpoint path (prepare_checkpoint_path)
/// and checks every output before any work (io::OutputSet): the model (--out), the
/// checkpoint (which may be the --resume file) and the run record (--json) are not the
/// input, can be created, and replace existing files only by the rule (--force). Returns
/// the checkpoint path.
std::string check_model_outputs(const std::string& input, const CheckpointArgs& a,
                                const std::string& out, const std::string& json, bool force,
                                const comm::Communicator& world);

/// Maps a distribution's labels to the input's indices, for io::tensor_fingerprint (empty
/// without relabelling). Keeps a reference to `dist`.
std::function<std::uint64_t(int, std::uint64_t)> original_index_of(
    const partition::Distribution& dist);

/// Collective: `read` (every rank) reads the checkpoint `path` into the caller's state and
/// fills the record; the record is checked against the run (`now`: mismatches throw an
/// InputError naming them) and must hold at most `iters` iterations (--iters counts all
/// iterations). Logs what resumes and which options changed. Returns the record.
io::CheckpointInfo resume_from(const std::string& path, const io::ResumeCheck& now, int iters,
                               const std::function<void(io::CheckpointInfo*)>& read,
                               const comm::Communicator& world);

/// How often the algorithm hands its state to on_iteration: every `every` iterations when
/// checkpointing, every iteration under the test kill hook.
int state_every(const std::string& path, int every);

/// The end of an iteration's state callback: when checkpointing (`path` not empty) and
/// `iteration` is a multiple of `every` (or `last`: the run stops after it, e.g. its time
/// limit), `write` runs on rank 0 (its errors end every rank) and the time is logged; then
/// maybe_test_kill(iteration). Collective.
void after_iteration(const std::string& path, int every, int iteration,
                     const std::function<void()>& write, const comm::Communicator& world,
                     bool last = false);

/// Test hook: the iteration after which the process kills itself (SIGKILL, like a
/// scheduler's time limit), from the environment variable TESSERA_TEST_KILL_AFTER_ITERATION;
/// 0 = never.
int test_kill_after_iteration();

/// What a checkpoint records besides the model, for the state `s` after an iteration
/// (algo::CpState or algo::TuckerState).
template <typename State>
io::CheckpointInfo checkpoint_info(const State& s, const std::string& precision,
                                   const io::TensorFingerprint& input,
                                   const std::string& options_json) {
  io::CheckpointInfo info;
  info.iteration = s.iteration;
  info.converged = s.converged;
  info.fit_history = s.fit_history;
  info.precision = precision;
  info.input = input;
  info.options_json = options_json;
  return info;
}

/// The iteration count, fit history and convergence of a resumed checkpoint into `s`.
template <typename State>
void restore_progress(const io::CheckpointInfo& info, State* s) {
  s->iteration = info.iteration;
  s->fit_history = info.fit_history;
  s->converged = info.converged;
}

/// Kills this process (SIGKILL) when `iteration` == test_kill_after_iteration() (> 0).
/// Call on every rank after the checkpoint of that iteration is written.
void maybe_test_kill(int iteration);

}  // namespace tessera::run
