// CUDA MTTKRP: what a prepared tensor tells about itself from its sorted copies (the sum
// of its squared values; the distinct indices of each mode), in either tier. The TTMc row
// maps are built by kernels/cuda/ttmc/ttmc.cu.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

namespace {

// ---------------------------------------------------------------------------
// distinct_rows: row starts of the sorted copies
// ---------------------------------------------------------------------------

/// *count += number of k in [0, n) with k == 0 or rows[k] != rows[k - 1] (rows sorted).
__global__ void count_row_starts(const index_t* __restrict__ rows, std::int64_t n,
                                 unsigned long long* count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    c += (k == 0 || rows[k] != rows[k - 1]) ? 1ull : 0ull;
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(count, c);
}

/// flags[rows[k]] = 1 for every k in [0, n) (rows in any order).
__global__ void mark_rows(const index_t* __restrict__ rows, std::int64_t n, unsigned char* flags) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    flags[rows[k]] = 1;
}

/// *count += number of nonzero flags among n.
__global__ void count_flags(const unsigned char* __restrict__ flags, std::int64_t n,
                            unsigned long long* count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    c += flags[k] != 0 ? 1ull : 0ull;
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(count, c);
}

/// *sum += sum of v[k]^2 in double.
template <typename T>
__global__ void sum_squares(const T* __restrict__ v, std::int64_t n, double* sum) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  double c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const double x = static_cast<double>(v[k]);
    c += x * x;
  }
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(sum, c);
}

/// *count += the values of v that are not 1.
template <typename T>
__global__ void count_not_one(const T* __restrict__ v, std::int64_t n, unsigned long long* count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long c = 0;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    c += v[k] != T(1) ? 1ull : 0ull;
  for (int o = kWarp / 2; o > 0; o /= 2) c += __shfl_down_sync(kFullMask, c, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && c != 0) atomicAdd(count, c);
}

}  // namespace

