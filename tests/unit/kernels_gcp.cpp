// GCP's operations (kernels/ops/gcp.hpp) and losses (kernels/gcp_loss.hpp): each loss's value
// at a hand-computed point and its derivative against a finite difference of the value; the
// reference backend's gradient against a finite difference of its loss; the cpu backend
// (1 and 2 threads) against the reference on random samples, float and double, outputs
// poisoned; the Adam step against the reference and a hand-computed step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "kernels/gcp_loss.hpp"
#include "kernels/ops/gcp.hpp"
#include "test_util.hpp"
#include "util/error.hpp"

namespace tessera {
namespace {

namespace ops = kernels::ops;
using kernels::GcpLoss;
using kernels::GcpLossSpec;
using test::fresh_seed;

const GcpLoss kLosses[] = {GcpLoss::gaussian, GcpLoss::poisson,  GcpLoss::bernoulli,
                           GcpLoss::gamma,    GcpLoss::rayleigh, GcpLoss::huber};

std::string name_of(GcpLoss k) {
  const char* names[] = {"gaussian", "poisson", "bernoulli", "gamma", "rayleigh", "huber"};
  return names[static_cast<int>(k)];
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    num += (a[k] - b[k]) * (a[k] - b[k]);
    den += b[k] * b[k];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

template <typename T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-10 : 1e-4;
}

/// S samples of a tensor of shape dims: the first nz with data >= 0 (in {0, 1} for
/// bernoulli), the rest 0; coordinates uniform (rows repeat).
template <typename T>
SparseTensor<T> random_samples(const std::vector<std::uint64_t>& dims, nnz_t S, nnz_t nz,
                               GcpLoss loss, std::mt19937_64& rng) {
  SparseTensor<T> x(dims);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  std::vector<index_t> c(dims.size());
  for (nnz_t s = 0; s < S; ++s) {
    for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(rng() % dims[m]);
    double v = 0;
    if (s < nz) v = loss == GcpLoss::bernoulli ? static_cast<double>(rng() % 2) : u(rng);
    x.push_back(c.data(), static_cast<T>(v));
  }
  return x;
}

/// Factors of the shape, uniform in [0.1, 1) for the losses of nonnegative models, in
/// [-1, 1) otherwise.
template <typename T>
std::vector<std::vector<T>> random_factors(const std::vector<std::uint64_t>& dims, int R,
                                           GcpLoss loss, std::mt19937_64& rng) {
  const bool pos = kernels::gcp_nonnegative(loss);
  std::uniform_real_distribution<double> u(pos ? 0.1 : -1.0, 1.0);
  std::vector<std::vector<T>> A;
  for (auto d : dims) {
    A.emplace_back(static_cast<std::size_t>(d) * R);
    for (T& v : A.back()) v = static_cast<T>(u(rng));
  }
  return A;
}

template <typename T>
std::vector<const T*> const_ptrs(const std::vector<std::vector<T>>& A) {
  std::vector<const T*> p;
  for (const auto& a : A) p.push_back(a.data());
  return p;
}

struct Gradient {
  std::vector<std::vector<double>> g;
  double loss = 0;
};

/// ops::gcp_gradient on `be`, gradients and loss poisoned with NaN before the call.
template <typename T>
Gradient run(kernels::Backend<T>& be, const SparseTensor<T>& x, nnz_t nz, double wn, double wz,
             const std::vector<std::vector<T>>& A, int R, const GcpLossSpec& spec) {
  std::vector<std::vector<T>> G;
  std::vector<T*> gp;
  for (auto d : x.dims)
    G.emplace_back(static_cast<std::size_t>(d) * R, std::numeric_limits<T>::quiet_NaN());
  for (auto& g : G) gp.push_back(g.data());
  Gradient out;
  out.loss = std::numeric_limits<double>::quiet_NaN();
  ops::gcp_gradient(be, x, nz, wn, wz, const_ptrs(A), R, spec, gp, &out.loss);
  for (auto& g : G) out.g.emplace_back(g.begin(), g.end());
  return out;
}

GcpLossSpec spec_of(GcpLoss k) {
  GcpLossSpec s;
  s.kind = k;
  s.huber_delta = 0.5;  // both of huber's branches occur on the random data
  return s;
}

// ---- the losses ----

TEST(GcpLoss, ValuesAtAHandComputedPoint) {
  const double x = 2, m = 0.7;
  const auto at = [](GcpLoss k, double xx, double mm, double delta = 1.0) {
    GcpLossSpec s;
    s.kind = k;
    s.huber_delta = delta;
    return kernels::gcp_value(s, xx, mm);
  };
  EXPECT_NEAR(at(GcpLoss::gaussian, x, m), 1.69, 1e-14);
  EXPECT_NEAR(at(GcpLoss::poisson, x, m), 0.6137527074704767, 1e-14);
  EXPECT_NEAR(at(GcpLoss::bernoulli, 1, m), 0.40318604888545795, 1e-14);
  EXPECT_NEAR(at(GcpLoss::bernoulli, 0, -m), 0.4031860488854579, 1e-14);
  EXPECT_NEAR(at(GcpLoss::bernoulli, 1, 800.0), 0.0, 1e-12);        // no overflow of e^m
  EXPECT_NEAR(at(GcpLoss::gamma, x, m), 2.5004679132041248, 1e-8);  // eps = 1e-10 shifts m
  EXPECT_NEAR(at(GcpLoss::rayleigh, x, m), 5.698063690877215, 1e-8);
  EXPECT_NEAR(at(GcpLoss::huber, x, m), 1.6, 1e-14);         // |x - m| = 1.3 > delta = 1
  EXPECT_NEAR(at(GcpLoss::huber, x, 1.5), 0.25, 1e-14);      // |x - m| = 0.5 inside
  EXPECT_NEAR(at(GcpLoss::huber, x, 3.5, 1.0), 2.0, 1e-14);  // r = -1.5: 2 * 1.5 - 1
}

TEST(GcpLoss, DerivativesMatchAFiniteDifferenceOfTheValue) {
  struct Point {
    double x, m;
  };
  // For each loss: points on either side of its branches (bernoulli's sign of m, huber's
  // delta), x >= 0.
  const std::vector<Point> pts = {{2, 0.7}, {0, 0.7}, {1, -0.7}, {0.5, 2.9}, {3, 1.2}, {0, 0.05}};
  for (GcpLoss k : kLosses) {
    GcpLossSpec s;
    s.kind = k;
    s.huber_delta = 1.0;
    for (const Point& p : pts) {
      // gamma's and rayleigh's models stay >= 0 (below 0 their value is flat in m).
      if (kernels::gcp_nonnegative(k) && p.m < 0) continue;
      const double x = k == GcpLoss::bernoulli ? (p.x > 0 ? 1.0 : 0.0) : p.x;
      const double h = 1e-6;
      const double fd =
          (kernels::gcp_value(s, x, p.m + h) - kernels::gcp_value(s, x, p.m - h)) / (2 * h);
      const double d = kernels::gcp_deriv(s, x, p.m);
      EXPECT_NEAR(d, fd, 1e-6 * std::max(1.0, std::abs(fd)))
          << name_of(k) << " at x = " << x << ", m = " << p.m;
    }
  }
}

// ---- the sampled gradient ----

/// The reference's gradient is the gradient of its loss: central differences of the loss in a
/// few factor entries (double, one small problem per loss).
TEST(GcpGradient, ReferenceIsTheGradientOfItsLoss) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ref = kernels::make_reference_backend<double>();
  const std::vector<std::uint64_t> dims = {5, 4, 6};
  const int R = 3;
  for (GcpLoss k : kLosses) {
    const GcpLossSpec spec = spec_of(k);
    const auto x = random_samples<double>(dims, 60, 25, k, rng);
    auto A = random_factors<double>(dims, R, k, rng);
    const Gradient g = run(*ref, x, 25, 1.7, 0.4, A, R, spec);
    for (std::size_t n = 0; n < dims.size(); ++n)
      for (std::size_t e = 0; e < A[n].size(); e += 5) {
        const double a = A[n][e], h = 1e-6;
        double lp = 0, lm = 0;
        A[n][e] = a + h;
        ops::gcp_gradient(*ref, x, 25, 1.7, 0.4, const_ptrs(A), R, spec, {}, &lp);
        A[n][e] = a - h;
        ops::gcp_gradient(*ref, x, 25, 1.7, 0.4, const_ptrs(A), R, spec, {}, &lm);
        A[n][e] = a;
        const double fd = (lp - lm) / (2 * h);
        EXPECT_NEAR(g.g[n][e], fd, 1e-5 * std::max(1.0, std::abs(fd)))
            << name_of(k) << " mode " << n << " entry " << e;
      }
  }
}

template <typename T>
class Gcp : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Gcp, Types);

