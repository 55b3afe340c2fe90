// The CUDA backend's operations of Poisson CP (CP-APR: kernels/ops/apr.hpp) and generalized
// CP (GCP: kernels/ops/gcp.hpp) against the reference backend, float and double, outputs
// poisoned with NaN before each run. Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_backend_fixture.hpp"
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"
#include "kernels/ops/apr.hpp"
#include "kernels/ops/gcp.hpp"
#include "util/error.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

TYPED_TEST_SUITE(CudaBackendTest, ValueTypes);

// ---- CP-APR (kernels/ops/apr.hpp) ----

/// CP-APR's data and model are positive: x with its values moved to [0.1, 1.1), factors
/// uniform in [0.1, 1).
template <typename T>
SparseTensor<T> positive(SparseTensor<T> x) {
  for (T& v : x.vals) v = std::abs(v) + T(0.1);
  return x;
}
template <typename T>
Factors<T> positive_factors(Backend<T>& be, const std::vector<std::uint64_t>& dims, int R,
                            std::uint64_t seed) {
  Factors<T> f;
  for (std::size_t m = 0; m < dims.size(); ++m) {
    f.arrays.push_back(uploaded(
        be, random_vector<T>(static_cast<std::size_t>(dims[m]) * R, seed * 131 + m, 0.1, 1.0)));
    f.ptrs.push_back(f.arrays.back().data());
  }
  return f;
}

/// Phi divides by the model m = <b_i, h>, a dot over R columns that the backends sum in
/// different orders (a warp tree here), and its log enters the first sum.
template <typename T>
double phi_tol() {
  return std::is_same_v<T, double> ? 1e-11 : 1e-4;
}

/// ops::poisson_phi of every mode of x on `gpu` (x prepared there: tier 1, or tier 2 under
/// its budget) against the reference backend: Phi (outputs poisoned) and the two sums; then
/// the sums alone (out == nullptr) and Phi alone (host_sums == nullptr).
template <typename T>
void expect_phi_match(Backend<T>& gpu, Backend<T>& ref, const SparseTensor<T>& x, int R,
                      std::uint64_t seed, const std::string& what = "") {
  const int N = x.order();
  const double eps = 1e-10;
  auto hg = gpu.prepare(x);
  auto hr = ref.prepare(x);
  const auto fg = positive_factors(gpu, x.dims, R, seed);
  const auto fr = positive_factors(ref, x.dims, R, seed);
  double sum_x = 0;  // scale of the log sum's error: its terms are x log m
  for (T v : x.vals) sum_x += static_cast<double>(v);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int mode = 0; mode < N; ++mode) {
    const std::string where = what + " order " + std::to_string(N) + " mode " +
                              std::to_string(mode) + " R " + std::to_string(R) + " nnz " +
                              std::to_string(x.nnz()) + " (" + hg->describe() + ")";
    const std::size_t n = static_cast<std::size_t>(x.dims[static_cast<std::size_t>(mode)]) * R;
    auto og = poisoned(gpu, n);
    auto orf = poisoned(ref, n);
    double sg[2] = {nan, nan}, sr[2] = {nan, nan};
    ops::poisson_phi(gpu, *hg, mode, fg.ptrs, R, eps, og.data(), sg);
    ops::poisson_phi(ref, *hr, mode, fr.ptrs, R, eps, orf.data(), sr);
    const auto got = downloaded(gpu, og.data(), n);
    const auto want = downloaded(ref, orf.data(), n);
    EXPECT_LT(rel_error(got, want), phi_tol<T>()) << where;
    EXPECT_NEAR(sg[0], sr[0], phi_tol<T>() * (std::abs(sr[0]) + sum_x)) << where;
    EXPECT_NEAR(sg[1], sr[1], phi_tol<T>() * std::abs(sr[1])) << where;
    if (x.nnz() == 0) {
      for (T v : got) ASSERT_EQ(v, T(0)) << where;
      EXPECT_EQ(sg[0], 0.0) << where;
      EXPECT_EQ(sg[1], 0.0) << where;
    }

    double so[2] = {nan, nan};  // the sums alone
    ops::poisson_phi(gpu, *hg, mode, fg.ptrs, R, eps, static_cast<T*>(nullptr), so);
    EXPECT_NEAR(so[0], sr[0], phi_tol<T>() * (std::abs(sr[0]) + sum_x)) << where << " sums only";
    EXPECT_NEAR(so[1], sr[1], phi_tol<T>() * std::abs(sr[1])) << where << " sums only";

    auto op = poisoned(gpu, n);  // Phi alone
    ops::poisson_phi(gpu, *hg, mode, fg.ptrs, R, eps, op.data(), static_cast<double*>(nullptr));
    EXPECT_LT(rel_error(downloaded(gpu, op.data(), n), want), phi_tol<T>()) << where << " Phi only";
  }
}

