// Tucker-HOOI's dense stage on the device (kernels/cuda/dense/tucker_dense.cu, src/engine/algo/
// tucker_dense.cpp) against the host implementation of the cpu backend.
//
// Operations: upload_index, gather/scatter_rows_double, gram_double, inner_double,
// times_small_double (more rows than one 64 MB chunk), cholqr_step (accepted: the same
// orthonormal basis and deviation; refused: exactly and numerically singular Grams, a NaN),
// subspace_change, sum_squares_double, convert_from_double; outputs NaN-poisoned first.
// Tucker-HOOI: gram and subspace, float and double, on the cuda backend (also with the
// tensor as a streamed host-chunk handle, algo::HostTensor) against the cpu backend: the fit
// of every iteration, the core norm, the factor spans (projectors), the model's values
// (rotation invariant, so the core is compared as the model it forms) and the method
// recorded; and a mode whose unfolding has lower rank than asked, which takes CholeskyQR's
// eigen fallback (host copy) and the random completion. 1 and 2 ranks (NCCL sums), one GPU each;
// everything skips with a message where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algo/generate.hpp"
#include "algo/host_tier.hpp"
#include "algo/tucker.hpp"
#include "gpu_test_util.hpp"
#include "kernels/ops.hpp"

namespace tessera {
namespace {

using namespace ::tessera::test;
namespace ops = kernels::ops;
using kernels::BackendKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A double buffer of the backend holding h (at least one element).
template <typename T>
kernels::Array<double> dev_double(kernels::Backend<T>& be, const std::vector<double>& h) {
  auto a = be.allocate_double(std::max<std::size_t>(h.size(), 1));
  if (!h.empty()) be.upload_double(h.data(), h.size(), a.data());
  return a;
}
template <typename T>
std::vector<double> host_double(kernels::Backend<T>& be, const double* p, std::size_t n) {
  std::vector<double> h(n);
  be.download_double(p, n, h.data());
  return h;
}
/// n NaNs in backend memory.
template <typename T>
kernels::Array<double> poisoned_double(kernels::Backend<T>& be, std::size_t n) {
  return dev_double(be, std::vector<double>(n, kNaN));
}

class GpuTuckerDenseOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  }

