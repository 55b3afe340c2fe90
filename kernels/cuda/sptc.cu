// SpTC on the device (kernels/sptc.hpp; Backend::contract_plan / Backend::contract of the
// cuda backend). Sort-based, without per-product atomics:
//
//   plan  (match) X and Y uploaded (one copy for a self-contraction); Y's matched
//                 coordinates packed into 64-bit mixed-radix keys and sorted with a
//                 permutation (cub::DeviceRadixSort::SortPairs); every X nonzero finds its
//                 run of Y nonzeros by binary search (lower/upper bound of its key); the
//                 run lengths scanned (cub::DeviceScan::ExclusiveSum): the product count.
//        (count) the output key of every product (output coordinates packed with output
//                mode 0 most significant, so key order is the output's lexicographic
//                order) sorted (SortKeys) and its distinct values counted: the exact
//                output size, before any output memory exists.
//   run   (multiply) keys and values (double) of every product, SortPairs by key (stable),
//                cub::DeviceReduce::ReduceByKey sums equal keys in double.
//        (assemble) entries whose sum rounded to T is zero flagged out, positions by
//                ExclusiveSum, keys decoded into output coordinates, downloaded.
//
// Device memory (P products, E output entries, N output modes): the plan holds the inputs
// (4 bytes per coordinate, sizeof(T) per value) plus 16 bytes per X and Y nonzero; the
// count pass adds 16 P, the run max(32 P, (32 + 4 N) E + sizeof(T) E) plus CUB
// temporaries. A plan that does not fit the device's free memory is refused with
// InputError (more ranks, or --backend cpu). Keys that do not fit 64 bits (product of the
// matched lengths, or of the output lengths, over 2^64) fall back to the cpu backend's
// implementation with a logged note.
#include <algorithm>
#include <cstdio>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/detail.cuh"
#include "kernels/mttkrp.hpp"
#include "kernels/sptc.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::kernels::cuda {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;
using u128 = unsigned __int128;

/// Columns of a mixed-radix key: key = ((c0 * d1 + c1) * d2 + c2) ...
struct KeyMap {
  int n = 0;
  const index_t* col[kMaxOrder] = {};
  u64 dim[kMaxOrder] = {};
};

/// Output coordinates of a product: mode o from X's nonzero (from_y[o] == 0) or from Y's.
struct OutMap {
  int n = 0;
  int from_y[kMaxOrder] = {};
  const index_t* col[kMaxOrder] = {};
  u64 dim[kMaxOrder] = {};
};

__device__ __forceinline__ u64 pack(const KeyMap& m, i64 k) {
  u64 key = 0;
  for (int c = 0; c < m.n; ++c) key = key * m.dim[c] + m.col[c][k];
  return key;
}

__global__ void y_keys_kernel(i64 n, KeyMap m, u64* key, index_t* perm) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[k] = pack(m, k);
    perm[k] = static_cast<index_t>(k);
  }
}

/// Per X nonzero: the first position of its key among Y's sorted keys and the run length.
__global__ void x_ranges_kernel(i64 nx, KeyMap m, const u64* ykey, i64 ny, index_t* first,
                                i64* cnt) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < nx;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 key = pack(m, k);
    i64 lo = 0, hi = ny;
    while (lo < hi) {  // first key >= key
      const i64 mid = (lo + hi) / 2;
      if (ykey[mid] < key)
        lo = mid + 1;
      else
        hi = mid;
    }
    i64 lo2 = lo, hi2 = ny;
    while (lo2 < hi2) {  // first key > key
      const i64 mid = (lo2 + hi2) / 2;
      if (ykey[mid] <= key)
        lo2 = mid + 1;
      else
        hi2 = mid;
    }
    first[k] = static_cast<index_t>(lo);
    cnt[k] = lo2 - lo;
  }
}

/// Product p: X nonzero i (the last with off[i] <= p) times sorted Y nonzero
/// first[i] + p - off[i]. Writes its output key, and with kValues its value in double.
template <typename T, bool kValues>
__global__ void products_kernel(i64 total, const i64* off, i64 nx, const index_t* first,
                                const index_t* yperm, OutMap m, const T* xv, const T* yv, u64* key,
                                double* val) {
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<i64>(gridDim.x) * blockDim.x) {
    i64 lo = 0, hi = nx;
    while (lo < hi) {
      const i64 mid = (lo + hi) / 2;
      if (off[mid] <= p)
        lo = mid + 1;
      else
        hi = mid;
    }
    const i64 i = lo - 1;
    const i64 j = yperm[static_cast<i64>(first[i]) + (p - off[i])];
    u64 k = 0;
    for (int o = 0; o < m.n; ++o) k = k * m.dim[o] + m.col[o][m.from_y[o] ? j : i];
    key[p] = k;
    if constexpr (kValues) val[p] = static_cast<double>(xv[i]) * static_cast<double>(yv[j]);
  }
}

