#include "algo/tucker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "algo/degenerate.hpp"
#include "algo/host_tier.hpp"
#include "algo/tucker_dense.hpp"
#include "algo/tucker_hooi.hpp"
#include "algo/tucker_plan.hpp"
#include "algo/tucker_resume.hpp"
#include "algo/tucker_scalapack.hpp"
#include "algo/workload_scope.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/ttmc.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace tessera::algo {

namespace detail {

namespace {

/// Appends an iteration to the result (history, phases, fit) and prints its line on rank
/// 0, with the split of the factor-update time at -v.
void record_iteration(const TuckerIteration& rec, TuckerResult& res, bool print) {
  res.history.push_back(rec);
  res.phases.add("ttmc", rec.ttmc);
  res.phases.add("comm", rec.comm);
  res.phases.add("svd", rec.svd);
  res.fit = rec.fit;
  res.core_norm = rec.core_norm;
  res.iterations = rec.iter;
  if (!print) return;
  const double tot = std::max(rec.seconds, 1e-12);
  char line[256];
  std::snprintf(line, sizeof(line),
                "  iter %3d  fit %.6f  delta %+.3e  %.4f s  (ttmc %2.0f%%  comm %2.0f%%  "
                "svd %2.0f%%)",
                rec.iter, rec.fit, rec.delta, rec.seconds, 100 * rec.ttmc / tot,
                100 * rec.comm / tot, 100 * rec.svd / tot);
  log::info(line);
  std::snprintf(line, sizeof(line),
                "            svd split: products %.4f s, eigen-solves %.4f s, "
                "orthonormalisation %.4f s, core %.4f s, rest %.4f s",
                rec.svd_products, rec.svd_eig, rec.svd_orth, rec.svd_core,
                rec.svd - rec.svd_products - rec.svd_eig - rec.svd_orth - rec.svd_core);
  log::debug(line);
}

std::vector<std::int64_t> owned_lengths(const std::vector<ModePlan>& plan, bool block) {
  std::vector<std::int64_t> v;
  for (const auto& mp : plan) v.push_back(block ? mp.b : mp.len);
  return v;
}

}  // namespace

template <typename T>
Hooi<T>::Hooi(const partition::Distribution& dist, std::unique_ptr<kernels::TensorHandle<T>> X,
              std::vector<ModePlan> plan, kernels::Backend<T>& be, const comm::Communicator& c,
              const comm::Communicator& dc, const comm::Communicator* dnode,
              const TuckerOptions& opt, const NormScale& ns, TuckerResult& res)
    : dist_(dist),
      X_(std::move(X)),
      plan_(std::move(plan)),
      be_(be),
      c_(c),
      dc_(dc),
      dnode_(dnode),
      opt_(opt),
      ns_(ns),
      res_(res),
      eig0_(kernels::ops::eig_lanczos_counts(be)),
      N_(static_cast<int>(dist.dims.size())),
      P_(c.size()),
      factors_(be, c, dc, dist.dims, opt.ranks, owned_lengths(plan_, false),
               owned_lengths(plan_, true)),
      net_{c},
      dnet_{dc},
      clock_(be),
      dense_(be, net_, dnet_, clock_) {
  std::int64_t max_out = 0, max_recv = 0, max_own = 0;
  std::int64_t max_full = 0;
  labels_.resize(plan_.size());
  for (std::size_t k = 0; k < plan_.size(); ++k) {
    const auto& mp = plan_[k];
    max_out = std::max(max_out, static_cast<std::int64_t>(mp.local.size()) * mp.cols);
    if (P_ > 1 && mp.allreduce) {
      // The whole Y_(n) in recv_ where the TTMc output is not already it (its rows added at
      // their labels); the new factor.
      const auto I = static_cast<std::int64_t>(dist.dims[k]);
      if (!mp.identity) {
        max_recv = std::max(max_recv, I * mp.cols);
        labels_[k].assign(mp.local.begin(), mp.local.end());
      }
      max_full = std::max(max_full, I * opt.ranks[k]);
    } else if (P_ > 1) {
      // A two-stage combine receives into recv_ twice and groups its rows and keeps its
      // relayed sums in own_.
      max_recv = std::max(max_recv, std::max(mp.recv_total, mp.recv1_total) * mp.cols);
      max_own = std::max(
          max_own,
          std::max({static_cast<std::int64_t>(mp.own_pos.size()), mp.relay_rows,
                    mp.staged ? static_cast<std::int64_t>(mp.local.size()) : std::int64_t{0}}) *
              mp.cols);
    }
  }
  ybuf_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_out, 1)));
  // Rows received from other ranks and their sums on the owner, in backend memory (the
  // exchange runs on the data communicator: NCCL between GPUs).
  if (P_ > 1) {
    recv_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_recv, 1)));
    own_ = be.allocate(static_cast<std::size_t>(std::max<std::int64_t>(max_own, 1)));
    if (max_full > 0) ufull_ = be.allocate_double(static_cast<std::size_t>(max_full));
  }
  // Row maps of the combined rows in backend memory (none where they are the identity).
  pos_dev_.resize(static_cast<std::size_t>(N_));
  for (int n = 0; n < N_; ++n) {
    const auto& mp = plan_[static_cast<std::size_t>(n)];
    if (static_cast<std::int64_t>(mp.own_pos.size()) != mp.len)
      pos_dev_[static_cast<std::size_t>(n)] = be.upload_index(mp.own_pos.data(), mp.own_pos.size());
  }
  if (opt.svd == SvdMethod::scalapack) grid_ = std::make_unique<BlacsGrid>(c);
  // The gram method on one rank, or on several whose data communicator orders its collectives
  // in the backend's stream (NCCL): no host-side step between the device phases, so they are
  // timed by stream marks and the host waits only where it needs a value (docs/multi-gpu.md,
  // "Tucker-HOOI on several GPUs").
  clock_.use_marks(opt.svd == SvdMethod::gram &&
                   (P_ == 1 || collectives_in_stream(be, dc, dnode != nullptr)));
  if (clock_.marks() && P_ > 1) {
    enqueue_ = true;
    dnet_.stream = be.native_stream();
    dnet_.marks = &clock_;
    dnet_.also = {&t_comm_, &t_dcomm_};
    waiter_.be = &be;
    waiter_.prev = be.set_stream_waiter(
        [&dc](void* s) { dc.wait_stream(s, "Tucker-HOOI (collectives in the stream)"); });
  }
  res.phase_timing = clock_.marks() ? "stream marks" : "host waits";
  res.dense_method = detail::dense_method(
      opt.svd, be.memory_space(),
      [&be](int C, int R) { return kernels::ops::eig_in_one_block(be, C, R); }, opt.ranks);
  if (opt.print_iterations) log::info("dense stage: " + res.dense_method);
}

