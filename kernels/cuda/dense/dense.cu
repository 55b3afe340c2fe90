// Small dense operations of the CUDA backend: Gram, Hadamard, the normal equation solve
// (cuSOLVER in double), column reductions. Gram and M := M W (the solve's last step) are
// memory-bound passes over tall-skinny matrices: custom kernels accumulate in double and
// are deterministic (fixed summation order for a given device; dense_tiles.cu); for large
// R, where they are compute-bound, cuBLAS (dsyrk, dgemm in double) takes over.
//
// Layout: a row-major rows x R matrix is, to cuBLAS/cuSOLVER, a column-major R x rows
// matrix with leading dimension R. R x R symmetric matrices read the same either way.
#include <algorithm>
#include <cfloat>
#include <limits>
#include <type_traits>

#include "kernels/cuda/dense/dense_tiles.cuh"
#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

namespace {

/// cuBLAS path of gram and solve_normal (R above the limits below): float inputs are
/// widened to double a row chunk at a time, so both accumulate in double like the host
/// backends; this bounds that scratch (bytes).
constexpr std::size_t kChunkBytes = std::size_t(16) << 20;
/// Hadamard inputs per launch, scale factors per launch (kernel parameter space).
constexpr int kHadamardMax = 16;
constexpr int kScaleMax = 256;
/// Upper bound on the partial sums of a column reduction (threads of the first pass).
constexpr std::int64_t kReduceThreads = std::int64_t(1024) * kBlock;

// ---- elementwise kernels (grid-stride loops) ----

__device__ __forceinline__ std::int64_t grid_first() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <typename T>
__global__ void fill_kernel(T* dst, std::int64_t n, T value) {
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) dst[e] = value;
}

template <typename T>
struct HadamardParams {
  const T* g[kHadamardMax];
  int count;
};

template <typename T>
__global__ void hadamard_kernel(const __grid_constant__ HadamardParams<T> p, std::int64_t n, T* V) {
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    T v = p.g[0][e];
    for (int k = 1; k < p.count; ++k) v *= p.g[k][e];
    V[e] = v;
  }
}

/// dst (T, R x R) = src (double, column-major lower triangle valid) symmetrised.
template <typename T>
__global__ void symmetrize_from_lower_kernel(const double* src, int R, T* dst) {
  const std::int64_t n = static_cast<std::int64_t>(R) * R;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const int i = static_cast<int>(e / R), j = static_cast<int>(e % R);
    const int hi = max(i, j), lo = min(i, j);
    dst[e] = static_cast<T>(src[hi + static_cast<std::int64_t>(lo) * R]);
  }
}

/// In place: upper triangle (column-major) := lower triangle.
template <typename T>
__global__ void mirror_lower_kernel(T* G, int R) {
  const std::int64_t n = static_cast<std::int64_t>(R) * R;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const int row = static_cast<int>(e % R), col = static_cast<int>(e / R);  // column-major
    if (row < col) G[e] = G[col + static_cast<std::int64_t>(row) * R];
  }
}

/// Vd = (V + V^T) / 2 in double (exactly V when V is symmetric), and a copy in L. Sets
/// *nonfinite when V has an Inf or NaN.
template <typename T>
__global__ void to_double_sym_kernel(const T* V, int R, double* Vd, double* L, int* nonfinite) {
  const std::int64_t n = static_cast<std::int64_t>(R) * R;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const int i = static_cast<int>(e / R), j = static_cast<int>(e % R);
    const double v = 0.5 * (static_cast<double>(V[e]) +
                            static_cast<double>(V[j * static_cast<std::int64_t>(R) + i]));
    if (!isfinite(v)) atomicOr(nonfinite, 1);
    Vd[e] = v;
    L[e] = v;
  }
}

/// Accepts the Cholesky factor when V is finite, potrf succeeded and no pivot is
/// negligible: min L_ii^2 <= R * eps * max L_ii^2 means V is numerically singular, and the
/// eigen fallback (which drops such directions) runs instead. Same rule as linalg.
__global__ void cholesky_ok_kernel(const double* L, const int* info, int R, int* flags) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double pmax = 0.0, pmin = DBL_MAX;
  for (int i = 0; i < R; ++i) {
    const double d = L[i + static_cast<std::int64_t>(i) * R];
    pmax = fmax(pmax, d * d);
    pmin = fmin(pmin, d * d);
  }
  const bool good = flags[1] == 0 && *info == 0 && isfinite(pmin) && isfinite(pmax) && pmax > 0.0 &&
                    pmin > R * DBL_EPSILON * pmax;
  flags[0] = good ? 1 : 0;
}

