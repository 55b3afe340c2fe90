// The k largest eigenpairs of a symmetric n x n matrix (n <= 256, k <= 16) in ONE kernel on
// ONE thread block, for Tucker's Gram eigen-solve in single precision (issue 43, point 3; the
// library uses it for every n <= 256: kernels/ops/tucker_dense.hpp, block_eig_applies).
// Self-contained (CUDA only), so that jobs/probes/eig_probe.cu times it beside cuSOLVER.
//
// Why: cuSOLVER's dsyevdx takes 0.7-2 ms for n = 64-256 whatever the precision or k: its
// tridiagonal reduction is n - 1 dependent steps of small kernels, each a few microseconds of
// launch and grid-wide latency (docs/perf/gpu-h200-floors.md, sessions 18, 23 and 33). Here
// every step stays inside one block, whose barriers cost tens of cycles:
//
// 1. The lower triangle, scaled by a power of two so that its largest entry is in [0.5, 1),
//    is held in shared memory in float, packed by columns (131.6 KB at n = 256), and reduced
//    to a tridiagonal T = Q^T A Q by LAPACK's unblocked ssytd2 (lower), two block barriers
//    a step. Step kk does not apply its rank-2 update A -= v w^T + w v^T: step kk + 1 does, in
//    the one pass over the trailing triangle that also forms p = A v for its own reflector
//    (each entry read and written once a step, and used once for both a_ij v_j and a_ij v_i).
//    Every warp forms the reflector of column kk alike (no barrier); columns of 8 are dealt
//    to the warps (a warp per column where the trailing matrix has at most 64 rows), a lane
//    per fixed rows; row sums and column sums meet in shared memory (session 35).
// 2. Each reflector is stored in its column; its tau is recomputed in double from the stored
//    float v (tau = 2 / v^T v), so Q is orthogonal to double rounding and the float reduction's
//    error is a backward error of A (about 1e-7 ||A||, as ssytrd's).
// 3. The k largest eigenvalues of T by multisection on Sturm counts in float, a count per
//    thread per round, to 1e-7 of T's Gershgorin range (the inverse iteration needs a shift;
//    the eigenvalue is its Rayleigh quotient).
// 4. Their eigenvectors by inverse iteration on T: T - lam I = L D L^T once per eigenvalue
//    (computed in double, stored in float; a warp per vector, by one lane), two solves in
//    double from keyed random starts, the k
//    vectors re-orthonormalised (classical Gram-Schmidt, twice) after each, so that close or
//    repeated eigenvalues get orthonormal vectors of their cluster; then each eigenvalue is
//    the Rayleigh quotient (the pairs ordered by it).
// 5. V = Q Z by the stored reflectors, a warp per vector, in double.
//
// Shared memory (doubles first): Z (k x n, vector-major), X (each warp's n floats in the
// reduction, each warp's factors in the inverse iteration, or the Sturm counts), d, e, e^2,
// tau2 (n each), lo, hi (k each), red (64); then the pending update (v_i, w_i) (n float
// pairs) and floats: A (n (n + 1) / 2), sc, p (n each), part (32), d and e^2 (n each). At
// n = 256, k = 16: 207 KiB (an H100's or H200's block holds it; an A100's does not).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda::block_eig {

/// Threads of the kernel's one block: 512 or 1024 (the template's argument; 1024 leaves 64
/// registers a thread and spills some). Device code reads blockDim.x.
constexpr int kMaxThreads = 1024;

/// Launches the kernel (below) for 1 <= k <= n <= kMaxN, k <= kMaxK, on stream with kThreads
/// threads and smem_bytes(n, k) of shared memory (the caller checks that the device has it);
/// w: k + 1 doubles of device memory. Returns the first CUDA error (cudaErrorInvalidValue
/// for n or k out of range).
template <int kThreads, bool kGrouped = false>
cudaError_t launch_top_eigenpairs(const double* S, int n, int k, double* V, double* w,
                                  cudaStream_t stream, long long* clocks = nullptr);
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

