// CP-ALS: recovery of exact low-rank tensors, invariance to the rank count, the strategy
// and the backend, monotone fit on real tensors, robustness to empty slices and
// rank-deficient normal equations. Runs under mpiexec at several rank counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "comm/mpi_communicator.hpp"
#include "gather_util.hpp"
#include "io/model_io.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"
#include "tensor/synthetic.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

using algo::CommStrategy;
using kernels::BackendKind;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

algo::GenerateOptions small_lowrank(std::vector<std::uint64_t> dims, std::int64_t nnz, int rank,
                                    double noise, std::uint64_t seed) {
  algo::GenerateOptions o;
  o.dims = std::move(dims);
  o.nnz = nnz;
  o.rank = rank;
  o.noise = noise;
  o.seed = seed;
  return o;
}

using test::gather_all;

template <typename T>
algo::CpResult run_cp(SparseTensor<T> x, const comm::Communicator& c, BackendKind kind,
                      CommStrategy s, int R, int iters, double tol, std::uint64_t seed = 3) {
  auto scheme = s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto d = partition::distribute(std::move(x), scheme, {}, c);
  auto be = kernels::make_backend<T>(kind, 1);
  algo::CpOptions o;
  o.rank = R;
  o.max_iters = iters;
  o.tol = tol;
  o.seed = seed;
  o.strategy = s;
  o.print_iterations = false;
  return algo::cp_als<T>(d, *be, c, c, o);
}

