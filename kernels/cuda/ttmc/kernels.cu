// CUDA TTMc: Y(i, :) = sum over the nonzeros with i_n = i of val * kron(U_m(i_m, :), m != n),
// on the copy of the nonzeros sorted by the output mode n (layout in kernels/ttmc.hpp).
//
// Each warp owns a tile of kTtmcTileNnz (p.tile) consecutive nonzeros and a slice of 32 * W output
// columns (grid y). Lane l owns the W consecutive columns c0 = slice * 32W + l * W. W divides
// the rank R_L of the last input mode (the fastest in the Kronecker order), so the lane's
// columns share one prefix p = c0 / R_L (a digit d_s for each other input mode, fixed for
// the lane) and cover R_L-columns r0 .. r0 + W - 1 of the last mode. Per nonzero a lane
// multiplies the value by one element of each other input mode's row (nin - 1 loads) and
// adds that prefix times W consecutive elements of the last mode's row (vector loads):
// W FMAs per lane, no shared memory, no per-nonzero atomics. A register-blocked variant
// (ttmc_block_kernel, below) takes the common shapes.
//
// Nonzeros are loaded 32 at a time, one per lane (coalesced, streaming loads), and
// broadcast with __shfl_sync. A row's sums stay in registers while the output index does
// not change; a finished row is written once: rows whose run lies wholly inside the tile
// with plain stores (no other warp touches them when the copy has one run per row), the
// first and last row of the tile with atomicAdd (a neighbouring tile, or chunk, may share
// them). Copies with several runs per row (blocked layouts) add every row with atomics.
//
// Which kernel runs: order 3 in float with ranks (8, 16 or 32) x (8, 16 or 32) takes the
// tensor-core kernel (tc.cuh, 3xTF32, float accuracy; with --gather-precision fp16 | bf16 it
// gathers 16-bit copies of the factors and multiplies in one tf32 product instead); otherwise
// the register-blocked kernel where the ranks allow, else the tile kernel. --ttmc-kernel cores
// (Tuning::ttmc_kernel) keeps to the CUDA-core kernels (A/B runs, tests).
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda/ttmc/kernels.cuh"
#include "kernels/cuda/ttmc/tc.cuh"

namespace tessera::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

/// kNin: input modes known at compile time (2: order 3), or 0 for any order.
template <typename T, int W, int kNin>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, 4)
    ttmc_tile_kernel(const __grid_constant__ TtmcParams<T> p) {
  constexpr int kMaxIn = kNin > 0 ? kNin : kMaxOrder - 1;
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t begin = warp * p.tile;
  if (begin >= p.nnz) return;
  const std::int64_t end = min(begin + static_cast<std::int64_t>(p.tile), p.nnz);
  const int nin = kNin > 0 ? kNin : p.nin;

  // This lane's columns: prefix digits (fixed) and the run r0 .. r0 + W - 1 of the last mode.
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.y) * (kWarp * W) + lane * W;
  const bool active = col0 < p.C;
  const int RL = p.in_rank[nin - 1];
  std::int64_t prefix = active ? col0 / RL : 0;
  const int r0 = active ? static_cast<int>(col0 % RL) : 0;
  const T* fac[kMaxIn];  // prefix modes: the lane's column of the factor
  int stride[kMaxIn];
#pragma unroll
  for (int s = kMaxIn - 1; s >= 0; --s) {
    if (s < nin - 1) {
      const int R = p.in_rank[s];
      fac[s] = p.factors[p.in_mode[s]] + static_cast<int>(prefix % R);
      stride[s] = R;
      prefix /= R;
    }
  }
  const T* last = p.factors[p.in_mode[nin - 1]] + r0;

  T acc[W];
#pragma unroll
  for (int w = 0; w < W; ++w) acc[w] = T(0);
  index_t cur = 0;
  bool have = false, first = true;
  auto flush = [&](index_t row, bool atomic) {
    if (active) {
      T* o = p.out + static_cast<std::size_t>(__ldg(p.pos + row)) * static_cast<std::size_t>(p.C) +
             col0;
      if (atomic) {
#pragma unroll
        for (int w = 0; w < W; ++w) atomicAdd(o + w, acc[w]);
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) o[w] = acc[w];
      }
    }
