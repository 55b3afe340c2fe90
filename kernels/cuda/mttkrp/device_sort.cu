// CUDA MTTKRP: the tier-1 sorted copies built on the device (CUB radix sort of a COO
// block in device memory, then one gather per mode), in the layout layout.cu chose for
// each mode. Called by prepare.cu, which falls back to the host sort when this does not
// fit or fails to allocate.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <sstream>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

// ---- device sort (tier 1) ----
//
// The COO (index arrays and values, laid out like a sorted copy) is uploaded once. Per
// mode n, with s = n + 1 mod N:
//   1. key[k] = i_n[k] << bits(s) | i_s[k] and perm[k] = k, where bits(m) is the number
//      of bits of dims[m] - 1; the key is uint32 when bits(n) + bits(s) <= 32, else
//      uint64 (dims <= 2^32, so it always fits);
//   2. one cub::DeviceRadixSort::SortPairs (key, perm) over bits [0, bits(n) + bits(s)):
//      LSD radix sort is stable, so equal keys keep position order and the result is the
//      order of the host sort, (i_n, i_s, k);
//   3. the keys, the sort's temporary storage and the other perm buffer are freed, the
//      copy of mode n is allocated, and one kernel gathers every index array and the
//      values through perm into it; perm is freed.
// When bits(n) + bits(s) == 0 (both modes of length 1) the order is the input order and
// the copy is the COO block itself, copied.
// Counts: perm is uint32 and CUB's num_items an int while nnz <= INT_MAX; beyond that
// both are 64-bit (CUB picks 64-bit offsets for a 64-bit num_items and sorts in portions
// of < 2^28 items, so any nnz works). Kernels use grid-stride loops over int64.
// Peak device memory (device_sort_peak): the largest of, over the modes n,
//   n copies + COO + 2 nnz (sizeof key + sizeof perm) + CUB temporary   (sort of mode n)
//   (n + 1) copies + COO + nnz sizeof perm                               (gather of mode n)
// i.e. at most (final copies) + (one COO, the size of one copy) + (sort temporaries).
// For order 3, float, uint32 keys: 4 copies + 8 bytes per nonzero (the copies are 16).

namespace {

/// The sort key of mode n: (block, i_n, i_s) packed as block << (bits(n) + shift) |
/// i_n << shift | i_s, where the block term exists for the blocked layouts only.
struct ModeKey {
  int primary = -1;     ///< mode n, or -1 when it has no bits
  int secondary = -1;   ///< mode s, or -1 when it has no bits (or N == 1, or no room)
  int shift = 0;        ///< bits of the secondary
  int block_shift = 0;  ///< bits of primary and secondary
  int block_bits = 0;   ///< bits of the block number (0: plain layout)
  BlockSpec block;
  int end_bit = 0;  ///< bits of the whole key
  bool wide() const { return end_bit > 32; }
};

/// The key of mode n under `plan` (plain when plan is null). A blocked key drops the
/// secondary when it would not fit in 64 bits (plan_mode refuses layouts whose block
/// and primary bits alone do not fit).
ModeKey mode_key(const std::vector<std::uint64_t>& dims, int n, const ModePlan* plan = nullptr) {
  const int N = static_cast<int>(dims.size());
  ModeKey k;
  const int bn = index_bits(dims[n]);
  int bs = N > 1 ? index_bits(dims[(n + 1) % N]) : 0;
  int bb = 0;
  if (plan != nullptr && plan->layout != Layout::plain) {
    bb = index_bits(plan->blocks);
    k.block = plan->spec;
    if (bb + bn + bs > 64) bs = 0;
  }
  if (bn > 0) k.primary = n;
  if (bs > 0) {
    k.secondary = (n + 1) % N;
    k.shift = bs;
  }
  k.block_shift = bn + bs;
  k.block_bits = bb;
  k.end_bit = bb + bn + bs;
  return k;
}

struct KeyParams {
  const index_t* coo;  ///< index arrays of the COO, stride n
  std::int64_t n;
  ModeKey key;
};

/// key[k] = block << block_shift | primary[k] << shift | secondary[k], perm[k] = k.
template <typename K, typename P>
__global__ void make_sort_keys(const __grid_constant__ KeyParams p, K* __restrict__ key,
                               P* __restrict__ perm) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(p.n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    const auto uk = static_cast<std::size_t>(k);
    K v = 0;
    if (p.key.block_bits > 0)
      v = static_cast<K>(block_of(p.key.block, p.coo, un, uk)) << p.key.block_shift;
    if (p.key.primary >= 0)
      v |= static_cast<K>(p.coo[static_cast<std::size_t>(p.key.primary) * un + uk]) << p.key.shift;
    if (p.key.secondary >= 0)
      v |= static_cast<K>(p.coo[static_cast<std::size_t>(p.key.secondary) * un + uk]);
    key[k] = v;
    perm[k] = static_cast<P>(k);
  }
}

template <typename T, typename P>
struct GatherParams {
  const index_t* src_idx;  ///< order arrays of n entries (the COO)
  const T* src_vals;
  index_t* dst_idx;  ///< order arrays of n entries (the sorted copy)
  T* dst_vals;
  const P* perm;
  std::int64_t n;
  int order;
};

