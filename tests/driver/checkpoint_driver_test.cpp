// End-to-end checkpoint and restart through the tessera binary under mpiexec -n 2: a run
// with --checkpoint-every 2 killed after iteration 3 (the test hook
// TESSERA_TEST_KILL_AFTER_ITERATION sends SIGKILL to every rank, like a scheduler's time
// limit) keeps the checkpoint of iteration 2; --resume then writes the same model as an
// uninterrupted run (cp with both strategies and float, tucker), also on 3 ranks; and
// clear errors (non-zero exit on every rank, no hang) for checkpoints that do not match.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "io/checkpoint.hpp"
#include "io/model_io.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::Run;
using ::tessera::test::tessera;

class CheckpointDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-ckpt-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string generated(const std::string& name = "demo.tns", int seed = 1) {
    const auto t = path(name);
    auto r = run(mpirun(2) +
                 " generate --dims 60x50x40 --nnz 20000 --rank 4 --noise 0.05 --structure "
                 "sampled --seed " +
                 std::to_string(seed) + " --out " + t);
    EXPECT_EQ(r.code, 0) << r.out;
    return t;
  }
  /// Files in the test folder whose name starts with `prefix` + ".tmp" (left-over temporaries).
  std::vector<std::string> temporaries(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const auto f = e.path().filename().string();
      if (f.rfind(prefix + ".tmp", 0) == 0) out.push_back(f);
    }
    return out;
  }
  fs::path dir_;
};

