// The CP-ALS iteration kept on the device (kernels/cp_device.hpp, docs/cp-device-loop.md).
//
// Per mode: the caller's MTTKRP and, beside it on a side stream, one block solves the R x R
// normal equations (the
// Hadamard product of the other Grams, its Cholesky factor in double, V^-1 from it; when
// V is numerically singular a cyclic Jacobi eigen-solve in the same block gives V^+, the
// rule of the per-operation solve_normal), M V^-1 by the dense.cu kernel, the column
// norms into device memory, the weights and the scaled columns by one kernel, and the new
// Gram. After the last mode one block forms the fit's sums. Nothing
// waits until the end of the iteration, where the sums (a few scalars) come back in one
// copy to pinned memory. The second call with the max-norm captures all of it (MTTKRPs
// included) as a CUDA graph; later calls replay it, re-capturing only if a scratch buffer
// the captured kernels use has moved. On several ranks the caller's collectives
// (spec.comm: the MTTKRP rows' reduction, the norms, the Gram and the rows' gather, the
// fit's dots) are enqueued between these steps in the same stream, so the graph holds them
// too, and the loop solves only the rows [solve_lo, solve_lo + solve_n) of each mode
// (docs/multi-gpu.md).
#include <cfloat>
#include <climits>
#include <string>

#include "kernels/cuda/runtime/detail.cuh"
#include "util/log.hpp"

