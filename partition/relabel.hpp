// Random relabelling of indices (DESIGN §4): a keyed bijection of [0, n) per mode, so a
// skewed mode (heavy slices next to each other) is cut into balanced chunks. No table is
// stored: a 4-round Feistel network on the smallest even number of bits covering n,
// with cycle-walking to stay inside [0, n). Both directions cost a few hashes.
#pragma once

#include <cstdint>

#include "util/rng.hpp"

namespace tessera::partition {

class Relabel {
 public:
  Relabel() = default;
  /// Permutation of [0, n) keyed by (seed, mode).
  Relabel(std::uint64_t seed, int mode, std::uint64_t n)
      : n_(n), key_(hash_keys(seed, 0x5E1AB, static_cast<std::uint64_t>(mode))) {
    int bits = 0;
    while (bits < 64 && (std::uint64_t(1) << bits) < n) ++bits;
    half_ = (bits + 1) / 2;
    if (half_ == 0) half_ = 1;
    mask_ = (std::uint64_t(1) << half_) - 1;
  }
  /// New label of index i (i < n).
  std::uint64_t forward(std::uint64_t i) const {
    if (n_ <= 1) return i;
    do {
      i = feistel(i, false);
    } while (i >= n_);
    return i;
  }
  /// Original index of label j (j < n).
  std::uint64_t inverse(std::uint64_t j) const {
    if (n_ <= 1) return j;
    do {
      j = feistel(j, true);
    } while (j >= n_);
    return j;
  }

 private:
  std::uint64_t round_fn(int r, std::uint64_t x) const {
    return hash_keys(key_, static_cast<std::uint64_t>(r), x) & mask_;
  }
  std::uint64_t feistel(std::uint64_t x, bool inverse) const {
    std::uint64_t l = x >> half_, r = x & mask_;
    if (!inverse) {
      for (int k = 0; k < 4; ++k) {
        const std::uint64_t t = l ^ round_fn(k, r);
        l = r;
        r = t;
      }
    } else {
      for (int k = 3; k >= 0; --k) {
        const std::uint64_t t = r ^ round_fn(k, l);
        r = l;
        l = t;
      }
    }
    return (l << half_) | r;
  }

  std::uint64_t n_ = 0, key_ = 0, mask_ = 0;
  int half_ = 1;
};

}  // namespace tessera::partition