/// *count += number of positions p with p == 0 or key[p] != key[p - 1] (sorted keys).
__global__ void count_distinct_kernel(i64 n, const u64* key, unsigned long long* count) {
  unsigned long long local = 0;
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x)
    if (p == 0 || key[p] != key[p - 1]) ++local;
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(count, local);
}

template <typename T>
__global__ void keep_flags_kernel(i64 n, const double* sum, i64* flag) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[e] = static_cast<T>(sum[e]) != T(0) ? 1 : 0;
}

/// Kept entry e goes to position pos[e]: coordinates decoded from its key (column o of
/// the output at cols + o * stride), value rounded to T.
template <typename T>
__global__ void scatter_kernel(i64 n, const u64* key, const double* sum, const i64* flag,
                               const i64* pos, OutMap m, index_t* cols, i64 stride, T* vals) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!flag[e]) continue;
    const i64 q = pos[e];
    u64 k = key[e];
    for (int o = m.n - 1; o >= 0; --o) {
      cols[o * stride + q] = static_cast<index_t>(k % m.dim[o]);
      k /= m.dim[o];
    }
    vals[q] = static_cast<T>(sum[e]);
  }
}

/// Product of the lengths, saturated at 2^64 + 1 (over 64 bits).
u128 cells(const std::vector<u64>& d) {
  const u128 cap = (static_cast<u128>(1) << 64) + 1;
  u128 n = 1;
  for (u64 v : d) {
    n *= v;
    if (n > cap) return cap;
  }
  return n;
}

/// Bits a radix sort must look at for keys < n (at least 1).
int key_bits(u128 n) {
  int b = 1;
  while (b < 64 && (static_cast<u128>(1) << b) < n) ++b;
  return b;
}

std::string gib(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

template <typename U>
U* ptr(const DeviceMemory& m) {
  return static_cast<U*>(m.get());
}

/// Allocates `bytes` (at least 1) or throws Error naming the purpose.
void alloc(DeviceMemory& m, std::size_t bytes, const char* what) {
  const cudaError_t e = m.try_reserve(std::max<std::size_t>(bytes, 1));
  if (e != cudaSuccess)
    TESSERA_THROW("SpTC (cuda backend): cudaMalloc of " << bytes << " bytes for " << what
                                                        << " failed (" << detail::cuda_error_text(e)
                                                        << ")");
}

template <typename U>
void upload(Context& ctx, DeviceMemory& m, const std::vector<U>& v, const char* what) {
  alloc(m, v.size() * sizeof(U), what);
  if (!v.empty())
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(m.get(), v.data(), v.size() * sizeof(U),
                                       cudaMemcpyHostToDevice, ctx.stream));
}

template <typename U>
U download_one(Context& ctx, const U* dev) {
  U v{};
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(&v, dev, sizeof(U), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  return v;
}

/// One input on the device: every mode's coordinates and the values.
template <typename T>
struct DeviceTensor {
  std::vector<DeviceMemory> cols;
  DeviceMemory vals;
  std::size_t bytes = 0;
  void load(Context& ctx, const SparseTensor<T>& t) {
    cols.resize(t.idx.size());
    for (std::size_t m = 0; m < t.idx.size(); ++m) upload(ctx, cols[m], t.idx[m], "SpTC input");
    upload(ctx, vals, t.vals, "SpTC input");
    bytes = static_cast<std::size_t>(t.nnz()) * (t.idx.size() * sizeof(index_t) + sizeof(T));
  }
  const index_t* col(int m) const { return ptr<index_t>(cols[static_cast<std::size_t>(m)]); }
};

/// Throws InputError unless `bytes` more fit the device's free memory (less a reserve).
void check_fits(const Context& ctx, std::size_t bytes, const std::string& what, i64 products,
                i64 entries) {
  std::size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const std::size_t reserve = std::min<std::size_t>(free_b, total_b / 50 + (64u << 20));
  TESSERA_INPUT_CHECK(bytes <= free_b - reserve,
                      "SpTC (cuda backend): "
                          << what << " needs about " << gib(bytes) << " of device memory ("
                          << products << " products"
                          << (entries >= 0 ? ", " + std::to_string(entries) + " output entries"
                                           : std::string())
                          << "), but device " << ctx.device << " has " << gib(free_b) << " free of "
                          << gib(total_b) << "; use more ranks, or --backend cpu");
}

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms / 1000.0f;
}

