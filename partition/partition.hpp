// Who owns which nonzeros and factor rows (DESIGN §4), and moving nonzeros there.
//
// Two schemes:
//  - grid: ranks form p_1 x ... x p_N (row-major, mode 0 slowest). Mode n is cut into p_n
//    contiguous index ranges ("chunks") balanced by nonzero count; rank (c_1..c_N) owns
//    every nonzero whose mode-n index lies in chunk c_n for all n. A rank's block therefore
//    touches only the factor rows of its chunks: bounds[n][c_n] .. bounds[n][c_n+1].
//  - nnz: the nonzeros in global lexicographic coordinate order are split into P
//    contiguous ranges of about equal count (sample sort). Blocks touch arbitrary rows.
//
// Coordinates stay GLOBAL in the distributed blocks (no relabelling, no shift).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "tensor/sparse_tensor.hpp"
#include "tensor/synthetic.hpp"
#include "util/relabel.hpp"

namespace tessera::partition {

enum class Scheme {
  nnz,   ///< contiguous equal-count ranges of the nonzeros in coordinate order
  grid,  ///< p_1 x ... x p_N blocks; mode n cut into p_n ranges balanced by nnz
};
/// "nnz" | "grid"; throws InputError.
Scheme parse_scheme(const std::string& s);
std::string to_string(Scheme s);

/// Grid shape p_1..p_N with product `nranks` that minimises the factor rows each rank
/// holds and communicates (sum_n dims[n] / p_n), with p_n <= dims[n] where possible.
/// Greedy: the prime factors of `nranks`, largest first, each go to the mode with the
/// largest current dims[n] / p_n that can still take the factor (p_n * f <= dims[n]);
/// ties go to the lower mode. A factor no mode can take goes to the mode with the largest
/// dims[n] / p_n (that mode then has empty chunks). nranks >= 1, dims non-empty.
std::vector<int> choose_grid(const std::vector<std::uint64_t>& dims, int nranks);
/// Parses "4x2x1" (or "4,2,1"); checks the entry count against `order` and the product
/// against `nranks`; throws InputError with a message naming both.
std::vector<int> parse_grid(const std::string& s, int order, int nranks);

/// Ownership of nonzeros and factor rows. Identical on every rank except `rank` and
/// `coords`.
struct Distribution {
  Scheme scheme = Scheme::nnz;
  int nranks = 1;                   ///< size of the communicator used to distribute
  int rank = 0;                     ///< this rank in that communicator
  std::vector<std::uint64_t> dims;  ///< global dims
  std::vector<int> grid;            ///< p_n (all 1 except for grid scheme)
  std::vector<int> coords;          ///< this rank's grid coordinates (all 0 for nnz)
  /// bounds[n] has grid[n]+1 entries: chunk c of mode n is [bounds[n][c], bounds[n][c+1]).
  /// bounds[n][0] = 0, bounds[n][grid[n]] = dims[n], non-decreasing; every chunk is
  /// non-empty when dims[n] >= grid[n]. For the nnz scheme bounds[n] = {0, dims[n]}.
  std::vector<std::vector<std::uint64_t>> bounds;
  nnz_t global_nnz = 0;  ///< after duplicates were summed
  nnz_t duplicates = 0;  ///< nonzeros merged into others (global)
  nnz_t min_block_nnz = 0, max_block_nnz = 0;
  double imbalance = 1.0;  ///< max / mean block nnz (1.0 when there are no nonzeros)
  /// Global sum over ranks of the factor rows each rank's block touches (all modes).
  std::uint64_t touched_rows = 0;
  /// touched_rows split by mode: sum over ranks of the distinct mode-n indices in a block.
  std::vector<std::uint64_t> touched_rows_per_mode;

  /// Seed of the random relabelling applied before distribution (0: none). When set,
  /// block coordinates are labels; original_index() maps a label back.
  std::uint64_t relabel_seed = 0;
  /// The grid scheme's cut modes dealt round-robin (distribute_dealt, --deal): index i of a
  /// mode cut into p chunks has label Relabel::cyclic(p, dims).forward(i), so chunk c holds
  /// the indices i = c mod p, in order; modes with one chunk keep their indices. Not with
  /// relabel_seed.
  bool deal = false;
  /// Mode `mode`'s relabelling: the deal, the random bijection of relabel_seed, or the
  /// identity.
  Relabel relabelling(int mode) const;
  /// Original index of label `i` of mode `mode` (identity without relabelling).
  std::uint64_t original_index(int mode, std::uint64_t i) const;

