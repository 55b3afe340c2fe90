// The k largest eigenpairs of a symmetric n x n matrix (192 <= n <= 256 in the library, k <= 16)
// by Lanczos with full reorthogonalisation in ONE thread block, tried before the exact one-block
// solver of block_eig.cuh (issue 43, point 3; docs/perf/gpu-h200-tucker.md, session 43). Where
// it cannot vouch for its answer it says so in w[k] (kLanczosDeclined) and the exact kernel,
// launched after it on the same stream, solves the matrix instead; otherwise that launch
// returns at once. Self-contained (CUDA only), so that jobs/probes/lanczos_probe.cu times it.
//
// Why: the exact solver's tridiagonal reduction is n - 1 dependent steps (about 1 ms at n = 256
// on an H200), while the top 16 eigenpairs of Tucker's Gram matrices converge in 23-38 Lanczos
// steps (jobs/probes/lanczos_steps.py), each a product with S and two passes of Gram-Schmidt,
// a few microseconds in one block.
//
// 1. S (scaled by a power of two as in block_eig.cuh) is held in float, padded to 256 x 256
//    with zeros: row r's half h (columns 128 h ..) belongs to thread 2 r + h, its first 64
//    entries in registers, the other 64 in shared memory (float4s, thread-major: no bank
//    conflicts). Lanczos vectors: up to kLanczosMaxM + 1 rows of 256 floats. The register
//    half is loaded again from S after each check (not live across one).
// 2. Step j: y = S q_j (four partial sums a thread, the two halves by a shuffle), then twice
//    y -= Q (Q^T y) over q_0 .. q_j (the dots a warp a vector: a lane's 8 products summed in
//    float, the lanes' sums in double), alpha_j the sum of both passes' coefficients of q_j,
//    beta_j = |y| (double, from the second pass's dots), q_(j+1) = y / beta_j: five block
//    barriers a step (lanczos_extend).
// 3. After kLanczosFirstCheck steps, every kLanczosCheckEvery steps, and at a breakdown
//    (beta_j <= kLanczosBreakdown ||T||): the Ritz pairs of T_m (block_eig.cuh's multisection
//    and inverse iteration on the m x m tridiagonal) and the classic residual estimates
//    |beta_(m-1) z_(m-1)| (exact up to rounding under full reorthogonalisation). Accepted when
//    the top k's are all <= kLanczosTol ||T_m|| (the exact solver's backward error is about
//    1e-7 ||S||). The estimates come first from vectors not orthonormalised, and only where
//    they pass again from the orthonormalised vectors that V is made of (Cholesky QR, its
//    second pass only where the first pass's factor is off I by kLanczosOrthSkip or more). The
//    multisection also brackets theta_(k+1), the guard's. Declined when they are not
//    by kLanczosMaxM steps (a flat spectrum, such as the first mode of HOOI's first iteration) or
//    at a breakdown with fewer than k steps.
// 4. V = Q_m Z in double; their float copies are then the first k rows of Q.
// 5. The guard: one Krylov vector cannot see a second copy of a repeated eigenvalue (its
//    Krylov space holds only the start's projection on each eigenspace), and the residuals do
//    not show what is missing. So kGuardSteps more Lanczos steps run from a second keyed start
//    on (I - V V^T) S (I - V V^T) (each vector reorthogonalised against V and the guard's own):
//    that operator's largest eigenvalue is about lambda_(k+1) when nothing is missing, and a
//    missed copy's eigenvalue (>= theta_k) otherwise. Declined when the guard's largest Ritz
//    value reaches theta_k less the smaller of kGuardMargin ||T_m|| and half the gap
//    theta_k - theta_(k+1) (T_m's next Ritz value: about lambda_(k+1), so a spectrum whose
//    k-th gap is below the fixed margin, as congress's Grams, is not declined for it; a missed
//    copy lies above theta_k, beyond either margin; session 44). The gap is taken as >= 0:
//    theta_(k+1) is its bracket's midpoint, which rounding can put above theta_k where the two
//    meet. (Like any Krylov check it can be
//    outrun: a missed copy within a small fraction of the spectrum's spread above lambda_(k+1) may
//    not show in kGuardSteps steps; then the answer's subspace holds lambda_(k+1)'s vector instead,
//    an error of that gap. docs/perf/gpu-h200-tucker.md, session 43.)
// 6. V orthonormalised in double by a pass of Cholesky QR (block_eig.cuh's; V is orthonormal
//    to float's rounding, so one pass leaves it so to double's), in the order of the
//    eigenvalues, as orthonormal as the exact solver's.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>

