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
//
// 16-bit gathers (--gather-precision fp16 | bf16; G = __half or __nv_bfloat16): the rows are
// read from 16-bit copies of the factors (half the bytes: a lane's piece of a row of 16 is
// one 4-byte load), widened to float, and each k-step is ONE tf32 product instead of three:
// B's entries are exact in tf32 (fp16's and bf16's significands fit in tf32's 10 bits) and
// A = v a is rounded to tf32 (2^-11 relative, float's range, so no value can overflow).
// The error is the copies' rounding (2^-11 or 2^-8 of each entry) and that of A
// (docs/reduced-precision.md, "Tucker's TTMc").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/runtime/mma_tf32.cuh"
#include "kernels/cuda/ttmc/kernels.cuh"

namespace tessera::kernels::cuda::ttmc_tc {

inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = 8;
inline constexpr unsigned kFullMask = 0xffffffffu;
/// Steps of 8 nonzeros gathered together (measured: 2 beat 1, docs/perf/gpu-h200-tucker.md).
inline constexpr int kStepsPerGather = 2;

/// A 16-bit number's bits widened to float (exact).
template <typename G>
__device__ __forceinline__ float widen(unsigned bits) {
  if constexpr (std::is_same_v<G, __half>)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  else
    return __uint_as_float(bits << 16);  // bfloat16: float's top half
}

/// W consecutive 16-bit numbers from p (aligned to W elements, W in {1, 2, 4}) as floats, in
/// one load.
template <typename G, int W>
__device__ __forceinline__ void load_low(const G* __restrict__ p, float (&u)[W]) {
  static_assert(sizeof(G) == 2 && (W == 1 || W == 2 || W == 4), "16-bit runs of 1, 2 or 4");
  if constexpr (W == 1) {
    u[0] = widen<G>(__ldg(reinterpret_cast<const unsigned short*>(p)));
  } else if constexpr (W == 2) {
    const unsigned v = __ldg(reinterpret_cast<const unsigned*>(p));
    u[0] = widen<G>(v & 0xffffu), u[1] = widen<G>(v >> 16);
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    u[0] = widen<G>(v.x & 0xffffu), u[1] = widen<G>(v.x >> 16);
    u[2] = widen<G>(v.y & 0xffffu), u[3] = widen<G>(v.y >> 16);
  }
}

/// A row run of the factor a kernel gathers from: float rows, or their 16-bit copies.
template <typename G, int W>
__device__ __forceinline__ void gather_run(const G* __restrict__ p, float (&u)[W]) {
  if constexpr (std::is_same_v<G, float>)
    load_run<float, W>(p, u);
  else
    load_low<G, W>(p, u);
}

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
/// G: the gathered type (float: 3xTF32; __half or __nv_bfloat16: p.low's copies, one tf32
/// product, LO unused).
/// SG: steps of 8 nonzeros gathered together (kStepsPerGather, or 4 where that measured faster).
template <int MT, int NT, bool LO, bool kHalf = false, typename G = float, int SG = kStepsPerGather>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, MT* NT >= 4 ? 2 : 3)
    ttmc_tc_kernel(const __grid_constant__ TtmcParams<float> p) {
  static_assert(!kHalf || MT == 1, "a prefix rank of 8 pads one 16-row tile");
  constexpr bool kLow = !std::is_same_v<G, float>;
  static_assert(!kLow || !LO, "16-bit gathers take one product: no correction accumulators");
  constexpr int R0 = kHalf ? 8 : 16 * MT, RL = 8 * NT, C = R0 * RL, S = SG;
  static_assert(kWarp % (8 * S) == 0, "a gather of S steps lies within one batch of 32");
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int g = lane >> 2, t = lane & 3;
  const bool rows_of_a = !kHalf || g < 4;  // this lane's fragment rows are prefix columns
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t begin = warp * p.tile;
  if (begin >= p.nnz) return;  // whole warp
  const std::int64_t end = min(begin + static_cast<std::int64_t>(p.tile), p.nnz);

  const G* __restrict__ U0;
  const G* __restrict__ U1;
  if constexpr (kLow) {
    U0 = static_cast<const G*>(p.low[p.in_mode[0]]);
    U1 = static_cast<const G*>(p.low[p.in_mode[1]]);
  } else {
    U0 = p.factors[p.in_mode[0]];
    U1 = p.factors[p.in_mode[1]];
  }
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
    if constexpr (kLow) {
      // B: the widened 16-bit entries, exact in tf32; A = v a rounded to tf32 (split's hi).
      std::uint32_t bh[NT][2], lo;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        bh[nt][0] = __float_as_uint(m0 ? bv[0][nt] : 0.f);
        bh[nt][1] = __float_as_uint(m1 ? bv[1][nt] : 0.f);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        std::uint32_t ah[4];
        tf32::split(m0 ? v[0] * a[0][2 * mt] : 0.f, ah[0], lo);
        tf32::split(m0 ? v[0] * a[0][2 * mt + 1] : 0.f, ah[1], lo);
        tf32::split(m1 ? v[1] * a[1][2 * mt] : 0.f, ah[2], lo);
        tf32::split(m1 ? v[1] * a[1][2 * mt + 1] : 0.f, ah[3], lo);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) tf32::mma(acc[mt][nt], ah, bh[nt]);
      }
    } else {
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
            gather_run<G, 2 * MT>(U0 + static_cast<std::size_t>(j) * R0 + 2 * MT * g, a[s][h]);
          } else {
#pragma unroll
            for (int e = 0; e < 2 * MT; ++e) a[s][h][e] = 0.f;
          }
          gather_run<G, NT>(U1 + static_cast<std::size_t>(k) * RL + NT * g, bv[s][h]);
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