__global__ void identity_kernel(double* W, int R) {
  const std::int64_t n = static_cast<std::int64_t>(R) * R;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride())
    W[e] = (e / R == e % R) ? 1.0 : 0.0;
}

/// W = Q diag(d) Q^T with d_k = 1 / lambda_k for lambda_k > R * eps * max|lambda|, else 0.
/// Q column-major (eigenvectors as columns). V = 0 gives W = 0.
__global__ void pseudo_inverse_kernel(const double* Q, const double* lambda, int R, double* W) {
  double lmax = 0.0;
  for (int k = 0; k < R; ++k) lmax = fmax(lmax, fabs(lambda[k]));
  const double cut = R * DBL_EPSILON * lmax;
  const std::int64_t n = static_cast<std::int64_t>(R) * R;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const int i = static_cast<int>(e % R), j = static_cast<int>(e / R);
    double s = 0.0;
    for (int k = 0; k < R; ++k) {
      const double l = lambda[k];
      if (l > cut)
        s += Q[i + static_cast<std::int64_t>(k) * R] * Q[j + static_cast<std::int64_t>(k) * R] / l;
    }
    W[e] = s;
  }
}

template <typename S, typename T>
__global__ void convert_kernel(const S* src, std::int64_t n, T* dst) {
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) dst[e] = static_cast<T>(src[e]);
}

struct ScaleParams {
  double s[kScaleMax];
};

/// A(i, c0 + c) *= s[c] for c < cnt.
template <typename T>
__global__ void scale_kernel(T* A, std::int64_t rows, int R, int c0, int cnt,
                             const __grid_constant__ ScaleParams p) {
  const std::int64_t n = rows * cnt;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const std::int64_t i = e / cnt;
    const int c = static_cast<int>(e - i * cnt);
    T* a = A + i * R + c0 + c;
    *a = static_cast<T>(static_cast<double>(*a) * p.s[c]);
  }
}

// ---- column reductions: two passes, deterministic, accumulated in double ----

enum class Reduce { sum_squares, max_abs, dot };

/// Thread g covers elements g, g + stride, ... of the flattened row-major matrix; stride
/// is a multiple of R, so all of them lie in column g % R and the loads are coalesced.
template <typename T, Reduce kind>
__global__ void column_partial_kernel(const T* A, const T* B, std::int64_t n, std::int64_t stride,
                                      double* partial) {
  const std::int64_t g = grid_first();
  if (g >= stride) return;
  double acc = 0.0;
  for (std::int64_t e = g; e < n; e += stride) {
    const double a = static_cast<double>(A[e]);
    if constexpr (kind == Reduce::sum_squares)
      acc += a * a;
    else if constexpr (kind == Reduce::max_abs)
      acc = fmax(acc, fabs(a));
    else
      acc += a * static_cast<double>(B[e]);
  }
  partial[g] = acc;
}