  template <typename T>
  void every_operation() {
    auto gpu = kernels::make_backend<T>(BackendKind::cuda);
    auto cpu = kernels::make_backend<T>(BackendKind::cpu, 1);
    const std::string type = sizeof(T) == 4 ? "float" : "double";
    // 600000 x 16 doubles = 77 MB: two chunks of times_small_double and subspace_change.
    for (std::int64_t rows : {0, 1, 1000, 600000}) {
      for (int R : {1, 5, 16, 130}) {
        if (rows * R > 600000 * 16) continue;
        const std::string what = type + " rows " + std::to_string(rows) + " R " + std::to_string(R);
        const auto n = static_cast<std::size_t>(rows) * R;
        const auto RR = static_cast<std::size_t>(R) * R;
        const auto A = random_vector<double>(n, 3 + rows + R);
        const auto B = random_vector<double>(n, 4 + rows + R);
        const auto M = random_vector<double>(RR, 5 + R);
        auto Ad = dev_double(*gpu, A), Bd = dev_double(*gpu, B), Md = dev_double(*gpu, M);
        // gram_double, inner_double
        std::vector<double> G_want(RR), H_want(RR);
        ops::gram_double(*cpu, A.data(), rows, R, G_want.data());
        ops::inner_double(*cpu, A.data(), B.data(), rows, R, H_want.data());
        auto Gd = poisoned_double(*gpu, RR), Hd = poisoned_double(*gpu, RR);
        ops::gram_double(*gpu, Ad.data(), rows, R, Gd.data());
        ops::inner_double(*gpu, Ad.data(), Bd.data(), rows, R, Hd.data());
        EXPECT_LT(rel_error(host_double(*gpu, Gd.data(), RR), G_want), 1e-12) << "gram " << what;
        EXPECT_LT(rel_error(host_double(*gpu, Hd.data(), RR), H_want), 1e-12) << "inner " << what;
        // times_small_double
        auto AM = A;
        ops::times_small_double(*cpu, AM.data(), rows, R, M.data());
        auto AMd = dev_double(*gpu, A);
        ops::times_small_double(*gpu, AMd.data(), rows, R, Md.data());
        EXPECT_LT(rel_error(host_double(*gpu, AMd.data(), n), AM), 1e-12) << "times_small " << what;
        // subspace_change, sum_squares_double
        const double ch_want = ops::subspace_change(*cpu, A.data(), B.data(), M.data(), rows, R);
        const double ch = ops::subspace_change(*gpu, Ad.data(), Bd.data(), Md.data(), rows, R);
        EXPECT_NEAR(ch, ch_want, 1e-12 * std::max(ch_want, 1.0)) << "subspace_change " << what;
        const double ss_want = ops::sum_squares_double(*cpu, A.data(), n);
        EXPECT_NEAR(ops::sum_squares_double(*gpu, Ad.data(), n), ss_want,
                    1e-12 * std::max(ss_want, 1.0))
            << "sum_squares " << what;
        // convert_from_double: exactly the host's rounding.
        std::vector<T> c_want(std::max<std::size_t>(n, 1), T(0));
        ops::convert_from_double(*cpu, A.data(), n, c_want.data());
        auto cd = poisoned(*gpu, std::max<std::size_t>(n, 1));
        ops::convert_from_double(*gpu, Ad.data(), n, cd.data());
        if (n > 0) {
          const auto c_got = downloaded(*gpu, cd.data(), n);
          c_want.resize(n);
          EXPECT_EQ(c_got, c_want) << "convert " << what;
        }
      }
    }
  }
};

TEST_F(GpuTuckerDenseOps, ProductsAndSumsMatchHost) {
  every_operation<double>();
  every_operation<float>();
}

TEST_F(GpuTuckerDenseOps, GatherScatterMatchHost) {
  auto gpu = kernels::make_backend<float>(BackendKind::cuda);
  auto cpu = kernels::make_backend<float>(BackendKind::cpu, 1);
  for (int R : {3, 16, 300}) {  // 300: two launches of the scale parameters
    const std::int64_t len = 5000;
    std::vector<std::int64_t> pos;
    for (std::int64_t i = 1; i < len; i += 3) pos.push_back(i);
    const auto rows = static_cast<std::int64_t>(pos.size());
    auto idx = gpu->upload_index(pos.data(), pos.size());
    ASSERT_EQ(idx.size(), pos.size());
    const auto U = random_vector<double>(static_cast<std::size_t>(len) * R, 21 + R);
    const auto Z = random_vector<double>(static_cast<std::size_t>(rows) * R, 22 + R);
    const auto scale = random_vector<double>(static_cast<std::size_t>(R), 23 + R);
    auto Ud = dev_double(*gpu, U), Zd = dev_double(*gpu, Z);
    // gather: mapped and identity
    std::vector<double> P_want(static_cast<std::size_t>(rows) * R);
    ops::gather_rows_double(*cpu, U.data(), R, pos.data(), rows, P_want.data());
    auto Pd = poisoned_double(*gpu, P_want.size());
    ops::gather_rows_double(*gpu, Ud.data(), R, idx.data(), rows, Pd.data());
    EXPECT_EQ(host_double(*gpu, Pd.data(), P_want.size()), P_want) << "gather R " << R;
    auto Pi = poisoned_double(*gpu, U.size());
    ops::gather_rows_double(*gpu, Ud.data(), R, nullptr, len, Pi.data());
    EXPECT_EQ(host_double(*gpu, Pi.data(), U.size()), U) << "gather identity R " << R;
    // scatter: mapped with a scale, identity without
    for (bool mapped : {true, false}) {
      std::vector<double> V_want(U.size());
      ops::scatter_rows_double(*cpu, Z.data(), rows, R, mapped ? pos.data() : nullptr, len,
                               mapped ? scale.data() : nullptr, V_want.data());
      auto Vd = poisoned_double(*gpu, U.size());
      ops::scatter_rows_double(*gpu, Zd.data(), rows, R, mapped ? idx.data() : nullptr, len,
                               mapped ? scale.data() : nullptr, Vd.data());
      EXPECT_EQ(host_double(*gpu, Vd.data(), U.size()), V_want)
          << "scatter R " << R << (mapped ? " mapped" : " identity");
    }
  }
}

