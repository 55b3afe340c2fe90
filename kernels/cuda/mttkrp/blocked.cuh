// The register-blocked MTTKRP tile kernel (the common case), launched by tiles.cu only
// (mttkrp.cu and handle.cuh use its host-side supports / supported_shapes).
//
// Same contract as mttkrp_tile_kernel in tiles.cu: a launch covers a contiguous range of a copy
// sorted by the output mode (plain layout, a tier-2 chunk) or by (block, output mode) (l2
// layout); each warp owns a tile of p.tile nonzeros; a finished row is written once, with
// a plain store when its whole run lies inside one sub-tile and with atomics when it may
// be shared (the first and last row of a sub-tile; every row in the l2 layout). There
// are no per-nonzero atomics.
//
// What differs is the work per instruction:
// - Lanes: lane gl of a slot owns the V = 16 / sizeof(T) consecutive columns gl V .. gl V +
//   V - 1, so L = R / V lanes cover a whole factor row and the warp holds S = 32 / L slots,
//   each walking its own sub-tile of p.tile / S nonzeros (R = 32 float: 8 lanes, 4 slots).
//   One pass covers every column (no column loop), so R = 16 costs about half of R = 32.
// - Staging: the coordinates and values of 128 nonzeros per warp (4 per lane per array,
//   coalesced) are copied to shared memory with cp.async, one batch ahead of their use
//   (double buffer, no registers held), instead of being broadcast with one shuffle per
//   nonzero per array.
// - Register blocking: a lane takes U = 4 consecutive nonzeros of its slot per step: one
//   16-byte shared load gives the 4 output rows, one the 4 coordinates of each input
//   mode, one (two for double) the 4 values; then (N - 1) x 4 independent 16-byte factor
//   row gathers (one IMAD.WIDE each for the address) are in flight before the first
//   product, and the products are FMUL / FFMA on registers. In the source each input
//   slot's 4 rows land in their own registers before its products: written that way,
//   ptxas keeps the order-3 float and double kernels free of spills (16 bytes before) and
//   the nell-2 shaped R 32 MTTKRP took 0.956x the time (1.19 against 1.25 ms on an H200;
//   docs/perf/gpu-h200-floors.md, "Session 40"). The 16-bit gathers keep the interleaved
//   form (gather, convert, multiply per row), 1.6% faster for them.
// - Runs: a step whose 4 nonzeros all continue the current row (the last one equals it,
//   the copy being sorted; in the l2 layout all four are compared) takes a straight-line
//   path of FMAs; only a step with a row change walks its nonzeros one by one.
// Order N = kNin + 1 is a template parameter (3 to 6): the mode loop is unrolled.
// Reduced-precision gathers (--gather-precision fp16 | bf16, float only; G the stored type):
// the input factors are read from 16-bit copies (Params::in_low, made by the caller), a
// lane's V = 4 columns in one 8-byte load converted to float; the products and the sums
// stay float. Half the bytes per gathered row, the same lanes and steps.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda::blocked {

inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = 8;
/// Resident blocks per SM the kernel is compiled for (64 registers at 8 warps).
inline constexpr int kBlocksPerSm = 4;
/// Nonzeros a lane takes per step.
inline constexpr int kStep = 4;
/// Nonzeros staged per warp and batch (kStep per lane and array).
inline constexpr int kStage = kWarp * kStep;
/// Input modes the kernel is instantiated for: orders kMinIn + 1 .. kMaxIn + 1.
inline constexpr int kMinIn = 2;
inline constexpr int kMaxIn = 5;

