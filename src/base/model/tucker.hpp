// Tucker model: X ~ G x_1 U_1 x_2 U_2 ... x_N U_N, with orthonormal factor columns.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/sparse_tensor.hpp"

namespace tessera {

struct TuckerModel {
  std::vector<std::uint64_t> dims;  ///< I_1..I_N
  std::vector<int> ranks;           ///< R_1..R_N
  /// Dense core, R_1 x ... x R_N, row-major (the last mode varies fastest).
  std::vector<double> core;
  std::vector<Matrix<double>> factors;  ///< factors[n] is dims[n] x ranks[n], orthonormal columns

  int order() const { return static_cast<int>(dims.size()); }
  /// Model value at a 0-based coordinate (for tests and small checks): sum over the core
  /// of G(r) prod_n U_n(c_n, r_n).
  double value_at(const index_t* c) const {
    const int N = order();
    // Contract the core with one factor row at a time, the last mode first.
    std::vector<double> cur(core);
    std::size_t len = cur.size();
    for (int n = N - 1; n >= 0; --n) {
      const auto R = static_cast<std::size_t>(ranks[static_cast<std::size_t>(n)]);
      const double* u = factors[static_cast<std::size_t>(n)].row(c[n]);
      const std::size_t outer = len / R;
      for (std::size_t a = 0; a < outer; ++a) {
        double s = 0;
        for (std::size_t r = 0; r < R; ++r) s += cur[a * R + r] * u[r];
        cur[a] = s;
      }
      len = outer;
    }
    return cur.empty() ? 0.0 : cur[0];
  }
  /// Whether the model is zero everywhere (the factors are orthonormal: the core is zero).
  bool is_zero() const {
    for (double g : core)
      if (g != 0) return false;
    return true;
  }
};

}  // namespace tessera
