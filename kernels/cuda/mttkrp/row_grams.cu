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
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/mttkrp/internal.cuh"

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

}  // namespace

template <typename T>
void row_grams(Context& ctx, const TensorHandle<T>& xh, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out) {
  const int W = R * (R + 1) / 2;
  if (R > kWarp) {  // the pattern's MTTKRP with the packed outer products
    cuda::mttkrp(ctx, xh, mode, packed, W, out);
    return;
  }
  GramParams p{};
  const CudaTensorHandle<T>& x = checked_handle(ctx, xh, mode, factors, R, p.factors);
  const int N = x.order();
  p.out = out;
  p.order = N;
  p.mode = mode;
  p.R = R;
  p.W = W;
  const std::size_t out_bytes =
      static_cast<std::size_t>(x.dims()[mode]) * static_cast<std::size_t>(W) * sizeof(T);
  over_copy(ctx, x, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool /*resident*/) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = static_cast<std::int64_t>(cnt);
              p.tile = wave_tile(p.nnz, kGramBlocksPerSm * kGramWarps, kGramTile, kWarp);
              launch_row_grams<T>(ctx.stream, p);
            });
  x.note_kernel(mode, "row Grams (fused)", R, kernel_selection(ctx.tuning));
}

template void row_grams<float>(Context&, const TensorHandle<float>&, int,
                               const std::vector<const float*>&, const std::vector<const float*>&,
                               int, float*);
template void row_grams<double>(Context&, const TensorHandle<double>&, int,
                                const std::vector<const double*>&,
                                const std::vector<const double*>&, int, double*);

}  // namespace tessera::kernels::cuda