template <typename T>
struct Params {
  const index_t* rows = nullptr;       ///< output-mode coordinates
  const index_t* in_idx[kMaxIn] = {};  ///< coordinates of input slot s
  const T* in_fac[kMaxIn] = {};        ///< factor of input slot s (rows of R)
  /// gather != full: 16-bit copies of in_fac (rows of R, 256-byte aligned starts; 8-byte
  /// loads), read instead.
  const void* in_low[kMaxIn] = {};
  GatherPrecision gather = GatherPrecision::full;
  const T* vals = nullptr;
  T* out = nullptr;  ///< rows of R, zeroed (or holding earlier chunks)
  std::int64_t nnz = 0;
  int R = 0;
  int log_lanes = 0;       ///< log2(R / V)
  int tile = 0;            ///< nonzeros per warp, a multiple of kStage
  bool hint = false;       ///< l2 layout: read input slot 0 with an L2 evict-last hint
  bool aligned16 = false;  ///< rows, in_idx and vals all 16-byte aligned
  /// Plain layout only: rows of one sub-tile are added to out (read, add, store), not
  /// stored (tier 3: out holds earlier chunks' sums). Selects the kAcc instantiation.
  bool accumulate = false;
};

/// Shared memory of one warp: two buffers of (kNin + 1) index arrays and one value array of
/// kStage entries each.
template <typename T>
constexpr int warp_smem_bytes(int nin) {
  return 2 * ((nin + 1) * kStage * static_cast<int>(sizeof(index_t)) +
              kStage * static_cast<int>(sizeof(T)));
}

template <typename T>
using Vec = std::conditional_t<std::is_same_v<T, float>, float4, double2>;
template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

/// 16-byte read-only gather, optionally with an L2 cache policy.
template <typename T, bool kHint>
__device__ __forceinline__ void gather(const T* p, std::uint64_t pol, T (&q)[kVec<T>]) {
  if constexpr (!kHint) {
    const Vec<T> v = __ldg(reinterpret_cast<const Vec<T>*>(p));
    if constexpr (std::is_same_v<T, float>) {
      q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
    } else {
      q[0] = v.x, q[1] = v.y;
    }
  } else if constexpr (std::is_same_v<T, float>) {
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(q[0]), "=f"(q[1]), "=f"(q[2]), "=f"(q[3])
        : "l"(p), "l"(pol));
  } else {
    asm("ld.global.nc.L2::cache_hint.v2.f64 {%0, %1}, [%2], %3;"
        : "=d"(q[0]), "=d"(q[1])
        : "l"(p), "l"(pol));
  }
}

/// The 4 float columns at p of a 16-bit copy (G: __half or __nv_bfloat16; 8-byte aligned),
/// optionally with an L2 cache policy.
template <typename G, bool kHint>
__device__ __forceinline__ void gather_low(const G* p, std::uint64_t pol, float (&q)[4]) {
  uint2 v;
  if constexpr (!kHint) {
    v = __ldg(reinterpret_cast<const uint2*>(p));
  } else {
    asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p), "l"(pol));
  }
  float2 a, b;
  if constexpr (std::is_same_v<G, __half>) {
    a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
    b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
  } else {
    a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
    b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
  }
  q[0] = a.x, q[1] = a.y, q[2] = b.x, q[3] = b.y;
}

/// cp.async of one element (4 or 8 bytes, through L1); zero-fills the destination when !ok.
template <int kBytes>
__device__ __forceinline__ void stage_small(std::uint32_t dst, const void* src, bool ok,
                                            std::uint64_t pol) {
  asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], %2, %3, %4;" ::"r"(dst),
               "l"(src), "n"(kBytes), "r"(ok ? kBytes : 0), "l"(pol)
               : "memory");
}

/// cp.async of 16 bytes (bypassing L1) of which the first `bytes` are read, the rest zeroed.
__device__ __forceinline__ void stage_16(std::uint32_t dst, const void* src, int bytes,
                                         std::uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst),
               "l"(src), "r"(bytes), "l"(pol)
               : "memory");
}

/// Adds acc to the V columns at p (16-byte aligned) with atomics: one vector reduction for
/// float on sm_90 and later.
template <typename T>
__device__ __forceinline__ void add_atomic(T* p, const T (&acc)[kVec<T>]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector = std::is_same_v<T, float>;
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(acc[0]), "f"(acc[1]),
                 "f"(acc[2]), "f"(acc[3])
                 : "memory");
  } else {
#pragma unroll
    for (int v = 0; v < kVec<T>; ++v) atomicAdd(p + v, acc[v]);
  }
}

