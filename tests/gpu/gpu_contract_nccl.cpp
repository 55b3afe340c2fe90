// Distributed SpTC on GPUs with the nonzeros routed over NCCL (ContractOptions::data; on
// the device where the cuda backend can, see below): every rank holds a share of X and Y,
// the cuda backend contracts locally, and the gathered result must equal the reference
// backend on the whole tensors, and the same run routed over MPI (on the host). Integer values, so every sum is exact whatever the routing and summation order.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "algo/contract.hpp"
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"

namespace tessera {
namespace {

using ContractNccl = test::GpuJobTest;

/// The whole tensor (identical on every rank: fixed seed) with integer values in +-[1, 3].
SparseTensor<double> whole(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                           std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  SparseTensor<double> x(dims);
  std::vector<index_t> c(dims.size());
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(std::uniform_int_distribution<std::uint64_t>(0, dims[m] - 1)(rng));
    const double v = static_cast<double>(1 + rng() % 3) * ((rng() & 1) ? 1.0 : -1.0);
    x.push_back(c.data(), v);
  }
  return x;
}

/// Nonzeros k with k % P == r.
SparseTensor<double> share(const SparseTensor<double>& x, int r, int P) {
  SparseTensor<double> s(x.dims);
  std::vector<index_t> c(x.dims.size());
  for (nnz_t k = r; k < x.nnz(); k += P) {
    for (std::size_t m = 0; m < x.dims.size(); ++m) c[m] = x.idx[m][static_cast<std::size_t>(k)];
    s.push_back(c.data(), x.vals[static_cast<std::size_t>(k)]);
  }
  return s;
}

// Over NCCL at 2 ranks the cuda backend routes on the device (Backend::contract_routed:
// the row side partitioned by its output modes, the other input replicated, no merge)
// where it can: plain specs, a self-contraction (X and Y the same object), a spec whose
// output lists Y's letters first (the roles swap), a rank with an empty share; a spec
// whose row side has no output modes falls back to the host routing. Over MPI the host
// routing always runs.
TEST_F(ContractNccl, RoutedOverNcclEqualsReference) {
  struct Case {
    const char* spec;
    std::vector<std::uint64_t> xd, yd;
    bool self = false;   // X and Y the same tensor object
    bool empty = false;  // every nonzero on rank 0, none on the others
    bool device = true;  // routed on the device at 2+ ranks over NCCL
  };
  const Case cases[] = {{"ijk,jkl->il", {30, 8, 7}, {8, 7, 40}},
                        {"ijy,kjy->ik", {50, 40, 6}, {45, 40, 6}},
                        {"abcd,cdbe->ae", {9, 5, 6, 4}, {6, 4, 5, 11}},
                        {"ijy,kjy->ik", {50, 40, 6}, {50, 40, 6}, true},
                        {"ij,jk->ki", {60, 30}, {30, 70}},
                        {"ijk,jkl->li", {30, 8, 7}, {8, 7, 40}, false, true},
                        {"j,jk->k", {30}, {30, 70}, false, false, false}};
  std::uint64_t seed = 20261121;
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs.spec);
    const auto spec = kernels::parse_contract_spec(cs.spec);
    const auto X = whole(cs.xd, 4000, seed++);
    const auto Y = cs.self ? X : whole(cs.yd, 4000, seed++);
    auto part = [&](const SparseTensor<double>& t) {
      return cs.empty ? (rank() == 0 ? t : SparseTensor<double>(t.dims)) : share(t, rank(), size());
    };
    const auto xs = part(X), ys = part(Y);
    const SparseTensor<double>& yarg = cs.self ? xs : ys;
    auto cu = kernels::make_backend<double>(kernels::BackendKind::cuda);
    algo::ContractOptions o;
    o.print = false;
    o.data = nccl_.get();
    const auto nccl_res = algo::contract(xs, yarg, spec, *cu, *world_, o);
    EXPECT_EQ(nccl_res.routed_on_device, cs.device && size() > 1);
    o.data = nullptr;
    const auto mpi_res = algo::contract(xs, yarg, spec, *cu, *world_, o);
    EXPECT_FALSE(mpi_res.routed_on_device);
    const auto got = algo::gather(nccl_res.local, *world_, 0);
    const auto via_mpi = algo::gather(mpi_res.local, *world_, 0);
    EXPECT_EQ(nccl_res.global_nnz, mpi_res.global_nnz);
    EXPECT_EQ(nccl_res.global_products, mpi_res.global_products);
    if (rank() != 0) continue;
    auto ref = kernels::make_backend<double>(kernels::BackendKind::reference);
    const auto want = kernels::contract(*ref, X, Y, spec);
    ASSERT_GT(want.nnz(), 0);
    EXPECT_EQ(got.nnz(), want.nnz());
    EXPECT_EQ(via_mpi.nnz(), want.nnz());
    if (got.nnz() != want.nnz()) continue;
    for (std::size_t m = 0; m < want.idx.size(); ++m) {
      EXPECT_TRUE(got.idx[m] == want.idx[m]) << "output mode " << m;
      EXPECT_TRUE(via_mpi.idx[m] == want.idx[m]) << "output mode " << m;
    }
    EXPECT_TRUE(got.vals == want.vals) << "values differ from the reference (exact integers)";
    EXPECT_TRUE(via_mpi.vals == want.vals);
  }
}

}  // namespace
}  // namespace tessera
