// CUDA MTTKRP: the layout of each mode's tier-1 copy (plan_modes), chosen from the shape
// and the device, or forced by the tuning options (--cuda-layout, --cuda-block-rows,
// --cuda-l2-hint), and the work items of the smem layout. The sort that puts a copy in
// its layout: device_sort.cu; the kernels that read it: tiles.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/mttkrp/internal.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

// ---------------------------------------------------------------------------
// Blocked layouts (tier 1, copies sorted on the device)
// ---------------------------------------------------------------------------
//
// The tile kernel gathers two factor rows (order 3) per nonzero. When the factors fit in
// L2 those gathers are served at L2 bandwidth, and when they do not, each one is a random
// HBM read: either way the gathers, not the tensor, set the time. Two layouts cut them,
// chosen per mode by plan_mode from the shape (or forced, see layout_override):
//
// smem: every input mode m is cut into ranges of rows[m] indices such that one range of
//   each input mode fits in shared memory together (sum rows[m] x 32 columns). The copy
//   is sorted by (block, i_n, i_s); work items of at most kItemNnz nonzeros of one block
//   each go to one thread block of kSmemWarps warps, which loads the block's factor rows
//   (32 columns at a time) into shared memory and then runs the tile loop over its
//   nonzeros with every gather from shared memory. The items of a block share its output
//   rows, so finished rows are added with atomics; the planner takes this layout only
//   when a block's nonzeros come in runs of several per output row (expected_run) and
//   outnumber the tile rows loaded for them.
// l2: one input mode (the shortest whose factor does not fit in L2 with the rest) is
//   cut into ranges that fit in a part of L2; the copy is sorted by (block, i_n, i_s)
//   and read by the tile kernel with kL2 (evict-last hint on that mode's rows, atomics
//   for every finished row). The whole device works through one block at a time, so
//   that mode's gathers hit L2 and only the other modes' rows come from HBM.
// Both are orders of the same nonzeros, so results equal the plain layout's to rounding
// (sums are taken in a different order).

namespace {

/// starts[b] = first position of block b in a copy sorted by blocks (blocks without
/// nonzeros keep their initial value).
__global__ void mark_block_starts(const __grid_constant__ BlockSpec b, const index_t* idx,
                                  std::int64_t n, std::int64_t* starts) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto un = static_cast<std::size_t>(n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const std::uint64_t bk = block_of(b, idx, un, static_cast<std::size_t>(k));
    if (k == 0 || block_of(b, idx, un, static_cast<std::size_t>(k - 1)) != bk) starts[bk] = k;
  }
}

/// Layout chosen by the tuning options (kernels::Tuning; tuning and tests): --cuda-layout =
/// default | plain | auto | smem | l2, and --cuda-block-rows = the tile rows of smem (sum
/// over input modes) or the rows of l2's blocked mode (0: from the plan). auto lets
/// plan_mode choose from the shape; forced layouts skip its profitability tests (not its
/// limits). default: the l1 plan (below) where it applies, else plain. Measured on an H200
/// (docs/perf/gpu-h200-layouts.md): with every factor in L2 the l1 plan cut the nell-2
/// shaped MTTKRP from 1.87 to 1.19 ms (uniform, R = 32); the smem and L2-sized l2 plans
/// of auto beat plain by no more than the run-to-run spread once the tile kernel ran at
/// full occupancy, so they stay opt-in.
struct LayoutOverride {
  CudaLayout layout = CudaLayout::standard;
  std::uint64_t block_rows = 0;
  bool l2_hint = true;  ///< --cuda-l2-hint false: l2 layout without the evict-last hint
};

/// The layout fields of `t` (already checked by kernels::check).
LayoutOverride layout_override(const Tuning& t) {
  LayoutOverride o;
  o.layout = t.cuda_layout;
  o.block_rows = t.cuda_block_rows;
  o.l2_hint = t.cuda_l2_hint;
  return o;
}

/// Expected nonzeros per (block, output row) when nnz_pb nonzeros fall uniformly on
/// `out_dim` output rows.
double expected_run(double nnz_pb, double out_dim) {
  if (nnz_pb <= 0 || out_dim <= 0) return 0;
  const double touched = out_dim * -std::expm1(-nnz_pb / out_dim);
  return nnz_pb / std::max(touched, 1.0);
}

/// Rows of the blocked mode in the l1 plan: 64 rows (8 KB of a float row of 32 columns)
/// measured fastest on an H200 for R = 16, 32 and 64 among 64 .. 4096 (nell-2 shape,
/// uniform and power-law; docs/perf/gpu-h200-layouts.md).
constexpr std::uint64_t kL1BlockRows = 64;
/// Shortest expected run (nonzeros per block and output row) for which the l1 plan is
/// taken: each run ends in one atomic flush of its output row.
constexpr double kL1MinRun = 8.0;

