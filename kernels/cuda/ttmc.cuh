// CUDA TTMc tile kernel (kernels/cuda/ttmc.cu), launched by the TTMc entry point in
// mttkrp.cu, which owns the tensor handle, its sorted copies and the tier-2 chunk loop.
#pragma once

#include <cstdint>

#include "kernels/cuda/detail.cuh"

namespace tessera::kernels::cuda {

/// Nonzeros per warp tile of the TTMc kernel. Rows wholly inside a tile are stored once;
/// the first and last row of a tile are added with atomics (C / 32 per lane per tile).
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
};

/// Which TTMc kernels may run (TESSERA_CUDA_TTMC_KERNEL; see ttmc.cu).
enum class TtmcKernel { automatic, cores };
TtmcKernel ttmc_kernel_selection();

/// Enqueues the kernel on `stream`; out must already hold zeros (or earlier chunks' sums).
template <typename T>
void launch_ttmc(cudaStream_t stream, const TtmcParams<T>& p);

}  // namespace tessera::kernels::cuda
