// CP-ALS on GPUs (CUDA backend, NCCL factor updates) against the CPU backend over MPI on
// the same distributed tensor: same fit per iteration and same factors, for both
// strategies, float and double. Run at 1 and 2 ranks (one GPU per rank); every rank
// skips together when the job lacks a GPU per rank.
#include <gtest/gtest.h>

#include <cmath>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "gpu_util.hpp"

namespace tessera {
namespace {

using algo::CommStrategy;

class GpuCp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    world_ = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD);
    skip_ = comm::gpu_per_rank(*world_);
    if (skip_.empty()) nccl_ = comm::make_nccl_communicator(*world_);
  }
  static void TearDownTestSuite() {
    nccl_.reset();
    world_.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  template <typename T>
  void compare(CommStrategy s, double tol) {
    algo::GenerateOptions o;
    o.dims = {300, 200, 250};
    o.nnz = 60000;
    o.rank = 5;
    o.noise = 0.1;
    o.structure = algo::Structure::sampled;
    o.dist = algo::IndexDist::powerlaw;
    o.seed = 17;
    auto g = algo::generate(o, *world_);
    const auto scheme = s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
    auto d = partition::distribute(g.block.template cast<T>(), scheme, {}, *world_);
    algo::CpOptions opt;
    opt.rank = 12;
    opt.max_iters = 8;
    opt.tol = 0;
    opt.strategy = s;
    opt.print_iterations = false;
    auto gpu = kernels::make_backend<T>(kernels::BackendKind::cuda);
    auto cpu = kernels::make_backend<T>(kernels::BackendKind::cpu, 1);
    auto rg = algo::cp_als<T>(d, *gpu, *world_, *nccl_, opt);
    auto rc = algo::cp_als<T>(d, *cpu, *world_, *world_, opt);
    ASSERT_EQ(rg.history.size(), rc.history.size());
    for (std::size_t i = 0; i < rg.history.size(); ++i)
      EXPECT_NEAR(rg.history[i].fit, rc.history[i].fit, tol) << "iteration " << i + 1;
    for (int n = 0; n < 3; ++n) {
      double num = 0, den = 0;
      for (std::size_t k = 0; k < rg.model.factors[n].data.size(); ++k) {
        const double e = rg.model.factors[n].data[k] - rc.model.factors[n].data[k];
        num += e * e;
        den += rc.model.factors[n].data[k] * rc.model.factors[n].data[k];
      }
      EXPECT_LT(std::sqrt(num / den), 100 * tol) << "mode " << n;
    }
  }

  static std::unique_ptr<comm::MpiCommunicator> world_;
  static std::unique_ptr<comm::Communicator> nccl_;
  static std::string skip_;
};

std::unique_ptr<comm::MpiCommunicator> GpuCp::world_;
std::unique_ptr<comm::Communicator> GpuCp::nccl_;
std::string GpuCp::skip_;

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