/// One block per column r: out[r] = combine of partial[r + k R], k < per_column.
template <Reduce kind>
__global__ void column_final_kernel(const double* partial, int R, std::int64_t per_column,
                                    double* out) {
  __shared__ double s[kBlock];
  const int r = blockIdx.x;
  double acc = 0.0;
  for (std::int64_t k = threadIdx.x; k < per_column; k += blockDim.x) {
    const double v = partial[r + k * R];
    acc = (kind == Reduce::max_abs) ? fmax(acc, v) : acc + v;
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) {
      const double o = s[threadIdx.x + w];
      s[threadIdx.x] = (kind == Reduce::max_abs) ? fmax(s[threadIdx.x], o) : s[threadIdx.x] + o;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = s[0];
}

/// The R column results into out_dev (device memory; nullptr: into ctx.scratch), which
/// it returns; nothing waits.
template <typename T, Reduce kind>
double* column_reduce_device(Context& ctx, const T* A, const T* B, std::int64_t rows, int R,
                             double* out_dev) {
  const std::int64_t n = rows * R;
  // Threads of the first pass: enough to cover n (at most kReduceThreads), at least R,
  // rounded down to a multiple of R.
  const std::int64_t want = std::max<std::int64_t>(std::min(n, kReduceThreads), R);
  const unsigned blocks = static_cast<unsigned>((want + kBlock - 1) / kBlock);
  const std::int64_t stride = (static_cast<std::int64_t>(blocks) * kBlock / R) * R;

  Arena a;
  const auto o_partial = a.add<double>(static_cast<std::size_t>(stride));
  const auto o_out = a.add<double>(static_cast<std::size_t>(R));
  ctx.scratch.reserve(a.total());
  double* partial = Arena::at<double>(ctx.scratch.get(), o_partial);
  double* out = out_dev != nullptr ? out_dev : Arena::at<double>(ctx.scratch.get(), o_out);

  column_partial_kernel<T, kind><<<blocks, kBlock, 0, ctx.stream>>>(A, B, n, stride, partial);
  TESSERA_CUDA_CHECK_LAUNCH();
  column_final_kernel<kind><<<R, kBlock, 0, ctx.stream>>>(partial, R, stride / R, out);
  TESSERA_CUDA_CHECK_LAUNCH();
  return out;
}

template <typename T, Reduce kind>
void column_reduce(Context& ctx, const T* A, const T* B, std::int64_t rows, int R,
                   double* host_out) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "column reduction: R = " << R << ", rows = " << rows);
  if (R == 0) return;
  const double* out = column_reduce_device<T, kind>(ctx, A, B, rows, R, nullptr);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host_out, out, static_cast<std::size_t>(R) * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
}

/// Rows per chunk when a rows x R matrix is widened to double in kChunkBytes of scratch.
std::int64_t chunk_rows_for(int R) {
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(kChunkBytes / (static_cast<std::size_t>(R) * sizeof(double))));
}

