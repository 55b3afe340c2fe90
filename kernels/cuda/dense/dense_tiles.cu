// Tall-skinny dense passes: G = A^T A and D = S W on kQuad x kQuad micro-tiles, rows staged
// in shared memory as double (declarations and limits in dense_tiles.cuh).
#include <algorithm>
#include <cstddef>

#include "kernels/cuda/dense/dense_tiles.cuh"

namespace tessera::kernels::cuda {

namespace {

/// Threads per block of both kernels; each thread accumulates a kQuad x kQuad block of
/// outputs in double registers.
constexpr int kTileThreads = 256;
constexpr int kQuad = 4;
/// Blocks per SM the kernels are compiled for (at most 85 registers per thread: the
/// 16 accumulators and the operands fit without spilling).
constexpr int kTileMinBlocks = 3;
/// Shared memory (bytes) for the batch of rows a block of the Gram kernel stages as double.
constexpr int kStageBytes = 32 << 10;

// ---- Gram and M W: rows staged in shared memory as double, kQuad x kQuad micro-tiles ----

/// R rounded up to a multiple of kQuad: the stride of a staged row of the Gram kernel and
/// of W in the M W kernel.
__host__ __device__ constexpr int padded_r(int R) {
  return (R + kQuad - 1) / kQuad * kQuad;
}

/// Micro-tile t of the lower triangle, numbered row by row: t = qi (qi + 1) / 2 + qj,
/// qj <= qi.
__device__ __forceinline__ void lower_tile(int t, int& qi, int& qj) {
  int i = static_cast<int>((sqrt(8.0 * t + 1.0) - 1.0) * 0.5);
  while (i * (i + 1) / 2 > t) --i;  // rounding of sqrt
  while ((i + 1) * (i + 2) / 2 <= t) ++i;
  qi = i;
  qj = t - i * (i + 1) / 2;
}

/// Loads issued before the first store when staging rows (memory-level parallelism).
constexpr int kStageUnroll = 8;

/// dst[row * row_stride + col * col_stride] (double) = src[row * R + col] for the nv x R
/// row-major rows at src. Coalesced loads; (row, col) advance without a division.
template <typename T>
__device__ __forceinline__ void stage_rows(const T* src, int nv, int R, double* dst, int row_stride,
                                           int col_stride) {
  const int n = nv * R, step = static_cast<int>(blockDim.x);
  const int drow = step / R, dcol = step % R;
  int row = static_cast<int>(threadIdx.x) / R, col = static_cast<int>(threadIdx.x) % R;
  for (int e0 = static_cast<int>(threadIdx.x); e0 < n; e0 += kStageUnroll * step) {
    T v[kStageUnroll];
#pragma unroll
    for (int u = 0; u < kStageUnroll; ++u) {
      const int e = e0 + u * step;
      v[u] = e < n ? src[e] : T(0);
    }
#pragma unroll
    for (int u = 0; u < kStageUnroll; ++u) {
      if (e0 + u * step < n) dst[row * row_stride + col * col_stride] = static_cast<double>(v[u]);
      row += drow;
      col += dcol;
      if (col >= R) {
        col -= R;
        ++row;
      }
    }
  }
}

/// The reverse of stage_rows: dst[row * R + col] (T) = src[row * row_stride + col * col_stride].
template <typename T>
__device__ __forceinline__ void unstage_rows(const double* src, int nv, int R, T* dst,
                                             int row_stride, int col_stride) {
  const int n = nv * R, step = static_cast<int>(blockDim.x);
  const int drow = step / R, dcol = step % R;
  int row = static_cast<int>(threadIdx.x) / R, col = static_cast<int>(threadIdx.x) % R;
  for (int e = static_cast<int>(threadIdx.x); e < n; e += step) {
    dst[e] = static_cast<T>(src[row * row_stride + col * col_stride]);
    row += drow;
    col += dcol;
    if (col >= R) {
      col -= R;
      ++row;
    }
  }
}

constexpr int kQuadEntries = kQuad * kQuad;

/// acc[p][q] += a[p] * b[q] for the kQuad doubles at a and at b (two double2 each): the
/// micro-tile step of gram_partial_kernel and times_w_kernel.
__device__ __forceinline__ void fma_quad(const double2* a, const double2* b,
                                         double (&acc)[kQuad][kQuad]) {
  const double2 a01 = a[0], a23 = a[1];
  const double2 b01 = b[0], b23 = b[1];
  const double x[kQuad] = {a01.x, a01.y, a23.x, a23.y};
  const double y[kQuad] = {b01.x, b01.y, b23.x, b23.y};
#pragma unroll
  for (int p = 0; p < kQuad; ++p)
#pragma unroll
    for (int q = 0; q < kQuad; ++q) acc[p][q] = fma(x[p], y[q], acc[p][q]);
}

/// Partial Gram sums of A (rows x R, row-major). Block (x, y) owns the lower micro-tiles
/// x * tiles ... x * tiles + tiles - 1 of the R x R output and the row batches y,
/// y + gridDim.y, ... Its threads form `groups` groups of `tiles`: thread lt of group g
/// accumulates micro-tile lt over rows g, g + groups, ... of each staged batch. The groups
/// are summed in order and the block writes partial[(y * 16 + e) * total + t], e the entry
/// of micro-tile t (row-major in the micro-tile), total the number of micro-tiles.
template <typename T>
__global__ void __launch_bounds__(kTileThreads, kTileMinBlocks)
    gram_partial_kernel(const T* __restrict__ A, std::int64_t rows, int R, int tiles, int groups,
                        int batch, double* __restrict__ partial) {
  extern __shared__ __align__(16) double smem[];
  const int Rp = padded_r(R), nq = Rp / kQuad, total = nq * (nq + 1) / 2;
  const int lt = static_cast<int>(threadIdx.x) % tiles, g = static_cast<int>(threadIdx.x) / tiles;
  const int t = static_cast<int>(blockIdx.x) * tiles + lt;
  const bool active = g < groups && t < total;
  int qi = 0, qj = 0;
  if (active) lower_tile(t, qi, qj);

  // Padding columns are never staged: zeroed once (they only reach discarded entries).
  for (int e = static_cast<int>(threadIdx.x); e < batch * Rp; e += blockDim.x) smem[e] = 0.0;
  __syncthreads();

  double acc[kQuad][kQuad] = {};
  const std::int64_t batches = (rows + batch - 1) / batch;
  for (std::int64_t b = blockIdx.y; b < batches; b += gridDim.y) {
    const std::int64_t r0 = b * batch;
    const int nv = static_cast<int>(min(static_cast<std::int64_t>(batch), rows - r0));
    stage_rows(A + r0 * R, nv, R, smem, Rp, 1);
    __syncthreads();
    if (active) {
      for (int r = g; r < nv; r += groups) {
        const double2* row = reinterpret_cast<const double2*>(smem + r * Rp);
        fma_quad(row + 2 * qi, row + 2 * qj, acc);
      }
    }
    __syncthreads();  // before the next batch is staged
  }

  // Groups summed in order through shared memory (groups * tiles * 16 doubles, sized so
  // by the launch); lanes of a warp touch consecutive words.
  if (active) {
#pragma unroll
    for (int p = 0; p < kQuad; ++p)
#pragma unroll
      for (int q = 0; q < kQuad; ++q)
        smem[(g * kQuadEntries + p * kQuad + q) * tiles + lt] = acc[p][q];
  }
  __syncthreads();
  if (g == 0 && t < total) {
    for (int e = 0; e < kQuadEntries; ++e) {
      double s = 0.0;
      for (int k = 0; k < groups; ++k) s += smem[(k * kQuadEntries + e) * tiles + lt];
      partial[(static_cast<std::int64_t>(blockIdx.y) * kQuadEntries + e) * total + t] = s;
    }
  }
}

/// Row blocks summed per thread of gram_finish_kernel before the slices are combined.
constexpr int kFinishSlices = 8;

/// G (T, R x R) from the partials of `blocks` row blocks: each entry summed over the
/// blocks in a fixed order (kFinishSlices interleaved slices, then the slices in order)
/// and written to (i, j) and (j, i), so G is exactly symmetric. Block: 32 x kFinishSlices.
template <typename T>
__global__ void gram_finish_kernel(const double* __restrict__ partial, int blocks, int R,
                                   T* __restrict__ G) {
  __shared__ double s[kFinishSlices][32];
  const int nq = padded_r(R) / kQuad, total = nq * (nq + 1) / 2, n = total * kQuadEntries;
  const int k = static_cast<int>(blockIdx.x * 32 + threadIdx.x);
  double acc = 0.0;
  if (k < n)
    for (int b = static_cast<int>(threadIdx.y); b < blocks; b += kFinishSlices)
      acc += partial[static_cast<std::int64_t>(b) * n + k];
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || k >= n) return;
  double sum = s[0][threadIdx.x];
  for (int y = 1; y < kFinishSlices; ++y) sum += s[y][threadIdx.x];
  const int e = k / total, t = k % total;
  int qi = 0, qj = 0;
  lower_tile(t, qi, qj);
  const int i = qi * kQuad + e / kQuad, j = qj * kQuad + e % kQuad;
  if (i < R && j <= i) {
    G[static_cast<std::int64_t>(i) * R + j] = static_cast<T>(sum);
    G[static_cast<std::int64_t>(j) * R + i] = static_cast<T>(sum);
  }
}

/// times_w_kernel's static shared memory: the block's column maxima.
constexpr std::size_t kTimesWStaticSmem = sizeof(unsigned long long) * kTimesWKernelMaxR;

/// D := S W (S, D rows x R of T, S == D allowed; W R x R double), accumulated in double:
/// D(row, c) = sum_k S(row, k) W[k * R + c]. With colmax (device, R doubles, >= 0 on entry)
/// it also leaves colmax[c] = max(colmax[c], max over rows of |D(row, c)|) as stored (after
/// rounding to T), NaN ignored as column_norms' fmax ignores it: CP's max-norm without a
/// second pass over D. W sits in shared memory (R rows of stride Rp, zero
/// padded); block x takes row batches x, x + gridDim.x, ... and stages each transposed
/// (column c at sm + c * ld; ld = batch + 2 is even, for 16-byte loads, and spreads the
/// staging stores over the banks). Thread (rq, cq) computes rows 4 rq ... 4 rq + 3 times
/// columns 4 cq ... 4 cq + 3 of the batch; the results go back through shared memory for
/// coalesced stores, once the whole batch has been read.
template <typename T>
__global__ void __launch_bounds__(kTileThreads, kTileMinBlocks)
    times_w_kernel(const T* S, T* D, std::int64_t rows, int R, const double* __restrict__ W,
                   int batch, double* colmax) {
  extern __shared__ __align__(16) double smem[];
  // Non-negative doubles order as their bit patterns: the block's column maxima as integers.
  __shared__ unsigned long long smax[kTimesWKernelMaxR];
  for (int c = static_cast<int>(threadIdx.x); c < R; c += blockDim.x) smax[c] = 0;
  const int Rp = padded_r(R), nq = Rp / kQuad, ld = batch + 2;
  double* sw = smem;           // R x Rp
  double* sm = smem + R * Rp;  // R x ld
  for (int e = static_cast<int>(threadIdx.x); e < R * Rp; e += blockDim.x) {
    const int k = e / Rp, c = e % Rp;
    sw[e] = c < R ? W[static_cast<std::int64_t>(k) * R + c] : 0.0;
  }
  // Rows past the end of a short batch are computed but never stored: zeroed once.
  for (int e = static_cast<int>(threadIdx.x); e < R * ld; e += blockDim.x) sm[e] = 0.0;
  __syncthreads();

  const int cq = static_cast<int>(threadIdx.x) % nq, rq = static_cast<int>(threadIdx.x) / nq;
  const bool active = rq < batch / kQuad;
  double cmax[kQuad] = {};  // this thread's column maxima (columns 4 cq ... 4 cq + 3)
  const std::int64_t batches = (rows + batch - 1) / batch;
  for (std::int64_t b = blockIdx.x; b < batches; b += gridDim.x) {
    const std::int64_t r0 = b * batch;
    const int nv = static_cast<int>(min(static_cast<std::int64_t>(batch), rows - r0));
    stage_rows(S + r0 * R, nv, R, sm, 1, ld);
    __syncthreads();
    double acc[kQuad][kQuad] = {};  // [row][column]
    if (active) {
      const double* mk = sm + rq * kQuad;
      const double* wk = sw + cq * kQuad;
#pragma unroll 2
      for (int k = 0; k < R; ++k, mk += ld, wk += Rp)
        fma_quad(reinterpret_cast<const double2*>(mk), reinterpret_cast<const double2*>(wk), acc);
    }
    __syncthreads();  // the whole batch has been read
    if (active) {
#pragma unroll
      for (int q = 0; q < kQuad; ++q) {
        const int c = cq * kQuad + q;
        if (c < R) {
          double2* out = reinterpret_cast<double2*>(sm + c * ld + rq * kQuad);
          out[0] = make_double2(acc[0][q], acc[1][q]);
          out[1] = make_double2(acc[2][q], acc[3][q]);
          if (colmax != nullptr)
#pragma unroll
            for (int p = 0; p < kQuad; ++p)
              if (rq * kQuad + p < nv)
                cmax[q] = fmax(cmax[q], fabs(static_cast<double>(static_cast<T>(acc[p][q]))));
        }
      }
    }
    __syncthreads();
    unstage_rows(sm, nv, R, D + r0 * R, 1, ld);
    __syncthreads();  // before the next batch is staged
  }
  if (colmax == nullptr) return;
  if (active)
#pragma unroll
    for (int q = 0; q < kQuad; ++q) {
      const int c = cq * kQuad + q;
      if (c < R && cmax[q] > 0)
        atomicMax(&smax[c], static_cast<unsigned long long>(__double_as_longlong(cmax[q])));
    }
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < R; c += blockDim.x)
    if (smax[c] != 0) atomicMax(reinterpret_cast<unsigned long long*>(colmax + c), smax[c]);
}

