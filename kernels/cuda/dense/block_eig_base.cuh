// The one-block eigen-solver's sizes, shared helpers and shared-memory layout
// (kernels/cuda/dense/block_eig.cuh describes the solver and the layout; CUDA only, so that
// jobs/probes/eig_probe.cu compiles it without the library).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda::block_eig {

/// Threads of the kernel's one block: 512 or 1024 (the template's argument; 1024 leaves 64
/// registers a thread and spills some). Device code reads blockDim.x.
constexpr int kMaxThreads = 1024;

/// Largest n (a lane holds 8 fixed rows of the trailing matrix) and k (a warp per vector).
constexpr int kMaxN = 256;
constexpr int kMaxK = 16;
/// Rows per lane in the reduction and the back-transformation.
constexpr int kRowsPerLane = kMaxN / 32;
/// Sturm counts per thread per multisection round, and in all.
constexpr int kCountsPerThread = 1;
constexpr int kMaxCounts = kMaxThreads * kCountsPerThread;
/// Multisection stops when every interval is this fraction of T's Gershgorin range (the
/// inverse iteration needs a shift, not the eigenvalue: that is its Rayleigh quotient).
constexpr float kBisectTol = 1e-7f;
/// Rounds of multisection at most, and of inverse iteration.
constexpr int kMaxRounds = 12;
constexpr int kInverseIterations = 2;

/// Doubles of X: each warp's n floats in the reduction, each of the k warps' factors (2 n
/// floats) in the inverse iteration, or the counts of a round (ints).
__host__ __device__ constexpr std::size_t x_doubles(int n, int k) {
  const std::size_t a = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  const std::size_t b = static_cast<std::size_t>(kMaxCounts) * sizeof(int) / sizeof(double);
  const std::size_t c =
      static_cast<std::size_t>(kMaxThreads / 32) * static_cast<std::size_t>(n) / 2;
  const std::size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}

/// Dynamic shared memory of the kernel for n and k.
__host__ __device__ constexpr std::size_t smem_bytes(int n, int k) {
  const std::size_t N = static_cast<std::size_t>(n), K = static_cast<std::size_t>(k);
  const std::size_t doubles = K * N + x_doubles(n, k) + 4 * N + 2 * K + 64;
  const std::size_t floats = 2 * N + N * (N + 1) / 2 + 4 * N + 32;
  return doubles * sizeof(double) + floats * sizeof(float);
}

