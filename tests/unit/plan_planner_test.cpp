// The planner's choices (plan::make_plan is pure): tiers under budgets, refusals that name
// the limit, chunking, and the byte model on the shapes the issue names.
#include <gtest/gtest.h>

#include "plan/planner.hpp"

namespace tessera::plan {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t(1) << 30;

Limits limits(std::uint64_t host, std::uint64_t device = 0) {
  Limits l;
  l.host = {host, "test host limit"};
  if (device) l.device = {device, "test device limit"};
  l.disk = {1000 * kGiB, "test disk"};
  l.baseline_host = 64 << 20;
  return l;
}

TensorFacts store(std::vector<std::uint64_t> dims, nnz_t nnz, int unique = 1, int vbytes = 4) {
  TensorFacts t;
  t.path = "x.h5";
  t.store = true;
  t.unique = unique;
  t.dims = std::move(dims);
  t.nnz = nnz;
  t.stored_value_bytes = vbytes;
  t.store_chunk_elems = 1 << 20;
  t.file_bytes = coo_bytes(nnz, static_cast<int>(t.dims.size()), vbytes);
  return t;
}

TensorFacts amazon(nnz_t nnz = 1740000000) {
  return store({4821207, 1774269, 1805187}, nnz, 1, 4);
}

Request cuda_cp(int R = 32) {
  Request r;
  r.workload = Workload::cp;
  r.backend = Backend::cuda;
  r.value_bytes = 4;
  r.cp_rank = R;
  return r;
}

TEST(Planner, SmallTensorIsResidentOnEveryBackend) {
  const auto t = store({100, 200, 300}, 100000);
  for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda}) {
    Request r;
    r.backend = b;
    const Plan p = make_plan(r, t, limits(8 * kGiB, 8 * kGiB));
    EXPECT_TRUE(p.fits);
    EXPECT_EQ(p.tier, 1);
    EXPECT_GT(p.host_peak, coo_bytes(100000, 3, 8));
    EXPECT_EQ(p.chunk_nnz, 0);
  }
}

TEST(Planner, HostBudgetForcesTheStreamedTiers) {
  const auto t = store({2000, 3000, 4000}, 20000000);
  Request r;
  r.backend = Backend::cpu;
  const Plan p1 = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(p1.fits);
  EXPECT_EQ(p1.tier, 1);
  // Under the CSF's needs but over one raw copy: tier 2.
  const std::uint64_t raw = coo_bytes(20000000, 3, 8);
  // Budgets bound the data: the planned peak less the baseline and the fixed slack.
  const std::uint64_t fixed = limits(0).baseline_host + kHostSlackBytes;
  r.host_budget = p1.host_peak - fixed - 1;
  const Plan p2 = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(p2.fits) << p2.refusal;
  EXPECT_EQ(p2.tier, 2);
  EXPECT_LE(p2.host_peak - fixed, *r.host_budget);
  EXPECT_GT(p2.chunks, 1);
  // Under one raw copy: tier 3, with a read volume of N passes over the stored block.
  r.host_budget = raw / 2;
  const Plan p3 = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(p3.fits) << p3.refusal;
  EXPECT_EQ(p3.tier, 3);
  EXPECT_DOUBLE_EQ(p3.read_bytes_per_iteration,
                   3.0 * static_cast<double>(coo_bytes(20000000, 3, 4)));
  // Under what even streaming needs: refused, naming the limit.
  r.host_budget = 1 << 20;
  const Plan p0 = make_plan(r, t, limits(64 * kGiB));
  EXPECT_FALSE(p0.fits);
  EXPECT_EQ(p0.tier, 0);
  EXPECT_NE(p0.refusal.find("--host-budget"), std::string::npos) << p0.refusal;
}

TEST(Planner, ABudgetLargerThanTheMachineIsRefused) {
  Request r;
  r.backend = Backend::cpu;
  r.host_budget = 10 * kGiB;
  const Plan p = make_plan(r, store({10, 20, 30}, 1000), limits(8 * kGiB));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.refusal.find("--host-budget"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find("test host limit"), std::string::npos) << p.refusal;
  Request c = cuda_cp();
  c.device_budget = 100 * kGiB;
  const Plan q = make_plan(c, amazon(), limits(120 * kGiB, 76 * kGiB));
  EXPECT_FALSE(q.fits);
  EXPECT_NE(q.refusal.find("--device-budget"), std::string::npos) << q.refusal;
  // Within the machine, both are taken as given.
  c.device_budget = 40 * kGiB;
  EXPECT_TRUE(make_plan(c, amazon(), limits(120 * kGiB, 76 * kGiB)).fits);
}

