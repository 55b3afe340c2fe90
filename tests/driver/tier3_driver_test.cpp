// Memory tier 3 end to end through the `tessera` binary (mpiexec -n 1 and 2): a generated
// tensor without repeated coordinates, converted to an HDF5 store, decomposed by cp and
// tucker within the host limit (tier 1) and with --tier 3 (the store streamed from disk;
// budgets that pick the tiers are in plan_driver_test): the tier-3 runs say so, record
// memory_tier.tier = 3 and give the fits of tier 1; a killed tier-3 run resumes to the fits of an
// uninterrupted one (and its checkpoint resumes in tier 1); text inputs, the layer strategy and
// --relabel are refused with a message naming the fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "io/checkpoint.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using RunResult = ::tessera::test::Run;

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

std::vector<double> fits_of(const nlohmann::json& j) {
  return j.at("fits").get<std::vector<double>>();
}

void expect_same_fits(const std::vector<double>& got, const std::vector<double>& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " iteration " << i + 1;
}

/// The test tensor: generated (blocks of rank 3 plus noise; generate merges repeated
/// coordinates), as text and as a store. 20000 nonzeros of 20 bytes: about 600 KB per rank
/// at the peak of tiers 1-2 on 2 ranks.
class Tier3Driver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera-tier3-driver-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    tns_ = (dir_ / "x.tns").string();
    h5_ = (dir_ / "x.h5").string();
    RunResult r =
        run(mpirun(2) +
            " generate --dims 60x50x40 --nnz 20000 --rank 3 --noise 0.05 --structure blocks "
            "--seed 4 --out " +
            tns_);
    setup_error_ = r.code == 0 ? "" : "generate failed:\n" + r.out;
    if (!setup_error_.empty()) return;
    r = run(mpirun(2) + " convert " + tns_ + " " + h5_ + " --chunk 3000");
    if (r.code != 0) setup_error_ = "convert failed:\n" + r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  /// Runs and expects success.
  static RunResult ok(const std::string& cmd) {
    RunResult r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return r;
  }
  /// Runs and expects a clean failure: non-zero exit, no hang, one report, the message.
  static void fails(const std::string& cmd, const std::vector<std::string>& expect) {
    RunResult r = run(cmd);
    EXPECT_NE(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_NE(r.code, 124) << cmd << ": hung\n" << r.out;
    for (const auto& e : expect) EXPECT_TRUE(contains(r.out, e)) << cmd << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "tessera: error:"), 1) << cmd << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "iter   1")) << cmd << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "Segmentation")) << cmd << "\n" << r.out;
  }
  /// Checks the output and record of a tier-3 run.
  static void expect_tier3(const RunResult& r, const nlohmann::json& j, const std::string& what) {
    EXPECT_TRUE(contains(r.out, "memory tier 3")) << what << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "tier 3 (streamed from disk)")) << what << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "reading from disk")) << what << "\n" << r.out;
    EXPECT_EQ(j.at("memory_tier").at("tier").get<int>(), 3) << what;
    EXPECT_EQ(j.at("memory_tier").at("copy_kind").get<std::string>(), "disk read") << what;
    const double overlap = j.at("memory_tier").at("overlap_fraction").get<double>();
    EXPECT_GE(overlap, 0.0) << what;
    EXPECT_LE(overlap, 1.0) << what;
    EXPECT_GT(j.at("memory_tier").at("compute_seconds").get<double>(), 0.0) << what;
  }
  static void expect_tier1(const RunResult& r, const nlohmann::json& j, const std::string& what) {
    EXPECT_FALSE(contains(r.out, "memory tier 3")) << what << "\n" << r.out;
    EXPECT_EQ(j.at("memory_tier").at("tier").get<int>(), 1) << what;
  }

  static inline fs::path dir_;
  static inline std::string tns_, h5_, setup_error_;
};