TYPED_TEST(Gcp, CpuMatchesTheReference) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ref = kernels::make_reference_backend<T>();
  std::vector<std::unique_ptr<kernels::Backend<T>>> cpus;
  for (int threads : {1, 2}) cpus.push_back(kernels::make_cpu_backend<T>(threads));
  const std::vector<std::vector<std::uint64_t>> shapes = {{30, 20, 25}, {9, 8, 11, 7}};
  const nnz_t S = 700, nz = 300;
  const double wn = 2.5, wz = 0.7;
  for (const auto& dims : shapes)
    for (int R : {1, 5, 16})
      for (GcpLoss k : kLosses) {
        const std::string where =
            name_of(k) + " order " + std::to_string(dims.size()) + " R " + std::to_string(R);
        const GcpLossSpec spec = spec_of(k);
        const auto x = random_samples<T>(dims, S, nz, k, rng);
        const auto A = random_factors<T>(dims, R, k, rng);
        const Gradient want = run(*ref, x, nz, wn, wz, A, R, spec);
        ASSERT_TRUE(std::isfinite(want.loss)) << where;
        double norm = 0;
        for (const auto& g : want.g)
          for (double v : g) norm += std::abs(v);
        ASSERT_GT(norm, 0.0) << where << ": a zero gradient tests nothing";
        for (auto& be : cpus) {
          const Gradient got = run(*be, x, nz, wn, wz, A, R, spec);
          EXPECT_NEAR(got.loss, want.loss, tolerance<T>() * std::max(1.0, std::abs(want.loss)))
              << where << " " << be->name();
          for (std::size_t n = 0; n < dims.size(); ++n)
            EXPECT_LT(rel_err(got.g[n], want.g[n]), tolerance<T>())
                << where << " " << be->name() << " mode " << n;
        }
        // The loss alone (no gradients) and the gradients alone (no loss).
        double alone = std::numeric_limits<double>::quiet_NaN();
        ops::gcp_gradient(*cpus[1], x, nz, wn, wz, const_ptrs(A), R, spec, {}, &alone);
        EXPECT_NEAR(alone, want.loss, tolerance<T>() * std::max(1.0, std::abs(want.loss)))
            << where << " loss only";
        std::vector<T> G0(static_cast<std::size_t>(dims[0]) * R,
                          std::numeric_limits<T>::quiet_NaN());
        std::vector<std::vector<T>> rest;
        std::vector<T*> gp = {G0.data()};
        for (std::size_t n = 1; n < dims.size(); ++n) {
          rest.emplace_back(static_cast<std::size_t>(dims[n]) * R);
          gp.push_back(rest.back().data());
        }
        ops::gcp_gradient(*cpus[1], x, nz, wn, wz, const_ptrs(A), R, spec, gp, nullptr);
        EXPECT_LT(rel_err(std::vector<double>(G0.begin(), G0.end()), want.g[0]), tolerance<T>())
            << where << " gradients only";
      }
}