int device_attribute(const Context& ctx, cudaDeviceAttr attr) {
  int v = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, ctx.device));
  return v;
}

/// Blocks of one full wave of `kernel` (threads per block, dynamic shared memory) on the
/// context's device; at least 1.
template <typename Kernel>
std::int64_t wave_blocks(const Context& ctx, Kernel kernel, int threads, std::size_t smem) {
  int per_sm = 0;
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return static_cast<std::int64_t>(std::max(per_sm, 1)) *
         std::max(device_attribute(ctx, cudaDevAttrMultiProcessorCount), 1);
}

/// Launch shape of times_w_kernel at rank R: rows per batch (4 per thread row), threads,
/// dynamic shared memory (W, then the transposed batch).
struct TimesWShape {
  int batch = 0;
  int threads = 0;
  std::size_t smem = 0;
};

TimesWShape times_w_shape(int R) {
  const int Rp = padded_r(R), nq = Rp / kQuad;
  TimesWShape s;
  s.batch = kQuad * (kTileThreads / nq);
  s.threads = (nq * (s.batch / kQuad) + 31) / 32 * 32;
  s.smem = sizeof(double) *
           (static_cast<std::size_t>(R) * Rp + static_cast<std::size_t>(R) * (s.batch + 2));
  return s;
}

}  // namespace

