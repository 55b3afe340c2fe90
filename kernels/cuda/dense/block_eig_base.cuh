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
/// w[k] after a solve: 0 answered (by the Lanczos kernel where it ran), kNotFinite (S has a
/// non-finite entry; nothing else written), kLanczosDeclined (block_lanczos.cuh's kernel did not
/// accept its answer: the exact kernel is to run) or kExactAfterLanczos (it did).
constexpr double kNotFinite = 1, kLanczosDeclined = 2, kExactAfterLanczos = 3;
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
/// The back-transformation: reflectors applied together (each lane holds theirs in double),
/// and reflectors per panel written in double into X (kBackPanel n doubles <= x_doubles).
constexpr int kBackGroup = 4;
constexpr int kBackPanel = 16;

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
  const std::size_t doubles = K * N + x_doubles(n, k) + 4 * N + 2 * K + 64 + K * K;
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
#pragma unroll 4
  for (int i = 1; i < n; ++i) {
    const float di = d[i], ei = e2[i - 1];
#pragma unroll
    for (int u = 0; u < kCountsPerThread; ++u) {
      // __fdividef (2 ulp; |q| >= pivmin, far below 2^126): an IEEE division's path made this
      // loop's chain about twice as long (session 36); the count is as for T perturbed by ulps.
      q[u] = di - x[u] - __fdividef(ei, q[u]);
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

/// 1 / x to double precision (x normal): the hardware's approximation of the reciprocal's
/// leading bits and two Newton steps, a short dependent chain (session 36: the division it
/// replaces made the factorisation's loop about 300 cycles a step).
__device__ __forceinline__ double fast_rcp(double x) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x));
  r = fma(r, fma(-x, r, 1.0), r);
  return fma(r, fma(-x, r, 1.0), r);
}

