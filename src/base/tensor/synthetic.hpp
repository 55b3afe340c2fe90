// Synthetic "sampled" tensors as pure functions of (spec, nonzero id): random coordinates
// from a uniform or power-law distribution, values of a dense rank-R model sampled there.
// Header-only and host/device, so CPUs and GPUs generate bit-identical coordinates.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/sparse_tensor.hpp"
#include "util/relabel.hpp"
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

/// P(draw_index(s, mode, h) = i) for h uniform: the mass the law above puts on index i,
/// from its CDF in y (the draw's x - 1): uniform y / I; power law log1p(y) / ln(I + 1) for
/// alpha = 1, else expm1(b log1p(y)) / expm1(b ln(I + 1)) with b = 1 - alpha; index i takes
/// y in [i, i + 1) (the last index also the clamped rest). Host only; used to cut a mode
/// into chunks of equal expected nonzeros (partition::synthetic_distribution).
inline double index_mass(const Spec& s, int mode, std::uint64_t i) {
  const std::uint64_t I = s.dims[mode];
  if (i >= I) return 0;
  if (!s.powerlaw) return 1.0 / static_cast<double>(I);
  const double log_top = std::log1p(static_cast<double>(I));
  const double b = 1.0 - s.alpha;
  const bool one = b > -1e-9 && b < 1e-9;
  auto cdf = [&](double y) {
    return one ? std::log1p(y) / log_top : std::expm1(b * std::log1p(y)) / std::expm1(b * log_top);
  };
  const double hi = i + 1 >= I ? 1.0 : cdf(static_cast<double>(i + 1));
  return hi - cdf(static_cast<double>(i));
}

/// A window of a synthetic tensor: the nonzeros whose labels lie in [lo[n], hi[n]) in every
/// mode n, stored with coordinates label - lo[n] in a tensor of dims hi[n] - lo[n]. A label
/// is the coordinate itself, or its image under relabel[n] (util/relabel.hpp) when
/// `relabelled`. It is the block one rank of a grid partition holds (partition.hpp), as the
/// layer strategy's kernels see it, generated without the rest of the tensor; values are
/// the model's at the original coordinates, so a window holds the same entries as the grid
/// partition of the whole generated tensor (repeats not merged).
struct Window {
  bool relabelled = false;
  Relabel relabel[kMaxOrder];
  std::uint64_t lo[kMaxOrder] = {};
  std::uint64_t hi[kMaxOrder] = {};
};

/// The whole tensor as a window: no relabelling, lo 0, hi dims.
inline Window whole_window(const Spec& s) {
  Window w;
  for (int n = 0; n < s.order; ++n) w.hi[n] = s.dims[n];
  return w;
}

/// Whether nonzero `id` lies in window `w`; when it does, its shifted labels are written to
/// `local` and its value (the model's at the original coordinates) to `*value`.
TESSERA_HD inline bool in_window(const Spec& s, const Window& w, std::uint64_t id, index_t* local,
                                 double* value) {
  index_t c[kMaxOrder];
  for (int n = 0; n < s.order; ++n) {
    c[n] = coordinate(s, id, n);
    const std::uint64_t label = w.relabelled ? w.relabel[n].forward(c[n]) : c[n];
    if (label < w.lo[n] || label >= w.hi[n]) return false;
    local[n] = static_cast<index_t>(label - w.lo[n]);
  }
  *value = model_value(s, c);
  return true;
}

}  // namespace tessera::synthetic