#include "kernels/cuda/dense/block_eig.cuh"

namespace tessera::kernels::cuda::block_eig {

constexpr int kLanczosThreads = 512;
/// The padded order: n <= 256.
constexpr int kLanczosN = 256;
/// Lanczos steps at most (Q's rows: kLanczosMaxM + 1; shared memory holds no more).
constexpr int kLanczosMaxM = 56;
constexpr int kLanczosFirstCheck = 32;
constexpr int kLanczosCheckEvery = 12;
constexpr int kGuardSteps = 12;
constexpr double kLanczosTol = 1e-7;
constexpr double kLanczosBreakdown = 1e-6;
constexpr double kGuardMargin = 1e-3;
/// The check's second Cholesky QR pass runs only where the first pass's factor is off I by
/// this or more somewhere (tucker_dense.cpp's kOrthSkip: below it one pass leaves rounding).
constexpr double kLanczosOrthSkip = 1e-4;
/// Rows a lane in the checks' solves (T_m of order <= kLanczosMaxM).
constexpr int kCheckRows = (kLanczosMaxM + 31) / 32;

namespace lanczos {

constexpr std::size_t kSsmBytes = static_cast<std::size_t>(16) * kLanczosThreads * 16;
constexpr std::size_t kQBytes = static_cast<std::size_t>(kLanczosMaxM + 1) * kLanczosN * 4;
constexpr std::size_t kYBytes = kLanczosN * 4;
constexpr int kCoefs =
    64;  // dots of one pass: rows of Q (<= kLanczosMaxM + 1, k + kGuardSteps + 1), and y . y
constexpr int kDotsPerWarp = (kLanczosMaxM + 2 + kLanczosThreads / 32 - 1) / (kLanczosThreads / 32);
constexpr int kScalars = 2 * kCoefs + 2 * kLanczosMaxM + 2 * kGuardSteps + 64 + kMaxK * kMaxK;
static_assert(kLanczosMaxM + 2 <= kCoefs && kMaxK + kGuardSteps + 2 <= kCoefs, "h holds a pass");
static_assert(kMaxK + kGuardSteps + 1 <= kLanczosMaxM + 1, "Q holds V and the guard's vectors");

/// The kernel's shared memory: Ssm, Q, y, hf (floats), then h (2 kCoefs), alpha, beta
/// (kLanczosMaxM each), the guard's ga, gb (kGuardSteps each), red (64), G (kMaxK^2), then the
/// tridiagonal solver's Smem (block_eig_base.cuh) for n <= kLanczosMaxM, k <= kMaxK + 1 (the
/// check's multisection brackets theta_(k+1) too).
struct Layout {
  float4* Ssm;        // [u][thread]: the thread's half row's entries 64 + 4 u .. 64 + 4 u + 3
  float *Q, *y, *hf;  // hf: a pass's coefficients in float
  double *h, *alpha, *beta, *ga, *gb, *red, *wsq, *G;  // wsq: red[32, 48); red[48]: one value
  unsigned char* tri;
  __device__ explicit Layout(unsigned char* base) {
    Ssm = reinterpret_cast<float4*>(base);
    Q = reinterpret_cast<float*>(base + kSsmBytes);
    y = Q + kQBytes / 4;
    hf = y + kLanczosN;
    h = reinterpret_cast<double*>(hf + kCoefs);
    alpha = h + 2 * kCoefs;
    beta = alpha + kLanczosMaxM;
    ga = beta + kLanczosMaxM;
    gb = ga + kGuardSteps;
    red = gb + kGuardSteps;
    wsq = red + 32;
    G = red + 64;
    tri = reinterpret_cast<unsigned char*>(G + kMaxK * kMaxK);
  }
};

}  // namespace lanczos

/// Dynamic shared memory of the Lanczos kernel (about 219 KB: an H100's or H200's block holds
/// it, an A100's does not).
__host__ __device__ constexpr std::size_t lanczos_smem_bytes() {
  return lanczos::kSsmBytes + lanczos::kQBytes + lanczos::kYBytes +
         lanczos::kCoefs * sizeof(float) +
         static_cast<std::size_t>(lanczos::kScalars) * sizeof(double) +
         smem_bytes(kLanczosMaxM, kMaxK + 1);
}

namespace detail {

/// y = S Q[cur] (every thread calls it; y complete on return).
__device__ __forceinline__ void lanczos_product(const lanczos::Layout& L, const float (&sreg)[64],
                                                int cur) {
  const int t = static_cast<int>(threadIdx.x), row = t >> 1, hf = t & 1;
  const float4* q4 = reinterpret_cast<const float4*>(L.Q + cur * kLanczosN + hf * 128);
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
  for (int u = 0; u < 16; ++u) {
    const float4 q = q4[u];
    s0 = fmaf(sreg[4 * u], q.x, s0);
    s1 = fmaf(sreg[4 * u + 1], q.y, s1);
    s2 = fmaf(sreg[4 * u + 2], q.z, s2);
    s3 = fmaf(sreg[4 * u + 3], q.w, s3);
  }
#pragma unroll
  for (int u = 0; u < 16; ++u) {
    const float4 q = q4[16 + u];
    const float4 a = L.Ssm[u * kLanczosThreads + t];
    s0 = fmaf(a.x, q.x, s0);
    s1 = fmaf(a.y, q.y, s1);
    s2 = fmaf(a.z, q.z, s2);
    s3 = fmaf(a.w, q.w, s3);
  }
  float s = (s0 + s1) + (s2 + s3);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (hf == 0) L.y[row] = s;
  __syncthreads();
}

/// The coefficients of one Lanczos extension (lanczos_extend), every thread alike.
struct LanczosCoefs {
  double alpha, beta;
};

/// Twice y -= Q[0, rows) (Q[0, rows)^T y) (classical Gram-Schmidt), then
/// Q[dst] = y / beta with beta = |y| (zero where beta is). alpha: the sum of both passes'
/// coefficients of Q[rows - 1] (0 where rows is 0). y complete on entry (lanczos_product); Q[dst]
/// complete on return. Four block barriers, two a pass:
/// - the dots: a warp takes vectors warp, warp + 16, .. (at most kDotsPerWarp), each lane's 8
///   products summed in float (the vectors are float, and so is S's product, whose rounding,
///   about 16 x 2^-24 of |S q|, is the larger), its warp sums in double and reduced together;
///   the second pass also takes y . y, so that beta^2 = |y'|^2 - |h''|^2 (y' the
///   vector after the first pass, h'' the second pass's coefficients: y' - Q h'' is orthogonal
///   to Q) needs no block reduction of its own;
/// - the update: thread r < 256 owns row r over all the vectors (consecutive rows a warp: no
///   bank conflicts, and no partial sums to meet), and in the second pass writes Q[dst] itself.
__device__ __forceinline__ LanczosCoefs lanczos_extend(const lanczos::Layout& L, int rows,
                                                       int dst) {
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
  constexpr int kWarps = kLanczosThreads / 32;
  LanczosCoefs out{0.0, 0.0};
  for (int pass = 0; pass < 2; ++pass) {
    double* h = L.h + pass * lanczos::kCoefs;
    const int nd = rows + pass;  // the second pass's last dot is y . y
    {
      // Each lane's part of a dot (8 products) in float, then the warp's sums in double: four
      // dots a warp reduced together (two exchanges halve the values a lane carries, three
      // more sum the last one: 6 double shuffles, not 20), so lane 8 i ends with dot i. One
      // conversion to double a dot a lane, where widening every product took 40 a lane a pass
      // (16 conversions a clock a multiprocessor). Both together: 10.9-12.4 k -> 9.4-10.2 k
      // cycles a step (docs/perf/gpu-h200-tucker.md, session 45). The exchanges are
      // reduce_scatter<4>'s (block_eig_base.cuh) written out: the same shuffles and sums, but
      // calling it changed how the compiler unrolled the pass loop (two more block barriers in
      // the PTX), which has not been timed; the code measured is this one.
      static_assert(lanczos::kDotsPerWarp == 4, "the exchanges below reduce four dots");
      const float4* y4 = reinterpret_cast<const float4*>(L.y);
      const float4 b0 = y4[lane], b1 = y4[32 + lane];
      double d[lanczos::kDotsPerWarp];
#pragma unroll
      for (int i = 0; i < lanczos::kDotsPerWarp; ++i) {
        const int c = warp + kWarps * i;
        float f = 0.f;
        if (c < nd) {
          const float4* qc = c < rows ? reinterpret_cast<const float4*>(L.Q + c * kLanczosN) : y4;
          const float4 a0 = qc[lane], a1 = qc[32 + lane];
          f = a0.x * b0.x;
          f = fmaf(a0.y, b0.y, f);
          f = fmaf(a0.z, b0.z, f);
          f = fmaf(a0.w, b0.w, f);
          f = fmaf(a1.x, b1.x, f);
          f = fmaf(a1.y, b1.y, f);
          f = fmaf(a1.z, b1.z, f);
          f = fmaf(a1.w, b1.w, f);
        }
        d[i] = static_cast<double>(f);
      }
      const bool b4 = (lane & 16) != 0, b3 = (lane & 8) != 0;
      const double e0 = (b4 ? d[2] : d[0]) + __shfl_xor_sync(0xffffffffu, b4 ? d[0] : d[2], 16);
      const double e1 = (b4 ? d[3] : d[1]) + __shfl_xor_sync(0xffffffffu, b4 ? d[1] : d[3], 16);
      double dv = (b3 ? e1 : e0) + __shfl_xor_sync(0xffffffffu, b3 ? e0 : e1, 8);
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) dv += __shfl_xor_sync(0xffffffffu, dv, o);
      const int c = warp + kWarps * ((lane >> 3) & 3);  // this lane's dot: 2 b4 + b3
      double sq = 0;
      if ((lane & 7) == 0) {
        if (c < rows) {
          h[c] = dv;
          L.hf[c] = static_cast<float>(dv);
          sq = dv * dv;
        } else if (c < nd) {
          h[c] = dv;  // y . y
        }
      }
      sq += __shfl_xor_sync(0xffffffffu, sq, 8);
      sq += __shfl_xor_sync(0xffffffffu, sq, 16);
      if (lane == 0) L.wsq[warp] = sq;
    }
    __syncthreads();
    if (pass == 1) {
      double s = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += L.wsq[w];
      const double b2 = h[rows] - s;
      out.beta = b2 > 0 ? sqrt(b2) : 0.0;
      if (rows > 0) out.alpha = L.h[rows - 1] + h[rows - 1];
    }
    if (t < kLanczosN) {
      float u0 = 0.f, u1 = 0.f, u2 = 0.f, u3 = 0.f;
      int c = 0;
      for (; c + 4 <= rows; c += 4) {
        const float4 hc = *reinterpret_cast<const float4*>(L.hf + c);
        u0 = fmaf(L.Q[c * kLanczosN + t], hc.x, u0);
        u1 = fmaf(L.Q[(c + 1) * kLanczosN + t], hc.y, u1);
        u2 = fmaf(L.Q[(c + 2) * kLanczosN + t], hc.z, u2);
        u3 = fmaf(L.Q[(c + 3) * kLanczosN + t], hc.w, u3);
      }
      for (; c < rows; ++c) u0 = fmaf(L.Q[c * kLanczosN + t], L.hf[c], u0);
      const float yn = L.y[t] - ((u0 + u1) + (u2 + u3));
      if (pass == 0)
        L.y[t] = yn;
      else
        L.Q[dst * kLanczosN + t] = out.beta > 0 ? static_cast<float>(yn / out.beta) : 0.f;
    }
    __syncthreads();
  }
  return out;
}

/// beta = |y| (double); Q[dst] = y / beta (zero where beta is). Returns beta (every thread).
__device__ __forceinline__ double lanczos_normalize_into(const lanczos::Layout& L, int dst) {
  const int t = static_cast<int>(threadIdx.x);
  const double v = t < kLanczosN ? static_cast<double>(L.y[t]) * L.y[t] : 0.0;
  const double b = sqrt(block_reduce<false>(v, L.red));
  if (t < kLanczosN) L.Q[dst * kLanczosN + t] = b > 0 ? static_cast<float>(L.y[t] / b) : 0.f;
  __syncthreads();
  return b;
}

/// y = the keyed start `key` (rows < n; zero beyond).
__device__ __forceinline__ void lanczos_start(const lanczos::Layout& L, int n, int key) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < kLanczosN) L.y[t] = t < n ? static_cast<float>(start_value(t, key, 0)) : 0.f;
  __syncthreads();
}

