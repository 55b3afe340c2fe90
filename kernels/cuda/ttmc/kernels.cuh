// CUDA TTMc kernels (kernels/cuda/ttmc/kernels.cu), launched by the TTMc entry points
// (ttmc.cu in this folder), which run on the MTTKRP's tensor handle (its sorted copies
// and the tier-2 chunk loop: kernels/cuda/mttkrp/handle.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

/// W consecutive elements from p (aligned to W elements), with 16-byte loads when they fit.
template <typename T, int W>
__device__ __forceinline__ void load_run(const T* __restrict__ p, T (&u)[W]) {
  constexpr int kBytes = W * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int q = 0; q < kBytes / 16; ++q) {
      if constexpr (std::is_same_v<T, float>) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p) + q);
        u[4 * q] = v.x, u[4 * q + 1] = v.y, u[4 * q + 2] = v.z, u[4 * q + 3] = v.w;
      } else {
        const double2 v = __ldg(reinterpret_cast<const double2*>(p) + q);
        u[2 * q] = v.x, u[2 * q + 1] = v.y;
      }
    }
  } else if constexpr (std::is_same_v<T, float> && W == 2) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    u[0] = v.x, u[1] = v.y;
  } else {
#pragma unroll
    for (int w = 0; w < W; ++w) u[w] = __ldg(p + w);
  }
}

/// Nonzeros per warp tile of the TTMc kernel. Rows wholly inside a tile are stored once;
/// the first and last row of a tile (of each group's sub-tile in the register-blocked
/// kernel) are added with atomics.
inline constexpr int kTtmcTileNnz = 1024;

/// One TTMc launch over `nnz` nonzeros of the copy sorted by `mode` (or one chunk of it).
template <typename T>
struct TtmcParams {
  const index_t* idx[kMaxOrder];  ///< coordinate arrays (stride: this launch's nnz)
  const T* factors[kMaxOrder];    ///< factors[m]: dims[m] x ranks[m], row-major
  const T* vals;
  const index_t* pos;  ///< output row of each mode-`mode` index (rows not present: unused)
  T* out;              ///< rows x C, row-major, zeroed before the first launch
  std::int64_t nnz = 0;
  std::int64_t C = 0;           ///< prod of in_rank
  int nin = 0;                  ///< input modes (order - 1)
  int mode = 0;                 ///< output mode
  int in_mode[kMaxOrder] = {};  ///< input modes in increasing order (last: fastest)
  int in_rank[kMaxOrder] = {};  ///< ranks of in_mode[s]
  bool exclusive = true;        ///< output rows come in one run each (plain sorted copy)
  int tile = kTtmcTileNnz;      ///< nonzeros per warp tile (set by launch_ttmc)
  /// --gather-precision fp16 | bf16 (float, the tensor-core kernel only): low[m] is the 16-bit
  /// copy of factors[m] (dims[m] x ranks[m], 8-byte aligned) that the kernel gathers instead;
  /// set by the entry point (ttmc.cu) where ttmc_takes_low() says the kernel will run.
  GatherPrecision gather = GatherPrecision::full;
  const void* low[kMaxOrder] = {};
};

/// Whether a float launch of these parameters runs the tensor-core kernel (tc.cuh), which is
/// the one that reads 16-bit copies of the factors (--gather-precision): order 3, ranks 8, 16
/// or 32, aligned factors and output, and ttmc_kernel not `cores`.
bool ttmc_takes_low(const TtmcParams<float>& p, const Tuning& tuning);

/// Enqueues the kernel on `stream`; out must already hold zeros (or earlier chunks' sums).
/// `tuning` (read per call): ttmc_kernel = auto (the tensor-core kernel where it applies,
/// see tc.cuh) | cores (the CUDA-core kernels only; A/B runs and tests), --ttmc-kernel;
/// ttmc_tile = nonzeros per warp tile (0: kTtmcTileNnz), --ttmc-tile. p.tile is ignored.
template <typename T>
void launch_ttmc(cudaStream_t stream, const TtmcParams<T>& p, const Tuning& tuning);

}  // namespace tessera::kernels::cuda
