// The ALS loop of cp_als (see cp_als_loop.hpp).
#include "algo/cp_als_loop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "algo/cp_init.hpp"
#include "algo/degenerate.hpp"
#include "algo/host_tier.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/row_update.hpp"
#include "linalg/row_update.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace tessera::algo::detail {

namespace {

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
  double fit_old_ = 0, overlap_sum_ = 0;
  int overlap_count_ = 0, first_iter_ = 0, print_every_ = 1;
  bool time_up_ = false;
  int stop_signal_ = 0;  // agreed over the ranks (CpOptions::stop)
};

template <typename T>
Als<T>::Als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
            std::vector<ModeLayout>& lay, kernels::Backend<T>& be, const comm::Communicator& ctrl,
            const comm::Communicator& data, const CpOptions& opt,
            const kernels::TensorHandle<T>* Xones, const Holdout* hold, CpResult& res)
    : X_(X),
      dist_(dist),
      lay_(lay),
      be_(be),
      ctrl_(ctrl),
      data_(data),
      opt_(opt),
      Xones_(Xones),
      fused_(Xones != nullptr && Xones == &X),
      hold_(hold),
      res_(res),
      N_(dist.order()),
      R_(opt.rank),
      W_(static_cast<int>(linalg::packed_size(opt.rank))),
      layer_(opt.strategy == CommStrategy::layer) {
  TESSERA_EXPECTS(X.order() == N_ && static_cast<int>(lay.size()) == N_,
                  "tensor handle of order " << X.order() << " for a distribution of order " << N_);
  if (opt.resume) check_cp_state(*opt.resume, dist.dims, R_);
  for (int n = 0; n < N_; ++n) upd_.push_back(update_of(opt, n, N_));
  TESSERA_EXPECTS(!opt.observed_only || Xones != nullptr,
                  "observed_only needs the pattern handle (the Distributed overload)");
}

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
void Als<T>::throw_overflow(int n) const {
  throw CollectiveError(
      opt_.tensor_name + ": CP-ALS: the update of mode " + std::to_string(n) + " overflowed (" +
      (std::is_same_v<T, float> ? "single" : "double") +
      " precision): the MTTKRP sums exceed its range; " +
      (std::is_same_v<T, float> ? "run with --precision double" : "rescale the values"));
}

template <typename T>
void Als<T>::norm_and_scale() {
  // ||X||: the plain sum of squares while it is far from the ends of the double range
  // (results as ever), else the handles' scaled norms (values near 1e200 or 1e-200). The
  // sums are allreduced, so every rank decides alike and the errors below are agreed.
  const std::string& name = opt_.tensor_name;
  double norm_x2 = X_.value_norm_squared();
  ctrl_.allreduce(&norm_x2, 1);
  const bool plain = std::isfinite(norm_x2) && norm_x2 >= 0x1p-1000 && norm_x2 <= 0x1p+1000;
  const double norm_x = plain ? std::sqrt(norm_x2) : global_norm(X_.value_norm(), ctrl_);
  // The cuda tier-1 handle does not override value_norm yet: it sums unscaled squares, so
  // there values under ~1e-154 in double also give 0 (tiers 2-3 keep scaled chunk norms).
  const bool unscaled =
      std::is_same_v<T, double> && X_.tier() == 1 && be_.kind() == kernels::BackendKind::cuda;
  const char* streamed_note =
      unscaled ? " (or values under about 1e-154, whose squares underflow in this memory tier "
                 "or backend)"
               : "";
  if (norm_x == 0)
    throw CollectiveError(name + ": every value is 0 (no nonzero values)" + streamed_note +
                          ": nothing to decompose");
  if (!std::isfinite(norm_x))
    throw CollectiveError(
        name + ": ||X|| = " + std::to_string(norm_x) +
        ": the 2-norm of the values is not a finite double (values too large, or this memory "
        "tier sums squares without scaling and its sum overflowed); rescale the values");
  res_.norm_x = norm_x;
  c_ = loop_scale<T>(norm_x);
  norm_cx_ = c_ == 1.0 ? norm_x : c_ * norm_x;
  norm_cx2_ = c_ == 1.0 && plain ? norm_x2 : norm_cx_ * norm_cx_;
  c_cols_.assign(static_cast<std::size_t>(R_), c_);
}

