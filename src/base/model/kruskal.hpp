// Kruskal (CP) model: X ~ sum_r lambda_r a_r^(1) o ... o a_r^(N).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tensor/sparse_tensor.hpp"

namespace tessera {

struct KruskalModel {
  std::vector<std::uint64_t> dims;
  int rank = 0;
  std::vector<double> lambda;  ///< R weights
  /// factors[n] is dims[n] x R. Models a run hands out are normalised the conventional way
  /// (normalize_conventional); a checkpoint's keep the iteration's own normalisation.
  std::vector<Matrix<double>> factors;

  int order() const { return static_cast<int>(dims.size()); }
  /// Model value at a 0-based coordinate (for tests and small checks).
  double value_at(const index_t* c) const {
    double s = 0;
    for (int r = 0; r < rank; ++r) {
      double p = lambda[static_cast<std::size_t>(r)];
      for (int n = 0; n < order(); ++n) p *= factors[static_cast<std::size_t>(n)](c[n], r);
      s += p;
    }
    return s;
  }
  /// Whether the model is zero everywhere: every component has weight 0 or a zero column.
  bool is_zero() const {
    for (int r = 0; r < rank; ++r) {
      bool zero = lambda[static_cast<std::size_t>(r)] == 0;
      for (std::size_t n = 0; n < factors.size() && !zero; ++n) {
        zero = true;
        for (std::int64_t i = 0; i < factors[n].rows && zero; ++i) zero = factors[n](i, r) == 0;
      }
      if (!zero) return false;
    }
    return true;
  }
};

/// The normalisation every CP tool agrees on (Tensor Toolbox `normalize` + `arrange` +
/// `fixsigns`, TensorLy `normalize_factors`), applied to a run's final model; the model's
/// values are unchanged (up to rounding):
///  - every factor column has unit 2-norm and lambda_r absorbs the norms (a column of
///    zeros stays zero and its weight becomes 0);
///  - in modes 0..N-2 the entry of largest magnitude of each column is positive (the first
///    such row on ties); mode N-1's column takes the product of those sign flips, so the
///    weights stay >= 0 when they were;
///  - components are sorted by weight, largest first (a stable sort: ties keep their order).
inline void normalize_conventional(KruskalModel& m) {
  const int R = m.rank, N = m.order();
  if (R <= 0 || N == 0) return;
  for (int r = 0; r < R; ++r) {
    double sign = 1.0;
    for (int n = 0; n < N; ++n) {
      auto& F = m.factors[static_cast<std::size_t>(n)];
      double ss = 0, big = 0, at_big = 0;
      for (std::int64_t i = 0; i < F.rows; ++i) {
        const double v = F(i, r);
        ss += v * v;
        if (std::abs(v) > big) {
          big = std::abs(v);
          at_big = v;
        }
      }
      const double norm = std::sqrt(ss);
      double s = norm > 0 ? 1.0 / norm : 1.0;
      if (n < N - 1 && at_big < 0) {
        s = -s;
        sign = -sign;
      } else if (n == N - 1) {
        s *= sign;
      }
      for (std::int64_t i = 0; i < F.rows; ++i) F(i, r) *= s;
      m.lambda[static_cast<std::size_t>(r)] *= norm;
    }
  }
  std::vector<int> order(static_cast<std::size_t>(R));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return m.lambda[static_cast<std::size_t>(a)] > m.lambda[static_cast<std::size_t>(b)];
  });
  std::vector<double> lambda(static_cast<std::size_t>(R));
  for (int r = 0; r < R; ++r)
    lambda[static_cast<std::size_t>(r)] =
        m.lambda[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])];
  m.lambda = lambda;
  for (auto& F : m.factors) {
    std::vector<double> row(static_cast<std::size_t>(R));
    for (std::int64_t i = 0; i < F.rows; ++i) {
      for (int r = 0; r < R; ++r)
        row[static_cast<std::size_t>(r)] = F(i, order[static_cast<std::size_t>(r)]);
      std::copy(row.begin(), row.end(), F.row(i));
    }
  }
}

}  // namespace tessera
