// Plans for N ranks (tessera plan --nprocs; issue 36, point 5), pure: each rank's share of
// the nonzeros, the tier and bytes per rank for 1, 2, 4 ranks, the CP iteration model and
// where more ranks stop helping; the cuda tier-1 count of the tensor-core tile sets per rank
// against the peaks the issue measured on H200s; planning for a card no GPU here shows.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "plan/planner.hpp"

namespace tessera::plan {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t(1) << 30;

/// Host memory of a node (`node` bytes) shared by P ranks; one GPU of `device` bytes each.
Limits node_limits(std::uint64_t node, int P, std::uint64_t device = 0) {
  Limits l;
  l.host = {node / static_cast<std::uint64_t>(P), "test node / ranks"};
  if (device) l.device = {device, "test device limit"};
  l.disk = {1000 * kGiB, "test disk"};
  l.baseline_host = 64 << 20;
  return l;
}

TensorFacts store(std::vector<std::uint64_t> dims, nnz_t nnz, int vbytes = 4) {
  TensorFacts t;
  t.path = "x.h5";
  t.store = true;
  t.unique = 1;
  t.dims = std::move(dims);
  t.nnz = nnz;
  t.stored_value_bytes = vbytes;
  t.store_chunk_elems = 1 << 20;
  t.file_bytes = coo_bytes(nnz, static_cast<int>(t.dims.size()), vbytes);
  return t;
}

TensorFacts amazon() {
  return store({4821207, 1774269, 1805187}, 1740000000);
}

Request cp(Backend b, int value_bytes, int R) {
  Request r;
  r.workload = Workload::cp;
  r.backend = b;
  r.value_bytes = value_bytes;
  r.cp_rank = R;
  return r;
}

RankBlocks split(nnz_t nnz, int P) {
  return {equal_split(nnz, P), "equal split"};
}

std::uint64_t max_of(const std::vector<std::uint64_t>& v) {
  return *std::max_element(v.begin(), v.end());
}

TEST(PlanRanks, EqualSplitCoversEveryNonzeroOnce) {
  EXPECT_EQ(equal_split(10, 3), (std::vector<nnz_t>{3, 3, 4}));
  EXPECT_EQ(equal_split(8, 4), (std::vector<nnz_t>{2, 2, 2, 2}));
  EXPECT_EQ(equal_split(2, 4), (std::vector<nnz_t>{0, 1, 0, 1}));
  const auto big = equal_split(1740000001, 7);
  EXPECT_EQ(std::accumulate(big.begin(), big.end(), nnz_t(0)), 1740000001);
  EXPECT_LE(*std::max_element(big.begin(), big.end()) - *std::min_element(big.begin(), big.end()),
            1);
}

TEST(PlanRanks, SharesSumToTheTotalAndBytesFallWithRanks) {
  const auto t = store({20000, 30000, 40000}, 20000000, 8);
  const Request r = cp(Backend::cpu, 8, 16);
  const auto plans = plan_for_ranks(
      r, t, {1, 2, 4}, [&](int P) { return split(t.nnz, P); },
      [&](int P) { return node_limits(64 * kGiB, P); }, TimeModel{});
  ASSERT_EQ(plans.size(), 3u);
  std::uint64_t last_host = ~std::uint64_t(0);
  for (const auto& p : plans) {
    ASSERT_TRUE(p.plan.fits) << p.plan.refusal;
    EXPECT_EQ(p.plan.tier, 1);
    ASSERT_EQ(p.block_nnz.size(), static_cast<std::size_t>(p.ranks));
    EXPECT_EQ(std::accumulate(p.block_nnz.begin(), p.block_nnz.end(), nnz_t(0)), t.nnz);
    EXPECT_EQ(p.plan.block_nnz, *std::max_element(p.block_nnz.begin(), p.block_nnz.end()));
    ASSERT_EQ(p.host_peak.size(), p.block_nnz.size());
    EXPECT_EQ(max_of(p.host_peak), p.plan.host_peak);  // the largest block's plan
    EXPECT_LT(max_of(p.host_peak), last_host) << p.ranks;
    last_host = max_of(p.host_peak);
    EXPECT_EQ(p.partition, "equal split");
    const auto j = p.to_json();
    EXPECT_EQ(j["ranks"], p.ranks);
    EXPECT_EQ(j["block_nnz"].size(), static_cast<std::size_t>(p.ranks));
    EXPECT_TRUE(j.contains("predicted"));
  }
}

TEST(PlanRanks, AStoredPartitionGivesEachRankItsBlock) {
  const auto t = store({2000, 3000, 4000}, 1000000, 8);
  const Request r = cp(Backend::cpu, 8, 8);
  auto blocks = [&](int P) {
    if (P == 2) return RankBlocks{{700000, 300000}, "stored partition"};
    return split(t.nnz, P);
  };
  const auto plans =
      plan_for_ranks(r, t, {2, 4}, blocks, [&](int P) { return node_limits(64 * kGiB, P); }, {});
  EXPECT_EQ(plans[0].partition, "stored partition");
  EXPECT_EQ(plans[0].plan.block_nnz, 700000);
  EXPECT_GT(plans[0].host_peak[0], plans[0].host_peak[1]);  // each rank its own block
  EXPECT_EQ(plans[1].partition, "equal split");
}

TEST(PlanRanks, RanksOnOtherNodesBringTheirOwnHostMemory) {
  // 20M double nonzeros need about 2.6 GB of data per rank in tier 1 on one rank.
  const auto t = store({20000, 30000, 40000}, 20000000, 8);
  auto blocks = [&](int P) { return split(t.nnz, P); };
  // One rank per 2 GiB node (--ranks-per-node 1): streamed on 1, resident on 4.
  const auto spread = plan_for_ranks(cp(Backend::cpu, 8, 16), t, {1, 4}, blocks,
                                     [&](int) { return node_limits(2 * kGiB, 1); }, {});
  EXPECT_GT(spread[0].plan.tier, 1) << spread[0].plan.describe();
  EXPECT_EQ(spread[1].plan.tier, 1) << spread[1].plan.describe();
  // All 4 on that node share its memory: not resident.
  const auto packed = plan_for_ranks(cp(Backend::cpu, 8, 16), t, {4}, blocks,
                                     [&](int P) { return node_limits(2 * kGiB, P); }, {});
  EXPECT_GT(packed[0].plan.tier, 1) << packed[0].plan.describe();
}

// The H200 runs (one 141 GB GPU per rank, about 135 GiB for data after the reserve),
// amazon shape, float, R = 32: measured device peaks 101.4 GB on 2 GPUs and 53.2 GB on 4
// (three tensor-core tile sets built). The plan per rank must not be under them.
TEST(PlanRanks, CudaTileSetsAreCountedPerRankAtTheirLargest) {
  const auto t = amazon();
  const Request r = cp(Backend::cuda, 4, 32);
  const auto plans = plan_for_ranks(
      r, t, {1, 2, 4}, [&](int P) { return split(t.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, TimeModel{});
  for (const auto& p : plans) {
    ASSERT_TRUE(p.plan.fits) << p.plan.refusal;
    EXPECT_EQ(p.plan.tier, 1) << p.ranks;
    EXPECT_LE(p.plan.device_peak, 135 * kGiB) << p.ranks;
    std::uint64_t tiles = 0, loop = 0;
    for (const auto& c : p.plan.components) {
      if (c.name.rfind("tensor-core tile sets", 0) == 0) tiles = c.device;
      if (c.name.rfind("factors", 0) == 0) loop = c.device;
    }
    EXPECT_GT(tiles, 0u) << p.plan.describe();
    // The backend's tensor limit leaves the loop and the libraries their room, so the tile
    // sets can never take it.
    EXPECT_LE(p.plan.device_budget + loop + (std::uint64_t(768) << 20), 135 * kGiB);
  }
  EXPECT_GE(plans[1].plan.device_peak, std::uint64_t(101400000000));
  EXPECT_GE(plans[2].plan.device_peak, std::uint64_t(53200000000));
  EXPECT_LT(plans[2].plan.device_peak, plans[1].plan.device_peak);
  EXPECT_LT(plans[1].plan.device_peak, plans[0].plan.device_peak);
  // With --tensor-cores off nothing is built and nothing counted.
  Request off = r;
  off.tensor_cores = false;
  const Plan q = make_plan(
      off,
      [&] {
        auto f = t;
        f.max_block_nnz = 435000000;
        return f;
      }(),
      node_limits(2000 * kGiB, 4, 135 * kGiB));
  EXPECT_LT(q.device_peak, plans[2].plan.device_peak);
  for (const auto& c : q.components) EXPECT_NE(c.name.rfind("tensor-core", 0), 0u) << c.name;
}

// A generated amazon-shaped tensor on one H200 (bench cp --generate: no read, the COO made
// and sorted on the device) ran in tier 1 at a 125 GB measured peak: the tile sets, which
// only take room the steady state leaves, must not make the plan refuse it (they did once,
// when their room was taken under the device sort's raised limit: 145.5 GB planned).
TEST(PlanRanks, TileSetsNeverPushAResidentGeneratedTensorOverTheCard) {
  TensorFacts t;  // as bench cp --generate makes them (drivers/bench/input.cpp)
  t.generated = true;
  t.dims = {4821207, 1774269, 1805187};
  t.nnz = 1740000000;
  t.unique = 1;
  Request r = cp(Backend::cuda, 4, 32);
  r.allreduce = true;
  r.force_tier = 1;
  r.extra.push_back({"bandwidth probe (2 arrays)", 0, std::uint64_t(4) << 30, 0, ""});
  const Plan p = make_plan(r, t, node_limits(512 * kGiB, 1, std::uint64_t(143550000000)));
  ASSERT_TRUE(p.fits) << p.refusal;
  EXPECT_EQ(p.tier, 1);
  EXPECT_LE(p.device_peak, std::uint64_t(143550000000));
}

TEST(PlanRanks, TheLayerStrategysCommunicatorsArePlannedPerMode) {
  // A store on 4 ranks; the run's NCCL communicator took 300 MB of device and 40 MB of host
  // memory at initialisation. The layer strategy splits one more per mode after the plan:
  // 3 x 300 MB and 3 x 40 MB more per rank.
  const TensorFacts t = store({120000, 90000, 80000}, 400000000);
  Request r = cp(Backend::cuda, 4, 32);
  r.ranks = 4;
  r.comm_device_bytes = 300000000;
  r.comm_host_bytes = 40000000;
  const Limits lim = node_limits(512 * kGiB, 4, 143 * kGiB);
  r.allreduce = true;
  const Plan all = make_plan(r, t, lim);
  r.allreduce = false;
  const Plan layer = make_plan(r, t, lim);
  ASSERT_TRUE(all.fits && layer.fits) << all.refusal << layer.refusal;
  EXPECT_EQ(layer.tier, all.tier);
  bool listed = false;
  for (const auto& c : layer.components)
    if (c.name.find("layer communicators") != std::string::npos) {
      listed = true;
      EXPECT_EQ(c.device, std::uint64_t(900000000));
      EXPECT_EQ(c.host, std::uint64_t(120000000));
    }
  EXPECT_TRUE(listed);
  EXPECT_GE(layer.host_peak, all.host_peak + 120000000);
  for (const auto& c : all.components)
    EXPECT_EQ(c.name.find("layer communicators"), std::string::npos) << c.name;
  // With the grid known, only the modes it cuts split a communicator: grid 1x1x4 splits
  // mode 2's alone (modes 0 and 1 have layers of every rank and use the run's), 2x2x1 two.
  auto layer_part = [&](const std::vector<int>& grid) {
    Request g = r;
    g.grid = grid;
    for (const auto& c : make_plan(g, t, lim).components)
      if (c.name.find("layer communicators") != std::string::npos) return c;
    return Component{};
  };
  EXPECT_EQ(layer_part({1, 1, 4}).device, std::uint64_t(300000000));
  EXPECT_EQ(layer_part({1, 1, 4}).host, std::uint64_t(40000000));
  EXPECT_EQ(layer_part({2, 2, 1}).device, std::uint64_t(600000000));
  EXPECT_EQ(layer_part({2, 2, 1}).host, std::uint64_t(80000000));
  EXPECT_EQ(layer_splits(r, 3), 3u);  // no grid: every mode
}

TEST(PlanRanks, TheIterationModelAndWhereMoreRanksStopHelping) {
  TimeModel m;
  m.bandwidth = 1000e9;
  m.link_bandwidth = 100e9;
  m.collective_latency = 10e-6;
  const Request r = cp(Backend::cuda, 4, 32);
  // One rank: no collective.
  const auto t = amazon();
  const auto one = estimate_cp_iteration(r, t, t.nnz, 1, m);
  EXPECT_EQ(one.comm_s, 0);
  EXPECT_DOUBLE_EQ(one.seconds, one.mttkrp_bytes / m.bandwidth);
  const double out = (4821207.0 + 1774269.0 + 1805187.0) * 32 * 4;
  EXPECT_DOUBLE_EQ(one.comm_bytes, out);
  // Two ranks: half the copies, a ring all-reduce of every mode's output, 3 latencies.
  const auto two = estimate_cp_iteration(r, t, t.nnz / 2, 2, m);
  EXPECT_DOUBLE_EQ(two.comm_s, out / m.link_bandwidth + 3 * m.collective_latency);
  EXPECT_LT(two.kernel_s, one.kernel_s);
  // Amazon: more GPUs pay up to 4; a small tensor with long modes is all collectives.
  const auto big = plan_for_ranks(
      r, t, {1, 2, 4}, [&](int P) { return split(t.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, m);
  EXPECT_GT(big[1].speedup, 1.5);
  EXPECT_GT(big[2].speedup, big[1].speedup);
  EXPECT_FALSE(big[1].no_gain);
  EXPECT_FALSE(big[2].no_gain);
  const auto small_t = store({1000000, 1000000, 1000000}, 2000000);
  const auto small = plan_for_ranks(
      r, small_t, {1, 2, 4}, [&](int P) { return split(small_t.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, m);
  EXPECT_TRUE(small[1].no_gain);
  EXPECT_LT(small[1].speedup, 1.0);
  const std::string d = describe_ranks(small, m);
  EXPECT_NE(d.find("more ranks will not help beyond 1"), std::string::npos) << d;
  EXPECT_NE(d.find("--link-bandwidth"), std::string::npos) << d;
  // Tucker has its own model (estimate_tucker_iteration): no comm on one rank.
  Request tk = r;
  tk.workload = Workload::tucker;
  tk.tucker_ranks = {8, 8, 8};
  const auto tucker = plan_for_ranks(
      tk, small_t, {1, 2}, [&](int P) { return split(small_t.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, m);
  EXPECT_TRUE(tucker[0].has_estimate);
  EXPECT_EQ(tucker[0].estimate.comm_s, 0);
  EXPECT_GT(tucker[1].estimate.comm_s, 0);
  EXPECT_TRUE(tucker[0].to_json().contains("predicted"));
}

TEST(PlanRanks, HostRanksShareTheirNodesMemory) {
  // CPU ranks of one node share its memory bandwidth (TimeModel::shared_memory, what
  // `tessera plan --backend cpu` uses): K ranks of a node each get 1/K of --bandwidth and
  // --link-bandwidth, so a kernel on half the nonzeros takes as long as on all of them;
  // ranks on other nodes bring their own.
  TimeModel m;
  m.bandwidth = 100e9;
  m.link_bandwidth = 100e9;
  m.collective_latency = 10e-6;
  m.shared_memory = true;
  const Request r = cp(Backend::cpu, 8, 16);
  const auto t = amazon();
  TimeModel gpu = m;
  gpu.shared_memory = false;
  const auto two = estimate_cp_iteration(r, t, t.nnz / 2, 2, m);
  const auto two_gpu = estimate_cp_iteration(r, t, t.nnz / 2, 2, gpu);
  EXPECT_DOUBLE_EQ(two.mttkrp_bytes, two_gpu.mttkrp_bytes);
  EXPECT_DOUBLE_EQ(two.kernel_s, 2 * two_gpu.kernel_s);
  EXPECT_DOUBLE_EQ(two.comm_s - 3 * m.collective_latency,
                   2 * (two_gpu.comm_s - 3 * m.collective_latency));
  EXPECT_DOUBLE_EQ(rank_model(m, 4).bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(rank_model(m, 4).link_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(rank_model(m, 4).inter_bandwidth, m.inter_bandwidth / 4);  // the node's port
  EXPECT_DOUBLE_EQ(rank_model(gpu, 4).bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(rank_model(gpu, 4).inter_bandwidth, gpu.inter_bandwidth);
  // One rank per node: nothing shared.
  m.gpus_per_node = 1;
  gpu.gpus_per_node = 1;
  const auto spread = estimate_cp_iteration(r, t, t.nnz / 2, 2, m);
  EXPECT_DOUBLE_EQ(spread.kernel_s, estimate_cp_iteration(r, t, t.nnz / 2, 2, gpu).kernel_s);
  // On one node more ranks do not pay: the plan says so.
  m.gpus_per_node = 0;
  const auto plans = plan_for_ranks(
      r, t, {1, 2, 4}, [&](int P) { return split(t.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, m);
  EXPECT_TRUE(plans[1].no_gain);
  const std::string d = describe_ranks(plans, m);
  EXPECT_NE(d.find("add no bandwidth"), std::string::npos) << d;
}

// ---- several nodes (issue 38): plan/comm_model.hpp and the estimates over it ----

TEST(PlanNodes, OneNodeIsTheSingleRingModel) {
  TimeModel m;  // defaults: 300 GB/s, 20 us inside the node
  const Request r = cp(Backend::cuda, 4, 32);
  const auto t = amazon();
  const double out = (4821207.0 + 1774269.0 + 1805187.0) * 32 * 4;
  const auto flat = estimate_cp_iteration(r, t, t.nnz / 4, 4, m);
  EXPECT_DOUBLE_EQ(flat.comm_s, 2.0 * 3 / 4 * out / m.link_bandwidth + 3 * m.collective_latency);
  m.gpus_per_node = 4;  // the same 4 ranks, declared as one node of 4: the same figure
  const auto node = estimate_cp_iteration(r, t, t.nnz / 4, 4, m);
  EXPECT_DOUBLE_EQ(node.comm_s, flat.comm_s);
  EXPECT_EQ(node.nodes, 1);
  EXPECT_EQ(node.link.inter_bytes, 0);
  m.gpus_per_node = 8;  // a node larger than the run: still one node
  EXPECT_DOUBLE_EQ(estimate_cp_iteration(r, t, t.nnz / 4, 4, m).comm_s, flat.comm_s);
}

TEST(PlanNodes, HierarchicalAllreduceByHand) {
  TimeModel m;
  m.link_bandwidth = 300e9;
  m.collective_latency = 20e-6;
  m.inter_bandwidth = 25e9;
  m.inter_latency = 50e-6;
  // 1 GB on 16 nodes x 4: reduce-scatter and all-gather in the node, 3/4 GB each over NVLink;
  // the node's quarter (0.25 GB) all-reduced by a ring of 16: 2 x 15/16 x 0.25 GB.
  const LinkTime t = allreduce_cost(1e9, Group{4, 16});
  EXPECT_DOUBLE_EQ(t.intra_bytes, 1.5e9);
  EXPECT_DOUBLE_EQ(t.inter_bytes, 0.46875e9);
  EXPECT_EQ(t.intra_steps, 2);
  EXPECT_EQ(t.inter_steps, 1);
  EXPECT_NEAR(t.seconds(m), 5e-3 + 18.75e-3 + 40e-6 + 50e-6, 1e-12);
  // Reduce-scatter: (G-1)/G inside, (K-1)/K of the node's share across; all-gather alike.
  const LinkTime rs = reduce_scatter_cost(1e9, Group{4, 16});
  EXPECT_DOUBLE_EQ(rs.intra_bytes, 0.75e9);
  EXPECT_DOUBLE_EQ(rs.inter_bytes, 15.0 / 16 * 0.25e9);
  // One GPU per node: the whole vector crosses the network.
  const LinkTime one = allreduce_cost(1e9, Group{1, 2});
  EXPECT_EQ(one.intra_bytes, 0);
  EXPECT_DOUBLE_EQ(one.inter_bytes, 1e9);
  // Alltoallv over 2 nodes x 4: 3 of the 7 peers share the node.
  const LinkTime a2a = alltoall_cost(7e6, Group{4, 2});
  EXPECT_DOUBLE_EQ(a2a.intra_bytes, 3e6);
  EXPECT_DOUBLE_EQ(a2a.inter_bytes, 4e6);
  EXPECT_EQ(allreduce_cost(1e9, Group{1, 1}).seconds(m), 0);
}

TEST(PlanNodes, MoreNodesCostMoreCommAndFasterLinksLess) {
  TimeModel m;
  m.gpus_per_node = 4;
  m.kernel_ratio = 5;
  const Request r = cp(Backend::cuda, 4, 32);
  const auto t = amazon();
  double last_comm = 0, last_kernel = 1e30;
  for (const int nodes : {1, 2, 4, 8, 16, 32, 64}) {
    const int P = 4 * nodes;
    const auto e = estimate_cp_iteration(r, t, t.nnz / P, P, m);
    EXPECT_EQ(e.nodes, nodes);
    EXPECT_GE(e.comm_s, last_comm) << nodes;
    EXPECT_LT(e.kernel_s, last_kernel) << nodes;
    EXPECT_DOUBLE_EQ(e.kernel_s, 5 * e.floor_s);
    last_comm = e.comm_s;
    last_kernel = e.kernel_s;
  }
  TimeModel fast = m;
  fast.inter_bandwidth = 50e9;
  EXPECT_LT(estimate_cp_iteration(r, t, t.nnz / 64, 64, fast).comm_s,
            estimate_cp_iteration(r, t, t.nnz / 64, 64, m).comm_s);
  // The layer strategy on the same nodes: less network traffic than the all-reduce.
  const auto lay = estimate_cp_layer_iteration(r, t, t.nnz / 64, {16, 2, 2}, m);
  const auto all = estimate_cp_iteration(r, t, t.nnz / 64, 64, m);
  EXPECT_EQ(lay.nodes, 16);
  EXPECT_LT(lay.link.inter_bytes, all.link.inter_bytes);
  EXPECT_GT(lay.grid_cost_s, 0);
  EXPECT_DOUBLE_EQ(lay.seconds, lay.kernel_s + lay.comm_s + lay.grid_cost_s);
}

TEST(PlanNodes, LayersOfTheGridOnNodes) {
  // Ranks numbered row-major (the last mode fastest): grid 16x2x2, 4 ranks per node.
  const Group l0 = layer_group({16, 2, 2}, 0, 4);  // c0 = 0: ranks 0-3, one node
  EXPECT_EQ(l0.nodes, 1);
  EXPECT_EQ(l0.per_node, 4);
  const Group l2 = layer_group({16, 2, 2}, 2, 4);  // c2 = 0: every other rank
  EXPECT_EQ(l2.nodes, 16);
  EXPECT_EQ(l2.per_node, 2);
  const Group flat = layer_group({1, 1, 4}, 2, 0);  // one node: a layer of one rank
  EXPECT_EQ(flat.size(), 1);
}

// The dense work (--dense-ms, a one-rank run's) on P ranks: --dense-fixed-ms on every rank,
// the rest in proportion to the factor rows the rank solves. amazon R32 float: every mode is
// over the 32 MiB bound, so the allreduce strategy splits them all; nell-2's modes are under
// it and solved whole on every rank; the layer strategy always splits. Tucker keeps it whole
// and pays its host-waited collectives.
TEST(PlanNodes, DenseWorkFollowsTheRowsARankSolves) {
  TimeModel m;
  m.dense_s = 5.6e-3;
  m.dense_fixed_s = 0.1e-3;
  const Request r = cp(Backend::cuda, 4, 32);
  const auto t = amazon();
  const double rows = 4821207.0 + 1774269 + 1805187;
  EXPECT_DOUBLE_EQ(estimate_cp_iteration(r, t, t.nnz, 1, m).dense_s, 5.6e-3);
  const auto four = estimate_cp_iteration(r, t, t.nnz / 4, 4, m);
  const double quarter =
      std::ceil(4821207.0 / 4) + std::ceil(1774269.0 / 4) + std::ceil(1805187.0 / 4);
  EXPECT_DOUBLE_EQ(four.dense_s, 0.1e-3 + 5.5e-3 * quarter / rows);
  EXPECT_DOUBLE_EQ(four.seconds, four.kernel_s + four.comm_s + four.dense_s);
  const auto nell = store({12092, 9184, 28818}, 76900000);
  EXPECT_DOUBLE_EQ(estimate_cp_iteration(r, nell, nell.nnz / 4, 4, m).dense_s, 5.6e-3);
  const auto lay = estimate_cp_layer_iteration(r, nell, nell.nnz / 4, {2, 1, 2}, m);
  const double nell_rows = 12092.0 + 9184 + 28818;
  EXPECT_DOUBLE_EQ(lay.dense_s,
                   0.1e-3 + 5.5e-3 * (3023.0 + 2296 + std::ceil(28818.0 / 4)) / nell_rows);
  // A bound of 0 splits nell-2's modes too; a fixed part over the whole is the whole.
  TimeModel low = m;
  low.whole_rows_max_bytes = 0;
  EXPECT_DOUBLE_EQ(estimate_cp_iteration(r, nell, nell.nnz / 4, 4, low).dense_s, lay.dense_s);
  low.dense_fixed_s = 1;
  EXPECT_DOUBLE_EQ(estimate_cp_iteration(r, nell, nell.nnz / 4, 4, low).dense_s, 5.6e-3);
  // Tucker: the eigen-solves on every rank; with the owners' exchange, 13 collectives the
  // host waits for on 3 modes.
  Request tk = cp(Backend::cuda, 4, 16);
  tk.workload = Workload::tucker;
  tk.tucker_ranks = {16, 16, 16};
  tk.tucker_rows = TuckerRows::owners;
  const auto t1 = estimate_tucker_iteration(tk, nell, nell.nnz, 1, m);
  EXPECT_EQ(t1.comm_s, 0);
  EXPECT_DOUBLE_EQ(t1.dense_s, 5.6e-3);
  const auto t4 = estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, m);
  EXPECT_DOUBLE_EQ(t4.dense_s, 5.6e-3);
  EXPECT_EQ(t4.host_calls, 13);
  EXPECT_DOUBLE_EQ(t4.comm_s, t4.link.seconds(m) + 13 * m.host_wait);
  TimeModel no_wait = m;
  no_wait.host_wait = 0;
  EXPECT_DOUBLE_EQ(estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, no_wait).comm_s,
                   t4.link.seconds(m));
}

/// Tucker's rows on several ranks follow the run's rule (tucker_rows_rule, the one
/// algo::detail::choose_rows applies): auto all-reduces the whole Y_(n) of a mode on cuda with
/// --svd gram on one node where it is at most 64 MiB, and the owners' exchange elsewhere.
TEST(PlanNodes, TuckerRowsFollowTheRunsRule) {
  const TimeModel m;
  Request tk = cp(Backend::cuda, 4, 16);
  tk.workload = Workload::tucker;
  tk.tucker_ranks = {16, 16, 16};
  const auto nell = store({12092, 9184, 28818}, 76900000);
  const Group four{4, 1};
  // nell-2 on 4 GPUs: every mode all-reduced (at most 29.5 MB each); no all-gather, no core
  // sum, and the host waits once (||G||^2): the blocks touch every row.
  const auto a4 = estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, m);
  EXPECT_EQ(a4.rows, "allreduce,allreduce,allreduce");
  EXPECT_NE(a4.rows_why.find("auto: allreduce"), std::string::npos) << a4.rows_why;
  EXPECT_EQ(a4.host_calls, 1);
  LinkTime link;
  for (const double d : {12092.0, 9184.0, 28818.0}) link += allreduce_cost(d * 256 * 4, four);
  link += small_allreduce_cost(four);
  EXPECT_DOUBLE_EQ(a4.comm_s, link.seconds(m) + m.host_wait);
  EXPECT_DOUBLE_EQ(a4.comm_bytes, (12092.0 + 9184 + 28818) * 256 * 4);
  // One rank names every mode's (tessera plan --ranks 16), as the run reads it.
  Request one = tk;
  one.tucker_ranks = {16};
  const auto o1 = estimate_tucker_iteration(one, nell, nell.nnz / 4, 4, m);
  EXPECT_EQ(o1.rows, a4.rows);
  EXPECT_DOUBLE_EQ(o1.comm_s, a4.comm_s);
  EXPECT_DOUBLE_EQ(o1.seconds, a4.seconds);
  // The same through plan_for_ranks: the record names the modes and why.
  const auto plans = plan_for_ranks(
      tk, nell, {1, 4}, [&](int P) { return split(nell.nnz, P); },
      [&](int P) { return node_limits(2000 * kGiB, P, 135 * kGiB); }, m);
  EXPECT_FALSE(plans[0].to_json()["predicted"].contains("ttmc_rows_strategy"));
  EXPECT_EQ(plans[1].to_json()["predicted"]["ttmc_rows_strategy"]["modes"],
            "allreduce,allreduce,allreduce");
  EXPECT_NE(describe_ranks(plans, m).find("TTMc rows: allreduce,allreduce,allreduce"),
            std::string::npos);
  // All-reduced rows cost less than the owners' exchange here (5 collectives a mode).
  tk.tucker_rows = TuckerRows::owners;
  const auto o4 = estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, m);
  EXPECT_EQ(o4.rows, "owners,owners,owners");
  EXPECT_EQ(o4.host_calls, 13);
  EXPECT_LT(a4.comm_s, o4.comm_s);
  // auto is owners on a host backend, with --svd subspace, and across nodes (relays).
  tk.tucker_rows = TuckerRows::automatic;
  Request host = tk;
  host.backend = Backend::cpu;
  const auto h = estimate_tucker_iteration(host, nell, nell.nnz / 4, 4, m);
  EXPECT_EQ(h.rows, "owners,owners,owners");
  EXPECT_NE(h.rows_why.find("no collectives in a device stream"), std::string::npos);
  Request sub = tk;
  sub.tucker_svd = "subspace";
  EXPECT_EQ(estimate_tucker_iteration(sub, nell, nell.nnz / 4, 4, m).rows, "owners,owners,owners");
  TimeModel nodes = m;
  nodes.gpus_per_node = 4;
  EXPECT_EQ(estimate_tucker_iteration(tk, nell, nell.nnz / 8, 8, nodes).rows,
            "owners,owners,owners");
  // --comm-strategy allreduce: every mode, whatever its size; auto: a mode over 64 MiB
  // (300000 x 256 floats, 307 MB) keeps the owners' exchange (4 host waits).
  const auto big = store({300000, 9184, 28818}, 76900000);
  const auto mixed = estimate_tucker_iteration(tk, big, big.nnz / 4, 4, m);
  EXPECT_EQ(mixed.rows, "owners,allreduce,allreduce");
  EXPECT_EQ(mixed.host_calls, 4 + 1);
  Request all = tk;
  all.tucker_rows = TuckerRows::allreduce;
  EXPECT_EQ(estimate_tucker_iteration(all, big, big.nnz / 4, 4, m).rows,
            "allreduce,allreduce,allreduce");
  // A block with fewer nonzeros than a mode's rows adds its rows at their labels after one
  // host wait for the row map: here on modes 0 and 2.
  const auto sparse = store({60000, 50, 30000}, 80000);
  EXPECT_EQ(estimate_tucker_iteration(tk, sparse, 20000, 4, m).host_calls, 2 + 1);
  // The plan per rank: an all-reduced mode holds the whole Y_(n) beside its TTMc output and
  // the dense stage's three double arrays on all rows, where that is more than the three
  // outputs the model counts otherwise (here 60000 rows against 10000 a block touches).
  Request two = tk;
  two.ranks = 2;
  TensorFacts f = sparse;
  f.max_block_nnz = 10000;
  const Limits lim = node_limits(64 * kGiB, 2, 80 * kGiB);
  const Plan whole = make_plan(two, f, lim);
  two.tucker_rows = TuckerRows::owners;
  const Plan owners = make_plan(two, f, lim);
  ASSERT_TRUE(whole.fits && owners.fits);
  auto loop = [](const Plan& p) {
    for (const auto& c : p.components)
      if (c.name.rfind("factors", 0) == 0) return c.device;
    return std::uint64_t(0);
  };
  const std::uint64_t out = 10000ull * 256 * 4;
  const std::uint64_t all_rows = (10000ull + 60000) * 256 * 4 + 60000ull * 16 * 3 * 8;
  EXPECT_EQ(loop(whole) - loop(owners), all_rows - 3 * out);
  EXPECT_GE(whole.device_peak, owners.device_peak);
}

TEST(PlanNodes, TuckerAndSptcExchanges) {
  TimeModel m;
  m.gpus_per_node = 4;
  Request tk = cp(Backend::cuda, 4, 16);
  tk.workload = Workload::tucker;
  tk.tucker_ranks = {16, 16, 16};
  const auto nell = store({12092, 9184, 28818}, 76900000);
  const auto one = estimate_tucker_iteration(tk, nell, nell.nnz, 1, m);
  EXPECT_EQ(one.comm_s, 0);
  // Every row of every mode is touched: the rows are I_n x 256 floats.
  EXPECT_DOUBLE_EQ(one.comm_bytes, (12092.0 + 9184 + 28818) * 256 * 4);
  const auto four = estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, m);
  const auto eight = estimate_tucker_iteration(tk, nell, nell.nnz / 8, 8, m);
  EXPECT_GT(four.comm_s, 0);
  EXPECT_EQ(four.link.inter_bytes, 0);
  EXPECT_GT(eight.link.inter_bytes, 0);
  // 2 nodes x 4: the rows go through a relay on their node, so each node sends its
  // distinct rows (every row of a mode) once, a quarter from each rank, half of them to
  // the other node; plus the factors' all-gather and the core's all-reduce across.
  double network = 0;
  for (const double d : {12092.0, 9184.0, 28818.0})
    network += 0.5 * d * 256 * 4 / 4 + 0.5 * d * 16 * 4 / 4;
  network += 2 * 0.5 * 4096 * 4 / 4;
  EXPECT_DOUBLE_EQ(eight.link.inter_bytes, network);
  m.dense_s = 6e-3;  // the eigen-solves: a constant per rank
  EXPECT_DOUBLE_EQ(estimate_tucker_iteration(tk, nell, nell.nnz / 4, 4, m).seconds,
                   four.seconds + 6e-3);
  // SpTC: the row side routed, the column side gathered whole; products divided.
  const auto s1 = estimate_sptc(2e7, 3, 1e7, 3, 1.2e9, 8, 1e10, 1, m);
  EXPECT_EQ(s1.comm_s, 0);
  EXPECT_DOUBLE_EQ(s1.kernel_s, 0.12);
  const auto s4 = estimate_sptc(2e7, 3, 1e7, 3, 1.2e9, 8, 1e10, 4, m);
  EXPECT_DOUBLE_EQ(s4.route_bytes, 0.75 * 2e7 * 20 / 4);
  EXPECT_DOUBLE_EQ(s4.replicate_bytes, 1e7 * 20);
  EXPECT_DOUBLE_EQ(s4.kernel_s, 0.03);
  // tessera plan --workload contract prints the model and records one entry per count.
  SptcFacts f;
  f.x_nnz = 2e7;
  f.y_nnz = 1e7;
  f.products = 1.2e9;
  f.products_per_s = 1e10;
  nlohmann::json j;
  const std::string d = describe_sptc(f, {1, 4, 8}, m, &j);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_DOUBLE_EQ(j[1]["seconds"].get<double>(), s4.seconds);
  EXPECT_EQ(j[2]["nodes"], 2);
  EXPECT_NE(d.find("--products-rate"), std::string::npos) << d;
}

TEST(PlanRanks, ACardNoGpuHereShowsIsPlannedFromItsBudget) {
  Limits none = node_limits(64 * kGiB, 1);
  none.device = {0, "no GPU is visible here (--device-budget names the card to plan for)"};
  Request r = cp(Backend::cuda, 4, 16);
  const auto t = store({2000, 3000, 4000}, 10000000);
  const Plan refused = make_plan(r, t, none);
  EXPECT_FALSE(refused.fits);
  EXPECT_NE(refused.refusal.find("--device-budget"), std::string::npos) << refused.refusal;
  r.device_budget = 80 * kGiB;
  const Plan p = make_plan(r, t, none);
  ASSERT_TRUE(p.fits) << p.refusal;
  EXPECT_EQ(p.tier, 1);
  EXPECT_LE(p.device_peak, 80 * kGiB);
  // The card named is the plan's device limit, with the option as its source.
  EXPECT_EQ(p.limits.device.bytes, 80 * kGiB);
  EXPECT_EQ(p.limits.device.source.rfind("--device-budget", 0), 0u) << p.limits.device.source;
  EXPECT_NE(p.describe().find("device  80.00 GiB  (--device-budget"), std::string::npos)
      << p.describe();
}

}  // namespace
}  // namespace tessera::plan