template <typename T>
void Als<T>::allocate() {
  // ---- factors: chunk rows held by this rank, initialised from global row ids (or taken
  // from the resumed state, saved in original index order) ----
  const int N = N_, R = R_;
  A_.resize(static_cast<std::size_t>(N));
  G_.resize(static_cast<std::size_t>(N));
  std::int64_t max_alloc = 0, max_b = 0;
  for (int n = 0; n < N; ++n) {
    const auto& L = lay_[static_cast<std::size_t>(n)];
    std::vector<T> h(static_cast<std::size_t>(L.alloc * R), T(0));
    for (std::int64_t i = 0; i < L.len; ++i) {
      const std::uint64_t orig = dist_.original_index(n, L.lo + static_cast<std::uint64_t>(i));
      for (int r = 0; r < R; ++r)
        h[static_cast<std::size_t>(i * R + r)] =
            static_cast<T>(opt_.resume ? opt_.resume->model.factors[static_cast<std::size_t>(n)](
                                             static_cast<std::int64_t>(orig), r)
                                       : initial_factor_value(opt_.seed, n, orig, r));
    }
    A_[static_cast<std::size_t>(n)] =
        be_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(L.alloc, 1) * R));
    if (!h.empty()) be_.upload(h.data(), h.size(), A_[static_cast<std::size_t>(n)].data());
    G_[static_cast<std::size_t>(n)] = be_.allocate(static_cast<std::size_t>(R * R));
    max_alloc = std::max(max_alloc, L.alloc);
    max_b = std::max(max_b, L.b);
  }
  M_ = be_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_alloc, 1) * R));
  Aown_ = be_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_b, 1) * R));
  V_ = be_.allocate(static_cast<std::size_t>(R * R));
  if (opt_.observed_only) {
    for (int n = 0; n < N && !fused_; ++n) {
      const auto& L = lay_[static_cast<std::size_t>(n)];
      P_.push_back(be_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(L.alloc, 1) * W_)));
      if (L.len > 0)
        kernels::ops::pack_outer(be_, A_[static_cast<std::size_t>(n)].data(), L.len, R,
                                 P_.back().data());
    }
    MW_ = be_.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_alloc, 1) * W_));
  }
  pptr_.resize(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    const auto& L = lay_[static_cast<std::size_t>(n)];
    update_gram(n, A_[static_cast<std::size_t>(n)].data() + L.own_lo * R, L.own_n);
  }
  be_.synchronize();
}

template <typename T>
void Als<T>::update_gram(int n, const T* own_rows, std::int64_t own_n) {
  kernels::ops::gram(be_, own_rows, own_n, R_, G_[static_cast<std::size_t>(n)].data());
  if (lay_[static_cast<std::size_t>(n)].rows != nullptr)
    data_.allreduce(G_[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R_ * R_));
}

