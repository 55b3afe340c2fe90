// CUDA MTTKRP: preparing a tensor (Backend::prepare, Backend::prepare_synthetic). Chooses
// the memory tier (DESIGN §8) and builds the sorted copies: tier 1 sorted on the device
// (device_sort.cu, in the layouts of layout.cu) when that fits, else on the host; tier 2
// sorted on the host into chunks of pinned host memory. Both sorts give the same order
// (see mttkrp.cu).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <sstream>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/runtime/host_sort.hpp"
#include "kernels/mttkrp.hpp"
#include "tensor/synthetic.hpp"

namespace tessera::kernels::cuda {

namespace mttkrp_detail {
namespace {

// ---------------------------------------------------------------------------
// Host side: preparing the format (tier 1 or tier 2)
// ---------------------------------------------------------------------------

/// A tier-2 mode streams in at least this many chunks when it has that many tiles, so
/// the first chunk's copy (which nothing hides) is a small part of the total.
constexpr int kMinChunksPerMode = 4;
/// Upper bound on one chunk buffer: large enough that per-chunk costs (launch, events,
/// the tail of the kernel) vanish next to its copy.
constexpr std::size_t kMaxChunkBytes = std::size_t(512) << 20;
/// Upper bound on the chunks of one mode (each costs a launch and four events).
constexpr nnz_t kMaxChunksPerMode = nnz_t(1) << 20;

/// Device memory a tensor may occupy when no budget is given: the free memory less a
/// reserve for factors, outputs and library workspace (1/16 of the device, >= 512 MiB).
std::size_t device_reserve(std::size_t total_b) {
  return std::max<std::size_t>(std::size_t(512) << 20, total_b / 16);
}
std::size_t automatic_budget(std::size_t free_b, std::size_t total_b) {
  const std::size_t reserve = device_reserve(total_b);
  return free_b > reserve ? free_b - reserve : 0;
}

/// The device memory a tensor may occupy (DESIGN §8), after trim_pool (memory a contraction
/// left cached in the pool is free for the tensor): an explicit budget capped by the free
/// memory, else automatic_budget. free_b, total_b: cudaMemGetInfo's.
std::size_t tensor_limit(std::size_t budget, std::size_t& free_b, std::size_t& total_b) {
  trim_pool();
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return budget == 0 ? automatic_budget(free_b, total_b) : std::min(budget, free_b);
}

/// Largest chunk (nonzeros) whose block fits in `bytes` (0 when not even one nonzero).
template <typename T>
std::size_t max_chunk_in(int order, std::size_t bytes) {
  const std::size_t per = static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T);
  std::size_t c = bytes > 255 ? (bytes - 255) / per : 0;  // block_bytes(c) <= c*per + 255
  while (block_bytes<T>(order, c + 1) <= bytes) ++c;      // at most ~255/per steps
  return c;
}

/// Chunk size of a tier-2 tensor under `limit` bytes of device memory for the two chunk
/// buffers: the largest that fits, in whole tiles, but no more than a quarter of a mode
/// (kMinChunksPerMode) or kMaxChunkBytes. 0 when `limit` is too small for two one-tile
/// chunks (one chunk of all nonzeros when nnz is under a tile).
template <typename T>
nnz_t tier2_chunk_nnz(int order, nnz_t nnz, std::size_t limit) {
  const std::size_t n = static_cast<std::size_t>(nnz);
  const std::size_t tile = static_cast<std::size_t>(kTileNnz);
  if (n <= tile) return block_bytes<T>(order, n) <= limit ? nnz : 0;
  std::size_t c = max_chunk_in<T>(order, limit / 2);
  if (c < tile) return 0;
  c = c / tile * tile;
  const std::size_t tiles = (n + tile - 1) / tile;
  c = std::min(c, (tiles + kMinChunksPerMode - 1) / kMinChunksPerMode * tile);
  c = std::min(c, std::max(tile, max_chunk_in<T>(order, kMaxChunkBytes) / tile * tile));
  return static_cast<nnz_t>(std::min(c, n));
}

// ---- host sort (tier 1 fallback and tier 2) ----

/// Sorts the nonzeros lexicographically by (i_n, i_{n+1 mod N}, position) into `perm`
/// (parallel; runtime/host_sort.cpp). The secondary key groups a row's nonzeros by their
/// next-mode factor row (cache reuse).
/// perm and tmp: nnz entries each (tmp is scratch).
template <typename T>
void sort_for_mode(const SparseTensor<T>& x, int n, nnz_t* perm, nnz_t* tmp) {
  const int N = x.order();
  const int s = (n + 1) % N;
  host_sort::sort_lexicographic(x.idx[n].data(), x.dims[n], N > 1 ? x.idx[s].data() : nullptr,
                                x.dims[s], perm, tmp, static_cast<std::size_t>(x.nnz()));
}

/// Uninitialised host array (no serial zeroing of what the parallel code overwrites).
template <typename U>
std::unique_ptr<U[]> host_array(std::size_t n) {
  return std::unique_ptr<U[]>(new U[n]);
}

/// Writes nonzeros perm[first .. first + cnt) as one block (index arrays, values) at dst.
template <typename T>
void write_block(const SparseTensor<T>& x, const nnz_t* perm, nnz_t first, nnz_t cnt, char* dst) {
  const int N = x.order();
  const nnz_t* pk = perm + first;
  const auto c = static_cast<std::size_t>(cnt);
  auto* hidx = reinterpret_cast<index_t*>(dst);
  for (int m = 0; m < N; ++m)
    host_sort::gather(x.idx[m].data(), pk, c, hidx + static_cast<std::size_t>(m) * c);
  host_sort::gather(x.vals.data(), pk, c, reinterpret_cast<T*>(dst + values_offset(N, c)));
}

/// Tier 1 with the sorts on the host: one sorted copy at a time in a host staging
/// block, uploaded to its device copy. Device memory: the final copies only.
template <typename T>
void prepare_resident(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h) {
  const auto t0 = std::chrono::steady_clock::now();
  const int N = x.order();
  const nnz_t nnz = x.nnz();
  h.make_resident();
  auto staging = host_array<char>(h.copy_bytes());
  auto perm = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  auto tmp = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  for (int n = 0; n < N; ++n) {
    sort_for_mode(x, n, perm.get(), tmp.get());
    write_block(x, perm.get(), 0, nnz, staging.get());
    DeviceMemory& dm = h.copy(n);
    dm.reserve(h.copy_bytes());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dm.get(), staging.get(), h.copy_bytes(),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();  // staging is reused for the next mode
  }
  std::ostringstream os;
  os.precision(3);
  os << "sorted on the host in " << seconds_since(t0) << " s";
  h.set_how_sorted(os.str());
}

/// Nonzero k of the COO block (n nonzeros, index arrays then values at vals) is id
/// first + k of the synthetic tensor `spec`, computed as the host does
/// (make_synthetic_tensor).
template <typename T>
__global__ void generate_synthetic_coo(const __grid_constant__ synthetic::Spec spec,
                                       std::uint64_t first, std::int64_t n, index_t* idx, T* vals) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const std::uint64_t id = first + static_cast<std::uint64_t>(k);
    index_t c[kMaxOrder];
    for (int m = 0; m < spec.order; ++m) {
      c[m] = synthetic::coordinate(spec, id, m);
      idx[static_cast<std::size_t>(m) * un + static_cast<std::size_t>(k)] = c[m];
    }
    vals[k] = static_cast<T>(synthetic::model_value(spec, c));
  }
}

