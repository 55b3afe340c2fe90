// MPI tests of partition::distribute (both schemes) and of the balanced cuts, run on
// 1..5 ranks. The input is generated from a global entry id, so the global tensor does not
// depend on the rank count; entries land on random ranks and repeat coordinates across
// ranks. Checks run on every rank for the local block and on rank 0 for the union.
//
// Gtest assertions that end a test early are used only where no collective follows.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "partition/detail.hpp"
#include "partition/partition.hpp"
#include "util/rng.hpp"

namespace tessera::partition {
namespace {

using comm::Communicator;
using Coord = std::vector<index_t>;

const comm::MpiCommunicator& world() {
  static const comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

enum class Placement { spread, first_rank, last_rank };

struct InputSpec {
  std::vector<std::uint64_t> dims;
  std::uint64_t entries = 0;  ///< global number of input nonzeros (before merging)
  double repeat = 0.2;        ///< share of entries that reuse an earlier coordinate
  Placement where = Placement::spread;
  bool skewed = false;  ///< power-law indices instead of uniform
  std::uint64_t seed = 1;
};

Coord coord_of_key(const InputSpec& s, std::uint64_t key) {
  Coord c(s.dims.size());
  for (std::size_t m = 0; m < s.dims.size(); ++m) {
    const double u = uniform01(hash_keys(s.seed, 10 + m, key));
    const double x = s.skewed ? u * u * u * u : u;  // skewed: mass near index 0
    c[m] = static_cast<index_t>(
        std::min<double>(x * static_cast<double>(s.dims[m]), static_cast<double>(s.dims[m] - 1)));
  }
  return c;
}

// This rank's share of the global input. Values are small dyadic numbers, so every sum of
// repeats is exact in float and double, in any order.
template <typename T>
SparseTensor<T> make_input(const InputSpec& s, const Communicator& c) {
  SparseTensor<T> t(s.dims);
  const int P = c.size();
  for (std::uint64_t e = 0; e < s.entries; ++e) {
    int owner = 0;
    switch (s.where) {
      case Placement::spread:
        owner = static_cast<int>(hash_keys(s.seed, 1, e) % static_cast<std::uint64_t>(P));
        break;
      case Placement::first_rank:
        owner = 0;
        break;
      case Placement::last_rank:
        owner = P - 1;
        break;
    }
    if (owner != c.rank()) continue;
    std::uint64_t key = e;
    if (e > 0 && uniform01(hash_keys(s.seed, 2, e)) < s.repeat) key = hash_keys(s.seed, 3, e) % e;
    const Coord co = coord_of_key(s, key);
    const double v = static_cast<double>(1 + hash_keys(s.seed, 4, e) % 255) / 16.0;
    t.push_back(co.data(), static_cast<T>(v));
  }
  return t;
}

// Concatenation on rank 0 of every rank's v, in rank order (empty elsewhere).
template <typename U>
std::vector<U> gather0(const std::vector<U>& v, const Communicator& c) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(c.size()), 0);
  counts[0] = static_cast<std::int64_t>(v.size());
  return c.alltoallv(v, counts);
}

template <typename T>
struct Gathered {
  std::vector<std::vector<index_t>> idx;
  std::vector<T> vals;
  std::vector<std::int64_t> per_rank;  ///< nonzeros of each rank
};

template <typename T>
Gathered<T> gather_tensor(const SparseTensor<T>& t, const Communicator& c) {
  Gathered<T> g;
  for (const auto& col : t.idx) g.idx.push_back(gather0(col, c));
  g.vals = gather0(t.vals, c);
  g.per_rank.resize(static_cast<std::size_t>(c.size()));
  const std::int64_t mine = t.nnz();
  c.allgather(&mine, g.per_rank.data(), 1);
  return g;
}

template <typename T>
Coord coord_at(const Gathered<T>& g, std::size_t k) {
  Coord c;
  for (const auto& col : g.idx) c.push_back(col[k]);
  return c;
}

template <typename T>
bool strictly_sorted(const SparseTensor<T>& b) {
  for (std::size_t k = 1; k < b.vals.size(); ++k) {
    int cmp = 0;
    for (std::size_t m = 0; m < b.idx.size() && cmp == 0; ++m)
      cmp = b.idx[m][k - 1] < b.idx[m][k] ? -1 : (b.idx[m][k - 1] > b.idx[m][k] ? 1 : 0);
    if (cmp >= 0) return false;
  }
  return true;
}

// Checks on this rank's block and the Distribution (no collectives).
template <typename T>
void check_local(const Distributed<T>& out, const std::vector<std::uint64_t>& dims, Scheme scheme,
                 const Communicator& c) {
  const auto& b = out.block;
  const auto& d = out.dist;
  const int N = static_cast<int>(dims.size());
  EXPECT_EQ(b.dims, dims);
  ASSERT_EQ(b.idx.size(), dims.size());
  for (const auto& col : b.idx) ASSERT_EQ(col.size(), b.vals.size());
  EXPECT_TRUE(strictly_sorted(b)) << "block of rank " << c.rank() << " not sorted or has repeats";
  EXPECT_EQ(d.scheme, scheme);
  EXPECT_EQ(d.nranks, c.size());
  EXPECT_EQ(d.rank, c.rank());
  EXPECT_EQ(d.dims, dims);
  ASSERT_EQ(static_cast<int>(d.grid.size()), N);
  ASSERT_EQ(static_cast<int>(d.coords.size()), N);
  ASSERT_EQ(static_cast<int>(d.bounds.size()), N);
  long long prod = 1;
  for (int p : d.grid) prod *= p;
  if (scheme == Scheme::grid) {
    EXPECT_EQ(prod, c.size());
    EXPECT_EQ(d.rank_of(d.coords), c.rank());
    EXPECT_EQ(d.coords, d.coords_of(c.rank()));
  } else {
    EXPECT_EQ(prod, 1);
  }
  for (int n = 0; n < N; ++n) {
    const auto& bn = d.bounds[static_cast<std::size_t>(n)];
    const int p = d.grid[static_cast<std::size_t>(n)];
    ASSERT_EQ(static_cast<int>(bn.size()), p + 1) << "mode " << n;
    EXPECT_EQ(bn.front(), 0u);
    EXPECT_EQ(bn.back(), dims[static_cast<std::size_t>(n)]);
    for (int k = 0; k < p; ++k) {
      if (dims[static_cast<std::size_t>(n)] >= static_cast<std::uint64_t>(p))
        EXPECT_LT(bn[static_cast<std::size_t>(k)], bn[static_cast<std::size_t>(k) + 1])
            << "empty chunk " << k << " of mode " << n;
      else
        EXPECT_LE(bn[static_cast<std::size_t>(k)], bn[static_cast<std::size_t>(k) + 1]);
    }
    // Every nonzero lies in this rank's chunk of every mode.
    const auto [lo, hi] = d.chunk(n);
    const auto& col = b.idx[static_cast<std::size_t>(n)];
    std::size_t outside = 0;
    for (index_t v : col) outside += (v < lo || v >= hi) ? 1 : 0;
    EXPECT_EQ(outside, 0u) << "mode " << n << " chunk [" << lo << "," << hi << ") rank "
                           << c.rank();
  }
}

// Rank 0: the union of the blocks equals the sequentially merged input, and the statistics
// are exact.
template <typename T>
void check_union(const Gathered<T>& in, const Gathered<T>& outg, const Distribution& d,
                 Scheme scheme, int P) {
  std::map<Coord, double> ref;
  for (std::size_t k = 0; k < in.vals.size(); ++k)
    ref[coord_at(in, k)] += static_cast<double>(in.vals[k]);
  const std::size_t nin = in.vals.size();
  EXPECT_EQ(d.global_nnz, static_cast<nnz_t>(ref.size()));
  EXPECT_EQ(d.duplicates, static_cast<nnz_t>(nin - ref.size()));
  ASSERT_EQ(outg.vals.size(), ref.size());

  std::vector<std::size_t> order(outg.vals.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::vector<Coord> coords(outg.vals.size());
  for (std::size_t k = 0; k < coords.size(); ++k) coords[k] = coord_at(outg, k);
  if (scheme == Scheme::nnz) {
    // Contiguous ranges in rank order: the concatenation is already globally sorted.
    for (std::size_t k = 1; k < coords.size(); ++k)
      ASSERT_LT(coords[k - 1], coords[k]) << "nnz scheme: rank ranges overlap at " << k;
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return coords[a] < coords[b]; });
  std::size_t i = 0;
  for (const auto& [co, v] : ref) {
    const std::size_t k = order[i++];
    ASSERT_EQ(coords[k], co) << "entry " << i - 1 << " of the union";
    EXPECT_EQ(static_cast<double>(outg.vals[k]), v) << "entry " << i - 1 << " of the union";
  }

  // Block statistics from the gathered blocks.
  const auto [mn, mx] = std::minmax_element(outg.per_rank.begin(), outg.per_rank.end());
  EXPECT_EQ(d.min_block_nnz, *mn);
  EXPECT_EQ(d.max_block_nnz, *mx);
  if (ref.empty())
    EXPECT_EQ(d.imbalance, 1.0);
  else
    EXPECT_DOUBLE_EQ(d.imbalance, static_cast<double>(*mx) * P / static_cast<double>(ref.size()));
  std::vector<std::uint64_t> touched(outg.idx.size(), 0);
  std::size_t off = 0;
  for (int r = 0; r < P; ++r) {
    const auto cnt = static_cast<std::size_t>(outg.per_rank[static_cast<std::size_t>(r)]);
    for (std::size_t m = 0; m < outg.idx.size(); ++m) {
      const auto& col = outg.idx[m];
      touched[m] += std::set<index_t>(col.begin() + static_cast<std::ptrdiff_t>(off),
                                      col.begin() + static_cast<std::ptrdiff_t>(off + cnt))
                        .size();
    }
    off += cnt;
  }
  EXPECT_EQ(d.touched_rows_per_mode, touched);
  std::uint64_t total = 0;
  for (auto t : touched) total += t;
  EXPECT_EQ(d.touched_rows, total);
}

// Distributes the input of `s` and checks everything; returns the Distribution.
template <typename T>
Distribution run_and_check(const InputSpec& s, Scheme scheme, std::vector<int> grid = {},
                           const Communicator& c = world()) {
  SparseTensor<T> local = make_input<T>(s, c);
  const Gathered<T> in = gather_tensor(local, c);
  Distributed<T> out = distribute(std::move(local), scheme, grid, c);
  check_local(out, s.dims, scheme, c);
  const Gathered<T> outg = gather_tensor(out.block, c);
  if (!grid.empty() && scheme == Scheme::grid) {
    EXPECT_EQ(out.dist.grid, grid);
  }
  if (c.rank() == 0) check_union(in, outg, out.dist, scheme, c.size());
  return out.dist;
}

// ---- union equals the merged input, orders 3, 4, 5 ----------------------------------------

struct UnionCase {
  Scheme scheme;
  int order;
  Placement where;
};

std::vector<std::uint64_t> dims_for_order(int order) {
  switch (order) {
    case 3:
      return {40, 30, 20};  // many natural collisions; 64-bit keys
    case 4:
      return {100000, 300000, 5000, 2000000};  // 70 bits: 128-bit keys
    default:
      return {4294967295ull, 4000000000ull, 3000000000ull, 123456789, 4294967295ull};  // tuples
  }
}

class PartitionUnion : public ::testing::TestWithParam<UnionCase> {};

TEST_P(PartitionUnion, BlocksAreTheMergedInput) {
  const auto& p = GetParam();
  InputSpec s;
  s.dims = dims_for_order(p.order);
  s.entries = 6000;
  s.repeat = 0.25;
  s.where = p.where;
  s.seed = 100 + static_cast<std::uint64_t>(p.order);
  const Distribution dd = run_and_check<double>(s, p.scheme);
  EXPECT_GT(dd.duplicates, 0);
  s.seed += 1000;
  const Distribution df = run_and_check<float>(s, p.scheme);
  EXPECT_GT(df.duplicates, 0);
}

std::string union_name(const ::testing::TestParamInfo<UnionCase>& i) {
  const char* w = i.param.where == Placement::spread       ? "spread"
                  : i.param.where == Placement::first_rank ? "first"
                                                           : "last";
  return to_string(i.param.scheme) + "_order" + std::to_string(i.param.order) + "_" + w;
}

INSTANTIATE_TEST_SUITE_P(All, PartitionUnion,
                         ::testing::Values(UnionCase{Scheme::grid, 3, Placement::spread},
                                           UnionCase{Scheme::grid, 4, Placement::spread},
                                           UnionCase{Scheme::grid, 5, Placement::spread},
                                           UnionCase{Scheme::nnz, 3, Placement::spread},
                                           UnionCase{Scheme::nnz, 4, Placement::spread},
                                           UnionCase{Scheme::nnz, 5, Placement::spread},
                                           UnionCase{Scheme::grid, 3, Placement::first_rank},
                                           UnionCase{Scheme::nnz, 4, Placement::first_rank},
                                           UnionCase{Scheme::nnz, 5, Placement::last_rank},
                                           UnionCase{Scheme::grid, 5, Placement::last_rank}),
                         union_name);

// ---- given grids, skew, balance ----------------------------------------------------------

TEST(PartitionGrid, GivenShapesAreUsed) {
  const int P = world().size();
  InputSpec s;
  s.dims = {60, 50, 40};
  s.entries = 5000;
  s.seed = 7;
  for (int m = 0; m < 3; ++m) {
    std::vector<int> g(3, 1);
    g[static_cast<std::size_t>(m)] = P;
    const Distribution d = run_and_check<double>(s, Scheme::grid, g);
    EXPECT_EQ(d.grid, g);
  }
}

TEST(PartitionGrid, ChunksOfShortModesMayBeEmptyButStayOrdered) {
  // Mode 1 has length 2 but gets all ranks: chunks may be empty, bounds stay monotone.
  const int P = world().size();
  InputSpec s;
  s.dims = {50, 2, 30};
  s.entries = 3000;
  s.seed = 8;
  run_and_check<double>(s, Scheme::grid, {1, P, 1});
}

TEST(PartitionGrid, SkewedIndices) {
  InputSpec s;
  s.dims = {500, 400, 300};
  s.entries = 20000;
  s.skewed = true;
  s.seed = 9;
  const Distribution d = run_and_check<double>(s, Scheme::grid);
  EXPECT_GE(d.imbalance, 1.0);
}

TEST(PartitionBalance, UniformTensor) {
  InputSpec s;
  s.dims = {200, 300, 400};
  s.entries = 20000;
  s.repeat = 0.0;
  s.seed = 11;
  const Distribution g = run_and_check<double>(s, Scheme::grid);
  EXPECT_LT(g.imbalance, 1.3) << g.describe();
  const Distribution n = run_and_check<double>(s, Scheme::nnz);
  EXPECT_LT(n.imbalance, 1.2) << n.describe();
  // All input on one rank: the samples are weighted, so the ranges still balance.
  s.where = Placement::first_rank;
  const Distribution n0 = run_and_check<double>(s, Scheme::nnz);
  EXPECT_LT(n0.imbalance, 1.2) << n0.describe();
}

TEST(PartitionBalance, NnzSchemeBalancesSkewedTensors) {
  InputSpec s;
  s.dims = {1000, 1000, 1000};
  s.entries = 20000;
  s.skewed = true;
  s.seed = 12;
  const Distribution d = run_and_check<float>(s, Scheme::nnz);
  EXPECT_LT(d.imbalance, 1.2) << d.describe();
}

// ---- degenerate inputs ---------------------------------------------------------------------

TEST(PartitionDegenerate, MoreRanksThanNonzeros) {
  InputSpec s;
  s.dims = {9, 8, 7};
  s.entries = 2;
  s.repeat = 0.0;
  s.where = Placement::last_rank;
  s.seed = 13;
  for (Scheme sc : {Scheme::grid, Scheme::nnz}) {
    const Distribution d = run_and_check<double>(s, sc);
    EXPECT_EQ(d.global_nnz, 2);
    if (world().size() > 2) {
      EXPECT_EQ(d.min_block_nnz, 0);
    }
  }
}

TEST(PartitionDegenerate, SameCoordinateOnEveryRank) {
  const auto& c = world();
  for (Scheme sc : {Scheme::grid, Scheme::nnz}) {
    SparseTensor<double> t({5, 6, 7});
    const index_t co[3] = {4, 0, 6};
    for (int k = 0; k < 3; ++k) t.push_back(co, 0.5);
    auto out = distribute(std::move(t), sc, {}, c);
    check_local(out, {5, 6, 7}, sc, c);
    EXPECT_EQ(out.dist.global_nnz, 1);
    EXPECT_EQ(out.dist.duplicates, 3 * c.size() - 1);
    EXPECT_EQ(out.dist.max_block_nnz, 1);
    EXPECT_EQ(out.dist.touched_rows, 3u);
    if (out.block.nnz() == 1) {
      EXPECT_EQ(out.block.vals[0], 1.5 * c.size());
      EXPECT_EQ(out.block.idx[0][0], 4u);
      EXPECT_EQ(out.block.idx[2][0], 6u);
    }
    const std::int64_t holders = c.allreduce_value<std::int64_t>(out.block.nnz());
    EXPECT_EQ(holders, 1);
  }
}

TEST(PartitionDegenerate, NoNonzeros) {
  const auto& c = world();
  for (Scheme sc : {Scheme::grid, Scheme::nnz}) {
    SparseTensor<float> t({100, 3, 17, 2});
    auto out = distribute(std::move(t), sc, {}, c);
    check_local(out, {100, 3, 17, 2}, sc, c);
    EXPECT_EQ(out.block.nnz(), 0);
    EXPECT_EQ(out.dist.global_nnz, 0);
    EXPECT_EQ(out.dist.duplicates, 0);
    EXPECT_EQ(out.dist.min_block_nnz, 0);
    EXPECT_EQ(out.dist.max_block_nnz, 0);
    EXPECT_EQ(out.dist.imbalance, 1.0);
    EXPECT_EQ(out.dist.touched_rows, 0u);
  }
}

TEST(PartitionDegenerate, SingleRankCommunicator) {
  // P = 1 on every run: each rank distributes its own share over a communicator of itself.
  const auto self = world().split(world().rank(), 0);
  ASSERT_EQ(self->size(), 1);
  InputSpec s;
  s.dims = {30, 20, 10, 5};
  s.entries = 4000;
  s.repeat = 0.3;
  s.seed = 14 + static_cast<std::uint64_t>(world().rank());
  for (Scheme sc : {Scheme::grid, Scheme::nnz}) {
    const Distribution d = run_and_check<double>(s, sc, {}, *self);
    EXPECT_EQ(d.grid, (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(d.imbalance, 1.0);
    EXPECT_GT(d.duplicates, 0);
  }
}

TEST(PartitionDegenerate, OrderOneTensor) {
  InputSpec s;
  s.dims = {1000};
  s.entries = 3000;
  s.seed = 15;
  run_and_check<double>(s, Scheme::grid);
  run_and_check<float>(s, Scheme::nnz);
}

// ---- layers, report ------------------------------------------------------------------------

TEST(PartitionLayers, MatchSplitAndCoverEveryRow) {
  const auto& c = world();
  InputSpec s;
  s.dims = {70, 50, 33};
  s.entries = 4000;
  s.seed = 16;
  SparseTensor<double> local = make_input<double>(s, c);
  const auto out = distribute(std::move(local), Scheme::grid, {}, c);
  const auto& d = out.dist;
  for (int n = 0; n < 3; ++n) {
    const auto layer = c.split(d.coords[static_cast<std::size_t>(n)], c.rank());
    EXPECT_EQ(layer->size(), d.layer_size(n));
    EXPECT_EQ(layer->rank(), d.layer_rank(n));
    // Every row of mode n is owned by exactly one rank.
    std::vector<std::int32_t> owned(s.dims[static_cast<std::size_t>(n)], 0);
    const auto [lo, hi] = d.owned_rows(n);
    for (auto i = lo; i < hi; ++i) owned[i] = 1;
    c.allreduce(owned.data(), owned.size());
    EXPECT_EQ(std::count(owned.begin(), owned.end(), 1), static_cast<long>(owned.size()))
        << "mode " << n;
  }
}

TEST(PartitionReport, DescribeNamesTheNumbers) {
  InputSpec s;
  s.dims = {80, 60, 40};
  s.entries = 3000;
  s.seed = 17;
  const Distribution g = run_and_check<double>(s, Scheme::grid);
  const std::string t = g.describe();
  EXPECT_NE(t.find("grid"), std::string::npos) << t;
  EXPECT_NE(t.find("imbalance"), std::string::npos) << t;
  EXPECT_NE(t.find("duplicates summed: " + std::to_string(g.duplicates)), std::string::npos) << t;
  EXPECT_NE(t.find("factor rows touched: " + std::to_string(g.touched_rows)), std::string::npos)
      << t;
  EXPECT_NE(t.find("chunk lengths"), std::string::npos) << t;
  const Distribution n = run_and_check<double>(s, Scheme::nnz);
  EXPECT_NE(n.describe().find("nnz on"), std::string::npos) << n.describe();
}

// ---- errors reach every rank -------------------------------------------------------------

TEST(PartitionErrors, CoordinateOutOfRangeOnOneRank) {
  const auto& c = world();
  SparseTensor<double> t({10, 20, 30});
  const index_t ok[3] = {1, 2, 3};
  const index_t bad[3] = {1, 25, 3};
  t.push_back(ok, 1.0);
  if (c.rank() == c.size() - 1) t.push_back(bad, 1.0);
  try {
    distribute(std::move(t), Scheme::grid, {}, c);
    ADD_FAILURE() << "no error for an index past the mode length";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("index 25 in mode 1"), std::string::npos) << m;
    EXPECT_NE(m.find("length 20"), std::string::npos) << m;
  }
}

TEST(PartitionErrors, BadGridOnEveryRank) {
  const auto& c = world();
  SparseTensor<double> t({10, 20, 30});
  EXPECT_THROW(distribute(SparseTensor<double>(t), Scheme::grid, {c.size() + 1, 1, 1}, c),
               InputError);
  EXPECT_THROW(distribute(SparseTensor<double>(t), Scheme::grid, {c.size(), 1}, c), InputError);
  // A grid passed with the nnz scheme is ignored.
  const auto out = distribute(SparseTensor<double>(t), Scheme::nnz, {c.size() + 1, 1, 1}, c);
  EXPECT_EQ(out.dist.grid, (std::vector<int>{1, 1, 1}));
}

TEST(PartitionErrors, RanksDisagreeOnDims) {
  const auto& c = world();
  if (c.size() == 1) GTEST_SKIP() << "needs two ranks";
  SparseTensor<double> t(c.rank() == 0 ? std::vector<std::uint64_t>{10, 20}
                                       : std::vector<std::uint64_t>{10, 21});
  EXPECT_THROW(distribute(std::move(t), Scheme::nnz, {}, c), InputError);
}

// ---- balanced cuts: zooming with a small budget finds the exact cuts -----------------------

// Reference: cut k at x or x-1, x the first index with P(x) >= k*T/parts (P(x) = count of
// indices < x), whichever prefix is closer (ties: x-1); then pushed to keep chunks non-empty.
std::vector<std::uint64_t> reference_cuts(std::vector<index_t> all, std::uint64_t dim, int parts) {
  std::sort(all.begin(), all.end());
  const auto T = static_cast<std::int64_t>(all.size());
  std::vector<std::uint64_t> b(static_cast<std::size_t>(parts) + 1, 0);
  b.back() = dim;
  const bool nonempty = dim >= static_cast<std::uint64_t>(parts);
  for (int k = 1; k < parts; ++k) {
    std::uint64_t cut = 0;
    if (T == 0) {
      cut = dim * static_cast<std::uint64_t>(k) / static_cast<std::uint64_t>(parts);
    } else {
      const std::int64_t need = (k * T + parts - 1) / parts;  // P(x) >= need
      const index_t v = all[static_cast<std::size_t>(need - 1)];
      const std::uint64_t x = std::uint64_t(v) + 1;
      const auto px = std::upper_bound(all.begin(), all.end(), v) - all.begin();
      const auto pxm1 = std::lower_bound(all.begin(), all.end(), v) - all.begin();
      const std::int64_t t = k * T;
      cut = (px * parts - t < t - pxm1 * parts) ? x : x - 1;
    }
    const std::uint64_t lo = b[static_cast<std::size_t>(k) - 1] + (nonempty ? 1 : 0);
    const std::uint64_t hi = nonempty ? dim - static_cast<std::uint64_t>(parts - k) : dim;
    b[static_cast<std::size_t>(k)] = std::clamp(cut, lo, hi);
  }
  return b;
}

TEST(PartitionCuts, ZoomingMatchesExactCuts) {
  const auto& c = world();
  struct Case {
    std::uint64_t dim;
    std::uint64_t n;
    bool skewed;
  };
  const Case cases[] = {{5000, 3000, true}, {5000, 3000, false}, {4294967295ull, 2000, true},
                        {7, 500, false},    {3, 100, true},      {100, 0, false},
                        {1000, 1, false}};
  for (const auto& cs : cases) {
    std::vector<index_t> mine;
    for (std::uint64_t e = 0; e < cs.n; ++e) {
      if (hash_keys(21, 1, e) % static_cast<std::uint64_t>(c.size()) !=
          static_cast<std::uint64_t>(c.rank()))
        continue;
      double u = uniform01(hash_keys(21, 2, e));
      if (cs.skewed) u = u * u * u;
      mine.push_back(static_cast<index_t>(
          std::min<double>(u * static_cast<double>(cs.dim), static_cast<double>(cs.dim - 1))));
    }
    const std::vector<index_t> all = gather0(mine, c);
    for (int parts : {1, 2, 3, 5, 8, 13}) {
      for (std::size_t budget :
           {std::size_t(2), std::size_t(5), std::size_t(64), detail::kHistogramBudget}) {
        const auto got = detail::balanced_cuts(mine.data(), mine.size(), cs.dim, parts, c, budget);
        if (c.rank() == 0) {
          EXPECT_EQ(got, reference_cuts(all, cs.dim, parts))
              << "dim " << cs.dim << " n " << cs.n << " parts " << parts << " budget " << budget;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::partition