/// A warp's tile of a launch and its lanes' places in it (see the top of this file): slot
/// `slot` of 1 << (5 - log_l) walks its own sub-tile with L = 1 << log_l lanes, lane gl of
/// the slot owning the columns gl V .. gl V + V - 1. active: the tile has nonzeros.
struct WarpTile {
  int lane = 0, wib = 0;
  int log_l = 0, slot = 0, gl = 0;
  int log_b = 0;    ///< staged nonzeros per slot and batch: 1 << log_b = 4 L
  int sub = 0;      ///< nonzeros per slot
  int my_len = 0;   ///< this slot's nonzeros
  int batches = 0;  ///< batches of the warp (slot 0 has the most)
  std::int64_t wbegin = 0;
  bool active = false;
};

template <typename T>
__device__ __forceinline__ WarpTile warp_tile(const Params<T>& p) {
  WarpTile w;
  w.lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  w.wib = static_cast<int>(threadIdx.x) / kWarp;
  w.wbegin = (static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + w.wib) * p.tile;
  w.active = w.wbegin < p.nnz;
  if (!w.active) return w;
  const int wlen = static_cast<int>(min(static_cast<std::int64_t>(p.tile), p.nnz - w.wbegin));
  w.log_l = p.log_lanes;
  const int log_s = 5 - w.log_l;  // slots per warp: 1 << log_s
  w.slot = w.lane >> w.log_l;
  w.gl = w.lane & ((1 << w.log_l) - 1);
  w.sub = p.tile >> log_s;
  w.log_b = w.log_l + 2;
  w.my_len = min(max(wlen - w.slot * w.sub, 0), w.sub);
  w.batches = (min(wlen, w.sub) + (1 << w.log_b) - 1) >> w.log_b;
  return w;
}

