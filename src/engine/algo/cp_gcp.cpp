#include "algo/cp_gcp.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "algo/cp_constraints.hpp"
#include "algo/cp_layout.hpp"
#include "algo/degenerate.hpp"
#include "algo/holdout_score.hpp"
#include "kernels/ops/gcp.hpp"
#include "plan/planner.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

namespace {

constexpr std::uint64_t kEvalEpoch = ~std::uint64_t{0};

static_assert(static_cast<int>(Loss::huber) == static_cast<int>(kernels::GcpLoss::huber) &&
                  static_cast<int>(Loss::poisson) == static_cast<int>(kernels::GcpLoss::poisson),
              "algo::Loss and kernels::GcpLoss list the losses in the same order");

kernels::GcpLossSpec spec_of(const CpOptions& opt) {
  kernels::GcpLossSpec s;
  s.kind = static_cast<kernels::GcpLoss>(static_cast<int>(opt.loss));  // the same order
  s.huber_delta = opt.gcp_huber_delta;
  return s;
}

/// The values' checks for the loss, agreed over `c`.
template <typename T>
void check_values(const SparseTensor<T>& x, Loss loss, const comm::Communicator& c,
                  const std::string& name) {
  double v[3] = {0, 0, 0};  // non-finite, negative, not 0/1
  double example[3] = {0, 0, 0};
  for (T val : x.vals) {
    const double d = static_cast<double>(val);
    if (!std::isfinite(d)) {
      v[0] += 1;
    } else if (d < 0) {
      v[1] += 1;
      example[1] = d;
    } else if (d != 0 && d != 1) {
      v[2] += 1;
      example[2] = d;
    }
  }
  c.allreduce(v, 3);
  if (v[0] > 0) throw CollectiveError(name + ": the tensor has values that are not finite numbers");
  const std::string l = to_string(loss);
  const bool counts = loss == Loss::poisson || loss == Loss::gamma || loss == Loss::rayleigh;
  if ((counts || loss == Loss::bernoulli) && v[1] > 0) {
    double e = example[1];
    c.allreduce(&e, 1, comm::ReduceOp::min);
    char line[64];
    std::snprintf(line, sizeof(line), "%.6g", e);
    throw CollectiveError(name + ": --loss " + l + " needs values >= 0, but the tensor has " +
                          std::to_string(static_cast<long long>(v[1])) +
                          " negative value(s), e.g. " + line);
  }
  if (loss == Loss::bernoulli && v[2] > 0) {
    double e = example[2];
    c.allreduce(&e, 1, comm::ReduceOp::max);
    char line[64];
    std::snprintf(line, sizeof(line), "%.6g", e);
    throw CollectiveError(name + ": --loss bernoulli needs values 0 or 1, but the tensor has " +
                          std::to_string(static_cast<long long>(v[2])) + " other value(s), e.g. " +
                          line + " (use --loss poisson for counts)");
  }
}

template <typename T>
class Gcp {
 public:
  Gcp(const partition::Distributed<T>& d, kernels::Backend<T>& be, const comm::Communicator& ctrl,
      const comm::Communicator& data, const CpOptions& opt, CpResult& res)
      : d_(d),
        be_(be),
        ctrl_(ctrl),
        data_(data),
        opt_(opt),
        res_(res),
        N_(d.dist.order()),
        R_(opt.rank),
        spec_(spec_of(opt)) {}

  void setup();
  void iterate();
  void finish();

 private:
  std::int64_t rows(int n) const {
    return static_cast<std::int64_t>(d_.dist.dims[static_cast<std::size_t>(n)]);
  }
  /// This rank's draw of (epoch, step) (kernels/gcp_sample.hpp).
  kernels::GcpDraw draw_of(std::uint64_t epoch, std::uint64_t step, std::int64_t s_nz,
                           std::int64_t s_z) const;
  std::vector<const T*> factor_ptrs() const {
    std::vector<const T*> p;
    for (int n = 0; n < N_; ++n) p.push_back(F_.data() + off_[static_cast<std::size_t>(n)]);
    return p;
  }
  double loss_of(const SparseTensor<T>& s, nnz_t k, double w_nz, double w_z, std::vector<T*> grads);
  void holdout_eval(double* loss, double* auc);
  std::vector<std::vector<double>> host_factors();
  double final_fit();
  KruskalModel assemble_model();

