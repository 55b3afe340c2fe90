// Building the tensor-core hybrid layout of each mode (hybrid.cuh), on the device, from the
// tier-1 sorted copy of the mode. Per mode n and candidate tile mode j != n:
//   1. key[k] = (i_n / 16, i_j / 16, every other index) packed into 64 bits (block of i_n
//      in the top bits), pos[k] = k; candidates whose key needs more than 64 bits are
//      skipped;
//   2. CUB radix sort of (key, pos), then run-length encoding: one run per tile;
//   3. the tiles: runs of at least ceil(tc_tile_density * 256) nonzeros.
// The candidate with the most nonzeros in tiles wins (ties: the lower mode). For it, one
// thread per tile run scatters its nonzeros into the dense 16 x 16 tile (in sorted order,
// so duplicates add up the same way every time) and clears their flag; the unflagged
// nonzeros, in the copy's order (sorted by i_n when the copy's layout is not plain), are
// gathered into the rest copy; the tiles' row blocks are cut into segments on the host.
// Temporary device memory: 2 x 8 (keys) + 2 x 4 (positions) + 1 (flags) bytes per nonzero
// plus CUB's storage (the run counts, offsets and tile ids reuse the key buffers); a mode is
// skipped, with the reason, where this and the result do not fit the limit.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/discard_iterator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/mttkrp/hybrid.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {
namespace {

/// Only a mode with at least this share of its nonzeros in tiles gets a hybrid layout
/// under --tensor-cores auto (under on: any tile).
constexpr double kAutoMinFraction = 0.05;

struct KeyLayout {
  int n = 0, j = 0, order = 0;
  int shift[kMaxOrder] = {};  ///< bit position of each mode's field
  int end_bit = 0;
  bool fits = false;
};

KeyLayout key_layout(const std::vector<std::uint64_t>& dims, int n, int j) {
  KeyLayout k;
  k.n = n;
  k.j = j;
  k.order = static_cast<int>(dims.size());
  auto field_bits = [&](int m) {
    const std::uint64_t d = (m == n || m == j) ? (dims[static_cast<std::size_t>(m)] + 15) / 16
                                               : dims[static_cast<std::size_t>(m)];
    return index_bits(d);
  };
  // Lowest bits first: the other modes (last mode lowest), then j, then n on top.
  int bit = 0;
  for (int m = k.order - 1; m >= 0; --m) {
    if (m == n || m == j) continue;
    k.shift[m] = bit;
    bit += field_bits(m);
  }
  k.shift[j] = bit;
  bit += field_bits(j);
  k.shift[n] = bit;
  bit += field_bits(n);
  k.end_bit = bit;
  k.fits = bit <= 64;
  return k;
}

struct KeyArgs {
  const index_t* idx[kMaxOrder];
  std::int64_t n;
  KeyLayout key;
};

__global__ void make_tile_keys(const __grid_constant__ KeyArgs a, std::uint64_t* keys,
                               std::uint32_t* pos) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < a.n;
       k += stride) {
    std::uint64_t key = 0;
    for (int m = 0; m < a.key.order; ++m) {
      std::uint64_t v = a.idx[m][k];
      if (m == a.key.n || m == a.key.j) v /= 16;
      key |= v << a.key.shift[m];
    }
    keys[k] = key;
    pos[k] = static_cast<std::uint32_t>(k);
  }
}

__global__ void count_tiles(const std::uint32_t* counts, const int* runs, std::uint32_t min_nnz,
                            unsigned long long* tiles, unsigned long long* tile_nnz) {
  const int r_end = *runs;
  unsigned long long t = 0, z = 0;
  for (int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); r < r_end;
       r += static_cast<int>(gridDim.x * blockDim.x))
    if (counts[r] >= min_nnz) {
      ++t;
      z += counts[r];
    }
  if (t) {
    atomicAdd(tiles, t);
    atomicAdd(tile_nnz, z);
  }
}

__global__ void flag_tile_runs(const std::uint32_t* counts, const int* runs, std::uint32_t min_nnz,
                               std::uint32_t* flag) {
  const int r_end = *runs;
  for (int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); r < r_end;
       r += static_cast<int>(gridDim.x * blockDim.x))
    flag[r] = counts[r] >= min_nnz ? 1u : 0u;
}

