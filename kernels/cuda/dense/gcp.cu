// GCP's sampled loss and gradient and the Adam step on the cuda backend (kernels/ops/gcp.hpp).
// gcp_gradient takes samples in host memory: their coordinates and the data of the nonzero
// samples are copied into the context's scratch on every call. gcp_sampled_gradient draws a
// step's samples in the kernel (kernels/gcp_sample.hpp) from the training entries on the
// device: nothing crosses the host link. One warp per sample, its lanes over the columns
// (chunks of 32): the model value m_s is a warp sum; c_s and d_s follow from the loss
// (kernels/gcp_loss.hpp); each mode's gradient row takes d_s times the product of the other
// modes' entries (prefix and suffix products per column: no division, so zero entries are
// fine) by atomicAdd. The loss is summed in double per block and added atomically (so its last
// bits depend on the order of the blocks). The Adam step is a grid-stride pass.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/gcp.hpp"

namespace tessera::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlock / 32;

/// Everything gcp_kernel reads, by value (device pointers).
template <typename T>
struct GcpArgs {
  const T* A[kMaxOrder] = {};  ///< the factors (dims[n] x R)
  T* G[kMaxOrder] = {};        ///< the gradients (zeroed), or all null
  int N = 0, R = 0;
  double w_nonzero = 0, w_zero = 0;
  GcpLossSpec loss;
  double* loss_out = nullptr;  ///< summed into (zeroed), or null
};

/// Samples copied from the host: sample s has coordinates idx[.][s]; the first `nonzero` are
/// nonzero samples with data vals[s].
template <typename T>
struct CopiedSamples {
  const index_t* idx[kMaxOrder] = {};
  const T* vals = nullptr;
  std::int64_t samples = 0, nonzero = 0;

  __device__ std::int64_t items() const { return samples; }
  /// Sample s's coordinates into i[]; false if it is not this rank's (never, here).
  __device__ bool get(std::int64_t s, int N, index_t* i, bool* nz, double* x) const {
    for (int k = 0; k < N; ++k) i[k] = idx[k][s];
    *nz = s < nonzero;
    *x = *nz ? static_cast<double>(vals[s]) : 0.0;
    return true;
  }
};

/// Samples drawn in the kernel: items 0 .. nonzero-1 are the step's nonzero samples (those
/// this rank does not hold are skipped), then this rank's zero samples.
template <typename T>
struct DrawnSamples {
  GcpDraw d;
  const index_t* idx[kMaxOrder] = {};  ///< this rank's training entries
  const T* vals = nullptr;
  std::uint64_t dims[kMaxOrder] = {};

  __device__ std::int64_t items() const { return d.nonzero + gcp_my_zero_samples(d); }
  __device__ bool get(std::int64_t s, int N, index_t* i, bool* nz, double* x) const {
    if (s < d.nonzero) {
      const std::uint64_t g = gcp_nonzero_sample(d, s);
      if (g < d.first || g >= d.first + d.mine) return false;
      const std::uint64_t l = g - d.first;
      for (int k = 0; k < N; ++k) i[k] = idx[k][l];
      *nz = true;
      *x = static_cast<double>(vals[l]);
      return true;
    }
    const std::int64_t j = d.rank + (s - d.nonzero) * d.ranks;
    for (int k = 0; k < N; ++k) i[k] = gcp_zero_coord(d, j, k, dims[k]);
    *nz = false;
    *x = 0;
    return true;
  }
};