/// dst[m][k] = src[m][perm[k]] for every mode m, and the values likewise.
template <typename T, typename P>
__global__ void gather_sorted_copy(const __grid_constant__ GatherParams<T, P> p) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto n = static_cast<std::size_t>(p.n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n;
       k += stride) {
    const auto j = static_cast<std::size_t>(p.perm[k]);
    for (int m = 0; m < p.order; ++m) {
      const std::size_t off = static_cast<std::size_t>(m) * n;
      p.dst_idx[off + static_cast<std::size_t>(k)] = __ldg(p.src_idx + off + j);
    }
    p.dst_vals[k] = __ldg(p.src_vals + j);
  }
}

/// Calls f(K{}, P{}, Num{}) with the key type of `key`, and the perm and CUB num_items
/// types for `nnz` (32-bit while nnz <= INT_MAX, else 64-bit).
template <typename F>
auto with_sort_types(const ModeKey& key, nnz_t nnz, F&& f) {
  const bool narrow = nnz <= std::numeric_limits<int>::max();
  if (!key.wide()) {
    if (narrow) return f(std::uint32_t{}, std::uint32_t{}, int{});
    return f(std::uint32_t{}, std::uint64_t{}, std::int64_t{});
  }
  if (narrow) return f(std::uint64_t{}, std::uint32_t{}, int{});
  return f(std::uint64_t{}, std::uint64_t{}, std::int64_t{});
}

/// Temporary storage bytes of CUB's sort of mode key `key` (a size query: no data read).
template <typename K, typename P, typename Num>
std::size_t cub_sort_bytes(const ModeKey& key, nnz_t nnz, cudaStream_t stream) {
  std::size_t bytes = 0;
  cub::DoubleBuffer<K> keys(nullptr, nullptr);
  cub::DoubleBuffer<P> vals(nullptr, nullptr);
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, keys, vals, static_cast<Num>(nnz), 0, key.end_bit, stream));
  return bytes;
}

/// Slack per allocation for the allocator's granularity.
constexpr std::size_t kAllocSlack = std::size_t(2) << 20;

/// Sorts mode key `key` of the COO block `coo` (n nonzeros) and gathers it into `dst`.
/// Returns the error of a failed allocation (nothing else is left allocated), and
/// throws on any other error.
template <typename T, typename K, typename P, typename Num>
cudaError_t sort_and_gather(Context& ctx, const ModeKey& key, int order, const char* coo,
                            std::size_t n, std::size_t copy_bytes, DeviceMemory& dst) {
  const auto* coo_idx = reinterpret_cast<const index_t*>(coo);
  DeviceMemory perm[2];
  int sorted = 0;
  cudaError_t e = cudaSuccess;
  {
    DeviceMemory keys[2], temp;
    for (int b = 0; b < 2; ++b) {
      if ((e = keys[b].try_reserve(n * sizeof(K))) != cudaSuccess) return e;
      if ((e = perm[b].try_reserve(n * sizeof(P))) != cudaSuccess) return e;
    }
    KeyParams kp{coo_idx, static_cast<std::int64_t>(n), key};
    make_sort_keys<K, P><<<grid_for(static_cast<std::int64_t>(n)), kBlock, 0, ctx.stream>>>(
        kp, static_cast<K*>(keys[0].get()), static_cast<P*>(perm[0].get()));
    TESSERA_CUDA_CHECK_LAUNCH();
    cub::DoubleBuffer<K> dk(static_cast<K*>(keys[0].get()), static_cast<K*>(keys[1].get()));
    cub::DoubleBuffer<P> dv(static_cast<P*>(perm[0].get()), static_cast<P*>(perm[1].get()));
    std::size_t temp_bytes = 0;
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, dk, dv, static_cast<Num>(n), 0, key.end_bit, ctx.stream));
    if ((e = temp.try_reserve(std::max<std::size_t>(temp_bytes, 1))) != cudaSuccess) return e;
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        temp.get(), temp_bytes, dk, dv, static_cast<Num>(n), 0, key.end_bit, ctx.stream));
    sorted = dv.selector;
    perm[1 - sorted] = DeviceMemory();  // cudaFree waits for the sort
  }                                     // keys and temp freed
  if ((e = dst.try_reserve(copy_bytes)) != cudaSuccess) return e;
  GatherParams<T, P> g{};
  g.src_idx = coo_idx;
  g.src_vals = reinterpret_cast<const T*>(coo + values_offset(order, n));
  g.dst_idx = static_cast<index_t*>(dst.get());
  g.dst_vals = reinterpret_cast<T*>(static_cast<char*>(dst.get()) + values_offset(order, n));
  g.perm = static_cast<const P*>(perm[sorted].get());
  g.n = static_cast<std::int64_t>(n);
  g.order = order;
  gather_sorted_copy<T, P><<<grid_for(g.n), kBlock, 0, ctx.stream>>>(g);
  TESSERA_CUDA_CHECK_LAUNCH();
  return cudaSuccess;  // perm freed on return (after the gather: cudaFree waits)
}

}  // namespace