/// Max relative difference between two models' (lambda-weighted) factors.
double model_difference(const KruskalModel& a, const KruskalModel& b) {
  double worst = 0;
  for (int n = 0; n < a.order(); ++n) {
    double num = 0, den = 0;
    for (std::size_t k = 0; k < a.factors[n].data.size(); ++k) {
      double d = a.factors[n].data[k] - b.factors[n].data[k];
      num += d * d;
      den += a.factors[n].data[k] * a.factors[n].data[k];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  double num = 0, den = 0;
  for (int r = 0; r < a.rank; ++r) {
    num += (a.lambda[r] - b.lambda[r]) * (a.lambda[r] - b.lambda[r]);
    den += a.lambda[r] * a.lambda[r];
  }
  return std::max(worst, std::sqrt(num / den));
}

class CpExact : public ::testing::TestWithParam<std::tuple<BackendKind, CommStrategy>> {};

TEST_P(CpExact, RecoversExactLowRankDouble) {
  auto [kind, strat] = GetParam();
  auto g = algo::generate(small_lowrank({30, 40, 50}, 4000, 3, 0.0, 11), world());
  auto res = run_cp<double>(std::move(g.block), world(), kind, strat, 3, 200, 1e-10);
  EXPECT_GE(res.fit, 0.999) << "after " << res.iterations << " iterations";
  for (const auto& h : res.history) EXPECT_TRUE(std::isfinite(h.fit));
}

TEST_P(CpExact, RecoversExactLowRankFloatOrder4) {
  auto [kind, strat] = GetParam();
  auto g = algo::generate(small_lowrank({12, 15, 9, 20}, 3000, 2, 0.0, 5), world());
  auto res = run_cp<float>(g.block.cast<float>(), world(), kind, strat, 2, 200, 1e-9);
  EXPECT_GE(res.fit, 0.999);
}

TEST_P(CpExact, NoisyFitMatchesNoiseLevel) {
  auto [kind, strat] = GetParam();
  algo::GenerateInfo gi;
  auto g = algo::generate(small_lowrank({40, 30, 35}, 6000, 3, 0.05, 7), world(), &gi);
  auto res = run_cp<double>(std::move(g.block), world(), kind, strat, 3, 200, 1e-10);
  // The planted model leaves residual ||noise||; ALS can only do better than that.
  const double planted_fit = 1 - gi.noise_norm / std::hypot(gi.signal_norm, gi.noise_norm);
  EXPECT_GE(res.fit, planted_fit - 0.01);
  EXPECT_LE(res.fit, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, CpExact,
    ::testing::Combine(::testing::Values(BackendKind::reference, BackendKind::cpu),
                       ::testing::Values(CommStrategy::allreduce, CommStrategy::layer)));

/// Distributed run vs a single-process run on rank 0 (same seed, fixed iterations).
template <typename T>
void expect_same_as_single_process(const SparseTensor<T>& local, BackendKind kind, CommStrategy s,
                                   int R, int iters, double tol_rel) {
  const auto& w = world();
  auto all = gather_all(local, w);
  auto dist = run_cp<T>(local, w, kind, s, R, iters, 0.0);
  comm::MpiCommunicator self(MPI_COMM_SELF);
  std::vector<double> ref_fit(static_cast<std::size_t>(iters));
  KruskalModel ref = dist.model;  // shape; overwritten from rank 0 below
  if (w.rank() == 0) {
    auto single =
        run_cp<T>(all, self, BackendKind::reference, CommStrategy::allreduce, R, iters, 0.0);
    for (int i = 0; i < iters; ++i)
      ref_fit[static_cast<std::size_t>(i)] = single.history[static_cast<std::size_t>(i)].fit;
    ref = single.model;
  }
  w.broadcast(ref_fit.data(), ref_fit.size(), 0);
  w.broadcast(ref.lambda.data(), ref.lambda.size(), 0);
  for (auto& f : ref.factors) w.broadcast(f.data.data(), f.data.size(), 0);
  ASSERT_EQ(dist.iterations, iters);
  for (int i = 0; i < iters; ++i)
    EXPECT_NEAR(dist.history[static_cast<std::size_t>(i)].fit, ref_fit[static_cast<std::size_t>(i)],
                tol_rel)
        << "iteration " << i + 1;
  EXPECT_LT(model_difference(ref, dist.model), tol_rel * 10);
}

TEST(CpInvariance, GeneratedSameAsSingleProcessBothStrategies) {
  algo::GenerateOptions o = small_lowrank({60, 70, 80}, 20000, 4, 0.1, 21);
  o.structure = algo::Structure::sampled;
  auto g = algo::generate(o, world());
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer})
    for (auto k : {BackendKind::reference, BackendKind::cpu})
      expect_same_as_single_process<double>(g.block, k, s, 5, 6, 1e-9);
}

TEST(CpEngine, HostCommunicatorsTakeThePerOperationPathAndTheRankHintIsRestored) {
  // Host communicators have no stream-ordered collectives (docs/multi-gpu.md): asked, they
  // refuse in one line, and CP-ALS on a host backend runs the per-operation calls on every
  // rank count, saying why, with the MTTKRP balance of the ranks in the result.
  const auto& w = world();
  EXPECT_FALSE(w.can_enqueue());
  double x = 1;
  try {
    w.enqueue_allreduce(&x, 1, comm::ReduceOp::sum, nullptr);
    ADD_FAILURE() << "an MPI communicator enqueued a stream-ordered collective";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no stream-ordered collectives"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(w.wait_stream(nullptr, "test"), Error);
  algo::GenerateOptions o = small_lowrank({40, 30, 20}, 3000, 3, 0.1, 5);
  auto g = algo::generate(o, w);
  auto d = partition::distribute(std::move(g.block), partition::Scheme::nnz, {}, w);
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  EXPECT_EQ(be->native_stream(), nullptr);
  be->set_rank_hint(7);
  algo::CpOptions opt;
  opt.rank = 4;
  opt.max_iters = 3;
  opt.print_iterations = false;
  const auto r = algo::cp_als<double>(d, *be, w, w, opt);
  EXPECT_EQ(r.iteration_engine.rfind("per-operation calls (", 0), 0u) << r.iteration_engine;
  if (w.size() > 1) {
    EXPECT_NE(r.iteration_engine.find("not stream-ordered"), std::string::npos)
        << r.iteration_engine;
  }
  EXPECT_TRUE(r.device_loop_modes.empty());
  EXPECT_GT(r.kernel_mean_seconds, 0.0);
  EXPECT_GE(r.kernel_max_seconds, r.kernel_mean_seconds);
  EXPECT_EQ(be->rank_hint(), 7);  // cp_als's hint (R) held for its prepares only
  be->set_rank_hint(-3);
  EXPECT_EQ(be->rank_hint(), 0);
}

TEST(CpInvariance, FloatSameAsSingleProcess) {
  algo::GenerateOptions o = small_lowrank({25, 30, 20, 15}, 8000, 3, 0.1, 8);
  o.structure = algo::Structure::sampled;
  o.dist = algo::IndexDist::powerlaw;
  auto g = algo::generate(o, world());
  // Float: the reduction order differs with the rank count, so compare loosely.
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer})
    expect_same_as_single_process<float>(g.block.cast<float>(), BackendKind::cpu, s, 4, 4, 2e-4);
}