/// The tridiagonal T (d[0..m), e[0..m - 1)) into tri's Smem for (m, k); returns it.
__device__ __forceinline__ Smem lanczos_tridiagonal(unsigned char* tri, const double* d,
                                                    const double* e, int m, int k) {
  const Smem T(tri, m, k);
  const int t = static_cast<int>(threadIdx.x);
  __syncthreads();  // d and e written; the previous users of tri done
  if (t < m) {
    T.d[t] = d[t];
    const double et = t + 1 < m ? e[t] : 0.0;
    T.e[t] = et;
    T.e2[t] = et * et;
  }
  __syncthreads();
  return T;
}

/// Step 3's check after `steps` steps (k <= steps): the Ritz pairs of T into tri's Smem (Z: the
/// vectors of T), this warp's Ritz value lam and its column col, T's norm bound tnorm and the
/// k-th Ritz value theta_k, theta_next, T's (k + 1)-th Ritz value (the guard's margin; -tnorm
/// where steps == k); whether every top-k residual estimate is <= kLanczosTol tnorm.
/// The vectors: block_eig.cuh's inverse iteration (kInverseIterations solves each from the
/// multisection's shifts), first not orthonormalised (enough for the estimates, and half the
/// time of orthonormalising after each solve); only where the estimates pass, orthonormalised
/// by Cholesky QR (the vectors V is made of; a second pass where the first pass's factor is
/// off I by kLanczosOrthSkip or more) and the estimates taken again. A
/// cluster whose vectors come out alike fails the Cholesky QR: declined. Not inlined: inlined,
/// a step took 12.1 k cycles against 11.4 k (session 44).
__device__ __noinline__ bool lanczos_check(const lanczos::Layout& L, int steps, int k,
                                           double& tnorm, double& theta_k, double& theta_next,
                                           double& lam, int& col) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  // The multisection brackets k + 1 values where T has them, so that theta_(k+1) comes with
  // the others (was a warp's own multisection after an accepted check: 15-25 k cycles).
  const int kb = steps > k ? k + 1 : k;
  Smem T = lanczos_tridiagonal(L.tri, L.alpha, L.beta, steps, kb);
  tnorm = bisect(T);
  theta_next = kb > k ? 0.5 * (T.lo[k] + T.hi[k]) : -tnorm;
  T.k = k;  // the layout stays (steps, kb)'s; everything after takes the top k
  if (warp < k) {
    float* lf = reinterpret_cast<float*>(T.X + static_cast<std::size_t>(warp) * steps);
    float* rdf = lf + steps;
    double* z = T.Z + warp * steps;
    for (int i = lane; i < steps; i += 32) z[i] = start_value(i, warp, 0);
    if (lane == 0)
      shifted_factor(T.d, T.e, T.e2, steps, 0.5 * (T.lo[warp] + T.hi[warp]),
                     DBL_EPSILON * fmax(tnorm, 1.0), lf, rdf);
    for (int it = 0; it < kInverseIterations; ++it) {
      __syncwarp();
      if (!warp_shifted_solve<kCheckRows>(lf, rdf, steps, z)) {
        if (lane == 0) shifted_solve(lf, rdf, steps, z);
        __syncwarp();
      }
      warp_normalize(z, steps);
    }
  }
  __syncthreads();
  double worst = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      // A second pass only where the first pass's factor is not within kLanczosOrthSkip of I
      // (as orthonormalize's kOrthSkip: one pass then leaves rounding). Warp 0 reads the
      // factor back (its diagonal holds 1 / L(c, c); off the diagonal L is G
      // to first order): passing |G - I| out of cholqr_pass spilled the kernel's registers.
      if (!cholqr_pass(T.Z, steps, k, T.G, T.red)) return false;
      if (warp == 0) {
        double d = 0;
        for (int e = lane; e < k * k; e += 32) {
          const int a = e / k, b = e - a * k;
          if (b <= a) d = fmax(d, fabs(T.G[e] - (a == b ? 1.0 : 0.0)));
        }
        d = warp_max(d);
        if (lane == 0) L.red[48] = d;
      }
      __syncthreads();
      if (!(L.red[48] < kLanczosOrthSkip) && !cholqr_pass(T.Z, steps, k, T.G, T.red)) return false;
    }
    double zr[kCheckRows];
    col = ritz_rank<kCheckRows>(T, zr, lam);
    const double est = warp < k ? fabs(L.beta[steps - 1] * T.Z[warp * steps + steps - 1]) : 0.0;
    worst = block_reduce<true>(est, L.red);
    theta_k = -block_reduce<true>(warp < k ? -lam : -DBL_MAX, L.red);
    if (!(worst <= kLanczosTol * tnorm)) return false;
  }
  return true;
}

}  // namespace detail

