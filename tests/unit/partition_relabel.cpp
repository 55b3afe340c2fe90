// The random relabelling is a bijection of [0, n) for every n, with a working inverse,
// and it actually moves indices (not the identity). The grid partition of a synthetic
// tensor made without its nonzeros (partition::synthetic_distribution, window_of): the
// ranks' windows hold every id exactly once, and the chunks are balanced by expected mass.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "partition/partition.hpp"
#include "tensor/synthetic.hpp"
#include "util/error.hpp"
#include "util/relabel.hpp"

namespace tessera::partition {
namespace {

TEST(Relabel, BijectionWithInverseForManySizes) {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 16ull, 34ull, 1000ull, 1718ull, 65537ull}) {
    for (int mode : {0, 3}) {
      const Relabel rl(42, mode, n);
      std::vector<char> hit(n, 0);
      std::uint64_t moved = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t j = rl.forward(i);
        ASSERT_LT(j, n) << "n=" << n;
        ASSERT_EQ(hit[j], 0) << "n=" << n << ": two indices map to " << j;
        hit[j] = 1;
        ASSERT_EQ(rl.inverse(j), i) << "n=" << n;
        moved += j != i;
      }
      if (n >= 16) {
        EXPECT_GT(moved, n / 2) << "n=" << n;
      }
    }
  }
}

TEST(Relabel, LargeDomainRoundTrip) {
  const std::uint64_t n = 4294967295ull;  // largest mode length of a valid file
  const Relabel rl(7, 1, n);
  for (std::uint64_t i : std::vector<std::uint64_t>{0, 1, 12345, n / 2, n - 2, n - 1}) {
    const std::uint64_t j = rl.forward(i);
    EXPECT_LT(j, n);
    EXPECT_EQ(rl.inverse(j), i);
  }
}

TEST(Relabel, KeyedByModeAndSeed) {
  const Relabel a(1, 0, 1000), b(1, 1, 1000), c(2, 0, 1000);
  int same_ab = 0, same_ac = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same_ab += a.forward(i) == b.forward(i);
    same_ac += a.forward(i) == c.forward(i);
  }
  EXPECT_LT(same_ab, 50);
  EXPECT_LT(same_ac, 50);
}

// The deal over p chunks: a bijection, chunk c (dealt_bounds) holds the indices i = c mod p
// in increasing order, for n below, equal to and above p.
TEST(Relabel, CyclicDealKeepsOrderInsideChunks) {
  for (std::uint64_t p : {1u, 2u, 3u, 7u})
    for (std::uint64_t n : {1u, 2u, 5u, 6u, 7u, 100u, 1001u}) {
      const Relabel rl = Relabel::cyclic(p, n);
      const auto b = dealt_bounds(static_cast<int>(p), n);
      ASSERT_EQ(b.size(), p + 1);
      EXPECT_EQ(b.back(), n);
      std::vector<char> seen(n, 0);
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t j = rl.forward(i);
        ASSERT_LT(j, n) << p << " " << n;
        EXPECT_FALSE(seen[j]);
        seen[j] = 1;
        EXPECT_EQ(rl.inverse(j), i);
        const std::uint64_t c = i % p;
        EXPECT_GE(j, b[c]) << "p " << p << " n " << n << " i " << i;
        EXPECT_LT(j, b[c + 1]) << "p " << p << " n " << n << " i " << i;
        if (i >= p) {  // in order inside the chunk
          EXPECT_EQ(rl.forward(i - p) + 1, j);
        }
      }
      for (std::uint64_t c = 0; c < p; ++c) EXPECT_LE(b[c + 1] - b[c], (n + p - 1) / p);
    }
}

synthetic::Spec skewed(double alpha) {
  synthetic::Spec s;
  s.order = 3;
  s.dims[0] = 5000;
  s.dims[1] = 7;
  s.dims[2] = 300;
  s.powerlaw = alpha > 0;
  s.alpha = alpha;
  s.seed = 3;
  return s;
}

TEST(SyntheticDistribution, IndexMassIsTheDrawsLaw) {
  for (double alpha : {0.0, 0.6, 1.0, 2.0}) {
    const auto s = skewed(alpha);
    double total = 0;
    for (std::uint64_t i = 0; i < s.dims[2]; ++i) total += synthetic::index_mass(s, 2, i);
    EXPECT_NEAR(total, 1.0, 1e-12) << "alpha " << alpha;
    EXPECT_EQ(synthetic::index_mass(s, 2, s.dims[2]), 0.0);
    // Against the draws of 200000 ids: each of the first indices within 5 standard errors.
    const int n = 200000;
    std::vector<double> hits(s.dims[2], 0);
    for (std::uint64_t id = 0; id < n; ++id) ++hits[synthetic::coordinate(s, id, 2)];
    for (std::uint64_t i : {0, 1, 2, 10, 299}) {
      const double p = synthetic::index_mass(s, 2, i);
      EXPECT_NEAR(hits[i] / n, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9)
          << "alpha " << alpha << " index " << i;
    }
  }
}