template <typename S, typename T>
void convert(Context& ctx, const S* src, std::int64_t n, T* dst) {
  convert_kernel<S, T><<<grid_for(n), kBlock, 0, ctx.stream>>>(src, n, dst);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------

template <typename T>
void fill(Context& ctx, T* dst, std::size_t n, T value) {
  if (n == 0) return;
  fill_kernel<T><<<grid_for(static_cast<std::int64_t>(n)), kBlock, 0, ctx.stream>>>(
      dst, static_cast<std::int64_t>(n), value);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gram(Context& ctx, const T* A, std::int64_t rows, int R, T* G) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "gram: R = " << R << ", rows = " << rows);
  if (R == 0) return;
  const std::int64_t RR = static_cast<std::int64_t>(R) * R;
  if (rows == 0) {
    TESSERA_CUDA_CHECK(cudaMemsetAsync(G, 0, static_cast<std::size_t>(RR) * sizeof(T), ctx.stream));
    return;
  }
  if (R <= kGramKernelMaxR) {
    gram_by_kernel(ctx, A, rows, R, G);
    return;
  }
  // Large R: G = B B^T with B = A viewed column-major (R x rows): dsyrk, lower triangle,
  // then mirrored. Float rows are widened to double chunk by chunk and accumulated (beta = 1).
  const double one = 1.0, zero = 0.0;
  if constexpr (std::is_same_v<T, double>) {
    TESSERA_CUBLAS_CHECK(cublasDsyrk_64(ctx.cublas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, R, rows,
                                        &one, A, R, &zero, G, R));
    mirror_lower_kernel<double><<<grid_for(RR), kBlock, 0, ctx.stream>>>(G, R);
    TESSERA_CUDA_CHECK_LAUNCH();
  } else {
    const std::int64_t chunk = std::min(rows, chunk_rows_for(R));
    Arena a;
    const auto o_acc = a.add<double>(static_cast<std::size_t>(RR));
    const auto o_rows = a.add<double>(static_cast<std::size_t>(chunk * R));
    ctx.scratch.reserve(a.total());
    double* acc = Arena::at<double>(ctx.scratch.get(), o_acc);
    double* wide = Arena::at<double>(ctx.scratch.get(), o_rows);
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::int64_t k = std::min(chunk, rows - r0);
      convert(ctx, A + r0 * R, k * R, wide);
      TESSERA_CUBLAS_CHECK(cublasDsyrk_64(ctx.cublas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, R, k,
                                          &one, wide, R, r0 == 0 ? &zero : &one, acc, R));
    }
    symmetrize_from_lower_kernel<T><<<grid_for(RR), kBlock, 0, ctx.stream>>>(acc, R, G);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

template <typename T>
void hadamard(Context& ctx, const std::vector<const T*>& Gs, int R, T* V) {
  TESSERA_EXPECTS(!Gs.empty(), "hadamard of no matrices");
  TESSERA_EXPECTS(R >= 0, "hadamard: R = " << R);
  if (R == 0) return;
  const std::int64_t RR = static_cast<std::int64_t>(R) * R;
  // Up to kHadamardMax inputs per launch; later launches multiply into V, so with more
  // inputs than that V must not alias one of them: go through scratch then.
  T* dst = V;
  if (Gs.size() > static_cast<std::size_t>(kHadamardMax)) {
    ctx.scratch.reserve(static_cast<std::size_t>(RR) * sizeof(T));
    dst = static_cast<T*>(ctx.scratch.get());
  }
  std::size_t k = 0;
  while (k < Gs.size()) {
    HadamardParams<T> p{};
    int c = 0;
    if (k > 0) p.g[c++] = dst;  // running product of the earlier launches
    for (; k < Gs.size() && c < kHadamardMax; ++k) {
      TESSERA_EXPECTS(Gs[k] != nullptr, "hadamard input " << k << " is null");
      p.g[c++] = Gs[k];
    }
    p.count = c;
    hadamard_kernel<T><<<grid_for(RR), kBlock, 0, ctx.stream>>>(p, RR, dst);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  if (dst != V)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(V, dst, static_cast<std::size_t>(RR) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
}

template <typename T>
bool solve_normal(Context& ctx, T* M, std::int64_t rows, const T* V, int R) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "solve_normal: R = " << R << ", rows = " << rows);
  if (R == 0) return false;
  const std::int64_t RR = static_cast<std::int64_t>(R) * R;

  // The R x R pieces live in ctx.small, so the cuSOLVER workspace queries below can be
  // given real pointers; the workspace (and the row chunk of M, for large R) live in
  // ctx.scratch.
  Arena a;
  const auto o_vd = a.add<double>(static_cast<std::size_t>(RR));
  const auto o_l = a.add<double>(static_cast<std::size_t>(RR));
  const auto o_w = a.add<double>(static_cast<std::size_t>(RR));
  const auto o_lambda = a.add<double>(static_cast<std::size_t>(R));
  const auto o_info = a.add<int>(1);
  const auto o_flags = a.add<int>(2);  // [0]: Cholesky accepted, [1]: V not finite
  ctx.small.reserve(a.total());
  void* base = ctx.small.get();
  double* Vd = Arena::at<double>(base, o_vd);
  double* L = Arena::at<double>(base, o_l);
  double* W = Arena::at<double>(base, o_w);
  double* lambda = Arena::at<double>(base, o_lambda);
  int* info = Arena::at<int>(base, o_info);
  int* flags = Arena::at<int>(base, o_flags);

  int lwork_potrf = 0, lwork_syevd = 0;
  TESSERA_CUSOLVER_CHECK(
      cusolverDnDpotrf_bufferSize(ctx.cusolver, CUBLAS_FILL_MODE_LOWER, R, L, R, &lwork_potrf));
  TESSERA_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(ctx.cusolver, CUSOLVER_EIG_MODE_VECTOR,
                                                     CUBLAS_FILL_MODE_LOWER, R, L, R, lambda,
                                                     &lwork_syevd));
  const int lwork = std::max({lwork_potrf, lwork_syevd, 1});
  // M := M W by times_w_kernel, else (large R) by cuBLAS in row chunks widened to double.
  const bool by_kernel = times_w_by_kernel_fits(ctx, R);
  const std::int64_t chunk = by_kernel ? 0 : std::min(rows, chunk_rows_for(R));
  const bool wide_out = !std::is_same_v<T, double>;  // float results need a double buffer
  Arena b;
  const auto o_work = b.add<double>(static_cast<std::size_t>(lwork));
  const auto o_in = b.add<double>(static_cast<std::size_t>(chunk * R));
  const auto o_out = b.add<double>(wide_out ? static_cast<std::size_t>(chunk * R) : 0);
  ctx.scratch.reserve(b.total());
  double* work = Arena::at<double>(ctx.scratch.get(), o_work);
  double* in = Arena::at<double>(ctx.scratch.get(), o_in);
  double* out = Arena::at<double>(ctx.scratch.get(), o_out);

  TESSERA_CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(int), ctx.stream));
  to_double_sym_kernel<T><<<grid_for(RR), kBlock, 0, ctx.stream>>>(V, R, Vd, L, flags + 1);
  TESSERA_CUDA_CHECK_LAUNCH();
  TESSERA_CUSOLVER_CHECK(
      cusolverDnDpotrf(ctx.cusolver, CUBLAS_FILL_MODE_LOWER, R, L, R, work, lwork, info));
  cholesky_ok_kernel<<<1, 1, 0, ctx.stream>>>(L, info, R, flags);
  TESSERA_CUDA_CHECK_LAUNCH();
  int host_flags[2] = {0, 0};
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(host_flags, flags, sizeof(host_flags), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  const bool fallback = host_flags[0] == 0;
  const bool finite = host_flags[1] == 0;

  if (!fallback) {
    // W = V^-1 from the Cholesky factor.
    identity_kernel<<<grid_for(RR), kBlock, 0, ctx.stream>>>(W, R);
    TESSERA_CUDA_CHECK_LAUNCH();
    TESSERA_CUSOLVER_CHECK(
        cusolverDnDpotrs(ctx.cusolver, CUBLAS_FILL_MODE_LOWER, R, R, L, R, W, R, info));
  } else if (!finite) {
    // Nothing sensible to solve: M = 0, as the host backends do.
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(W, 0, static_cast<std::size_t>(RR) * sizeof(double), ctx.stream));
  } else {
    // W = V^+ from V = Q diag(lambda) Q^T.
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(L, Vd, static_cast<std::size_t>(RR) * sizeof(double),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
    TESSERA_CUSOLVER_CHECK(cusolverDnDsyevd(ctx.cusolver, CUSOLVER_EIG_MODE_VECTOR,
                                            CUBLAS_FILL_MODE_LOWER, R, L, R, lambda, work, lwork,
                                            info));
    int host_info = 0;
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(&host_info, info, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
    TESSERA_EXPECTS(host_info == 0, "symmetric eigensolver (cusolverDnDsyevd) failed with info "
                                        << host_info << " on the " << R << " x " << R
                                        << " normal matrix");
    pseudo_inverse_kernel<<<grid_for(RR), kBlock, 0, ctx.stream>>>(L, lambda, R, W);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  if (by_kernel) {
    if (rows > 0) times_w_by_kernel(ctx, M, M, rows, R, W);
    return fallback;
  }
  // Large R: M := M W in double, a row chunk at a time (gemm is out of place). Row-major
  // M (c x R) is column-major R x c, and W is symmetric, so the product is W * M_chunk
  // there.
  const double one = 1.0, zero = 0.0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t c = std::min(chunk, rows - r0);
    T* m = M + r0 * R;
    convert(ctx, m, c * R, in);
    if constexpr (std::is_same_v<T, double>) {
      TESSERA_CUBLAS_CHECK(cublasDgemm_64(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, R, c, R, &one, W, R,
                                          in, R, &zero, m, R));
    } else {
      TESSERA_CUBLAS_CHECK(cublasDgemm_64(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, R, c, R, &one, W, R,
                                          in, R, &zero, out, R));
      convert(ctx, out, c * R, m);
    }
  }
  return fallback;
}

template <typename T>
void column_norms(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out) {
  if (kind == NormKind::two)
    column_reduce<T, Reduce::sum_squares>(ctx, A, nullptr, rows, R, host_out);
  else
    column_reduce<T, Reduce::max_abs>(ctx, A, nullptr, rows, R, host_out);
}

template <typename T>
void column_dots(Context& ctx, const T* A, const T* B, std::int64_t rows, int R, double* host_out) {
  column_reduce<T, Reduce::dot>(ctx, A, B, rows, R, host_out);
}

template <typename T>
void column_norms_device(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                         double* out_dev) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "column norms: R = " << R << ", rows = " << rows);
  if (kind == NormKind::two)
    column_reduce_device<T, Reduce::sum_squares>(ctx, A, nullptr, rows, R, out_dev);
  else
    column_reduce_device<T, Reduce::max_abs>(ctx, A, nullptr, rows, R, out_dev);
}

