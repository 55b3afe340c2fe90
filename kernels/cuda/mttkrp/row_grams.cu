// Completion CP's row Grams in one pass (ops::row_grams, issue 43): for each row i of the
// output mode, G_i = sum over its stored entries of x_k h h^T, h = the Hadamard product of
// the other factors' rows, written packed ((a, b) with a <= b, row by row:
// linalg::pack_outer). Completion passes its pattern, whose values are 1.
//
// The generic way, which the other backends, a streamed handle and R > 32 here take, is the
// MTTKRP of the pattern with the factors' packed outer products: W = R(R+1)/2 wide rows (528
// values at R = 32) gathered per nonzero and mode, in 32-column passes. Here a warp reads
// the R-wide rows once per nonzero and forms the products in registers:
//   - a batch of 32 nonzeros of the warp's tile: lane j loads nonzero j's coordinates and
//     value (coalesced); per input mode the warp gathers the batch's 32 rows (lane c: column c,
//     the loads of a batch independent of each other) and multiplies them into h, one
//     register per nonzero of the batch, then stores the batch's h in shared memory
//     (32 x 32 per warp; columns >= R are zero);
//   - each lane owns a BA x BB block of the RP x RP Gram (RP = R rounded up to 8, 16 or 32;
//     lanes as an 8 x 4 grid of blocks) in registers and adds h[a] h[b] for each nonzero of
//     the current row, reading h from shared memory (every lane of a row of the grid reads
//     the same words: broadcasts), the value folded into h[a];
//   - when the row changes, and at the end of the tile, the lanes add their entries with
//     a <= b < R to the packed output with atomics. So the result does not depend on the
//     order of the copy (plain, l2 or smem layout, tier-2 chunks), only on the nonzeros.
// Work per nonzero: R gathered values per input mode and RP^2 / 32 FMAs per lane, against
// (N - 1) W gathered values and W multiply-adds for the pattern MTTKRP.
//
// In float (and unless --tensor-cores off) the products run on the tensor cores in
// 3xTF32 (kernels/cuda/runtime/mma_tf32.cuh), as the tensor-core TTMc does: for a row i,
// G_i = H^T diag(x) H with H (n_i x RP) the rows h of its nonzeros, a matrix product whose
// inner dimension is the row's nonzeros. A warp takes its tile's nonzeros 8 at a time (the k
// of mma.m16n8k8): lane (g, t) gathers columns g, g + 8, .. of h for nonzeros t and t + 4
// (8 lanes read 32 consecutive bytes of a factor row), and the warp multiplies the RP / 16
// x RP / 8 tiles of 16 x 8 entries that hold some a <= b (at RP = 32, 6 of 8), accumulating
// in float registers. Nonzeros of the 8 in another row are masked and taken by a further
// pass after the current row is flushed (packed entries a <= b < R, with atomics).
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/mttkrp/internal.cuh"
#include "kernels/cuda/runtime/mma_tf32.cuh"

