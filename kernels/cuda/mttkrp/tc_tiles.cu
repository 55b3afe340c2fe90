// The tile kernel of the tensor-core MTTKRP (hybrid.cuh): one thread block per segment of
// tiles of one output row block and per chunk of NC columns; 8 warps take the segment's
// tiles in turn. For each tile a warp forms the operand W = B_j[16 rows of the tile mode]
// .* (product of the fixed rows of the other modes), 16 x NC, in its shared-memory slice,
// and multiplies the 16 x 16 tile into its accumulators with warp-level MMA (nvcuda::wmma):
//   fp64    m8n8k4 DMMA, double accumulation
//   tf32    m16n16k8, float accumulation (operands rounded to TF32: 10-bit mantissa)
//   3xtf32  m16n16k8 three times, a = a_big + a_small, b likewise, a b ~ a_s b + a b_s + a b
//           (the a_s b_s term is dropped): about float accuracy
//   bf16    m16n16k16, float accumulation (tile and operand rounded to BF16: 7-bit mantissa)
// The 8 warps' sums are added in shared memory and then to the output rows: a plain
// read-add-store when the block owns the row block, atomics when the row block has other
// segments. The CUDA-core kernel on the rest of the nonzeros has finished before (same
// stream).
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>

#include "kernels/cuda/mttkrp/hybrid.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {
namespace {

using namespace nvcuda;

// ---- the cost model (tc_predicted_speedup) ----
// Affine fits (fixed seconds, seconds per item) at R = 16, 32, 64, 128, 256 (interpolated
// linearly in between, scaled with R beyond 256), to the H100 80GB sweep of commit 6cecc0f
// (bench mttkrp --tc-sweep, 2e7 nonzeros, docs/perf/gpu-h100-tensor-core-mttkrp.md): the
// CUDA-core kernel per nonzero (its default choice: blocked where it applies; the fixed part
// is large where the classic kernel runs, float R = 256, double R >= 128), fitted over every
// run of it on the whole tensors and on the rests; the tile kernel per tile, per precision
// (within 3% of every measured run).
struct Affine {
  double fixed, per;
};
constexpr int kModelRanks[5] = {16, 32, 64, 128, 256};
// The fixed part of the CUDA-core fit is kept only where it is real (the classic kernel's
// regime: float R = 256, double R >= 128); elsewhere the fits' intercepts (15-125 us) are
// artefacts of fitting large tensors, and a call's real floor is about 10 us (aminoacid,
// 61305 nonzeros: 11-26 us at R <= 128).
constexpr double kCallFloor = 10e-6;
constexpr Affine kCoreFloat[5] = {{kCallFloor, 13.6e-12},
                                  {kCallFloor, 19.3e-12},
                                  {kCallFloor, 36.6e-12},
                                  {kCallFloor, 76.9e-12},
                                  {1308.4e-6, 277.3e-12}};
constexpr Affine kCoreDouble[5] = {{kCallFloor, 21.4e-12},
                                   {kCallFloor, 40.9e-12},
                                   {kCallFloor, 84.8e-12},
                                   {2394.0e-6, 430.2e-12},
                                   {4768.3e-6, 867.4e-12}};
constexpr Affine kTile3xTf32[5] = {{23.3e-6, 1.10e-9},
                                   {12.4e-6, 1.10e-9},
                                   {27.0e-6, 2.21e-9},
                                   {40.1e-6, 4.40e-9},
                                   {66.0e-6, 8.79e-9}};
constexpr Affine kTileTf32[5] = {{20.9e-6, 0.89e-9},
                                 {11.7e-6, 0.86e-9},
                                 {22.0e-6, 1.78e-9},
                                 {34.2e-6, 3.53e-9},
                                 {59.0e-6, 7.03e-9}};
constexpr Affine kTileBf16[5] = {{22.3e-6, 0.92e-9},
                                 {12.8e-6, 0.85e-9},
                                 {21.9e-6, 1.70e-9},
                                 {30.3e-6, 3.40e-9},
                                 {47.2e-6, 6.79e-9}};
constexpr Affine kTileFp64[5] = {{32.4e-6, 1.17e-9},
                                 {20.0e-6, 1.33e-9},
                                 {28.9e-6, 2.67e-9},
                                 {47.9e-6, 5.36e-9},
                                 {76.5e-6, 10.76e-9}};

Affine at_rank(const Affine (&v)[5], int R) {
  // Below R = 16 a call costs at least half of R = 16 per item (indices, the tile itself).
  if (R <= kModelRanks[0])
    return {v[0].fixed, v[0].per * std::max(0.5, static_cast<double>(R) / kModelRanks[0])};
  for (int k = 1; k < 5; ++k)
    if (R <= kModelRanks[k]) {
      const double f =
          static_cast<double>(R - kModelRanks[k - 1]) / (kModelRanks[k] - kModelRanks[k - 1]);
      return {v[k - 1].fixed + f * (v[k].fixed - v[k - 1].fixed),
              v[k - 1].per + f * (v[k].per - v[k - 1].per)};
    }
  const double f = static_cast<double>(R) / kModelRanks[4];
  return {v[4].fixed * f, v[4].per * f};
}

constexpr int kTcWarps = 8;
constexpr int kTcThreads = kTcWarps * kWarp;

template <TcPrecision P>
struct TcTypes;
template <>
struct TcTypes<TcPrecision::fp64> {
  using Acc = double;  // accumulator and operand staging
  using Op = double;
  static constexpr int M = 8, N = 8, K = 4;
};
template <>
struct TcTypes<TcPrecision::tf32> {
  using Acc = float;
  using Op = float;
  static constexpr int M = 16, N = 16, K = 8;
};
template <>
struct TcTypes<TcPrecision::tf32x3> : TcTypes<TcPrecision::tf32> {};
template <>
struct TcTypes<TcPrecision::bf16> {
  using Acc = float;
  using Op = __nv_bfloat16;
  static constexpr int M = 16, N = 16, K = 16;
};

template <typename Op, typename T>
__device__ __forceinline__ Op to_op(T v) {
  if constexpr (std::is_same_v<Op, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<Op>(v);
}

/// Splits a TF32 fragment's values into big (in place) and small parts.
template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& big, Frag& small) {
#pragma unroll
  for (int q = 0; q < big.num_elements; ++q) {
    const float v = big.x[q];
    const float b = wmma::__float_to_tf32(v);
    small.x[q] = wmma::__float_to_tf32(v - b);
    big.x[q] = b;
  }
}
template <typename Frag>
__device__ __forceinline__ void round_tf32(Frag& f) {
#pragma unroll
  for (int q = 0; q < f.num_elements; ++q) f.x[q] = wmma::__float_to_tf32(f.x[q]);
}

template <typename T, TcPrecision P, int NC>
__global__ void __launch_bounds__(kTcThreads)
    tc_tiles_kernel(const __grid_constant__ TcParams<T> p) {
  using Ty = TcTypes<P>;
  using Acc = typename Ty::Acc;
  using Op = typename Ty::Op;
  constexpr int NT = NC / Ty::N;                 // column fragments
  constexpr int MT = kTcTile / Ty::M;            // row fragments
  constexpr int KS = kTcTile / Ty::K;            // k steps
  constexpr int CPL = (NC + kWarp - 1) / kWarp;  // columns per lane when forming W
  // Per warp: the operand W (16 x NC of Op) during the loop, the warp's sums (16 x NC of
  // Acc) after it; bf16 also stages the tile (256 Op) behind W.
  constexpr int kOpElems = kTcTile * NC + (P == TcPrecision::bf16 ? 256 : 0);
  constexpr int kSlice =
      (kTcTile * NC * sizeof(Acc) > kOpElems * sizeof(Op) ? kTcTile * NC * sizeof(Acc)
                                                          : kOpElems * sizeof(Op));
  __shared__ __align__(128) unsigned char smem[kTcWarps * kSlice];

  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::uint32_t* sg = p.seg + 4 * static_cast<std::size_t>(blockIdx.x);
  const std::uint32_t t0 = sg[0], t1 = sg[1], ib = sg[2];
  const bool shared_rows = sg[3] != 0;
  const int c0 = static_cast<int>(blockIdx.y) * NC;
  Op* op = reinterpret_cast<Op*>(smem + static_cast<std::size_t>(warp) * kSlice);
  const int stride = p.nfixed + 1;

  using FA = wmma::fragment<wmma::matrix_a, Ty::M, Ty::N, Ty::K,
                            std::conditional_t<P == TcPrecision::tf32 || P == TcPrecision::tf32x3,
                                               wmma::precision::tf32, Op>,
                            wmma::row_major>;
  using FB = wmma::fragment<wmma::matrix_b, Ty::M, Ty::N, Ty::K,
                            std::conditional_t<P == TcPrecision::tf32 || P == TcPrecision::tf32x3,
                                               wmma::precision::tf32, Op>,
                            wmma::row_major>;
  using FC = wmma::fragment<wmma::accumulator, Ty::M, Ty::N, Ty::K, Acc>;
  FC acc[MT][NT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < NT; ++n) wmma::fill_fragment(acc[mt][n], Acc(0));

  for (std::uint32_t t = t0 + static_cast<std::uint32_t>(warp); t < t1; t += kTcWarps) {
    const index_t* meta = p.meta + static_cast<std::size_t>(t) * static_cast<std::size_t>(stride);
    // The product of the fixed rows, for this lane's columns.
    T fixed[CPL];
#pragma unroll
    for (int v = 0; v < CPL; ++v) {
      const int col = c0 + lane + kWarp * v;
      T f = T(1);
      if (col < p.R)
        for (int s = 0; s < p.nfixed; ++s)
          f *= __ldg(p.fixed[s] + static_cast<std::size_t>(meta[1 + s]) * p.R + col);
      fixed[v] = f;
    }
    const std::uint64_t j0 = static_cast<std::uint64_t>(meta[0]) * kTcTile;
#pragma unroll
    for (int r = 0; r < kTcTile; ++r) {
      const bool row_ok = j0 + static_cast<std::uint64_t>(r) < p.tile_rows;
      const T* brow = p.tile_factor + (j0 + static_cast<std::uint64_t>(r)) * p.R;
#pragma unroll
      for (int v = 0; v < CPL; ++v) {
        const int c = lane + kWarp * v;
        if (c < NC) {
          const int col = c0 + c;
          const T w = (row_ok && col < p.R) ? __ldg(brow + col) * fixed[v] : T(0);
          op[r * NC + c] = to_op<Op>(w);
        }
      }
    }
    const T* tile = p.vals + static_cast<std::size_t>(t) * 256;
    const Op* a_src;
    if constexpr (P == TcPrecision::bf16) {
      Op* a_s = op + kTcTile * NC;
      for (int e = lane; e < 256; e += kWarp) a_s[e] = to_op<Op>(__ldg(tile + e));
      a_src = a_s;
    } else {
      a_src = tile;
    }
    __syncwarp();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        FA a;
        wmma::load_matrix_sync(a, a_src + mt * Ty::M * kTcTile + ks * Ty::K, kTcTile);
        if constexpr (P == TcPrecision::tf32x3) {
          FA a_small;
          split_tf32(a, a_small);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            FB b, b_small;
            wmma::load_matrix_sync(b, op + ks * Ty::K * NC + n * Ty::N, NC);
            split_tf32(b, b_small);
            wmma::mma_sync(acc[mt][n], a_small, b, acc[mt][n]);  // small terms first
            wmma::mma_sync(acc[mt][n], a, b_small, acc[mt][n]);
            wmma::mma_sync(acc[mt][n], a, b, acc[mt][n]);
          }
        } else {
          if constexpr (P == TcPrecision::tf32) round_tf32(a);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            FB b;
            wmma::load_matrix_sync(b, op + ks * Ty::K * NC + n * Ty::N, NC);
            if constexpr (P == TcPrecision::tf32) round_tf32(b);
            wmma::mma_sync(acc[mt][n], a, b, acc[mt][n]);
          }
        }
      }
    }
    __syncwarp();
  }
  __syncthreads();  // the sums overlap other warps' operand slices only in bf16; be safe
  Acc* red = reinterpret_cast<Acc*>(smem + static_cast<std::size_t>(warp) * kSlice);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < NT; ++n)
      wmma::store_matrix_sync(red + mt * Ty::M * NC + n * Ty::N, acc[mt][n], NC,
                              wmma::mem_row_major);
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kTcTile * NC; e += kTcThreads) {
    const int r = e / NC, c = e % NC;
    const std::uint64_t row =
        static_cast<std::uint64_t>(ib) * kTcTile + static_cast<std::uint64_t>(r);
    const int col = c0 + c;
    if (row >= p.out_rows || col >= p.R) continue;
    Acc s = Acc(0);
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w)
      s += reinterpret_cast<const Acc*>(smem + static_cast<std::size_t>(w) * kSlice)[e];
    T* o = p.out + row * static_cast<std::uint64_t>(p.R) + static_cast<std::uint64_t>(col);
    if (shared_rows)
      atomicAdd(o, static_cast<T>(s));
    else
      *o += static_cast<T>(s);
  }
}