template <typename T>
void column_dots_device(Context& ctx, const T* A, const T* B, std::int64_t rows, int R,
                        double* out_dev) {
  TESSERA_EXPECTS(R >= 1 && rows >= 0, "column dots: R = " << R << ", rows = " << rows);
  column_reduce_device<T, Reduce::dot>(ctx, A, B, rows, R, out_dev);
}

bool times_w_fits(const Context& ctx, int R) {
  return times_w_by_kernel_fits(ctx, R);
}

template <typename T>
void times_w(Context& ctx, const T* S, T* D, std::int64_t rows, int R, const double* W,
             double* colmax) {
  TESSERA_EXPECTS(times_w_by_kernel_fits(ctx, R), "times_w: R = " << R << " above the kernel's");
  if (rows > 0) times_w_by_kernel(ctx, S, D, rows, R, W, colmax);
}

template <typename T>
void scale_columns(Context& ctx, T* A, std::int64_t rows, int R, const double* host_scale) {
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "scale_columns: R = " << R << ", rows = " << rows);
  if (rows == 0 || R == 0) return;
  // Scale factors travel in the kernel parameters: no copy, no wait for the host array.
  for (int c0 = 0; c0 < R; c0 += kScaleMax) {
    const int cnt = std::min(kScaleMax, R - c0);
    ScaleParams p{};
    for (int c = 0; c < cnt; ++c) p.s[c] = host_scale[c0 + c];
    scale_kernel<T><<<grid_for(rows * cnt), kBlock, 0, ctx.stream>>>(A, rows, R, c0, cnt, p);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
}

