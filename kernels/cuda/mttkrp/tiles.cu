// CUDA MTTKRP: the tile kernels and their launches. The classic tile kernel (plain and l2
// layouts, and every shape the blocked kernel does not take), the smem kernel (smem
// layout), and the launch of the register-blocked kernel (blocked.cuh). The format, the
// write rule and the choice between the kernels: mttkrp.cu; the layouts: layout.cu.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cuda/mttkrp/blocked.cuh"
#include "kernels/cuda/mttkrp/internal.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

namespace {

// ---- vector access to factor rows ----
//
// A lane handles V consecutive columns (V = 16 / sizeof(T) when R is a multiple of V and
// every factor and output row is 16-byte aligned, else 1), so a group of 32 / V lanes
// covers a pass of 32 columns and a warp works on V nonzeros at once, each group on its
// own sub-tile. Index broadcasts (__shfl_sync with width 32 / V) and address arithmetic
// are shared by the V nonzeros, and each row is read with 16-byte loads.

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_global(const T* p) {
  Pack<T, V> r;
  if constexpr (V == 1) {
    r.v[0] = __ldg(p);
  } else if constexpr (std::is_same_v<T, float> && V == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
  } else {
    static_assert(std::is_same_v<T, double> && V == 2, "unsupported vector width");
    const double2 q = __ldg(reinterpret_cast<const double2*>(p));
    r.v[0] = q.x, r.v[1] = q.y;
  }
  return r;
}

/// L2 policy "evict last" for the whole access (PTX createpolicy, sm_80+).
__device__ __forceinline__ std::uint64_t evict_last_policy() {
  std::uint64_t pol;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_global_hint(const T* p, std::uint64_t pol) {
  Pack<T, V> r;
  if constexpr (std::is_same_v<T, float> && V == 1) {
    asm("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(r.v[0]) : "l"(p), "l"(pol));
  } else if constexpr (std::is_same_v<T, float> && V == 4) {
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(r.v[0]), "=f"(r.v[1]), "=f"(r.v[2]), "=f"(r.v[3])
        : "l"(p), "l"(pol));
  } else if constexpr (std::is_same_v<T, double> && V == 1) {
    asm("ld.global.nc.L2::cache_hint.f64 %0, [%1], %2;" : "=d"(r.v[0]) : "l"(p), "l"(pol));
  } else {
    static_assert(std::is_same_v<T, double> && V == 2, "unsupported vector width");
    asm("ld.global.nc.L2::cache_hint.v2.f64 {%0, %1}, [%2], %3;"
        : "=d"(r.v[0]), "=d"(r.v[1])
        : "l"(p), "l"(pol));
  }
  return r;
}

/// Adds (shared_row: with atomics; add: with a plain read and store) or stores the V
/// columns at `col` of output row `row`.
template <typename T, int V>
__device__ __forceinline__ void write_pack(T* out, index_t row, int R, int col, bool col_ok,
                                           const T (&acc)[V], bool shared_row, bool add) {
  if (!col_ok) return;
  T* p = out + static_cast<std::size_t>(row) * static_cast<std::size_t>(R) + col;
  if (shared_row) {
#pragma unroll
    for (int u = 0; u < V; ++u) atomicAdd(p + u, acc[u]);
  } else {
    Pack<T, V> q;
    if (add) q = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
    for (int u = 0; u < V; ++u) q.v[u] = add ? q.v[u] + acc[u] : acc[u];
    *reinterpret_cast<Pack<T, V>*>(p) = q;
  }
}

/// Where the tile loop reads factor rows: global memory (optionally one mode with an
/// L2 evict-last hint), or the shared-memory tile of the smem kernel.
template <typename T>
struct RowSource {
  const T* tile = nullptr;             ///< smem: the tile, 32 columns per row
  const std::uint32_t* lo = nullptr;   ///< smem: first global row of each mode's range
  const std::uint32_t* off = nullptr;  ///< smem: first tile row of each mode's range
  int hot_mode = -1;                   ///< global: the mode read with the hint
  std::uint64_t pol = 0;
};

/// One column pass of the tile loop for this lane's group: the group's nonzeros
/// [begin, begin + len) of the copy (len may be 0), `steps` batches of G = 32 / V (the
/// longest group's count, so every lane runs the same batches: the shuffles are
/// warp-wide). Finished rows are stored, or added with atomics when they may be shared:
/// always with kAllShared, else the group's first and last rows. kAcc: a stored row is
/// added to what `out` holds (read, add, store) instead (tier 3: earlier chunks' sums).
template <typename T, int V, bool kSmem, bool kAllShared, bool kAcc = false>
__device__ __forceinline__ void group_pass(const MttkrpParams<T>& p, const RowSource<T>& src,
                                           std::int64_t begin, std::int64_t len, std::int64_t steps,
                                           int c0, int gl) {
  constexpr int G = kWarp / V;
  const int col = c0 + gl * V;
  const bool col_ok = col < p.R;  // R % V == 0 when V > 1: the whole pack or nothing
  const index_t* rows = p.idx[p.mode];
  index_t cur = len > 0 ? __ldcs(rows + begin) : 0;
  bool cur_shared = true;  // the first row may continue from the previous sub-tile
  T acc[V];
#pragma unroll
  for (int u = 0; u < V; ++u) acc[u] = T(0);

  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t off = step * G;
    const std::int64_t rem = len - off;
    const int cnt = rem <= 0 ? 0 : (rem < G ? static_cast<int>(rem) : G);
    const std::int64_t k = begin + off + gl;
    const bool valid = gl < cnt;
    // Cooperative, coalesced loads: lane gl of the group holds its nonzero off + gl.
    const T my_val = valid ? __ldcs(p.vals + k) : T(0);
    const index_t my_row = valid ? __ldcs(rows + k) : 0;

    T prod[G][V];
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const T v = __shfl_sync(kFullMask, my_val, j, G);
#pragma unroll
      for (int u = 0; u < V; ++u) prod[j][u] = v;
    }
    for (int m = 0; m < p.order; ++m) {
      if (m == p.mode) continue;
      index_t my_c = valid ? __ldcs(p.idx[m] + k) : 0;
      if constexpr (kSmem) {
        if (valid) my_c -= src.lo[m];
        const T* S = src.tile + static_cast<std::size_t>(src.off[m]) * kWarp + gl * V;
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j, G);
          // Lanes past cnt read tile row 0 and multiply a zero.
          const Pack<T, V> a =
              *reinterpret_cast<const Pack<T, V>*>(S + static_cast<std::size_t>(cj) * kWarp);
#pragma unroll
          for (int u = 0; u < V; ++u) prod[j][u] *= a.v[u];
        }
      } else {
        const T* A = p.factors[m] + col;
        const bool hot = m == src.hot_mode;
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j, G);
          if (col_ok && j < cnt) {
            const T* a = A + static_cast<std::size_t>(cj) * static_cast<std::size_t>(p.R);
            const Pack<T, V> q = hot ? load_global_hint<T, V>(a, src.pol) : load_global<T, V>(a);
#pragma unroll
            for (int u = 0; u < V; ++u) prod[j][u] *= q.v[u];
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const index_t rj = __shfl_sync(kFullMask, my_row, j, G);
      if (j < cnt) {  // uniform within the group
        if (rj != cur) {
          write_pack<T, V>(p.out, cur, p.R, col, col_ok, acc, kAllShared || cur_shared, kAcc);
          cur = rj;
          cur_shared = false;
#pragma unroll
          for (int u = 0; u < V; ++u) acc[u] = T(0);
        }
#pragma unroll
        for (int u = 0; u < V; ++u) acc[u] += prod[j][u];
      }
    }
  }
  // The last row may continue in the next sub-tile.
  if (len > 0) write_pack<T, V>(p.out, cur, p.R, col, col_ok, acc, true, false);
}

