#include "algo/cp_apr.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "algo/cp_constraints.hpp"
#include "algo/cp_layout.hpp"
#include "algo/degenerate.hpp"
#include "algo/holdout_score.hpp"
#include "kernels/ops/apr.hpp"
#include "kernels/ops/dense.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

namespace {
constexpr const char* kLossNames[] = {"gaussian", "poisson",  "bernoulli",
                                      "gamma",    "rayleigh", "huber"};
constexpr const char* kSolverNames[] = {"auto", "als", "apr", "gcp"};
}  // namespace

Loss parse_loss(const std::string& s) {
  for (int k = 0; k < 6; ++k)
    if (s == kLossNames[k]) return static_cast<Loss>(k);
  TESSERA_INPUT_CHECK(false, "unknown --loss '" << s
                                                << "': expected gaussian, poisson, bernoulli, "
                                                   "gamma, rayleigh or huber");
  return Loss::gaussian;
}

std::string to_string(Loss l) {
  return kLossNames[static_cast<int>(l)];
}

Solver parse_solver(const std::string& s) {
  for (int k = 0; k < 4; ++k)
    if (s == kSolverNames[k]) return static_cast<Solver>(k);
  TESSERA_INPUT_CHECK(false, "unknown --solver '" << s << "': expected auto, als, apr or gcp");
  return Solver::automatic;
}

std::string to_string(Solver s) {
  return kSolverNames[static_cast<int>(s)];
}

Solver resolve_solver(Solver s, Loss l) {
  if (s == Solver::automatic)
    return l == Loss::gaussian ? Solver::als : l == Loss::poisson ? Solver::apr : Solver::gcp;
  TESSERA_INPUT_CHECK(s != Solver::als || l == Loss::gaussian,
                      "--solver als with --loss " << to_string(l)
                                                  << ": ALS fits least squares only (use "
                                                     "--solver gcp, or auto)");
  TESSERA_INPUT_CHECK(s != Solver::apr || l == Loss::poisson,
                      "--solver apr with --loss " << to_string(l)
                                                  << ": CP-APR fits the Poisson loss only (use "
                                                     "--solver gcp, or auto)");
  return s;
}

namespace {

/// The largest rank the cuda backend's Phi kernel takes (kernels/cuda/mttkrp/phi.cu).
constexpr int kCudaAprMaxRank = 256;

/// The values' checks, agreed over `c`: finite, >= 0 and not all 0.
template <typename T>
void check_counts(const SparseTensor<T>& x, const comm::Communicator& c, const std::string& name) {
  double v[3] = {0, 0, 0};  // -min, non-finite count, max
  for (T val : x.vals) {
    const double d = static_cast<double>(val);
    if (!std::isfinite(d)) {
      v[1] += 1;
      continue;
    }
    v[0] = std::max(v[0], -d);
    v[2] = std::max(v[2], d);
  }
  c.allreduce(v, 3, comm::ReduceOp::max);
  if (v[1] > 0)
    throw CollectiveError(name +
                          ": --loss poisson: the tensor has values that are not finite "
                          "numbers (NaN or inf); Poisson CP needs counts");
  if (v[0] > 0) {
    char line[96];
    std::snprintf(line, sizeof(line), "%.6g", -v[0]);
    throw CollectiveError(name +
                          ": --loss poisson needs values >= 0 (counts), but the tensor "
                          "has the value " +
                          line + " (use --loss gaussian for signed data)");
  }
  if (v[2] <= 0)
    throw CollectiveError(name +
                          ": --loss poisson: every value of the tensor is 0, so there is "
                          "nothing to fit");
}

template <typename T>
class Apr {
 public:
  Apr(const partition::Distributed<T>& d, kernels::Backend<T>& be, const comm::Communicator& ctrl,
      const comm::Communicator& data, const CpOptions& opt, CpResult& res)
      : d_(d),
        be_(be),
        ctrl_(ctrl),
        data_(data),
        opt_(opt),
        res_(res),
        N_(d.dist.order()),
        R_(opt.rank) {}

