// Hierarchical collectives (comm/hierarchy.hpp) on emulated nodes of consecutive ranks: each
// composed collective equals the flat one to rounding, and CP-ALS with its groups composed
// (--comm-hierarchy node/auto) gives the flat run's fit and factors, as does Tucker-HOOI with
// its TTMc rows combined through a relay on each node, and a contraction with its partial
// output merged through them. Runs under mpiexec on an even rank count (np2: 2 nodes x 1,
// np4: 2 nodes x 2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "algo/contract.hpp"
#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "comm/hierarchy.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"

namespace tessera {
namespace {

using comm::Hierarchy;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// Two emulated nodes of consecutive ranks (skips on an odd rank count).
comm::NodeMap two_nodes() {
  return comm::block_node_map(world().size(), std::max(world().size() / 2, 1));
}

/// Values that differ per rank and per element (no zeros), the same on every run.
std::vector<double> values(int rank, std::size_t n) {
  std::mt19937_64 g(1000 + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

TEST(NodeMap, DecidesLikeTheModel) {
  EXPECT_FALSE(comm::use_hierarchy(Hierarchy::automatic, comm::block_node_map(4, 4)));  // 1 node
  EXPECT_TRUE(comm::use_hierarchy(Hierarchy::automatic, comm::block_node_map(8, 4)));
  EXPECT_FALSE(comm::use_hierarchy(Hierarchy::flat, comm::block_node_map(8, 4)));
  // One rank per node: nothing to reduce inside a node, so auto keeps it flat; node composes.
  EXPECT_FALSE(comm::use_hierarchy(Hierarchy::automatic, comm::block_node_map(4, 1)));
  EXPECT_TRUE(comm::use_hierarchy(Hierarchy::node, comm::block_node_map(4, 1)));
  comm::NodeMap uneven{{0, 0, 0, 1}};
  EXPECT_FALSE(uneven.uniform());
  EXPECT_FALSE(comm::use_hierarchy(Hierarchy::node, uneven));
  // A layer {1, 3, 5} of 3 nodes x 2: renumbered by first appearance, one rank per node.
  const comm::NodeMap sub = comm::block_node_map(6, 2).restrict_to({1, 3, 5});
  EXPECT_EQ(sub.node_of, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(sub.max_per_node(), 1);
}

class Hier : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count (two nodes)";
    h = std::make_unique<comm::HierarchicalCommunicator>(world(), two_nodes());
  }
  std::unique_ptr<comm::HierarchicalCommunicator> h;
};

TEST_F(Hier, NumbersRanksLocalMajor) {
  const int P = world().size(), G = P / 2;
  EXPECT_EQ(h->size(), P);
  EXPECT_EQ(h->nodes(), 2);
  EXPECT_EQ(h->per_node(), G);
  const int me = world().rank();
  EXPECT_EQ(h->rank(), (me % G) * 2 + me / G);
  EXPECT_EQ(h->to_flat(h->rank()), me);
}

TEST_F(Hier, AllreduceEqualsFlat) {
  const int G = h->per_node();
  for (const std::size_t n : {std::size_t(1), static_cast<std::size_t>(7 * G + 1)}) {
    std::vector<double> a = values(world().rank(), n), b = a;
    h->allreduce(a.data(), n);
    world().allreduce(b.data(), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_LT(rel(a[i], b[i]), 1e-14) << i;
  }
  std::vector<std::int64_t> m = {world().rank() * 3 + 1, -world().rank()};
  h->allreduce(m.data(), m.size(), comm::ReduceOp::max);
  EXPECT_EQ(m[0], (world().size() - 1) * 3 + 1);
  EXPECT_EQ(m[1], 0);
}

TEST_F(Hier, ReduceScatterGivesEachRankItsBlock) {
  const std::size_t P = static_cast<std::size_t>(h->size()), rc = 5;
  const std::vector<double> send = values(world().rank(), P * rc);
  std::vector<double> sum = send;
  world().allreduce(sum.data(), sum.size());
  const std::size_t me = static_cast<std::size_t>(h->rank());
  std::vector<double> out(rc, -1.0), inplace = send;  // poisoned / in place
  h->reduce_scatter(send.data(), out.data(), rc);
  h->reduce_scatter(inplace.data(), inplace.data() + me * rc, rc);
  for (std::size_t i = 0; i < rc; ++i) {
    EXPECT_LT(rel(out[i], sum[me * rc + i]), 1e-14) << i;
    EXPECT_LT(rel(inplace[me * rc + i], sum[me * rc + i]), 1e-14) << i;
  }
  // The flat communicator's in-place reduce-scatter (MPI_IN_PLACE, moved to the block).
  const std::size_t fr = static_cast<std::size_t>(world().rank());
  std::vector<double> flat = send;
  world().reduce_scatter(flat.data(), flat.data() + fr * rc, rc);
  for (std::size_t i = 0; i < rc; ++i)
    EXPECT_LT(rel(flat[fr * rc + i], sum[fr * rc + i]), 1e-14) << i;
}

TEST_F(Hier, AllgatherAndBroadcastFollowItsRanks) {
  const int P = h->size();
  const std::size_t c = 3, me = static_cast<std::size_t>(h->rank());
  std::vector<double> mine = {100.0 * h->rank() + 1, 100.0 * h->rank() + 2, 100.0 * h->rank() + 3};
  std::vector<double> all(c * static_cast<std::size_t>(P), -1.0), inplace = all;
  h->allgather(mine.data(), all.data(), c);
  std::copy(mine.begin(), mine.end(), inplace.begin() + static_cast<std::ptrdiff_t>(me * c));
  h->allgather(inplace.data() + me * c, inplace.data(), c);
  for (int r = 0; r < P; ++r)
    for (std::size_t i = 0; i < c; ++i) {
      const double want = 100.0 * r + static_cast<double>(i) + 1;
      EXPECT_EQ(all[static_cast<std::size_t>(r) * c + i], want);
      EXPECT_EQ(inplace[static_cast<std::size_t>(r) * c + i], want);
    }
  std::int64_t v = h->rank() * 10 + 7;
  h->broadcast(&v, 1, P - 1);
  EXPECT_EQ(v, (P - 1) * 10 + 7);
}

TEST_F(Hier, AlltoallvAndSplitFollowItsRanks) {
  const int P = h->size(), me = h->rank();
  std::vector<std::int64_t> send, counts;
  for (int p = 0; p < P; ++p) {
    counts.push_back(p + 1);
    for (int k = 0; k <= p; ++k) send.push_back(me * 1000 + p);
  }
  std::vector<std::int64_t> rcounts;
  const std::vector<std::int64_t> got = h->alltoallv(send, counts, &rcounts);
  std::size_t at = 0;
  for (int p = 0; p < P; ++p) {
    ASSERT_EQ(rcounts[static_cast<std::size_t>(p)], me + 1);
    for (int k = 0; k <= me; ++k) EXPECT_EQ(got[at++], p * 1000 + me);
  }
  const auto s = h->split(0, 0);  // ties ordered by the hierarchical rank
  EXPECT_EQ(s->rank(), me);
}

TEST(NodeSplit, AllgathervByNodesPutsEveryShareInPlace) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count (two nodes)";
  const int P = world().size();
  // Nodes of non-consecutive ranks too (0,2 | 1,3 on 4 ranks): slots follow the flat order.
  for (const bool interleaved : {false, true}) {
    comm::NodeMap map = two_nodes();
    if (interleaved)
      for (int r = 0; r < P; ++r) map.node_of[static_cast<std::size_t>(r)] = r % 2;
    const comm::NodeSplit ns(world(), map);
    EXPECT_EQ(ns.node->size(), P / 2);
    EXPECT_EQ(ns.cross->size(), 2);
    // Shares of different lengths, one empty (rank 1); the last rank's is the longest.
    std::vector<std::int64_t> counts(static_cast<std::size_t>(P)),
        displs(static_cast<std::size_t>(P));
    std::int64_t total = 0;
    for (int r = 0; r < P; ++r) {
      counts[static_cast<std::size_t>(r)] = r == 1 ? 0 : 3 + 2 * r;
      displs[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    const int me = world().rank();
    std::vector<double> mine(static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]));
    for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = 1000.0 * me + static_cast<double>(k);
    std::vector<double> all(static_cast<std::size_t>(total), -1.0);
    comm::allgatherv_by_nodes(ns, mine.data(), all.data(), counts, displs, comm::DataType::f64);
    for (int r = 0; r < P; ++r)
      for (std::int64_t k = 0; k < counts[static_cast<std::size_t>(r)]; ++k)
        ASSERT_EQ(all[static_cast<std::size_t>(displs[static_cast<std::size_t>(r)] + k)],
                  1000.0 * r + static_cast<double>(k))
            << "share of rank " << r << ", element " << k << (interleaved ? ", interleaved" : "");
  }
}

// ---- CP-ALS: composed groups give the flat run's answer --------------------------------

algo::CpResult run_cp(const comm::NodeMap& nodes, Hierarchy hier, algo::CommStrategy s) {
  algo::GenerateOptions g;
  g.dims = {24, 30, 36};
  g.nnz = 3000;
  g.rank = 3;
  g.noise = 0.01;
  g.seed = 5;
  auto t = algo::generate(g, world());
  // 2 x (P/2) x 1: mode 0's layers sit inside a node, mode 1's hold one rank per node, and
  // mode 2's layer is every rank, G on each of the two nodes.
  const int P = world().size();
  const auto scheme =
      s == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto d = partition::distribute(std::move(t.block), scheme, {2, P / 2, 1}, world());
  auto be = kernels::make_backend<double>(kernels::BackendKind::reference, 1);
  algo::CpOptions o;
  o.rank = 3;
  o.max_iters = 8;
  o.tol = 0;
  o.seed = 2;
  o.strategy = s;
  o.print_iterations = false;
  o.nodes = nodes;
  o.hierarchy = hier;
  return algo::cp_als<double>(d, *be, world(), world(), o);
}

double model_difference(const KruskalModel& a, const KruskalModel& b) {
  double worst = 0;
  for (int n = 0; n < a.order(); ++n)
    for (std::size_t k = 0; k < a.factors[n].data.size(); ++k)
      worst = std::max(worst, std::abs(a.factors[n].data[k] - b.factors[n].data[k]));
  for (int r = 0; r < a.rank; ++r)
    worst = std::max(
        worst, rel(a.lambda[static_cast<std::size_t>(r)], b.lambda[static_cast<std::size_t>(r)]));
  return worst;
}

class HierCp : public ::testing::TestWithParam<algo::CommStrategy> {};

TEST_P(HierCp, SameFitAndFactorsAsFlat) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count (two nodes)";
  const algo::CommStrategy s = GetParam();
  const comm::NodeMap nodes = two_nodes();
  const algo::CpResult flat = run_cp(nodes, Hierarchy::flat, s);
  const algo::CpResult node = run_cp(nodes, Hierarchy::node, s);
  const algo::CpResult automatic = run_cp(nodes, Hierarchy::automatic, s);
  const bool layer = s == algo::CommStrategy::layer;
  const bool G2 = world().size() >= 4;  // 2+ ranks per node: auto composes
  EXPECT_EQ(flat.comm_hierarchy_modes, "flat,flat,flat");
  // Mode 0's layers stay inside a node (flat under every option).
  EXPECT_EQ(node.comm_hierarchy_modes, layer ? "flat,node,node" : "node,node,node");
  EXPECT_EQ(automatic.comm_hierarchy_modes,
            G2 ? (layer ? "flat,flat,node" : "node,node,node") : "flat,flat,flat");
  for (const algo::CpResult* r : {&node, &automatic}) {
    EXPECT_EQ(r->iterations, flat.iterations);
    EXPECT_LT(std::abs(r->fit - flat.fit), 1e-12);
    EXPECT_LT(model_difference(r->model, flat.model), 1e-10);
  }
  EXPECT_GT(flat.fit, 0.9);  // a real decomposition, not a trivial one
}

INSTANTIATE_TEST_SUITE_P(Strategies, HierCp,
                         ::testing::Values(algo::CommStrategy::allreduce,
                                           algo::CommStrategy::layer));

// ---- Tucker-HOOI: the TTMc rows combined through a relay on each node ------------------

algo::TuckerResult run_tucker(const comm::NodeMap& nodes, Hierarchy hier) {
  algo::GenerateOptions g;
  g.dims = {40, 12, 50};
  g.nnz = 2500;
  g.rank = 3;
  g.noise = 0.01;
  g.seed = 8;
  auto t = algo::generate(g, world());
  // Cut by nonzeros, sorted by mode 0: the ranks of a node share rows of modes 1 and 2,
  // which the relays sum before they cross.
  auto d = partition::distribute(std::move(t.block), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<double>(kernels::BackendKind::reference, 1);
  algo::TuckerOptions o;
  o.ranks = {3, 3, 3};
  o.max_iters = 6;
  o.tol = 0;
  o.seed = 3;
  o.print_iterations = false;
  o.nodes = nodes;
  o.hierarchy = hier;
  return algo::tucker_hooi<double>(d, *be, world(), o);
}

TEST(HierTucker, RelayedRowsGiveTheFlatFitAndCrossTheNetworkLess) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count (two nodes)";
  const comm::NodeMap nodes = two_nodes();
  const algo::TuckerResult flat = run_tucker(nodes, Hierarchy::flat);
  const algo::TuckerResult node = run_tucker(nodes, Hierarchy::node);
  const algo::TuckerResult automatic = run_tucker(nodes, Hierarchy::automatic);
  const bool G2 = world().size() >= 4;  // 2+ ranks per node: auto relays
  EXPECT_EQ(flat.combine, "flat");
  EXPECT_EQ(node.combine, "node");
  EXPECT_EQ(automatic.combine, G2 ? "node" : "flat");
  ASSERT_EQ(flat.network_rows.size(), 3u);
  ASSERT_EQ(node.network_rows.size(), 3u);
  std::int64_t fsum = 0, nsum = 0;
  for (int n = 0; n < 3; ++n) {
    // A relay sends each of its distinct rows once: never more rows than flat.
    EXPECT_LE(node.network_rows[static_cast<std::size_t>(n)],
              flat.network_rows[static_cast<std::size_t>(n)]);
    fsum += flat.network_rows[static_cast<std::size_t>(n)];
    nsum += node.network_rows[static_cast<std::size_t>(n)];
  }
  if (G2) {
    EXPECT_LT(nsum, fsum);  // two ranks per node share rows of modes 1 and 2
  }
  EXPECT_GT(flat.fit, 0.5);  // a real decomposition, not a trivial one
  for (const algo::TuckerResult* r : {&node, &automatic}) {
    EXPECT_EQ(r->iterations, flat.iterations);
    EXPECT_LT(std::abs(r->fit - flat.fit), 1e-12);
    for (std::size_t k = 0; k < flat.model.core.size(); ++k)
      EXPECT_NEAR(r->model.core[k], flat.model.core[k], 1e-9 * (1 + std::abs(flat.model.core[k])));
    for (int n = 0; n < 3; ++n)
      for (std::size_t k = 0; k < flat.model.factors[n].data.size(); ++k)
        ASSERT_NEAR(r->model.factors[n].data[k], flat.model.factors[n].data[k], 1e-9);
  }
}

// ---- SpTC: the partial output merged through a relay on each node ---------------------

TEST(HierContract, RelayedPartialOutputGivesTheFlatOutput) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even rank count (two nodes)";
  // Integer values: every sum is exact in any order, so the outputs are equal bit for bit.
  std::mt19937_64 rng(77);
  SparseTensor<double> x({30, 20, 6});
  index_t co[3];
  for (int k = 0; k < 1500; ++k) {
    co[0] = static_cast<index_t>(rng() % 30);
    co[1] = static_cast<index_t>(rng() % 20);
    co[2] = static_cast<index_t>(rng() % 6);
    if (static_cast<int>(rng() % static_cast<std::uint64_t>(world().size())) == world().rank())
      x.push_back(co, static_cast<double>(1 + rng() % 3));
  }
  const auto spec = kernels::parse_contract_spec("ijk,ljk->il");
  auto be = kernels::make_backend<double>(kernels::BackendKind::reference, 1);
  const auto run = [&](Hierarchy h) {
    algo::ContractOptions o;
    o.print = false;
    o.nodes = two_nodes();
    o.hierarchy = h;
    return algo::contract(x, x, spec, *be, world(), o);
  };
  const auto flat = run(Hierarchy::flat);
  const auto node = run(Hierarchy::node);
  EXPECT_EQ(flat.output_merge, "flat");
  EXPECT_EQ(node.output_merge, "node");
  EXPECT_GT(flat.network_entries, 0);
  // A relay sends each entry of its node once, summed: never more than flat.
  EXPECT_LE(node.network_entries, flat.network_entries);
  if (world().size() >= 4) {
    EXPECT_LT(node.network_entries, flat.network_entries);
  }
  const SparseTensor<double> a = algo::gather(flat.local, world()),
                             b = algo::gather(node.local, world());
  if (world().rank() == 0) {
    ASSERT_EQ(a.nnz(), b.nnz());
    EXPECT_GT(a.nnz(), 100);
    EXPECT_EQ(a.idx, b.idx);
    EXPECT_EQ(a.vals, b.vals);
  }
}

}  // namespace
}  // namespace tessera