template <typename T, TcPrecision P, int NC>
void launch_nc(cudaStream_t stream, const TcParams<T>& p, std::uint64_t segments) {
  const dim3 grid(static_cast<unsigned>(segments), static_cast<unsigned>((p.R + NC - 1) / NC));
  tc_tiles_kernel<T, P, NC><<<grid, kTcThreads, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T, TcPrecision P>
void launch_p(cudaStream_t stream, const TcParams<T>& p, std::uint64_t segments) {
  if (p.R <= 16)
    launch_nc<T, P, 16>(stream, p, segments);
  else if (p.R <= 32 || std::is_same_v<T, double>)
    launch_nc<T, P, 32>(stream, p, segments);
  else
    launch_nc<T, P, (std::is_same_v<T, double> ? 32 : 64)>(stream, p, segments);
}

}  // namespace

double tc_predicted_speedup(nnz_t nnz, nnz_t rest_nnz, std::uint64_t tiles, int R,
                            TcPrecision prec) {
  const Affine core = at_rank(prec == TcPrecision::fp64 ? kCoreDouble : kCoreFloat, R);
  const Affine tile = at_rank(prec == TcPrecision::fp64   ? kTileFp64
                              : prec == TcPrecision::tf32 ? kTileTf32
                              : prec == TcPrecision::bf16 ? kTileBf16
                                                          : kTile3xTf32,
                              R);
  const double off = core.fixed + static_cast<double>(nnz) * core.per;
  // No rest, no CUDA-core launch (and none of its fixed cost).
  const double rest = rest_nnz > 0 ? core.fixed + static_cast<double>(rest_nnz) * core.per : 0.0;
  return off / (rest + tile.fixed + static_cast<double>(tiles) * tile.per);
}