template <typename T>
struct FillArgs {
  const index_t* idx[kMaxOrder];
  const T* vals;
  const std::uint32_t* pos;      ///< sorted positions
  const std::uint32_t* counts;   ///< per run
  const std::uint32_t* offset;   ///< per run: first sorted position
  const std::uint32_t* tile_id;  ///< per run: exclusive scan of the tile flags
  const int* runs;
  std::uint32_t min_nnz;
  int order, n, j;
  T* tile_vals;
  index_t* meta;  ///< tiles x (order - 1)
  std::uint32_t* tile_ib;
  unsigned char* rest;  ///< per nonzero: 1 = rest, cleared for tile nonzeros
};

template <typename T>
__global__ void fill_tiles(const __grid_constant__ FillArgs<T> a) {
  const int r_end = *a.runs;
  for (int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); r < r_end;
       r += static_cast<int>(gridDim.x * blockDim.x)) {
    const std::uint32_t cnt = a.counts[r];
    if (cnt < a.min_nnz) continue;
    const std::uint32_t t = a.tile_id[r];
    const std::uint32_t first = a.pos[a.offset[r]];
    a.tile_ib[t] = a.idx[a.n][first] / 16;
    index_t* meta = a.meta + static_cast<std::size_t>(t) * static_cast<std::size_t>(a.order - 1);
    meta[0] = a.idx[a.j][first] / 16;
    int s = 1;
    for (int m = 0; m < a.order; ++m)
      if (m != a.n && m != a.j) meta[s++] = a.idx[m][first];
    T* tile = a.tile_vals + static_cast<std::size_t>(t) * 256;
    for (std::uint32_t e = 0; e < cnt; ++e) {
      const std::uint32_t p = a.pos[a.offset[r] + e];
      tile[(a.idx[a.n][p] % 16) * 16 + a.idx[a.j][p] % 16] += a.vals[p];
      a.rest[p] = 0;
    }
  }
}

__global__ void gather_keys(const index_t* idx, const std::uint32_t* pos, std::int64_t n,
                            std::uint32_t* key) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride)
    key[k] = idx[pos[k]];
}

template <typename T>
struct RestArgs {
  const index_t* src_idx[kMaxOrder];
  const T* src_vals;
  const std::uint32_t* pos;
  std::int64_t n;  ///< rest nonzeros
  int order;
  index_t* dst_idx;
  T* dst_vals;
};

template <typename T>
__global__ void gather_rest(const __grid_constant__ RestArgs<T> a) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const auto n = static_cast<std::size_t>(a.n);
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < a.n;
       k += stride) {
    const std::uint32_t p = a.pos[k];
    for (int m = 0; m < a.order; ++m)
      a.dst_idx[static_cast<std::size_t>(m) * n + static_cast<std::size_t>(k)] = a.src_idx[m][p];
    a.dst_vals[k] = a.src_vals[p];
  }
}

/// Device scratch of one build, allocated once for the largest candidate.
struct Scratch {
  DeviceMemory keys[2], pos[2], runs, sums, temp;
};

/// Sorted tile runs of candidate `key` over the copy of mode n (n nonzeros).
struct Runs {
  std::uint32_t* pos = nullptr;     ///< sorted positions
  std::uint32_t* counts = nullptr;  ///< per run (in the key buffer the sort left free)
  std::uint64_t* spare = nullptr;   ///< the other key buffer (the sorted keys), free now
  int runs = 0;
  std::uint64_t tiles = 0, tile_nnz = 0;
};

