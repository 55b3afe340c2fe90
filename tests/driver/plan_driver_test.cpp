// The memory planner end to end through the `tessera` binary (mpiexec -n 1 and 2):
//  - `tessera plan` and --dry-run print the plan (tier, components, limits with their
//    sources) and load nothing; a plan that fits nothing exits non-zero with one message
//    naming the limit;
//  - cp and tucker on the reference and cpu backends in tiers 1, 2 and 3 (forced with
//    --tier and with budgets) give the fits of tier 1 to rounding, and the measured peak
//    (VmHWM, max over ranks) of every run is within its planned peak;
//  - bench refuses a generated tensor that does not fit, before allocating it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;
using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

/// A 4-mode tensor of 400k generated nonzeros, as an HDF5 store with unique coordinates
/// (generate sums repeats while writing), chunks of 50k: big enough that the data, not the
/// process's baseline, decides the tiers under the budgets below.
class PlanDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera-plan-driver-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    h5_ = (dir_ / "x.h5").string();
    const auto r = run(mpirun(2) +
                       " generate --dims 300x200x100x50 --nnz 4e5 --rank 3 --noise 0.05 "
                       "--structure blocks --seed 7 --chunk-nnz 50000 --out " +
                       h5_);
    setup_error_ = r.code == 0 ? "" : "generate failed:\n" + r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  /// Runs `cmd ... --json J` and returns the record; the run must succeed.
  static nlohmann::json run_json(const std::string& cmd, const std::string& name) {
    const std::string j = (dir_ / (name + ".json")).string();
    const auto r = run(cmd + " --json " + j);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    if (r.code != 0) return {};
    return read_json(j);
  }

  static inline fs::path dir_;
  static inline std::string h5_, setup_error_;
};

TEST_F(PlanDriver, PlanPrintsTheTierTheComponentsAndTheLimits) {
  const auto r = run(mpirun(2) + " plan " + h5_ + " --backend cpu --rank 8");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "memory plan")) << r.out;
  EXPECT_TRUE(contains(r.out, "chosen: tier 1 (resident)")) << r.out;
  EXPECT_TRUE(contains(r.out, "MemAvailable")) << r.out;
  EXPECT_TRUE(contains(r.out, "CSF trees")) << r.out;
  // --dry-run on cp prints the same and does not run.
  const auto d = run(mpirun(2) + " cp " + h5_ + " --backend cpu --rank 8 --dry-run --tier 3");
  ASSERT_EQ(d.code, 0) << d.out;
  EXPECT_TRUE(contains(d.out, "chosen: tier 3 (disk-streamed)")) << d.out;
  EXPECT_TRUE(contains(d.out, "disk reads per iteration")) << d.out;
  EXPECT_FALSE(contains(d.out, "done: fit")) << d.out;
  // --json of plan holds the record, with the limits' sources.
  const auto j = run_json(mpirun(1) + " plan " + h5_ + " --backend reference --tier 3", "plan");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["plan"]["tier"], 3);
  EXPECT_GT(j["plan"]["read_bytes_per_iteration"].get<double>(), 0.0);
  const auto src = j["plan"]["limits"]["host"]["source"].get<std::string>();
  EXPECT_TRUE(contains(src, "MemAvailable") || contains(src, "cgroup") || contains(src, "SLURM"))
      << src;
}

TEST_F(PlanDriver, APlanThatFitsNothingIsRefusedUpFront) {
  const auto r = run(mpirun(2) + " cp " + h5_ + " --backend cpu --host-budget 64K");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "no memory tier fits")) << r.out;
  EXPECT_TRUE(contains(r.out, "--host-budget")) << r.out;
  EXPECT_FALSE(contains(r.out, "done: fit")) << r.out;
  const auto p = run(mpirun(1) + " plan " + h5_ + " --backend cpu --host-budget 64K");
  EXPECT_NE(p.code, 0) << p.out;
  EXPECT_TRUE(contains(p.out, "REFUSED")) << p.out;
  // A generated benchmark tensor over the host's memory: refused before it is made.
  const auto b = run(mpirun(1) +
                     " bench mttkrp --generate 1000000x1000000x1000000 --nnz 5e10 "
                     "--backend cpu --rank 8");
  EXPECT_NE(b.code, 0) << b.out;
  EXPECT_TRUE(contains(b.out, "no memory tier fits")) << b.out;
  EXPECT_TRUE(contains(b.out, "tessera generate")) << b.out;
}