#pragma unroll
    for (int w = 0; w < W; ++w) acc[w] = T(0);
  };

  const index_t* rows = p.idx[p.mode];
  for (std::int64_t b = begin; b < end; b += kWarp) {
    const std::int64_t k = b + lane;
    const bool ok = k < end;
    const index_t my_row = ok ? __ldcs(rows + k) : 0;
    const T my_val = ok ? __ldcs(p.vals + k) : T(0);
    index_t my_in[kMaxIn];
#pragma unroll
    for (int s = 0; s < kMaxIn; ++s)
      if (s < nin) my_in[s] = ok ? __ldcs(p.idx[p.in_mode[s]] + k) : 0;
    const int cnt = static_cast<int>(min(static_cast<std::int64_t>(kWarp), end - b));
#pragma unroll 4
    for (int j = 0; j < cnt; ++j) {
      const index_t row = __shfl_sync(kFullMask, my_row, j);
      if (!have || row != cur) {  // warp-uniform
        if (have) {
          flush(cur, first || !p.exclusive);
          first = false;
        }
        cur = row;
        have = true;
      }
      T pre = __shfl_sync(kFullMask, my_val, j);
#pragma unroll
      for (int s = 0; s < kMaxIn; ++s)
        if (s < nin - 1) {
          const index_t i = __shfl_sync(kFullMask, my_in[s], j);
          pre *= __ldg(fac[s] + static_cast<std::size_t>(i) * static_cast<std::size_t>(stride[s]));
        }
      const index_t iL = __shfl_sync(kFullMask, my_in[nin - 1], j);
      T u[W];
      load_run<T, W>(last + static_cast<std::size_t>(iL) * static_cast<std::size_t>(RL), u);
#pragma unroll
      for (int w = 0; w < W; ++w) acc[w] = fma(pre, u[w], acc[w]);
    }
  }
  if (have) flush(cur, true);
}

// ---- register-blocked kernel (the common case) ----
//
// When the last input mode's rank R_L is 4, 8, 16, 32 or 64 and the one before it (the
// fastest digit of the prefix) has a rank divisible by 4, a lane owns a 4 x 4 block of
// outputs: 4 consecutive prefixes (digits d .. d + 3 of mode nin - 2, the other prefix
// digits fixed) times 4 consecutive columns of the last mode. Per nonzero that is two
// 16-byte loads and 16 FMAs (the general kernel needs about twice the instructions per
// FMA). A group of G lanes (16, 8 or 4) covers R_L / 4 column blocks x G / (R_L / 4)
// prefix blocks = 16 G outputs; the 32 / G groups of a warp work on their own parts of the
// warp's tile (sub-tiles of p.tile G / 32 nonzeros), each with its own rows, so a warp
// handles 32 / G nonzeros per step. Column slices (grid y) cover further prefixes. G is
// the fewest lanes (of 4, 8, 16) that cover all of the output's blocks (block_group; some
// may still be idle, e.g. R_L = 4 with 4 prefixes): C = 64 (ranks 8 x 8) takes groups of
// 4, where a group of 16 left 12 lanes idle.
constexpr int kGroup = 16;  ///< the largest group
constexpr int kBlk = 4;

template <typename T>
__device__ __forceinline__ void load4(const T* __restrict__ p, T (&u)[kBlk]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    u[0] = v.x, u[1] = v.y, u[2] = v.z, u[3] = v.w;
  } else {
    const double2 v0 = __ldg(reinterpret_cast<const double2*>(p));
    const double2 v1 = __ldg(reinterpret_cast<const double2*>(p) + 1);
    u[0] = v0.x, u[1] = v0.y, u[2] = v1.x, u[3] = v1.y;
  }
}