template <typename T>
void Hooi<T>::init() {
  Timer init_timer;
  for (int n = 0; n < N_ && !opt_.resume; ++n) {
    const int R = opt_.ranks[static_cast<std::size_t>(n)];
    const std::int64_t len = plan_[static_cast<std::size_t>(n)].len;
    std::vector<double> U0(static_cast<std::size_t>(len) * static_cast<std::size_t>(R));
    random_fill(n, 0)(U0.data(), 0, R);
    factors_.set_owned(n, U0);
    res_.completed_columns +=
        dense_.orthonormalize(factors_.owned(n).data(), len, R, random_fill(n, 0x5EED0000ull));
    publish(n);
  }
  if (opt_.init == TuckerInit::hosvd && !opt_.resume) {
    // Every mode from the random factors of the others (Jacobi order), then publish all.
    for (int n = 0; n < N_; ++n) factor_update(n, ttmc_combined(n));
    for (int n = 0; n < N_; ++n) publish(n);
  }
  if (opt_.resume) {  // checkpoint restart: the saved factors replace the initialisation
    detail::check_tucker_state(*opt_.resume, dist_.dims, opt_.ranks);
    for (int n = 0; n < N_; ++n) {
      const auto& mp = plan_[static_cast<std::size_t>(n)];
      std::vector<double> U0;
      detail::saved_rows(*opt_.resume, dist_, n, static_cast<std::uint64_t>(mp.lo), mp.len, U0);
      factors_.set_owned(n, U0);
      publish(n);
    }
    detail::resume_record(*opt_.resume, res_, core_, fit_old_);
    if (ns_.cs != 1.0)
      for (double& v : core_) v *= ns_.cs;
  }
  clock_.settle();
  res_.phases.add("init", init_timer.seconds());
  t_ttmc_ = t_comm_ = t_svd_ = 0;
  net_.seconds = dnet_.seconds = 0;
}

