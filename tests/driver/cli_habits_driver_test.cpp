// Command-line habits (issue 20, point 5), through the tessera binary:
//   - ranks x threads over the node's CPUs (here: SLURM_CPUS_ON_NODE) gets one warning line
//     on rank 0 naming the numbers and what to run instead; a run that fits gets none;
//   - -t is --threads (SPLATT users type it), the tolerance is only --tol;
//   - options a subcommand does not use are refused with one line naming them and the
//     subcommands that have them (contract --host-budget 1M --stream-chunk 1000 used to run
//     without a word), also under bench and bench contract;
//   - --help shows the default of every numeric option.
// Kernel tuning (issue 17, point 4): every computing subcommand has the "Kernel tuning"
// options with their defaults in --help, refuses a bad value with one line naming the
// option, and writes them into the run record's "tuning" object.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class CliHabits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tessera-cli-habits-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    x_ = (dir_ / "x.tns").string();
    const auto g = run(tessera() + " generate --dims 12x10x8 --nnz 300 -q -o " + x_);
    ASSERT_EQ(g.code, 0) << g.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static nlohmann::json read_json(const std::string& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
  }
  static inline fs::path dir_;
  static inline std::string x_;
};

// --- (1) oversubscription ----------------------------------------------------------------

TEST_F(CliHabits, RanksTimesThreadsOverTheAllocationWarnsOnceOnRankZero) {
  // 2 ranks x 1 thread on a node where Slurm granted 1 CPU.
  const auto r =
      run("SLURM_CPUS_ON_NODE=1 " + mpirun(2) + " cp " + x_ + " -r 2 -i 1 -t 1 --backend cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_of(r.out, "threads on this node"), 1) << r.out;  // rank 0 only, one line
  EXPECT_NE(r.out.find("warning: 2 threads on this node (2 rank(s) x 1 thread(s)) but only 1 "
                       "CPU(s) (SLURM_CPUS_ON_NODE"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("run --threads 1 (or OMP_NUM_THREADS=1) or fewer ranks per node"),
            std::string::npos)
      << r.out;
}

TEST_F(CliHabits, ThreadsWithinTheAllocationDoNotWarn) {
  const auto r =
      run("SLURM_CPUS_ON_NODE=64 " + tessera() + " cp " + x_ + " -r 2 -i 1 -t 1 --backend cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("threads on this node"), std::string::npos) << r.out;
}

// --- (2) -t is --threads -----------------------------------------------------------------

TEST_F(CliHabits, DashTIsThreadsAndTolHasOnlyItsLongName) {
  for (const std::string cmd : {"cp", "tucker"}) {
    const std::string rec = path(cmd + "-t.json");
    const std::string rank = cmd == "cp" ? " -r 2" : " -r 2,2,2";
    const auto r =
        run(tessera() + " " + cmd + " " + x_ + rank + " -i 2 -t 2 --backend cpu -q --json " + rec);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = read_json(rec);
    ASSERT_TRUE(j.contains("options") && j["options"].contains("threads")) << j.dump(1);
    EXPECT_EQ(j["options"]["threads"], 2) << cmd;  // -t 2: two threads ...
    EXPECT_EQ(j["options"]["tol"], 1e-5) << cmd;   // ... and the default tolerance
    // The tolerance as -t (the old meaning) is refused: not a thread count.
    const auto bad = run(tessera() + " " + cmd + " " + x_ + rank + " -t 1e-4 --backend cpu -q");
    EXPECT_NE(bad.code, 0) << bad.out;
    EXPECT_NE(bad.out.find("--threads"), std::string::npos) << bad.out;
    const auto tol = run(tessera() + " " + cmd + " " + x_ + rank +
                         " -i 2 --tol 1e-4 --backend cpu -q --json " + rec);
    ASSERT_EQ(tol.code, 0) << tol.out;
    EXPECT_EQ(read_json(rec)["options"]["tol"], 1e-4) << cmd;
  }
}

// --- (3) options that do not apply -------------------------------------------------------

TEST_F(CliHabits, OptionsASubcommandDoesNotUseAreRefusedWithOneLine) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {" contract " + x_ + " " + x_ +
           " --einsum 'ijk,ijl->kl' --host-budget 1M --stream-chunk 1000",
       "tessera: error: --host-budget and --stream-chunk do not apply to tessera contract "
       "(--host-budget: an option of cp, bench, tucker, plan; --stream-chunk: an option of "
       "cp, tucker, plan); tessera contract --help lists its options"},
      {" contract " + x_ + " " + x_ + " --einsum 'ijk,ijl->kl' --tier 2",
       "--tier does not apply to tessera contract"},
      {" bench contract --generate --tier 2", "--tier does not apply to tessera bench contract"},
      {" bench contract --generate --host-budget 1M",
       "--host-budget: is an option of bench mttkrp|cp|ttmc|tucker, not of bench contract"},
      {" bench mttkrp " + x_ + " --iters 3",
       "--iters: does not apply to bench mttkrp (only to bench cp|tucker)"},
      {" bench cp " + x_ + " --repeat 3",
       "--repeat: does not apply to bench cp (only to bench mttkrp|ttmc)"},
      {" bench cp " + x_ + " --subspace-steps 2",
       "--subspace-steps: does not apply to bench cp (only to bench tucker)"},
      {" bench cp " + x_ + " --nnz 100", "--nnz: applies only with --generate"},
      {" plan " + x_ + " --dry-run", "--dry-run does not apply to tessera plan"},
      // tessera plan's time model, contract and workload options, where they are not used
      {" plan " + x_ + " --kernel-ratio 5",
       "--kernel-ratio: applies only with --nprocs or --nodes"},
      {" plan " + x_ + " --link-gbps 25", "--link-gbps: applies only with --nprocs or --nodes"},
      {" plan " + x_ + " --nprocs 2 --products 1e9",
       "--products: applies only with --workload contract"},
      {" plan " + x_ + " --ranks 2,2,2", "--ranks: applies only with --workload tucker"},
      {" plan " + x_ + " --workload tucker --ranks 2 -r 4",
       "--rank: applies only with --workload cp"},
      {" plan " + x_ + " --nprocs 1,2 --host-wait-us 5",
       "--host-wait-us: applies only with --workload tucker"},
      {" plan " + x_ + " --svd subspace", "--svd: applies only with --workload tucker"},
      {" plan " + x_ + " --workload tucker --ranks 2 --svd subspace --comm-strategy allreduce",
       "--comm-strategy allreduce with --svd subspace"},
      {" plan --workload contract --contract-nnz 1e6,1e6 --products 1e8 --products-rate 1e9 "
       "--nprocs 2 --dense-ms 1",
       "--dense-ms: applies only with --workload cp or tucker"},
      {" cp " + x_ + " --no-such-option 3",
       "unknown option --no-such-option; tessera cp --help lists its options"},
  };
  for (const Case& c : cases) {
    const auto r = run(tessera() + c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "\n"), 1) << c.args << "\n" << r.out;  // one line
    EXPECT_EQ(r.out.rfind("tessera: error: ", 0), 0u) << r.out;
  }
  // The options a subcommand does use still work.
  const auto ok = run(tessera() + " contract " + x_ + " " + x_ +
                      " --einsum 'ijk,ijl->kl' --backend cpu -t 1 -q");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// `tessera` with no subcommand prints its usage (the subcommands) before the error line, and
// fails (issue 42).
TEST_F(CliHabits, NoSubcommandPrintsTheUsage) {
  const auto r = run(tessera());
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Usage: "), std::string::npos) << r.out;
  for (const char* sub : {"cp", "tucker", "contract", "plan", "convert"})
    EXPECT_NE(r.out.find("\n  " + std::string(sub) + " "), std::string::npos) << sub << r.out;
  EXPECT_NE(r.out.find("tessera: error: A subcommand is required"), std::string::npos) << r.out;
}

// A process started without mpiexec is an MPI singleton, which the tessera binary starts
// without Open MPI's helper daemon (util/mpi_env.hpp; 0.2 s of every start). With the
// daemon asked back (the variable set by the user is kept) the run is the same.
TEST_F(CliHabits, ASingletonRunsTheSameWithOrWithoutOpenMpisHelperDaemon) {
  const std::string cmd = " cp " + x_ + " -r 2 --seed 3 --iters 4 --threads 1";
  const auto isolated = run(tessera() + cmd);
  const auto daemon = run("OMPI_MCA_ess_singleton_isolated=0 " + tessera() + cmd);
  ASSERT_EQ(isolated.code, 0) << isolated.out;
  ASSERT_EQ(daemon.code, 0) << daemon.out;
  const auto fit = [](const std::string& out) {
    const std::size_t p = out.find("done: fit ");
    return p == std::string::npos ? std::string() : out.substr(p, out.find(" after", p) - p);
  };
  EXPECT_FALSE(fit(isolated.out).empty()) << isolated.out;
  EXPECT_EQ(fit(isolated.out), fit(daemon.out)) << isolated.out << daemon.out;
}

// --- (4) --help shows the defaults -------------------------------------------------------

TEST_F(CliHabits, HelpShowsTheDefaultOfEveryNumericOption) {
  const std::vector<std::string> subs = {"cp",      "tucker",        "contract",  "generate",
                                         "convert", "plan",          "partition", "info",
                                         "bench",   "bench contract"};
  for (const std::string& s : subs) {
    const auto r = run(tessera() + " " + s + " --help");
    ASSERT_EQ(r.code, 0) << s << "\n" << r.out;
    std::istringstream in(r.out);
    int numeric = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("  -", 0) != 0) continue;  // option lines start with two spaces and -
      const bool typed = line.find(" INT") != std::string::npos ||
                         line.find(" UINT") != std::string::npos ||
                         line.find(" FLOAT") != std::string::npos;
      if (!typed) continue;
      ++numeric;
      EXPECT_NE(line.find('='), std::string::npos) << s << ": no default shown in: " << line;
    }
    if (s != "info" && s != "convert" && s != "partition") {
      EXPECT_GT(numeric, 0) << s;
    }
  }
  const auto cp = run(tessera() + " cp --help");
  EXPECT_NE(cp.out.find("-r,--rank INT:INT in [1 - 4096]=16"), std::string::npos) << cp.out;
  EXPECT_NE(cp.out.find("--backend TEXT:{auto,reference,cpu,cuda}=auto"), std::string::npos);
  EXPECT_NE(cp.out.find("-t,--threads INT:NONNEGATIVE=0"), std::string::npos) << cp.out;
  EXPECT_NE(cp.out.find("--tol FLOAT:NONNEGATIVE=1e-05"), std::string::npos) << cp.out;
}

