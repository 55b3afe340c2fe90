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
  /// Power-law (Zipf-like) exponent, > 0: P(index = i) ~ (i + 1)^-alpha (see draw_index).
  double alpha = 1.0;
  int rank = 4;  ///< rank of the dense model whose values are sampled
  std::uint64_t seed = 1;
};

/// Index of mode `mode` for hash value h, u = uniform01(h) in [0, 1), I = dims[mode].
/// Uniform: floor(u I). Power law: a truncated continuous Zipf law, P(index = i) ~
/// (i + 1)^-alpha for i in [0, I), drawn by inverting the CDF of the density x^-alpha on
/// [1, I + 1): x = (I + 1)^u for alpha = 1, else x = (1 + u ((I + 1)^(1 - alpha) - 1))^(1 /
/// (1 - alpha)); index = floor(x) - 1, clamped to [0, I). x - 1 is computed with
/// log1p/expm1, exact near alpha = 1 and for the small indices that carry most of the mass.
/// Pure, host and device, on double only, so CPUs and GPUs draw the same coordinates.
TESSERA_HD inline index_t draw_index(const Spec& s, int mode, std::uint64_t h) {
  const double u = uniform01(h);
  const std::uint64_t I = s.dims[mode];
  const double dim = static_cast<double>(I);
  double y;  // uniform: u I; power law: x - 1, in [0, I) up to rounding
  if (!s.powerlaw) {
    y = u * dim;
  } else {
    const double log_top = ::log1p(dim);  // ln(I + 1)
    const double b = 1.0 - s.alpha;
    if (b > -1e-9 && b < 1e-9) {  // alpha = 1: x = (I + 1)^u
      y = ::expm1(u * log_top);
    } else {
      // (I + 1)^b - 1 = expm1(b ln(I + 1)); x - 1 = expm1(log1p(u ((I + 1)^b - 1)) / b).
      y = ::expm1(::log1p(u * ::expm1(b * log_top)) / b);
    }
    if (!(y >= 0)) y = 0;  // rounding (or NaN from an invalid alpha): the first index
  }
  const auto i = y < dim ? static_cast<std::uint64_t>(y) : I - 1;
  return static_cast<index_t>(i < I ? i : I - 1);
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