template <typename T, typename Samples>
__global__ void __launch_bounds__(kBlock) gcp_kernel(const GcpArgs<T> a, const Samples src) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const std::int64_t first =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  const std::int64_t R = a.R;
  const std::int64_t items = src.items();
  double my_loss = 0;  // lane 0's sum of c_s
  for (std::int64_t s = first; s < items; s += warps) {
    index_t ix[kMaxOrder];
    bool nonzero = false;
    double x = 0;
    if (!src.get(s, a.N, ix, &nonzero, &x)) continue;  // the same for every lane of the warp
    std::int64_t row[kMaxOrder];                       // offsets of the sample's factor rows
    for (int k = 0; k < a.N; ++k) row[k] = static_cast<std::int64_t>(ix[k]) * R;
    double m = 0;
    for (std::int64_t r = lane; r < R; r += 32) {
      double p = 1;
      for (int k = 0; k < a.N; ++k) p *= static_cast<double>(a.A[k][row[k] + r]);
      m += p;
    }
    for (int off = 16; off > 0; off /= 2) m += __shfl_xor_sync(0xffffffffu, m, off);
    double c, d;
    if (nonzero) {
      c = a.w_nonzero * (gcp_value(a.loss, x, m) - gcp_value(a.loss, 0.0, m));
      d = a.w_nonzero * (gcp_deriv(a.loss, x, m) - gcp_deriv(a.loss, 0.0, m));
    } else {
      c = a.w_zero * gcp_value(a.loss, 0.0, m);
      d = a.w_zero * gcp_deriv(a.loss, 0.0, m);
    }
    if (lane == 0) my_loss += c;
    if (a.G[0] == nullptr) continue;
    for (std::int64_t r = lane; r < R; r += 32) {
      double v[kMaxOrder], suffix[kMaxOrder + 1];
      for (int k = 0; k < a.N; ++k) v[k] = static_cast<double>(a.A[k][row[k] + r]);
      suffix[a.N] = 1;
      for (int k = a.N - 1; k >= 0; --k) suffix[k] = v[k] * suffix[k + 1];
      double prefix = d;  // d times the entries of the modes before n
      for (int n = 0; n < a.N; ++n) {
        atomicAdd(a.G[n] + row[n] + r, static_cast<T>(prefix * suffix[n + 1]));
        prefix *= v[n];
      }
    }
  }
  if (a.loss_out == nullptr) return;
  __shared__ double part[kWarpsPerBlock];
  if (lane == 0) part[threadIdx.x / 32] = my_loss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) t += part[w];
    atomicAdd(a.loss_out, t);
  }
}

/// The checks both entry points share, the gradients zeroed and the arguments filled in.
template <typename T>
GcpArgs<T> gcp_args(Context& ctx, int N, const std::vector<std::uint64_t>& dims, double w_nonzero,
                    double w_zero, const std::vector<const T*>& factors, int R,
                    const GcpLossSpec& loss, const std::vector<T*>& grads) {
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(N >= 1 && N <= kMaxOrder, "samples: order " << N << " outside 1.." << kMaxOrder);
  TESSERA_EXPECTS(static_cast<int>(dims.size()) == N,
                  "need one dimension per mode: " << dims.size() << " for order " << N);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  TESSERA_EXPECTS(grads.empty() || static_cast<int>(grads.size()) == N,
                  "need no gradient or one per mode: " << grads.size() << " for order " << N);
  const auto Rs = static_cast<std::size_t>(R);
  for (std::size_t n = 0; n < grads.size(); ++n)
    TESSERA_CUDA_CHECK(cudaMemsetAsync(
        grads[n], 0, static_cast<std::size_t>(dims[n]) * Rs * sizeof(T), ctx.stream));
  GcpArgs<T> a;
  for (int n = 0; n < N; ++n) {
    a.A[n] = factors[static_cast<std::size_t>(n)];
    a.G[n] = grads.empty() ? nullptr : grads[static_cast<std::size_t>(n)];
  }
  a.N = N;
  a.R = R;
  a.w_nonzero = w_nonzero;
  a.w_zero = w_zero;
  a.loss = loss;
  return a;
}