TYPED_TEST(CudaBackendTest, PoissonPhiMatchesTheReference) {
  using T = TypeParam;
  auto& gpu = *this->gpu_;
  auto& ref = *this->ref_;
  std::uint64_t seed = 1700;
  // Small (a batch or two per warp), medium (whole tiles, rows across tiles), orders 1-16.
  // R 4-128 (powers of two; double up to 64) at orders 3-6 take the blocked kernel, with 1
  // to 32 lanes per slot; the other ranks and orders the classic one.
  const auto x3 = positive(random_tensor<T>({40, 30, 35}, 4000, ++seed));
  const auto x4 = positive(random_tensor<T>({12, 9, 15, 7}, 2500, ++seed));
  for (int R : {1, 2, 4, 5, 8, 16, 32, 40, 64, 100, 128}) {
    expect_phi_match(gpu, ref, x3, R, ++seed);
    expect_phi_match(gpu, ref, x4, R, ++seed);
  }
  for (int R : {200, 256}) expect_phi_match(gpu, ref, x3, R, ++seed);  // Q = 8
  const auto x9 = positive(random_tensor<T>({4, 3, 5, 4, 3, 4, 5, 3, 4}, 1500, ++seed));
  for (int R : {5, 32}) expect_phi_match(gpu, ref, x9, R, ++seed);
  const auto x16 = positive(random_tensor<T>(std::vector<std::uint64_t>(16, 3), 900, ++seed));
  for (int R : {1, 16, 40}) expect_phi_match(gpu, ref, x16, R, ++seed);
  const auto x1 = positive(random_tensor<T>({50}, 700, ++seed));
  expect_phi_match(gpu, ref, x1, 7, ++seed);
  const auto x2 = positive(random_tensor<T>({60, 45}, 3000, ++seed));
  expect_phi_match(gpu, ref, x2, 40, ++seed);
  // Big: full tiles everywhere.
  const auto big = positive(random_tensor<T>({300, 200, 50}, 400000, ++seed));
  for (int R : {16, 32, 100}) expect_phi_match(gpu, ref, big, R, ++seed);
  const auto x6 = positive(random_tensor<T>({9, 8, 7, 6, 5, 4}, 20000, ++seed));
  for (int R : {8, 32}) expect_phi_match(gpu, ref, x6, R, ++seed);
  // One slice holding ~70% of the nonzeros (a row across many tiles); most slices empty.
  const auto skew = positive(random_tensor<T>({3000, 40, 30}, 60000, ++seed, 0));
  for (int R : {5, 32, 40}) expect_phi_match(gpu, ref, skew, R, ++seed);
  // No nonzeros: Phi is 0, and so are the sums; a single one.
  const auto empty = random_tensor<T>({17, 5, 9}, 0, ++seed);
  for (int R : {7, 40}) expect_phi_match(gpu, ref, empty, R, ++seed);
  const auto one = positive(random_tensor<T>({17, 5, 9}, 1, ++seed));
  for (int R : {7, 40}) expect_phi_match(gpu, ref, one, R, ++seed);
}

