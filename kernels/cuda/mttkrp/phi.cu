// CP-APR's Phi on the cuda backend (ops::poisson_phi, kernels/ops/apr.hpp): for each row i
// of `mode`, Phi_i = sum over its stored entries x_k of (x_k / max(m_k, eps)) h_k, h_k the
// Hadamard product of the other factors' rows and m_k = <b_i, h_k>; with the sums
// sum x_k log(max(m_k, eps)) and sum x_k m_k in double.
//
// Two kernels, chosen as the MTTKRP chooses (`--mttkrp-kernel`):
//
// The blocked Phi kernel (orders 3-6, R / V a power of two up to 32 lanes, aligned factors:
// blocked::supports) is the register-blocked MTTKRP kernel of blocked.cuh with two steps
// added: its warp tiles, slots of L = R / V lanes with V = 16 / sizeof(T) columns each,
// cp.async staging and 4 nonzeros per lane step. Per step a lane gathers, all in flight at
// once, the 4 rows of B at the output coordinates and the 4 rows of every input mode (16
// bytes each), forms h_k, the partial dots <b_i, h_k> of its V columns, sums them over the
// slot's L lanes with log2(L) shuffles (4 nonzeros per shuffle), and adds
// (x_k / max(m_k, eps)) h_k to its row registers. Every finished row is added with
// atomics, so any order of the copy gives the same sums (plain, l2 and smem layouts, tier-2
// chunks). The two sums are kept by lane 0 of each slot and added per warp.
//
// The classic Phi kernel (every other shape, and `--mttkrp-kernel classic`): one warp per tile of
// consecutive nonzeros of the copy sorted by `mode` (wave_tile); lane l owns columns c = l + 32 q,
// q < Q (R <= 32 Q, Q in {1, 2, 4, 8}):
//   - a batch of 32 nonzeros: lane j loads nonzero j's row, value and input coordinates
//     (coalesced), the coordinates into shared memory;
//   - a sub-batch of KB of them (KB = 8, 8, 4, 2 for Q = 1, 2, 4, 8): per input mode the warp
//   gathers
//     their KB rows, all in flight at once (unrolled), and multiplies them into h (KB x Q
//     registers; columns >= R stay 0); then it gathers the rows of B = factors[mode] and
//     forms the KB dots m_k = <b_i, h_k>, reduced over the warp by a butterfly;
//   - w = x / max(m, eps) per nonzero (in double), and w h is added to Q registers per lane
//     while the row stays the same; when it changes, and at the end of the tile, the lanes
//     add them to `out` (zeroed first) with atomics. So the result does not depend on the
//     layout of the copy (plain, l2 or smem order, tier-2 chunks), only on the nonzeros;
//   - lane 0 accumulates the two sums in double; a block reduces them in shared memory and
//     adds them to a device pair with two double atomics, copied to the host at the end.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cuda/mttkrp/handle.cuh"
#include "kernels/cuda/mttkrp/internal.cuh"
#include "kernels/cuda/runtime/backend.cuh"
#include "kernels/ops/apr.hpp"