/// Launches the kernel on `items` samples and returns the loss to *host_loss (if not null);
/// loss_slot: a double of device scratch.
template <typename T, typename Samples>
void gcp_launch(Context& ctx, GcpArgs<T> a, const Samples& src, std::int64_t items,
                double* loss_slot, double* host_loss) {
  if (host_loss != nullptr) {
    a.loss_out = loss_slot;
    TESSERA_CUDA_CHECK(cudaMemsetAsync(a.loss_out, 0, sizeof(double), ctx.stream));
  }
  gcp_kernel<T, Samples><<<grid_for(items * 32), kBlock, 0, ctx.stream>>>(a, src);
  TESSERA_CUDA_CHECK_LAUNCH();
  if (host_loss != nullptr) {
    double host = 0;
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(&host, a.loss_out, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
    *host_loss = host;
  }
}

template <typename T>
__global__ void adam_kernel(T* x, const T* g, T* m, T* v, std::int64_t n, double lr, double beta1,
                            double beta2, double eps, double c1, double c2, bool nonnegative) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const double ge = static_cast<double>(g[e]);
    const double me = beta1 * static_cast<double>(m[e]) + (1 - beta1) * ge;
    const double ve = beta2 * static_cast<double>(v[e]) + (1 - beta2) * ge * ge;
    double xe = static_cast<double>(x[e]) - lr * (me / c1) / (sqrt(ve / c2) + eps);
    if (nonnegative) xe = fmax(xe, 0.0);
    m[e] = static_cast<T>(me);
    v[e] = static_cast<T>(ve);
    x[e] = static_cast<T>(xe);
  }
}

}  // namespace

