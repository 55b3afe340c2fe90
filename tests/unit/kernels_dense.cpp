// Small dense operations (tessera::linalg and the dense operations of the host backends,
// kernels/ops/dense.hpp) against naive loops and an independent Jacobi eigensolver, float and
// double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "kernels/ops/dense.hpp"
#include "linalg/dense.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

namespace ops = kernels::ops;

using test::fresh_seed;

template <typename T>
std::vector<T> random_matrix(std::int64_t rows, int R, std::mt19937_64& rng, double lo = -1,
                             double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> a(static_cast<std::size_t>(rows) * R);
  for (auto& v : a) v = static_cast<T>(u(rng));
  return a;
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
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

using test::tol;
/// Tolerance for solves: double / float.
template <typename T>
double pick(double d, double f) {
  return std::is_same_v<T, double> ? d : f;
}

/// Cyclic Jacobi eigendecomposition of a symmetric n x n matrix (row-major), independent
/// of LAPACK: S = Q diag(w) Q^T.
void jacobi_eig(std::vector<double> S, int n, std::vector<double>& w, std::vector<double>& Q) {
  Q.assign(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) Q[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += S[p * n + q] * S[p * n + q];
    if (off < 1e-40) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = S[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (S[q * n + q] - S[p * n + p]) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // S := S J
          const double skp = S[k * n + p], skq = S[k * n + q];
          S[k * n + p] = c * skp - s * skq;
          S[k * n + q] = s * skp + c * skq;
        }
        for (int k = 0; k < n; ++k) {  // S := J^T S
          const double spk = S[p * n + k], sqk = S[q * n + k];
          S[p * n + k] = c * spk - s * sqk;
          S[q * n + k] = s * spk + c * sqk;
        }
        for (int k = 0; k < n; ++k) {
          const double qkp = Q[k * n + p], qkq = Q[k * n + q];
          Q[k * n + p] = c * qkp - s * qkq;
          Q[k * n + q] = s * qkp + c * qkq;
        }
      }
  }
  w.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) w[i] = S[i * n + i];
}

/// M V^+ with V^+ from the Jacobi eigensolver, eigenvalues under rel_cut * max|w| dropped.
template <typename T>
std::vector<double> pinv_solution(const std::vector<T>& M, std::int64_t rows,
                                  const std::vector<T>& V, int R, double rel_cut) {
  std::vector<double> w, Q;
  jacobi_eig(to_double(V), R, w, Q);
  double wmax = 0;
  for (double x : w) wmax = std::max(wmax, std::abs(x));
  std::vector<double> P(static_cast<std::size_t>(R) * R, 0.0);
  for (int k = 0; k < R; ++k) {
    if (!(w[k] > rel_cut * wmax)) continue;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) P[i * R + j] += Q[i * R + k] * Q[j * R + k] / w[k];
  }
  std::vector<double> X(static_cast<std::size_t>(rows) * R, 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < R; ++j) X[r * R + j] += static_cast<double>(M[r * R + i]) * P[i * R + j];
  return X;
}

template <typename T>
std::vector<double> naive_gram(const std::vector<T>& A, std::int64_t rows, int R) {
  std::vector<double> G(static_cast<std::size_t>(R) * R, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int p = 0; p < R; ++p)
      for (int q = 0; q < R; ++q)
        G[p * R + q] += static_cast<double>(A[i * R + p]) * static_cast<double>(A[i * R + q]);
  return G;
}

template <typename T>
std::vector<std::unique_ptr<kernels::Backend<T>>> host_backends() {
  std::vector<std::unique_ptr<kernels::Backend<T>>> v;
  v.push_back(kernels::make_reference_backend<T>());
  v.push_back(kernels::make_cpu_backend<T>(1));
  v.push_back(kernels::make_cpu_backend<T>(2));
  return v;
}

template <typename T>
class Dense : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Dense, Types);

TYPED_TEST(Dense, GramMatchesNaive) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (std::int64_t rows : {0, 1, 37, 20000})
    for (int R : {1, 7, 16}) {
      const auto A = random_matrix<T>(rows, R, rng);
      const auto ref = naive_gram(A, rows, R);
      for (auto& be : host_backends<T>()) {
        std::vector<T> G(static_cast<std::size_t>(R) * R, std::numeric_limits<T>::quiet_NaN());
        ops::gram(*be, A.data(), rows, R, G.data());
        EXPECT_LT(rel_err(to_double(G), ref), tol<T>()) << be->name() << " rows " << rows;
        for (int p = 0; p < R; ++p)
          for (int q = 0; q < R; ++q) ASSERT_EQ(G[p * R + q], G[q * R + p]) << "not symmetric";
      }
      for (int threads : {1, 2, 3}) {
        std::vector<T> G(static_cast<std::size_t>(R) * R);
        linalg::gram(A.data(), rows, R, G.data(), threads);
        EXPECT_LT(rel_err(to_double(G), ref), tol<T>()) << "threads " << threads;
      }
    }
}

