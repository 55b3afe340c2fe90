// Shared helpers of the CUDA SpTC (common.cuh): sizes, device allocation, copies, the
// kernels more than one file launches, and the row-side roles.
#include <cstdio>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "kernels/cuda/sptc/common.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

thread_local bool t_pooled = true;

__global__ void y_keys_kernel(i64 n, KeyMap m, u64* key, index_t* perm) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[k] = pack(m, k);
    perm[k] = static_cast<index_t>(k);
  }
}

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

/// flag[i] = 1 where key[i] >> shift starts a new run (i == 0 or it differs from key[i-1]
/// >> shift), for i < n; flag[n] = 0, so an exclusive scan of n + 1 flags ends in the count.
__global__ void change_flags_kernel(i64 n, const u64* key, int shift, i64* flag) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i <= n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[i] = i < n && (i == 0 || (key[i] >> shift) != (key[i - 1] >> shift)) ? 1 : 0;
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
    const i64 s = last_at_most(soff, 0, ns - 1, k);
    const u32 r = srows[s];
    const i64 p = v.rowp[r] + (k - soff[s]);
    const u32 x = static_cast<u32>(
        last_at_most(v.mx_off, v.rowstart[r], static_cast<i64>(v.rowstart[r + 1]) - 1, p));
    const i64 q = static_cast<i64>(v.mx_first[x]) + (p - v.mx_off[x]);
    key[k] = static_cast<u64>(r) * static_cast<u64>(v.ncols) + v.ysc[q];
    if (val) val[k] = on_tc(v, x, q) ? 0.0 : v.mx_val[x] * v.ysv[q];
  }
}

}  // namespace

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

bool pooled() {
  return t_pooled;
}

PoolScope::PoolScope(const Context& ctx) : prev_(t_pooled) {
  t_pooled = ctx.tuning.sptc_pool;
}

PoolScope::~PoolScope() {
  t_pooled = prev_;
}

/// Free device memory for SpTC: cudaMemGetInfo's, plus what the pool holds unused.
std::size_t free_bytes(std::size_t* total) {
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

/// Sums the runs of equal keys of n sorted pairs (k.Current(), v.Current()) into the
/// other buffers of k and v (cub ReduceByKey; nruns: one device i64, temporaries in tmp).
/// Returns the number of runs; the sums are k.Alternate(), v.Alternate().
void exclusive_sum(Context& ctx, DeviceMemory& tmp, const i64* in, i64* out, i64 n) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, ctx.stream));
  alloc(tmp, bytes, "SpTC scan temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp.get(), bytes, in, out, n, ctx.stream));
}

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

void launch_coord_max(cudaStream_t s, int blocks, i64 n, const ColPtrs& c, unsigned* out) {
  coord_max_kernel<<<blocks, kBlock, 0, s>>>(n, c, out);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_change_flags(cudaStream_t s, i64 n, const u64* key, int shift, i64* flag) {
  change_flags_kernel<<<grid_for(n + 1), kBlock, 0, s>>>(n, key, shift, flag);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_y_keys(cudaStream_t s, i64 n, const KeyMap& m, u64* key, index_t* perm) {
  y_keys_kernel<<<grid_for(n), kBlock, 0, s>>>(n, m, key, perm);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_spill_keys(cudaStream_t s, i64 ps, const i64* soff, i64 ns, const u32* srows,
                       const RowsView& v, u64* key, double* val) {
  spill_keys_kernel<<<grid_for(ps), kBlock, 0, s>>>(ps, soff, ns, srows, v, key, val);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

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

}  // namespace tessera::kernels::cuda::sptc
