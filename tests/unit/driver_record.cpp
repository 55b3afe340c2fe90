// The run record's tensor-core split (run/record.hpp tc_split_json, tc_split_line; issue
// 18): the JSON fields and the log line, from hand-made kernels::TcSplit values (the host
// backends have no split, so the driver tests cannot reach these on a CPU node).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "run/record.hpp"

namespace tessera::run {
namespace {

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

kernels::TcSplit used_split() {
  kernels::TcSplit s;
  s.mode = 0;
  s.built = true;
  s.tile_mode = 2;
  s.tiles = 1234;
  s.tile_nnz = 98765;
  s.fraction = 0.462;
  s.padding = 0.31;
  s.bytes = 12'000'000;
  s.predicted_speedup = 1.8;
  s.used = true;
  s.precision = "3xtf32";
  s.tile_seconds = 0.0012;
  s.rest_seconds = 0.0034;
  return s;
}

TEST(TcSplitRecord, EveryFieldUnderItsOwnName) {
  kernels::TcSplit none;
  none.mode = 1;
  none.why = "no tile reaches --tc-tile-density 0.25";
  const nlohmann::json j = tc_split_json({used_split(), none});
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  const std::vector<std::string> keys = {
      "mode",         "built", "tile_mode",         "tiles", "tile_nnz",  "fraction",
      "padding",      "bytes", "predicted_speedup", "used",  "precision", "tile_seconds",
      "rest_seconds", "why"};
  for (const auto& m : j) {
    EXPECT_EQ(m.size(), keys.size()) << m.dump();
    for (const std::string& k : keys) EXPECT_TRUE(m.contains(k)) << k << ": " << m.dump();
  }
  EXPECT_EQ(j[0]["mode"], 0);
  EXPECT_EQ(j[0]["built"], true);
  EXPECT_EQ(j[0]["tile_mode"], 2);
  EXPECT_EQ(j[0]["tiles"], 1234u);
  EXPECT_EQ(j[0]["tile_nnz"], 98765u);
  EXPECT_DOUBLE_EQ(j[0]["fraction"].get<double>(), 0.462);
  EXPECT_DOUBLE_EQ(j[0]["padding"].get<double>(), 0.31);
  EXPECT_EQ(j[0]["bytes"], 12'000'000u);
  EXPECT_DOUBLE_EQ(j[0]["predicted_speedup"].get<double>(), 1.8);
  EXPECT_EQ(j[0]["used"], true);
  EXPECT_EQ(j[0]["precision"], "3xtf32");
  EXPECT_DOUBLE_EQ(j[0]["tile_seconds"].get<double>(), 0.0012);
  EXPECT_DOUBLE_EQ(j[0]["rest_seconds"].get<double>(), 0.0034);
  EXPECT_EQ(j[1]["mode"], 1);
  EXPECT_EQ(j[1]["built"], false);
  EXPECT_EQ(j[1]["tile_mode"], -1);
  EXPECT_EQ(j[1]["why"], none.why);
  EXPECT_TRUE(tc_split_json({}).is_array());
  EXPECT_TRUE(tc_split_json({}).empty());
}

TEST(TcSplitRecord, OneLinePerModeWithTheShareOrTheReason) {
  const std::string used = tc_split_line(used_split());
  EXPECT_EQ(used.rfind("mode 0: tensor cores on 46.2% of nonzeros", 0), 0u) << used;
  EXPECT_TRUE(contains(used, "1234 tiles (mode 0 x mode 2)")) << used;
  EXPECT_TRUE(contains(used, "padding 31%")) << used;
  EXPECT_TRUE(contains(used, "predicted speedup 1.80x")) << used;
  EXPECT_TRUE(contains(used, "hybrid (3xtf32)")) << used;
  EXPECT_EQ(used.find('\n'), std::string::npos) << used;

  kernels::TcSplit unused = used_split();
  unused.used = false;
  unused.why = "the cost model predicts no gain at R=16";
  const std::string u = tc_split_line(unused);
  EXPECT_TRUE(contains(u, "CUDA cores only")) << u;
  EXPECT_TRUE(contains(u, unused.why)) << u;

  kernels::TcSplit none;
  none.mode = 2;
  none.why = "--tensor-cores off";
  EXPECT_EQ(tc_split_line(none), "mode 2: no tensor-core tiles (--tensor-cores off)");
}

}  // namespace
}  // namespace tessera::run
