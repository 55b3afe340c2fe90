// Internal to the CUDA MTTKRP: the tensor-core hybrid layout of one mode (issue 18,
// docs/tensor-core-mttkrp.md).
//
// A tile of mode n is 16 consecutive output rows (block ib of i_n) x 16 consecutive rows of
// one other mode, the tile mode j (block jb of i_j), with every other index fixed. The
// nonzeros of a tile form a 16 x 16 matrix A, and its MTTKRP contribution is the small GEMM
//   M[16 ib .. 16 ib + 15, :] += A * (B_j[16 jb .. 16 jb + 15, :] .* prod_m B_m[i_m, :])
// (.* scaling every row by the fixed rows of the other modes), which runs on tensor cores
// (tc_tiles.cu). Tiles with at least tc_tile_density * 256 nonzeros are stored dense; the
// rest of the nonzeros are copied, sorted by i_n, and run on the CUDA-core kernel first.
// The tile kernel then adds its sums to the rows: a thread block owns a segment of the
// tiles of one row block, and only a row block cut into several segments is added with
// atomics (once per segment and column, not per nonzero).
//
// Built at prepare time for device-resident (tier 1) tensors when --tensor-cores is not
// off (hybrid_build.cu); each MTTKRP then chooses between the hybrid and the full copy
// (use_hybrid in mttkrp.cu).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cuda/mttkrp/internal.cuh"

namespace tessera::kernels::cuda::mttkrp_detail {

/// Under --tensor-cores auto, the hybrid runs where the cost model predicts at least this
/// speedup: a margin for the model's error (auto must not be slower than off). Replayed over
/// the measured H100 sweeps, 1.1 picked a hybrid 7% slower than off (congress, R = 256) and
/// 1.15 none (docs/perf/gpu-h100-tensor-core-mttkrp.md).
constexpr double kAutoMinSpeedup = 1.15;
/// Rows of a tile in each of its two modes.
inline constexpr int kTcTile = 16;
/// At most this many tiles per thread block of the tile kernel (a segment).
inline constexpr int kTcSegmentTiles = 32;

enum class TcPrecision { fp64, tf32, tf32x3, bf16 };
inline const char* tc_precision_name(TcPrecision p) {
  switch (p) {
    case TcPrecision::fp64:
      return "fp64";
    case TcPrecision::tf32:
      return "tf32";
    case TcPrecision::tf32x3:
      return "3xtf32";
    case TcPrecision::bf16:
      return "bf16";
  }
  return "?";
}

/// One mode's hybrid layout (device arrays) and its statistics.
template <typename T>
struct HybridMode {
  int mode = 0;
  int tile_mode = -1;
  std::uint64_t tiles = 0;
  std::uint64_t tile_nnz = 0;
  nnz_t rest_nnz = 0;
  std::uint64_t segments = 0;
  DeviceMemory tile_vals;  ///< tiles x 256 values, row-major 16 x 16 (row: i_n % 16)
  /// tiles x (order - 1) uint32: [0] the tile-mode block jb, then the fixed index of each
  /// other mode (in mode order, skipping mode and tile_mode); tile-major.
  DeviceMemory tile_meta;
  /// segments x 4 uint32: first tile, end tile, row block ib, 1 when ib has other segments.
  DeviceMemory seg;
  DeviceMemory rest;  ///< the rest's copy (block layout of internal.cuh), sorted by i_n
  double build_seconds = 0;
  // Last hybrid run (events recorded outside graph capture).
  mutable cudaEvent_t ev[3] = {nullptr, nullptr, nullptr};
  mutable bool timed = false;
  mutable double tile_s = 0, rest_s = 0;
  mutable bool used = false;
  mutable double predicted = 0;
  mutable TcPrecision precision = TcPrecision::tf32x3;
  mutable bool forced = false;  ///< the last decision was --tensor-cores on
  mutable int rank = 0;         ///< R of the last decision (0: none yet)

