// tessera cp: distributed CP-ALS of a FROSTT tensor. The options of run::CpRunOptions as
// flags; the run is run::run_cp (src/engine/run/cp.hpp).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run/cp.hpp"

namespace tessera::driver {

void add_cp(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CpRunOptions>();
  auto* sub = app.add_subcommand("cp", "CP-ALS decomposition of a FROSTT tensor (.tns, .tns.gz)");
  sub->add_option("file", a->load.path, "Input tensor (.tns or .tns.gz)")->required();
  sub->add_option("-r,--rank", a->rank, "CP rank R")->check(CLI::Range(1, 4096));
  sub->add_option("-i,--iters", a->iters, "Maximum ALS iterations")->check(CLI::Range(1, 1000000));
  sub->add_option("--tol", a->tol, "Stop when |fit change| < tol (-t is --threads)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-seconds", a->max_seconds,
                  "Stop after the first iteration that ends more than this many seconds after "
                  "the iterations began (0: no limit); the record's stop_reason says \"time "
                  "limit\", and a checkpoint (--checkpoint-every) is written at the stop")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  sub->add_option("--print-every", a->print_every,
                  "Print an iteration line every N iterations (and the last)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("-s,--seed", a->seed, "Seed of the initial factors");
  sub->add_option("--init", a->init,
                  "Initial factors: random (keyed by --seed, mode and row: the same on any rank "
                  "count) | nvecs (leading left singular vectors of each unfolding, from a "
                  "randomized HOSVD and one HOOI step; tier 1) | file:MODEL.h5 (a model written "
                  "by tessera cp --out or the Python module: its factors and weights are the "
                  "start; same dims and rank)")
      ->capture_default_str();
  add_cp_constraint_flags(sub, a->con);
  add_partition_options(sub, a->load, "nnz for allreduce, grid for layer");
  add_compute_options(sub, a->run, a->load);
  sub->add_option("-o,--out", a->out, "Write the model (HDF5) here");
  add_checkpoint_options(sub, a->ckpt);
  run_with(sub, a, run, []<typename T>(const CpRunOptions& o, const comm::MpiCommunicator& w) {
    stop_on_signals([&](const util::StopRequest* stop) {  // SIGINT, SIGTERM: exit 128 + N
      CpRunOptions so = o;
      so.stop = stop;
      return run::run_cp<T>(so, w).result.stop_signal;
    });
  });
}

}  // namespace tessera::driver
