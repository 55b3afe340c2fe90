// SpTC on the device (kernels/sptc.hpp; Backend::contract_plan / Backend::contract of the
// cuda backend; docs/sptc.md "CUDA kernel"). Two output assemblies
// (ContractSpec::device.assembly):
//
// rows (default): products are combined per output row on chip, so only distinct entries
//   reach device memory.
//   plan  (match) X and Y uploaded; Y sorted by matched key (64-bit mixed-radix codes,
//                 cub::DeviceRadixSort), its output coordinates ranked into columns; X sorted
//                 by its output coordinates (row code), every X nonzero joined with its run of
//                 Y (binary search), unmatched ones dropped, rows = runs of equal row codes.
//                 Rows are classed by their products: small rows (<= 1024) in groups sorted
//                 in shared memory, dense rows (shared-memory accumulator per column tile),
//                 spill rows (too many columns, or a large share of all products) sorted
//                 globally. With tensor cores on, dense 16 x 16 blocks of the matched
//                 structure are found and paired (below).
//        (count) the row kernels without values: entries per row, exact, before any
//                output memory exists; scanned into row offsets.
//   run   (multiply) the row kernels with values write each row's entries (columns
//                ascending) at its offset; spill rows through SortPairs + ReduceByKey; the
//                tensor-core kernel adds the block products to their entries.
//        (assemble) exact zeros flagged out; coordinates gathered from a representative X
//                nonzero per row and Y nonzero per column (or, when the output letters
//                interleave X's and Y's, sorted by output key); downloaded while the host
//                arrays were first touched on helper threads.
//   Summation order: fixed, so a run repeats bit for bit: product order for small and dense
//   rows (dense rows sort each chunk of products by column in shared memory), stable sort
//   and ReduceByKey for spill rows; tensor-core cells add their block products after the
//   sparse part.
//
// Tensor cores (DESIGN §5, BCB-like): row codes, matched keys and column codes are cut into
//   blocks of 16 (code / 16, ranked); a block of X (16 rows x 16 keys) or Y (16 keys x 16
//   columns) whose nonzeros reach threshold x 256 is dense (values summed into a 16 x 16
//   tile, a bit mask per row / column). A product of two dense blocks is left to the
//   tensor cores: block pairs sharing a key block are grouped by output block and
//   multiplied by one warp each (sptc_tc.cu: DMMA for fp64, HMMA for tf32 / bf16 / fp16);
//   the row kernels mark the cells those pairs produce (bit masks) so the counts stay exact.
//
// sort: the first kernel: every product's output key (output mode 0 most significant) and
//   value sorted (SortPairs, stable) and reduced (ReduceByKey); the count pass sorts the
//   keys alone. No tensor cores.
//
// Device memory, rows (P products, E output entries, N output modes, S products of spill
// rows): the plan holds the inputs plus about 28 bytes per matched X and 12 per Y nonzero
// (and the tensor-core blocks); the count pass adds 16 S plus sort temporaries, the run
// 28 E + (4 N + sizeof(T)) E, or 12 E + 32 S during the spill sort. sort: 16 P in the count
// pass, max(32 P, (32 + 4 N) E + sizeof(T) E) in the run. A plan that does not fit the
// device's free memory is refused with InputError (more ranks, or --backend cpu). Keys that
// do not fit 64 bits (product of the matched lengths, or of the output lengths, over 2^64)
// fall back to the cpu backend's implementation with a logged note.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#if defined(__linux__)
#endif
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/detail.cuh"
#include "kernels/cuda/sptc_impl.cuh"
#include "kernels/cuda/trace.cuh"
#include "kernels/mttkrp.hpp"
#include "kernels/sptc.hpp"
#include "util/error.hpp"
#include "util/huge_pages.hpp"
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

/// True unless TESSERA_CUDA_SPTC_POOL=0: SpTC allocations come from the device's default
/// pool in stream order (DeviceMemory::try_reserve_pooled), so allocating and freeing the
/// many temporaries of a contraction never waits for the device.
bool pooled() {
  static const bool on = [] {
    const char* s = std::getenv("TESSERA_CUDA_SPTC_POOL");
    return s == nullptr || std::string(s) != "0";
  }();
  return on;
}

/// Free device memory for SpTC: cudaMemGetInfo's, plus what the pool holds unused.
std::size_t free_bytes(std::size_t* total = nullptr) {
  std::size_t free_b = 0, total_b = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (total) *total = total_b;
  return free_b + (pooled() ? pool_idle_bytes() : 0);
}

/// Allocates `bytes` (at least 1) or throws Error naming the purpose.
void alloc(DeviceMemory& m, std::size_t bytes, const char* what) {
  const std::size_t b = std::max<std::size_t>(bytes, 1);
  const cudaError_t e = pooled() ? m.try_reserve_pooled(b) : m.try_reserve(b);
  if (e != cudaSuccess)
    TESSERA_THROW("SpTC (cuda backend): cudaMalloc of " << bytes << " bytes for " << what
                                                        << " failed (" << detail::cuda_error_text(e)
                                                        << ")");
}

/// One host <-> device copy for copy_parallel.
struct Copy {
  void* dst;
  const void* src;
  std::size_t bytes;
  cudaMemcpyKind kind;
};

/// The copies, complete on return, spread over `threads` host threads (copy k on thread
/// k % threads), each with its own non-blocking stream that first waits for all work
/// issued so far in legacy-stream order (kernels on a Context's stream and pooled
/// allocations). Copies from or to pageable memory are staged by the driver on the calling
/// thread, so concurrent threads overlap that staging; page-locked host memory (kept host
/// buffers, Backend::pin_host) is copied by DMA. Measured on the H200 node
/// (docs/perf/gpu-h200-sptc.md, "Phases"): one thread per output array is the faster
/// download; uploads are no faster on more than one thread.
void copy_parallel(int device, const std::vector<Copy>& copies, std::size_t threads) {
  std::vector<Copy> pieces;
  for (const Copy& c : copies)
    if (c.bytes > 0) pieces.push_back(c);
  if (pieces.empty()) return;
  const std::size_t nt = std::clamp<std::size_t>(threads, 1, pieces.size());
  cudaEvent_t ready = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  const cudaError_t er = cudaEventRecord(ready, cudaStreamLegacy);
  if (er != cudaSuccess) {
    TESSERA_CUDA_CHECK_NOTHROW(cudaEventDestroy(ready));
    TESSERA_CUDA_CHECK(er);
  }
  std::vector<std::thread> th;
  std::vector<std::exception_ptr> err(nt);
  for (std::size_t t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      try {
        TESSERA_CUDA_CHECK(cudaSetDevice(device));
        TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        TESSERA_CUDA_CHECK(cudaStreamWaitEvent(s, ready, 0));
        for (std::size_t k = t; k < pieces.size(); k += nt)
          TESSERA_CUDA_CHECK(
              cudaMemcpyAsync(pieces[k].dst, pieces[k].src, pieces[k].bytes, pieces[k].kind, s));
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
      } catch (...) {
        err[t] = std::current_exception();
        if (s) (void)cudaStreamSynchronize(s);
      }
      if (s) TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(s));
    });
  for (auto& t : th) t.join();
  TESSERA_CUDA_CHECK_NOTHROW(cudaEventDestroy(ready));
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

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

/// Sums the runs of equal keys of n sorted pairs (k.Current(), v.Current()) into the
/// other buffers of k and v (cub ReduceByKey; nruns: one device i64, temporaries in tmp).
/// Returns the number of runs; the sums are k.Alternate(), v.Alternate().
i64 sum_runs(Context& ctx, DeviceMemory& tmp, cub::DoubleBuffer<u64>& k,
             cub::DoubleBuffer<double>& v, i64 n, i64* nruns) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceReduce::ReduceByKey(nullptr, bytes, k.Current(), k.Alternate(),
                                                    v.Current(), v.Alternate(), nruns,
                                                    ::cuda::std::plus<double>{}, n, ctx.stream));
  alloc(tmp, bytes, "SpTC reduce temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceReduce::ReduceByKey(tmp.get(), bytes, k.Current(), k.Alternate(),
                                                    v.Current(), v.Alternate(), nruns,
                                                    ::cuda::std::plus<double>{}, n, ctx.stream));
  return download_one(ctx, nruns);
}

/// Up to kMaxOrder coordinate columns (kernel argument): the input checks' and the
/// routing's.
struct ColPtrs {
  int n = 0;
  const index_t* col[kMaxOrder] = {};
};

/// out[m] = max(out[m], largest coordinate of column m) for the columns of c (out zeroed by
/// the caller): one read of the coordinates, a warp max, one atomic per warp and column.
__global__ void coord_max_kernel(i64 n, ColPtrs c, unsigned* out) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (int m = 0; m < c.n; ++m) {
    unsigned mx = 0;
    for (i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride)
      mx = max(mx, static_cast<unsigned>(c.col[m][k]));
    mx = __reduce_max_sync(0xffffffffu, mx);
    if ((threadIdx.x & 31) == 0 && mx > 0) atomicMax(out + m, mx);
  }
}

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
    coord_max_kernel<<<blocks, kBlock, 0, ctx.stream>>>(n, c, ptr<unsigned>(mx));
    TESSERA_CUDA_CHECK(cudaGetLastError());
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
                i64 entries) {
  std::size_t total_b = 0;
  const std::size_t free_b = free_bytes(&total_b);
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

// ===================================================================================
// Row-accumulation path (ContractAssembly::rows) and the tensor-core blocks
// ===================================================================================

using sptc::kNone;
using sptc::kTile;
using sptc::u32;

/// flag[i] = 1 where key[i] >> shift starts a new run (i == 0 or it differs from key[i-1]
/// >> shift), for i < n; flag[n] = 0, so an exclusive scan of n + 1 flags ends in the count.
__global__ void change_flags_kernel(i64 n, const u64* key, int shift, i64* flag) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i <= n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[i] = i < n && (i == 0 || (key[i] >> shift) != (key[i - 1] >> shift)) ? 1 : 0;
}

/// rank[i] = index of the run holding i (flags and their exclusive scan).
__global__ void ranks_kernel(i64 n, const i64* flag, const i64* excl, u32* rank) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    rank[i] = static_cast<u32>(excl[i] + flag[i] - 1);
}

/// Column ranks: sorted column code i (of Y nonzero cperm[i]) has rank excl[i] + flag[i] - 1;
/// the first of each run is the column's representative and gives its code.
__global__ void col_ranks_kernel(i64 ny, const i64* flag, const i64* excl, const u32* cperm,
                                 const u64* cks, u32* crank, u32* colrep, u64* colkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < ny;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = excl[i] + flag[i] - 1;
    crank[cperm[i]] = static_cast<u32>(c);
    if (flag[i]) {
      colrep[c] = cperm[i];
      colkey[c] = cks[i];
    }
  }
}

/// Column table (a small column-code space, no sort): rep[code] = the first Y nonzero with
/// that column code (rep filled with 0xffffffff before).
__global__ void col_table_kernel(i64 ny, KeyMap m, u32* rep) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < ny;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    u32* r = rep + pack(m, k);
    if (__ldcg(r) > static_cast<u32>(k))
      atomicMin(r, static_cast<u32>(k));  // most see a smaller one
  }
}

/// flag[c] = 1 where column code c occurs (c < cells; flag[cells] = 0 for the scan's total).
__global__ void col_present_kernel(i64 cells, const u32* rep, i64* flag) {
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c <= cells;
       c += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[c] = c < cells && rep[c] != 0xffffffffu ? 1 : 0;
}

/// The occurring codes in ascending order: colrep / colkey of rank excl[c], as the sort of the
/// column codes gives them (the representative is the first nonzero of each code).
__global__ void col_table_ranks_kernel(i64 cells, const u32* rep, const i64* flag, const i64* excl,
                                       u32* colrep, u64* colkey) {
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c < cells;
       c += static_cast<i64>(gridDim.x) * blockDim.x)
    if (flag[c]) {
      colrep[excl[c]] = rep[c];
      colkey[excl[c]] = static_cast<u64>(c);
    }
}

/// crank[k] = rank of Y nonzero k's column code (excl over the column table).
__global__ void col_rank_of_kernel(i64 ny, KeyMap m, const i64* excl, u32* crank) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < ny;
       k += static_cast<i64>(gridDim.x) * blockDim.x)
    crank[k] = static_cast<u32>(excl[pack(m, k)]);
}

/// Y in matched-key order: column and value (double) of sorted position q.
template <typename T>
__global__ void y_sorted_kernel(i64 ny, const index_t* yperm, const u32* crank, const T* yv,
                                u32* ysc, double* ysv) {
  for (i64 q = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q < ny;
       q += static_cast<i64>(gridDim.x) * blockDim.x) {
    const index_t j = yperm[q];
    ysc[q] = crank[j];
    ysv[q] = static_cast<double>(yv[j]);
  }
}

/// X in row order (xperm): the run of equal matched keys among Y's sorted keys; mflag = 1
/// when the run is not empty.
__global__ void x_ranges_sorted_kernel(i64 nx, KeyMap m, const index_t* xperm, const u64* ykey,
                                       i64 ny, u32* first, i64* cnt, i64* mflag) {
  for (i64 s = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; s < nx;
       s += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 key = pack(m, xperm[s]);
    i64 lo = 0, hi = ny;
    while (lo < hi) {
      const i64 mid = (lo + hi) / 2;
      if (ykey[mid] < key)
        lo = mid + 1;
      else
        hi = mid;
    }
    i64 lo2 = lo, hi2 = ny;
    while (lo2 < hi2) {
      const i64 mid = (lo2 + hi2) / 2;
      if (ykey[mid] <= key)
        lo2 = mid + 1;
      else
        hi2 = mid;
    }
    first[s] = static_cast<u32>(lo);
    cnt[s] = lo2 - lo;
    mflag[s] = lo2 > lo ? 1 : 0;
  }
}

