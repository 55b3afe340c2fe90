// The options of constrained, regularised and weighted CP (docs/constrained-cp.md) as the
// CLI (`tessera cp`) and the Python module take them: parsed into algo::CpOptions in one
// place, recorded in the run record in one place.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "algo/cp_als.hpp"
#include "comm/communicator.hpp"

namespace tessera::run {

struct CpConstraintArgs {
  std::string nonneg = "none";  ///< all | none | modes "0,2"
  std::string l1 = "0";         ///< one value, or one per mode "0.1,0,0"
  std::string l2 = "0";
  int inner_sweeps = 3;
  bool observed_only = false;
  double holdout = 0;  ///< fraction of the stored entries held out (seed: the run's --seed)
  /// on: plain CP on one rank with the cuda backend runs its iterations on the device as a
  /// CUDA graph (docs/cp-device-loop.md); off: per-operation calls (the phase split of
  /// every step is then timed on the host).
  std::string cuda_graph = "on";
};

/// Sets o.nonneg, l1, l2, inner_sweeps, observed_only, holdout and holdout_seed (= seed)
/// for a tensor of this order. Collective: an InputError names the option on every rank.
void apply_cp_constraints(const CpConstraintArgs& a, int order, std::uint64_t seed,
                          algo::CpOptions& o, const comm::Communicator& world);

/// The options' entries of the run record ("nonneg" as a list of modes, "l1", "l2" per
/// mode, "inner_sweeps", "observed_only", "holdout"), merged into `opts`.
void add_cp_constraint_options(nlohmann::json& opts, const algo::CpOptions& o);

/// The result's entries: "ridged_rows", "iteration_engine", "holdout" (fraction, entries,
/// RMSEs) when entries were held out, and "tc_split" (record.hpp tc_split_json; rank 0's
/// tensor-core split per mode) when the backend has one.
void add_cp_constraint_results(nlohmann::json& j, const algo::CpResult& res,
                               const algo::CpOptions& o);

}  // namespace tessera::run
