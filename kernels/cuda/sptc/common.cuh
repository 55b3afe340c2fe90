// Internal to the CUDA SpTC (kernels/cuda/sptc/): what the plan, matching, tensor-core,
// run and routing files share: key maps, device allocation (pooled per Tuning::sptc_pool),
// host <-> device copies, the inputs on the device, and the launchers of the kernels more
// than one file runs. Not a public header; docs/sptc.md, "CUDA kernel".
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <string>
#include <vector>

#include "kernels/cuda/runtime/detail.cuh"
#include "kernels/cuda/sptc/views.cuh"
#include "kernels/sptc.hpp"
#include "util/error.hpp"

namespace tessera::kernels::cuda::sptc {

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

/// First i in [lo, hi) with keys[i] >= key, hi where none (keys ascending).
template <typename K>
__device__ __forceinline__ i64 lower_bound(const K* keys, i64 lo, i64 hi, K key) {
  while (lo < hi) {
    const i64 mid = (lo + hi) / 2;
    if (keys[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// First i in [lo, hi) with keys[i] > key, hi where none (keys ascending).
template <typename K>
__device__ __forceinline__ i64 upper_bound(const K* keys, i64 lo, i64 hi, K key) {
  while (lo < hi) {
    const i64 mid = (lo + hi) / 2;
    if (keys[mid] <= key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// Last i in [lo, hi] with off[i] <= v, lo where none (off ascending): the row, or the
/// matched X, that holds position v of offsets off.
__device__ __forceinline__ i64 last_at_most(const i64* off, i64 lo, i64 hi, i64 v) {
  while (lo < hi) {
    const i64 mid = (lo + hi + 1) / 2;
    if (off[mid] <= v)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// keep_flags_kernel and scatter_kernel: the rows run's assembly and the sort path's.
template <typename T>
__global__ void keep_flags_kernel(i64 n, const double* sum, i64* flag) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[e] = static_cast<T>(sum[e]) != T(0) ? 1 : 0;
}

/// Kept entry e goes to position pos[e]: coordinates decoded from its key (column o of
/// the output at cols + o * stride), value rounded to T. Null flag and pos: every entry,
/// in place.
template <typename T>
__global__ void scatter_kernel(i64 n, const u64* key, const double* sum, const i64* flag,
                               const i64* pos, OutMap m, index_t* cols, i64 stride, T* vals) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (flag && !flag[e]) continue;
    const i64 q = pos ? pos[e] : e;
    u64 k = key[e];
    for (int o = m.n - 1; o >= 0; --o) {
      cols[o * stride + q] = static_cast<index_t>(k % m.dim[o]);
      k /= m.dim[o];
    }
    vals[q] = static_cast<T>(sum[e]);
  }
}

/// Product of the lengths, saturated at 2^64 + 1 (over 64 bits).
u128 cells(const std::vector<u64>& d);
/// Bits a radix sort must look at for keys < n (at least 1).
int key_bits(u128 n);
/// "1.23 GiB".
std::string gib(std::size_t bytes);

template <typename U>
U* ptr(const DeviceMemory& m) {
  return static_cast<U*>(m.get());
}

/// Whether SpTC allocations on this thread come from the device's default pool in stream
/// order (DeviceMemory::try_reserve_pooled), so allocating and freeing the many
/// temporaries of a contraction never waits for the device: the Tuning::sptc_pool
/// (--sptc-pool) of the backend whose call runs on this thread (PoolScope), true outside.
bool pooled();
/// Sets pooled() to ctx.tuning.sptc_pool for its lifetime (every entry point of the SpTC
/// opens one).
class PoolScope {
 public:
  explicit PoolScope(const Context& ctx);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  bool prev_;
};
/// Free device memory for SpTC: cudaMemGetInfo's, plus what the pool holds unused.
std::size_t free_bytes(std::size_t* total = nullptr);
/// Allocates `bytes` (at least 1) or throws Error naming the purpose.
void alloc(DeviceMemory& m, std::size_t bytes, const char* what);

/// One host <-> device copy for copy_parallel.
struct Copy {
  void* dst;
  const void* src;
  std::size_t bytes;
  cudaMemcpyKind kind;
};

/// The copies, complete on return, spread over `threads` host threads (see common.cu).
void copy_parallel(int device, const std::vector<Copy>& copies, std::size_t threads);

template <typename U>
U download_one(Context& ctx, const U* dev) {
  U v{};
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(&v, dev, sizeof(U), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  return v;
}

/// Radix-sorts n (key, value) pairs on the low `bits` bits of the keys (cub, stream
/// ctx.stream, temporaries grown in tmp); the sorted pairs are k.Current(), v.Current().
template <typename K, typename V>
void radix_sort_pairs(Context& ctx, DeviceMemory& tmp, cub::DoubleBuffer<K>& k,
                      cub::DoubleBuffer<V>& v, i64 n, int bits) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, k, v, n, 0, bits, ctx.stream));
  alloc(tmp, bytes, "SpTC sort temporaries");
  TESSERA_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(tmp.get(), bytes, k, v, n, 0, bits, ctx.stream));
}

/// out[i] = in[0] + ... + in[i - 1] for i < n (cub exclusive scan, stream ctx.stream,
/// temporaries grown in tmp).
void exclusive_sum(Context& ctx, DeviceMemory& tmp, const i64* in, i64* out, i64 n);

/// Sums the runs of equal keys of n sorted pairs (k.Current(), v.Current()) into the
/// other buffers of k and v (cub ReduceByKey; nruns: one device i64, temporaries in tmp).
/// Returns the number of runs; the sums are k.Alternate(), v.Alternate().
i64 sum_runs(Context& ctx, DeviceMemory& tmp, cub::DoubleBuffer<u64>& k,
             cub::DoubleBuffer<double>& v, i64 n, i64* nruns);

/// Up to kMaxOrder coordinate columns (kernel argument): the input checks' and the
/// routing's.
struct ColPtrs {
  int n = 0;
  const index_t* col[kMaxOrder] = {};
};

/// out[m] = max(out[m], largest coordinate of column m) for the columns of c (out zeroed by
/// the caller), on `blocks` blocks of kBlock threads.
void launch_coord_max(cudaStream_t s, int blocks, i64 n, const ColPtrs& c, unsigned* out);
/// flag[i] = 1 where key[i] >> shift starts a new run (i == 0 or it differs from key[i-1]
/// >> shift), for i < n; flag[n] = 0, so an exclusive scan of n + 1 flags ends in the count.
void launch_change_flags(cudaStream_t s, i64 n, const u64* key, int shift, i64* flag);
/// key[k] = the code m gives nonzero k, perm[k] = k (k < n).
void launch_y_keys(cudaStream_t s, i64 n, const KeyMap& m, u64* key, index_t* perm);
/// Products of the spill rows (srows, product offsets soff): key row * ncols + column and,
/// with val, the product (0 for a tensor-core product: its cell is kept, its value comes
/// from the block products).
void launch_spill_keys(cudaStream_t s, i64 ps, const i64* soff, i64 ns, const u32* srows,
                       const RowsView& v, u64* key, double* val);

/// One input on the device: every mode's coordinates and the values.
template <typename T>
struct DeviceTensor {
  std::vector<DeviceMemory> cols;
  DeviceMemory vals;
  std::size_t bytes = 0;
  /// Allocates room for t and appends its uploads to `copies` (run by copy_parallel).
  void allocate(const SparseTensor<T>& t, std::vector<Copy>& copies) {
    cols.resize(t.idx.size());
    const std::size_t n = t.vals.size();
    for (std::size_t m = 0; m < t.idx.size(); ++m) {
      alloc(cols[m], n * sizeof(index_t), "SpTC input");
      copies.push_back(
          {cols[m].get(), t.idx[m].data(), n * sizeof(index_t), cudaMemcpyHostToDevice});
    }
    alloc(vals, n * sizeof(T), "SpTC input");
    copies.push_back({vals.get(), t.vals.data(), n * sizeof(T), cudaMemcpyHostToDevice});
    bytes = n * (t.idx.size() * sizeof(index_t) + sizeof(T));
  }
  /// Uploads a (and b when given) at once, then checks their coordinates on the device:
  /// Error (the message of check_kernel_input) when one is not below its mode's length.
  /// The host checks only the shapes (check_kernel_shape): a scan of the coordinates on the
  /// host is bound by the node's memory bandwidth, which every rank of the node shares
  /// (docs/perf/gpu-h200-sptc.md, "Phases").
  static void load(Context& ctx, DeviceTensor& da, const SparseTensor<T>& a,
                   DeviceTensor* db = nullptr, const SparseTensor<T>* b = nullptr) {
    std::vector<Copy> copies;
    da.allocate(a, copies);
    if (db) db->allocate(*b, copies);
    copy_parallel(ctx.device, copies, 1);
    da.check_coords(ctx, a);
    if (db) db->check_coords(ctx, *b);
  }
  /// The coordinate check of load() for this tensor, uploaded from t.
  void check_coords(Context& ctx, const SparseTensor<T>& t) const {
    const i64 n = static_cast<i64>(t.vals.size());
    const int N = static_cast<int>(cols.size());
    if (n == 0 || N == 0) return;
    DeviceMemory mx;
    alloc(mx, static_cast<std::size_t>(N) * sizeof(unsigned), "SpTC input checks");
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(mx.get(), 0, static_cast<std::size_t>(N) * sizeof(unsigned), ctx.stream));
    ColPtrs c;
    c.n = N;
    for (int m = 0; m < N; ++m) c.col[m] = col(m);
    const int blocks = static_cast<int>(std::min<i64>((n + kBlock - 1) / kBlock, 4096));
    launch_coord_max(ctx.stream, blocks, n, c, ptr<unsigned>(mx));
    std::vector<unsigned> h(static_cast<std::size_t>(N));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(h.data(), mx.get(), h.size() * sizeof(unsigned),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
    for (int m = 0; m < N; ++m)
      TESSERA_EXPECTS(h[static_cast<std::size_t>(m)] < t.dims[static_cast<std::size_t>(m)],
                      "mode " << m << " coordinate " << h[static_cast<std::size_t>(m)]
                              << " >= mode length " << t.dims[static_cast<std::size_t>(m)]);
  }
  const index_t* col(int m) const { return ptr<index_t>(cols[static_cast<std::size_t>(m)]); }
};

/// Throws InputError unless `bytes` more fit the device's free memory (less a reserve).
void check_fits(const Context& ctx, std::size_t bytes, const std::string& what, i64 products,
                i64 entries);
/// Seconds between two recorded events.
float elapsed(cudaEvent_t a, cudaEvent_t b);

/// Allocates n elements of U (at least one byte) and returns the pointer.
template <typename U>
U* dalloc(DeviceMemory& m, i64 n, const char* what) {
  alloc(m, static_cast<std::size_t>(std::max<i64>(n, 0)) * sizeof(U), what);
  return ptr<U>(m);
}

/// The spec the row kernels run: the row side must provide the leading output letters, so
/// when Y's letters come first the inputs swap roles (same output; *swapped set), else
/// the spec as given (its kept entries are sorted at the end).
ContractSpec rows_roles(const ContractSpec& spec, bool* swapped);

}  // namespace tessera::kernels::cuda::sptc
