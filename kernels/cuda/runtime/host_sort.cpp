// Parallel, stable LSD counting sorts and gathers on the host (see host_sort.hpp).
//
// One pass (digit of `bits` bits at `shift`) over perm[0, n), with a team of T threads:
//   1. thread t takes the contiguous block [n t / T, n (t+1) / T) of the input, computes
//      each element's digit (cached in a uint16 array, so the scatter reads it
//      sequentially instead of gathering key[perm[k]] a second time) and a histogram of
//      its block;
//   2. one thread turns the T histograms into start offsets, bucket-major and thread
//      order within a bucket: the elements of bucket b from block t go after those of
//      blocks < t, which is what makes the pass stable;
//   3. every thread scatters its block, in order, to its offsets.
// Histograms take T * 2^16 entries (8 threads: 4 MiB). The result is the unique stable
// order, independent of T.
#include "kernels/cuda/runtime/host_sort.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tessera::kernels::cuda::host_sort {

namespace {

/// Inputs under this size run on one thread when the team size is automatic.
constexpr std::size_t kMinParallel = std::size_t(1) << 16;
constexpr int kMaxDigitBits = 16;

int team_size(int threads, std::size_t n) {
  if (n <= 1) return 1;
  int t = threads;
  if (t <= 0) {
#ifdef _OPENMP
    t = omp_get_max_threads();
#else
    t = 1;
#endif
    if (n < kMinParallel) t = 1;
  }
  t = std::max(t, 1);
  if (static_cast<std::size_t>(t) > n) t = static_cast<int>(n);
  return t;
}

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}
int thread_count() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}

/// out := in stably sorted by digit (key[in[k]] >> shift) & (2^bits - 1).
void counting_pass(const std::uint32_t* key, int shift, int bits, const std::int64_t* in,
                   std::int64_t* out, std::size_t n, int T, std::uint16_t* digit,
                   std::vector<std::size_t>& hist) {
  const std::size_t B = std::size_t(1) << bits;
  const std::uint32_t mask = static_cast<std::uint32_t>(B - 1);
  hist.assign(static_cast<std::size_t>(T) * B, 0);
#pragma omp parallel num_threads(T) if (T > 1)
  {
    const std::size_t t = static_cast<std::size_t>(thread_id());
    const std::size_t team = static_cast<std::size_t>(thread_count());  // may be < T
    const std::size_t lo = n * t / team, hi = n * (t + 1) / team;
    std::size_t* h = hist.data() + t * B;
    for (std::size_t k = lo; k < hi; ++k) {
      const auto d = static_cast<std::uint16_t>((key[in[k]] >> shift) & mask);
      digit[k] = d;
      ++h[d];
    }
#pragma omp barrier
#pragma omp single
    {
      std::size_t sum = 0;
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t u = 0; u < team; ++u) {
          std::size_t& c = hist[u * B + b];
          const std::size_t cnt = c;
          c = sum;
          sum += cnt;
        }
    }  // implicit barrier
    for (std::size_t k = lo; k < hi; ++k) out[h[digit[k]]++] = in[k];
  }
}

void copy_parallel(const std::int64_t* src, std::int64_t* dst, std::size_t n, int T) {
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (std::int64_t k = 0; k < sn; ++k) dst[k] = src[k];
}

template <typename V>
void gather_impl(const V* src, const std::int64_t* perm, std::size_t n, V* dst, int threads) {
  const int T = team_size(threads, n);
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (std::int64_t k = 0; k < sn; ++k) dst[k] = src[perm[k]];
}

}  // namespace

void stable_sort_by_key(const std::uint32_t* key, std::uint64_t dim, std::int64_t* perm,
                        std::int64_t* tmp, std::size_t n, int threads) {
  const int bits = key_bits(dim);
  if (n <= 1 || bits == 0) return;  // every key is 0: already in order
  const int passes = (bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int width = (bits + passes - 1) / passes;  // balanced digits, each <= 16 bits
  const int T = team_size(threads, n);
  // Uninitialised (no serial zeroing pass); every entry is written before it is read.
  std::unique_ptr<std::uint16_t[]> digit(new std::uint16_t[n]);
  std::vector<std::size_t> hist;
  std::int64_t* in = perm;
  std::int64_t* out = tmp;
  for (int p = 0; p < passes; ++p) {
    const int shift = p * width;
    counting_pass(key, shift, std::min(width, bits - shift), in, out, n, T, digit.get(), hist);
    std::swap(in, out);
  }
  if (in != perm) copy_parallel(in, perm, n, T);
}

void sort_lexicographic(const std::uint32_t* primary, std::uint64_t primary_dim,
                        const std::uint32_t* secondary, std::uint64_t secondary_dim,
                        std::int64_t* perm, std::int64_t* tmp, std::size_t n, int threads) {
  const int T = team_size(threads, n);
  const auto sn = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static) num_threads(T) if (T > 1)
  for (std::int64_t k = 0; k < sn; ++k) perm[k] = k;
  // LSD: secondary key first; both passes are stable, so ties keep index order.
  if (secondary != nullptr) stable_sort_by_key(secondary, secondary_dim, perm, tmp, n, threads);
  stable_sort_by_key(primary, primary_dim, perm, tmp, n, threads);
}

void gather(const std::uint32_t* src, const std::int64_t* perm, std::size_t n, std::uint32_t* dst,
            int threads) {
  gather_impl(src, perm, n, dst, threads);
}
void gather(const float* src, const std::int64_t* perm, std::size_t n, float* dst, int threads) {
  gather_impl(src, perm, n, dst, threads);
}
void gather(const double* src, const std::int64_t* perm, std::size_t n, double* dst, int threads) {
  gather_impl(src, perm, n, dst, threads);
}

}  // namespace tessera::kernels::cuda::host_sort