template <typename T, int kNin, int U, int kMinB, bool kPrefetch, int kG>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kMinB)
    ttmc_block_kernel(const __grid_constant__ TtmcParams<T> p) {
  static_assert(kG == 4 || kG == 8 || kG == kGroup, "groups of 4, 8 or 16 lanes");
  static_assert(kG % U == 0, "a group's batch is whole steps");
  constexpr int kMaxIn = kNin > 0 ? kNin : kMaxOrder - 1;
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int g = lane / kG, q = lane % kG;
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int sub = p.tile / (kWarp / kG);  // p.tile is a multiple of 32: sub of kG
  const std::int64_t begin = warp * p.tile + g * sub;
  if (warp * p.tile >= p.nnz) return;  // warp-uniform
  const std::int64_t end = min(begin + static_cast<std::int64_t>(sub), p.nnz);
  const int nin = kNin > 0 ? kNin : p.nin;

  // Lane block: prefixes pb .. pb + 3 (consecutive digits of mode nin - 2), columns
  // r0 .. r0 + 3 of the last mode.
  const int RL = p.in_rank[nin - 1];
  const int nr = RL / kBlk, np = kG / nr;
  const int lr = q % nr, lp = q / nr;
  const std::int64_t NP = p.C / RL;
  const std::int64_t pb = (static_cast<std::int64_t>(blockIdx.y) * np + lp) * kBlk;
  const bool active = pb < NP;
  const int r0 = lr * kBlk;
  std::int64_t rest = active ? pb : 0;
  const T* fac[kMaxIn];
  int stride[kMaxIn];
#pragma unroll
  for (int s = kMaxIn - 1; s >= 0; --s) {
    if (s < nin - 1) {
      const int R = p.in_rank[s];
      fac[s] = p.factors[p.in_mode[s]] + static_cast<int>(rest % R);
      stride[s] = R;
      rest /= R;
    }
  }
  const T* last = p.factors[p.in_mode[nin - 1]] + r0;

  T acc[kBlk][kBlk];
#pragma unroll
  for (int x = 0; x < kBlk; ++x)
#pragma unroll
    for (int y = 0; y < kBlk; ++y) acc[x][y] = T(0);
  index_t cur = 0;
  bool have = false, first = true;
  auto flush = [&](index_t row, bool atomic) {
    if (active) {
      T* o = p.out + static_cast<std::size_t>(__ldg(p.pos + row)) * static_cast<std::size_t>(p.C) +
             static_cast<std::size_t>(pb) * static_cast<std::size_t>(RL) + r0;
#pragma unroll
      for (int x = 0; x < kBlk; ++x)
#pragma unroll
        for (int y = 0; y < kBlk; ++y) {
          if (atomic)
            atomicAdd(o + x * RL + y, acc[x][y]);
          else
            o[x * RL + y] = acc[x][y];
        }
    }
#pragma unroll
    for (int x = 0; x < kBlk; ++x)
#pragma unroll
      for (int y = 0; y < kBlk; ++y) acc[x][y] = T(0);
  };

  // Pipelined: a group's kG nonzeros of the next batch are loaded (coalesced, streaming)
  // while the current batch runs, and a lane takes U nonzeros per step, issuing all of
  // their factor-row gathers before the first FMA, so that neither the tensor's HBM
  // latency nor the gathers' L2 latency is paid once per nonzero.
  const index_t* rows = p.idx[p.mode];
  index_t my_row = 0, nx_row = 0;
  T my_val = T(0), nx_val = T(0);
  index_t my_in[kMaxIn], nx_in[kMaxIn];
  auto load_batch = [&](int b, index_t& r, T& v, index_t(&in)[kMaxIn]) {
    const std::int64_t k = begin + b + q;
    const bool ok = b < sub && k < end;
    r = ok ? __ldcs(rows + k) : 0;
    v = ok ? __ldcs(p.vals + k) : T(0);
#pragma unroll
    for (int s = 0; s < kMaxIn; ++s)
      if (s < nin) in[s] = ok ? __ldcs(p.idx[p.in_mode[s]] + k) : 0;
  };
  load_batch(0, my_row, my_val, my_in);
  for (int b = 0; b < sub; b += kG) {  // the same trip count in every group
    if constexpr (kPrefetch) load_batch(b + kG, nx_row, nx_val, nx_in);
#pragma unroll 1
    for (int j = 0; j < kG; j += U) {
      index_t row[U];
      T pre[U], a[U][kBlk], u[U][kBlk];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        // Broadcast inside each group (all groups shuffle together: no divergence here).
        row[t] = __shfl_sync(kFullMask, my_row, j + t, kG);
        pre[t] = __shfl_sync(kFullMask, my_val, j + t, kG);
        index_t ii[kMaxIn];
#pragma unroll
        for (int s = 0; s < kMaxIn; ++s)
          if (s < nin) ii[s] = __shfl_sync(kFullMask, my_in[s], j + t, kG);
#pragma unroll
        for (int s = 0; s < kMaxIn; ++s)
          if (s < nin - 2)
            pre[t] *= __ldg(fac[s] +
                            static_cast<std::size_t>(ii[s]) * static_cast<std::size_t>(stride[s]));
        load4<T>(fac[nin - 2] + static_cast<std::size_t>(ii[nin - 2]) *
                                    static_cast<std::size_t>(stride[nin - 2]),
                 a[t]);
        load4<T>(last + static_cast<std::size_t>(ii[nin - 1]) * static_cast<std::size_t>(RL), u[t]);
      }
#pragma unroll
      for (int t = 0; t < U; ++t) {
        if (begin + b + j + t >= end) break;  // this group's sub-tile is done
        if (!have || row[t] != cur) {
          if (have) {
            flush(cur, first || !p.exclusive);
            first = false;
          }
          cur = row[t];
          have = true;
        }
#pragma unroll
        for (int x = 0; x < kBlk; ++x) {
          const T ax = a[t][x] * pre[t];
#pragma unroll
          for (int y = 0; y < kBlk; ++y) acc[x][y] = fma(ax, u[t][y], acc[x][y]);
        }
      }
    }
    if constexpr (kPrefetch) {
      my_row = nx_row;
      my_val = nx_val;
#pragma unroll
      for (int s = 0; s < kMaxIn; ++s) my_in[s] = nx_in[s];
    } else {
      load_batch(b + kG, my_row, my_val, my_in);
    }
  }
  if (have) flush(cur, true);
}

