// Internal to the cpu backend: compressed sparse fiber (CSF) trees, one per mode.
//
// The tree of mode n has the levels mode_at_level[0] = n (the root, one node per
// non-empty slice), then the other modes by increasing length (ties by mode number), so
// the upper levels fan out widely and the partial Hadamard products computed at a node
// are reused by all its children. Level l < order-1 has nodes fids[l][f] (the coordinate
// in mode_at_level[l]) with children fptr[l][f] .. fptr[l][f+1]-1 in level l+1; the leaf
// level holds one entry per nonzero (duplicate coordinates stay separate leaves) and its
// value. Coordinates are unique among the children of one node at every level but the
// leaf. For order 1 the only level is the leaf level, which is also the root.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/mttkrp.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels::cpu {

using csf_ptr_t = std::int64_t;

template <typename T>
struct CsfTree {
  int order = 0;
  std::array<int, kMaxOrder> mode_at_level{};
  std::vector<std::vector<index_t>> fids;    ///< order levels
  std::vector<std::vector<csf_ptr_t>> fptr;  ///< order-1 levels, each nodes+1 long
  std::vector<T> vals;                       ///< nnz, leaf order
  csf_ptr_t max_slice_nnz = 0;               ///< nonzeros under the largest root node

  std::size_t nodes(int level) const { return fids[static_cast<std::size_t>(level)].size(); }
  /// Bytes one MTTKRP pass over this tree reads: indices, pointers, values.
  std::size_t stream_bytes() const {
    std::size_t b = vals.size() * sizeof(T);
    for (const auto& f : fids) b += f.size() * sizeof(index_t);
    for (const auto& p : fptr) b += p.size() * sizeof(csf_ptr_t);
    return b;
  }
};

/// Raw pointers of one tree and the factors in level order, as the kernels read them.
template <typename T>
struct Ctx {
  int N = 0;          ///< order
  std::size_t R = 0;  ///< rank = row stride of the factors and the output
  std::array<const index_t*, kMaxOrder> fids{};
  std::array<const csf_ptr_t*, kMaxOrder> fptr{};
  std::array<const T*, kMaxOrder> A{};  ///< A[l]: factor of mode_at_level[l] (A[0] unused)
  const T* vals = nullptr;
};

template <typename T>
class CsfSet {
 public:
  CsfSet(std::vector<std::uint64_t> dims, nnz_t nnz, std::vector<CsfTree<T>> trees)
      : dims_(std::move(dims)), nnz_(nnz), trees_(std::move(trees)) {}
  int order() const { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const { return dims_; }
  nnz_t nnz() const { return nnz_; }
  /// The tree whose root is `mode`.
  const CsfTree<T>& tree(int mode) const { return trees_[static_cast<std::size_t>(mode)]; }
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& t : trees_) b += t.stream_bytes();
    return b;
  }

 private:
  std::vector<std::uint64_t> dims_;
  nnz_t nnz_ = 0;
  std::vector<CsfTree<T>> trees_;
};

/// Cuts level-1 nodes [0, n1) into `nchunks` contiguous ranges holding about equal
/// numbers of nonzeros, for the chunked (work-balanced) schedules. leaf_start(i) is the
/// first nonzero under level-1 node i, non-decreasing, with leaf_start(n1) = nnz.
/// Returns nchunks + 1 bounds.
template <typename LeafStart>
std::vector<csf_ptr_t> balanced_chunks(csf_ptr_t n1, csf_ptr_t nchunks, LeafStart leaf_start) {
  const csf_ptr_t nnz = leaf_start(n1);
  std::vector<csf_ptr_t> bounds(static_cast<std::size_t>(nchunks) + 1, n1);
  bounds[0] = 0;
  for (csf_ptr_t i = 1; i < nchunks; ++i) {
    const auto target = static_cast<csf_ptr_t>(static_cast<long double>(nnz) *
                                               static_cast<long double>(i) / nchunks);
    csf_ptr_t lo = bounds[static_cast<std::size_t>(i - 1)], hi = n1;  // first with start >= target
    while (lo < hi) {
      const csf_ptr_t mid = lo + (hi - lo) / 2;
      if (leaf_start(mid) < target)
        lo = mid + 1;
      else
        hi = mid;
    }
    bounds[static_cast<std::size_t>(i)] = lo;
  }
  return bounds;
}

}  // namespace tessera::kernels::cpu