TYPED_TEST(Dense, Hadamard) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const int R = 9;
  const auto a = random_matrix<T>(R, R, rng), b = random_matrix<T>(R, R, rng),
             c = random_matrix<T>(R, R, rng);
  for (auto& be : host_backends<T>()) {
    std::vector<T> V(R * R);
    ops::hadamard(*be, {a.data()}, R, V.data());
    EXPECT_EQ(V, a);
    ops::hadamard(*be, {a.data(), b.data(), c.data()}, R, V.data());
    for (int k = 0; k < R * R; ++k) EXPECT_EQ(V[k], a[k] * b[k] * c[k]);
  }
  std::vector<T> V(R * R);
  EXPECT_THROW(linalg::hadamard<T>({}, R, V.data()), Error);
}

// M V^+ V == M for SPD V (Cholesky path, no fallback).
TYPED_TEST(Dense, SolveNormalSpd) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int R : {1, 5, 16, 33})
    for (std::int64_t rows : {0, 1, 100, 20000}) {
      const auto A = random_matrix<T>(4 * R + 10, R, rng);
      std::vector<T> V(static_cast<std::size_t>(R) * R);
      linalg::gram(A.data(), 4 * R + 10, R, V.data());
      const auto M0 = random_matrix<T>(rows, R, rng);
      for (auto& be : host_backends<T>()) {
        auto M = M0;
        EXPECT_FALSE(ops::solve_normal(*be, M.data(), rows, V.data(), R)) << "fallback on SPD V";
        std::vector<double> back(M0.size(), 0.0);  // (M V^+) V
        for (std::int64_t r = 0; r < rows; ++r)
          for (int i = 0; i < R; ++i)
            for (int j = 0; j < R; ++j)
              back[r * R + j] +=
                  static_cast<double>(M[r * R + i]) * static_cast<double>(V[i * R + j]);
        EXPECT_LT(rel_err(back, to_double(M0)), pick<T>(1e-10, 1e-4))
            << be->name() << " R " << R << " rows " << rows;
        // And equal to the pseudo-inverse solution (= inverse here).
        EXPECT_LT(rel_err(to_double(M), pinv_solution(M0, rows, V, R, 0.0)), pick<T>(1e-9, 1e-3));
      }
    }
}

// Rank-deficient Gram (two equal columns): fallback, finite, equal to the pseudo-inverse
// solution computed by an independent eigensolver.
TYPED_TEST(Dense, SolveNormalSingular) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int R : {2, 6, 16}) {
    const std::int64_t n = 5 * R;
    auto A = random_matrix<T>(n, R, rng);
    for (std::int64_t i = 0; i < n; ++i) A[i * R + R - 1] = A[i * R + 0];  // col R-1 == col 0
    std::vector<T> V(static_cast<std::size_t>(R) * R);
    linalg::gram(A.data(), n, R, V.data());
    const std::int64_t rows = 3000;
    const auto M0 = random_matrix<T>(rows, R, rng);
    const auto expect = pinv_solution(M0, rows, V, R, 1e-9);
    for (auto& be : host_backends<T>()) {
      auto M = M0;
      EXPECT_TRUE(ops::solve_normal(*be, M.data(), rows, V.data(), R)) << be->name();
      for (T v : M) ASSERT_TRUE(std::isfinite(static_cast<double>(v)));
      EXPECT_LT(rel_err(to_double(M), expect), pick<T>(1e-9, 1e-4)) << be->name() << " R " << R;
      // The solution has no component along the null vector e_0 - e_{R-1}.
      for (std::int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(M[r * R], M[r * R + R - 1], pick<T>(1e-8, 1e-3));
    }
  }
}

