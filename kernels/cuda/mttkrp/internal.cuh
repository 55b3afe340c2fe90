// Internal to the CUDA MTTKRP (kernels/cuda/mttkrp/): what its files share. The format,
// kernels and tiers are described at the top of mttkrp.cu; the files:
//   ops.cu          the cuda:: operations of kernels/ops/mttkrp.hpp (call the entry points)
//   mttkrp.cu       entry points mttkrp and launch_mttkrp_sorted (kernel choice per call)
//   handle.cuh/.cu  CudaTensorHandle (tier-1 copies or tier-2 store), over_copy, handle queries
//   prepare.cu      prepare_tensor / prepare_synthetic: tier choice, host sort, tier 2
//   device_sort.cu  tier-1 copies sorted on the device (CUB radix sort)
//   layout.cu       the layout of each mode's copy (plain, smem, l2; plan_modes)
//   tiles.cu        the classic and smem tile kernels and the launches of all three
//   blocked.cuh     the register-blocked tile kernel (included by tiles.cu)
//   stream.cu/.cuh  memory tier 3: ops::mttkrp_accumulate
//   hybrid.cuh      the tensor-core hybrid layout of a mode (issue 18)
//   hybrid_build.cu building it at prepare (tier 1)
//   tc_tiles.cu     the tensor-core tile kernel and the cost model of --tensor-cores auto
// Everything here was file-private when the MTTKRP was one file; it lives in namespace
// mttkrp_detail (not `mttkrp`: that is the entry point's name) and is not for use outside
// this folder and the TTMc entry points (kernels/cuda/ttmc/ttmc.cu), which run on the same
// handle.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/runtime/detail.cuh"
#include "kernels/cuda/runtime/host_sort.hpp"

namespace tessera::kernels::cuda::mttkrp_detail {

inline constexpr int kWarp = 32;
/// Batches of 32 nonzeros per warp tile. Larger tiles mean fewer boundary atomics and
/// launch blocks; smaller tiles mean more parallelism on small tensors.
// 64 batches (2048 nonzeros): under power-law indices a hot row spans many tiles, and each
// tile adds it with atomics; 512 -> 2048 took the amazon-shaped power-law MTTKRP from 115
// to 80 ms and left uniform tensors unchanged (docs/perf/gpu-h200-layouts.md). Tuning:
// -DTESSERA_MTTKRP_TILE_BATCHES=N.
#ifndef TESSERA_MTTKRP_TILE_BATCHES
#define TESSERA_MTTKRP_TILE_BATCHES 64
#endif
inline constexpr int kBatchesPerTile = TESSERA_MTTKRP_TILE_BATCHES;
inline constexpr int kTileNnz = kWarp * kBatchesPerTile;
inline constexpr int kWarpsPerBlock = 8;
/// Resident blocks per SM the tile kernel is compiled for (registers capped to fit): the
/// gathers are latency-bound, so occupancy is what keeps enough of them in flight.
inline constexpr int kTileBlocksPerSm = 4;
inline constexpr unsigned kFullMask = 0xffffffffu;
/// Largest work item of the smem kernel (nonzeros). Smaller items balance better, larger
/// ones load the shared-memory tile less often.
inline constexpr std::int64_t kItemNnz = 65536;

// ---------------------------------------------------------------------------
// Blocks of nonzeros (a tier-1 sorted copy, or a tier-2 chunk)
// ---------------------------------------------------------------------------

/// Bytes before the values in a block of `cnt` nonzeros (a tier-1 sorted copy, or a tier-2
/// chunk): `order` index arrays of cnt uint32, padded to 256 bytes.
inline std::size_t values_offset(int order, std::size_t cnt) {
  const std::size_t idx_bytes = static_cast<std::size_t>(order) * cnt * sizeof(index_t);
  return (idx_bytes + 255) / 256 * 256;
}
/// Bytes of a block of `cnt` nonzeros: index arrays, padding, values.
template <typename T>
std::size_t block_bytes(int order, std::size_t cnt) {
  return values_offset(order, cnt) + cnt * sizeof(T);
}
inline std::size_t round_up_256(std::size_t b) {
  return (b + 255) / 256 * 256;
}

/// bits(m): number of bits of every index below `dim` (0 when dim <= 1).
inline int index_bits(std::uint64_t dim) {
  return host_sort::key_bits(dim);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- blocked layouts of a tier-1 copy (see "Blocked layouts" in layout.cu) ----

/// Which kernel reads the copy sorted by one mode, and how that copy is ordered.
enum class Layout {
  plain,  ///< sorted by (i_n, i_s): the tile kernel, factor rows gathered through L1/L2
  smem,   ///< sorted by (block of all input modes, i_n, i_s): factor tiles in shared memory
  l2,     ///< sorted by (block of one input mode, i_n, i_s): that block kept in L2
};
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::plain:
      return "plain";
    case Layout::smem:
      return "smem";
    case Layout::l2:
      return "l2";
  }
  return "?";
}

