// The host sorts of the CUDA backend (kernels/cuda/runtime/host_sort.cpp) against
// std::stable_sort: random keys over many key ranges (one and two 16-bit digits, full
// uint32), skewed keys (long runs of equal keys), 0 and 1 elements, and team sizes 0
// (automatic), 1, 2, 3 and 8. Host only: needs no GPU (the binary links host_sort.cpp, not
// the CUDA backend).
#include "kernels/cuda/runtime/host_sort.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace tessera::kernels::cuda::host_sort {
namespace {

/// n keys below dim; with `skew`, 70% of them are 0 and 10% are dim - 1.
std::vector<std::uint32_t> random_keys(std::size_t n, std::uint64_t dim, std::uint64_t seed,
                                       bool skew = false) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> k(n);
  for (auto& v : k) {
    v = static_cast<std::uint32_t>(rng() % dim);
    if (skew) {
      const auto r = rng() % 10;
      if (r < 7) v = 0;
      if (r == 7) v = static_cast<std::uint32_t>(dim - 1);
    }
  }
  return k;
}

std::vector<std::int64_t> shuffled(std::size_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(n);
  std::iota(p.begin(), p.end(), std::int64_t(0));
  std::shuffle(p.begin(), p.end(), std::mt19937_64(seed));
  return p;
}

const std::vector<std::size_t> kSizes = {0, 1, 2, 3, 17, 1000, 65535, 65537, 200003};
const std::vector<std::uint64_t> kDims = {1,     2,     7,       256,      1000,
                                          65536, 65537, 1000003, 1u << 24, 4294967296ull};
const std::vector<int> kThreads = {0, 1, 2, 3, 8};

TEST(HostSort, KeyBits) {
  EXPECT_EQ(key_bits(0), 0);
  EXPECT_EQ(key_bits(1), 0);
  EXPECT_EQ(key_bits(2), 1);
  EXPECT_EQ(key_bits(3), 2);
  EXPECT_EQ(key_bits(4), 2);
  EXPECT_EQ(key_bits(5), 3);
  EXPECT_EQ(key_bits(65536), 16);
  EXPECT_EQ(key_bits(65537), 17);
  EXPECT_EQ(key_bits(4294967296ull), 32);
}

TEST(HostSort, StableSortByKeyMatchesStdStableSort) {
  std::uint64_t seed = 1;
  for (std::size_t n : kSizes)
    for (std::uint64_t dim : kDims)
      for (bool skew : {false, true}) {
        if (skew && n > 70000) continue;  // keeps the test short
        const auto key = random_keys(n, dim, ++seed, skew);
        // Start from a shuffled permutation: stability is relative to the input order.
        const auto input = shuffled(n, ++seed);
        auto want = input;
        std::stable_sort(want.begin(), want.end(),
                         [&](std::int64_t a, std::int64_t b) { return key[a] < key[b]; });
        for (int t : kThreads) {
          auto perm = input;
          std::vector<std::int64_t> tmp(n, -1);
          stable_sort_by_key(key.data(), dim, perm.data(), tmp.data(), n, t);
          ASSERT_EQ(perm, want) << "n " << n << " dim " << dim << " skew " << skew << " threads "
                                << t;
        }
      }
}

TEST(HostSort, LexicographicMatchesStdStableSort) {
  struct Case {
    std::uint64_t primary_dim, secondary_dim;
    bool secondary, skew;
  };
  const std::vector<Case> cases = {
      {1, 1, true, false},
      {1, 1000, true, false},
      {1000, 1, true, false},
      {7, 5, true, true},
      {1000, 70000, true, true},
      {70000, 1000, true, false},
      {1u << 20, 1u << 20, true, false},
      {4294967296ull, 4294967296ull, true, false},
      {300, 0, false, true},
      {1u << 20, 0, false, false},
  };
  std::uint64_t seed = 1000;
  for (const auto& c : cases)
    for (std::size_t n :
         {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(999), std::size_t(131071)}) {
      const auto p = random_keys(n, c.primary_dim, ++seed, c.skew);
      const auto s = c.secondary ? random_keys(n, c.secondary_dim, ++seed, c.skew)
                                 : std::vector<std::uint32_t>();
      std::vector<std::int64_t> want(n);
      std::iota(want.begin(), want.end(), std::int64_t(0));
      std::stable_sort(want.begin(), want.end(), [&](std::int64_t a, std::int64_t b) {
        if (p[a] != p[b]) return p[a] < p[b];
        return c.secondary && s[a] < s[b];
      });
      for (int t : kThreads) {
        std::vector<std::int64_t> perm(n, -1), tmp(n, -1);
        sort_lexicographic(p.data(), c.primary_dim, c.secondary ? s.data() : nullptr,
                           c.secondary_dim, perm.data(), tmp.data(), n, t);
        ASSERT_EQ(perm, want) << "n " << n << " dims " << c.primary_dim << " x " << c.secondary_dim
                              << " threads " << t;
      }
    }
}

TEST(HostSort, Gather) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(5), std::size_t(100003)}) {
    const auto perm = shuffled(n, n + 7);
    const auto u = random_keys(n, 4294967296ull, n + 8);
    std::vector<float> f(n);
    std::vector<double> d(n);
    for (std::size_t k = 0; k < n; ++k) {
      f[k] = static_cast<float>(k) * 0.5f;
      d[k] = static_cast<double>(k) * 0.25;
    }
    for (int t : kThreads) {
      std::vector<std::uint32_t> gu(n);
      std::vector<float> gf(n);
      std::vector<double> gd(n);
      gather(u.data(), perm.data(), n, gu.data(), t);
      gather(f.data(), perm.data(), n, gf.data(), t);
      gather(d.data(), perm.data(), n, gd.data(), t);
      for (std::size_t k = 0; k < n; ++k) {
        const auto j = static_cast<std::size_t>(perm[k]);
        ASSERT_EQ(gu[k], u[j]) << k;
        ASSERT_EQ(gf[k], f[j]) << k;
        ASSERT_EQ(gd[k], d[j]) << k;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cuda::host_sort