/// Whether the register-blocked kernel applies (see above ttmc_block_kernel).
template <typename T>
bool block_kernel_fits(const TtmcParams<T>& p) {
  if (p.nin < 2) return false;
  const int RL = p.in_rank[p.nin - 1], RP = p.in_rank[p.nin - 2];
  if (RL % kBlk != 0 || RL > kGroup * kBlk || kGroup % (RL / kBlk) != 0) return false;
  if (RP % kBlk != 0) return false;
  for (int s : {p.nin - 1, p.nin - 2})
    if (reinterpret_cast<std::uintptr_t>(p.factors[p.in_mode[s]]) % 16 != 0) return false;
  return reinterpret_cast<std::uintptr_t>(p.out) % sizeof(T) == 0;
}

/// Lanes of a register-blocked group (4, 8 or 16): the fewest that cover the R_L / 4 column
/// blocks and every prefix block of the output, else 16 (with column slices). Fewer lanes
/// per group mean more groups per warp, each on its own nonzeros, instead of idle lanes.
int block_group(int RL, std::int64_t C) {
  const int nr = RL / kBlk;
  const std::int64_t prefix_blocks = (C / RL + kBlk - 1) / kBlk;
  for (int G : {4, 8})
    if (G % nr == 0 && static_cast<std::int64_t>(G / nr) >= prefix_blocks) return G;
  return kGroup;
}

template <typename T, int kNin, int U, int kMinB, bool kPrefetch>
void launch_block(cudaStream_t stream, const TtmcParams<T>& p, int G, dim3 grid) {
  constexpr unsigned kThreads = kWarpsPerBlock * kWarp;
  if (G == 4)
    ttmc_block_kernel<T, kNin, U, kMinB, kPrefetch, 4><<<grid, kThreads, 0, stream>>>(p);
  else if (G == 8)
    ttmc_block_kernel<T, kNin, U, kMinB, kPrefetch, 8><<<grid, kThreads, 0, stream>>>(p);
  else
    ttmc_block_kernel<T, kNin, U, kMinB, kPrefetch, kGroup><<<grid, kThreads, 0, stream>>>(p);
}