/// Which tile kernel MTTKRP runs on the plain and l2 layouts, from Tuning::mttkrp_kernel
/// (--mttkrp-kernel; read at every call, so tests and benchmarks can switch): auto (the
/// default) or blocked = the register-blocked kernel (blocked.cuh) where it supports the
/// call (blocked::supports), else the classic tile kernel; classic = the classic tile
/// kernel always. The smem layout has its own kernel either way.
enum class KernelSelection { automatic, classic };
/// The selection of `t` (already checked by kernels::check).
inline KernelSelection kernel_selection(const Tuning& t) {
  return t.mttkrp_kernel == MttkrpKernel::classic ? KernelSelection::classic
                                                  : KernelSelection::automatic;
}
inline const char* kernel_selection_name(KernelSelection k) {
  switch (k) {
    case KernelSelection::automatic:
      return "blocked where supported";
    case KernelSelection::classic:
      return "classic (--mttkrp-kernel classic)";
  }
  return "?";
}

/// The blocked input modes of a copy: slot s covers mode in_mode[s], cut into nblk[s]
/// ranges of rows[s] consecutive indices (the last one shorter). A nonzero's block is the
/// mixed-radix number (..((c_0) nblk_1 + c_1) nblk_2 + ...) of c_s = i_{in_mode[s]} / rows[s].
struct BlockSpec {
  int nin = 0;
  int in_mode[kMaxOrder] = {};
  std::uint32_t rows[kMaxOrder] = {};
  std::uint32_t nblk[kMaxOrder] = {};
};

/// Block of nonzero k of a block of n nonzeros laid out as index arrays (stride n).
__host__ __device__ inline std::uint64_t block_of(const BlockSpec& b, const index_t* idx,
                                                  std::size_t n, std::size_t k) {
  std::uint64_t id = 0;
  for (int s = 0; s < b.nin; ++s)
    id = id * b.nblk[s] + idx[static_cast<std::size_t>(b.in_mode[s]) * n + k] / b.rows[s];
  return id;
}

/// A range of one block's nonzeros, handled by one thread block of the smem kernel.
struct WorkItem {
  std::int64_t begin = 0, end = 0;
  std::uint64_t block = 0;
};

/// The layout of one mode's copy. Built by plan_mode before the sort; the smem work
/// items after it.
struct ModePlan {
  Layout layout = Layout::plain;
  BlockSpec spec;
  std::uint64_t blocks = 1;  ///< prod nblk
  int tile_rows = 0;         ///< smem: sum of rows (rows of the shared-memory tile)
  double expected_run = 0;   ///< planner's estimate of nonzeros per (block, output row)
  int hint_mode = -1;        ///< l2: the mode read with the evict-last hint (-1: none)
  std::int64_t items = 0;    ///< smem: work items
  DeviceMemory item_buf;     ///< smem: the work items
  std::string why;           ///< one clause for describe()
};