TEST_F(PlanDriver, EveryTierGivesTheSameFitWithinItsPlannedPeak) {
  for (const std::string backend : {"reference", "cpu"}) {
    for (int np : {1, 2}) {
      std::vector<double> fits1;
      for (const std::string tier : {"1", "2", "3"}) {
        const std::string name = "cp-" + backend + "-" + std::to_string(np) + "-" + tier;
        const auto j =
            run_json(mpirun(np) + " cp " + h5_ + " --rank 6 --iters 4 --tol 0 " + "--backend " +
                         backend + " --tier " + tier + " --stream-chunk 30000",
                     name);
        ASSERT_FALSE(j.empty()) << name;
        EXPECT_EQ(j["memory_plan"]["tier"], std::stoi(tier)) << name;
        EXPECT_EQ(j["memory_tier"]["tier"], std::stoi(tier)) << name;
        const auto planned = j["memory_plan"]["planned_peak_host_bytes"].get<double>();
        const auto measured = j["memory_plan"]["measured_peak_host_bytes"].get<double>();
        EXPECT_LE(measured, planned) << name;
        EXPECT_GT(measured, 0.25 * planned) << name << ": the plan is far above the peak";
        const auto fits = j["fits"].get<std::vector<double>>();
        ASSERT_EQ(fits.size(), 4u) << name;
        if (tier == "1") {
          fits1 = fits;
          EXPECT_GT(fits.back(), 0.5) << name;
        } else {
          for (std::size_t i = 0; i < fits.size(); ++i)
            EXPECT_NEAR(fits[i], fits1[i], 1e-9) << name << " iteration " << i + 1;
        }
      }
    }
  }
}

TEST_F(PlanDriver, BudgetsPickTheTiers) {
  // Each tier's data as the plan counts it (--tier N), then budgets between them.
  auto data_of = [&](int tier) {
    const auto j =
        run_json(mpirun(2) + " plan " + h5_ +
                     " --rank 6 --backend cpu --stream-chunk 20000 --tier " + std::to_string(tier),
                 "data-" + std::to_string(tier));
    return j.empty() ? 0.0 : j["plan"]["planned_data_host_bytes"].get<double>();
  };
  const double d1 = data_of(1), d2 = data_of(2), d3 = data_of(3);
  ASSERT_GT(d3, 0);
  // The CSF trees are larger than one raw copy, which is larger than two streamed chunks.
  ASSERT_LT(d2, d1);
  ASSERT_LT(d3, d2);
  auto tier_of = [&](double budget, const std::string& name) {
    const auto j = run_json(mpirun(2) + " cp " + h5_ +
                                " --rank 6 --iters 2 --backend cpu --stream-chunk 20000 " +
                                "--host-budget " + std::to_string(static_cast<long long>(budget)),
                            name);
    return j.empty() ? -1 : j["memory_plan"]["tier"].get<int>();
  };
  EXPECT_EQ(tier_of(d1 + 1, "budget-1"), 1);
  EXPECT_EQ(tier_of((d1 + d2) / 2, "budget-2"), 2);
  EXPECT_EQ(tier_of((d2 + d3) / 2, "budget-3"), 3);
  const auto r =
      run(mpirun(2) + " cp " + h5_ + " --rank 6 --backend cpu --stream-chunk 20000 --host-budget " +
          std::to_string(static_cast<long long>(d3 / 2)));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "no memory tier fits")) << r.out;
  // --device-budget caps the prepared format of a host backend: streamed from memory.
  const auto j = run_json(
      mpirun(2) + " cp " + h5_ + " --rank 6 --iters 2 --backend cpu " + "--device-budget 1M",
      "budget-dev");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["memory_plan"]["tier"], 2);
}

TEST_F(PlanDriver, TuckerRunsInEveryTier) {
  std::vector<double> fits1;
  for (const std::string tier : {"1", "2", "3"}) {
    const auto j = run_json(mpirun(2) + " tucker " + h5_ +
                                " --ranks 3,3,3,3 --iters 3 --tol 0 --backend cpu --tier " + tier +
                                " --stream-chunk 40000",
                            "tucker-" + tier);
    ASSERT_FALSE(j.empty());
    EXPECT_LE(j["memory_plan"]["measured_peak_host_bytes"].get<double>(),
              j["memory_plan"]["planned_peak_host_bytes"].get<double>());
    const auto fits = j["fits"].get<std::vector<double>>();
    if (tier == "1")
      fits1 = fits;
    else
      for (std::size_t i = 0; i < fits.size(); ++i) EXPECT_NEAR(fits[i], fits1[i], 1e-9);
  }
}

}  // namespace
