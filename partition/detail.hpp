// Internal building blocks of partition.cpp, exposed for tests. Not a stable API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "partition/partition.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::partition::detail {

/// "4x2x1" for {4, 2, 1}.
std::string join_grid(const std::vector<int>& g);

/// Throws InputError unless `grid` fits `dims` and multiplies to `nranks` (distribute's
/// check, shared with synthetic_distribution).
void check_grid_shape(const std::vector<int>& grid, const std::vector<std::uint64_t>& dims,
                      int nranks);

/// Collective: d's min_block_nnz, max_block_nnz and imbalance from every rank's block of
/// `mine` nonzeros; d.global_nnz must already be the total.
void record_block_counts(Distribution& d, nnz_t mine, const comm::Communicator& c);

/// Histogram entries reduced per round by balanced_cuts (8 MiB of int64).
inline constexpr std::size_t kHistogramBudget = std::size_t(1) << 20;

/// Collective: cut [0, dim) into `parts` contiguous ranges balanced by the global count of
/// the indices idx[0..n) (summed over ranks). Returns parts+1 bounds, first 0, last dim,
/// non-decreasing, every range non-empty when dim >= parts.
///
/// Cut k is placed at the index x where the global prefix count P(x) = #{indices < x} is
/// closest to k*T/parts (T = global count); ties go to the lower x. Then cuts are pushed
/// right/left just enough to keep every range non-empty. With no indices at all the
/// ranges have equal length. The prefix counts are found exactly by zooming: each round
/// all-reduces a histogram of at most `budget` bins over the still-open intervals, so the
/// memory does not grow with dim (one round when dim <= budget; more for longer modes or
/// many parts).
std::vector<std::uint64_t> balanced_cuts(const index_t* idx, std::size_t n, std::uint64_t dim,
                                         int parts, const comm::Communicator& c,
                                         std::size_t budget = kHistogramBudget);

/// Sorts t lexicographically (mode 0 slowest) and sums repeated coordinates (in double,
/// in the order the duplicates appear in t). Returns the number of nonzeros merged away.
/// Uses packed 64- or 128-bit keys when the coordinate bits fit, a permutation sort with a
/// lexicographic comparator otherwise.
template <typename T>
nnz_t sort_and_merge(SparseTensor<T>& t);

/// Number of distinct values in v[0..n).
std::uint64_t count_distinct(const index_t* v, std::size_t n);

}  // namespace tessera::partition::detail
