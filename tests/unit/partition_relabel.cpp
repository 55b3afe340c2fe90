// The random relabelling is a bijection of [0, n) for every n, with a working inverse,
// and it actually moves indices (not the identity).
#include <gtest/gtest.h>

#include <vector>

#include "partition/relabel.hpp"

namespace tessera::partition {
namespace {

TEST(Relabel, BijectionWithInverseForManySizes) {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 16ull, 34ull, 1000ull, 1718ull, 65537ull}) {
    for (int mode : {0, 3}) {
      const Relabel rl(42, mode, n);
      std::vector<char> hit(n, 0);
      std::uint64_t moved = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t j = rl.forward(i);
        ASSERT_LT(j, n) << "n=" << n;
        ASSERT_EQ(hit[j], 0) << "n=" << n << ": two indices map to " << j;
        hit[j] = 1;
        ASSERT_EQ(rl.inverse(j), i) << "n=" << n;
        moved += j != i;
      }
      if (n >= 16) {
        EXPECT_GT(moved, n / 2) << "n=" << n;
      }
    }
  }
}

TEST(Relabel, LargeDomainRoundTrip) {
  const std::uint64_t n = 4294967295ull;  // largest mode length of a valid file
  const Relabel rl(7, 1, n);
  for (std::uint64_t i : std::vector<std::uint64_t>{0, 1, 12345, n / 2, n - 2, n - 1}) {
    const std::uint64_t j = rl.forward(i);
    EXPECT_LT(j, n);
    EXPECT_EQ(rl.inverse(j), i);
  }
}

TEST(Relabel, KeyedByModeAndSeed) {
  const Relabel a(1, 0, 1000), b(1, 1, 1000), c(2, 0, 1000);
  int same_ab = 0, same_ac = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same_ab += a.forward(i) == b.forward(i);
    same_ac += a.forward(i) == c.forward(i);
  }
  EXPECT_LT(same_ab, 50);
  EXPECT_LT(same_ac, 50);
}

}  // namespace
}  // namespace tessera::partition
