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
// tensor cores (R0 = 8: one 16-row tile, half of it padding; kHalf below), accumulating in
// float registers. Nonzeros of the 8 that belong to another
// row are masked to zero (A and B) and taken by a further pass over the same 8 after the
// current row is flushed, so rows may start and end anywhere.
//
// Accuracy: each float operand is split into a tf32 high part and a tf32 remainder, and the
// product is hi*hi + hi*lo + lo*hi ("3xTF32"), which keeps about 21 of float's 24
// significand bits in every product (the dropped lo*lo term is below 2^-21 relative);
// sums are in float, as the CUDA-core kernel's. A plain tf32 product would lose 3 decimal
// digits.
//
// Per 8 nonzeros a warp issues 8 shuffles of coordinates, four gathers per lane (its two
// nonzeros' rows of both factors; a lane's 2 R0 / 16 prefix columns and RL / 8 last-mode
// columns of a row are consecutive, so each is one vector load, scalar at RL = 8: the
// fragments are permuted, see the kernel), the tf32 splits and 3 x (R0 / 16) x (RL / 8)
// MMAs, against 16 x (4 + 16) FP32 instructions per nonzero on the CUDA cores (the
// register-blocked kernel) at R0 = RL = 16. The kernel is bound by instruction issue and
// dependent latencies, not bytes (Nsight Compute, nell-2 shape 16,16,16: L2 at 42-44% of
// its throughput): the fast path for steps inside one row, two steps per gather and the
// separate correction accumulators took it from 19.5 to 11.6 warp instructions per nonzero
// and from 2.41 to 1.63 ms per mode (docs/perf/gpu-h200-tucker.md, "Session 33").
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime/mma_tf32.cuh"
#include "kernels/cuda/ttmc/kernels.cuh"

