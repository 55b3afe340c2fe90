// Counter-based random numbers: a value is a pure function of (seed, stream, counter),
// so results do not depend on how work is split across ranks or threads.
#pragma once

#include <cmath>
#include <cstdint>

/// Host and device: the same numbers on CPUs and GPUs.
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif

namespace tessera {

/// SplitMix64 finaliser: a bijective 64-bit mix.
TESSERA_HD inline constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Hash of up to four 64-bit keys.
TESSERA_HD inline constexpr std::uint64_t hash_keys(std::uint64_t a, std::uint64_t b = 0,
                                                    std::uint64_t c = 0, std::uint64_t d = 0) {
  std::uint64_t h = mix64(a ^ 0x6A09E667F3BCC909ull);
  h = mix64(h ^ b);
  h = mix64(h ^ (c + 0x3C6EF372FE94F82Bull));
  h = mix64(h ^ (d + 0xA54FF53A5F1D36F1ull));
  return h;
}

/// Uniform double in [0, 1) from 53 high bits of a hash.
TESSERA_HD inline double uniform01(std::uint64_t h) {
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

/// Standard normal from two hashes (Box-Muller).
inline double normal01(std::uint64_t h1, std::uint64_t h2) {
  double u1 = uniform01(h1);
  double u2 = uniform01(h2);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// Stateful sequence built on the counter hash (for code that just needs a stream).
class CounterRng {
 public:
  CounterRng(std::uint64_t seed, std::uint64_t stream) : seed_(seed), stream_(stream) {}
  std::uint64_t next_u64() { return hash_keys(seed_, stream_, ctr_++); }
  double uniform() { return uniform01(next_u64()); }
  double normal() {
    std::uint64_t a = next_u64();
    return normal01(a, next_u64());
  }

 private:
  std::uint64_t seed_, stream_, ctr_ = 0;
};

}  // namespace tessera