// dpotrf succeeds but the factor is numerically singular: the pivot test sends it to the
// pseudo-inverse, which drops the tiny eigenvalue. An indefinite V drops the negative one.
TYPED_TEST(Dense, SolveNormalNearlySingularAndIndefinite) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const int R = 4;
  const std::int64_t rows = 50;
  const auto M0 = random_matrix<T>(rows, R, rng);
  const std::vector<T> diag_v = {T(1), T(1e-20), T(2), T(4)};
  const std::vector<T> indef_v = {T(1), T(-3), T(2), T(4)};
  for (const auto* d : {&diag_v, &indef_v}) {
    std::vector<T> V(R * R, T(0));
    for (int i = 0; i < R; ++i) V[i * R + i] = (*d)[i];
    for (auto& be : host_backends<T>()) {
      auto M = M0;
      EXPECT_TRUE(ops::solve_normal(*be, M.data(), rows, V.data(), R));
      for (std::int64_t r = 0; r < rows; ++r) {
        EXPECT_NEAR(M[r * R + 1], T(0), 1e-12);
        for (int i : {0, 2, 3}) EXPECT_NEAR(M[r * R + i], M0[r * R + i] / (*d)[i], 1e-6);
      }
    }
  }
}

TYPED_TEST(Dense, SolveNormalZeroMatrixGivesZero) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  for (int R : {1, 16}) {
    const std::vector<T> V(static_cast<std::size_t>(R) * R, T(0));
    for (auto& be : host_backends<T>()) {
      auto M = random_matrix<T>(40, R, rng);
      EXPECT_TRUE(ops::solve_normal(*be, M.data(), 40, V.data(), R));
      for (T v : M) ASSERT_EQ(v, T(0));
    }
  }
}

TYPED_TEST(Dense, ColumnNormsScaleDots) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (std::int64_t rows : {0, 3, 250000})
    for (int R : {1, 16, 21}) {
      const auto A = random_matrix<T>(rows, R, rng), B = random_matrix<T>(rows, R, rng);
      std::vector<double> two(R, 0.0), mx(R, 0.0), dot(R, 0.0), scale(R);
      for (std::int64_t i = 0; i < rows; ++i)
        for (int r = 0; r < R; ++r) {
          const double a = A[i * R + r], b = B[i * R + r];
          two[r] += a * a;
          mx[r] = std::max(mx[r], std::abs(a));
          dot[r] += a * b;
        }
      for (int r = 0; r < R; ++r) scale[r] = 0.5 + r;
      for (auto& be : host_backends<T>()) {
        std::vector<double> out(R, -1.0);
        ops::column_norms(*be, A.data(), rows, R, NormKind::two, out.data());
        EXPECT_LT(rel_err(out, two), 1e-12) << be->name();
        ops::column_norms(*be, A.data(), rows, R, NormKind::max, out.data());
        EXPECT_EQ(out, mx) << be->name();
        ops::column_dots(*be, A.data(), B.data(), rows, R, out.data());
        for (int r = 0; r < R; ++r) EXPECT_NEAR(out[r], dot[r], 1e-9 * (1 + rows));
        auto S = A;
        ops::scale_columns(*be, S.data(), rows, R, scale.data());
        for (std::int64_t i = 0; i < rows; ++i)
          for (int r = 0; r < R; ++r)
            ASSERT_EQ(S[i * R + r], static_cast<T>(static_cast<double>(A[i * R + r]) * scale[r]));
      }
    }
}

TEST(DenseLapack, CholeskyAndEig) {
  std::mt19937_64 rng(fresh_seed());
  const int n = 7;
  const auto A = random_matrix<double>(20, n, rng);
  std::vector<double> S(n * n);
  linalg::gram(A.data(), 20, n, S.data());
  auto L = S;
  ASSERT_TRUE(linalg::cholesky(L.data(), n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (j > i) {
        EXPECT_EQ(L[i * n + j], 0.0);
      }
      double s = 0;
      for (int k = 0; k < n; ++k) s += L[i * n + k] * L[j * n + k];
      EXPECT_NEAR(s, S[i * n + j], 1e-12 * (1 + std::abs(S[i * n + j])));
    }
  std::vector<double> w(n), Q(n * n);
  linalg::symmetric_eig(S.data(), n, w.data(), Q.data());
  for (int i = 1; i < n; ++i) EXPECT_LE(w[i - 1], w[i]);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0, qq = 0;
      for (int k = 0; k < n; ++k) {
        s += Q[i * n + k] * w[k] * Q[j * n + k];
        qq += Q[k * n + i] * Q[k * n + j];
      }
      EXPECT_NEAR(s, S[i * n + j], 1e-10 * (1 + std::abs(S[i * n + j])));
      EXPECT_NEAR(qq, i == j ? 1.0 : 0.0, 1e-12);
    }
  std::vector<double> indef = {1, 2, 2, 1};
  EXPECT_FALSE(linalg::cholesky(indef.data(), 2));
}

}  // namespace
}  // namespace tessera
