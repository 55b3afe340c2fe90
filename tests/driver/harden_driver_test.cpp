// Issue 22, points 2-3 through the `tessera` binary: every case of the issue ends with a
// result or with exactly one error line naming the file and the cause, never with a crash,
// a hang, a silent wrong answer, duplicated lines or an MPI_Abort banner for a user error.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "h5store_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace th = ::tessera::test::h5;
using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

/// Lines of `out` that start with "tessera: error".
int error_lines(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.rfind("tessera: error", 0) == 0 ? 1 : 0;
  return n;
}

/// The fit of "done: fit X after ..." (NaN when absent).
double final_fit(const std::string& out) {
  const auto at = out.find("done: fit ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(out.substr(at + 10));
}

/// A failed run: non-zero exit, exactly one error line containing every part, no abort.
void expect_one_error(const tessera::test::Run& r, const std::vector<std::string>& parts,
                      const std::string& what) {
  EXPECT_NE(r.code, 0) << what << "\n" << r.out;
  EXPECT_EQ(error_lines(r.out), 1) << what << "\n" << r.out;
  EXPECT_FALSE(contains(r.out, "MPI_ABORT")) << what << "\n" << r.out;
  for (const auto& p : parts)
    EXPECT_TRUE(contains(r.out, p)) << what << ": want " << p << "\n" << r.out;
}

std::string gzip(const std::string& text) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

class HardenDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-harden-driver-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // 60 distinct nonzeros of a 5x4x3 tensor with values in [0.5, 2).
    for (int q = 0; q < 60; ++q) {
      const double v = 0.5 + 1.5 * ((q * 37) % 60) / 60.0;
      lines_.push_back(std::to_string(q / 12 + 1) + " " + std::to_string(q / 3 % 4 + 1) + " " +
                       std::to_string(q % 3 + 1) + " ");
      vals_.push_back(v);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  std::string write(const std::string& n, const std::string& bytes) const {
    std::ofstream(path(n), std::ios::binary) << bytes;
    return path(n);
  }
  /// The tensor as text with every value times `scale` (first..first+count lines).
  std::string text(double scale, int first = 0, int count = 60) const {
    std::string s;
    char v[40];
    for (int q = first; q < first + count; ++q) {
      std::snprintf(v, sizeof(v), "%.17g", vals_[static_cast<std::size_t>(q)] * scale);
      s += lines_[static_cast<std::size_t>(q)] + v + "\n";
    }
    return s;
  }

  fs::path dir_;
  std::vector<std::string> lines_;
  std::vector<double> vals_;
};

TEST_F(HardenDriver, HugeThreadCountsAreCappedWithOneWarning) {
  const std::string x = write("x.tns", text(1));
  auto r = run(tessera() + " cp " + x + " --rank 2 --iters 3 --threads 100000");
  EXPECT_EQ(r.code, 0) << r.out;  // was SIGSEGV inside the OpenMP runtime
  EXPECT_TRUE(contains(r.out, "warning: --threads 100000 is more than the")) << r.out;
  EXPECT_TRUE(contains(r.out, "done: fit")) << r.out;
  r = run("OMP_NUM_THREADS=100000 " + tessera() + " cp " + x + " --rank 2 --iters 3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "OMP_NUM_THREADS")) << r.out;
  r = run(mpirun(2) + " cp " + x + " --rank 2 --iters 3 --threads 100000");
  EXPECT_EQ(r.code, 0) << r.out;
  int warnings = 0;
  for (std::size_t at = 0; (at = r.out.find("warning: --threads", at)) != std::string::npos; ++at)
    ++warnings;
  EXPECT_EQ(warnings, 1) << r.out;  // rank 0 only
}

TEST_F(HardenDriver, HugeAndTinyValuesGiveTheFitOfTheSameTensor) {
  const auto base =
      run(tessera() + " cp " + write("x.tns", text(1)) + " --rank 2 --iters 5 --tol 0");
  ASSERT_EQ(base.code, 0) << base.out;
  const double want = final_fit(base.out);
  ASSERT_TRUE(std::isfinite(want)) << base.out;
  for (double s : {1e200, 1e-200, 1e300}) {
    const std::string f = write("s.tns", text(s));
    for (const char* cmd : {" cp ", " tucker "}) {
      const std::string opts = contains(cmd, "cp") ? " --rank 2" : " --ranks 2";
      auto r = run(tessera() + cmd + f + opts + " --iters 5 --tol 0");
      ASSERT_EQ(r.code, 0) << s << cmd << "\n" << r.out;  // was fit -nan with rc 0
      EXPECT_FALSE(contains(r.out, "nan")) << r.out;
      if (contains(cmd, "cp"))
        EXPECT_NEAR(final_fit(r.out), want, 1e-6) << s << "\n" << r.out;
      else
        EXPECT_TRUE(std::isfinite(final_fit(r.out))) << r.out;
    }
    // Memory tiers 2 (host-resident chunks) and 3 (a store streamed from disk) keep scaled
    // norms of their chunks: the same fit.
    const std::string h5 = path("s.h5");
    auto c = run(tessera() + " convert " + f + " " + h5 + " --force");
    ASSERT_EQ(c.code, 0) << c.out;
    for (const auto& [in, tier] : {std::pair{f, "2"}, std::pair{h5, "3"}}) {
      auto r = run(tessera() + " cp " + in + " --rank 2 --iters 5 --tol 0 --tier " + tier);
      ASSERT_EQ(r.code, 0) << s << " tier " << tier << "\n" << r.out;
      EXPECT_NEAR(final_fit(r.out), want, 1e-6) << s << " tier " << tier << "\n" << r.out;
    }
  }
  // Single precision cannot hold 1e200: refused with the file and line.
  const std::string f = write("big.tns", text(1e200));
  expect_one_error(
      run(tessera() + " cp " + f + " --rank 2 --precision float"),
      {f + ":1: value: expected a number representable in single precision", "--precision double"},
      "float 1e200");
}

TEST_F(HardenDriver, TextAppendedToAGzipFileIsAnError) {
  const std::string m1 = gzip(text(1, 0, 30));
  const std::string both = write("both.tns.gz", m1 + gzip(text(1, 30, 30)));
  auto r = run(mpirun(2) + " cp " + both + " --rank 2 --iters 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "read " + both + ": 60 nonzeros")) << r.out;
  const std::string bad = write("appended.tns.gz", m1 + text(1, 30, 30));
  // was: 30 of 60 nonzeros read without a word
  expect_one_error(run(mpirun(2) + " cp " + bad + " --rank 2"),
                   {bad + ": byte " + std::to_string(m1.size()) + ":", "not a gzip member"},
                   "appended text");
}

TEST_F(HardenDriver, FifoInputIsRefusedAtOnce) {
  const std::string fifo = path("in.tns");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // was: blocked forever (timeout 30 ends it with 124)
  auto r = run("timeout 30 " + tessera() + " cp " + fifo + " --rank 2");
  expect_one_error(r, {fifo + ": is a FIFO (named pipe)"}, "fifo");
  EXPECT_NE(r.code, 124) << r.out;
  r = run(mpirun(2) + " info " + fifo);
  expect_one_error(r, {fifo + ": is a FIFO"}, "fifo on 2 ranks");
  EXPECT_NE(r.code, 124) << r.out;
  expect_one_error(run("timeout 30 " + tessera() + " cp /dev/zero --rank 2"),
                   {"/dev/zero: is a character device"}, "device");
}

TEST_F(HardenDriver, UnknownSubcommandIsNamed) {
  const auto r = run(tessera() + " frobnicate x.tns");
  expect_one_error(r, {"unknown subcommand 'frobnicate'", "cp, ", "tucker", "contract"},
                   "unknown subcommand");
}

TEST_F(HardenDriver, StoreWithDimsOfTwoToThe32IsRefusedUpFront) {
  // A small store whose dims attribute says 2^32 x 2^32 x 3 (coordinates stay inside).
  const std::string h5 = path("huge.h5");
  auto r = run(tessera() + " convert " + write("x.tns", text(1)) + " " + h5);
  ASSERT_EQ(r.code, 0) << r.out;
  th::set_attr_u64s(h5, "dims", {std::uint64_t(1) << 32, std::uint64_t(1) << 32, 3});
  r = run(tessera() + " info " + h5);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_TRUE(contains(r.out, "4294967296x4294967296x3")) << r.out;
  for (const char* cmd : {" cp ", " tucker "}) {
    // Tucker: rank 3 on the mode of length 3 (a rank over its dim is refused from the header).
    const std::string opts = contains(cmd, "cp") ? " --rank 4" : " --ranks 4,4,3";
    r = run(mpirun(2) + cmd + h5 + opts);  // was std::bad_alloc
    expect_one_error(r,
                     {"no memory tier fits " + h5, "mode 0 has 4294967296 rows",
                      "(4294967296 x 4, double) alone takes"},
                     cmd);
    EXPECT_FALSE(contains(r.out, "bad_alloc")) << r.out;
  }
}

TEST_F(HardenDriver, ErrorsEveryRankFindsArePrintedOnceWithoutAbort) {
  std::string zeros;
  for (int q = 0; q < 60; ++q) zeros += lines_[static_cast<std::size_t>(q)] + "0\n";
  const std::string z = write("zeros.tns", zeros);
  // was: two "error on rank" lines and an MPI_Abort banner
  expect_one_error(run(mpirun(2) + " cp " + z + " --rank 2"),
                   {"tessera: error: " + z + ": every value is 0"}, "all-zero cp");
  expect_one_error(run(mpirun(2) + " tucker " + z + " --ranks 2"),
                   {"tessera: error: " + z + ": every value is 0"}, "all-zero tucker");
  const std::string x = write("x.tns", text(1));
  expect_one_error(run(mpirun(2) + " cp " + x + " --rank 2 --grid 3x3"), {"grid 3x3"}, "bad grid");
  expect_one_error(run(mpirun(2) + " cp " + x + " --rank 2 --comm-strategy layer --partition nnz"),
                   {"the layer strategy needs the grid partition"}, "layer on nnz");
  // --comm-strategy: cp's layer is not tucker's, tucker's owners not cp's (before any input).
  expect_one_error(run(mpirun(2) + " cp " + x + " --rank 2 --comm-strategy owners"),
                   {"--comm-strategy owners applies to tucker only"}, "cp owners");
  expect_one_error(run(mpirun(2) + " tucker " + x + " --ranks 2 --comm-strategy layer"),
                   {"--comm-strategy 'layer' does not apply to tucker"}, "tucker layer");
  expect_one_error(
      run(mpirun(2) + " tucker " + x + " --ranks 2 --svd subspace --comm-strategy allreduce"),
      {"for --svd gram only"}, "tucker allreduce subspace");
  expect_one_error(run(mpirun(2) + " cp " + write("bad.tns", "1 2 3 1\n1 x 3 2\n") + " --rank 2"),
                   {"bad.tns:2: coordinate 2"}, "bad line");
  expect_one_error(run(mpirun(2) + " cp " + write("empty.tns", "# nothing\n") + " --rank 2"),
                   {"empty.tns: no data lines"}, "empty");
  expect_one_error(run(mpirun(2) + " cp " + x + " --rank 2 --host-budget 1K"),
                   {"no memory tier fits " + x}, "planner refusal");
  expect_one_error(run(mpirun(2) + " generate --dims 0x3 --nnz 10 --out " + path("g.tns")),
                   {"bad dims '0x3'"}, "generate dims");
  expect_one_error(run(mpirun(2) + " bench cp --generate 10x10x10 --nnz 0 --rank 2"),
                   {"bench needs a FILE or --generate"}, "bench options");
}

}  // namespace

TEST_F(HardenDriver, KillingOneRankEndsTheWholeJobQuickly) {
  // A rank killed by the kernel or a scheduler (SIGKILL) in the middle of the iterations:
  // the other ranks, blocked in a collective, must not wait forever. mpiexec ends the job
  // with a non-zero status well before the 120 s `timeout` of mpirun() would.
  const std::string x = write("x.tns", text(1));
  const std::string log = path("death.log");
  const std::string script =
      write("death.sh", ::tessera::test::mpirun(3) + " cp " + x +
                            " --rank 2 --iters 1000000 --tol 0 >" + log + " 2>&1 &\n" +
                            "m=$!\n"
                            "i=0\n"
                            "until grep -q 'iter ' " +
                            log +
                            " 2>/dev/null; do\n"
                            "  sleep 0.1; i=$((i + 1))\n"
                            "  [ $i -le 900 ] || { echo 'never started'; kill $m; exit 3; }\n"
                            "done\n"
                            // The ranks: processes running the tessera binary on this test's input.
                            "victim=''\n"
                            "for p in /proc/[0-9]*; do\n"
                            "  c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null) || continue\n"
                            "  case \"$c\" in \"" +
                            ::tessera::test::tessera() + " cp " + x +
                            "\"*) victim=${p#/proc/};; esac\n"
                            "done\n"
                            "[ -n \"$victim\" ] || { echo 'no rank found'; kill $m; exit 4; }\n"
                            "start=$(date +%s%N)\n"
                            "kill -9 $victim\n"
                            "wait $m; rc=$?\n"
                            "echo \"rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))\"\n");
  const auto r = ::tessera::test::run("sh " + script);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto at = r.out.find("rc=");
  ASSERT_NE(at, std::string::npos) << r.out;
  int rc = -1;
  long ms = -1;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "rc=%d ms=%ld", &rc, &ms), 2) << r.out;
  EXPECT_NE(rc, 0) << r.out;
  EXPECT_NE(rc, 124) << "the job hung until the timeout\n" << r.out;
  EXPECT_LT(ms, 30000) << r.out;
}