TEST(Planner, TierThreeNeedsAStoreWithUniqueCoordinates) {
  Request r;
  r.backend = Backend::cpu;
  r.force_tier = 3;
  for (int unique : {0, -1}) {
    const Plan p = make_plan(r, store({10, 20, 30}, 1000, unique), limits(8 * kGiB));
    EXPECT_FALSE(p.fits);
    EXPECT_NE(p.refusal.find("tessera convert"), std::string::npos) << p.refusal;
  }
  const Plan ok = make_plan(r, store({10, 20, 30}, 1000, 1), limits(8 * kGiB));
  EXPECT_TRUE(ok.fits);
  EXPECT_EQ(ok.tier, 3);
  TensorFacts text;
  text.text = true;
  text.dims = {10, 20, 30};
  text.nnz = 1000;
  const Plan t = make_plan(r, text, limits(8 * kGiB));
  EXPECT_FALSE(t.fits);
}

TEST(Planner, StreamedTiersNeedTheAllreduceStrategy) {
  Request r;
  r.backend = Backend::cpu;
  r.allreduce = false;
  r.host_budget = 200 << 20;
  const Plan p = make_plan(r, store({2000, 3000, 4000}, 20000000), limits(64 * kGiB));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.refusal.find("allreduce"), std::string::npos) << p.refusal;
}

TEST(Planner, ChunksFollowTheRequestAndTheStoreChunks) {
  Request r;
  r.backend = Backend::cpu;
  r.force_tier = 3;
  const auto t = store({2000, 3000, 4000}, 20000000);
  const Plan p = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chunk_nnz % (1 << 20), 0);
  EXPECT_LE(p.chunk_nnz, kDefaultChunkNnz);
  r.stream_chunk = 12345;
  const Plan q = make_plan(r, t, limits(64 * kGiB));
  EXPECT_EQ(q.chunk_nnz, 12345);
  EXPECT_EQ(q.chunks, (20000000 + 12344) / 12345);
}

TEST(Planner, TierThreeDropsThePageCacheOnlyForStoresOverTheNodesMemory) {
  Request r;
  r.backend = Backend::cpu;
  r.force_tier = 3;
  // 1e8 nonzeros of order 3, float32: 1.6 GB per pass.
  const auto t = store({2000, 3000, 4000}, 100000000);
  Plan p = make_plan(r, t, limits(64 * kGiB));  // fits memory: kept
  ASSERT_TRUE(p.fits);
  EXPECT_FALSE(p.drop_behind);
  EXPECT_NE(p.read_cache_why.find("fits its share"), std::string::npos) << p.read_cache_why;
  EXPECT_EQ(p.to_json().at("read_cache"), "keep");
  // A budget below the store does not change it (the machine's memory decides) ...
  r.host_budget = kGiB;
  p = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(p.fits);
  EXPECT_FALSE(p.drop_behind);
  // ... a node whose memory is below the store's range does: dropped behind.
  r.host_budget.reset();
  p = make_plan(r, t, limits(kGiB));
  ASSERT_TRUE(p.fits) << p.refusal;
  EXPECT_TRUE(p.drop_behind);
  EXPECT_NE(p.read_cache_why.find("larger than its share"), std::string::npos) << p.read_cache_why;
  EXPECT_NE(p.describe().find("page cache: dropped behind the reads"), std::string::npos)
      << p.describe();
  EXPECT_EQ(p.to_json().at("read_cache"), "drop");
  // Forced either way.
  r.read_cache = ReadCache::keep;
  EXPECT_FALSE(make_plan(r, t, limits(kGiB)).drop_behind);
  r.read_cache = ReadCache::drop;
  EXPECT_TRUE(make_plan(r, t, limits(64 * kGiB)).drop_behind);
  // Other tiers: no page-cache policy.
  r.force_tier = 0;
  r.read_cache = ReadCache::automatic;
  EXPECT_TRUE(make_plan(r, t, limits(64 * kGiB)).to_json().at("read_cache").is_null());
}