/// The tile kernel (plain layout, and the l2 layout with kL2). Warp w owns the tile of
/// `tile` nonzeros at w tile (classic_tile: kTileNnz, less on small tensors), cut into V sub-tiles,
/// one per group of 32 / V lanes. The tensor's own arrays are read once, with the streaming hint
/// (__ldcs: evict first), so they do not push factor rows out of L2. kL2: the copy is ordered by
/// blocks of p.hot_mode's indices (plan_mode), whose rows are read with an evict-last hint so the
/// current block's rows stay in L2 while the other modes' rows stream past; an output row recurs in
/// every block, so every finished row is added with atomics. kAcc: see group_pass.
template <typename T, int V, bool kL2, bool kAcc = false>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp, kTileBlocksPerSm)
    mttkrp_tile_kernel(const __grid_constant__ MttkrpParams<T> p, int tile) {
  constexpr int G = kWarp / V;
  const std::int64_t sub = tile / V;  // tile: a multiple of kWarp, so sub is one of G
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int gl = lane % G, grp = lane / G;
  const std::int64_t warp =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x / kWarp);
  const std::int64_t wbegin = warp * tile;
  if (wbegin >= p.nnz) return;  // whole warp leaves together
  const std::int64_t begin = wbegin + grp * sub;
  const std::int64_t rest = p.nnz - begin;
  const std::int64_t len = rest <= 0 ? 0 : (rest < sub ? rest : sub);
  const std::int64_t wrest = p.nnz - wbegin;  // group 0's count sets the batches
  const std::int64_t steps = ((wrest < sub ? wrest : sub) + G - 1) / G;
  RowSource<T> src;
  if constexpr (kL2) {
    src.hot_mode = p.hot_mode;
    src.pol = evict_last_policy();
  }
  for (int c0 = 0; c0 < p.R; c0 += kWarp)
    group_pass<T, V, false, kL2, kAcc>(p, src, begin, len, steps, c0, gl);
}