/// Keeps the matched X (row order): run, product count, value, input index, row code.
template <typename T>
__global__ void x_compact_kernel(i64 nx, const i64* mflag, const i64* mpos, const index_t* xperm,
                                 const u32* xfirst, const i64* xcnt, const u64* rks, const T* xv,
                                 u32* mx_first, i64* mx_cnt, double* mx_val, u32* mx_orig,
                                 u64* mx_rk) {
  for (i64 s = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; s < nx;
       s += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!mflag[s]) continue;
    const i64 t = mpos[s];
    const index_t i = xperm[s];
    mx_first[t] = xfirst[s];
    mx_cnt[t] = xcnt[s];
    mx_val[t] = static_cast<double>(xv[i]);
    mx_orig[t] = i;
    mx_rk[t] = rks[s];
  }
}

/// Rows: runs of equal row codes among the matched X.
__global__ void rows_build_kernel(i64 nmx, const i64* rf, const i64* rex, const u32* mx_orig,
                                  const u64* mx_rk, const i64* mx_off, u32* mx_row, u32* rowstart,
                                  u32* rowrep, u64* rowkey, i64* rowp) {
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 r = rex[t] + rf[t] - 1;
    mx_row[t] = static_cast<u32>(r);
    if (rf[t]) {
      rowstart[r] = static_cast<u32>(t);
      rowrep[r] = mx_orig[t];
      rowkey[r] = mx_rk[t];
      rowp[r] = mx_off[t];
    }
  }
}

__global__ void set_tail_kernel(u32* a, u32 va, i64* b, i64 vb) {
  *a = va;
  *b = vb;
}
__global__ void set_u32_kernel(u32* a, u32 va) {
  *a = va;
}

/// Row classes (docs/sptc.md): small rows are grouped (gs: first row of a group), dense
/// rows get a block per column tile (dflag), the rest spill to the global sort (sflag).
/// Every flag array has nrows + 1 entries, the last 0.
__device__ __forceinline__ bool small_row(const i64* rowp, i64 r) {
  return rowp[r + 1] - rowp[r] <= sptc::kSmallRow;
}
__global__ void row_class_kernel(i64 nrows, const i64* rowp, i64 heavy, int dense_ok, int one_tile,
                                 i64 ncols, i64* dflag, i64* sflag, i64* gs) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r <= nrows;
       r += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (r == nrows) {
      dflag[r] = sflag[r] = gs[r] = 0;
      continue;
    }
    const i64 np = rowp[r + 1] - rowp[r];
    const bool h = np <= sptc::kSmallRow;
    const bool d = !h && np <= heavy && dense_ok && (one_tile || np * sptc::kDenseRatio >= ncols);
    dflag[r] = d ? 1 : 0;
    sflag[r] = !h && !d ? 1 : 0;
    gs[r] = h && (r == 0 || !small_row(rowp, r - 1) ||
                  rowp[r] / sptc::kSmallRow != rowp[r - 1] / sptc::kSmallRow)
                ? 1
                : 0;
  }
}

__global__ void row_lists_kernel(i64 nrows, const i64* rowp, const i64* dflag, const i64* dex,
                                 const i64* sflag, const i64* sex, const i64* gs, const i64* gex,
                                 u32* drows, u32* srows, i64* sprod, u32* gfirst, u32* gend) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r < nrows;
       r += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (dflag[r]) drows[dex[r]] = static_cast<u32>(r);
    if (sflag[r]) {
      srows[sex[r]] = static_cast<u32>(r);
      sprod[sex[r]] = rowp[r + 1] - rowp[r];
    }
    if (gs[r]) gfirst[gex[r]] = static_cast<u32>(r);
    if (small_row(rowp, r) && (r + 1 == nrows || !small_row(rowp, r + 1) || gs[r + 1]))
      gend[gex[r] + gs[r] - 1] = static_cast<u32>(r + 1);
  }
}

__device__ __forceinline__ bool on_tc(const sptc::RowsView& v, u32 x, i64 q) {
  return v.tc.xtile != nullptr && v.tc.xtile[x] != kNone && v.tc.ytile[q] != kNone;
}

/// Products of the spill rows (srows, product offsets soff): key row * ncols + column and,
/// with val, the product (0 for a tensor-core product: its cell is kept, its value comes
/// from the block products).
__global__ void spill_keys_kernel(i64 ps, const i64* soff, i64 ns, const u32* srows,
                                  sptc::RowsView v, u64* key, double* val) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < ps;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    i64 lo = 0, hi = ns - 1;
    while (lo < hi) {
      const i64 mid = (lo + hi + 1) / 2;
      if (soff[mid] <= k)
        lo = mid;
      else
        hi = mid - 1;
    }
    const u32 r = srows[lo];
    const i64 p = v.rowp[r] + (k - soff[lo]);
    i64 xl = v.rowstart[r], xh = static_cast<i64>(v.rowstart[r + 1]) - 1;
    while (xl < xh) {
      const i64 mid = (xl + xh + 1) / 2;
      if (v.mx_off[mid] <= p)
        xl = mid;
      else
        xh = mid - 1;
    }
    const u32 x = static_cast<u32>(xl);
    const i64 q = static_cast<i64>(v.mx_first[x]) + (p - v.mx_off[x]);
    key[k] = static_cast<u64>(r) * static_cast<u64>(v.ncols) + v.ysc[q];
    if (val) val[k] = on_tc(v, x, q) ? 0.0 : v.mx_val[x] * v.ysv[q];
  }
}

/// Count pass of the spill rows: sorted keys, one entry per distinct key.
__global__ void spill_count_kernel(i64 n, const u64* key, u64 ncols, i64* rowcnt,
                                   unsigned long long* distinct) {
  unsigned long long local = 0;
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x)
    if (p == 0 || key[p] != key[p - 1]) {
      atomicAdd(reinterpret_cast<unsigned long long*>(rowcnt + key[p] / ncols), 1ull);
      ++local;
    }
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(distinct, local);
}

__global__ void spill_first_kernel(i64 n, const u64* ukey, u64 ncols, i64* sfirst) {
  for (i64 u = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; u < n;
       u += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 r = ukey[u] / ncols;
    if (u == 0 || ukey[u - 1] / ncols != r) sfirst[r] = u;
  }
}

__global__ void spill_scatter_kernel(i64 n, const u64* ukey, const double* usum, u64 ncols,
                                     const i64* sfirst, const i64* rowoff, u32* ecol, double* eval,
                                     unsigned* err) {
  for (i64 u = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; u < n;
       u += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 r = ukey[u] / ncols;
    const i64 dst = rowoff[r] + (u - sfirst[r]);
    if (dst >= rowoff[r + 1]) {
      atomicOr(err, sptc::kErrSpill);
      continue;
    }
    ecol[dst] = static_cast<u32>(ukey[u] % ncols);
    eval[dst] = usum[u];
  }
}

/// Output coordinates from representatives: mode o of entry (row r, column c) is column
/// col[o] of X nonzero rowrep[r] (from_y[o] == 0), else of Y nonzero colrep[c].
struct OutGather {
  int n = 0;
  int from_y[kMaxOrder] = {};
  const index_t* col[kMaxOrder] = {};
  u64 dim[kMaxOrder] = {};
  const u32* rowrep = nullptr;
  const u32* colrep = nullptr;
};

/// Row of entry e: the last r < nrows with rowoff[r] <= e.
__device__ __forceinline__ i64 row_of_entry(const i64* rowoff, i64 nrows, i64 e) {
  i64 lo = 0, hi = nrows - 1;
  while (lo < hi) {
    const i64 mid = (lo + hi + 1) / 2;
    if (rowoff[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Kept entry e (flag) to position pos[e]: coordinates (column o at cols + o * stride) and
/// the value rounded to T.
template <typename T>
__global__ void rows_out_kernel(i64 E, const i64* rowoff, i64 nrows, const u32* ecol,
                                const double* eval, const i64* flag, const i64* pos, OutGather g,
                                index_t* cols, i64 stride, T* vals) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < E;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!flag[e]) continue;
    const i64 q = pos[e];
    const i64 r = row_of_entry(rowoff, nrows, e);
    const u32 xi = g.rowrep[r], yj = g.colrep[ecol[e]];
    for (int o = 0; o < g.n; ++o) cols[o * stride + q] = g.col[o][g.from_y[o] ? yj : xi];
    vals[q] = static_cast<T>(eval[e]);
  }
}

/// Interleaved output letters: kept entry e becomes (output key, value) at pos[e].
__global__ void rows_outkey_kernel(i64 E, const i64* rowoff, i64 nrows, const u32* ecol,
                                   const double* eval, const i64* flag, const i64* pos, OutGather g,
                                   u64* key, double* val) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < E;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!flag[e]) continue;
    const i64 q = pos[e];
    const i64 r = row_of_entry(rowoff, nrows, e);
    const u32 xi = g.rowrep[r], yj = g.colrep[ecol[e]];
    u64 k = 0;
    for (int o = 0; o < g.n; ++o) k = k * g.dim[o] + g.col[o][g.from_y[o] ? yj : xi];
    key[q] = k;
    val[q] = eval[e];
  }
}

// ---- tensor-core blocks ----

__global__ void low4_kernel(i64 n, const u64* code, unsigned char* lo) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    lo[i] = static_cast<unsigned char>(code[i] & 15u);
}

/// table[blk[i] * 16 + code[i] % 16] = i (rows of a row block, columns of a column block).
__global__ void fill_table_kernel(i64 n, const u64* code, const u32* blk, u32* table) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    table[static_cast<u64>(blk[i]) * kTile + (code[i] & 15u)] = static_cast<u32>(i);
}

/// Block of matched X t: row block << 32 | key block of its run.
__global__ void a_keys_kernel(i64 nmx, const u32* mx_row, const u32* mx_first, const u32* rowblk,
                              const u32* ykb, u64* key, u32* idx) {
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[t] = (static_cast<u64>(rowblk[mx_row[t]]) << 32) | ykb[mx_first[t]];
    idx[t] = static_cast<u32>(t);
  }
}

/// Block of sorted Y q: key block << 32 | column block.
__global__ void b_keys_kernel(i64 ny, const u32* ykb, const u32* ysc, const u32* colblk, u64* key,
                              u32* idx) {
  for (i64 q = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q < ny;
       q += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[q] = (static_cast<u64>(ykb[q]) << 32) | colblk[ysc[q]];
    idx[q] = static_cast<u32>(q);
  }
}

/// Runs of sorted keys: start[run] = position; runkey[run] = key (when not null).
__global__ void run_starts_kernel(i64 n, const i64* flag, const i64* excl, const u64* key,
                                  u32* start, u64* runkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    if (flag[i]) {
      start[excl[i]] = static_cast<u32>(i);
      if (runkey) runkey[excl[i]] = key[i];
    }
}

/// dflag[b] = 1 when block b holds at least `need` nonzeros; dflag[nblocks] = 0.
__global__ void dense_flags_kernel(i64 nblocks, const u32* start, i64 n, i64 need, i64* dflag) {
  for (i64 b = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; b <= nblocks;
       b += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (b == nblocks) {
      dflag[b] = 0;
      continue;
    }
    const i64 end = b + 1 < nblocks ? static_cast<i64>(start[b + 1]) : n;
    dflag[b] = end - static_cast<i64>(start[b]) >= need ? 1 : 0;
  }
}

/// Element i (sorted by block; element idx[i]) gets its dense block number or kNone; the
/// first element of a dense block writes the block's key.
__global__ void elem_blocks_kernel(i64 n, const u32* idx, const i64* flag, const i64* excl,
                                   const i64* dflag, const i64* dexcl, const u64* key, u32* tile,
                                   u64* dkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 b = excl[i] + flag[i] - 1;
    const bool dense = dflag[b] != 0;
    tile[idx[i]] = dense ? static_cast<u32>(dexcl[b]) : kNone;
    if (dense && flag[i]) dkey[dexcl[b]] = key[i];
  }
}

/// Dense A block values (repeats summed) and row masks (bit kk of row rr). A tile row
/// belongs to one output row, so the first matched X of each row sums that row's values in
/// matched-X order: no atomics on values, the same sums on every run.
__global__ void a_fill_kernel(i64 nmx, const u32* xtile, const u32* mx_row, const u32* mx_first,
                              const u64* rowkey, const u64* ysk, const double* mx_val, double* at,
                              u32* mask) {
  for (i64 t0 = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t0 < nmx;
       t0 += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (t0 != 0 && mx_row[t0 - 1] == mx_row[t0]) continue;
    const u32 row = mx_row[t0];
    const u64 rr = rowkey[row] & 15u;
    for (i64 t = t0; t < nmx && mx_row[t] == row; ++t) {
      const u32 a = xtile[t];
      if (a == kNone) continue;
      const u64 kk = ysk[mx_first[t]] & 15u;
      at[static_cast<u64>(a) * 256 + rr * 16 + kk] += mx_val[t];
      atomicOr(mask + static_cast<u64>(a) * 16 + rr, 1u << kk);
    }
  }
}

