// Issue 41, point 1, through the `tessera` binary: a table of bad option values, each refused
// with exactly one `tessera: error` line that names the option, no source path, no MPI_ABORT
// banner, and before the input is opened (the input of every row is a file that does not
// exist, or a FIFO that would block a reader: the error must be about the option). The
// options `tessera plan` shares with the command are refused by it with the same line; the
// rows marked `store` are decided by an HDF5 store's header, still before its data is read.
// One row runs on 2 ranks. The whole table takes a few seconds.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;
using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

/// The lines of `out` that start with "tessera: error".
std::vector<std::string> error_lines(const std::string& out) {
  std::istringstream in(out);
  std::vector<std::string> v;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("tessera: error", 0) == 0) v.push_back(line);
  return v;
}

/// The error line without CLI11's suffix " (tessera SUB --help lists the options)", which
/// names the subcommand: what `tessera plan` must print for the same value.
std::string without_help_suffix(std::string line) {
  const auto at = line.rfind(" (tessera ");
  if (at != std::string::npos && line.ends_with("--help lists the options)")) line.resize(at);
  return line;
}

struct Row {
  Row(std::string a, std::string o, std::string p = {}, bool s = false)
      : args(std::move(a)), option(std::move(o)), plan(std::move(p)), store(s) {}
  std::string args;    ///< after `tessera`; {IN} is the input, {D} the fixture folder
  std::string option;  ///< what the error line must name
  std::string plan;    ///< `tessera plan {IN} ...` args refused with the same line ("": none)
  bool store = false;  ///< {IN} is the fixture's HDF5 store (a header check), else missing
};

class ValidateDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera_validate_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "small.tns") << "1 1 1 1.0\n2 2 2 2.0\n3 1 2 0.5\n1 3 3 1.5\n2 3 1 0.7\n";
    std::ofstream(dir_ / "other.tns") << "1 1 1 1.0\n4 2 2 2.0\n3 1 2 0.5\n1 3 3 1.5\n";
    const std::string d = dir_.string();
    const auto ok = [](const tessera::test::Run& r) { ASSERT_EQ(r.code, 0) << r.out; };
    ok(run(tessera() + " convert " + d + "/small.tns " + d + "/small.h5 -q"));
    ok(run(tessera() + " cp " + d + "/small.tns -r 2 -i 2 -q -o " + d + "/m2.h5"));
    ok(run(tessera() + " cp " + d + "/other.tns -r 2 -i 2 -q -o " + d + "/other2.h5"));
    ASSERT_EQ(::mkfifo((d + "/fifo.tns").c_str(), 0600), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string expand(std::string s, const std::string& in) {
    for (auto at = s.find("{IN}"); at != std::string::npos; at = s.find("{IN}"))
      s.replace(at, 4, in);
    for (auto at = s.find("{D}"); at != std::string::npos; at = s.find("{D}"))
      s.replace(at, 3, dir_.string());
    return s;
  }

  /// One refusal: exit != 0, one error line naming `option`, no source path, no banner,
  /// nothing about the input `in`. Returns the line.
  static std::string refused(const std::string& cmd, const tessera::test::Run& r,
                             const std::string& option, const std::string& in) {
    const std::vector<std::string> lines = error_lines(r.out);
    EXPECT_NE(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_EQ(lines.size(), 1u) << cmd << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "MPI_ABORT")) << cmd << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, ".cpp:") || contains(r.out, ".hpp:")) << cmd << "\n" << r.out;
    if (lines.empty()) return {};
    EXPECT_TRUE(contains(lines[0], option)) << cmd << ": want " << option << "\n" << r.out;
    EXPECT_FALSE(contains(lines[0], in) && !contains(option, in))
        << cmd << ": about the input, not the option\n"
        << r.out;
    return lines[0];
  }
  static std::string refused(const std::string& cmd, const std::string& option,
                             const std::string& in) {
    return refused(cmd, run("timeout 60 " + cmd), option, in);
  }

  static inline fs::path dir_;
};

