// Tensor-core block products of the CUDA SpTC (views.cuh, docs/sptc.md "Tensor
// cores"): one warp per output block (16 x 16 cells), summing A x B over the block pairs
// of that output block with WMMA: fp64 as 2 x 2 tiles of m8n8k4 (DMMA), tf32 as m16n16k8,
// bf16 and fp16 as m16n16k16 (float accumulators). The cells that have at least one product
// (bit masks) are added to their output entries, which the row kernels have written (each
// output block belongs to one warp: no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/runtime/cuda_check.cuh"
#include "kernels/cuda/sptc/views.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;

enum : int { kFp64 = 0, kTf32 = 1, kBf16 = 2, kFp16 = 3 };

template <int kP>
__global__ void __launch_bounds__(kTcWarps * 32)
    tc_products_kernel(TcView tc, const i64* rowoff, const u32* ecol, double* eval, unsigned* err) {
  // One 16 x 16 result per warp: doubles for fp64, floats (first half) otherwise.
  __shared__ __align__(128) double s_c[kTcWarps][kTile * kTile];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  for (i64 o = static_cast<i64>(blockIdx.x) * kTcWarps + warp; o < tc.nout;
       o += static_cast<i64>(gridDim.x) * kTcWarps) {
    const u32 p0 = tc.ostart[o], p1 = tc.ostart[o + 1];
    if constexpr (kP == kFp64) {
      wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc[2][2];
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 2; ++ni) wmma::fill_fragment(acc[mi][ni], 0.0);
      for (u32 p = p0; p < p1; ++p) {
        const double* A = static_cast<const double*>(tc.atiles) + static_cast<i64>(tc.pa[p]) * 256;
        const double* B = static_cast<const double*>(tc.btiles) + static_cast<i64>(tc.pb[p]) * 256;
        for (int ks = 0; ks < 4; ++ks) {
          wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> a[2];
          wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::row_major> b[2];
          for (int mi = 0; mi < 2; ++mi) wmma::load_matrix_sync(a[mi], A + mi * 128 + ks * 4, 16);
          for (int ni = 0; ni < 2; ++ni) wmma::load_matrix_sync(b[ni], B + ks * 64 + ni * 8, 16);
          for (int mi = 0; mi < 2; ++mi)
            for (int ni = 0; ni < 2; ++ni) wmma::mma_sync(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);
        }
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 2; ++ni)
          wmma::store_matrix_sync(&s_c[warp][mi * 128 + ni * 8], acc[mi][ni], 16,
                                  wmma::mem_row_major);
    } else if constexpr (kP == kTf32) {
      wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (u32 p = p0; p < p1; ++p) {
        const float* A = static_cast<const float*>(tc.atiles) + static_cast<i64>(tc.pa[p]) * 256;
        const float* B = static_cast<const float*>(tc.btiles) + static_cast<i64>(tc.pb[p]) * 256;
        for (int ks = 0; ks < 2; ++ks) {
          wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
          wmma::load_matrix_sync(a, A + ks * 8, 16);
          wmma::load_matrix_sync(b, B + ks * 128, 16);
          for (int t = 0; t < a.num_elements; ++t) a.x[t] = wmma::__float_to_tf32(a.x[t]);
          for (int t = 0; t < b.num_elements; ++t) b.x[t] = wmma::__float_to_tf32(b.x[t]);
          wmma::mma_sync(acc, a, b, acc);
        }
      }
      wmma::store_matrix_sync(reinterpret_cast<float*>(&s_c[warp][0]), acc, 16,
                              wmma::mem_row_major);
    } else {
      using H = std::conditional_t<kP == kBf16, __nv_bfloat16, __half>;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (u32 p = p0; p < p1; ++p) {
        const H* A = static_cast<const H*>(tc.atiles) + static_cast<i64>(tc.pa[p]) * 256;
        const H* B = static_cast<const H*>(tc.btiles) + static_cast<i64>(tc.pb[p]) * 256;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> b;
        wmma::load_matrix_sync(a, A, 16);
        wmma::load_matrix_sync(b, B, 16);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(reinterpret_cast<float*>(&s_c[warp][0]), acc, 16,
                              wmma::mem_row_major);
    }
    __syncwarp();
    const u64 ib = tc.otkey[o] >> 32, jb = tc.otkey[o] & 0xffffffffull;
    for (int cell = lane; cell < kTile * kTile; cell += 32) {
      const int rr = cell >> 4, cc = cell & 15;
      if (((tc.smask[o * kTile + rr] >> cc) & 1u) == 0) continue;
      const u32 r = tc.irow[ib * kTile + static_cast<u64>(rr)];
      const u32 c = tc.jcol[jb * kTile + static_cast<u64>(cc)];
      if (r == kNone || c == kNone) {
        atomicOr(err, kErrTcCell);
        continue;
      }
      const i64 end = rowoff[r + 1];
      i64 lo = rowoff[r], hi = end;
      while (lo < hi) {
        const i64 mid = (lo + hi) / 2;
        if (ecol[mid] < c)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == end || ecol[lo] != c) {
        atomicOr(err, kErrTcCell);
        continue;
      }
      const double val =
          kP == kFp64 ? s_c[warp][cell]
                      : static_cast<double>(reinterpret_cast<const float*>(&s_c[warp][0])[cell]);
      eval[lo] += val;
    }
    __syncwarp();  // s_c[warp] is rewritten by the next output block
  }
}

