// End-to-end tests of the `tessera` binary: help, the demo pipeline, the run record and
// the model file, and every class of bad input (message names file and line; non-zero
// exit on every rank; no hang). Launches `mpiexec -n 2 tessera ...` as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "driver_util.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::Run;
using ::tessera::test::tessera;

class Driver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

TEST_F(Driver, HelpForEverySubcommand) {
  for (const char* sub : {"", " cp", " generate", " info", " bench"}) {
    auto r = run(tessera() + sub + " --help");
    EXPECT_EQ(r.code, 0) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
  auto r = run(tessera() + " cp");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("file is required"), std::string::npos) << r.out;
  r = run(tessera() + " frobnicate");
  EXPECT_NE(r.code, 0);
}

TEST_F(Driver, GenerateThenDecomposeOnTwoRanks) {
  auto t = (dir_ / "demo.tns").string();
  auto r =
      run(mpirun(2) + " generate --dims 60x50x40 --nnz 20000 --rank 4 --noise 0.01 --out " + t);
  ASSERT_EQ(r.code, 0) << r.out;
  auto model = (dir_ / "model.h5").string();
  auto js = (dir_ / "run.json").string();
  r = run(mpirun(2) + " cp " + t + " --rank 4 --iters 100 --tol 1e-7 --out " + model + " --json " +
          js);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("iter   1  fit"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(model));
  std::ifstream f(js);
  auto j = nlohmann::json::parse(f);
  EXPECT_GE(j["fit"].get<double>(), 0.97);
  EXPECT_EQ(j["fits"].size(), j["iterations"].get<std::size_t>());
  EXPECT_EQ(j["per_iteration"].size(), j["iterations"].get<std::size_t>());
  for (const char* k : {"io", "kernel", "comm", "solve"})
    EXPECT_TRUE(j["phases_seconds"].contains(k)) << k;
  EXPECT_EQ(j["machine"]["ranks"].get<int>(), 2);
  // The layer strategy on an explicit grid reaches the same fit.
  r = run(mpirun(2) + " cp " + t +
          " --rank 4 --iters 100 --tol 1e-7 --comm-strategy layer "
          "--grid 2x1x1 --json " +
          js);
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f2(js);
  auto j2 = nlohmann::json::parse(f2);
  EXPECT_NEAR(j2["fit"].get<double>(), j["fit"].get<double>(), 1e-6);
}

TEST_F(Driver, InfoReportsShapeAndDuplicates) {
  auto p = write("dup.tns", "# a comment\n1 1 1 1.0\n2 3 4 2.5\n\n1 1 1 3.0\n");
  auto r = run(mpirun(2) + " info " + p);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("2x3x4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("repeated coordinates summed: 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: 1 repeated coordinates were summed"), std::string::npos) << r.out;
}

TEST_F(Driver, MoreRanksThanNonzeros) {
  auto p = write("two.tns", "1 2 3 1.0\n3 1 2 2.0\n");
  auto r = run(mpirun(3) + " cp " + p + " --rank 2 --iters 5");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("done: fit"), std::string::npos) << r.out;
}

struct BadCase {
  const char* name;
  std::string text;
  const char* expect;  // substring of the message, besides "file:line"
  int line;            // expected line in the message (0: no line)
};

TEST_F(Driver, BadInputEndsWithMessageAndNonZeroExitOnEveryRank) {
  std::string good;
  for (int i = 1; i <= 40; ++i)
    good += std::to_string(i % 7 + 1) + " " + std::to_string(i % 5 + 1) + " " +
            std::to_string(i % 3 + 1) + " 1.5\n";
  // good + std::string(...) would do the same, but GCC 12 at -O3 warns on it (-Wrestrict, a
  // false positive, GCC bug 105329).
  std::string binary = good;
  binary.append("\x01\x02\0\xff\xfe garbage\n", 14);
  const BadCase cases[] = {
      {"fields.tns", good + "1 2 3\n", "field", 41},
      {"nonnumeric.tns", good + "1 x 3 1.0\n", "", 41},
      {"nan.tns", good + "1 2 3 nan\n", "", 41},
      {"inf.tns", good + "1 2 3 inf\n", "", 41},
      {"zero.tns", good + "1 0 3 1.0\n", "", 41},
      {"negative.tns", good + "1 -2 3 1.0\n", "", 41},
      {"huge.tns", good + "1 4294967296 3 1.0\n", "", 41},
      {"empty.tns", "", "", 0},
      {"comments-only.tns", "# nothing\n\n", "", 0},
      {"binary.tns", binary, "", 41},
  };
  for (const auto& c : cases) {
    auto p = write(c.name, c.text);
    for (const char* sub : {" info ", " cp "}) {
      auto r = run(mpirun(2) + sub + p);
      EXPECT_NE(r.code, 0) << c.name << sub << "\n" << r.out;
      EXPECT_NE(r.code, 124) << c.name << " hung";
      EXPECT_NE(r.out.find(c.name), std::string::npos) << c.name << ": message must name the file\n"
                                                       << r.out;
      if (c.line > 0) {
        EXPECT_NE(r.out.find(std::string(c.name) + ":" + std::to_string(c.line)), std::string::npos)
            << c.name << ": message must name line " << c.line << "\n"
            << r.out;
      }
      EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << r.out;
    }
  }
  auto r = run(mpirun(2) + " info " + (dir_ / "does-not-exist.tns").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("does-not-exist.tns"), std::string::npos) << r.out;
  // A corrupt gzip stream.
  auto gz = write("corrupt.tns.gz",
                  std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage-not-deflate", 29));
  r = run(mpirun(2) + " info " + gz);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("corrupt.tns.gz"), std::string::npos) << r.out;
}