TEST(CpInvariance, RelabellingChangesBalanceNotResults) {
  algo::GenerateOptions o = small_lowrank({80, 60, 50}, 15000, 4, 0.1, 31);
  o.structure = algo::Structure::sampled;
  o.dist = algo::IndexDist::powerlaw;
  auto g = algo::generate(o, world());
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer}) {
    const auto scheme = s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
    auto plain = partition::distribute(SparseTensor<double>(g.block), scheme, {}, world());
    auto relab =
        partition::distribute_relabelled(SparseTensor<double>(g.block), scheme, {}, world(), 99);
    ASSERT_EQ(relab.dist.global_nnz, plain.dist.global_nnz);
    auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
    algo::CpOptions opt;
    opt.rank = 5;
    opt.max_iters = 6;
    opt.tol = 0;
    opt.strategy = s;
    opt.print_iterations = false;
    auto a = algo::cp_als<double>(plain, *be, world(), world(), opt);
    auto b = algo::cp_als<double>(relab, *be, world(), world(), opt);
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(a.history[i].fit, b.history[i].fit, 1e-9);
    EXPECT_LT(model_difference(a.model, b.model), 1e-8);
  }
}

TEST(Generate, SameTensorOnEveryRankCount) {
  for (auto structure : {algo::Structure::blocks, algo::Structure::sampled}) {
    algo::GenerateOptions o = small_lowrank({40, 30, 50, 20}, 30000, 3, 0.05, 12);
    o.structure = structure;
    o.dist = algo::IndexDist::powerlaw;
    auto g = algo::generate(o, world());
    auto all = gather_all(g.block, world());
    comm::MpiCommunicator self(MPI_COMM_SELF);
    auto single = algo::generate(o, self);
    // Both sides are sorted: the distributed one in rank order (nnz scheme ranges).
    ASSERT_EQ(all.nnz(), single.block.nnz());
    for (int n = 0; n < 4; ++n) EXPECT_EQ(all.idx[n], single.block.idx[n]);
    double worst = 0, scale = 0;
    for (nnz_t k = 0; k < all.nnz(); ++k) {
      worst = std::max(worst, std::abs(all.vals[k] - single.block.vals[k]));
      scale = std::max(scale, std::abs(single.block.vals[k]));
    }
    EXPECT_LT(worst, 1e-13 * scale);  // the noise scale is a global sum: rounding only
  }
}

// ---- cp_als on a tensor that exists only in the backend (prepare_synthetic) ----

synthetic::Spec cp_spec(bool powerlaw) {
  synthetic::Spec s;
  s.order = 3;
  s.dims[0] = 60;
  s.dims[1] = 50;
  s.dims[2] = 40;
  s.powerlaw = powerlaw;
  s.alpha = 1.0;
  s.rank = 4;
  s.seed = 1;
  return s;
}

/// This rank's share of ids, as bench cp --generate takes them: [r nnz / P, (r+1) nnz / P).
std::pair<std::uint64_t, std::uint64_t> id_range(std::uint64_t nnz, const comm::Communicator& c) {
  const auto P = static_cast<std::uint64_t>(c.size()), r = static_cast<std::uint64_t>(c.rank());
  return {nnz * r / P, nnz * (r + 1) / P};
}

algo::CpOptions handle_opts(int R, int iters) {
  algo::CpOptions o;
  o.rank = R;
  o.max_iters = iters;
  o.tol = 0;
  o.seed = 5;
  o.print_iterations = false;
  // The synthetic handles keep repeated coordinates: ||X||^2 understates the tensor.
  o.approximate_fit = true;
  return o;
}