/// Dense B block values and column masks (bit kk of column cc). A tile row belongs to one
/// matched key, so the first sorted Y of each key sums that key's values in sorted order.
__global__ void b_fill_kernel(i64 ny, const u32* ytile, const u64* ysk, const u32* ysc,
                              const u64* colkey, const double* ysv, double* bt, u32* mask) {
  for (i64 q0 = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q0 < ny;
       q0 += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (q0 != 0 && ysk[q0 - 1] == ysk[q0]) continue;
    const u64 key = ysk[q0], kk = key & 15u;
    for (i64 q = q0; q < ny && ysk[q] == key; ++q) {
      const u32 b = ytile[q];
      if (b == kNone) continue;
      const u64 cc = colkey[ysc[q]] & 15u;
      bt[static_cast<u64>(b) * 256 + kk * 16 + cc] += ysv[q];
      atomicOr(mask + static_cast<u64>(b) * 16 + cc, 1u << kk);
    }
  }
}

/// Per dense A block (row block, key block): the dense B blocks of the same key block.
__global__ void pair_count_kernel(i64 na, const u64* adkey, const u64* bdkey, i64 nb, i64* pcnt,
                                  u32* bfirst) {
  for (i64 a = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; a <= na;
       a += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (a == na) {
      pcnt[a] = 0;
      continue;
    }
    const u64 kb = adkey[a] & 0xffffffffull;
    i64 lo = 0, hi = nb;
    while (lo < hi) {
      const i64 mid = (lo + hi) / 2;
      if ((bdkey[mid] >> 32) < kb)
        lo = mid + 1;
      else
        hi = mid;
    }
    i64 lo2 = lo, hi2 = nb;
    while (lo2 < hi2) {
      const i64 mid = (lo2 + hi2) / 2;
      if ((bdkey[mid] >> 32) <= kb)
        lo2 = mid + 1;
      else
        hi2 = mid;
    }
    bfirst[a] = static_cast<u32>(lo);
    pcnt[a] = lo2 - lo;
  }
}

/// Pair p of A block a: output block (row block of a) << 32 | (column block of b).
__global__ void pair_expand_kernel(i64 na, const i64* poff, const u32* bfirst, const u64* adkey,
                                   const u64* bdkey, u64* okey, u32* pa, u32* pb, u32* pid) {
  for (i64 a = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; a < na;
       a += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 ib = adkey[a] >> 32;
    for (i64 p = poff[a], k = 0; p < poff[a + 1]; ++p, ++k) {
      const u32 b = bfirst[a] + static_cast<u32>(k);
      okey[p] = (ib << 32) | (bdkey[b] & 0xffffffffull);
      pa[p] = static_cast<u32>(a);
      pb[p] = b;
      pid[p] = static_cast<u32>(p);
    }
  }
}

__global__ void gather_pairs_kernel(i64 n, const u32* pid, const u32* pa, const u32* pb, u32* pa2,
                                    u32* pb2) {
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x) {
    pa2[p] = pa[pid[p]];
    pb2[p] = pb[pid[p]];
  }
}

/// smask[o * 16 + rr]: bit cc set when some pair of output block o has a product in cell
/// (rr, cc) (row mask of A and column mask of B share a key).
__global__ void smask_kernel(i64 nout, const u32* ostart, const u32* pa, const u32* pb,
                             const u32* amask, const u32* bmask, u32* smask) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < nout * kTile;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 o = i / kTile;
    const int rr = static_cast<int>(i % kTile);
    u32 bits = 0;
    for (u32 p = ostart[o]; p < ostart[o + 1]; ++p) {
      const u32 ma = amask[static_cast<u64>(pa[p]) * 16 + rr];
      if (!ma) continue;
      const u32* mb = bmask + static_cast<u64>(pb[p]) * 16;
      for (int cc = 0; cc < kTile; ++cc)
        if (ma & mb[cc]) bits |= 1u << cc;
    }
    smask[i] = bits;
  }
}

/// Products of a dense A nonzero with dense B nonzeros of its run (ydc: exclusive scan of
/// the sorted-Y dense flags).
__global__ void tc_count_kernel(i64 nmx, const u32* xtile, const u32* mx_first, const i64* mx_off,
                                const i64* ydc, unsigned long long* total) {
  unsigned long long local = 0;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x)
    if (xtile[t] != kNone) {
      const i64 f = mx_first[t];
      local += static_cast<unsigned long long>(ydc[f + (mx_off[t + 1] - mx_off[t])] - ydc[f]);
    }
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(total, local);
}

__global__ void not_none_flags_kernel(i64 n, const u32* v, i64* flag) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i <= n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[i] = i < n && v[i] != kNone ? 1 : 0;
}

/// Allocates n elements of U (at least one byte) and returns the pointer.
template <typename U>
U* dalloc(DeviceMemory& m, i64 n, const char* what) {
  alloc(m, static_cast<std::size_t>(std::max<i64>(n, 0)) * sizeof(U), what);
  return ptr<U>(m);
}

/// Sizes the output's arrays to n on helper threads, so the first touch of their pages
/// overlaps the device work; join() waits (and rethrows). Joins in the destructor too.
/// The arrays' storage is reserved first and its pages faulted in by several threads at
/// once (one write per page of the still unconstructed storage); each array's resize then
/// only writes its zeros on pages already there. Faulting the pages in is what one thread
/// per array was slow at (docs/perf/gpu-h200-sptc.md, "Phases").
template <typename T>
class HostOutput {
 public:
  /// The arrays of a sink (ContractSink::output, called on the helper thread with the
  /// device set): buffers kept by the caller, usually page-locked and already sized.
  HostOutput(ContractSink<T>& sink, const std::vector<u64>& dims, std::size_t n, int device) {
    th_ = std::thread([this, &sink, dims, n, device] {
      try {
        TESSERA_CUDA_CHECK(cudaSetDevice(device));
        SparseTensor<T>& o = sink.output(dims, n);
        TESSERA_EXPECTS(o.idx.size() == dims.size() && o.vals.size() == n,
                        "SpTC output sink: arrays of the wrong size");
        for (const auto& c : o.idx)
          TESSERA_EXPECTS(c.size() == n, "SpTC output sink: arrays of the wrong size");
        target_ = &o;
      } catch (...) {
        err_ = std::current_exception();
      }
    });
  }
  HostOutput(SparseTensor<T>& out, std::size_t n) : target_(&out) {
    std::vector<std::pair<char*, std::size_t>> spans;
    try {
      for (auto& col : out.idx) {
        col.reserve(n);
        spans.emplace_back(reinterpret_cast<char*>(col.data()), n * sizeof(index_t));
      }
      out.vals.reserve(n);
      spans.emplace_back(reinterpret_cast<char*>(out.vals.data()), n * sizeof(T));
      for (const auto& sp : spans) util::advise_huge_pages(sp.first, sp.second);
    } catch (...) {
      err_ = std::current_exception();
      return;
    }
    th_ = std::thread([this, spans, &out, n] {
      try {
        touch(spans);
        std::vector<std::thread> th;
        std::vector<std::exception_ptr> err(out.idx.size() + 1);
        for (std::size_t k = 0; k <= out.idx.size(); ++k)
          th.emplace_back([&, k] {
            try {
              if (k < out.idx.size())
                out.idx[k].resize(n);
              else
                out.vals.resize(n);
            } catch (...) {
              err[k] = std::current_exception();
            }
          });
        for (auto& t : th) t.join();
        for (auto& e : err)
          if (e) std::rethrow_exception(e);
      } catch (...) {
        err_ = std::current_exception();
      }
    });
  }
  ~HostOutput() { wait(); }
  HostOutput(const HostOutput&) = delete;
  HostOutput& operator=(const HostOutput&) = delete;
  void join() {
    wait();
    if (err_) std::rethrow_exception(err_);
  }
  /// The tensor to download into (after join()).
  SparseTensor<T>& target() const { return *target_; }

 private:
  /// Writes one byte per 4 KiB page of the spans, the pages split over threads: this
  /// process's share of the node's cores (OMPI_COMM_WORLD_LOCAL_SIZE ranks), 1 to 16.
  static void touch(const std::vector<std::pair<char*, std::size_t>>& spans) {
    constexpr std::size_t kPage = 4096;
    std::size_t pages = 0;
    for (const auto& s : spans) pages += (s.second + kPage - 1) / kPage;
    if (pages == 0) return;
    int local = 1;
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      local = std::max(1, std::atoi(v));
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int nt = static_cast<int>(std::clamp<std::size_t>(
        std::min<std::size_t>(static_cast<std::size_t>(hw / local), pages / 256), 1, 16));
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t)
      th.emplace_back([&spans, t, nt] {
        for (const auto& s : spans) {
          const std::size_t np = (s.second + kPage - 1) / kPage;
          const std::size_t lo = np * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
          const std::size_t hi =
              np * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
          volatile char* p = s.first;
          for (std::size_t q = lo; q < hi; ++q) p[q * kPage] = 0;
        }
      });
    for (auto& t : th) t.join();
  }
  void wait() noexcept {
    if (th_.joinable()) th_.join();
  }
  std::exception_ptr err_;  // written by th_ only, read after join
  SparseTensor<T>* target_ = nullptr;
  std::thread th_;
};

/// The row-accumulation plan (docs/sptc.md, "CUDA kernel"). Roles: X is the row side, Y
/// the column side, for a spec whose output is row-major in them when possible (the plan
/// swaps the inputs for outputs that list Y's letters first).
template <typename T>
class RowsEngine {
 public:
  RowsEngine(Context& ctx, const ContractSpec& ws, const std::vector<u64>& dims, int obits)
      : ctx_(ctx), ws_(ws), dims_(dims), obits_(obits) {
    tc_prec_ = ws.device.tensor_cores;
    tc_thr_ = resolve_tc_threshold(ws.device);
    int last_x = -1, first_y = ws.out_order();
    for (int o = 0; o < ws.out_order(); ++o)
      if (ws.out_from_y[static_cast<std::size_t>(o)])
        first_y = std::min(first_y, o);
      else
        last_x = o;
    row_major_ = last_x < first_y;
  }

  /// Matching, row classes, tensor-core blocks and the count pass. Fills count.
  void build(const SparseTensor<T>& x, const SparseTensor<T>& y, ContractCount& count);
  /// The same from inputs already on the device (routed there): X with dims xdims, nx
  /// nonzeros; Y with ny. The engine keeps them.
  void build_device(DeviceTensor<T>&& x, DeviceTensor<T>&& y, const std::vector<u64>& xdims, i64 nx,
                    i64 ny, ContractCount& count);
  /// The output: a new tensor, or (sink given) written into sink->output(...), and then an
  /// empty tensor is returned.
  SparseTensor<T> run(ContractStats& st, ContractSink<T>* sink = nullptr);
  double match_seconds() const { return match_s_; }
  double count_seconds() const { return count_s_; }

 private:
  i64 scan(const i64* in, i64* out, i64 n1);  // exclusive scan of n1 entries; returns out[n1-1]
  /// Blocks of 16 codes (code / 16) over n sorted codes: rank[i] = the block of code i
  /// (allocated here); flag and excl are n + 1 entries of scratch. Returns the blocks.
  i64 block_ranks(i64 n, const u64* code, i64* flag, i64* excl, DeviceMemory& rank);
  /// table[b * 16 + code % 16] = i for the n codes of blocks 0..nb-1 (allocated here),
  /// 0xffffffff where no code is.
  void block_table(i64 n, const u64* code, const DeviceMemory& rank, i64 nb, DeviceMemory& table);
  template <typename V>
  void sort_pairs(cub::DoubleBuffer<u64>& k, cub::DoubleBuffer<V>& v, i64 n, int bits);
  void sort_keys(cub::DoubleBuffer<u64>& k, i64 n, int bits);
  /// Nonzeros 0..n-1 sorted (stable) by the code `m` gives their coordinates (`bits` low
  /// bits significant): keys() the sorted codes, perm() the nonzero ids in that order.
  struct Sorted {
    DeviceMemory k[2], p[2];
    const u64* keys = nullptr;
    const index_t* perm = nullptr;
  };
  void sort_by_code(const KeyMap& m, i64 n, int bits, const char* what, Sorted* out);
  void build_tensor_cores();
  void build_loaded(const std::vector<u64>& xdims, ContractCount& count);
  void check_err(const char* when);
  sptc::RowsView view() const;

  Context& ctx_;
  ContractSpec ws_;
  std::vector<u64> dims_;
  int obits_ = 1;
  bool row_major_ = true;
  TensorCorePrecision tc_prec_ = TensorCorePrecision::off;
  double tc_thr_ = 0;
  DeviceMemory tmp_;  // CUB temporaries (grow-only)
  EventPool ev_;
  DeviceTensor<T> xd_, yd_;  // yd_ empty for a self-contraction
  const DeviceTensor<T>* ydp_ = nullptr;
  i64 nx_ = 0, ny_ = 0, nmx_ = 0, nrows_ = 0, ncols_ = 0, products_ = 0, entries_ = 0;
  // Matched structure.
  DeviceMemory ysc_, ysv_, colrep_, mx_first_, mx_row_, mx_val_, mx_off_, rowstart_, rowp_, rowrep_,
      err_;
  // Row classes.
  i64 ngroups_ = 0, ndense_ = 0, nspill_ = 0, spill_products_ = 0, spill_entries_ = 0;
  int ntiles_ = 1, tile_w_ = 0;
  DeviceMemory gfirst_, gend_, drows_, srows_, soff_, rowoff_, itemoff_;
  // Tensor cores.
  bool tc_on_ = false;
  i64 tc_products_ = 0, tc_blocks_ = 0, tc_pairs_ = 0, nout_ = 0;
  DeviceMemory xtile_, ytile_, atiles_, btiles_, otkey_, ostart_, pa_, pb_, smask_, irow_, jcol_,
      rowblk_, rowlo_;
  double tc_build_s_ = 0;
  std::string tc_note_;
  // Codes read while the tensor-core blocks are built (owned by build()).
  const u64* rowkey_ = nullptr;
  const u64* colkey_ = nullptr;
  const u64* ysk_ = nullptr;
  DeviceMemory colblk_tmp_;
  std::size_t held_ = 0, count_peak_ = 0, run_peak_ = 0;
  double match_s_ = 0, count_s_ = 0;
};

