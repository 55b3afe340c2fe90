// GCP-SGD's samples (algo/cp_gcp.cpp, docs/counts.md): which entries a step draws, as pure
// functions of the seed, the step and the sample's number, so that every rank count and every
// backend draws the same ones. Host backends draw a step's samples into host memory
// (gcp_draw_samples); the cuda backend draws them inside its gradient kernel
// (kernels/cuda/dense/gcp.cu), from the training entries it holds on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/sparse_tensor.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {

/// One step's draw on one rank. The training entries are numbered over all ranks, rank after
/// rank: this rank holds numbers first .. first + mine - 1. Nonzero sample j (0 <= j < nonzero)
/// is the training entry gcp_nonzero_sample(j), taken by the rank that holds it; zero sample j
/// (0 <= j < zero) has coordinates gcp_zero_coord(j, n, dims[n]) and belongs to rank j mod ranks.
struct GcpDraw {
  std::uint64_t seed = 0, epoch = 0, step = 0;
  std::int64_t nonzero = 0;   ///< nonzero samples of the step, over all ranks
  std::int64_t zero = 0;      ///< zero samples of the step, over all ranks
  std::uint64_t n_train = 0;  ///< training entries over all ranks (>= 1 when nonzero > 0)
  std::uint64_t first = 0;    ///< global number of this rank's first training entry
  std::uint64_t mine = 0;     ///< this rank's training entries
  int rank = 0, ranks = 1;
};

inline constexpr std::uint64_t kGcpNonzeroKey = 0x4743504e5aull;
inline constexpr std::uint64_t kGcpZeroKey = 0x474350305aull;

/// The global number of nonzero sample j.
TESSERA_HD inline std::uint64_t gcp_nonzero_sample(const GcpDraw& d, std::int64_t j) {
  return hash_keys(d.seed ^ kGcpNonzeroKey, d.epoch, d.step, static_cast<std::uint64_t>(j)) %
         d.n_train;
}

/// Mode n's coordinate (below dim) of zero sample j.
TESSERA_HD inline index_t gcp_zero_coord(const GcpDraw& d, std::int64_t j, int n,
                                         std::uint64_t dim) {
  return static_cast<index_t>(
      hash_keys(d.seed ^ kGcpZeroKey, d.epoch, d.step,
                static_cast<std::uint64_t>(j) * 16 + static_cast<std::uint64_t>(n)) %
      dim);
}

/// This rank's zero samples of the step: j = rank, rank + ranks, ... below zero.
TESSERA_HD inline std::int64_t gcp_my_zero_samples(const GcpDraw& d) {
  return d.zero > d.rank ? (d.zero - d.rank + d.ranks - 1) / d.ranks : 0;
}

/// This rank's samples of the step in host memory, in the order of their numbers: first its
/// nonzero samples (their count in *k; coordinates and data of its training entries: idx per
/// mode and vals, `mine` each, host memory), then its zero samples (data 0). dims: the
/// tensor's, one per mode.
template <typename T>
SparseTensor<T> gcp_draw_samples(const GcpDraw& d, const std::vector<const index_t*>& idx,
                                 const T* vals, const std::vector<std::uint64_t>& dims, nnz_t* k) {
  TESSERA_EXPECTS(idx.size() == dims.size() && d.ranks >= 1 && d.rank >= 0 && d.rank < d.ranks,
                  "gcp_draw_samples: " << idx.size() << " index arrays for " << dims.size()
                                       << " modes, rank " << d.rank << " of " << d.ranks);
  TESSERA_EXPECTS(d.nonzero == 0 || d.n_train > 0,
                  "gcp_draw_samples: nonzero samples of an empty training set");
  SparseTensor<T> s;
  s.dims = dims;
  s.idx.assign(dims.size(), {});
  const auto held = [&](std::uint64_t g) { return g >= d.first && g < d.first + d.mine; };
  // Sized exactly (the planner counts these arrays).
  std::size_t size = static_cast<std::size_t>(gcp_my_zero_samples(d));
  for (std::int64_t j = 0; j < d.nonzero; ++j) size += held(gcp_nonzero_sample(d, j)) ? 1 : 0;
  for (auto& ix : s.idx) ix.reserve(size);
  s.vals.reserve(size);
  for (std::int64_t j = 0; j < d.nonzero; ++j) {
    const std::uint64_t g = gcp_nonzero_sample(d, j);
    if (!held(g)) continue;
    const std::uint64_t l = g - d.first;
    for (std::size_t n = 0; n < dims.size(); ++n) s.idx[n].push_back(idx[n][l]);
    s.vals.push_back(vals[l]);
  }
  *k = static_cast<nnz_t>(s.vals.size());
  for (std::int64_t j = d.rank; j < d.zero; j += d.ranks) {
    for (std::size_t n = 0; n < dims.size(); ++n)
      s.idx[n].push_back(gcp_zero_coord(d, j, static_cast<int>(n), dims[n]));
    s.vals.push_back(T(0));
  }
  return s;
}

}  // namespace tessera::kernels