// The node: one H100 80 GB (about 76 GB usable for the tensor after the reserve)
// and 128 GB of host memory (about 120 GB available), amazon shape, float, R = 32.
TEST(Planner, AmazonShapeOnAnH100NodeStreamsFromHostMemory) {
  const Plan p = make_plan(cuda_cp(), amazon(), limits(120 * kGiB, 76 * kGiB));
  ASSERT_TRUE(p.fits) << p.refusal;
  // Tier 1 needs one sorted copy per mode on the device: 3 x 27.8 GB > 76 GB.
  EXPECT_EQ(p.tier, 2) << p.describe();
  EXPECT_LT(p.host_peak, 120 * kGiB);
  EXPECT_GT(p.host_peak, coo_bytes(1740000000, 3, 4));  // at least the raw block
  EXPECT_DOUBLE_EQ(p.copy_bytes_per_iteration,
                   3.0 * static_cast<double>(coo_bytes(1740000000, 3, 4)));
  // The same on the 141 GB H200 (about 135 GB usable): resident.
  const Plan h200 = make_plan(cuda_cp(), amazon(), limits(120 * kGiB, 135 * kGiB));
  EXPECT_EQ(h200.tier, 1) << h200.describe();
  // A 40 GB device budget (an A100 40 GB): still host-streamed.
  Request r = cuda_cp();
  r.device_budget = 40 * kGiB;
  const Plan a100 = make_plan(r, amazon(), limits(120 * kGiB, 76 * kGiB));
  EXPECT_EQ(a100.tier, 2);
  EXPECT_LE(a100.device_peak, 40 * kGiB);
  // A 16 GB host budget: streamed from disk.
  r.host_budget = 16 * kGiB;
  const Plan small = make_plan(r, amazon(), limits(120 * kGiB, 76 * kGiB));
  EXPECT_EQ(small.tier, 3) << small.describe();
  EXPECT_LE(small.host_peak, 16 * kGiB + limits(0).baseline_host + kHostSlackBytes);
}

// The amazon store read whole and dealt over 2 H200s for the layer strategy, 16 threads per
// rank (session 54, `tessera cp --deal`): the host peaked at 64.26 GiB while the planner
// counted 57.14. The sort-and-merge of the block (65-bit keys: 32-byte entries) runs in
// libstdc++'s parallel mergesort on several threads, which copies every entry.
TEST(Planner, ParallelSortOfTheBlockIsCounted) {
  Request r = cuda_cp();
  r.ranks = 2;
  r.allreduce = false;  // the layer strategy: read whole, dealt, exchanged, merged
  r.relabel = true;
  r.grid = {2, 1, 1};
  TensorFacts t = amazon();
  t.max_block_nnz = 887451634;  // the dealt blocks' largest, as the run planned again
  r.threads = 1;
  const Plan one = make_plan(r, t, limits(200 * kGiB, 135 * kGiB));
  r.threads = 16;
  const Plan many = make_plan(r, t, limits(200 * kGiB, 135 * kGiB));
  ASSERT_TRUE(one.fits && many.fits) << many.refusal;
  EXPECT_EQ(many.tier, 1);
  // The merge binds: the copy adds 16 bytes per nonzero (64 against 48 with one thread).
  EXPECT_EQ(many.host_peak - one.host_peak, std::uint64_t(887451634) * 16) << many.describe();
  EXPECT_GE(many.host_peak, static_cast<std::uint64_t>(64.26 * kGiB)) << many.describe();
}

TEST(Planner, GeneratedTensorsAreResidentOrRefused) {
  TensorFacts g;
  g.generated = true;
  g.dims = {4821207, 1774269, 1805187};
  g.nnz = 1740000000;
  Request r = cuda_cp();
  r.workload = Workload::mttkrp;
  const Plan p = make_plan(r, g, limits(120 * kGiB, 76 * kGiB));
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.refusal.find("device memory"), std::string::npos) << p.refusal;
  const Plan ok = make_plan(r, g, limits(120 * kGiB, 135 * kGiB));
  EXPECT_TRUE(ok.fits);
  EXPECT_EQ(ok.tier, 1);
}

