// Faults on several ranks (docs/reliability.md, "Faults on several ranks"): `tessera cp` under
// mpiexec with one rank made to fail on purpose (--inject-fault): killed (SIGKILL) or stopped
// (SIGSTOP) at its MTTKRP or inside a collective, an error of its own, its GPU out of memory.
// Each must end the whole job within 60 s (a stopped rank: within --watchdog plus a few
// seconds) with one message naming the rank and the cause, leave no rank running, leave the
// model and checkpoint files whole, and --resume must then finish with the fit of an
// uninterrupted run.
//
// The backend and the rank count come from the environment: TESSERA_FAULT_BACKEND (cpu, the
// default; cuda for the GPU variants, label gpu) and TESSERA_FAULT_NP (default 2).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "comm/nccl_communicator.hpp"
#include "driver_util.hpp"
#include "io/checkpoint.hpp"
#include "io/model_io.hpp"

namespace {

namespace fs = std::filesystem;
using ::tessera::test::contains;
using ::tessera::test::run;
using ::tessera::test::tessera;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

/// True when process `pid` is gone or a zombie (ended, not yet reaped: a container's first
/// process may never reap the orphans it inherits).
bool ended(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class FaultDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = env_or("TESSERA_FAULT_BACKEND", "cpu");
    np_ = std::atoi(env_or("TESSERA_FAULT_NP", "2").c_str());
    if (backend_ == "cuda") {
      const auto r = run("nvidia-smi -L");
      const int gpus = r.code == 0 ? count_of(r.out, "GPU ") : 0;
      if (gpus == 0) GTEST_SKIP() << "no CUDA device visible";
      // Several ranks on one GPU only when asked for (TESSERA_SHARE_GPU, docs/multi-gpu.md).
      if (gpus < np_ && !::tessera::comm::share_gpu_requested())
        GTEST_SKIP() << "fewer GPUs than ranks (" << gpus << " < " << np_ << ")";
    }
    dir_ = fs::temp_directory_path() /
           ("tessera-fault-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // A small random tensor (distinct coordinates, 1-based): every iteration is quick.
    tensor_ = path("x.tns");
    ::tessera::test::write_random_tns(tensor_, 11, 1500, 40, 30, 25);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// `tessera cp` (or `tessera tucker`, with `tucker_`) on np_ ranks, 8 iterations, a
  /// checkpoint after every one. mpiexec gives the ranks it ends Open MPI's default second
  /// between SIGTERM and SIGKILL, as in a user's run: the tests' environment sets none
  /// (cmake/TesseraTesting.cmake), and without it a surviving rank can be killed before it
  /// prints the job's one message (seen under the sanitizers).
  std::string cp(const std::string& extra) const {
    const std::string what =
        tucker_ ? " tucker " + tensor_ + " -r 3 --seed 3" : " cp " + tensor_ + " -r 4 --seed 3";
    return std::string("timeout 150 ") + MPIEXEC_PATH + " -n " + std::to_string(np_) +
           " --oversubscribe --mca odls_base_sigkill_timeout 1 " + tessera() + what +
           " -i 8 --tol 0 -t 1 --backend " + backend_ + " --checkpoint-every 1 --checkpoint " +
           path("m.ckpt.h5") + " " + extra;
  }

  struct Timed {
    ::tessera::test::Run r;
    double seconds = 0;
  };
  static Timed timed(const std::string& cmd) {
    const auto t0 = std::chrono::steady_clock::now();
    Timed t;
    t.r = run(cmd);
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return t;
  }

  double fit_of(const std::string& json) const {
    std::ifstream f(json);
    return nlohmann::json::parse(f)["fit"].get<double>();
  }

  /// The fit of the uninterrupted run; also leaves its model at m.h5 (the file a faulty run
  /// must not damage).
  double reference() {
    const auto r = run(cp("--out " + path("m.h5") + " --json " + path("ref.json")));
    EXPECT_EQ(r.code, 0) << r.out;
    return fit_of(path("ref.json"));
  }

  /// The checks every fault shares: the job ended non-zero within `limit` seconds with
  /// `message` once; the model written before is whole; the checkpoint holds iteration
  /// `ckpt_iter`; no process named in a "pid N" of the output still runs; --resume gives
  /// the uninterrupted fit.
  void expect_fault(const std::string& spec, const std::string& message, double limit,
                    int ckpt_iter, const std::string& extra = "") {
    const double ref = reference();
    fs::remove(path("m.ckpt.h5"));
    const auto t = timed(cp("--out " + path("m.h5") + " --inject-fault " + spec + " " + extra));
    const std::string& out = t.r.out;
    std::printf("[ fault    ] %s on %d %s rank(s): the job ended in %.2f s, status %d\n",
                spec.c_str(), np_, backend_.c_str(), t.seconds, t.r.code);
    EXPECT_NE(t.r.code, 0) << out;
    EXPECT_NE(t.r.code, 124) << "the job hung: " << out;
    EXPECT_LT(t.seconds, limit) << out;
    EXPECT_EQ(count_of(out, message), 1) << out;
    EXPECT_EQ(count_of(out, "tessera: error"), 1) << "one message, not one per rank: " << out;
    std::smatch m;
    for (auto it = out.cbegin(); std::regex_search(it, out.cend(), m, std::regex("pid ([0-9]+)"));
         it = m.suffix().first) {
      EXPECT_TRUE(ended(std::stoi(m[1]))) << "pid " << m[1] << " still runs: " << out;
    }
    ::tessera::io::ModelRecord mr;
    if (tucker_)  // either throws when the file is damaged
      (void)::tessera::io::read_tucker_h5(path("m.h5"), &mr);
    else
      (void)::tessera::io::read_kruskal_h5(path("m.h5"), &mr);
    EXPECT_EQ(mr.iterations, 8) << "the earlier model was replaced";
    if (ckpt_iter > 0) {
      ::tessera::io::CheckpointInfo info;
      if (tucker_)
        (void)::tessera::io::read_tucker_checkpoint(path("m.ckpt.h5"), &info);
      else
        ::tessera::io::read_cp_checkpoint(path("m.ckpt.h5"), &info);
      EXPECT_EQ(info.iteration, ckpt_iter);
      const auto r = run(cp("--resume " + path("m.ckpt.h5") + " --out " + path("m2.h5") +
                            " --json " + path("resumed.json")));
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_NEAR(fit_of(path("resumed.json")), ref, 1e-9 * std::max(1.0, std::abs(ref)));
    }
  }

  std::string backend_;
  int np_ = 2;
  bool tucker_ = false;
  fs::path dir_;
  std::string tensor_;
};

TEST_F(FaultDriver, RankKilledInItsMttkrpEndsTheJobAtOnce) {
  expect_fault("1:kill:kernel:4", "rank 1 (host", 60, 3);
}

TEST_F(FaultDriver, RankKilledInACollectiveEndsTheJobAtOnce) {
  expect_fault("1:kill:collective:5", "ended without finishing", 60, 4);
}

TEST_F(FaultDriver, RankStoppedInACollectiveIsEndedByTheWatchdog) {
  expect_fault("1:stop:collective:3", "rank 1 (host", 3 + 30, 2, "--watchdog 3");
}

TEST_F(FaultDriver, RankStoppedInItsMttkrpIsEndedByTheWatchdog) {
  expect_fault("1:stop:kernel:2", "stopped answering: no heartbeat for", 3 + 30, 1, "--watchdog 3");
}

TEST_F(FaultDriver, RankZeroStoppedIsReportedByRankOne) {
  expect_fault("0:stop:kernel:3", "rank 0 (host", 3 + 30, 2, "--watchdog 3");
}

TEST_F(FaultDriver, ErrorOnOneRankIsItsOwnMessageOnly) {
  // The rank's own error ends the job (MPI_Abort); the watchdogs stay silent.
  expect_fault("1:error:kernel:2", "injected error (--inject-fault 1:error:kernel:2)", 60, 1);
}

TEST_F(FaultDriver, DeviceOutOfMemoryOnOneRank) {
  if (backend_ != "cuda") GTEST_SKIP() << "oom fills a GPU: the cuda variant (gpu_faults_np2)";
  expect_fault("1:oom:kernel:2", "out of memory", 60, 1);
}

TEST_F(FaultDriver, TuckerRankKilledInItsTtmcEndsTheJobAndResumes) {
  tucker_ = true;
  expect_fault("1:kill:kernel:3", "ended without finishing", 60, 2);
}

TEST_F(FaultDriver, BadFaultAndWatchdogValuesAreOneLine) {
  auto r = run(tessera() + " cp " + tensor_ + " -r 2 --inject-fault 1:explode:kernel");
  EXPECT_EQ(r.code, 105) << r.out;  // CLI11's validation error
  EXPECT_TRUE(contains(r.out, "unknown KIND 'explode'")) << r.out;
  EXPECT_EQ(count_of(r.out, "\n"), 1) << r.out;
  r = run(tessera() + " cp " + tensor_ + " -r 2 --watchdog 0.5");
  EXPECT_EQ(r.code, 105) << r.out;
  EXPECT_TRUE(contains(r.out, "--watchdog")) << r.out;
  EXPECT_TRUE(contains(r.out, "expected seconds >= 1 (0: no watchdog)")) << r.out;
}

}  // namespace