// Inputs that cannot be read: a missing file, and a FIFO with no writer (reading it would
// block; the option must be refused first).
const std::vector<Row> kRows = {
    // cp: the CP values (kCpValues) and the per-mode, file and combination options
    {"cp {IN} -r 0", "--rank", "-r 0"},
    {"cp {IN} --max-seconds=-1", "--max-seconds"},
    {"cp {IN} --holdout 2", "--holdout"},
    {"cp {IN} --tol=-1", "--tol"},
    {"cp {IN} --l1 abc", "--l1"},
    {"cp {IN} --l2=-1", "--l2"},
    {"cp {IN} --l1 0.1,,0.2", "--l1"},
    {"cp {IN} --nonneg 0,x", "--nonneg"},
    {"cp {IN} --init foo", "--init"},
    {"cp {IN} --init file:", "--init"},
    {"cp {IN} --init file:{D}/none.h5", "--init"},
    {"cp {IN} --init file:{D}", "--init"},
    {"cp {IN} --init file:{D}/small.tns", "--init"},
    {"cp {IN} --init file:{D}/m2.h5 -r 3", "--init"},
    {"cp {IN} --init nvecs --resume {D}/c.h5", "--init"},
    {"cp {IN} --resume {D}/none.ckpt.h5", "--resume"},
    {"cp {IN} --cuda-graph maybe", "--cuda-graph"},
    {"cp {IN} --checkpoint-every 2", "--checkpoint-every"},
    {"cp {IN} --comm-strategy layer --partition nnz", "--comm-strategy",
     "--comm-strategy layer --partition nnz"},
    {"cp {IN} --grid 2xa", "--grid", "--grid 2xa"},
    {"cp {IN} --device-budget 12Q", "--device-budget", "--device-budget 12Q"},
    {"cp {IN} --host-budget zz", "--host-budget", "--host-budget zz"},
    {"cp {IN} --tier 4", "--tier", "--tier 4"},
    {"cp {IN} --read-ahead 0", "--read-ahead", "--read-ahead 0"},
    {"cp {IN} --index-base 2", "--index-base", "--index-base 2"},
    {"cp {IN} --precision half", "--precision", "--precision half"},
    {"cp {IN} --backend gpu", "--backend", "--backend gpu"},
    {"cp {IN} --nccl-timeout=-1", "--nccl-timeout", "--nccl-timeout=-1"},
    {"cp {IN} --threads=-1", "--threads", "--threads=-1"},
    {"cp {IN} --json {D}/nofolder/r.json", "--json", "--json {D}/nofolder/r.json"},
    // Against a store's header (order 3, dims 3x3x3), before its data is read.
    {"cp {IN} --l1 0.1,0.2", "--l1", "", true},
    {"cp {IN} --nonneg 5", "--nonneg", "", true},
    {"cp {IN} --grid 1x1", "--grid", "--grid 1x1", true},
    {"cp {IN} -r 2 --init file:{D}/other2.h5", "--init", "", true},
    // tucker
    {"tucker {IN} -r abc", "--ranks", "--workload tucker --ranks abc"},
    {"tucker {IN} -r 0", "--ranks", "--workload tucker --ranks 0"},
    {"tucker {IN} -r 2,,2", "--ranks", "--workload tucker --ranks 2,,2"},
    {"tucker {IN} -r 2 --max-mem zz", "--max-mem"},
    {"tucker {IN} -r 2 --svd qr", "--svd"},
    {"tucker {IN} -r 2 --subspace-steps 0", "--subspace-steps"},
    {"tucker {IN} -r 2 --resume {D}/none.ckpt.h5", "--resume"},
    {"tucker {IN} -r 2 --grid 0x1x1", "--grid", "--workload tucker --grid 0x1x1"},
    {"tucker {IN} -r 9", "--ranks", "--workload tucker --ranks 9", true},
    {"tucker {IN} -r 2,2", "--ranks", "--workload tucker --ranks 2,2", true},
    // contract
    {"contract {IN} {IN} -e ijk", "einsum"},
    {"contract {IN} {IN} -e 'ijk,kab->ija'", "einsum"},
    {"contract {IN} {IN} -e 'ijk,klm->ijlm' --out {D}/z.txt", "--out"},
    {"contract {IN} {IN} -e 'ijk,klm->ijlm' --mem-limit zz", "--mem-limit"},
    {"contract {IN} {IN} -e 'ijk,klm->ijlm' --backend gpu", "--backend"},
    // bench: the options it shares with the runs, before the input is opened
    {"bench cp {IN} --l1 abc", "--l1"},
    {"bench cp {IN} --nonneg 0,x", "--nonneg"},
    {"bench cp {IN} --device-budget 12Q", "--device-budget"},
    {"bench mttkrp {IN} --bandwidth 0", "--bandwidth"},
    {"bench ttmc {IN} --bandwidth fast", "--bandwidth"},
    {"bench tucker {IN} --ranks abc", "--ranks"},
    {"bench tucker {IN} --subspace-steps 0", "--subspace-steps"},
    {"bench ttmc {IN} --ranks 0", "--ranks"},
    // plan's own
    {"plan {IN} --nprocs 0", "--nprocs"},
    {"plan {IN} --workload svd", "--workload"},
};