namespace tessera::kernels::cuda::ttmc_tc {

inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = 8;
inline constexpr unsigned kFullMask = 0xffffffffu;
/// Steps of 8 nonzeros gathered together (measured: 2 beat 1, docs/perf/gpu-h200-tucker.md).
inline constexpr int kStepsPerGather = 2;

/// MT = R0 / 16 tiles of rows of Y_i (prefix-mode columns; 1 for R0 = 8), NT = RL / 8 tiles of its
/// columns (fragment layouts: kernels/cuda/runtime/mma_tf32.cuh). Here the k index is a nonzero of
/// a step of 8: lane (g, t) handles nonzeros t and t + 4. The fragments are permuted: fragment row
/// g (g + 8) of A's tile mt holds prefix column 2 MT g + 2 mt (+ 1), and fragment column n of B's
/// tile nt last-mode column NT n + nt, so a lane's elements of one factor row are consecutive (one
/// vector load per row) and its outputs of one prefix column are 2 NT consecutive floats (vector
/// stores). S = kStepsPerGather steps of 8 nonzeros are gathered together; when all 8 S continue
/// the current row (the common case: rows hold hundreds to thousands of nonzeros) they are
/// multiplied without the per-row passes and masks. LO: the two correction products of 3xTF32 go to
/// their own accumulators (shorter dependent chains; summed at the flush).
///
/// kHalf (MT = 1): a prefix rank of 8. The fragment rows of the lanes g >= 4 (rows 4 .. 7 and
/// 12 .. 15, prefix columns 8 .. 15 in the permuted order) hold zeros: those lanes gather and
/// store nothing for A, and half of each MMA is padding. The MMAs are not what bounds the kernel
/// (the gathers are): at 8 x 8 it took 1.52 ms a mode where the register-blocked CUDA-core
/// kernel took 1.87 (nell-2 shape, H200; docs/perf/gpu-h200-tucker.md, "Session 40").
template <int MT, int NT, bool LO, bool kHalf = false>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, MT* NT >= 4 ? 2 : 3)
    ttmc_tc_kernel(const __grid_constant__ TtmcParams<float> p) {
  static_assert(!kHalf || MT == 1, "a prefix rank of 8 pads one 16-row tile");
  constexpr int R0 = kHalf ? 8 : 16 * MT, RL = 8 * NT, C = R0 * RL, S = kStepsPerGather;
  static_assert(kWarp % (8 * S) == 0, "a gather of S steps lies within one batch of 32");
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int g = lane >> 2, t = lane & 3;
  const bool rows_of_a = !kHalf || g < 4;  // this lane's fragment rows are prefix columns
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

  float acc[MT][NT][4] = {}, acl[MT][NT][4] = {};  // acl: the corrections (LO only)
  index_t cur = 0;
  bool have = false, first = true;
  auto flush = [&](bool atomic) {
    float* o = p.out + static_cast<std::size_t>(__ldg(p.pos + cur)) * static_cast<std::size_t>(C);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // fragment rows g and g + 8: prefix 2 MT g + 2 mt + h
        float* q = o + (2 * MT * g + 2 * mt + h) * RL + 2 * NT * t;
        float w[2 * NT];
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            w[NT * e + nt] = acc[mt][nt][2 * h + e];
            acc[mt][nt][2 * h + e] = 0.f;
            if constexpr (LO) {
              w[NT * e + nt] += acl[mt][nt][2 * h + e];
              acl[mt][nt][2 * h + e] = 0.f;
            }
          }
        if (!rows_of_a) {
          continue;  // padding rows (kHalf): nothing to store
        } else if (atomic) {
#pragma unroll
          for (int e = 0; e < 2 * NT; ++e) atomicAdd(q + e, w[e]);
        } else if constexpr (NT == 1) {
          *reinterpret_cast<float2*>(q) = make_float2(w[0], w[1]);
        } else {
#pragma unroll
          for (int e = 0; e < 2 * NT; e += 4)
            *reinterpret_cast<float4*>(q + e) = make_float4(w[e], w[e + 1], w[e + 2], w[e + 3]);
        }
      }
  };
  // One k-step of the products: m[h] masks this lane's nonzero h (false: a zero operand).
  auto product = [&](const float(&v)[2], const float(&a)[2][2 * MT], const float(&bv)[2][NT],
                     bool m0, bool m1) {
    std::uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      tf32::split(m0 ? bv[0][nt] : 0.f, bh[nt][0], bl[nt][0]);
      tf32::split(m1 ? bv[1][nt] : 0.f, bh[nt][1], bl[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      std::uint32_t ah[4], al[4];
      tf32::split(m0 ? v[0] * a[0][2 * mt] : 0.f, ah[0], al[0]);
      tf32::split(m0 ? v[0] * a[0][2 * mt + 1] : 0.f, ah[1], al[1]);
      tf32::split(m1 ? v[1] * a[1][2 * mt] : 0.f, ah[2], al[2]);
      tf32::split(m1 ? v[1] * a[1][2 * mt + 1] : 0.f, ah[3], al[3]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if constexpr (LO) {
          tf32::mma(acl[mt][nt], al, bh[nt]);
          tf32::mma(acl[mt][nt], ah, bl[nt]);
          tf32::mma(acc[mt][nt], ah, bh[nt]);
        } else {
          tf32::mma3(acc[mt][nt], ah, al, bh[nt], bl[nt]);
        }
      }
    }
  };

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
    for (int c0 = 0; c0 < kWarp; c0 += 8 * S) {
      if (b + c0 >= end) break;  // warp-uniform
      index_t r[S][2];
      float v[S][2], a[S][2][2 * MT], bv[S][2][NT];
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int src = c0 + 8 * s + t + 4 * h;
          r[s][h] = __shfl_sync(kFullMask, my_row, src);
          const index_t j = __shfl_sync(kFullMask, my_i0, src);
          const index_t k = __shfl_sync(kFullMask, my_i1, src);
          v[s][h] = __shfl_sync(kFullMask, my_val, src);
          if (rows_of_a) {
            load_run<float, 2 * MT>(U0 + static_cast<std::size_t>(j) * R0 + 2 * MT * g, a[s][h]);
          } else {
#pragma unroll
            for (int e = 0; e < 2 * MT; ++e) a[s][h][e] = 0.f;
          }
          load_run<float, NT>(U1 + static_cast<std::size_t>(k) * RL + NT * g, bv[s][h]);
        }
      // Fast path: all 8 S inside the tile and in the current row.
      bool same = have && b + c0 + 8 * S <= end;
#pragma unroll
      for (int s = 0; s < S; ++s) same = same && r[s][0] == cur && r[s][1] == cur;
      if (__all_sync(kFullMask, same)) {
#pragma unroll
        for (int s = 0; s < S; ++s) product(v[s], a[s], bv[s], true, true);
        continue;
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int c = c0 + 8 * s;
        if (b + c >= end) break;  // warp-uniform
        bool done[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) done[h] = b + c + t + 4 * h >= end;
        tf32::for_each_row(r[s], done, [&](index_t row, const bool(&m)[2]) {
          if (!have || row != cur) {
            if (have) {
              flush(first || !p.exclusive);
              first = false;
            }
            cur = row;
            have = true;
          }
          product(v[s], a[s], bv[s], m[0], m[1]);
        });
      }
    }
    my_row = nx_row, my_i0 = nx_i0, my_i1 = nx_i1, my_val = nx_val;
  }
  if (have) flush(true);  // the last row may continue in the next tile
}