/// The layout of mode n's copy (see "Blocked layouts"). `row_bytes` is one factor row
/// slice of 32 columns (the kernels' column block).
ModePlan plan_mode(const std::vector<std::uint64_t>& dims, int n, nnz_t nnz, std::size_t value_size,
                   const DeviceLimits& lim, const LayoutOverride& ov, Workload workload) {
  ModePlan plan;
  const int N = static_cast<int>(dims.size());
  if (N < 2 || nnz == 0 || ov.layout == CudaLayout::plain) return plan;
  const std::size_t row_bytes = static_cast<std::size_t>(kWarp) * value_size;
  const int bn = index_bits(dims[static_cast<std::size_t>(n)]);
  const double out_dim = static_cast<double>(dims[static_cast<std::size_t>(n)]);
  std::vector<int> inputs;
  for (int m = 0; m < N; ++m)
    if (m != n) inputs.push_back(m);
  std::sort(inputs.begin(), inputs.end(), [&](int a, int b) {
    return dims[static_cast<std::size_t>(a)] < dims[static_cast<std::size_t>(b)] ||
           (dims[static_cast<std::size_t>(a)] == dims[static_cast<std::size_t>(b)] && a < b);
  });
  auto finish = [&](ModePlan& p) {
    p.blocks = 1;
    for (int s = 0; s < p.spec.nin; ++s) {
      const std::uint64_t d = dims[static_cast<std::size_t>(p.spec.in_mode[s])];
      p.spec.nblk[s] = static_cast<std::uint32_t>((d + p.spec.rows[s] - 1) / p.spec.rows[s]);
      p.blocks *= p.spec.nblk[s];
    }
    p.expected_run =
        expected_run(static_cast<double>(nnz) / static_cast<double>(p.blocks), out_dim);
  };
  const bool force_smem = ov.layout == CudaLayout::smem, force_l2 = ov.layout == CudaLayout::l2;

  // The l2 layout with `rows` rows of the shortest input mode longer than `rows` (any
  // mode longer than 1 when forced): taken when forced or when runs average min_run.
  auto blocked_mode = [&](std::uint64_t rows, double min_run, const char* what) {
    int hot = -1;
    for (int m : inputs)
      if (dims[static_cast<std::size_t>(m)] > (force_l2 ? 1 : rows)) {
        hot = m;
        break;
      }
    if (hot < 0) return ModePlan{};
    ModePlan p;
    p.layout = Layout::l2;
    p.spec.nin = 1;
    p.spec.in_mode[0] = hot;
    p.spec.rows[0] = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(rows, dims[static_cast<std::size_t>(hot)]));
    p.hint_mode = ov.l2_hint ? hot : -1;
    finish(p);
    const bool fits = index_bits(p.blocks) + bn <= 64;
    if (!fits || !(force_l2 || p.expected_run >= min_run)) return ModePlan{};
    std::ostringstream os;
    os.precision(3);
    os << what << ": mode " << hot << " in " << p.blocks << " blocks of " << p.spec.rows[0]
       << " rows, ~" << p.expected_run << " nonzeros per output row and block";
    p.why = os.str();
    return p;
  };
  std::uint64_t all_rows = 0;
  for (int m : inputs) all_rows += dims[static_cast<std::size_t>(m)];
  const bool all_in_l2 = all_rows * row_bytes <= lim.l2 / 2;
  // l1: every input factor fits in L2, so the gathers run at L2 bandwidth, which sets the
  // time. Cutting one input mode into ranges small enough to stay in each SM's L1 while
  // the device works through them serves that mode's gathers from L1: about half the L2
  // traffic at order 3. Not for TTMc, whose wide output rows would each be flushed with
  // atomics once per short run.
  auto l1_plan = [&]() {
    if (workload != Workload::mttkrp) return ModePlan{};
    return blocked_mode(ov.block_rows > 0 ? ov.block_rows : kL1BlockRows, kL1MinRun, "l1");
  };
  if (ov.layout == CudaLayout::standard) {
    if (all_in_l2) return l1_plan();
    return plan;
  }

  // smem: all input modes blocked; rows shared out by water-filling (short modes whole).
  if (!force_l2) {
    const std::uint64_t cap_hw =
        lim.smem_per_block > 1024 ? (lim.smem_per_block - 1024) / row_bytes : 0;
    const std::uint64_t cap = ov.block_rows > 0 ? std::min(cap_hw, ov.block_rows) : cap_hw;
    if (cap >= inputs.size() && inputs.size() <= static_cast<std::size_t>(kMaxOrder)) {
      ModePlan p;
      p.layout = Layout::smem;
      p.spec.nin = static_cast<int>(inputs.size());
      std::uint64_t remaining = cap;
      std::vector<std::uint32_t> rows_of(static_cast<std::size_t>(N), 0);
      std::size_t left = inputs.size();
      for (int m : inputs) {  // shortest first
        const std::uint64_t share = remaining / left;
        const std::uint64_t r =
            std::max<std::uint64_t>(1, std::min(dims[static_cast<std::size_t>(m)], share));
        rows_of[static_cast<std::size_t>(m)] = static_cast<std::uint32_t>(r);
        remaining -= std::min(remaining, r);
        --left;
      }
      std::uint64_t tile = 0;
      int s = 0;
      for (int m = 0; m < N; ++m) {  // slots in mode order
        if (m == n) continue;
        p.spec.in_mode[s] = m;
        p.spec.rows[s] = rows_of[static_cast<std::size_t>(m)];
        tile += p.spec.rows[s++];
      }
      p.tile_rows = static_cast<int>(tile);
      double blocks = 1;
      for (int t = 0; t < p.spec.nin; ++t)
        blocks *= std::ceil(static_cast<double>(dims[static_cast<std::size_t>(p.spec.in_mode[t])]) /
                            p.spec.rows[t]);
      if (blocks < 1e15) {
        finish(p);
        const double nnz_pb = static_cast<double>(nnz) / static_cast<double>(p.blocks);
        const bool fits = index_bits(p.blocks) + bn <= 64 && p.blocks <= (std::uint64_t(1) << 26);
        const bool pays = p.expected_run >= 3.0 && nnz_pb >= 2.0 * static_cast<double>(tile) &&
                          p.blocks <= (std::uint64_t(1) << 24);
        if (fits && (force_smem || pays)) {
          std::ostringstream os;
          os.precision(3);
          os << p.blocks << " blocks of " << tile << " tile rows, ~" << p.expected_run
             << " nonzeros per output row and block";
          p.why = os.str();
          return p;
        }
      }
    }
    if (force_smem) return plan;  // cannot: plain
  }

  // l2: one input mode blocked to a part of L2, the shortest one that does not fit.
  const std::uint64_t budget_rows =
      ov.block_rows > 0 ? ov.block_rows : (lim.l2 * 2 / 5) / row_bytes;
  if (budget_rows == 0) return plan;
  if (!force_l2 && all_in_l2) return l1_plan();  // all in L2 already
  return blocked_mode(budget_rows, 4.0, "l2");
}

}  // namespace