template <typename T>
class CudaContractPlan final : public ContractPlan<T> {
 public:
  CudaContractPlan(Context& ctx, const SparseTensor<T>& x, const SparseTensor<T>& y,
                   const ContractSpec& spec)
      : ctx_(ctx), spec_(spec) {
    dims_ = contract_output_dims(spec, x.dims, y.dims);
    check_kernel_input(x);
    if (&y != &x) check_kernel_input(y);
    std::vector<u64> kdims;
    for (int m : spec.x_key) kdims.push_back(x.dims[static_cast<std::size_t>(m)]);
    const u128 kcells = cells(kdims), ocells = cells(dims_);
    const u128 lim = static_cast<u128>(1) << 64;
    if (kcells > lim || ocells > lim) {
      log::info(std::string("SpTC (cuda backend): the ") +
                (kcells > lim ? "matched coordinates" : "output coordinates") + " of '" +
                spec.text +
                "' do not fit a 64-bit key (product of their lengths over 2^64); running the "
                "cpu backend's implementation");
      fallback_ = cpu::plan_contract(x, y, spec);
      count_ = fallback_->count();
      return;
    }
    nx_ = x.nnz();
    ny_ = y.nnz();
    TESSERA_INPUT_CHECK(nx_ < (i64{1} << 32) - 1 && ny_ < (i64{1} << 32) - 1,
                        "SpTC (cuda backend): an input has more than 2^32 - 2 nonzeros on one "
                        "rank; use more ranks");
    kbits_ = key_bits(kcells);
    obits_ = key_bits(ocells);
  }