TEST_F(ValidateDriver, EveryBadOptionIsOneLineNamingItBeforeTheInputIsOpened) {
  const std::string missing = (dir_ / "missing-input.tns").string();
  const std::string fifo = (dir_ / "fifo.tns").string();
  const std::string store = (dir_ / "small.h5").string();
  struct Case {
    std::string cmd, plan_cmd, option, in;
    tessera::test::Run r, plan_r;
  };
  std::vector<Case> cases;
  for (std::size_t k = 0; k < kRows.size(); ++k) {
    const Row& row = kRows[k];
    // Every row on a missing input; every fourth also on a FIFO (a read would block).
    std::vector<std::string> ins{row.store ? store : missing};
    if (!row.store && k % 4 == 0) ins.push_back(fifo);
    for (const std::string& in : ins)
      cases.push_back({tessera() + " " + expand(row.args, in) + " -q",
                       row.plan.empty()
                           ? std::string()
                           : tessera() + " plan " + in + " " + expand(row.plan, in) + " -q",
                       row.option,
                       in,
                       {},
                       {}});
  }
  // Each run is mostly MPI's start-up: 8 at a time keep the table to a few seconds. Each
  // worker's runs get their own Open MPI session folder: singletons that start and finish at
  // once in one folder race on creating and removing it ("mkdir ... File exists", seen once
  // in CI), an error of the harness, not of the option under test.
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) {
    const fs::path session = dir_ / ("mpi-session-" + std::to_string(t));
    fs::create_directories(session);
    const std::string prefix = "OMPI_MCA_orte_tmpdir_base=" + session.string() + " timeout 60 ";
    pool.emplace_back([&, prefix] {
      for (std::size_t k; (k = next++) < cases.size();) {
        cases[k].r = run(prefix + cases[k].cmd);
        if (!cases[k].plan_cmd.empty()) cases[k].plan_r = run(prefix + cases[k].plan_cmd);
      }
    });
  }
  for (auto& t : pool) t.join();
  for (const Case& c : cases) {
    const std::string line = refused(c.cmd, c.r, c.option, c.in);
    if (c.plan_cmd.empty()) continue;
    const std::string plan_line = refused(c.plan_cmd, c.plan_r, c.option, c.in);
    EXPECT_EQ(without_help_suffix(plan_line), without_help_suffix(line))
        << "tessera plan refuses otherwise than the command:\n"
        << c.plan_cmd << "\n"
        << c.cmd;
  }
}

// cp --dry-run prints the plan of a cp run: it checks every cp option first too.
TEST_F(ValidateDriver, DryRunChecksTheOptionsOfItsCommand) {
  const std::string in = (dir_ / "small.tns").string();
  refused(tessera() + " cp " + in + " --l1 abc --dry-run -q", "--l1", in);
  refused(tessera() + " tucker " + in + " -r x --dry-run -q", "--ranks", in);
  const tessera::test::Run ok = run(tessera() + " cp " + in + " -r 2 --dry-run -q");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// tessera plan --nprocs plans other rank counts: a --grid for those counts is not refused
// against this job's ranks (its syntax is).
TEST_F(ValidateDriver, PlanForOtherRankCountsTakesTheirGrid) {
  const std::string h5 = (dir_ / "small.h5").string();
  const tessera::test::Run ok = run(tessera() + " plan " + h5 + " --nprocs 4 --grid 2x2x1 -q");
  EXPECT_EQ(ok.code, 0) << ok.out;
  refused(tessera() + " plan " + h5 + " --nprocs 4 --grid 2xa -q", "--grid", h5);
}

// On 2 ranks: still one line, from rank 0, and no MPI_ABORT banner.
TEST_F(ValidateDriver, TwoRanksPrintOneLineAndNoBanner) {
  const std::string in = (dir_ / "missing-input.tns").string();
  refused(mpirun(2) + " cp " + in + " --l1 abc -q", "--l1", in);
  refused(mpirun(2) + " tucker " + in + " -r 2 --init file:x -q", "--init", in);
}

}  // namespace