namespace tessera::kernels::cuda {

namespace {

/// R up to which the loop runs (the Gram and M W kernels' limit).
constexpr int kLoopMaxR = 128;
/// Threads of the one-block solve and fit kernels.
constexpr int kSolveThreads = 256;
/// Jacobi sweeps at most (it converges quadratically; a handful is the rule).
constexpr int kJacobiSweeps = 60;

template <typename T>
struct GramSet {
  const T* g[kMaxOrder];
  int count;
};

/// Device state of one iteration: what the host reads back (first, one copy) and the
/// R-vectors and R x R work arrays behind it.
struct Status {
  double norm_m2;
  double inner;
  int fallbacks;
  int bad_mode;  ///< INT_MAX: none
};

__device__ double block_sum(double v, double* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();
  return r;
}

/// W (R x R, column-major) = V^-1 by Cholesky, or V^+ by Jacobi when V is numerically
/// singular, or 0 when V is not finite; V = the Hadamard product (in T, as
/// ops::hadamard) of the Grams in gs, symmetrised in double. Vd, L, Q: R x R doubles
/// of work; ev: R. One block of kSolveThreads.
/// Dynamic shared memory of normal_inverse_kernel: the Cholesky factor, and the solves'
/// columns when 2 R^2 doubles fit kSmemSolveMaxR.
constexpr int kSmemSolveMaxR = 64;
std::size_t normal_inverse_smem(int R) {
  return sizeof(double) * static_cast<std::size_t>(R) * R * (R <= kSmemSolveMaxR ? 2 : 1);
}

template <typename T>
__global__ void __launch_bounds__(kSolveThreads)
    normal_inverse_kernel(const __grid_constant__ GramSet<T> gs, int R, double* Vd, double* Lg,
                          double* Q, double* ev, double* W, Status* st) {
  extern __shared__ double smem[];
  __shared__ double red[kSolveThreads];
  __shared__ int s_flag;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int RR = R * R;
  double* L = smem;  // the Cholesky factor on chip: its steps are latency-bound
  if (tid == 0) s_flag = 0;
  __syncthreads();
  for (int e = tid; e < RR; e += nt) {
    const int i = e / R, j = e % R;
    T a = gs.g[0][e], b = gs.g[0][j * R + i];
    for (int k = 1; k < gs.count; ++k) {
      a *= gs.g[k][e];
      b *= gs.g[k][j * R + i];
    }
    const double v = 0.5 * (static_cast<double>(a) + static_cast<double>(b));
    if (!isfinite(v)) s_flag = 1;
    Vd[e] = v;
    L[e] = v;
  }
  __syncthreads();
  const bool finite = s_flag == 0;
  __syncthreads();

  // Cholesky, right-looking, in L (row i, column j at L[i * R + j], lower triangle).
  bool spd = finite;
  for (int j = 0; j < R && spd; ++j) {
    if (tid == 0) {
      const double d = L[j * R + j];
      s_flag = (d > 0.0 && isfinite(d)) ? 1 : 0;
      if (s_flag) L[j * R + j] = sqrt(d);
    }
    __syncthreads();
    spd = s_flag == 1;
    if (!spd) break;
    const double djj = L[j * R + j];
    for (int i = j + 1 + tid; i < R; i += nt) L[i * R + j] /= djj;
    __syncthreads();
    const int m = R - j - 1;
    for (int e = tid; e < m * m; e += nt) {
      const int i = j + 1 + e / m, k = j + 1 + e % m;
      if (k <= i) L[i * R + k] -= L[i * R + j] * L[k * R + j];
    }
    __syncthreads();
  }
  if (spd) {
    // The acceptance rule of solve_normal: no pivot negligible against the largest.
    if (tid == 0) {
      double pmax = 0.0, pmin = DBL_MAX;
      for (int i = 0; i < R; ++i) {
        const double d = L[i * R + i];
        pmax = fmax(pmax, d * d);
        pmin = fmin(pmin, d * d);
      }
      s_flag =
          (isfinite(pmin) && isfinite(pmax) && pmax > 0.0 && pmin > R * DBL_EPSILON * pmax) ? 1 : 0;
    }
    __syncthreads();
    spd = s_flag == 1;
  }
  if (spd) {
    // Column c of V^-1: L y = e_c, then L^T w = y (one thread per column), on chip when
    // it fits (entry k of column c at w[k * ws]: consecutive threads, consecutive words).
    const bool on_chip = R <= kSmemSolveMaxR;
    double* wbase = on_chip ? smem + RR : W;
    const int ws = on_chip ? R : 1;
    for (int c = tid; c < R; c += nt) {
      double* w = on_chip ? wbase + c : wbase + static_cast<std::int64_t>(c) * R;
      for (int i = 0; i < R; ++i) {
        double s = (i == c) ? 1.0 : 0.0;
        for (int k = c; k < i; ++k) s -= L[i * R + k] * w[k * ws];
        w[i * ws] = i < c ? 0.0 : s / L[i * R + i];
      }
      for (int i = R - 1; i >= 0; --i) {
        double s = w[i * ws];
        for (int k = i + 1; k < R; ++k) s -= L[k * R + i] * w[k * ws];
        w[i * ws] = s / L[i * R + i];
      }
    }
    if (on_chip) {
      __syncthreads();
      for (int e = tid; e < RR; e += nt) W[e] = wbase[(e % R) * R + e / R];  // column-major
    }
    return;
  }
  if (tid == 0) atomicAdd(&st->fallbacks, 1);
  if (!finite) {
    for (int e = tid; e < RR; e += nt) W[e] = 0.0;
    return;
  }
  // Cyclic Jacobi on L := Vd (row-major, symmetric; in global memory, this rare path
  // does not need the speed), eigenvectors in the columns of Q.
  L = Lg;
  for (int e = tid; e < RR; e += nt) {
    L[e] = Vd[e];
    Q[e] = (e / R == e % R) ? 1.0 : 0.0;
  }
  __syncthreads();
  __shared__ double s_c, s_s;
  for (int sweep = 0; sweep < kJacobiSweeps; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int e = tid; e < RR; e += nt) {
      const double v = L[e] * L[e];
      if (e / R == e % R)
        diag += v;
      else
        off += v;
    }
    off = block_sum(off, red);
    diag = block_sum(diag, red);
    if (!(off > DBL_EPSILON * DBL_EPSILON * diag)) break;
    for (int p = 0; p < R - 1; ++p)
      for (int q = p + 1; q < R; ++q) {
        if (tid == 0) {
          const double apq = L[p * R + q];
          if (apq == 0.0) {
            s_c = 1.0;
            s_s = 0.0;
          } else {
            const double theta = (L[q * R + q] - L[p * R + p]) / (2.0 * apq);
            const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
            s_c = 1.0 / sqrt(t * t + 1.0);
            s_s = t * s_c;
          }
        }
        __syncthreads();
        const double c = s_c, s = s_s;
        if (s != 0.0) {
          for (int k = tid; k < R; k += nt) {  // columns p, q of L and Q
            const double lp = L[k * R + p], lq = L[k * R + q];
            L[k * R + p] = c * lp - s * lq;
            L[k * R + q] = s * lp + c * lq;
            const double qp = Q[k * R + p], qq = Q[k * R + q];
            Q[k * R + p] = c * qp - s * qq;
            Q[k * R + q] = s * qp + c * qq;
          }
          __syncthreads();
          for (int k = tid; k < R; k += nt) {  // rows p, q of L
            const double lp = L[p * R + k], lq = L[q * R + k];
            L[p * R + k] = c * lp - s * lq;
            L[q * R + k] = s * lp + c * lq;
          }
        }
        __syncthreads();
      }
  }
  for (int k = tid; k < R; k += nt) ev[k] = L[k * R + k];
  __syncthreads();
  // W = Q diag(d) Q^T, d_k = 1 / lambda_k above R eps max|lambda| (solve_normal's cut).
  double lmax = 0.0;
  for (int k = 0; k < R; ++k) lmax = fmax(lmax, fabs(ev[k]));
  const double cut = R * DBL_EPSILON * lmax;
  for (int e = tid; e < RR; e += nt) {
    const int i = e % R, j = e / R;
    double s = 0.0;
    for (int k = 0; k < R; ++k)
      if (ev[k] > cut) s += Q[i * R + k] * Q[j * R + k] / ev[k];
    W[e] = s;
  }
}

/// The weights from the column norms: lambda_r = sqrt(norm_r) (two) or max(norm_r, 1).
__device__ __forceinline__ double weight_of(double norm, bool two) {
  return two ? sqrt(norm) : fmax(norm, 1.0);
}

/// A(i, r) *= 1 / lambda_r (1 when lambda_r is 0), as scale_columns does; block 0 also
/// stores lambda and records the first mode with a norm that is not finite in
/// st->bad_mode. n = rows R elements.
template <typename T>
__global__ void normalize_kernel(T* A, std::int64_t n, int R, const double* __restrict__ norm,
                                 bool two, int mode, double* lambda, Status* st) {
  if (blockIdx.x == 0)
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
      const double s = norm[r];
      if (!isfinite(s)) atomicMin(&st->bad_mode, mode);
      lambda[r] = weight_of(s, two);
    }
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const double l = weight_of(norm[e % R], two);
    A[e] = static_cast<T>(static_cast<double>(A[e]) * (l > 0 ? 1.0 / l : 1.0));
  }
}