/// The same ids' nonzeros built on the host (repeats kept) as an nnz-scheme
/// partition::Distributed without relabelling, for the partition::Distributed overload.
template <typename T>
partition::Distributed<T> host_block(const synthetic::Spec& spec, std::uint64_t lo,
                                     std::uint64_t hi, std::uint64_t nnz,
                                     const comm::Communicator& c) {
  partition::Distributed<T> d;
  d.block = kernels::make_synthetic_tensor<T>(spec, lo, hi - lo);
  auto& dist = d.dist;
  dist.scheme = partition::Scheme::nnz;
  dist.nranks = c.size();
  dist.rank = c.rank();
  dist.dims.assign(spec.dims, spec.dims + spec.order);
  dist.grid.assign(static_cast<std::size_t>(spec.order), 1);
  dist.coords.assign(static_cast<std::size_t>(spec.order), 0);
  for (auto n : dist.dims) dist.bounds.push_back({0, n});
  dist.global_nnz = static_cast<nnz_t>(nnz);
  return d;
}

void expect_same_history(const algo::CpResult& a, const algo::CpResult& b, double tol,
                         const std::string& what) {
  ASSERT_EQ(a.history.size(), b.history.size()) << what;
  for (std::size_t i = 0; i < a.history.size(); ++i)
    EXPECT_NEAR(a.history[i].fit, b.history[i].fit, tol) << what << " iteration " << i + 1;
  EXPECT_LT(model_difference(a.model, b.model), tol) << what;
}

// On the handle of prepare_synthetic, at every rank count: the same fit history and
// factors as (1) the partition::Distributed overload on the same nonzeros built on the
// host, and (2) a single-process run over all ids; and the same factors as (3) the
// tensor with repeated coordinates merged by partition::distribute (the MTTKRP sums
// repeats either way; only ||X|| and so the fit differ when there are repeats).
// Without approximate_fit, a tensor whose ||X||^2 understates what the MTTKRP sums (repeated
// coordinates counted one by one) is refused on every rank instead of printing a clamped fit.
TEST(CpOnHandle, UnderstatedNormIsRefusedUnlessApproximate) {
  const auto& w = world();
  const std::uint64_t nnz = 6000;
  const auto [lo, hi] = id_range(nnz, w);
  const std::vector<std::uint64_t> dims{60, 50, 40};
  auto be = kernels::make_backend<double>(BackendKind::reference, 1);
  auto X = be->prepare_synthetic(cp_spec(true), lo, hi - lo);
  auto opt = handle_opts(5, 6);
  opt.approximate_fit = false;
  EXPECT_THROW(algo::cp_als<double>(*X, dims, static_cast<nnz_t>(nnz), *be, w, w, opt), InputError);
}