TEST_F(GpuTuckerDenseOps, CholQrStepMatchesHost) {
  auto gpu = kernels::make_backend<double>(BackendKind::cuda);
  auto cpu = kernels::make_backend<double>(BackendKind::cpu, 1);
  for (int R : {1, 7, 16, 32, 33, 150}) {  // one warp's Cholesky up to 32, potrf above
    const std::int64_t rows = 4000;
    const auto n = static_cast<std::size_t>(rows) * R;
    const auto RR = static_cast<std::size_t>(R) * R;
    const auto U0 = random_vector<double>(n, 31 + R);
    const auto G = inner(U0, U0, rows, R);
    auto Uc = U0;
    double dev_c = -1, dev_g = -2;
    ASSERT_TRUE(ops::cholqr_step(*cpu, Uc.data(), rows, R, G.data(), &dev_c));
    auto Ud = dev_double(*gpu, U0), Gd = dev_double(*gpu, G);
    ASSERT_TRUE(ops::cholqr_step(*gpu, Ud.data(), rows, R, Gd.data(), &dev_g)) << "R " << R;
    EXPECT_EQ(dev_g, dev_c) << "R " << R;  // the same maximum of the same numbers
    // Q = U L^{-T} is unique (positive pivots): the same matrix to rounding.
    const auto Ug = host_double(*gpu, Ud.data(), n);
    EXPECT_LT(rel_error(Ug, Uc), 1e-10) << "R " << R;
    const auto I = inner(Ug, Ug, rows, R);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) EXPECT_NEAR(I[i * R + j], i == j ? 1.0 : 0.0, 1e-10) << "R " << R;
    if (R < 2) continue;
    // Singular (a repeated column, and one 1e-7 away): refused, U untouched, like the host.
    for (double eps : {0.0, 1e-7}) {
      auto S = U0;
      for (std::int64_t i = 0; i < rows; ++i) S[i * R + R - 1] = S[i * R] * (1 + eps * (i % 5));
      const auto GS = inner(S, S, rows, R);
      auto Sc = S;
      EXPECT_FALSE(ops::cholqr_step(*cpu, Sc.data(), rows, R, GS.data(), &dev_c));
      auto Sd = dev_double(*gpu, S), GSd = dev_double(*gpu, GS);
      EXPECT_FALSE(ops::cholqr_step(*gpu, Sd.data(), rows, R, GSd.data(), &dev_g))
          << "R " << R << " eps " << eps;
      EXPECT_EQ(host_double(*gpu, Sd.data(), n), S) << "R " << R;
    }
    auto GN = G;
    GN[RR / 2] = kNaN;
    auto GNd = dev_double(*gpu, GN);
    EXPECT_FALSE(ops::cholqr_step(*gpu, Ud.data(), rows, R, GNd.data(), &dev_g)) << "NaN, R " << R;
  }
}

// ---- Tucker-HOOI ----