// ---- wide products of a TTMc output (Tucker) ----
//
// Y (rows x C, row-major) is, to cuBLAS, the column-major C x rows matrix Y' (ld C);
// double row-major operands likewise. Float rows are widened to double a chunk at a time
// in ctx.scratch (kWideChunkBytes), so every product is a DGEMM accumulating in double.

namespace {
constexpr std::size_t kWideChunkBytes = std::size_t(64) << 20;
/// Largest k of one DGEMM call (cuBLAS dimensions are int).
constexpr std::int64_t kMaxGemmRows = std::int64_t(1) << 30;

/// Calls f(rows_as_double, first_row, nrows) on consecutive row chunks of Y.
template <typename T, typename F>
void for_wide_chunks(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, F&& f) {
  std::int64_t chunk = kMaxGemmRows;
  if constexpr (!std::is_same_v<T, double>)
    chunk = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(kWideChunkBytes / (static_cast<std::size_t>(C) * 8)));
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t nr = std::min(chunk, rows - r0);
    if constexpr (std::is_same_v<T, double>) {
      f(Y + r0 * C, r0, nr);
    } else {
      ctx.scratch.reserve(static_cast<std::size_t>(nr * C) * sizeof(double));
      auto* wide = static_cast<double*>(ctx.scratch.get());
      convert(ctx, Y + r0 * C, nr * C, wide);
      f(static_cast<const double*>(wide), r0, nr);
    }
  }
}
}  // namespace

template <typename T>
void wide_gram(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, double* S) {
  TESSERA_EXPECTS(rows >= 0 && C >= 1 && C <= std::numeric_limits<int>::max(),
                  "wide_gram: rows = " << rows << ", C = " << C);
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(S, 0, static_cast<std::size_t>(C * C) * sizeof(double), ctx.stream));
  const int c = static_cast<int>(C);
  const double one = 1.0;
  for_wide_chunks(ctx, Y, rows, C, [&](const double* y, std::int64_t, std::int64_t nr) {
    TESSERA_CUBLAS_CHECK(cublasDgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, c, c,
                                     static_cast<int>(nr), &one, y, c, y, c, &one, S, c));
  });
}

template <typename T>
void wide_times(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                double* Z) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1 && C >= 1 && C <= std::numeric_limits<int>::max(),
                  "wide_times: rows = " << rows << ", C = " << C << ", R = " << R);
  const int c = static_cast<int>(C);
  const double one = 1.0, zero = 0.0;
  for_wide_chunks(ctx, Y, rows, C, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    TESSERA_CUBLAS_CHECK(cublasDgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, R, static_cast<int>(nr),
                                     c, &one, W, R, y, c, &zero, Z + r0 * R, R));
  });
}

template <typename T>
void wide_times_t(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1 && C >= 1 && C <= std::numeric_limits<int>::max(),
                  "wide_times_t: rows = " << rows << ", C = " << C << ", R = " << R);
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(B, 0, static_cast<std::size_t>(C) * R * sizeof(double), ctx.stream));
  const int c = static_cast<int>(C);
  const double one = 1.0;
  for_wide_chunks(ctx, Y, rows, C, [&](const double* y, std::int64_t r0, std::int64_t nr) {
    TESSERA_CUBLAS_CHECK(cublasDgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, R, c,
                                     static_cast<int>(nr), &one, P + r0 * R, R, y, c, &one, B, R));
  });
}