template <typename T>
i64 RowsEngine<T>::scan(const i64* in, i64* out, i64 n1) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n1, ctx_.stream));
  alloc(tmp_, bytes, "SpTC scan temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp_.get(), bytes, in, out, n1, ctx_.stream));
  return download_one(ctx_, out + (n1 - 1));
}

template <typename T>
template <typename V>
void RowsEngine<T>::sort_pairs(cub::DoubleBuffer<u64>& k, cub::DoubleBuffer<V>& v, i64 n,
                               int bits) {
  radix_sort_pairs(ctx_, tmp_, k, v, n, bits);
}

template <typename T>
void RowsEngine<T>::sort_by_code(const KeyMap& m, i64 n, int bits, const char* what, Sorted* out) {
  for (int b = 0; b < 2; ++b) {
    dalloc<u64>(out->k[b], n, what);
    dalloc<index_t>(out->p[b], n, "SpTC permutation");
  }
  y_keys_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(n, m, ptr<u64>(out->k[0]),
                                                         ptr<index_t>(out->p[0]));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  cub::DoubleBuffer<u64> kb(ptr<u64>(out->k[0]), ptr<u64>(out->k[1]));
  cub::DoubleBuffer<index_t> pb(ptr<index_t>(out->p[0]), ptr<index_t>(out->p[1]));
  sort_pairs(kb, pb, n, bits);
  out->keys = kb.Current();
  out->perm = pb.Current();
}

template <typename T>
void RowsEngine<T>::sort_keys(cub::DoubleBuffer<u64>& k, i64 n, int bits) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, k, n, 0, bits, ctx_.stream));
  alloc(tmp_, bytes, "SpTC sort temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(tmp_.get(), bytes, k, n, 0, bits, ctx_.stream));
}

template <typename T>
void RowsEngine<T>::check_err(const char* when) {
  const unsigned e = download_one(ctx_, ptr<unsigned>(err_));
  TESSERA_EXPECTS(e == 0, "SpTC (cuda backend, rows assembly): internal check failed "
                              << when << " (error bits " << e
                              << ": 1 group overflow, 2 count mismatch, 4 tensor-core cell "
                                 "missing, 8 spill rows); rerun with the spec's "
                                 "device.assembly = sort and report it");
}

template <typename T>
sptc::RowsView RowsEngine<T>::view() const {
  sptc::RowsView v;
  v.nrows = nrows_;
  v.ncols = ncols_;
  v.rowstart = ptr<u32>(rowstart_);
  v.rowp = ptr<i64>(rowp_);
  v.mx_off = ptr<i64>(mx_off_);
  v.mx_first = ptr<u32>(mx_first_);
  v.mx_row = ptr<u32>(mx_row_);
  v.mx_val = ptr<double>(mx_val_);
  v.ysc = ptr<u32>(ysc_);
  v.ysv = ptr<double>(ysv_);
  v.err = ptr<unsigned>(err_);
  if (tc_on_) {
    sptc::TcView& t = v.tc;
    t.nout = nout_;
    t.otkey = ptr<u64>(otkey_);
    t.ostart = ptr<u32>(ostart_);
    t.pa = ptr<u32>(pa_);
    t.pb = ptr<u32>(pb_);
    t.atiles = atiles_.get();
    t.btiles = btiles_.get();
    t.smask = ptr<u32>(smask_);
    t.irow = ptr<u32>(irow_);
    t.jcol = ptr<u32>(jcol_);
    t.rowblk = ptr<u32>(rowblk_);
    t.rowlo = ptr<unsigned char>(rowlo_);
    t.xtile = ptr<u32>(xtile_);
    t.ytile = ptr<u32>(ytile_);
  }
  return v;
}

/// KeyMap over modes `modes` of a device tensor, with lengths `len`.
template <typename T>
KeyMap key_map(const DeviceTensor<T>& t, const std::vector<int>& modes,
               const std::vector<u64>& len) {
  KeyMap m;
  m.n = static_cast<int>(modes.size());
  for (int c = 0; c < m.n; ++c) {
    m.col[c] = t.col(modes[static_cast<std::size_t>(c)]);
    m.dim[c] = len[static_cast<std::size_t>(c)];
  }
  return m;
}

template <typename T>
void RowsEngine<T>::build(const SparseTensor<T>& x, const SparseTensor<T>& y,
                          ContractCount& count) {
  nx_ = x.nnz();
  ny_ = y.nnz();
  if (nx_ == 0 || ny_ == 0) return;
  const bool self = &x == &y;
  const std::size_t in_bytes =
      static_cast<std::size_t>(nx_) * (x.idx.size() * sizeof(index_t) + sizeof(T)) +
      (self ? 0 : static_cast<std::size_t>(ny_) * (y.idx.size() * sizeof(index_t) + sizeof(T)));
  // Peak of the matching: about 56 bytes per Y and 64 per X nonzero besides the inputs.
  check_fits(ctx_, in_bytes + 64 * static_cast<std::size_t>(nx_ + ny_), "matching the inputs", 0,
             -1);
  ev_.ensure(4);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  {
    PhaseTrace tr("sptc upload");
    DeviceTensor<T>::load(ctx_, xd_, x, self ? nullptr : &yd_, &y);
    ydp_ = self ? &xd_ : &yd_;
    tr.mark("inputs");
  }
  build_loaded(x.dims, count);
}

template <typename T>
void RowsEngine<T>::build_device(DeviceTensor<T>&& x, DeviceTensor<T>&& y,
                                 const std::vector<u64>& xdims, i64 nx, i64 ny,
                                 ContractCount& count) {
  nx_ = nx;
  ny_ = ny;
  xd_ = std::move(x);
  yd_ = std::move(y);
  ydp_ = &yd_;
  if (nx_ == 0 || ny_ == 0) return;
  check_fits(ctx_, 64 * static_cast<std::size_t>(nx_ + ny_), "matching the inputs", 0, -1);
  ev_.ensure(4);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  build_loaded(xdims, count);
}

