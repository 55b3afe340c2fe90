// Checkpoint and restart options shared by `tessera cp` and `tessera tucker`
// (--checkpoint-every, --checkpoint, --resume; docs/formats.md "Checkpoint file").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.hpp"
#include "partition/partition.hpp"

namespace tessera::driver {

struct CheckpointArgs {
  int every = 0;       ///< write after every K-th iteration; 0 = never
  std::string path;    ///< checkpoint file; "" = derived from --out
  std::string resume;  ///< checkpoint to continue from; "" = fresh run
};

/// Registers --checkpoint-every, --checkpoint and --resume.
void add_checkpoint_options(CLI::App* sub, CheckpointArgs& a);

/// Collective: resolves the checkpoint path (--checkpoint, else from --out `out`, "" when
/// not checkpointing) and checks on rank 0 that it can be written, so a bad path fails on
/// every rank before any work.
std::string prepare_checkpoint_path(const CheckpointArgs& a, const std::string& out,
                                    const comm::Communicator& world);

/// Maps a distribution's labels to the input's indices, for io::tensor_fingerprint (empty
/// without relabelling). Keeps a reference to `dist`.
std::function<std::uint64_t(int, std::uint64_t)> original_index_of(
    const partition::Distribution& dist);

/// Test hook: the iteration after which the process kills itself (SIGKILL, like a
/// scheduler's time limit), from the environment variable TESSERA_TEST_KILL_AFTER_ITERATION;
/// 0 = never.
int test_kill_after_iteration();

/// Kills this process (SIGKILL) when `iteration` == test_kill_after_iteration() (> 0).
/// Call on every rank after the checkpoint of that iteration is written.
void maybe_test_kill(int iteration);

}  // namespace tessera::driver
