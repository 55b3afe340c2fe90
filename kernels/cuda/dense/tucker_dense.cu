// Tucker-HOOI's dense stage on the device (DESIGN §6): the tall-skinny double matrices of
// the factor updates (U = Y V / sigma, the power steps, CholeskyQR2, the core) stay in
// device memory; only R x R matrices and scalars reach the host. Everything is ordered on
// ctx.stream; reductions are deterministic (fixed partial count and summation order for
// a given device), so every rank of a job decides CholeskyQR's fallback alike.
//
// Layout: a row-major rows x R matrix is, to cuBLAS/cuSOLVER, the column-major R x rows
// matrix with leading dimension R (written U' below); a row-major R x R matrix M is M^T
// column-major.
#include <algorithm>
#include <cfloat>
#include <limits>
#include <type_traits>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

namespace {

/// Row-major operands of one out-of-place DGEMM pass are cut into chunks of this many
/// bytes of scratch (times_small_double, subspace_change).
constexpr std::size_t kTallChunkBytes = std::size_t(64) << 20;
/// Blocks of the first pass of a sum of squares (partials in device memory).
constexpr int kSumParts = 256;
/// Columns whose scale travels in one launch's parameters (scatter_rows_double).
constexpr int kScaleCols = 256;

__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t stride_all() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

/// Block-wide sum (or max) of one double per thread, blockDim.x == kBlock; thread 0 gets it.
template <bool kMax>
__device__ double block_reduce(double v) {
  __shared__ double s[kBlock];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kBlock / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w)
      s[threadIdx.x] =
          kMax ? fmax(s[threadIdx.x], s[threadIdx.x + w]) : s[threadIdx.x] + s[threadIdx.x + w];
    __syncthreads();
  }
  return s[0];
}

__global__ void gather_rows_kernel(const double* __restrict__ U, int R,
                                   const std::int64_t* __restrict__ pos, std::int64_t rows,
                                   double* __restrict__ P) {
  const std::int64_t n = rows * R;
  for (std::int64_t e = first_index(); e < n; e += stride_all()) {
    const std::int64_t j = e / R, c = e - j * R;
    P[e] = U[(pos != nullptr ? pos[j] : j) * R + c];
  }
}

struct ScaleCols {
  double s[kScaleCols];
};

/// U row pos[j], columns c0 .. c0 + cnt - 1, = Z row j there (times the scale when given).
__global__ void scatter_rows_kernel(const double* __restrict__ Z, std::int64_t rows, int R,
                                    const std::int64_t* __restrict__ pos, int c0, int cnt,
                                    bool scaled, const __grid_constant__ ScaleCols p,
                                    double* __restrict__ U) {
  const std::int64_t n = rows * cnt;
  for (std::int64_t e = first_index(); e < n; e += stride_all()) {
    const std::int64_t j = e / cnt;
    const int c = static_cast<int>(e - j * cnt);
    const double z = Z[j * R + c0 + c];
    U[(pos != nullptr ? pos[j] : j) * R + c0 + c] = scaled ? z * p.s[c] : z;
  }
}

/// After potrf of L (from G; the diagonal is L's pivots): out[0] = 1 when CholeskyQR may use L
/// (info 0, every pivot finite and positive, min pivot^2 >= 1e-13 max pivot^2: the rule of
/// the host default), else 0; out[1] = max_ij |G_ij - delta_ij| (NaN entries ignored, as
/// std::max does on the host). One block of kBlock threads.
__global__ void cholqr_check_kernel(const double* __restrict__ G, const double* __restrict__ L,
                                    const int* __restrict__ info, int R, double* out) {
  const std::int64_t RR = static_cast<std::int64_t>(R) * R;
  double dev = 0.0;
  for (std::int64_t e = threadIdx.x; e < RR; e += blockDim.x) {
    const std::int64_t i = e / R, j = e - i * R;
    const double d = fabs(G[e] - (i == j ? 1.0 : 0.0));
    if (d > dev) dev = d;  // NaN compares false: ignored
  }
  dev = block_reduce<true>(dev);
  if (threadIdx.x != 0) return;
  bool ok = *info == 0;
  double dmin = DBL_MAX, dmax = 0.0;
  for (int i = 0; i < R && ok; ++i) {
    const double d = L[static_cast<std::int64_t>(i) * R + i];
    if (!(d > 0.0) || !isfinite(d)) ok = false;
    dmin = fmin(dmin, d);
    dmax = fmax(dmax, d);
  }
  if (ok && dmin * dmin < 1e-13 * dmax * dmax) ok = false;
  out[0] = ok ? 1.0 : 0.0;
  out[1] = dev;
}

