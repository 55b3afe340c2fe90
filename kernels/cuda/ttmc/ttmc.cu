// CUDA TTMc entry points (ops::ttmc_rows / ttmc_scratch_bytes / ttmc) on the tensor
// handle of the CUDA MTTKRP (kernels/cuda/mttkrp/handle.cuh): the output rows of a mode
// (the row map, built on first use and kept by the handle), and the TTMc over the copy
// sorted by the output mode, in either tier (over_copy). The kernels: kernels.cu.
#include <algorithm>
#include <cstdint>
#include <cub/device/device_scan.cuh>
#include <type_traits>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/ttmc/kernels.cuh"
#include "kernels/ttmc.hpp"

namespace tessera::kernels::cuda {

namespace mttkrp_detail {
namespace {

/// Flags of the indices present: flags[rows[k]] = 1.
__global__ void mark_rows_u32(const index_t* __restrict__ rows, std::int64_t n,
                              std::uint32_t* flags) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    flags[rows[k]] = 1;
}

/// rows[pos[i]] = i for the flagged indices i.
__global__ void compact_rows(const std::uint32_t* __restrict__ flags,
                             const std::uint32_t* __restrict__ pos, std::int64_t n, index_t* rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    if (flags[i]) rows[pos[i]] = static_cast<index_t>(i);
}

}  // namespace

template <typename T>
const TtmcRowMap& CudaTensorHandle<T>::ttmc_map(Context& ctx, int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(),
                  "mode " << mode << " of an order-" << order() << " tensor");
  if (ttmc_maps_.size() != dims_.size()) ttmc_maps_.resize(dims_.size());
  TtmcRowMap& m = ttmc_maps_[static_cast<std::size_t>(mode)];
  if (m.ready) return m;
  const auto dim = static_cast<std::int64_t>(dims_[static_cast<std::size_t>(mode)]);
  TESSERA_EXPECTS(dim < (std::int64_t(1) << 32), "mode " << mode << " has " << dim << " indices");
  m.rows.clear();
  m.pos = DeviceMemory(static_cast<std::size_t>(std::max<std::int64_t>(dim, 1)) *
                       sizeof(std::uint32_t));
  if (nnz_ > 0 && streamed_) {
    // Tier 2: the copy sorted by `mode` is in pinned host memory, rows ascending.
    const auto& s = *streamed_;
    for (int k = 0; k < s.chunks; ++k) {
      const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
      const auto* r = reinterpret_cast<const index_t*>(
                          s.host[static_cast<std::size_t>(mode)].get() + s.chunk_offset(k)) +
                      static_cast<std::size_t>(mode) * cnt;
      for (std::size_t j = 0; j < cnt; ++j)
        if (m.rows.empty() || m.rows.back() != r[j]) m.rows.push_back(r[j]);
    }
    std::vector<std::uint32_t> pos(static_cast<std::size_t>(dim), 0);
    for (std::size_t j = 0; j < m.rows.size(); ++j) pos[m.rows[j]] = static_cast<std::uint32_t>(j);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(m.pos.get(), pos.data(), pos.size() * sizeof(std::uint32_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();
  } else if (nnz_ > 0) {
    // Tier 1: flag the indices of the copy sorted by `mode`, exclusive scan -> positions.
    const auto n64 = static_cast<std::int64_t>(nnz_);
    DeviceMemory flags(static_cast<std::size_t>(dim) * sizeof(std::uint32_t));
    auto* f = static_cast<std::uint32_t*>(flags.get());
    auto* pos = static_cast<std::uint32_t*>(m.pos.get());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(f, 0, flags.bytes(), ctx.stream));
    mark_rows_u32<<<grid_for(n64, 4096), kBlock, 0, ctx.stream>>>(idx(mode, mode), n64, f);
    TESSERA_CUDA_CHECK_LAUNCH();
    std::size_t tmp_bytes = 0;
    TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, tmp_bytes, f, pos,
                                                     static_cast<int>(dim), ctx.stream));
    DeviceMemory tmp(std::max<std::size_t>(tmp_bytes, 1));
    TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(), tmp_bytes, f, pos,
                                                     static_cast<int>(dim), ctx.stream));
    std::uint32_t last_pos = 0, last_flag = 0;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&last_pos, pos + dim - 1, sizeof(std::uint32_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(&last_flag, f + dim - 1, sizeof(std::uint32_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
    const std::size_t count = static_cast<std::size_t>(last_pos) + last_flag;
    DeviceMemory rows_dev(std::max<std::size_t>(count, 1) * sizeof(index_t));
    compact_rows<<<grid_for(dim, 4096), kBlock, 0, ctx.stream>>>(
        f, pos, dim, static_cast<index_t*>(rows_dev.get()));
    TESSERA_CUDA_CHECK_LAUNCH();
    m.rows.resize(count);
    if (count > 0)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(m.rows.data(), rows_dev.get(), count * sizeof(index_t),
                                         cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
  }
  m.ready = true;
  return m;
}

}  // namespace mttkrp_detail

using namespace mttkrp_detail;

template <typename T>
std::vector<index_t> ttmc_rows(Context& ctx, const TensorHandle<T>& xh, int mode) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  return x->ttmc_map(ctx, mode).rows;
}