namespace tessera::kernels::cuda {

using namespace mttkrp_detail;

namespace {

constexpr int kGramWarps = 4;  ///< warps per block (shared memory: 32 x 32 values each)
/// Blocks per SM that wave_tile counts on (what the registers allow is 3 at R 32: -Xptxas -v).
constexpr int kGramBlocksPerSm = 8;
/// Nonzeros per warp tile, at most: 32 batches (fewer on small tensors: wave_tile).
constexpr int kGramTile = 32 * kWarp;

struct GramParams {
  const index_t* idx[kMaxOrder];  ///< coordinate arrays of the copy sorted by `mode`
  const void* vals;               ///< its values
  const void* factors[kMaxOrder];
  void* out;
  void* rhs;  ///< completion_rows: the MTTKRP of the values (dims[mode] x R); else null
  std::int64_t nnz;
  int order;
  int mode;
  int R;
  int W;
  int tile;
};

template <typename T, int RP>
__global__ void __launch_bounds__(kGramWarps* kWarp)
    row_grams_kernel(const __grid_constant__ GramParams p) {
  constexpr int BA = RP / 8, BB = RP / 4;  // 8 x 4 lanes, each a BA x BB block
  __shared__ T hs[kGramWarps][kWarp][kWarp];
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int wib = static_cast<int>(threadIdx.x) / kWarp;
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * kGramWarps + wib;
  const std::int64_t begin = warp * p.tile;
  if (begin >= p.nnz) return;  // whole warp leaves together
  const std::int64_t end = begin + p.tile < p.nnz ? begin + p.tile : p.nnz;
  const int a0 = (lane / 4) * BA, b0 = (lane % 4) * BB;
  const int R = p.R;
  T(*h)[kWarp] = hs[wib];
  T acc[BA][BB];
#pragma unroll
  for (int x = 0; x < BA; ++x)
#pragma unroll
    for (int y = 0; y < BB; ++y) acc[x][y] = T(0);
  std::int64_t cur = -1;

  auto flush = [&]() {
    if (cur < 0) return;
    T* o = static_cast<T*>(p.out) + cur * static_cast<std::int64_t>(p.W);
#pragma unroll
    for (int x = 0; x < BA; ++x) {
      const int a = a0 + x;
      const int row_off = a * R - a * (a - 1) / 2 - a;  // packed (a, b) = row_off + b
#pragma unroll
      for (int y = 0; y < BB; ++y) {
        const int b = b0 + y;
        if (a <= b && b < R) atomicAdd(o + row_off + b, acc[x][y]);
        acc[x][y] = T(0);
      }
    }
  };

  for (std::int64_t s = begin; s < end; s += kWarp) {
    const int cnt = end - s < kWarp ? static_cast<int>(end - s) : kWarp;
    const bool valid = lane < cnt;
    const std::int64_t k = s + lane;
    const bool col_ok = lane < R;
    T hv[kWarp];
#pragma unroll
    for (int j = 0; j < kWarp; ++j) hv[j] = col_ok ? T(1) : T(0);
    for (int m = 0; m < p.order; ++m) {
      if (m == p.mode) continue;
      const index_t my_c = valid ? __ldcs(p.idx[m] + k) : 0;
      const T* A = static_cast<const T*>(p.factors[m]) + lane;
#pragma unroll
      for (int j = 0; j < kWarp; ++j) {
        const index_t cj = __shfl_sync(kFullMask, my_c, j);
        if (col_ok && j < cnt)
          hv[j] *= __ldg(A + static_cast<std::size_t>(cj) * static_cast<std::size_t>(R));
      }
    }
    __syncwarp();  // the previous batch's readers of h are done
#pragma unroll
    for (int j = 0; j < kWarp; ++j) h[j][lane] = hv[j];
    __syncwarp();
    const index_t my_row = valid ? __ldcs(p.idx[p.mode] + k) : 0;
    const T my_val = valid ? __ldcs(static_cast<const T*>(p.vals) + k) : T(0);
    for (int j = 0; j < cnt; ++j) {
      const auto rj = static_cast<std::int64_t>(__shfl_sync(kFullMask, my_row, j));
      if (rj != cur) {  // uniform over the warp
        flush();
        cur = rj;
      }
      const T vj = __shfl_sync(kFullMask, my_val, j);
      T ha[BA], hb[BB];
#pragma unroll
      for (int x = 0; x < BA; ++x) ha[x] = vj * h[j][a0 + x];
#pragma unroll
      for (int y = 0; y < BB; ++y) hb[y] = h[j][b0 + y];
#pragma unroll
      for (int x = 0; x < BA; ++x)
#pragma unroll
        for (int y = 0; y < BB; ++y) acc[x][y] += ha[x] * hb[y];
    }
  }
  flush();
}

template <typename T>
void launch_row_grams(cudaStream_t stream, const GramParams& p) {
  const std::int64_t warps = (p.nnz + p.tile - 1) / p.tile;
  const std::int64_t blocks = (warps + kGramWarps - 1) / kGramWarps;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  const auto grid = static_cast<unsigned>(blocks);
  if (p.R <= 8)
    row_grams_kernel<T, 8><<<grid, kGramWarps * kWarp, 0, stream>>>(p);
  else if (p.R <= 16)
    row_grams_kernel<T, 16><<<grid, kGramWarps * kWarp, 0, stream>>>(p);
  else
    row_grams_kernel<T, 32><<<grid, kGramWarps * kWarp, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// ---- the tensor-core kernel (float) ----

constexpr int kGramTcWarps = 8;  ///< warps per block
/// Nonzeros per warp tile, at most (fewer on small tensors: wave_tile).
constexpr int kGramTcTile = 1024;
/// Blocks per SM the kernel is compiled for: 2 at RP = 32 (96-128 registers), 4 below (at
/// most 64 registers, no spills: -Xptxas -v; at 3 blocks the fused R 16 kernel took 70 and
/// ran at 37.5% occupancy, its register limit: docs/perf/gpu-h200-floors.md, session 21).
template <int RP>
constexpr int kGramTcBlocksPerSm = RP >= 32 ? 2 : 4;

/// RP = 8, 16 or 32: Q = RP / 8 columns of h per lane and nonzero, MT = max(RP / 16, 1) tiles
/// of 16 Gram rows, NT = RP / 8 tiles of 8 Gram columns. kOrder3: the two input modes'
/// coordinates stay in registers (one shuffle each per nonzero); else every input mode's go
/// through shared memory. kFull: R = RP, no column is padding. kUnit (RP >= 16): every value
/// is 1 (completion's pattern), so A = H^T holds the same words as B = H: lane (g, t) of A's
/// fragment for tile mt has h at columns 16 mt + g (+ 8) of nonzeros t (+ 4), which are its
/// B fragments of tiles 2 mt and 2 mt + 1. A then reuses B's split: no multiply by the
/// value, 4 splits per tile row fewer.
/// kRhs (ops::completion_rows): the values are the data's; the Grams are the pattern's (the
/// values not read, A as for kUnit) and p.rhs gets the MTTKRP of the values, sum x_k h, on
/// the CUDA cores: lane (g, t) adds x h at columns g + 8 q of its two nonzeros, and a flush
/// sums the four lanes t of a column (two shuffles) and adds it with one atomic.
template <int RP, bool kOrder3, bool kFull, bool kUnit, bool kRhs>
__global__ void __launch_bounds__(kGramTcWarps* kWarp, kGramTcBlocksPerSm<RP>)
    row_grams_tc_kernel(const __grid_constant__ GramParams p) {
  constexpr int Q = RP / 8, MT = RP >= 16 ? RP / 16 : 1, NT = RP / 8;
  static_assert(!kUnit || RP >= 16, "kUnit takes A's columns 16 mt .. 16 mt + 15 from B's tiles");
  static_assert(!(kUnit && kRhs), "kRhs reads the values as the data's");
  constexpr bool kReuseA = kUnit || (kRhs && RP >= 16);  // A's fragments are B's
  constexpr bool kWeighted = !kUnit && !kRhs;            // the Grams weighted by the values
  __shared__ index_t coords[kOrder3 ? 1 : kGramTcWarps][kOrder3 ? 1 : kMaxOrder][kWarp];
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int wib = static_cast<int>(threadIdx.x) / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t begin = (static_cast<std::int64_t>(blockIdx.x) * kGramTcWarps + wib) * p.tile;
  if (begin >= p.nnz) return;  // whole warp
  const std::int64_t end = min(begin + static_cast<std::int64_t>(p.tile), p.nnz);
  const int R = kFull ? RP : p.R;
  const auto* vals = static_cast<const float*>(p.vals);
  // Whether tile (mt, nt) holds an entry a <= b: its last column reaches its first row.
  auto needed = [](int mt, int nt) { return 8 * nt + 7 >= 16 * mt; };
  // Whether column g + 8 q of h exists (compile-time true when kFull).
  auto col_ok = [&](int q) { return kFull || g + 8 * q < R; };
  // The order-3 path's two input modes and factors.
  const int in0 = p.mode == 0 ? 1 : 0, in1 = p.mode == 2 ? 1 : 2;
  const float* F0 = static_cast<const float*>(p.factors[in0]) + g;
  const float* F1 = static_cast<const float*>(p.factors[in1]) + g;

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  float racc[kRhs ? Q : 1];
#pragma unroll
  for (int q = 0; q < (kRhs ? Q : 1); ++q) racc[q] = 0.f;
  index_t cur = 0;
  bool have = false;
  auto flush = [&]() {  // uniform over the warp (the shuffles of kRhs)
    if constexpr (kRhs) {
      float* ro = static_cast<float*>(p.rhs) +
                  static_cast<std::size_t>(cur) * static_cast<std::size_t>(R) + g;
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        float v = racc[q];
        v += __shfl_xor_sync(kFullMask, v, 1);
        v += __shfl_xor_sync(kFullMask, v, 2);
        if (t == 0 && col_ok(q)) atomicAdd(ro + 8 * q, v);
        racc[q] = 0.f;
      }
    }
    float* o =
        static_cast<float*>(p.out) + static_cast<std::size_t>(cur) * static_cast<std::size_t>(p.W);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (!needed(mt, nt)) continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int a = mt * 16 + g + 8 * (e >> 1), b = nt * 8 + 2 * t + (e & 1);
          if (a <= b && b < R) atomicAdd(o + (a * R - a * (a - 1) / 2 - a) + b, acc[mt][nt][e]);
          acc[mt][nt][e] = 0.f;
        }
      }
  };

