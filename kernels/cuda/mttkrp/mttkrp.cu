// CUDA MTTKRP on per-mode sorted COO copies, without per-nonzero atomics.
//
// Format: for every mode n one copy of the nonzeros sorted by (i_n, i_{n+1 mod N}),
// stored as uint32 coordinate arrays (structure of arrays) followed by the values.
//
// Kernel: each warp owns a contiguous tile of kTileNnz nonzeros of the copy sorted by the
// output mode, and lanes own output columns (32 per pass; R > 32 loops over column
// blocks). A batch of 32 nonzeros is loaded cooperatively (lane j loads nonzero j's
// coordinates and value; coalesced) and broadcast with __shfl_sync. Each lane keeps the
// Khatri-Rao products of the batch in registers and accumulates them while the output
// row stays the same. A finished row is written once: rows wholly inside the tile with a
// plain store (no other tile touches them), the first and last row of the tile (which a
// neighbouring tile may share) with atomicAdd. So a tile costs at most two atomics per
// column, whatever the skew of the tensor, and every warp does the same amount of work.
// The kernel needs only that its nonzeros are a contiguous range of the sorted copy:
// a row written with a plain store has its whole run inside one tile, so no other tile,
// in this launch or another, touches it.
// For order 3-6 and R a power of two times the 16-byte pack, a register-blocked kernel
// with the same tiles and the same write rule takes over (blocked.cuh: R / 4 lanes per
// row, indices staged in shared memory, 4 nonzeros per lane step); the one described above
// (the "classic" kernel, tiles.cu) runs the other shapes, or every shape with
// --mttkrp-kernel classic (Tuning::mttkrp_kernel, read per call). describe() names the
// kernel of each mode's last run.
//
// Memory tiers (DESIGN §8): tier 1 keeps the sorted copies in device memory. When they
// exceed the memory budget, tier 2 keeps them in pinned host memory, cut into chunks of
// whole tiles, and each MTTKRP streams its mode's chunks through two device buffers:
// the copy of chunk k + 1 (on a copy stream of the handle) overlaps the kernel of chunk
// k (on the backend's stream), one launch per chunk into the same output. Tier 3 (chunks
// of a tensor on disk, ops::mttkrp_accumulate) sorts each chunk on the device
// (stream.cu) and runs the same tile kernels through launch_mttkrp_sorted, with
// `accumulate` set: a row inside one tile is read, added to and stored.
//
// Building the sorted copies (prepare): tier 1 sorts on the device when the peak memory
// of the device sort fits the limit (see device_sort.cu), else on the host;
// tier 2 sorts on the host. Both give the same order: (i_n, i_{n+1 mod N}, position in
// the input), and the host sorts run in parallel (runtime/host_sort.cpp).
//
// Synthetic tensors (prepare_synthetic): a kernel writes the COO block the device sort
// would upload (nonzero k = id first_id + k, coordinates and value from
// tensor/synthetic.hpp), and the same device sort builds the tier-1 copies. When that
// does not fit (tier 2, or the device sort's peak over the limit), the COO is built on
// the host and prepared like any other input.
//
// Tensor cores (issue 18): a tier-1 mode with a hybrid layout (hybrid.cuh) runs the
// CUDA-core kernel on the rest copy, then the tile kernel (tc_tiles.cu), where
// --tensor-cores is on, or auto and the cost model predicts a gain (choose_hybrid).
//
// Reduced-precision gathers (--gather-precision fp16 | bf16, float tensors, the blocked
// kernel): each call copies the input factors to 16-bit copies in Context::gathers (to_low),
// which the kernel reads instead; the smem layout and the classic and tensor-core kernels
// keep float rows.
//
// What each file of this folder does: internal.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/mttkrp/blocked.cuh"
#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/mttkrp/hybrid.cuh"
#include "kernels/cuda/mttkrp/stream.cuh"