/// G = A^T A by gram_partial_kernel and gram_finish_kernel (1 <= R <= kGramKernelMaxR,
/// rows >= 1). One wave of blocks; the partials live in ctx.scratch.
template <typename T>
void gram_by_kernel(Context& ctx, const T* A, std::int64_t rows, int R, T* G) {
  const int Rp = padded_r(R), nq = Rp / kQuad, total = nq * (nq + 1) / 2;
  // Micro-tiles per block (balanced over the blocks when there are more than threads)
  // and groups of threads splitting the rows of a batch.
  const int tile_blocks = (total + kTileThreads - 1) / kTileThreads;
  const int tiles = (total + tile_blocks - 1) / tile_blocks;
  const int groups = kTileThreads / tiles;
  const int threads = (groups * tiles + 31) / 32 * 32;
  const int batch = std::max(1, kStageBytes / (Rp * static_cast<int>(sizeof(double))));
  const std::size_t smem = sizeof(double) * static_cast<std::size_t>(std::max(
                                                batch * Rp, kQuadEntries * groups * tiles));
  const std::int64_t batches = (rows + batch - 1) / batch;
  const std::int64_t wave = wave_blocks(ctx, gram_partial_kernel<T>, threads, smem);
  const int row_blocks = static_cast<int>(
      std::clamp<std::int64_t>(wave / tile_blocks, 1, std::min<std::int64_t>(batches, 65535)));
  const int n = total * kQuadEntries;
  ctx.scratch.reserve(sizeof(double) * static_cast<std::size_t>(n) * row_blocks);
  double* partial = static_cast<double*>(ctx.scratch.get());
  gram_partial_kernel<T><<<dim3(tile_blocks, row_blocks), threads, smem, ctx.stream>>>(
      A, rows, R, tiles, groups, batch, partial);
  TESSERA_CUDA_CHECK_LAUNCH();
  gram_finish_kernel<T>
      <<<(n + 31) / 32, dim3(32, kFinishSlices), 0, ctx.stream>>>(partial, row_blocks, R, G);
  TESSERA_CUDA_CHECK_LAUNCH();
}

