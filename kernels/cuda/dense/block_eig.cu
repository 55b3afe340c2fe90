// ops::symmetric_eig_top for float Tucker on the cuda backend: the one-block solver of
// block_eig.cuh where it applies (kernels/ops/tucker_dense.hpp, block_eig_applies), chosen
// over cuSOLVER's dsyevdx by measured time (docs/perf/gpu-h200-tucker.md, sessions 34-36),
// and for n >= 192 the Lanczos kernel of block_lanczos.cuh before it (session 43).
#include <vector>

#include "kernels/cuda/dense/block_eig.cuh"
#include "kernels/cuda/dense/block_lanczos.cuh"
#include "kernels/cuda/runtime/detail.cuh"
#include "kernels/ops/tucker_dense.hpp"

namespace tessera::kernels::cuda {

static_assert(block_eig::kMaxN >= ops::kBlockEigMaxN && block_eig::kMaxK >= ops::kBlockEigMaxK,
              "ops::block_eig_applies admits sizes the one-block solver cannot take");

namespace {
/// The block's threads: 512 (128 registers a thread, 32 bytes spilled) or 1024 (64, about
/// 4 KB spilled), by measured time (docs/perf/gpu-h200-tucker.md, sessions 34 and 36: 1024
/// is 1.5-2x slower).
constexpr int kThreads = 512;

/// Where the Lanczos kernel is tried first: n >= kLanczosMinN and the device holds its block.
/// The kernel pads to 256, so it costs the same at every n; on an H200 it answers in 0.41-0.71
/// ms, the exact solver takes 0.39 ms at n = 128 and 1.0 at 256 (docs/perf/gpu-h200-tucker.md,
/// session 43). 192 lies between, not measured.
constexpr int kLanczosMinN = 192;
constexpr int kDeclineStreak = 3, kRetryEvery = 16;

bool lanczos_applies(const Context& ctx, int n, int k) {
  if (ctx.tuning.eig_solver == EigSolver::exact) return false;
  if (n < kLanczosMinN || n > block_eig::kLanczosN || k > block_eig::kMaxK || k > n) return false;
  int optin = 0;
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device));
  return block_eig::lanczos_smem_bytes() <= static_cast<std::size_t>(optin);
}

}  // namespace

bool block_eig_fits(const Context& ctx, int n, int k) {
  if (!ops::block_eig_applies(n, k)) return false;
  int optin = 0;
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device));
  return block_eig::smem_bytes(n, k) <= static_cast<std::size_t>(optin);
}

void block_symmetric_eig_top(Context& ctx, const double* S, int n, int k, double* w_host,
                             double* V) {
  TESSERA_EXPECTS(ops::block_eig_applies(n, k),
                  "block_symmetric_eig_top: n " << n << ", k " << k << " out of its range");
  Arena a;
  const std::size_t o_w = a.add<double>(static_cast<std::size_t>(k) + 1);
  ctx.scratch.reserve(a.total());
  double* w = Arena::at<double>(ctx.scratch.get(), o_w);
  // Lanczos first where it pays (n >= kLanczosMinN) and the device holds it; the exact solver
  // then runs only where Lanczos declined (block_lanczos.cuh).
  // After kDeclineStreak declines in a row (a run whose spectra Lanczos cannot settle in its
  // steps, or whose guard finds missed copies), it is tried only every kRetryEvery-th solve
  // until it answers again, so such a run pays little for it (congress at 16,16,16 was one,
  // 59 of 60 declined by the guard's fixed margin, before session 44).
  Context::EigLanczos& el = ctx.eig_lanczos;
  bool lanczos = lanczos_applies(ctx, n, k);
  if (lanczos && el.streak >= kDeclineStreak) lanczos = ++el.skipped % kRetryEvery == 0;
  if (lanczos) TESSERA_CUDA_CHECK(block_eig::launch_lanczos_top(S, n, k, V, w, ctx.stream));
  TESSERA_CUDA_CHECK(
      block_eig::launch_top_eigenpairs<kThreads>(S, n, k, V, w, ctx.stream, nullptr, lanczos));
  std::vector<double> wh(static_cast<std::size_t>(k) + 1);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(wh.data(), w, wh.size() * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  const double flag = wh[static_cast<std::size_t>(k)];
  TESSERA_EXPECTS(flag != block_eig::kNotFinite,
                  "symmetric_eig_top: the matrix has a non-finite entry "
                  "(n "
                      << n << ")");
  TESSERA_EXPECTS(
      flag == 0 || (lanczos && flag == block_eig::kExactAfterLanczos),
      "symmetric_eig_top: the one-block solver left state " << flag << " (n " << n << ")");
  if (lanczos && flag == 0) {
    ++el.answered;
    el.streak = 0;
    el.skipped = 0;
  } else if (lanczos) {
    ++el.declined;
    ++el.streak;
  }
  for (int j = 0; j < k; ++j) w_host[j] = wh[static_cast<std::size_t>(j)];
}

}  // namespace tessera::kernels::cuda