// Arrays already distributed into the process (the Python module): their block is in the
// measured baseline and outside the limits, so neither it nor a read is listed again.
TEST(Planner, AHeldTensorIsNotCountedTwice) {
  TensorFacts t;
  t.dims = {100000, 20000, 3000};
  t.nnz = 50000000;
  t.unique = 1;
  Request r;
  r.backend = Backend::cpu;
  r.cp_rank = 16;
  const Plan read = make_plan(r, t, limits(64 * kGiB));
  t.held = true;
  const Plan held = make_plan(r, t, limits(64 * kGiB));
  ASSERT_TRUE(read.fits && held.fits) << held.refusal;
  EXPECT_GE(read.host_peak - held.host_peak, coo_bytes(t.nnz, 3, 8)) << held.describe();
  for (const auto& c : held.components) {
    if (c.name.rfind("input block", 0) == 0 || c.name.rfind("load transients", 0) == 0) {
      EXPECT_EQ(c.host, 0u) << c.name;
    }
  }
}

TEST(Planner, RecordAndDescriptionNameTheLimits) {
  const Plan p = make_plan(cuda_cp(), amazon(), limits(120 * kGiB, 76 * kGiB));
  const auto j = p.to_json();
  EXPECT_EQ(j["tier"], 2);
  EXPECT_EQ(j["limits"]["host"]["source"], "test host limit");
  EXPECT_EQ(j["limits"]["device"]["source"], "test device limit");
  EXPECT_GT(j["planned_peak_host_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_FALSE(j["components"].empty());
  const std::string d = p.describe();
  EXPECT_NE(d.find("test host limit"), std::string::npos);
  EXPECT_NE(d.find("chosen: tier 2"), std::string::npos) << d;
  std::uint64_t host = 0, device = 0;
  for (const auto& c : p.components) {
    host += c.host;
    device += c.device;
  }
  EXPECT_EQ(host, p.host_peak);
  EXPECT_EQ(device, p.device_peak);
}

TEST(Planner, TuckerCountsTheSemiSparseOutput) {
  Request r;
  r.backend = Backend::cpu;
  r.workload = Workload::tucker;
  r.tucker_ranks = {16, 16, 16};
  const auto t = store({10000, 10000, 10000}, 1000000);
  const Plan p = make_plan(r, t, limits(64 * kGiB));
  Request c;
  c.backend = Backend::cpu;
  c.cp_rank = 16;
  const Plan q = make_plan(c, t, limits(64 * kGiB));
  // 256 columns per output row against 16: Tucker's loop needs more.
  EXPECT_GT(p.host_peak, q.host_peak);
}

/// The part of a plan named `name` (null if absent).
const Component* part(const Plan& p, const std::string& name) {
  for (const auto& c : p.components)
    if (c.name.rfind(name, 0) == 0) return &c;
  return nullptr;
}

TEST(Planner, GcpSampleCountsFollowTheOptionsAndTheirDefaults) {
  const GcpSamples d = gcp_sample_counts(10000000, 0, 0, 0);
  EXPECT_EQ(d.nonzero, 100000);  // 1% of the nonzeros
  EXPECT_EQ(d.zero, 100000);     // as many as nonzero ones
  EXPECT_EQ(d.eval, 100000);
  const GcpSamples small = gcp_sample_counts(5000, 0, 0, 0);
  EXPECT_EQ(small.nonzero, 1000);  // at least 1000
  EXPECT_EQ(small.eval, 5000);     // at most the nonzeros
  const GcpSamples given = gcp_sample_counts(5000, 9000, 300, 70);
  EXPECT_EQ(given.nonzero, 5000);
  EXPECT_EQ(given.zero, 300);
  EXPECT_EQ(given.eval, 70);
}

/// GCP's samples per step and its evaluation sample are in the plan, per rank, with the
/// counts the run draws: on the host backends more samples per step move the plan by the
/// bytes of the arrays; the cuda backend draws them in its kernel from a device copy of the
/// training entries, which it holds in place of the sorted copies it does not build.
TEST(Planner, GcpSamplesAreCountedAndMoveThePlan) {
  const auto t = store({1000, 2000, 3000}, 10000000, 1, 8);
  for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda}) {
    for (int ranks : {1, 4}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(b)) + ", " + std::to_string(ranks) + " ranks");
      Request r;
      r.backend = b;
      r.ranks = ranks;
      r.value_bytes = 8;
      r.cp_rank = 8;
      r.tier1_only = true;
      r.tier1_why = "--solver gcp";
      const Plan als = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      EXPECT_EQ(part(als, "GCP samples"), nullptr);
      r.gcp = true;
      r.gcp_samples = 1000;
      const Plan few = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      r.gcp_samples = 400000;
      const Plan many = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      ASSERT_TRUE(few.fits && many.fits);
      const Component* a = part(few, "GCP samples");
      const Component* c = part(many, "GCP samples");
      ASSERT_NE(a, nullptr);
      ASSERT_NE(c, nullptr);
      const std::uint64_t per = 3 * 4 + 8;  // a sample's coordinates and value
      // A step: 1000 or 400000 nonzero samples and as many zeros; 100000 + 100000 evaluated
      // (the defaults), each rank holding its share.
      if (ranks == 1) {
        const std::uint64_t step_few = 2000, step_many = 800000, eval = 200000;
        const std::uint64_t work_few =
            b == Backend::cpu         ? std::max<std::uint64_t>(step_few * 24 + 3001 * 8, eval * 16)
            : b == Backend::reference ? 6000 * 8 * 8
                                      : 0;
        if (b == Backend::cuda) {
          EXPECT_EQ(a->host, eval * per);
          EXPECT_EQ(c->host, eval * per);
          EXPECT_EQ(a->device, eval * per + 8 + 10000000 * per);
          EXPECT_EQ(c->device, a->device);
          EXPECT_EQ(part(few, "sorted copies"), nullptr);
          EXPECT_NE(part(als, "sorted copies"), nullptr);
        } else {
          EXPECT_EQ(a->host, (step_few + eval) * per + work_few);
        }
        if (b == Backend::cpu) {
          EXPECT_EQ(c->host, (step_many + eval) * per + step_many * 24 + 3001 * 8);
        }
      } else if (b != Backend::cuda) {
        // Every 4th zero sample and about a quarter of the nonzero ones: below one rank's.
        EXPECT_LT(c->host, (800000 + 200000) * per);
        EXPECT_GT(c->host, (800000 + 200000) * per / 4);
      }
      EXPECT_EQ(many.host_peak - few.host_peak, c->host - a->host);
      if (b == Backend::cuda) {
        EXPECT_EQ(c->host, a->host);
        EXPECT_EQ(many.device_peak, few.device_peak);
      } else {
        EXPECT_GT(c->host, a->host);
        EXPECT_EQ(a->device, 0);
      }
    }
  }
}