template <typename T>
Runs sort_runs(Context& ctx, const CudaTensorHandle<T>& h, const KeyLayout& key,
               std::uint32_t min_nnz, Scratch& s) {
  const auto n = static_cast<int>(h.nnz());
  KeyArgs a{};
  for (int m = 0; m < key.order; ++m) a.idx[m] = h.idx(key.n, m);
  a.n = n;
  a.key = key;
  auto* k0 = static_cast<std::uint64_t*>(s.keys[0].get());
  auto* k1 = static_cast<std::uint64_t*>(s.keys[1].get());
  auto* p0 = static_cast<std::uint32_t*>(s.pos[0].get());
  auto* p1 = static_cast<std::uint32_t*>(s.pos[1].get());
  make_tile_keys<<<grid_for(n), kBlock, 0, ctx.stream>>>(a, k0, p0);
  TESSERA_CUDA_CHECK_LAUNCH();
  cub::DoubleBuffer<std::uint64_t> dk(k0, k1);
  cub::DoubleBuffer<std::uint32_t> dp(p0, p1);
  std::size_t tb = s.temp.bytes();
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp.get(), tb, dk, dp, n, 0,
                                                     std::max(key.end_bit, 1), ctx.stream));
  tb = s.temp.bytes();
  // The counts go to the key buffer the sort left free; the unique keys are not kept.
  auto* counts = reinterpret_cast<std::uint32_t*>(dk.Current() == k0 ? k1 : k0);
  TESSERA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(
      s.temp.get(), tb, dk.Current(), thrust::make_discard_iterator(), counts,
      static_cast<int*>(s.runs.get()), n, ctx.stream));
  auto* sums = static_cast<unsigned long long*>(s.sums.get());
  TESSERA_CUDA_CHECK(cudaMemsetAsync(sums, 0, 2 * sizeof(unsigned long long), ctx.stream));
  count_tiles<<<grid_for(n, 1024), kBlock, 0, ctx.stream>>>(
      counts, static_cast<const int*>(s.runs.get()), min_nnz, sums, sums + 1);
  TESSERA_CUDA_CHECK_LAUNCH();
  unsigned long long host[2] = {0, 0};
  int runs = 0;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host, sums, sizeof(host), cudaMemcpyDeviceToHost, ctx.stream));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&runs, s.runs.get(), sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  Runs r;
  r.pos = dp.Current();
  r.counts = counts;
  r.spare = dk.Current();
  r.runs = runs;
  r.tiles = host[0];
  r.tile_nnz = host[1];
  return r;
}

/// CUB temporary bytes for n items (the largest of the calls made on the scratch).
std::size_t cub_temp_bytes(int n, int end_bit, cudaStream_t stream) {
  std::size_t a = 0, b = 0, c = 0, d = 0, e = 0;
  cub::DoubleBuffer<std::uint64_t> dk(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> dp(nullptr, nullptr);
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, a, dk, dp, n, 0, end_bit, stream));
  TESSERA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(
      nullptr, b, static_cast<const std::uint64_t*>(nullptr), thrust::make_discard_iterator(),
      static_cast<std::uint32_t*>(nullptr), static_cast<int*>(nullptr), n, stream));
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, c, static_cast<std::uint32_t*>(nullptr),
                                                   static_cast<std::uint32_t*>(nullptr), n,
                                                   stream));
  TESSERA_CUDA_CHECK(cub::DeviceSelect::Flagged(
      nullptr, d, thrust::counting_iterator<std::uint32_t>(0),
      static_cast<const unsigned char*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<int*>(nullptr), n, stream));
  cub::DoubleBuffer<std::uint32_t> k32(nullptr, nullptr);
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, e, k32, dp, n, 0, 32, stream));
  return std::max({a, b, c, d, e, std::size_t(1)});
}

std::string percent(double f) {
  std::ostringstream os;
  os.precision(3);
  os << 100 * f << "%";
  return os.str();
}

