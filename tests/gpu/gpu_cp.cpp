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

}  // namespace
}  // namespace tessera