namespace tessera::kernels::cuda {

using namespace mttkrp_detail;

namespace {

constexpr int kPhiWarps = 4;  ///< warps per block
/// Resident warps per SM that wave_tile counts on (the registers of Q = 8 allow about this).
constexpr int kPhiWarpsPerSm = 32;
/// Nonzeros per warp tile, at most (fewer on small tensors: wave_tile).
constexpr int kPhiTile = kTileNnz;
/// Largest rank: 32 Q columns with Q = 8.
constexpr int kPhiMaxR = 8 * kWarp;

struct PhiParams {
  const index_t* idx[kMaxOrder];   ///< coordinate arrays of the copy sorted by `mode`
  const void* vals;                ///< its values
  const void* factors[kMaxOrder];  ///< every mode's, factors[mode] = B included
  void* out;                       ///< dims[mode] x R, zeroed; nullptr: only the sums
  double* sums;                    ///< device [2]; nullptr: no sums
  double eps;
  std::int64_t nnz;
  int order;
  int mode;
  int R;
  int tile;
};

/// Nonzeros per sub-batch, KB: KB x Q registers of h, as many gathers in flight per lane
/// and mode (16 from Q = 2 on; more would cost occupancy: ptxas -v at Q = 8 in double).
template <int Q>
constexpr int phi_batch() {
  return Q <= 2 ? 8 : 16 / Q;
}

template <typename T, int Q>
__global__ void __launch_bounds__(kPhiWarps* kWarp)
    phi_kernel(const __grid_constant__ PhiParams p) {
  constexpr int KB = phi_batch<Q>();
  static_assert(kWarp % KB == 0, "a batch of 32 nonzeros is whole sub-batches");
  __shared__ index_t coords[kPhiWarps][kMaxOrder][kWarp];  // a batch's input coordinates
  __shared__ double red[kPhiWarps][2];
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const int wib = static_cast<int>(threadIdx.x) / kWarp;
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * kPhiWarps + wib;
  const std::int64_t begin = warp * p.tile;
  const int R = p.R;
  const auto stride = static_cast<std::size_t>(R);
  T* const out = static_cast<T*>(p.out);
  const T* const vals = static_cast<const T*>(p.vals);
  const T* const B = static_cast<const T*>(p.factors[p.mode]) + lane;
  bool col_ok[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) col_ok[q] = lane + q * kWarp < R;
  double sum_log = 0.0, sum_xm = 0.0;  // lane 0's

  if (begin < p.nnz) {  // not a return: the block reduction below needs every warp
    const std::int64_t end = begin + p.tile < p.nnz ? begin + p.tile : p.nnz;
    T acc[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) acc[q] = T(0);
    std::int64_t cur = -1;
    auto flush = [&]() {
      if (cur >= 0) {
        T* o = out + static_cast<std::size_t>(cur) * stride + lane;
#pragma unroll
        for (int q = 0; q < Q; ++q)
          if (col_ok[q]) atomicAdd(o + q * kWarp, acc[q]);
      }
#pragma unroll
      for (int q = 0; q < Q; ++q) acc[q] = T(0);
    };

    for (std::int64_t s = begin; s < end; s += kWarp) {
      // A batch of 32 nonzeros: lane j loads nonzero j's row, value and input coordinates
      // (coalesced, all independent); the coordinates go to shared memory, so the gathers
      // of each sub-batch below wait for nothing but themselves.
      const int cnt32 = end - s < kWarp ? static_cast<int>(end - s) : kWarp;  // uniform
      const bool mine = lane < cnt32;
      const index_t my_row = mine ? __ldcs(p.idx[p.mode] + s + lane) : 0;
      const T my_val = mine ? __ldcs(vals + s + lane) : T(0);
      __syncwarp();  // the previous batch's readers of coords are done
#pragma unroll 4
      for (int m = 0; m < p.order; ++m)
        coords[wib][m][lane] = (mine && m != p.mode) ? __ldcs(p.idx[m] + s + lane) : 0;
      __syncwarp();

      for (int sb = 0; sb < cnt32; sb += KB) {
        const int cnt = cnt32 - sb < KB ? cnt32 - sb : KB;  // uniform
        T h[KB][Q];
#pragma unroll
        for (int j = 0; j < KB; ++j)
#pragma unroll
          for (int q = 0; q < Q; ++q) h[j][q] = col_ok[q] ? T(1) : T(0);
        for (int m = 0; m < p.order; ++m) {
          if (m == p.mode) continue;
          const index_t* cm = &coords[wib][m][sb];
          const T* A = static_cast<const T*>(p.factors[m]) + lane;
#pragma unroll
          for (int j = 0; j < KB; ++j) {
            const auto cj = static_cast<std::size_t>(cm[j]);  // a broadcast
#pragma unroll
            for (int q = 0; q < Q; ++q)
              if (col_ok[q] && j < cnt) h[j][q] *= __ldg(A + cj * stride + q * kWarp);
          }
        }
        // The model at each nonzero: <b_i, h_k>, summed over the warp by a butterfly, which
        // leaves every lane the same value.
        T dot[KB];
#pragma unroll
        for (int j = 0; j < KB; ++j) {
          const auto rj = static_cast<std::size_t>(__shfl_sync(kFullMask, my_row, sb + j));
          dot[j] = T(0);
#pragma unroll
          for (int q = 0; q < Q; ++q)
            if (col_ok[q] && j < cnt) dot[j] += __ldg(B + rj * stride + q * kWarp) * h[j][q];
        }
#pragma unroll
        for (int off = kWarp / 2; off > 0; off /= 2)
#pragma unroll
          for (int j = 0; j < KB; ++j) dot[j] += __shfl_xor_sync(kFullMask, dot[j], off);

#pragma unroll
        for (int j = 0; j < KB; ++j) {
          if (j >= cnt) break;  // uniform
          const T xj = __shfl_sync(kFullMask, my_val, sb + j);
          const auto rj = static_cast<std::int64_t>(__shfl_sync(kFullMask, my_row, sb + j));
          const double xd = static_cast<double>(xj), md = static_cast<double>(dot[j]);
          const double mm = md > p.eps ? md : p.eps;
          if (p.sums != nullptr && lane == 0) {
            sum_log += xd * log(mm);
            sum_xm += xd * md;
          }
          if (out != nullptr) {
            if (rj != cur) {  // uniform over the warp
              flush();
              cur = rj;
            }
            const T w = static_cast<T>(xd / mm);
#pragma unroll
            for (int q = 0; q < Q; ++q) acc[q] += w * h[j][q];
          }
        }
      }
    }
    if (out != nullptr) flush();
  }

  if (p.sums == nullptr) return;  // uniform over the grid
  if (lane == 0) {
    red[wib][0] = sum_log;
    red[wib][1] = sum_xm;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double a = 0.0, b = 0.0;
    for (int w = 0; w < kPhiWarps; ++w) {
      a += red[w][0];
      b += red[w][1];
    }
    atomicAdd(p.sums, a);
    atomicAdd(p.sums + 1, b);
  }
}

// ---- the blocked Phi kernel ----

template <typename T>
struct PhiBlockedParams {
  blocked::Params<T> base;  ///< rows, input slots, values, out (null: sums only), tile, lanes
  const T* self = nullptr;  ///< B = factors[mode], rows of R
  double eps = 0;
  double* sums = nullptr;  ///< device [2] (kSums)
};

/// Resident blocks per SM of the blocked Phi kernel: 80 registers for float (no spills
/// without the sums; ptxas -v), 128 for double (80 spilled up to 60 bytes).
template <typename T>
constexpr int kPhiBlockedBlocksPerSm = sizeof(T) == 4 ? 3 : 2;

template <typename T, int kNin, bool kSums>
__global__ void __launch_bounds__(blocked::kWarpsPerBlock* blocked::kWarp,
                                  kPhiBlockedBlocksPerSm<T>)
    phi_blocked_kernel(const __grid_constant__ PhiBlockedParams<T> q) {
  using blocked::kStage;
  using blocked::kVec;
  constexpr int V = kVec<T>;
  constexpr int U = blocked::kStep;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const blocked::Params<T>& p = q.base;
  const blocked::WarpTile w = blocked::warp_tile(p);
  if (!w.active) return;  // whole warp leaves together

  const unsigned row_bytes = static_cast<unsigned>(p.R) * static_cast<unsigned>(sizeof(T));
  const char* fac[kNin];
#pragma unroll
  for (int s = 0; s < kNin; ++s) fac[s] = reinterpret_cast<const char*>(p.in_fac[s] + w.gl * V);
  const char* self = reinterpret_cast<const char*>(q.self + w.gl * V);
  T* const out_col = p.out == nullptr ? nullptr : p.out + w.gl * V;
  const int L = 1 << w.log_l;
  const unsigned slot_mask = L == blocked::kWarp ? kFullMask : ((1u << L) - 1u) << (w.slot * L);

  T acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = T(0);
  index_t cur = 0;
  double sum_log = 0.0, sum_xm = 0.0;  // lane gl = 0's, over its slot's nonzeros
  auto flush = [&]() {
    blocked::add_atomic<T>(out_col + static_cast<std::size_t>(cur) * static_cast<std::size_t>(p.R),
                           acc);
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = T(0);
  };

  blocked::for_each_batch<T, kNin>(
      p, w, smem_raw, [&](const index_t* sm_idx, const T* sm_val, int cnt, int b) {
        if (b == 0 && cnt > 0) cur = sm_idx[0];
        for (int j = 0; j < cnt; j += U) {
          const uint4 r4 = *reinterpret_cast<const uint4*>(sm_idx + j);
          const index_t r[U] = {r4.x, r4.y, r4.z, r4.w};
          T val[U];
          blocked::load_values(sm_val + j, val);
          // B's rows at the output coordinates, then every input row: all in flight before
          // the products.
          T brow[U][V], prod[U][V];
#pragma unroll
          for (int u = 0; u < U; ++u)
            blocked::gather<T, false>(
                reinterpret_cast<const T*>(self + static_cast<std::uint64_t>(r[u]) * row_bytes), 0,
                brow[u]);
#pragma unroll
          for (int s = 0; s < kNin; ++s) {
            const uint4 c4 = *reinterpret_cast<const uint4*>(sm_idx + (s + 1) * kStage + j);
            const index_t c[U] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
            for (int u = 0; u < U; ++u) {
              T g[V];
              blocked::gather<T, false>(
                  reinterpret_cast<const T*>(fac[s] + static_cast<std::uint64_t>(c[u]) * row_bytes),
                  0, g);
#pragma unroll
              for (int v = 0; v < V; ++v) prod[u][v] = s == 0 ? g[v] : prod[u][v] * g[v];
            }
          }
          // m_k = <b_i, h_k>: V columns per lane, then the slot's L lanes.
          T dot[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            dot[u] = T(0);
#pragma unroll
            for (int v = 0; v < V; ++v) dot[u] = fma(brow[u][v], prod[u][v], dot[u]);
          }
          for (int off = 1; off < L; off <<= 1)
#pragma unroll
            for (int u = 0; u < U; ++u) dot[u] += __shfl_xor_sync(slot_mask, dot[u], off);
          T wgt[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const bool ok = j + u < cnt;  // a zero-filled tail entry has x = 0
            const double xd = ok ? static_cast<double>(val[u]) : 0.0;
            const double md = static_cast<double>(dot[u]);
            const double mm = md > q.eps ? md : q.eps;
            wgt[u] = static_cast<T>(xd / mm);
            if constexpr (kSums) {
              if (w.gl == 0 && ok) {
                sum_log += xd * log(mm);
                sum_xm += xd * md;
              }
            }
          }
          if (out_col == nullptr) continue;  // uniform: sums only
          if (j + U <= cnt && r[0] == cur && r[1] == cur && r[2] == cur && r[3] == cur) {
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
              for (int v = 0; v < V; ++v) acc[v] = fma(wgt[u], prod[u][v], acc[v]);
          } else {
#pragma unroll
            for (int u = 0; u < U; ++u) {
              if (j + u < cnt) {
                if (r[u] != cur) {
                  flush();
                  cur = r[u];
                }
#pragma unroll
                for (int v = 0; v < V; ++v) acc[v] = fma(wgt[u], prod[u][v], acc[v]);
              }
            }
          }
        }
      });
  if (out_col != nullptr && w.my_len > 0) flush();
  if constexpr (kSums) {
#pragma unroll
    for (int off = blocked::kWarp / 2; off > 0; off /= 2) {
      sum_log += __shfl_xor_sync(kFullMask, sum_log, off);
      sum_xm += __shfl_xor_sync(kFullMask, sum_xm, off);
    }
    if (w.lane == 0) {
      atomicAdd(q.sums, sum_log);
      atomicAdd(q.sums + 1, sum_xm);
    }
  }
}

template <typename T, int kNin, bool kSums>
void launch_phi_blocked_n(cudaStream_t stream, const PhiBlockedParams<T>& q, unsigned blocks) {
  constexpr int smem = blocked::kWarpsPerBlock * blocked::warp_smem_bytes<T>(kNin);
  if constexpr (smem > 48 * 1024) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(phi_blocked_kernel<T, kNin, kSums>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  phi_blocked_kernel<T, kNin, kSums>
      <<<blocks, blocked::kWarpsPerBlock * blocked::kWarp, smem, stream>>>(q);
}

/// The blocked Phi kernel over p's nonzeros (blocked::supports and an aligned B must hold).
template <typename T>
void launch_phi_blocked(cudaStream_t stream, const PhiParams& p) {
  PhiBlockedParams<T> q;
  blocked::Params<T>& b = q.base;
  b.rows = p.idx[p.mode];
  int nin = 0;
  for (int m = 0; m < p.order; ++m) {
    if (m == p.mode) continue;
    b.in_idx[nin] = p.idx[m];
    b.in_fac[nin] = static_cast<const T*>(p.factors[m]);
    ++nin;
  }
  b.vals = static_cast<const T*>(p.vals);
  b.out = static_cast<T*>(p.out);
  b.nnz = p.nnz;
  b.R = p.R;
  for (int lanes = p.R / blocked::kVec<T>; lanes > 1; lanes /= 2) ++b.log_lanes;
  b.tile = wave_tile(p.nnz, kPhiBlockedBlocksPerSm<T> * blocked::kWarpsPerBlock,
                     std::max(blocked::kStage, kTileNnz / blocked::kStage * blocked::kStage),
                     blocked::kStage);
  auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  b.aligned16 = aligned(b.rows) && aligned(b.vals);
  for (int s = 0; s < nin; ++s) b.aligned16 = b.aligned16 && aligned(b.in_idx[s]);
  q.self = static_cast<const T*>(p.factors[p.mode]);
  q.eps = p.eps;
  q.sums = p.sums;
  const std::int64_t tiles = (p.nnz + b.tile - 1) / b.tile;
  const std::int64_t blocks = (tiles + blocked::kWarpsPerBlock - 1) / blocked::kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  const auto nb = static_cast<unsigned>(blocks);
  const bool sums = p.sums != nullptr;
  blocked::with_nin(nin, [&](auto k) {
    constexpr int kNin = decltype(k)::value;
    if (sums)
      launch_phi_blocked_n<T, kNin, true>(stream, q, nb);
    else
      launch_phi_blocked_n<T, kNin, false>(stream, q, nb);
  });
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_phi(cudaStream_t stream, const PhiParams& p) {
  const std::int64_t warps = (p.nnz + p.tile - 1) / p.tile;
  const std::int64_t blocks = (warps + kPhiWarps - 1) / kPhiWarps;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  p.nnz << " nonzeros exceed one launch; split the block");
  const auto grid = static_cast<unsigned>(blocks);
  constexpr unsigned threads = kPhiWarps * kWarp;
  if (p.R <= kWarp)
    phi_kernel<T, 1><<<grid, threads, 0, stream>>>(p);
  else if (p.R <= 2 * kWarp)
    phi_kernel<T, 2><<<grid, threads, 0, stream>>>(p);
  else if (p.R <= 4 * kWarp)
    phi_kernel<T, 4><<<grid, threads, 0, stream>>>(p);
  else
    phi_kernel<T, 8><<<grid, threads, 0, stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void poisson_phi(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, double eps, T* out,
                 double* host_sums) {
  Context& ctx = executor(be).ctx();
  DeviceGuard g(ctx.device);
  TESSERA_INPUT_CHECK(R <= kPhiMaxR, "--loss poisson on the cuda backend supports --rank up to "
                                         << kPhiMaxR << " (got " << R << ")");
  PhiParams p{};
  const CudaTensorHandle<T>& h = checked_handle(ctx, x, mode, factors, R, p.factors);
  TESSERA_EXPECTS(factors[static_cast<std::size_t>(mode)] != nullptr,
                  "factor " << mode << " (B, the mode's own factor) is null");
  if (out == nullptr && host_sums == nullptr) return;
  TESSERA_EXPECTS(!ctx.capturing || host_sums == nullptr,
                  "poisson_phi's host sums cannot be returned inside a graph capture");
  const int N = h.order();
  p.out = out;
  p.eps = eps;
  p.order = N;
  p.mode = mode;
  p.R = R;
  if (host_sums != nullptr) {
    ctx.scratch.reserve(2 * sizeof(double));
    p.sums = static_cast<double*>(ctx.scratch.get());
    TESSERA_CUDA_CHECK(cudaMemsetAsync(p.sums, 0, 2 * sizeof(double), ctx.stream));
  }
  const std::size_t out_bytes =
      out == nullptr ? 0
                     : static_cast<std::size_t>(h.dims()[static_cast<std::size_t>(mode)]) *
                           static_cast<std::size_t>(R) * sizeof(T);
  // The blocked kernel where the MTTKRP would take it (B's rows aligned too).
  const KernelSelection selection = kernel_selection(ctx.tuning);
  std::vector<const T*> fac(static_cast<std::size_t>(N));
  for (int m = 0; m < N; ++m)
    fac[static_cast<std::size_t>(m)] = static_cast<const T*>(p.factors[m]);
  const bool use_blocked =
      selection == KernelSelection::automatic &&
      blocked::supports<T>(N, R, fac.data(), mode, out) &&
      reinterpret_cast<std::uintptr_t>(fac[static_cast<std::size_t>(mode)]) % 16 == 0;
  over_copy(ctx, h, mode, out, out_bytes,
            [&](const index_t* const* idx, const T* vals, nnz_t cnt, bool /*resident*/) {
              for (int m = 0; m < N; ++m) p.idx[m] = idx[m];
              p.vals = vals;
              p.nnz = static_cast<std::int64_t>(cnt);
              if (p.nnz == 0) return;
              if (use_blocked) {
                launch_phi_blocked<T>(ctx.stream, p);
              } else {
                p.tile = wave_tile(p.nnz, kPhiWarpsPerSm, kPhiTile, kWarp);
                launch_phi<T>(ctx.stream, p);
              }
            });
  h.note_kernel(mode, use_blocked ? "Poisson Phi (fused, blocked)" : "Poisson Phi (fused, classic)",
                R, selection);
  if (host_sums != nullptr) {
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(host_sums, p.sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
    ctx.sync();
  }
}
TESSERA_INSTANTIATE_OP(TESSERA_POISSON_PHI_OP);

}  // namespace tessera::kernels::cuda
