// Internal to src/engine/algo: the held-out evaluation of the non-least-squares losses
// (GCP, algo/cp_gcp.cpp, and CP-APR, algo/cp_apr.cpp; docs/counts.md): a loss's mean over the
// held-out entries and as many sampled zeros, and the AUC of the model's values there.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/cp_constraints.hpp"
#include "comm/communicator.hpp"

namespace tessera::algo::detail {

/// A loss f(x, m) at an entry whose datum is x and model value m.
using EntryLoss = std::function<double(double x, double m)>;

/// The held-out loss and AUC of one evaluation.
struct HoldoutScore {
  double loss = 0;  ///< mean of f over the held-out entries and as many sampled zeros
  double auc = 0;   ///< of the model's values on the held-out entries against the zeros (NaN: none)
};

/// Scores the model m = sum_r prod_n F_n(i_n, r) (factors: per mode dims[n] x R, row-major,
/// in the run's row order, weights folded in) on this rank's held-out entries `hold` (global
/// coordinates) and on H zero coordinates (H: the held-out entries over all ranks), hashed
/// from (seed, j) with zero j dealt to rank j mod P, so the zeros and the mean do not depend
/// on the rank count. The AUC is read from histograms of 4096 bins over [min, max] of the
/// values (a value that is not finite scores lowest; ties count one half). Collective over
/// `ctrl` (five all-reduces); the model values on the host threads.
HoldoutScore holdout_score(const Holdout& hold, const std::vector<std::vector<double>>& factors,
                           int R, const std::vector<std::uint64_t>& dims, std::uint64_t seed,
                           const comm::Communicator& ctrl, const EntryLoss& loss);

/// Sets res->holdout_entries, training_entries (`training`: this rank's training entries) and
/// holdout_cold_entries, summed over `ctrl`.
void holdout_counts(const Holdout& hold, std::uint64_t training, const comm::Communicator& ctrl,
                    CpResult* res);

}  // namespace tessera::algo::detail
