// Distributed SpTC on GPUs with the nonzeros routed over NCCL (ContractOptions::data; on
// the device where the cuda backend can, see below): every rank holds a share of X and Y,
// the cuda backend contracts locally, and the gathered result must equal the reference
// backend on the whole tensors, and the same run routed over MPI (on the host). Integer values, so
// every sum is exact whatever the routing and summation order.
#include <cuda_runtime.h>
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
      c[m] =
          static_cast<index_t>(std::uniform_int_distribution<std::uint64_t>(0, dims[m] - 1)(rng));
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

// Over NCCL at 2 ranks the cuda backend routes on the device (ops::contract_route,
// algo/contract_route.cpp: the row side partitioned by its output modes, the other input
// replicated, no merge) where it can: plain specs, a self-contraction (X and Y the same object), a
// spec whose output lists Y's letters first (the roles swap), a rank with an empty share; a spec
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

// A coordinate past its mode's length on the last rank only (checked on the device after
// the upload, on the device-routed path and on the host-routed one): every rank throws
// CollectiveError with the bad rank's message, none hangs, and the same ranks then run a
// good contraction.
TEST_F(ContractNccl, OutOfRangeCoordinateOnOneRankFailsEveryRank) {
  const auto spec = kernels::parse_contract_spec("ijk,jkl->il");
  const auto X = whole({30, 8, 7}, 4000, 77), Y = whole({8, 7, 40}, 4000, 78);
  auto xs = share(X, rank(), size());
  const auto ys = share(Y, rank(), size());
  auto cu = kernels::make_backend<double>(kernels::BackendKind::cuda);
  algo::ContractOptions o;
  o.print = false;
  for (bool nccl : {true, false}) {
    SCOPED_TRACE(nccl ? "over NCCL" : "over MPI");
    o.data = nccl ? nccl_.get() : nullptr;
    const index_t keep = xs.idx[2][17];
    if (rank() == size() - 1) xs.idx[2][17] = 7;  // mode 2 has length 7
    try {
      (void)algo::contract(xs, ys, spec, *cu, *world_, o);
      ADD_FAILURE() << "no error on rank " << rank();
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("coordinate 7 >= mode length 7"), std::string::npos)
          << e.what();
    }
    xs.idx[2][17] = keep;
    const auto res = algo::contract(xs, ys, spec, *cu, *world_, o);
    const auto got = algo::gather(res.local, *world_, 0);
    if (rank() == 0) {
      auto ref = kernels::make_backend<double>(kernels::BackendKind::reference);
      const auto want = kernels::contract(*ref, X, Y, spec);
      EXPECT_EQ(got.nnz(), want.nnz());
      EXPECT_TRUE(got.vals == want.vals);
    }
  }
}

// Host buffers kept across contractions (algo::ContractBuffers) with the cuda backend: on
// one rank the plan writes into them (ops::contract_into), on 2+ ranks the device
// routing does (ContractRoute::run with a sink). A large output, a smaller one, an empty one
// and the large one again: every share equals the plain call's, the output arrays and the
// pinned inputs are page-locked host memory, and growing the output re-locks it.
TEST_F(ContractNccl, KeptHostBuffersArePageLockedAndGiveThePlainResults) {
  const auto big = kernels::parse_contract_spec("ijk,jkl->il");
  // About 2e8 products into nearly all of the 2000 x 2000 output cells: every array of the
  // output, and the input values, are over 1 MiB per rank (locked).
  const auto X = whole({2000, 40, 20}, 400000, 91), Y = whole({40, 20, 2000}, 400000, 92);
  const auto small = kernels::parse_contract_spec("ij,jk->ki");
  const auto A = whole({60, 30}, 3000, 93), B = whole({30, 70}, 3000, 94);
  const auto xs = share(X, rank(), size()), ys = share(Y, rank(), size());
  const auto as = share(A, rank(), size()), bs = share(B, rank(), size());
  const SparseTensor<double> E({60, 30});
  auto cu = kernels::make_backend<double>(kernels::BackendKind::cuda);
  algo::ContractOptions o;
  o.print = false;
  o.data = nccl_.get();
  auto locked = [](const void* p) {
    cudaPointerAttributes at{};
    return cudaPointerGetAttributes(&at, p) == cudaSuccess && at.type == cudaMemoryTypeHost;
  };
  algo::ContractBuffers<double> buf(*cu);
  (void)buf.pin_input(xs);
  (void)buf.pin_input(ys);
  if (xs.vals.size() * sizeof(double) >= (1u << 20)) {  // locked from 1 MiB (1 or 2 ranks)
    EXPECT_TRUE(locked(xs.vals.data()));
    EXPECT_TRUE(locked(ys.vals.data()));
  }
  struct Step {
    const SparseTensor<double>* x;
    const SparseTensor<double>* y;
    const kernels::ContractSpec* s;
    const char* what;
  };
  const Step steps[] = {{&as, &bs, &small, "small first"},
                        {&xs, &ys, &big, "larger: the arrays grow"},
                        {&as, &bs, &small, "smaller"},
                        {&E, &bs, &small, "empty input"},
                        {&xs, &ys, &big, "large again"}};
  for (const Step& st : steps) {
    SCOPED_TRACE(st.what);
    const auto plain = algo::contract(*st.x, *st.y, *st.s, *cu, *world_, o);
    const auto kept = algo::contract(*st.x, *st.y, *st.s, *cu, *world_, o, &buf);
    EXPECT_EQ(kept.routed_on_device, plain.routed_on_device);
    EXPECT_EQ(kept.local.nnz(), 0);
    EXPECT_EQ(kept.global_nnz, plain.global_nnz);
    const SparseTensor<double>& got = buf.result();
    EXPECT_EQ(got.dims, plain.local.dims);
    ASSERT_EQ(got.nnz(), plain.local.nnz());
    for (std::size_t m = 0; m < got.idx.size(); ++m)
      EXPECT_TRUE(got.idx[m] == plain.local.idx[m]) << "mode " << m;
    EXPECT_TRUE(got.vals == plain.local.vals);
    if (st.s == &big && got.nnz() >= (1 << 18)) {  // arrays of 1 MiB and more are locked
      EXPECT_TRUE(locked(got.vals.data()));
      EXPECT_TRUE(locked(got.idx[0].data()));
    }
  }
  EXPECT_GT(buf.pinned_bytes(), 0u);
}

}  // namespace
}  // namespace tessera