/// Whether M W goes through times_w_kernel: R small enough and W plus a batch fit the
/// device's shared memory per block.
bool times_w_by_kernel_fits(const Context& ctx, int R) {
  if (R < 1 || R > kTimesWKernelMaxR) return false;
  const int optin = device_attribute(ctx, cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return times_w_shape(R).smem + kTimesWStaticSmem <= static_cast<std::size_t>(optin);
}

/// D := S W by times_w_kernel (times_w_by_kernel_fits(R), rows >= 1), one wave of blocks at
/// most; colmax as times_w_kernel's (nullptr: none).
template <typename T>
void times_w_by_kernel(Context& ctx, const T* S, T* D, std::int64_t rows, int R, const double* W,
                       double* colmax) {
  const TimesWShape s = times_w_shape(R);
  if (s.smem > std::size_t(48) << 10) {
    // Above the default limit: allow the device's maximum less the kernel's static shared
    // memory (the same value from every call, so concurrent callers do not undo each other).
    const int optin = device_attribute(ctx, cudaDevAttrMaxSharedMemoryPerBlockOptin);
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(times_w_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            optin - static_cast<int>(kTimesWStaticSmem)));
  }
  const std::int64_t batches = (rows + s.batch - 1) / s.batch;
  const std::int64_t blocks =
      std::min(batches, wave_blocks(ctx, times_w_kernel<T>, s.threads, s.smem));
  times_w_kernel<T><<<static_cast<unsigned>(blocks), s.threads, s.smem, ctx.stream>>>(
      S, D, rows, R, W, s.batch, colmax);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template void gram_by_kernel<float>(Context&, const float*, std::int64_t, int, float*);
template void gram_by_kernel<double>(Context&, const double*, std::int64_t, int, double*);
template void times_w_by_kernel<float>(Context&, const float*, float*, std::int64_t, int,
                                       const double*, double*);
template void times_w_by_kernel<double>(Context&, const double*, double*, std::int64_t, int,
                                        const double*, double*);

}  // namespace tessera::kernels::cuda