template <typename T>
void RowsEngine<T>::build_loaded(const std::vector<u64>& xdims, ContractCount& count) {
  const DeviceTensor<T>& yd = *ydp_;
  PhaseTrace tr("sptc match (nx " + std::to_string(nx_) + ", ny " + std::to_string(ny_) + ")");
  held_ = xd_.bytes + yd_.bytes;
  alloc(err_, sizeof(unsigned), "SpTC error flags");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(err_.get(), 0, sizeof(unsigned), ctx_.stream));

  // Lengths of the key, row and column codes.
  std::vector<u64> klen, rlen, clen;
  std::vector<int> xrow_modes, ycol_modes;
  for (int m : ws_.x_key) klen.push_back(xdims[static_cast<std::size_t>(m)]);
  for (int o = 0; o < ws_.out_order(); ++o) {
    const auto os = static_cast<std::size_t>(o);
    if (ws_.out_from_y[os]) {
      ycol_modes.push_back(ws_.out_mode[os]);
      clen.push_back(dims_[os]);
    } else {
      xrow_modes.push_back(ws_.out_mode[os]);
      rlen.push_back(dims_[os]);
    }
  }
  const KeyMap xk = key_map(xd_, ws_.x_key, klen), yk = key_map(yd, ws_.y_key, klen);
  const KeyMap rk = key_map(xd_, xrow_modes, rlen), ck = key_map(yd, ycol_modes, clen);
  const int kbits = key_bits(cells(klen)), rbits = key_bits(cells(rlen)),
            cbits = key_bits(cells(clen));

  // ---- Y: sorted by matched key; columns ranked ----
  Sorted ys;  // Y by matched key; the sorted keys are kept for the tensor-core blocks
  sort_by_code(yk, ny_, kbits, "SpTC keys", &ys);
  tr.mark("y key sort");
  const u64* ysk = ys.keys;
  const index_t* yperm = ys.perm;
  DeviceMemory colkey;  // per column: its code (tensor-core blocks)
  {
    DeviceMemory flag, excl, crank;
    dalloc<u32>(crank, ny_, "SpTC column ranks");
    // Column ranks: flags where a new column begins, over a table of the column codes when
    // their space has at most max(2^20, ny) cells (no sort of Y), else over Y's column
    // codes sorted; the scan of the flags ranks them. Same ranks, representatives and codes
    // either way.
    const u128 ccells = cells(clen);
    const bool table = ccells <= std::max<u128>(u128{1} << 20, static_cast<u128>(ny_));
    const i64 nf = table ? static_cast<i64>(ccells) : ny_;  // flags (and one for the total)
    DeviceMemory rep;
    Sorted cs;
    dalloc<i64>(flag, nf + 1, "SpTC flags");
    dalloc<i64>(excl, nf + 1, "SpTC flags");
    if (table) {
      dalloc<u32>(rep, nf, "SpTC column table");
      TESSERA_CUDA_CHECK(
          cudaMemsetAsync(rep.get(), 0xff, static_cast<std::size_t>(nf) * 4, ctx_.stream));
      col_table_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(ny_, ck, ptr<u32>(rep));
      col_present_kernel<<<grid_for(nf + 1), kBlock, 0, ctx_.stream>>>(nf, ptr<u32>(rep),
                                                                       ptr<i64>(flag));
    } else {
      sort_by_code(ck, ny_, cbits, "SpTC column keys", &cs);
      change_flags_kernel<<<grid_for(ny_ + 1), kBlock, 0, ctx_.stream>>>(ny_, cs.keys, 0,
                                                                         ptr<i64>(flag));
    }
    TESSERA_CUDA_CHECK(cudaGetLastError());
    ncols_ = scan(ptr<i64>(flag), ptr<i64>(excl), nf + 1);
    dalloc<u32>(colrep_, ncols_, "SpTC columns");
    dalloc<u64>(colkey, ncols_, "SpTC columns");
    if (table) {
      col_table_ranks_kernel<<<grid_for(nf), kBlock, 0, ctx_.stream>>>(
          nf, ptr<u32>(rep), ptr<i64>(flag), ptr<i64>(excl), ptr<u32>(colrep_), ptr<u64>(colkey));
      col_rank_of_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(ny_, ck, ptr<i64>(excl),
                                                                    ptr<u32>(crank));
    } else {
      col_ranks_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
          ny_, ptr<i64>(flag), ptr<i64>(excl), cs.perm, cs.keys, ptr<u32>(crank), ptr<u32>(colrep_),
          ptr<u64>(colkey));
    }
    TESSERA_CUDA_CHECK(cudaGetLastError());
    dalloc<u32>(ysc_, ny_, "SpTC sorted Y");
    dalloc<double>(ysv_, ny_, "SpTC sorted Y");
    y_sorted_kernel<T><<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
        ny_, yperm, ptr<u32>(crank), ptr<T>(yd.vals), ptr<u32>(ysc_), ptr<double>(ysv_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  ys.p[0] = DeviceMemory();  // the permutation is no longer needed
  ys.p[1] = DeviceMemory();
  yperm = nullptr;
  tr.mark("y columns");
  held_ += static_cast<std::size_t>(ny_) * 12 + static_cast<std::size_t>(ncols_) * 4;

  // ---- X: sorted by row code, matched, compacted; rows ----
  DeviceMemory rowkey;  // per row: its code (tensor-core blocks)
  {
    DeviceMemory xfirst, xcnt, mflag, mpos, mx_cnt, mx_orig, mx_rk;
    Sorted xs;  // stable: a row keeps X's input order
    sort_by_code(rk, nx_, rbits, "SpTC row keys", &xs);
    tr.mark("x row sort");
    dalloc<u32>(xfirst, nx_, "SpTC ranges");
    dalloc<i64>(xcnt, nx_, "SpTC ranges");
    dalloc<i64>(mflag, nx_ + 1, "SpTC flags");
    dalloc<i64>(mpos, nx_ + 1, "SpTC flags");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(mflag) + nx_, 0, sizeof(i64), ctx_.stream));
    x_ranges_sorted_kernel<<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
        nx_, xk, xs.perm, ysk, ny_, ptr<u32>(xfirst), ptr<i64>(xcnt), ptr<i64>(mflag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nmx_ = scan(ptr<i64>(mflag), ptr<i64>(mpos), nx_ + 1);
    tr.mark("x match");
    if (nmx_ == 0) {
      TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
      ctx_.sync();
      match_s_ = elapsed(ev_[0], ev_[1]);
      count.products = 0;
      count.workspace_bytes = held_;
      return;
    }
    dalloc<u32>(mx_first_, nmx_, "SpTC matched X");
    dalloc<i64>(mx_cnt, nmx_ + 1, "SpTC matched X");
    dalloc<double>(mx_val_, nmx_, "SpTC matched X");
    dalloc<u32>(mx_orig, nmx_, "SpTC matched X");
    dalloc<u64>(mx_rk, nmx_, "SpTC matched X");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(mx_cnt) + nmx_, 0, sizeof(i64), ctx_.stream));
    x_compact_kernel<T><<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
        nx_, ptr<i64>(mflag), ptr<i64>(mpos), xs.perm, ptr<u32>(xfirst), ptr<i64>(xcnt), xs.keys,
        ptr<T>(xd_.vals), ptr<u32>(mx_first_), ptr<i64>(mx_cnt), ptr<double>(mx_val_),
        ptr<u32>(mx_orig), ptr<u64>(mx_rk));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    // Free the sort buffers before the per-row arrays.
    xs = Sorted();
    xfirst = DeviceMemory();
    xcnt = DeviceMemory();
    dalloc<i64>(mx_off_, nmx_ + 1, "SpTC product offsets");
    products_ = scan(ptr<i64>(mx_cnt), ptr<i64>(mx_off_), nmx_ + 1);
    mx_cnt = DeviceMemory();
    // Rows: runs of equal row codes (mflag/mpos reused as flags and their scan).
    change_flags_kernel<<<grid_for(nmx_ + 1), kBlock, 0, ctx_.stream>>>(nmx_, ptr<u64>(mx_rk), 0,
                                                                        ptr<i64>(mflag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nrows_ = scan(ptr<i64>(mflag), ptr<i64>(mpos), nmx_ + 1);
    dalloc<u32>(mx_row_, nmx_, "SpTC matched X");
    dalloc<u32>(rowstart_, nrows_ + 1, "SpTC rows");
    dalloc<u32>(rowrep_, nrows_, "SpTC rows");
    dalloc<u64>(rowkey, nrows_, "SpTC rows");
    dalloc<i64>(rowp_, nrows_ + 1, "SpTC rows");
    rows_build_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<i64>(mflag), ptr<i64>(mpos), ptr<u32>(mx_orig), ptr<u64>(mx_rk),
        ptr<i64>(mx_off_), ptr<u32>(mx_row_), ptr<u32>(rowstart_), ptr<u32>(rowrep_),
        ptr<u64>(rowkey), ptr<i64>(rowp_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    set_tail_kernel<<<1, 1, 0, ctx_.stream>>>(ptr<u32>(rowstart_) + nrows_, static_cast<u32>(nmx_),
                                              ptr<i64>(rowp_) + nrows_, products_);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  tr.mark("x compact, rows");
  held_ += static_cast<std::size_t>(nmx_) * 28 + static_cast<std::size_t>(nrows_) * 16;
  count.products = products_;

  // ---- tensor-core blocks ----
  if (tc_prec_ != TensorCorePrecision::off && tc_thr_ <= 1.0) {
    const auto t0 = std::chrono::steady_clock::now();
    rowkey_ = ptr<u64>(rowkey);
    colkey_ = ptr<u64>(colkey);
    ysk_ = ysk;
    build_tensor_cores();
    rowkey_ = colkey_ = ysk_ = nullptr;
    ctx_.sync();
    tc_build_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  rowkey = DeviceMemory();
  colkey = DeviceMemory();
  ys = Sorted();
  tr.mark("tensor-core blocks");

  // ---- row classes ----
  {
    const i64 heavy = std::max<i64>(i64{1} << 20, products_ / 512);
    const bool dense_ok = ncols_ <= static_cast<i64>(sptc::kDenseTileMax) * sptc::kDenseTilesMax;
    const bool one_tile = ncols_ <= sptc::kDenseTileMax;
    DeviceMemory dflag, dex, sflag, sex, gs, gex, sprod;
    for (DeviceMemory* m : {&dflag, &dex, &sflag, &sex, &gs, &gex})
      dalloc<i64>(*m, nrows_ + 1, "SpTC row classes");
    row_class_kernel<<<grid_for(nrows_ + 1), kBlock, 0, ctx_.stream>>>(
        nrows_, ptr<i64>(rowp_), heavy, dense_ok ? 1 : 0, one_tile ? 1 : 0, ncols_, ptr<i64>(dflag),
        ptr<i64>(sflag), ptr<i64>(gs));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    ndense_ = scan(ptr<i64>(dflag), ptr<i64>(dex), nrows_ + 1);
    nspill_ = scan(ptr<i64>(sflag), ptr<i64>(sex), nrows_ + 1);
    ngroups_ = scan(ptr<i64>(gs), ptr<i64>(gex), nrows_ + 1);
    dalloc<u32>(drows_, ndense_, "SpTC row classes");
    dalloc<u32>(srows_, nspill_, "SpTC row classes");
    dalloc<i64>(sprod, nspill_ + 1, "SpTC row classes");
    dalloc<i64>(soff_, nspill_ + 1, "SpTC row classes");
    dalloc<u32>(gfirst_, ngroups_, "SpTC row classes");
    dalloc<u32>(gend_, ngroups_, "SpTC row classes");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(sprod) + nspill_, 0, sizeof(i64), ctx_.stream));
    row_lists_kernel<<<grid_for(nrows_), kBlock, 0, ctx_.stream>>>(
        nrows_, ptr<i64>(rowp_), ptr<i64>(dflag), ptr<i64>(dex), ptr<i64>(sflag), ptr<i64>(sex),
        ptr<i64>(gs), ptr<i64>(gex), ptr<u32>(drows_), ptr<u32>(srows_), ptr<i64>(sprod),
        ptr<u32>(gfirst_), ptr<u32>(gend_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    spill_products_ = scan(ptr<i64>(sprod), ptr<i64>(soff_), nspill_ + 1);
    ntiles_ = static_cast<int>(
        std::max<i64>(1, (ncols_ + sptc::kDenseTileMax - 1) / sptc::kDenseTileMax));
    tile_w_ = static_cast<int>(((ncols_ + ntiles_ - 1) / ntiles_ + 3) / 4 * 4);
    held_ += static_cast<std::size_t>(ndense_ + nspill_ + 2 * ngroups_) * 4 +
             static_cast<std::size_t>(nspill_) * 8;
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  tr.mark("row classes");

  // ---- count pass ----
  const i64 nitems = ndense_ * ntiles_;
  const std::size_t S = static_cast<std::size_t>(spill_products_);
  {
    std::size_t sort_tmp = 0;
    if (S > 0) {
      cub::DoubleBuffer<u64> k(nullptr, nullptr);
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_tmp, k, spill_products_, 0,
                                                        64, ctx_.stream));
    }
    count_peak_ = 16 * S + sort_tmp + static_cast<std::size_t>(nrows_ + nitems) * 16;
    check_fits(ctx_, count_peak_, "counting the output", products_, -1);
  }
  DeviceMemory rowcnt, itemcnt;
  dalloc<i64>(rowcnt, nrows_ + 1, "SpTC row counts");
  dalloc<i64>(itemcnt, nitems + 1, "SpTC row counts");
  dalloc<i64>(rowoff_, nrows_ + 1, "SpTC row offsets");
  dalloc<i64>(itemoff_, nitems + 1, "SpTC row offsets");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(rowcnt.get(), 0, static_cast<std::size_t>(nrows_ + 1) * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(itemcnt.get(), 0, static_cast<std::size_t>(nitems + 1) * 8, ctx_.stream));
  const sptc::RowsView v = view();
  sptc::RowsOut co;
  co.rowcnt = ptr<i64>(rowcnt);
  co.itemcnt = ptr<i64>(itemcnt);
  sptc::launch_row_groups(ctx_.stream, v, ptr<u32>(gfirst_), ptr<u32>(gend_), ngroups_, false, co);
  sptc::launch_dense_rows(ctx_.stream, v, ptr<u32>(drows_), nitems, ntiles_, tile_w_, false, co);
  if (S > 0) {
    DeviceMemory k0, k1, c;
    dalloc<u64>(k0, spill_products_, "SpTC spill keys");
    dalloc<u64>(k1, spill_products_, "SpTC spill keys");
    dalloc<unsigned long long>(c, 1, "SpTC count");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, sizeof(unsigned long long), ctx_.stream));
    spill_keys_kernel<<<grid_for(spill_products_), kBlock, 0, ctx_.stream>>>(
        spill_products_, ptr<i64>(soff_), nspill_, ptr<u32>(srows_), v, ptr<u64>(k0), nullptr);
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(k0), ptr<u64>(k1));
    sort_keys(kb, spill_products_, key_bits(static_cast<u128>(nrows_) * static_cast<u128>(ncols_)));
    spill_count_kernel<<<grid_for(spill_products_, 4096), kBlock, 0, ctx_.stream>>>(
        spill_products_, kb.Current(), static_cast<u64>(ncols_), ptr<i64>(rowcnt),
        ptr<unsigned long long>(c));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    spill_entries_ = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(c)));
  }
  entries_ = scan(ptr<i64>(rowcnt), ptr<i64>(rowoff_), nrows_ + 1);
  if (nitems > 0) scan(ptr<i64>(itemcnt), ptr<i64>(itemoff_), nitems + 1);
  check_err("in the count pass");
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  tr.mark("count");
  match_s_ = elapsed(ev_[0], ev_[1]);
  count_s_ = elapsed(ev_[1], ev_[2]);
  held_ += static_cast<std::size_t>(nrows_ + nitems) * 8;
  count.output_entries = entries_;
  count.output_bytes = static_cast<std::size_t>(entries_) * contract_entry_bytes(ws_, sizeof(T));
  // The run: entries (12 E), flags and positions (16 E), the device output, the spill sort
  // (32 S + temporaries) or the final sort of interleaved outputs (32 E + temporaries).
  const std::size_t E = static_cast<std::size_t>(entries_);
  std::size_t sort_tmp = 0;
  {
    cub::DoubleBuffer<u64> k(nullptr, nullptr);
    cub::DoubleBuffer<double> vv(nullptr, nullptr);
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_tmp, k, vv, std::max<i64>(spill_products_, entries_), 0, 64, ctx_.stream));
  }
  const std::size_t out_dev = (4 * static_cast<std::size_t>(dims_.size()) + sizeof(T)) * E;
  run_peak_ = 12 * E +
              std::max(32 * S + sort_tmp + 16 * static_cast<std::size_t>(nrows_),
                       16 * E + out_dev + (row_major_ ? 0 : 32 * E + sort_tmp)) +
              4096;
  count.workspace_bytes = held_ + std::max(count_peak_, run_peak_);
  if (products_ > 0) check_fits(ctx_, run_peak_, "the contraction", products_, entries_);
}

template <typename T>
i64 RowsEngine<T>::block_ranks(i64 n, const u64* code, i64* flag, i64* excl, DeviceMemory& rank) {
  change_flags_kernel<<<grid_for(n + 1), kBlock, 0, ctx_.stream>>>(n, code, 4, flag);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const i64 nb = scan(flag, excl, n + 1);
  dalloc<u32>(rank, n, "SpTC tensor-core blocks");
  ranks_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(n, flag, excl, ptr<u32>(rank));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  return nb;
}

