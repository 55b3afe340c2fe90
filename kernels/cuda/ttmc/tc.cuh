// The tensor-core TTMc kernel for order 3 in float, included by kernels.cu only.
//
// Same contract as the tile kernels there (a launch covers a contiguous range of a copy
// sorted by the output mode, or by (block, output mode); each warp owns p.tile nonzeros;
// a finished row is written once, with a plain store when no other warp can hold it and
// with atomics for the first and last row of a tile and for every row of a copy with
// several runs per row; no per-nonzero atomics).
//
// For an output row i with nonzeros k, Y_i = sum_k v_k a_k b_k^T, where a_k is the row of
// the prefix mode's factor (R0 columns) and b_k the row of the last mode's (RL columns):
// Y_i = A^T B with A (n_i x R0) = [v_k a_k] and B (n_i x RL) = [b_k], a matrix product
// whose inner dimension is the row's nonzeros. A warp takes the nonzeros 8 at a time (the
// k of mma.m16n8k8) and multiplies R0 / 16 x RL / 8 tiles of 16 x 8 outputs on the
// tensor cores, accumulating in float registers. Nonzeros of the 8 that belong to another
// row are masked to zero (A and B) and taken by a further pass over the same 8 after the
// current row is flushed, so rows may start and end anywhere.
//
// Accuracy: each float operand is split into a tf32 high part and a tf32 remainder, and the
// product is hi*hi + hi*lo + lo*hi ("3xTF32"), which keeps about 21 of float's 24
// significand bits in every product (the dropped lo*lo term is below 2^-21 relative);
// sums are in float, as the CUDA-core kernel's. A plain tf32 product would lose 3 decimal
// digits.
//
// Per 8 nonzeros a warp issues 8 shuffles of coordinates, (R0 / 16) * 4 + (RL / 8) * 2
// 4-byte gathers (lanes of one thread-in-group read 32 consecutive bytes of one row), the
// tf32 splits and 3 x (R0 / 16) x (RL / 8) MMAs, against 16 x (4 + 16) FP32 instructions
// per nonzero on the CUDA cores (the register-blocked kernel) at R0 = RL = 16.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime/mma_tf32.cuh"
#include "kernels/cuda/ttmc/kernels.cuh"