TEST(CpOnHandle, SameAsHostTensorAndSingleProcess) {
  const auto& w = world();
  const std::uint64_t nnz = 6000;
  const int R = 5, iters = 6;
  const auto [lo, hi] = id_range(nnz, w);
  const std::vector<std::uint64_t> dims{60, 50, 40};
  for (bool powerlaw : {false, true})
    for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
      const auto spec = cp_spec(powerlaw);
      const std::string what = kernels::to_string(kind) + (powerlaw ? " powerlaw" : " uniform") +
                               " on " + std::to_string(w.size()) + " ranks";
      auto be = kernels::make_backend<double>(kind, 1);
      const auto opt = handle_opts(R, iters);
      auto X = be->prepare_synthetic(spec, lo, hi - lo);
      const auto on_handle =
          algo::cp_als<double>(*X, dims, static_cast<nnz_t>(nnz), *be, w, w, opt);
      ASSERT_EQ(on_handle.iterations, iters) << what;
      for (const auto& h : on_handle.history) EXPECT_TRUE(std::isfinite(h.fit)) << what;
      EXPECT_GT(on_handle.fit, 0.0) << what;

      // (1) the same nonzeros through the partition::Distributed overload
      const auto d = host_block<double>(spec, lo, hi, nnz, w);
      double norm2 = d.block.norm_squared();
      w.allreduce(&norm2, 1);
      EXPECT_NEAR(on_handle.norm_x, std::sqrt(norm2), 1e-12 * std::sqrt(norm2)) << what;
      const auto on_host = algo::cp_als<double>(d, *be, w, w, opt);
      expect_same_history(on_handle, on_host, 1e-10, what + " vs host-built");
      EXPECT_EQ(on_handle.rows_held, on_host.rows_held) << what;
      EXPECT_EQ(on_handle.mttkrp_stream_bytes, on_host.mttkrp_stream_bytes) << what;

      // (2) one process over all ids (reduction order differs: rounding only)
      comm::MpiCommunicator self(MPI_COMM_SELF);
      auto ref_be = kernels::make_backend<double>(BackendKind::reference, 1);
      auto Xall = ref_be->prepare_synthetic(spec, 0, nnz);
      const auto single =
          algo::cp_als<double>(*Xall, dims, static_cast<nnz_t>(nnz), *ref_be, self, self, opt);
      expect_same_history(on_handle, single, 1e-10, what + " vs single process");

      // (3) repeats merged: same factors
      auto merged = partition::distribute(kernels::make_synthetic_tensor<double>(spec, lo, hi - lo),
                                          partition::Scheme::nnz, {}, w);
      if (powerlaw) {
        EXPECT_GT(merged.dist.duplicates, 0) << what;
      }
      const auto on_merged = algo::cp_als<double>(merged, *be, w, w, opt);
      EXPECT_LT(model_difference(on_handle.model, on_merged.model), 1e-9) << what;
    }
}

TEST(CpOnHandle, FloatSameAsHostTensor) {
  const auto& w = world();
  const std::uint64_t nnz = 5000;
  const auto [lo, hi] = id_range(nnz, w);
  const auto spec = cp_spec(true);
  auto be = kernels::make_backend<float>(BackendKind::cpu, 1);
  const auto opt = handle_opts(4, 4);
  auto X = be->prepare_synthetic(spec, lo, hi - lo);
  const auto a = algo::cp_als<float>(*X, {60, 50, 40}, static_cast<nnz_t>(nnz), *be, w, w, opt);
  const auto b = algo::cp_als<float>(host_block<float>(spec, lo, hi, nnz, w), *be, w, w, opt);
  expect_same_history(a, b, 1e-5, "float");
}

