// `tessera plan --nprocs` end to end (issue 36, point 5): the plan per rank for runs on 1, 2
// and 4 ranks without starting them, from a store (equal split, then its stored partition of
// 2 blocks) and from text; the record holds one entry per rank count, the shares sum to the
// nonzeros and the bytes per rank fall with the count; `--backend cuda --device-budget`
// plans for a card where no GPU is visible, the budget its device limit, and refuses
// without one (issue 42).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;
using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

class PlanRanksDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera-plan-ranks-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    tns_ = (dir_ / "x.tns").string();
    h5_ = (dir_ / "x.h5").string();
    auto r = run(tessera() + " generate --dims 300x200x100 --nnz 20000 --rank 3 -q -o " + tns_);
    if (r.code == 0) r = run(tessera() + " convert " + tns_ + " " + h5_ + " -q");
    setup_error_ = r.code == 0 ? "" : "setup failed:\n" + r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  /// `tessera plan FILE ARGS --json J`: the run must succeed; returns the record.
  static nlohmann::json plan(const std::string& file, const std::string& args,
                             const std::string& name, std::string* out = nullptr) {
    const std::string j = (dir_ / (name + ".json")).string();
    const auto r = run(tessera() + " plan " + file + " " + args + " --json " + j);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
    if (out) *out = r.out;
    if (r.code != 0) return {};
    std::ifstream f(j);
    return nlohmann::json::parse(f);
  }

  /// Every entry: one share per rank, summing to `nnz`; the largest peak per rank falls.
  static void check_entries(const nlohmann::json& rec, std::uint64_t nnz,
                            const std::vector<int>& counts, bool device) {
    ASSERT_TRUE(rec.contains("plans_per_ranks")) << rec.dump(1);
    const auto& e = rec["plans_per_ranks"];
    ASSERT_EQ(e.size(), counts.size());
    std::uint64_t last_host = ~std::uint64_t(0), last_device = ~std::uint64_t(0);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      EXPECT_EQ(e[k]["ranks"], counts[k]);
      EXPECT_TRUE(e[k]["fits"].get<bool>()) << e[k].dump(1);
      const auto& b = e[k]["block_nnz"];
      ASSERT_EQ(b.size(), static_cast<std::size_t>(counts[k]));
      std::uint64_t sum = 0;
      for (const auto& n : b) sum += n.get<std::uint64_t>();
      EXPECT_EQ(sum, nnz) << counts[k];
      std::uint64_t host = 0, dev = 0;
      for (const auto& h : e[k]["planned_peak_host_bytes"])
        host = std::max(host, h.get<std::uint64_t>());
      for (const auto& d : e[k]["planned_peak_device_bytes"])
        dev = std::max(dev, d.get<std::uint64_t>());
      // The data per rank falls with the count (plan_ranks_test checks the bytes). The peak
      // also holds the process baseline (its resident set), measured again for each count
      // and growing by an amount this test does not control as the process runs, so it is
      // taken out: what must fall is the peak above the baseline of its own count.
      const std::uint64_t base = e[k]["plan"]["limits"]["baseline_host_bytes"];
      ASSERT_GT(host, base) << e[k].dump(1);
      host -= base;
      if (last_host != ~std::uint64_t(0)) {
        EXPECT_LT(host, last_host) << counts[k];
      }
      if (device) {
        EXPECT_LT(dev, last_device) << counts[k];
      }
      last_host = host;
      last_device = dev;
      ASSERT_TRUE(e[k].contains("predicted")) << e[k].dump(1);
      EXPECT_GT(e[k]["predicted"]["seconds_per_iteration"].get<double>(), 0);
      // Every mode's output rows x R = 16 in double, whatever the rank count (the dims are
      // those the generated entries reach, at most 300 + 200 + 100 rows).
      const double reduced = e[k]["predicted"]["allreduce_bytes"].get<double>();
      EXPECT_EQ(reduced, e[0]["predicted"]["allreduce_bytes"].get<double>());
      EXPECT_GT(reduced, 0);
      EXPECT_LE(reduced, (300.0 + 200.0 + 100.0) * 16 * 8);
    }
    EXPECT_EQ(e[0]["predicted"]["comm_seconds"].get<double>(), 0);
    EXPECT_GT(e[1]["predicted"]["comm_seconds"].get<double>(), 0);
  }

  static inline fs::path dir_;
  static inline std::string tns_, h5_, setup_error_;
};

