#include "algo/cp_als.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "algo/cp_constraints.hpp"
#include "algo/cp_layout.hpp"
#include "algo/host_tier.hpp"
#include "linalg/row_update.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

CommStrategy parse_comm_strategy(const std::string& s) {
  if (s == "allreduce") return CommStrategy::allreduce;
  if (s == "layer") return CommStrategy::layer;
  TESSERA_INPUT_CHECK(false, "unknown --comm-strategy '" << s << "': expected allreduce or layer");
  return CommStrategy::allreduce;
}

std::string to_string(CommStrategy s) {
  return s == CommStrategy::allreduce ? "allreduce" : "layer";
}

double initial_factor_value(std::uint64_t seed, int mode, std::uint64_t row, int col) {
  return uniform01(hash_keys(seed, static_cast<std::uint64_t>(mode) + 0x100, row,
                             static_cast<std::uint64_t>(col)));
}

namespace {

using detail::make_device_loop;
using detail::make_layouts;
using detail::ModeLayout;

/// Input checks both overloads make before any work.
template <typename T>
void check_cp_inputs(kernels::Backend<T>& be, const comm::Communicator& ctrl,
                     const comm::Communicator& data, const CpOptions& opt) {
  TESSERA_INPUT_CHECK(opt.rank >= 1, "--rank must be at least 1 (got " << opt.rank << ")");
  TESSERA_INPUT_CHECK(opt.max_iters >= 1, "--iters must be at least 1");
  TESSERA_EXPECTS(data.memory_space() == be.memory_space(),
                  "data communicator and backend must use the same memory space");
  TESSERA_EXPECTS(ctrl.size() == data.size() && ctrl.rank() == data.rank(),
                  "ctrl and data communicators must span the same ranks");
  TESSERA_INPUT_CHECK(opt.inner_sweeps >= 1,
                      "--inner-sweeps must be at least 1 (got " << opt.inner_sweeps << ")");
  TESSERA_INPUT_CHECK(opt.holdout >= 0 && opt.holdout < 1,
                      "--holdout must be a fraction in [0, 1) (got " << opt.holdout << ")");
  for (double v : opt.l1)
    TESSERA_INPUT_CHECK(std::isfinite(v) && v >= 0, "--l1 values must be finite and >= 0");
  for (double v : opt.l2)
    TESSERA_INPUT_CHECK(std::isfinite(v) && v >= 0, "--l2 values must be finite and >= 0");
}

/// Throws InputError unless `s` is the state of a run on a tensor of shape `dims` with
/// rank R (decided from data every rank shares, so thrown on every rank alike).
void check_cp_state(const CpState& s, const std::vector<std::uint64_t>& dims, int R) {
  TESSERA_INPUT_CHECK(s.model.dims == dims, "resume: the saved factors have dims "
                                                << format_dims(s.model.dims)
                                                << ", the tensor has dims " << format_dims(dims));
  TESSERA_INPUT_CHECK(
      s.model.rank == R && static_cast<int>(s.model.lambda.size()) == R,
      "resume: the saved model has rank " << s.model.rank << ", this run rank " << R);
  TESSERA_INPUT_CHECK(s.model.factors.size() == dims.size(), "resume: the saved model has "
                                                                 << s.model.factors.size()
                                                                 << " factors for an order-"
                                                                 << dims.size() << " tensor");
  for (std::size_t n = 0; n < dims.size(); ++n)
    TESSERA_INPUT_CHECK(s.model.factors[n].rows == static_cast<std::int64_t>(dims[n]) &&
                            s.model.factors[n].cols == R &&
                            s.model.factors[n].data.size() == dims[n] * static_cast<std::size_t>(R),
                        "resume: the saved factor of mode " << n << " has the wrong shape");
  TESSERA_INPUT_CHECK(
      s.iteration >= 0 && static_cast<int>(s.fit_history.size()) == s.iteration,
      "resume: " << s.fit_history.size() << " saved fits for " << s.iteration << " iterations");
}

/// ||X|| over the ranks of `c` from each rank's scaled norm (Backend value_norm): the largest
/// times the root of the summed squares of the ratios, so no step overflows or underflows.
double global_norm(double mine, const comm::Communicator& c) {
  double mx = mine;
  c.allreduce(&mx, 1, comm::ReduceOp::max);
  if (mx == 0 || !std::isfinite(mx)) return mx;
  double r = (mine / mx) * (mine / mx);
  c.allreduce(&r, 1);
  return mx * std::sqrt(r);
}

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

/// The ALS loop both overloads share. `X` holds this rank's nonzeros with coordinates
/// relative to the held chunks (lay[n].lo; 0 for allreduce), `dist` describes the global
/// tensor and the ownership, `lay` comes from make_layouts(dist, ...). `setup_timer`

/// started before the caller's own setup (prepare), which counts into phase "setup".
template <typename T>
CpResult run_als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
                 std::vector<ModeLayout>& lay, kernels::Backend<T>& be,
                 const comm::Communicator& ctrl, const comm::Communicator& data,
                 const CpOptions& opt, const Timer& setup_timer,
                 const kernels::TensorHandle<T>* Xones = nullptr,
                 const detail::Holdout* hold = nullptr) {
  const int N = dist.order();
  const int R = opt.rank;
  const bool layer = opt.strategy == CommStrategy::layer;
  const auto& dims = dist.dims;
  TESSERA_EXPECTS(X.order() == N && static_cast<int>(lay.size()) == N,
                  "tensor handle of order " << X.order() << " for a distribution of order " << N);
  CpResult res;
  if (opt.resume) check_cp_state(*opt.resume, dims, R);
  std::vector<linalg::RowUpdate> upd;
  bool any_rowwise = opt.observed_only;
  for (int n = 0; n < N; ++n) {
    upd.push_back(detail::update_of(opt, n, N));
    any_rowwise = any_rowwise || upd.back().descent() || upd.back().l2 > 0;
  }
  TESSERA_EXPECTS(!opt.observed_only || Xones != nullptr,
                  "observed_only needs the pattern handle (the Distributed overload)");
  const int W = static_cast<int>(linalg::packed_size(R));

  if (opt.print_iterations) {
    // Factor rows entering the update collectives each iteration (largest over ranks).
    double rows = 0;
    for (const auto& L : lay) rows += static_cast<double>(ctrl.size() > 1 ? L.len : 0);
    ctrl.allreduce(&rows, 1, comm::ReduceOp::max);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "factor updates (%s): %.0f factor rows x R=%d per rank per iteration "
                  "(%.3g MB), plus %d Gram matrices of %dx%d",
                  to_string(opt.strategy).c_str(), rows, R, rows * R * sizeof(T) / 1e6,
                  lay.empty() || lay[0].rows == nullptr ? 0 : N, R, R);
    log::info(line);
  }

  res.tier = X.tier();
  res.tier_description = X.describe();
  log_memory_tier(res.tier, res.tier_description, ctrl, opt.print_iterations);
  if (opt.count_distinct_rows) res.distinct_rows = X.distinct_rows();
  for (int n = 0; n < N; ++n) {
    res.mttkrp_stream_bytes.push_back(static_cast<double>(X.mttkrp_stream_bytes(n)));
    res.rows_held.push_back(static_cast<std::uint64_t>(lay[static_cast<std::size_t>(n)].len));
  }

  // ||X||: the plain sum of squares while it is far from the ends of the double range
  // (results as ever), else the handles' scaled norms (values near 1e200 or 1e-200). The
  // sums are allreduced, so every rank decides alike and the errors below are agreed.
  const std::string& name = opt.tensor_name;
  auto throw_overflow = [&](int n) {
    throw CollectiveError(
        name + ": CP-ALS: the update of mode " + std::to_string(n) + " overflowed (" +
        (std::is_same_v<T, float> ? "single" : "double") +
        " precision): the MTTKRP sums exceed its range; " +
        (std::is_same_v<T, float> ? "run with --precision double" : "rescale the values"));
  };
  double norm_x2 = X.value_norm_squared();
  ctrl.allreduce(&norm_x2, 1);
  const bool plain = std::isfinite(norm_x2) && norm_x2 >= 0x1p-1000 && norm_x2 <= 0x1p+1000;
  const double norm_x = plain ? std::sqrt(norm_x2) : global_norm(X.value_norm(), ctrl);
  // The cuda tier-1 handle does not override value_norm yet: it sums unscaled squares, so
  // there values under ~1e-154 in double also give 0 (tiers 2-3 keep scaled chunk norms).
  const bool unscaled =
      std::is_same_v<T, double> && X.tier() == 1 && be.kind() == kernels::BackendKind::cuda;
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
  res.norm_x = norm_x;
  // The loop computes on c X (exactly: c is a power of two): MTTKRP outputs are scaled as
  // they come out, lambda holds c times the model's weights (divided by c in the model).
  const double c = loop_scale<T>(norm_x);
  const double norm_cx = c == 1.0 ? norm_x : c * norm_x;
  const double norm_cx2 = c == 1.0 && plain ? norm_x2 : norm_cx * norm_cx;
  const std::vector<double> c_cols(static_cast<std::size_t>(R), c);

  // ---- factors: chunk rows held by this rank, initialised from global row ids (or taken
  // from the resumed state, saved in original index order) ----
  std::vector<kernels::Array<T>> A(static_cast<std::size_t>(N));
  std::vector<kernels::Array<T>> G(static_cast<std::size_t>(N));
  std::int64_t max_alloc = 0, max_b = 0;
  for (int n = 0; n < N; ++n) {
    const auto& L = lay[static_cast<std::size_t>(n)];
    std::vector<T> h(static_cast<std::size_t>(L.alloc * R), T(0));
    for (std::int64_t i = 0; i < L.len; ++i) {
      const std::uint64_t orig = dist.original_index(n, L.lo + static_cast<std::uint64_t>(i));
      for (int r = 0; r < R; ++r)
        h[static_cast<std::size_t>(i * R + r)] =
            static_cast<T>(opt.resume ? opt.resume->model.factors[static_cast<std::size_t>(n)](
                                            static_cast<std::int64_t>(orig), r)
                                      : initial_factor_value(opt.seed, n, orig, r));
    }
    A[static_cast<std::size_t>(n)] =
        be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(L.alloc, 1) * R));
    if (!h.empty()) be.upload(h.data(), h.size(), A[static_cast<std::size_t>(n)].data());
    G[static_cast<std::size_t>(n)] = be.allocate(static_cast<std::size_t>(R * R));
    max_alloc = std::max(max_alloc, L.alloc);
    max_b = std::max(max_b, L.b);
  }
  auto M = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_alloc, 1) * R));
  auto Mown = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_b, 1) * R));
  auto Aown = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_b, 1) * R));
  auto V = be.allocate(static_cast<std::size_t>(R * R));
  // Completion: each mode's packed outer products of its factor rows, the wide MTTKRP of
  // the pattern (the rows' packed Grams) and its owned block.
  std::vector<kernels::Array<T>> P;
  kernels::Array<T> MW, MWown;
  if (opt.observed_only) {
    for (int n = 0; n < N; ++n) {
      const auto& L = lay[static_cast<std::size_t>(n)];
      P.push_back(be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(L.alloc, 1) * W)));
      if (L.len > 0)
        be.pack_outer(A[static_cast<std::size_t>(n)].data(), L.len, R, P.back().data());
    }
    MW = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_alloc, 1) * W));
    MWown = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_b, 1) * W));
  }
  std::vector<const T*> pptr(static_cast<std::size_t>(N));

  // Gram of the owned rows of each factor, summed over the ranks when the rows are split.
  auto update_gram = [&](int n, const T* own_rows, std::int64_t own_n) {
    be.gram(own_rows, own_n, R, G[static_cast<std::size_t>(n)].data());
    if (lay[static_cast<std::size_t>(n)].rows != nullptr)
      data.allreduce(G[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R * R));
  };
  for (int n = 0; n < N; ++n) {
    const auto& L = lay[static_cast<std::size_t>(n)];
    update_gram(n, A[static_cast<std::size_t>(n)].data() + L.own_lo * R, L.own_n);
  }
  be.synchronize();
  res.phases.add("setup", setup_timer.seconds());

  std::vector<double> lambda(static_cast<std::size_t>(R), 1.0);
  std::vector<double> host_norms(static_cast<std::size_t>(R)), scale(static_cast<std::size_t>(R));
  std::vector<double> dots(static_cast<std::size_t>(R));
  std::vector<std::vector<T>> Gh(static_cast<std::size_t>(N),
                                 std::vector<T>(static_cast<std::size_t>(R * R)));
  std::vector<const T*> fptr(static_cast<std::size_t>(N));
  auto dev = make_device_loop(be, lay, upd, A, G, M, R, ctrl, res, opt, hold != nullptr);
  double fit_old = 0;
  double overlap_sum = 0;
  int overlap_count = 0;
  int first_iter = 0;
  if (opt.resume) {
    // Continue the saved run: its lambda, fit history and previous fit.
    const CpState& s = *opt.resume;
    lambda = s.model.lambda;
    if (c != 1.0)
      for (auto& l : lambda) l *= c;
    first_iter = s.iteration;
    for (int i = 0; i < s.iteration; ++i) {
      CpIteration rec;
      rec.iter = i + 1;
      rec.fit = s.fit_history[static_cast<std::size_t>(i)];
      rec.delta = rec.fit - (i > 0 ? s.fit_history[static_cast<std::size_t>(i - 1)] : 0.0);
      res.history.push_back(rec);
    }
    fit_old = s.iteration > 0 ? s.fit_history.back() : 0.0;
    res.fit = fit_old;
    res.iterations = s.iteration;
    res.converged = s.converged;
  }

  // The model, complete on every rank, rows in original index order (collective for the
  // layer strategy: each rank contributes its owned rows).
  auto assemble_model = [&]() {
    KruskalModel model;
    model.dims = dims;
    model.rank = R;
    model.lambda = lambda;
    if (c != 1.0)
      for (auto& l : model.lambda) l /= c;
    for (int n = 0; n < N; ++n) {
      const auto& L = lay[static_cast<std::size_t>(n)];
      Matrix<double> F(static_cast<std::int64_t>(dims[static_cast<std::size_t>(n)]), R, 0.0);
      std::vector<T> h(static_cast<std::size_t>(L.len * R));
      if (!h.empty()) be.download(A[static_cast<std::size_t>(n)].data(), h.size(), h.data());
      // Rows go back to their original indices (the block may be relabelled, DESIGN §4).
      const std::int64_t first = layer ? L.own_lo : 0;
      const std::int64_t count = layer ? L.own_n : L.len;
      for (std::int64_t i = first; i < first + count; ++i) {
        const auto row =
            static_cast<std::int64_t>(dist.original_index(n, L.lo + static_cast<std::uint64_t>(i)));
        for (int r = 0; r < R; ++r)
          F(row, r) = static_cast<double>(h[static_cast<std::size_t>(i * R + r)]);
      }
      if (layer) ctrl.allreduce(F.data.data(), F.data.size());
      model.factors.push_back(std::move(F));
    }
    return model;
  };

  // Held-out entries: the RMSE of the model on them (collective), and of the training mean.
  std::vector<std::vector<T>> Ah(static_cast<std::size_t>(N));
  auto holdout_rmse = [&](double mean, bool use_mean) {
    double se = 0;
    if (!hold->vals.empty()) {
      if (!use_mean)
        for (int m = 0; m < N; ++m) {
          const auto& L = lay[static_cast<std::size_t>(m)];
          auto& h = Ah[static_cast<std::size_t>(m)];
          h.resize(static_cast<std::size_t>(L.len * R));
          if (!h.empty()) be.download(A[static_cast<std::size_t>(m)].data(), h.size(), h.data());
        }
      se = detail::holdout_squared_error(*hold, Ah, lambda, R, c, mean, use_mean);
    }
    ctrl.allreduce(&se, 1);
    return res.holdout_entries > 0 ? std::sqrt(se / static_cast<double>(res.holdout_entries))
                                   : std::numeric_limits<double>::quiet_NaN();
  };
  if (hold != nullptr) {
    double sums[3] = {hold->train_sum, static_cast<double>(hold->train_count),
                      static_cast<double>(hold->vals.size())};
    ctrl.allreduce(sums, 3);
    res.training_entries = static_cast<std::uint64_t>(sums[1]);
    res.holdout_entries = static_cast<std::uint64_t>(sums[2]);
    res.mean_predictor_rmse = holdout_rmse(sums[1] > 0 ? sums[0] / sums[1] : 0.0, true);
    if (opt.print_iterations) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "held out %llu of %llu stored entries (--holdout %g, seed %llu); predicting "
                    "the training mean gives RMSE %.6g on them",
                    static_cast<unsigned long long>(res.holdout_entries),
                    static_cast<unsigned long long>(res.holdout_entries + res.training_entries),
                    opt.holdout, static_cast<unsigned long long>(opt.holdout_seed),
                    res.mean_predictor_rmse);
      log::info(line);
    }
  }

  TESSERA_EXPECTS(opt.max_seconds >= 0 && std::isfinite(opt.max_seconds),
                  "max_seconds >= 0, got " << opt.max_seconds);
  const int print_every = std::max(opt.print_every, 1);
  bool time_up = false;
  Timer run_timer;  // --max-seconds counts from here (this process's iterations)
  for (int it = first_iter; it < opt.max_iters && !res.converged && !time_up; ++it) {
    Timer iter_timer;
    double t_kernel = 0, t_comm = 0, t_solve = 0;
    double quad = 0;  // observed_only: sum_i a_i^T G_i a_i of the last mode (the model's norm)
    kernels::CpLoopSums sums;
    if (dev) {
      // The whole iteration on the device: the MTTKRPs from here, the rest in the loop.
      sums = dev->iterate(
          [&](int n) {
            for (int m = 0; m < N; ++m)
              fptr[static_cast<std::size_t>(m)] = A[static_cast<std::size_t>(m)].data();
            be.mttkrp(X, n, fptr, R, M.data());
            if (c != 1.0)
              be.scale_columns(M.data(), lay[static_cast<std::size_t>(n)].len, R, c_cols.data());
          },
          it == 0);
      if (sums.bad_mode >= 0) throw_overflow(sums.bad_mode);
      res.solve_fallbacks += sums.fallbacks;
      t_kernel = sums.kernel_seconds;
      t_solve = sums.solve_seconds;
    }
    for (int n = 0; n < N && !dev; ++n) {
      auto& L = lay[static_cast<std::size_t>(n)];
      for (int m = 0; m < N; ++m)
        fptr[static_cast<std::size_t>(m)] = A[static_cast<std::size_t>(m)].data();

      Timer t;
      be.mttkrp(X, n, fptr, R, M.data());
      if (c != 1.0) be.scale_columns(M.data(), L.len, R, c_cols.data());
      if (res.tier > 1) {
        res.stream_copy_seconds += X.last_copy_seconds();
        res.stream_compute_seconds += X.last_compute_seconds();
        overlap_sum += X.overlap_fraction();
        ++overlap_count;
      }
      if (L.alloc > L.len)
        be.fill(M.data() + L.len * R, static_cast<std::size_t>((L.alloc - L.len) * R), T(0));
      if (opt.observed_only) {
        // The rows' packed Grams: the MTTKRP of the pattern with the packed outer products.
        for (int m = 0; m < N; ++m)
          pptr[static_cast<std::size_t>(m)] = P[static_cast<std::size_t>(m)].data();
        be.mttkrp(*Xones, n, pptr, W, MW.data());
        if (L.alloc > L.len)
          be.fill(MW.data() + L.len * W, static_cast<std::size_t>((L.alloc - L.len) * W), T(0));
      }
      be.synchronize();
      t_kernel += t.seconds();

      t.reset();
      T* Mrows = M.data();
      const bool split = L.rows != nullptr;
      T* MWrows = MW.data();
      if (split) {
        L.rows->reduce_scatter(M.data(), Mown.data(), static_cast<std::size_t>(L.b * R));
        Mrows = Mown.data();
        if (opt.observed_only) {
          L.rows->reduce_scatter(MW.data(), MWown.data(), static_cast<std::size_t>(L.b * W));
          MWrows = MWown.data();
        }
      }
      be.synchronize();
      t_comm += t.seconds();

      t.reset();
      T* own = split ? Aown.data() : A[static_cast<std::size_t>(n)].data();
      if (N == 1) {
        be.fill(V.data(), static_cast<std::size_t>(R * R), T(1));
      } else if (!opt.observed_only) {
        std::vector<const T*> gs;
        for (int m = 0; m < N; ++m)
          if (m != n) gs.push_back(G[static_cast<std::size_t>(m)].data());
        be.hadamard(gs, R, V.data());
      }
      const linalg::RowUpdate& u = upd[static_cast<std::size_t>(n)];
      if (split) be.fill(own, static_cast<std::size_t>(L.b * R), T(0));
      if (!opt.observed_only && !u.descent() && u.l2 == 0) {
        if (L.own_n > 0) be.copy(Mrows, static_cast<std::size_t>(L.own_n * R), own);
        if (be.solve_normal(own, L.own_n, V.data(), R)) ++res.solve_fallbacks;
      } else {
        if (u.descent() && L.own_n > 0) {
          // Coordinate descent starts from the current rows with the weights: the factor
          // of the model whose other factors are the normalised ones.
          if (split)
            be.copy(A[static_cast<std::size_t>(n)].data() + L.own_lo * R,
                    static_cast<std::size_t>(L.own_n * R), own);
          be.scale_columns(own, L.own_n, R, lambda.data());
        }
        linalg::RowUpdate uc = u;
        uc.l1 = u.l1 * c;  // the loop solves for c X: the linear terms scale by c
        double q = 0;
        res.ridged_rows +=
            be.row_update(own, Mrows, L.own_n, R, opt.observed_only ? nullptr : V.data(),
                          opt.observed_only ? MWrows : nullptr, uc,
                          opt.observed_only && n == N - 1 ? &q : nullptr);
        if (n == N - 1) quad = q;
      }
      const NormKind kind = it == 0 ? NormKind::two : NormKind::max;
      be.column_norms(own, L.own_n, R, kind, host_norms.data());
      be.synchronize();
      t_solve += t.seconds();
      t.reset();
      if (split)
        ctrl.allreduce(host_norms.data(), static_cast<std::size_t>(R),
                       kind == NormKind::two ? comm::ReduceOp::sum : comm::ReduceOp::max);
      t_comm += t.seconds();
      t.reset();
      for (int r = 0; r < R; ++r) {
        const double s = host_norms[static_cast<std::size_t>(r)];
        // Agreed on every rank (the norms are allreduced when the rows are split).
        if (!std::isfinite(s)) throw_overflow(n);
        double l = kind == NormKind::two ? std::sqrt(s) : std::max(s, 1.0);
        lambda[static_cast<std::size_t>(r)] = l;
        scale[static_cast<std::size_t>(r)] = l > 0 ? 1.0 / l : 1.0;
      }
      be.scale_columns(own, L.own_n, R, scale.data());
      be.gram(own, L.own_n, R, G[static_cast<std::size_t>(n)].data());
      if (n == N - 1) be.column_dots(Mrows, own, L.own_n, R, dots.data());
      be.synchronize();
      t_solve += t.seconds();

      t.reset();
      if (split) {
        data.allreduce(G[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R * R));
        L.rows->allgather(Aown.data(), A[static_cast<std::size_t>(n)].data(),
                          static_cast<std::size_t>(L.b * R));
        if (n == N - 1) ctrl.allreduce(dots.data(), static_cast<std::size_t>(R));
        if (n == N - 1 && opt.observed_only) ctrl.allreduce(&quad, 1);
      }
      if (opt.observed_only && L.len > 0)
        be.pack_outer(A[static_cast<std::size_t>(n)].data(), L.len, R,
                      P[static_cast<std::size_t>(n)].data());
      be.synchronize();
      t_comm += t.seconds();
    }

    // ---- fit without forming the model ----
    Timer tf;
    for (int n = 0; n < N && !dev; ++n)
      be.download(G[static_cast<std::size_t>(n)].data(), static_cast<std::size_t>(R * R),
                  Gh[static_cast<std::size_t>(n)].data());
    double norm_m2 = sums.norm_m2, inner = sums.inner;  // the device loop's sums
    for (int r = 0; r < R && !dev; ++r) {
      inner += lambda[static_cast<std::size_t>(r)] * dots[static_cast<std::size_t>(r)];
      for (int s = 0; s < R && !opt.observed_only; ++s) {
        double p = lambda[static_cast<std::size_t>(r)] * lambda[static_cast<std::size_t>(s)];
        for (int n = 0; n < N; ++n)
          p *= static_cast<double>(
              Gh[static_cast<std::size_t>(n)][static_cast<std::size_t>(r * R + s)]);
        norm_m2 += p;
      }
    }
    if (opt.observed_only) norm_m2 = quad;  // over the stored entries only
    const double resid2_raw = norm_cx2 + norm_m2 - 2 * inner;
    // ||X - model||^2 < 0 beyond rounding: ||X||^2 understates the tensor the MTTKRP sees
    // (a handle whose repeated coordinates value_norm_squared() counts separately), so no
    // fit can be given: stop rather than print a clamped number. The planner keeps such
    // inputs out of the streamed tiers (stores must have unique coordinates there); the
    // values are the same on every rank, so every rank throws alike.
    TESSERA_INPUT_CHECK(opt.approximate_fit || resid2_raw >= -1e-3 * std::max(norm_cx2, norm_m2),
                        "CP-ALS fit: ||X||^2 + ||model||^2 - 2 <X, model> = "
                            << resid2_raw
                            << " < 0, so ||X||^2 understates the tensor (repeated "
                               "coordinates counted separately in ||X||^2 but summed by the "
                               "MTTKRP); deduplicate the input (tessera convert IN OUT.h5)");
    const double resid2 = std::max(resid2_raw, 0.0);
    const double fit = 1.0 - std::sqrt(resid2) / norm_cx;
    if (!std::isfinite(fit))  // from allreduced sums: agreed
      throw CollectiveError(name + ": CP-ALS: the fit of iteration " + std::to_string(it + 1) +
                            " is not a number (||model||^2 = " + std::to_string(norm_m2) +
                            ", <X, model> = " + std::to_string(inner) + " for ||X|| scaled to " +
                            std::to_string(norm_cx) + "): the factors overflowed");

    t_solve += tf.seconds();

    CpIteration rec;
    rec.iter = it + 1;
    rec.fit = fit;
    rec.delta = fit - fit_old;
    rec.seconds = iter_timer.seconds();
    rec.kernel = t_kernel;
    rec.comm = t_comm;
    rec.solve = t_solve;
    res.history.push_back(rec);
    res.phases.add("kernel", t_kernel);
    res.phases.add("comm", t_comm);
    res.phases.add("solve", t_solve);
    res.fit = fit;
    res.iterations = it + 1;
    const bool done = it > 0 && std::abs(fit - fit_old) < opt.tol;
    if (opt.max_seconds > 0 && !done) {
      // The slowest rank's clock, so that every rank stops after the same iteration.
      double elapsed = run_timer.seconds();
      ctrl.allreduce(&elapsed, 1, comm::ReduceOp::max);
      time_up = elapsed >= opt.max_seconds;
    }
    const bool last = done || time_up || it + 1 == opt.max_iters;
    if (hold != nullptr && ((it + 1) % print_every == 0 || last)) {
      // On the iterations that print (--print-every) and the last: a pass over the held-out
      // entries on the host, counted in this iteration's solve time.
      Timer tv;
      res.validation_rmse = holdout_rmse(0.0, false);
      auto& h = res.history.back();
      h.validation_rmse = res.validation_rmse;
      const double s = tv.seconds();
      h.solve += s;
      h.seconds += s;
      t_solve += s;
      res.phases.add("solve", s);
      rec = h;
    }
    if (opt.print_iterations && ((it + 1) % print_every == 0 || last)) {
      const double tot = std::max(rec.seconds, 1e-12);
      char line[320];
      std::snprintf(line, sizeof(line),
                    "  iter %3d  fit %.6f  delta %+.3e  %.4f s  (kernel %2.0f%%  comm %2.0f%%  "
                    "solve %2.0f%%)",
                    rec.iter, fit, rec.delta, rec.seconds, 100 * t_kernel / tot, 100 * t_comm / tot,
                    100 * t_solve / tot);
      std::string text = line;
      if (hold != nullptr) {
        std::snprintf(line, sizeof(line), "  validation RMSE %.6g", rec.validation_rmse);
        text += line;
      }
      log::info(text);
    }
    fit_old = fit;
    // A run stopped by its time limit hands over its last state too (a checkpoint to resume).
    if (opt.on_iteration && ((it + 1) % std::max(opt.state_every, 1) == 0 || time_up)) {
      if (dev) dev->lambda(lambda.data());
      CpState st;
      st.iteration = it + 1;
      st.model = assemble_model();
      for (const auto& h : res.history) st.fit_history.push_back(h.fit);
      st.converged = done;
      st.time_limit = time_up;
      opt.on_iteration(st);
    }
    if (done) {
      res.converged = true;
      break;
    }
  }

  if (overlap_count > 0) res.stream_overlap = overlap_sum / overlap_count;
  res.stop_reason = res.converged ? "converged" : time_up ? "time limit" : "iteration limit";

  if (dev) {
    dev->lambda(lambda.data());
    res.iteration_engine = dev->describe();
  }
  res.model = assemble_model();
  return res;
}

}  // namespace