/// Orders up to which cholqr_step factors G in one warp (cholqr_warp_kernel), not potrf.
constexpr int kWarpCholMaxR = 32;

/// potrf and cholqr_check_kernel in one warp, for R <= kMax <= 32: lane i holds row i of G,
/// then of its Cholesky factor C (G = C C^T, row-major lower), which it writes where potrf
/// (upper, column-major) puts W = C^T; out as cholqr_check_kernel's. A pivot that is not
/// positive and finite fails the factor, as potrf's info does. One warp (session 47, H200:
/// 5.3-5.5 us a call against 21 us for potrf's three kernels and the check).
template <int kMax>
__global__ void __launch_bounds__(32)
    cholqr_warp_kernel(const double* __restrict__ G, int R, double* __restrict__ L,
                       double* __restrict__ out) {
  const int lane = static_cast<int>(threadIdx.x);
  constexpr unsigned kAll = 0xffffffffu;
  double row[kMax];
  double dev = 0.0;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    const bool in = lane < R && j < R;
    const double g = in ? G[lane * R + j] : 0.0;
    const double d = fabs(g - (j == lane ? 1.0 : 0.0));
    if (in && d > dev) dev = d;  // NaN compares false: ignored
    row[j] = in && j <= lane ? g : 0.0;
  }
  bool ok = true;
  double dmin = DBL_MAX, dmax = 0.0;