/// Builds mode n's layout, or returns null and sets `why`.
template <typename T>
std::unique_ptr<HybridMode<T>> build_mode(Context& ctx, const CudaTensorHandle<T>& h, int n,
                                          std::size_t room, bool automatic, std::string& why) {
  const auto t_start = std::chrono::steady_clock::now();
  const int N = h.order();
  const auto& dims = h.dims();
  const nnz_t nnz = h.nnz();
  // A tile qualifies with tc_tile_density of the slots it can have: 16 x 16, or fewer where
  // a mode is shorter than 16 (a 7 x 16 tile of a 7-row mode has 112 slots).
  const double density = ctx.tuning.tc_tile_density;
  auto min_nnz_of = [&](int j) {
    const double slots = static_cast<double>(std::min<std::uint64_t>(dims[n], 16)) *
                         static_cast<double>(std::min<std::uint64_t>(dims[j], 16));
    return static_cast<std::uint32_t>(std::max(1.0, std::ceil(density * slots - 1e-9)));
  };
  if (nnz > std::numeric_limits<int>::max()) {
    why = "more than 2^31 - 1 nonzeros";
    return nullptr;
  }
  const auto nz = static_cast<std::size_t>(nnz);
  std::vector<KeyLayout> cands;
  for (int j = 0; j < N; ++j)
    if (j != n && key_layout(dims, n, j).fits) cands.push_back(key_layout(dims, n, j));
  if (cands.empty()) {
    why = "the tile keys need more than 64 bits";
    return nullptr;
  }
  const std::size_t temp = cub_temp_bytes(static_cast<int>(nnz), 64, ctx.stream);
  // Two key and two position buffers (the counts, offsets and flags reuse the key buffers)
  // and the rest flags: 25 bytes per nonzero, about the device sort's transient.
  const std::size_t peak =
      nz * (2 * sizeof(std::uint64_t) + 2 * sizeof(std::uint32_t) + 1) + temp + 64;
  if (peak > room) {
    why = "the build needs " + std::to_string(peak) + " bytes of device memory, " +
          std::to_string(room) + " are left under the limit";
    return nullptr;
  }
  Scratch s;
  bool ok = true;
  for (int b = 0; b < 2; ++b) {
    ok = ok && s.keys[b].try_reserve(nz * sizeof(std::uint64_t)) == cudaSuccess;
    ok = ok && s.pos[b].try_reserve(nz * sizeof(std::uint32_t)) == cudaSuccess;
  }
  ok = ok && s.runs.try_reserve(64) == cudaSuccess;
  ok = ok && s.sums.try_reserve(64) == cudaSuccess;
  ok = ok && s.temp.try_reserve(temp) == cudaSuccess;
  if (!ok) {
    why = "the build's " + std::to_string(peak) + " bytes failed to allocate";
    return nullptr;
  }
  // The candidate tile mode with the most nonzeros in tiles.
  int best = -1;
  Runs best_runs;
  for (std::size_t c = 0; c < cands.size(); ++c) {
    const Runs r = sort_runs(ctx, h, cands[c], min_nnz_of(cands[c].j), s);
    if (best < 0 || r.tile_nnz > best_runs.tile_nnz) {
      best = static_cast<int>(c);
      best_runs = r;
    }
  }
  const double fraction = static_cast<double>(best_runs.tile_nnz) / static_cast<double>(nnz);
  if (best_runs.tiles == 0) {
    why = "no 16 x 16 tile reaches --tc-tile-density " + std::to_string(density);
    return nullptr;
  }
  if (automatic && fraction < kAutoMinFraction) {
    why = "only " + percent(fraction) + " of the nonzeros lie in dense tiles (auto needs " +
          percent(kAutoMinFraction) + ")";
    return nullptr;
  }
  const KeyLayout key = cands[static_cast<std::size_t>(best)];
  const std::uint32_t min_nnz = min_nnz_of(key.j);
  // The winner's runs again (the scratch holds the last candidate's).
  if (static_cast<std::size_t>(best) != cands.size() - 1)
    best_runs = sort_runs(ctx, h, key, min_nnz, s);

  auto hy = std::make_unique<HybridMode<T>>();
  hy->mode = n;
  hy->tile_mode = key.j;
  hy->tiles = best_runs.tiles;
  hy->tile_nnz = best_runs.tile_nnz;
  hy->rest_nnz = nnz - static_cast<nnz_t>(best_runs.tile_nnz);
  const auto tiles = static_cast<std::size_t>(hy->tiles);
  const auto rest_n = static_cast<std::size_t>(hy->rest_nnz);
  const std::size_t result =
      tiles * (256 * sizeof(T) + static_cast<std::size_t>(N - 1) * sizeof(index_t)) +
      block_bytes<T>(N, rest_n) + tiles * 4 * sizeof(std::uint32_t);
  if (automatic && ctx.rank_hint > 0) {
    // The run's R is known: auto's choice (choose_hybrid in mttkrp.cu) made now, so that
    // no tile set is built, and held in device memory, that auto would then decline.
    const double predicted = tc_predicted_speedup(nnz, hy->rest_nnz, hy->tiles, ctx.rank_hint,
                                                  tc_precision_of<T>(ctx.tuning));
    if (predicted < kAutoMinSpeedup) {
      std::ostringstream os;
      os.precision(4);  // 1.149 < 1.15 reads as such (3 digits would print 1.15 < 1.15)
      os << "auto at R " << ctx.rank_hint << ": predicted speedup " << predicted << " < "
         << kAutoMinSpeedup << ", no tile set built";
      why = os.str();
      return nullptr;
    }
  }
  if (peak + result > room) {
    why = "the layout (" + std::to_string(result) + " bytes) and its build do not fit the " +
          std::to_string(room) + " bytes left under the limit";
    return nullptr;
  }
  DeviceMemory tile_ib, rest_flag;
  ok =
      hy->tile_vals.try_reserve(std::max<std::size_t>(tiles * 256 * sizeof(T), 1)) == cudaSuccess &&
      hy->tile_meta.try_reserve(std::max<std::size_t>(
          tiles * static_cast<std::size_t>(N - 1) * sizeof(index_t), 1)) == cudaSuccess &&
      tile_ib.try_reserve(tiles * sizeof(std::uint32_t)) == cudaSuccess &&
      rest_flag.try_reserve(nz) == cudaSuccess &&
      hy->rest.try_reserve(std::max<std::size_t>(block_bytes<T>(N, rest_n), 1)) == cudaSuccess;
  if (!ok) {
    why = "the layout (" + std::to_string(result) + " bytes) failed to allocate";
    return nullptr;
  }
  const int runs = best_runs.runs;
  // Offsets and tile ids of the runs: keys[0] and keys[1] are free now (the sorted
  // positions are in pos[]).
  auto* offset = reinterpret_cast<std::uint32_t*>(best_runs.spare);
  auto* tile_id = offset + nz;         // the spare key buffer holds 2 nz uint32
  auto* flag = best_runs.counts + nz;  // behind the counts, in the other key buffer
  std::size_t tb = s.temp.bytes();
  TESSERA_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(s.temp.get(), tb, best_runs.counts, offset, runs, ctx.stream));
  flag_tile_runs<<<grid_for(runs), kBlock, 0, ctx.stream>>>(
      best_runs.counts, static_cast<const int*>(s.runs.get()), min_nnz, flag);
  TESSERA_CUDA_CHECK_LAUNCH();
  tb = s.temp.bytes();
  TESSERA_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(s.temp.get(), tb, flag, tile_id, runs, ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(hy->tile_vals.get(), 0, tiles * 256 * sizeof(T), ctx.stream));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(rest_flag.get(), 1, nz, ctx.stream));
  FillArgs<T> f{};
  for (int m = 0; m < N; ++m) f.idx[m] = h.idx(n, m);
  f.vals = h.vals(n);
  f.pos = best_runs.pos;
  f.counts = best_runs.counts;
  f.offset = offset;
  f.tile_id = tile_id;
  f.runs = static_cast<const int*>(s.runs.get());
  f.min_nnz = min_nnz;
  f.order = N;
  f.n = n;
  f.j = key.j;
  f.tile_vals = static_cast<T*>(hy->tile_vals.get());
  f.meta = static_cast<index_t*>(hy->tile_meta.get());
  f.tile_ib = static_cast<std::uint32_t*>(tile_ib.get());
  f.rest = static_cast<unsigned char*>(rest_flag.get());
  fill_tiles<T><<<grid_for(runs), kBlock, 0, ctx.stream>>>(f);
  TESSERA_CUDA_CHECK_LAUNCH();

  // The rest: positions of the unflagged nonzeros, in the copy's order ...
  auto* rest_pos = static_cast<std::uint32_t*>(s.pos[0].get()) == best_runs.pos
                       ? static_cast<std::uint32_t*>(s.pos[1].get())
                       : static_cast<std::uint32_t*>(s.pos[0].get());
  auto* selected = static_cast<int*>(s.sums.get());
  tb = s.temp.bytes();
  TESSERA_CUDA_CHECK(
      cub::DeviceSelect::Flagged(s.temp.get(), tb, thrust::counting_iterator<std::uint32_t>(0),
                                 static_cast<const unsigned char*>(rest_flag.get()), rest_pos,
                                 selected, static_cast<int>(nnz), ctx.stream));
  // ... sorted by i_n where the copy is not (a stable sort keeps the copy's order within a row).
  if (h.plan(n).layout != Layout::plain && rest_n > 0) {
    auto* k32 = reinterpret_cast<std::uint32_t*>(best_runs.spare);  // 2 nz uint32, free now
    auto* other = best_runs.pos;                                    // free now
    gather_keys<<<grid_for(static_cast<std::int64_t>(rest_n)), kBlock, 0, ctx.stream>>>(
        h.idx(n, n), rest_pos, static_cast<std::int64_t>(rest_n), k32);
    TESSERA_CUDA_CHECK_LAUNCH();
    cub::DoubleBuffer<std::uint32_t> dk(k32, k32 + nz);
    cub::DoubleBuffer<std::uint32_t> dp(rest_pos, other);
    tb = s.temp.bytes();
    TESSERA_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(s.temp.get(), tb, dk, dp, static_cast<int>(rest_n), 0,
                                        std::max(index_bits(dims[n]), 1), ctx.stream));
    rest_pos = dp.Current();
  }
  if (rest_n > 0) {
    RestArgs<T> g{};
    for (int m = 0; m < N; ++m) g.src_idx[m] = h.idx(n, m);
    g.src_vals = h.vals(n);
    g.pos = rest_pos;
    g.n = static_cast<std::int64_t>(rest_n);
    g.order = N;
    g.dst_idx = static_cast<index_t*>(hy->rest.get());
    g.dst_vals =
        reinterpret_cast<T*>(static_cast<char*>(hy->rest.get()) + values_offset(N, rest_n));
    gather_rest<T><<<grid_for(g.n), kBlock, 0, ctx.stream>>>(g);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  // Segments: the tiles are in key order, so each row block's tiles are consecutive.
  std::vector<std::uint32_t> ib(tiles);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(ib.data(), tile_ib.get(), tiles * sizeof(std::uint32_t),
                                     cudaMemcpyDeviceToHost, ctx.stream));
  int selected_host = 0;
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(&selected_host, selected, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  TESSERA_EXPECTS(static_cast<std::size_t>(selected_host) == rest_n,
                  "hybrid build: " << selected_host << " rest nonzeros, expected " << rest_n);
  std::vector<std::uint32_t> seg;
  for (std::size_t t = 0; t < tiles;) {
    std::size_t e = t;
    while (e < tiles && ib[e] == ib[t]) ++e;
    const std::size_t pieces = (e - t + kTcSegmentTiles - 1) / kTcSegmentTiles;
    for (std::size_t p = 0; p < pieces; ++p) {
      const std::size_t a = t + (e - t) * p / pieces, b = t + (e - t) * (p + 1) / pieces;
      seg.insert(seg.end(), {static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b), ib[t],
                             pieces > 1 ? 1u : 0u});
    }
    t = e;
  }
  hy->segments = seg.size() / 4;
  hy->seg.reserve(std::max<std::size_t>(seg.size() * sizeof(std::uint32_t), 1));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(hy->seg.get(), seg.data(), seg.size() * sizeof(std::uint32_t),
                                     cudaMemcpyHostToDevice, ctx.stream));
  ctx.sync();
  hy->build_seconds = seconds_since(t_start);
  return hy;
}

}  // namespace

template <typename T>
void build_hybrid(Context& ctx, CudaTensorHandle<T>& h, std::size_t limit,
                  const std::function<std::size_t()>& free_room) {
  const int N = h.order();
  const bool automatic = ctx.tuning.tensor_cores == TensorCores::automatic;
  for (int n = 0; n < N; ++n) {
    std::string why;
    const std::size_t used = h.bytes();  // the copies and the hybrids built so far
    const std::size_t room = std::min(limit > used ? limit - used : 0, free_room());
    const auto t0 = std::chrono::steady_clock::now();
    auto hy = build_mode(ctx, h, n, room, automatic, why);
    std::ostringstream os;
    os.precision(3);
    if (hy)
      os << "built in " << hy->build_seconds << " s";
    else
      os << why << "; searched in " << seconds_since(t0) << " s";
    why = os.str();
    h.set_hybrid(n, std::move(hy), why);
  }
}

template void build_hybrid<float>(Context&, CudaTensorHandle<float>&, std::size_t,
                                  const std::function<std::size_t()>&);
template void build_hybrid<double>(Context&, CudaTensorHandle<double>&, std::size_t,
                                   const std::function<std::size_t()>&);

}  // namespace tessera::kernels::cuda::mttkrp_detail