  /// The device part of planning (after the cheap checks of the constructor).
  void build(const SparseTensor<T>& x, const SparseTensor<T>& y) {
    if (fallback_ || nx_ == 0 || ny_ == 0) return;
    const std::size_t in_bytes =
        static_cast<std::size_t>(nx_) * (x.idx.size() * sizeof(index_t) + sizeof(T)) +
        (&x == &y ? 0
                  : static_cast<std::size_t>(ny_) * (y.idx.size() * sizeof(index_t) + sizeof(T)));
    // Y keys (two) and permutation (two), X first / counts / offsets.
    const std::size_t match_bytes = static_cast<std::size_t>(ny_) * 2 * (8 + sizeof(index_t)) +
                                    static_cast<std::size_t>(nx_) * (sizeof(index_t) + 16);
    check_fits(ctx_, in_bytes + match_bytes, "matching the inputs", 0, -1);
    ev_.ensure(3);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
    xd_.load(ctx_, x);
    const DeviceTensor<T>* yd = &xd_;
    if (&x != &y) {
      yd_.load(ctx_, y);
      yd = &yd_;
    }
    held_ = xd_.bytes + yd_.bytes;
    KeyMap xk, yk;
    xk.n = yk.n = static_cast<int>(spec_.x_key.size());
    for (int c = 0; c < xk.n; ++c) {
      const auto cs = static_cast<std::size_t>(c);
      xk.col[c] = xd_.col(spec_.x_key[cs]);
      yk.col[c] = yd->col(spec_.y_key[cs]);
      xk.dim[c] = yk.dim[c] = x.dims[static_cast<std::size_t>(spec_.x_key[cs])];
    }
    // Y sorted by key, with the permutation.
    {
      DeviceMemory k0, k1, p0;
      alloc(k0, static_cast<std::size_t>(ny_) * 8, "SpTC keys");
      alloc(k1, static_cast<std::size_t>(ny_) * 8, "SpTC keys");
      alloc(p0, static_cast<std::size_t>(ny_) * sizeof(index_t), "SpTC permutation");
      alloc(yperm_, static_cast<std::size_t>(ny_) * sizeof(index_t), "SpTC permutation");
      y_keys_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(ny_, yk, ptr<u64>(k0),
                                                               ptr<index_t>(p0));
      TESSERA_CUDA_CHECK(cudaGetLastError());
      cub::DoubleBuffer<u64> keys(ptr<u64>(k0), ptr<u64>(k1));
      cub::DoubleBuffer<index_t> perm(ptr<index_t>(p0), ptr<index_t>(yperm_));
      std::size_t tmp_bytes = 0;
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, keys, perm, ny_, 0,
                                                         kbits_, ctx_.stream));
      DeviceMemory tmp;
      alloc(tmp, tmp_bytes, "SpTC sort temporaries");
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp.get(), tmp_bytes, keys, perm, ny_, 0,
                                                         kbits_, ctx_.stream));
      if (perm.Current() != ptr<index_t>(yperm_)) yperm_ = std::move(p0);
      const u64* ykey = keys.Current();
      // X's ranges and the scan of their lengths.
      alloc(xfirst_, static_cast<std::size_t>(nx_) * sizeof(index_t), "SpTC ranges");
      alloc(xoff_, static_cast<std::size_t>(nx_) * sizeof(i64), "SpTC ranges");
      DeviceMemory cnt;
      alloc(cnt, static_cast<std::size_t>(nx_) * sizeof(i64), "SpTC ranges");
      x_ranges_kernel<<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
          nx_, xk, ykey, ny_, ptr<index_t>(xfirst_), ptr<i64>(cnt));
      TESSERA_CUDA_CHECK(cudaGetLastError());
      std::size_t scan_bytes = 0;
      TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, ptr<i64>(cnt),
                                                       ptr<i64>(xoff_), nx_, ctx_.stream));
      alloc(tmp, scan_bytes, "SpTC scan temporaries");
      TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(), scan_bytes, ptr<i64>(cnt),
                                                       ptr<i64>(xoff_), nx_, ctx_.stream));
      const i64 last_off = download_one(ctx_, ptr<i64>(xoff_) + (nx_ - 1));
      const i64 last_cnt = download_one(ctx_, ptr<i64>(cnt) + (nx_ - 1));
      products_ = last_off + last_cnt;
    }
    held_ += static_cast<std::size_t>(ny_) * sizeof(index_t) +
             static_cast<std::size_t>(nx_) * (sizeof(index_t) + sizeof(i64));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
    count_.products = products_;

    // Output map (device column pointers).
    om_.n = spec_.out_order();
    for (int o = 0; o < om_.n; ++o) {
      const auto os = static_cast<std::size_t>(o);
      om_.from_y[o] = spec_.out_from_y[os] ? 1 : 0;
      om_.col[o] = om_.from_y[o] ? yd->col(spec_.out_mode[os]) : xd_.col(spec_.out_mode[os]);
      om_.dim[o] = dims_[os];
    }
    // Count pass: distinct output keys.
    i64 entries = 0;
    std::size_t sort_tmp = 0;
    if (products_ > 0) {
      {
        cub::DoubleBuffer<u64> keys(nullptr, nullptr);
        cub::DoubleBuffer<double> vals(nullptr, nullptr);
        TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_tmp, keys, vals, products_,
                                                           0, obits_, ctx_.stream));
      }
      const std::size_t P = static_cast<std::size_t>(products_);
      check_fits(ctx_, 16 * P + sort_tmp + 256, "counting the output", products_, -1);
      DeviceMemory k0, k1, tmp, c;
      alloc(k0, P * 8, "SpTC output keys");
      alloc(k1, P * 8, "SpTC output keys");
      alloc(c, sizeof(unsigned long long), "SpTC count");
      products_kernel<T, false><<<grid_for(products_), kBlock, 0, ctx_.stream>>>(
          products_, ptr<i64>(xoff_), nx_, ptr<index_t>(xfirst_), ptr<index_t>(yperm_), om_,
          nullptr, nullptr, ptr<u64>(k0), nullptr);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      cub::DoubleBuffer<u64> keys(ptr<u64>(k0), ptr<u64>(k1));
      std::size_t tmp_bytes = 0;
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, tmp_bytes, keys, products_, 0,
                                                        obits_, ctx_.stream));
      alloc(tmp, tmp_bytes, "SpTC sort temporaries");
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(tmp.get(), tmp_bytes, keys, products_, 0,
                                                        obits_, ctx_.stream));
      TESSERA_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, sizeof(unsigned long long), ctx_.stream));
      count_distinct_kernel<<<grid_for(products_, 4096), kBlock, 0, ctx_.stream>>>(
          products_, keys.Current(), ptr<unsigned long long>(c));
      TESSERA_CUDA_CHECK(cudaGetLastError());
      entries = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(c)));
      count_peak_ = 16 * P + tmp_bytes;
    }
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
    ctx_.sync();
    match_s_ = elapsed(ev_[0], ev_[1]);
    count_s_ = elapsed(ev_[1], ev_[2]);
    count_.output_entries = entries;
    count_.output_bytes =
        static_cast<std::size_t>(entries) * contract_entry_bytes(spec_, sizeof(T));
    const std::size_t P = static_cast<std::size_t>(products_),
                      E = static_cast<std::size_t>(entries);
    run_peak_ = std::max(32 * P + sort_tmp,
                         (32 + 4 * static_cast<std::size_t>(om_.n) + sizeof(T)) * E + sort_tmp) +
                4096;
    count_.workspace_bytes = held_ + std::max(count_peak_, run_peak_);
    if (products_ > 0) check_fits(ctx_, run_peak_, "the contraction", products_, entries);
  }

  const ContractSpec& spec() const override { return spec_; }
  const std::vector<std::uint64_t>& output_dims() const override { return dims_; }
  const ContractCount& count() const override { return count_; }
  double match_seconds() const override {
    return fallback_ ? fallback_->match_seconds() : match_s_;
  }
  double count_seconds() const override {
    return fallback_ ? fallback_->count_seconds() : count_s_;
  }

  SparseTensor<T> run(ContractStats* stats);

 private:
  Context& ctx_;
  ContractSpec spec_;
  std::vector<u64> dims_;
  ContractCount count_;
  std::unique_ptr<ContractPlan<T>> fallback_;  ///< keys over 64 bits: the cpu plan
  i64 nx_ = 0, ny_ = 0, products_ = 0;
  int kbits_ = 1, obits_ = 1;
  DeviceTensor<T> xd_, yd_;  // yd_ empty for a self-contraction
  DeviceMemory yperm_, xfirst_, xoff_;
  OutMap om_;
  EventPool ev_;
  std::size_t held_ = 0, count_peak_ = 0, run_peak_ = 0;
  double match_s_ = 0, count_s_ = 0;
};