  for (std::int64_t s = begin; s < end; s += kWarp) {
    // A batch of 32 nonzeros: lane j loads nonzero j's row, value and input coordinates
    // (coalesced, streaming).
    const int cnt32 = end - s < kWarp ? static_cast<int>(end - s) : kWarp;  // uniform
    const bool mine = lane < cnt32;
    const index_t my_row = mine ? __ldcs(p.idx[p.mode] + s + lane) : 0;
    const float my_val = mine ? __ldcs(vals + s + lane) : 0.f;
    index_t my_c0 = 0, my_c1 = 0;
    if constexpr (kOrder3) {
      my_c0 = mine ? __ldcs(p.idx[in0] + s + lane) : 0;
      my_c1 = mine ? __ldcs(p.idx[in1] + s + lane) : 0;
    } else {
      __syncwarp();  // the previous batch's readers of coords are done
      for (int m = 0; m < p.order; ++m)
        coords[wib][m][lane] = (mine && m != p.mode) ? __ldcs(p.idx[m] + s + lane) : 0;
      __syncwarp();
    }
#pragma unroll 1
    for (int c = 0; c < cnt32; c += 8) {
      // This lane's two nonzeros of the 8: c + t and c + t + 4; h at columns g + 8 q.
      index_t r[2];
      float v[2], hh[2][Q];
      bool done[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int src = c + t + 4 * h;
        r[h] = __shfl_sync(kFullMask, my_row, src);
        v[h] = __shfl_sync(kFullMask, my_val, src);
        done[h] = src >= cnt32;
      }
      if constexpr (kOrder3) {
        // Both rows' gathers are issued before the products (a done nonzero has coordinates
        // 0, a valid row, and value 0).
        float a0[2][Q], a1[2][Q];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int src = c + t + 4 * h;
          const auto j0 = static_cast<std::size_t>(__shfl_sync(kFullMask, my_c0, src));
          const auto j1 = static_cast<std::size_t>(__shfl_sync(kFullMask, my_c1, src));
#pragma unroll
          for (int q = 0; q < Q; ++q) {
            a0[h][q] = col_ok(q) ? __ldg(F0 + j0 * R + 8 * q) : 0.f;
            a1[h][q] = col_ok(q) ? __ldg(F1 + j1 * R + 8 * q) : 0.f;
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 0; q < Q; ++q) hh[h][q] = a0[h][q] * a1[h][q];
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 0; q < Q; ++q) hh[h][q] = col_ok(q) && !done[h] ? 1.f : 0.f;
        for (int m = 0; m < p.order; ++m) {
          if (m == p.mode) continue;
          const float* A = static_cast<const float*>(p.factors[m]) + g;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float* row = A + static_cast<std::size_t>(coords[wib][m][c + t + 4 * h]) *
                                       static_cast<std::size_t>(R);
#pragma unroll
            for (int q = 0; q < Q; ++q)
              if (col_ok(q) && !done[h]) hh[h][q] *= __ldg(row + 8 * q);
          }
        }
      }
      // One pass per output row present among the 8 (usually one).
      tf32::for_each_row(r, done, [&](index_t row, const bool(&mk)[2]) {
        if (!have || row != cur) {
          if (have) flush();
          cur = row;
          have = true;
        }
        // B (8 x 8, k = nonzero, n = Gram column 8 nt + g) = h; A (16 x 8, rows 16 mt + g
        // and + 8) = x h.
        std::uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) tf32::split(mk[h] ? hh[h][nt] : 0.f, bh[nt][h], bl[nt][h]);
        if constexpr (kRhs) {
#pragma unroll
          for (int q = 0; q < Q; ++q)
            racc[q] += (mk[0] ? v[0] * hh[0][q] : 0.f) + (mk[1] ? v[1] * hh[1][q] : 0.f);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          std::uint32_t ah[4], al[4];
          if constexpr (kReuseA) {
            ah[0] = bh[2 * mt][0], al[0] = bl[2 * mt][0];
            ah[1] = bh[2 * mt + 1][0], al[1] = bl[2 * mt + 1][0];
            ah[2] = bh[2 * mt][1], al[2] = bl[2 * mt][1];
            ah[3] = bh[2 * mt + 1][1], al[3] = bl[2 * mt + 1][1];
          } else {
            auto col = [&](int h, int q) {
              const float w = kWeighted ? v[h] : 1.f;
              return q < Q && mk[h] ? w * hh[h][q < Q ? q : 0] : 0.f;
            };
            tf32::split(col(0, 2 * mt), ah[0], al[0]);
            tf32::split(col(0, 2 * mt + 1), ah[1], al[1]);
            tf32::split(col(1, 2 * mt), ah[2], al[2]);
            tf32::split(col(1, 2 * mt + 1), ah[3], al[3]);
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            if (needed(mt, nt)) tf32::mma3(acc[mt][nt], ah, al, bh[nt], bl[nt]);
        }
      });
    }
  }
  if (have) flush();  // the last row may continue in the next tile
}