/// Vector width of the kernels for this call: 16-byte packs when R allows and every
/// factor read and the output are 16-byte aligned.
template <typename T>
int vector_width(const MttkrpParams<T>& p) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  if (p.R % kV != 0) return 1;
  auto aligned = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  if (!aligned(p.out)) return 1;
  for (int m = 0; m < p.order; ++m)
    if (m != p.mode && !aligned(p.factors[m])) return 1;
  return kV;
}

/// Nonzeros per warp of the blocked kernel: the classic tile, in whole staging batches.
constexpr int kBlockedTile =
    std::max(blocked::kStage, kTileNnz / blocked::kStage * blocked::kStage);

}  // namespace

int wave_tile(std::int64_t nnz, int warps_per_sm, int max_tile, int step) {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::int64_t want = 2 * static_cast<std::int64_t>(std::max(sms, 1)) * warps_per_sm;
  if (nnz >= want * max_tile) return max_tile;
  const std::int64_t per = nnz / want / step * step;
  return static_cast<int>(std::clamp<std::int64_t>(per, step, max_tile));
}

namespace {

// ---- the smem kernel (the smem layout: see "Blocked layouts" in layout.cu) ----

constexpr int kSmemWarps = 16;
/// Factor rows each warp loads at once when it fills the shared-memory tile.
constexpr int kFillDepth = 8;

template <typename T>
struct SmemParams {
  MttkrpParams<T> p;
  BlockSpec b;  ///< every input mode, in slot order
  std::uint32_t in_dims[kMaxOrder];
  const WorkItem* items;
};

template <typename T, int V>
__global__ void __launch_bounds__(kSmemWarps* kWarp, 1)
    mttkrp_smem_kernel(const __grid_constant__ SmemParams<T> q) {
  constexpr int G = kWarp / V;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* tile = reinterpret_cast<T*>(smem_raw);
  // Per mode (indexed by mode, not slot): first global row and first tile row.
  __shared__ std::uint32_t s_lo[kMaxOrder], s_len[kMaxOrder], s_off[kMaxOrder];
  const MttkrpParams<T>& p = q.p;
  const int nin = q.b.nin;
  const WorkItem it = q.items[blockIdx.x];
  if (threadIdx.x == 0) {
    std::uint64_t b = it.block;
    for (int s = nin - 1; s >= 0; --s) {
      const auto c = static_cast<std::uint32_t>(b % q.b.nblk[s]);
      b /= q.b.nblk[s];
      const int m = q.b.in_mode[s];
      const std::uint32_t lo = c * q.b.rows[s];
      s_lo[m] = lo;
      s_len[m] = min(q.b.rows[s], q.in_dims[s] - lo);
    }
    std::uint32_t off = 0;
    for (int s = 0; s < nin; ++s) {
      s_off[q.b.in_mode[s]] = off;
      off += q.b.rows[s];
    }
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int gl = lane % G, grp = lane / G;
  // Each group takes a contiguous share of the item, so runs of an output row stay whole.
  const std::int64_t n = it.end - it.begin;
  constexpr int kParts = kSmemWarps * V;
  const int part = warp * V + grp;
  const std::int64_t begin = it.begin + n * part / kParts;
  const std::int64_t len = it.begin + n * (part + 1) / kParts - begin;
  const std::int64_t steps =
      (static_cast<std::int64_t>(__reduce_max_sync(kFullMask, static_cast<unsigned>(len))) + G -
       1) /
      G;
  RowSource<T> src;
  src.tile = tile;
  src.lo = s_lo;
  src.off = s_off;

  for (int c0 = 0; c0 < p.R; c0 += kWarp) {
    if (c0 > 0) __syncthreads();  // every warp is done with the previous columns
    for (int s = 0; s < nin; ++s) {
      const int m = q.b.in_mode[s];
      const T* A = p.factors[m] + c0 + lane;
      T* dst = tile + static_cast<std::size_t>(s_off[m]) * kWarp;
      const std::uint32_t lo = s_lo[m], len_m = s_len[m];
      const bool col_ok = c0 + lane < p.R;
      // kFillDepth rows per warp in flight: the fill is latency-bound otherwise.
      for (std::uint32_t r0 = static_cast<std::uint32_t>(warp); r0 < len_m;
           r0 += kSmemWarps * kFillDepth) {
        T v[kFillDepth];
#pragma unroll
        for (int u = 0; u < kFillDepth; ++u) {
          const std::uint32_t r = r0 + static_cast<std::uint32_t>(u * kSmemWarps);
          v[u] = (col_ok && r < len_m)
                     ? __ldg(A + static_cast<std::size_t>(lo + r) * static_cast<std::size_t>(p.R))
                     : T(0);
        }
#pragma unroll
        for (int u = 0; u < kFillDepth; ++u) {
          const std::uint32_t r = r0 + static_cast<std::uint32_t>(u * kSmemWarps);
          if (r < len_m) dst[static_cast<std::size_t>(r) * kWarp + lane] = v[u];
        }
      }
    }
    __syncthreads();
    group_pass<T, V, true, true>(p, src, begin, len, steps, c0, gl);
  }
}

}  // namespace

template <typename T, bool kL2, bool kAcc>
void launch_tiles(cudaStream_t stream, const MttkrpParams<T>& p) {
  // kripke's 9-mode tensor (31,924 nonzeros) in 2048-nonzero tiles ran on 16 warps: 0.35 ms
  // per mode, 0.05 ms in tiles sized to the GPU (docs/perf/gpu-h200-floors.md).
  const int tile = wave_tile(p.nnz, kTileBlocksPerSm * kWarpsPerBlock, kTileNnz, kWarp);
  const std::int64_t tiles = (p.nnz + tile - 1) / tile;
  const std::int64_t blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  if (vector_width(p) == kV)
    mttkrp_tile_kernel<T, kV, kL2, kAcc>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(p, tile);
  else
    mttkrp_tile_kernel<T, 1, kL2, kAcc>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(p, tile);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_blocked(cudaStream_t stream, const MttkrpParams<T>& p, bool l2, int hint_mode,
                    bool accumulate) {
  blocked::Params<T> q;
  q.rows = p.idx[p.mode];
  int nin = 0;
  auto add = [&](int m) {
    q.in_idx[nin] = p.idx[m];
    q.in_fac[nin] = p.factors[m];
    q.in_low[nin] = p.low[m];
    ++nin;
  };
  q.gather = accumulate ? GatherPrecision::full : p.gather;
  const bool hint = l2 && hint_mode >= 0 && hint_mode != p.mode;
  if (hint) add(hint_mode);
  for (int m = 0; m < p.order; ++m)
    if (m != p.mode && !(hint && m == hint_mode)) add(m);
  q.vals = p.vals;
  q.out = p.out;
  q.nnz = p.nnz;
  q.R = p.R;
  int lanes = p.R / blocked::kVec<T>;
  while (lanes > 1) {
    lanes /= 2;
    ++q.log_lanes;
  }
  q.tile = wave_tile(p.nnz, blocked::kBlocksPerSm * blocked::kWarpsPerBlock, kBlockedTile,
                     blocked::kStage);
  q.hint = hint;
  q.accumulate = accumulate;
  auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  q.aligned16 = aligned(q.rows) && aligned(q.vals);
  for (int s = 0; s < nin; ++s) q.aligned16 = q.aligned16 && aligned(q.in_idx[s]);
  blocked::launch(stream, q, nin, l2);
}

template <typename T>
void launch_smem(cudaStream_t stream, const MttkrpParams<T>& p, const ModePlan& plan,
                 const std::vector<std::uint64_t>& dims) {
  SmemParams<T> q{};
  q.p = p;
  q.b = plan.spec;
  for (int s = 0; s < plan.spec.nin; ++s)
    q.in_dims[s] = static_cast<std::uint32_t>(dims[static_cast<std::size_t>(plan.spec.in_mode[s])]);
  q.items = static_cast<const WorkItem*>(plan.item_buf.get());
  const std::size_t smem = static_cast<std::size_t>(plan.tile_rows) * kWarp * sizeof(T);
  TESSERA_EXPECTS(plan.items <= std::numeric_limits<int>::max(), "too many work items");
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  // The tile's rows are 32 columns (16-byte aligned); only R and the output decide.
  const bool vec = p.R % kV == 0 && reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0;
  auto launch = [&](auto kernel) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    kernel<<<static_cast<unsigned>(plan.items), kSmemWarps * kWarp, smem, stream>>>(q);
  };
  if (vec)
    launch(mttkrp_smem_kernel<T, kV>);
  else
    launch(mttkrp_smem_kernel<T, 1>);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template void launch_tiles<float, false, false>(cudaStream_t, const MttkrpParams<float>&);
template void launch_tiles<float, true, false>(cudaStream_t, const MttkrpParams<float>&);
template void launch_tiles<float, false, true>(cudaStream_t, const MttkrpParams<float>&);
template void launch_tiles<double, false, false>(cudaStream_t, const MttkrpParams<double>&);
template void launch_tiles<double, true, false>(cudaStream_t, const MttkrpParams<double>&);
template void launch_tiles<double, false, true>(cudaStream_t, const MttkrpParams<double>&);
template void launch_blocked<float>(cudaStream_t, const MttkrpParams<float>&, bool, int, bool);
template void launch_blocked<double>(cudaStream_t, const MttkrpParams<double>&, bool, int, bool);
template void launch_smem<float>(cudaStream_t, const MttkrpParams<float>&, const ModePlan&,
                                 const std::vector<std::uint64_t>&);
template void launch_smem<double>(cudaStream_t, const MttkrpParams<double>&, const ModePlan&,
                                  const std::vector<std::uint64_t>&);

}  // namespace tessera::kernels::cuda::mttkrp_detail