template <typename T>
CpResult cp_als(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt) {
  check_cp_inputs(be, ctrl, data, opt);
  const auto& dist = d.dist;
  const int N = dist.order();
  const bool layer = opt.strategy == CommStrategy::layer;
  if (layer && dist.scheme != partition::Scheme::grid)  // the same on every rank: agreed
    throw CollectiveError("the layer strategy needs the grid partition (use --partition grid)");
  TESSERA_EXPECTS(d.block.order() == N,
                  "block of order " << d.block.order() << " for a distribution of order " << N);
  Timer setup_timer;
  auto lay = make_layouts(dist, layer, data);

  // The kernel's view of the local block: global coordinates (allreduce), or shifted to
  // the held chunks (layer); with a holdout, its training entries only.
  const bool plain_view = !layer && opt.holdout == 0 && !opt.observed_only;
  std::unique_ptr<kernels::TensorHandle<T>> X, Xones;
  if (plain_view) {
    X = be.prepare(d.block);
    return run_als(*X, dist, lay, be, ctrl, data, opt, setup_timer);
  }
  std::vector<std::uint64_t> lo;
  std::vector<std::int64_t> len;
  for (const auto& L : lay) {
    lo.push_back(L.lo);
    len.push_back(L.len);
  }
  detail::Holdout hold;
  SparseTensor<T> view = detail::training_view(d, layer, lo, len, opt, &hold);
  X = be.prepare(view);
  if (opt.observed_only) {
    std::fill(view.vals.begin(), view.vals.end(), T(1));  // the pattern of the stored entries
    Xones = be.prepare(view);
  }
  return run_als(*X, dist, lay, be, ctrl, data, opt, setup_timer, Xones.get(),
                 opt.holdout > 0 ? &hold : nullptr);
}