/// Whether the launch reads 16-bit copies (p.gather set and both copies present, 8-byte
/// aligned: a lane's run of 2 MT or NT entries is one load).
inline bool reads_low(const TtmcParams<float>& p) {
  const auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 8 == 0; };
  return p.gather != GatherPrecision::full && p.low[p.in_mode[0]] != nullptr &&
         p.low[p.in_mode[1]] != nullptr && aligned(p.low[p.in_mode[0]]) &&
         aligned(p.low[p.in_mode[1]]);
}

template <int MT, int NT, bool kHalf = false, typename G = float>
inline void launch_shape(cudaStream_t stream, const TtmcParams<float>& p, dim3 grid, dim3 block) {
  // Separate correction accumulators where they do not spill (ptxas, sm_90: the 32 x 8 and
  // 32 x 32 tiles would, 24 and 176 bytes). Measured against the other combinations on an
  // H200 (docs/perf/gpu-h200-tucker.md, "Session 33"). 16-bit gathers have no corrections.
  constexpr bool kLo = std::is_same_v<G, float> && !(MT == 2 && (NT == 1 || NT == 4));
  // bf16 copies with prefix rank 16 and last rank 8 or 16: four steps a gather (ptxas: no
  // spills there, 40-48 bytes at 32 x 8 and 8 x 16; at 16 x 16 1.08 against 1.23 ms a mode on
  // the nell-2 shape, where float and fp16 gained 0-4% or spilled; gpu-h200-tucker.md,
  // "Session 42").
  constexpr int kS =
      std::is_same_v<G, __nv_bfloat16> && MT == 1 && !kHalf && NT <= 2 ? 4 : kStepsPerGather;
  ttmc_tc_kernel<MT, NT, kLo, kHalf, G, kS><<<grid, block, 0, stream>>>(p);
}

template <typename G>
inline void launch_gathering(cudaStream_t stream, const TtmcParams<float>& p, unsigned blocks) {
  const int mt = p.in_rank[0] / 16, nt = p.in_rank[1] / 8;  // mt = 0: prefix rank 8
  const dim3 grid(blocks), block(kWarpsPerBlock * kWarp);
  switch (mt * 10 + nt) {
    case 1:
      launch_shape<1, 1, true, G>(stream, p, grid, block);
      break;
    case 2:
      launch_shape<1, 2, true, G>(stream, p, grid, block);
      break;
    case 4:
      launch_shape<1, 4, true, G>(stream, p, grid, block);
      break;
    case 11:
      launch_shape<1, 1, false, G>(stream, p, grid, block);
      break;
    case 12:
      launch_shape<1, 2, false, G>(stream, p, grid, block);
      break;
    case 14:
      launch_shape<1, 4, false, G>(stream, p, grid, block);
      break;
    case 21:
      launch_shape<2, 1, false, G>(stream, p, grid, block);
      break;
    case 22:
      launch_shape<2, 2, false, G>(stream, p, grid, block);
      break;
    case 24:
      launch_shape<2, 4, false, G>(stream, p, grid, block);
      break;
    default:
      TESSERA_THROW("tensor-core TTMc with ranks " << p.in_rank[0] << ", " << p.in_rank[1]);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

inline void launch(cudaStream_t stream, const TtmcParams<float>& p, unsigned blocks) {
  if (!reads_low(p))
    launch_gathering<float>(stream, p, blocks);
  else if (p.gather == GatherPrecision::fp16)
    launch_gathering<__half>(stream, p, blocks);
  else
    launch_gathering<__nv_bfloat16>(stream, p, blocks);
}

}  // namespace tessera::kernels::cuda::ttmc_tc