template <typename T>
void RowsEngine<T>::block_table(i64 n, const u64* code, const DeviceMemory& rank, i64 nb,
                                DeviceMemory& table) {
  dalloc<u32>(table, nb * kTile, "SpTC tensor-core blocks");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(table.get(), 0xff, static_cast<std::size_t>(nb) * kTile * 4, ctx_.stream));
  fill_table_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(n, code, ptr<u32>(rank),
                                                             ptr<u32>(table));
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RowsEngine<T>::build_tensor_cores() {
  const i64 need = std::max<i64>(1, static_cast<i64>(std::ceil(tc_thr_ * 256.0 - 1e-9)));
  if (need > 256) return;
  // Row blocks, column blocks, key blocks (ranks of code / 16).
  i64 nib = 0, njb = 0;
  DeviceMemory ykb;
  {
    const i64 nmax = std::max({nrows_, ncols_, ny_});
    DeviceMemory flag, excl;
    dalloc<i64>(flag, nmax + 1, "SpTC tensor-core blocks");
    dalloc<i64>(excl, nmax + 1, "SpTC tensor-core blocks");
    // Rows: blocks, each row's place in its block, and the block -> row table.
    nib = block_ranks(nrows_, rowkey_, ptr<i64>(flag), ptr<i64>(excl), rowblk_);
    dalloc<unsigned char>(rowlo_, nrows_, "SpTC tensor-core blocks");
    low4_kernel<<<grid_for(nrows_), kBlock, 0, ctx_.stream>>>(nrows_, rowkey_,
                                                              ptr<unsigned char>(rowlo_));
    block_table(nrows_, rowkey_, rowblk_, nib, irow_);
    // Columns, then Y's matched keys.
    njb = block_ranks(ncols_, colkey_, ptr<i64>(flag), ptr<i64>(excl), colblk_tmp_);
    block_table(ncols_, colkey_, colblk_tmp_, njb, jcol_);
    block_ranks(ny_, ysk_, ptr<i64>(flag), ptr<i64>(excl), ykb);
  }
  // Dense blocks of one side: block keys sorted, runs counted, dense ones numbered.
  // Returns the number of dense blocks; tile[element] = dense block or kNone; dkey = keys.
  auto dense_blocks = [&](i64 n, DeviceMemory& keys, DeviceMemory& idx, DeviceMemory& tile,
                          DeviceMemory& dkey) -> i64 {
    DeviceMemory k1, i1, flag, excl, start, dflag, dexcl;
    dalloc<u64>(k1, n, "SpTC tensor-core blocks");
    dalloc<u32>(i1, n, "SpTC tensor-core blocks");
    cub::DoubleBuffer<u64> kb(ptr<u64>(keys), ptr<u64>(k1));
    cub::DoubleBuffer<u32> ib(ptr<u32>(idx), ptr<u32>(i1));
    sort_pairs(kb, ib, n, 64);
    dalloc<i64>(flag, n + 1, "SpTC tensor-core blocks");
    dalloc<i64>(excl, n + 1, "SpTC tensor-core blocks");
    change_flags_kernel<<<grid_for(n + 1), kBlock, 0, ctx_.stream>>>(n, kb.Current(), 0,
                                                                     ptr<i64>(flag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    const i64 nblocks = scan(ptr<i64>(flag), ptr<i64>(excl), n + 1);
    dalloc<u32>(start, nblocks, "SpTC tensor-core blocks");
    run_starts_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(
        n, ptr<i64>(flag), ptr<i64>(excl), kb.Current(), ptr<u32>(start), nullptr);
    dalloc<i64>(dflag, nblocks + 1, "SpTC tensor-core blocks");
    dalloc<i64>(dexcl, nblocks + 1, "SpTC tensor-core blocks");
    dense_flags_kernel<<<grid_for(nblocks + 1), kBlock, 0, ctx_.stream>>>(nblocks, ptr<u32>(start),
                                                                          n, need, ptr<i64>(dflag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    const i64 nd = scan(ptr<i64>(dflag), ptr<i64>(dexcl), nblocks + 1);
    dalloc<u32>(tile, n, "SpTC tensor-core blocks");
    dalloc<u64>(dkey, nd, "SpTC tensor-core blocks");
    elem_blocks_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(
        n, ib.Current(), ptr<i64>(flag), ptr<i64>(excl), ptr<i64>(dflag), ptr<i64>(dexcl),
        kb.Current(), ptr<u32>(tile), ptr<u64>(dkey));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    return nd;
  };
  DeviceMemory adkey, bdkey;
  i64 na = 0, nb = 0;
  {
    DeviceMemory keys, idx;
    dalloc<u64>(keys, nmx_, "SpTC tensor-core blocks");
    dalloc<u32>(idx, nmx_, "SpTC tensor-core blocks");
    a_keys_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<u32>(mx_row_), ptr<u32>(mx_first_), ptr<u32>(rowblk_), ptr<u32>(ykb),
        ptr<u64>(keys), ptr<u32>(idx));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    na = dense_blocks(nmx_, keys, idx, xtile_, adkey);
  }
  {
    DeviceMemory keys, idx;
    dalloc<u64>(keys, ny_, "SpTC tensor-core blocks");
    dalloc<u32>(idx, ny_, "SpTC tensor-core blocks");
    b_keys_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
        ny_, ptr<u32>(ykb), ptr<u32>(ysc_), ptr<u32>(colblk_tmp_), ptr<u64>(keys), ptr<u32>(idx));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nb = dense_blocks(ny_, keys, idx, ytile_, bdkey);
  }
  colblk_tmp_ = DeviceMemory();
  ykb = DeviceMemory();
  auto give_up = [&](const std::string& why) {
    tc_note_ = why;
    for (DeviceMemory* m : {&xtile_, &ytile_, &irow_, &jcol_, &rowblk_, &rowlo_})
      *m = DeviceMemory();
    tc_on_ = false;
  };
  if (na == 0 || nb == 0) return give_up("no dense blocks");
  // Block pairs sharing a key block, grouped by output block.
  DeviceMemory pcnt, poff, bfirst;
  dalloc<i64>(pcnt, na + 1, "SpTC block pairs");
  dalloc<i64>(poff, na + 1, "SpTC block pairs");
  dalloc<u32>(bfirst, na, "SpTC block pairs");
  pair_count_kernel<<<grid_for(na + 1), kBlock, 0, ctx_.stream>>>(
      na, ptr<u64>(adkey), ptr<u64>(bdkey), nb, ptr<i64>(pcnt), ptr<u32>(bfirst));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const i64 np = scan(ptr<i64>(pcnt), ptr<i64>(poff), na + 1);
  if (np == 0) return give_up("no pair of dense blocks");
  if (np >= (i64{1} << 32) - 1) return give_up("over 2^32 block pairs");
  const std::size_t blocks_bytes =
      static_cast<std::size_t>(na + nb) * 256 *
      (8 + (tc_prec_ == TensorCorePrecision::fp64 ? 0 : sptc::tile_value_bytes(tc_prec_)));
  {
    const std::size_t free_b = free_bytes();
    const std::size_t want = blocks_bytes + static_cast<std::size_t>(np) * 40;
    if (want > free_b / 4)
      return give_up("the dense blocks and their pairs would need " + gib(want) +
                     " of device memory");
  }
  DeviceMemory okey, pa, pb, pid;
  {
    DeviceMemory okey1, pid1;
    dalloc<u64>(okey, np, "SpTC block pairs");
    dalloc<u64>(okey1, np, "SpTC block pairs");
    dalloc<u32>(pa, np, "SpTC block pairs");
    dalloc<u32>(pb, np, "SpTC block pairs");
    dalloc<u32>(pid, np, "SpTC block pairs");
    dalloc<u32>(pid1, np, "SpTC block pairs");
    pair_expand_kernel<<<grid_for(na), kBlock, 0, ctx_.stream>>>(
        na, ptr<i64>(poff), ptr<u32>(bfirst), ptr<u64>(adkey), ptr<u64>(bdkey), ptr<u64>(okey),
        ptr<u32>(pa), ptr<u32>(pb), ptr<u32>(pid));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(okey), ptr<u64>(okey1));
    cub::DoubleBuffer<u32> ib(ptr<u32>(pid), ptr<u32>(pid1));
    sort_pairs(kb, ib, np, 64);
    dalloc<u32>(pa_, np, "SpTC block pairs");
    dalloc<u32>(pb_, np, "SpTC block pairs");
    gather_pairs_kernel<<<grid_for(np), kBlock, 0, ctx_.stream>>>(
        np, ib.Current(), ptr<u32>(pa), ptr<u32>(pb), ptr<u32>(pa_), ptr<u32>(pb_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    DeviceMemory flag, excl;
    dalloc<i64>(flag, np + 1, "SpTC block pairs");
    dalloc<i64>(excl, np + 1, "SpTC block pairs");
    change_flags_kernel<<<grid_for(np + 1), kBlock, 0, ctx_.stream>>>(np, kb.Current(), 0,
                                                                      ptr<i64>(flag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nout_ = scan(ptr<i64>(flag), ptr<i64>(excl), np + 1);
    dalloc<u32>(ostart_, nout_ + 1, "SpTC block pairs");
    dalloc<u64>(otkey_, nout_, "SpTC block pairs");
    run_starts_kernel<<<grid_for(np), kBlock, 0, ctx_.stream>>>(
        np, ptr<i64>(flag), ptr<i64>(excl), kb.Current(), ptr<u32>(ostart_), ptr<u64>(otkey_));
    set_u32_kernel<<<1, 1, 0, ctx_.stream>>>(ptr<u32>(ostart_) + nout_, static_cast<u32>(np));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  // Block values (double, repeats summed) and masks, then the pair masks per output block.
  DeviceMemory at, bt, amask, bmask;
  dalloc<double>(at, na * 256, "SpTC dense blocks");
  dalloc<double>(bt, nb * 256, "SpTC dense blocks");
  dalloc<u32>(amask, na * kTile, "SpTC dense blocks");
  dalloc<u32>(bmask, nb * kTile, "SpTC dense blocks");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(at.get(), 0, static_cast<std::size_t>(na) * 256 * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(bt.get(), 0, static_cast<std::size_t>(nb) * 256 * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(amask.get(), 0, static_cast<std::size_t>(na) * kTile * 4, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(bmask.get(), 0, static_cast<std::size_t>(nb) * kTile * 4, ctx_.stream));
  a_fill_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
      nmx_, ptr<u32>(xtile_), ptr<u32>(mx_row_), ptr<u32>(mx_first_), rowkey_, ysk_,
      ptr<double>(mx_val_), ptr<double>(at), ptr<u32>(amask));
  b_fill_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
      ny_, ptr<u32>(ytile_), ysk_, ptr<u32>(ysc_), colkey_, ptr<double>(ysv_), ptr<double>(bt),
      ptr<u32>(bmask));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  dalloc<u32>(smask_, nout_ * kTile, "SpTC block pairs");
  smask_kernel<<<grid_for(nout_ * kTile), kBlock, 0, ctx_.stream>>>(
      nout_, ptr<u32>(ostart_), ptr<u32>(pa_), ptr<u32>(pb_), ptr<u32>(amask), ptr<u32>(bmask),
      ptr<u32>(smask_));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  if (tc_prec_ == TensorCorePrecision::fp64) {
    atiles_ = std::move(at);
    btiles_ = std::move(bt);
  } else {
    const std::size_t vb = sptc::tile_value_bytes(tc_prec_);
    alloc(atiles_, static_cast<std::size_t>(na) * 256 * vb, "SpTC dense blocks");
    alloc(btiles_, static_cast<std::size_t>(nb) * 256 * vb, "SpTC dense blocks");
    sptc::launch_convert_tiles(ctx_.stream, tc_prec_, na * 256, ptr<double>(at), atiles_.get());
    sptc::launch_convert_tiles(ctx_.stream, tc_prec_, nb * 256, ptr<double>(bt), btiles_.get());
  }
  // Products the blocks take over (statistics).
  {
    DeviceMemory flag, ydc, total;
    dalloc<i64>(flag, ny_ + 1, "SpTC tensor-core blocks");
    dalloc<i64>(ydc, ny_ + 1, "SpTC tensor-core blocks");
    dalloc<unsigned long long>(total, 1, "SpTC tensor-core blocks");
    not_none_flags_kernel<<<grid_for(ny_ + 1), kBlock, 0, ctx_.stream>>>(ny_, ptr<u32>(ytile_),
                                                                         ptr<i64>(flag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    scan(ptr<i64>(flag), ptr<i64>(ydc), ny_ + 1);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(total.get(), 0, 8, ctx_.stream));
    tc_count_kernel<<<grid_for(nmx_, 4096), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<u32>(xtile_), ptr<u32>(mx_first_), ptr<i64>(mx_off_), ptr<i64>(ydc),
        ptr<unsigned long long>(total));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    tc_products_ = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(total)));
  }
  tc_on_ = true;
  tc_blocks_ = na + nb;
  tc_pairs_ = np;
  held_ += blocks_bytes / 2 + static_cast<std::size_t>(np) * 8 +
           static_cast<std::size_t>(nout_) * 76 + static_cast<std::size_t>(nmx_ + ny_) * 4 +
           static_cast<std::size_t>(nib + njb) * 64 + static_cast<std::size_t>(nrows_) * 5;
}

template <typename T>
SparseTensor<T> RowsEngine<T>::run(ContractStats& st, ContractSink<T>* sink) {
  const auto t_start = std::chrono::steady_clock::now();
  SparseTensor<T> out(dims_);
  st.tc_threshold = tc_thr_;
  {
    std::ostringstream p;
    p << "rows: " << ngroups_ << " groups of small rows, " << ndense_ << " dense rows x " << ntiles_
      << " column tile(s) of " << tile_w_ << ", " << nspill_ << " spill rows (" << spill_products_
      << " products sorted); tensor cores ";
    if (tc_prec_ == TensorCorePrecision::off)
      p << "off";
    else if (tc_on_)
      p << to_string(tc_prec_) << ": " << tc_blocks_ << " dense blocks, " << tc_pairs_
        << " block pairs, " << tc_products_ << " products (threshold " << tc_thr_ << ", built in "
        << tc_build_s_ << " s)";
    else
      p << "unused (threshold " << tc_thr_ << (tc_note_.empty() ? "" : ": " + tc_note_) << ")";
    if (!row_major_) p << "; interleaved output letters: final sort";
    st.path = p.str();
  }
  if (products_ == 0) {
    if (sink) (void)sink->output(dims_, 0);
    return out;
  }
  PhaseTrace tr("sptc run (entries " + std::to_string(entries_) + ")");
  check_fits(ctx_, run_peak_, "the contraction", products_, entries_);
  ev_.ensure(5);
  const std::size_t E = static_cast<std::size_t>(entries_);
  // The output's host arrays are readied meanwhile: first touch of new pages, or the sink's.
  std::optional<HostOutput<T>> host;
  if (sink)
    host.emplace(*sink, dims_, E, ctx_.device);
  else
    host.emplace(out, E);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  DeviceMemory ecol, eval;
  dalloc<u32>(ecol, entries_, "SpTC entries");
  dalloc<double>(eval, entries_, "SpTC entries");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(err_.get(), 0, sizeof(unsigned), ctx_.stream));
  const sptc::RowsView v = view();
  sptc::RowsOut ro;
  ro.rowoff = ptr<i64>(rowoff_);
  ro.itemoff = ptr<i64>(itemoff_);
  ro.ecol = ptr<u32>(ecol);
  ro.eval = ptr<double>(eval);
  sptc::launch_row_groups(ctx_.stream, v, ptr<u32>(gfirst_), ptr<u32>(gend_), ngroups_, true, ro);
  sptc::launch_dense_rows(ctx_.stream, v, ptr<u32>(drows_), ndense_ * ntiles_, ntiles_, tile_w_,
                          true, ro);
  if (spill_products_ > 0) {
    DeviceMemory k[2], vals[2], sfirst, nruns;
    for (int b = 0; b < 2; ++b) {
      dalloc<u64>(k[b], spill_products_, "SpTC spill keys");
      dalloc<double>(vals[b], spill_products_, "SpTC spill values");
    }
    dalloc<i64>(nruns, 1, "SpTC run count");
    spill_keys_kernel<<<grid_for(spill_products_), kBlock, 0, ctx_.stream>>>(
        spill_products_, ptr<i64>(soff_), nspill_, ptr<u32>(srows_), v, ptr<u64>(k[0]),
        ptr<double>(vals[0]));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(k[0]), ptr<u64>(k[1]));
    cub::DoubleBuffer<double> vb(ptr<double>(vals[0]), ptr<double>(vals[1]));
    sort_pairs(kb, vb, spill_products_,
               key_bits(static_cast<u128>(nrows_) * static_cast<u128>(ncols_)));
    const i64 nu = sum_runs(ctx_, tmp_, kb, vb, spill_products_, ptr<i64>(nruns));
    const u64* ukey = kb.Alternate();
    const double* usum = vb.Alternate();
    TESSERA_EXPECTS(nu == spill_entries_, "SpTC (cuda backend): the spill rows gave "
                                              << nu << " entries, the count pass "
                                              << spill_entries_);
    dalloc<i64>(sfirst, nrows_, "SpTC spill rows");
    spill_first_kernel<<<grid_for(nu), kBlock, 0, ctx_.stream>>>(nu, ukey, static_cast<u64>(ncols_),
                                                                 ptr<i64>(sfirst));
    spill_scatter_kernel<<<grid_for(nu), kBlock, 0, ctx_.stream>>>(
        nu, ukey, usum, static_cast<u64>(ncols_), ptr<i64>(sfirst), ptr<i64>(rowoff_),
        ptr<u32>(ecol), ptr<double>(eval), ptr<unsigned>(err_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[3], ctx_.stream));
  if (tc_on_)
    sptc::launch_tc_products(ctx_.stream, tc_prec_, v.tc, ptr<i64>(rowoff_), ptr<u32>(ecol),
                             ptr<double>(eval), ptr<unsigned>(err_));
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[4], ctx_.stream));
  check_err("in the run");
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  tr.mark("multiply");

  // ---- assemble: drop exact zeros, coordinates from the representatives ----
  const int N = static_cast<int>(dims_.size());
  DeviceMemory flag, pos;
  dalloc<i64>(flag, entries_ + 1, "SpTC flags");
  dalloc<i64>(pos, entries_ + 1, "SpTC positions");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(flag) + entries_, 0, sizeof(i64), ctx_.stream));
  keep_flags_kernel<T>
      <<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(entries_, ptr<double>(eval), ptr<i64>(flag));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const i64 nnz = scan(ptr<i64>(flag), ptr<i64>(pos), entries_ + 1);
  OutGather g;
  g.n = N;
  g.rowrep = ptr<u32>(rowrep_);
  g.colrep = ptr<u32>(colrep_);
  for (int o = 0; o < N; ++o) {
    const auto os = static_cast<std::size_t>(o);
    g.from_y[o] = ws_.out_from_y[os] ? 1 : 0;
    g.col[o] = g.from_y[o] ? ydp_->col(ws_.out_mode[os]) : xd_.col(ws_.out_mode[os]);
    g.dim[o] = dims_[os];
  }
  DeviceMemory cols, ovals;
  dalloc<index_t>(cols, std::max<i64>(nnz, 1) * N, "SpTC output");
  dalloc<T>(ovals, nnz, "SpTC output");
  if (nnz > 0 && row_major_) {
    rows_out_kernel<T><<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(
        entries_, ptr<i64>(rowoff_), nrows_, ptr<u32>(ecol), ptr<double>(eval), ptr<i64>(flag),
        ptr<i64>(pos), g, ptr<index_t>(cols), nnz, ptr<T>(ovals));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  } else if (nnz > 0) {
    // Output letters interleave X's and Y's: sort the kept entries by output key.
    DeviceMemory k[2], vv[2];
    for (int b = 0; b < 2; ++b) {
      dalloc<u64>(k[b], nnz, "SpTC output keys");
      dalloc<double>(vv[b], nnz, "SpTC output keys");
    }
    rows_outkey_kernel<<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(
        entries_, ptr<i64>(rowoff_), nrows_, ptr<u32>(ecol), ptr<double>(eval), ptr<i64>(flag),
        ptr<i64>(pos), g, ptr<u64>(k[0]), ptr<double>(vv[0]));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(k[0]), ptr<u64>(k[1]));
    cub::DoubleBuffer<double> vb(ptr<double>(vv[0]), ptr<double>(vv[1]));
    sort_pairs(kb, vb, nnz, obits_);
    OutMap om;
    om.n = N;
    for (int o = 0; o < N; ++o) om.dim[o] = dims_[static_cast<std::size_t>(o)];
    scatter_kernel<T><<<grid_for(nnz), kBlock, 0, ctx_.stream>>>(
        nnz, kb.Current(), vb.Current(), nullptr, nullptr, om, ptr<index_t>(cols), nnz,
        ptr<T>(ovals));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  tr.mark("assemble kernels");
  host->join();
  tr.mark("host pages");
  SparseTensor<T>& dst = host->target();
  const std::size_t n = static_cast<std::size_t>(nnz);
  std::vector<Copy> copies;
  for (int o = 0; o < N; ++o)
    copies.push_back({dst.idx[static_cast<std::size_t>(o)].data(),
                      ptr<index_t>(cols) + static_cast<i64>(o) * nnz, n * sizeof(index_t),
                      cudaMemcpyDeviceToHost});
  copies.push_back({dst.vals.data(), ovals.get(), n * sizeof(T), cudaMemcpyDeviceToHost});
  copy_parallel(ctx_.device, copies, copies.size());
  for (auto& col : dst.idx) col.resize(n);  // shrinks only: the storage stays
  dst.vals.resize(n);
  tr.mark("download");
  st.multiply_seconds = elapsed(ev_[0], ev_[1]);
  st.tc_seconds = tc_on_ ? elapsed(ev_[3], ev_[4]) : 0.0;
  st.assemble_seconds = std::max(
      0.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() -
               st.multiply_seconds);
  st.output_entries = entries_;
  st.output_nnz = nnz;
  st.zeros_dropped = entries_ - nnz;
  st.tc_products = tc_on_ ? tc_products_ : 0;
  st.tc_blocks = tc_on_ ? tc_blocks_ : 0;
  st.tc_block_pairs = tc_on_ ? tc_pairs_ : 0;
  return out;
}