/// Whether the kernel takes a launch: order 3, prefix rank 8, 16 or 32, last rank 8, 16 or
/// 32, one column slice, both factors and the output 16-byte aligned (its vector loads and
/// stores; device allocations are, so this holds for every caller in Tessera; otherwise the
/// CUDA-core kernels run).
inline bool fits(const TtmcParams<float>& p) {
  if (p.nin != 2) return false;
  const int R0 = p.in_rank[0], RL = p.in_rank[1];
  const auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  return (R0 == 8 || R0 == 16 || R0 == 32) && (RL == 8 || RL == 16 || RL == 32) &&
         p.C == static_cast<std::int64_t>(R0) * RL && aligned(p.factors[p.in_mode[0]]) &&
         aligned(p.factors[p.in_mode[1]]) && aligned(p.out);
}

template <int MT, int NT, bool kHalf = false>
inline void launch_shape(cudaStream_t stream, const TtmcParams<float>& p, dim3 grid, dim3 block) {
  // Separate correction accumulators where they do not spill (ptxas, sm_90: the 32 x 8 and
  // 32 x 32 tiles would, 24 and 176 bytes). Measured against the other combinations on an
  // H200 (docs/perf/gpu-h200-tucker.md, "Session 33").
  constexpr bool kLo = !(MT == 2 && (NT == 1 || NT == 4));
  ttmc_tc_kernel<MT, NT, kLo, kHalf><<<grid, block, 0, stream>>>(p);
}

inline void launch(cudaStream_t stream, const TtmcParams<float>& p, unsigned blocks) {
  const int mt = p.in_rank[0] / 16, nt = p.in_rank[1] / 8;  // mt = 0: prefix rank 8
  const dim3 grid(blocks), block(kWarpsPerBlock * kWarp);
  switch (mt * 10 + nt) {
    case 1:
      launch_shape<1, 1, true>(stream, p, grid, block);
      break;
    case 2:
      launch_shape<1, 2, true>(stream, p, grid, block);
      break;
    case 4:
      launch_shape<1, 4, true>(stream, p, grid, block);
      break;
    case 11:
      launch_shape<1, 1>(stream, p, grid, block);
      break;
    case 12:
      launch_shape<1, 2>(stream, p, grid, block);
      break;
    case 14:
      launch_shape<1, 4>(stream, p, grid, block);
      break;
    case 21:
      launch_shape<2, 1>(stream, p, grid, block);
      break;
    case 22:
      launch_shape<2, 2>(stream, p, grid, block);
      break;
    case 24:
      launch_shape<2, 4>(stream, p, grid, block);
      break;
    default:
      TESSERA_THROW("tensor-core TTMc with ranks " << p.in_rank[0] << ", " << p.in_rank[1]);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::kernels::cuda::ttmc_tc