/// A window's ids per thread block (kBlock threads, kWindowSteps ids each): the blocks of
/// the two passes below cover the same ranges, so pass 2 writes where pass 1 counted.
constexpr int kWindowSteps = 32;
constexpr std::int64_t kWindowIdsPerBlock = std::int64_t(kBlock) * kWindowSteps;

/// Pass 1 of a window (Backend::prepare_synthetic with a window): how many of block b's ids
/// [first + b kWindowIdsPerBlock, ... + kWindowIdsPerBlock) lie in the window, in counts[b].
__global__ void count_window(const __grid_constant__ synthetic::Spec spec,
                             const __grid_constant__ synthetic::Window w, std::uint64_t first,
                             std::int64_t n, std::int64_t* counts) {
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kWindowIdsPerBlock;
  std::int64_t kept = 0;
  for (int t = 0; t < kWindowSteps; ++t) {
    const std::int64_t k = base + std::int64_t(t) * kBlock + threadIdx.x;
    index_t c[kMaxOrder];
    double v = 0;
    const bool in =
        k < n && synthetic::in_window(spec, w, first + static_cast<std::uint64_t>(k), c, &v);
    kept += __syncthreads_count(in);
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = kept;
}

/// Pass 2: block b writes its kept ids, in id order, from offsets[b] (the exclusive prefix
/// of pass 1's counts) into the COO layout of generate_synthetic_coo (nnz entries).
template <typename T>
__global__ void write_window(const __grid_constant__ synthetic::Spec spec,
                             const __grid_constant__ synthetic::Window w, std::uint64_t first,
                             std::int64_t n, const std::int64_t* offsets, std::int64_t nnz,
                             index_t* idx, T* vals) {
  __shared__ int warp_kept[kBlock / 32];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kWindowIdsPerBlock;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::int64_t out = offsets[blockIdx.x];
  const auto un = static_cast<std::size_t>(nnz);
  for (int t = 0; t < kWindowSteps; ++t) {
    const std::int64_t k = base + std::int64_t(t) * kBlock + threadIdx.x;
    index_t c[kMaxOrder];
    double v = 0;
    const bool in =
        k < n && synthetic::in_window(spec, w, first + static_cast<std::uint64_t>(k), c, &v);
    const unsigned ballot = __ballot_sync(0xffffffffu, in);
    if (lane == 0) warp_kept[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u)), step = 0;
    for (int j = 0; j < kBlock / 32; ++j) {
      if (j < warp) before += warp_kept[j];
      step += warp_kept[j];
    }
    if (in) {
      const auto at = static_cast<std::size_t>(out + before);
      for (int m = 0; m < spec.order; ++m) idx[static_cast<std::size_t>(m) * un + at] = c[m];
      vals[at] = static_cast<T>(v);
    }
    out += step;
    __syncthreads();  // warp_kept is rewritten by the next step
  }
}