/// CP's --holdout (ALS, CP-APR and GCP alike) keeps a training view of the block and the
/// held-out entries on the host: the plan counts them (the view once with --observed-only,
/// whose part already holds the block copy), and the host peak moves by exactly that much.
TEST(Planner, HoldoutCountsTheTrainingViewForEverySolver) {
  const auto t = store({1000, 2000, 3000}, 10000000, 1, 8);
  for (Backend b : {Backend::reference, Backend::cpu, Backend::cuda}) {
    for (int solver = 0; solver < 3; ++solver) {  // ALS, CP-APR, GCP
      SCOPED_TRACE(std::to_string(static_cast<int>(b)) + ", solver " + std::to_string(solver));
      Request r;
      r.backend = b;
      r.ranks = 1;
      r.value_bytes = 8;
      r.cp_rank = 8;
      r.tier1_only = true;
      r.tier1_why = "--holdout";
      r.poisson = solver == 1;
      r.gcp = solver == 2;
      const Plan none = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      EXPECT_EQ(part(none, "holdout"), nullptr);
      r.holdout = 0.1;
      const Plan held = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      ASSERT_TRUE(none.fits && held.fits);
      const Component* h = part(held, "holdout");
      ASSERT_NE(h, nullptr);
      const std::uint64_t coo = 10000000ull * (3 * 4 + 8);   // the view: the whole block
      const std::uint64_t entries = 1000000 + 4 * 1000 + 1;  // 10% and four deviations
      EXPECT_EQ(h->host, coo + entries * (3 * 16 + 8 + 16) + 6000);
      EXPECT_EQ(h->device, 0);
      EXPECT_EQ(held.host_peak - none.host_peak, h->host);
      EXPECT_EQ(held.device_peak, none.device_peak);
      r.completion = true;
      const Plan both = make_plan(r, t, limits(64 * kGiB, 64 * kGiB));
      const Component* c = part(both, "holdout");
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->host, h->host - coo);
    }
  }
}