/// Column sums of a warp's G columns (G = 2, 4 or 8; c[g]: this lane's part of column g)
/// reduced across the warp by halving exchanges (G - 1 + log2(32 / G) shuffles, not 5 G):
/// afterwards the lanes with (lane & (32 / G - 1)) == 0 hold the total of column
/// scatter_column<G>(lane).
template <int G>
__device__ __forceinline__ float reduce_scatter(float (&c)[G], int lane) {
#pragma unroll
  for (int h = G / 2, o = 16; h >= 1; h >>= 1, o >>= 1) {
    const bool hi = (lane & o) != 0;
#pragma unroll
    for (int q = 0; q < h; ++q) {
      const float send = hi ? c[q] : c[q + h], keep = hi ? c[q + h] : c[q];
      c[q] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  float x = c[0];
#pragma unroll
  for (int o = 16 / G; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <int G>
__device__ __forceinline__ int scatter_column(int lane) {
  return ((lane >> 4) & 1) * (G / 2) + ((lane >> 3) & 1) * (G / 4) + ((lane >> 2) & 1) * (G / 8);
}

/// Sum of x[0], x[stride], ..., x[(NW - 1) stride] (NW a multiple of 4) in four independent
/// chains (a fixed order, the same in every thread).
template <int NW>
__device__ __forceinline__ float strided_sum(const float* x, int stride) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
  for (int u = 0; u < NW; u += 4) {
    s0 += x[u * stride];
    s1 += x[(u + 1) * stride];
    s2 += x[(u + 2) * stride];
    s3 += x[(u + 3) * stride];
  }
  return (s0 + s1) + (s2 + s3);
}

/// Step kk of the reduction (ssytd2, lower) with R = ceil((n - kk - 1) / 32) rows per lane
/// and NW warps. The previous step's rank-2 update A -= v w^T + w v^T is not applied by that
/// step: it is applied here, in the same pass over the trailing lower triangle that forms
/// p = A v with this step's reflector (each entry read and written once a step, and read
/// once for both of its products: a_ij v_j for row i and a_ij v_i for column j). The pending
/// update is vw[i] = (v_i, w_i). Two block barriers a step.
template <int R, int NW, bool kGrouped>
__device__ __forceinline__ void reduction_step(const Smem& m, int kk) {
  using detail::col_start;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int n = m.n;
  float *A = m.A, *pc = m.p, *part = m.part, *scratch = m.scratch;
  float2* vw = m.vpp;
  float* mine = scratch + warp * n;  // this warp's copy of v, then its row sums
  const int r0 = kk + 1;             // the trailing matrix is rows and columns r0..n-1
  const int mm = n - r0;
  const int ck = col_start(kk, n) - kk;  // A(i, kk) = A[ck + i]
  const float2 pk = vw[kk];
  // Column kk with the pending update, in every warp alike (no barrier), and this lane's rows'
  // pending vectors.
  float v[R], vp[R], wp[R];
  float s = 0.f;
#pragma unroll
  for (int t = 0; t < R; ++t) {  // loads at clamped rows, so that they issue together
    const int i = r0 + lane + 32 * t, ic = min(i, n - 1);
    const float2 q = vw[ic];
    const bool in = i < n;
    vp[t] = in ? q.x : 0.f;
    wp[t] = in ? q.y : 0.f;
    const float a = in ? fmaf(-q.x, pk.y, fmaf(-q.y, pk.x, A[ck + ic])) : 0.f;
    if (i > r0) s = fmaf(a, a, s);
    v[t] = a;
  }
  s = detail::warp_sum(s);
  const float alpha = __shfl_sync(0xffffffffu, v[0], 0);
  // The reflector (dlarfg) in float: the scaled entries are at most n in magnitude.
  float beta = alpha, tauf = 0.f, scf = 0.f;
  if (s > 0.f) {
    const float nrm = sqrtf(fmaf(alpha, alpha, s));
    beta = alpha >= 0 ? -nrm : nrm;
    tauf = (beta - alpha) / beta;
    scf = 1.f / (alpha - beta);
  }
#pragma unroll
  for (int t = 0; t < R; ++t) {
    const int i = r0 + lane + 32 * t;
    v[t] = i >= n ? 0.f : (i == r0 ? 1.f : v[t] * scf);
    if (i < n) mine[i] = v[t];
  }
  __syncwarp();
  // The fused pass, a lane per fixed rows (row sums in racc, column sums reduced across the
  // warp), and this warp's part of v^T A v.
  float racc[R];
#pragma unroll
  for (int t = 0; t < R; ++t) racc[t] = 0.f;
  float vav = 0.f;
  if constexpr (kGrouped && R >= 3) {
    // Groups of 8 consecutive columns (their diagonals in one row block), dealt to the warps
    // in a snake (w, then 2 NW - 1 - w, ...) so that every warp has about as many rows; each
    // group's row blocks above its diagonal block are skipped whole.
    const int ngroups = (mm + 7) >> 3;
    for (int round = 0;; ++round) {
      const int gi = round * NW + ((round & 1) != 0 ? NW - 1 - warp : warp);
      if (gi >= ngroups) break;
      const int jc0 = gi * 8;
      const int tf = jc0 >> 5;  // the diagonal's row block
      float vj[8], vpj[8], wpj[8], cacc[8];
      int cj[8];
#pragma unroll
      for (int g = 0; g < 8; ++g) {
        const int j = r0 + min(jc0 + g, mm - 1);  // a column past the end: its rows predicated off
        vj[g] = mine[j];
        const float2 q = vw[j];
        vpj[g] = q.x;
        wpj[g] = q.y;
        cj[g] = col_start(j, n) - j + r0;  // A(r0 + rr, j) = A[cj + rr]
        cacc[g] = 0.f;
      }
      // Both sums take the diagonal entry; the column's loses it below.
#pragma unroll
      for (int t = 0; t < R; ++t) {
        if (t < tf) continue;
        const int rr = lane + 32 * t;
        if (t == tf || t == R - 1) {  // the diagonal block, or the last: rows predicated
#pragma unroll
          for (int g = 0; g < 8; ++g) {
            const bool ok = rr >= jc0 + g && rr < mm;
            const float a = ok ? A[cj[g] + rr] : 0.f;
            if (ok) {
              const float b = fmaf(-vp[t], wpj[g], fmaf(-wp[t], vpj[g], a));
              A[cj[g] + rr] = b;
              racc[t] = fmaf(b, vj[g], racc[t]);  // row sums: columns j <= i
              cacc[g] = fmaf(b, v[t], cacc[g]);   // column sums: rows i >= j
            }
          }
        } else {  // every row below the diagonal and above n
#pragma unroll
          for (int g = 0; g < 8; ++g) {
            const float b = fmaf(-vp[t], wpj[g], fmaf(-wp[t], vpj[g], A[cj[g] + rr]));
            A[cj[g] + rr] = b;
            racc[t] = fmaf(b, vj[g], racc[t]);
            cacc[g] = fmaf(b, v[t], cacc[g]);
          }
        }
      }
      const float tot = reduce_scatter<8>(cacc, lane);
      __syncwarp();  // the diagonal entries stored above, read below
      if ((lane & 3) == 0) {
        const int jc = jc0 + scatter_column<8>(lane);
        if (jc < mm) {
          const int j = r0 + jc;
          const float vjj = mine[j];
          const float strict = fmaf(-A[col_start(j, n)], vjj, tot);  // rows i > j
          pc[j] = strict;
          vav = fmaf(strict, vjj, vav);
        }
      }
    }
  } else {
    // A warp per column (G at once), every row block predicated (the library's: kGrouped is
    // false).
    bool inr[R];  // this lane's rows of the trailing matrix
#pragma unroll
    for (int t = 0; t < R; ++t) inr[t] = lane + 32 * t < mm;
    constexpr int G = R >= 3 ? 8 : 2 * R;  // a warp has at most 2 R columns
    for (int c0 = warp; c0 < mm; c0 += G * NW) {
      float cacc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        // No branch on the column's existence (its rows predicated off instead), so that the
        // G columns' loads interleave.
        cacc[g] = 0.f;
        const int jc = c0 + g * NW;
        const int jv = jc < mm ? jc : 1 << 20;  // rows from jv: none where the column is absent
        const int j = r0 + min(jc, mm - 1);
        const float vj = mine[j];
        const float2 q = vw[j];
        const float vpj = q.x, wpj = q.y;
        const int cj = col_start(j, n) - j + r0;  // A(r0 + rr, j) = A[cj + rr]
        // Every row block of this lane (R = the blocks of the trailing matrix), predicated, so
        // that the loads issue together; the blocks above the diagonal do nothing. Both sums
        // take the diagonal entry; the column's loses it below.
        float a[R];
#pragma unroll
        for (int t = 0; t < R; ++t)
          a[t] = inr[t] && lane + 32 * t >= jv ? A[cj + lane + 32 * t] : 0.f;
#pragma unroll
        for (int t = 0; t < R; ++t)
          if (inr[t] && lane + 32 * t >= jv) {
            const float b = fmaf(-vp[t], wpj, fmaf(-wp[t], vpj, a[t]));
            A[cj + lane + 32 * t] = b;
            racc[t] = fmaf(b, vj, racc[t]);    // row sums: columns j <= i
            cacc[g] = fmaf(b, v[t], cacc[g]);  // column sums: rows i >= j
          }
      }
      const float tot = reduce_scatter<G>(cacc, lane);
      __syncwarp();  // the diagonal entries stored above, read below
      if ((lane & (32 / G - 1)) == 0) {
        const int jc = c0 + scatter_column<G>(lane) * NW;
        if (jc < mm) {
          const int j = r0 + jc;
          const float vj = mine[j];
          const float strict = fmaf(-A[col_start(j, n)], vj, tot);  // rows i > j
          pc[j] = strict;
          vav = fmaf(strict, vj, vav);
        }
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int t = 0; t < R; ++t) {
    const int i = r0 + lane + 32 * t;
    vav = fmaf(racc[t], v[t], vav);
    if (i < n) mine[i] = racc[t];
  }
  vav = detail::warp_sum(vav);
  if (lane == 0) part[warp] = vav;
  __syncthreads();
  // p = tau A v (column sums plus every warp's row sums, in a fixed order), w = p + alpha2 v
  // with alpha2 = -tau p^T v / 2, column kk stored updated, and (v, w) pending.
  const float alpha2 = -0.5f * tauf * tauf * strided_sum<NW>(part, 1);
  if (warp < R) {  // warp t takes the rows of block t: column kk updated again, as above
    const int i = r0 + lane + 32 * warp;
    if (i < n) {
      const float2 o = vw[i];
      const float a = fmaf(-o.x, pk.y, fmaf(-o.y, pk.x, A[ck + i]));
      const float vi = i == r0 ? 1.f : a * scf;
      const float p = tauf * (pc[i] + strided_sum<NW>(scratch + i, n));
      A[ck + i] = a;
      vw[i] = make_float2(vi, fmaf(alpha2, vi, p));
    }
  }
  if (tid == 0) {
    m.d[kk] = fmaf(-pk.x, pk.y, fmaf(-pk.y, pk.x, A[ck + kk]));
    m.e[kk] = beta;
    m.sc[kk] = tauf != 0.f ? scf : 0.f;
  }
  __syncthreads();
}

/// Steps 1 and 2: A (scaled, in m.A) to T (m.d, m.e), the reflectors in A's columns, m.tau2.
/// Each step's code holds as few rows per lane as its trailing matrix needs.
template <int NW, bool kGrouped>
__device__ __forceinline__ void tridiagonalize(const Smem& m) {
  using detail::col_start;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int nthreads = static_cast<int>(blockDim.x), nwarps = nthreads / 32;
  const int n = m.n;
  double *d = m.d, *e = m.e, *e2 = m.e2, *tau2 = m.tau2;
  float *A = m.A, *sc = m.sc;
  for (int i = tid; i < n; i += nthreads) m.vpp[i] = make_float2(0.f, 0.f);
  __syncthreads();
  for (int kk = 0; kk + 1 < n; ++kk) {
    switch ((n - kk - 1 + 31) >> 5) {  // row blocks of the trailing matrix
      case 8:
        reduction_step<8, NW, kGrouped>(m, kk);
        break;
      case 7:
        reduction_step<7, NW, kGrouped>(m, kk);
        break;
      case 6:
        reduction_step<6, NW, kGrouped>(m, kk);
        break;
      case 5:
        reduction_step<5, NW, kGrouped>(m, kk);
        break;
      case 4:
        reduction_step<4, NW, kGrouped>(m, kk);
        break;
      case 3:
        reduction_step<3, NW, kGrouped>(m, kk);
        break;
      case 2:
        reduction_step<2, NW, kGrouped>(m, kk);
        break;
      default:
        reduction_step<1, NW, kGrouped>(m, kk);
        break;
    }
  }
  if (tid == 0) {
    const float2 q = m.vpp[n - 1];
    d[n - 1] = fmaf(-q.x, q.y, fmaf(-q.y, q.x, A[col_start(n - 1, n)]));
  }
  __syncthreads();
  // Reflectors in place (v = A(kk+2:, kk) sc, v(kk+1) = 1) and tau2 = 2 / v^T v in double.
  for (int c = warp; c < n; c += nwarps) {
    const float f = c + 2 < n ? sc[c] : 0.f;
    const int cc = col_start(c, n) - c;
    double ss = 0;
    for (int i = c + 2 + lane; i < n; i += 32) {
      const float x = A[cc + i] * f;
      A[cc + i] = x;
      ss += static_cast<double>(x) * x;
    }
    ss = detail::warp_sum(ss);
    if (lane == 0) tau2[c] = f != 0.f ? 2.0 / (1.0 + ss) : 0.0;
  }
  for (int i = tid; i < n; i += nthreads) e2[i] = i + 1 < n ? e[i] * e[i] : 0.0;
  __syncthreads();
}

/// Step 3: [m.lo[j], m.hi[j]) holds the j-th largest eigenvalue of T; returns T's norm.
__device__ __forceinline__ double bisect(const Smem& m) {
  int* counts = reinterpret_cast<int*>(m.X);
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x), ncounts = nthreads * kCountsPerThread;
  const int n = m.n, k = m.k;
  const double *d = m.d, *e = m.e, *e2 = m.e2;
  double *lo = m.lo, *hi = m.hi, *red = m.red;
  float *df = m.df, *e2f = m.e2f;
  double rlo = -DBL_MAX, rhi = -DBL_MAX, rsz = 0, remax = 0;
  if (tid < n) {  // n <= nthreads: one row per thread
    const double r = (tid > 0 ? fabs(e[tid - 1]) : 0.0) + (tid + 1 < n ? fabs(e[tid]) : 0.0);
    rlo = r - d[tid];  // the maxima of -(d - r) and of d + r: Gershgorin's bounds
    rhi = d[tid] + r;
    rsz = fabs(d[tid]) + r;
    remax = e2[tid];
    df[tid] = static_cast<float>(d[tid]);
    e2f[tid] = static_cast<float>(e2[tid]);
  }
  const double gneg = detail::block_reduce<true>(rlo, red);
  const double gpos = detail::block_reduce<true>(rhi, red);
  const double tnorm = detail::block_reduce<true>(rsz, red);
  const double e2max = detail::block_reduce<true>(remax, red);
  const float pivmin = FLT_MIN * static_cast<float>(fmax(1.0, e2max));
  const double fudge = 2 * FLT_EPSILON * n * fmax(tnorm, 1e-30) + 2 * pivmin;
  const float gl = static_cast<float>(-gneg - fudge), gu = static_cast<float>(gpos + fudge);
  const float tol = kBisectTol * (gu - gl);
  if (tid < k) {
    lo[tid] = gl;
    hi[tid] = gu;
  }
  __syncthreads();
  for (int round = 0; round < kMaxRounds; ++round) {
    // Round 0: every point on [gl, gu], shared by all targets; then counts / k per target.
    const int P = round == 0 ? ncounts : ncounts / k;
    float x[kCountsPerThread];
    bool any = false;
#pragma unroll
    for (int u = 0; u < kCountsPerThread; ++u) {
      const int g = tid * kCountsPerThread + u;
      const int tgt = round == 0 ? 0 : g / P;
      const int q = round == 0 ? g : g % P;
      x[u] = tgt < k ? detail::section_point(static_cast<float>(lo[tgt]),
                                             static_cast<float>(hi[tgt]), q, P)
                     : gl;
      any = any || tgt < k;
    }
    int c[kCountsPerThread];
    if (any) detail::sturm_counts(df, e2f, n, x, pivmin, c);
#pragma unroll
    for (int u = 0; u < kCountsPerThread; ++u) counts[tid * kCountsPerThread + u] = any ? c[u] : 0;
    __syncthreads();
    int wide = 0;
    if (tid < k) {  // target tid: the eigenvalue of ascending index m, in [lo, hi)
      const int m = n - 1 - tid;
      const int base = round == 0 ? 0 : tid * P;
      const float l0 = static_cast<float>(round == 0 ? gl : lo[tid]);
      const float h0 = static_cast<float>(round == 0 ? gu : hi[tid]);
      // counts[base + q] are nondecreasing in q; find the last q with count <= m (or -1)
      int a = -1, b = P;  // count(a) <= m < count(b), a = -1 and b = P the old ends
      while (b - a > 1) {
        const int mid = (a + b) / 2;
        if (counts[base + mid] <= m)
          a = mid;
        else
          b = mid;
      }
      const float nl = a < 0 ? l0 : detail::section_point(l0, h0, a, P);
      const float nh = b >= P ? h0 : detail::section_point(l0, h0, b, P);
      lo[tid] = nl;
      hi[tid] = nh;
      wide = nh - nl > tol ? 1 : 0;
    }
    if (!__syncthreads_or(wide)) break;
  }
  return tnorm;
}

/// Steps 4 and 5: V and w (eigenvalues divided by scale) from T, the bracketing intervals
/// and the reflectors.
__device__ __forceinline__ void vectors(const Smem& m, double tnorm, double scale,
                                        double* __restrict__ V, double* __restrict__ w,
                                        long long* clocks) {
  using detail::col_start;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int nthreads = static_cast<int>(blockDim.x);
  const int n = m.n, k = m.k;
  double *Z = m.Z, *X = m.X, *red = m.red;
  const double *d = m.d, *e = m.e, *tau2 = m.tau2, *lo = m.lo, *hi = m.hi;
  const float* A = m.A;
  // ---- 4. Eigenvectors of T by inverse iteration ----
  // One factorisation per eigenvalue (X holds each warp's multipliers and pivots, in float),
  // then kInverseIterations solves, each followed by Gram-Schmidt over all k vectors.
  const double pert = DBL_EPSILON * fmax(tnorm, 1.0);
  float* lf = reinterpret_cast<float*>(X + static_cast<std::size_t>(warp) * n);
  float* rdf = lf + n;
  if (warp < k) {
    for (int i = lane; i < n; i += 32) Z[warp * n + i] = detail::start_value(i, warp, 0);
    if (lane == 0) detail::shifted_factor(d, e, n, 0.5 * (lo[warp] + hi[warp]), pert, lf, rdf);
  }
  for (int it = 0; it < kInverseIterations; ++it) {
    if (warp < k) {
      double* z = Z + warp * n;
      __syncwarp();
      if (lane == 0) detail::shifted_solve(lf, rdf, n, z);
      __syncwarp();
      detail::warp_normalize(z, n);
    }
    __syncthreads();
    // Classical Gram-Schmidt, twice, of vector j against 0..j-1 (descending eigenvalues),
    // the dots by a warp each; a vector with too little left (a repeated eigenvalue's solves
    // alike) restarts from another keyed start.
    for (int j = 0; j < k; ++j) {
      double* zj = Z + j * n;
      for (int attempt = 0; attempt < 4; ++attempt) {
        for (int pass = 0; pass < 2 && j > 0; ++pass) {
          if (warp < j) {
            double s = 0;
            for (int i = lane; i < n; i += 32) s += Z[warp * n + i] * zj[i];
            s = detail::warp_sum(s);
            if (lane == 0) red[32 + warp] = s;
          }
          __syncthreads();
          for (int i = tid; i < n; i += nthreads) {
            double acc = zj[i];
            for (int q = 0; q < j; ++q) acc = fma(-red[32 + q], Z[q * n + i], acc);
            zj[i] = acc;
          }
          __syncthreads();
        }
        if (warp == 0) {
          double ss = 0;
          for (int i = lane; i < n; i += 32) ss += zj[i] * zj[i];
          ss = detail::warp_sum(ss);
          if (lane == 0) red[63] = sqrt(ss);
        }
        __syncthreads();
        const double left = red[63];  // of a unit vector
        // Enough left for an accurate direction (rounding is 1e-16 of the unit); the last
        // attempt is kept whatever is left (not seen in the tests: a fresh keyed start has
        // all but ~1e-2 of its length outside 15 vectors).
        if (left > 1e-6 || (attempt == 3 && left > 0)) {
          for (int i = tid; i < n; i += nthreads) zj[i] /= left;
          __syncthreads();
          break;
        }
        if (warp == 0) {
          for (int i = lane; i < n; i += 32) zj[i] = detail::start_value(i, j, attempt + 1);
          __syncwarp();
          detail::warp_normalize(zj, n);
        }
        __syncthreads();
      }
    }
  }
  // Rayleigh quotients: the eigenvalues, and the vectors in registers for the back-transform.
  double zr[kRowsPerLane];
  double lam = 0;
  if (warp < k) {
    const double* z = Z + warp * n;
    double s = 0;
#pragma unroll
    for (int t = 0; t < kRowsPerLane; ++t) {
      const int i = lane + 32 * t;
      zr[t] = i < n ? z[i] : 0.0;
      if (i < n) {
        double tz = d[i] * z[i];
        if (i > 0) tz += e[i - 1] * z[i - 1];
        if (i + 1 < n) tz += e[i] * z[i + 1];
        s += z[i] * tz;
      }
    }
    lam = detail::warp_sum(s);
    if (lane == 0) red[32 + warp] = lam;
  }
  __syncthreads();
  // Column of this vector in V: its rank among the Rayleigh quotients, descending (ties by
  // index), so w is descending even where a cluster's quotients come out of order.
  int col = 0;
  if (warp < k)
    for (int q = 0; q < k; ++q) col += red[32 + q] > lam || (red[32 + q] == lam && q < warp);

  if (clocks != nullptr && threadIdx.x == 0) clocks[3] = clock64();
  // ---- 5. V = Q Z, Q = H(0) H(1) ... H(n-3): H(n-3) first ----
  if (warp < k) {
    // v of reflector r in registers: 1 at row r + 1, A(i, r) below, 0 above; the next
    // reflector's loaded while this one is applied
    auto load = [&](int r, double* h) {
      const int cr = col_start(r, n) - r;
#pragma unroll
      for (int t = 0; t < kRowsPerLane; ++t) {
        const int i = lane + 32 * t;
        h[t] = i == r + 1 ? 1.0 : (i > r + 1 && i < n ? static_cast<double>(A[cr + i]) : 0.0);
      }
    };
    double hv[kRowsPerLane], hn[kRowsPerLane];
    if (n >= 3) load(n - 3, hv);
    for (int r = n - 3; r >= 0; --r) {
      if (r > 0) load(r - 1, hn);
      const double t2 = tau2[r];
      if (t2 != 0) {
        double dot = 0;
#pragma unroll
        for (int t = 0; t < kRowsPerLane; ++t) dot = fma(hv[t], zr[t], dot);
        const double f = t2 * detail::warp_sum(dot);
#pragma unroll
        for (int t = 0; t < kRowsPerLane; ++t) zr[t] = fma(-f, hv[t], zr[t]);
      }
#pragma unroll
      for (int t = 0; t < kRowsPerLane; ++t) hv[t] = hn[t];
    }
#pragma unroll
    for (int t = 0; t < kRowsPerLane; ++t) {
      const int i = lane + 32 * t;
      if (i < n) V[static_cast<std::size_t>(i) * k + col] = zr[t];
    }
    if (lane == 0) w[col] = lam / scale;
  }
}

/// One block of kThreads (512 or 1024) threads, smem_bytes(n, k) of dynamic shared memory.
/// S: n x n, column-major (its lower triangle read; a symmetric S may be row-major as well). Writes
/// V (n x k, row-major; column j the unit eigenvector of the j-th largest eigenvalue) and w[0..k)
/// (descending), and w[k] = 0, or w[k] = 1 with nothing else written when S has a non-finite entry.
/// clocks (null, or 5 values): thread 0's clock64() after loading S, after the reduction, the
/// multisection, the inverse iteration and the back-transformation (for jobs/probes/eig_probe.cu's
/// split of the time).
template <int kThreads, bool kGrouped>
__global__ void __launch_bounds__(kThreads, 1)
    top_eigenpairs_kernel(const double* __restrict__ S, int n, int k, double* __restrict__ V,
                          double* __restrict__ w, long long* clocks) {
  using detail::col_start;
  extern __shared__ __align__(16) unsigned char smem[];
  const Smem m(smem, n, k);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  constexpr int nwarps = kThreads / 32;
  double* red = m.red;
  float* A = m.A;

  // ---- S's lower triangle, scaled by 2^-s so that the largest entry is in [0.5, 1) ----
  double amax = 0;
  bool finite = true;
  for (int j = warp; j < n; j += nwarps)
    for (int i = j + lane; i < n; i += 32) {
      const double x = S[static_cast<std::size_t>(j) * n + i];
      finite = finite && isfinite(x);
      amax = fmax(amax, fabs(x));
    }
  if (!__syncthreads_and(finite ? 1 : 0)) {
    if (tid == 0) w[k] = 1;
    return;
  }
  amax = detail::block_reduce<true>(amax, red);
  int sexp = 0;
  if (amax > 0) frexp(amax, &sexp);
  sexp = max(sexp, -1000);  // a subnormal largest entry: 2^1000 keeps the scale finite
  const double scale = ldexp(1.0, -sexp);  // exact
  for (int j = warp; j < n; j += nwarps) {
    const int c = col_start(j, n);
    for (int i = j + lane; i < n; i += 32)
      A[c + i - j] = static_cast<float>(S[static_cast<std::size_t>(j) * n + i] * scale);
  }
  __syncthreads();

  if (clocks != nullptr && tid == 0) clocks[0] = clock64();
  tridiagonalize<nwarps, kGrouped>(m);
  if (clocks != nullptr && tid == 0) clocks[1] = clock64();
  const double tnorm = bisect(m);
  if (clocks != nullptr && tid == 0) clocks[2] = clock64();
  vectors(m, tnorm, scale, V, w, clocks);
  __syncthreads();
  if (clocks != nullptr && tid == 0) clocks[4] = clock64();
  if (tid == 0) w[k] = 0;
}

template <int kThreads, bool kGrouped>
cudaError_t launch_top_eigenpairs(const double* S, int n, int k, double* V, double* w,
                                  cudaStream_t stream, long long* clocks) {
  static_assert(kMaxK <= kThreads / 32, "a warp per eigenvector");
  if (n < 1 || k < 1 || k > n || n > kMaxN || k > kMaxK) return cudaErrorInvalidValue;
  // What this launch needs (the attribute is the function's, per device).
  cudaError_t err = cudaFuncSetAttribute(top_eigenpairs_kernel<kThreads, kGrouped>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes(n, k)));
  if (err != cudaSuccess) return err;
  top_eigenpairs_kernel<kThreads, kGrouped>
      <<<1, kThreads, smem_bytes(n, k), stream>>>(S, n, k, V, w, clocks);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda::block_eig
