// The k largest eigenpairs of a symmetric n x n matrix (n <= 256, k <= 16) in ONE kernel on
// ONE thread block, for Tucker's Gram eigen-solve in single precision (issue 43, point 3; the
// library uses it for every n <= 256: kernels/ops/tucker_dense.hpp, block_eig_applies; for
// n >= 128 only where the Lanczos kernel of block_lanczos.cuh, tried first, declines).
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
//    Every warp forms the reflector of column kk alike (no barrier); groups of 8 consecutive
//    columns are dealt to the warps, so that a group skips its row blocks above the diagonal
//    whole (a warp per column where the trailing matrix has at most 64 rows), a lane per fixed
//    rows; row sums and column sums meet in shared memory (sessions 35 and 36).
// 2. Each reflector is stored in its column; its tau is recomputed in double from the stored
//    float v (tau = 2 / v^T v), so Q is orthogonal to double rounding and the float reduction's
//    error is a backward error of A (about 1e-7 ||A||, as ssytrd's).
// 3. The k largest eigenvalues of T by multisection on Sturm counts in float, a count per
//    thread per round, to 1e-7 of T's Gershgorin range (the inverse iteration needs a shift;
//    the eigenvalue is its Rayleigh quotient).
// 4. Their eigenvectors by inverse iteration on T: T - lam I = L D L^T once per eigenvalue
//    (computed in double, stored in float; a warp per vector, by one lane), two solves in
//    double from keyed random starts (each sweep a warp scan of affine maps, session 36), the
//    k vectors re-orthonormalised (Cholesky QR twice, or classical Gram-Schmidt twice where a
//    vector needs a restart) after each, so that close or repeated eigenvalues get
//    orthonormal vectors of their cluster; then each eigenvalue is the Rayleigh quotient (the
//    pairs ordered by it).
// 5. V = Q Z by the stored reflectors, a warp per vector, in double: panels of 16 reflectors
//    written once in double, applied four at a time (compact WY; session 36).
//
// Shared memory (doubles first): Z (k x n, vector-major), X (each warp's n floats in the
// reduction, each warp's factors in the inverse iteration, or the Sturm counts), d, e, e^2,
// tau2 (n each), lo, hi (k each), red (64), G (k x k); then the pending update (v_i, w_i) (n float
// pairs) and floats: A (n (n + 1) / 2), sc, p (n each), part (32), d and e^2 (n each). At
// n = 256, k = 16: 209 KiB (an H100's or H200's block holds it; an A100's does not).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/dense/block_eig_base.cuh"
#include "kernels/cuda/dense/block_eig_tridiagonal.cuh"