/// A step's draw (kernels/gcp_sample.hpp) does not depend on the rank count: the samples of
/// ranks 0..P-1, each holding a contiguous run of the training entries, are the one-rank
/// draw's (the same entries, each once), and the ranks' sampled gradients (their own
/// operation, gcp_sampled_gradient) add up to the one rank's.
TYPED_TEST(Gcp, RanksDrawTheOneRankSamplesAndTheirGradientsAddUp) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const std::vector<std::uint64_t> dims = {23, 17, 29};
  const nnz_t n = 500;
  const auto train = random_samples<T>(dims, n, n, GcpLoss::poisson, rng);
  const auto A = random_factors<T>(dims, 6, GcpLoss::poisson, rng);
  const GcpLossSpec spec = spec_of(GcpLoss::poisson);
  kernels::GcpDraw d;
  d.seed = 77;
  d.epoch = 3;
  d.step = 11;
  d.nonzero = 400;  // entries repeat: 400 draws of 500
  d.zero = 250;
  d.n_train = static_cast<std::uint64_t>(n);
  d.mine = d.n_train;
  const auto keys = [&](const SparseTensor<T>& s) {
    std::vector<std::vector<double>> k;
    for (nnz_t e = 0; e < s.nnz(); ++e) {
      std::vector<double> row;
      for (const auto& ix : s.idx) row.push_back(ix[static_cast<std::size_t>(e)]);
      row.push_back(static_cast<double>(s.vals[static_cast<std::size_t>(e)]));
      k.push_back(row);
    }
    std::sort(k.begin(), k.end());
    return k;
  };
  std::vector<const index_t*> all;
  for (const auto& ix : train.idx) all.push_back(ix.data());
  nnz_t k1 = 0;
  const kernels::GcpEntries<T> whole_entries = kernels::host_gcp_entries(train);
  const auto one = kernels::gcp_draw_samples(d, whole_entries, dims, &k1);
  ASSERT_EQ(one.nnz(), 650);
  EXPECT_EQ(k1, 400);
  auto ref = kernels::make_reference_backend<T>();
  auto cpu = kernels::make_cpu_backend<T>(2);
  // A rank's entries: numbers first .. first + mine - 1 (host backends read them in place).
  const auto entries = [&](const kernels::GcpDraw& dr) {
    kernels::GcpEntries<T> e;
    for (const auto& ix : train.idx) e.idx.push_back(ix.data() + dr.first);
    e.vals = train.vals.data() + dr.first;
    e.nnz = static_cast<nnz_t>(dr.mine);
    return e;
  };
  const auto gradient = [&](kernels::Backend<T>& be, const kernels::GcpDraw& dr) {
    const kernels::GcpEntries<T> e = entries(dr);
    std::vector<std::vector<T>> G;
    std::vector<T*> gp;
    for (auto e : dims) G.emplace_back(static_cast<std::size_t>(e) * 6, T(0));
    for (auto& g : G) gp.push_back(g.data());
    Gradient out;
    ops::gcp_sampled_gradient(be, dr, e, dims, 2.0, 0.5, const_ptrs(A), 6, spec, gp, &out.loss);
    for (auto& g : G) out.g.emplace_back(g.begin(), g.end());
    return out;
  };
  const kernels::GcpEntries<T> own = ops::gcp_entries(*ref, train);
  EXPECT_EQ(own.idx, all);
  EXPECT_EQ(own.vals, train.vals.data());
  const Gradient whole = gradient(*ref, d);
  EXPECT_NEAR(whole.loss, run(*ref, one, k1, 2.0, 0.5, A, 6, spec).loss,
              tolerance<T>() * std::abs(whole.loss));
  for (int P : {2, 3}) {
    SparseTensor<T> merged(dims);
    nnz_t nonzero = 0;
    Gradient sum;
    sum.g.assign(dims.size(), {});
    for (int r = 0; r < P; ++r) {
      kernels::GcpDraw dr = d;
      dr.rank = r;
      dr.ranks = P;
      dr.first = d.n_train * static_cast<std::uint64_t>(r) / static_cast<std::uint64_t>(P);
      dr.mine =
          d.n_train * static_cast<std::uint64_t>(r + 1) / static_cast<std::uint64_t>(P) - dr.first;
      nnz_t k = 0;
      const auto part = kernels::gcp_draw_samples(dr, entries(dr), dims, &k);
      nonzero += k;
      for (nnz_t e = 0; e < part.nnz(); ++e) {
        index_t c[3];
        for (int m = 0; m < 3; ++m) c[m] = part.idx[static_cast<std::size_t>(m)][e];
        merged.push_back(c, part.vals[static_cast<std::size_t>(e)]);
      }
      const Gradient g = gradient(r % 2 == 0 ? *ref : *cpu, dr);
      sum.loss += g.loss;
      for (std::size_t m = 0; m < dims.size(); ++m) {
        if (sum.g[m].empty()) sum.g[m].assign(g.g[m].size(), 0.0);
        for (std::size_t e = 0; e < g.g[m].size(); ++e) sum.g[m][e] += g.g[m][e];
      }
    }
    EXPECT_EQ(nonzero, k1) << P << " ranks";
    EXPECT_EQ(keys(merged), keys(one)) << P << " ranks";
    EXPECT_NEAR(sum.loss, whole.loss, tolerance<T>() * std::abs(whole.loss)) << P << " ranks";
    for (std::size_t m = 0; m < dims.size(); ++m)
      EXPECT_LT(rel_err(sum.g[m], whole.g[m]), tolerance<T>()) << P << " ranks, mode " << m;
  }
}