template <typename T>
const std::vector<double>& Hooi<T>::host_core() {
  if (core_on_device_) {
    core_.resize(dense_.core_size());
    be_.download_double(dense_.core_data(), core_.size(), core_.data());
    core_on_device_ = false;
  }
  return core_;
}

template <typename T>
std::vector<double> Hooi<T>::unscaled(std::vector<double> g) const {
  if (ns_.cs != 1.0)
    for (double& v : g) v /= ns_.cs;
  return g;
}

template <typename T>
void Hooi<T>::iterate() {
  const auto& ranks = opt_.ranks;
  for (int it = opt_.resume ? opt_.resume->iteration : 0; it < opt_.max_iters && !res_.converged;
       ++it) {
    util::fault::set_iteration(it + 1);
    Timer iter_timer;
    t_ttmc_ = t_comm_ = t_svd_ = 0;
    t_exch_ = t_dcomm_ = t_pub_ = 0;
    const long calls0 = net_.calls + dnet_.calls;
    const detail::DenseTimes dt0 = dense_.times;
    double norm_g2 = 0;
    for (int n = 0; n < N_; ++n) {
      const T* Y = ttmc_combined(n);
      factor_update(n, Y);
      if (n == N_ - 1) {
        // Core G_(N) = U_N^T Y_(N), summed over ranks on the data communicator (NCCL on
        // GPUs) where Y is; only ||G||^2 comes to the host.
        const auto phase = clock_.start();
        const double net0 = dnet_.seconds;
        double agreed = 0;
        if (all_reduced(n)) {
          // Every rank computes the same core from the same rows; ||G||^2 agreed over the
          // ranks all the same (their mean), so that every rank stops at the same iteration.
          {
            const LocalSums local(net_, dnet_);
            norm_g2 =
                dense_.core(Y, full_view(n), ranks[static_cast<std::size_t>(n)], ufull_.data());
          }
          Timer agree;
          c_.allreduce(&norm_g2, 1);
          norm_g2 /= P_;
          ++net_.calls;
          agreed = agree.seconds();
        } else {
          norm_g2 = dense_.core(Y, view_of(n), ranks[static_cast<std::size_t>(n)],
                                factors_.owned(n).data());
        }
        core_on_device_ = true;
        const double in_net = dnet_.seconds - net0 + agreed;
        clock_.stop(phase, &t_svd_, in_net, false);
        t_comm_ += in_net;
        t_dcomm_ += in_net;
      }
      publish(n);
    }
    clock_.settle();  // the phases' times (marks), read below
    const double fit = 1.0 - std::sqrt(std::max(ns_.norm_x2 - norm_g2, 0.0)) / ns_.norm_cx;
    TESSERA_INPUT_CHECK(std::isfinite(fit),  // from allreduced sums: agreed
                        "Tucker-HOOI: the fit of iteration "
                            << it + 1 << " is not a number (||G||^2 = " << norm_g2
                            << " for ||X|| scaled to " << ns_.norm_cx << "): the core overflowed");
    TuckerIteration rec;
    rec.iter = it + 1;
    rec.fit = fit;
    rec.delta = fit - fit_old_;
    rec.seconds = iter_timer.seconds();
    rec.ttmc = t_ttmc_;
    rec.comm = t_comm_;
    rec.svd = t_svd_;
    rec.core_norm = std::sqrt(norm_g2) / ns_.cs;
    rec.svd_products = dense_.times.prod - dt0.prod;
    rec.svd_eig = dense_.times.eig - dt0.eig;
    rec.svd_orth = dense_.times.orth - dt0.orth;
    rec.svd_core = dense_.times.core - dt0.core;
    sum_ttmc_ += t_ttmc_;
    if (++run_iters_ > 1) {  // the first iteration also sets up NCCL's peer connections
      sum_exch_ += t_exch_;
      sum_dcomm_ += t_dcomm_;
      sum_pub_ += t_pub_;
      dense_calls_ += net_.calls + dnet_.calls - calls0;
      ++split_iters_;
    }
    record_iteration(rec, res_, opt_.print_iterations);
    const bool done = it > 0 && std::abs(fit - fit_old_) < opt_.tol;
    fit_old_ = fit;
    if (opt_.stop != nullptr && !done) {
      // Any rank's stop request (its signal number): every rank stops after this iteration.
      std::int32_t sig = opt_.stop->signal();
      c_.allreduce(&sig, 1, comm::ReduceOp::max);
      stop_signal_ = sig;
    }
    const bool stopping = stop_signal_ != 0;
    if ((it + 1) % std::max(opt_.state_every, 1) == 0 || stopping) {
      // The host factors for the state, gathered when any rank takes it (collective).
      std::int32_t want = opt_.on_iteration ? 1 : 0;
      c_.allreduce(&want, 1, comm::ReduceOp::max);
      if (want) factors_.gather_full();
      if (opt_.on_iteration) {
        TuckerState st =
            detail::tucker_state(it + 1, done, dist_.dims, ranks, unscaled(host_core()),
                                 factors_.full(), res_.history, dist_);
        st.stopping = stopping;
        opt_.on_iteration(st);
      }
    }
    if (done) res_.converged = true;
    if (stopping) break;
  }
}

