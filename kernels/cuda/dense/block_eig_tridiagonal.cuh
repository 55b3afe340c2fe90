// Steps 1 and 2 of the one-block eigen-solver (kernels/cuda/dense/block_eig.cuh): the
// single-precision tridiagonal reduction in shared memory, each step's rank-2 update applied
// in the next step's pass, and the reflectors' tau in double.
#pragma once

#include "kernels/cuda/dense/block_eig_base.cuh"

namespace tessera::kernels::cuda::block_eig {

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

/// The end of a warp's G columns in reduction_step: their column sums cacc reduced across
/// the warp, and for each column jc = c0 + g stride that exists (jc < mm), p_j (j = r0 + jc)
/// stored without the diagonal entry both sums took, and v_j p_j added to vav.
template <int G>
__device__ __forceinline__ void finish_columns(float (&cacc)[G], int lane, int c0, int stride,
                                               int r0, int mm, int n, const float* A,
                                               const float* mine, float* pc, float& vav) {
  const float tot = detail::reduce_scatter<G>(cacc, lane);
  __syncwarp();  // the diagonal entries the warp stored, read below
  if ((lane & (32 / G - 1)) == 0) {
    const int jc = c0 + detail::scatter_column<G>(lane) * stride;
    if (jc < mm) {
      const int j = r0 + jc;
      const float vj = mine[j];
      const float strict = fmaf(-A[detail::col_start(j, n)], vj, tot);  // rows i > j
      pc[j] = strict;
      vav = fmaf(strict, vj, vav);
    }
  }
}

/// Step kk of the reduction (ssytd2, lower) with R = ceil((n - kk - 1) / 32) rows per lane
/// and NW warps. The previous step's rank-2 update A -= v w^T + w v^T is not applied by that
/// step: it is applied here, in the same pass over the trailing lower triangle that forms
/// p = A v with this step's reflector (each entry read and written once a step, and read
/// once for both of its products: a_ij v_j for row i and a_ij v_i for column j). The pending
/// update is vw[i] = (v_i, w_i). Two block barriers a step. Where the trailing matrix has more
/// than 64 rows (R >= 3) the columns go to the warps in groups of 8 consecutive ones, whose
/// diagonals share a row block, so that a group skips its row blocks above the diagonal whole
/// (session 36; a warp per column spends about 44% of its predicated slots there); at most 64
/// rows, a warp takes 2 R columns, one per NW.
template <int R, int NW>
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
  if constexpr (R >= 3) {
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
      finish_columns<8>(cacc, lane, jc0, 1, r0, mm, n, A, mine, pc, vav);
    }
  } else {
    // A warp per column (2 R at once), every row block predicated.
    bool inr[R];  // this lane's rows of the trailing matrix
#pragma unroll
    for (int t = 0; t < R; ++t) inr[t] = lane + 32 * t < mm;
    constexpr int G = 2 * R;  // a warp has at most 2 R columns (R <= 2 here)
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
      finish_columns<G>(cacc, lane, c0, NW, r0, mm, n, A, mine, pc, vav);
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

/// reduction_step<R> for the trailing matrix's row blocks (1 <= rows <= R).
template <int R, int NW>
__device__ __forceinline__ void reduction_step_for(const Smem& m, int kk, int rows) {
  if constexpr (R > 1) {
    if (rows < R) {
      reduction_step_for<R - 1, NW>(m, kk, rows);
      return;
    }
  }
  reduction_step<R, NW>(m, kk);
}

/// Steps 1 and 2: A (scaled, in m.A) to T (m.d, m.e), the reflectors in A's columns, m.tau2.
/// Each step's code holds as few rows per lane as its trailing matrix needs.
template <int NW>
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
    reduction_step_for<kMaxN / 32, NW>(m, kk, (n - kk - 1 + 31) >> 5);
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

}  // namespace tessera::kernels::cuda::block_eig