template <typename T, int W>
void launch_w(cudaStream_t stream, const TtmcParams<T>& p, dim3 grid) {
  if (p.nin == 2)
    ttmc_tile_kernel<T, W, 2><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(p);
  else
    ttmc_tile_kernel<T, W, 0><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_ttmc(cudaStream_t stream, const TtmcParams<T>& in, const Tuning& tuning) {
  if (in.nnz <= 0) return;
  TtmcParams<T> p = in;
  // Nonzeros per warp tile: kTtmcTileNnz, or --ttmc-tile (a multiple of 32 in 64 .. 65536,
  // checked by kernels::check; for tuning).
  p.tile = tuning.ttmc_tile > 0 ? tuning.ttmc_tile : kTtmcTileNnz;
  TESSERA_EXPECTS(p.nin >= 1 && p.nin < kMaxOrder, "TTMc with " << p.nin << " input modes");
  const int RL = p.in_rank[p.nin - 1];
  // The widest run of the last mode's row a lane can own: W divides R_L, and the row
  // segments are aligned for the vector loads.
  const auto base = reinterpret_cast<std::uintptr_t>(p.factors[p.in_mode[p.nin - 1]]);
  int W = 1;
  if (RL % 8 == 0 && base % 16 == 0)
    W = 8;
  else if (RL % 2 == 0 && base % (2 * sizeof(T)) == 0)
    W = 2;
  const std::int64_t tiles = (p.nnz + p.tile - 1) / p.tile;
  const std::int64_t bx = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(bx <= std::numeric_limits<int>::max(),
                  "TTMc launch too large: " << p.nnz << " nonzeros; split the block");
  if constexpr (std::is_same_v<T, float>) {
    if (tuning.ttmc_kernel != TtmcKernel::cores && ttmc_tc::fits(p)) {
      ttmc_tc::launch(stream, p, static_cast<unsigned>(bx));
      return;
    }
  }
  if (block_kernel_fits(p)) {
    const int G = block_group(RL, p.C);
    const int np = G / (RL / kBlk);
    const std::int64_t prefixes = p.C / RL;
    const std::int64_t by = (prefixes + np * kBlk - 1) / (np * kBlk);
    TESSERA_EXPECTS(bx <= std::numeric_limits<int>::max() && by <= 65535,
                    "TTMc launch too large: " << p.nnz << " nonzeros, " << p.C
                                              << " columns; split the block or lower the ranks");
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by));
    // float: register-blocked, 4 nonzeros per lane step, 2 blocks per SM, prefetched (no
    // spills): measured fastest of 8 variants on an H200 (docs/perf/gpu-h200-tucker.md).
    // double: one nonzero per step (more registers per step spill: 2x slower measured).
    constexpr bool kFloat = std::is_same_v<T, float>;
    constexpr int kStep = kFloat ? 4 : 1, kMinBlocks = kFloat ? 2 : 3;
    if (p.nin == 2)
      launch_block<T, 2, kStep, kMinBlocks, kFloat>(stream, p, G, grid);
    else if (p.nin == 3)
      launch_block<T, 3, kStep, kMinBlocks, kFloat>(stream, p, G, grid);
    else
      launch_block<T, 0, 1, 3, false>(stream, p, G, grid);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const std::int64_t by = (p.C + kWarp * W - 1) / (kWarp * W);
  TESSERA_EXPECTS(bx <= std::numeric_limits<int>::max() && by <= 65535,
                  "TTMc launch too large: " << p.nnz << " nonzeros, " << p.C
                                            << " columns; split the block or lower the ranks");
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by));
  if (W == 8)
    launch_w<T, 8>(stream, p, grid);
  else if (W == 2)
    launch_w<T, 2>(stream, p, grid);
  else
    launch_w<T, 1>(stream, p, grid);
}

bool ttmc_takes_low(const TtmcParams<float>& p, const Tuning& tuning) {
  return tuning.ttmc_kernel != TtmcKernel::cores && ttmc_tc::fits(p);
}

template void launch_ttmc<float>(cudaStream_t, const TtmcParams<float>&, const Tuning&);
template void launch_ttmc<double>(cudaStream_t, const TtmcParams<double>&, const Tuning&);

}  // namespace tessera::kernels::cuda