class GpuTuckerDense : public GpuJobTest {
 protected:
  template <typename T>
  static SparseTensor<T> problem() {
    algo::GenerateOptions g;
    g.dims = {70, 60, 50};
    g.nnz = 12000;
    g.rank = 5;
    g.noise = 0.1;
    g.seed = 41;
    g.structure = algo::Structure::sampled;
    g.dist = algo::IndexDist::powerlaw;  // some indices never occur: row maps, not identity
    auto gen = algo::generate(g, *world_);
    SparseTensor<T> x(gen.block.dims);
    for (nnz_t k = 0; k < gen.block.nnz(); ++k) {
      index_t c[kMaxOrder];
      for (int m = 0; m < 3; ++m) c[m] = gen.block.idx[m][k];
      x.push_back(c, static_cast<T>(gen.block.vals[k]));
    }
    return x;
  }

  static algo::TuckerOptions options(algo::SvdMethod svd, std::vector<int> ranks) {
    algo::TuckerOptions o;
    o.ranks = std::move(ranks);
    o.max_iters = 6;
    o.tol = 0;
    o.svd = svd;
    o.subspace_steps = 4;
    o.print_iterations = false;
    return o;
  }

  /// Fits, core norm, spans, model values and the recorded method of `got` against `want`.
  static void expect_same(const algo::TuckerResult& got, const algo::TuckerResult& want,
                          double fit_tol, double span_tol, const std::string& what) {
    ASSERT_EQ(got.iterations, want.iterations) << what;
    for (int i = 0; i < want.iterations; ++i)
      EXPECT_NEAR(got.history[i].fit, want.history[i].fit, fit_tol)
          << what << " iteration " << i + 1;
    EXPECT_NEAR(got.core_norm, want.core_norm, fit_tol * want.core_norm) << what;
    EXPECT_EQ(got.completed_columns, want.completed_columns) << what;
    const int N = want.model.order();
    for (int n = 0; n < N; ++n)
      EXPECT_LT(subspace_gap(want.model.factors[n], got.model.factors[n]), span_tol)
          << what << " mode " << n;
    // The model G x_1 U_1 ... x_N U_N does not depend on the bases' signs or rotations.
    std::mt19937_64 rng(7);
    double worst = 0, scale = 0;
    std::vector<index_t> c(static_cast<std::size_t>(N));
    for (int k = 0; k < 200; ++k) {
      for (int n = 0; n < N; ++n) c[n] = static_cast<index_t>(rng() % want.model.dims[n]);
      const double a = want.model.value_at(c.data()), b = got.model.value_at(c.data());
      worst = std::max(worst, std::abs(a - b));
      scale = std::max(scale, std::abs(a));
    }
    EXPECT_LE(worst, span_tol * std::max(scale, 1e-300)) << what << " model values";
  }

  template <typename T>
  void compare(algo::SvdMethod svd, double fit_tol, double span_tol) {
    auto d = partition::distribute(problem<T>(), partition::Scheme::nnz, {}, *world_);
    const auto o = options(svd, {5, 4, 6});
    auto gpu = kernels::make_backend<T>(BackendKind::cuda);
    auto cpu = kernels::make_backend<T>(BackendKind::cpu, 1);
    auto rg = algo::tucker_hooi<T>(d, *gpu, *world_, o, nccl_.get());
    auto rc = algo::tucker_hooi<T>(d, *cpu, *world_, o);
    const std::string what = algo::to_string(svd) + (sizeof(T) == 4 ? " float" : " double") +
                             " on " + std::to_string(size()) + " rank(s)";
    // Ranks {5, 4, 6}: C of 24, 30 and 20, so a float run's eigen-solves are all one-block.
    const std::string gram_eig =
        sizeof(T) == 4 ? "/device-block-eig+cholqr2" : "/device-syevdx+cholqr2";
    EXPECT_EQ(rg.dense_method,
              algo::to_string(svd) + (svd == algo::SvdMethod::gram ? gram_eig : "/device-cholqr2"))
        << what;
    EXPECT_EQ(rc.dense_method,
              algo::to_string(svd) +
                  (svd == algo::SvdMethod::gram ? "/host-syevr+cholqr2" : "/host-cholqr2"))
        << what;
    expect_same(rg, rc, fit_tol, span_tol, what);
    EXPECT_TRUE(std::isfinite(rg.fit) && rg.fit > 0.01 && rg.fit < 1) << what << " " << rg.fit;
    // Streamed (tiers 2-3 of the driver): the block as a host-chunk tensor (algo::HostTensor,
    // global coordinates, not relabelled by distribute), whose StreamedOps hooks run every
    // TTMc on the same backend. One chunk, so the sums are tier 1's (chunked sums against
    // tier 1: gpu_tier3.cpp).
    const nnz_t chunk = std::max<nnz_t>(d.block.nnz(), 1);
    auto h = std::make_unique<algo::HostTensor<T>>(SparseTensor<T>(d.block), chunk, gpu.get());
    auto rs = algo::tucker_hooi<T>(std::move(h), d.dist.dims, *gpu, *world_, o, nccl_.get());
    expect_same(rs, rc, fit_tol, span_tol, what + " (streamed host chunks)");
  }
};

