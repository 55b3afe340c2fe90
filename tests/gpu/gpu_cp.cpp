// CP-ALS on GPUs (CUDA backend, NCCL factor updates) against the CPU backend over MPI on
// the same distributed tensor: same fit per iteration and same factors, for both
// strategies, float and double. Run at 1 and 2 ranks (one GPU per rank); every rank
// skips together when the job lacks a GPU per rank.
#include <gtest/gtest.h>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "gpu_test_util.hpp"

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
  /// updates (kernels/cuda/row_update.cu) against the host ones, all of them on the
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
      for (std::size_t n = 0; n < opt.nonneg.size(); ++n)
        if (opt.nonneg[n])
          for (double x : rg.model.factors[n].data) ASSERT_GE(x, 0.0);
      if (opt.holdout > 0) {
        EXPECT_EQ(rg.holdout_entries, rc.holdout_entries);
        EXPECT_NEAR(rg.validation_rmse, rc.validation_rmse, tol * 10 * rc.validation_rmse);
      }
    }
  }
};

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
