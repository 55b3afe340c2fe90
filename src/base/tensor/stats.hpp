// Descriptive statistics of a (distributed) sparse tensor, for `tessera info`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/sparse_tensor.hpp"

namespace tessera {

struct ModeStats {
  std::uint64_t dim = 0;
  std::uint64_t nonempty_slices = 0;  ///< indices with at least one nonzero
  nnz_t max_slice_nnz = 0;
  double mean_slice_nnz = 0;  ///< over non-empty slices
};

struct TensorStats {
  int order = 0;
  std::vector<std::uint64_t> dims;
  nnz_t nnz = 0;
  double density = 0;  ///< nnz / prod(dims)
  double min_value = 0, max_value = 0, norm = 0;
  std::vector<ModeStats> modes;
};

/// Statistics of a tensor held whole on one process (after gathering, for info).
TensorStats compute_stats(const SparseTensor<double>& x);
/// Human-readable multi-line report.
std::string format_stats(const TensorStats& s);

}  // namespace tessera