/// The spec the row kernels run: the row side must provide the leading output letters, so
/// when Y's letters come first the inputs swap roles (same output; *swapped set), else
/// the spec as given (its kept entries are sorted at the end).
ContractSpec rows_roles(const ContractSpec& spec, bool* swapped) {
  const auto row_major = [](const ContractSpec& s) {
    int last_x = -1, first_y = s.out_order();
    for (int o = 0; o < s.out_order(); ++o)
      if (s.out_from_y[static_cast<std::size_t>(o)])
        first_y = std::min(first_y, o);
      else
        last_x = o;
    return last_x < first_y;
  };
  *swapped = false;
  if (!row_major(spec)) {
    ContractSpec sw = swap_inputs(spec);
    if (row_major(sw)) {
      *swapped = true;
      return sw;
    }
  }
  return spec;
}

template <typename T>
class CudaContractPlan final : public ContractPlan<T> {
 public:
  CudaContractPlan(Context& ctx, const SparseTensor<T>& x, const SparseTensor<T>& y,
                   const ContractSpec& spec)
      : ctx_(ctx), spec_(spec) {
    dims_ = contract_output_dims(spec, x.dims, y.dims);
    // Shapes here; the coordinates on the device after the upload (DeviceTensor::load), or
    // by the cpu plan of a fallback.
    check_kernel_shape(x);
    if (&y != &x) check_kernel_shape(y);
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
    if (spec.device.assembly == ContractAssembly::rows) {
      // The row side must provide the leading output letters; when Y's letters come
      // first, swap the inputs' roles (same output), else the kept entries are sorted.
      const ContractSpec ws = rows_roles(spec, &swapped_);
      rows_ = std::make_unique<RowsEngine<T>>(ctx, ws, dims_, obits_);
    }
  }

  /// The device part of planning (after the cheap checks of the constructor).
  void build(const SparseTensor<T>& x, const SparseTensor<T>& y) {
    if (fallback_) return;  // the cpu plan checked the inputs
    if (nx_ == 0 || ny_ == 0) {
      // Nothing is uploaded, so the device does not check the coordinates: the host does
      // (one input is empty).
      check_kernel_input(x);
      if (&y != &x) check_kernel_input(y);
      return;
    }
    if (rows_) {
      if (swapped_)
        rows_->build(y, x, count_);
      else
        rows_->build(x, y, count_);
      products_ = count_.products;
      match_s_ = rows_->match_seconds();
      count_s_ = rows_->count_seconds();
      return;
    }
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
    DeviceTensor<T>::load(ctx_, xd_, x, &x == &y ? nullptr : &yd_, &y);
    const DeviceTensor<T>* yd = &x == &y ? &xd_ : &yd_;
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

  SparseTensor<T> run(ContractStats* stats, ContractSink<T>* sink = nullptr);
  /// True when run() can write into a sink: the rows assembly on the device.
  bool sinks() const { return !fallback_ && rows_ != nullptr; }

 private:
  Context& ctx_;
  ContractSpec spec_;
  std::vector<u64> dims_;
  ContractCount count_;
  std::unique_ptr<ContractPlan<T>> fallback_;  ///< keys over 64 bits: the cpu plan
  std::unique_ptr<RowsEngine<T>> rows_;        ///< ContractAssembly::rows
  bool swapped_ = false;                       ///< rows_ works on Y x X
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
SparseTensor<T> CudaContractPlan<T>::run(ContractStats* stats, ContractSink<T>* sink) {
  TESSERA_EXPECTS(sink == nullptr || sinks(), "SpTC (cuda backend): this plan has no sink output");
  if (fallback_) return cpu::contract(*fallback_, stats);
  ContractStats st;
  st.match_seconds = match_s_;
  st.count_seconds = count_s_;
  st.products = products_;
  st.workspace_bytes = count_.workspace_bytes;
  if (rows_) {
    SparseTensor<T> out = rows_->run(st, sink);
    if (stats) *stats = st;
    return out;
  }
  st.path = "sort: every product's key radix-sorted and reduced";
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
  radix_sort_pairs(ctx_, tmp, keys, vals, products_, obits_);
  const int cur = keys.selector;  // the sorted keys; the other buffers receive the sums
  const int vcur = vals.selector;
  const i64 E = sum_runs(ctx_, tmp, keys, vals, products_, ptr<i64>(nruns));
  const u64* ukey = keys.Alternate();
  const double* usum = vals.Alternate();
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

// ---- routing on the device (contract_routed) ----

/// splitmix64's finaliser: any fixed mix will do, it only spreads tuples over ranks.
__device__ __forceinline__ u64 route_mix(u64 z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// dest[k] = the rank owning nonzero k's tuple of the modes m; iota[k] = k.
__global__ void route_owner_kernel(i64 n, ColPtrs m, unsigned P, unsigned* dest, index_t* iota) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    u64 h = 0x2545F4914F6CDD1Dull;
    for (int j = 0; j < m.n; ++j)
      h = route_mix(h ^ (static_cast<u64>(m.col[j][k]) + 0x9E3779B97F4A7C15ull * (j + 1u)));
    dest[k] = static_cast<unsigned>(h % P);
    iota[k] = static_cast<index_t>(k);
  }
}

/// first[p] = the first position of rank p in the sorted destinations (p = 0..P).
__global__ void route_bounds_kernel(const unsigned* sorted, i64 n, unsigned P, i64* first) {
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p > P) return;
  i64 lo = 0, hi = n;
  while (lo < hi) {
    const i64 mid = (lo + hi) / 2;
    if (sorted[mid] < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  first[p] = lo;
}

template <typename U>
__global__ void route_gather_kernel(const U* __restrict__ src, const index_t* __restrict__ perm,
                                    i64 n, U* __restrict__ dst) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride)
    dst[k] = src[perm[k]];
}

}  // namespace

template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(Context& ctx, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  if (pooled()) enable_pool_caching();
  PhaseTrace tr("sptc plan");
  auto p = std::make_unique<CudaContractPlan<T>>(ctx, x, y, spec);
  tr.mark("checks");
  p->build(x, y);
  tr.mark("build");
  return p;
}