TEST_F(GpuTuckerDense, GramDouble) {
  compare<double>(algo::SvdMethod::gram, 1e-9, 1e-7);
}
TEST_F(GpuTuckerDense, GramFloat) {
  compare<float>(algo::SvdMethod::gram, 1e-6, 1e-3);
}
TEST_F(GpuTuckerDense, SubspaceDouble) {
  compare<double>(algo::SvdMethod::subspace, 1e-9, 1e-7);
}
TEST_F(GpuTuckerDense, SubspaceFloat) {
  compare<float>(algo::SvdMethod::subspace, 1e-6, 1e-3);
}

// Ranks {16, 16, 16}: C = 256 in every mode, so a float run's eigen-solves try the one-block
// solver's Lanczos kernel first (block_lanczos.cuh; --eig-solver auto), which answers or
// declines each (the record counts both). Its fits are those of --eig-solver exact to 1e-6
// (issue 43), and both are the host backend's to 2e-6 (the float TTMc and Gram).
TEST_F(GpuTuckerDense, GramFloatLanczos) {
  auto d = partition::distribute(problem<float>(), partition::Scheme::nnz, {}, *world_);
  const auto o = options(algo::SvdMethod::gram, {16, 16, 16});
  auto cpu = kernels::make_backend<float>(BackendKind::cpu, 1);
  const auto rc = algo::tucker_hooi<float>(d, *cpu, *world_, o);
  kernels::Tuning exact;
  exact.eig_solver = kernels::EigSolver::exact;
  auto gpu_exact = kernels::make_backend<float>(BackendKind::cuda, 0, exact);
  auto gpu = kernels::make_backend<float>(BackendKind::cuda);
  const auto re = algo::tucker_hooi<float>(d, *gpu_exact, *world_, o, nccl_.get());
  const auto ra = algo::tucker_hooi<float>(d, *gpu, *world_, o, nccl_.get());
  for (const auto* r : {&ra, &re}) EXPECT_EQ(r->dense_method, "gram/device-block-eig+cholqr2");
  EXPECT_EQ(rc.eig_lanczos_answered + rc.eig_lanczos_declined, 0);
  EXPECT_EQ(re.eig_lanczos_answered + re.eig_lanczos_declined, 0);
  EXPECT_GE(ra.eig_lanczos_answered + ra.eig_lanczos_declined, 3 * ra.iterations);
  EXPECT_GE(ra.eig_lanczos_answered, 1) << "declined " << ra.eig_lanczos_declined;
  ASSERT_EQ(ra.iterations, rc.iterations);
  ASSERT_EQ(re.iterations, rc.iterations);
  for (int i = 0; i < rc.iterations; ++i) {
    char it[160];
    std::snprintf(it, sizeof it, "iteration %d: auto %.9f, exact %.9f, host %.9f", i + 1,
                  ra.history[i].fit, re.history[i].fit, rc.history[i].fit);
    EXPECT_NEAR(ra.history[i].fit, re.history[i].fit, 1e-6) << it;
    EXPECT_NEAR(ra.history[i].fit, rc.history[i].fit, 2e-6) << it;
    EXPECT_NEAR(re.history[i].fit, rc.history[i].fit, 2e-6) << it;
  }
}

