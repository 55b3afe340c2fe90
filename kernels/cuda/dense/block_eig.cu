// ops::symmetric_eig_top for float Tucker on the cuda backend: the one-block solver of
// block_eig.cuh where it applies (kernels/ops/tucker_dense.hpp, block_eig_applies), chosen
// over cuSOLVER's dsyevdx by measured time (docs/perf/gpu-h200-tucker.md, sessions 34-36).
#include <vector>

#include "kernels/cuda/dense/block_eig.cuh"
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
  TESSERA_CUDA_CHECK(block_eig::launch_top_eigenpairs<kThreads>(S, n, k, V, w, ctx.stream));
  std::vector<double> wh(static_cast<std::size_t>(k) + 1);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(wh.data(), w, wh.size() * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  TESSERA_EXPECTS(wh[static_cast<std::size_t>(k)] == 0,
                  "symmetric_eig_top: the matrix has a non-finite entry "
                  "(n "
                      << n << ")");
  for (int j = 0; j < k; ++j) w_host[j] = wh[static_cast<std::size_t>(j)];
}

}  // namespace tessera::kernels::cuda