  HybridMode() = default;
  HybridMode(const HybridMode&) = delete;
  HybridMode& operator=(const HybridMode&) = delete;
  ~HybridMode() {
    for (auto& e : ev)
      if (e) TESSERA_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
  }
  std::size_t bytes() const {
    return tile_vals.bytes() + tile_meta.bytes() + seg.bytes() + rest.bytes();
  }
  const index_t* rest_idx(int m) const {
    return static_cast<const index_t*>(rest.get()) +
           static_cast<std::size_t>(m) * static_cast<std::size_t>(rest_nnz);
  }
  /// Zero slots over all slots of the tiles (1 - mean tile density; duplicates may push the
  /// count over 256, hence the clamp).
  double padding() const {
    return 1.0 -
           std::min(1.0, static_cast<double>(tile_nnz) / (256.0 * static_cast<double>(tiles)));
  }
  const T* rest_vals(int order) const {
    return reinterpret_cast<const T*>(static_cast<const char*>(rest.get()) +
                                      values_offset(order, static_cast<std::size_t>(rest_nnz)));
  }
};

/// What the tile kernel reads.
template <typename T>
struct TcParams {
  const T* vals = nullptr;             ///< tiles x 256
  const index_t* meta = nullptr;       ///< tiles x (order - 1)
  const std::uint32_t* seg = nullptr;  ///< segments x 4
  const T* tile_factor = nullptr;      ///< factor of the tile mode (rows x R)
  const T* fixed[kMaxOrder] = {};      ///< factors of the other modes, in meta order
  T* out = nullptr;                    ///< dims[mode] x R
  std::uint64_t out_rows = 0;          ///< dims[mode]
  std::uint64_t tile_rows = 0;         ///< dims[tile_mode]
  int nfixed = 0;                      ///< order - 2
  int R = 0;
};

/// Enqueues the tile kernel of `h` (segments x column chunks) in precision `p` on `stream`.
template <typename T>
void launch_tc_tiles(cudaStream_t stream, const TcParams<T>& p, std::uint64_t segments,
                     TcPrecision prec);

/// The cost model of --tensor-cores auto: predicted time of the CUDA-core kernel on all
/// nonzeros over the hybrid's (rest + tiles), at rank R and precision prec. Calibrated by
/// `tessera bench mttkrp --tc-sweep` (docs/perf/gpu-h100-tensor-core-mttkrp.md).
double tc_predicted_speedup(nnz_t nnz, nnz_t rest_nnz, std::uint64_t tiles, int R,
                            TcPrecision prec);

/// The tile precision of `t` for value type T; an InputError for a mismatch.
template <typename T>
inline TcPrecision tc_precision_of(const Tuning& t) {
  constexpr bool dbl = std::is_same_v<T, double>;
  const TcPrecisionOption p = t.tc_precision;
  if (p == TcPrecisionOption::automatic) return dbl ? TcPrecision::fp64 : TcPrecision::tf32x3;
  if (dbl)
    TESSERA_INPUT_CHECK(p == TcPrecisionOption::fp64,
                        "--tc-precision " << name_of(p) << " applies to float tensors; this "
                                          << "tensor is double (--precision "
                                          << "double): use fp64 or auto");
  else
    TESSERA_INPUT_CHECK(p != TcPrecisionOption::fp64,
                        "--tc-precision fp64 applies to double tensors (--precision "
                            << "double); this tensor is float: use 3xtf32, tf32, "
                            << "bf16 or auto");
  switch (p) {
    case TcPrecisionOption::fp64:
      return TcPrecision::fp64;
    case TcPrecisionOption::tf32:
      return TcPrecision::tf32;
    case TcPrecisionOption::bf16:
      return TcPrecision::bf16;
    default:
      return TcPrecision::tf32x3;
  }
}

/// Builds the hybrid layout of every mode of the tier-1 handle whose tiles clear
/// ctx.tuning.tc_tile_density, within `limit` device bytes for the whole tensor (the
/// tier-1 copies included) and `free_room()`; modes are skipped, with the reason recorded,
/// where it does not fit or nothing qualifies.
template <typename T>
class CudaTensorHandle;
/// `free_room()`: device bytes that may still be allocated now (free memory less a reserve).
template <typename T>
void build_hybrid(Context& ctx, CudaTensorHandle<T>& h, std::size_t limit,
                  const std::function<std::size_t()>& free_room);

}  // namespace tessera::kernels::cuda::mttkrp_detail
