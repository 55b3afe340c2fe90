// The ALS loop's state and steps (class Als), shared by cp_als_loop.cpp (the setup and the
// iterations) and cp_als_report.cpp (what it reports: the iteration record, the model, the
// held-out RMSE). Internal to src/engine/algo.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "algo/cp_als_loop.hpp"
#include "kernels/cp_device.hpp"
#include "linalg/row_update.hpp"

namespace tessera::algo::detail {

/// The power of two the loop scales the tensor by: 1 while ||X|| lies where every quantity
/// of the loop (sums of squares of MTTKRP outputs, lambda^2, Grams of unnormalised factors)
/// stays well inside the range of T, else 2^-e with 2^e ~ ||X||, so the loop sees ||c X||
/// near 1. A power of two scales exactly (no rounding).
template <typename T>
double loop_scale(double norm_x) {
  constexpr bool single = std::is_same_v<T, float>;
  const int e = std::ilogb(norm_x);
  const int lo = single ? -20 : -128, hi = single ? 64 : 128;
  if (e >= lo && e <= hi) return 1.0;
  return std::ldexp(1.0, -std::clamp(e, single ? -100 : -1000, single ? 100 : 1000));
}

/// Seconds of one iteration by share (the phases "kernel", "comm", "solve").
struct IterTimes {
  double kernel = 0, comm = 0, solve = 0;
};

/// One run of CP-ALS: the tensor handles, the layouts, the factor rows and their Grams in
/// backend memory, the loop's buffers, and the steps of the setup and the iterations.
template <typename T>
class Als {
 public:
  Als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
      std::vector<ModeLayout>& lay, kernels::Backend<T>& be, const comm::Communicator& ctrl,
      const comm::Communicator& data, const CpOptions& opt, const kernels::TensorHandle<T>* Xones,
      const Holdout* hold, CpResult& res);
  /// Prints the factor-update volume; records the memory tier and the per-mode counts.
  void describe();
  /// ||X|| (agreed over the ranks, errors thrown on every rank alike) and the loop's scale.
  void norm_and_scale();
  /// The factor rows (initial or resumed) in backend memory, their Grams, and the buffers.
  void allocate();
  /// The device loop when the run can use it; the resumed run's lambda, history and fit.
  void start();
  /// The held-out entries: their count and the RMSE of the training mean (collective).
  void holdout_baseline();
  /// ALS iterations until the tolerance, max_iters, max_seconds or a stop request.
  void iterate();
  /// The stop reason and the model (collective).
  void finish();

 private:
  [[noreturn]] void throw_overflow(int n) const;
  /// The model, complete on every rank, rows in original index order (collective for the
  /// layer strategy: each rank contributes its owned rows).
  KruskalModel assemble_model();
  /// The RMSE of the model (or of `mean`) on the held-out entries (collective).
  double holdout_rmse(double mean, bool use_mean);
  /// Gram of the owned rows of factor n, summed over the ranks when the rows are split.
  void update_gram(int n, const T* own_rows, std::int64_t own_n);
  /// The whole iteration on the device: the MTTKRPs from here, the rest in the loop.
  kernels::CpLoopSums device_iteration(int it, IterTimes& t);
  /// One mode of a host iteration: MTTKRP, reduce, solve, normalise, share.
  void update_mode(int it, int n, IterTimes& t, double& quad);
  /// MTTKRP of mode n (and of the pattern with the packed outer products) into M (MW).
  void mttkrp_step(int n, IterTimes& t);
  /// M (MW) reduce-scattered to the owned rows where the rows are split; returns the rows
  /// the solve reads.
  std::pair<T*, T*> reduce_step(int n, IterTimes& t);
  /// The new owned rows of mode n into `own` (normal equations or the row update) and
  /// their column norms (of `kind`) on the host.
  void solve_step(int n, NormKind kind, const T* Mrows, const T* MWrows, T* own, double& quad,
                  IterTimes& t);
  /// The norms summed over split rows into lambda, the owned rows normalised, their Gram
  /// (and the last mode's dots with M).
  void normalise_step(int n, NormKind kind, const T* Mrows, T* own, IterTimes& t);
  /// Grams summed, the rows gathered to the chunk, the packed outer products.
  void share_step(int n, double& quad, IterTimes& t);
  /// The fit from the Grams, lambda and the dots, without forming the model.
  double fit_of(int it, const kernels::CpLoopSums& sums, double quad);
  /// Records the iteration (history, phases, held-out RMSE, its line, the state handed to
  /// on_iteration); returns whether the run converged.
  bool record(int it, double fit, const Timer& iter_timer, IterTimes& t, const Timer& run_timer);

  const kernels::TensorHandle<T>& X_;
  const partition::Distribution& dist_;
  std::vector<ModeLayout>& lay_;
  kernels::Backend<T>& be_;
  const comm::Communicator& ctrl_;
  const comm::Communicator& data_;
  const CpOptions& opt_;
  const kernels::TensorHandle<T>* Xones_;
  /// Completion on one copy (Xones_ is X_): ops::completion_rows, no packed outer products.
  const bool fused_;
  const Holdout* hold_;
  CpResult& res_;
  const int N_, R_, W_;
  const bool layer_;
  std::vector<linalg::RowUpdate> upd_;
  // The loop computes on c X (exactly: c is a power of two): MTTKRP outputs are scaled as
  // they come out, lambda holds c times the model's weights (divided by c in the model).
  double c_ = 1, norm_cx_ = 0, norm_cx2_ = 0;
  std::vector<double> c_cols_;
  std::vector<kernels::Array<T>> A_, G_;
  kernels::Array<T> M_, Aown_, V_;
  // Completion: each mode's packed outer products of its factor rows and the wide MTTKRP of
  // the pattern (the rows' packed Grams).
  std::vector<kernels::Array<T>> P_;
  kernels::Array<T> MW_;
  std::vector<const T*> pptr_, fptr_;
  std::vector<double> lambda_, host_norms_, scale_, dots_;
  std::vector<std::vector<T>> Gh_, Ah_;
  std::unique_ptr<kernels::CpDeviceLoop<T>> dev_;
  /// Per mode: the device loop's row pieces of the MTTKRP (make_device_loop), or empty.
  std::vector<std::vector<std::int64_t>> pieces_;
  double fit_old_ = 0, overlap_sum_ = 0;
  int overlap_count_ = 0, first_iter_ = 0, print_every_ = 1;
  bool time_up_ = false;
  int stop_signal_ = 0;  // agreed over the ranks (CpOptions::stop)
};

}  // namespace tessera::algo::detail