namespace tessera::kernels::cuda {

using namespace mttkrp_detail;

namespace {

/// Whether this MTTKRP of mode `mode` runs the hybrid (records the decision on it).
template <typename T>
const HybridMode<T>* choose_hybrid(const Tuning& t, const CudaTensorHandle<T>& x, int mode, int R) {
  const HybridMode<T>* hy = x.hybrid(mode);
  if (t.tensor_cores == TensorCores::off) {
    if (hy) {  // switched off after prepare: the split reports CUDA cores, not a stale choice
      hy->used = false;
      hy->rank = 0;
      hy->predicted = 0;
    }
    return nullptr;
  }
  const TcPrecision prec = tc_precision_of<T>(t);
  if (hy == nullptr) return nullptr;
  hy->precision = prec;
  hy->predicted = tc_predicted_speedup(x.nnz(), hy->rest_nnz, hy->tiles, R, prec);
  hy->forced = t.tensor_cores == TensorCores::on;
  hy->rank = R;
  const bool use = hy->forced || hy->predicted >= kAutoMinSpeedup;
  hy->used = use;  // tc_split() says why, from these fields (no text on the hot path)
  return use ? hy : nullptr;
}

template <typename G>
__global__ void to_low_kernel(const float* __restrict__ a, G* __restrict__ b, std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<G, __half>)
      b[i] = __float2half_rn(a[i]);
    else
      b[i] = __float2bfloat16_rn(a[i]);
  }
}

}  // namespace

void mttkrp_detail::to_16bit(Context& ctx, const float* a, void* b, std::int64_t n,
                             GatherPrecision g) {
  if (n <= 0) return;
  if (g == GatherPrecision::fp16)
    to_low_kernel<<<grid_for(n), kBlock, 0, ctx.stream>>>(a, static_cast<__half*>(b), n);
  else
    to_low_kernel<<<grid_for(n), kBlock, 0, ctx.stream>>>(a, static_cast<__nv_bfloat16*>(b), n);
  TESSERA_CUDA_CHECK_LAUNCH();
}

namespace {

/// The 16-bit copies of the input factors of an MTTKRP of p.mode (Tuning::gather_precision),
/// in ctx.gathers (256-byte aligned each): sets p.low and p.gather. Values beyond fp16's
/// range (65504) become inf, which the caller's results then show (CP's factors are
/// normalised: |a| <= 1).
template <typename T>
void to_low(Context& ctx, MttkrpParams<T>& p, const std::vector<std::uint64_t>& dims) {
  if constexpr (!std::is_same_v<T, float>) {
    (void)ctx, (void)p, (void)dims;
  } else {
    const GatherPrecision g = ctx.tuning.gather_precision;
    auto bytes_of = [&](int m) {
      const std::size_t b = static_cast<std::size_t>(dims[static_cast<std::size_t>(m)]) *
                            static_cast<std::size_t>(p.R) * 2;
      return (b + 255) / 256 * 256;
    };
    std::size_t total = 0;
    for (int m = 0; m < p.order; ++m)
      if (m != p.mode) total += bytes_of(m);
    ctx.gathers.reserve(total);
    auto* base = static_cast<unsigned char*>(ctx.gathers.get());
    for (int m = 0; m < p.order; ++m) {
      if (m == p.mode) continue;
      const auto n = static_cast<std::int64_t>(dims[static_cast<std::size_t>(m)]) * p.R;
      to_16bit(ctx, p.factors[m], base, n, g);
      p.low[m] = base;
      base += bytes_of(m);
    }
    p.gather = g;
  }
}

}  // namespace

/// The hybrid MTTKRP of one mode: the CUDA-core kernel on the rest copy (stores rows in the
/// zeroed output), then the tile kernel (adds to them). p: the call's parameters.
template <typename T>
void run_hybrid(Context& ctx, const HybridMode<T>& hy, MttkrpParams<T> p, bool use_blocked,
                const std::vector<std::uint64_t>& dims) {
  const int N = p.order;
  const bool timed = !ctx.capturing;
  if (timed)
    for (auto& e : hy.ev)
      if (!e) TESSERA_CUDA_CHECK(cudaEventCreate(&e));
  if (timed) TESSERA_CUDA_CHECK(cudaEventRecord(hy.ev[0], ctx.stream));
  if (hy.rest_nnz > 0) {
    for (int m = 0; m < N; ++m) p.idx[m] = hy.rest_idx(m);
    p.vals = hy.rest_vals(N);
    p.nnz = static_cast<std::int64_t>(hy.rest_nnz);
    if (use_blocked)
      launch_blocked(ctx.stream, p, false, -1);
    else
      launch_tiles<T, false>(ctx.stream, p);
  }
  if (timed) TESSERA_CUDA_CHECK(cudaEventRecord(hy.ev[1], ctx.stream));
  TcParams<T> tp;
  tp.vals = static_cast<const T*>(hy.tile_vals.get());
  tp.meta = static_cast<const index_t*>(hy.tile_meta.get());
  tp.seg = static_cast<const std::uint32_t*>(hy.seg.get());
  tp.tile_factor = p.factors[hy.tile_mode];
  for (int m = 0; m < N; ++m)
    if (m != p.mode && m != hy.tile_mode) tp.fixed[tp.nfixed++] = p.factors[m];
  tp.out = p.out;
  tp.out_rows = dims[static_cast<std::size_t>(p.mode)];
  tp.tile_rows = dims[static_cast<std::size_t>(hy.tile_mode)];
  tp.R = p.R;
  launch_tc_tiles(ctx.stream, tp, hy.segments, hy.precision);
  if (timed) TESSERA_CUDA_CHECK(cudaEventRecord(hy.ev[2], ctx.stream));
  hy.timed = timed;
}