DeviceLimits device_limits(int device) {
  int smem = 0, l2 = 0, sms = 0;
  TESSERA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return {static_cast<std::size_t>(smem), static_cast<std::size_t>(l2), std::max(sms, 1)};
}

std::vector<ModePlan> plan_modes(int device, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                                 std::size_t value_size, Workload workload, const Tuning& tuning) {
  const DeviceLimits lim = device_limits(device);
  const LayoutOverride ov = layout_override(tuning);
  std::vector<ModePlan> plans;
  for (int n = 0; n < static_cast<int>(dims.size()); ++n)
    plans.push_back(plan_mode(dims, n, nnz, value_size, lim, ov, workload));
  return plans;
}

void build_work_items(Context& ctx, const index_t* idx, std::int64_t n, int sms, ModePlan& plan) {
  DeviceMemory starts(static_cast<std::size_t>(plan.blocks) * sizeof(std::int64_t));
  auto* st = static_cast<std::int64_t*>(starts.get());
  TESSERA_CUDA_CHECK(cudaMemsetAsync(st, 0xff, starts.bytes(), ctx.stream));  // -1
  mark_block_starts<<<grid_for(n), kBlock, 0, ctx.stream>>>(plan.spec, idx, n, st);
  TESSERA_CUDA_CHECK_LAUNCH();
  std::vector<std::int64_t> host(static_cast<std::size_t>(plan.blocks));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), st, starts.bytes(), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  // Smaller items on small tensors, so every SM gets work, but not below a few tiles.
  const std::int64_t target = std::clamp<std::int64_t>(
      n / (4 * static_cast<std::int64_t>(sms)),
      std::max<std::int64_t>(4096, 2 * static_cast<std::int64_t>(plan.tile_rows)), kItemNnz);
  std::vector<WorkItem> items;
  std::int64_t prev_start = -1;
  std::uint64_t prev_block = 0;
  auto flush = [&](std::int64_t end) {
    if (prev_start < 0) return;
    const std::int64_t len = end - prev_start;
    const std::int64_t parts = (len + target - 1) / target;
    for (std::int64_t q = 0; q < parts; ++q)
      items.push_back(
          {prev_start + len * q / parts, prev_start + len * (q + 1) / parts, prev_block});
  };
  for (std::uint64_t b = 0; b < plan.blocks; ++b) {
    const std::int64_t s0 = host[static_cast<std::size_t>(b)];
    if (s0 < 0) continue;
    flush(s0);
    prev_start = s0;
    prev_block = b;
  }
  flush(n);
  plan.items = static_cast<std::int64_t>(items.size());
  plan.item_buf = DeviceMemory(std::max<std::size_t>(items.size(), 1) * sizeof(WorkItem));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(plan.item_buf.get(), items.data(),
                                     items.size() * sizeof(WorkItem), cudaMemcpyHostToDevice,
                                     ctx.stream));
  ctx.sync();  // items is a host temporary
  std::ostringstream os;
  os << ", " << plan.items << " work items";
  plan.why += os.str();
}

}  // namespace tessera::kernels::cuda::mttkrp_detail
