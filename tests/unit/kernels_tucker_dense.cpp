// Tucker's dense-stage operations (Backend::upload_index and kernels/ops/tucker_dense.hpp:
// gather/scatter_rows_double, gram_double, inner_double, times_small_double, cholqr_step,
// subspace_change, sum_squares_double, convert_from_double): the host implementation every
// host backend shares (reference, cpu; float and double backends) against direct loops on fresh
// random inputs, outputs NaN-poisoned first. cholqr_step also on numerically singular Grams
// (refused, U untouched) and on Grams just above and below its pivot rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

namespace ops = kernels::ops;

using test::fresh_seed;
using test::inner;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> random_doubles(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// Elementwise |v|.
std::vector<double> abs_of(std::vector<double> v) {
  for (auto& x : v) x = std::abs(x);
  return v;
}

/// ||got - want||_F over ||scale||_F: for sums of products, scale is the same product of the
/// absolute values, the magnitude rounding is relative to (a result near 0 by cancellation,
/// e.g. the inner product of 37 random rows, has no relative accuracy to speak of).
double err_over(const std::vector<double>& got, const std::vector<double>& want,
                const std::vector<double>& scale) {
  double num = 0, den = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (!std::isfinite(got[k])) return std::numeric_limits<double>::infinity();
    num += (got[k] - want[k]) * (got[k] - want[k]);
    den += scale[k] * scale[k];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  return err_over(got, want, want);
}

/// Row-major A (rows x K) times B (K x R).
std::vector<double> matmul(const std::vector<double>& A, const std::vector<double>& B,
                           std::int64_t rows, int K, int R) {
  std::vector<double> C(static_cast<std::size_t>(rows) * R, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < R; ++j) C[i * R + j] += A[i * K + k] * B[k * R + j];
  return C;
}

template <typename T>
std::vector<std::unique_ptr<kernels::Backend<T>>> host_backends() {
  std::vector<std::unique_ptr<kernels::Backend<T>>> v;
  v.push_back(kernels::make_reference_backend<T>());
  v.push_back(kernels::make_cpu_backend<T>(2));
  return v;
}

template <typename T>
class TuckerDenseOps : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TuckerDenseOps, Types);

TYPED_TEST(TuckerDenseOps, GatherScatterAndIndex) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (auto& be : host_backends<T>()) {
    const int R = 5;
    const std::int64_t len = 40;
    // Every third row present, plus the last one.
    std::vector<std::int64_t> pos;
    for (std::int64_t i = 0; i < len; i += 3) pos.push_back(i);
    pos.push_back(len - 1);
    const auto rows = static_cast<std::int64_t>(pos.size());
    auto idx = be->upload_index(pos.data(), pos.size());
    ASSERT_EQ(idx.size(), pos.size());
    EXPECT_EQ(std::vector<std::int64_t>(idx.data(), idx.data() + idx.size()), pos);
    EXPECT_EQ(be->upload_index(pos.data(), 0).size(), 0u);

    const auto U = random_doubles(static_cast<std::size_t>(len) * R, rng);
    std::vector<double> P(static_cast<std::size_t>(rows) * R, kNaN);
    ops::gather_rows_double(*be, U.data(), R, idx.data(), rows, P.data());
    for (std::int64_t j = 0; j < rows; ++j)
      for (int c = 0; c < R; ++c) EXPECT_EQ(P[j * R + c], U[pos[j] * R + c]) << be->name();
    std::vector<double> Pi(U.size(), kNaN);  // identity map: a copy
    ops::gather_rows_double(*be, U.data(), R, nullptr, len, Pi.data());
    EXPECT_EQ(Pi, U) << be->name();

    const auto Z = random_doubles(static_cast<std::size_t>(rows) * R, rng);
    const auto scale = random_doubles(static_cast<std::size_t>(R), rng);
    std::vector<double> V(static_cast<std::size_t>(len) * R, kNaN);
    ops::scatter_rows_double(*be, Z.data(), rows, R, idx.data(), len, scale.data(), V.data());
    std::vector<double> want(V.size(), 0.0);
    for (std::int64_t j = 0; j < rows; ++j)
      for (int c = 0; c < R; ++c) want[pos[j] * R + c] = Z[j * R + c] * scale[c];
    EXPECT_EQ(V, want) << be->name();
    // Identity map, no scale, fewer rows than len: the rest zero.
    std::fill(V.begin(), V.end(), kNaN);
    ops::scatter_rows_double(*be, Z.data(), rows, R, nullptr, len, nullptr, V.data());
    std::fill(want.begin(), want.end(), 0.0);
    std::copy(Z.begin(), Z.end(), want.begin());
    EXPECT_EQ(V, want) << be->name();
  }
}

