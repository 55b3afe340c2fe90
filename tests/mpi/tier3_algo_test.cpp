// Memory tier 3 (DESIGN §8, src/engine/algo/disk_tier.hpp) under MPI (tier3_algo_np<P>, P = 1, 2,
// 3): CP-ALS and Tucker-HOOI in tier 3 (a DiskTensor, whose StreamedOps hooks stream it
// through the backend) equal tier 1 on the same ranks and a single process, on generated
// low-rank tensors written to temporary HDF5 stores (plain and with a stored partition of P
// blocks).
// Reading and streaming a store, and its errors, are in tier3_disk_test.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/disk_tier.hpp"
#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/h5store.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"
#include "test_util.hpp"
#include "tier3_test_util.hpp"
#include "util/error.hpp"

namespace tessera {
namespace {

using algo::DiskTensor;
using algo::DiskTensorOptions;
using kernels::BackendKind;
using namespace test::tier3;

// ---- c. CP-ALS, d. Tucker-HOOI: tier 3 against tier 1 ----------------------------------

/// A generated exact low-rank tensor plus noise (sorted, no repeats), whole on every rank.
SparseTensor<double> lowrank(std::vector<std::uint64_t> dims, std::int64_t nnz, int rank,
                             std::uint64_t seed) {
  algo::GenerateOptions o;
  o.dims = std::move(dims);
  o.nnz = nnz;
  o.rank = rank;
  o.noise = 0.05;
  o.seed = seed;
  auto g = algo::generate(o, world());
  const int P = world().size();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(P), g.block.nnz());
  auto replicate = [P](const auto& v) {
    std::remove_cvref_t<decltype(v)> out;
    for (int r = 0; r < P; ++r) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  SparseTensor<double> all(g.block.dims);
  for (int m = 0; m < all.order(); ++m)
    all.idx[m] = world().alltoallv(replicate(g.block.idx[m]), counts);
  all.vals = world().alltoallv(replicate(g.block.vals), counts);
  return all;
}

double model_difference(const KruskalModel& a, const KruskalModel& b) {
  double worst = 0;
  for (int n = 0; n < a.order(); ++n) {
    double num = 0, den = 0;
    for (std::size_t k = 0; k < a.factors[n].data.size(); ++k) {
      const double d = a.factors[n].data[k] - b.factors[n].data[k];
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

algo::CpOptions cp_opts(int R, int iters) {
  algo::CpOptions o;
  o.rank = R;
  o.max_iters = iters;
  o.tol = 0;
  o.seed = 7;
  o.print_iterations = false;
  return o;
}

/// Tier 3 on `d` (this rank's DiskTensor) on a backend of `kind`.
template <typename T>
algo::CpResult cp_tier3(const DiskTensor<T>& d, const Stored& st, BackendKind kind,
                        const algo::CpOptions& o) {
  auto be = kernels::make_backend<T>(kind, 1);
  return algo::cp_als<T>(d, st.x.dims, st.x.nnz(), *be, world(), world(), o);
}

/// Tier 1 on the same share of nonzeros, distributed by the nnz scheme.
template <typename T>
algo::CpResult cp_tier1(const Stored& st, BackendKind kind, const algo::CpOptions& o) {
  const auto [a, n] = share_range(st.x.nnz(), world().rank(), world().size());
  auto d = partition::distribute(range_of<T>(st.x, a, n), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<T>(kind, 1);
  return algo::cp_als<T>(d, *be, world(), world(), o);
}

/// One process (rank 0, reference backend, tier 1 on the whole tensor), broadcast.
algo::CpResult cp_single_process(const Stored& st, const algo::CpOptions& o) {
  const auto& w = world();
  algo::CpResult ref;
  std::vector<double> fits(static_cast<std::size_t>(o.max_iters), 0.0);
  if (w.rank() == 0) {
    comm::MpiCommunicator self(MPI_COMM_SELF);
    auto d = partition::distribute(SparseTensor<double>(st.x), partition::Scheme::nnz, {}, self);
    auto be = kernels::make_backend<double>(BackendKind::reference, 1);
    ref = algo::cp_als<double>(d, *be, self, self, o);
    for (std::size_t i = 0; i < ref.history.size(); ++i) fits[i] = ref.history[i].fit;
  } else {
    ref.model.dims = st.x.dims;
    ref.model.rank = o.rank;
    ref.model.lambda.assign(static_cast<std::size_t>(o.rank), 0.0);
    for (auto n : st.x.dims) ref.model.factors.emplace_back(static_cast<std::int64_t>(n), o.rank);
  }
  w.broadcast(fits.data(), fits.size(), 0);
  ref.history.resize(fits.size());
  for (std::size_t i = 0; i < fits.size(); ++i) ref.history[i].fit = fits[i];
  w.broadcast(ref.model.lambda.data(), ref.model.lambda.size(), 0);
  for (auto& f : ref.model.factors) w.broadcast(f.data.data(), f.data.size(), 0);
  return ref;
}

void expect_same_cp(const algo::CpResult& got, const algo::CpResult& want, double fit_tol,
                    double model_tol, const std::string& what) {
  ASSERT_EQ(got.history.size(), want.history.size()) << what;
  for (std::size_t i = 0; i < want.history.size(); ++i)
    EXPECT_NEAR(got.history[i].fit, want.history[i].fit, fit_tol) << what << " iteration " << i + 1;
  EXPECT_LT(model_difference(got.model, want.model), model_tol) << what;
}

TEST(Tier3Cp, SameAsTier1AndAsOneProcess) {
  const std::uint64_t seed = shared_seed();
  const int iters = 5;
  const struct {
    std::vector<std::uint64_t> dims;
    std::int64_t nnz;
    int R;
  } cases[] = {{{30, 25, 20}, 3000, 3}, {{12, 10, 9, 8}, 2500, 4}};
  for (const auto& c : cases) {
    const auto st = store(lowrank(c.dims, c.nnz, 3, seed), "cp");
    const auto o = cp_opts(c.R, iters);
    const std::string base = shape_name(st.x) + " on " + std::to_string(world().size()) +
                             " ranks, seed " + std::to_string(seed);
    const auto single = cp_single_process(st, o);
    ASSERT_EQ(single.history.size(), static_cast<std::size_t>(iters));
    EXPECT_GT(single.history.back().fit, 0.5) << base;  // low rank plus 5% noise
    const int P = world().size(), r = world().rank();
    const auto [a, n] = share_range(st.x.nnz(), r, P);
    for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
      const std::string what = base + ", " + kernels::to_string(kind);
      const auto t1 = cp_tier1<double>(st, kind, o);
      EXPECT_EQ(t1.tier, 1) << what;
      // Equal shares of the stored order, and the blocks of the stored partition.
      const auto share = open_range(st.plain, a, n, 211);
      DiskTensorOptions bo;
      bo.path = st.blocked;
      bo.block = r;
      bo.chunk_nnz = 100;
      const DiskTensor<double> block(bo);
      for (const DiskTensor<double>* d :
           {static_cast<const DiskTensor<double>*>(share.get()), &block}) {
        const std::string w2 = what + (d == &block ? ", stored blocks" : ", equal shares");
        const auto t3 = cp_tier3<double>(*d, st, kind, o);
        EXPECT_EQ(t3.tier, 3) << w2;
        EXPECT_TRUE(contains(t3.tier_description, "tier 3")) << t3.tier_description;
        EXPECT_GE(t3.stream_overlap, 0.0) << w2;
        EXPECT_LE(t3.stream_overlap, 1.0) << w2;
        EXPECT_GT(t3.stream_compute_seconds, 0.0) << w2;
        EXPECT_NEAR(t3.norm_x, t1.norm_x, 1e-13 * t1.norm_x) << w2;
        expect_same_cp(t3, t1, 1e-10, 1e-8, w2 + " vs tier 1");
        expect_same_cp(t3, single, 1e-10, 1e-8, w2 + " vs one process");
      }
    }
    // Float: the same iteration to float rounding.
    const auto f1 = cp_tier1<float>(st, BackendKind::cpu, o);
    DiskTensorOptions fo;
    fo.path = st.plain;
    fo.first = a;
    fo.count = n;
    fo.chunk_nnz = 150;
    const DiskTensor<float> fd(fo);
    const auto f3 = cp_tier3<float>(fd, st, BackendKind::cpu, o);
    ASSERT_EQ(f3.history.size(), f1.history.size());
    for (std::size_t i = 0; i < f1.history.size(); ++i)
      EXPECT_NEAR(f3.history[i].fit, f1.history[i].fit, 1e-4) << base << " float iteration " << i;
    EXPECT_LT(model_difference(f3.model, f1.model), 1e-3) << base << " float";
  }
}

TEST(Tier3Cp, NonnegativeRegularisedSameAsTier1AndAsOneProcess) {
  // Constrained CP needs nothing of the tier but the MTTKRP: the row updates (HALS, L1,
  // L2) run on the factors, so tier 3 gives tier 1's iterations (docs/constrained-cp.md).
  const std::uint64_t seed = shared_seed();
  const auto st = store(lowrank({30, 25, 20}, 3000, 3, seed), "cpnn");
  auto o = cp_opts(3, 5);
  o.nonneg = {true, true, true};
  o.l1 = {0.01, 0.0, 0.02};
  o.l2 = {0.1, 0.1, 0.0};
  const std::string base =
      "nonneg on " + std::to_string(world().size()) + " ranks, seed " + std::to_string(seed);
  const auto single = cp_single_process(st, o);
  const auto [a, n] = share_range(st.x.nnz(), world().rank(), world().size());
  for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
    const std::string what = base + ", " + kernels::to_string(kind);
    const auto t1 = cp_tier1<double>(st, kind, o);
    const auto share = open_range(st.plain, a, n, 211);
    const auto t3 = cp_tier3<double>(*share, st, kind, o);
    EXPECT_EQ(t3.tier, 3) << what;
    expect_same_cp(t3, t1, 1e-10, 1e-8, what + " tier 3 vs tier 1");
    expect_same_cp(t3, single, 1e-10, 1e-8, what + " tier 3 vs one process");
    for (const auto& f : t3.model.factors)
      for (double x : f.data) ASSERT_GE(x, 0.0) << what;
  }
}

algo::TuckerOptions tucker_opts(std::vector<int> ranks, int iters) {
  algo::TuckerOptions o;
  o.ranks = std::move(ranks);
  o.max_iters = iters;
  o.tol = 0;
  o.seed = 3;
  o.svd = algo::SvdMethod::gram;
  o.print_iterations = false;
  return o;
}

/// Largest over modes of ||Ub - Ua Ua^T Ub||_F (orthonormal columns): 0 for equal spans.
double max_gap(const TuckerModel& a, const TuckerModel& b) {
  double worst = 0;
  for (std::size_t n = 0; n < a.factors.size(); ++n) {
    const auto& Ua = a.factors[n];
    const auto& Ub = b.factors[n];
    std::vector<double> M(static_cast<std::size_t>(Ua.cols * Ub.cols), 0.0);
    for (std::int64_t i = 0; i < Ua.rows; ++i)
      for (std::int64_t p = 0; p < Ua.cols; ++p)
        for (std::int64_t q = 0; q < Ub.cols; ++q) M[p * Ub.cols + q] += Ua(i, p) * Ub(i, q);
    double s = 0;
    for (std::int64_t i = 0; i < Ub.rows; ++i)
      for (std::int64_t q = 0; q < Ub.cols; ++q) {
        double v = Ub(i, q);
        for (std::int64_t p = 0; p < Ua.cols; ++p) v -= Ua(i, p) * M[p * Ub.cols + q];
        s += v * v;
      }
    worst = std::max(worst, std::sqrt(s));
  }
  return worst;
}

TEST(Tier3Tucker, SameAsTier1AndAsOneProcess) {
  const std::uint64_t seed = shared_seed();
  const int iters = 4;
  const struct {
    std::vector<std::uint64_t> dims;
    std::int64_t nnz;
    std::vector<int> ranks;
  } cases[] = {{{30, 25, 20}, 3000, {3, 3, 2}}, {{12, 10, 9, 8}, 2500, {2, 3, 2, 2}}};
  const int P = world().size(), r = world().rank();
  for (const auto& c : cases) {
    const auto st = store(lowrank(c.dims, c.nnz, 3, seed + 1), "tucker");
    const auto o = tucker_opts(c.ranks, iters);
    const std::string base =
        shape_name(st.x) + " on " + std::to_string(P) + " ranks, seed " + std::to_string(seed);
    const auto [a, n] = share_range(st.x.nnz(), r, P);
    // One process, broadcast.
    std::vector<double> single(static_cast<std::size_t>(iters), 0.0);
    if (r == 0) {
      comm::MpiCommunicator self(MPI_COMM_SELF);
      auto d = partition::distribute(SparseTensor<double>(st.x), partition::Scheme::nnz, {}, self);
      auto be = kernels::make_backend<double>(BackendKind::reference, 1);
      const auto res = algo::tucker_hooi<double>(d, *be, self, o);
      for (int i = 0; i < iters; ++i) single[static_cast<std::size_t>(i)] = res.history[i].fit;
    }
    world().broadcast(single.data(), single.size(), 0);
    EXPECT_GT(single.back(), 0.3) << base;
    for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
      const std::string what = base + ", " + kernels::to_string(kind);
      auto be = kernels::make_backend<double>(kind, 1);
      auto dist =
          partition::distribute(range_of<double>(st.x, a, n), partition::Scheme::nnz, {}, world());
      const auto t1 = algo::tucker_hooi<double>(dist, *be, world(), o);
      EXPECT_EQ(t1.tier, 1) << what;
      DiskTensorOptions dopt;
      dopt.path = st.plain;
      dopt.first = a;
      dopt.count = n;
      dopt.chunk_nnz = 173;
      const auto t3 = algo::tucker_hooi<double>(std::make_unique<DiskTensor<double>>(dopt),
                                                st.x.dims, *be, world(), o);
      EXPECT_EQ(t3.tier, 3) << what;
      EXPECT_TRUE(contains(t3.tier_description, "tier 3")) << t3.tier_description;
      EXPECT_GE(t3.stream_overlap, 0.0) << what;
      EXPECT_LE(t3.stream_overlap, 1.0) << what;
      ASSERT_EQ(t3.iterations, iters) << what;
      ASSERT_EQ(t1.iterations, iters) << what;
      for (int i = 0; i < iters; ++i) {
        EXPECT_NEAR(t3.history[i].fit, t1.history[i].fit, 1e-9) << what << " iteration " << i + 1;
        EXPECT_NEAR(t3.history[i].fit, single[static_cast<std::size_t>(i)], 1e-9)
            << what << " vs one process, iteration " << i + 1;
      }
      EXPECT_NEAR(t3.norm_x, t1.norm_x, 1e-12 * t1.norm_x) << what;
      EXPECT_NEAR(t3.core_norm, t1.core_norm, 1e-9 * t1.core_norm) << what;
      EXPECT_LT(max_gap(t1.model, t3.model), 1e-6) << what;
      // Blocks of the stored partition.
      DiskTensorOptions bo;
      bo.path = st.blocked;
      bo.block = r;
      bo.chunk_nnz = 64;
      const auto tb = algo::tucker_hooi<double>(std::make_unique<DiskTensor<double>>(bo), st.x.dims,
                                                *be, world(), o);
      for (int i = 0; i < iters; ++i)
        EXPECT_NEAR(tb.history[i].fit, t1.history[i].fit, 1e-9)
            << what << " stored blocks, iteration " << i + 1;
    }
  }
}
}  // namespace
}  // namespace tessera
