// The grid partition of a synthetic tensor made without its nonzeros (partition.hpp:
// synthetic_distribution, window_of) and the dealt chunks (dealt_bounds): each rank then
// generates only its block (tensor/synthetic.hpp, Backend::prepare_synthetic with a window).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "partition/detail.hpp"
#include "partition/partition.hpp"
#include "util/error.hpp"
#include "util/relabel.hpp"

namespace tessera::partition {

std::vector<std::uint64_t> dealt_bounds(int parts, std::uint64_t n) {
  const auto p = static_cast<std::uint64_t>(std::max(parts, 1));
  const std::uint64_t q = n / p, r = n % p;
  std::vector<std::uint64_t> b(static_cast<size_t>(p) + 1);
  for (std::uint64_t c = 0; c <= p; ++c) b[static_cast<size_t>(c)] = c * q + std::min(c, r);
  return b;
}

Distribution synthetic_distribution(const synthetic::Spec& spec, nnz_t nnz, std::vector<int> grid,
                                    int rank, int nranks, std::uint64_t relabel_seed, bool deal) {
  TESSERA_INPUT_CHECK(!(deal && relabel_seed != 0),
                      "--deal and --relabel are two relabellings: give one");
  const int N = spec.order;
  Distribution d;
  d.scheme = Scheme::grid;
  d.nranks = nranks;
  d.rank = rank;
  d.dims.assign(spec.dims, spec.dims + N);
  if (grid.empty())
    grid = choose_grid(d.dims, nranks);
  else
    detail::check_grid_shape(grid, d.dims, nranks);
  d.grid = grid;
  d.coords = d.coords_of(rank);
  d.relabel_seed = relabel_seed;
  d.deal = deal;
  d.global_nnz = nnz;
  d.bounds.resize(static_cast<size_t>(N));
  for (int m = 0; m < N; ++m) {
    const std::uint64_t I = d.dims[static_cast<size_t>(m)];
    const int parts = grid[static_cast<size_t>(m)];
    auto& b = d.bounds[static_cast<size_t>(m)];
    if (deal || parts == 1) {  // dealt: each chunk is one residue class, in order
      b = dealt_bounds(parts, I);
      continue;
    }
    // The expected mass of each label, then cut k at the label x whose prefix P(x) is
    // closest to k / parts (ties to the lower x), as balanced_cuts does on counts.
    b.assign(static_cast<size_t>(parts) + 1, 0);
    b.back() = I;
    std::vector<double> mass(static_cast<size_t>(I));
    const Relabel rl = d.relabelling(m);
#pragma omp parallel for schedule(static)
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(I); ++j)
      mass[static_cast<size_t>(j)] =
          synthetic::index_mass(spec, m, rl.inverse(static_cast<std::uint64_t>(j)));
    double total = 0;
    for (double v : mass) total += v;
    double prefix = 0;  // P(x): the mass of labels < x
    std::uint64_t x = 0;
    for (int k = 1; k < parts; ++k) {
      const double target = total * k / parts;
      while (x < I && prefix + mass[static_cast<size_t>(x)] <= target)
        prefix += mass[static_cast<std::size_t>(x++)];
      // prefix <= target < prefix + mass[x]: x or x + 1, whichever prefix is closer.
      std::uint64_t cut = x;
      if (x < I && (prefix + mass[static_cast<size_t>(x)]) - target < target - prefix) cut = x + 1;
      b[static_cast<size_t>(k)] = cut;
    }
    // Every chunk non-empty when the mode has that many labels.
    if (I < static_cast<std::uint64_t>(parts)) continue;
    for (int k = 1; k < parts; ++k)
      b[static_cast<size_t>(k)] =
          std::max(b[static_cast<size_t>(k)], b[static_cast<size_t>(k) - 1] + 1);
    for (int k = parts - 1; k >= 1; --k)
      b[static_cast<size_t>(k)] =
          std::min(b[static_cast<size_t>(k)], b[static_cast<size_t>(k) + 1] - 1);
  }
  return d;
}

synthetic::Window window_of(const synthetic::Spec& spec, const Distribution& d) {
  synthetic::Window w;
  w.relabelled = d.relabel_seed != 0 || d.deal;
  for (int m = 0; m < spec.order; ++m) {
    const auto [lo, hi] = d.chunk(m);
    w.lo[m] = lo;
    w.hi[m] = hi;
    w.relabel[m] = d.relabelling(m);
  }
  return w;
}

}  // namespace tessera::partition
