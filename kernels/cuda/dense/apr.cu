// CP-APR's elementwise steps on the factor rows on the cuda backend (kernels/ops/apr.hpp):
// the KKT violation with the multiplicative update, the shift of inadmissible zeros, and
// column sums. Grid-stride passes over the row-major rows x R matrices; the maximum and the
// count are combined with integer atomics (order-independent, so deterministic), the column
// sums in double by two passes of fixed order, as column_norms does (dense.cu). Each
// returns its host value after waiting for the stream.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/apr.hpp"

namespace tessera::kernels::cuda {

namespace {

/// Threads of the first pass of column_sums, at most.
constexpr std::int64_t kSumThreads = std::int64_t(1024) * kBlock;

__device__ __forceinline__ std::int64_t grid_first() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

/// Block maximum of non-negative v (NaN ignored) into *out, as the bits of a double (for
/// non-negative doubles the order of the bit patterns is the order of the values).
__device__ void block_max_into(double v, unsigned long long* out) {
  __shared__ double s[kBlock / 32];
  for (int off = 16; off > 0; off /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int lane = static_cast<int>(threadIdx.x) & 31, w = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) s[w] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = 0.0;
    for (int k = 0; k < static_cast<int>(blockDim.x) / 32; ++k) m = fmax(m, s[k]);
    atomicMax(out, static_cast<unsigned long long>(__double_as_longlong(m)));
  }
}

/// max |min(B, 1 - Phi)| over the n elements into *vmax (bits of a double, zeroed first);
/// then, when `update`, B *= Phi (each thread reads its elements before it writes them).
template <typename T>
__global__ void kkt_update_kernel(T* B, const T* Phi, std::int64_t n, bool update,
                                  unsigned long long* vmax) {
  double v = 0.0;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const T b = B[e], ph = Phi[e];
    v = fmax(v, fabs(fmin(static_cast<double>(b), 1.0 - static_cast<double>(ph))));
    if (update) B[e] = b * ph;
  }
  block_max_into(v, vmax);
}

/// A += kappa where Phi > 1 and A < kappa_tol; the entries changed added to *count.
template <typename T>
__global__ void shift_kernel(T* A, const T* Phi, std::int64_t n, double kappa, double kappa_tol,
                             unsigned long long* count) {
  unsigned long long c = 0;
  for (std::int64_t e = grid_first(); e < n; e += grid_stride()) {
    const double a = static_cast<double>(A[e]);
    if (static_cast<double>(Phi[e]) > 1.0 && a < kappa_tol) {
      A[e] = static_cast<T>(a + kappa);
      ++c;
    }
  }
  for (int off = 16; off > 0; off /= 2) c += __shfl_xor_sync(0xffffffffu, c, off);
  if ((threadIdx.x & 31) == 0 && c > 0) atomicAdd(count, c);
}

/// Thread g sums elements g, g + stride, ... (stride a multiple of R: all in column g % R,
/// loads coalesced) in double into partial[g].
template <typename T>
__global__ void column_partial_sum_kernel(const T* A, std::int64_t n, std::int64_t stride,
                                          double* partial) {
  const std::int64_t g = grid_first();
  if (g >= stride) return;
  double acc = 0.0;
  for (std::int64_t e = g; e < n; e += stride) acc += static_cast<double>(A[e]);
  partial[g] = acc;
}

/// One block per column r: out[r] = sum of partial[r + k R], k < per_column (a fixed tree).
__global__ void column_final_sum_kernel(const double* partial, int R, std::int64_t per_column,
                                        double* out) {
  __shared__ double s[kBlock];
  const int r = static_cast<int>(blockIdx.x);
  double acc = 0.0;
  for (std::int64_t k = threadIdx.x; k < per_column; k += blockDim.x) acc += partial[r + k * R];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = static_cast<int>(blockDim.x) / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = s[0];
}

}  // namespace

template <typename T>
double apr_kkt_update(Backend<T>& be, T* B, const T* Phi, std::int64_t rows, int R, bool update) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "apr_kkt_update: R = " << R << ", rows = " << rows);
  const std::int64_t n = rows * R;
  if (n == 0) return 0.0;
  ctx.scratch.reserve(sizeof(unsigned long long));
  auto* vmax = static_cast<unsigned long long*>(ctx.scratch.get());
  TESSERA_CUDA_CHECK(cudaMemsetAsync(vmax, 0, sizeof(unsigned long long), ctx.stream));
  kkt_update_kernel<T><<<grid_for(n), kBlock, 0, ctx.stream>>>(B, Phi, n, update, vmax);
  TESSERA_CUDA_CHECK_LAUNCH();
  double host = 0.0;
  static_assert(sizeof(double) == sizeof(unsigned long long));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&host, vmax, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  return host;
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_KKT_UPDATE_OP);

template <typename T>
std::int64_t apr_shift(Backend<T>& be, T* A, const T* Phi, std::int64_t rows, int R, double kappa,
                       double kappa_tol) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "apr_shift: R = " << R << ", rows = " << rows);
  const std::int64_t n = rows * R;
  if (n == 0) return 0;
  ctx.scratch.reserve(sizeof(unsigned long long));
  auto* count = static_cast<unsigned long long*>(ctx.scratch.get());
  TESSERA_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned long long), ctx.stream));
  shift_kernel<T><<<grid_for(n), kBlock, 0, ctx.stream>>>(A, Phi, n, kappa, kappa_tol, count);
  TESSERA_CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&host, count, sizeof(host), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  return static_cast<std::int64_t>(host);
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_SHIFT_OP);

template <typename T>
void column_sums(Backend<T>& be, const T* A, std::int64_t rows, int R, double* host_out) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  TESSERA_EXPECTS(R >= 0 && rows >= 0, "column_sums: R = " << R << ", rows = " << rows);
  const std::int64_t n = rows * R;
  if (R == 0) return;
  // Threads of the first pass: enough to cover n (at most kSumThreads), at least R, rounded
  // down to a multiple of R.
  const std::int64_t want = std::max<std::int64_t>(std::min(n, kSumThreads), R);
  const auto blocks = static_cast<unsigned>((want + kBlock - 1) / kBlock);
  const std::int64_t stride = (static_cast<std::int64_t>(blocks) * kBlock / R) * R;
  ctx.scratch.reserve(static_cast<std::size_t>(stride + R) * sizeof(double));
  double* partial = static_cast<double*>(ctx.scratch.get());
  double* out = partial + stride;
  column_partial_sum_kernel<T><<<blocks, kBlock, 0, ctx.stream>>>(A, n, stride, partial);
  TESSERA_CUDA_CHECK_LAUNCH();
  column_final_sum_kernel<<<static_cast<unsigned>(R), kBlock, 0, ctx.stream>>>(partial, R,
                                                                               stride / R, out);
  TESSERA_CUDA_CHECK_LAUNCH();
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host_out, out, static_cast<std::size_t>(R) * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
}
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_SUMS_OP);

}  // namespace tessera::kernels::cuda