template <typename T>
CpResult cp_als(const kernels::TensorHandle<T>& X, const std::vector<std::uint64_t>& dims,
                nnz_t global_nnz, kernels::Backend<T>& be, const comm::Communicator& ctrl,
                const comm::Communicator& data, const CpOptions& opt) {
  check_cp_inputs(be, ctrl, data, opt);
  TESSERA_INPUT_CHECK(!opt.observed_only && opt.holdout == 0,
                      opt.tensor_name
                          << ": --observed-only and --holdout need the tensor distributed in "
                             "memory (memory tier 1 from a text file or a store read whole); "
                             "this run holds it as a prepared or streamed handle (tier "
                          << X.tier() << "): use --tier 1 (or a larger memory budget)");
  TESSERA_INPUT_CHECK(opt.strategy == CommStrategy::allreduce,
                      "CP-ALS on a tensor prepared in the backend supports only the allreduce "
                      "strategy: the layer strategy needs a grid partition of the nonzeros "
                      "(distribute them with the grid scheme and use --comm-strategy layer "
                      "on that, or use --comm-strategy allreduce)");
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 1 && N <= kMaxOrder,
                      "tensor order must be 1.." << kMaxOrder << " (got " << N << ")");
  Timer setup_timer;
  // Checked on every rank together, so a mismatch on one rank throws everywhere.
  const std::int32_t bad_dims = X.dims() != dims ? 1 : 0;
  std::int32_t bad_dims_any = bad_dims;
  ctrl.allreduce(&bad_dims_any, 1, comm::ReduceOp::max);
  TESSERA_INPUT_CHECK(bad_dims_any == 0,
                      "cp_als: the tensor handle's dims differ from the global dims "
                          << (bad_dims ? "on this rank" : "on another rank")
                          << " (the handle must hold global coordinates)");
  const nnz_t total = ctrl.allreduce_value(static_cast<std::int64_t>(X.nnz()));
  TESSERA_INPUT_CHECK(total == global_nnz, "cp_als: the handles hold "
                                               << total << " nonzeros over all ranks, but "
                                               << global_nnz << " were announced");

  // The global description: nnz scheme, no relabelling (identity original_index).
  partition::Distribution dist;
  dist.scheme = partition::Scheme::nnz;
  dist.nranks = ctrl.size();
  dist.rank = ctrl.rank();
  dist.dims = dims;
  dist.grid.assign(static_cast<std::size_t>(N), 1);
  dist.coords.assign(static_cast<std::size_t>(N), 0);
  for (int n = 0; n < N; ++n) dist.bounds.push_back({0, dims[static_cast<std::size_t>(n)]});
  dist.global_nnz = global_nnz;
  auto lay = make_layouts(dist, false, data);
  return run_als(X, dist, lay, be, ctrl, data, opt, setup_timer);
}

template CpResult cp_als<float>(const partition::Distributed<float>&, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_als<double>(const partition::Distributed<double>&, kernels::Backend<double>&,
                                 const comm::Communicator&, const comm::Communicator&,
                                 const CpOptions&);
template CpResult cp_als<float>(const kernels::TensorHandle<float>&,
                                const std::vector<std::uint64_t>&, nnz_t, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_als<double>(const kernels::TensorHandle<double>&,
                                 const std::vector<std::uint64_t>&, nnz_t,
                                 kernels::Backend<double>&, const comm::Communicator&,
                                 const comm::Communicator&, const CpOptions&);

}  // namespace tessera::algo