// --- kernel tuning options (issue 17, point 4) -------------------------------------------

// Each tuning option with the text its --help line shows: name, type and checks, default.
struct TuningFlag {
  std::string name, shown;
};
const std::vector<TuningFlag>& tuning_flags() {
  static const std::vector<TuningFlag> flags = {
      {"--cuda-layout", "--cuda-layout TEXT:{default,auto,plain,smem,l2}=default"},
      {"--cuda-block-rows", "--cuda-block-rows UINT:UINT in [0 - 4294967295]=0"},
      {"--cuda-l2-hint", "--cuda-l2-hint TEXT:{on,off}=on"},
      {"--mttkrp-kernel", "--mttkrp-kernel TEXT:{auto,blocked,classic}=auto"},
      {"--tensor-cores", "--tensor-cores TEXT:{auto,on,off}=auto"},
      {"--tc-precision", "--tc-precision TEXT:{auto,3xtf32,tf32,bf16,fp64}=auto"},
      {"--tc-tile-density", "--tc-tile-density FLOAT:(0, 1]=0.25"},
      {"--ttmc-kernel", "--ttmc-kernel TEXT:{auto,cores}=auto"},
      {"--eig-solver", "--eig-solver TEXT:{auto,exact}=auto"},
      {"--ttmc-tile", "--ttmc-tile INT:0|64..65536 (multiple of 32)=0"},
      {"--sptc-pool", "--sptc-pool TEXT:{on,off}=on"},
      {"--sptc-tc-threshold", "--sptc-tc-threshold,--tc-threshold FLOAT:NUMBER=-1"},  // alias
      {"--cpu-isa", "--cpu-isa TEXT:{auto,base,avx2,avx512}=auto"},
      {"--trace", "--trace"},
      {"--nccl-timeout", "--nccl-timeout FLOAT:NONNEGATIVE=1800"},
  };
  return flags;
}