std::size_t device_sort_peak(const std::vector<std::uint64_t>& dims, nnz_t nnz,
                             std::size_t copy_bytes, const std::vector<ModePlan>& plans,
                             cudaStream_t stream) {
  const int N = static_cast<int>(dims.size());
  const auto n = static_cast<std::size_t>(nnz);
  std::size_t peak = 0;
  for (int m = 0; m < N; ++m) {
    const ModeKey key = mode_key(dims, m, &plans[static_cast<std::size_t>(m)]);
    const auto live = static_cast<std::size_t>(m + 1);  // COO and m copies
    std::size_t sort = 0, gather = 0;
    if (key.end_bit == 0) {
      gather = copy_bytes;
    } else {
      with_sort_types(key, nnz, [&](auto k, auto p, auto num) {
        using K = decltype(k);
        using P = decltype(p);
        using Num = decltype(num);
        sort = 2 * n * (sizeof(K) + sizeof(P)) + cub_sort_bytes<K, P, Num>(key, nnz, stream) +
               5 * kAllocSlack;
        gather = n * sizeof(P) + copy_bytes + 2 * kAllocSlack;
        return 0;
      });
    }
    peak = std::max(peak, live * (copy_bytes + kAllocSlack) + std::max(sort, gather));
  }
  return peak;
}

template <typename T>
bool sort_resident_on_device(Context& ctx, DeviceMemory coo, CudaTensorHandle<T>& h,
                             std::vector<ModePlan> plans, std::size_t peak, const char* what,
                             std::chrono::steady_clock::time_point t0) {
  const int N = h.order();
  const nnz_t nnz = h.nnz();
  const auto n = static_cast<std::size_t>(nnz);
  const std::size_t cb = h.copy_bytes();
  char* c = static_cast<char*>(coo.get());
  h.make_resident();
  const int sms = device_limits(ctx.device).sms;
  for (int m = 0; m < N; ++m) {
    const ModeKey key = mode_key(h.dims(), m, &plans[static_cast<std::size_t>(m)]);
    DeviceMemory& dst = h.copy(m);
    cudaError_t e = cudaSuccess;
    if (key.end_bit == 0) {  // every key equal: input order
      e = dst.try_reserve(cb);
      if (e == cudaSuccess)
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.get(), c, cb, cudaMemcpyDeviceToDevice, ctx.stream));
    } else {
      e = with_sort_types(key, nnz, [&](auto k, auto p, auto num) {
        return sort_and_gather<T, decltype(k), decltype(p), decltype(num)>(ctx, key, N, c, n, cb,
                                                                           dst);
      });
    }
    if (e != cudaSuccess) {
      h.drop_resident();
      return false;  // coo freed on return
    }
    if (plans[static_cast<std::size_t>(m)].layout == Layout::smem)
      build_work_items(ctx, h.idx(m, 0), static_cast<std::int64_t>(nnz), sms,
                       plans[static_cast<std::size_t>(m)]);
  }
  ctx.sync();
  h.set_plans(std::move(plans));
  std::ostringstream os;
  os.precision(3);
  os << what << " in " << seconds_since(t0) << " s (peak " << peak << " bytes)";
  h.set_how_sorted(os.str());
  return true;
}

template <typename T>
bool prepare_resident_on_device(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h,
                                std::vector<ModePlan> plans, std::size_t peak) {
  const auto t0 = std::chrono::steady_clock::now();
  const int N = x.order();
  const auto n = static_cast<std::size_t>(x.nnz());
  DeviceMemory coo;
  if (coo.try_reserve(h.copy_bytes()) != cudaSuccess) return false;
  char* c = static_cast<char*>(coo.get());
  for (int m = 0; m < N; ++m)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(c + static_cast<std::size_t>(m) * n * sizeof(index_t),
                                       x.idx[m].data(), n * sizeof(index_t), cudaMemcpyHostToDevice,
                                       ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(c + values_offset(N, n), x.vals.data(), n * sizeof(T),
                                     cudaMemcpyHostToDevice, ctx.stream));
  return sort_resident_on_device(ctx, std::move(coo), h, std::move(plans), peak,
                                 "sorted on the device", t0);
}

template bool sort_resident_on_device<float>(Context&, DeviceMemory, CudaTensorHandle<float>&,
                                             std::vector<ModePlan>, std::size_t, const char*,
                                             std::chrono::steady_clock::time_point);
template bool sort_resident_on_device<double>(Context&, DeviceMemory, CudaTensorHandle<double>&,
                                              std::vector<ModePlan>, std::size_t, const char*,
                                              std::chrono::steady_clock::time_point);
template bool prepare_resident_on_device<float>(Context&, const SparseTensor<float>&,
                                                CudaTensorHandle<float>&, std::vector<ModePlan>,
                                                std::size_t);
template bool prepare_resident_on_device<double>(Context&, const SparseTensor<double>&,
                                                 CudaTensorHandle<double>&, std::vector<ModePlan>,
                                                 std::size_t);

}  // namespace tessera::kernels::cuda::mttkrp_detail
