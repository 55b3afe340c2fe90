// End-to-end tests of `tessera tucker`: help, generate-then-decompose on two MPI ranks with
// every SVD method, the run record and the HDF5 model file, and clear errors (non-zero exit
// on every rank, no hang) for bad ranks, the memory limit and bad files; the cuda backend
// runs where a GPU is visible and says why not elsewhere.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "driver_util.hpp"
#include "io/model_io.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::Run;
using ::tessera::test::tessera;

class TuckerDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-tucker-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// A generated rank-4 tensor (blocks structure: exactly low rank, 1% noise).
  std::string generated() {
    const auto t = path("demo.tns");
    auto r =
        run(mpirun(2) + " generate --dims 60x50x40 --nnz 20000 --rank 4 --noise 0.01 --out " + t);
    EXPECT_EQ(r.code, 0) << r.out;
    return t;
  }
  fs::path dir_;
};

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

TEST_F(TuckerDriver, Help) {
  auto r = run(tessera() + " tucker --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--ranks", "--svd", "--init", "--iters", "--tol", "--seed", "--out",
                          "--json", "--max-mem", "--backend", "--precision", "--partition"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  r = run(tessera() + " tucker");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("required"), std::string::npos) << r.out;
}

TEST_F(TuckerDriver, GenerateThenDecomposeOnTwoRanks) {
  const auto t = generated();
  const auto model = path("model.h5"), js = path("run.json");
  auto r = run(mpirun(2) + " tucker " + t + " --ranks 4,4,4 --iters 30 --tol 1e-9 --out " + model +
               " --json " + js);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("iter   1  fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TTMc semi-sparse rows per rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: fit"), std::string::npos) << r.out;
  const auto j = read_json(js);
  EXPECT_EQ(j["command"], "tucker");
  EXPECT_GE(j["fit"].get<double>(), 0.95);
  const auto iters = j["iterations"].get<std::size_t>();
  EXPECT_EQ(j["fits"].size(), iters);
  ASSERT_EQ(j["per_iteration"].size(), iters);
  for (const char* k : {"fit", "delta", "seconds", "ttmc", "comm", "svd", "core_norm"})
    EXPECT_TRUE(j["per_iteration"][0].contains(k)) << k;
  for (const char* k : {"io", "partition", "setup", "init", "ttmc", "comm", "svd", "total"})
    EXPECT_TRUE(j["phases_seconds"].contains(k)) << k;
  EXPECT_EQ(j["machine"]["ranks"].get<int>(), 2);
  EXPECT_EQ(j["options"]["ranks"], nlohmann::json({4, 4, 4}));
  EXPECT_EQ(j["options"]["svd"], "gram");
  EXPECT_GT(j["memory"]["semi_sparse_bytes_per_rank"].get<double>(), 0);
  EXPECT_EQ(j["memory"]["ttmc_rows"].size(), 3u);
  // The slowest rank's TTMc time and the mean (2 ranks: max >= mean, both positive).
  ASSERT_TRUE(j.contains("ttmc_per_rank")) << j.dump();
  const auto& tr = j["ttmc_per_rank"];
  EXPECT_GT(tr["mean_seconds_per_iteration"].get<double>(), 0);
  EXPECT_GE(tr["max_seconds_per_iteration"].get<double>(),
            tr["mean_seconds_per_iteration"].get<double>() * (1 - 1e-12));
  EXPECT_NEAR(tr["imbalance"].get<double>(),
              tr["max_seconds_per_iteration"].get<double>() /
                  tr["mean_seconds_per_iteration"].get<double>(),
              1e-12);
  EXPECT_NE(r.out.find("TTMc time per iteration over 2 ranks"), std::string::npos) << r.out;
  // Rank 0's comm by kind: parts of the iterations' comm, and the dense stage's sums (at
  // least the Gram and one CholeskyQR pass per mode).
  ASSERT_TRUE(j.contains("comm_split")) << j.dump();
  const auto& cs = j["comm_split"];
  // The split leaves the first iteration out (NCCL's set-up): compare with the same ones.
  double comm = 0;
  const auto& per = j["per_iteration"];
  ASSERT_EQ(per.size(), iters);
  ASSERT_GE(iters, 2u);
  for (std::size_t i = 1; i < per.size(); ++i) comm += per[i]["comm"].get<double>();
  comm /= static_cast<double>(iters - 1);
  EXPECT_LE(cs["ttmc_rows_seconds"].get<double>() + cs["dense_sums_seconds"].get<double>() +
                cs["factor_allgather_seconds"].get<double>(),
            comm * 1.01 + 1e-6);  // the record rounds the iterations' seconds
  EXPECT_GE(cs["dense_sums_per_iteration"].get<double>(), 6.0);
  for (std::size_t i = 1; i < iters; ++i)
    EXPECT_GE(j["fits"][i].get<double>(), j["fits"][i - 1].get<double>() - 1e-9);

  // The model file: layout, orthonormal factors, ||G|| consistent with the fit.
  ASSERT_TRUE(fs::exists(model));
  tessera::io::ModelRecord rec;
  const auto m = tessera::io::read_tucker_h5(model, &rec);
  EXPECT_EQ(m.dims, (std::vector<std::uint64_t>{60, 50, 40}));
  EXPECT_EQ(m.ranks, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(m.core.size(), 64u);
  EXPECT_EQ(rec.iterations, static_cast<int>(iters));
  EXPECT_NEAR(rec.fit, j["fit"].get<double>(), 1e-12);
  EXPECT_NE(rec.options_json.find("\"svd\":\"gram\""), std::string::npos) << rec.options_json;
  double g2 = 0;
  for (double g : m.core) g2 += g * g;
  EXPECT_NEAR(std::sqrt(g2), j["core_norm"].get<double>(), 1e-9 * std::sqrt(g2));
  for (const auto& F : m.factors)
    for (std::int64_t a = 0; a < F.cols; ++a)
      for (std::int64_t b = 0; b < F.cols; ++b) {
        double s = 0;
        for (std::int64_t i = 0; i < F.rows; ++i) s += F(i, a) * F(i, b);
        EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 1e-10);
      }

  // Every SVD method, the HOSVD start, float and the reference backend reach the same fit.
  const double fit = j["fit"].get<double>();
  for (const std::string extra :
       {"--svd subspace", "--svd scalapack", "--init hosvd", "--precision float",
        "--backend reference --partition grid", "--relabel --svd subspace --subspace-steps 5",
        "--svd subspace --subspace-steps 1"}) {
    r = run(mpirun(2) + " tucker " + t + " --ranks 4 --iters 30 --tol 1e-9 " + extra + " --json " +
            js);
    if (extra == "--svd scalapack" && r.out.find("without ScaLAPACK") != std::string::npos)
      continue;  // a build without ScaLAPACK refuses clearly (checked below)
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.out;
    const auto jx = read_json(js);
    EXPECT_NEAR(jx["fit"].get<double>(), fit, 1e-4) << extra;
    // One power step: per mode the product's sum, CholeskyQR's (one or two passes) and the
    // Rayleigh-Ritz product's, plus the core's; the subspace change that would decide a
    // next step is not computed (two sums per mode fewer).
    if (extra == "--svd subspace --subspace-steps 1") {
      EXPECT_LE(jx["comm_split"]["dense_sums_per_iteration"].get<double>(), 3 * 4 + 1) << extra;
    }
  }
}

