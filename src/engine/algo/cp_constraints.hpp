// Internal to src/engine/algo: the pieces of constrained, regularised and weighted CP that
// cp_als.cpp and its loop (cp_als_loop.cpp) call (docs/constrained-cp.md): each mode's
// row update, the training view of a block with its held-out entries, and the held-out
// entries' squared error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "linalg/row_update.hpp"

namespace tessera::algo::detail {

/// The row update of mode n of an order-N run (CpOptions' per-mode vectors, empty = none);
/// InputError when a vector has another length.
linalg::RowUpdate update_of(const CpOptions& opt, int n, int N);

/// The held-out entries of this rank (CpOptions::holdout), coordinates as the handle's.
struct Holdout {
  std::vector<std::vector<std::uint64_t>> idx;  ///< per mode
  std::vector<double> vals;
  double train_sum = 0;  ///< sum of this rank's training values
  std::uint64_t train_count = 0;
  /// Filled by training_view for count_cold, then freed: per mode, 1 at the global index of
  /// every row this rank has a training entry of; the held-out entries' global indices.
  std::vector<std::vector<std::uint8_t>> seen;
  std::vector<std::vector<std::uint64_t>> global_idx;
  std::uint64_t cold = 0;  ///< this rank's held-out entries with a row seen by no rank
};

/// Sets hold->cold (count_cold's rule: a held-out entry is cold when, in some mode, no rank
/// has a training entry in its row) and frees hold->seen and hold->global_idx. Collective
/// over `world` (one max-allreduce of sum(dims) bytes, once per run with a holdout).
void count_cold(Holdout* hold, const comm::Communicator& world);

/// The log line of a run's held-out entries: how many, the mean predictor's RMSE on them and
/// the share of cold ones.
std::string holdout_line(const CpResult& res, const CpOptions& opt);

/// The block as the kernels see it: coordinates global (allreduce) or shifted to the held
/// chunks [lo[n], lo[n] + len[n]) (layer), without the entries CpOptions::holdout takes
/// out, which go to *hold (chosen from the ORIGINAL coordinates, so the same on any rank
/// count, partition or relabelling).
template <typename T>
SparseTensor<T> training_view(const partition::Distributed<T>& d, bool layer,
                              const std::vector<std::uint64_t>& lo,
                              const std::vector<std::int64_t>& len, const CpOptions& opt,
                              Holdout* hold);

/// sum over this rank's held-out entries of (x - prediction)^2: the prediction is `mean`
/// (use_mean) or sum_r lambda_r prod_m A_m(i_m, r) / c, A_m this rank's rows of the factors
/// (rows x R, row-major, as the handle's coordinates). Host threads (OpenMP).
template <typename T>
double holdout_squared_error(const Holdout& h, const std::vector<std::vector<T>>& A,
                             const std::vector<double>& lambda, int R, double c, double mean,
                             bool use_mean);

}  // namespace tessera::algo::detail