template <typename T>
void Hooi<T>::finish() {
  res_.stop_reason = res_.converged      ? "converged"
                     : stop_signal_ != 0 ? "signal"
                                         : "iteration limit";
  res_.stop_signal = stop_signal_;
  const kernels::EigLanczosCounts ec = kernels::ops::eig_lanczos_counts(be_);
  res_.eig_lanczos_answered = ec.answered - eig0_.answered;
  res_.eig_lanczos_declined = ec.declined - eig0_.declined;
  factors_.gather_full();
  res_.model.dims = dist_.dims;
  res_.model.ranks = opt_.ranks;
  res_.model.core = unscaled(host_core());
  for (int n = 0; n < N_; ++n) {
    const int R = opt_.ranks[static_cast<std::size_t>(n)];
    const auto I = static_cast<std::int64_t>(dist_.dims[static_cast<std::size_t>(n)]);
    Matrix<double> F(I, R, 0.0);
    const auto& full = factors_.full()[static_cast<std::size_t>(n)];
    for (std::int64_t i = 0; i < I; ++i) {
      const auto row =
          static_cast<std::int64_t>(dist_.original_index(n, static_cast<std::uint64_t>(i)));
      std::copy(full.begin() + i * R, full.begin() + (i + 1) * R, F.row(row));
    }
    res_.model.factors.push_back(std::move(F));
  }
  flag_degenerate(res_.model.is_zero(), "the core is 0", &res_.stop_reason, &res_.converged);
  if (overlap_count_ > 0) res_.stream_overlap = overlap_sum_ / overlap_count_;
  // The TTMc time per iteration of the slowest rank and the mean (this run's iterations:
  // every rank ran the same number).
  const comm::MaxMean ttmc = comm::max_and_mean(c_, sum_ttmc_);
  if (P_ > 1 && split_iters_ > 0) {
    res_.comm_exchange_seconds = sum_exch_ / split_iters_;
    res_.comm_dense_seconds = sum_dcomm_ / split_iters_;
    res_.comm_publish_seconds = sum_pub_ / split_iters_;
    res_.dense_sums_per_iteration = static_cast<double>(dense_calls_) / split_iters_;
    if (opt_.print_iterations) {
      char line[240];
      std::snprintf(line, sizeof(line),
                    "comm per iteration (rank 0): TTMc rows %.4g s, dense-stage sums %.4g s "
                    "(%.0f sums), factor all-gathers %.4g s",
                    res_.comm_exchange_seconds, res_.comm_dense_seconds,
                    res_.dense_sums_per_iteration, res_.comm_publish_seconds);
      log::info(line);
    }
  }
  if (P_ > 1 && run_iters_ > 0) {
    res_.ttmc_max_seconds = ttmc.max / run_iters_;
    res_.ttmc_mean_seconds = ttmc.mean / run_iters_;
    if (opt_.print_iterations && res_.ttmc_mean_seconds > 0) {
      char line[200];
      std::snprintf(line, sizeof(line),
                    "TTMc time per iteration over %d ranks: slowest %.4g s, mean %.4g s "
                    "(imbalance %.2f)",
                    P_, res_.ttmc_max_seconds, res_.ttmc_mean_seconds,
                    res_.ttmc_max_seconds / res_.ttmc_mean_seconds);
      log::info(line);
    }
  }
}

}  // namespace detail