  void setup();
  void iterate();
  void finish();

 private:
  std::int64_t rows(int n) const {
    return static_cast<std::int64_t>(d_.dist.dims[static_cast<std::size_t>(n)]);
  }
  std::size_t size(int n) const { return static_cast<std::size_t>(rows(n) * R_); }
  std::vector<const T*> pointers() const {
    std::vector<const T*> p;
    for (const auto& a : A_) p.push_back(a.data());
    return p;
  }
  /// B's columns scaled by s (host, R values): s_r == 0 leaves a zero column.
  void scale(int n, const std::vector<double>& s) {
    if (rows(n) > 0)
      kernels::ops::scale_columns(be_, A_[static_cast<std::size_t>(n)].data(), rows(n), R_,
                                  s.data());
  }
  /// lambda := the column sums of mode n's factor, which is scaled to sum 1 (0 stays 0).
  void normalise(int n) {
    std::vector<double> sums(static_cast<std::size_t>(R_), 0.0), inv(sums.size());
    if (rows(n) > 0)
      kernels::ops::column_sums(be_, A_[static_cast<std::size_t>(n)].data(), rows(n), R_,
                                sums.data());
    for (std::size_t r = 0; r < sums.size(); ++r) {
      lambda_[r] = sums[r];
      inv[r] = sums[r] > 0 ? 1.0 / sums[r] : 0.0;
    }
    scale(n, inv);
  }
  double update_mode(int n, bool shift, double& kernel, double& comm, double& solve, int* inner);
  void measure(double* loglik, double* fit);
  /// The held-out Poisson loss (identity link: f(x, m) = m - x log(max(m, apr_eps))) and AUC.
  detail::HoldoutScore holdout_eval();
  KruskalModel assemble_model();
  bool record(int it, double loglik, double fit, double kkt, int inner,
              const detail::HoldoutScore* held, const Timer& it_timer, double kernel, double comm,
              double solve, const Timer& run_timer);