template <typename T>
void prepare_streamed(Context& ctx, const SparseTensor<T>& x, CudaTensorHandle<T>& h,
                      nnz_t chunk_nnz, std::size_t budget) {
  const int N = x.order();
  const nnz_t nnz = x.nnz();
  auto s = std::make_unique<StreamedStore<T>>();
  s->order = N;
  s->nnz = nnz;
  s->chunk_nnz = chunk_nnz;
  s->chunks = static_cast<int>((nnz + chunk_nnz - 1) / chunk_nnz);
  s->budget = budget;
  s->buffers = s->chunks > 1 ? 2 : 1;

  const std::size_t buffer_bytes = block_bytes<T>(N, static_cast<std::size_t>(chunk_nnz));
  for (int b = 0; b < s->buffers; ++b) {
    const cudaError_t e = s->buffer[b].try_reserve(buffer_bytes);
    if (e != cudaSuccess) {
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      TESSERA_THROW("tier 2 (host-resident, GPU-streamed) needs "
                    << s->buffers << " device chunk buffers of " << buffer_bytes
                    << " bytes, but cudaMalloc failed on device " << ctx.device << " ("
                    << detail::cuda_error_text(e) << "; " << free_b << " of " << total_b
                    << " bytes free); lower the memory budget (--mem-budget)");
    }
  }
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking));

  s->host.resize(static_cast<std::size_t>(N));
  const std::size_t per_mode = s->host_bytes_per_mode();
  auto perm = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  auto tmp = host_array<nnz_t>(static_cast<std::size_t>(nnz));
  for (int n = 0; n < N; ++n) {
    const cudaError_t e = s->host[n].allocate(per_mode);
    if (e != cudaSuccess)
      TESSERA_THROW(
          "tier 2 (host-resident, GPU-streamed) keeps one sorted copy of the tensor per "
          "mode in pinned host memory ("
          << N << " x " << per_mode << " bytes), but cudaHostAlloc of " << per_mode
          << " bytes failed (" << detail::cuda_error_text(e)
          << "); free host memory, raise the locked-memory limit (ulimit -l), or "
             "spread the tensor over more ranks");
    sort_for_mode(x, n, perm.get(), tmp.get());
    for (int k = 0; k < s->chunks; ++k)
      write_block(x, perm.get(), static_cast<nnz_t>(k) * chunk_nnz, s->chunk_count(k),
                  s->host[n].get() + s->chunk_offset(k));
  }
  h.make_streamed(std::move(s), ctx.stream);
}