namespace tessera::kernels::cuda::block_eig {

/// Launches the kernel (below) for 1 <= k <= n <= kMaxN, k <= kMaxK, on stream with kThreads
/// threads and smem_bytes(n, k) of shared memory (the caller checks that the device has it);
/// w: k + 1 doubles of device memory. Returns the first CUDA error (cudaErrorInvalidValue
/// for n or k out of range).
/// after_lanczos: run only where block_lanczos.cuh's kernel, launched before on the same stream
/// and w, declined (w[k] == kLanczosDeclined), and then leave w[k] = kExactAfterLanczos.
template <int kThreads>
cudaError_t launch_top_eigenpairs(const double* S, int n, int k, double* V, double* w,
                                  cudaStream_t stream, long long* clocks = nullptr,
                                  bool after_lanczos = false);
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

namespace detail {

/// Step 5's group of kBackGroup reflectors gtop, gtop - 1, .. (Pg: their entries in double, n
/// apart; hhg: their products h_a . h_b, (a, b) in the order (1, 0), (2, 0), (2, 1), ..)
/// applied to this lane's rows of z (zr[t]: row lane + 32 t), the row blocks t < T0 skipped
/// (the reflectors are zero there).
template <int T0>
__device__ __forceinline__ void apply_group(const double* Pg, int n, int gtop, const double* hhg,
                                            const double* tau2, int lane,
                                            double (&zr)[kRowsPerLane]) {
  double h[kBackGroup][kRowsPerLane], c[kBackGroup], f[kBackGroup];
#pragma unroll
  for (int a = 0; a < kBackGroup; ++a) {
    c[a] = 0;
#pragma unroll
    for (int t = T0; t < kRowsPerLane; ++t) {
      const int i = lane + 32 * t;
      h[a][t] = i < n ? Pg[a * n + i] : 0.0;
      c[a] = fma(h[a][t], zr[t], c[a]);
    }
  }
  // The dots h_a . z across the warp: halving exchanges, then each lane takes all four.
  const double tot = reduce_scatter<kBackGroup>(c, lane);
#pragma unroll
  for (int a = 0; a < kBackGroup; ++a) {
    double x = __shfl_sync(0xffffffffu, tot, scatter_lane<kBackGroup>(a));
#pragma unroll
    for (int b = 0; b < a; ++b) x = fma(-f[b], hhg[a * (a - 1) / 2 + b], x);
    f[a] = gtop - a >= 0 ? tau2[gtop - a] * x : 0.0;
  }
#pragma unroll
  for (int t = T0; t < kRowsPerLane; ++t) {
    double x = zr[t];
#pragma unroll
    for (int a = 0; a < kBackGroup; ++a) x = fma(-f[a], h[a][t], x);
    zr[t] = x;
  }
}

/// apply_group<T0> for t0 >= T0 (the first row block the group touches).
template <int T0>
__device__ __forceinline__ void apply_group_from(int t0, const double* Pg, int n, int gtop,
                                                 const double* hhg, const double* tau2, int lane,
                                                 double (&zr)[kRowsPerLane]) {
  if constexpr (T0 + 1 < kRowsPerLane) {
    if (t0 > T0) {
      apply_group_from<T0 + 1>(t0, Pg, n, gtop, hhg, tau2, lane, zr);
      return;
    }
  }
  apply_group<T0>(Pg, n, gtop, hhg, tau2, lane, zr);
}

}  // namespace detail

namespace detail {

/// Step 4: the k eigenvectors of the tridiagonal T (m.d, m.e, m.e2; m.lo, m.hi bracketing its
/// k largest eigenvalues, from bisect) by inverse iteration, orthonormal, in m.Z (vector-major,
/// vector j the j-th largest's). Every thread of the block calls it.
__device__ __forceinline__ void inverse_iteration(const Smem& m, double tnorm, long long* clocks) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int nthreads = static_cast<int>(blockDim.x);
  const int n = m.n, k = m.k;
  double *Z = m.Z, *X = m.X, *red = m.red;
  const double *d = m.d, *e = m.e, *lo = m.lo, *hi = m.hi;
  // One factorisation per eigenvalue (X holds each warp's multipliers and pivots, in float),
  // then kInverseIterations solves, each followed by Gram-Schmidt over all k vectors.
  const double pert = DBL_EPSILON * fmax(tnorm, 1.0);
  float* lf = reinterpret_cast<float*>(X + static_cast<std::size_t>(warp) * n);
  float* rdf = lf + n;
  if (warp < k) {
    for (int i = lane; i < n; i += 32) Z[warp * n + i] = start_value(i, warp, 0);
    if (lane == 0) shifted_factor(d, e, m.e2, n, 0.5 * (lo[warp] + hi[warp]), pert, lf, rdf);
  }
  if (clocks != nullptr && threadIdx.x == 0) clocks[5] = clock64();
  for (int it = 0; it < kInverseIterations; ++it) {
    if (warp < k) {
      double* z = Z + warp * n;
      __syncwarp();
      if (!warp_shifted_solve(lf, rdf, n, z)) {  // the scan overflowed: one lane, rescaling
        if (lane == 0) shifted_solve(lf, rdf, n, z);
        __syncwarp();
      }
      warp_normalize(z, n);
    }
    __syncthreads();
    if (clocks != nullptr && threadIdx.x == 0 && it == 0) clocks[6] = clock64();
    // Vector j against 0..j-1 (descending eigenvalues), twice: by Cholesky QR; where a vector
    // has too little left for it (a repeated eigenvalue's solves alike), by classical
    // Gram-Schmidt, the dots by a warp each, such a vector restarting from another keyed start.
    const bool orthonormal = cholqr_pass(Z, n, k, m.G, red) && cholqr_pass(Z, n, k, m.G, red);
    for (int j = 0; j < k && !orthonormal; ++j) {
      double* zj = Z + j * n;
      for (int attempt = 0; attempt < 4; ++attempt) {
        for (int pass = 0; pass < 2 && j > 0; ++pass) {
          if (warp < j) {
            double s = 0;
            for (int i = lane; i < n; i += 32) s += Z[warp * n + i] * zj[i];
            s = warp_sum(s);
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
          ss = warp_sum(ss);
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
          for (int i = lane; i < n; i += 32) zj[i] = start_value(i, j, attempt + 1);
          __syncwarp();
          warp_normalize(zj, n);
        }
        __syncthreads();
      }
    }
    if (clocks != nullptr && threadIdx.x == 0 && it == 0) clocks[7] = clock64();
  }
}

/// The Rayleigh quotient lam of warp's vector of m.Z against T (warps < k; every thread of the
/// block calls it), the vector's rows lane + 32 t in zr, and its column: its rank among the
/// quotients, descending (ties by index), so that w is descending even where a cluster's
/// quotients come out of order.
template <int kRows = kRowsPerLane>  // m.n <= 32 kRows
__device__ __forceinline__ int ritz_rank(const Smem& m, double (&zr)[kRows], double& lam) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int n = m.n, k = m.k;
  const double *Z = m.Z, *d = m.d, *e = m.e;
  double* red = m.red;
  lam = 0;
  if (warp < k) {
    const double* z = Z + warp * n;
    double s = 0;
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int i = lane + 32 * t;
      zr[t] = i < n ? z[i] : 0.0;
      if (i < n) {
        double tz = d[i] * z[i];
        if (i > 0) tz += e[i - 1] * z[i - 1];
        if (i + 1 < n) tz += e[i] * z[i + 1];
        s += z[i] * tz;
      }
    }
    lam = warp_sum(s);
    if (lane == 0) red[32 + warp] = lam;
  }
  __syncthreads();
  int col = 0;
  if (warp < k)
    for (int q = 0; q < k; ++q) col += red[32 + q] > lam || (red[32 + q] == lam && q < warp);
  return col;
}

}  // namespace detail

