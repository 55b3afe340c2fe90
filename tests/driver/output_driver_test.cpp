// The output policy end to end (src/base/io/output.hpp, docs/reliability.md "Outputs"), through
// the tessera binary on 1 and 2 ranks: an output that is an input (cp --out, --json,
// --checkpoint, contract X X --out X, convert, partition --out) is refused with one line
// naming the option and the file, the input byte for byte unchanged; an unwritable output
// fails before any work; special files (FIFO, a character device) are written directly and
// stay what they were; an existing file Tessera did not write needs --force; stale
// temporaries of dead processes are removed by the next run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using RunResult = ::tessera::test::Run;
using ::tessera::test::tessera;

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf[0] ? std::string(buf) : std::string("localhost");
}

class OutputDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-output-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  RunResult ok(const std::string& cmd) {
    RunResult r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return r;
  }
  std::string generated(const std::string& name = "x.tns") {
    const std::string t = path(name);
    ok(tessera() + " generate --dims 30x20x10 --nnz 2000 --rank 3 --noise 0.05 -q --out " + t);
    return t;
  }
  /// A refused run: non-zero exit, exactly one error line, which names `option` and
  /// `file` and says `why`; nothing was read or computed.
  void expect_refused(const RunResult& r, const std::string& option, const std::string& file,
                      const std::string& why, const std::string& cmd) {
    EXPECT_NE(r.code, 0) << cmd << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "error"), 1) << cmd << "\n" << r.out;
    EXPECT_EQ(count_of(r.out, "tessera: error:"), 1) << cmd << "\n" << r.out;
    const std::size_t at = r.out.find("tessera: error:");
    const std::string line =
        at == std::string::npos ? "" : r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find(option + " '" + file + "'"), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_NE(line.find(why), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("iter "), std::string::npos) << cmd << "\n" << r.out;
  }
  /// Names in the test folder containing ".tmp".
  std::vector<std::string> temporaries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const auto f = e.path().filename().string();
      if (f.find(".tmp") != std::string::npos) out.push_back(f);
    }
    return out;
  }
  fs::path dir_;
};

const std::string kSame = "is the same file as";

TEST_F(OutputDriver, HelpListsForce) {
  for (const char* sub : {" cp", " tucker", " contract", " convert", " generate", " partition",
                          " bench", " bench contract", " plan"}) {
    auto r = run(tessera() + sub + " --help");
    EXPECT_EQ(r.code, 0) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("--force"), std::string::npos) << sub << "\n" << r.out;
  }
}

