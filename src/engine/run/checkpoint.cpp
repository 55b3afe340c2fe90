#include "run/checkpoint.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/output.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::run {

std::string prepare_checkpoint_path(const CheckpointArgs& a, const std::string& out,
                                    const comm::Communicator& world) {
  std::string path;
  comm::run_collectively(world, [&] {
    if (a.every <= 0) {
      TESSERA_INPUT_CHECK(a.path.empty(),
                          "--checkpoint " << a.path << " needs --checkpoint-every K (K >= 1)");
      return;
    }
    TESSERA_INPUT_CHECK(!a.path.empty() || !out.empty(),
                        "--checkpoint-every needs a checkpoint file: give --checkpoint FILE or "
                        "--out MODEL (the checkpoint is then MODEL with .ckpt.h5)");
    path = a.path.empty() ? io::default_checkpoint_path(out) : a.path;
    TESSERA_INPUT_CHECK(path != out, "--checkpoint " << path
                                                     << " is the --out model path: the final "
                                                        "model would replace the checkpoint");
    if (world.rank() == 0) io::check_checkpoint_writable(path);
  });
  if (!path.empty())
    log::info("checkpoint: after every " + std::to_string(a.every) + " iteration(s) to " + path);
  return path;
}

std::string check_model_outputs(const std::string& input, const CheckpointArgs& a,
                                const std::string& out, const std::string& json, bool force,
                                const comm::Communicator& world) {
  const std::string ckpt_path = prepare_checkpoint_path(a, out, world);
  io::OutputSet outputs;
  outputs.add_input("the input", input);
  outputs.add_input("--resume", a.resume);
  outputs.add_input("--init", a.init_model);
  outputs.add_output("--out", out, io::OutputKind::model);
  outputs.add_output("--checkpoint", ckpt_path, io::OutputKind::model, "--resume");
  outputs.add_output("--json", json, io::OutputKind::record);
  outputs.validate(force, world);
  return ckpt_path;
}

std::function<std::uint64_t(int, std::uint64_t)> original_index_of(
    const partition::Distribution& dist) {
  if (dist.relabel_seed == 0 && !dist.deal) return {};
  return [&dist](int mode, std::uint64_t i) { return dist.original_index(mode, i); };
}

int test_kill_after_iteration() {
  const char* e = std::getenv("TESSERA_TEST_KILL_AFTER_ITERATION");
  return e != nullptr ? std::atoi(e) : 0;
}

void maybe_test_kill(int iteration) {
  static const int kill_after = test_kill_after_iteration();
  if (kill_after <= 0 || iteration != kill_after) return;
  log::warn("TESSERA_TEST_KILL_AFTER_ITERATION=" + std::to_string(kill_after) +
            ": killing this process (test hook)");
  std::raise(SIGKILL);
}

io::CheckpointInfo resume_from(const std::string& path, const io::ResumeCheck& now, int iters,
                               const std::function<void(io::CheckpointInfo*)>& read,
                               const comm::Communicator& world) {
  io::CheckpointInfo info;
  std::vector<std::string> notes;
  comm::run_collectively(world, [&] {
    read(&info);
    notes = io::check_resume(path, info, now);
    TESSERA_INPUT_CHECK(info.iteration <= iters,
                        "--resume " << path << ": the checkpoint has " << info.iteration
                                    << " iterations, more than --iters " << iters
                                    << " (--iters counts all iterations, the saved ones "
                                       "included)");
  });
  log::info(
      "resuming " + path + " after iteration " + std::to_string(info.iteration) +
      (info.converged || info.iteration >= iters ? " (run complete: no iterations left)" : ""));
  for (const auto& n : notes) log::info("  option changed since the checkpoint: " + n);
  return info;
}

int state_every(const std::string& path, int every) {
  return path.empty() || test_kill_after_iteration() > 0 ? 1 : every;
}

void after_iteration(const std::string& path, int every, int iteration,
                     const std::function<void()>& write, const comm::Communicator& world,
                     bool last) {
  if (!path.empty() && (iteration % every == 0 || last)) {
    Timer tw;
    comm::run_collectively(world, [&] {
      if (world.rank() == 0) write();
    });
    log::info("checkpoint: iteration " + std::to_string(iteration) + " written to " + path + " (" +
              std::to_string(tw.seconds()) + " s)");
  }
  maybe_test_kill(iteration);
}

}  // namespace tessera::run
