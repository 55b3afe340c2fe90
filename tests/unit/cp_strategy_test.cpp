// --comm-strategy auto (algo/cp_strategy.hpp; issue 36, point 2): the model's choice on the
// shapes measured on H200 nodes (NVLink) and on a slower link, and its edge cases.
#include "algo/cp_strategy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algo/cp_layout.hpp"
#include "partition/partition.hpp"
#include "plan/comm_model.hpp"
#include "util/error.hpp"

namespace tessera::algo {
namespace {

const std::vector<std::uint64_t> kNell2 = {12092, 9184, 28818};
const std::vector<std::uint64_t> kAmazon = {4821207, 1774269, 1805187};

TEST(CommStrategyAuto, OneRankOrUnknownDimsTakeAllreduce) {
  EXPECT_EQ(choose_comm_strategy(kAmazon, 1740000000, 1, 32, 4).strategy, CommStrategy::allreduce);
  const CommChoice text = choose_comm_strategy({}, 0, 4, 32, 4);
  EXPECT_EQ(text.strategy, CommStrategy::allreduce);
  EXPECT_NE(text.why.find("text file"), std::string::npos) << text.why;
  plan::TensorFacts t;  // a text file: the facts carry no dims
  t.text = true;
  CommChoice c;
  EXPECT_EQ(resolve_comm_strategy("auto", t, 4, 32, 4, &c), CommStrategy::allreduce);
}

TEST(CommStrategyAuto, Nell2OnNvlinkIsLatencyBoundAllreduce) {
  // Measured on 4 H200s: allreduce comm 0.141 ms, layer 0.217 ms (4 collectives per mode).
  const CommChoice c = choose_comm_strategy(kNell2, 76900000, 4, 32, 4);
  EXPECT_EQ(c.strategy, CommStrategy::allreduce);
  EXPECT_GT(c.layer_comm_s, c.allreduce_comm_s);
  EXPECT_EQ(c.grid, (std::vector<int>{1, 1, 4}));
}

TEST(CommStrategyAuto, AmazonOnNvlinkKeepsAllreduceAlthoughLayerMovesFewerBytes) {
  // Measured on 2 H200s: the layer strategy's transfers took 1.96 ms (all-reduce floor 3.57
  // ms) but its grid partition's slowest MTTKRP was 1.2x the mean: 72.7 ms per iteration
  // against 64.4 ms with allreduce.
  const CommChoice c = choose_comm_strategy(kAmazon, 1740000000, 2, 32, 4);
  EXPECT_EQ(c.grid, (std::vector<int>{2, 1, 1}));
  EXPECT_LT(c.layer_comm_s, 0.6 * c.allreduce_comm_s);
  EXPECT_GT(c.layer_comm_s + c.grid_cost_s, c.allreduce_comm_s);
  EXPECT_EQ(c.strategy, CommStrategy::allreduce);
  EXPECT_NEAR(c.allreduce_comm_s, 1.07e9 / 300e9, 0.5e-3);  // ring: (P - 1) / P x 2 = 1
}

TEST(CommStrategyAuto, AmazonOnNvlinkTakesLayerWhenTheGridIsDealt) {
  // Measured on 2 H200s (session 28): with --deal the grid's slowest MTTKRP was 1.007x the
  // mean and the iteration 59.3 ms against 62.8 ms with allreduce: nothing charged for it.
  const CommChoice c = choose_comm_strategy(kAmazon, 1740000000, 2, 32, 4, {}, true);
  EXPECT_EQ(c.grid, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(c.grid_cost_s, 0.0);
  EXPECT_EQ(c.strategy, CommStrategy::layer);
  EXPECT_NE(c.why.find("dealt"), std::string::npos) << c.why;
  // nell-2 stays latency-bound: allreduce even with a dealt grid.
  EXPECT_EQ(choose_comm_strategy(kNell2, 76900000, 2, 32, 4, {}, true).strategy,
            CommStrategy::allreduce);
}

TEST(CommStrategyAuto, AmazonOverASlowLinkTakesLayer) {
  plan::TimeModel slow;
  slow.link_bandwidth = 25e9;  // an inter-node link per GPU
  const CommChoice c = choose_comm_strategy(kAmazon, 1740000000, 4, 32, 4, slow);
  EXPECT_EQ(c.strategy, CommStrategy::layer) << c.why;
  EXPECT_LT(c.layer_comm_s + c.grid_cost_s, c.allreduce_comm_s);
}

TEST(CommStrategyAuto, SeveralNodesUseThePlanModel) {
  // 16 nodes x 4 GPUs at 25 GB/s: the figures are plan::estimate_cp_*'s, and the why says so.
  plan::TimeModel m;
  m.gpus_per_node = 4;
  m.inter_bandwidth = 25e9;
  const CommChoice c = choose_comm_strategy(kAmazon, 1740000000, 64, 32, 4, m);
  plan::Request req;
  req.cp_rank = 32;
  req.value_bytes = 4;
  plan::TensorFacts t;
  t.dims = kAmazon;
  t.nnz = 1740000000;
  const nnz_t block = (t.nnz + 63) / 64;
  EXPECT_DOUBLE_EQ(c.allreduce_comm_s, plan::estimate_cp_iteration(req, t, block, 64, m).comm_s);
  const auto lay = plan::estimate_cp_layer_iteration(req, t, block, c.grid, m);
  EXPECT_DOUBLE_EQ(c.layer_comm_s, lay.comm_s);
  EXPECT_DOUBLE_EQ(c.grid_cost_s, lay.grid_cost_s);
  EXPECT_NE(c.why.find("16 nodes"), std::string::npos) << c.why;
}

TEST(CommStrategyAuto, NodeAwareGridMovesFewerBytesOverTheNetwork) {
  // Amazon on 16 nodes x 4 GPUs at 25 GB/s (docs/perf/multi-node-model.md): the rank-count
  // grid puts layers across nodes with one rank on each, which the network carries whole.
  plan::TimeModel m;
  m.gpus_per_node = 4;
  m.inter_bandwidth = 25e9;
  const int P = 64, R = 32;
  plan::Request req;
  req.cp_rank = R;
  req.value_bytes = 4;
  plan::TensorFacts t;
  t.dims = kAmazon;
  t.nnz = 1740000000;
  const nnz_t block = (t.nnz + P - 1) / P;
  const std::vector<int> flat = partition::choose_grid(kAmazon, P);
  const std::vector<int> node = choose_layer_grid(kAmazon, t.nnz, P, R, 4, m);
  const auto ef = plan::estimate_cp_layer_iteration(req, t, block, flat, m);
  const auto en = plan::estimate_cp_layer_iteration(req, t, block, node, m);
  int prod = 1;
  for (const int p : node) prod *= p;
  EXPECT_EQ(prod, P);
  EXPECT_LT(en.comm_s, ef.comm_s);
  EXPECT_LT(en.link.inter_bytes, ef.link.inter_bytes);
  // The rank-count grid 8x2x4 leaves mode 2's layers one rank per node on all 16 nodes; the
  // model's grid (4x2x8) halves the nodes those layers span.
  EXPECT_EQ(flat, (std::vector<int>{8, 2, 4}));
  EXPECT_EQ(plan::layer_group(flat, 2, 4).nodes, 16);
  EXPECT_LT(plan::layer_group(node, 2, 4).nodes, 16);
  // auto prices the grid it would use.
  EXPECT_EQ(choose_comm_strategy(kAmazon, t.nnz, P, R, 4, m).grid, node);
  // On one node the grid is the rank-count one.
  plan::TimeModel one;
  EXPECT_EQ(choose_layer_grid(kAmazon, t.nnz, P, R, 4, one), flat);
}

TEST(CommStrategyAuto, ExplicitOptionsPassThroughAndBadOnesAreRefused) {
  plan::TensorFacts t;
  EXPECT_EQ(resolve_comm_strategy("layer", t, 4, 32, 4, nullptr), CommStrategy::layer);
  EXPECT_EQ(resolve_comm_strategy("allreduce", t, 4, 32, 4, nullptr), CommStrategy::allreduce);
  EXPECT_THROW(resolve_comm_strategy("sideways", t, 4, 32, 4, nullptr), InputError);
}

// --comm-overlap: the row pieces of a large mode's MTTKRP (docs/multi-gpu.md, "Overlap").
// A power-law mode: 1000 rows in 100 ranges, the first ranges dense, the tail sparse.
TEST(CommOverlap, PiecesPartitionTheRowsAndSparsePiecesGoFirst) {
  std::vector<std::int64_t> fine;
  std::vector<double> nnz;
  for (int b = 0; b <= 100; ++b) fine.push_back(10 * b);
  for (int b = 0; b < 100; ++b) nnz.push_back(1e6 / ((b + 1) * (b + 1)));
  for (int K : {2, 5, 16}) {
    std::vector<std::int64_t> bounds;
    const auto p = detail::cut_row_pieces(fine, nnz, K, &bounds);
    ASSERT_EQ(p.size(), 2u * static_cast<std::size_t>(K)) << "K " << K;
    ASSERT_EQ(bounds.size(), static_cast<std::size_t>(K) + 1);
    EXPECT_EQ(bounds.front(), 0);
    EXPECT_EQ(bounds.back(), 1000);
    // Every piece one of the bounds' ranges, each range once: a partition of the rows.
    std::vector<int> seen(static_cast<std::size_t>(K), 0);
    double total_cost = 0, most = 0;
    double prev_ratio = 1e300;
    for (std::size_t j = 0; j < p.size(); j += 2) {
      const auto at = std::find(bounds.begin(), bounds.end(), p[j]);
      ASSERT_NE(at, bounds.end());
      ASSERT_LT(at + 1, bounds.end());
      EXPECT_EQ(*(at + 1), p[j + 1]);
      ++seen[static_cast<std::size_t>(at - bounds.begin())];
      double n = 0;
      for (int b = 0; b < 100; ++b)
        if (fine[static_cast<std::size_t>(b)] >= p[j] &&
            fine[static_cast<std::size_t>(b)] < p[j + 1])
          n += nnz[static_cast<std::size_t>(b)];
      const double rows = static_cast<double>(p[j + 1] - p[j]);
      // Ordered by rows per nonzero, most first.
      const double ratio = rows / (n + 1);
      EXPECT_LE(ratio, prev_ratio) << "K " << K << " piece " << j / 2;
      prev_ratio = ratio;
      const double cost = n / 1e6 / 1.6449 + rows / 1000;  // sum 1/b^2 = pi^2/6
      total_cost += cost;
      most = std::max(most, cost);
    }
    for (int c : seen) EXPECT_EQ(c, 1);
    // Equal shares of nonzeros plus rows, but for the first range (alone 61% of the nonzeros).
    if (K == 2) {
      EXPECT_LT(most, 0.75 * total_cost);
    }
    // The dense head is computed last: its sum moves the fewest rows.
    EXPECT_EQ(p[p.size() - 2], 0) << "K " << K;
  }
  // Fewer ranges than pieces: one piece per range.
  EXPECT_EQ(detail::cut_row_pieces({0, 3, 5}, {4, 0}, 8).size(), 4u);
  EXPECT_THROW(detail::cut_row_pieces({0, 3}, {4, 0}, 2), Error);
}

}  // namespace
}  // namespace tessera::algo