TYPED_TEST(TuckerDenseOps, GramInnerTimesSmallAndSums) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (auto& be : host_backends<T>()) {
    // 20000 rows: more than one BLAS chunk of the host implementation.
    for (std::int64_t rows : {0, 1, 37, 20000}) {
      for (int R : {1, 6, 17}) {
        const std::string what =
            be->name() + " rows " + std::to_string(rows) + " R " + std::to_string(R);
        const auto A = random_doubles(static_cast<std::size_t>(rows) * R, rng);
        const auto B = random_doubles(static_cast<std::size_t>(rows) * R, rng);
        const auto M = random_doubles(static_cast<std::size_t>(R) * R, rng);
        std::vector<double> G(static_cast<std::size_t>(R) * R, kNaN);
        ops::gram_double(*be, A.data(), rows, R, G.data());
        EXPECT_LT(rel_err(G, inner(A, A, rows, R)), 1e-13) << "gram " << what;
        for (int p = 0; p < R; ++p)
          for (int q = 0; q < R; ++q) EXPECT_EQ(G[p * R + q], G[q * R + p]) << what;
        std::vector<double> H(static_cast<std::size_t>(R) * R, kNaN);
        ops::inner_double(*be, A.data(), B.data(), rows, R, H.data());
        EXPECT_LT(err_over(H, inner(A, B, rows, R), inner(abs_of(A), abs_of(B), rows, R)), 1e-13)
            << "inner " << what;
        auto AM = A;
        ops::times_small_double(*be, AM.data(), rows, R, M.data());
        EXPECT_LT(err_over(AM, matmul(A, M, rows, R, R), matmul(abs_of(A), abs_of(M), rows, R, R)),
                  1e-13)
            << "times_small " << what;
        // ||B - A M||^2 and sum of squares.
        const auto D = matmul(A, M, rows, R, R);
        double want = 0, ss = 0;
        for (std::size_t k = 0; k < D.size(); ++k) {
          want += (B[k] - D[k]) * (B[k] - D[k]);
          ss += A[k] * A[k];
        }
        const double got = ops::subspace_change(*be, A.data(), B.data(), M.data(), rows, R);
        EXPECT_NEAR(got, want, 1e-12 * std::max(want, 1.0)) << "subspace_change " << what;
        EXPECT_NEAR(ops::sum_squares_double(*be, A.data(), A.size()), ss, 1e-12 * std::max(ss, 1.0))
            << what;
      }
    }
  }
}

TYPED_TEST(TuckerDenseOps, ConvertFromDouble) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (auto& be : host_backends<T>()) {
    const auto x = random_doubles(1001, rng);
    std::vector<T> y(x.size(), std::numeric_limits<T>::quiet_NaN());
    ops::convert_from_double(*be, x.data(), x.size(), y.data());
    for (std::size_t k = 0; k < x.size(); ++k) EXPECT_EQ(y[k], static_cast<T>(x[k]));
  }
}

TYPED_TEST(TuckerDenseOps, CholQrStep) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (auto& be : host_backends<T>()) {
    const std::int64_t rows = 300;
    const int R = 7;
    auto U = random_doubles(static_cast<std::size_t>(rows) * R, rng);
    const auto U0 = U;
    auto G = inner(U, U, rows, R);
    double dev = -1;
    ASSERT_TRUE(ops::cholqr_step(*be, U.data(), rows, R, G.data(), &dev)) << be->name();
    double want_dev = 0;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j)
        want_dev = std::max(want_dev, std::abs(G[i * R + j] - (i == j ? 1.0 : 0.0)));
    EXPECT_EQ(dev, want_dev) << be->name();
    // Orthonormal columns with the same span: U0 = Q (Q^T U0).
    const auto I = inner(U, U, rows, R);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) EXPECT_NEAR(I[i * R + j], i == j ? 1.0 : 0.0, 1e-12);
    const auto back = matmul(U, inner(U, U0, rows, R), rows, R, R);
    EXPECT_LT(rel_err(back, U0), 1e-13) << be->name();
    // The factor is upper triangular (U := U L^{-T}): column 0 keeps its direction.
    for (std::int64_t i = 0; i < rows; ++i)
      EXPECT_NEAR(U[i * R] * std::sqrt(G[0]), U0[i * R], 1e-12) << be->name();

    // Singular Grams: refused, U untouched. A repeated column (exact) and one at 1e-7
    // relative distance (pivot ratio ~1e-14, under the 1e-13 rule).
    for (double eps : {0.0, 1e-7}) {
      auto S = U0;
      for (std::int64_t i = 0; i < rows; ++i) S[i * R + 3] = S[i * R + 1] * (1 + eps * (i % 5));
      const auto S0 = S;
      const auto GS = inner(S, S, rows, R);
      EXPECT_FALSE(ops::cholqr_step(*be, S.data(), rows, R, GS.data(), &dev))
          << be->name() << " " << eps;
      EXPECT_EQ(S, S0) << be->name();
    }
    // A well-separated but not orthonormal basis (pivot ratio ~1e-10): accepted.
    {
      auto S = U0;
      for (std::int64_t i = 0; i < rows; ++i) S[i * R + 3] = S[i * R + 1] + 1e-5 * U0[i * R + 3];
      const auto GS = inner(S, S, rows, R);
      EXPECT_TRUE(ops::cholqr_step(*be, S.data(), rows, R, GS.data(), &dev)) << be->name();
    }
    // Not finite: refused.
    auto GN = G;
    GN[0] = kNaN;
    auto S = U0;
    EXPECT_FALSE(ops::cholqr_step(*be, S.data(), rows, R, GN.data(), &dev)) << be->name();
  }
}

}  // namespace
}  // namespace tessera