/// One launch of the CUDA-core kernels over `cnt` consecutive nonzeros (idx, vals) of the copy
/// sorted by p.mode, as the mode's layout asks; true when it ran the smem kernel.
template <typename T>
bool launch_range(Context& ctx, const CudaTensorHandle<T>& x, MttkrpParams<T>& p, bool use_blocked,
                  const index_t* const* idx, const T* vals, nnz_t cnt, bool resident) {
  for (int m = 0; m < p.order; ++m) p.idx[m] = idx[m];
  p.vals = vals;
  p.nnz = cnt;
  const ModePlan& plan = x.plan(p.mode);
  const bool l2 = resident && plan.layout == Layout::l2;
  if (resident && plan.layout == Layout::smem) {
    launch_smem(ctx.stream, p, plan, x.dims());
    return true;
  }
  if (use_blocked) {
    launch_blocked(ctx.stream, p, l2, l2 ? plan.hint_mode : -1);
  } else if (l2) {
    p.hot_mode = plan.hint_mode;
    launch_tiles<T, true>(ctx.stream, p);
  } else {
    launch_tiles<T, false>(ctx.stream, p);
  }
  return false;
}

template <typename T>
void mttkrp(Context& ctx, const TensorHandle<T>& xh, int mode, const std::vector<const T*>& factors,
            int R, T* out) {
  MttkrpParams<T> p{};
  const auto* x = &checked_handle(ctx, xh, mode, factors, R, p.factors);
  const int N = x->order();
  const auto* st = x->streamed_store();
  p.out = out;
  p.order = N;
  p.mode = mode;
  p.R = R;

  const std::size_t out_bytes =
      static_cast<std::size_t>(x->dims()[mode]) * static_cast<std::size_t>(R) * sizeof(T);
  const KernelSelection selection = kernel_selection(ctx.tuning);
  const bool use_blocked =
      selection == KernelSelection::automatic && blocked::supports<T>(N, R, p.factors, mode, out);
  // 16-bit copies where the blocked kernel reads them (double: the backend's set_tuning warned).
  const GatherPrecision gp = ctx.tuning.gather_precision;
  const bool smem_only = st == nullptr && x->plan(mode).layout == Layout::smem;
  if (gp != GatherPrecision::full && use_blocked && !smem_only) to_low(ctx, p, x->dims());
  const bool low = p.gather != GatherPrecision::full;
  const char* kernel = !use_blocked                  ? "classic"
                       : !low                        ? "blocked"
                       : gp == GatherPrecision::fp16 ? "blocked, fp16 gathers"
                                                     : "blocked, bf16 gathers";
  const HybridMode<T>* hy = st == nullptr ? choose_hybrid(ctx.tuning, *x, mode, R) : nullptr;
  if (hy) {
    over_copy(ctx, *x, mode, out, out_bytes,
              [&](const index_t* const* /*idx*/, const T* /*vals*/, nnz_t /*cnt*/, bool) {
                run_hybrid(ctx, *hy, p, use_blocked, x->dims());
              });
    x->note_kernel(mode,
                   !use_blocked ? "hybrid: classic on the rest + tensor-core tiles"
                   : !low       ? "hybrid: blocked on the rest + tensor-core tiles"
                   : gp == GatherPrecision::fp16
                       ? "hybrid: blocked, fp16 gathers, on the rest + tensor-core tiles"
                       : "hybrid: blocked, bf16 gathers, on the rest + tensor-core tiles",
                   R, selection);
    return;
  }
  over_copy(ctx, *x, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool resident) {
              if (launch_range(ctx, *x, p, use_blocked, idx, vals, cnt, resident)) kernel = "smem";
            });
  x->note_kernel(mode, kernel, R, selection);
}

namespace {

/// Positions in `sorted` (n non-decreasing row indices) of the first index >= each bound.
__global__ void lower_bounds_kernel(const index_t* __restrict__ sorted, std::int64_t n,
                                    const std::int64_t* __restrict__ bounds, int count,
                                    std::int64_t* __restrict__ first) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= count) return;
  const std::int64_t b = bounds[j];
  std::int64_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<std::int64_t>(sorted[mid]) < b)
      lo = mid + 1;
    else
      hi = mid;
  }
  first[j] = lo;
}

}  // namespace

