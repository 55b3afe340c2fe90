// Synthetic "sampled" tensors as pure functions of (spec, nonzero id): random coordinates
// from a uniform or power-law distribution, values of a dense rank-R model sampled there.
// Header-only and host/device, so CPUs and GPUs generate bit-identical coordinates.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/sparse_tensor.hpp"
#include "util/rng.hpp"

namespace tessera::synthetic {

/// Streams of the counter-based RNG, kept apart so no two uses share numbers.
enum Stream : std::uint64_t { kSupport = 1, kFactor = 2, kCoord = 3, kNoise = 4 };

struct Spec {
  int order = 0;
  std::uint64_t dims[kMaxOrder] = {};
  bool powerlaw = false;
  double alpha = 2.0;  ///< power-law exponent: index = floor(I * u^alpha)
  int rank = 4;        ///< rank of the dense model whose values are sampled
  std::uint64_t seed = 1;
};

/// Index of mode `mode` for hash value h (uniform, or floor(I * u^alpha)).
TESSERA_HD inline index_t draw_index(const Spec& s, int mode, std::uint64_t h) {
  const double u = uniform01(h);
  const double dim = static_cast<double>(s.dims[mode]);
  const double x = s.powerlaw ? ::pow(u, s.alpha) * dim : u * dim;
  const auto i = static_cast<std::uint64_t>(x);
  return static_cast<index_t>(i < s.dims[mode] ? i : s.dims[mode] - 1);
}

/// Coordinate of nonzero `id` in mode `mode`.
TESSERA_HD inline index_t coordinate(const Spec& s, std::uint64_t id, int mode) {
  return draw_index(s, mode, hash_keys(s.seed ^ kCoord, id, static_cast<std::uint64_t>(mode)));
}

/// Entry (row, r) of the dense model's mode-`mode` factor: in [0.1, 1.1).
TESSERA_HD inline double factor_value(const Spec& s, int mode, std::uint64_t row, int r) {
  return 0.1 + uniform01(hash_keys(s.seed ^ kFactor, static_cast<std::uint64_t>(mode), row,
                                   static_cast<std::uint64_t>(r)));
}

/// Value of the dense rank-R model at coordinates c.
TESSERA_HD inline double model_value(const Spec& s, const index_t* c) {
  double v = 0;
  for (int r = 0; r < s.rank; ++r) {
    double p = 1;
    for (int n = 0; n < s.order; ++n) p *= factor_value(s, n, c[n], r);
    v += p;
  }
  return v;
}

}  // namespace tessera::synthetic