TEST_F(PlanRanksDriver, AStoreIsPlannedPerRankForEachCount) {
  std::string out;
  const auto rec = plan(h5_, "--backend cpu --rank 16 --nprocs 4,1,2", "store", &out);
  const std::uint64_t nnz = rec["plans_per_ranks"][0]["plan"]["block_nnz"];  // 1 rank: all
  check_entries(rec, nnz, {1, 2, 4}, false);
  EXPECT_EQ(rec["plans_per_ranks"][1]["partition"], "equal split");
  EXPECT_TRUE(contains(out, "plans per rank count")) << out;
  EXPECT_TRUE(contains(out, "--bandwidth")) << out;
  EXPECT_EQ(rec["command"], "plan");
  ASSERT_TRUE(rec.contains("time_model"));
  // A host backend: the node's memory, measured here and shared by its ranks.
  const auto& m = rec["time_model"];
  EXPECT_EQ(m["shared_memory"], true);
  EXPECT_EQ(m["bandwidth_source"], "measured");
  EXPECT_GT(m["bandwidth_bytes_per_s"].get<double>(), 1e8);
  EXPECT_NE(m["bandwidth_bytes_per_s"].get<double>(), 4300e9);
  EXPECT_TRUE(contains(out, "add no bandwidth")) << out;
}

TEST_F(PlanRanksDriver, AStoredPartitionGivesTheBlocks) {
  const std::string p = (dir_ / "p.h5").string();
  const auto r = run(tessera() + " partition " + h5_ + " --blocks 2 -o " + p + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rec = plan(p, "--backend cpu --nprocs 2,4", "partitioned");
  EXPECT_EQ(rec["plans_per_ranks"][0]["partition"], "stored partition");
  EXPECT_EQ(rec["plans_per_ranks"][1]["partition"], "equal split");
}

TEST_F(PlanRanksDriver, TextIsReadOnceAndPlannedForEachCount) {
  const auto store = plan(h5_, "--backend cpu --rank 16 --nprocs 1,2,4", "h5");
  const auto text = plan(tns_, "--backend cpu --rank 16 --nprocs 1,2,4", "text");
  const std::uint64_t nnz = store["plans_per_ranks"][0]["plan"]["block_nnz"];
  check_entries(text, nnz, {1, 2, 4}, false);
}

TEST_F(PlanRanksDriver, ACudaCardIsPlannedWithoutSeeingOne) {
  // Where a GPU is visible the device limit is measured instead; the budget still applies.
  std::string out;
  const auto rec =
      plan(h5_, "--backend cuda --device-budget 8G --rank 16 --nprocs 1,2,4", "cuda", &out);
  const std::uint64_t nnz = rec["plans_per_ranks"][0]["plan"]["block_nnz"];
  check_entries(rec, nnz, {1, 2, 4}, true);
  EXPECT_EQ(rec["plans_per_ranks"][0]["plan"]["backend"], "cuda");
  // GPUs: their own memory and links, the H200 defaults.
  EXPECT_EQ(rec["time_model"]["shared_memory"], false);
  EXPECT_EQ(rec["time_model"]["bandwidth_source"], "default");
  EXPECT_EQ(rec["time_model"]["bandwidth_bytes_per_s"].get<double>(), 4300e9);
  // Without --nprocs too, and under 2 ranks.
  const auto r = run(mpirun(2) + " plan " + h5_ + " --backend cuda --device-budget 8G");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "chosen: tier 1")) << r.out;
}

TEST_F(PlanRanksDriver, TuckerIsPlannedWithTheRanksAndRowsTheRunTakes) {
  // --ranks as tucker reads it ("4x2x2" is "4,2,2"); on cuda with --svd gram these small
  // modes' rows are all-reduced, as the run's auto takes them; --svd subspace: owners.
  const std::string cuda = "--workload tucker --backend cuda --device-budget 8G --nprocs 2 ";
  const auto x = plan(h5_, cuda + "--ranks 4x2x2", "tucker-x");
  const auto c = plan(h5_, cuda + "--ranks 4,2,2", "tucker-c");
  const auto sub = plan(h5_, cuda + "--ranks 4,2,2 --svd subspace", "tucker-sub");
  ASSERT_TRUE(x.contains("plans_per_ranks") && c.contains("plans_per_ranks") &&
              sub.contains("plans_per_ranks"));
  const auto& px = x["plans_per_ranks"][0]["predicted"];
  const auto& pc = c["plans_per_ranks"][0]["predicted"];
  EXPECT_EQ(px["allreduce_bytes"], pc["allreduce_bytes"]);
  EXPECT_GT(pc["allreduce_bytes"].get<double>(), 0);
  EXPECT_EQ(px["ttmc_rows_strategy"]["modes"], "allreduce,allreduce,allreduce") << px.dump(1);
  EXPECT_EQ(pc["ttmc_rows_strategy"]["modes"], "allreduce,allreduce,allreduce");
  EXPECT_EQ(sub["plans_per_ranks"][0]["predicted"]["ttmc_rows_strategy"]["modes"],
            "owners,owners,owners");
}