/// The tensor-core layouts of a tier-1 handle (hybrid.cuh), under the same limit as the
/// copies and never into the reserve an automatic budget leaves for factors and outputs.
/// A copy prepared for TTMc (Tucker, completion's one pass over whole rows) gets none: only
/// the MTTKRP reads them.
template <typename T>
void add_hybrid(Context& ctx, CudaTensorHandle<T>& h, std::size_t limit) {
  if (ctx.tuning.tensor_cores == TensorCores::off)
    h.set_hybrid_note("none (--tensor-cores off at prepare)");
  else if (ctx.workload == Workload::ttmc)
    h.set_hybrid_note("none (prepared for TTMc or completion's rows, which do not read them)");
  else
    build_hybrid(ctx, h, limit, [] {
      // Whatever the budget, the hybrid leaves the reserve of automatic_budget free.
      std::size_t free_b = 0, total_b = 0;
      TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      return automatic_budget(free_b, total_b);
    });
}

}  // namespace
}  // namespace mttkrp_detail

using namespace mttkrp_detail;

template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_tensor(Context& ctx, const SparseTensor<T>& x,
                                                std::size_t budget) {
  check_kernel_input(x);  // order, ragged arrays, coordinates < dims < 2^32
  const int N = x.order();
  const nnz_t nnz = x.nnz();

  auto h =
      std::make_unique<CudaTensorHandle<T>>(x.dims, nnz, ctx.device, kernel_selection(ctx.tuning));
  if (nnz == 0) return h;

  // The first tier the tensor fits in (DESIGN §8). An explicit budget is taken as given
  // (capped by the free memory); without one, a reserve is left for the factors.
  std::size_t free_b = 0, total_b = 0;
  const std::size_t limit = tensor_limit(budget, free_b, total_b);
  const std::size_t tier1 = h->resident_bytes();
  if (tier1 <= limit) {
    // Sort on the device when its peak (copies + COO + sort temporaries) fits the same
    // limit, else (or when an allocation fails anyway) on the host: still tier 1.
    auto plans = plan_modes(ctx.device, x.dims, nnz, sizeof(T), ctx.workload, ctx.tuning);
    const std::size_t peak = device_sort_peak(x.dims, nnz, h->copy_bytes(), plans, ctx.stream);
    if (peak <= limit && prepare_resident_on_device(ctx, x, *h, std::move(plans), peak)) {
      add_hybrid(ctx, *h, limit);
      return h;
    }
    prepare_resident(ctx, x, *h);
    std::ostringstream os;
    if (peak > limit)
      os << "; the device sort needs " << peak << " bytes, over the limit of " << limit;
    else
      os << "; the device sort (" << peak << " bytes) failed to allocate device memory";
    h->append_how_sorted(os.str());
    add_hybrid(ctx, *h, limit);
    return h;
  }

  const nnz_t chunk = tier2_chunk_nnz<T>(N, nnz, limit);
  if (chunk == 0) {
    const nnz_t min_chunk = std::min<nnz_t>(nnz, kTileNnz);
    const std::size_t need =
        (nnz > min_chunk ? 2 : 1) * block_bytes<T>(N, static_cast<std::size_t>(min_chunk));
    const std::size_t per_nnz = static_cast<std::size_t>(N) * sizeof(index_t) + sizeof(T);
    if (budget != 0 && budget < need)
      TESSERA_INPUT_CHECK(false, "memory budget of "
                                     << budget << " bytes is too small for this tensor (" << nnz
                                     << " nonzeros, order " << N << ", " << per_nnz
                                     << " bytes per nonzero): tier 1 (device-resident) needs "
                                     << tier1 << " bytes, tier 2 (host-resident, GPU-streamed) "
                                     << "at least " << need << " bytes for two chunk buffers of "
                                     << min_chunk << " nonzeros; raise the memory budget "
                                     << "(--mem-budget) to at least " << need << " bytes");
    TESSERA_THROW("not enough free device memory on device "
                  << ctx.device << " for the tensor (" << nnz << " nonzeros, order " << N
                  << "): tier 1 (device-resident) needs " << tier1
                  << " bytes, tier 2 (host-resident, GPU-streamed) at least " << need
                  << " bytes for two chunk buffers of " << min_chunk << " nonzeros, plus room for "
                  << "the factors; " << free_b << " of " << total_b << " bytes are free"
                  << (budget == 0 ? " (less a reserve of 1/16 of the device)" : ""));
  }
  const nnz_t chunks = (nnz + chunk - 1) / chunk;
  if (chunks > kMaxChunksPerMode) {
    const nnz_t min_chunk =
        ((nnz + kMaxChunksPerMode - 1) / kMaxChunksPerMode + kTileNnz - 1) / kTileNnz * kTileNnz;
    TESSERA_INPUT_CHECK(false, "a device memory limit of "
                                   << limit << " bytes cuts each mode of the tensor (" << nnz
                                   << " nonzeros) into " << chunks << " chunks, more than "
                                   << kMaxChunksPerMode << "; raise the memory budget "
                                   << "(--mem-budget) to at least "
                                   << 2 * block_bytes<T>(N, static_cast<std::size_t>(min_chunk))
                                   << " bytes");
  }
  prepare_streamed(ctx, x, *h, chunk, budget);
  if (ctx.tuning.tensor_cores != TensorCores::off)
    h->set_hybrid_note("none (tier 2: the hybrid layout is built for device-resident tensors)");
  return h;
}