TEST_F(CliHabits, HelpListsTheKernelTuningOptionsWithTheirDefaults) {
  for (const std::string s : {"cp", "tucker", "contract", "plan", "bench", "bench contract"}) {
    const auto r = run(tessera() + " " + s + " --help");
    ASSERT_EQ(r.code, 0) << s << "\n" << r.out;
    EXPECT_NE(r.out.find("Kernel tuning:"), std::string::npos) << s << "\n" << r.out;
    for (const TuningFlag& f : tuning_flags()) {
      EXPECT_NE(r.out.find("  " + f.shown), std::string::npos) << s << ": " << f.shown << "\n"
                                                               << r.out;
    }
  }
  // Subcommands that do not compute have none of them.
  for (const std::string s : {"generate", "convert", "partition", "info", "export"}) {
    const auto r = run(tessera() + " " + s + " --help");
    ASSERT_EQ(r.code, 0) << s << "\n" << r.out;
    EXPECT_EQ(r.out.find("--cuda-layout"), std::string::npos) << s << "\n" << r.out;
  }
}

// Values that must be >= 0 say what they expected in one short line: no wrapped seed (an
// unsigned option once took "-1" as 2^64 - 1, and 1e20 as 2^64 - 1 silently), no printout of
// a double's whole range.
TEST_F(CliHabits, ANegativeOrOverflowingValueSaysWhatItExpected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" cp " + x_ + " -r 2 -s -1", "--seed: expected a whole number >= 0, found '-1'"},
      {" cp " + x_ + " -r 2 -s 99999999999999999999",
       "--seed: expected a whole number from 0 to 18446744073709551615"},
      {" tucker " + x_ + " -r 2,2,2 -s -1", "--seed: expected a whole number >= 0"},
      {" generate --dims 5x5x5 --nnz 10 -s 99999999999999999999 -o g.tns",
       "--seed: expected a whole number from 0 to"},
      {" cp " + x_ + " -r 2 --tol -1", "--tol: expected a finite number >= 0, found '-1'"},
      {" generate --dims 5x5x5 --nnz 10 --noise inf -o g.tns",
       "--noise: expected a finite number >= 0, found 'inf'"},
      {" cp " + x_ + " -r 2 -t abc", "--threads: expected a whole number >= 0, found 'abc'"},
      {" plan --shape 10x10x10 --nnz 1e19 --nprocs 2",
       "--nnz: expected a whole number of "
       "nonzeros below 2^63, found 1e+19"},
      {" plan --shape 10x10x10 --nnz 5e3 --nprocs 2", "more nonzeros than the 1000 cells"},
  };
  {  // one stored entry, held out: nothing to train on (once "every value is 0")
    std::ofstream(path("one.tns")) << "3 3 3 2.5\n";
  }
  const std::vector<std::pair<std::string, std::string>> more = {
      {" cp " + path("one.tns") + " -r 1 --holdout 0.5",
       "--holdout 0.5 held out all 1 stored entries: none is left to train on"},
      {" export " + path("nope.h5"), "export: cannot open '" + path("nope.h5") + "': no such file"},
      {" generate --dims 5x5x5 --nnz 1e30 -o " + path("g.tns"),
       "--nnz: expected a whole number of nonzeros, 1 or more and below 2^63, found 1e+30"},
  };
  for (const auto& [args, want] : more) {
    const auto r = run(tessera() + args + " -q");
    EXPECT_NE(r.code, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  }
  // An option of the subcommand typed before its name.
  const auto r = run(tessera() + " --backend cpu cp " + x_);
  EXPECT_NE(r.out.find("--backend is an option of tessera cp: write it after the subcommand"),
            std::string::npos)
      << r.out;
  for (const auto& [args, want] : cases) {
    const auto r = run(tessera() + args + " --backend cpu -q");
    EXPECT_NE(r.code, 0) << args << "\n" << r.out;
    EXPECT_LT(r.code, 128) << args << ": a crash\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "\n"), 1) << args << "\n" << r.out;  // one line
    EXPECT_LT(r.out.size(), 200u) << args << "\n" << r.out;
  }
}