TYPED_TEST(CudaBackendTest, PoissonPhiTier2) {
  using T = TypeParam;
  // Chunks of 3 tiles: chunk boundaries fall inside the long row of the skewed mode.
  const auto x = positive(random_tensor<T>({2000, 40, 30}, 12000, 1800, 0));
  auto be = make_backend<T>(BackendKind::cuda);
  be->set_memory_budget(2 * chunk_bytes<T>(3, 3 * kTileNnz));
  ASSERT_EQ(be->prepare(x)->tier(), 2);
  for (int R : {5, 32, 40}) expect_phi_match(*be, *this->ref_, x, R, 1810 + R, "tier 2");
}

TYPED_TEST(CudaBackendTest, PoissonPhiClassicKernelWhereTheBlockedOneWouldRun) {
  using T = TypeParam;
  // --mttkrp-kernel classic: the classic Phi kernel on shapes the blocked one takes.
  Tuning t;
  t.mttkrp_kernel = MttkrpKernel::classic;
  auto be = make_backend<T>(BackendKind::cuda, 0, t);
  const auto x = positive(random_tensor<T>({300, 200, 50}, 100000, 1850));
  for (int R : {8, 32}) expect_phi_match(*be, *this->ref_, x, R, 1860 + R, "classic");
}

TYPED_TEST(CudaBackendTest, PoissonPhiRejectsRanksAbove256) {
  using T = TypeParam;
  const auto x = positive(random_tensor<T>({10, 10, 10}, 50, 1900));
  auto h = this->gpu_->prepare(x);
  const int R = 257;
  const auto f = positive_factors(*this->gpu_, x.dims, R, 1901);
  auto out = this->poisoned_gpu(10 * static_cast<std::size_t>(R));
  try {
    ops::poisson_phi(*this->gpu_, *h, 0, f.ptrs, R, 1e-10, out.data(),
                     static_cast<double*>(nullptr));
    ADD_FAILURE() << "R = 257 was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "--loss poisson on the cuda backend supports --rank up to 256"))
        << e.what();
  }
}