TYPED_TEST(Gcp, AllZeroOrAllNonzeroSamplesAndBadInput) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ref = kernels::make_reference_backend<T>();
  auto cpu = kernels::make_cpu_backend<T>(2);
  const std::vector<std::uint64_t> dims = {12, 10, 9};
  const int R = 4;
  const GcpLossSpec spec = spec_of(GcpLoss::poisson);
  const auto A = random_factors<T>(dims, R, GcpLoss::poisson, rng);
  for (nnz_t nz : {nnz_t{0}, nnz_t{200}}) {
    const auto x = random_samples<T>(dims, 200, nz, GcpLoss::poisson, rng);
    const Gradient want = run(*ref, x, nz, 1.5, 0.5, A, R, spec);
    const Gradient got = run(*cpu, x, nz, 1.5, 0.5, A, R, spec);
    EXPECT_NEAR(got.loss, want.loss, tolerance<T>() * std::max(1.0, std::abs(want.loss)));
    for (std::size_t n = 0; n < dims.size(); ++n)
      EXPECT_LT(rel_err(got.g[n], want.g[n]), tolerance<T>()) << "nz " << nz << " mode " << n;
  }
  // No samples: zero loss and zero gradients (written over the poison).
  const auto none = random_samples<T>(dims, 0, 0, GcpLoss::poisson, rng);
  for (auto* be : {ref.get(), cpu.get()}) {
    const Gradient g = run(*be, none, 0, 1.5, 0.5, A, R, spec);
    EXPECT_EQ(g.loss, 0.0) << be->name();
    for (const auto& v : g.g)
      for (double e : v) ASSERT_EQ(e, 0.0) << be->name();
  }
  // An index outside its mode, and more nonzero samples than samples.
  auto bad = random_samples<T>(dims, 20, 5, GcpLoss::poisson, rng);
  bad.idx[1][7] = static_cast<index_t>(dims[1]);
  for (auto* be : {ref.get(), cpu.get()}) {
    double l = 0;
    EXPECT_THROW(ops::gcp_gradient(*be, bad, 5, 1.0, 1.0, const_ptrs(A), R, spec, {}, &l), Error)
        << be->name();
    EXPECT_THROW(ops::gcp_gradient(*be, none, 1, 1.0, 1.0, const_ptrs(A), R, spec, {}, &l), Error)
        << be->name();
  }
}