template <typename T>
std::size_t ttmc_scratch_bytes(Context&, const TensorHandle<T>& xh, int mode,
                               const std::vector<int>& ranks) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  TESSERA_EXPECTS(mode >= 0 && mode < x->order(),
                  "mode " << mode << " of an order-" << x->order() << " tensor");
  (void)ttmc_output_cols(ranks, mode);  // the argument checks
  // The row map (kept by the handle) and, while it is built, the flags and scan space.
  const auto dim = static_cast<std::size_t>(x->dims()[static_cast<std::size_t>(mode)]);
  return 3 * dim * sizeof(std::uint32_t) + (std::size_t(1) << 20);
}

template <typename T>
void ttmc(Context& ctx, const TensorHandle<T>& xh, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  const int N = x->order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " tensor");
  const auto* st = x->streamed_store();
  TESSERA_EXPECTS(st == nullptr || (x->compute_stream() == ctx.stream && x->device() == ctx.device),
                  "a tier-2 tensor handle must be used with the CUDA backend that prepared it");
  const TtmcRowMap& map = x->ttmc_map(ctx, mode);
  const std::int64_t C = kernels::detail::ttmc_check_args(
      N, mode, factors, ranks, static_cast<std::int64_t>(map.rows.size()), 0);
  const std::size_t out_bytes = map.rows.size() * static_cast<std::size_t>(C) * sizeof(T);
  TtmcParams<T> p{};
  p.pos = static_cast<const index_t*>(map.pos.get());
  p.out = out;
  p.C = C;
  p.mode = mode;
  DeviceMemory ones;
  if (N == 1) {
    // Y(i, 0) = sum of the values at i (the Kronecker product of no rows is [1]): one
    // input mode of rank 1, the mode itself, whose "factor" is all ones.
    const auto dim = static_cast<std::size_t>(x->dims()[0]);
    ones = DeviceMemory(std::max<std::size_t>(dim, 1) * sizeof(T));
    fill(ctx, static_cast<T*>(ones.get()), dim, T(1));
    p.nin = 1;
    p.in_mode[0] = mode;
    p.in_rank[0] = 1;
    p.factors[mode] = static_cast<const T*>(ones.get());
  } else {
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      p.in_mode[p.nin] = m;
      p.in_rank[p.nin] = ranks[static_cast<std::size_t>(m)];
      p.factors[m] = factors[static_cast<std::size_t>(m)];
      ++p.nin;
    }
  }
  p.exclusive = st != nullptr || x->plan(mode).layout == Layout::plain;
  if constexpr (std::is_same_v<T, float>) {
    // --gather-precision fp16 | bf16: 16-bit copies of the two input factors, which the
    // tensor-core kernel gathers instead (tc.cuh). The space holds every mode's copy, so
    // that it is reserved once for all modes of an iteration.
    const GatherPrecision g = ctx.tuning.gather_precision;
    if (g != GatherPrecision::full && ttmc_takes_low(p, ctx.tuning)) {
      auto bytes_of = [&](int m) {
        const std::size_t b = static_cast<std::size_t>(x->dims()[static_cast<std::size_t>(m)]) *
                              static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)]) * 2;
        return (b + 255) / 256 * 256;
      };
      std::size_t total = 0;
      for (int m = 0; m < N; ++m) total += bytes_of(m);
      ctx.gathers.reserve(total);
      auto* base = static_cast<unsigned char*>(ctx.gathers.get());
      for (int s = 0; s < p.nin; ++s) {
        const int m = p.in_mode[s];
        to_16bit(ctx, p.factors[m], base,
                 static_cast<std::int64_t>(x->dims()[static_cast<std::size_t>(m)]) * p.in_rank[s],
                 g);
        p.low[m] = base;
        base += bytes_of(m);
      }
      p.gather = g;
    }
  }
  over_copy(ctx, *x, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = static_cast<std::int64_t>(cnt);
              launch_ttmc(ctx.stream, p, ctx.tuning);
            });
}

template std::vector<index_t> ttmc_rows<float>(Context&, const TensorHandle<float>&, int);
template std::vector<index_t> ttmc_rows<double>(Context&, const TensorHandle<double>&, int);
template std::size_t ttmc_scratch_bytes<float>(Context&, const TensorHandle<float>&, int,
                                               const std::vector<int>&);
template std::size_t ttmc_scratch_bytes<double>(Context&, const TensorHandle<double>&, int,
                                                const std::vector<int>&);
template void ttmc<float>(Context&, const TensorHandle<float>&, int,
                          const std::vector<const float*>&, const std::vector<int>&, float*);
template void ttmc<double>(Context&, const TensorHandle<double>&, int,
                           const std::vector<const double*>&, const std::vector<int>&, double*);

}  // namespace tessera::kernels::cuda
