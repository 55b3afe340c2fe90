// Progress reports (util/progress.hpp): the text of the log line and the bar (units,
// scales, rate, ETA), and that -q (verbosity 0) silences them. One process.
#include "util/progress.hpp"

#include <gtest/gtest.h>

#include <string>

#include "util/log.hpp"

namespace tessera {
namespace {

/// Sets the verbosity for one test and restores it.
struct Verbosity {
  int old;
  explicit Verbosity(int v) : old(log::verbosity()) { log::set_verbosity(v); }
  ~Verbosity() { log::set_verbosity(old); }
};

TEST(Progress, LineOfBytes) {
  // 11.4 of 27.9 GB in 7.5 s: 1.52 GB/s, 16.5 GB left: 10.9 s.
  EXPECT_EQ(progress_line("reading", "amz.h5", 11'400'000'000, 27'900'000'000, 7.5),
            "reading amz.h5: 41% (11.4 of 27.9 GB), 1.52 GB/s, ETA 11 s");
  EXPECT_EQ(progress_line("writing", "x.h5", 0, 900'000'000, 2.0, "bytes"),
            "writing x.h5: 0% (0 of 900 MB), 0 B/s, ETA unknown");
  EXPECT_EQ(progress_line("writing", "x.h5", 4'500'000, 9'000'000, 0.5),
            "writing x.h5: 50% (4.50 of 9.00 MB), 9.00 MB/s, ETA 1 s");
  // Minutes and hours.
  EXPECT_EQ(progress_line("reading", "big", 1'000'000'000, 201'000'000'000, 10.0),
            "reading big: 0% (1 of 201 GB), 100 MB/s, ETA 33 min 20 s");
  EXPECT_EQ(progress_line("reading", "huge", 1'000'000'000, 3'601'000'000'000, 1.0),
            "reading huge: 0% (0.00 of 3.60 TB), 1.00 GB/s, ETA 1 h 00 min");
  // Done (and more than the total, which is clamped).
  EXPECT_EQ(progress_line("reading", "a", 5'000, 5'000, 2.0),
            "reading a: 100% (5.00 of 5.00 kB), 2.50 kB/s, ETA 0 s");
  EXPECT_EQ(progress_line("reading", "a", 7'000, 5'000, 1.0),
            "reading a: 100% (5.00 of 5.00 kB), 5.00 kB/s, ETA 0 s");
  // Small byte counts have no decimals; no label.
  EXPECT_EQ(progress_line("sorting", "", 300, 999, 3.0),
            "sorting: 30% (300 of 999 B), 100 B/s, "
            "ETA 7 s");
}

TEST(Progress, LineOfCounts) {
  EXPECT_EQ(
      progress_line("first pass over", "amz.h5", 710'000'000, 1'740'000'000, 13.6, "nonzeros"),
      "first pass over amz.h5: 41% (0.71 of 1.74 billion nonzeros), 52.2 million "
      "nonzeros/s, ETA 20 s");
  EXPECT_EQ(progress_line("generating", "", 512, 900, 4.0, "nonzeros"),
            "generating: 57% (512 of 900 nonzeros), 128 nonzeros/s, ETA 3 s");
  EXPECT_EQ(progress_line("deduplicating", "t.h5", 25'000, 80'000, 0.25, "nonzeros"),
            "deduplicating t.h5: 31% (25.0 of 80.0 thousand nonzeros), 100 thousand "
            "nonzeros/s, ETA 1 s");
}

TEST(Progress, BarShowsAmountsRateAndEta) {
  const std::string bar = progress_bar("reading", "amz.h5", 11'400'000'000, 27'900'000'000, 7.5);
  EXPECT_EQ(bar,
            "reading amz.h5 [############..................]  41% 11.4 of 27.9 GB, 1.52 GB/s, "
            "ETA 11 s");
  EXPECT_EQ(progress_bar("x", "", 10, 10, 1.0, "nonzeros"),
            "x [##############################] 100% 10 of 10 nonzeros, 10 nonzeros/s, ETA 0 s");
}

TEST(Progress, LogLinesGoToStdoutAtNormalVerbosity) {
  const Verbosity v(1);
  Progress p(true, "reading", "t.h5", 800, "nonzeros");
  EXPECT_TRUE(p.active());
  p.use_lines(0);  // a line at every update
  testing::internal::CaptureStdout();
  p.update(200);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("reading t.h5: 25% (200 of 800 nonzeros), "), std::string::npos) << out;
  EXPECT_NE(out.find("nonzeros/s, ETA "), std::string::npos) << out;
}

TEST(Progress, QuietPrintsNothing) {
  const Verbosity v(0);
  Progress p(true, "reading", "t.h5", 1000);
  EXPECT_FALSE(p.active());
  p.use_lines(0);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  p.update(500);
  p.update(1000);
  p.finish();
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
}

TEST(Progress, OffOrEmptyPrintsNothing) {
  const Verbosity v(1);
  Progress off(false, "reading", "t.h5", 1000);
  Progress empty(true, "reading", "t.h5", 0);
  EXPECT_FALSE(off.active());
  EXPECT_FALSE(empty.active());
  off.use_lines(0);
  empty.use_lines(0);
  testing::internal::CaptureStdout();
  off.update(10);
  empty.update(10);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace tessera