// ---------------------------------------------------------------------------
// Choosing the layouts (layout.cu)
// ---------------------------------------------------------------------------

/// What the planner needs to know of the device.
struct DeviceLimits {
  std::size_t smem_per_block = 0;  ///< opt-in shared memory per thread block
  std::size_t l2 = 0;              ///< L2 bytes
  int sms = 1;
};
DeviceLimits device_limits(int device);

/// Plans of every mode of a tensor about to be sorted on the device, under the layout
/// fields of `tuning` (--cuda-layout, --cuda-block-rows, --cuda-l2-hint).
std::vector<ModePlan> plan_modes(int device, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                                 std::size_t value_size, Workload workload, const Tuning& tuning);

/// Work items of an smem copy (the copy at `idx`, n nonzeros, sorted by blocks): every
/// non-empty block cut into near-equal items of at most kItemNnz nonzeros, uploaded to
/// plan.item_buf. Waits for the stream.
void build_work_items(Context& ctx, const index_t* idx, std::int64_t n, int sms, ModePlan& plan);

/// The n floats at a as 16-bit numbers at b (g: fp16 or bf16, rounded to nearest; beyond
/// fp16's range: inf), on ctx.stream: the reduced-precision copies that --gather-precision's
/// kernels gather (the blocked MTTKRP, mttkrp.cu; the tensor-core TTMc, ttmc.cu).
void to_16bit(Context& ctx, const float* a, void* b, std::int64_t n, GatherPrecision g);

// ---------------------------------------------------------------------------
// Launches (tiles.cu)
// ---------------------------------------------------------------------------

template <typename T>
struct MttkrpParams {
  const index_t* idx[kMaxOrder];  ///< coordinate arrays of the copy sorted by `mode`
  const T* factors[kMaxOrder];    ///< factors[m]: dims[m] x R row-major (unused for `mode`)
  const T* vals;
  T* out;  ///< dims[mode] x R row-major, zeroed before the launch
  std::int64_t nnz;
  int order;
  int mode;
  int R;
  int hot_mode;  ///< l2 layout: the blocked input mode, read with an L2 evict-last hint
  /// 16-bit copies of the input factors the blocked kernel gathers instead (gather != full).
  const void* low[kMaxOrder];
  GatherPrecision gather;
};

/// Nonzeros per warp of a tile kernel launched over nnz nonzeros: max_tile, or fewer (a
/// multiple of step, at least one step) when that would leave fewer than two full waves of
/// warps on the device (warps_per_sm resident per SM). The gathers are latency-bound, so a
/// small tensor (congress: 2.86M nonzeros, 175 blocks of 2048-nonzero warps for 528 resident
/// blocks on an H100) needs more, shorter tiles to keep enough of them in flight; shorter
/// tiles add only boundary atomics (a tile's first and last rows).
int wave_tile(std::int64_t nnz, int warps_per_sm, int max_tile, int step);

/// The classic tile kernel over p (plain layout; kL2: the l2 layout, p.hot_mode read with
/// the evict-last hint; kAcc: stored rows are added to `out`, see group_pass in tiles.cu).
template <typename T, bool kL2, bool kAcc = false>
void launch_tiles(cudaStream_t stream, const MttkrpParams<T>& p);

/// The blocked kernel over p (blocked::supports must hold). l2: the l2 layout, whose
/// blocked mode `hint_mode` (-1: no hint) becomes input slot 0. accumulate (plain layout
/// only): rows inside one sub-tile are added to `out` (blocked::Params::accumulate).
template <typename T>
void launch_blocked(cudaStream_t stream, const MttkrpParams<T>& p, bool l2, int hint_mode,
                    bool accumulate = false);

/// The smem kernel over the smem copy of `plan` (work items built).
template <typename T>
void launch_smem(cudaStream_t stream, const MttkrpParams<T>& p, const ModePlan& plan,
                 const std::vector<std::uint64_t>& dims);

}  // namespace tessera::kernels::cuda::mttkrp_detail