// The layer strategy on prepared grid blocks (partition::synthetic_distribution, each rank's
// block generated through its window): the same fit history and model as the allreduce
// strategy on the handle of the same ids, at every rank count, with the grid chosen or
// given, relabelled or not (only the rows each rank holds and the reduction order differ).
TEST(CpOnHandle, LayerOnGridBlocksSameAsAllreduce) {
  const auto& w = world();
  const std::uint64_t nnz = 6000;
  const std::vector<std::uint64_t> dims{60, 50, 40};
  const auto spec = cp_spec(true);
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  const auto opt = handle_opts(5, 6);
  const auto [lo, hi] = id_range(nnz, w);
  auto Xall = be->prepare_synthetic(spec, lo, hi - lo);
  const auto ar = algo::cp_als<double>(*Xall, dims, static_cast<nnz_t>(nnz), *be, w, w, opt);
  std::vector<std::vector<int>> grids{{}};
  if (w.size() == 2) grids.push_back({1, 2, 1});
  if (w.size() == 4) grids.push_back({2, 1, 2});
  for (const auto& grid : grids)
    for (int kind : {0, 1, 2}) {  // plain, relabelled, dealt
      const std::uint64_t seed = kind == 1 ? partition::kRelabelSeed : 0;
      const std::string what = std::string(grid.empty() ? "chosen grid" : "given grid") +
                               (kind == 1   ? ", relabelled"
                                : kind == 2 ? ", dealt"
                                            : "") +
                               " on " + std::to_string(w.size()) + " ranks";
      const auto d = partition::synthetic_distribution(spec, static_cast<nnz_t>(nnz), grid,
                                                       w.rank(), w.size(), seed, kind == 2);
      auto X = be->prepare_synthetic(spec, partition::window_of(spec, d), 0, nnz);
      auto lopt = opt;
      lopt.strategy = CommStrategy::layer;
      const auto layer = algo::cp_als<double>(*X, d, *be, w, w, lopt);
      expect_same_history(layer, ar, 1e-10, what);
      EXPECT_NEAR(layer.norm_x, ar.norm_x, 1e-12 * ar.norm_x) << what;
      // Announcing another count, or the allreduce strategy, is refused on every rank.
      auto bad = d;
      bad.global_nnz += 1;
      EXPECT_THROW(algo::cp_als<double>(*X, bad, *be, w, w, lopt), InputError) << what;
      EXPECT_THROW(algo::cp_als<double>(*X, d, *be, w, w, opt), CollectiveError) << what;
    }
  // The host path of --deal (partition::distribute_dealt; repeats merged, so ||X|| and the
  // fit differ where coordinates repeat): the same factors as the allreduce run.
  auto dealt =
      partition::distribute_dealt(kernels::make_synthetic_tensor<double>(spec, lo, hi - lo), {}, w);
  EXPECT_TRUE(dealt.dist.deal);
  for (int n = 0; n < 3; ++n) {
    const auto [c0, c1] = dealt.dist.chunk(n);
    EXPECT_LE(
        c1 - c0,
        (dims[static_cast<std::size_t>(n)] + dealt.dist.grid[static_cast<std::size_t>(n)] - 1) /
            static_cast<std::uint64_t>(dealt.dist.grid[static_cast<std::size_t>(n)]));
  }
  auto lopt = opt;
  lopt.strategy = CommStrategy::layer;
  const auto on_dealt = algo::cp_als<double>(dealt, *be, w, w, lopt);
  EXPECT_LT(model_difference(on_dealt.model, ar.model), 1e-9);
}

TEST(CpOnHandle, BadCallsAreInputErrorsOnEveryRank) {
  const auto& w = world();
  const std::uint64_t nnz = 1000;
  const auto [lo, hi] = id_range(nnz, w);
  auto be = kernels::make_backend<double>(BackendKind::reference, 1);
  auto X = be->prepare_synthetic(cp_spec(false), lo, hi - lo);
  const std::vector<std::uint64_t> dims{60, 50, 40};
  auto opt = handle_opts(3, 2);
  opt.strategy = CommStrategy::layer;  // needs a grid partition
  try {
    algo::cp_als<double>(*X, dims, static_cast<nnz_t>(nnz), *be, w, w, opt);
    ADD_FAILURE() << "layer on a handle was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
  }
  opt.strategy = CommStrategy::allreduce;
  EXPECT_THROW(algo::cp_als<double>(*X, dims, static_cast<nnz_t>(nnz + 1), *be, w, w, opt),
               InputError);
  EXPECT_THROW(algo::cp_als<double>(*X, {60, 50, 41}, static_cast<nnz_t>(nnz), *be, w, w, opt),
               InputError);
  EXPECT_THROW(algo::cp_als<double>(*X, {60, 50}, static_cast<nnz_t>(nnz), *be, w, w, opt),
               InputError);
  // Still in step: a normal run works after the errors.
  const auto res = algo::cp_als<double>(*X, dims, static_cast<nnz_t>(nnz), *be, w, w, opt);
  EXPECT_EQ(res.iterations, 2);
}

struct RealCase {
  const char* file;
  int rank;
  int iters;
};

class CpReal : public ::testing::TestWithParam<RealCase> {};

TEST_P(CpReal, SameAsSingleProcessAndFitMonotone) {
  const auto c = GetParam();
  TESSERA_REQUIRE_SHARED(path, c.file);
  auto rr = io::read_tns(path, world());
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer})
    expect_same_as_single_process<double>(rr.local, BackendKind::cpu, s, c.rank, c.iters, 1e-8);
  // ALS never lowers the fit beyond rounding.
  auto res = run_cp<double>(rr.local, world(), BackendKind::cpu, CommStrategy::allreduce, c.rank,
                            c.iters, 0.0);
  for (std::size_t i = 1; i < res.history.size(); ++i)
    EXPECT_GE(res.history[i].fit, res.history[i - 1].fit - 1e-9) << "iteration " << i + 1;
  EXPECT_GT(res.fit, 0.0);
  EXPECT_LT(res.fit, 1.0);
}