  int order() const { return static_cast<int>(dims.size()); }
  /// Rank (in the communicator used to distribute) of grid coordinates c (row-major,
  /// mode 0 slowest).
  int rank_of(const std::vector<int>& c) const;
  /// Grid coordinates of rank r (inverse of rank_of).
  std::vector<int> coords_of(int r) const;
  /// This rank's chunk of mode n: [first, second). Whole mode for the nnz scheme.
  std::pair<std::uint64_t, std::uint64_t> chunk(int mode) const;
  /// Number of ranks sharing this rank's mode-n chunk (the mode-n "layer"): nranks/grid[n].
  int layer_size(int mode) const;
  /// Position of this rank in its mode-n layer when the layer's ranks are ordered by
  /// their rank (i.e. comm.split(coords[n], rank).rank()).
  int layer_rank(int mode) const;
  /// Factor rows of mode n this rank owns (solves) inside its layer: the chunk cut into
  /// layer_size() pieces of ceil(len / layer_size) rows, piece layer_rank(); may be empty.
  std::pair<std::uint64_t, std::uint64_t> owned_rows(int mode) const;
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

/// Collective over `c` (a host communicator): routes each rank's nonzeros (global
/// coordinates, dims = global dims on every rank) to their owners with one alltoallv per
/// array, sorts them and sums repeated coordinates (counted in dist.duplicates; sums are
/// accumulated in double, sums that cancel to 0 are kept as explicit zeros).
/// `grid` empty = choose_grid (grid scheme); ignored by the nnz scheme.
/// Works for ranks > nnz (some blocks are empty) and for empty input.
/// Errors (bad coordinates or shapes on any rank) are thrown on every rank
/// (CollectiveError or InputError), so no rank hangs.
template <typename T>
Distributed<T> distribute(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                          const comm::Communicator& c);

/// The relabelling key of --relabel (tessera cp, tucker, bench). Results do not depend on
/// it: initial factors are keyed by original rows and models are written in original indices.
inline constexpr std::uint64_t kRelabelSeed = 0x7E55E2A5EEDull;

/// The grid partition of the synthetic tensor `spec` with ids [0, nnz) (tensor/synthetic.hpp,
/// repeats not merged) over `nranks` ranks, made without its nonzeros, as rank `rank` sees
/// it: `grid` (empty: choose_grid) checked as distribute() checks it; mode n cut into grid[n]
/// chunks of about equal EXPECTED nonzeros (synthetic::index_mass of each label's original
/// index; cut k where the expected prefix is closest to k / grid[n] of the whole, then pushed
/// to keep every chunk non-empty, as detail::balanced_cuts places them on counts); labels
/// relabelled by `relabel_seed` (0: none), or with `deal` dealt round-robin over the chunks,
/// which are then the residue classes (equal rows, ceil first; see Distribution::deal).
/// global_nnz = nnz, duplicates 0; the block counts
/// (min/max/imbalance) and touched rows are left 0 for the caller, who knows the blocks after
/// generating them (window_of). Throws InputError on a bad grid.
Distribution synthetic_distribution(const synthetic::Spec& spec, nnz_t nnz, std::vector<int> grid,
                                    int rank, int nranks, std::uint64_t relabel_seed,
                                    bool deal = false);
/// The window of rank d.rank's block (d from synthetic_distribution): its chunks, and the
/// relabelling when d.relabel_seed is set. Backend::prepare_synthetic with it over every id
/// gives that rank's block of the grid partition, coordinates shifted to its chunks.
synthetic::Window window_of(const synthetic::Spec& spec, const Distribution& d);

/// The chunks of a mode cut into `parts` by the deal: chunk c is [b[c], b[c + 1]) with
/// ceil(n / parts) labels for the first n mod parts chunks, floor after.
std::vector<std::uint64_t> dealt_bounds(int parts, std::uint64_t n);

/// distribute() with the grid scheme, the cut modes' indices dealt round-robin over their
/// chunks first (Distribution::deal): every chunk holds the same number of rows (to one), a
/// power-law head is spread over the chunks, and each chunk keeps its rows in their order
/// (neighbouring heavy rows stay together). Measured against the nonzero-balanced cut and a
/// random relabelling: docs/multi-gpu.md, "Dealt grids".
template <typename T>
Distributed<T> distribute_dealt(SparseTensor<T>&& local, std::vector<int> grid,
                                const comm::Communicator& c);

/// As distribute(), after relabelling every mode's indices by a random bijection keyed by
/// `seed` (not 0), which breaks up runs of heavy slices so grid chunks balance better.
/// dist.original_index() undoes it.
template <typename T>
Distributed<T> distribute_relabelled(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                                     const comm::Communicator& c, std::uint64_t seed);

}  // namespace tessera::partition
