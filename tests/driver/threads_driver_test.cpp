// Threads per rank under mpirun (issue 36, point 6), through the tessera binary at 2 ranks:
//   - without --threads and OMP_NUM_THREADS each rank takes the node's CPUs divided by the
//     ranks on the node (1 on a 2-core machine), the run record says so, and nothing is
//     warned about (the default never oversubscribes);
//   - a count the user gave (OMP_NUM_THREADS here; -t in cli_habits_driver_test) is kept and
//     still warned about when ranks x threads is over the node's CPUs.
// CTest sets OMP_NUM_THREADS for tests: every command here unsets it first.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "driver_util.hpp"
#include "util/cpus.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::run;
using ::tessera::test::tessera;

/// mpiexec at `np` ranks, unbound (every rank sees the whole machine, as on a node where the
/// launcher does not bind), with OMP_NUM_THREADS and SLURM_CPUS_ON_NODE unset unless `env`
/// sets them.
std::string mpirun_unset(int np, const std::string& env = "") {
  return "env -u OMP_NUM_THREADS -u SLURM_CPUS_ON_NODE " + env + " timeout 120 " + MPIEXEC_PATH +
         " -n " + std::to_string(np) + " --oversubscribe --bind-to none " + tessera();
}

class ThreadsDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera-threads-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    x_ = (dir_ / "x.tns").string();
    const auto g = run(tessera() + " generate --dims 12x10x8 --nnz 300 -q -o " + x_);
    ASSERT_EQ(g.code, 0) << g.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static nlohmann::json record(const std::string& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
  }
  static inline fs::path dir_;
  static inline std::string x_;
};

TEST_F(ThreadsDriver, TwoRanksWithoutACountShareTheNodeAndAreNotWarned) {
  const std::string rec = (dir_ / "default.json").string();
  const auto r = run(mpirun_unset(2) + " cp " + x_ + " -r 2 -i 2 --backend cpu --json " + rec);
  ASSERT_EQ(r.code, 0) << r.out;
  // The node's CPUs (this test's own: mask and quota, unbound ranks see the same) over 2
  // ranks: 1 on a 2-core machine.
  const int cpus = tessera::util::usable_cpus().cpus;
  const int expect = std::max(1, cpus / 2);
  const auto j = record(rec);
  EXPECT_EQ(j["machine"]["ranks"], 2) << j["machine"].dump();
  EXPECT_EQ(j["machine"]["threads_per_rank"], expect) << j["machine"].dump();
  if (cpus == 2) {
    EXPECT_EQ(j["machine"]["threads_per_rank"], 1);
  }
  EXPECT_EQ(r.out.find("threads on this node"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("is more than the"), std::string::npos) << r.out;  // no cap either
}

TEST_F(ThreadsDriver, SlurmsGrantSetsTheDefault) {
  // 2 CPUs granted on the node, whatever the machine has: 1 thread per rank, no warning.
  const std::string rec = (dir_ / "slurm.json").string();
  const auto r = run(mpirun_unset(2, "SLURM_CPUS_ON_NODE=2") + " cp " + x_ +
                     " -r 2 -i 2 --backend cpu --json " + rec);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(record(rec)["machine"]["threads_per_rank"], 1);
  EXPECT_EQ(r.out.find("threads on this node"), std::string::npos) << r.out;
}

TEST_F(ThreadsDriver, ACountTheUserGaveIsKeptAndWarnedAbout) {
  // OMP_NUM_THREADS=2 at 2 ranks on a node with 2 CPUs granted: 4 threads, one warning.
  const std::string rec = (dir_ / "omp.json").string();
  const auto r = run(mpirun_unset(2, "SLURM_CPUS_ON_NODE=2 OMP_NUM_THREADS=2") + " cp " + x_ +
                     " -r 2 -i 2 --backend cpu --json " + rec);
  ASSERT_EQ(r.code, 0) << r.out;
  if (tessera::util::usable_cpus().cpus >= 2) {
    EXPECT_EQ(record(rec)["machine"]["threads_per_rank"], 2);
    EXPECT_NE(r.out.find("warning: 4 threads on this node (2 rank(s) x 2 thread(s)) but only 2 "
                         "CPU(s) ("),
              std::string::npos)
        << r.out;
  }
}

}  // namespace