INSTANTIATE_TEST_SUITE_P(SharedData, CpReal,
                         ::testing::Values(RealCase{"congress-cosponsor_leg-leg-year.tns.gz", 8, 4},
                                           RealCase{"tkg-icews14_subj-rel-obj-day.tns.gz", 8, 5},
                                           RealCase{"kg-wikipeople-4.tns.gz", 6, 5},
                                           RealCase{"kripke-perf_9mode.tns.gz", 5, 6}),
                         [](const auto& info) {
                           return std::string(info.param.file).substr(0, 5) == "congr"
                                      ? std::string("congress")
                                  : std::string(info.param.file).substr(0, 4) == "tkg-"
                                      ? std::string("icews14")
                                  : std::string(info.param.file).substr(0, 4) == "kg-w"
                                      ? std::string("wikipeople")
                                      : std::string("kripke");
                         });

TEST(CpRobust, EmptySlicesAndRankDeficientGramsGiveNoNaN) {
  // 3 nonzeros in a 50x50x50 tensor (nearly every slice empty), rank 6 > tensor rank.
  SparseTensor<double> x({50, 50, 50});
  if (world().rank() == 0) {
    index_t a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, c[3] = {1, 20, 49};
    x.push_back(a, 1.5);
    x.push_back(b, -2.0);
    x.push_back(c, 0.5);
  }
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer}) {
    auto res = run_cp<double>(x, world(), BackendKind::cpu, s, 6, 10, 0.0);
    for (const auto& h : res.history) EXPECT_TRUE(std::isfinite(h.fit));
    for (const auto& f : res.model.factors)
      for (double v : f.data) ASSERT_TRUE(std::isfinite(v));
    for (double l : res.model.lambda) ASSERT_TRUE(std::isfinite(l));
    EXPECT_GT(res.fit, 0.99);  // 3 nonzeros are a rank-3 tensor
  }
}

TEST(CpRobust, AllZeroValuesIsAClearError) {
  SparseTensor<double> x({5, 5, 5});
  if (world().rank() == 0) {
    index_t a[3] = {1, 2, 3};
    x.push_back(a, 0.0);
  }
  // Decided from an allreduced norm: the same CollectiveError on every rank (one line from
  // the driver, no MPI_Abort).
  EXPECT_THROW(run_cp<double>(x, world(), BackendKind::cpu, CommStrategy::allreduce, 2, 3, 0.0),
               CollectiveError);
}

TEST(CpModelFile, RoundTrip) {
  auto g = algo::generate(small_lowrank({20, 25, 30}, 2000, 2, 0.0, 4), world());
  auto res = run_cp<double>(std::move(g.block), world(), BackendKind::cpu, CommStrategy::allreduce,
                            2, 20, 1e-8);
  const std::string dir = test::temp_dir();  // collective: every rank calls it
  if (world().rank() == 0) {
    const std::string path = dir + "/model.h5";
    io::ModelRecord rec;
    rec.fit = res.fit;
    rec.iterations = res.iterations;
    for (const auto& h : res.history) rec.fit_history.push_back(h.fit);
    rec.options_json = R"({"rank":2})";
    io::write_kruskal_h5(path, res.model, rec);
    io::ModelRecord back;
    auto m = io::read_kruskal_h5(path, &back);
    EXPECT_EQ(m.dims, res.model.dims);
    EXPECT_EQ(m.lambda, res.model.lambda);
    for (int n = 0; n < 3; ++n) EXPECT_EQ(m.factors[n].data, res.model.factors[n].data);
    EXPECT_EQ(back.fit_history, rec.fit_history);
    EXPECT_EQ(back.options_json, rec.options_json);
    EXPECT_DOUBLE_EQ(back.fit, res.fit);
    EXPECT_THROW(io::read_kruskal_h5(dir + "/missing.h5"), InputError);
  }
}

}  // namespace
}  // namespace tessera