template <int RP, bool kUnit, bool kRhs = false>
void launch_row_grams_tc_rp(cudaStream_t stream, const GramParams& p, unsigned grid) {
  const bool order3 = p.order == 3, full = p.R == RP;
  const dim3 block(kGramTcWarps * kWarp);
  if (order3 && full)
    row_grams_tc_kernel<RP, true, true, kUnit, kRhs><<<grid, block, 0, stream>>>(p);
  else if (order3)
    row_grams_tc_kernel<RP, true, false, kUnit, kRhs><<<grid, block, 0, stream>>>(p);
  else
    row_grams_tc_kernel<RP, false, false, kUnit, kRhs><<<grid, block, 0, stream>>>(p);
}

/// unit: every value of the copy is 1 (CudaTensorHandle::unit_values); p.rhs set: the values
/// are the data's (completion_rows).
void launch_row_grams_tc(cudaStream_t stream, const GramParams& p, bool unit) {
  const std::int64_t warps = (p.nnz + p.tile - 1) / p.tile;
  const std::int64_t blocks = (warps + kGramTcWarps - 1) / kGramTcWarps;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  const auto grid = static_cast<unsigned>(blocks);
  if (p.rhs != nullptr) {
    if (p.R <= 8)
      launch_row_grams_tc_rp<8, false, true>(stream, p, grid);
    else if (p.R <= 16)
      launch_row_grams_tc_rp<16, false, true>(stream, p, grid);
    else
      launch_row_grams_tc_rp<32, false, true>(stream, p, grid);
  } else if (p.R <= 8)
    launch_row_grams_tc_rp<8, false>(stream, p, grid);
  else if (p.R <= 16 && unit)
    launch_row_grams_tc_rp<16, true>(stream, p, grid);
  else if (p.R <= 16)
    launch_row_grams_tc_rp<16, false>(stream, p, grid);
  else if (unit)
    launch_row_grams_tc_rp<32, true>(stream, p, grid);
  else
    launch_row_grams_tc_rp<32, false>(stream, p, grid);
  TESSERA_CUDA_CHECK_LAUNCH();
}

