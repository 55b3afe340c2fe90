// GCP-SGD's samples (algo/cp_gcp.cpp, docs/counts.md): which entries a step draws, as pure
// functions of the seed, the step and the sample's number, so that every rank count and every
// backend draws the same ones. Host backends draw a step's samples into host memory
// (gcp_draw_samples); the cuda backend draws them inside its gradient kernel
// (kernels/cuda/dense/gcp.cu), from the training entries it holds on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

/// A rank's training entries where ops::gcp_sampled_gradient reads them, in backend memory:
/// one coordinate array per mode and the values, `nnz` each, in the order of their numbers.
/// On a host backend they are the tensor's own arrays (which must outlive this:
/// host_gcp_entries); on a device backend a copy, owned by `storage`.
template <typename T>
struct GcpEntries {
  std::vector<const index_t*> idx;
  const T* vals = nullptr;
  nnz_t nnz = 0;
  std::shared_ptr<void> storage;
};

/// `train`'s own arrays as GcpEntries (host memory, no copy).
template <typename T>
GcpEntries<T> host_gcp_entries(const SparseTensor<T>& train) {
  GcpEntries<T> e;
  for (const auto& ix : train.idx) e.idx.push_back(ix.data());
  e.vals = train.vals.data();
  e.nnz = train.nnz();
  return e;
}

/// The checks every backend makes of a draw over `train` (train.nnz = -1: not checked) for a
/// tensor of `dims`.
template <typename T>
void check_gcp_draw(const GcpDraw& d, const GcpEntries<T>& train,
                    const std::vector<std::uint64_t>& dims) {
  TESSERA_EXPECTS(train.idx.size() == dims.size(), "gcp draw: " << train.idx.size()
                                                                << " index arrays for "
                                                                << dims.size() << " modes");
  TESSERA_EXPECTS(
      d.ranks >= 1 && d.rank >= 0 && d.rank < d.ranks && d.nonzero >= 0 && d.zero >= 0 &&
          d.first + d.mine <= d.n_train && (d.nonzero == 0 || d.n_train > 0),
      "gcp draw: inconsistent (rank " << d.rank << " of " << d.ranks << ", entries " << d.first
                                      << " + " << d.mine << " of " << d.n_train << ", " << d.nonzero
                                      << " + " << d.zero << " samples)");
  TESSERA_EXPECTS(train.nnz < 0 || static_cast<std::uint64_t>(train.nnz) == d.mine,
                  "gcp draw: " << train.nnz << " training entries for a draw of " << d.mine);
  for (std::size_t n = 0; n < dims.size(); ++n)
    TESSERA_EXPECTS(dims[n] >= 1, "gcp draw: mode " << n << " has no extent");
}

/// This rank's samples of the step in host memory (`train` in host memory), in the order of
/// their numbers: first its nonzero samples (their count in *k: its training entries'
/// coordinates and data), then its zero samples (data 0).
template <typename T>
SparseTensor<T> gcp_draw_samples(const GcpDraw& d, const GcpEntries<T>& train,
                                 const std::vector<std::uint64_t>& dims, nnz_t* k) {
  check_gcp_draw(d, train, dims);
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
    for (std::size_t n = 0; n < dims.size(); ++n) s.idx[n].push_back(train.idx[n][l]);
    s.vals.push_back(train.vals[l]);
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
