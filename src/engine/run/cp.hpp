// A CP-ALS run from one options struct: what `tessera cp` and the Python module's cp_als
// both do (docs/architecture.md, "The run layer"). The front ends parse their arguments into
// CpRunOptions, call run_cp and print or return the CpRun.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "comm/mpi_communicator.hpp"
#include "model/kruskal.hpp"
#include "run/checkpoint.hpp"
#include "run/compute.hpp"
#include "run/cp_options.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "tensor/sparse_tensor.hpp"
#include "util/stop_request.hpp"

namespace tessera::run {

/// Everything a CP run is told. Option names in messages are the CLI's (--rank, --init).
struct CpRunOptions {
  LoadOptions load;  ///< load.path: the input file ("" when run_cp is given arrays)
  std::string name;  ///< the tensor's name in logs and the record ("": load.path)
  /// The plain values (rank, iters, tol, seed, ...): the rows of kCpValues
  /// (run/cp_options.hpp) set them; run_cp adds what the rest of this struct says.
  algo::CpOptions als;
  bool print_iterations = true;  ///< one line per iteration on rank 0
  /// random | nvecs | file:MODEL.h5 | factors (the start is init_factors')
  std::string init = "random";
  /// init == "factors": fills the start model of a tensor of these dims (called on every
  /// rank inside a collective check; InputError naming what is wrong).
  std::function<void(const std::vector<std::uint64_t>& dims, KruskalModel* start)> init_factors;
  CpConstraintArgs con;  ///< --nonneg, --l1, --l2 (per mode), --cuda-graph
  ComputeOptions run;    ///< backend, precision, strategy, budgets, --json, --force
  std::string out;       ///< write the model (HDF5) here ("": not written)
  CheckpointArgs ckpt;
  /// The front end's hook after every iteration (iteration, fit, fit change); it may throw
  /// to stop the run (on every rank alike). Checkpoints are written before it.
  std::function<void(int, double, double)> on_iteration;
  RecordContext record;      ///< who asked (argv, front end options, interface)
  bool make_record = false;  ///< build the record even without run.json (Python returns it)
  /// Not null: stop after the iteration during which a stop was requested (the CLI's
  /// SIGINT/SIGTERM handler), with the model, the checkpoint and the record written as at
  /// any end (stop_reason "signal").
  const util::StopRequest* stop = nullptr;
};

/// What a CP run returns.
struct CpRun {
  bool dry_run = false;    ///< run.dry_run: the plan was printed, nothing computed
  algo::CpResult result;   ///< model, fit, history, phases
  std::string checkpoint;  ///< the checkpoint path ("" when not checkpointing)
  nlohmann::json record;   ///< the run record (null unless run.json or make_record)
};

/// Collective: checks the options and outputs, makes the backend and communicators, loads
/// the input as the planner decides (or distributes `arrays`, this rank's nonzeros, in
/// memory), starts from the resumed checkpoint, model file, nvecs or given factors, runs
/// cp_als with checkpoints, logs the summary, writes --out and --json. T: float or double.
template <typename T>
CpRun run_cp(const CpRunOptions& o, const comm::MpiCommunicator& world,
             SparseTensor<T>* arrays = nullptr);

}  // namespace tessera::run