/// The warp's nonzeros, batch after batch: batch b + 1 is staged into shared memory with
/// cp.async while body(sm_idx, sm_val, cnt, b) consumes batch b. sm_idx: this slot's staged
/// output rows (then input slot s's coordinates at sm_idx + (s + 1) kStage), sm_val its
/// values, cnt its nonzeros in the batch (<= 0 when the slot has none left).
template <typename T, int kNin, typename Body>
__device__ __forceinline__ void for_each_batch(const Params<T>& p, const WarpTile& w,
                                               unsigned char* smem_raw, Body&& body) {
  constexpr int kArrays = kNin + 1;  // index arrays staged: output rows, then inputs
  constexpr int kBufBytes = warp_smem_bytes<T>(kNin) / 2;
  // Staging: lane gl of a slot copies the 4 consecutive nonzeros 4 gl .. 4 gl + 3 of its
  // slot's 4 L nonzeros of the batch (entries 4 lane .. 4 lane + 3 of the warp's buffer):
  // one 16-byte cp.async per array when every array is 16-byte aligned (p.aligned16),
  // else four 4-byte ones. A partial or empty group is zero-filled (and never read).
  const std::int64_t st_k0 = w.wbegin + w.slot * w.sub + 4 * w.gl;
  const std::uint32_t sm_warp = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem_raw)) +
                                static_cast<std::uint32_t>(w.wib * 2 * kBufBytes);
  std::uint64_t stream_pol;  // the tensor's arrays are read once: evict first from L2
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(stream_pol));
  auto stage = [&](int b) {
    const std::uint32_t d =
        sm_warp + static_cast<std::uint32_t>((b & 1) * kBufBytes + w.lane * 4 * 4);
    const std::uint32_t dv =
        sm_warp + static_cast<std::uint32_t>((b & 1) * kBufBytes + kArrays * kStage * 4 +
                                             w.lane * 4 * static_cast<int>(sizeof(T)));
    const int local = (b << w.log_b) + 4 * w.gl;
    const int n_ok = min(max(w.my_len - local, 0), 4);  // nonzeros of this lane's group
    const std::int64_t k = n_ok > 0 ? st_k0 + (b << w.log_b) : w.wbegin;  // a valid address
    if (p.aligned16) {
      stage_16(d, p.rows + k, n_ok * 4, stream_pol);
#pragma unroll
      for (int s = 0; s < kNin; ++s)
        stage_16(d + static_cast<std::uint32_t>((s + 1) * kStage * 4), p.in_idx[s] + k, n_ok * 4,
                 stream_pol);
      if constexpr (sizeof(T) == 4) {
        stage_16(dv, p.vals + k, n_ok * 4, stream_pol);
      } else {
        stage_16(dv, p.vals + k, min(n_ok, 2) * 8, stream_pol);
        stage_16(dv + 16, p.vals + k + 2, max(n_ok - 2, 0) * 8, stream_pol);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool ok = i < n_ok;
        const std::uint32_t di = d + static_cast<std::uint32_t>(i * 4);
        stage_small<4>(di, p.rows + k + i, ok, stream_pol);
#pragma unroll
        for (int s = 0; s < kNin; ++s)
          stage_small<4>(di + static_cast<std::uint32_t>((s + 1) * kStage * 4), p.in_idx[s] + k + i,
                         ok, stream_pol);
        stage_small<static_cast<int>(sizeof(T))>(
            dv + static_cast<std::uint32_t>(i * static_cast<int>(sizeof(T))), p.vals + k + i, ok,
            stream_pol);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };

  stage(0);
  for (int b = 0; b < w.batches; ++b) {
    if (b + 1 < w.batches) {
      stage(b + 1);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    __syncwarp();
    const unsigned char* buf = smem_raw + w.wib * 2 * kBufBytes + (b & 1) * kBufBytes;
    const auto* sm_idx = reinterpret_cast<const index_t*>(buf) + (w.slot << w.log_b);
    const T* sm_val = reinterpret_cast<const T*>(buf + kArrays * kStage * 4) + (w.slot << w.log_b);
    body(sm_idx, sm_val, min(w.my_len - (b << w.log_b), 1 << w.log_b), b);
    __syncwarp();  // every lane is done with this buffer before stage(b + 2) refills it
  }
}

/// The 4 values at sm_val (16-byte aligned shared memory).
template <typename T>
__device__ __forceinline__ void load_values(const T* sm_val, T (&val)[kStep]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = *reinterpret_cast<const float4*>(sm_val);
    val[0] = v.x, val[1] = v.y, val[2] = v.z, val[3] = v.w;
  } else {
    const double2 v0 = *reinterpret_cast<const double2*>(sm_val);
    const double2 v1 = *reinterpret_cast<const double2*>(sm_val + 2);
    val[0] = v0.x, val[1] = v0.y, val[2] = v1.x, val[3] = v1.y;
  }
}

/// See the top of this file. kL2: the l2 layout: input slot 0 is the blocked mode (read
/// with an L2 evict-last hint when p.hint), the rows are sorted only within a block, and
/// every finished row is added with atomics. kAcc: Params::accumulate. G: the type of the
/// gathered factor rows (T, or a 16-bit copy for float T: p.in_low).
template <typename T, int kNin, bool kL2, bool kAcc = false, typename G = T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kBlocksPerSm)
    mttkrp_blocked_kernel(const __grid_constant__ Params<T> p) {
  constexpr int V = kVec<T>;
  constexpr int U = kStep;
  constexpr bool kLow = !std::is_same_v<G, T>;
  static_assert(!kLow || std::is_same_v<T, float>, "16-bit gathers of float factors only");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const WarpTile w = warp_tile(p);
  if (!w.active) return;  // whole warp leaves together

  std::uint64_t pol = 0;
  if constexpr (kL2) {
    if (p.hint)
      asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    else
      asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  }
  const unsigned row_bytes = static_cast<unsigned>(p.R) * static_cast<unsigned>(sizeof(G));
  const char* fac[kNin];
#pragma unroll
  for (int s = 0; s < kNin; ++s)
    fac[s] = reinterpret_cast<const char*>(kLow ? p.in_low[s] : p.in_fac[s]) +
             static_cast<std::size_t>(w.gl) * V * sizeof(G);
  T* const out_col = p.out + w.gl * V;

  T acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = T(0);
  index_t cur = 0;
  bool first = true;  // the current row may continue from the previous sub-tile
  auto flush = [&](bool atomic) {
    T* o = out_col + static_cast<std::size_t>(cur) * static_cast<std::size_t>(p.R);
    if (atomic) {
      add_atomic<T>(o, acc);
    } else {
      Vec<T> q;
      if constexpr (std::is_same_v<T, float>) {
        q.x = acc[0], q.y = acc[1], q.z = acc[2], q.w = acc[3];
      } else {
        q.x = acc[0], q.y = acc[1];
      }
      if constexpr (kAcc) {  // a tier-3 chunk: earlier chunks' sums are in out
        const Vec<T> o0 = *reinterpret_cast<const Vec<T>*>(o);
        if constexpr (std::is_same_v<T, float>) {
          q.x += o0.x, q.y += o0.y, q.z += o0.z, q.w += o0.w;
        } else {
          q.x += o0.x, q.y += o0.y;
        }
      }
      *reinterpret_cast<Vec<T>*>(o) = q;
    }
  };

  for_each_batch<T, kNin>(
      p, w, smem_raw, [&](const index_t* sm_idx, const T* sm_val, int cnt, int b) {
        if (b == 0 && cnt > 0) cur = sm_idx[0];
        for (int j = 0; j < cnt; j += U) {
          const uint4 r4 = *reinterpret_cast<const uint4*>(sm_idx + j);
          T val[U];
          load_values(sm_val + j, val);
          // Every gather of the step is issued before the products that use them.
          T prod[U][V];
#pragma unroll
          for (int s = 0; s < kNin; ++s) {
            const uint4 c4 = *reinterpret_cast<const uint4*>(sm_idx + (s + 1) * kStage + j);
            const index_t c[U] = {c4.x, c4.y, c4.z, c4.w};
            auto gather_row = [&](int u, T(&q)[V]) {
              const G* a =
                  reinterpret_cast<const G*>(fac[s] + static_cast<std::uint64_t>(c[u]) * row_bytes);
              if constexpr (kLow) {
                if (kL2 && s == 0)
                  gather_low<G, true>(a, pol, q);
                else
                  gather_low<G, false>(a, pol, q);
              } else if (kL2 && s == 0) {  // resolved at compile time (s is unrolled)
                gather<T, true>(a, pol, q);
              } else {
                gather<T, false>(a, pol, q);
              }
            };
            if constexpr (kLow) {  // each row multiplied as it is converted
#pragma unroll
              for (int u = 0; u < U; ++u) {
                T q[V];
                gather_row(u, q);
#pragma unroll
                for (int v = 0; v < V; ++v) prod[u][v] = s == 0 ? q[v] : prod[u][v] * q[v];
              }
            } else {  // the slot's U rows into their own registers, then the products
              T q[U][V];
#pragma unroll
              for (int u = 0; u < U; ++u) gather_row(u, q[u]);
#pragma unroll
              for (int u = 0; u < U; ++u)
#pragma unroll
                for (int v = 0; v < V; ++v) prod[u][v] = s == 0 ? q[u][v] : prod[u][v] * q[u][v];
            }
          }
          bool same = j + U <= cnt && r4.w == cur;
          if constexpr (kL2) same = same && r4.x == cur && r4.y == cur && r4.z == cur;
          if (same) {
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
              for (int v = 0; v < V; ++v) acc[v] = fma(val[u], prod[u][v], acc[v]);
          } else {
            const index_t r[U] = {r4.x, r4.y, r4.z, r4.w};
#pragma unroll
            for (int u = 0; u < U; ++u) {
              if (j + u < cnt) {
                if (r[u] != cur) {
                  flush(kL2 || first);
                  first = false;
                  cur = r[u];
#pragma unroll
                  for (int v = 0; v < V; ++v) acc[v] = T(0);
                }
#pragma unroll
                for (int v = 0; v < V; ++v) acc[v] = fma(val[u], prod[u][v], acc[v]);
              }
            }
          }
        }
      });
  // The last row may continue in the next sub-tile.
  if (w.my_len > 0) flush(true);
}