TYPED_TEST(CudaBackendTest, AprDenseStepsMatchTheReference) {
  using T = TypeParam;
  std::uint64_t seed = 2000;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t rows : {0, 1, 1000, 100000}) {
    for (int R : {1, 7, 40}) {
      const std::size_t n = static_cast<std::size_t>(rows) * R;
      const std::string where = "rows " + std::to_string(rows) + " R " + std::to_string(R);
      // B and Phi in [0, 2): both sides of min(B, 1 - Phi) and of Phi > 1 occur.
      const auto B = random_vector<T>(n, ++seed, 0.0, 2.0);
      const auto Phi = random_vector<T>(n, ++seed, 0.0, 2.0);
      auto phig = this->on_gpu(Phi), phir = this->on_ref(Phi);

      // KKT violation without, then with the update.
      auto bg = this->on_gpu(B), br = this->on_ref(B);
      const double k0 = ops::apr_kkt_update(*this->gpu_, bg.data(), phig.data(), rows, R, false);
      const double k0r = ops::apr_kkt_update(*this->ref_, br.data(), phir.data(), rows, R, false);
      EXPECT_NEAR(k0, k0r, tol<T>() * std::max(1.0, std::abs(k0r))) << where;
      if (rows == 0) {
        EXPECT_EQ(k0, 0.0);
      }
      EXPECT_EQ(this->from_gpu(bg.data(), n), B) << where << ": B changed without update";
      const double k1 = ops::apr_kkt_update(*this->gpu_, bg.data(), phig.data(), rows, R, true);
      ops::apr_kkt_update(*this->ref_, br.data(), phir.data(), rows, R, true);
      EXPECT_EQ(k1, k0) << where << ": the violation is of B before the update";
      EXPECT_LT(rel_error(this->from_gpu(bg.data(), n), this->from_ref(br.data(), n)), tol<T>())
          << where << " B *= Phi";

      // Shift: a third of A below kappa_tol (0 or 1e-12), the rest in [0, 1).
      const double kappa = 0.01, kappa_tol = 1e-10;
      auto A = random_vector<T>(n, ++seed, 0.0, 1.0);
      for (std::size_t k = 0; k < n; k += 3) A[k] = (k % 2 == 0) ? T(0) : T(1e-12);
      std::int64_t expect_changed = 0;
      for (std::size_t k = 0; k < n; ++k)
        if (static_cast<double>(Phi[k]) > 1.0 && static_cast<double>(A[k]) < kappa_tol)
          ++expect_changed;
      auto ag = this->on_gpu(A), ar = this->on_ref(A);
      const std::int64_t cg =
          ops::apr_shift(*this->gpu_, ag.data(), phig.data(), rows, R, kappa, kappa_tol);
      const std::int64_t cr =
          ops::apr_shift(*this->ref_, ar.data(), phir.data(), rows, R, kappa, kappa_tol);
      EXPECT_EQ(cg, expect_changed) << where;
      EXPECT_EQ(cg, cr) << where;
      EXPECT_LT(rel_error(this->from_gpu(ag.data(), n), this->from_ref(ar.data(), n)), tol<T>())
          << where << " shift";

      // Column sums (of the positive Phi), in double.
      std::vector<double> got(static_cast<std::size_t>(R), nan), want(got);
      ops::column_sums(*this->gpu_, phig.data(), rows, R, got.data());
      ops::column_sums(*this->ref_, phir.data(), rows, R, want.data());
      EXPECT_LT(rel_error(got, want), 1e-12) << where << " column sums";
    }
  }
}

// ---- GCP (kernels/ops/gcp.hpp) ----

/// GCP samples of a tensor of shape dims: S coordinates of random_tensor, the first nz with
/// data >= 0 (in {0, 1} for bernoulli), the rest 0.
template <typename T>
SparseTensor<T> gcp_samples(const std::vector<std::uint64_t>& dims, nnz_t S, nnz_t nz, GcpLoss loss,
                            std::uint64_t seed) {
  SparseTensor<T> x = random_tensor<T>(dims, S, seed);
  for (nnz_t s = 0; s < x.nnz(); ++s) {
    T& v = x.vals[static_cast<std::size_t>(s)];
    if (s >= nz)
      v = T(0);
    else if (loss == GcpLoss::bernoulli)
      v = T(s % 2);
    else
      v = std::abs(v) * T(3);
  }
  return x;
}