/// The one-pass kernels over the copy of x sorted by `mode` (R <= 32): grams (dims[mode] x
/// W, zeroed here) gets the rows' packed Grams, and rhs, where not null (the tensor-core
/// kernel only), the MTTKRP of the values (zeroed here).
template <typename T>
void grams_pass(Context& ctx, const TensorHandle<T>& xh, int mode,
                const std::vector<const T*>& factors, int R, T* grams, T* rhs, bool tc) {
  GramParams p{};
  const CudaTensorHandle<T>& x = checked_handle(ctx, xh, mode, factors, R, p.factors);
  const int N = x.order();
  const int W = R * (R + 1) / 2;
  p.out = grams;
  p.rhs = rhs;
  p.order = N;
  p.mode = mode;
  p.R = R;
  p.W = W;
  const auto rows = static_cast<std::size_t>(x.dims()[mode]);
  const std::size_t out_bytes = rows * static_cast<std::size_t>(W) * sizeof(T);
  if (rhs != nullptr)
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(rhs, 0, rows * static_cast<std::size_t>(R) * sizeof(T), ctx.stream));
  const KernelSelection selection = kernel_selection(ctx.tuning);
  const bool unit = tc && rhs == nullptr && x.unit_values();
  over_copy(ctx, x, mode, grams, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool /*resident*/) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = static_cast<std::int64_t>(cnt);
              if (p.nnz == 0) return;
              if (tc) {
                p.tile = wave_tile(
                    p.nnz, (R > 16 ? kGramTcBlocksPerSm<32> : kGramTcBlocksPerSm<16>)*kGramTcWarps,
                    kGramTcTile, kWarp);
                launch_row_grams_tc(ctx.stream, p, unit);
              } else {
                p.tile = wave_tile(p.nnz, kGramBlocksPerSm * kGramWarps, kGramTile, kWarp);
                launch_row_grams<T>(ctx.stream, p);
              }
            });
  x.note_kernel(mode,
                rhs != nullptr ? "MTTKRP and row Grams (fused, tensor cores 3xTF32)"
                : tc           ? "row Grams (fused, tensor cores 3xTF32)"
                               : "row Grams (fused)",
                R, selection);
}

