// CP-ALS on GPUs (CUDA backend, NCCL factor updates) against the CPU backend over MPI on
// the same distributed tensor: same fit per iteration and same factors, for both
// strategies, float and double, through the device loop (its collectives inside the CUDA
// graph on several ranks) and the per-operation calls. Run at 1, 2 and 4 ranks (one GPU per
// rank); every rank skips together when the job lacks a GPU per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "gpu_test_util.hpp"
#include "partition/partition.hpp"
#include "tensor/synthetic.hpp"

namespace tessera {
namespace {

using algo::CommStrategy;

using namespace ::tessera::test;

class GpuCp : public GpuJobTest {
 protected:
  template <typename T>
  void compare(CommStrategy s, double tol) {
    auto d = cp_problem<T>(s, 17, *world_);
    const auto opt = cp_test_options(s);
    auto gpu = kernels::make_backend<T>(kernels::BackendKind::cuda);
    auto cpu = kernels::make_backend<T>(kernels::BackendKind::cpu, 1);
    auto rg = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
    auto rc = algo::cp_als<T>(d, *cpu, *world_, *world_, opt);
    expect_same_cp(rg, rc, tol);
  }
  /// Constrained, regularised and weighted CP (docs/constrained-cp.md): the cuda row
  /// updates (kernels/cuda/dense/row_update.cu) against the host ones, all of them on the
  /// factors the GPU holds.
  template <typename T>
  void compare_constrained(CommStrategy s, double tol) {
    auto d = cp_problem<T>(s, 17, *world_);
    const int N = d.dist.order();
    auto base = cp_test_options(s);
    std::vector<algo::CpOptions> variants;
    {
      auto o = base;
      o.nonneg.assign(static_cast<std::size_t>(N), true);
      o.l1.assign(static_cast<std::size_t>(N), 0.01);
      o.l2.assign(static_cast<std::size_t>(N), 0.1);
      variants.push_back(o);
    }
    {
      auto o = base;
      o.observed_only = true;
      o.l2.assign(static_cast<std::size_t>(N), 1e-3);
      o.holdout = 0.1;
      variants.push_back(o);
    }
    {
      auto o = base;
      o.observed_only = true;
      o.nonneg.assign(static_cast<std::size_t>(N), true);
      variants.push_back(o);
    }
    {
      auto o = base;
      o.l2.assign(static_cast<std::size_t>(N), 0.5);  // the shared solve of V + l2 I
      variants.push_back(o);
    }
    for (const auto& opt : variants) {
      auto gpu = kernels::make_backend<T>(kernels::BackendKind::cuda);
      auto cpu = kernels::make_backend<T>(kernels::BackendKind::cpu, 1);
      auto rg = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
      auto rc = algo::cp_als<T>(d, *cpu, *world_, *world_, opt);
      SCOPED_TRACE(std::string("observed_only ") + (opt.observed_only ? "1" : "0") + " nonneg " +
                   (opt.nonneg.empty() ? "0" : "1") + " holdout " + std::to_string(opt.holdout));
      expect_same_cp(rg, rc, tol);
      for (std::size_t n = 0; n < opt.nonneg.size(); ++n) {
        if (opt.nonneg[n]) {
          for (double x : rg.model.factors[n].data) ASSERT_GE(x, 0.0);
        }
      }
      if (opt.holdout > 0) {
        EXPECT_EQ(rg.holdout_entries, rc.holdout_entries);
        EXPECT_NEAR(rg.validation_rmse, rc.validation_rmse, tol * 10 * rc.validation_rmse);
      }
    }
  }
  /// The device loop (kernels/cp_device.hpp; a CUDA graph from the second iteration on one
  /// rank) against the per-operation calls on the same GPU and against the cpu backend:
  /// fits per iteration, factors and weights, and the solve fallbacks counted alike.
  template <typename T>
  void compare_device_loop(const partition::Distributed<T>& d, algo::CpOptions opt, double tol,
                           bool expect_fallbacks, const kernels::Tuning& tuning = {}) {
    auto gpu = kernels::make_backend<T>(kernels::BackendKind::cuda, 0, tuning);
    auto cpu = kernels::make_backend<T>(kernels::BackendKind::cpu, 1);
    opt.device_loop = true;
    auto rl = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
    opt.device_loop = false;
    auto ro = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
    auto rc = algo::cp_als<T>(d, *cpu, *world_, *world_, opt);
    if (world_->size() == 1) {
      EXPECT_EQ(rl.iteration_engine, "cuda graph");
    } else {
      // On several GPUs the loop combines the rows with NCCL inside the graph.
      EXPECT_EQ(rl.iteration_engine.rfind(
                    "cuda graph on " + std::to_string(world_->size()) + " ranks", 0),
                0u)
          << rl.iteration_engine;
    }
    EXPECT_NE(ro.iteration_engine.find("--cuda-graph off"), std::string::npos)
        << ro.iteration_engine;
    expect_same_cp(rl, ro, tol);
    expect_same_cp(rl, rc, tol);
    ASSERT_EQ(rl.model.lambda.size(), rc.model.lambda.size());
    for (std::size_t r = 0; r < rc.model.lambda.size(); ++r)
      EXPECT_NEAR(rl.model.lambda[r], rc.model.lambda[r], 100 * tol * std::abs(rc.model.lambda[r]))
          << "lambda " << r;
    EXPECT_EQ(rl.solve_fallbacks, rc.solve_fallbacks);
    EXPECT_EQ(rl.solve_fallbacks > 0, expect_fallbacks);
    // The replayed iterations time their phases on the device.
    for (std::size_t i = 1; i < rl.history.size(); ++i) {
      EXPECT_GT(rl.history[i].kernel, 0.0) << "iteration " << i + 1;
      EXPECT_GT(rl.history[i].solve, 0.0) << "iteration " << i + 1;
      if (world_->size() > 1) {
        EXPECT_GT(rl.history[i].comm, 0.0) << "iteration " << i + 1;
      }
    }
  }
  /// The device loop on several ranks, every way its rows can be combined: both strategies,
  /// and for allreduce every mode whole (all-reduced, solved on every rank), every mode
  /// split (reduce-scattered, solved in blocks, all-gathered; --comm-overlap off) or every
  /// mode whole in row pieces, each all-reduced while the next computes (--comm-overlap on,
  /// the plain layout, whose copies are sorted by output row; 15 pieces of uneven nonzeros,
  /// ordered by rows per nonzero); each against the per-operation path and the cpu backend,
  /// and the model the same on every rank.
  template <typename T>
  void compare_device_loop_combinations(double tol) {
    enum Way { kWhole, kSplit, kPieces };
    for (auto s : {CommStrategy::allreduce, CommStrategy::layer}) {
      for (Way w : {kWhole, kSplit, kPieces}) {
        if (s == CommStrategy::layer && w != kWhole) continue;  // layer always splits
        SCOPED_TRACE(std::string(s == CommStrategy::layer ? "layer" : "allreduce") +
                     (w == kWhole   ? " whole"
                      : w == kSplit ? " split"
                                    : " pieces"));
        auto d = cp_problem<T>(s, 21, *world_);
        auto opt = cp_test_options(s);
        opt.whole_rows_max_bytes = w == kWhole ? 1e18 : 0.0;
        opt.comm_overlap = w == kPieces;
        opt.overlap_piece_bytes = 2000;  // 200-300 rows x 12 x T: 10-15 pieces per mode
        kernels::Tuning tuning;
        if (w == kPieces) tuning.cuda_layout = kernels::CudaLayout::plain;
        compare_device_loop(d, opt, tol, false, tuning);
        if (world_->size() > 1) {
          auto gpu = kernels::make_backend<T>(kernels::BackendKind::cuda, 0, tuning);
          auto r = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
          const bool split = s == CommStrategy::layer || w == kSplit;
          if (w == kPieces) {
            // Every mode in pieces: "whole in K pieces" three times, K = ceil(rows x 12 x
            // sizeof(T) / 2000) (8-15).
            const auto& e = r.iteration_engine;
            int found = 0;
            for (auto at = e.find("whole in "); at != std::string::npos;
                 at = e.find("whole in ", at + 1)) {
              const int k = std::atoi(e.c_str() + at + 9);
              EXPECT_GE(k, 5) << e;
              ++found;
            }
            EXPECT_EQ(found, 3) << e;
          } else {
            EXPECT_NE(r.iteration_engine.find(split ? "split,split,split" : "whole,whole,whole"),
                      std::string::npos)
                << r.iteration_engine;
          }
          // Every rank holds the same model: rank 0's factors and weights broadcast and
          // compared on every rank; the largest relative difference agreed over the ranks
          // (so that every rank takes the same path through the test).
          double worst = 0;
          for (std::size_t n = 0; n <= r.model.factors.size(); ++n) {
            std::vector<double> mine =
                n < r.model.factors.size() ? r.model.factors[n].data : r.model.lambda;
            std::vector<double> root = mine;
            world_->broadcast(root.data(), root.size(), 0);
            for (std::size_t i = 0; i < mine.size(); ++i)
              worst = std::max(worst,
                               std::abs(mine[i] - root[i]) / std::max(std::abs(root[i]), 1e-300));
          }
          world_->allreduce(&worst, 1, comm::ReduceOp::max);
          EXPECT_LE(worst, tol) << "the ranks' models differ";
        }
      }
    }
  }
};

TEST_F(GpuCp, DeviceLoopAcrossRanksDouble) {
  compare_device_loop_combinations<double>(1e-9);
}
TEST_F(GpuCp, DeviceLoopAcrossRanksFloat) {
  compare_device_loop_combinations<float>(2e-4);
}

TEST_F(GpuCp, DeviceLoopDouble) {
  auto d = cp_problem<double>(CommStrategy::allreduce, 23, *world_);
  compare_device_loop(d, cp_test_options(CommStrategy::allreduce), 1e-9, false);
}
TEST_F(GpuCp, DeviceLoopFloat) {
  auto d = cp_problem<float>(CommStrategy::allreduce, 23, *world_);
  compare_device_loop(d, cp_test_options(CommStrategy::allreduce), 2e-4, false);
}
/// --gather-precision fp16 through the device loop (a CUDA graph from the second iteration on
/// one rank; the 16-bit copies' buffer must not move under it): the same iterations as the
/// per-operation path with the same gathers, and close to float gathers without being them.
TEST_F(GpuCp, DeviceLoopWithSixteenBitGathers) {
  auto d = cp_problem<float>(CommStrategy::allreduce, 23, *world_);
  auto opt = cp_test_options(CommStrategy::allreduce);
  kernels::Tuning t;
  t.gather_precision = kernels::GatherPrecision::fp16;
  auto low = kernels::make_backend<float>(kernels::BackendKind::cuda, 0, t);
  auto full = kernels::make_backend<float>(kernels::BackendKind::cuda);
  opt.device_loop = true;
  const auto rl = algo::cp_als<float>(d, *low, *world_, *nccl_, opt);
  const auto rf = algo::cp_als<float>(d, *full, *world_, *nccl_, opt);
  opt.device_loop = false;
  const auto ro = algo::cp_als<float>(d, *low, *world_, *nccl_, opt);
  if (world_->size() == 1) {
    EXPECT_EQ(rl.iteration_engine, "cuda graph");
  }
  expect_same_cp(rl, ro, 2e-4);
  expect_same_cp(rl, rf, 1e-3);
  double diff = 0;
  for (std::size_t n = 0; n < rf.model.factors.size(); ++n)
    for (std::size_t k = 0; k < rf.model.factors[n].data.size(); ++k)
      diff = std::max(diff, std::abs(rl.model.factors[n].data[k] - rf.model.factors[n].data[k]));
  EXPECT_GT(diff, 0.0) << "the 16-bit gathers changed nothing";
}
TEST_F(GpuCp, DeviceLoopRanksUpToTheLimit) {
  // R not a multiple of the kernels' 4-wide tiles, and the largest R the loop takes.
  auto d = cp_problem<double>(CommStrategy::allreduce, 29, *world_);
  for (int R : {1, 33, 128}) {
    SCOPED_TRACE("R " + std::to_string(R));
    auto opt = cp_test_options(CommStrategy::allreduce);
    opt.rank = R;
    opt.max_iters = 4;
    compare_device_loop(d, opt, 1e-8, false);
  }
}
TEST_F(GpuCp, DeviceLoopSingularNormalEquations) {
  // A 2 x 2 x 40 tensor at R = 5: mode 2's V (the Hadamard product of two Grams of rank
  // <= 2) has rank <= 4 < 5 in every iteration, so each of its solves takes the on-device
  // Jacobi pseudo-inverse. Such a tensor has CP rank <= 4, so R = 5 fits it exactly: the
  // factors are not unique (runs that round differently may settle on different exact
  // decompositions) and modes 0 and 1 drift towards singular V over the iterations, where
  // taking the fallback or not becomes a rounding decision.
  SparseTensor<double> x({2, 2, 40});
  if (world_->rank() == 0)
    for (index_t i = 0; i < 2; ++i)
      for (index_t j = 0; j < 2; ++j)
        for (index_t k = 0; k < 40; ++k) {
          const index_t c[3] = {i, j, k};
          x.push_back(c,
                      1.0 + 0.25 * i - 0.5 * j + 0.01 * k * k + ((i + j + k) % 3 == 0 ? 0.7 : 0.0));
        }
  auto d = partition::distribute(std::move(x), partition::Scheme::nnz, {}, *world_);
  auto opt = cp_test_options(CommStrategy::allreduce);
  opt.rank = 5;
  // Two iterations from the random start: modes 0 and 1 are still well conditioned, so
  // every decision is clean and the whole model is comparable. The fit is already near 1,
  // where 1 - sqrt(||X||^2 + ||M||^2 - 2 <X, M>) / ||X|| keeps about half of double's
  // digits (measured: 3e-7 between the per-operation cuda path and the cpu backend, the
  // loop gives 1 exactly): fits to 1e-6, factors to 1e-4.
  opt.max_iters = 2;
  compare_device_loop(d, opt, 1e-6, true);
  auto gpu = kernels::make_backend<double>(kernels::BackendKind::cuda);
  auto r = algo::cp_als<double>(d, *gpu, *world_, *nccl_, opt);
  if (world_->size() == 1) {
    EXPECT_EQ(r.solve_fallbacks, 2);  // mode 2, once per iteration
  }
}

// The layer strategy on grid blocks generated on each rank's GPU (bench cp --generate
// --comm-strategy layer: partition::synthetic_distribution, Backend::prepare_synthetic with
// the rank's window), relabelled or not: the device loop against the cpu backend on the same
// windows, and against the allreduce strategy on the same ids.
TEST_F(GpuCp, LayerOnGeneratedGridBlocks) {
  synthetic::Spec spec;
  spec.order = 3;
  spec.dims[0] = 3000;
  spec.dims[1] = 200;
  spec.dims[2] = 400;
  spec.powerlaw = true;
  spec.alpha = 1.0;
  spec.rank = 4;
  spec.seed = 2;
  const std::uint64_t nnz = 60000;
  auto opt = cp_test_options(CommStrategy::layer);
  opt.approximate_fit = true;  // generated: repeats kept
  opt.device_loop = true;
  auto gpu = kernels::make_backend<double>(kernels::BackendKind::cuda);
  auto cpu = kernels::make_backend<double>(kernels::BackendKind::cpu, 1);
  const int P = world_->size(), me = world_->rank();
  auto ao = opt;
  ao.strategy = CommStrategy::allreduce;
  auto Xa = gpu->prepare_synthetic(spec, nnz * me / P, nnz * (me + 1) / P - nnz * me / P);
  const auto ra = algo::cp_als<double>(*Xa, {3000, 200, 400}, nnz, *gpu, *world_, *nccl_, ao);
  for (int kind : {0, 1, 2}) {
    SCOPED_TRACE(kind == 1 ? "relabelled" : kind == 2 ? "dealt" : "plain");
    const auto d = partition::synthetic_distribution(
        spec, nnz, {}, me, P, kind == 1 ? partition::kRelabelSeed : 0, kind == 2);
    const auto w = partition::window_of(spec, d);
    auto Xg = gpu->prepare_synthetic(spec, w, 0, nnz);
    auto Xc = cpu->prepare_synthetic(spec, w, 0, nnz);
    ASSERT_EQ(Xg->nnz(), Xc->nnz());
    const auto rg = algo::cp_als<double>(*Xg, d, *gpu, *world_, *nccl_, opt);
    const auto rc = algo::cp_als<double>(*Xc, d, *cpu, *world_, *world_, opt);
    if (P > 1) {
      EXPECT_EQ(rg.iteration_engine.rfind("cuda graph on " + std::to_string(P) + " ranks", 0), 0u)
          << rg.iteration_engine;
    }
    expect_same_cp(rg, rc, 1e-9);
    expect_same_cp(rg, ra, 1e-9);
  }
}

TEST_F(GpuCp, AllreduceDouble) {
  compare<double>(CommStrategy::allreduce, 1e-9);
}
TEST_F(GpuCp, LayerDouble) {
  compare<double>(CommStrategy::layer, 1e-9);
}
TEST_F(GpuCp, AllreduceFloat) {
  compare<float>(CommStrategy::allreduce, 2e-4);
}
TEST_F(GpuCp, LayerFloat) {
  compare<float>(CommStrategy::layer, 2e-4);
}

TEST_F(GpuCp, ConstrainedAllreduceDouble) {
  compare_constrained<double>(CommStrategy::allreduce, 1e-9);
}
TEST_F(GpuCp, ConstrainedLayerDouble) {
  compare_constrained<double>(CommStrategy::layer, 1e-9);
}
TEST_F(GpuCp, ConstrainedAllreduceFloat) {
  compare_constrained<float>(CommStrategy::allreduce, 5e-4);
}

}  // namespace
}  // namespace tessera