/// ops::gcp_gradient on `gpu` against the reference: the loss and the gradients (poisoned
/// first), then the loss alone and the gradients alone. The model values are computed in
/// double on both sides; float gradients differ by the order of their float atomicAdds.
template <typename T>
void expect_gcp_match(Backend<T>& gpu, Backend<T>& ref, const std::vector<std::uint64_t>& dims,
                      nnz_t S, nnz_t nz, int R, GcpLoss kind, std::uint64_t seed) {
  const int N = static_cast<int>(dims.size());
  GcpLossSpec spec;
  spec.kind = kind;
  spec.huber_delta = 0.5;  // both of huber's branches occur
  const auto x = gcp_samples<T>(dims, S, nz, kind, seed);
  const bool pos = gcp_nonnegative(kind);
  const auto fg = pos ? positive_factors(gpu, dims, R, seed) : random_factors(gpu, dims, R, seed);
  const auto fr = pos ? positive_factors(ref, dims, R, seed) : random_factors(ref, dims, R, seed);
  const double wn = 2.5, wz = 0.7, nan = std::numeric_limits<double>::quiet_NaN();
  const std::string where = "loss " + std::to_string(static_cast<int>(kind)) + " order " +
                            std::to_string(N) + " R " + std::to_string(R) + " samples " +
                            std::to_string(x.nnz()) + " nonzero " + std::to_string(nz);
  std::vector<Array<T>> gg, gr;
  std::vector<T*> pg, pr;
  for (int n = 0; n < N; ++n) {
    const std::size_t len = static_cast<std::size_t>(dims[static_cast<std::size_t>(n)]) * R;
    gg.push_back(poisoned(gpu, len));
    gr.push_back(poisoned(ref, len));
    pg.push_back(gg.back().data());
    pr.push_back(gr.back().data());
  }
  double lg = nan, lr = nan;
  ops::gcp_gradient(gpu, x, nz, wn, wz, fg.ptrs, R, spec, pg, &lg);
  ops::gcp_gradient(ref, x, nz, wn, wz, fr.ptrs, R, spec, pr, &lr);
  const double loss_tol = phi_tol<T>() * std::max(std::abs(lr), static_cast<double>(x.nnz()));
  EXPECT_NEAR(lg, lr, loss_tol) << where;
  std::vector<std::vector<T>> want;
  for (int n = 0; n < N; ++n) {
    const std::size_t len = static_cast<std::size_t>(dims[static_cast<std::size_t>(n)]) * R;
    want.push_back(downloaded(ref, pr[static_cast<std::size_t>(n)], len));
    const auto got = downloaded(gpu, pg[static_cast<std::size_t>(n)], len);
    EXPECT_LT(rel_error(got, want.back()), phi_tol<T>()) << where << " mode " << n;
    if (x.nnz() == 0) {
      for (T v : got) ASSERT_EQ(v, T(0)) << where;
    }
  }
  double alone = nan;  // the loss alone
  ops::gcp_gradient(gpu, x, nz, wn, wz, fg.ptrs, R, spec, {}, &alone);
  EXPECT_NEAR(alone, lr, loss_tol) << where << " loss only";
  for (std::size_t n = 0; n < pg.size(); ++n)
    gpu.fill(pg[n], want[n].size(), std::numeric_limits<T>::quiet_NaN());
  ops::gcp_gradient(gpu, x, nz, wn, wz, fg.ptrs, R, spec, pg, static_cast<double*>(nullptr));
  for (std::size_t n = 0; n < pg.size(); ++n)
    EXPECT_LT(rel_error(downloaded(gpu, pg[n], want[n].size()), want[n]), phi_tol<T>())
        << where << " gradients only, mode " << n;
}

TYPED_TEST(CudaBackendTest, GcpGradientMatchesTheReference) {
  auto& gpu = *this->gpu_;
  auto& ref = *this->ref_;
  std::uint64_t seed = 2300;
  const GcpLoss losses[] = {GcpLoss::gaussian, GcpLoss::poisson,  GcpLoss::bernoulli,
                            GcpLoss::gamma,    GcpLoss::rayleigh, GcpLoss::huber};
  const std::vector<std::uint64_t> d3 = {40, 30, 35}, d4 = {12, 9, 15, 7};
  for (GcpLoss k : losses) {
    for (int R : {1, 5, 16, 32, 40, 100}) {
      expect_gcp_match(gpu, ref, d3, 3000, 1200, R, k, ++seed);
      expect_gcp_match(gpu, ref, d4, 2500, 1000, R, k, ++seed);
    }
    // Orders 1, 2, 9 and 16; all nonzero or all zero samples.
    expect_gcp_match(gpu, ref, {50}, 400, 100, 7, k, ++seed);
    expect_gcp_match(gpu, ref, {60, 45}, 2000, 900, 40, k, ++seed);
    expect_gcp_match(gpu, ref, {4, 3, 5, 4, 3, 4, 5, 3, 4}, 1500, 600, 5, k, ++seed);
    expect_gcp_match(gpu, ref, std::vector<std::uint64_t>(16, 3), 900, 300, 16, k, ++seed);
    expect_gcp_match(gpu, ref, d3, 3000, 3000, 16, k, ++seed);
    expect_gcp_match(gpu, ref, d3, 3000, 0, 16, k, ++seed);
  }
  // Many samples (many blocks, hot rows), no samples, a single one.
  expect_gcp_match(gpu, ref, {300, 200, 50}, 200000, 80000, 32, GcpLoss::poisson, ++seed);
  expect_gcp_match(gpu, ref, {17, 5, 9}, 0, 0, 7, GcpLoss::gaussian, ++seed);
  expect_gcp_match(gpu, ref, {17, 5, 9}, 1, 1, 40, GcpLoss::bernoulli, ++seed);
}