/// Whether the tensor-core kernel takes this call (float, tensor cores not off).
template <typename T>
bool tc_grams(const Context& ctx) {
  return std::is_same_v<T, float> && ctx.tuning.tensor_cores != TensorCores::off;
}

}  // namespace

template <typename T>
void row_grams(Context& ctx, const TensorHandle<T>& xh, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out) {
  if (R > kWarp) {  // the pattern's MTTKRP with the packed outer products
    cuda::mttkrp(ctx, xh, mode, packed, R * (R + 1) / 2, out);
    return;
  }
  grams_pass(ctx, xh, mode, factors, R, out, static_cast<T*>(nullptr), tc_grams<T>(ctx));
}

template <typename T>
bool fuses_completion(const Context& ctx, int R) {
  return tc_grams<T>(ctx) && R >= 1 && R <= kWarp;
}

template <typename T>
void completion_rows(Context& ctx, const TensorHandle<T>& xh, int mode,
                     const std::vector<const T*>& factors, int R, T* out, T* grams) {
  TESSERA_EXPECTS(fuses_completion<T>(ctx, R),
                  "completion_rows at R = " << R
                                            << " without the fused kernel (float, tensor "
                                               "cores, R <= 32): ask fuses_completion first");
  TESSERA_EXPECTS(out != nullptr && grams != nullptr, "completion_rows needs both outputs");
  grams_pass(ctx, xh, mode, factors, R, grams, out, true);
}

template void row_grams<float>(Context&, const TensorHandle<float>&, int,
                               const std::vector<const float*>&, const std::vector<const float*>&,
                               int, float*);
template void row_grams<double>(Context&, const TensorHandle<double>&, int,
                                const std::vector<const double*>&,
                                const std::vector<const double*>&, int, double*);
template bool fuses_completion<float>(const Context&, int);
template bool fuses_completion<double>(const Context&, int);
template void completion_rows<float>(Context&, const TensorHandle<float>&, int,
                                     const std::vector<const float*>&, int, float*, float*);
template void completion_rows<double>(Context&, const TensorHandle<double>&, int,
                                      const std::vector<const double*>&, int, double*, double*);

}  // namespace tessera::kernels::cuda
