// The ALS loop of cp_als (see cp_als_loop.hpp): the setup and the iterations; what it
// reports (the record, the model, the held-out RMSE) is in cp_als_report.cpp.
#include "algo/cp_als_loop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "algo/cp_als_loop_impl.hpp"
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
  // The loop's scale (loop_scale) is applied to the MTTKRP's output, so the products of the
  // values with the factors' entries are formed unscaled: far enough below 1 they fall into
  // T's subnormal range and lose their bits (single precision: a 2-norm near 1e-37 gave a
  // wrong fit, with no error). Refused below 2^-110 (float) or 2^-1010 (double), where the
  // scale-invariance tests still hold (harden_test: 2^-100 and 2^-1000).
  constexpr bool single = std::is_same_v<T, float>;
  if (std::ilogb(norm_x) < (single ? -110 : -1010)) {
    char nx[32];
    std::snprintf(nx, sizeof nx, "%.3g", norm_x);
    throw CollectiveError(
        name + ": ||X|| = " + nx + ": the values are too small for CP-ALS in " +
        (single ? "single" : "double") +
        " precision (their products with the factors would fall below its normal range, " +
        (single ? "1.2e-38" : "2.2e-308") + ", and lose their precision); " +
        (single ? "run with --precision double, or multiply" : "multiply") +
        " the values by a power of ten (the fit does not change; lambda scales with them)");
  }
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
  dev_ = make_device_loop(be_, X_, lay_, upd_, A_, G_, M_, R_, ctrl_, data_, res_, opt_,
                          hold_ != nullptr, pieces_);
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
kernels::CpLoopSums Als<T>::device_iteration(int it, IterTimes& t) {
  util::fault::at(util::fault::Point::kernel);  // the iteration's MTTKRPs are launched next
  // Tier 2: the passes' copy and compute seconds. Passes run eagerly report them one by one;
  // inside a capture they report zeros, and the replays' come from the backend after them.
  // A capture that fails runs the iteration again eagerly: the sums start again at its
  // first pass.
  double copy = 0, compute = 0, overlap = 0;
  int passes = 0;
  kernels::CpLoopSums sums = dev_->iterate(
      [&](int n, int j) {
        for (int m = 0; m < N_; ++m)
          fptr_[static_cast<std::size_t>(m)] = A_[static_cast<std::size_t>(m)].data();
        const auto& L = lay_[static_cast<std::size_t>(n)];
        const auto& pc = pieces_[static_cast<std::size_t>(n)];
        std::int64_t lo = 0, hi = L.len;
        if (n == 0 && j == 0) {
          copy = compute = overlap = 0;
          passes = 0;
        }
        if (pc.empty()) {
          kernels::ops::mttkrp(be_, X_, n, fptr_, R_, M_.data());
          if (res_.tier > 1) {
            copy += X_.last_copy_seconds();
            compute += X_.last_compute_seconds();
            overlap += X_.overlap_fraction();
            ++passes;
          }
        } else {  // piece j of the mode's rows (make_device_loop's order)
          lo = pc[2 * static_cast<std::size_t>(j)];
          hi = pc[2 * static_cast<std::size_t>(j) + 1];
          kernels::ops::mttkrp_rows(be_, X_, n, fptr_, R_, M_.data(), lo, hi);
        }
        if (c_ != 1.0)
          kernels::ops::scale_columns(be_, M_.data() + lo * R_, hi - lo, R_, c_cols_.data());
        // The padding rows of a reduce-scatter's last block (never solved; kept finite).
        if (j == 0 && L.rows != nullptr && L.alloc > L.len)
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
  if (res_.tier > 1) {
    if (sums.replayed) {
      // The graph's pieces, timed by its event nodes (and a coordinate outside its mode,
      // flagged on the device, thrown here).
      const kernels::AccumulateTimes a = kernels::ops::take_accumulate_times(be_);
      copy = a.copy;
      compute = a.compute;
      // The iteration's share of the copies hidden behind compute, counted for its N passes.
      passes = N_;
      overlap = passes *
                (a.copy > 0 ? std::clamp(1.0 - (sums.kernel_seconds - a.compute) / a.copy, 0.0, 1.0)
                            : 1.0);
    }
    res_.stream_copy_seconds += copy;
    res_.stream_compute_seconds += compute;
    overlap_sum_ += overlap;
    overlap_count_ += passes;
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