template <typename T>
RowRanges mttkrp_row_ranges(Context& ctx, const TensorHandle<T>& xh, int mode,
                            const std::vector<std::int64_t>& bounds) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  RowRanges r;
  if (bounds.size() < 2) return r;
  const auto count = bounds.size();
  std::vector<std::int64_t> first(count, 0);
  const auto* st = x->streamed_store();
  if (x->nnz() == 0) {
  } else if (st == nullptr) {
    // Tier 1: a binary search per bound in the copy sorted by `mode`, on the device.
    DeviceMemory buf(2 * count * sizeof(std::int64_t));
    auto* d = static_cast<std::int64_t*>(buf.get());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(d, bounds.data(), count * sizeof(std::int64_t),
                                       cudaMemcpyHostToDevice, ctx.stream));
    const int threads = 128;
    lower_bounds_kernel<<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0,
                          ctx.stream>>>(x->idx(mode, mode), static_cast<std::int64_t>(x->nnz()), d,
                                        static_cast<int>(count), d + count);
    TESSERA_CUDA_CHECK_LAUNCH();
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(first.data(), d + count, count * sizeof(std::int64_t),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
  } else {
    // Tier 2: the chunks are consecutive ranges of the sorted copy, in pinned host memory.
    const char* host = st->host[static_cast<std::size_t>(mode)].get();
    for (int k = 0; k < st->chunks; ++k) {
      const auto* rows =
          reinterpret_cast<const index_t*>(host + st->chunk_offset(k)) +
          static_cast<std::size_t>(mode) * static_cast<std::size_t>(st->chunk_count(k));
      const auto cnt = static_cast<std::ptrdiff_t>(st->chunk_count(k));
      for (std::size_t j = 0; j < count; ++j)
        first[j] += std::lower_bound(rows, rows + cnt, bounds[j],
                                     [](index_t v, std::int64_t b) {
                                       return static_cast<std::int64_t>(v) < b;
                                     }) -
                    rows;
    }
  }
  r.nnz.resize(count - 1);
  for (std::size_t j = 0; j + 1 < count; ++j)
    r.nnz[j] = static_cast<nnz_t>(first[j + 1] - first[j]);
  // Pieces: resident copies sorted by output row first (the plain layout; the smem and l2
  // layouts sort by blocks of the input modes first), no tensor-core tiles for the mode.
  r.pieces = st == nullptr && x->hybrid(mode) == nullptr && x->plan(mode).layout == Layout::plain;
  typename CudaTensorHandle<T>::RowPieces rp;
  if (r.pieces) {
    rp.bounds = bounds;
    rp.first.assign(first.begin(), first.end());
  }
  x->set_row_pieces(mode, std::move(rp));
  return r;
}