// ---- Adam ----

TYPED_TEST(Gcp, AdamStepMatchesTheReferenceAndAHandComputedStep) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto ref = kernels::make_reference_backend<T>();
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{70000}})
    for (bool nonneg : {false, true})
      for (std::int64_t t : {std::int64_t{1}, std::int64_t{7}}) {
        std::vector<T> x0(static_cast<std::size_t>(n)), g(x0.size()), m0(x0.size()), v0(x0.size());
        for (std::size_t e = 0; e < x0.size(); ++e) {
          x0[e] = static_cast<T>(u(rng) * 0.05);  // near 0: the clamp acts
          g[e] = static_cast<T>(u(rng));
          m0[e] = static_cast<T>(u(rng) * 0.1);
          v0[e] = static_cast<T>(std::abs(u(rng)) * 0.1);
        }
        auto xr = x0, mr = m0, vr = v0;
        ops::adam_step(*ref, xr.data(), g.data(), mr.data(), vr.data(), n, 0.01, 0.9, 0.999, 1e-8,
                       t, nonneg);
        if (nonneg) {
          for (T v : xr) ASSERT_GE(v, T(0));
        }
        for (int threads : {1, 2}) {
          auto cpu = kernels::make_cpu_backend<T>(threads);
          auto xc = x0, mc = m0, vc = v0;
          ops::adam_step(*cpu, xc.data(), g.data(), mc.data(), vc.data(), n, 0.01, 0.9, 0.999, 1e-8,
                         t, nonneg);
          const auto d = [](const std::vector<T>& a) {
            return std::vector<double>(a.begin(), a.end());
          };
          EXPECT_LT(rel_err(d(xc), d(xr)), tolerance<T>()) << "n " << n << " t " << t;
          EXPECT_LT(rel_err(d(mc), d(mr)), tolerance<T>()) << "n " << n << " t " << t;
          EXPECT_LT(rel_err(d(vc), d(vr)), tolerance<T>()) << "n " << n << " t " << t;
        }
      }
  // By hand, t = 1 from m = v = 0: m = 0.1 g, v = 0.001 g^2, the corrected m / sqrt(v) is
  // sign(g), so x moves by lr (less eps's share) against g; then the clamp at 0.
  for (auto* be : {ref.get()}) {
    auto cpu = kernels::make_cpu_backend<T>(1);
    for (auto* b : {be, cpu.get()}) {
      T x[2] = {T(1), T(0.001)}, gg[2] = {T(0.5), T(1)}, m[2] = {}, v[2] = {};
      ops::adam_step(*b, x, gg, m, v, 2, 0.01, 0.9, 0.999, 1e-8, 1, true);
      EXPECT_NEAR(static_cast<double>(x[0]), 1 - 0.01 * 0.5 / (0.5 + 1e-8), tolerance<T>());
      EXPECT_EQ(x[1], T(0)) << "clamped at 0";
      EXPECT_NEAR(static_cast<double>(m[0]), 0.05, tolerance<T>());
      EXPECT_NEAR(static_cast<double>(v[0]), 0.00025, tolerance<T>() * 1e-3);
    }
  }
}

}  // namespace
}  // namespace tessera