#pragma unroll
  for (int c = 0; c < kMax; ++c) {
    if (c < R) {
      // Row c's entries left of the diagonal are C's; row[c] of lane c is the pivot.
      const double piv = __shfl_sync(kAll, row[c], c);
      const bool good = piv > 0.0 && isfinite(piv);
      ok = ok && good;
      const double r = good ? rsqrt(piv) : 1.0, d = good ? piv * r : 1.0;  // 1 / C(c, c), C(c, c)
      dmin = fmin(dmin, d);
      dmax = fmax(dmax, d);
      if (lane >= c) row[c] = lane == c ? d : row[c] * r;
#pragma unroll
      for (int j = c + 1; j < kMax; ++j) {
        const double cj = __shfl_sync(kAll, row[c], j);  // C(j, c)
        if (lane >= j) row[j] = fma(-row[c], cj, row[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMax; ++j)
    if (lane < R && j < R && j <= lane) L[lane * R + j] = row[j];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dev = fmax(dev, __shfl_xor_sync(kAll, dev, o));
  if (lane == 0) {
    out[0] = ok && !(dmin * dmin < 1e-13 * dmax * dmax) ? 1.0 : 0.0;
    out[1] = dev;
  }
}

/// partial[b] = sum of x[e]^2 over the elements e of block b's grid-stride loop.
__global__ void sum_squares_partial_kernel(const double* __restrict__ x, std::int64_t n,
                                           double* __restrict__ partial) {
  double acc = 0.0;
  for (std::int64_t e = first_index(); e < n; e += stride_all()) acc = fma(x[e], x[e], acc);
  acc = block_reduce<false>(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/// *acc (+)= sum of partial[0 .. parts) in a fixed order. One block of kBlock threads.
__global__ void sum_partials_kernel(const double* __restrict__ partial, int parts, bool add,
                                    double* acc) {
  double v = 0.0;
  for (int k = static_cast<int>(threadIdx.x); k < parts; k += blockDim.x) v += partial[k];
  v = block_reduce<false>(v);
  if (threadIdx.x == 0) *acc = add ? *acc + v : v;
}

/// *acc (+)= sum of x[k]^2, k < n (n >= 1); partial: kSumParts doubles.
void sum_squares_into(Context& ctx, const double* x, std::int64_t n, double* partial, bool add,
                      double* acc) {
  sum_squares_partial_kernel<<<kSumParts, kBlock, 0, ctx.stream>>>(x, n, partial);
  TESSERA_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kBlock, 0, ctx.stream>>>(partial, kSumParts, add, acc);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
__global__ void from_double_kernel(const double* __restrict__ src, std::int64_t n,
                                   T* __restrict__ dst) {
  for (std::int64_t e = first_index(); e < n; e += stride_all()) dst[e] = static_cast<T>(src[e]);
}

/// Rows of a rows x R chunk of double that fit kTallChunkBytes (at least 1).
std::int64_t tall_chunk_rows(int R) {
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(kTallChunkBytes / (static_cast<std::size_t>(R) * 8)));
}

/// The host result of a queued device computation: copies `n` doubles and waits.
void download_small(Context& ctx, const double* src, double* host, std::size_t n) {
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(host, src, n * sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
}

}  // namespace

void gather_rows_double(Context& ctx, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "gather_rows_double: R = " << R << ", rows = " << rows);
  if (rows == 0) return;
  gather_rows_kernel<<<grid_for(rows * R), kBlock, 0, ctx.stream>>>(U, R, pos, rows, P);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void scatter_rows_double(Context& ctx, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0 && len >= 0 && (pos != nullptr || rows <= len),
                  "scatter_rows_double: R = " << R << ", rows = " << rows << ", len = " << len);
  if (len == 0) return;
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(U, 0, static_cast<std::size_t>(len) * R * sizeof(double), ctx.stream));
  if (rows == 0) return;
  // The scale factors travel in the kernel parameters: no copy, no wait for the host array.
  for (int c0 = 0; c0 < R; c0 += kScaleCols) {
    const int cnt = std::min(kScaleCols, R - c0);
    ScaleCols p{};
    if (host_scale != nullptr)
      for (int c = 0; c < cnt; ++c) p.s[c] = host_scale[c0 + c];
    scatter_rows_kernel<<<grid_for(rows * cnt), kBlock, 0, ctx.stream>>>(
        Z, rows, R, pos, c0, cnt, host_scale != nullptr, p, U);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

void gram_double(Context& ctx, const double* U, std::int64_t rows, int R, double* G) {
  // The CP Gram (dense.cu): the blocked kernel in double up to R = 128, dsyrk above; both
  // triangles, deterministic.
  gram<double>(ctx, U, rows, R, G);
}

void inner_double(Context& ctx, const double* A, const double* B, std::int64_t rows, int R,
                  double* M) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "inner_double: R = " << R << ", rows = " << rows);
  if (rows == 0) {
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(M, 0, static_cast<std::size_t>(R) * R * sizeof(double), ctx.stream));
    return;
  }
  // Row-major M = A^T B is column-major M^T = B' A'^T.
  const double one = 1.0, zero = 0.0;
  TESSERA_CUBLAS_CHECK(cublasDgemm_64(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, R, R, rows, &one, B, R,
                                      A, R, &zero, M, R));
}

void times_small_double(Context& ctx, double* U, std::int64_t rows, int R, const double* M) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "times_small_double: R = " << R << ", rows = " << rows);
  if (rows == 0) return;
  // (U M)' = M^T U', and the row-major M is M^T column-major: one DGEMM per chunk into
  // scratch, copied back.
  const std::int64_t chunk = std::min(rows, tall_chunk_rows(R));
  ctx.scratch.reserve(static_cast<std::size_t>(chunk) * R * sizeof(double));
  auto* tmp = static_cast<double*>(ctx.scratch.get());
  const double one = 1.0, zero = 0.0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t nr = std::min(chunk, rows - r0);
    TESSERA_CUBLAS_CHECK(cublasDgemm_64(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, R, nr, R, &one, M, R,
                                        U + r0 * R, R, &zero, tmp, R));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(U + r0 * R, tmp,
                                       static_cast<std::size_t>(nr) * R * sizeof(double),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
  }
}

