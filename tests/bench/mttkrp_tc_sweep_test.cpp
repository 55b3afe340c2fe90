// `tessera bench mttkrp --tc-sweep` on a host backend (mpiexec -n 1): the sweep runs on
// tiny generated blocky tensors and on a small file, says in one line that it needs the cuda
// backend, prints its table and writes one record row per case x R x mode whose output
// agrees with the FP64 reference; its options are refused without --tc-sweep.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "../driver/driver_util.hpp"
#include "drivers/bench/bench.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;

class MttkrpTcSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-mttkrp-tc-sweep-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static nlohmann::json read_json(const std::string& p) {
    std::ifstream f(p);
    return nlohmann::json::parse(f);
  }
  fs::path dir_;
};

/// The generator: exactly nnz distinct in-range nonzeros; the asked tiles at
/// round(density 256) nonzeros each (the rest avoids them); deterministic in the seed.
TEST(TcBlockyGenerator, TilesAndRest) {
  using tessera::driver::bench::generate_tc_blocky;
  const std::vector<std::uint64_t> dims = {128, 64, 8};
  std::uint64_t tiles = 0;
  const auto t = generate_tc_blocky<float>(dims, 3000, 0.25, 0.9, 1, &tiles);
  EXPECT_EQ(tiles, 42u);  // round(0.9 x 3000 / 64)
  ASSERT_EQ(t.nnz(), 3000);
  std::set<std::tuple<unsigned, unsigned, unsigned>> cells;
  std::map<std::tuple<unsigned, unsigned, unsigned>, int> per_tile;
  for (std::size_t k = 0; k < t.vals.size(); ++k) {
    const unsigned i = t.idx[0][k], j = t.idx[1][k], l = t.idx[2][k];
    ASSERT_LT(i, 128u);
    ASSERT_LT(j, 64u);
    ASSERT_LT(l, 8u);
    EXPECT_TRUE(cells.insert({i, j, l}).second) << "repeated " << i << " " << j << " " << l;
    EXPECT_GE(t.vals[k], 0.5f);
    EXPECT_LT(t.vals[k], 1.5f);
    ++per_tile[{i / 16, j / 16, l}];
  }
  int full = 0;
  for (const auto& [pos, n] : per_tile) full += n == 64;
  EXPECT_EQ(full, 42);
  const auto again = generate_tc_blocky<float>(dims, 3000, 0.25, 0.9, 1);
  EXPECT_EQ(again.idx, t.idx);
  EXPECT_EQ(again.vals, t.vals);
  EXPECT_NE(generate_tc_blocky<float>(dims, 3000, 0.25, 0.9, 2).idx, t.idx);
  // Density 1, every nonzero in tiles: full tiles only.
  const auto dense = generate_tc_blocky<double>(dims, 2560, 1.0, 1.0, 3, &tiles);
  EXPECT_EQ(tiles, 10u);
  EXPECT_EQ(dense.nnz(), 2560);
}

constexpr const char* kNeedsCuda = "the tensor-core sweep needs the cuda backend";

TEST_F(MttkrpTcSweep, GeneratedBlockyFloatOnCpu) {
  const std::string json = path("sweep.json");
  const auto r = run(mpirun(1) +
                     " bench mttkrp --tc-sweep --backend cpu --precision float --threads 1"
                     " --tc-dims 128x64x8 --nnz 3000 --tc-densities 0.25,1 --tc-fractions 0.5,0.9"
                     " --ranks 16,32 --repeat 1 --bandwidth 8G --json " +
                     json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(kNeedsCuda), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("t_off_ms"), std::string::npos) << r.out;  // the table's header
  EXPECT_NE(r.out.find("err_off"), std::string::npos) << r.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["command"], "bench mttkrp");
  EXPECT_EQ(j["timing"]["unit"], "mode");
  const auto& s = j["tc_sweep"];
  EXPECT_TRUE(s["needs_cuda"].get<bool>());
  const auto& rows = s["rows"];
  // 2 densities x 2 fractions x 2 ranks x 3 modes, one row each ("off": no tensor cores).
  ASSERT_EQ(rows.size(), 24u) << s.dump(1);
  std::set<double> densities;
  for (const auto& row : rows) {
    EXPECT_EQ(row["precision"], "off");
    EXPECT_EQ(row["value_type"], "float");
    EXPECT_GT(row["t_off_seconds"].get<double>(), 0);
    EXPECT_LT(row["err_off"].get<double>(), 1e-5) << row.dump();
    EXPECT_GE(row["err_off"].get<double>(), 0);
    densities.insert(row["density"].get<double>());
  }
  EXPECT_EQ(densities, (std::set<double>{0.25, 1.0}));
  // The generator made the tiles it was asked for: 0.9 x 3000 / 64 = 42 tiles at 0.25, and
  // each case holds its 3000 nonzeros.
  for (const auto& c : s["cases"]) {
    EXPECT_EQ(c["nnz"].get<double>(), 3000) << c.dump();
    if (c["density"] == 0.25 && c["tile_fraction"] == 0.9) {
      EXPECT_EQ(c["generated_tiles"], 42);
    }
  }
}

TEST_F(MttkrpTcSweep, FileInputDoubleOnCpu) {
  // A small order-3 file: only R (and the precision) vary; errors at double rounding.
  {
    std::ofstream f(path("x.tns"));
    for (int i = 1; i <= 40; ++i)
      for (int k = 1; k <= 3; ++k)
        f << i << ' ' << (i * 7 + k) % 30 + 1 << ' ' << k << ' ' << 0.25 * (i % 9 + 1) << '\n';
  }
  const std::string json = path("sweep.json");
  const auto r = run(mpirun(1) + " bench mttkrp " + path("x.tns") +
                     " --tc-sweep --backend cpu --precision double --threads 1 --ranks 8"
                     " --repeat 2 --bandwidth 8G --json " +
                     json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(kNeedsCuda), std::string::npos) << r.out;
  const auto rows = read_json(json)["tc_sweep"]["rows"];
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["tensor"], "x");  // the file name without .tns
    EXPECT_TRUE(row["density"].is_null());
    EXPECT_EQ(row["R"], 8);
    EXPECT_LT(row["err_off"].get<double>(), 1e-12) << row.dump();
  }
}

TEST_F(MttkrpTcSweep, OptionsRefusedWithoutTheSweep) {
  auto r = run(mpirun(1) +
               " bench mttkrp --generate 20x20x20 --nnz 100 --backend cpu --tc-densities 0.5");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--tc-densities"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tc-sweep"), std::string::npos) << r.out;
  // The blocky generator's options do not apply to a file or --generate input.
  r = run(mpirun(1) +
          " bench mttkrp --tc-sweep --generate 20x20x20 --nnz 100 --backend cpu --tc-dims "
          "32x32x4");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--tc-dims"), std::string::npos) << r.out;
  // A bad density is named.
  r = run(mpirun(1) +
          " bench mttkrp --tc-sweep --backend cpu --tc-dims 32x32x4 --nnz 100"
          " --tc-densities 0.5,2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--tc-densities: '2'"), std::string::npos) << r.out;
}

}  // namespace