/// Completion on the cuda backend in float with tensor cores at R <= 32 fuses the MTTKRP and
/// the rows' Grams on one copy of the block (ops::fuses_completion): the plan counts the
/// Grams' output and its reduction buffer, not a second copy and the packed outer products,
/// which it still counts in double, with --tensor-cores off and above R 32.
TEST(Planner, FusedCompletionCountsOneCopy) {
  const auto t = store({12092, 9184, 28818}, 76900000);
  for (int R : {16, 32, 40}) {
    for (bool tc : {true, false}) {
      SCOPED_TRACE("R " + std::to_string(R) + (tc ? " tensor cores" : " --tensor-cores off"));
      Request r = cuda_cp(R);
      r.tensor_cores = tc;
      r.tier1_only = true;
      r.tier1_why = "--observed-only";
      r.completion = true;
      const Plan p = make_plan(r, t, limits(256 * kGiB, 140 * kGiB));
      ASSERT_TRUE(p.fits);
      const Component* c = part(p, "completion");
      const Component* copies = part(p, "sorted copies");
      ASSERT_NE(c, nullptr);
      ASSERT_NE(copies, nullptr);
      const std::uint64_t W = static_cast<std::uint64_t>(R) * (R + 1) / 2;
      const std::uint64_t grams = 28818ull * W * 4 * 2;
      if (tc && R <= 32) {
        EXPECT_EQ(c->device, grams);
        EXPECT_NE(c->name.find("fused"), std::string::npos) << c->name;
      } else {
        EXPECT_EQ(c->device, copies->device + (12092ull + 9184 + 28818) * W * 4 + grams);
      }
    }
  }
}

/// --gather-precision fp16|bf16 on the cuda backend in float adds the MTTKRP's (or Tucker's
/// TTMc's) 16-bit copies of the factors (2 bytes an entry of every mode's factor) to the
/// loop's device part, and nothing in double or on the host backends.
TEST(Planner, GatherCopiesAreCounted) {
  const auto t = store({12092, 9184, 28818}, 76900000);
  for (Backend b : {Backend::cuda, Backend::cpu}) {
    for (int vbytes : {4, 8}) {
      Request r = cuda_cp(32);
      r.backend = b;
      r.value_bytes = vbytes;
      const Plan full = make_plan(r, t, limits(256 * kGiB, 140 * kGiB));
      r.gather16 = true;
      const Plan low = make_plan(r, t, limits(256 * kGiB, 140 * kGiB));
      const std::uint64_t copies =
          b == Backend::cuda && vbytes == 4 ? (12092ull + 9184 + 28818) * 32 * 2 : 0;
      const Component* a = part(full, "factors");
      const Component* c = part(low, "factors");
      ASSERT_NE(a, nullptr);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->device - a->device, copies) << vbytes;
      EXPECT_EQ(c->host, a->host) << vbytes;
      EXPECT_GE(low.device_peak, full.device_peak) << vbytes;
    }
  }
  // Tucker: the tensor-core TTMc's copies (every mode's factor at the largest rank, and
  // their rounding to 256 bytes), on the cuda backend in float only.
  for (int vbytes : {4, 8}) {
    Request r;
    r.backend = Backend::cuda;
    r.workload = Workload::tucker;
    r.tucker_ranks = {16, 16, 8};
    r.value_bytes = vbytes;
    const Plan full = make_plan(r, t, limits(256 * kGiB, 140 * kGiB));
    r.gather16 = true;
    const Plan low = make_plan(r, t, limits(256 * kGiB, 140 * kGiB));
    const Component* a = part(full, "factors");
    const Component* c = part(low, "factors");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->device - a->device,
              vbytes == 4 ? (12092ull + 9184 + 28818) * 16 * 2 + 256 * 16 : 0)
        << vbytes;
  }
}

}  // namespace
}  // namespace tessera::plan