/// ops::gcp_sampled_gradient: the cuda kernel draws a step's samples itself from the training
/// entries on the device; the reference draws them on the host (kernels/gcp_sample.hpp). The
/// same loss and gradients, for one rank holding everything and for each of 3 ranks holding a
/// third, at several losses, orders and ranks, with entries drawn more than once.
TYPED_TEST(CudaBackendTest, GcpSampledGradientMatchesTheHostDraw) {
  using T = TypeParam;
  auto& gpu = *this->gpu_;
  auto& ref = *this->ref_;
  std::uint64_t seed = 2600;
  struct Case {
    std::vector<std::uint64_t> dims;
    nnz_t train;
    std::int64_t nonzero, zero;
    int R;
    GcpLoss kind;
  };
  const std::vector<Case> cases = {
      {{40, 30, 35}, 3000, 2000, 1500, 16, GcpLoss::gaussian},
      {{40, 30, 35}, 3000, 5000, 0, 32, GcpLoss::poisson},
      {{12, 9, 15, 7}, 2500, 0, 1200, 5, GcpLoss::bernoulli},
      {{300, 200, 50}, 100000, 150000, 60000, 40, GcpLoss::huber},
      {{4, 3, 5, 4, 3, 4, 5, 3, 4}, 1500, 900, 700, 7, GcpLoss::gamma},
  };
  for (const Case& c : cases) {
    const int N = static_cast<int>(c.dims.size());
    const auto x = gcp_samples<T>(c.dims, c.train, c.train, c.kind, ++seed);
    const bool pos = gcp_nonnegative(c.kind);
    const auto fg =
        pos ? positive_factors(gpu, c.dims, c.R, seed) : random_factors(gpu, c.dims, c.R, seed);
    const auto fr =
        pos ? positive_factors(ref, c.dims, c.R, seed) : random_factors(ref, c.dims, c.R, seed);
    GcpLossSpec spec;
    spec.kind = c.kind;
    spec.huber_delta = 0.5;
    for (int P : {1, 3}) {
      for (int r = 0; r < P; ++r) {
        GcpDraw d;
        d.seed = seed;
        d.epoch = 2;
        d.step = static_cast<std::uint64_t>(r + 5);
        d.nonzero = c.nonzero;
        d.zero = c.zero;
        d.n_train = static_cast<std::uint64_t>(x.nnz());
        d.first = d.n_train * static_cast<std::uint64_t>(r) / static_cast<std::uint64_t>(P);
        d.mine =
            d.n_train * static_cast<std::uint64_t>(r + 1) / static_cast<std::uint64_t>(P) - d.first;
        d.rank = r;
        d.ranks = P;
        const std::string where = "loss " + std::to_string(static_cast<int>(c.kind)) + " order " +
                                  std::to_string(N) + " R " + std::to_string(c.R) + " rank " +
                                  std::to_string(r) + " of " + std::to_string(P);
        SparseTensor<T> slice(c.dims);  // this rank's training entries
        for (std::uint64_t e = d.first; e < d.first + d.mine; ++e) {
          index_t co[kMaxOrder];
          for (int n = 0; n < N; ++n) co[n] = x.idx[static_cast<std::size_t>(n)][e];
          slice.push_back(co, x.vals[e]);
        }
        const GcpEntries<T> eg = ops::gcp_entries(gpu, slice);
        const GcpEntries<T> er = ops::gcp_entries(ref, slice);
        std::vector<Array<T>> gg, gr;
        std::vector<T*> pg, pr;
        for (int n = 0; n < N; ++n) {
          const std::size_t rows = static_cast<std::size_t>(c.dims[static_cast<std::size_t>(n)]);
          gg.push_back(poisoned(gpu, rows * c.R));
          gr.push_back(poisoned(ref, rows * c.R));
          pg.push_back(gg.back().data());
          pr.push_back(gr.back().data());
        }
        const double nan = std::numeric_limits<double>::quiet_NaN();
        double lg = nan, lr = nan;
        ops::gcp_sampled_gradient(gpu, d, eg, c.dims, 2.5, 0.7, fg.ptrs, c.R, spec, pg, &lg);
        ops::gcp_sampled_gradient(ref, d, er, c.dims, 2.5, 0.7, fr.ptrs, c.R, spec, pr, &lr);
        const double items = static_cast<double>(c.nonzero + c.zero);
        EXPECT_NEAR(lg, lr, phi_tol<T>() * std::max(std::abs(lr), items)) << where;
        double norm = 0;
        for (int n = 0; n < N; ++n) {
          const std::size_t cnt =
              static_cast<std::size_t>(c.dims[static_cast<std::size_t>(n)]) * c.R;
          const auto want = downloaded(ref, pr[static_cast<std::size_t>(n)], cnt);
          for (T w : want) norm += std::abs(static_cast<double>(w));
          EXPECT_LT(rel_error(downloaded(gpu, pg[static_cast<std::size_t>(n)], cnt), want),
                    phi_tol<T>())
              << where << " mode " << n;
        }
        EXPECT_GT(norm, 0.0) << where << ": a zero gradient tests nothing";
      }
    }
  }
}