/// T - lam I = L D L^T by one thread (pivots of magnitude below pert set to +-pert, as
/// LAPACK's dlagts perturbs them): l[0..n-1) the multipliers, rd[0..n) = 1 / D. e2[i] = e[i]^2,
/// so that the dependent chain is the reciprocal and one fma (D_i = d_i - lam - e_(i-1)^2 /
/// D_(i-1)).
__device__ void shifted_factor(const double* __restrict__ d, const double* __restrict__ e,
                               const double* __restrict__ e2, int n, double lam, double pert,
                               float* __restrict__ l, float* __restrict__ rd) {
  auto guard = [pert](double x) { return fabs(x) < pert ? (x < 0 ? -pert : pert) : x; };
  double D = guard(d[0] - lam);
#pragma unroll 4
  for (int i = 1; i < n; ++i) {
    const double r = fast_rcp(D);
    l[i - 1] = static_cast<float>(e[i - 1] * r);
    rd[i - 1] = static_cast<float>(r);
    D = guard(fma(-e2[i - 1], r, d[i] - lam));
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

/// shifted_solve by a whole warp: both sweeps are first-order recurrences (y_i = z_i -
/// l_(i-1) y_(i-1), then x_i = u_i - l_i x_(i+1)), so each lane composes its chunk of
/// ceil(n / 32) consecutive rows into one affine map, a warp scan (5 exchanges) composes the
/// lanes' maps, and each lane replays its chunk from the value the scan gives its start: about
/// 2 n / 32 + 10 dependent steps instead of 2 n (session 36). The arithmetic is
/// shifted_solve's, in another order. The maps' products can overflow where shifted_solve
/// would rescale: then nothing is written and it returns false (every lane alike), and the
/// caller runs shifted_solve. C: rows a lane at most (n <= 32 C; fewer registers for short
/// tridiagonals, such as block_lanczos.cuh's, of order <= 64).
template <int C = kMaxN / 32>
__device__ __forceinline__ bool warp_shifted_solve(const float* l, const float* rd, int n,
                                                   double* z) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int cs = (n + 31) >> 5, i0 = lane * cs;
  double zc[C], lc[C];  // this lane's z and its rows' multipliers l_(i-1) (forward) or l_i
  // ---- forward: y_i = z_i - l_(i-1) y_(i-1) (l_(-1) = 0), u_i = y_i rd_i ----
  double a = 1.0, b = 0.0;
#pragma unroll
  for (int t = 0; t < C; ++t) {
    const int i = i0 + t;
    const bool in = t < cs && i < n;
    zc[t] = in ? z[i] : 0.0;
    lc[t] = in && i > 0 ? static_cast<double>(l[i - 1]) : 0.0;
    if (in) {
      a = -lc[t] * a;
      b = fma(-lc[t], b, zc[t]);
    }
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {  // inclusive scan: lane L's map after lanes < L's
    const double pa = __shfl_up_sync(0xffffffffu, a, o), pb = __shfl_up_sync(0xffffffffu, b, o);
    if (lane >= o) {
      b = fma(a, pb, b);
      a *= pa;
    }
  }
  double y = __shfl_up_sync(0xffffffffu, b, 1);  // y just before this lane's chunk
  if (lane == 0) y = 0.0;
  bool ok = true;
#pragma unroll
  for (int t = 0; t < C; ++t) {
    const int i = i0 + t;
    if (t < cs && i < n) {
      y = fma(-lc[t], y, zc[t]);
      zc[t] = y * static_cast<double>(rd[i]);  // u_i
      ok = ok && isfinite(zc[t]);
    }
  }
  // ---- backward: x_i = u_i - l_i x_(i+1) (l_(n-1) = 0) ----
  a = 1.0;
  b = 0.0;
#pragma unroll
  for (int t = C - 1; t >= 0; --t) {
    const int i = i0 + t;
    if (t < cs && i < n) {
      lc[t] = i + 1 < n ? static_cast<double>(l[i]) : 0.0;
      a = -lc[t] * a;
      b = fma(-lc[t], b, zc[t]);
    }
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {  // lane L's map after lanes > L's
    const double pa = __shfl_down_sync(0xffffffffu, a, o), pb = __shfl_down_sync(0xffffffffu, b, o);
    if (lane + o < 32) {
      b = fma(a, pb, b);
      a *= pa;
    }
  }
  double x = __shfl_down_sync(0xffffffffu, b, 1);  // x just after this lane's chunk
  if (lane == 31) x = 0.0;
#pragma unroll
  for (int t = C - 1; t >= 0; --t) {
    const int i = i0 + t;
    if (t < cs && i < n) {
      x = fma(-lc[t], x, zc[t]);
      zc[t] = x;
      ok = ok && isfinite(x);
    }
  }
  if (!__all_sync(0xffffffffu, ok)) return false;
#pragma unroll
  for (int t = 0; t < C; ++t) {
    const int i = i0 + t;
    if (t < cs && i < n) z[i] = zc[t];
  }
  __syncwarp();
  return true;
}

/// Column sums of a warp's G columns (G = 2, 4 or 8; c[g]: this lane's part of column g)
/// reduced across the warp by halving exchanges (G - 1 + log2(32 / G) shuffles, not 5 G):
/// afterwards every lane holds the total of column scatter_column<G>(lane).
template <int G, typename T>
__device__ __forceinline__ T reduce_scatter(T (&c)[G], int lane) {
#pragma unroll
  for (int h = G / 2, o = 16; h >= 1; h >>= 1, o >>= 1) {
    const bool hi = (lane & o) != 0;
#pragma unroll
    for (int q = 0; q < h; ++q) {
      const T send = hi ? c[q] : c[q + h], keep = hi ? c[q + h] : c[q];
      c[q] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  T x = c[0];
#pragma unroll
  for (int o = 16 / G; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <int G>
__device__ __forceinline__ int scatter_column(int lane) {
  static_assert(G == 2 || G == 4 || G == 8, "reduce_scatter takes 2, 4 or 8 columns");
  return ((lane >> 4) & 1) * (G / 2) + ((lane >> 3) & 1) * (G / 4) + ((lane >> 2) & 1) * (G / 8);
}
/// A lane that holds column a's total after reduce_scatter<G> (scatter_column<G>'s inverse).
template <int G>
__host__ __device__ constexpr int scatter_lane(int a) {
  int lane = 0;
  for (int bit = 16, w = G / 2; w >= 1; bit >>= 1, w >>= 1) lane += (a / w) % 2 * bit;
  return lane;
}

/// One pass of Cholesky QR of Z's k vectors (vector-major, n each) by the block: the Gram
/// G = Z^T Z (a warp a dot), G = L L^T by warp 0 (right-looking, lane i row i in registers), then
/// Z <- Z L^-T (a thread a row). In exact arithmetic the Gram-Schmidt of vector j against
/// 0..j-1 in order, normalised: the same vectors as classical Gram-Schmidt, in three barriers
/// instead of six a vector (session 36). Returns false (the block alike), with Z unchanged,
/// where a vector keeps at most 1e-6 of its norm against the ones before it (or is zero or
/// not finite): the caller's Gram-Schmidt handles that vector by restarting it. G: k x k
/// doubles; flag: one double.
__device__ bool cholqr_pass(double* Z, int n, int k, double* G, double* flag) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int nthreads = static_cast<int>(blockDim.x), nwarps = nthreads / 32;
  for (int task = warp; task < k * (k + 1) / 2; task += nwarps) {  // (a, b), b <= a
    int a = 0;
    while ((a + 1) * (a + 2) / 2 <= task) ++a;
    const int b = task - a * (a + 1) / 2;
    double s = 0;
    for (int i = lane; i < n; i += 32) s = fma(Z[a * n + i], Z[b * n + i], s);
    s = warp_sum(s);
    if (lane == 0) G[a * k + b] = s;
  }
  __syncthreads();
  if (warp == 0) {  // lane i holds row i of G, then of L, in registers
    double row[kMaxK], g0 = 0.0;
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) {
      row[j] = lane < k && j <= lane && j < k ? G[lane * k + j] : 0.0;
      if (j == lane) g0 = row[j];  // the norm squared before
    }
    bool ok = true;
#pragma unroll
    for (int c = 0; c < kMaxK; ++c) {
      if (c >= k) break;
      const double piv = __shfl_sync(0xffffffffu, row[c], c);  // what is left of vector c, squared
      const double g0c = __shfl_sync(0xffffffffu, g0, c);
      ok = ok && isfinite(piv) && piv > 1e-12 * g0c;
      const double rl = ok ? rsqrt(piv) : 0.0;
      if (lane > c) row[c] *= rl;  // L(lane, c)
      if (lane == c) row[c] = rl;  // 1 / L(c, c), kept on the diagonal
#pragma unroll
      for (int j = c + 1; j < kMaxK; ++j) {
        const double ljc = __shfl_sync(0xffffffffu, row[c], j);  // L(j, c)
        if (lane >= j) row[j] = fma(-row[c], ljc, row[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      if (lane < k && j <= lane && j < k) G[lane * k + j] = row[j];
    if (lane == 0) *flag = ok ? 1.0 : 0.0;
  }
  __syncthreads();
  if (*flag == 0.0) return false;
  for (int i = tid; i < n;
       i += nthreads) {  // row i: y L^T = z, y_c = (z_c - sum L(c, q) y_q) / L(c, c)
    double y[kMaxK];
#pragma unroll
    for (int c = 0; c < kMaxK; ++c) {
      if (c >= k) break;
      double x = Z[c * n + i];
#pragma unroll
      for (int q = 0; q < c; ++q) x = fma(-G[c * k + q], y[q], x);
      y[c] = x * G[c * k + c];
      Z[c * n + i] = y[c];
    }
  }
  __syncthreads();
  return true;
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
  double *Z, *X, *d, *e, *e2, *tau2, *lo, *hi, *red, *G;
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
    red = hi + k;                                                          // 64
    G = red + 64;                                                          // k x k
    vpp = reinterpret_cast<float2*>(G + static_cast<std::size_t>(k) * k);  // n
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