  const partition::Distributed<T>& d_;
  kernels::Backend<T>& be_;
  const comm::Communicator& ctrl_;
  const comm::Communicator& data_;
  const CpOptions& opt_;
  CpResult& res_;
  const int N_, R_;
  const kernels::GcpLossSpec spec_;
  detail::Holdout hold_;
  SparseTensor<T> view_;          ///< the training entries with a holdout
  const SparseTensor<T>* train_;  ///< this rank's training entries
  nnz_t first_ = 0;               ///< global number of this rank's first training entry
  nnz_t n_train_ = 0;             ///< training entries over all ranks
  double all_entries_ = 0;        ///< prod(dims)
  std::int64_t s_nz_ = 0, s_z_ = 0, e_nz_ = 0;
  std::vector<std::size_t> off_;  ///< each mode's offset in the packed factor arrays
  std::size_t total_ = 0;         ///< sum(dims) R
  kernels::Array<T> F_, G_, M_, V_, F0_, M0_, V0_;
  kernels::GcpEntries<T> entries_;  ///< the training entries the steps draw from
  SparseTensor<T> eval_;
  nnz_t eval_k_ = 0;
  double norm_x_ = 0;
};

template <typename T>
kernels::GcpDraw Gcp<T>::draw_of(std::uint64_t epoch, std::uint64_t step, std::int64_t s_nz,
                                 std::int64_t s_z) const {
  kernels::GcpDraw d;
  d.seed = opt_.seed;
  d.epoch = epoch;
  d.step = step;
  d.nonzero = n_train_ > 0 ? s_nz : 0;
  d.zero = s_z;
  d.n_train = static_cast<std::uint64_t>(n_train_);
  d.first = static_cast<std::uint64_t>(first_);
  d.mine = static_cast<std::uint64_t>(train_->nnz());
  d.rank = ctrl_.rank();
  d.ranks = ctrl_.size();
  return d;
}

template <typename T>
double Gcp<T>::loss_of(const SparseTensor<T>& s, nnz_t k, double w_nz, double w_z,
                       std::vector<T*> grads) {
  double loss = 0;
  kernels::ops::gcp_gradient(be_, s, k, w_nz, w_z, factor_ptrs(), R_, spec_, grads, &loss);
  return loss;
}

template <typename T>
void Gcp<T>::setup() {
  const std::string& name = opt_.tensor_name;
  check_values(d_.block, opt_.loss, ctrl_, name);
  train_ = &d_.block;
  if (opt_.holdout > 0) {
    std::vector<std::uint64_t> lo(static_cast<std::size_t>(N_), 0);
    std::vector<std::int64_t> len;
    for (int n = 0; n < N_; ++n) len.push_back(rows(n));
    view_ = detail::training_view(d_, false, lo, len, opt_, &hold_);
    detail::count_cold(&hold_, ctrl_);
    train_ = &view_;
  }
  // Global numbering of the training entries: this rank's come after the lower ranks'.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(ctrl_.size()), 0);
  counts[static_cast<std::size_t>(ctrl_.rank())] = static_cast<std::int64_t>(train_->nnz());
  ctrl_.allreduce(counts.data(), counts.size());
  for (int r = 0; r < ctrl_.size(); ++r) {
    if (r < ctrl_.rank()) first_ += static_cast<nnz_t>(counts[static_cast<std::size_t>(r)]);
    n_train_ += static_cast<nnz_t>(counts[static_cast<std::size_t>(r)]);
  }
  TESSERA_INPUT_CHECK(n_train_ > 0, name << ": GCP has no training entries to sample");
  all_entries_ = 1;
  for (auto dim : d_.dist.dims) all_entries_ *= static_cast<double>(dim);
  // The planner counts these samples' memory by the same rule (plan::gcp_sample_counts).
  const plan::GcpSamples counts_of = plan::gcp_sample_counts(
      n_train_, opt_.gcp_samples, opt_.gcp_zero_samples, opt_.gcp_eval_samples);
  s_nz_ = counts_of.nonzero;
  s_z_ = counts_of.zero;
  e_nz_ = counts_of.eval;
  res_.gcp_samples = s_nz_;
  res_.gcp_zero_samples = s_z_;
  // ||X|| of the training entries (the initial scale), scaled as CP-ALS and CP-APR take it.
  norm_x_ = detail::global_norm(train_->norm(), ctrl_);
  res_.norm_x = norm_x_;
  // Factors: cp_als's random start (or the given model, lambda folded into mode 0), scaled
  // so that ||model|| = ||X||; packed mode after mode.
  const int R = R_;
  std::vector<std::vector<double>> h(static_cast<std::size_t>(N_));
  for (int n = 0; n < N_; ++n) {
    off_.push_back(total_);
    total_ += static_cast<std::size_t>(rows(n) * R);
    auto& f = h[static_cast<std::size_t>(n)];
    f.resize(static_cast<std::size_t>(rows(n) * R));
    for (std::int64_t i = 0; i < rows(n); ++i) {
      const std::uint64_t orig = d_.dist.original_index(n, static_cast<std::uint64_t>(i));
      for (int r = 0; r < R; ++r) {
        double v = opt_.resume ? opt_.resume->model.factors[static_cast<std::size_t>(n)](
                                     static_cast<std::int64_t>(orig), r)
                               : initial_factor_value(opt_.seed, n, orig, r);
        if (opt_.resume && n == 0) v *= opt_.resume->model.lambda[static_cast<std::size_t>(r)];
        f[static_cast<std::size_t>(i * R + r)] = v;
      }
    }
  }
  if (!opt_.resume) {
    std::vector<double> had(static_cast<std::size_t>(R * R), 1.0);
    for (const auto& f : h) {
      std::vector<double> g(static_cast<std::size_t>(R * R), 0.0);
      const std::size_t rr = f.size() / static_cast<std::size_t>(R);
      for (std::size_t i = 0; i < rr; ++i)
        for (int a = 0; a < R; ++a)
          for (int b = 0; b < R; ++b)
            g[static_cast<std::size_t>(a * R + b)] += f[i * R + a] * f[i * R + b];
      for (std::size_t e = 0; e < g.size(); ++e) had[e] *= g[e];
    }
    double nm2 = 0;
    for (double v : had) nm2 += v;
    const double s = nm2 > 0 && norm_x_ > 0 ? std::pow(norm_x_ / std::sqrt(nm2), 1.0 / N_) : 1.0;
    for (auto& f : h)
      for (double& v : f) v *= s;
  }
  std::vector<T> packed(total_);
  for (int n = 0; n < N_; ++n)
    std::copy(h[static_cast<std::size_t>(n)].begin(), h[static_cast<std::size_t>(n)].end(),
              packed.begin() + static_cast<std::ptrdiff_t>(off_[static_cast<std::size_t>(n)]));
  for (auto* a : {&F_, &G_, &M_, &V_, &F0_, &M0_, &V0_})
    *a = be_.allocate(std::max<std::size_t>(total_, 1));
  be_.upload(packed.data(), total_, F_.data());
  be_.fill(M_.data(), total_, T(0));
  be_.fill(V_.data(), total_, T(0));
  // The steps' source (a device backend holds a copy; the planner counts it).
  entries_ = kernels::ops::gcp_entries(be_, *train_);
  // The fixed evaluation sample, drawn on the host from the host block.
  eval_ = kernels::gcp_draw_samples(draw_of(kEvalEpoch, 0, e_nz_, e_nz_),
                                    kernels::host_gcp_entries(*train_), d_.dist.dims, &eval_k_);
  be_.synchronize();
}

template <typename T>
std::vector<std::vector<double>> Gcp<T>::host_factors() {
  std::vector<T> h(total_);
  be_.download(F_.data(), total_, h.data());
  std::vector<std::vector<double>> f(static_cast<std::size_t>(N_));
  for (int n = 0; n < N_; ++n) {
    const auto b = h.begin() + static_cast<std::ptrdiff_t>(off_[static_cast<std::size_t>(n)]);
    f[static_cast<std::size_t>(n)].assign(b, b + rows(n) * R_);
  }
  return f;
}

template <typename T>
void Gcp<T>::holdout_eval(double* loss, double* auc) {
  const kernels::GcpLossSpec spec = spec_;
  const detail::HoldoutScore s =
      detail::holdout_score(hold_, host_factors(), R_, d_.dist.dims, opt_.seed, ctrl_,
                            [spec](double x, double m) { return kernels::gcp_value(spec, x, m); });
  *loss = s.loss;
  *auc = s.auc;
}

template <typename T>
void Gcp<T>::iterate() {
  const double w_nz = static_cast<double>(n_train_) / static_cast<double>(s_nz_);
  const double w_z = all_entries_ / static_cast<double>(s_z_);
  const double e_w_nz = static_cast<double>(n_train_) / static_cast<double>(e_nz_);
  const double e_w_z = all_entries_ / static_cast<double>(e_nz_);
  std::vector<T*> grads;
  for (int n = 0; n < N_; ++n) grads.push_back(G_.data() + off_[static_cast<std::size_t>(n)]);
  const bool nonneg = kernels::gcp_nonnegative(spec_.kind);
  double lr = opt_.gcp_lr;
  std::int64_t t = 0, t0 = 0;
  Timer run_timer;
  double f_old = loss_of(eval_, eval_k_, e_w_nz, e_w_z, {});
  ctrl_.allreduce(&f_old, 1);
  // The state an undone epoch returns to: the start, Adam's moments (zero) included.
  be_.copy(F_.data(), total_, F0_.data());
  be_.copy(M_.data(), total_, M0_.data());
  be_.copy(V_.data(), total_, V0_.data());
  int fails = 0;
  bool converged = false, time_up = false;
  int stop_signal = 0;
  const int every = std::max(opt_.print_every, 1);
  for (int ep = 0; ep < opt_.max_iters && !converged && !time_up && stop_signal == 0; ++ep) {
    Timer it_timer;
    double kernel = 0, comm = 0, solve = 0;
    for (int st = 0; st < opt_.gcp_epoch_iters; ++st) {
      Timer tk;  // the draw is part of the kernel (host backends: of their operation)
      kernels::ops::gcp_sampled_gradient(
          be_, draw_of(static_cast<std::uint64_t>(ep), static_cast<std::uint64_t>(st), s_nz_, s_z_),
          entries_, d_.dist.dims, w_nz, w_z, factor_ptrs(), R_, spec_, grads, nullptr);
      be_.synchronize();
      kernel += tk.seconds();
      Timer tc;
      if (data_.size() > 1) {
        data_.allreduce(G_.data(), total_);
        be_.synchronize();
      }
      comm += tc.seconds();
      Timer tu;
      ++t;
      kernels::ops::adam_step(be_, F_.data(), G_.data(), M_.data(), V_.data(),
                              static_cast<std::int64_t>(total_), lr, 0.9, 0.999, 1e-8, t, nonneg);
      solve += tu.seconds();
    }
    Timer te;
    double f = loss_of(eval_, eval_k_, e_w_nz, e_w_z, {});
    ctrl_.allreduce(&f, 1);
    if (!std::isfinite(f))
      throw CollectiveError(opt_.tensor_name + ": GCP: the loss estimate of epoch " +
                            std::to_string(ep + 1) +
                            " is not a number (the factors overflowed; lower --gcp-lr)");
    const bool worse = f > f_old;
    if (worse) {  // undo the epoch, smaller steps
      be_.copy(F0_.data(), total_, F_.data());
      be_.copy(M0_.data(), total_, M_.data());
      be_.copy(V0_.data(), total_, V_.data());
      t = t0;
      lr *= 0.1;
      ++fails;
    } else {
      be_.copy(F_.data(), total_, F0_.data());
      be_.copy(M_.data(), total_, M0_.data());
      be_.copy(V_.data(), total_, V0_.data());
      t0 = t;
    }
    CpIteration rec;
    rec.iter = ep + 1;
    rec.fit = std::numeric_limits<double>::quiet_NaN();
    rec.gcp_loss = worse ? f_old : f;
    rec.lr = lr;
    if (opt_.holdout > 0) holdout_eval(&rec.holdout_loss, &rec.auc);
    solve += te.seconds();
    const double change = std::abs(f_old - f) / std::max(std::abs(f_old), 1e-300);
    converged = !worse && change < opt_.tol;
    if (!worse) f_old = f;
    rec.seconds = it_timer.seconds();
    rec.kernel = kernel;
    rec.comm = comm;
    rec.solve = solve;
    res_.history.push_back(rec);
    res_.phases.add("kernel", kernel);
    res_.phases.add("comm", comm);
    res_.phases.add("solve", solve);
    res_.iterations = ep + 1;
    res_.gcp_loss = f_old;
    res_.holdout_loss = rec.holdout_loss;
    res_.auc = rec.auc;
    if (fails > opt_.gcp_fails) converged = true;  // the step size is spent
    if ((opt_.max_seconds > 0 || opt_.stop != nullptr) && !converged) {
      double v[2] = {run_timer.seconds(),
                     opt_.stop != nullptr ? static_cast<double>(opt_.stop->signal()) : 0.0};
      ctrl_.allreduce(v, 2, comm::ReduceOp::max);
      time_up = opt_.max_seconds > 0 && v[0] >= opt_.max_seconds;
      stop_signal = static_cast<int>(v[1]);
    }
    const bool last = converged || time_up || stop_signal != 0 || ep + 1 == opt_.max_iters;
    if (opt_.print_iterations && ((ep + 1) % every == 0 || last)) {
      char line[320];
      std::snprintf(line, sizeof(line),
                    "  epoch %3d  loss %.8e%s  step %.1e  %.4f s  (kernel %2.0f%%  comm %2.0f%%  "
                    "other %2.0f%%)",
                    rec.iter, rec.gcp_loss, worse ? " (undone)" : "", lr, rec.seconds,
                    100 * kernel / std::max(rec.seconds, 1e-12),
                    100 * comm / std::max(rec.seconds, 1e-12),
                    100 * solve / std::max(rec.seconds, 1e-12));
      std::string text = line;
      if (opt_.holdout > 0) {
        std::snprintf(line, sizeof(line), "  held-out loss %.6g  AUC %.4f", rec.holdout_loss,
                      rec.auc);
        text += line;
      }
      log::info(text);
    }
  }
  res_.converged = converged;
  res_.gcp_fails = fails;
  res_.stop_reason = converged          ? "converged"
                     : stop_signal != 0 ? "signal"
                     : time_up          ? "time limit"
                                        : "iteration limit";
  res_.stop_signal = stop_signal;
}

template <typename T>
double Gcp<T>::final_fit() {
  // 1 - ||X - M|| / ||X|| over the stored entries (training and held out alike: the block).
  const auto f = host_factors();
  const SparseTensor<T>& x = d_.block;
  const auto nnz = static_cast<std::int64_t>(x.nnz());
  double inner = 0;
#pragma omp parallel for reduction(+ : inner) schedule(static)
  for (std::int64_t k = 0; k < nnz; ++k) {
    double m = 0;
    for (int r = 0; r < R_; ++r) {
      double p = 1;
      for (int n = 0; n < N_; ++n)
        p *= f[static_cast<std::size_t>(n)][static_cast<std::size_t>(x.idx[static_cast<std::size_t>(
                                                n)][static_cast<std::size_t>(k)]) *
                                                R_ +
                                            r];
      m += p;
    }
    inner += static_cast<double>(x.vals[static_cast<std::size_t>(k)]) * m;
  }
  ctrl_.allreduce(&inner, 1);
  const double nx = detail::global_norm(x.norm(), ctrl_);
  std::vector<double> had(static_cast<std::size_t>(R_ * R_), 1.0);
  for (const auto& fn : f) {
    std::vector<double> g(had.size(), 0.0);
    const std::size_t rr = fn.size() / static_cast<std::size_t>(R_);
    for (std::size_t i = 0; i < rr; ++i)
      for (int a = 0; a < R_; ++a)
        for (int b = 0; b < R_; ++b)
          g[static_cast<std::size_t>(a * R_ + b)] += fn[i * R_ + a] * fn[i * R_ + b];
    for (std::size_t e = 0; e < g.size(); ++e) had[e] *= g[e];
  }
  double nm2 = 0;
  for (double v : had) nm2 += v;
  return nx > 0 ? 1.0 - std::sqrt(std::max(nx * nx - 2 * inner + nm2, 0.0)) / nx : 0.0;
}

template <typename T>
KruskalModel Gcp<T>::assemble_model() {
  const auto f = host_factors();
  KruskalModel model;
  model.dims = d_.dist.dims;
  model.rank = R_;
  model.lambda.assign(static_cast<std::size_t>(R_), 1.0);
  for (int n = 0; n < N_; ++n) {
    Matrix<double> F(rows(n), R_, 0.0);
    for (std::int64_t i = 0; i < rows(n); ++i) {
      const auto row =
          static_cast<std::int64_t>(d_.dist.original_index(n, static_cast<std::uint64_t>(i)));
      for (int r = 0; r < R_; ++r)
        F(row, r) = f[static_cast<std::size_t>(n)][static_cast<std::size_t>(i * R_ + r)];
    }
    model.factors.push_back(std::move(F));
  }
  return model;
}

template <typename T>
void Gcp<T>::finish() {
  res_.iteration_engine = "per-operation calls (GCP-SGD)";
  res_.fit = final_fit();
  if (!res_.history.empty()) res_.history.back().fit = res_.fit;
  const comm::MaxMean t = comm::max_and_mean(ctrl_, res_.phases.get("kernel"));
  const int ran = std::max(res_.iterations, 1);
  res_.kernel_max_seconds = t.max / ran;
  res_.kernel_mean_seconds = t.mean / ran;
  if (opt_.holdout > 0) detail::holdout_counts(hold_, train_->nnz(), ctrl_, &res_);
  res_.model = assemble_model();
  normalize_conventional(res_.model);
  flag_degenerate(res_.model.is_zero(), "every weight is 0", &res_.stop_reason, &res_.converged);
}

}  // namespace