template <typename T>
void mttkrp_rows(Context& ctx, const TensorHandle<T>& xh, int mode,
                 const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo,
                 std::int64_t row_hi) {
  MttkrpParams<T> p{};
  const auto* x = &checked_handle(ctx, xh, mode, factors, R, p.factors);
  const auto Rs = static_cast<std::size_t>(R);
  const auto* rp = x->row_pieces(mode);
  std::size_t j = 0;
  if (rp != nullptr) {
    // The range [row_lo, row_hi) among the planned ones (a bound may repeat: empty ranges).
    const auto& b = rp->bounds;
    const auto [first, last] = std::equal_range(b.begin(), b.end(), row_lo);
    auto it = first;
    while (it != last && (it + 1 == b.end() || *(it + 1) != row_hi)) ++it;
    if (it == last) rp = nullptr;
    j = static_cast<std::size_t>(it - b.begin());
  }
  if (rp == nullptr) {
    // Not one of the planned pieces: the whole MTTKRP into scratch, then the rows.
    TESSERA_EXPECTS(!ctx.capturing, "mttkrp_rows of rows [" << row_lo << ", " << row_hi
                                                            << ") without planned pieces, inside "
                                                               "a graph capture");
    DeviceMemory whole(static_cast<std::size_t>(x->dims()[static_cast<std::size_t>(mode)]) * Rs *
                       sizeof(T));
    cuda::mttkrp(ctx, xh, mode, factors, R, static_cast<T*>(whole.get()));
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(out + static_cast<std::size_t>(row_lo) * Rs,
                        static_cast<const T*>(whole.get()) + static_cast<std::size_t>(row_lo) * Rs,
                        static_cast<std::size_t>(row_hi - row_lo) * Rs * sizeof(T),
                        cudaMemcpyDeviceToDevice, ctx.stream));
    ctx.sync();  // before `whole` is freed
    return;
  }
  const int N = x->order();
  p.out = out;
  p.order = N;
  p.mode = mode;
  p.R = R;
  const KernelSelection selection = kernel_selection(ctx.tuning);
  const bool use_blocked =
      selection == KernelSelection::automatic && blocked::supports<T>(N, R, p.factors, mode, out);
  if (ctx.tuning.gather_precision != GatherPrecision::full && use_blocked)
    to_low(ctx, p, x->dims());
  x->begin_timing(0);  // no timing events: the caller times its pieces
  if (row_hi > row_lo)
    TESSERA_CUDA_CHECK(cudaMemsetAsync(out + static_cast<std::size_t>(row_lo) * Rs, 0,
                                       static_cast<std::size_t>(row_hi - row_lo) * Rs * sizeof(T),
                                       ctx.stream));
  // The piece's nonzeros [k0, k1) of the sorted copy: a head up to the next multiple of 4 and
  // the rest, so that the rest's arrays start 16-byte aligned (the kernels' vector staging).
  // Rows split between the two launches are the first/last rows of tiles: added with atomics.
  const auto k0 = static_cast<nnz_t>(rp->first[j]), k1 = static_cast<nnz_t>(rp->first[j + 1]);
  const nnz_t mid = std::min<nnz_t>(k1, (k0 + 3) / 4 * 4);
  const index_t* idx[kMaxOrder] = {};
  auto run = [&](nnz_t a, nnz_t b) {
    if (b <= a) return;
    for (int m = 0; m < N; ++m) idx[m] = x->idx(mode, m) + a;
    launch_range(ctx, *x, p, use_blocked, idx, x->vals(mode) + a, b - a, true);
  };
  run(k0, mid);
  run(mid, k1);
  x->end_timing(0, 0);
  const bool low = p.gather != GatherPrecision::full;
  x->note_kernel(mode,
                 !use_blocked                        ? "classic, row pieces"
                 : !low                              ? "blocked, row pieces"
                 : p.gather == GatherPrecision::fp16 ? "blocked, fp16 gathers, row pieces"
                                                     : "blocked, bf16 gathers, row pieces",
                 R, selection);
}

template <typename T>
const char* launch_mttkrp_sorted(cudaStream_t stream, const index_t* const* idx, const T* vals,
                                 nnz_t nnz, int order, int mode, const T* const* factors, int R,
                                 T* out, const Tuning& tuning) {
  MttkrpParams<T> p{};
  for (int m = 0; m < order; ++m) {
    p.idx[m] = idx[m];
    p.factors[m] = factors[m];
  }
  p.vals = vals;
  p.out = out;
  p.nnz = static_cast<std::int64_t>(nnz);
  p.order = order;
  p.mode = mode;
  p.R = R;
  if (nnz == 0) return "none";
  if (kernel_selection(tuning) == KernelSelection::automatic &&
      blocked::supports<T>(order, R, p.factors, mode, out)) {
    launch_blocked(stream, p, false, -1, true);
    return "blocked";
  }
  launch_tiles<T, false, true>(stream, p);
  return "classic";
}

template const char* launch_mttkrp_sorted<float>(cudaStream_t, const index_t* const*, const float*,
                                                 nnz_t, int, int, const float* const*, int, float*,
                                                 const Tuning&);
template const char* launch_mttkrp_sorted<double>(cudaStream_t, const index_t* const*,
                                                  const double*, nnz_t, int, int,
                                                  const double* const*, int, double*,
                                                  const Tuning&);
template RowRanges mttkrp_row_ranges<float>(Context&, const TensorHandle<float>&, int,
                                            const std::vector<std::int64_t>&);
template RowRanges mttkrp_row_ranges<double>(Context&, const TensorHandle<double>&, int,
                                             const std::vector<std::int64_t>&);
template void mttkrp_rows<float>(Context&, const TensorHandle<float>&, int,
                                 const std::vector<const float*>&, int, float*, std::int64_t,
                                 std::int64_t);
template void mttkrp_rows<double>(Context&, const TensorHandle<double>&, int,
                                  const std::vector<const double*>&, int, double*, std::int64_t,
                                  std::int64_t);
template void mttkrp<float>(Context&, const TensorHandle<float>&, int,
                            const std::vector<const float*>&, int, float*);
template void mttkrp<double>(Context&, const TensorHandle<double>&, int,
                             const std::vector<const double*>&, int, double*);

}  // namespace tessera::kernels::cuda