TEST_F(Tier3Driver, StoreHasNoRepeatedCoordinates) {
  // The premise of the fit comparisons: tier 3 counts repeats one by one in ||X||.
  tessera::io::H5TensorReader rd(h5_);
  tessera::SparseTensor<double> x;
  rd.read(0, rd.info().nnz, &x);
  ASSERT_GT(x.nnz(), 15000);
  std::vector<std::uint64_t> keys;
  for (tessera::nnz_t k = 0; k < x.nnz(); ++k)
    keys.push_back((std::uint64_t(x.idx[0][k]) * 50 + x.idx[1][k]) * 40 + x.idx[2][k]);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

TEST_F(Tier3Driver, CpInTier3GivesTheFitsOfTier1) {
  const std::string cp = " cp " + h5_ + " --backend cpu --rank 3 --iters 5 --tol 0";
  std::vector<double> tier3_np1;
  for (int np : {1, 2}) {
    const std::string n = std::to_string(np);
    const std::string a = path("cp1-" + n + ".json"), b = path("cp3-" + n + ".json");
    const RunResult r1 = ok(mpirun(np) + cp + " --json " + a);
    const RunResult r3 = ok(mpirun(np) + cp + " --tier 3 --json " + b);
    const auto j1 = read_json(a), j3 = read_json(b);
    expect_tier1(r1, j1, "tier 1 on " + n);
    expect_tier3(r3, j3, "--tier 3 on " + n);
    EXPECT_TRUE(contains(r3.out, "plan: tier 3 (disk-streamed)")) << r3.out;
    EXPECT_EQ(j3.at("partition").at("scheme").get<std::string>(), "store-order");
    EXPECT_EQ(j3.at("iterations").get<int>(), 5);
    EXPECT_EQ(j3.at("tensor").at("nnz"), j1.at("tensor").at("nnz"));
    expect_same_fits(fits_of(j3), fits_of(j1), 1e-9, "cp tier 3 vs tier 1 on " + n);
    EXPECT_NEAR(j3.at("fit").get<double>(), j1.at("fit").get<double>(), 1e-9);
    EXPECT_GT(j1.at("fit").get<double>(), 0.5);  // rank 3 plus 5% noise
    if (np == 1) {
      tier3_np1 = fits_of(j3);
    } else {
      expect_same_fits(fits_of(j3), tier3_np1, 1e-9, "cp tier 3 on 2 ranks vs 1");
    }
  }
  // Small chunks (--stream-chunk).
  const std::string c = path("cp3-mem.json");
  const RunResult r = ok(mpirun(2) + cp + " --tier 3 --stream-chunk 700 --json " + c);
  expect_tier3(r, read_json(c), "--stream-chunk");
  EXPECT_TRUE(contains(r.out, "chunks of 700 nonzeros")) << r.out;
  expect_same_fits(fits_of(read_json(c)), tier3_np1, 1e-9, "cp --stream-chunk 700");
  // A store partitioned for 2 ranks: each rank streams its block.
  const std::string p = path("p.h5"), pj = path("cp3-blocks.json"), pj1 = path("cp1-blocks.json");
  ok(mpirun(2) + " partition " + h5_ + " --blocks 2 --out " + p);
  const RunResult rb = ok(mpirun(2) + " cp " + p +
                          " --backend reference --rank 3 --iters 5 --tol 0 --tier 3 --json " + pj);
  const auto jb = read_json(pj);
  expect_tier3(rb, jb, "stored blocks");
  EXPECT_EQ(jb.at("partition").at("scheme").get<std::string>(), "store-blocks");
  expect_same_fits(fits_of(jb), tier3_np1, 1e-9, "cp tier 3 on stored blocks");
}

TEST_F(Tier3Driver, TuckerInTier3GivesTheFitsOfTier1) {
  const std::string tk = " tucker " + h5_ + " --backend cpu --ranks 2,2,2 --iters 5 --tol 0";
  std::vector<double> tier3_np1;
  for (int np : {1, 2}) {
    const std::string n = std::to_string(np);
    const std::string a = path("tk1-" + n + ".json"), b = path("tk3-" + n + ".json");
    const RunResult r1 = ok(mpirun(np) + tk + " --json " + a);
    const RunResult r3 = ok(mpirun(np) + tk + " --tier 3 --json " + b);
    const auto j1 = read_json(a), j3 = read_json(b);
    expect_tier1(r1, j1, "tucker tier 1 on " + n);
    expect_tier3(r3, j3, "tucker --tier 3 on " + n);
    expect_same_fits(fits_of(j3), fits_of(j1), 1e-9, "tucker tier 3 vs tier 1 on " + n);
    EXPECT_GT(j1.at("fit").get<double>(), 0.3);
    if (np == 1) {
      tier3_np1 = fits_of(j3);
    } else {
      expect_same_fits(fits_of(j3), tier3_np1, 1e-9, "tucker tier 3 on 2 ranks vs 1");
    }
  }
}

TEST_F(Tier3Driver, RefusedWithAMessageNamingTheFix) {
  fails(mpirun(2) + " cp " + tns_ + " --rank 3 --host-budget 200K", {"convert", "x.tns"});
  fails(mpirun(2) + " tucker " + tns_ + " --ranks 2 --host-budget 200K", {"convert"});
  fails(mpirun(2) + " cp " + h5_ + " --rank 3 --comm-strategy layer --host-budget 200K",
        {"allreduce", "--comm-strategy layer"});
  fails(mpirun(2) + " cp " + h5_ + " --rank 3 --relabel --host-budget 200K", {"--relabel"});
}

double rel_gap(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty()) return 1e300;
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    num += (a[k] - b[k]) * (a[k] - b[k]);
    den += a[k] * a[k];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST_F(Tier3Driver, KilledTier3RunResumesToTheSameFits) {
  const std::string args = " cp " + h5_ + " --backend cpu --rank 3 --iters 6 --tol 0";
  const std::string t3 = " --tier 3";
  const auto full = path("full.h5"), part = path("part.h5"), ckpt = path("part.ckpt.h5");
  RunResult r = ok(mpirun(2) + args + t3 + " --out " + full);
  EXPECT_TRUE(contains(r.out, "memory tier 3")) << r.out;
  // Killed after iteration 3 (test hook): the checkpoint of iteration 2 survives.
  r = run("TESSERA_TEST_KILL_AFTER_ITERATION=3 " + mpirun(2) + args + t3 +
          " --checkpoint-every 2 --out " + part);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "plan: tier 3 (disk-streamed)")) << r.out;
  EXPECT_FALSE(contains(r.out, "iter   4")) << r.out;
  EXPECT_FALSE(fs::exists(part));
  ASSERT_TRUE(fs::exists(ckpt)) << r.out;
  tessera::io::CheckpointInfo info;
  tessera::io::read_cp_checkpoint(ckpt, &info);
  EXPECT_EQ(info.iteration, 2);
  const auto saved = ckpt + ".iter2";
  fs::copy_file(ckpt, saved);
  // Resumed in tier 3: the fits of the uninterrupted run.
  r = ok(mpirun(2) + args + t3 + " --checkpoint-every 2 --out " + part + " --resume " + ckpt);
  EXPECT_TRUE(contains(r.out, "resuming " + ckpt + " after iteration 2")) << r.out;
  EXPECT_TRUE(contains(r.out, "memory tier 3")) << r.out;
  EXPECT_FALSE(contains(r.out, "iter   2 ")) << r.out;
  EXPECT_TRUE(contains(r.out, "iter   6")) << r.out;
  tessera::io::ModelRecord ra, rb;
  const auto a = tessera::io::read_kruskal_h5(full, &ra);
  const auto b = tessera::io::read_kruskal_h5(part, &rb);
  EXPECT_EQ(rb.iterations, 6);
  EXPECT_LE(rel_gap(ra.fit_history, rb.fit_history), 1e-12);
  EXPECT_LE(rel_gap(a.lambda, b.lambda), 1e-12);
  for (int n = 0; n < 3; ++n)
    EXPECT_LE(rel_gap(a.factors[n].data, b.factors[n].data), 1e-12) << "mode " << n;
  // The tier-3 checkpoint resumed in tier 1 on one rank (the same input fingerprint):
  // the same fits within rounding.
  const auto other = path("other.h5");
  r = ok(mpirun(1) + args + " --out " + other + " --resume " + saved);
  EXPECT_FALSE(contains(r.out, "memory tier 3")) << r.out;
  EXPECT_FALSE(contains(r.out, "does not match")) << r.out;
  tessera::io::ModelRecord rc;
  const auto c = tessera::io::read_kruskal_h5(other, &rc);
  ASSERT_EQ(rc.fit_history.size(), ra.fit_history.size());
  for (std::size_t i = 0; i < ra.fit_history.size(); ++i)
    EXPECT_NEAR(rc.fit_history[i], ra.fit_history[i], 1e-9) << "iteration " << i + 1;
  for (int n = 0; n < 3; ++n)
    EXPECT_LE(rel_gap(a.factors[n].data, c.factors[n].data), 1e-8) << "mode " << n;
}

}  // namespace