template <typename T>
CpResult cp_gcp(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt) {
  TESSERA_INPUT_CHECK(opt.rank >= 1, "--rank must be at least 1 (got " << opt.rank << ")");
  TESSERA_INPUT_CHECK(opt.max_iters >= 1, "--iters must be at least 1");
  TESSERA_INPUT_CHECK(opt.gcp_epoch_iters >= 1, "--gcp-epoch-iters must be at least 1");
  TESSERA_INPUT_CHECK(std::isfinite(opt.gcp_lr) && opt.gcp_lr > 0,
                      "--gcp-lr must be a positive number");
  TESSERA_EXPECTS(data.memory_space() == be.memory_space(),
                  "data communicator and backend must use the same memory space");
  TESSERA_EXPECTS(ctrl.size() == data.size() && ctrl.rank() == data.rank(),
                  "ctrl and data communicators must span the same ranks");
  TESSERA_INPUT_CHECK(opt.strategy == CommStrategy::allreduce,
                      "GCP (--solver gcp) runs with --comm-strategy allreduce; the layer "
                      "strategy is not implemented for it");
  Timer setup_timer;
  CpResult res;
  Gcp<T> gcp(d, be, ctrl, data, opt, res);
  gcp.setup();
  res.phases.add("setup", setup_timer.seconds());
  gcp.iterate();
  gcp.finish();
  return res;
}

template CpResult cp_gcp<float>(const partition::Distributed<float>&, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_gcp<double>(const partition::Distributed<double>&, kernels::Backend<double>&,
                                 const comm::Communicator&, const comm::Communicator&,
                                 const CpOptions&);

}  // namespace tessera::algo