template <typename S>
__global__ void convert_kernel(i64 n, const double* src, S* dst) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<S, float>)
      dst[k] = static_cast<float>(src[k]);
    else if constexpr (std::is_same_v<S, __nv_bfloat16>)
      dst[k] = __double2bfloat16(src[k]);
    else
      dst[k] = __double2half(src[k]);
  }
}

unsigned blocks_for(i64 n, int per_block) {
  return static_cast<unsigned>(std::clamp<i64>((n + per_block - 1) / per_block, 1, i64{1} << 20));
}

}  // namespace

void launch_tc_products(cudaStream_t s, TensorCorePrecision p, const TcView& tc, const i64* rowoff,
                        const u32* ecol, double* eval, unsigned* err) {
  if (tc.nout <= 0) return;
  const unsigned grid = blocks_for(tc.nout, kTcWarps);
  const unsigned block = kTcWarps * 32;
  switch (p) {
    case TensorCorePrecision::fp64:
      tc_products_kernel<kFp64><<<grid, block, 0, s>>>(tc, rowoff, ecol, eval, err);
      break;
    case TensorCorePrecision::tf32:
      tc_products_kernel<kTf32><<<grid, block, 0, s>>>(tc, rowoff, ecol, eval, err);
      break;
    case TensorCorePrecision::bf16:
      tc_products_kernel<kBf16><<<grid, block, 0, s>>>(tc, rowoff, ecol, eval, err);
      break;
    case TensorCorePrecision::fp16:
      tc_products_kernel<kFp16><<<grid, block, 0, s>>>(tc, rowoff, ecol, eval, err);
      break;
    case TensorCorePrecision::off:
      return;
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_convert_tiles(cudaStream_t s, TensorCorePrecision p, i64 n, const double* src,
                          void* dst) {
  if (n <= 0) return;
  const unsigned grid = blocks_for(n, 256);
  switch (p) {
    case TensorCorePrecision::tf32:
      convert_kernel<float><<<grid, 256, 0, s>>>(n, src, static_cast<float*>(dst));
      break;
    case TensorCorePrecision::bf16:
      convert_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(n, src, static_cast<__nv_bfloat16*>(dst));
      break;
    case TensorCorePrecision::fp16:
      convert_kernel<__half><<<grid, 256, 0, s>>>(n, src, static_cast<__half*>(dst));
      break;
    default:
      return;
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::kernels::cuda::sptc