/// Clears the status and the n norms (times_w's column maxima accumulate into them).
__global__ void reset_kernel(Status* st, double* norms, int n) {
  for (int e = static_cast<int>(threadIdx.x); e < n; e += blockDim.x) norms[e] = 0;
  if (threadIdx.x == 0) {
    st->norm_m2 = 0;
    st->inner = 0;
    st->fallbacks = 0;
    st->bad_mode = INT_MAX;
  }
}

/// st->norm_m2 = sum_rs lambda_r lambda_s prod_n G_n(r, s); st->inner = sum_r lambda_r
/// dots_r (in r order, as the host). One block of kSolveThreads.
template <typename T>
__global__ void __launch_bounds__(kSolveThreads)
    fit_sums_kernel(const __grid_constant__ GramSet<T> gs, int R, const double* lambda,
                    const double* dots, Status* st) {
  __shared__ double red[kSolveThreads];
  double acc = 0.0;
  for (int e = threadIdx.x; e < R * R; e += blockDim.x) {
    double p = lambda[e / R] * lambda[e % R];
    for (int k = 0; k < gs.count; ++k) p *= static_cast<double>(gs.g[k][e]);
    acc += p;
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) {
    double inner = 0.0;
    for (int r = 0; r < R; ++r) inner += lambda[r] * dots[r];
    st->norm_m2 = acc;
    st->inner = inner;
  }
}

