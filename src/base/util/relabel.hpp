// Random relabelling of indices (DESIGN §4): a keyed bijection of [0, n) per mode, so a
// skewed mode (heavy slices next to each other) is cut into balanced chunks. No table is
// stored: a 4-round Feistel network on the smallest even number of bits covering n,
// with cycle-walking to stay inside [0, n). Both directions cost a few hashes. Host and
// device (partition::distribute_relabelled on the host; a synthetic tensor's window,
// tensor/synthetic.hpp, generated on a GPU), so both give the same labels.
#pragma once

#include <cstdint>

#include "util/rng.hpp"

namespace tessera {

class Relabel {
 public:
  Relabel() = default;
  /// Permutation of [0, n) keyed by (seed, mode).
  TESSERA_HD Relabel(std::uint64_t seed, int mode, std::uint64_t n)
      : n_(n), key_(hash_keys(seed, 0x5E1AB, static_cast<std::uint64_t>(mode))) {
    int bits = 0;
    while (bits < 64 && (std::uint64_t(1) << bits) < n) ++bits;
    half_ = (bits + 1) / 2;
    if (half_ == 0) half_ = 1;
    mask_ = (std::uint64_t(1) << half_) - 1;
  }
  /// The cyclic deal of [0, n) over `parts` chunks: index i goes to chunk i mod parts, and
  /// each chunk keeps its indices in order (label = the chunk's start + i / parts; chunks of
  /// ceil(n / parts) labels first, then floor). A power-law head is spread over the chunks as
  /// a random bijection spreads it, but neighbouring heavy indices stay near each other.
  TESSERA_HD static Relabel cyclic(std::uint64_t parts, std::uint64_t n) {
    Relabel r;
    r.n_ = n;
    r.parts_ = parts < 1 ? 1 : parts;
    return r;
  }
  /// New label of index i (i < n).
  TESSERA_HD std::uint64_t forward(std::uint64_t i) const {
    if (n_ <= 1) return i;
    if (parts_ > 0) {
      const std::uint64_t c = i % parts_, q = n_ / parts_, r = n_ % parts_;
      return c * q + (c < r ? c : r) + i / parts_;
    }
    do {
      i = feistel(i, false);
    } while (i >= n_);
    return i;
  }
  /// Original index of label j (j < n).
  TESSERA_HD std::uint64_t inverse(std::uint64_t j) const {
    if (n_ <= 1) return j;
    if (parts_ > 0) {
      const std::uint64_t q = n_ / parts_, r = n_ % parts_, head = r * (q + 1);
      const std::uint64_t c = j < head ? j / (q + 1) : r + (j - head) / q;
      const std::uint64_t off = j < head ? j % (q + 1) : (j - head) % q;
      return off * parts_ + c;
    }
    do {
      j = feistel(j, true);
    } while (j >= n_);
    return j;
  }

 private:
  TESSERA_HD std::uint64_t round_fn(int r, std::uint64_t x) const {
    return hash_keys(key_, static_cast<std::uint64_t>(r), x) & mask_;
  }
  TESSERA_HD std::uint64_t feistel(std::uint64_t x, bool inverse) const {
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
  std::uint64_t parts_ = 0;  ///< > 0: the cyclic deal over this many chunks
  int half_ = 1;
};

}  // namespace tessera
