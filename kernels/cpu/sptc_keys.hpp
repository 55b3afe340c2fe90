// Keys and sorts of the OpenMP SpTC (kernels/cpu/sptc.cpp, docs/sptc.md): coordinate tuples
// as 64-bit keys that order like the tuples, a stable parallel LSD radix sort of (key, index)
// pairs, and the thread-count helpers the contraction shares. Internal to kernels/cpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/team.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels::cpu::detail {

using u32 = std::uint32_t;
using u64 = std::uint64_t;
constexpr u32 kNone = 0xFFFFFFFFu;
/// Index arrays are 32-bit: at most this many nonzeros per input (and output) per rank.
constexpr u64 kMaxEntries = 0xFFFFFFFEull;

using cpu::team_size;
/// Threads worth using for n elements of streaming work (at least 1).
int team_for(std::size_t n, int threads);
inline int bit_width(u64 v) {
  return v == 0 ? 0 : 64 - __builtin_clzll(v);
}
/// Smallest power of two >= v (v >= 1).
inline u64 pow2_at_least(u64 v) {
  u64 p = 1;
  while (p < v) p <<= 1;
  return p;
}

/// Stable LSD radix sort of the pairs (key[k], val[k]) by key (every key < bound). The
/// result does not depend on the team size.
void radix_sort_pairs(std::vector<u64>& key, std::vector<u32>& val, u64 bound, int threads);

/// Coordinate columns of one source of tuples: col[p] is the array of tuple position p.
struct TupleCols {
  std::vector<const index_t*> col;
  std::size_t n = 0;
};

/// The columns `modes` of idx (n tuples).
TupleCols tuple_cols(const std::vector<std::vector<index_t>>& idx, const std::vector<int>& modes,
                     std::size_t n);

/// Keys of coordinate tuples, jointly over several sources: equal tuples get equal keys,
/// and keys order like the tuples (lexicographic, position 0 first). Mixed-radix packing
/// while the product of the dims fits in 64 bits; ranking (sorts) where it would overflow.
/// *bound receives a bound on the keys (every key < *bound, *bound >= 1).
std::vector<std::vector<u64>> pack_tuples(const std::vector<TupleCols>& src,
                                          const std::vector<u64>& dims, u64* bound, int threads);

}  // namespace tessera::kernels::cpu::detail
