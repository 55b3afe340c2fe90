// What the ALS loop of cp_als reports (cp_als_loop_impl.hpp): the factor-update volume and
// the memory tier at the start, each iteration's record (history, phases, held-out RMSE, its
// line, the state handed to on_iteration), the held-out entries' baseline, the stop reason
// and the model in original index order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "algo/cp_als_loop_impl.hpp"
#include "algo/cp_init.hpp"
#include "algo/degenerate.hpp"
#include "algo/host_tier.hpp"
#include "kernels/ops/dense.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::algo::detail {

template <typename T>
void Als<T>::describe() {
  if (opt_.print_iterations) {
    // Factor rows entering the update collectives each iteration (largest over ranks).
    double rows = 0;
    for (const auto& L : lay_) rows += static_cast<double>(ctrl_.size() > 1 ? L.len : 0);
    ctrl_.allreduce(&rows, 1, comm::ReduceOp::max);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "factor updates (%s): %.0f factor rows x R=%d per rank per iteration "
                  "(%.3g MB), plus %d Gram matrices of %dx%d",
                  to_string(opt_.strategy).c_str(), rows, R_, rows * R_ * sizeof(T) / 1e6,
                  lay_.empty() || lay_[0].rows == nullptr ? 0 : N_, R_, R_);
    log::info(line);
  }
  res_.tier = X_.tier();
  res_.tier_description = X_.describe();
  log_memory_tier(res_.tier, res_.tier_description, ctrl_, opt_.print_iterations);
  if (opt_.count_distinct_rows) res_.distinct_rows = X_.distinct_rows();
  for (int n = 0; n < N_; ++n) {
    res_.mttkrp_stream_bytes.push_back(static_cast<double>(X_.mttkrp_stream_bytes(n)));
    res_.rows_held.push_back(static_cast<std::uint64_t>(lay_[static_cast<std::size_t>(n)].len));
  }
}

template <typename T>
KruskalModel Als<T>::assemble_model() {
  const int R = R_;
  const auto& dims = dist_.dims;
  KruskalModel model;
  model.dims = dims;
  model.rank = R;
  model.lambda = lambda_;
  if (c_ != 1.0)
    for (auto& l : model.lambda) l /= c_;
  for (int n = 0; n < N_; ++n) {
    const auto& L = lay_[static_cast<std::size_t>(n)];
    Matrix<double> F(static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]), R, 0.0);
    std::vector<T> h(static_cast<std::size_t>(L.len * R));
    if (!h.empty()) be_.download(A_[static_cast<std::size_t>(n)].data(), h.size(), h.data());
    // Rows go back to their original indices (the block may be relabelled, DESIGN §4).
    const std::int64_t first = layer_ ? L.own_lo : 0;
    const std::int64_t count = layer_ ? L.own_n : L.len;
    for (std::int64_t i = first; i < first + count; ++i) {
      const auto row =
          static_cast<std::int64_t>(dist_.original_index(n, L.lo + static_cast<std::uint64_t>(i)));
      for (int r = 0; r < R; ++r)
        F(row, r) = static_cast<double>(h[static_cast<std::size_t>(i * R + r)]);
    }
    if (layer_) ctrl_.allreduce(F.data.data(), F.data.size());
    model.factors.push_back(std::move(F));
  }
  return model;
}

template <typename T>
double Als<T>::holdout_rmse(double mean, bool use_mean) {
  double se = 0;
  if (!hold_->vals.empty()) {
    if (!use_mean)
      for (int m = 0; m < N_; ++m) {
        const auto& L = lay_[static_cast<std::size_t>(m)];
        auto& h = Ah_[static_cast<std::size_t>(m)];
        h.resize(static_cast<std::size_t>(L.len * R_));
        if (!h.empty()) be_.download(A_[static_cast<std::size_t>(m)].data(), h.size(), h.data());
      }
    se = holdout_squared_error(*hold_, Ah_, lambda_, R_, c_, mean, use_mean);
  }
  ctrl_.allreduce(&se, 1);
  return res_.holdout_entries > 0 ? std::sqrt(se / static_cast<double>(res_.holdout_entries))
                                  : std::numeric_limits<double>::quiet_NaN();
}

template <typename T>
void Als<T>::holdout_baseline() {
  if (hold_ == nullptr) return;
  double sums[4] = {hold_->train_sum, static_cast<double>(hold_->train_count),
                    static_cast<double>(hold_->vals.size()), static_cast<double>(hold_->cold)};
  ctrl_.allreduce(sums, 4);
  res_.training_entries = static_cast<std::uint64_t>(sums[1]);
  res_.holdout_entries = static_cast<std::uint64_t>(sums[2]);
  res_.holdout_cold_entries = static_cast<std::uint64_t>(sums[3]);
  res_.mean_predictor_rmse = holdout_rmse(sums[1] > 0 ? sums[0] / sums[1] : 0.0, true);
  if (opt_.print_iterations) {
    log::info(holdout_line(res_, opt_));
  }
}

