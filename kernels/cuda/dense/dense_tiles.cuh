// Tall-skinny dense passes of the CUDA backend (dense_tiles.cu): G = A^T A and D = S W for
// rows x R matrices with R <= 128, memory-bound, staged in shared memory as double and
// computed on kQuad x kQuad micro-tiles by custom kernels, deterministic (a fixed
// summation order for a given device). dense.cu calls them and takes cuBLAS above the
// limits. Internal to kernels/cuda.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

/// Largest R for the Gram kernel and for the M W kernel (which also needs W and a row
/// batch in shared memory); above, cuBLAS: the work grows as R^2 per row and is no
/// longer memory-bound, and cuBLAS uses the FP64 tensor cores.
constexpr int kGramKernelMaxR = 128;
constexpr int kTimesWKernelMaxR = 128;

/// G = A^T A (1 <= R <= kGramKernelMaxR, rows >= 1), in double, by a partial-sums kernel
/// over one wave of blocks and a finishing kernel; the partials live in ctx.scratch.
template <typename T>
void gram_by_kernel(Context& ctx, const T* A, std::int64_t rows, int R, T* G);

/// Whether D = S W runs as one kernel at R: R <= kTimesWKernelMaxR and W plus a batch of
/// rows fit the device's shared memory per block.
bool times_w_by_kernel_fits(const Context& ctx, int R);

/// D := S W (S == D allowed; W R x R double in device memory), accumulated in double;
/// times_w_by_kernel_fits(R), rows >= 1. With colmax (device, R doubles, >= 0 on entry):
/// colmax[c] = max(colmax[c], max_row |D(row, c)|) as stored, NaN ignored, in the same pass.
template <typename T>
void times_w_by_kernel(Context& ctx, const T* S, T* D, std::int64_t rows, int R, const double* W,
                       double* colmax = nullptr);

}  // namespace tessera::kernels::cuda