namespace {
/// V (n x k row-major) column j = column (m - 1 - j) of A (column-major, lda n): the
/// eigenvectors of the k largest of m ascending eigenvalues, in descending order.
__global__ void top_vectors_kernel(const double* __restrict__ A, int n, int k, int m,
                                   double* __restrict__ V) {
  const std::int64_t total = static_cast<std::int64_t>(n) * k;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / k, j = e % k;
    V[e] = A[(m - 1 - j) * static_cast<std::int64_t>(n) + i];
  }
}
}  // namespace

void symmetric_eig_top(Context& ctx, double* S, int n, int k, double* w_host, double* V) {
  TESSERA_EXPECTS(n >= 1 && k >= 1 && k <= n, "symmetric_eig_top: n " << n << ", k " << k);
  const int il = n - k + 1, iu = n;
  // syevdx returns meig in host memory, so it waits for the stream inside cuSOLVER: wait here
  // first, through the context (its waiter, when collectives may be in the stream).
  ctx.sync();
  int meig = 0, lwork = 0;
  TESSERA_CUSOLVER_CHECK(cusolverDnDsyevdx_bufferSize(
      ctx.cusolver, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_LOWER, n, S, n,
      0.0, 0.0, il, iu, &meig, nullptr, &lwork));
  Arena a;
  const std::size_t o_w = a.add<double>(static_cast<std::size_t>(n));
  const std::size_t o_work = a.add<double>(static_cast<std::size_t>(std::max(lwork, 1)));
  const std::size_t o_info = a.add<int>(1);
  ctx.scratch.reserve(a.total());
  double* w = Arena::at<double>(ctx.scratch.get(), o_w);
  double* work = Arena::at<double>(ctx.scratch.get(), o_work);
  int* info = Arena::at<int>(ctx.scratch.get(), o_info);
  TESSERA_CUSOLVER_CHECK(cusolverDnDsyevdx(ctx.cusolver, CUSOLVER_EIG_MODE_VECTOR,
                                           CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_LOWER, n, S, n,
                                           0.0, 0.0, il, iu, &meig, w, work, lwork, info));
  top_vectors_kernel<<<grid_for(static_cast<std::int64_t>(n) * k), kBlock, 0, ctx.stream>>>(
      S, n, k, meig, V);
  TESSERA_CUDA_CHECK_LAUNCH();
  int host_info = 0;
  std::vector<double> wh(static_cast<std::size_t>(n));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&host_info, info, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(wh.data(), w, static_cast<std::size_t>(n) * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  TESSERA_EXPECTS(host_info == 0 && meig == k, "cusolverDnDsyevdx failed (info "
                                                   << host_info << ", " << meig << " of " << k
                                                   << " eigenpairs)");
  for (int j = 0; j < k; ++j) w_host[j] = wh[static_cast<std::size_t>(meig - 1 - j)];
}

namespace {
template <typename T>
__global__ void sum_rows_kernel(const T* __restrict__ src, const std::int64_t* __restrict__ ptr,
                                const std::int64_t* __restrict__ row, std::int64_t rows,
                                std::int64_t C, T* __restrict__ dst) {
  const std::int64_t n = rows * C;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const std::int64_t j = e / C, c = e % C;
    T acc = src[row[ptr[j]] * C + c];
    for (std::int64_t q = ptr[j] + 1; q < ptr[j + 1]; ++q) acc += src[row[q] * C + c];
    dst[e] = acc;
  }
}
}  // namespace

template <typename T>
void sum_rows(Context& ctx, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst) {
  const auto rows = static_cast<std::int64_t>(ptr.empty() ? 0 : ptr.size() - 1);
  if (rows == 0 || C == 0) return;
  // Copies from pageable host memory may wait for the stream inside CUDA: wait through the
  // context first (its waiter, where collectives are in the stream, e.g. the rows' exchange
  // before this on several ranks of Tucker).
  ctx.sync();
  Arena a;
  const std::size_t o_ptr = a.add<std::int64_t>(ptr.size());
  const std::size_t o_row = a.add<std::int64_t>(std::max<std::size_t>(row.size(), 1));
  ctx.scratch.reserve(a.total());
  auto* dptr = Arena::at<std::int64_t>(ctx.scratch.get(), o_ptr);
  auto* drow = Arena::at<std::int64_t>(ctx.scratch.get(), o_row);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dptr, ptr.data(), ptr.size() * sizeof(std::int64_t),
                                     cudaMemcpyHostToDevice, ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(drow, row.data(), row.size() * sizeof(std::int64_t),
                                     cudaMemcpyHostToDevice, ctx.stream));
  sum_rows_kernel<T><<<grid_for(rows * C), kBlock, 0, ctx.stream>>>(src, dptr, drow, rows, C, dst);
  TESSERA_CUDA_CHECK_LAUNCH();
  // The index arrays are pageable host memory: the copies must finish before they may go.
  ctx.sync();
}