/// One block of kLanczosThreads threads, lanczos_smem_bytes() of dynamic shared memory; n <= 256,
/// k <= min(n, kMaxK). S: n x n, both triangles (column- or row-major alike). Writes V (n x k,
/// row-major) and w[0..k) as the exact kernel does, with w[k] = 0; or w[k] = kNotFinite (nothing
/// else written) or kLanczosDeclined (V, w[0..k) unspecified: the exact kernel is to run).
/// clocks (null, or 8 values; jobs/probes/lanczos_probe.cu): thread 0's clock64() after loading
/// S, after the steps, after V, after the guard and at the end; the cycles of the checks, the
/// steps taken and the checks made.
__global__ void __launch_bounds__(kLanczosThreads, 1)
    lanczos_top_kernel(const double* __restrict__ S, int n, int k, double* __restrict__ V,
                       double* __restrict__ w, long long* clocks) {
  using namespace detail;
  extern __shared__ __align__(16) unsigned char smem[];
  const lanczos::Layout L(smem);
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
  const int row = t >> 1, hf = t & 1;

  // ---- S, scaled by 2^-s so that its largest entry is in [0.5, 1) ----
  double amax = 0;
  bool finite = true;
  const int nn = n * n;
  for (int i = t; i < nn; i += kLanczosThreads) {
    const double x = S[i];
    finite = finite && isfinite(x);
    amax = fmax(amax, fabs(x));
  }
  if (!__syncthreads_and(finite ? 1 : 0)) {
    if (t == 0) w[k] = kNotFinite;
    return;
  }
  amax = block_reduce<true>(amax, L.red);
  int sexp = 0;
  if (amax > 0) frexp(amax, &sexp);
  sexp = max(sexp, -1000);
  const double scale = ldexp(1.0, -sexp);
  auto entry = [&](int j) -> float {  // S(row, j), scaled; zero outside n x n
    return row < n && j < n ? static_cast<float>(S[static_cast<std::size_t>(j) * n + row] * scale)
                            : 0.f;
  };
  // The register half of the row. Loaded again from S after each check and before the guard,
  // so that it is not live across lanczos_check's call (the kernel as measured in session 44;
  // without the reloads a step took about as long).
  float sreg[64];
  auto load_sreg = [&] {
#pragma unroll
    for (int c = 0; c < 64; ++c) sreg[c] = entry(hf * 128 + c);
  };
  load_sreg();
  for (int u = 0; u < 16; ++u) {
    const int j = hf * 128 + 64 + 4 * u;
    L.Ssm[u * kLanczosThreads + t] =
        make_float4(entry(j), entry(j + 1), entry(j + 2), entry(j + 3));
  }
  lanczos_start(L, n, 0);
  lanczos_normalize_into(L, 0);
  long long check_cycles = 0, checks = 0, steps_taken = 0;
  if (clocks != nullptr && t == 0) clocks[0] = clock64();

  // ---- Lanczos steps, checked as they go ----
  const int mmax = min(kLanczosMaxM, n);
  double anorm = 0, bprev = 0, tnorm = 0, theta_k = 0, theta_next = 0;
  int m = 0, col = 0;
  double lam = 0;
  bool accepted = false;
  for (int j = 0; j < mmax; ++j) {
    lanczos_product(L, sreg, j);
    const LanczosCoefs ab = lanczos_extend(L, j + 1, j + 1);
    const double a = ab.alpha, b = ab.beta;
    if (t == 0) {
      L.alpha[j] = a;
      L.beta[j] = b;
    }
    anorm = fmax(anorm, fabs(a) + b + bprev);
    bprev = b;
    const int steps = j + 1;
    const bool broke = !(b > kLanczosBreakdown * anorm);
    const bool due =
        steps >= kLanczosFirstCheck && (steps - kLanczosFirstCheck) % kLanczosCheckEvery == 0;
    steps_taken = steps;
    if (!(broke || due || steps == mmax)) continue;
    if (steps >= k) {
      const long long c0 = clock64();
      const bool ok = lanczos_check(L, steps, k, tnorm, theta_k, theta_next, lam, col);
      if (!ok && !broke) load_sreg();
      check_cycles += clock64() - c0;
      ++checks;
      if (ok) {
        m = steps;
        accepted = true;
        break;
      }
    }
    if (broke) break;
  }
  if (clocks != nullptr && t == 0) {
    clocks[1] = clock64();
    clocks[5] = check_cycles;
    clocks[6] = steps_taken;
    clocks[7] = checks;
  }

  // ---- V = Q_m Z (double), into V; float copies into Q[0, k) ----
  if (accepted) {
    const Smem T(L.tri, m, k);
    double vr[kRowsPerLane];
    if (warp < k) {
#pragma unroll
      for (int r = 0; r < kRowsPerLane; ++r) vr[r] = 0;
      for (int c = 0; c < m; ++c) {
        const double z = T.Z[warp * m + c];
#pragma unroll
        for (int r = 0; r < kRowsPerLane; ++r)
          vr[r] = fma(static_cast<double>(L.Q[c * kLanczosN + lane + 32 * r]), z, vr[r]);
      }
    }
    __syncthreads();  // Q read
    if (warp < k) {
#pragma unroll
      for (int r = 0; r < kRowsPerLane; ++r) {
        const int i = lane + 32 * r;
        L.Q[col * kLanczosN + i] = static_cast<float>(vr[r]);
        if (i < n) V[static_cast<std::size_t>(i) * k + col] = vr[r];
      }
    }
    __syncthreads();
    if (clocks != nullptr && t == 0) clocks[2] = clock64();

    // ---- The guard: kGuardSteps steps on (I - V V^T) S (I - V V^T) ----
    load_sreg();
    lanczos_start(L, n, 1);
    lanczos_extend(L, k, k);
    int s = 0;
    for (int i = 0; i < kGuardSteps; ++i) {
      lanczos_product(L, sreg, k + i);
      const LanczosCoefs ab = lanczos_extend(L, k + i + 1, k + i + 1);
      const double a = ab.alpha, b = ab.beta;
      if (t == 0) {
        L.ga[i] = a;
        L.gb[i] = b;
      }
      s = i + 1;
      if (!(b > kLanczosBreakdown * anorm)) break;
    }
    const Smem Tg = lanczos_tridiagonal(L.tri, L.ga, L.gb, s, 1);
    bisect(Tg);
    __syncthreads();
    // The gap is taken as >= 0 (step 5 above): a negative margin would accept a guard value
    // slightly above theta_k.
    accepted =
        Tg.hi[0] < theta_k - fmin(kGuardMargin * tnorm, 0.5 * fmax(theta_k - theta_next, 0.0));
    if (clocks != nullptr && t == 0) clocks[3] = clock64();
  }

  // ---- V orthonormalised in double (Cholesky QR, in Ssm's space), written ----
  if (accepted) {
    double* Z = reinterpret_cast<double*>(L.Ssm);  // Z[c n + i] = V(i, c)
    __syncthreads();
    for (int idx = t; idx < n * k; idx += kLanczosThreads) {
      const int i = idx / k, c = idx % k;
      Z[c * n + i] = V[idx];
    }
    __syncthreads();
    accepted = cholqr_pass(Z, n, k, L.G, L.red);  // V is orthonormal to float: one pass
    if (accepted) {
      for (int idx = t; idx < n * k; idx += kLanczosThreads) {
        const int i = idx / k, c = idx % k;
        V[idx] = Z[c * n + i];
      }
      if (warp < k && lane == 0) w[col] = lam / scale;
    }
  }
  if (t == 0) w[k] = accepted ? 0.0 : kLanczosDeclined;
  if (clocks != nullptr && t == 0) clocks[4] = clock64();
}

/// Launches lanczos_top_kernel for 1 <= k <= n <= kLanczosN, k <= kMaxK, on stream (the caller
/// checks that the device holds lanczos_smem_bytes() a block). Returns the first CUDA error.
inline cudaError_t launch_lanczos_top(const double* S, int n, int k, double* V, double* w,
                                      cudaStream_t stream, long long* clocks = nullptr) {
  if (n < 1 || k < 1 || k > n || n > kLanczosN || k > kMaxK) return cudaErrorInvalidValue;
  cudaError_t err =
      cudaFuncSetAttribute(lanczos_top_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lanczos_smem_bytes()));
  if (err != cudaSuccess) return err;
  lanczos_top_kernel<<<1, kLanczosThreads, lanczos_smem_bytes(), stream>>>(S, n, k, V, w, clocks);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda::block_eig