TYPED_TEST(CudaBackendTest, AdamStepMatchesTheReference) {
  using T = TypeParam;
  std::uint64_t seed = 2400;
  for (std::int64_t n : {0, 1, 1000, 300000})
    for (bool nonneg : {false, true})
      for (std::int64_t t : {1, 9}) {
        const std::size_t len = static_cast<std::size_t>(n);
        const std::string where =
            "n " + std::to_string(n) + " t " + std::to_string(t) + (nonneg ? " nonnegative" : "");
        const auto x = random_vector<T>(len, ++seed, -0.05, 0.05);  // near 0: the clamp acts
        const auto g = random_vector<T>(len, ++seed);
        const auto m = random_vector<T>(len, ++seed, -0.1, 0.1);
        const auto v = random_vector<T>(len, ++seed, 0.0, 0.1);
        auto xg = this->on_gpu(x), gg = this->on_gpu(g), mg = this->on_gpu(m), vg = this->on_gpu(v);
        auto xr = this->on_ref(x), gr = this->on_ref(g), mr = this->on_ref(m), vr = this->on_ref(v);
        ops::adam_step(*this->gpu_, xg.data(), gg.data(), mg.data(), vg.data(), n, 0.01, 0.9, 0.999,
                       1e-8, t, nonneg);
        ops::adam_step(*this->ref_, xr.data(), gr.data(), mr.data(), vr.data(), n, 0.01, 0.9, 0.999,
                       1e-8, t, nonneg);
        EXPECT_LT(rel_error(this->from_gpu(xg.data(), len), this->from_ref(xr.data(), len)),
                  tol<T>())
            << where << " x";
        EXPECT_LT(rel_error(this->from_gpu(mg.data(), len), this->from_ref(mr.data(), len)),
                  tol<T>())
            << where << " m";
        EXPECT_LT(rel_error(this->from_gpu(vg.data(), len), this->from_ref(vr.data(), len)),
                  tol<T>())
            << where << " v";
      }
}

}  // namespace
}  // namespace tessera::kernels