  const partition::Distributed<T>& d_;
  kernels::Backend<T>& be_;
  const comm::Communicator& ctrl_;
  const comm::Communicator& data_;
  const CpOptions& opt_;
  CpResult& res_;
  const int N_, R_;
  detail::Holdout hold_;
  SparseTensor<T> view_;                    ///< the training entries with a holdout
  const SparseTensor<T>* train_ = nullptr;  ///< this rank's training entries
  std::unique_ptr<kernels::TensorHandle<T>> X_;
  std::vector<kernels::Array<T>> A_, Phi_;
  kernels::Array<T> scratch_, gram_;
  std::vector<double> lambda_;
  double norm_x_ = 0, fit_old_ = 0;
  int first_iter_ = 0, stop_signal_ = 0;
  bool time_up_ = false, all_first_ = true;
};

template <typename T>
void Apr<T>::setup() {
  const int N = N_, R = R_;
  const std::string& name = opt_.tensor_name;
  check_counts(d_.block, ctrl_, name);
  train_ = &d_.block;
  if (opt_.holdout > 0) {  // the training view: the same entries held out on any rank count
    std::vector<std::uint64_t> lo(static_cast<std::size_t>(N), 0);
    std::vector<std::int64_t> len;
    for (int n = 0; n < N; ++n) len.push_back(rows(n));
    view_ = detail::training_view(d_, false, lo, len, opt_, &hold_);
    detail::count_cold(&hold_, ctrl_);
    train_ = &view_;
    check_counts(view_, ctrl_, name + " (its training entries, --holdout)");
  }
  norm_x_ = detail::global_norm(train_->norm(), ctrl_);
  X_ = be_.prepare(*train_);
  res_.norm_x = norm_x_;
  res_.tier = X_->tier();
  res_.tier_description = X_->describe();
  for (int n = 0; n < N; ++n) {  // for benchmark floors (as cp_als reports them)
    res_.mttkrp_stream_bytes.push_back(static_cast<double>(X_->mttkrp_stream_bytes(n)));
    res_.rows_held.push_back(d_.dist.dims[static_cast<std::size_t>(n)]);
  }
  if (opt_.count_distinct_rows) res_.distinct_rows = X_->distinct_rows();
  lambda_.assign(static_cast<std::size_t>(R), 1.0);
  // Factors in this run's (possibly relabelled) row order from original rows; columns then
  // normalised to sum 1, the sums multiplied into lambda.
  std::vector<std::vector<double>> host(static_cast<std::size_t>(N));
  if (opt_.resume) {
    const KruskalModel& m = opt_.resume->model;
    for (std::size_t r = 0; r < lambda_.size(); ++r) lambda_[r] = m.lambda[r];
    bool negative = false;
    for (double l : m.lambda) negative = negative || !(l >= 0);
    for (const auto& F : m.factors)
      for (double v : F.data) negative = negative || !(v >= 0);
    TESSERA_INPUT_CHECK(!negative, name << ": --loss poisson needs a start model with weights and "
                                           "factors >= 0; the given model has negative or NaN "
                                           "entries");
    first_iter_ = 0;  // a model file starts a run ("after iteration 0")
  }
  for (int n = 0; n < N; ++n) {
    auto& h = host[static_cast<std::size_t>(n)];
    h.resize(size(n));
    std::vector<double> sums(static_cast<std::size_t>(R), 0.0);
    for (std::int64_t i = 0; i < rows(n); ++i) {
      const std::uint64_t orig = d_.dist.original_index(n, static_cast<std::uint64_t>(i));
      for (int r = 0; r < R; ++r) {
        const double v = opt_.resume ? opt_.resume->model.factors[static_cast<std::size_t>(n)](
                                           static_cast<std::int64_t>(orig), r)
                                     : initial_factor_value(opt_.seed, n, orig, r);
        h[static_cast<std::size_t>(i * R + r)] = v;
        sums[static_cast<std::size_t>(r)] += v;
      }
    }
    for (int r = 0; r < R; ++r) {
      const double s = sums[static_cast<std::size_t>(r)];
      if (s <= 0) continue;
      for (std::int64_t i = 0; i < rows(n); ++i) h[static_cast<std::size_t>(i * R + r)] /= s;
      lambda_[static_cast<std::size_t>(r)] *= s;
    }
  }
  for (int n = 0; n < N; ++n) {
    const auto& h = host[static_cast<std::size_t>(n)];
    std::vector<T> t(h.begin(), h.end());
    A_.push_back(be_.allocate(std::max<std::size_t>(t.size(), 1)));
    if (!t.empty()) be_.upload(t.data(), t.size(), A_.back().data());
    Phi_.push_back(be_.allocate(std::max<std::size_t>(t.size(), 1)));
  }
  std::size_t biggest = 1;
  for (int n = 0; n < N; ++n) biggest = std::max(biggest, size(n));
  scratch_ = be_.allocate(biggest);
  gram_ = be_.allocate(static_cast<std::size_t>(R) * static_cast<std::size_t>(R));
  be_.synchronize();
}

template <typename T>
double Apr<T>::update_mode(int n, bool shift, double& kernel, double& comm, double& solve,
                           int* inner) {
  const auto un = static_cast<std::size_t>(n);
  T* B = A_[un].data();
  T* Phi = Phi_[un].data();
  Timer ts;
  if (shift && rows(n) > 0)
    res_.apr_shifts +=
        kernels::ops::apr_shift(be_, B, Phi, rows(n), R_, opt_.apr_kappa, opt_.apr_kappa_tol);
  scale(n, lambda_);  // B = A_n diag(lambda)
  solve += ts.seconds();
  double kkt = 0;
  const auto ptrs = pointers();
  for (int i = 0; i < opt_.apr_inner_iters; ++i) {
    Timer tk;
    kernels::ops::poisson_phi(be_, *X_, n, ptrs, R_, opt_.apr_eps, Phi, nullptr);
    be_.synchronize();
    kernel += tk.seconds();
    if (data_.size() > 1 && rows(n) > 0) {
      Timer tc;
      data_.allreduce(Phi, size(n));
      be_.synchronize();
      comm += tc.seconds();
    }
    Timer tu;
    ++*inner;
    kkt = rows(n) > 0 ? kernels::ops::apr_kkt_update(be_, B, Phi, rows(n), R_, false) : 0.0;
    const bool done = kkt < opt_.tol;
    if (!done && rows(n) > 0) kernels::ops::apr_kkt_update(be_, B, Phi, rows(n), R_, true);
    solve += tu.seconds();
    if (done) break;
    all_first_ = false;  // a mode needed an update: not converged
  }
  Timer tn;
  normalise(n);
  solve += tn.seconds();
  return kkt;
}

template <typename T>
void Apr<T>::measure(double* loglik, double* fit) {
  const int R = R_;
  // The model at the stored entries: mode 0's factor with lambda folded in, in the scratch.
  if (rows(0) > 0) {
    be_.copy(A_[0].data(), size(0), scratch_.data());
    kernels::ops::scale_columns(be_, scratch_.data(), rows(0), R, lambda_.data());
  }
  auto ptrs = pointers();
  ptrs[0] = scratch_.data();
  double sums[2] = {0, 0};
  kernels::ops::poisson_phi(be_, *X_, 0, ptrs, R, opt_.apr_eps, static_cast<T*>(nullptr), sums);
  ctrl_.allreduce(sums, 2);
  // sum(model) = sum_r lambda_r prod_n (column sum r of A_n); ||model||^2 from the Grams.
  const auto RR = static_cast<std::size_t>(R) * static_cast<std::size_t>(R);
  std::vector<double> total(lambda_), had(RR, 1.0), col(static_cast<std::size_t>(R));
  std::vector<T> g(RR);
  for (int n = 0; n < N_; ++n) {
    std::fill(col.begin(), col.end(), 0.0);
    std::fill(g.begin(), g.end(), T(0));
    if (rows(n) > 0) {
      kernels::ops::column_sums(be_, A_[static_cast<std::size_t>(n)].data(), rows(n), R,
                                col.data());
      kernels::ops::gram(be_, A_[static_cast<std::size_t>(n)].data(), rows(n), R, gram_.data());
      be_.download(gram_.data(), RR, g.data());
    }
    for (std::size_t r = 0; r < col.size(); ++r) total[r] *= col[r];
    for (std::size_t e = 0; e < RR; ++e) had[e] *= static_cast<double>(g[e]);
  }
  double model_sum = 0, norm_m2 = 0;
  for (int r = 0; r < R; ++r) {
    model_sum += total[static_cast<std::size_t>(r)];
    for (int s = 0; s < R; ++s)
      norm_m2 += lambda_[static_cast<std::size_t>(r)] * lambda_[static_cast<std::size_t>(s)] *
                 had[static_cast<std::size_t>(r) * R + s];
  }
  *loglik = sums[0] - model_sum;
  const double resid2 = norm_x_ * norm_x_ - 2 * sums[1] + norm_m2;
  *fit = 1.0 - std::sqrt(std::max(resid2, 0.0)) / norm_x_;
}

template <typename T>
detail::HoldoutScore Apr<T>::holdout_eval() {
  // The factors on the host in double, lambda folded into mode 0.
  std::vector<std::vector<double>> f(static_cast<std::size_t>(N_));
  std::vector<T> h;
  for (int n = 0; n < N_; ++n) {
    h.resize(size(n));
    if (!h.empty()) be_.download(A_[static_cast<std::size_t>(n)].data(), h.size(), h.data());
    auto& fn = f[static_cast<std::size_t>(n)];
    fn.assign(h.begin(), h.end());
    if (n == 0)
      for (std::size_t e = 0; e < fn.size(); ++e)
        fn[e] *= lambda_[e % static_cast<std::size_t>(R_)];
  }
  const double eps = opt_.apr_eps;
  return detail::holdout_score(
      hold_, f, R_, d_.dist.dims, opt_.seed, ctrl_,
      [eps](double x, double m) { return m - (x != 0 ? x * std::log(std::max(m, eps)) : 0.0); });
}

template <typename T>
KruskalModel Apr<T>::assemble_model() {
  KruskalModel model;
  model.dims = d_.dist.dims;
  model.rank = R_;
  model.lambda = lambda_;
  for (int n = 0; n < N_; ++n) {
    Matrix<double> F(rows(n), R_, 0.0);
    std::vector<T> h(size(n));
    if (!h.empty()) be_.download(A_[static_cast<std::size_t>(n)].data(), h.size(), h.data());
    for (std::int64_t i = 0; i < rows(n); ++i) {
      const auto row =
          static_cast<std::int64_t>(d_.dist.original_index(n, static_cast<std::uint64_t>(i)));
      for (int r = 0; r < R_; ++r)
        F(row, r) = static_cast<double>(h[static_cast<std::size_t>(i * R_ + r)]);
    }
    model.factors.push_back(std::move(F));
  }
  return model;
}

template <typename T>
bool Apr<T>::record(int it, double loglik, double fit, double kkt, int inner,
                    const detail::HoldoutScore* held, const Timer& it_timer, double kernel,
                    double comm, double solve, const Timer& run_timer) {
  CpIteration rec;
  rec.iter = it + 1;
  rec.fit = fit;
  rec.delta = fit - fit_old_;
  rec.seconds = it_timer.seconds();
  rec.kernel = kernel;
  rec.comm = comm;
  rec.solve = solve;
  rec.loglik = loglik;
  rec.kkt = kkt;
  rec.inner_iters = inner;
  if (held != nullptr) {
    rec.holdout_loss = held->loss;
    rec.auc = held->auc;
    res_.holdout_loss = held->loss;
    res_.auc = held->auc;
  }
  res_.history.push_back(rec);
  res_.phases.add("kernel", kernel);
  res_.phases.add("comm", comm);
  res_.phases.add("solve", solve);
  res_.fit = fit;
  res_.loglik = loglik;
  res_.kkt = kkt;
  res_.inner_iters += inner;
  res_.iterations = it + 1;
  fit_old_ = fit;
  const bool done = all_first_;
  if ((opt_.max_seconds > 0 || opt_.stop != nullptr) && !done) {
    double v[2] = {run_timer.seconds(),
                   opt_.stop != nullptr ? static_cast<double>(opt_.stop->signal()) : 0.0};
    ctrl_.allreduce(v, 2, comm::ReduceOp::max);
    time_up_ = opt_.max_seconds > 0 && v[0] >= opt_.max_seconds;
    stop_signal_ = static_cast<int>(v[1]);
  }
  const bool stopping = time_up_ || stop_signal_ != 0;
  const bool last = done || stopping || it + 1 == opt_.max_iters;
  const int every = std::max(opt_.print_every, 1);
  if (opt_.print_iterations && ((it + 1) % every == 0 || last)) {
    const double tot = std::max(rec.seconds, 1e-12);
    char line[320];
    std::snprintf(line, sizeof(line),
                  "  iter %3d  loglik %.8e  kkt %.3e  inner %3d  fit %.6f  %.4f s  (kernel "
                  "%2.0f%%  comm %2.0f%%  solve %2.0f%%)",
                  rec.iter, loglik, kkt, inner, fit, rec.seconds, 100 * kernel / tot,
                  100 * comm / tot, 100 * solve / tot);
    std::string text = line;
    if (held != nullptr) {
      std::snprintf(line, sizeof(line), "  held-out loss %.6g  AUC %.4f", held->loss, held->auc);
      text += line;
    }
    log::info(text);
  }
  if (opt_.on_iteration && ((it + 1) % std::max(opt_.state_every, 1) == 0 || stopping)) {
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
void Apr<T>::iterate() {
  Timer run_timer;
  for (int it = first_iter_; it < opt_.max_iters && !time_up_ && stop_signal_ == 0; ++it) {
    Timer it_timer;
    double kernel = 0, comm = 0, solve = 0, kkt = 0;
    int inner = 0;
    all_first_ = true;
    for (int n = 0; n < N_; ++n)
      kkt = std::max(kkt, update_mode(n, it > first_iter_, kernel, comm, solve, &inner));
    Timer tm;
    double loglik = 0, fit = 0;
    measure(&loglik, &fit);
    detail::HoldoutScore held;
    if (opt_.holdout > 0) held = holdout_eval();
    solve += tm.seconds();
    if (!std::isfinite(loglik))  // from allreduced sums: agreed
      throw CollectiveError(opt_.tensor_name + ": CP-APR: the log-likelihood of iteration " +
                            std::to_string(it + 1) +
                            " is not a number: the model is 0 at a stored entry or overflowed");
    if (record(it, loglik, fit, kkt, inner, opt_.holdout > 0 ? &held : nullptr, it_timer, kernel,
               comm, solve, run_timer)) {
      res_.converged = true;
      break;
    }
  }
}

template <typename T>
void Apr<T>::finish() {
  res_.stop_reason = res_.converged      ? "converged"
                     : stop_signal_ != 0 ? "signal"
                     : time_up_          ? "time limit"
                                         : "iteration limit";
  res_.stop_signal = stop_signal_;
  res_.iteration_engine = "per-operation calls (CP-APR)";
  const comm::MaxMean t = comm::max_and_mean(ctrl_, res_.phases.get("kernel"));
  const int ran = std::max(res_.iterations - first_iter_, 1);
  res_.kernel_max_seconds = t.max / ran;
  res_.kernel_mean_seconds = t.mean / ran;
  if (opt_.holdout > 0) detail::holdout_counts(hold_, train_->nnz(), ctrl_, &res_);
  res_.model = assemble_model();
  normalize_conventional(res_.model);
  flag_degenerate(res_.model.is_zero(), "every weight is 0", &res_.stop_reason, &res_.converged);
}

}  // namespace

template <typename T>
CpResult cp_apr(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt) {
  TESSERA_INPUT_CHECK(opt.rank >= 1, "--rank must be at least 1 (got " << opt.rank << ")");
  TESSERA_INPUT_CHECK(opt.max_iters >= 1, "--iters must be at least 1");
  TESSERA_INPUT_CHECK(opt.apr_inner_iters >= 1, "--apr-inner-iters must be at least 1");
  TESSERA_INPUT_CHECK(std::isfinite(opt.apr_eps) && opt.apr_eps > 0,
                      "--apr-eps must be a positive number");
  TESSERA_EXPECTS(data.memory_space() == be.memory_space(),
                  "data communicator and backend must use the same memory space");
  TESSERA_EXPECTS(ctrl.size() == data.size() && ctrl.rank() == data.rank(),
                  "ctrl and data communicators must span the same ranks");
  TESSERA_INPUT_CHECK(opt.strategy == CommStrategy::allreduce,
                      "--loss poisson runs with --comm-strategy allreduce (every rank holds "
                      "every factor row); the layer strategy is not implemented for it");
  TESSERA_INPUT_CHECK(be.kind() != kernels::BackendKind::cuda || opt.rank <= kCudaAprMaxRank,
                      "--loss poisson on the cuda backend takes --rank up to "
                          << kCudaAprMaxRank << " (got " << opt.rank
                          << "); use --backend cpu for larger ranks");
  Timer setup_timer;
  CpResult res;
  struct RankHint {
    kernels::Backend<T>& be;
    const int was;
    RankHint(kernels::Backend<T>& b, int R) : be(b), was(b.rank_hint()) { be.set_rank_hint(R); }
    ~RankHint() { be.set_rank_hint(was); }
  } hint(be, opt.rank);
  Apr<T> apr(d, be, ctrl, data, opt, res);
  apr.setup();
  res.phases.add("setup", setup_timer.seconds());
  apr.iterate();
  apr.finish();
  return res;
}

template CpResult cp_apr<float>(const partition::Distributed<float>&, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_apr<double>(const partition::Distributed<double>&, kernels::Backend<double>&,
                                 const comm::Communicator&, const comm::Communicator&,
                                 const CpOptions&);

}  // namespace tessera::algo