namespace {

using detail::check_options;
using detail::Hooi;
using detail::ModePlan;
using detail::norm_and_scale;
using detail::NormScale;
using detail::plan_combine;
using detail::plan_memory;

/// The HOOI of both tucker_hooi overloads: `block` is this rank's nonzeros (prepared
/// here), or null with `given` the prepared handle.
template <typename T>
TuckerResult tucker_impl(const partition::Distribution& dist, const SparseTensor<T>* block,
                         std::unique_ptr<kernels::TensorHandle<T>> given, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  const auto& dims = dist.dims;
  const int N = static_cast<int>(dims.size());
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "tucker_hooi needs a host communicator");
  const comm::Communicator& dc = data_comm != nullptr ? *data_comm : c;
  TESSERA_EXPECTS(dc.memory_space() == be.memory_space() && dc.size() == c.size(),
                  "tucker_hooi: the data communicator must span the same ranks in the "
                  "backend's memory space");
  TESSERA_EXPECTS((block != nullptr && block->order() == N) ||
                      (block == nullptr && given != nullptr && given->order() == N),
                  "tucker_hooi: a block or a prepared handle of order " << N);
  const std::vector<std::int64_t> cols = check_options(dims, opt);

  // Copies prepared during the run (the block below; a streaming backend's chunks in tier
  // 3) are ordered for TTMc; the caller's workload comes back at the end.
  const WorkloadScope<T> workload_scope(be, kernels::Workload::ttmc);

  TuckerResult res;
  Timer setup_timer;
  const NormScale ns = norm_and_scale<T>(
      block != nullptr ? block->norm_squared() : given->value_norm_squared(),
      [&] { return block != nullptr ? block->norm() : given->value_norm(); }, c, opt, res);

