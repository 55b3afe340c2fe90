// tessera tucker: distributed Tucker-HOOI of a FROSTT tensor. The options of
// run::TuckerRunOptions as flags; the run is run::run_tucker (src/engine/run/tucker.hpp).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run/tucker.hpp"

namespace tessera::driver {

void add_tucker(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TuckerRunOptions>();
  auto* sub = app.add_subcommand(
      "tucker", std::string("Tucker-HOOI decomposition of a sparse tensor: ") + kTensorInputs);
  sub->add_option("file", a->load.path, "Input tensor: " + std::string(kTensorInputs))->required();
  sub->add_option("-r,--ranks", a->ranks,
                  "Tucker ranks, one per mode (16,16,16 or 16x16x16) or one for all")
      ->required();
  sub->add_option("--svd", a->svd,
                  "Factor update: gram (eigen-solve of the all-reduced Gram of the TTMc rows) | "
                  "subspace (block power steps, distributed CholeskyQR2) | scalapack (pdgesvd on "
                  "the row-distributed unfolding)")
      ->check(CLI::IsMember({"gram", "subspace", "scalapack"}));
  sub->add_option("--init", a->init,
                  "Initial factors: random (orthonormal, keyed by seed, mode and row) | hosvd "
                  "(randomized HOSVD: approximate leading left singular vectors of each unfolding "
                  "from one randomized range-finder pass, not an exact SVD)")
      ->check(CLI::IsMember({"random", "hosvd"}));
  sub->add_option("-i,--iters", a->iters, "Maximum HOOI iterations")->check(CLI::Range(1, 1000000));
  sub->add_option("--tol", a->tol, "Stop when |fit change| < tol (-t is --threads)")
      ->check(non_negative<decltype(a->tol)>());
  sub->add_option("-s,--seed", a->seed, "Seed of the initial factors")
      ->check(non_negative<decltype(a->seed)>());
  sub->add_option("--subspace-steps", a->subspace_steps,
                  "--svd subspace: at most this many power steps per factor update")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--max-mem", a->max_mem,
                  "Memory per rank the semi-sparse TTMc rows, SVD workspace and factors may take, "
                  "e.g. 8G (K/M/G/T = 1024^k); over it the run refuses and names ranks that fit. "
                  "Default: 3/4 of the node's memory shared by its ranks");
  add_partition_options(sub, a->load, "nnz");
  add_compute_options(sub, a->run, a->load, kAllComputeOptions | kHierarchyOption);
  sub->add_option("-o,--out", a->out, "Write the model (HDF5: core, factors, fit history) here");
  add_checkpoint_options(sub, a->ckpt);
  run_with(sub, a, run, []<typename T>(const TuckerRunOptions& o, const comm::MpiCommunicator& w) {
    stop_on_signals([&](const util::StopRequest* stop) {  // SIGINT, SIGTERM: exit 128 + N
      TuckerRunOptions so = o;
      so.stop = stop;
      return run::run_tucker<T>(so, w).result.stop_signal;
    });
  });
}

}  // namespace tessera::driver
