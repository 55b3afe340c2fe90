// tessera cp: distributed CP-ALS of a FROSTT tensor. The options of run::CpRunOptions as
// flags; the run is run::run_cp (src/engine/run/cp.hpp).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run/cp.hpp"

namespace tessera::driver {

void add_cp(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CpRunOptions>();
  auto* sub = app.add_subcommand(
      "cp", std::string("CP-ALS decomposition of a sparse tensor: ") + kTensorInputs);
  sub->add_option("file", a->load.path, "Input tensor: " + std::string(kTensorInputs))->required();
  add_cp_value_options(sub, a->als);  // rank, iters, tol, seed, ... (run::kCpValues)
  sub->add_option("--init", a->init,
                  "Initial factors: random (keyed by --seed, mode and row: the same on any rank "
                  "count) | nvecs (approximate leading left singular vectors of each unfolding: "
                  "a randomized HOSVD refined by one HOOI step, not an exact SVD; tier 1) | "
                  "file:MODEL.h5 (a model written "
                  "by tessera cp --out or the Python module: its factors and weights are the "
                  "start; same dims and rank)")
      ->capture_default_str();
  add_cp_constraint_flags(sub, a->con);
  add_partition_options(sub, a->load, "nnz for allreduce, grid for layer");
  add_compute_options(sub, a->run, a->load, kAllComputeOptions | kHierarchyOption);
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