template <typename T>
void launch_tc_tiles(cudaStream_t stream, const TcParams<T>& p, std::uint64_t segments,
                     TcPrecision prec) {
  if (segments == 0) return;
  TESSERA_EXPECTS(segments < (std::uint64_t(1) << 31), segments << " tile segments");
  if constexpr (std::is_same_v<T, double>) {
    TESSERA_EXPECTS(prec == TcPrecision::fp64, "double tiles run in fp64");
    launch_p<double, TcPrecision::fp64>(stream, p, segments);
  } else {
    switch (prec) {
      case TcPrecision::tf32:
        launch_p<float, TcPrecision::tf32>(stream, p, segments);
        break;
      case TcPrecision::tf32x3:
        launch_p<float, TcPrecision::tf32x3>(stream, p, segments);
        break;
      case TcPrecision::bf16:
        launch_p<float, TcPrecision::bf16>(stream, p, segments);
        break;
      case TcPrecision::fp64:
        TESSERA_EXPECTS(false, "fp64 tiles need a double tensor");
    }
  }
}

template void launch_tc_tiles<float>(cudaStream_t, const TcParams<float>&, std::uint64_t,
                                     TcPrecision);
template void launch_tc_tiles<double>(cudaStream_t, const TcParams<double>&, std::uint64_t,
                                      TcPrecision);

}  // namespace tessera::kernels::cuda::mttkrp_detail
