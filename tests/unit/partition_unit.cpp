// Single-process tests of the partition helpers: grid shapes, parsing, the local sort +
// merge, distinct counting and the Distribution's ownership helpers.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "partition/detail.hpp"
#include "partition/partition.hpp"
#include "util/rng.hpp"

namespace tessera::partition {
namespace {

std::uint64_t cost(const std::vector<std::uint64_t>& dims, const std::vector<int>& g) {
  std::uint64_t s = 0;
  for (std::size_t n = 0; n < dims.size(); ++n) s += (dims[n] + g[n] - 1) / g[n];
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

// Whether some grid with product p has p_n <= dims[n] for modes n >= from.
bool fits_somehow(const std::vector<std::uint64_t>& dims, std::size_t from, int p) {
  if (from == dims.size()) return p == 1;
  for (int f = 1; f <= p; ++f)
    if (p % f == 0 && static_cast<std::uint64_t>(f) <= dims[from] &&
        fits_somehow(dims, from + 1, p / f))
      return true;
  return false;
}

TEST(PartitionChooseGrid, ProductIsRankCountAndFitsDims) {
  const std::vector<std::vector<std::uint64_t>> shapes = {
      {1000, 10, 10}, {12092, 9184, 28818}, {5, 5, 5, 5}, {3, 7}, {100000, 2, 2, 2, 50}};
  for (const auto& dims : shapes) {
    for (int p = 1; p <= 64; ++p) {
      const auto g = choose_grid(dims, p);
      ASSERT_EQ(g.size(), dims.size());
      const long long prod = std::accumulate(g.begin(), g.end(), 1LL, std::multiplies<>());
      EXPECT_EQ(prod, p) << format_dims(dims) << " P=" << p;
      if (!fits_somehow(dims, 0, p)) continue;
      for (std::size_t n = 0; n < dims.size(); ++n)
        EXPECT_LE(static_cast<std::uint64_t>(g[n]), dims[n]) << format_dims(dims) << " P=" << p;
    }
  }
}

TEST(PartitionChooseGrid, CutsLongModes) {
  EXPECT_EQ(choose_grid({1000, 10, 10}, 4), (std::vector<int>{4, 1, 1}));
  EXPECT_EQ(choose_grid({10, 1000, 10}, 8), (std::vector<int>{1, 8, 1}));
  EXPECT_EQ(choose_grid({1000, 1000, 10}, 4), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(choose_grid({1000, 10, 10}, 1), (std::vector<int>{1, 1, 1}));
  // 3 cannot go to a mode of length 2: it goes to the long mode, and so does the 2.
  EXPECT_EQ(choose_grid({2, 300}, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(choose_grid({2, 300}, 6), (std::vector<int>{1, 6}));
  // A prime larger than every mode still lands somewhere (empty chunks are unavoidable).
  const auto g = choose_grid({3, 4}, 7);
  EXPECT_EQ(g[0] * g[1], 7);
}

TEST(PartitionChooseGrid, NoWorseThanOneDimensionalCuts) {
  // The greedy result costs no more factor rows than putting all ranks on any one mode
  // that can take them.
  const std::vector<std::vector<std::uint64_t>> shapes = {
      {1000, 1000, 1000}, {12092, 9184, 28818}, {480189, 17770, 2182}, {64, 64, 64, 64}};
  for (const auto& dims : shapes)
    for (int p : {2, 4, 6, 8, 12, 16, 30, 64}) {
      const auto g = choose_grid(dims, p);
      for (std::size_t n = 0; n < dims.size(); ++n) {
        if (dims[n] < static_cast<std::uint64_t>(p)) continue;
        std::vector<int> one(dims.size(), 1);
        one[n] = p;
        EXPECT_LE(cost(dims, g), cost(dims, one)) << format_dims(dims) << " P=" << p;
      }
    }
}

TEST(PartitionParseGrid, AcceptsValidShapes) {
  EXPECT_EQ(parse_grid("4x2x1", 3, 8), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(parse_grid("2,3", 2, 6), (std::vector<int>{2, 3}));
  EXPECT_EQ(parse_grid("1", 1, 1), (std::vector<int>{1}));
}

TEST(PartitionParseGrid, RejectsWithClearMessages) {
  EXPECT_EQ(message_of([] { parse_grid("4x2", 3, 8); }),
            "grid 4x2 has 2 entries but the tensor has 3 modes");
  EXPECT_EQ(message_of([] { parse_grid("3x2x1", 3, 4); }),
            "grid 3x2x1 multiplies to 6 but 4 ranks are running");
  EXPECT_EQ(message_of([] { parse_grid("2x1", 2, 1); }),
            "grid 2x1 multiplies to 2 but 1 rank is running");
  EXPECT_THROW(parse_grid("4xax1", 3, 4), InputError);
  EXPECT_THROW(parse_grid("0x4", 2, 4), InputError);
  EXPECT_THROW(parse_grid("", 1, 1), InputError);
  EXPECT_THROW(parse_grid("65536x65536x65536", 3, 4), InputError);
}

TEST(PartitionScheme, ParseAndPrint) {
  EXPECT_EQ(parse_scheme("grid"), Scheme::grid);
  EXPECT_EQ(parse_scheme("nnz"), Scheme::nnz);
  EXPECT_EQ(to_string(Scheme::grid), "grid");
  EXPECT_EQ(to_string(Scheme::nnz), "nnz");
  EXPECT_NE(message_of([] { parse_scheme("hash"); }).find("expected nnz or grid"),
            std::string::npos);
}

// Random tensor with many repeated coordinates; values are small dyadic numbers so every
// sum is exact in float and double whatever the order.
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, std::size_t n,
                              std::uint64_t seed) {
  SparseTensor<T> t(dims);
  CounterRng rng(seed, 1);
  std::vector<index_t> c(dims.size());
  for (std::size_t k = 0; k < n; ++k) {
    const bool repeat = k > 0 && rng.uniform() < 0.3;
    if (repeat) {
      const std::size_t j = rng.next_u64() % k;
      for (std::size_t m = 0; m < dims.size(); ++m) c[m] = t.idx[m][j];
    } else {
      for (std::size_t m = 0; m < dims.size(); ++m)
        c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    }
    t.push_back(c.data(), static_cast<T>(static_cast<double>(1 + rng.next_u64() % 255) / 16.0));
  }
  return t;
}

template <typename T>
void check_sort_and_merge(const std::vector<std::uint64_t>& dims, std::size_t n) {
  auto t = random_tensor<T>(dims, n, 42 + dims.size());
  std::map<std::vector<index_t>, double> ref;
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<index_t> c;
    for (const auto& col : t.idx) c.push_back(col[k]);
    ref[c] += static_cast<double>(t.vals[k]);
  }
  const nnz_t merged = detail::sort_and_merge(t);
  EXPECT_EQ(merged, static_cast<nnz_t>(n - ref.size()));
  ASSERT_EQ(t.vals.size(), ref.size());
  std::size_t k = 0;
  for (const auto& [c, v] : ref) {
    for (std::size_t m = 0; m < dims.size(); ++m) ASSERT_EQ(t.idx[m][k], c[m]) << "entry " << k;
    EXPECT_EQ(static_cast<double>(t.vals[k]), v) << "entry " << k;
    ++k;
  }
}

TEST(PartitionSortAndMerge, Packed64) {
  check_sort_and_merge<double>({50, 40, 30}, 20000);  // natural collisions too
  check_sort_and_merge<float>({1000, 70000, 50, 3000}, 5000);
}

TEST(PartitionSortAndMerge, Packed128) {
  check_sort_and_merge<double>({100000, 300000, 5000, 2000000}, 5000);  // 70 bits
  check_sort_and_merge<float>({1u << 30, 1u << 30, 1u << 30}, 5000);    // 90 bits
}

TEST(PartitionSortAndMerge, TupleComparator) {
  check_sort_and_merge<double>(
      {4294967295ull, 4000000000ull, 3000000000ull, 123456789, 4294967295ull},
      5000);  // > 128 bits
  check_sort_and_merge<float>(
      {4294967295ull, 4294967295ull, 4294967295ull, 4294967295ull, 4294967295ull, 4294967295ull},
      3000);
}

TEST(PartitionSortAndMerge, TinyInputs) {
  SparseTensor<double> t({5, 5});
  EXPECT_EQ(detail::sort_and_merge(t), 0);
  const index_t a[2] = {3, 1};
  t.push_back(a, 2.0);
  EXPECT_EQ(detail::sort_and_merge(t), 0);
  t.push_back(a, 0.5);
  EXPECT_EQ(detail::sort_and_merge(t), 1);
  ASSERT_EQ(t.nnz(), 1);
  EXPECT_EQ(t.vals[0], 2.5);
  EXPECT_EQ(t.idx[0][0], 3u);
  EXPECT_EQ(t.idx[1][0], 1u);
}

TEST(PartitionCountDistinct, MatchesSet) {
  CounterRng rng(7, 7);
  for (std::uint64_t range : {1ull, 10ull, 1000ull, 1ull << 31}) {
    for (std::size_t n : {0, 1, 5, 1000}) {
      std::vector<index_t> v(n);
      for (auto& x : v) x = static_cast<index_t>(17 + rng.next_u64() % range);
      const std::set<index_t> s(v.begin(), v.end());
      EXPECT_EQ(detail::count_distinct(v.data(), n), s.size()) << "range " << range << " n " << n;
    }
  }
}

TEST(PartitionDistribution, CoordsAndOwnedRows) {
  Distribution d;
  d.scheme = Scheme::grid;
  d.nranks = 12;
  d.dims = {10, 7, 100};
  d.grid = {3, 2, 2};
  d.bounds = {{0, 3, 6, 10}, {0, 2, 7}, {0, 50, 100}};
  for (int r = 0; r < d.nranks; ++r) {
    const auto c = d.coords_of(r);
    EXPECT_EQ(d.rank_of(c), r);
  }
  EXPECT_EQ(d.coords_of(7), (std::vector<int>{1, 1, 1}));  // 7 = (1*2 + 1)*2 + 1
  // Owned rows of each mode partition the mode across all ranks: every row once per layer
  // set, i.e. exactly once overall among the ranks sharing the row's chunk.
  for (int n = 0; n < 3; ++n) {
    std::vector<int> owners(d.dims[static_cast<std::size_t>(n)], 0);
    for (int r = 0; r < d.nranks; ++r) {
      d.rank = r;
      d.coords = d.coords_of(r);
      EXPECT_EQ(d.layer_size(n), d.nranks / d.grid[static_cast<std::size_t>(n)]);
      const auto [clo, chi] = d.chunk(n);
      const auto [lo, hi] = d.owned_rows(n);
      EXPECT_LE(clo, lo);
      EXPECT_LE(lo, hi);
      EXPECT_LE(hi, chi);
      for (auto i = lo; i < hi; ++i) ++owners[i];
    }
    for (std::size_t i = 0; i < owners.size(); ++i)
      EXPECT_EQ(owners[i], 1) << "mode " << n << " row " << i;
  }
  // Layer ranks of one layer are 0..layer_size-1 in rank order.
  for (int n = 0; n < 3; ++n) {
    std::map<int, std::vector<int>> layers;
    for (int r = 0; r < d.nranks; ++r) {
      d.rank = r;
      d.coords = d.coords_of(r);
      layers[d.coords[static_cast<std::size_t>(n)]].push_back(d.layer_rank(n));
    }
    for (const auto& [c, lr] : layers) {
      std::vector<int> expect(lr.size());
      std::iota(expect.begin(), expect.end(), 0);
      EXPECT_EQ(lr, expect) << "mode " << n << " chunk " << c;
    }
  }
}

}  // namespace
}  // namespace tessera::partition