namespace {
template <typename T>
__global__ void add_rows_kernel(const T* __restrict__ src, const std::int64_t* __restrict__ map,
                                std::int64_t rows, std::int64_t C, T* __restrict__ dst) {
  const std::int64_t n = rows * C;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const std::int64_t i = e / C, c = e - i * C;
    const std::int64_t j = map != nullptr ? map[i] : i;
    dst[j * C + c] += src[e];
  }
}
}  // namespace

template <typename T>
void add_rows(Context& ctx, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst) {
  TESSERA_EXPECTS(dst_row.empty() || static_cast<std::int64_t>(dst_row.size()) == rows,
                  "add_rows: " << dst_row.size() << " destination rows for " << rows << " rows");
  if (rows == 0 || C == 0) return;
  const std::int64_t* map = nullptr;
  if (!dst_row.empty()) {
    ctx.scratch.reserve(dst_row.size() * sizeof(std::int64_t));
    auto* d = reinterpret_cast<std::int64_t*>(ctx.scratch.get());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(d, dst_row.data(), dst_row.size() * sizeof(std::int64_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    map = d;
  }
  add_rows_kernel<T><<<grid_for(rows * C), kBlock, 0, ctx.stream>>>(src, map, rows, C, dst);
  TESSERA_CUDA_CHECK_LAUNCH();
  // The row map is pageable host memory: the copy must finish before it may go.
  if (map != nullptr) ctx.sync();
}

std::size_t wide_scratch_bytes(std::int64_t C, std::size_t value_size) {
  if (value_size == sizeof(double)) return 0;
  const std::int64_t chunk = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(kWideChunkBytes / (static_cast<std::size_t>(C) * 8)));
  return static_cast<std::size_t>(chunk * C) * sizeof(double);
}

#define TESSERA_CUDA_DENSE_INSTANTIATE(T)                                                         \
  template void wide_gram<T>(Context&, const T*, std::int64_t, std::int64_t, double*);            \
  template void sum_rows<T>(Context&, const T*, const std::vector<std::int64_t>&,                 \
                            const std::vector<std::int64_t>&, std::int64_t, T*);                  \
  template void wide_times<T>(Context&, const T*, std::int64_t, std::int64_t, const double*, int, \
                              double*);                                                           \
  template void wide_times_t<T>(Context&, const T*, std::int64_t, std::int64_t, const double*,    \
                                int, double*);                                                    \
  template void add_rows<T>(Context&, const T*, std::int64_t, std::int64_t,                       \
                            const std::vector<std::int64_t>&, T*);                                \
  template void fill<T>(Context&, T*, std::size_t, T);                                            \
  template void gram<T>(Context&, const T*, std::int64_t, int, T*);                               \
  template void hadamard<T>(Context&, const std::vector<const T*>&, int, T*);                     \
  template bool solve_normal<T>(Context&, T*, std::int64_t, const T*, int);                       \
  template void column_norms<T>(Context&, const T*, std::int64_t, int, NormKind, double*);        \
  template void scale_columns<T>(Context&, T*, std::int64_t, int, const double*);                 \
  template void column_dots<T>(Context&, const T*, const T*, std::int64_t, int, double*);         \
  template void column_norms_device<T>(Context&, const T*, std::int64_t, int, NormKind, double*); \
  template void column_dots_device<T>(Context&, const T*, const T*, std::int64_t, int, double*);  \
  template void times_w<T>(Context&, const T*, T*, std::int64_t, int, const double*, double*);

TESSERA_CUDA_DENSE_INSTANTIATE(float)
TESSERA_CUDA_DENSE_INSTANTIATE(double)

}  // namespace tessera::kernels::cuda