bool cholqr_step(Context& ctx, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "cholqr_step: R = " << R << ", rows = " << rows);
  const std::int64_t RR = static_cast<std::int64_t>(R) * R;
  // L, info and the two results in ctx.small (real pointers for the workspace query);
  // the potrf workspace in ctx.scratch.
  Arena a;
  const auto o_l = a.add<double>(static_cast<std::size_t>(RR));
  const auto o_out = a.add<double>(2);
  const auto o_info = a.add<int>(1);
  ctx.small.reserve(a.total());
  double* L = Arena::at<double>(ctx.small.get(), o_l);
  double* out = Arena::at<double>(ctx.small.get(), o_out);
  int* info = Arena::at<int>(ctx.small.get(), o_info);
  // The row-major lower triangle of G is read, as on the host (linalg::cholesky): to
  // cuSOLVER that is the column-major upper triangle, G = W^T W with W = L^T upper.
  if (R <= kWarpCholMaxR) {
    if (R <= 16)
      cholqr_warp_kernel<16><<<1, 32, 0, ctx.stream>>>(G, R, L, out);
    else
      cholqr_warp_kernel<kWarpCholMaxR><<<1, 32, 0, ctx.stream>>>(G, R, L, out);
    TESSERA_CUDA_CHECK_LAUNCH();
  } else {
    int lwork = 0;
    TESSERA_CUSOLVER_CHECK(
        cusolverDnDpotrf_bufferSize(ctx.cusolver, CUBLAS_FILL_MODE_UPPER, R, L, R, &lwork));
    ctx.scratch.reserve(static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(double));
    auto* work = static_cast<double*>(ctx.scratch.get());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(L, G, static_cast<std::size_t>(RR) * sizeof(double),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
    TESSERA_CUSOLVER_CHECK(
        cusolverDnDpotrf(ctx.cusolver, CUBLAS_FILL_MODE_UPPER, R, L, R, work, lwork, info));
    cholqr_check_kernel<<<1, kBlock, 0, ctx.stream>>>(G, L, info, R, out);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  double h[2] = {0.0, 0.0};
  download_small(ctx, out, h, 2);
  *host_dev = h[1];
  if (h[0] == 0.0) return false;
  // U := U L^{-T}, i.e. U' := L^{-1} U' = W^{-T} U': a triangular solve in place (no
  // inverse formed).
  if (rows > 0) {
    const double one = 1.0;
    TESSERA_CUBLAS_CHECK(cublasDtrsm_64(ctx.cublas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER,
                                        CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, R, rows, &one, L, R, U,
                                        R));
  }
  return true;
}

double subspace_change(Context& ctx, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "subspace_change: R = " << R << ", rows = " << rows);
  if (rows == 0) return 0.0;
  // Per chunk: D = Unew - U M (one DGEMM with beta = 1 on a copy of Unew), its squares
  // summed into acc.
  const std::int64_t chunk = std::min(rows, tall_chunk_rows(R));
  Arena a;
  const auto o_d = a.add<double>(static_cast<std::size_t>(chunk) * R);
  const auto o_part = a.add<double>(kSumParts);
  const auto o_acc = a.add<double>(1);
  ctx.scratch.reserve(a.total());
  double* D = Arena::at<double>(ctx.scratch.get(), o_d);
  double* partial = Arena::at<double>(ctx.scratch.get(), o_part);
  double* acc = Arena::at<double>(ctx.scratch.get(), o_acc);
  const double minus_one = -1.0, one = 1.0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t nr = std::min(chunk, rows - r0);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(D, Unew + r0 * R,
                                       static_cast<std::size_t>(nr) * R * sizeof(double),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
    TESSERA_CUBLAS_CHECK(cublasDgemm_64(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, R, nr, R, &minus_one,
                                        M, R, U + r0 * R, R, &one, D, R));
    sum_squares_into(ctx, D, nr * R, partial, r0 > 0, acc);
  }
  double h = 0.0;
  download_small(ctx, acc, &h, 1);
  return h;
}

double sum_squares_double(Context& ctx, const double* x, std::size_t n) {
  if (n == 0) return 0.0;
  Arena a;
  const auto o_part = a.add<double>(kSumParts);
  const auto o_acc = a.add<double>(1);
  ctx.small.reserve(a.total());
  double* partial = Arena::at<double>(ctx.small.get(), o_part);
  double* acc = Arena::at<double>(ctx.small.get(), o_acc);
  sum_squares_into(ctx, x, static_cast<std::int64_t>(n), partial, false, acc);
  double h = 0.0;
  download_small(ctx, acc, &h, 1);
  return h;
}

template <typename T>
void convert_from_double(Context& ctx, const double* src, std::size_t n, T* dst) {
  if (n == 0) return;
  if constexpr (std::is_same_v<T, double>) {
    if (src != dst)
      TESSERA_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(double), cudaMemcpyDeviceToDevice, ctx.stream));
  } else {
    const auto m = static_cast<std::int64_t>(n);
    from_double_kernel<T><<<grid_for(m), kBlock, 0, ctx.stream>>>(src, m, dst);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

template void convert_from_double<float>(Context&, const double*, std::size_t, float*);
template void convert_from_double<double>(Context&, const double*, std::size_t, double*);

}  // namespace tessera::kernels::cuda