template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_synthetic(Context& ctx, const synthetic::Spec& spec,
                                                   const synthetic::Window& w,
                                                   std::uint64_t first_id, std::uint64_t count,
                                                   std::size_t budget) {
  check_synthetic(spec, w, first_id, count);
  const auto t0 = std::chrono::steady_clock::now();
  const bool whole = is_whole(spec, w);
  std::vector<std::uint64_t> dims(static_cast<std::size_t>(spec.order));
  for (int m = 0; m < spec.order; ++m) dims[static_cast<std::size_t>(m)] = w.hi[m] - w.lo[m];
  // A window: pass 1 counts each block's kept ids on the device; their exclusive prefix
  // (summed on the host, one value per 8192 ids) is where pass 2 writes each block's.
  const auto n_ids = static_cast<std::int64_t>(count);
  const std::int64_t blocks = whole ? 0 : (n_ids + kWindowIdsPerBlock - 1) / kWindowIdsPerBlock;
  DeviceMemory offsets;
  nnz_t nnz = static_cast<nnz_t>(count);
  if (!whole && blocks > 0) {
    TESSERA_EXPECTS(blocks < (std::int64_t(1) << 31),
                    "synthetic window: " << count << " ids in one call");
    offsets.reserve(static_cast<std::size_t>(blocks) * sizeof(std::int64_t));
    auto* d = static_cast<std::int64_t*>(offsets.get());
    count_window<<<static_cast<unsigned>(blocks), kBlock, 0, ctx.stream>>>(spec, w, first_id, n_ids,
                                                                           d);
    TESSERA_CUDA_CHECK_LAUNCH();
    std::vector<std::int64_t> c(static_cast<std::size_t>(blocks));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(c.data(), d, c.size() * sizeof(std::int64_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    std::int64_t sum = 0;
    for (auto& v : c) {
      const std::int64_t k = v;
      v = sum;
      sum += k;
    }
    nnz = static_cast<nnz_t>(sum);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(d, c.data(), c.size() * sizeof(std::int64_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // c is freed on return
  }
  auto h =
      std::make_unique<CudaTensorHandle<T>>(dims, nnz, ctx.device, kernel_selection(ctx.tuning));
  if (nnz == 0) return h;

  // Tier 1 with the device sort, under the same limit and peak as prepare_tensor; the
  // COO is generated where the upload would have put it.
  std::size_t free_b = 0, total_b = 0;
  const std::size_t limit = tensor_limit(budget, free_b, total_b);
  const std::size_t tier1 = h->resident_bytes();
  std::ostringstream why;
  if (tier1 > limit) {
    why << "tier 1 needs " << tier1 << " bytes, over the limit of " << limit;
  } else {
    auto plans = plan_modes(ctx.device, dims, nnz, sizeof(T), ctx.workload, ctx.tuning);
    const std::size_t peak = device_sort_peak(dims, nnz, h->copy_bytes(), plans, ctx.stream);
    DeviceMemory coo;
    if (peak > limit) {
      why << "the device sort needs " << peak << " bytes, over the limit of " << limit;
    } else if (coo.try_reserve(h->copy_bytes()) != cudaSuccess) {
      why << "the device sort (" << peak << " bytes) failed to allocate device memory";
    } else {
      const auto n = static_cast<std::size_t>(nnz);
      char* c = static_cast<char*>(coo.get());
      const auto n64 = static_cast<std::int64_t>(nnz);
      if (whole) {
        generate_synthetic_coo<T><<<grid_for(n64), kBlock, 0, ctx.stream>>>(
            spec, first_id, n64, reinterpret_cast<index_t*>(c),
            reinterpret_cast<T*>(c + values_offset(spec.order, n)));
      } else {
        write_window<T><<<static_cast<unsigned>(blocks), kBlock, 0, ctx.stream>>>(
            spec, w, first_id, n_ids, static_cast<const std::int64_t*>(offsets.get()), n64,
            reinterpret_cast<index_t*>(c), reinterpret_cast<T*>(c + values_offset(spec.order, n)));
      }
      TESSERA_CUDA_CHECK_LAUNCH();
      if (!whole) {  // the offsets are freed before the sort, after the write has read them
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        offsets = DeviceMemory();
      }
      if (sort_resident_on_device(ctx, std::move(coo), *h, std::move(plans), peak,
                                  whole ? "generated and sorted on the device"
                                        : "generated (a window) and sorted on the device",
                                  t0)) {
        add_hybrid(ctx, *h, limit);
        return h;
      }
      why << "the device sort (" << peak << " bytes) failed to allocate device memory";
    }
  }
  // Fall back: the COO on the host, then prepare_tensor (host sort in tier 1, or tier 2).
  h.reset();
  offsets = DeviceMemory();
  auto x = make_synthetic_tensor<T>(spec, w, first_id, count);
  auto out = prepare_tensor(ctx, x, budget);
  static_cast<CudaTensorHandle<T>&>(*out).add_note("generated on the host (" + why.str() + ")");
  return out;
}

template std::unique_ptr<TensorHandle<float>> prepare_tensor<float>(Context&,
                                                                    const SparseTensor<float>&,
                                                                    std::size_t);
template std::unique_ptr<TensorHandle<double>> prepare_tensor<double>(Context&,
                                                                      const SparseTensor<double>&,
                                                                      std::size_t);
template std::unique_ptr<TensorHandle<float>> prepare_synthetic<float>(Context&,
                                                                       const synthetic::Spec&,
                                                                       const synthetic::Window&,
                                                                       std::uint64_t, std::uint64_t,
                                                                       std::size_t);
template std::unique_ptr<TensorHandle<double>> prepare_synthetic<double>(
    Context&, const synthetic::Spec&, const synthetic::Window&, std::uint64_t, std::uint64_t,
    std::size_t);

}  // namespace tessera::kernels::cuda