template <typename T>
bool CudaTensorHandle<T>::unit_values() const {
  if (unit_values_ >= 0) return unit_values_ == 1;
  bool unit = true;
  if (streamed_) {  // tier 2: the values of mode 0's chunks in pinned host memory
    const auto& s = *streamed_;
    for (int k = 0; k < s.chunks && unit; ++k) {
      const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
      const auto* v = reinterpret_cast<const T*>(s.host[0].get() + s.chunk_offset(k) +
                                                 values_offset(order(), cnt));
      for (std::size_t j = 0; j < cnt && unit; ++j) unit = v[j] == T(1);
    }
  } else if (nnz_ > 0) {
    DeviceGuard g(device_);
    DeviceMemory acc(sizeof(unsigned long long));
    TESSERA_CUDA_CHECK(cudaMemset(acc.get(), 0, sizeof(unsigned long long)));
    const auto n64 = static_cast<std::int64_t>(nnz_);
    count_not_one<T><<<grid_for(n64, 4096), kBlock>>>(vals(0), n64,
                                                      static_cast<unsigned long long*>(acc.get()));
    TESSERA_CUDA_CHECK_LAUNCH();
    unsigned long long host = 0;
    TESSERA_CUDA_CHECK(
        cudaMemcpy(&host, acc.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    unit = host == 0;
  }
  unit_values_ = unit ? 1 : 0;
  return unit;
}

template <typename T>
double CudaTensorHandle<T>::value_norm_squared() const {
  if (nnz_ == 0) return 0;
  if (streamed_) {  // tier 2: the values of mode 0's chunks in pinned host memory
    const auto& s = *streamed_;
    double sum = 0;
    for (int k = 0; k < s.chunks; ++k) {
      const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
      const auto* v = reinterpret_cast<const T*>(s.host[0].get() + s.chunk_offset(k) +
                                                 values_offset(order(), cnt));
      for (std::size_t j = 0; j < cnt; ++j)
        sum += static_cast<double>(v[j]) * static_cast<double>(v[j]);
    }
    return sum;
  }
  DeviceGuard g(device_);
  DeviceMemory acc(sizeof(double));
  TESSERA_CUDA_CHECK(cudaMemset(acc.get(), 0, sizeof(double)));
  const auto n64 = static_cast<std::int64_t>(nnz_);
  sum_squares<T><<<grid_for(n64, 4096), kBlock>>>(vals(0), n64, static_cast<double*>(acc.get()));
  TESSERA_CUDA_CHECK_LAUNCH();
  double host = 0;
  TESSERA_CUDA_CHECK(cudaMemcpy(&host, acc.get(), sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
std::vector<std::uint64_t> CudaTensorHandle<T>::distinct_rows() const {
  const int N = order();
  std::vector<std::uint64_t> out(static_cast<std::size_t>(N), 0);
  if (nnz_ == 0) return out;
  if (streamed_) {
    // Tier 2: the sorted copies are in pinned host memory, chunk after chunk. The
    // copy stream may still read them, which does not matter for reading here.
    const auto& s = *streamed_;
    for (int n = 0; n < N; ++n) {
      std::uint64_t c = 0;
      bool have_prev = false;
      index_t prev = 0;
      for (int k = 0; k < s.chunks; ++k) {
        const auto cnt = static_cast<std::size_t>(s.chunk_count(k));
        const auto* rows = reinterpret_cast<const index_t*>(
                               s.host[static_cast<std::size_t>(n)].get() + s.chunk_offset(k)) +
                           static_cast<std::size_t>(n) * cnt;
        for (std::size_t j = 0; j < cnt; ++j) {
          if (!have_prev || rows[j] != prev) ++c;
          prev = rows[j];
          have_prev = true;
        }
      }
      out[static_cast<std::size_t>(n)] = c;
    }
    return out;
  }
  // Tier 1: the copy sorted by mode n has its mode-n indices in order. The legacy
  // default stream used here is ordered after the backend's (blocking) stream.
  DeviceGuard g(device_);
  DeviceMemory counts(static_cast<std::size_t>(N) * sizeof(unsigned long long));
  auto* dc = static_cast<unsigned long long*>(counts.get());
  TESSERA_CUDA_CHECK(cudaMemset(dc, 0, static_cast<std::size_t>(N) * sizeof(unsigned long long)));
  const auto n64 = static_cast<std::int64_t>(nnz_);
  for (int n = 0; n < N; ++n) {
    if (plans_.empty() || plans_[static_cast<std::size_t>(n)].layout == Layout::plain) {
      count_row_starts<<<grid_for(n64, 4096), kBlock>>>(idx(n, n), n64, dc + n);
      TESSERA_CUDA_CHECK_LAUNCH();
      continue;
    }
    // A blocked copy repeats its rows once per block: mark them in a flag array instead.
    const auto dim = static_cast<std::int64_t>(dims_[static_cast<std::size_t>(n)]);
    DeviceMemory flags(static_cast<std::size_t>(std::max<std::int64_t>(dim, 1)));
    TESSERA_CUDA_CHECK(cudaMemset(flags.get(), 0, flags.bytes()));
    auto* f = static_cast<unsigned char*>(flags.get());
    mark_rows<<<grid_for(n64, 4096), kBlock>>>(idx(n, n), n64, f);
    TESSERA_CUDA_CHECK_LAUNCH();
    count_flags<<<grid_for(dim, 4096), kBlock>>>(f, dim, dc + n);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  std::vector<unsigned long long> host(static_cast<std::size_t>(N));
  TESSERA_CUDA_CHECK(cudaMemcpy(host.data(), dc, host.size() * sizeof(unsigned long long),
                                cudaMemcpyDeviceToHost));
  for (int n = 0; n < N; ++n) out[static_cast<std::size_t>(n)] = host[static_cast<std::size_t>(n)];
  return out;
}

template <typename T>
std::vector<TcSplit> CudaTensorHandle<T>::tc_split() const {
  std::vector<TcSplit> out;
  for (int m = 0; m < order(); ++m) {
    TcSplit s;
    s.mode = m;
    const auto mi = static_cast<std::size_t>(m);
    const HybridMode<T>* hy = hybrid(m);
    s.why = mi < hybrid_why_.size() ? hybrid_why_[mi] : hybrid_note_;
    if (hy) {
      s.built = true;
      s.tile_mode = hy->tile_mode;
      s.tiles = hy->tiles;
      s.tile_nnz = hy->tile_nnz;
      s.fraction = static_cast<double>(hy->tile_nnz) / static_cast<double>(nnz_);
      s.padding = hy->padding();
      s.bytes = hy->bytes();
      s.predicted_speedup = hy->predicted;
      s.used = hy->used;
      if (hy->rank > 0) {
        std::ostringstream why;
        why.precision(3);
        if (hy->forced)
          why << "--tensor-cores on";
        else
          why << "auto: predicted speedup " << hy->predicted << (hy->used ? " >= " : " < ")
              << kAutoMinSpeedup << " at R " << hy->rank;
        s.why = why.str();
      }
      if (hy->used) s.precision = tc_precision_name(hy->precision);
      if (hy->used && hy->timed) {
        DeviceGuard g(device_);
        TESSERA_CUDA_CHECK(cudaEventSynchronize(hy->ev[2]));
        float a = 0, b = 0;
        TESSERA_CUDA_CHECK(cudaEventElapsedTime(&a, hy->ev[0], hy->ev[1]));
        TESSERA_CUDA_CHECK(cudaEventElapsedTime(&b, hy->ev[1], hy->ev[2]));
        s.rest_seconds = a * 1e-3;
        s.tile_seconds = b * 1e-3;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

template std::vector<TcSplit> CudaTensorHandle<float>::tc_split() const;
template std::vector<TcSplit> CudaTensorHandle<double>::tc_split() const;
template double CudaTensorHandle<float>::value_norm_squared() const;
template double CudaTensorHandle<double>::value_norm_squared() const;
template bool CudaTensorHandle<float>::unit_values() const;
template bool CudaTensorHandle<double>::unit_values() const;
template std::vector<std::uint64_t> CudaTensorHandle<float>::distinct_rows() const;
template std::vector<std::uint64_t> CudaTensorHandle<double>::distinct_rows() const;

}  // namespace tessera::kernels::cuda::mttkrp_detail