TEST_F(CliHabits, ABadTuningValueIsRefusedWithOneLineNamingTheOption) {
  struct Case {
    std::string args, option;
  };
  const std::vector<Case> cases = {
      {" cp " + x_ + " -r 2 --cuda-layout bogus", "--cuda-layout"},
      {" tucker " + x_ + " -r 2,2,2 --cuda-layout bogus", "--cuda-layout"},
      {" contract " + x_ + " " + x_ + " --einsum 'ijk,ijl->kl' --cuda-layout bogus",
       "--cuda-layout"},
      {" plan " + x_ + " --cuda-layout bogus", "--cuda-layout"},
      {" bench mttkrp " + x_ + " --cuda-layout bogus", "--cuda-layout"},
      {" cp " + x_ + " -r 2 --ttmc-tile 100", "--ttmc-tile"},
      {" cp " + x_ + " -r 2 --cuda-l2-hint maybe", "--cuda-l2-hint"},
      {" cp " + x_ + " -r 2 --cpu-isa sse9", "--cpu-isa"},
      {" cp " + x_ + " -r 2 --nccl-timeout=-1", "--nccl-timeout"},
      // the tensor-core MTTKRP (issue 18)
      {" cp " + x_ + " -r 2 --tensor-cores maybe", "--tensor-cores"},
      {" tucker " + x_ + " -r 2,2,2 --tensor-cores maybe", "--tensor-cores"},
      {" bench mttkrp " + x_ + " --tensor-cores maybe", "--tensor-cores"},
      {" cp " + x_ + " -r 2 --tc-precision fp8", "--tc-precision"},
      {" cp " + x_ + " -r 2 --tc-tile-density 0", "--tc-tile-density"},
      {" cp " + x_ + " -r 2 --tc-tile-density 1.5", "--tc-tile-density"},
      {" cp " + x_ + " -r 2 --tc-tile-density=-0.5", "--tc-tile-density"},
      {" cp " + x_ + " -r 2 --tc-tile-density dense", "--tc-tile-density"},
  };
  for (const Case& c : cases) {
    const auto r = run(tessera() + c.args + " --backend cpu -q");
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_LT(r.code, 128) << c.args << ": a crash\n" << r.out;
    EXPECT_EQ(r.out.rfind("tessera: error: ", 0), 0u) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.option), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "\n"), 1) << c.args << "\n" << r.out;  // one line
  }
}