template <typename T>
SparseTensor<T> CudaContractPlan<T>::run(ContractStats* stats) {
  if (fallback_) return cpu::contract(*fallback_, stats);
  ContractStats st;
  st.match_seconds = match_s_;
  st.count_seconds = count_s_;
  st.products = products_;
  st.workspace_bytes = count_.workspace_bytes;
  SparseTensor<T> out(dims_);
  if (products_ == 0) {
    if (stats) *stats = st;
    return out;
  }
  check_fits(ctx_, run_peak_, "the contraction", products_, count_.output_entries);
  ev_.ensure(3);
  const std::size_t P = static_cast<std::size_t>(products_);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  // ---- multiply: product keys and values, sorted, equal keys summed ----
  DeviceMemory k[2], v[2], tmp, nruns;
  for (int b = 0; b < 2; ++b) {
    alloc(k[b], P * 8, "SpTC product keys");
    alloc(v[b], P * sizeof(double), "SpTC product values");
  }
  alloc(nruns, sizeof(i64), "SpTC run count");
  products_kernel<T, true><<<grid_for(products_), kBlock, 0, ctx_.stream>>>(
      products_, ptr<i64>(xoff_), nx_, ptr<index_t>(xfirst_), ptr<index_t>(yperm_), om_,
      ptr<T>(xd_.vals), yd_.cols.empty() ? ptr<T>(xd_.vals) : ptr<T>(yd_.vals), ptr<u64>(k[0]),
      ptr<double>(v[0]));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  cub::DoubleBuffer<u64> keys(ptr<u64>(k[0]), ptr<u64>(k[1]));
  cub::DoubleBuffer<double> vals(ptr<double>(v[0]), ptr<double>(v[1]));
  std::size_t tmp_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, keys, vals, products_, 0,
                                                     obits_, ctx_.stream));
  alloc(tmp, tmp_bytes, "SpTC sort temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp.get(), tmp_bytes, keys, vals, products_, 0,
                                                     obits_, ctx_.stream));
  const int cur = keys.selector;  // the sorted keys; the other buffers receive the sums
  const int vcur = vals.selector;
  u64* ukey = ptr<u64>(k[1 - cur]);
  double* usum = ptr<double>(v[1 - vcur]);
  std::size_t red_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceReduce::ReduceByKey(
      nullptr, red_bytes, keys.Current(), ukey, vals.Current(), usum, ptr<i64>(nruns),
      ::cuda::std::plus<double>{}, products_, ctx_.stream));
  alloc(tmp, red_bytes, "SpTC reduce temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceReduce::ReduceByKey(
      tmp.get(), red_bytes, keys.Current(), ukey, vals.Current(), usum, ptr<i64>(nruns),
      ::cuda::std::plus<double>{}, products_, ctx_.stream));
  const i64 E = download_one(ctx_, ptr<i64>(nruns));
  TESSERA_EXPECTS(E == count_.output_entries, "SpTC (cuda backend): the run found "
                                                  << E << " output entries, the count pass "
                                                  << count_.output_entries);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  k[cur] = DeviceMemory();  // the sorted products are no longer needed
  v[vcur] = DeviceMemory();
  // ---- assemble: drop exact zeros, decode, download ----
  const std::size_t Es = static_cast<std::size_t>(E);
  const int N = om_.n;
  DeviceMemory flag, pos, cols, ovals;
  alloc(flag, Es * sizeof(i64), "SpTC flags");
  alloc(pos, Es * sizeof(i64), "SpTC positions");
  keep_flags_kernel<T><<<grid_for(E), kBlock, 0, ctx_.stream>>>(E, usum, ptr<i64>(flag));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  std::size_t scan_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, ptr<i64>(flag),
                                                   ptr<i64>(pos), E, ctx_.stream));
  alloc(tmp, scan_bytes, "SpTC scan temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(), scan_bytes, ptr<i64>(flag),
                                                   ptr<i64>(pos), E, ctx_.stream));
  const i64 nnz =
      download_one(ctx_, ptr<i64>(pos) + (E - 1)) + download_one(ctx_, ptr<i64>(flag) + (E - 1));
  alloc(cols, Es * static_cast<std::size_t>(N) * sizeof(index_t), "SpTC output");
  alloc(ovals, Es * sizeof(T), "SpTC output");
  scatter_kernel<T><<<grid_for(E), kBlock, 0, ctx_.stream>>>(
      E, ukey, usum, ptr<i64>(flag), ptr<i64>(pos), om_, ptr<index_t>(cols), E, ptr<T>(ovals));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const std::size_t n = static_cast<std::size_t>(nnz);
  for (int o = 0; o < N; ++o) {
    auto& col = out.idx[static_cast<std::size_t>(o)];
    col.resize(n);
    if (n)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(col.data(), ptr<index_t>(cols) + static_cast<i64>(o) * E,
                                         n * sizeof(index_t), cudaMemcpyDeviceToHost, ctx_.stream));
  }
  out.vals.resize(n);
  if (n)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(out.vals.data(), ovals.get(), n * sizeof(T),
                                       cudaMemcpyDeviceToHost, ctx_.stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  st.multiply_seconds = elapsed(ev_[0], ev_[1]);
  st.assemble_seconds = elapsed(ev_[1], ev_[2]);
  st.output_entries = E;
  st.output_nnz = nnz;
  st.zeros_dropped = E - nnz;
  if (stats) *stats = st;
  return out;
}

}  // namespace

template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(Context& ctx, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  auto p = std::make_unique<CudaContractPlan<T>>(ctx, x, y, spec);
  p->build(x, y);
  return p;
}

template <typename T>
SparseTensor<T> contract(Context&, ContractPlan<T>& plan, ContractStats* stats) {
  auto* p = dynamic_cast<CudaContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  return p->run(stats);
}

template std::unique_ptr<ContractPlan<float>> plan_contract<float>(Context&,
                                                                   const SparseTensor<float>&,
                                                                   const SparseTensor<float>&,
                                                                   const ContractSpec&);
template std::unique_ptr<ContractPlan<double>> plan_contract<double>(Context&,
                                                                     const SparseTensor<double>&,
                                                                     const SparseTensor<double>&,
                                                                     const ContractSpec&);
template SparseTensor<float> contract<float>(Context&, ContractPlan<float>&, ContractStats*);
template SparseTensor<double> contract<double>(Context&, ContractPlan<double>&, ContractStats*);

}  // namespace tessera::kernels::cuda