// Distributed contraction routed on the device (Backend::contract_routed; docs/sptc.md,
// "Distributed"). The engine's row side (X, or Y when the plan would swap the inputs) is
// partitioned by a hash of its output modes, so every output entry is made and summed on
// one rank and the shares are disjoint without a merge; the column side is replicated on
// every rank. Both moves run over `data` (NCCL) on device buffers; the row kernels then
// run on the routed inputs in place. Taken for the rows assembly with 64-bit keys when the
// row side has output modes and the busiest rank's routed inputs and matching fit its free
// memory and the memory limit; else false on every rank, and algo::contract routes on the
// host.
template <typename T>
bool contract_routed(Context& ctx, const SparseTensor<T>& x, const SparseTensor<T>& y,
                     const ContractSpec& spec, const comm::Communicator& host,
                     const comm::Communicator& data, std::size_t memory_limit, SparseTensor<T>* out,
                     ContractStats* stats, ContractRouteInfo* info, ContractSink<T>* sink) {
  const int P = host.size();
  if (P < 2 || data.size() != P || data.memory_space() != comm::MemorySpace::device) return false;
  if (spec.device.assembly != ContractAssembly::rows) return false;
  const std::vector<u64> odims = contract_output_dims(spec, x.dims, y.dims);
  std::vector<u64> kdims;
  for (int m : spec.x_key) kdims.push_back(x.dims[static_cast<std::size_t>(m)]);
  const u128 lim = static_cast<u128>(1) << 64;
  if (cells(kdims) > lim || cells(odims) > lim) return false;
  bool swapped = false;
  const ContractSpec ws = rows_roles(spec, &swapped);
  const SparseTensor<T>& ex = swapped ? y : x;  // row side: partitioned
  const SparseTensor<T>& ey = swapped ? x : y;  // column side: replicated
  std::vector<int> free_modes;
  for (int o = 0; o < ws.out_order(); ++o)
    if (!ws.out_from_y[static_cast<std::size_t>(o)])
      free_modes.push_back(ws.out_mode[static_cast<std::size_t>(o)]);
  if (free_modes.empty()) return false;

  // Sizes: every rank's routed row side is only known after hashing, so the decision
  // uses the even share (x 1.5 for skew); the replicated side is exact.
  const int nex = ex.order(), ney = ey.order();
  const std::size_t ebx = static_cast<std::size_t>(nex) * sizeof(index_t) + sizeof(T);
  const std::size_t eby = static_cast<std::size_t>(ney) * sizeof(index_t) + sizeof(T);
  std::int64_t loc[2] = {ex.nnz(), ey.nnz()};
  std::int64_t glob[2] = {loc[0], loc[1]};
  host.allreduce(glob, 2);
  const double routed_x = 1.5 * static_cast<double>(glob[0]) / P;
  const double need = static_cast<double>(loc[0]) * ebx * 2 + static_cast<double>(loc[1]) * eby +
                      routed_x * ebx + static_cast<double>(glob[1]) * eby +
                      64.0 * (routed_x + static_cast<double>(glob[1]));
  if (pooled()) enable_pool_caching();
  const std::size_t free_b = free_bytes();
  int ok = need < 0.8 * static_cast<double>(free_b) &&
           (memory_limit == 0 || need < static_cast<double>(memory_limit)) && routed_x < 4.0e9 &&
           glob[1] < (std::int64_t{1} << 32) - 1;
  host.allreduce(&ok, 1, comm::ReduceOp::min);
  if (!ok) return false;

  const auto t0 = std::chrono::steady_clock::now();
  PhaseTrace tr("sptc route (P " + std::to_string(P) + ")");
  // ---- local: checks, uploads, owners, partition (agreed before any exchange) ----
  DeviceTensor<T> exd, eyd;
  std::vector<DeviceMemory> xsend(static_cast<std::size_t>(nex) + 1);
  std::vector<std::int64_t> sendcounts(static_cast<std::size_t>(P), 0);
  const i64 nx_local = ex.nnz(), ny_local = ey.nnz();
  comm::run_collectively(host, [&] {
    check_kernel_shape(x);  // the coordinates are checked on the device by load()
    if (&y != &x) check_kernel_shape(y);
    tr.mark("checks");
    DeviceTensor<T>::load(ctx, exd, ex, &eyd, &ey);  // a self-contraction too: each role
                                                     // keeps a copy of its own
    tr.mark("upload");
    for (int m = 0; m <= nex; ++m) {
      const std::size_t es = m < nex ? sizeof(index_t) : sizeof(T);
      alloc(xsend[static_cast<std::size_t>(m)], static_cast<std::size_t>(nx_local) * es,
            "SpTC routing");
    }
    if (nx_local == 0) return;
    DeviceMemory dest, dest1, perm, perm1, bounds, tmp;
    alloc(dest, static_cast<std::size_t>(nx_local) * 4, "SpTC routing");
    alloc(dest1, static_cast<std::size_t>(nx_local) * 4, "SpTC routing");
    alloc(perm, static_cast<std::size_t>(nx_local) * sizeof(index_t), "SpTC routing");
    alloc(perm1, static_cast<std::size_t>(nx_local) * sizeof(index_t), "SpTC routing");
    ColPtrs rm;
    rm.n = static_cast<int>(free_modes.size());
    for (int j = 0; j < rm.n; ++j) rm.col[j] = exd.col(free_modes[static_cast<std::size_t>(j)]);
    route_owner_kernel<<<grid_for(nx_local), kBlock, 0, ctx.stream>>>(
        nx_local, rm, static_cast<unsigned>(P), ptr<unsigned>(dest), ptr<index_t>(perm));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    int bits = 1;
    while ((1 << bits) < P) ++bits;
    cub::DoubleBuffer<unsigned> keys(ptr<unsigned>(dest), ptr<unsigned>(dest1));
    cub::DoubleBuffer<index_t> vals(ptr<index_t>(perm), ptr<index_t>(perm1));
    radix_sort_pairs(ctx, tmp, keys, vals, nx_local, bits);
    alloc(bounds, static_cast<std::size_t>(P + 1) * sizeof(i64), "SpTC routing");
    route_bounds_kernel<<<1, 128, 0, ctx.stream>>>(keys.Current(), nx_local,
                                                   static_cast<unsigned>(P), ptr<i64>(bounds));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    std::vector<i64> first(static_cast<std::size_t>(P) + 1);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(first.data(), bounds.get(), first.size() * sizeof(i64),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    for (int m = 0; m <= nex; ++m) {
      if (m < nex)
        route_gather_kernel<index_t><<<grid_for(nx_local), kBlock, 0, ctx.stream>>>(
            exd.col(m), vals.Current(), nx_local, ptr<index_t>(xsend[static_cast<std::size_t>(m)]));
      else
        route_gather_kernel<T><<<grid_for(nx_local), kBlock, 0, ctx.stream>>>(
            ptr<T>(exd.vals), vals.Current(), nx_local, ptr<T>(xsend[static_cast<std::size_t>(m)]));
      TESSERA_CUDA_CHECK(cudaGetLastError());
    }
    ctx.sync();
    for (int p = 0; p < P; ++p)
      sendcounts[static_cast<std::size_t>(p)] =
          first[static_cast<std::size_t>(p) + 1] - first[static_cast<std::size_t>(p)];
  });
  exd = DeviceTensor<T>();  // the unsorted row side is no longer needed
  tr.mark("partition");

  // ---- exchanges over the data communicator ----
  const std::vector<std::int64_t> recvcounts = comm::exchange_counts(host, sendcounts);
  const std::vector<std::int64_t> sd = comm::displacements(sendcounts),
                                  rd = comm::displacements(recvcounts);
  const i64 nx = std::accumulate(recvcounts.begin(), recvcounts.end(), i64{0});
  std::vector<std::int64_t> ycounts(static_cast<std::size_t>(P), 0);
  host.allgather(&ny_local, ycounts.data(), 1);
  // The whole local share to every peer, from offset 0; received in rank order.
  const std::vector<std::int64_t> ysc(static_cast<std::size_t>(P), ny_local),
      ysd(static_cast<std::size_t>(P), 0), yrd = comm::displacements(ycounts);
  const i64 ny = std::accumulate(ycounts.begin(), ycounts.end(), i64{0});
  tr.mark("counts");
  DeviceTensor<T> xr, yr;
  comm::run_collectively(host, [&] {
    TESSERA_INPUT_CHECK(nx < (i64{1} << 32) - 1,
                        "SpTC (cuda backend): " << nx
                                                << " routed nonzeros on one rank; use more "
                                                   "ranks");
    xr.cols.resize(static_cast<std::size_t>(nex));
    for (int m = 0; m < nex; ++m)
      alloc(xr.cols[static_cast<std::size_t>(m)],
            static_cast<std::size_t>(std::max<i64>(nx, 1)) * sizeof(index_t), "SpTC routed input");
    alloc(xr.vals, static_cast<std::size_t>(std::max<i64>(nx, 1)) * sizeof(T), "SpTC routed input");
    yr.cols.resize(static_cast<std::size_t>(ney));
    for (int m = 0; m < ney; ++m)
      alloc(yr.cols[static_cast<std::size_t>(m)],
            static_cast<std::size_t>(std::max<i64>(ny, 1)) * sizeof(index_t),
            "SpTC replicated input");
    alloc(yr.vals, static_cast<std::size_t>(std::max<i64>(ny, 1)) * sizeof(T),
          "SpTC replicated input");
  });
  xr.bytes = static_cast<std::size_t>(nx) * ebx;
  yr.bytes = static_cast<std::size_t>(ny) * eby;
  tr.mark("alloc");
  for (int m = 0; m <= nex; ++m) {
    const void* src = xsend[static_cast<std::size_t>(m)].get();
    void* dst = m < nex ? xr.cols[static_cast<std::size_t>(m)].get() : xr.vals.get();
    data.alltoallv_raw(src, sendcounts.data(), sd.data(), dst, recvcounts.data(), rd.data(),
                       m < nex ? comm::DataType::u32 : comm::data_type_of<T>());
  }
  xsend.clear();
  tr.mark("x alltoallv");
  for (int m = 0; m <= ney; ++m) {
    const void* src = m < ney ? static_cast<const void*>(eyd.col(m)) : eyd.vals.get();
    void* dst = m < ney ? yr.cols[static_cast<std::size_t>(m)].get() : yr.vals.get();
    data.alltoallv_raw(src, ysc.data(), ysd.data(), dst, ycounts.data(), yrd.data(),
                       m < ney ? comm::DataType::u32 : comm::data_type_of<T>());
  }
  eyd = DeviceTensor<T>();
  tr.mark("y allgather");
  const auto t1 = std::chrono::steady_clock::now();

  // ---- the local contraction on the routed inputs ----
  ContractStats st;
  ContractCount count;
  std::vector<u64> dims_out = contract_output_dims(ws, ex.dims, ey.dims);
  RowsEngine<T> engine(ctx, ws, dims_out, key_bits(cells(odims)));
  comm::run_collectively(host, [&] {
    engine.build_device(std::move(xr), std::move(yr), ex.dims, nx, ny, count);
    tr.mark("build");
    st.match_seconds = engine.match_seconds();
    st.count_seconds = engine.count_seconds();
    st.products = count.products;
    st.workspace_bytes = count.workspace_bytes;
    SparseTensor<T> share = engine.run(st, sink);
    if (!sink) *out = std::move(share);
    tr.mark("run");
  });
  const auto t2 = std::chrono::steady_clock::now();
  if (stats) *stats = st;
  if (info) {
    info->route_seconds = std::chrono::duration<double>(t1 - t0).count();
    info->local_seconds = std::chrono::duration<double>(t2 - t1).count();
    info->routed_nnz[0] = swapped ? ny : nx;
    info->routed_nnz[1] = swapped ? nx : ny;
    info->replicated = swapped ? 0 : 1;
    info->input_bytes =
        static_cast<std::size_t>(nx_local) * ebx + static_cast<std::size_t>(ny_local) * eby;
    info->routed_bytes = static_cast<std::size_t>(nx) * ebx + static_cast<std::size_t>(ny) * eby;
    info->count = count;
  }
  return true;
}

template <typename T>
SparseTensor<T> contract(Context&, ContractPlan<T>& plan, ContractStats* stats) {
  auto* p = dynamic_cast<CudaContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  return p->run(stats);
}

template <typename T>
bool contract_into(Context&, ContractPlan<T>& plan, ContractStats* stats, ContractSink<T>& sink) {
  auto* p = dynamic_cast<CudaContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  if (!p->sinks()) return false;
  (void)p->run(stats, &sink);
  return true;
}

namespace {
/// Registered with cudaHostRegisterPortable, so unregistering does not depend on the
/// calling thread's current device; done on the registering device all the same.
class RegisteredHost final : public HostPin {
 public:
  RegisteredHost(void* p, int device) : p_(p), device_(device) {}
  ~RegisteredHost() override {
    DeviceGuardNoThrow g(device_);
    TESSERA_CUDA_CHECK_NOTHROW(cudaHostUnregister(p_));
  }
  RegisteredHost(const RegisteredHost&) = delete;
  RegisteredHost& operator=(const RegisteredHost&) = delete;

 private:
  void* p_;
  int device_;
};
}  // namespace

std::unique_ptr<HostPin> pin_host(int device, const void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0) return nullptr;
  DeviceGuard g(device);
  void* h = const_cast<void*>(p);
  const cudaError_t e = cudaHostRegister(h, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // Already locked (the same range locked twice, or a page it shares with a locked
    // neighbour): the copies are DMA anyway, nothing to say. Anything else: said once.
    static std::atomic<bool> said{false};
    if (e != cudaErrorHostMemoryAlreadyRegistered && !said.exchange(true))
      log::info(std::string("cuda backend: page-locking host memory failed (") +
                detail::cuda_error_text(e) + "); its copies stay staged by the driver");
    return nullptr;
  }
  return std::make_unique<RegisteredHost>(h, device);
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
template bool contract_into<float>(Context&, ContractPlan<float>&, ContractStats*,
                                   ContractSink<float>&);
template bool contract_into<double>(Context&, ContractPlan<double>&, ContractStats*,
                                    ContractSink<double>&);

template bool contract_routed<float>(Context&, const SparseTensor<float>&,
                                     const SparseTensor<float>&, const ContractSpec&,
                                     const comm::Communicator&, const comm::Communicator&,
                                     std::size_t, SparseTensor<float>*, ContractStats*,
                                     ContractRouteInfo*, ContractSink<float>*);
template bool contract_routed<double>(Context&, const SparseTensor<double>&,
                                      const SparseTensor<double>&, const ContractSpec&,
                                      const comm::Communicator&, const comm::Communicator&,
                                      std::size_t, SparseTensor<double>*, ContractStats*,
                                      ContractRouteInfo*, ContractSink<double>*);

}  // namespace tessera::kernels::cuda