TEST_F(CliHabits, ARetiredEnvironmentVariableIsNamedWithItsOption) {
  // Variables earlier versions read inside the kernels are options now: a job script that
  // still sets one gets one warning naming the option, and the run is otherwise the same.
  const auto r = run("TESSERA_CUDA_LAYOUT=plain TESSERA_CPU_ISA=base " + tessera() + " cp " + x_ +
                     " -r 2 -i 2 --backend cpu -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count_of(r.out,
                     "TESSERA_CUDA_LAYOUT is set but no longer read: use the option "
                     "--cuda-layout"),
            1)
      << r.out;
  EXPECT_EQ(count_of(r.out, "TESSERA_CPU_ISA is set but no longer read: use the option --cpu-isa"),
            1)
      << r.out;
  const auto quiet = run(tessera() + " cp " + x_ + " -r 2 -i 2 --backend cpu -t 1");
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("no longer read"), std::string::npos) << quiet.out;
}

TEST_F(CliHabits, TheRunRecordHasTheTuningObject) {
  const std::vector<std::string> keys = {
      "cuda_layout",  "cuda_block_rows", "cuda_l2_hint",      "mttkrp_kernel", "tensor_cores",
      "tc_precision", "tc_tile_density", "gather_precision",  "ttmc_kernel",   "eig_solver",
      "ttmc_tile",    "sptc_pool",       "sptc_tc_threshold", "cpu_isa",       "trace"};
  struct Case {
    std::string name, args;
  };
  const std::vector<Case> cases = {
      {"cp", " cp " + x_ + " -r 2 -i 2"},
      {"tucker", " tucker " + x_ + " -r 2,2,2 -i 2"},
      {"contract", " contract " + x_ + " " + x_ + " --einsum 'ijk,ijl->kl'"},
      {"plan", " plan " + x_},
  };
  for (const Case& c : cases) {
    const std::string rec = path(c.name + "-tuning.json");
    const auto r = run(tessera() + c.args +
                       " --backend cpu -t 1 -q --cuda-layout smem --cuda-l2-hint off --ttmc-tile "
                       "128 --cpu-isa base --json " +
                       rec);
    ASSERT_EQ(r.code, 0) << c.args << "\n" << r.out;
    const auto j = read_json(rec);
    ASSERT_TRUE(j.contains("tuning")) << c.name << "\n" << j.dump(1);
    const auto& t = j["tuning"];
    EXPECT_EQ(t.size(), keys.size()) << t.dump();
    for (const std::string& k : keys) EXPECT_TRUE(t.contains(k)) << c.name << ": " << k;
    EXPECT_EQ(t["cuda_layout"], "smem") << c.name;
    EXPECT_EQ(t["cuda_l2_hint"], false) << c.name;
    EXPECT_EQ(t["ttmc_tile"], 128) << c.name;
    EXPECT_EQ(t["cpu_isa"], "base") << c.name;
    EXPECT_EQ(t["mttkrp_kernel"], "auto") << c.name;  // defaults too
    EXPECT_EQ(t["sptc_tc_threshold"], -1.0) << c.name;
    EXPECT_EQ(t["trace"], false) << c.name;
    EXPECT_EQ(t["tensor_cores"], "auto") << c.name;  // defaults of the tensor-core MTTKRP
    EXPECT_EQ(t["tc_precision"], "auto") << c.name;
    EXPECT_EQ(t["tc_tile_density"], 0.25) << c.name;
    EXPECT_EQ(j["options"]["nccl_timeout"], 1800.0) << c.name;
    // A host backend has no tensor-core split: no "tc_split", no line about it.
    EXPECT_FALSE(j.contains("tc_split")) << c.name;
  }
  // Given values of the tensor-core MTTKRP land in "tuning" as given (a host backend runs
  // the same, without tensor cores) and in "options" under their long names.
  const std::string tc = path("cp-tc-tuning.json");
  const auto rt = run(tessera() + " cp " + x_ +
                      " -r 2 -i 2 --backend cpu -t 1 --tensor-cores on --tc-precision bf16 "
                      "--tc-tile-density 0.5 --json " +
                      tc);
  ASSERT_EQ(rt.code, 0) << rt.out;
  EXPECT_EQ(rt.out.find("tensor cores on"), std::string::npos) << rt.out;
  const auto jt = read_json(tc);
  EXPECT_EQ(jt["tuning"]["tensor_cores"], "on") << jt["tuning"].dump();
  EXPECT_EQ(jt["tuning"]["tc_precision"], "bf16") << jt["tuning"].dump();
  EXPECT_EQ(jt["tuning"]["tc_tile_density"], 0.5) << jt["tuning"].dump();
  EXPECT_EQ(jt["options"]["tensor_cores"], "on");
  EXPECT_EQ(jt["options"]["tc_tile_density"], 0.5);
  EXPECT_FALSE(jt.contains("tc_split"));
  // --tc-tile-density 1 (the closed end) is accepted.
  const auto one =
      run(tessera() + " cp " + x_ + " -r 2 -i 1 --backend cpu -t 1 -q --tc-tile-density 1");
  EXPECT_EQ(one.code, 0) << one.out;
  // A subcommand that does not compute has no "tuning".
  const std::string rec = path("info-tuning.json");
  const auto r = run(tessera() + " info " + x_ + " -q --json " + rec);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(read_json(rec).contains("tuning"));
}

}  // namespace