template <typename T>
class CudaCpLoop final : public CpDeviceLoop<T> {
 public:
  CudaCpLoop(Context& ctx, const CpLoopSpec<T>& spec) : ctx_(ctx), s_(spec) {
    N_ = static_cast<int>(s_.A.size());
    const std::size_t RR = static_cast<std::size_t>(s_.R) * s_.R;
    // Vd, L, Q, W (R x R each), then ev (R), norms (R per mode), lambda, dots (R each),
    // then Status.
    const std::size_t doubles = 4 * RR + (3 + static_cast<std::size_t>(N_)) * s_.R;
    mem_ = DeviceMemory(doubles * sizeof(double) + sizeof(Status));
    auto* d = static_cast<double*>(mem_.get());
    Vd_ = d;
    L_ = d + RR;
    Q_ = d + 2 * RR;
    W_ = d + 3 * RR;
    ev_ = d + 4 * RR;
    norms_ = ev_ + s_.R;
    lambda_ = norms_ + static_cast<std::size_t>(N_) * s_.R;
    dots_ = lambda_ + s_.R;
    st_ = reinterpret_cast<Status*>(dots_ + s_.R);
    TESSERA_CUDA_CHECK(cudaMallocHost(&host_, sizeof(Status)));
    events_.resize(static_cast<std::size_t>(4 * N_ + 2));
    if (s_.solve_lo.empty()) {
      s_.solve_lo.assign(static_cast<std::size_t>(N_), 0);
      s_.solve_n = s_.rows;
    }
    TESSERA_EXPECTS(
        static_cast<int>(s_.solve_lo.size()) == N_ && static_cast<int>(s_.solve_n.size()) == N_,
        "cp_device_loop: solve ranges for " << s_.solve_lo.size() << " of " << N_ << " modes");
    // The pieces per mode (checked before any event or stream exists).
    s_.pieces.resize(static_cast<std::size_t>(N_), 1);
    int most = 1;
    for (int n = 0; n < N_; ++n) {
      const int k = s_.pieces[static_cast<std::size_t>(n)];
      TESSERA_EXPECTS(k >= 1, "cp_device_loop: " << k << " pieces for mode " << n);
      TESSERA_EXPECTS(k == 1 || (s_.solve_lo[static_cast<std::size_t>(n)] == 0 &&
                                 s_.solve_n[static_cast<std::size_t>(n)] ==
                                     s_.rows[static_cast<std::size_t>(n)]),
                      "cp_device_loop: mode " << n << " in pieces but its rows are split");
      most = std::max(most, k);
    }
    for (auto& e : events_) TESSERA_CUDA_CHECK(cudaEventCreate(&e));
    fork_.resize(static_cast<std::size_t>(N_));
    join_.resize(static_cast<std::size_t>(N_));
    for (auto* v : {&fork_, &join_})
      for (auto& e : *v) TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    // Pieces: one event per piece (the piece computed, on the backend's stream) and one per
    // mode (the pieces' sums done, on the communication stream).
    if (most > 1) {
      piece_done_.resize(static_cast<std::size_t>(most));
      sums_done_.resize(static_cast<std::size_t>(N_));
      for (auto* v : {&piece_done_, &sums_done_})
        for (auto& e : *v) TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      // The highest priority: a piece's sum starts as soon as SMs free up, so the peer's
      // NCCL kernel, already running, does not hold its SMs waiting for this one.
      int least = 0, greatest = 0;
      TESSERA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      TESSERA_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_, cudaStreamNonBlocking, greatest));
    }
    if (!s_.graph) why_no_graph_ = "--cuda-graph off";
    const std::size_t smem = normal_inverse_smem(s_.R);
    if (smem > (std::size_t(48) << 10))
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(normal_inverse_kernel<T>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  }
  ~CudaCpLoop() override {
    DeviceGuardNoThrow g(ctx_.device);
    drop_graph();
    for (auto* v : {&events_, &fork_, &join_, &piece_done_, &sums_done_})
      for (auto& e : *v)
        if (e) TESSERA_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
    if (side_) TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(side_));
    if (comm_) TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(comm_));
    if (host_) TESSERA_CUDA_CHECK_NOTHROW(cudaFreeHost(host_));
  }
  CudaCpLoop(const CudaCpLoop&) = delete;
  CudaCpLoop& operator=(const CudaCpLoop&) = delete;

  CpLoopSums iterate(const std::function<void(int, int)>& mttkrp, bool two_norm) override {
    DeviceGuard g(ctx_.device);
    bool replayed = false;
    if (exec_ && !two_norm && still_valid()) {
      TESSERA_CUDA_CHECK(cudaGraphLaunch(exec_, ctx_.stream));
      replayed = true;
    } else if (!two_norm && calls_ > 0 && why_no_graph_.empty()) {
      drop_graph();
      replayed = capture(mttkrp);
      if (replayed) TESSERA_CUDA_CHECK(cudaGraphLaunch(exec_, ctx_.stream));
    }
    if (!replayed) enqueue(mttkrp, two_norm);
    ++calls_;
    if (s_.comm.wait)
      s_.comm.wait();  // polls the communicators: a failed peer must not hang this rank
    else
      ctx_.sync();
    CpLoopSums r;
    r.norm_m2 = host_->norm_m2;
    r.inner = host_->inner;
    r.fallbacks = host_->fallbacks;
    r.bad_mode = host_->bad_mode == INT_MAX ? -1 : host_->bad_mode;
    r.replayed = replayed;
    // Device time per mode n: the MTTKRP (event 4n -> 4n + 1), the reduction of its rows
    // (4n + 1 -> 4n + 2), the solve and normalisation (4n + 2 -> 4n + 3), the Gram's sum
    // and the rows' gather (4n + 3 -> 4n + 4); then the fit's sums (4N -> 4N + 1).
    for (int n = 0; n < N_; ++n) {
      r.kernel_seconds += elapsed(4 * n, 4 * n + 1);
      r.comm_seconds += elapsed(4 * n + 1, 4 * n + 2) + elapsed(4 * n + 3, 4 * n + 4);
      r.solve_seconds += elapsed(4 * n + 2, 4 * n + 3);
    }
    r.solve_seconds += elapsed(4 * N_, 4 * N_ + 1);
    return r;
  }

  void lambda(double* host) override {
    DeviceGuard g(ctx_.device);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, lambda_,
                                       static_cast<std::size_t>(s_.R) * sizeof(double),
                                       cudaMemcpyDeviceToHost, ctx_.stream));
    ctx_.sync();
  }

  std::string describe() const override {
    if (exec_) return "cuda graph";
    return "device kernels, no graph (" +
           (why_no_graph_.empty() ? std::string("not captured yet") : why_no_graph_) + ")";
  }

 private:
  double elapsed(int a, int b) const {
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[static_cast<std::size_t>(a)],
                                            events_[static_cast<std::size_t>(b)]));
    return 1e-3 * ms;
  }
  /// Event k in the stream; inside a capture, as an event node of the graph (so a replay
  /// records it too).
  void record(int k) {
    cudaEvent_t e = events_[static_cast<std::size_t>(k)];
    if (ctx_.capturing)
      TESSERA_CUDA_CHECK(cudaEventRecordWithFlags(e, ctx_.stream, cudaEventRecordExternal));
    else
      TESSERA_CUDA_CHECK(cudaEventRecord(e, ctx_.stream));
  }
  GramSet<T> grams_except(int n) const {
    GramSet<T> g{};
    for (int m = 0; m < N_; ++m)
      if (m != n) g.g[g.count++] = s_.G[static_cast<std::size_t>(m)];
    return g;
  }

  /// The iteration's work, in the stream.
  void enqueue(const std::function<void(int, int)>& mttkrp, bool two_norm) {
    const int R = s_.R;
    reset_kernel<<<1, kBlock, 0, ctx_.stream>>>(st_, norms_, N_ * R);
    TESSERA_CUDA_CHECK_LAUNCH();
    record(0);
    for (int n = 0; n < N_; ++n) {
      // The rows this rank solves (all held rows on one rank): M's and A's from lo.
      const auto lo = s_.solve_lo[static_cast<std::size_t>(n)];
      const std::int64_t rows = s_.solve_n[static_cast<std::size_t>(n)];
      T* A = s_.A[static_cast<std::size_t>(n)] + lo * R;
      const T* M = s_.M + lo * R;
      // V^-1 needs only the other modes' Grams, which are final by now: it runs on the
      // side stream beside the MTTKRP (a parallel branch of the graph).
      const auto sn = static_cast<std::size_t>(n);
      TESSERA_CUDA_CHECK(cudaEventRecord(fork_[sn], ctx_.stream));
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_[sn], 0));
      normal_inverse_kernel<T><<<1, kSolveThreads, normal_inverse_smem(R), side_>>>(
          grams_except(n), R, Vd_, L_, Q_, ev_, W_, st_);
      TESSERA_CUDA_CHECK_LAUNCH();
      TESSERA_CUDA_CHECK(cudaEventRecord(join_[sn], side_));
      const int pieces = s_.pieces[sn];
      if (pieces == 1 || !s_.comm.reduce) {
        for (int j = 0; j < pieces; ++j) mttkrp(n, j);
        record(4 * n + 1);
        if (s_.comm.reduce) s_.comm.reduce(n, 0, ctx_.stream);
      } else {
        // Piece j's rows are summed on the communication stream while piece j + 1 computes;
        // the solve waits for the last sum. The collectives of one communicator stay in one
        // order on every rank: these on comm_, the rest on the backend's stream after them.
        for (int j = 0; j < pieces; ++j) {
          mttkrp(n, j);
          cudaEvent_t done = piece_done_[static_cast<std::size_t>(j)];
          TESSERA_CUDA_CHECK(cudaEventRecord(done, ctx_.stream));
          TESSERA_CUDA_CHECK(cudaStreamWaitEvent(comm_, done, 0));
          s_.comm.reduce(n, j, comm_);
        }
        record(4 * n + 1);
        TESSERA_CUDA_CHECK(cudaEventRecord(sums_done_[sn], comm_));
        TESSERA_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, sums_done_[sn], 0));
      }
      record(4 * n + 2);
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, join_[sn], 0));
      // A = M W; the max-norms (every iteration after the first) come out of the same
      // pass, the first iteration's 2-norms from a second one.
      double* norms = norms_ + static_cast<std::size_t>(n) * R;
      times_w(ctx_, M, A, rows, R, W_, two_norm ? nullptr : norms);
      if (two_norm) column_norms_device(ctx_, A, rows, R, NormKind::two, norms);
      if (s_.comm.norms) s_.comm.norms(n, norms, two_norm);
      normalize_kernel<T>
          <<<grid_for(std::max<std::int64_t>(rows * R, 1)), kBlock, 0, ctx_.stream>>>(
              A, rows * R, R, norms, two_norm, n, lambda_, st_);
      TESSERA_CUDA_CHECK_LAUNCH();
      gram(ctx_, A, rows, R, s_.G[static_cast<std::size_t>(n)]);
      record(4 * n + 3);
      if (s_.comm.share) s_.comm.share(n);
      record(4 * n + 4);
      if (n == N_ - 1) {
        column_dots_device(ctx_, M, A, rows, R, dots_);
        if (s_.comm.dots) s_.comm.dots(dots_);
        GramSet<T> all{};
        for (int m = 0; m < N_; ++m) all.g[all.count++] = s_.G[static_cast<std::size_t>(m)];
        fit_sums_kernel<T><<<1, kSolveThreads, 0, ctx_.stream>>>(all, R, lambda_, dots_, st_);
        TESSERA_CUDA_CHECK_LAUNCH();
        TESSERA_CUDA_CHECK(
            cudaMemcpyAsync(host_, st_, sizeof(Status), cudaMemcpyDeviceToHost, ctx_.stream));
        record(4 * N_ + 1);
      }
    }
  }

  /// Captures one max-norm iteration; false (and no graph from now on, with the reason
  /// logged) when the capture or instantiation fails: the iterations then run eagerly.
  bool capture(const std::function<void(int, int)>& mttkrp) {
    TESSERA_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal));
    ctx_.capturing = true;
    ++ctx_.capture_seq;
    const std::uint64_t epoch = ctx_.stream_epoch;
    std::string failure;
    try {
      enqueue(mttkrp, false);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    ctx_.capturing = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(ctx_.stream, &graph);
    if (failure.empty() && end != cudaSuccess) failure = cudaGetErrorString(end);
    if (failure.empty()) {
      const cudaError_t inst = cudaGraphInstantiate(&exec_, graph, 0);
      if (inst != cudaSuccess) {
        failure = std::string("instantiation: ") + cudaGetErrorString(inst);
        exec_ = nullptr;
      }
    }
    if (graph) TESSERA_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
    if (!failure.empty()) {
      (void)cudaGetLastError();  // the capture's error is not sticky: clear it
      why_no_graph_ = "graph capture failed: " + failure;
      log::warn("CP-ALS: " + why_no_graph_ +
                "; the iterations run as device kernels without a graph");
      return false;
    }
    scratch_ = ctx_.scratch.get();
    gathers_ = ctx_.gathers.get();
    small_ = ctx_.small.get();
    epoch_ = epoch;
    return true;
  }
  /// The captured kernels' scratch pointers still hold (another operation may have grown
  /// ctx.scratch between iterations, e.g. a checkpoint's download does not, a holdout does),
  /// and so do the chunk buffers of a captured tier-2 MTTKRP (mttkrp/stream.cu).
  bool still_valid() const {
    return ctx_.scratch.get() == scratch_ && ctx_.small.get() == small_ &&
           ctx_.gathers.get() == gathers_ && ctx_.stream_epoch == epoch_;
  }
  void drop_graph() {
    if (exec_) TESSERA_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec_));
    exec_ = nullptr;
  }

  Context& ctx_;
  CpLoopSpec<T> s_;
  int N_ = 0;
  DeviceMemory mem_;
  double *Vd_ = nullptr, *L_ = nullptr, *Q_ = nullptr, *W_ = nullptr, *ev_ = nullptr;
  double *norms_ = nullptr, *lambda_ = nullptr, *dots_ = nullptr;
  Status* st_ = nullptr;
  Status* host_ = nullptr;  ///< pinned
  std::vector<cudaEvent_t> events_;
  std::vector<cudaEvent_t> fork_, join_;  ///< per mode: the side stream's branch
  cudaStream_t side_ = nullptr;
  std::vector<cudaEvent_t> piece_done_;  ///< per piece: computed (backend stream)
  std::vector<cudaEvent_t> sums_done_;   ///< per mode: its pieces summed (comm_)
  cudaStream_t comm_ = nullptr;          ///< the pieces' collectives (none without pieces)
  cudaGraphExec_t exec_ = nullptr;
  const void* scratch_ = nullptr;
  const void* gathers_ = nullptr;
  const void* small_ = nullptr;
  std::uint64_t epoch_ = 0;  ///< ctx.stream_epoch when the graph was captured
  int calls_ = 0;
  std::string why_no_graph_;
};

}  // namespace

template <typename T>
std::unique_ptr<CpDeviceLoop<T>> make_cp_loop(Context& ctx, const CpLoopSpec<T>& spec,
                                              std::string* why) {
  const int N = static_cast<int>(spec.A.size());
  TESSERA_EXPECTS(N >= 2 && static_cast<int>(spec.G.size()) == N &&
                      static_cast<int>(spec.rows.size()) == N && spec.M != nullptr,
                  "cp_device_loop: inconsistent spec for order " << N);
  if (spec.R < 1 || spec.R > kLoopMaxR || !times_w_fits(ctx, spec.R)) {
    if (why)
      *why = "R = " + std::to_string(spec.R) + " is above the device loop's " +
             std::to_string(kLoopMaxR);
    return nullptr;
  }
  return std::make_unique<CudaCpLoop<T>>(ctx, spec);
}

template std::unique_ptr<CpDeviceLoop<float>> make_cp_loop<float>(Context&,
                                                                  const CpLoopSpec<float>&,
                                                                  std::string*);
template std::unique_ptr<CpDeviceLoop<double>> make_cp_loop<double>(Context&,
                                                                    const CpLoopSpec<double>&,
                                                                    std::string*);

}  // namespace tessera::kernels::cuda