  // ---- local work that may fail on one rank only: agreed before any further collective ----
  std::unique_ptr<kernels::TensorHandle<T>> X;
  std::vector<ModePlan> plan(static_cast<std::size_t>(N));
  comm::run_collectively(c, [&] {
    util::fault::at(util::fault::Point::prepare);
    X = block != nullptr ? be.prepare(*block) : std::move(given);
    for (int n = 0; n < N; ++n) {
      auto& mp = plan[static_cast<std::size_t>(n)];
      mp.cols = cols[static_cast<std::size_t>(n)];
      mp.local = kernels::ops::ttmc_rows(be, *X, n);
      mp.scratch_per_col =
          static_cast<double>(kernels::ops::ttmc_scratch_bytes(be, *X, n, opt.ranks)) /
          static_cast<double>(mp.cols);
    }
  });
  res.tier = X->tier();
  res.tier_description = X->describe();
  for (int n = 0; n < N; ++n)
    res.ttmc_stream_bytes.push_back(static_cast<double>(X->mttkrp_stream_bytes(n)));
  log_memory_tier(res.tier, res.tier_description, c, opt.print_iterations);
  // Two-stage combine when the hierarchy asks for it: the node communicators of c and dc
  // (the data moves over dc's; the plan's labels over c's).
  const comm::NodeRelays relays = comm::node_relays(c, dc, opt.nodes, opt.hierarchy);
  const comm::Communicator* node_c = relays.host.get();
  res.combine = c.size() == 1 ? "" : (node_c ? "node" : "flat");
  plan_combine(plan, dims, c, node_c, relays.slot_of);
  // Rows that cross between nodes per iteration, per mode, over all ranks (the network's
  // share of the exchange; known when the node of every rank is).
  if (opt.nodes.nodes() > 1 && static_cast<int>(opt.nodes.node_of.size()) == c.size()) {
    std::vector<std::int64_t> net(static_cast<std::size_t>(N), 0);
    for (int n = 0; n < N; ++n)
      net[static_cast<std::size_t>(n)] =
          opt.nodes.off_node(c.rank(), plan[static_cast<std::size_t>(n)].send_rows);
    c.allreduce(net.data(), net.size());
    res.network_rows = net;
  }
  // Per mode: the whole TTMc rows all-reduced, or summed on their owners (--comm-strategy).
  detail::choose_rows(plan, dims, sizeof(T),
                      detail::collectives_in_stream(be, dc, node_c != nullptr), node_c != nullptr,
                      c, opt, res);
  const bool any_owners =
      std::any_of(plan.begin(), plan.end(), [](const ModePlan& mp) { return !mp.allreduce; });
  if (opt.print_iterations && c.size() > 1 && any_owners) {
    std::string line =
        node_c
            ? "TTMc rows combined through a relay on each of " + std::to_string(opt.nodes.nodes()) +
                  " nodes (" + std::to_string(node_c->size()) +
                  (node_c->size() == 1 ? " rank" : " ranks") + " each), then on their owners"
            : "TTMc rows combined on their owners in one exchange";
    if (!res.network_rows.empty()) {
      line += "; rows crossing nodes per iteration:";
      for (int n = 0; n < N; ++n)
        line += (n ? ", " : " ") + std::to_string(res.network_rows[static_cast<std::size_t>(n)]);
    }
    log::info(line);
  }
  plan_memory(
      plan, dims, cols, sizeof(T),
      [&](std::int64_t C) { return static_cast<double>(kernels::ops::wide_scratch_bytes(be, C)); },
      c, opt, res);

  Hooi<T> hooi(dist, std::move(X), std::move(plan), be, c, dc, relays.moves(), opt, ns, res);
  res.phases.add("setup", setup_timer.seconds());
  hooi.init();
  hooi.iterate();
  hooi.finish();
  return res;
}

}  // namespace

template <typename T>
TuckerResult tucker_hooi(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  return tucker_impl<T>(d.dist, &d.block, nullptr, be, c, opt, data_comm);
}

template <typename T>
TuckerResult tucker_hooi(std::unique_ptr<kernels::TensorHandle<T>> X,
                         const std::vector<std::uint64_t>& dims, kernels::Backend<T>& be,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm) {
  TESSERA_EXPECTS(X != nullptr && X->dims() == dims,
                  "tucker_hooi: a prepared handle with the global dims");
  partition::Distribution dist;
  dist.nranks = c.size();
  dist.rank = c.rank();
  dist.dims = dims;
  dist.grid.assign(dims.size(), 1);
  dist.coords.assign(dims.size(), 0);
  for (auto n : dims) dist.bounds.push_back({0, n});
  return tucker_impl<T>(dist, nullptr, std::move(X), be, c, opt, data_comm);
}

template TuckerResult tucker_hooi<float>(std::unique_ptr<kernels::TensorHandle<float>>,
                                         const std::vector<std::uint64_t>&,
                                         kernels::Backend<float>&, const comm::Communicator&,
                                         const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<double>(std::unique_ptr<kernels::TensorHandle<double>>,
                                          const std::vector<std::uint64_t>&,
                                          kernels::Backend<double>&, const comm::Communicator&,
                                          const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<float>(const partition::Distributed<float>&,
                                         kernels::Backend<float>&, const comm::Communicator&,
                                         const TuckerOptions&, const comm::Communicator*);
template TuckerResult tucker_hooi<double>(const partition::Distributed<double>&,
                                          kernels::Backend<double>&, const comm::Communicator&,
                                          const TuckerOptions&, const comm::Communicator*);

}  // namespace tessera::algo