double rel_gap(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    num += (a[k] - b[k]) * (a[k] - b[k]);
    den += a[k] * a[k];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

const std::string kKill = "TESSERA_TEST_KILL_AFTER_ITERATION=3 ";

/// A CP model without its column scaling: per component the weight lambda_r x the product of
/// its columns' 2-norms, then every column at unit 2-norm (two models that differ only in how
/// their columns are scaled give the same vector).
std::vector<double> canonical(const tessera::KruskalModel& m) {
  const int R = m.rank;
  std::vector<double> w(m.lambda.begin(), m.lambda.end()), cols;
  for (const auto& F : m.factors) {
    for (int r = 0; r < R; ++r) {
      double s = 0;
      for (std::int64_t i = 0; i < F.rows; ++i) s += F(i, r) * F(i, r);
      s = std::sqrt(s);
      w[static_cast<std::size_t>(r)] *= s;
      for (std::int64_t i = 0; i < F.rows; ++i) cols.push_back(s > 0 ? F(i, r) / s : 0.0);
    }
  }
  w.insert(w.end(), cols.begin(), cols.end());
  return w;
}

TEST_F(CheckpointDriver, HelpListsTheOptions) {
  for (const char* sub : {" cp", " tucker"}) {
    auto r = run(tessera() + sub + " --help");
    EXPECT_EQ(r.code, 0) << r.out;
    for (const char* opt : {"--checkpoint-every", "--checkpoint", "--resume"})
      EXPECT_NE(r.out.find(opt), std::string::npos) << sub << " " << opt;
  }
}

TEST_F(CheckpointDriver, CpKilledRunResumesToTheSameModel) {
  const auto t = generated();
  for (const std::string extra : {"", " --comm-strategy layer --precision float"}) {
    const std::string args = " cp " + t + " --rank 4 --iters 6 --tol 0" + extra;
    const auto full = path("full.h5"), part = path("part.h5"), ckpt = path("part.ckpt.h5");
    fs::remove(part);
    fs::remove(ckpt);
    auto r = run(mpirun(2) + args + " --out " + full);
    ASSERT_EQ(r.code, 0) << r.out;

    // Killed after iteration 3: the checkpoint of iteration 2 survives (at most K = 2 lost).
    r = run(kKill + mpirun(2) + args + " --checkpoint-every 2 --out " + part);
    EXPECT_NE(r.code, 0) << extra << "\n" << r.out;
    EXPECT_NE(r.out.find("checkpoint: iteration 2 written to " + ckpt), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("iter   3"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("iter   4"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(part));
    ASSERT_TRUE(fs::exists(ckpt)) << r.out;
    EXPECT_TRUE(temporaries("part.ckpt.h5").empty());
    tessera::io::CheckpointInfo info;
    tessera::io::read_cp_checkpoint(ckpt, &info);
    EXPECT_EQ(info.iteration, 2);
    EXPECT_EQ(info.fit_history.size(), 2u);

    // Resumed with the same options (--iters counts all iterations): the same model.
    r = run(mpirun(2) + args + " --checkpoint-every 2 --out " + part + " --resume " + ckpt);
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.out;
    EXPECT_NE(r.out.find("resuming " + ckpt + " after iteration 2"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("iter   2 "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("iter   6"), std::string::npos) << r.out;
    tessera::io::ModelRecord ra, rb;
    const auto a = tessera::io::read_kruskal_h5(full, &ra);
    const auto b = tessera::io::read_kruskal_h5(part, &rb);
    EXPECT_EQ(rb.iterations, 6);
    EXPECT_LE(rel_gap(ra.fit_history, rb.fit_history), 1e-12) << extra;
    EXPECT_LE(rel_gap(a.lambda, b.lambda), 1e-12) << extra;
    for (int n = 0; n < 3; ++n)
      EXPECT_LE(rel_gap(a.factors[n].data, b.factors[n].data), 1e-12) << extra << " mode " << n;
    tessera::io::read_cp_checkpoint(ckpt, &info);
    EXPECT_EQ(info.iteration, 6);

    // The checkpoint of iteration 2 resumed on 3 ranks: the same model within rounding.
    r = run(kKill + mpirun(2) + args + " --checkpoint-every 2 --out " + part);
    EXPECT_NE(r.code, 0) << r.out;
    r = run(mpirun(3) + args + " --out " + part + " --resume " + ckpt);
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.out;
    const auto c = tessera::io::read_kruskal_h5(part, &rb);
    const double tol = extra.empty() ? 1e-9 : 2e-3;
    EXPECT_LE(rel_gap(ra.fit_history, rb.fit_history), tol) << extra;
    for (int n = 0; n < 3; ++n)
      EXPECT_LE(rel_gap(a.factors[n].data, c.factors[n].data), tol) << extra << " mode " << n;
  }
}

TEST_F(CheckpointDriver, CpTimeLimitStopsWritesACheckpointAndResumes) {
  const auto t = generated();
  const std::string args = " cp " + t + " --rank 4 --iters 6 --tol 0";
  const auto full = path("full.h5"), part = path("part.h5"), ckpt = path("part.ckpt.h5");
  auto r = run(mpirun(2) + args + " --out " + full + " --json " + path("full.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("after 6 iteration(s) (iteration limit)"), std::string::npos) << r.out;
  // A limit every iteration passes: the first one ends the run, on both ranks, with a
  // checkpoint at the stop although --checkpoint-every 4 would not have written one yet.
  r = run(mpirun(2) + args + " --max-seconds 1e-9 --checkpoint-every 4 --out " + part + " --json " +
          path("part.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("after 1 iteration(s) (time limit)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpoint: iteration 1 written to " + ckpt), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("iter   2"), std::string::npos) << r.out;
  {
    std::ifstream f(path("part.json"));
    const auto j = nlohmann::json::parse(f);
    EXPECT_EQ(j.at("stop_reason"), "time limit");
    EXPECT_EQ(j.at("iterations"), 1);
    EXPECT_EQ(j.at("options").at("max_seconds"), 1e-9);
    std::ifstream g(path("full.json"));
    EXPECT_EQ(nlohmann::json::parse(g).at("stop_reason"), "iteration limit");
  }
  // Resumed without the limit, printing every 2nd iteration: the uninterrupted model.
  r = run(mpirun(2) + args + " --print-every 2 --out " + part + " --resume " + ckpt);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming " + ckpt + " after iteration 1"), std::string::npos) << r.out;
  for (const char* shown : {"iter   2 ", "iter   4 ", "iter   6 "})
    EXPECT_NE(r.out.find(shown), std::string::npos) << shown << "\n" << r.out;
  for (const char* hidden : {"iter   3 ", "iter   5 "})
    EXPECT_EQ(r.out.find(hidden), std::string::npos) << hidden << "\n" << r.out;
  tessera::io::ModelRecord ra, rb;
  const auto a = tessera::io::read_kruskal_h5(full, &ra);
  const auto b = tessera::io::read_kruskal_h5(part, &rb);
  EXPECT_EQ(rb.iterations, 6);
  EXPECT_LE(rel_gap(ra.fit_history, rb.fit_history), 1e-12);
  for (int n = 0; n < 3; ++n)
    EXPECT_LE(rel_gap(a.factors[n].data, b.factors[n].data), 1e-12) << "mode " << n;
  // The last iteration is printed whatever --print-every says; bad values are refused.
  r = run(mpirun(1) + args + " --print-every 4");
  EXPECT_NE(r.out.find("iter   4 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("iter   6 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("iter   5 "), std::string::npos) << r.out;
  for (const char* bad : {" --max-seconds -1", " --print-every 0"}) {
    r = run(mpirun(1) + args + bad);
    EXPECT_NE(r.code, 0) << bad << "\n" << r.out;
    EXPECT_NE(r.out.find(std::string(bad).substr(1, std::string(bad).find(' ', 1) - 1)),
              std::string::npos)
        << r.out;
  }
}

TEST_F(CheckpointDriver, CpStartsFromAModelFile) {
  const auto t = generated();
  const std::string args = " cp " + t + " --rank 4 --tol 0";
  const auto full = path("full.h5"), m3 = path("m3.h5"), cont = path("cont.h5");
  auto r = run(mpirun(2) + args + " --iters 6 --out " + full);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(mpirun(2) + args + " --iters 3 --out " + m3);
  ASSERT_EQ(r.code, 0) << r.out;
  // Three more iterations from the model of the first three: those of the 6-iteration run.
  r = run(mpirun(2) + args + " --iters 3 --init file:" + m3 + " --out " + cont + " --json " +
          path("cont.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("starting from the model in " + m3), std::string::npos) << r.out;
  tessera::io::ModelRecord ra, rc;
  const auto a = tessera::io::read_kruskal_h5(full, &ra);
  const auto c = tessera::io::read_kruskal_h5(cont, &rc);
  ASSERT_EQ(ra.fit_history.size(), 6u);
  ASSERT_EQ(rc.fit_history.size(), 3u);
  EXPECT_LE(rel_gap({ra.fit_history.begin() + 3, ra.fit_history.end()}, rc.fit_history), 1e-12);
  // The same model; its columns may be scaled otherwise (the first iteration of a run
  // normalises by the 2-norm, later ones by the max-norm).
  EXPECT_LE(rel_gap(canonical(a), canonical(c)), 1e-10);
  {
    std::ifstream f(path("cont.json"));
    EXPECT_EQ(nlohmann::json::parse(f).at("options").at("init"), "file:" + m3);
  }
  // On 3 ranks: the same within rounding.
  r = run(mpirun(3) + args + " --iters 3 --init file:" + m3 + " --out " + cont + " --force");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto c3 = tessera::io::read_kruskal_h5(cont, &rc);
  EXPECT_LE(rel_gap({ra.fit_history.begin() + 3, ra.fit_history.end()}, rc.fit_history), 1e-9);
  EXPECT_LE(rel_gap(canonical(a), canonical(c3)), 1e-8);
  // Refusals, each one error line naming what is wrong; the model file is untouched.
  const auto before = fs::last_write_time(m3);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {" --iters 2 --rank 5 --init file:" + m3, "rank 4"},
      {" --iters 2 --init file:" + path("none.h5"), "none.h5"},
      {" --iters 2 --init svd", "expected random, nvecs or file:MODEL.h5"},
      {" --iters 2 --init file:" + m3 + " --resume " + m3, "not both"},
      {" --iters 2 --init file:" + m3 + " --out " + m3, m3},
  };
  for (const auto& [extra, want] : bad) {
    r = run(mpirun(2) + " cp " + t + " --tol 0" +
            (extra.find("--rank") == std::string::npos ? std::string(" --rank 4") : std::string()) +
            extra);
    EXPECT_NE(r.code, 0) << extra << "\n" << r.out;
    EXPECT_NE(r.code, 124) << "hung: " << extra;
    EXPECT_NE(r.out.find(want), std::string::npos) << extra << "\n" << r.out;
    EXPECT_EQ(r.out.find("iter   1"), std::string::npos) << extra << "\n" << r.out;
  }
  EXPECT_EQ(fs::last_write_time(m3), before);
  EXPECT_EQ(tessera::io::read_kruskal_h5(m3, &rc).rank, 4);
}

TEST_F(CheckpointDriver, TuckerKilledRunResumesToTheSameModel) {
  const auto t = generated();
  const std::string args = " tucker " + t + " --ranks 4,4,3 --iters 6 --tol 0 --svd subspace";
  const auto full = path("full.h5"), part = path("part.h5"), ckpt = path("tucker.ckpt");
  auto r = run(mpirun(2) + args + " --out " + full);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(kKill + mpirun(2) + args + " --checkpoint-every 2 --checkpoint " + ckpt + " --out " +
          part);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(part));
  ASSERT_TRUE(fs::exists(ckpt)) << r.out;
  tessera::io::CheckpointInfo info;
  tessera::io::read_tucker_checkpoint(ckpt, &info);
  EXPECT_EQ(info.iteration, 2);
  r = run(mpirun(2) + args + " --out " + part + " --resume " + ckpt);
  ASSERT_EQ(r.code, 0) << r.out;
  tessera::io::ModelRecord ra, rb;
  const auto a = tessera::io::read_tucker_h5(full, &ra);
  const auto b = tessera::io::read_tucker_h5(part, &rb);
  EXPECT_EQ(rb.iterations, 6);
  EXPECT_LE(rel_gap(ra.fit_history, rb.fit_history), 1e-12);
  EXPECT_LE(rel_gap(a.core, b.core), 1e-12);
  for (int n = 0; n < 3; ++n) EXPECT_LE(rel_gap(a.factors[n].data, b.factors[n].data), 1e-12);
}

TEST_F(CheckpointDriver, ErrorsAreClearOnEveryRank) {
  const auto t = generated();
  const auto ckpt = path("run.ckpt.h5");
  auto r = run(mpirun(2) + " cp " + t + " --rank 4 --iters 3 --checkpoint-every 2 --out " +
               path("run.h5"));
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(fs::exists(ckpt));
  const auto other = generated("other.tns", 2);
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {" cp " + t + " --rank 4 --checkpoint-every 2", "--checkpoint-every needs a checkpoint file"},
      {" cp " + t + " --rank 4 --checkpoint " + ckpt, "needs --checkpoint-every"},
      {" cp " + t + " --rank 4 --checkpoint-every 1 --checkpoint " + path("nowhere/x.h5"),
       "folder '" + path("nowhere") + "' does not exist"},
      {" cp " + t + " --rank 4 --checkpoint-every 1 --checkpoint " + path(""), "it is a folder"},
      {" cp " + t + " --rank 4 --resume " + path("missing.h5"), "does not exist"},
      {" cp " + t + " --rank 5 --resume " + ckpt, "--rank 4 in the checkpoint, 5 now"},
      {" cp " + t + " --rank 4 --precision float --resume " + ckpt,
       "precision double in the checkpoint, float now"},
      {" cp " + other + " --rank 4 --resume " + ckpt, "does not match this run"},
      {" cp " + t + " --rank 4 --iters 1 --resume " + ckpt, "more than --iters 1"},
      {" tucker " + t + " --ranks 4 --resume " + ckpt,
       "'tessera-kruskal' model, this run needs 'tessera-tucker'"},
      {" cp " + t + " --rank 4 --resume " + path("run.h5"), "not a checkpoint"},
  };
  for (const auto& c : cases) {
    r = run(mpirun(2) + c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("iter   1"), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << c.args << "\n" << r.out;
  }
  // A finished run resumed again: nothing left to do, the same model.
  r = run(mpirun(2) + " cp " + t + " --rank 4 --iters 2 --out " + path("again.h5") + " --resume " +
          ckpt);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no iterations left"), std::string::npos) << r.out;
}

}  // namespace