// bench cp --generate with the allreduce strategy generates on the backend
// (prepare_synthetic, ids split over the ranks) and runs CP-ALS on that handle.
TEST_F(Driver, BenchCpGenerateOnBackend) {
  auto js = (dir_ / "bench.json").string();
  auto r = run(mpirun(2) +
               " bench cp --generate 60x50x40 --nnz 5000 --rank 4 --iters 3 --backend cpu "
               "--json " +
               js);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("on the backend"), std::string::npos) << r.out;
  // The summary table: a header "iteration seconds ...", then the mean seconds per iteration.
  // A warning on stderr may land between the two, ahead of the buffered table row (under
  // the sanitizers the host peak passes the plan, and the run says so).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(iteration +seconds[^\n]*\n(?:[^\n]*\n)*?mean +(\S+))")))
      << r.out;
  EXPECT_GT(std::stod(m[1].str()), 0.0) << r.out;
  std::ifstream f(js);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["iterations"].get<int>(), 3);
  EXPECT_GT(j["seconds_per_iteration"].get<double>(), 0.0);
  EXPECT_GT(j["floor_seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["tensor"]["nnz"].get<std::int64_t>(), 5000);
  EXPECT_TRUE(j["tensor"]["generated_on_backend"].get<bool>());
  EXPECT_GT(j["fit"].get<double>(), 0.0);
  // The tensor-core split as tessera cp records it: none on the cpu backend.
  ASSERT_TRUE(j["tc_split"].is_array()) << j.dump();
  EXPECT_TRUE(j["tc_split"].empty()) << j.dump();
  // The floor's copy bandwidth was measured here; the runs below give it (--bandwidth 8G:
  // no probe, and the same bytes over 8 GiB/s).
  EXPECT_EQ(j["machine"]["bandwidth_source"], "measured") << j.dump();
  const double bw = j["machine"]["bandwidth_bytes_per_s"].get<double>();
  const double floor_bytes = j["floor_seconds"].get<double>() * bw;
  const double given = 8.0 * (1 << 30);
  // The layer strategy generates each rank's grid block on the backend (its window of the
  // same ids): the same tensor, so the same fit as the allreduce run, relabelled or not.
  const double fit = j["fit"].get<double>();
  for (const char* extra : {"", " --relabel --grid 1x2x1", " --deal"}) {
    r = run(mpirun(2) +
            " bench cp --generate 60x50x40 --nnz 5000 --rank 4 --iters 3 --backend cpu "
            "--comm-strategy layer --bandwidth 8G --json " +
            js + " --force" + extra);
    ASSERT_EQ(r.code, 0) << extra << "\n" << r.out;
    EXPECT_NE(r.out.find("this rank's grid block only"), std::string::npos) << r.out;
    std::ifstream g(js);
    auto k = nlohmann::json::parse(g);
    EXPECT_NEAR(k["fit"].get<double>(), fit, 1e-9) << extra;
  }
  // --grid and --relabel cut modes: the allreduce strategy refuses them.
  r = run(mpirun(2) +
          " bench cp --generate 60x50x40 --nnz 5000 --rank 4 --iters 3 --backend cpu "
          "--relabel");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--comm-strategy layer"), std::string::npos) << r.out;
  // --deal has nothing to deal there (as in tessera cp): said, and the run is the same.
  r = run(mpirun(2) +
          " bench cp --generate 60x50x40 --nnz 5000 --rank 4 --iters 3 --backend cpu "
          "--comm-strategy allreduce --deal --bandwidth 8G --json " +
          js);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--deal: not used"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("copy bandwidth (--bandwidth) 8.00 GiB/s"), std::string::npos) << r.out;
  std::ifstream h(js);
  const auto d = nlohmann::json::parse(h);
  EXPECT_NEAR(d["fit"].get<double>(), fit, 1e-9);
  EXPECT_EQ(d["machine"]["bandwidth_source"], "given") << d.dump();
  EXPECT_EQ(d["machine"]["bandwidth_bytes_per_s"].get<double>(), given) << d.dump();
  EXPECT_NEAR(d["floor_seconds"].get<double>() * given, floor_bytes, 1e-6 * floor_bytes);
  // The plan holds no probe arrays when the figure is given.
  for (const auto& c : d["memory_plan"]["components"])
    EXPECT_EQ(c["name"].get<std::string>().find("bandwidth probe"), std::string::npos) << c;
}

TEST_F(Driver, BadOptionsAreRejected) {
  auto p = write("ok.tns", "1 1 1 1.0\n2 2 2 2.0\n");
  auto r = run(mpirun(2) + " cp " + p + " --grid 3x1x1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("3x1x1"), std::string::npos) << r.out;
  r = run(tessera() + " cp " + p + " --rank 0");
  EXPECT_NE(r.code, 0);
  r = run(tessera() + " cp " + p + " --backend cuda");
  // A CPU-only build says why; a CUDA build without a GPU says there is none.
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(r.out.find("CUDA") != std::string::npos || r.out.find("cuda") != std::string::npos)
      << r.out;
}

}  // namespace