namespace detail {

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_max(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// Offset of column j (rows j..n-1) in the packed lower triangle.
__device__ __forceinline__ int col_start(int j, int n) {
  return j * n - (j * (j - 1)) / 2;
}

/// A keyed value in (-1, 1) for row i of start vector j (splitmix64).
__device__ __forceinline__ double start_value(int i, int j, int attempt) {
  std::uint64_t z = (static_cast<std::uint64_t>(j) << 40) ^
                    (static_cast<std::uint64_t>(attempt) << 32) ^ static_cast<std::uint64_t>(i);
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/// Block-wide sum or max of one double per thread; every thread gets it. red: 32 doubles.
template <bool kMax>
__device__ double block_reduce(double v, double* red) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // red may still be read from the previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double r = lane < static_cast<int>(blockDim.x) / 32 ? red[lane] : (kMax ? -DBL_MAX : 0.0);
  r = kMax ? warp_max(r) : warp_sum(r);
  return r;
}

/// Number of eigenvalues of T below each of x[0..kCountsPerThread) (Sturm counts, LAPACK's
/// pivmin guard), the recurrences interleaved, in float (T is the float reduction's: its
/// eigenvalues are not known better than float's rounding of ||T||).
__device__ __forceinline__ void sturm_counts(const float* d, const float* e2, int n, const float* x,
                                             float pivmin, int* count) {
  float q[kCountsPerThread];
  int c[kCountsPerThread];
#pragma unroll
  for (int u = 0; u < kCountsPerThread; ++u) {
    q[u] = d[0] - x[u];
    if (fabsf(q[u]) <= pivmin) q[u] = -pivmin;
    c[u] = q[u] < 0 ? 1 : 0;
  }
  for (int i = 1; i < n; ++i) {
    const float di = d[i], ei = e2[i - 1];
#pragma unroll
    for (int u = 0; u < kCountsPerThread; ++u) {
      q[u] = di - x[u] - ei / q[u];
      if (fabsf(q[u]) <= pivmin) q[u] = -pivmin;
      c[u] += q[u] < 0 ? 1 : 0;
    }
  }
#pragma unroll
  for (int u = 0; u < kCountsPerThread; ++u) count[u] = c[u];
}

/// Point q (0-based) of P equally spaced inside (lo, hi).
__device__ __forceinline__ float section_point(float lo, float hi, int q, int P) {
  return lo + (hi - lo) * (static_cast<float>(q + 1) / static_cast<float>(P + 1));
}

/// 1 / x to double precision from float's reciprocal and one Newton step (x and 1 / x
/// within float's range).
__device__ __forceinline__ double fast_rcp(double x) {
  const double r = static_cast<double>(1.f / static_cast<float>(x));
  return r * fma(-x, r, 2.0);
}

/// T - lam I = L D L^T by one thread (pivots of magnitude below pert set to +-pert, as
/// LAPACK's dlagts perturbs them): l[0..n-1) the multipliers, rd[0..n) = 1 / D.
__device__ void shifted_factor(const double* d, const double* e, int n, double lam, double pert,
                               float* l, float* rd) {
  auto guard = [pert](double x) { return fabs(x) < pert ? (x < 0 ? -pert : pert) : x; };
  double D = guard(d[0] - lam);
  for (int i = 1; i < n; ++i) {
    const double r = fast_rcp(D);
    const double li = e[i - 1] * r;
    l[i - 1] = static_cast<float>(li);
    rd[i - 1] = static_cast<float>(r);
    D = guard(d[i] - lam - li * e[i - 1]);
  }
  rd[n - 1] = static_cast<float>(fast_rcp(D));
}

/// z <- (L D L^T)^-1 z (shifted_factor's factors, float, applied in double), by one thread.
/// Only the direction matters: where a running value passes 1e100 all of z (solved part
/// and right-hand side alike) is scaled by 1e-100, the same solve of a scaled z.
__device__ void shifted_solve(const float* l, const float* rd, int n, double* z) {
  double y = z[0];
  for (int i = 1; i < n; ++i) {
    z[i - 1] = y * rd[i - 1];
    y = fma(-static_cast<double>(l[i - 1]), y, z[i]);
    if (fabs(y) > 1e100) {
      y *= 1e-100;
      for (int q = 0; q < n; ++q) z[q] *= 1e-100;
    }
  }
  double zn = y * rd[n - 1];
  z[n - 1] = zn;
  for (int i = n - 2; i >= 0; --i) {
    zn = fma(-static_cast<double>(l[i]), zn, z[i]);
    z[i] = zn;
    if (fabs(zn) > 1e100) {
      zn *= 1e-100;
      for (int q = 0; q < n; ++q) z[q] *= 1e-100;
    }
  }
}

/// z (n values, one warp) scaled to unit norm: by its largest magnitude first (a solve's
/// result can be large). A zero z stays zero.
__device__ void warp_normalize(double* z, int n) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  double mx = 0;
  for (int i = lane; i < n; i += 32) mx = fmax(mx, fabs(z[i]));
  mx = warp_max(mx);
  if (!(mx > 0)) return;
  double ss = 0;
  for (int i = lane; i < n; i += 32) {
    const double x = z[i] / mx;
    ss += x * x;
  }
  const double f = 1.0 / (mx * sqrt(warp_sum(ss)));
  for (int i = lane; i < n; i += 32) z[i] *= f;
  __syncwarp();
}

}  // namespace detail

/// The kernel's shared memory, carved for n and k (see the file's comment).
struct Smem {
  int n, k;
  double *Z, *X, *d, *e, *e2, *tau2, *lo, *hi, *red;
  float *A, *sc, *p, *part, *df, *e2f, *scratch;
  float2* vpp;
  __device__ Smem(unsigned char* base, int n_, int k_) : n(n_), k(k_) {
    Z = reinterpret_cast<double*>(base);  // Z[j n + i]
    X = Z + static_cast<std::size_t>(k) * n;
    d = X + x_doubles(n, k);
    e = d + n;
    e2 = e + n;
    tau2 = e2 + n;
    lo = tau2 + n;
    hi = lo + k;
    red = hi + k;                               // 64
    vpp = reinterpret_cast<float2*>(red + 64);  // n
    A = reinterpret_cast<float*>(vpp + n);
    scratch = reinterpret_cast<float*>(X);  // the reduction's: a warp's n floats each
    sc = A + n * (n + 1) / 2;
    p = sc + n;
    part = p + n;  // 32
    df = part + 32;
    e2f = df + n;
  }
};

}  // namespace tessera::kernels::cuda::block_eig