namespace tessera::kernels::cuda::ttmc_tc {

inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = 8;
inline constexpr unsigned kFullMask = 0xffffffffu;

/// MT = R0 / 16 tiles of rows of Y_i (prefix-mode columns), NT = RL / 8 tiles of its columns
/// (fragment layouts: kernels/cuda/runtime/mma_tf32.cuh). Here the k index is a nonzero of the
/// current 8: lane (g, t) handles nonzeros t and t + 4.
template <int MT, int NT>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, MT* NT >= 4 ? 2 : 3)
    ttmc_tc_kernel(const __grid_constant__ TtmcParams<float> p) {
  constexpr int R0 = 16 * MT, RL = 8 * NT, C = R0 * RL;
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t begin = warp * p.tile;
  if (begin >= p.nnz) return;  // whole warp
  const std::int64_t end = min(begin + static_cast<std::int64_t>(p.tile), p.nnz);

  const float* __restrict__ U0 = p.factors[p.in_mode[0]];
  const float* __restrict__ U1 = p.factors[p.in_mode[1]];
  const index_t* rows = p.idx[p.mode];
  const index_t* in0 = p.idx[p.in_mode[0]];
  const index_t* in1 = p.idx[p.in_mode[1]];

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  index_t cur = 0;
  bool have = false, first = true;
  auto flush = [&](bool atomic) {
    float* o = p.out + static_cast<std::size_t>(__ldg(p.pos + cur)) * static_cast<std::size_t>(C);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows g and g + 8 of the tile
          float* q = o + (mt * 16 + g + 8 * h) * RL + nt * 8 + 2 * t;
          const float x = acc[mt][nt][2 * h], y = acc[mt][nt][2 * h + 1];
          if (atomic) {
            atomicAdd(q, x);
            atomicAdd(q + 1, y);
          } else {
            *reinterpret_cast<float2*>(q) = make_float2(x, y);
          }
          acc[mt][nt][2 * h] = 0.f;
          acc[mt][nt][2 * h + 1] = 0.f;
        }
  };

  // Coordinates 32 at a time, one nonzero per lane (coalesced, streaming), the next batch
  // loaded while this one runs.
  index_t my_row = 0, my_i0 = 0, my_i1 = 0, nx_row = 0, nx_i0 = 0, nx_i1 = 0;
  float my_val = 0.f, nx_val = 0.f;
  auto load = [&](std::int64_t b, index_t& r, index_t& i0, index_t& i1, float& v) {
    const std::int64_t k = b + lane;
    const bool ok = k < end;
    r = ok ? __ldcs(rows + k) : 0;
    i0 = ok ? __ldcs(in0 + k) : 0;
    i1 = ok ? __ldcs(in1 + k) : 0;
    v = ok ? __ldcs(p.vals + k) : 0.f;
  };
  load(begin, my_row, my_i0, my_i1, my_val);
  for (std::int64_t b = begin; b < end; b += kWarp) {
    load(b + kWarp, nx_row, nx_i0, nx_i1, nx_val);
#pragma unroll 1
    for (int c = 0; c < kWarp; c += 8) {
      if (b + c >= end) break;  // warp-uniform
      // This lane's two nonzeros of the 8: t and t + 4.
      index_t r[2], j[2], k[2];
      float v[2];
      bool done[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int src = c + t + 4 * h;
        r[h] = __shfl_sync(kFullMask, my_row, src);
        j[h] = __shfl_sync(kFullMask, my_i0, src);
        k[h] = __shfl_sync(kFullMask, my_i1, src);
        v[h] = __shfl_sync(kFullMask, my_val, src);
        done[h] = b + src >= end;
      }
      // Factor elements: A needs prefix columns g (+ 8) of the rows j, B last-mode columns
      // g of the rows k, per tile.
      float a[MT][2][2], bv[NT][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float* ra = U0 + static_cast<std::size_t>(j[h]) * R0 + g;
        const float* rb = U1 + static_cast<std::size_t>(k[h]) * RL + g;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][h][0] = __ldg(ra + mt * 16);
          a[mt][h][1] = __ldg(ra + mt * 16 + 8);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) bv[nt][h] = __ldg(rb + nt * 8);
      }
      // One pass per output row present among the 8 (usually one).
      tf32::for_each_row(r, done, [&](index_t row, const bool(&m)[2]) {
        if (!have || row != cur) {
          if (have) {
            flush(first || !p.exclusive);
            first = false;
          }
          cur = row;
          have = true;
        }
        std::uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) tf32::split(m[h] ? bv[nt][h] : 0.f, bh[nt][h], bl[nt][h]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          std::uint32_t ah[4], al[4];
          // a0 (g, t) a1 (g + 8, t) a2 (g, t + 4) a3 (g + 8, t + 4): k = t is h = 0.
          tf32::split(m[0] ? v[0] * a[mt][0][0] : 0.f, ah[0], al[0]);
          tf32::split(m[0] ? v[0] * a[mt][0][1] : 0.f, ah[1], al[1]);
          tf32::split(m[1] ? v[1] * a[mt][1][0] : 0.f, ah[2], al[2]);
          tf32::split(m[1] ? v[1] * a[mt][1][1] : 0.f, ah[3], al[3]);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) tf32::mma3(acc[mt][nt], ah, al, bh[nt], bl[nt]);
        }
      });
    }
    my_row = nx_row, my_i0 = nx_i0, my_i1 = nx_i1, my_val = nx_val;
  }
  if (have) flush(true);  // the last row may continue in the next tile
}

/// Whether the kernel takes a launch: order 3, prefix rank 16 or 32, last rank 8, 16 or
/// 32, one column slice.
inline bool fits(const TtmcParams<float>& p) {
  if (p.nin != 2) return false;
  const int R0 = p.in_rank[0], RL = p.in_rank[1];
  return (R0 == 16 || R0 == 32) && (RL == 8 || RL == 16 || RL == 32) &&
         p.C == static_cast<std::int64_t>(R0) * RL;
}

inline void launch(cudaStream_t stream, const TtmcParams<float>& p, unsigned blocks) {
  const int mt = p.in_rank[0] / 16, nt = p.in_rank[1] / 8;
  const dim3 grid(blocks), block(kWarpsPerBlock * kWarp);
  switch (mt * 10 + nt) {
    case 11:
      ttmc_tc_kernel<1, 1><<<grid, block, 0, stream>>>(p);
      break;
    case 12:
      ttmc_tc_kernel<1, 2><<<grid, block, 0, stream>>>(p);
      break;
    case 14:
      ttmc_tc_kernel<1, 4><<<grid, block, 0, stream>>>(p);
      break;
    case 21:
      ttmc_tc_kernel<2, 1><<<grid, block, 0, stream>>>(p);
      break;
    case 22:
      ttmc_tc_kernel<2, 2><<<grid, block, 0, stream>>>(p);
      break;
    case 24:
      ttmc_tc_kernel<2, 4><<<grid, block, 0, stream>>>(p);
      break;
    default:
      TESSERA_THROW("tensor-core TTMc with ranks " << p.in_rank[0] << ", " << p.in_rank[1]);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::kernels::cuda::ttmc_tc