// --gather-precision fp16 | bf16: the tensor-core TTMc (ranks 8 and 16 here) gathers 16-bit
// copies of the factors; the fits stay within the copies' rounding of the host backend's
// (docs/reduced-precision.md), and the run records the precision in its tuning.
TEST_F(GpuTuckerDense, GramFloatSixteenBitGathers) {
  auto d = partition::distribute(problem<float>(), partition::Scheme::nnz, {}, *world_);
  const auto o = options(algo::SvdMethod::gram, {8, 16, 16});
  auto cpu = kernels::make_backend<float>(BackendKind::cpu, 1);
  const auto rc = algo::tucker_hooi<float>(d, *cpu, *world_, o);
  for (const auto& [name, fit_tol] : {std::pair{"fp16", 2e-4}, std::pair{"bf16", 2e-3}}) {
    kernels::Tuning t;
    t.gather_precision = kernels::parse_named<kernels::GatherPrecision>(name, "--gather-precision");
    auto gpu = kernels::make_backend<float>(BackendKind::cuda, 0, t);
    const auto rg = algo::tucker_hooi<float>(d, *gpu, *world_, o, nccl_.get());
    ASSERT_EQ(rg.iterations, rc.iterations) << name;
    for (int i = 0; i < rc.iterations; ++i)
      EXPECT_NEAR(rg.history[i].fit, rc.history[i].fit, fit_tol) << name << " iteration " << i + 1;
    EXPECT_TRUE(std::isfinite(rg.fit) && rg.fit > 0.01 && rg.fit < 1) << name << " " << rg.fit;
  }
}

// Mode 0 has two indices with nonzeros but rank 3: Y V / sigma has a zero column, its Gram
// is singular, and CholeskyQR's eigen fallback (a host copy) completes the basis with the
// keyed random direction, on the device as on the host.
TEST_F(GpuTuckerDense, SingularGramTakesTheFallback) {
  const std::vector<std::uint64_t> dims{6, 5, 4};
  SparseTensor<double> x(dims);
  if (rank() == 0) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    for (index_t i : {1u, 4u})
      for (index_t j = 0; j < 5; ++j)
        for (index_t k = 0; k < 4; ++k) {
          const index_t c[3] = {i, j, k};
          x.push_back(c, u(rng));
        }
  }
  for (auto svd : {algo::SvdMethod::gram, algo::SvdMethod::subspace}) {
    auto d = partition::distribute(SparseTensor<double>(x), partition::Scheme::nnz, {}, *world_);
    const auto o = options(svd, {3, 2, 2});
    auto gpu = kernels::make_backend<double>(BackendKind::cuda);
    auto cpu = kernels::make_backend<double>(BackendKind::cpu, 1);
    auto rg = algo::tucker_hooi<double>(d, *gpu, *world_, o, nccl_.get());
    auto rc = algo::tucker_hooi<double>(d, *cpu, *world_, o);
    const std::string what = algo::to_string(svd) + " on " + std::to_string(size()) + " rank(s)";
    EXPECT_GT(rg.completed_columns, 0) << what;
    expect_same(rg, rc, 1e-9, 1e-7, what);
    const auto& F = rg.model.factors[0];
    for (std::int64_t a = 0; a < 3; ++a)
      for (std::int64_t b = 0; b < 3; ++b) {
        double s = 0;
        for (std::int64_t i = 0; i < F.rows; ++i) s += F(i, a) * F(i, b);
        EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 1e-10) << what;
      }
  }
}

}  // namespace
}  // namespace tessera