/// Steps 4 and 5: V and w (eigenvalues divided by scale) from T, the bracketing intervals
/// and the reflectors.
__device__ __forceinline__ void vectors(const Smem& m, double tnorm, double scale,
                                        double* __restrict__ V, double* __restrict__ w,
                                        long long* clocks) {
  using detail::col_start;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int nthreads = static_cast<int>(blockDim.x);
  const int n = m.n, k = m.k;
  double *X = m.X, *red = m.red;
  const double* tau2 = m.tau2;
  const float* A = m.A;
  detail::inverse_iteration(m, tnorm, clocks);
  double zr[kRowsPerLane];
  double lam = 0;
  const int col = detail::ritz_rank(m, zr, lam);
  if (clocks != nullptr && threadIdx.x == 0) clocks[3] = clock64();
  // ---- 5. V = Q Z, Q = H(0) H(1) ... H(n-3): H(n-3) first ----
  // Panels of kBackPanel reflectors (r = top, top - 1, ..): the block writes the panel in double
  // into X (free now; each float converted once, not once per vector) with the products
  // h_a . h_b within each group of kBackGroup, then every vector's warp applies each group as
  // one: the group's dots h_a . z against its input z, reduced across the warp together, then
  // f_a = tau_a (h_a . z - sum_(b<a) f_b h_a . h_b) and z -= sum_a f_a h_a (compact WY: the
  // products of one reflector at a time, a quarter of the dependent reductions). Row blocks
  // above a group's reflectors are skipped. Two block barriers a panel (session 36).
  constexpr int kPairs = kBackGroup * (kBackGroup - 1) / 2;
  constexpr int kPanelPairs = kBackPanel / kBackGroup * kPairs;
  static_assert(kBackPanel % kBackGroup == 0 && kPanelPairs <= 64, "red holds a panel's products");
  static_assert(kBackPanel <= kMaxThreads / 32 / 2, "X (x_doubles >= 16 n) holds a panel");
  const int npanels = n >= 3 ? (n - 2 + kBackPanel - 1) / kBackPanel : 0;
  double* P = X;  // P[a n + i]: entry i of reflector top - a, rows from the panel's first block
  double* hh = red;
  for (int pn = 0; pn < npanels; ++pn) {
    const int top = n - 3 - pn * kBackPanel;
    const int base = 32 * ((max(top - (kBackPanel - 1), 0) + 1) >> 5);  // rows above: all zero
    __syncthreads();  // the previous panel's readers (and the ranks' readers of red) are done
    for (int a = warp; a < kBackPanel; a += nthreads / 32) {
      const int r = top - a;
      const int cr = col_start(max(r, 0), n) - r;
      for (int i = base + lane; i < n; i += 32)
        P[a * n + i] = r < 0 || i <= r ? 0.0 : (i == r + 1 ? 1.0 : static_cast<double>(A[cr + i]));
    }
    __syncthreads();
    for (int task = warp; task < kPanelPairs; task += nthreads / 32) {
      const int g = task / kPairs, pr = task % kPairs;
      int a = 1;  // the pair (a, b), b < a, in the order (1, 0), (2, 0), (2, 1), (3, 0), ..
      while ((a + 1) * a / 2 <= pr) ++a;
      const int b = pr - a * (a - 1) / 2;
      const int ra = g * kBackGroup + a, rb = g * kBackGroup + b;  // rows of P
      double sp = 0;
      for (int i = max(top - rb + 1, base) + lane; i < n; i += 32)
        sp = fma(P[ra * n + i], P[rb * n + i], sp);
      sp = detail::warp_sum(sp);
      if (lane == 0) hh[task] = sp;
    }
    __syncthreads();
    if (warp < k) {
#pragma unroll 1
      for (int g = 0; g < kBackPanel / kBackGroup; ++g) {
        const int gtop = top - g * kBackGroup;
        if (gtop < 0) break;
        const int t0 = (max(gtop - (kBackGroup - 1), 0) + 1) >> 5;  // blocks above: all zero
        detail::apply_group_from<0>(t0, P + g * kBackGroup * n, n, gtop, hh + g * kPairs, tau2,
                                    lane, zr);
      }
    }
  }
  if (warp < k) {
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
/// clocks (null, or 8 values): thread 0's clock64() after loading S, after the reduction, the
/// multisection, the inverse iteration and the back-transformation, then after the
/// factorisations, the first solves and the first Gram-Schmidt (for jobs/probes/eig_probe.cu's
/// split of the time). after_lanczos: see launch_top_eigenpairs.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, 1)
    top_eigenpairs_kernel(const double* __restrict__ S, int n, int k, double* __restrict__ V,
                          double* __restrict__ w, long long* clocks, bool after_lanczos) {
  using detail::col_start;
  if (after_lanczos && w[k] != kLanczosDeclined) return;  // answered, or not finite
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
    if (tid == 0) w[k] = kNotFinite;
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
  tridiagonalize<nwarps>(m);
  if (clocks != nullptr && tid == 0) clocks[1] = clock64();
  const double tnorm = bisect(m);
  if (clocks != nullptr && tid == 0) clocks[2] = clock64();
  vectors(m, tnorm, scale, V, w, clocks);
  __syncthreads();
  if (clocks != nullptr && tid == 0) clocks[4] = clock64();
  if (tid == 0) w[k] = after_lanczos ? kExactAfterLanczos : 0;
}

template <int kThreads>
cudaError_t launch_top_eigenpairs(const double* S, int n, int k, double* V, double* w,
                                  cudaStream_t stream, long long* clocks, bool after_lanczos) {
  static_assert(kMaxK <= kThreads / 32, "a warp per eigenvector");
  if (n < 1 || k < 1 || k > n || n > kMaxN || k > kMaxK) return cudaErrorInvalidValue;
  // What this launch needs (the attribute is the function's, per device).
  cudaError_t err = cudaFuncSetAttribute(top_eigenpairs_kernel<kThreads>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes(n, k)));
  if (err != cudaSuccess) return err;
  top_eigenpairs_kernel<kThreads>
      <<<1, kThreads, smem_bytes(n, k), stream>>>(S, n, k, V, w, clocks, after_lanczos);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda::block_eig
