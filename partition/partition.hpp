// Who owns which nonzeros and factor rows (DESIGN §4), and moving nonzeros there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::partition {

enum class Scheme {
  nnz,   ///< contiguous equal-count ranges of the nonzeros in coordinate order
  grid,  ///< p_1 x ... x p_N blocks; mode n cut into p_n ranges balanced by nnz
};
/// "nnz" | "grid"; throws InputError.
Scheme parse_scheme(const std::string& s);
std::string to_string(Scheme s);

/// Grid shape p_1..p_N with product `nranks` that minimises the factor rows each rank
/// holds and communicates (sum_n dims[n] / p_n), with p_n <= dims[n].
std::vector<int> choose_grid(const std::vector<std::uint64_t>& dims, int nranks);
/// Parses "4x2x1"; checks order and product; throws InputError.
std::vector<int> parse_grid(const std::string& s, int order, int nranks);

/// Ownership of nonzeros and factor rows.
struct Distribution {
  Scheme scheme = Scheme::nnz;
  std::vector<std::uint64_t> dims;  ///< global dims
  std::vector<int> grid;            ///< p_n (all 1 except for grid scheme)
  std::vector<int> coords;          ///< this rank's grid coordinates
  /// bounds[n] has grid[n]+1 entries: chunk c of mode n is [bounds[n][c], bounds[n][c+1]).
  std::vector<std::vector<std::uint64_t>> bounds;
  nnz_t global_nnz = 0;  ///< after duplicates were summed
  nnz_t duplicates = 0;  ///< nonzeros merged into others (global)
  nnz_t min_block_nnz = 0, max_block_nnz = 0;
  double imbalance = 1.0;  ///< max / mean block nnz
  /// Global sum over ranks of the factor rows each rank's block touches (all modes).
  std::uint64_t touched_rows = 0;

  /// Rank (in the communicator used to distribute) of grid coordinates c.
  int rank_of(const std::vector<int>& c) const;
  /// Multi-line summary for the startup report.
  std::string describe() const;
};

template <typename T>
struct Distributed {
  /// This rank's nonzeros: GLOBAL 0-based coordinates, sorted lexicographically
  /// (mode 0 slowest), no repeated coordinates. dims = global dims.
  SparseTensor<T> block;
  Distribution dist;
};

/// Collective over `c`: routes each rank's nonzeros (global coordinates, dims = global
/// dims on every rank) to their owners with one alltoallv, sorts them and sums repeated
/// coordinates (counted in dist.duplicates). `grid` empty = choose_grid (grid scheme).
/// Works for ranks > nnz (some blocks are empty) and for empty input.
template <typename T>
Distributed<T> distribute(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                          const comm::Communicator& c);

}  // namespace tessera::partition
