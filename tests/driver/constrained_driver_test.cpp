// tessera cp with constrained, regularised and weighted CP (docs/constrained-cp.md): the
// same iterations in memory tiers 1 and 2 and on 1 or 3 ranks, the options in the run
// record, the held-out set's RMSE, --init nvecs, and one clear line for each bad option.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "io/model_io.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;

class ConstrainedDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_constrained_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // A nonnegative rank-3 tensor of 12 x 10 x 8 with 60% of its entries stored.
    std::ofstream f(path("x.tns"));
    unsigned h = 7;
    for (int i = 1; i <= 12; ++i)
      for (int j = 1; j <= 10; ++j)
        for (int k = 1; k <= 8; ++k) {
          h = h * 1103515245u + 12345u;
          if ((h >> 16) % 10 >= 6 && !(i == 12 && j == 10 && k == 8)) continue;
          double v = 0;
          for (int r = 0; r < 3; ++r)
            v += (1.0 + std::sin(i * (r + 1.0))) * (1.0 + std::cos(j * 0.5 * (r + 1))) *
                 (1.5 + std::sin(k * 0.3 + r));
          f << i << " " << j << " " << k << " " << v << "\n";
        }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  nlohmann::json record(const std::string& n) const {
    std::ifstream f(path(n));
    return nlohmann::json::parse(f);
  }
  static std::vector<double> fits(const nlohmann::json& j) {
    std::vector<double> v;
    for (const auto& it : j["per_iteration"]) v.push_back(it["fit"].get<double>());
    return v;
  }
  fs::path dir_;
};

TEST_F(ConstrainedDriver, NonnegSameInTiers1And2AndOnThreeRanks) {
  const std::string args =
      " cp " + path("x.tns") + " -r 3 -i 8 --tol 0 --l1 0.01 --l2 0.1,0,0.2 -t 1";
  // A bare --nonneg (issue 42) is --nonneg all: the same fits as the runs that spell it.
  auto a = run(tessera() + args + " --nonneg --tier 1 --json " + path("t1.json") + " --out " +
               path("m.h5"));
  ASSERT_EQ(a.code, 0) << a.out;
  auto b = run(tessera() + args + " --nonneg all --tier 2 --json " + path("t2.json"));
  ASSERT_EQ(b.code, 0) << b.out;
  auto c = run(mpirun(3) + args + " --nonneg all --json " + path("p3.json"));
  ASSERT_EQ(c.code, 0) << c.out;
  const auto j1 = record("t1.json"), j2 = record("t2.json"), j3 = record("p3.json");
  EXPECT_EQ(j1["memory_tier"]["tier"], 1);
  EXPECT_EQ(j2["memory_tier"]["tier"], 2);
  const auto f1 = fits(j1), f2 = fits(j2), f3 = fits(j3);
  ASSERT_EQ(f1.size(), 8u);
  ASSERT_EQ(f2.size(), 8u);
  ASSERT_EQ(f3.size(), 8u);
  for (std::size_t i = 0; i < f1.size(); ++i) {
    EXPECT_NEAR(f2[i], f1[i], 1e-10) << "tier 2, iteration " << i + 1;
    EXPECT_NEAR(f3[i], f1[i], 1e-9) << "3 ranks, iteration " << i + 1;
  }
  EXPECT_EQ(j1["options"]["nonneg"], nlohmann::json({0, 1, 2}));
  EXPECT_EQ(j1["options"]["l2"], nlohmann::json({0.1, 0.0, 0.2}));
  EXPECT_EQ(j1["options"]["l1"], nlohmann::json({0.01, 0.01, 0.01}));
  EXPECT_EQ(j1["options"]["inner_sweeps"], 3);
  const KruskalModel m = io::read_kruskal_h5(path("m.h5"));
  for (const auto& f : m.factors)
    for (double x : f.data) ASSERT_GE(x, 0.0);
}

TEST_F(ConstrainedDriver, CompletionReportsTheHeldOutSet) {
  auto r = run(tessera() + " cp " + path("x.tns") +
               " -r 3 -i 60 --observed-only --holdout 0.2 --seed 3 -t 1 --json " + path("c.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation RMSE"), std::string::npos) << r.out;
  const auto j = record("c.json");
  const auto& h = j["holdout"];
  EXPECT_EQ(h["fraction"], 0.2);
  const double held = h["held_out_entries"], kept = h["training_entries"];
  EXPECT_EQ(held + kept, j["tensor"]["nnz"].get<double>()) << j.dump();
  EXPECT_LT(h["validation_rmse"].get<double>(), 0.2 * h["mean_predictor_rmse"].get<double>());
  EXPECT_TRUE(j["per_iteration"].back().contains("validation_rmse"));
  EXPECT_EQ(j["options"]["observed_only"], true);
  // Treating the missing entries as zeros predicts them far worse.
  auto z = run(tessera() + " cp " + path("x.tns") +
               " -r 3 -i 60 --holdout 0.2 --seed 3 -t 1 --json " + path("z.json"));
  ASSERT_EQ(z.code, 0) << z.out;
  EXPECT_LT(h["validation_rmse"].get<double>(),
            0.5 * record("z.json")["holdout"]["validation_rmse"].get<double>());
}

TEST_F(ConstrainedDriver, NvecsStartsAndIsRecorded) {
  auto r = run(tessera() + " cp " + path("x.tns") + " -r 3 -i 3 --init nvecs -t 1 --json " +
               path("n.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("starting from nvecs"), std::string::npos) << r.out;
  EXPECT_EQ(record("n.json")["options"]["init"], "nvecs");
}

TEST_F(ConstrainedDriver, AZeroModelIsDegenerateNotConverged) {
  // --l1 beyond every MTTKRP entry zeroes the factors (soft thresholding): the fit stops
  // changing at 0, which used to read "converged".
  auto r = run(tessera() + " cp " + path("x.tns") + " -r 2 -i 6 -t 1 --l1 1e9 --l2 1e-3 --json " +
               path("zero.json") + " --out " + path("zero.h5"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: degenerate run: the model is zero everywhere (every weight is 0)"),
            std::string::npos)
      << r.out;
  const auto j = record("zero.json");
  EXPECT_EQ(j["stop_reason"], "degenerate");
  EXPECT_EQ(j["converged"], false);
  EXPECT_TRUE(io::read_kruskal_h5(path("zero.h5")).is_zero());
}

TEST_F(ConstrainedDriver, BadOptionsGetOneLineAndNoOutput) {
  const std::string base =
      tessera() + " cp " + path("x.tns") + " -r 3 -i 2 -t 1 --out " + path("bad.h5");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {" --nonneg 3", "--nonneg 3: '3' is not a mode"},
      {" --nonneg 0,x", "'x' is not a mode"},
      {" --l1 -1", "--l1 -1: '-1' is not a finite number >= 0"},
      {" --l2 1,2", "--l2 1,2: 2 values for an order-3 tensor"},
      {" --l2 nan", "is not a finite number"},
      {" --holdout 1.5", "--holdout"},
      {" --inner-sweeps 0", "--inner-sweeps"},
      {" --observed-only --tier 2", "--observed-only needs the tensor in memory, tier 1"},
      {" --init nvecs --resume " + path("none.h5"), "a run starts from one of them"},
      {" --init svd", "--init svd: expected random, nvecs or file:MODEL.h5"},
  };
  for (const auto& c : cases) {
    auto r = run(base + c.args);
    EXPECT_NE(r.code, 0) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << c.args << ": " << r.out;
    EXPECT_FALSE(fs::exists(path("bad.h5"))) << c.args;
  }
}

}  // namespace
}  // namespace tessera::test
