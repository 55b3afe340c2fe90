// Host-side sorting for the CUDA backend's host paths (tier 1 when the device sort does
// not fit, and tier 2): parallel (OpenMP), stable LSD counting sorts of a permutation
// by uint32 keys, and parallel gathers. Plain C++ (compiled by the host compiler, no
// CUDA headers), so a host-only test can link it without a GPU.
//
// Every function takes `threads`: the OpenMP team size, 0 = automatic (omp_get_max_threads(),
// reduced to one thread for small inputs). The output never depends on the team size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda::host_sort {

/// Stable sort of perm[0, n) by key[perm[k]]: every key must be < dim (dim <= 2^32;
/// dim <= 1 leaves perm as it is). tmp: scratch of n entries. One counting-sort pass per
/// digit of at most 16 bits: ceil(bits(dim - 1) / 16) passes, each with per-thread
/// histograms over contiguous blocks of perm, so the result is the stable order whatever
/// the team size. The result is in perm.
void stable_sort_by_key(const std::uint32_t* key, std::uint64_t dim, std::int64_t* perm,
                        std::int64_t* tmp, std::size_t n, int threads = 0);

/// perm[0, n) := the indices 0 .. n-1 ordered lexicographically by (primary[k],
/// secondary[k], k); `secondary` may be null (then by (primary[k], k)). Keys are below
/// their dims. tmp: scratch of n entries.
void sort_lexicographic(const std::uint32_t* primary, std::uint64_t primary_dim,
                        const std::uint32_t* secondary, std::uint64_t secondary_dim,
                        std::int64_t* perm, std::int64_t* tmp, std::size_t n, int threads = 0);

/// dst[k] = src[perm[k]] for k < n (dst must not overlap src).
void gather(const std::uint32_t* src, const std::int64_t* perm, std::size_t n, std::uint32_t* dst,
            int threads = 0);
void gather(const float* src, const std::int64_t* perm, std::size_t n, float* dst, int threads = 0);
void gather(const double* src, const std::int64_t* perm, std::size_t n, double* dst,
            int threads = 0);

/// Number of bits that represent every value below `dim` (0 for dim <= 1).
inline int key_bits(std::uint64_t dim) {
  int b = 0;
  while (b < 64 && dim > 1 && ((dim - 1) >> b) != 0) ++b;
  return b;
}

}  // namespace tessera::kernels::cuda::host_sort