template <typename T>
bool Als<T>::record(int it, double fit, const Timer& iter_timer, IterTimes& t,
                    const Timer& run_timer) {
  CpIteration rec;
  rec.iter = it + 1;
  rec.fit = fit;
  rec.delta = fit - fit_old_;
  rec.seconds = iter_timer.seconds();
  rec.kernel = t.kernel;
  rec.comm = t.comm;
  rec.solve = t.solve;
  res_.history.push_back(rec);
  res_.phases.add("kernel", t.kernel);
  res_.phases.add("comm", t.comm);
  res_.phases.add("solve", t.solve);
  res_.fit = fit;
  res_.iterations = it + 1;
  const bool done = it > 0 && std::abs(fit - fit_old_) < opt_.tol;
  if ((opt_.max_seconds > 0 || opt_.stop != nullptr) && !done) {
    // The slowest rank's clock and any rank's stop request (its signal number), in one
    // allreduce, so that every rank stops after the same iteration.
    double v[2] = {run_timer.seconds(),
                   opt_.stop != nullptr ? static_cast<double>(opt_.stop->signal()) : 0.0};
    ctrl_.allreduce(v, 2, comm::ReduceOp::max);
    time_up_ = opt_.max_seconds > 0 && v[0] >= opt_.max_seconds;
    stop_signal_ = static_cast<int>(v[1]);
  }
  const bool stopping = time_up_ || stop_signal_ != 0;
  const bool last = done || stopping || it + 1 == opt_.max_iters;
  if (hold_ != nullptr && ((it + 1) % print_every_ == 0 || last)) {
    // On the iterations that print (--print-every) and the last: a pass over the held-out
    // entries on the host, counted in this iteration's solve time.
    Timer tv;
    res_.validation_rmse = holdout_rmse(0.0, false);
    auto& h = res_.history.back();
    h.validation_rmse = res_.validation_rmse;
    const double s = tv.seconds();
    h.solve += s;
    h.seconds += s;
    t.solve += s;
    res_.phases.add("solve", s);
    rec = h;
  }
  if (opt_.print_iterations && ((it + 1) % print_every_ == 0 || last)) {
    const double tot = std::max(rec.seconds, 1e-12);
    char line[320];
    std::snprintf(line, sizeof(line),
                  "  iter %3d  fit %.6f  delta %+.3e  %.4f s  (kernel %2.0f%%  comm %2.0f%%  "
                  "solve %2.0f%%)",
                  rec.iter, fit, rec.delta, rec.seconds, 100 * t.kernel / tot, 100 * t.comm / tot,
                  100 * t.solve / tot);
    std::string text = line;
    if (hold_ != nullptr) {
      std::snprintf(line, sizeof(line), "  validation RMSE %.6g", rec.validation_rmse);
      text += line;
    }
    log::info(text);
  }
  fit_old_ = fit;
  // A run stopped by its time limit or a signal hands over its last state too (a checkpoint
  // to resume).
  if (opt_.on_iteration && ((it + 1) % std::max(opt_.state_every, 1) == 0 || stopping)) {
    if (dev_) dev_->lambda(lambda_.data());
    CpState st;
    st.iteration = it + 1;
    st.model = assemble_model();
    for (const auto& h : res_.history) st.fit_history.push_back(h.fit);
    st.converged = done;
    st.stopping = stopping;
    opt_.on_iteration(st);
  }
  return done;
}

template <typename T>
void Als<T>::finish() {
  if (overlap_count_ > 0) res_.stream_overlap = overlap_sum_ / overlap_count_;
  res_.stop_reason = res_.converged      ? "converged"
                     : stop_signal_ != 0 ? "signal"
                     : time_up_          ? "time limit"
                                         : "iteration limit";
  res_.stop_signal = stop_signal_;
  if (dev_) {
    dev_->lambda(lambda_.data());
    res_.iteration_engine = dev_->describe();
    if (!res_.device_loop_modes.empty())
      res_.iteration_engine +=
          " on " + std::to_string(ctrl_.size()) + " ranks, rows per mode " + res_.device_loop_modes;
  }
  res_.tc_split = X_.tc_split();
  // The balance of the ranks' MTTKRP time (collective; every rank ran the same iterations).
  double k = 0;
  int ran = 0;
  for (const auto& h : res_.history)
    if (h.iter > first_iter_) {
      k += h.kernel;
      ++ran;
    }
  const comm::MaxMean t = comm::max_and_mean(ctrl_, k);
  if (ran > 0) {
    res_.kernel_max_seconds = t.max / ran;
    res_.kernel_mean_seconds = t.mean / ran;
  }
  if (opt_.print_iterations && ctrl_.size() > 1 && res_.kernel_mean_seconds > 0) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "MTTKRP time per iteration over %d ranks: slowest %.4g s, mean %.4g s "
                  "(imbalance %.2f)",
                  ctrl_.size(), res_.kernel_max_seconds, res_.kernel_mean_seconds,
                  res_.kernel_max_seconds / res_.kernel_mean_seconds);
    log::info(line);
  }
  // The model handed out is normalised the conventional way (unit 2-norm columns, sorted
  // weights, fixed signs); checkpoints keep the iteration's own normalisation, so a resumed
  // run continues exactly.
  res_.model = assemble_model();
  normalize_conventional(res_.model);
  flag_degenerate(res_.model.is_zero(), "every weight is 0", &res_.stop_reason, &res_.converged);
}

template void Als<float>::describe();
template void Als<double>::describe();
template KruskalModel Als<float>::assemble_model();
template KruskalModel Als<double>::assemble_model();
template double Als<float>::holdout_rmse(double, bool);
template double Als<double>::holdout_rmse(double, bool);
template void Als<float>::holdout_baseline();
template void Als<double>::holdout_baseline();
template bool Als<float>::record(int, double, const Timer&, IterTimes&, const Timer&);
template bool Als<double>::record(int, double, const Timer&, IterTimes&, const Timer&);
template void Als<float>::finish();
template void Als<double>::finish();

}  // namespace tessera::algo::detail