TEST_F(OutputDriver, AnOutputThatIsTheInputIsRefusedAndTheInputKept) {
  const std::string x = generated();
  const std::string bytes = slurp(x);
  const std::string hard = path("hard.tns"), soft = path("soft.tns");
  fs::create_hard_link(x, hard);
  fs::create_symlink(x, soft);
  const std::string dotted = (dir_ / "." / "x.tns").string();
  struct Case {
    std::string args, option, file;
  };
  const std::string cp = " cp " + x + " --rank 2 --iters 3";
  const std::vector<Case> cases = {
      {cp + " --out " + x, "--out", x},
      {cp + " --json " + dotted, "--json", dotted},
      {cp + " --out " + hard, "--out", hard},
      {cp + " --checkpoint-every 1 --checkpoint " + soft, "--checkpoint", soft},
      {cp + " --out " + x + " --force", "--out", x},  // not even with --force
      {" tucker " + x + " --ranks 2 --iters 2 --out " + x, "--out", x},
      {" contract " + x + " " + x + " --einsum 'ijk,ijl->kl' --out " + x, "--out", x},
      {" contract " + x + " " + hard + " --einsum 'ijk,ijl->kl' --json " + soft, "--json", soft},
      {" convert " + x + " " + hard, "output", hard},
      {" bench cp " + x + " --rank 2 --iters 1 --json " + x, "--json", x},
      {" plan " + x + " --json " + x, "--json", x},
  };
  // Every case on one rank; cp, contract and convert on two as well (one agreed line).
  for (int np : {1, 2}) {
    for (const Case& c : cases) {
      if (np == 2 && c.args.find(" cp ") != 0 && c.args.find(" contract ") != 0 &&
          c.args.find(" convert ") != 0)
        continue;
      const std::string cmd = (np == 1 ? tessera() : mpirun(2)) + c.args;
      const RunResult r = run(cmd);
      expect_refused(r, c.option, c.file, kSame, cmd);
      EXPECT_NE(r.out.find("never writes over an input"), std::string::npos) << r.out;
      ASSERT_EQ(slurp(x), bytes) << cmd << ": the input changed";
      EXPECT_TRUE(fs::is_symlink(soft)) << cmd;
    }
  }
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputDriver, PartitionRewritesInPlaceOnlyWithoutOut) {
  const std::string x = generated();
  const std::string s = path("s.h5");
  ok(mpirun(2) + " convert " + x + " " + s);
  const std::string bytes = slurp(s);
  const std::string cmd = mpirun(2) + " partition " + s + " --blocks 2 --out " + s;
  const RunResult r = run(cmd);
  expect_refused(r, "--out", s, kSame, cmd);
  EXPECT_NE(r.out.find("leave out --out to rewrite the input in place"), std::string::npos)
      << r.out;
  EXPECT_EQ(slurp(s), bytes);
  ok(mpirun(2) + " partition " + s + " --blocks 2");  // in place, as asked
  EXPECT_NE(slurp(s), bytes);
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputDriver, UnwritableOutputsFailBeforeAnyWork) {
  const std::string x = generated();
  const std::string nowhere = path("nowhere");
  struct Case {
    std::string args, option, file;
  };
  const std::string cp = " cp " + x + " --rank 2 --iters 50";
  for (const Case& c : std::vector<Case>{
           {cp + " --json " + nowhere + "/r.json", "--json", nowhere + "/r.json"},
           {cp + " --out " + nowhere + "/m.h5", "--out", nowhere + "/m.h5"},
           {cp + " --out " + path("m.h5") + " --json " + nowhere + "/r.json", "--json",
            nowhere + "/r.json"},
           {" tucker " + x + " --ranks 2 --json " + nowhere + "/r.json", "--json",
            nowhere + "/r.json"},
           {" contract " + x + " " + x + " --einsum 'ijk,ijl->kl' --json " + nowhere + "/r.json",
            "--json", nowhere + "/r.json"},
           {" convert " + x + " " + path("y.h5") + " --json " + nowhere + "/r.json", "--json",
            nowhere + "/r.json"},
           {" bench mttkrp " + x + " --json " + nowhere + "/r.json", "--json", nowhere + "/r.json"},
       }) {
    for (int np : {1, 2}) {
      if (np == 2 && c.args.find(" cp ") != 0) continue;  // two ranks: cp
      const std::string cmd = (np == 1 ? tessera() : mpirun(2)) + c.args;
      const RunResult r = run(cmd);
      expect_refused(r, c.option, c.file, "folder '" + nowhere + "' does not exist", cmd);
      // Before any work: the input was not even read.
      EXPECT_EQ(r.out.find("read " + x), std::string::npos) << cmd << "\n" << r.out;
      EXPECT_FALSE(fs::exists(path("m.h5")));
      EXPECT_FALSE(fs::exists(path("y.h5")));
    }
  }
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputDriver, SpecialFilesAreWrittenDirectly) {
  const std::string x = generated();
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A run record and a FROSTT export into a FIFO, read by another process; 1 and 2 ranks.
  for (int np : {1, 2}) {
    const std::string got = path("got" + std::to_string(np));
    const std::string bin = np == 1 ? tessera() : mpirun(2);
    ok("timeout 60 cat " + fifo + " > " + got + " & " + bin + " cp " + x +
       " --rank 2 --iters 2 -q --json " + fifo + "; wait");
    const auto j = nlohmann::json::parse(slurp(got));
    EXPECT_EQ(j.at("command"), "cp");
    EXPECT_EQ(j.at("written_by"), "tessera");
    ok("timeout 60 cat " + fifo + " > " + got + " & " + bin + " convert " + x + " " + fifo +
       " -q; wait");
    EXPECT_EQ(slurp(got).rfind("# FROSTT sparse tensor", 0), 0u) << slurp(got).substr(0, 200);
    EXPECT_EQ(count_of(slurp(got), "\n"), count_of(slurp(x), "\n"));
  }
  // HDF5 needs a seekable file: refused up front, the FIFO left as it was.
  const std::string cmd = tessera() + " cp " + x + " --rank 2 --out " + fifo;
  expect_refused(run(cmd), "--out", fifo, "HDF5 files need a regular (seekable) file", cmd);
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  // A character device (a null device node of our own: root only, so a failure cannot
  // harm the machine's /dev/null) stays a device.
  const std::string dev = path("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    ok(mpirun(2) + " cp " + x + " --rank 2 --iters 2 -q --json " + dev);
    ok(mpirun(2) + " generate --dims 30x20x10 --nnz 500 -q --out " + dev);
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced by a regular file";
  }
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputDriver, ExistingFilesNeedForceUnlessTesseraWroteThem) {
  const std::string x = generated();
  const std::string notes = path("notes.json");
  std::ofstream(notes) << "my notes\n";
  const std::string cmd = mpirun(2) + " cp " + x + " --rank 2 --iters 2 --json " + notes;
  expect_refused(run(cmd), "--json", notes, "exists and is not a JSON run record", cmd);
  EXPECT_EQ(slurp(notes), "my notes\n");
  ok(cmd + " --force");
  EXPECT_EQ(nlohmann::json::parse(slurp(notes)).at("written_by"), "tessera");
  ok(cmd);  // Tessera's own record now: replaced without --force
  // A text file that is not Tessera's, as a generate output.
  const std::string data = path("data.tns");
  std::ofstream(data) << "1 1 1 2.5\n";
  const std::string gen = tessera() + " generate --dims 30x20x10 --nnz 500 -q --out " + data;
  expect_refused(run(gen), "--out", data, "exists and is not a FROSTT text file", gen);
  EXPECT_EQ(slurp(data), "1 1 1 2.5\n");
  ok(gen + " --force");
  ok(gen);  // now Tessera's
  // A model output over Tessera's tensor store: another kind, refused.
  const std::string s = path("s.h5");
  ok(tessera() + " convert " + x + " " + s + " -q");
  const std::string m = tessera() + " cp " + x + " --rank 2 --iters 2 --out " + s;
  expect_refused(run(m), "--out", s, "exists and is not an HDF5 model or checkpoint", m);
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(OutputDriver, StaleTemporariesOfDeadProcessesAreRemovedAtTheNextStart) {
  const std::string x = generated();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int st = 0;
  ::waitpid(child, &st, 0);  // `child` now names no process
  const std::string dead = std::to_string(child), me = std::to_string(::getpid());
  const std::string h = host();
  const std::vector<std::string> stale = {"m.h5.tmp-" + h + "_" + dead,
                                          "m.ckpt.h5.tmp-" + h + "_" + dead + "_ckpt",
                                          "r.json.tmp-" + h + "_" + dead};
  const std::vector<std::string> kept = {"m.h5.tmp-" + h + "_" + me,  // this test runs
                                         "m.h5.tmp-another-host_" + dead};
  for (const auto& n : stale) std::ofstream(path(n)) << "partial";
  for (const auto& n : kept) std::ofstream(path(n)) << "keep";
  const RunResult r =
      ok(mpirun(2) + " cp " + x + " --rank 2 --iters 2 --checkpoint-every 1 --out " + path("m.h5") +
         " --json " + path("r.json"));
  EXPECT_NE(r.out.find("removed 3 temporary file(s)"), std::string::npos) << r.out;
  for (const auto& n : stale) EXPECT_FALSE(fs::exists(path(n))) << n;
  for (const auto& n : kept) EXPECT_TRUE(fs::exists(path(n))) << n;
  EXPECT_TRUE(fs::exists(path("m.h5")));
  EXPECT_TRUE(fs::exists(path("m.ckpt.h5")));
  EXPECT_EQ(temporaries().size(), kept.size());
}

}  // namespace