/// Whether the blocked kernel takes a launch: order kMinIn + 1 .. kMaxIn + 1, R / V a power
/// of two up to 32 (float: R = 4 .. 128, double: R = 2 .. 64), every input factor and the
/// output 16-byte aligned.
template <typename T>
bool supports(int order, int R, const T* const* factors, int mode, const T* out) {
  constexpr int V = kVec<T>;
  if (order - 1 < kMinIn || order - 1 > kMaxIn) return false;
  if (R % V != 0) return false;
  const int L = R / V;
  if (L < 1 || L > kWarp || (L & (L - 1)) != 0) return false;
  auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  if (!aligned(out)) return false;
  for (int m = 0; m < order; ++m)
    if (m != mode && !aligned(factors[m])) return false;
  return true;
}

/// The shapes supports() accepts, for describe().
template <typename T>
const char* supported_shapes() {
  return std::is_same_v<T, float> ? "order 3-6, R in {4,8,16,32,64,128}"
                                  : "order 3-6, R in {2,4,8,16,32,64}";
}

template <typename T, int kNin, bool kL2, bool kAcc = false, typename G = T>
void launch_g(cudaStream_t stream, const Params<T>& p, unsigned blocks) {
  constexpr int smem = kWarpsPerBlock * warp_smem_bytes<T>(kNin);
  if constexpr (smem > 48 * 1024) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(mttkrp_blocked_kernel<T, kNin, kL2, kAcc, G>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  mttkrp_blocked_kernel<T, kNin, kL2, kAcc, G><<<blocks, kWarpsPerBlock * kWarp, smem, stream>>>(p);
}

/// launch_g with the gathered type of p.gather (16-bit copies: float, not accumulating).
template <typename T, int kNin, bool kL2, bool kAcc = false>
void launch_n(cudaStream_t stream, const Params<T>& p, unsigned blocks) {
  if constexpr (std::is_same_v<T, float> && !kAcc) {
    if (p.gather == GatherPrecision::fp16)
      return launch_g<T, kNin, kL2, kAcc, __half>(stream, p, blocks);
    if (p.gather == GatherPrecision::bf16)
      return launch_g<T, kNin, kL2, kAcc, __nv_bfloat16>(stream, p, blocks);
  }
  TESSERA_EXPECTS(p.gather == GatherPrecision::full,
                  "16-bit gathers in a double or accumulating blocked launch");
  launch_g<T, kNin, kL2, kAcc>(stream, p, blocks);
}

/// launch_n of the plain layout, accumulating when p.accumulate.
template <typename T, int kNin>
void launch_plain(cudaStream_t stream, const Params<T>& p, unsigned blocks) {
  if (p.accumulate)
    launch_n<T, kNin, false, true>(stream, p, blocks);
  else
    launch_n<T, kNin, false>(stream, p, blocks);
}

/// Calls f(std::integral_constant<int, nin>{}) for nin input modes, kMinIn .. kMaxIn: the
/// instantiations the blocked kernels (this one and the Phi kernel, phi.cu) are built for.
template <typename F>
void with_nin(int nin, F&& f) {
  switch (nin) {
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 5:
      f(std::integral_constant<int, 5>{});
      break;
    default:
      TESSERA_THROW("blocked kernel with " << nin << " input modes");
  }
  static_assert(kMinIn == 2 && kMaxIn == 5, "with_nin's cases are kMinIn .. kMaxIn");
}

/// Enqueues the kernel over p.nnz nonzeros (supports() must hold). l2: see the kernel.
template <typename T>
void launch(cudaStream_t stream, const Params<T>& p, int nin, bool l2) {
  const std::int64_t tiles = (p.nnz + p.tile - 1) / p.tile;
  const std::int64_t blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= 0x7fffffff, p.nnz << " nonzeros exceed one launch; split the block");
  const auto nb = static_cast<unsigned>(blocks);
  TESSERA_EXPECTS(!(l2 && p.accumulate), "the accumulating blocked kernel has no l2 layout");
  with_nin(nin, [&](auto k) {
    constexpr int kNin = decltype(k)::value;
    if (l2)
      launch_n<T, kNin, true>(stream, p, nb);
    else
      launch_plain<T, kNin>(stream, p, nb);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::kernels::cuda::blocked