template <typename T>
void gcp_gradient(Backend<T>& be, const SparseTensor<T>& samples, nnz_t nonzero_samples,
                  double w_nonzero, double w_zero, const std::vector<const T*>& factors, int R,
                  const GcpLossSpec& loss, const std::vector<T*>& grads, double* host_loss) {
  Context& ctx = executor(be).ctx();
  DeviceGuard guard(ctx.device);
  const int N = samples.order();
  const nnz_t S = samples.nnz();
  TESSERA_EXPECTS(nonzero_samples >= 0 && nonzero_samples <= S,
                  "nonzero_samples " << nonzero_samples << " outside 0.." << S);
  for (int n = 0; n < N; ++n) {  // an index outside its mode would be a wild device read
    const auto& ix = samples.idx[static_cast<std::size_t>(n)];
    TESSERA_EXPECTS(static_cast<nnz_t>(ix.size()) == S, "samples: mode "
                                                            << n << " has " << ix.size()
                                                            << " indices for " << S << " values");
    const index_t top = ix.empty() ? 0 : *std::max_element(ix.begin(), ix.end());
    TESSERA_EXPECTS(ix.empty() || top < samples.dims[static_cast<std::size_t>(n)],
                    "samples: index " << top << " of mode " << n << " outside 0.."
                                      << samples.dims[static_cast<std::size_t>(n)] - 1);
  }
  const GcpArgs<T> a = gcp_args(ctx, N, samples.dims, w_nonzero, w_zero, factors, R, loss, grads);
  if (S == 0 || (grads.empty() && host_loss == nullptr)) {
    if (host_loss != nullptr) *host_loss = 0;
    return;
  }
  Arena arena;
  std::size_t idx_off[kMaxOrder];
  for (int n = 0; n < N; ++n) idx_off[n] = arena.add<index_t>(static_cast<std::size_t>(S));
  const std::size_t vals_off = arena.add<T>(static_cast<std::size_t>(nonzero_samples));
  const std::size_t loss_off = arena.add<double>(1);
  ctx.scratch.reserve(arena.total());
  void* base = ctx.scratch.get();
  CopiedSamples<T> src;
  for (int n = 0; n < N; ++n) {
    auto* d = Arena::at<index_t>(base, idx_off[n]);
    // From pageable memory: returns once the source is staged, so the caller may free it.
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(d, samples.idx[static_cast<std::size_t>(n)].data(),
                                       static_cast<std::size_t>(S) * sizeof(index_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    src.idx[n] = d;
  }
  if (nonzero_samples > 0) {  // the zero samples' data are 0 by the contract: not copied
    T* vals = Arena::at<T>(base, vals_off);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(vals, samples.vals.data(),
                                       static_cast<std::size_t>(nonzero_samples) * sizeof(T),
                                       cudaMemcpyHostToDevice, ctx.stream));
    src.vals = vals;
  }
  src.samples = S;
  src.nonzero = nonzero_samples;
  gcp_launch(ctx, a, src, S, Arena::at<double>(base, loss_off), host_loss);
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_GRADIENT_OP);

template <typename T>
GcpEntries<T> gcp_entries(Backend<T>& be, const SparseTensor<T>& train) {
  Context& ctx = executor(be).ctx();
  DeviceGuard guard(ctx.device);
  const int N = train.order();
  const auto n = static_cast<std::size_t>(train.nnz());
  // One allocation: the coordinates mode after mode, then the values.
  const std::size_t idx_bytes = (n * sizeof(index_t) + 255) / 256 * 256;
  const std::size_t bytes = static_cast<std::size_t>(N) * idx_bytes + n * sizeof(T);
  GcpEntries<T> e;
  e.nnz = train.nnz();
  char* base = nullptr;
  if (bytes > 0) {
    const int device = ctx.device;
    auto* mem = new DeviceMemory(bytes);
    base = static_cast<char*>(mem->get());
    e.storage = std::shared_ptr<void>(mem, [device](void* q) {
      DeviceGuardNoThrow g(device);
      delete static_cast<DeviceMemory*>(q);
    });
  }
  for (int m = 0; m < N; ++m) {
    auto* d = reinterpret_cast<index_t*>(base + static_cast<std::size_t>(m) * idx_bytes);
    if (n > 0)
      TESSERA_CUDA_CHECK(cudaMemcpy(d, train.idx[static_cast<std::size_t>(m)].data(),
                                    n * sizeof(index_t), cudaMemcpyHostToDevice));
    e.idx.push_back(n > 0 ? d : nullptr);
  }
  if (n > 0) {
    auto* v = reinterpret_cast<T*>(base + static_cast<std::size_t>(N) * idx_bytes);
    TESSERA_CUDA_CHECK(cudaMemcpy(v, train.vals.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    e.vals = v;
  }
  return e;
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_ENTRIES_OP);

template <typename T>
void gcp_sampled_gradient(Backend<T>& be, const GcpDraw& draw, const GcpEntries<T>& train,
                          const std::vector<std::uint64_t>& dims, double w_nonzero, double w_zero,
                          const std::vector<const T*>& factors, int R, const GcpLossSpec& loss,
                          const std::vector<T*>& grads, double* host_loss) {
  Context& ctx = executor(be).ctx();
  DeviceGuard guard(ctx.device);
  const int N = static_cast<int>(dims.size());
  check_gcp_draw(draw, train, dims);
  const GcpArgs<T> a = gcp_args(ctx, N, dims, w_nonzero, w_zero, factors, R, loss, grads);
  DrawnSamples<T> src;
  src.d = draw;
  for (int n = 0; n < N; ++n) {
    src.idx[n] = train.idx[static_cast<std::size_t>(n)];
    src.dims[n] = dims[static_cast<std::size_t>(n)];
  }
  src.vals = train.vals;
  const std::int64_t items = draw.nonzero + gcp_my_zero_samples(draw);
  if (items == 0 || (grads.empty() && host_loss == nullptr)) {
    if (host_loss != nullptr) *host_loss = 0;
    return;
  }
  ctx.scratch.reserve(sizeof(double));
  gcp_launch(ctx, a, src, items, static_cast<double*>(ctx.scratch.get()), host_loss);
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_SAMPLED_GRADIENT_OP);

template <typename T>
void adam_step(Backend<T>& be, T* x, const T* g, T* m, T* v, std::int64_t n, double lr,
               double beta1, double beta2, double eps, std::int64_t t, bool nonnegative) {
  Context& ctx = executor(be).ctx();
  DeviceGuard guard(ctx.device);
  TESSERA_EXPECTS(t >= 1, "adam_step: step t must be >= 1, got " << t);
  TESSERA_EXPECTS(n >= 0, "adam_step: n must be >= 0, got " << n);
  if (n == 0) return;
  const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
  adam_kernel<T><<<grid_for(n), kBlock, 0, ctx.stream>>>(x, g, m, v, n, lr, beta1, beta2, eps, c1,
                                                         c2, nonnegative);
  TESSERA_CUDA_CHECK_LAUNCH();
}
TESSERA_INSTANTIATE_OP(TESSERA_ADAM_STEP_OP);

}  // namespace tessera::kernels::cuda
