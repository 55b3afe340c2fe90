// Kruskal (CP) model: X ~ sum_r lambda_r a_r^(1) o ... o a_r^(N).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/sparse_tensor.hpp"

namespace tessera {

struct KruskalModel {
  std::vector<std::uint64_t> dims;
  int rank = 0;
  std::vector<double> lambda;           ///< R weights
  std::vector<Matrix<double>> factors;  ///< factors[n] is dims[n] x R, columns unit max/2-norm

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
};

}  // namespace tessera