template <typename T>
void Als<T>::start() {
  const auto R = static_cast<std::size_t>(R_);
  lambda_.assign(R, 1.0);
  host_norms_.resize(R);
  scale_.resize(R);
  dots_.resize(R);
  Gh_.assign(static_cast<std::size_t>(N_), std::vector<T>(R * R));
  fptr_.resize(static_cast<std::size_t>(N_));
  dev_ =
      make_device_loop(be_, lay_, upd_, A_, G_, M_, R_, ctrl_, data_, res_, opt_, hold_ != nullptr);
  res_.comm_hierarchy_modes = detail::hierarchy_modes(lay_);
  if (opt_.print_iterations && res_.comm_hierarchy_modes.find("node") != std::string::npos)
    log::info("factor rows combined per mode " + res_.comm_hierarchy_modes +
              " (node: inside the node, then across " + std::to_string(opt_.nodes.nodes()) +
              " nodes; --comm-hierarchy " + comm::to_string(opt_.hierarchy) + ")");
  if (opt_.resume) {
    // Continue the saved run: its lambda, fit history and previous fit.
    const CpState& s = *opt_.resume;
    lambda_ = s.model.lambda;
    if (c_ != 1.0)
      for (auto& l : lambda_) l *= c_;
    first_iter_ = s.iteration;
    for (int i = 0; i < s.iteration; ++i) {
      CpIteration rec;
      rec.iter = i + 1;
      rec.fit = s.fit_history[static_cast<std::size_t>(i)];
      rec.delta = rec.fit - (i > 0 ? s.fit_history[static_cast<std::size_t>(i - 1)] : 0.0);
      res_.history.push_back(rec);
    }
    fit_old_ = s.iteration > 0 ? s.fit_history.back() : 0.0;
    res_.fit = fit_old_;
    res_.iterations = s.iteration;
    res_.converged = s.converged;
  }
  Ah_.resize(static_cast<std::size_t>(N_));
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
kernels::CpLoopSums Als<T>::device_iteration(int it, IterTimes& t) {
  util::fault::at(util::fault::Point::kernel);  // the iteration's MTTKRPs are launched next
  kernels::CpLoopSums sums = dev_->iterate(
      [&](int n) {
        for (int m = 0; m < N_; ++m)
          fptr_[static_cast<std::size_t>(m)] = A_[static_cast<std::size_t>(m)].data();
        const auto& L = lay_[static_cast<std::size_t>(n)];
        kernels::ops::mttkrp(be_, X_, n, fptr_, R_, M_.data());
        if (c_ != 1.0) kernels::ops::scale_columns(be_, M_.data(), L.len, R_, c_cols_.data());
        // The padding rows of a reduce-scatter's last block (never solved; kept finite).
        if (L.rows != nullptr && L.alloc > L.len)
          be_.fill(M_.data() + L.len * R_, static_cast<std::size_t>((L.alloc - L.len) * R_), T(0));
      },
      it == 0);
  if (ctrl_.size() > 1) {
    // Every rank computed the sums from the same combined rows; one agreement makes sure
    // that every rank takes the same decision (convergence, overflow) after the iteration.
    double v[3] = {sums.norm_m2, sums.inner, static_cast<double>(sums.bad_mode)};
    ctrl_.broadcast(v, 3, 0);
    sums.norm_m2 = v[0];
    sums.inner = v[1];
    sums.bad_mode = static_cast<int>(v[2]);
  }
  if (sums.bad_mode >= 0) throw_overflow(sums.bad_mode);
  res_.solve_fallbacks += sums.fallbacks;
  t.kernel = sums.kernel_seconds;
  t.comm = sums.comm_seconds;
  t.solve = sums.solve_seconds;
  return sums;
}

template <typename T>
void Als<T>::mttkrp_step(int n, IterTimes& t) {
  const auto& L = lay_[static_cast<std::size_t>(n)];
  const int R = R_;
  for (int m = 0; m < N_; ++m)
    fptr_[static_cast<std::size_t>(m)] = A_[static_cast<std::size_t>(m)].data();

  Timer timer;
  util::fault::at(util::fault::Point::kernel);
  if (fused_)  // the MTTKRP and the rows' Grams in one pass over the rows
    kernels::ops::completion_rows(be_, X_, n, fptr_, R, M_.data(), MW_.data());
  else
    kernels::ops::mttkrp(be_, X_, n, fptr_, R, M_.data());
  if (c_ != 1.0) kernels::ops::scale_columns(be_, M_.data(), L.len, R, c_cols_.data());
  if (res_.tier > 1) {
    res_.stream_copy_seconds += X_.last_copy_seconds();
    res_.stream_compute_seconds += X_.last_compute_seconds();
    overlap_sum_ += X_.overlap_fraction();
    ++overlap_count_;
  }
  if (L.alloc > L.len)
    be_.fill(M_.data() + L.len * R, static_cast<std::size_t>((L.alloc - L.len) * R), T(0));
  if (opt_.observed_only) {
    // The rows' packed Grams (the pattern's MTTKRP with the packed outer products, or one
    // pass over the R-wide rows where the backend has it: ops::row_grams); fused: above.
    if (!fused_) {
      for (int m = 0; m < N_; ++m)
        pptr_[static_cast<std::size_t>(m)] = P_[static_cast<std::size_t>(m)].data();
      kernels::ops::row_grams(be_, *Xones_, n, fptr_, pptr_, R, MW_.data());
    }
    if (L.alloc > L.len)
      be_.fill(MW_.data() + L.len * W_, static_cast<std::size_t>((L.alloc - L.len) * W_), T(0));
  }
  be_.synchronize();
  t.kernel += timer.seconds();
}

template <typename T>
std::pair<T*, T*> Als<T>::reduce_step(int n, IterTimes& t) {
  const auto& L = lay_[static_cast<std::size_t>(n)];
  Timer timer;
  T* Mrows = M_.data();
  T* MWrows = MW_.data();
  if (L.rows != nullptr) {
    // In place: this rank's block of M (and MW) is its reduced rows. A composed communicator
    // (comm/hierarchy.hpp) reduces device buffers only this way, with no buffer of its own.
    const std::int64_t me = L.rows->rank();
    Mrows = M_.data() + me * L.b * R_;
    L.rows->reduce_scatter(M_.data(), Mrows, static_cast<std::size_t>(L.b * R_));
    if (opt_.observed_only) {
      MWrows = MW_.data() + me * L.b * W_;
      L.rows->reduce_scatter(MW_.data(), MWrows, static_cast<std::size_t>(L.b * W_));
    }
  }
  be_.synchronize();
  t.comm += timer.seconds();
  return {Mrows, MWrows};
}

template <typename T>
void Als<T>::solve_step(int n, NormKind kind, const T* Mrows, const T* MWrows, T* own, double& quad,
                        IterTimes& t) {
  const auto& L = lay_[static_cast<std::size_t>(n)];
  const int N = N_, R = R_;
  const bool split = L.rows != nullptr;
  Timer timer;
  if (N == 1) {
    be_.fill(V_.data(), static_cast<std::size_t>(R * R), T(1));
  } else if (!opt_.observed_only) {
    std::vector<const T*> gs;
    for (int m = 0; m < N; ++m)
      if (m != n) gs.push_back(G_[static_cast<std::size_t>(m)].data());
    kernels::ops::hadamard(be_, gs, R, V_.data());
  }
  const linalg::RowUpdate& u = upd_[static_cast<std::size_t>(n)];
  if (split) be_.fill(own, static_cast<std::size_t>(L.b * R), T(0));
  if (!opt_.observed_only && !u.descent() && u.l2 == 0) {
    if (L.own_n > 0) be_.copy(Mrows, static_cast<std::size_t>(L.own_n * R), own);
    if (kernels::ops::solve_normal(be_, own, L.own_n, V_.data(), R)) ++res_.solve_fallbacks;
  } else {
    if (u.descent() && L.own_n > 0) {
      // Coordinate descent starts from the current rows with the weights: the factor
      // of the model whose other factors are the normalised ones.
      if (split)
        be_.copy(A_[static_cast<std::size_t>(n)].data() + L.own_lo * R,
                 static_cast<std::size_t>(L.own_n * R), own);
      kernels::ops::scale_columns(be_, own, L.own_n, R, lambda_.data());
    }
    linalg::RowUpdate uc = u;
    uc.l1 = u.l1 * c_;  // the loop solves for c X: the linear terms scale by c
    double q = 0;
    res_.ridged_rows += kernels::ops::row_update(
        be_, own, Mrows, L.own_n, R, opt_.observed_only ? nullptr : V_.data(),
        opt_.observed_only ? MWrows : nullptr, uc, opt_.observed_only && n == N - 1 ? &q : nullptr);
    if (n == N - 1) quad = q;
  }
  kernels::ops::column_norms(be_, own, L.own_n, R, kind, host_norms_.data());
  be_.synchronize();
  t.solve += timer.seconds();
}

template <typename T>
void Als<T>::normalise_step(int n, NormKind kind, const T* Mrows, T* own, IterTimes& t) {
  const auto& L = lay_[static_cast<std::size_t>(n)];
  const int R = R_;
  Timer timer;
  if (L.rows != nullptr)
    ctrl_.allreduce(host_norms_.data(), static_cast<std::size_t>(R),
                    kind == NormKind::two ? comm::ReduceOp::sum : comm::ReduceOp::max);
  t.comm += timer.seconds();
  timer.reset();
  for (int r = 0; r < R; ++r) {
    const double s = host_norms_[static_cast<std::size_t>(r)];
    // Agreed on every rank (the norms are allreduced when the rows are split).
    if (!std::isfinite(s)) throw_overflow(n);
    double l = kind == NormKind::two ? std::sqrt(s) : std::max(s, 1.0);
    lambda_[static_cast<std::size_t>(r)] = l;
    scale_[static_cast<std::size_t>(r)] = l > 0 ? 1.0 / l : 1.0;
  }
  kernels::ops::scale_columns(be_, own, L.own_n, R, scale_.data());
  kernels::ops::gram(be_, own, L.own_n, R, G_[static_cast<std::size_t>(n)].data());
  if (n == N_ - 1) kernels::ops::column_dots(be_, Mrows, own, L.own_n, R, dots_.data());
  be_.synchronize();
  t.solve += timer.seconds();
}

template <typename T>
void Als<T>::share_step(int n, double& quad, IterTimes& t) {
  const auto& L = lay_[static_cast<std::size_t>(n)];
  const int R = R_;
  Timer timer;
  if (L.rows != nullptr) {
    data_.allreduce(G_[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R * R));
    L.rows->allgather(Aown_.data(), A_[static_cast<std::size_t>(n)].data(),
                      static_cast<std::size_t>(L.b * R));
    if (n == N_ - 1) ctrl_.allreduce(dots_.data(), static_cast<std::size_t>(R));
    if (n == N_ - 1 && opt_.observed_only) ctrl_.allreduce(&quad, 1);
  }
  if (opt_.observed_only && !fused_ && L.len > 0)
    kernels::ops::pack_outer(be_, A_[static_cast<std::size_t>(n)].data(), L.len, R,
                             P_[static_cast<std::size_t>(n)].data());
  be_.synchronize();
  t.comm += timer.seconds();
}

template <typename T>
void Als<T>::update_mode(int it, int n, IterTimes& t, double& quad) {
  mttkrp_step(n, t);
  const auto [Mrows, MWrows] = reduce_step(n, t);
  T* own = lay_[static_cast<std::size_t>(n)].rows != nullptr
               ? Aown_.data()
               : A_[static_cast<std::size_t>(n)].data();
  const NormKind kind = it == 0 ? NormKind::two : NormKind::max;
  solve_step(n, kind, Mrows, MWrows, own, quad, t);
  normalise_step(n, kind, Mrows, own, t);
  share_step(n, quad, t);
}

template <typename T>
double Als<T>::fit_of(int it, const kernels::CpLoopSums& sums, double quad) {
  const int N = N_, R = R_;
  for (int n = 0; n < N && !dev_; ++n)
    be_.download(G_[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R * R),
                 Gh_[static_cast<std::size_t>(n)].data());
  double norm_m2 = sums.norm_m2, inner = sums.inner;  // the device loop's sums
  for (int r = 0; r < R && !dev_; ++r) {
    inner += lambda_[static_cast<std::size_t>(r)] * dots_[static_cast<std::size_t>(r)];
    for (int s = 0; s < R && !opt_.observed_only; ++s) {
      double p = lambda_[static_cast<std::size_t>(r)] * lambda_[static_cast<std::size_t>(s)];
      for (int n = 0; n < N; ++n)
        p *= static_cast<double>(
            Gh_[static_cast<std::size_t>(n)][static_cast<std::size_t>(r * R + s)]);
      norm_m2 += p;
    }
  }
  if (opt_.observed_only) norm_m2 = quad;  // over the stored entries only
  const double resid2_raw = norm_cx2_ + norm_m2 - 2 * inner;
  // ||X - model||^2 < 0 beyond rounding: ||X||^2 understates the tensor the MTTKRP sees
  // (a handle whose repeated coordinates value_norm_squared() counts separately), so no
  // fit can be given: stop rather than print a clamped number. The planner keeps such
  // inputs out of the streamed tiers (stores must have unique coordinates there); the
  // values are the same on every rank, so every rank throws alike.
  TESSERA_INPUT_CHECK(opt_.approximate_fit || resid2_raw >= -1e-3 * std::max(norm_cx2_, norm_m2),
                      "CP-ALS fit: ||X||^2 + ||model||^2 - 2 <X, model> = "
                          << resid2_raw
                          << " < 0, so ||X||^2 understates the tensor (repeated "
                             "coordinates counted separately in ||X||^2 but summed by the "
                             "MTTKRP); deduplicate the input (tessera convert IN OUT.h5)");
  const double resid2 = std::max(resid2_raw, 0.0);
  const double fit = 1.0 - std::sqrt(resid2) / norm_cx_;
  if (!std::isfinite(fit))  // from allreduced sums: agreed
    throw CollectiveError(opt_.tensor_name + ": CP-ALS: the fit of iteration " +
                          std::to_string(it + 1) +
                          " is not a number (||model||^2 = " + std::to_string(norm_m2) +
                          ", <X, model> = " + std::to_string(inner) + " for ||X|| scaled to " +
                          std::to_string(norm_cx_) + "): the factors overflowed");
  return fit;
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
void Als<T>::iterate() {
  TESSERA_EXPECTS(opt_.max_seconds >= 0 && std::isfinite(opt_.max_seconds),
                  "max_seconds >= 0, got " << opt_.max_seconds);
  print_every_ = std::max(opt_.print_every, 1);
  Timer run_timer;  // --max-seconds counts from here (this process's iterations)
  for (int it = first_iter_;
       it < opt_.max_iters && !res_.converged && !time_up_ && stop_signal_ == 0; ++it) {
    util::fault::set_iteration(it + 1);  // where the watchdog's heartbeats say this rank is
    Timer iter_timer;
    IterTimes t;
    double quad = 0;  // observed_only: sum_i a_i^T G_i a_i of the last mode (the model's norm)
    kernels::CpLoopSums sums;
    if (dev_) sums = device_iteration(it, t);
    for (int n = 0; n < N_ && !dev_; ++n) update_mode(it, n, t, quad);

    // ---- fit without forming the model ----
    Timer tf;
    const double fit = fit_of(it, sums, quad);
    t.solve += tf.seconds();

    if (record(it, fit, iter_timer, t, run_timer)) {
      res_.converged = true;
      break;
    }
  }
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
  double v[2] = {k, k};
  ctrl_.allreduce(&v[0], 1, comm::ReduceOp::max);
  ctrl_.allreduce(&v[1], 1);
  if (ran > 0) {
    res_.kernel_max_seconds = v[0] / ran;
    res_.kernel_mean_seconds = v[1] / ran / ctrl_.size();
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

}  // namespace

template <typename T>
CpResult run_als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
                 std::vector<ModeLayout>& lay, kernels::Backend<T>& be,
                 const comm::Communicator& ctrl, const comm::Communicator& data,
                 const CpOptions& opt, const Timer& setup_timer,
                 const kernels::TensorHandle<T>* Xones, const Holdout* hold) {
  CpResult res;
  Als<T> als(X, dist, lay, be, ctrl, data, opt, Xones, hold, res);
  als.describe();
  als.norm_and_scale();
  als.allocate();
  res.phases.add("setup", setup_timer.seconds());
  als.start();
  als.holdout_baseline();
  als.iterate();
  als.finish();
  return res;
}

template CpResult run_als<float>(const kernels::TensorHandle<float>&,
                                 const partition::Distribution&, std::vector<ModeLayout>&,
                                 kernels::Backend<float>&, const comm::Communicator&,
                                 const comm::Communicator&, const CpOptions&, const Timer&,
                                 const kernels::TensorHandle<float>*, const Holdout*);
template CpResult run_als<double>(const kernels::TensorHandle<double>&,
                                  const partition::Distribution&, std::vector<ModeLayout>&,
                                  kernels::Backend<double>&, const comm::Communicator&,
                                  const comm::Communicator&, const CpOptions&, const Timer&,
                                  const kernels::TensorHandle<double>*, const Holdout*);

}  // namespace tessera::algo::detail