TEST_F(PlanRanksDriver, WithoutAGpuTheBudgetIsTheCardAndARunStillRefuses) {
  // A login node or a CPU-only build (CI's machine has no GPU): `plan --backend cuda
  // --device-budget 80G` plans for an 80 GB card, its device limit the budget; without
  // --device-budget it refuses and names the option; a run with --backend cuda refuses.
  std::string out;
  const auto rec = plan(h5_, "--backend cuda --device-budget 80G --rank 16", "card", &out);
  if (!contains(out, "no GPU is visible here: planning for a card")) {
    GTEST_SKIP() << "a GPU is visible here: the device limit is measured\n" << out;
  }
  EXPECT_TRUE(contains(out, "device  80.00 GiB  (--device-budget")) << out;
  ASSERT_TRUE(rec.contains("plan")) << rec.dump(1);
  EXPECT_EQ(rec["plan"]["backend"], "cuda");
  EXPECT_EQ(rec["plan"]["limits"]["device"]["bytes"].get<std::uint64_t>(), std::uint64_t(80) << 30);
  EXPECT_TRUE(
      contains(rec["plan"]["limits"]["device"]["source"].get<std::string>(), "--device-budget"))
      << rec["plan"]["limits"].dump(1);
  EXPECT_TRUE(rec["plan"]["fits"].get<bool>());

  auto r = run(tessera() + " plan " + h5_ + " --backend cuda");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "--device-budget 80G")) << r.out;
  EXPECT_TRUE(contains(r.out, "no GPU is visible here")) << r.out;
  r = run(tessera() + " plan " + h5_ + " --backend cuda --nprocs 1,2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "--device-budget 80G")) << r.out;

  for (const std::string& cmd :
       {"cp " + h5_ + " --rank 4 --iters 1", "cp " + h5_ + " --rank 4 --iters 1 --dry-run",
        "tucker " + h5_ + " --ranks 2,2,2 --iters 1"}) {
    r = run(tessera() + " " + cmd + " --backend cuda --device-budget 80G");
    EXPECT_NE(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "no GPU is visible") || contains(r.out, "built without CUDA"))
        << cmd << "\n"
        << r.out;
  }
}

TEST_F(PlanRanksDriver, BadCountsAreRefusedWithOneLine) {
  for (const std::string bad : {"0", "1,x", "", "-2"}) {
    const auto r = run(tessera() + " plan " + h5_ + " --nprocs '" + bad + "'");
    EXPECT_NE(r.code, 0) << bad << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--nprocs")) << bad << "\n" << r.out;
  }
}

// Several nodes (issue 38): a shape without a file, 1 and 16 nodes of 4 GPUs, both CP
// strategies in the record with the network's bytes; bad values are one line naming the option.
TEST_F(PlanRanksDriver, NodesPlanAShapeAndNameTheirBadOptions) {
  std::string out;
  const auto rec = plan("",
                        "--shape 4821207x1774269x1805187 --nnz 1.74e9 --rank 32 --backend cuda "
                        "--device-budget 135G --precision float --nodes 1,16 --gpus-per-node 4 "
                        "--link-gbps 25 --kernel-ratio 5 -q",
                        "nodes", &out);
  ASSERT_TRUE(rec.contains("plans_per_ranks")) << out;
  const auto& e = rec["plans_per_ranks"];
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1]["ranks"], 64);
  EXPECT_EQ(e[1]["predicted"]["nodes"], 16);
  EXPECT_EQ(e[0]["predicted"]["network_bytes_per_rank"].get<double>(), 0);
  EXPECT_GT(e[1]["predicted"]["network_bytes_per_rank"].get<double>(), 0);
  EXPECT_TRUE(e[1].contains("predicted_layer")) << e[1].dump(1);
  EXPECT_EQ(rec["time_model"]["network_bytes_per_s_per_gpu"].get<double>(), 25e9);
  EXPECT_TRUE(contains(out, "--link-gbps")) << out;
  EXPECT_TRUE(contains(out, "communication dominates")) << out;
  const std::string shape = " plan --shape 10x10x10 --nnz 100 ";
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"--nodes 0 --gpus-per-node 4", "--nodes"},
           {"--nodes 2 --gpus-per-node 0", "--gpus-per-node"},
           {"--nodes 2 --gpus-per-node 4 --link-gbps 0", "--link-gbps"},
           {"--nodes 2 --gpus-per-node 4 --link-gbps abc", "--link-gbps"},
           {"--nodes 2 --gpus-per-node 4 --inter-latency -1", "--inter-latency"},
           {"--nodes 2", "--nodes requires --gpus-per-node"},
           {"", "--shape"}}) {
    const auto r = run(tessera() + shape + args);
    EXPECT_NE(r.code, 0) << args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "error: " + option)) << args << "\n" << r.out;
  }
}

}  // namespace
