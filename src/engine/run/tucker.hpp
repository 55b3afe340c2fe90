// A Tucker-HOOI run from one options struct: what `tessera tucker` and the Python module's
// tucker_hooi both do (docs/architecture.md, "The run layer").
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "algo/tucker.hpp"
#include "comm/mpi_communicator.hpp"
#include "run/checkpoint.hpp"
#include "run/compute.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "tensor/sparse_tensor.hpp"
#include "util/stop_request.hpp"

namespace tessera::run {

/// Everything a Tucker run is told. Option names in messages are the CLI's.
struct TuckerRunOptions {
  LoadOptions load;             ///< load.path: the input file ("" when run_tucker is given arrays)
  std::string name;             ///< the tensor's name in logs and the record ("": load.path)
  std::string ranks;            ///< "16,16,16", "16x16x16" or one for all
  std::string svd = "gram";     ///< gram | subspace | scalapack
  std::string init = "random";  ///< random | hosvd
  int iters = 50;
  double tol = 1e-5;
  std::uint64_t seed = 1;
  int subspace_steps = 3;
  std::string max_mem;           ///< "8G"; "": 3/4 of the node's memory shared by its ranks
  bool print_iterations = true;  ///< the memory plan and one line per iteration on rank 0
  ComputeOptions run;
  std::string out;  ///< write the model (HDF5) here ("": not written)
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

/// What a Tucker run returns.
struct TuckerRun {
  bool dry_run = false;
  algo::TuckerResult result;
  std::string checkpoint;
  nlohmann::json record;  ///< null unless run.json or make_record
};

/// Collective: as run_cp (run/cp.hpp), for Tucker-HOOI. T: float or double.
template <typename T>
TuckerRun run_tucker(const TuckerRunOptions& o, const comm::MpiCommunicator& world,
                     SparseTensor<T>* arrays = nullptr);

/// The record's `ttmc_per_rank` and `comm_split` (several ranks; docs/run-record.md), for
/// `tessera tucker` and `bench tucker` alike.
void add_rank_split(nlohmann::json& j, const algo::TuckerResult& res);

}  // namespace tessera::run