// Every id lies in exactly one rank's window, and each cut mode's chunks carry about equal
// expected mass (within the heaviest label's mass of the even share: a cut falls between
// labels), with and without relabelling; on the power law the relabelled grid spreads the
// heavy indices so its blocks' counts are far closer.
TEST(SyntheticDistribution, WindowsCoverEveryIdOnceAndBalance) {
  const auto s = skewed(1.0);
  const std::uint64_t nnz = 60000;
  for (const std::vector<int>& grid : {std::vector<int>{2, 1, 1}, {3, 1, 2}, {1, 7, 1}, {4, 2, 1}})
    for (std::uint64_t seed : {std::uint64_t(0), kRelabelSeed, std::uint64_t(1)}) {
      const bool deal = seed == 1;  // 1 stands for --deal here
      if (deal) seed = 0;
      int P = 1;
      for (int g : grid) P *= g;
      std::ostringstream os;
      os << "grid";
      for (int g : grid) os << ' ' << g;
      os << (deal ? " dealt" : seed ? " relabelled" : " plain");
      const std::string what = os.str();
      std::vector<synthetic::Window> w;
      for (int r = 0; r < P; ++r) {
        const auto d = synthetic_distribution(s, static_cast<nnz_t>(nnz), grid, r, P, seed, deal);
        EXPECT_EQ(d.deal, deal) << what;
        ASSERT_EQ(d.grid, grid) << what;
        EXPECT_EQ(d.rank_of(d.coords), r) << what;
        EXPECT_EQ(d.relabel_seed, seed) << what;
        EXPECT_EQ(d.global_nnz, static_cast<nnz_t>(nnz)) << what;
        for (int m = 0; m < 3; ++m) {
          const auto& b = d.bounds[static_cast<std::size_t>(m)];
          ASSERT_EQ(b.size(), static_cast<std::size_t>(grid[static_cast<std::size_t>(m)]) + 1);
          EXPECT_EQ(b.front(), 0u);
          EXPECT_EQ(b.back(), s.dims[m]);
          for (std::size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k - 1], b[k]) << what;
          if (deal) {  // dealt: equal rows (to one), not equal mass
            EXPECT_EQ(b, dealt_bounds(grid[static_cast<std::size_t>(m)], s.dims[m])) << what;
            continue;
          }
          // Each chunk's expected mass within the heaviest label's of 1 / parts.
          const Relabel rl = d.relabelling(m);
          double heaviest = 0;
          std::vector<double> chunk(b.size() - 1, 0);
          for (std::uint64_t label = 0; label < s.dims[m]; ++label) {
            const double p = synthetic::index_mass(s, m, seed ? rl.inverse(label) : label);
            heaviest = std::max(heaviest, p);
            std::size_t c = 0;
            while (label >= b[c + 1]) ++c;
            chunk[c] += p;
          }
          for (double c : chunk)
            EXPECT_LE(std::abs(c - 1.0 / static_cast<double>(chunk.size())), heaviest + 1e-12)
                << what << " mode " << m;
        }
        w.push_back(window_of(s, d));
      }
      std::vector<std::int64_t> per_rank(static_cast<std::size_t>(P), 0);
      for (std::uint64_t id = 0; id < nnz; ++id) {
        int holders = 0;
        for (int r = 0; r < P; ++r) {
          index_t local[kMaxOrder];
          double v = 0;
          if (synthetic::in_window(s, w[static_cast<std::size_t>(r)], id, local, &v)) {
            ++holders;
            ++per_rank[static_cast<std::size_t>(r)];
            for (int m = 0; m < 3; ++m)
              ASSERT_LT(local[m], w[static_cast<std::size_t>(r)].hi[m] -
                                      w[static_cast<std::size_t>(r)].lo[m]);
          }
        }
        ASSERT_EQ(holders, 1) << what << " id " << id;
      }
      if (grid == std::vector<int>{2, 1, 1}) {
        // Mode 0 (5000 indices, alpha 1) cut in two: both halves near nnz / 2 (dealt: the
        // even indices carry about ln 2 / H(5000) = 8% more than the odd ones).
        for (auto c : per_rank)
          EXPECT_NEAR(static_cast<double>(c), nnz / 2.0, (deal ? 0.03 : 0.02) * nnz) << what;
      }
    }
  // Bad grids are refused as distribute refuses them.
  EXPECT_THROW(synthetic_distribution(s, 10, {2, 2, 1}, 0, 2, 0), InputError);
  EXPECT_THROW(synthetic_distribution(s, 10, {2, 1}, 0, 2, 0), InputError);
  EXPECT_THROW(synthetic_distribution(s, 10, {2, 1, 1}, 0, 2, kRelabelSeed, true), InputError);
}

}  // namespace
}  // namespace tessera::partition
