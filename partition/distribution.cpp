// Distribution's queries (partition.hpp): grid coordinates, chunks, layers, the rows a rank
// owns, the relabelling of each mode and the startup summary.
#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "partition/detail.hpp"
#include "partition/partition.hpp"
#include "util/relabel.hpp"

namespace tessera::partition {

std::string detail::join_grid(const std::vector<int>& g) {
  std::ostringstream os;
  for (size_t i = 0; i < g.size(); ++i) os << (i ? "x" : "") << g[i];
  return os.str();
}

// ---- Distribution -----------------------------------------------------------------------

int Distribution::rank_of(const std::vector<int>& c) const {
  TESSERA_EXPECTS(c.size() == grid.size(), "grid coordinates need " << grid.size() << " entries");
  int r = 0;
  for (size_t n = 0; n < grid.size(); ++n) {
    TESSERA_EXPECTS(c[n] >= 0 && c[n] < grid[n], "grid coordinate " << c[n] << " of mode " << n
                                                                    << " outside 0.."
                                                                    << grid[n] - 1);
    r = r * grid[n] + c[n];
  }
  return r;
}

std::vector<int> Distribution::coords_of(int r) const {
  TESSERA_EXPECTS(r >= 0 && r < nranks, "rank " << r << " outside 0.." << nranks - 1);
  std::vector<int> c(grid.size(), 0);
  if (scheme != Scheme::grid) return c;
  for (size_t n = grid.size(); n-- > 0;) {
    c[n] = r % grid[n];
    r /= grid[n];
  }
  return c;
}

std::pair<uint64_t, uint64_t> Distribution::chunk(int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(), "mode " << mode << " outside 0.." << order() - 1);
  const auto& b = bounds[static_cast<size_t>(mode)];
  const auto c = static_cast<size_t>(coords[static_cast<size_t>(mode)]);
  return {b[c], b[c + 1]};
}

int Distribution::layer_size(int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(), "mode " << mode << " outside 0.." << order() - 1);
  return nranks / grid[static_cast<size_t>(mode)];
}

int Distribution::layer_rank(int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(), "mode " << mode << " outside 0.." << order() - 1);
  if (scheme != Scheme::grid) return rank;
  int r = 0;
  for (int n = 0; n < order(); ++n)
    if (n != mode) r = r * grid[static_cast<size_t>(n)] + coords[static_cast<size_t>(n)];
  return r;
}

Relabel Distribution::relabelling(int mode) const {
  const std::uint64_t n = dims[static_cast<size_t>(mode)];
  if (deal) {
    const int parts = grid.empty() ? 1 : grid[static_cast<size_t>(mode)];
    return parts > 1 ? Relabel::cyclic(static_cast<std::uint64_t>(parts), n) : Relabel();
  }
  return relabel_seed != 0 ? Relabel(relabel_seed, mode, n) : Relabel();
}

std::uint64_t Distribution::original_index(int mode, std::uint64_t i) const {
  if (relabel_seed == 0 && !deal) return i;
  return relabelling(mode).inverse(i);
}

std::pair<uint64_t, uint64_t> Distribution::owned_rows(int mode) const {
  const auto [lo, hi] = chunk(mode);
  const uint64_t len = hi - lo;
  const auto q = static_cast<uint64_t>(layer_size(mode));
  const auto i = static_cast<uint64_t>(layer_rank(mode));
  const uint64_t b = (len + q - 1) / q;
  return {lo + std::min(len, b * i), lo + std::min(len, b * (i + 1))};
}

std::string Distribution::describe() const {
  std::ostringstream os;
  os << "partition: " << to_string(scheme);
  if (scheme == Scheme::grid) os << " " << detail::join_grid(grid);
  os << " on " << nranks << (nranks == 1 ? " rank" : " ranks") << ", dims " << format_dims(dims)
     << "\n";
  const double mean = static_cast<double>(global_nnz) / std::max(nranks, 1);
  os << "  nonzeros per block: min " << min_block_nnz << ", mean " << std::fixed
     << std::setprecision(1) << mean << ", max " << max_block_nnz << " (imbalance "
     << std::setprecision(3) << imbalance << "), " << global_nnz << " in all\n";
  os << "  duplicates summed: " << duplicates << "\n";
  if (deal) os << "  indices of the cut modes dealt round-robin over their chunks (--deal)\n";
  if (relabel_seed != 0) os << "  indices relabelled by a random bijection (--relabel)\n";
  if (touched_rows_per_mode.empty() && global_nnz > 0) {
    os << "  factor rows touched: not counted (the blocks were generated in place)\n";
  } else {
    os << "  factor rows touched: " << touched_rows;
  }
  if (!touched_rows_per_mode.empty()) {
    os << " (";
    for (size_t n = 0; n < touched_rows_per_mode.size(); ++n)
      os << (n ? ", " : "") << "mode " << n << ": " << touched_rows_per_mode[n];
    os << ")";
  }
  if (!touched_rows_per_mode.empty() || global_nnz == 0) os << "\n";
  if (scheme == Scheme::grid) {
    os << "  chunk lengths:";
    for (size_t n = 0; n < bounds.size(); ++n) {
      uint64_t lo = UINT64_MAX, hi = 0;
      for (size_t c = 0; c + 1 < bounds[n].size(); ++c) {
        lo = std::min(lo, bounds[n][c + 1] - bounds[n][c]);
        hi = std::max(hi, bounds[n][c + 1] - bounds[n][c]);
      }
      os << (n ? ", " : " ") << "mode " << n << ": " << grid[n] << " x " << lo;
      if (hi != lo) os << ".." << hi;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace tessera::partition