// --backend cuda runs where a GPU is visible and ends with a clear message elsewhere
// (CPU-only build or no device), never with a crash.
TEST_F(TuckerDriver, CudaBackendRunsOrSaysWhyNot) {
  const auto t = generated();
  auto r =
      run(mpirun(2) + " tucker " + t + " --ranks 4 --iters 3 --backend cuda --precision float");
  EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << r.out;
  if (r.code == 0) {
    EXPECT_NE(r.out.find("fit"), std::string::npos) << r.out;
  } else {
    // "built without CUDA" (CPU-only build) or "no GPU is visible" (no device).
    EXPECT_TRUE(r.out.find("CUDA") != std::string::npos ||
                r.out.find("no GPU is visible") != std::string::npos)
        << r.out;
  }
}

TEST_F(TuckerDriver, BadInputEndsWithMessageAndNonZeroExit) {
  const auto t = generated();
  struct Case {
    std::string args;
    const char* expect;
  };
  const Case cases[] = {
      {"--ranks 4,4", "gives 2 ranks for an order-3 tensor"},
      {"--ranks 4,0,4", "at least 1"},
      {"--ranks 4,a,4", "not a positive integer"},
      {"--ranks 61,4,4", "exceeds its dimension 60"},
      {"--ranks 20,2,2", "exceeds the product of the other modes' ranks"},
      {"--ranks 30 --max-mem 64K", "would fit"},
      {"--ranks 4 --svd qr", "svd"},
      {"--ranks 4 --init svd", "init"},
      {"--ranks 4 --iters 0", "iters"},
  };
  for (const auto& c : cases) {
    auto r = run(mpirun(2) + " tucker " + t + " " + c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << c.args << "\n" << r.out;
  }
  // Bad files end the same way as for cp (message names the file).
  std::ofstream(path("bad.tns")) << "1 2 3 1.0\n1 2 nan\n";
  auto r = run(mpirun(2) + " tucker " + path("bad.tns") + " --ranks 1");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bad.tns"), std::string::npos) << r.out;
  r = run(mpirun(2) + " tucker " + path("missing.tns") + " --ranks 2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("missing.tns"), std::string::npos) << r.out;
}

}  // namespace
