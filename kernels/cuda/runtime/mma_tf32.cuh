// 3xTF32 matrix products on the tensor cores (mma.sync m16n8k8, sm_80 and later), shared by
// the tensor-core TTMc (kernels/cuda/ttmc/tc.cuh) and the completion's row Grams
// (kernels/cuda/mttkrp/row_grams.cu). Each float operand is split into a tf32 high part
// and a remainder and a product is hi*hi + hi*lo + lo*hi, which keeps about 21 of float's
// 24 significand bits (the dropped lo*lo term is below 2^-21 relative); a plain tf32
// product would lose 3 decimal digits.
//
// Fragment layouts of mma.m16n8k8 with tf32 (PTX ISA), g = lane / 4, t = lane % 4:
// A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
// B (8 x 8): b0 (t, g), b1 (t + 4, g);  C (16 x 8): c0, c1 (g, 2t, 2t + 1), c2, c3 (g + 8, ...).
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda::tf32 {

/// x = hi + lo: hi = x rounded to tf32, lo = the remainder x - hi (exact in float) as raw
/// float bits. The tensor cores read a tf32 operand's top 19 bits, so they take lo
/// truncated to tf32 (CUTLASS's fast 3xTF32 does the same): |lo| <= 2^-11 |x|, and the
/// truncation costs at most 2^-10 |lo| <= 2^-21 |x|, as the dropped lo*lo term does.
/// hi is cvt.rna's rounding (to nearest, ties away from zero) done on the bits: adding half
/// a tf32 unit to the magnitude and clearing the 13 low bits, two integer instructions where
/// cvt.rna.tf32.f32 compiles to four on sm_90 (its special-value tests). Finite x only: an
/// infinite x gives lo = NaN, as cvt.rna's hi would; a NaN stays NaN in lo.
__device__ __forceinline__ void split(float x, std::uint32_t& hi, std::uint32_t& lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

/// d += a b for one m16n8k8 tile (tf32 inputs, float accumulators).
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                    const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// d += a b in 3xTF32 from the split parts of a and b.
__device__ __forceinline__ void mma3(float (&d)[4], const std::uint32_t (&ah)[4],
                                     const std::uint32_t (&al)[4], const std::uint32_t (&bh)[2],
                                     const std::uint32_t (&bl)[2]) {
  mma(d, al, bh);
  mma(d, ah, bl);
  mma(d, ah, bh);
}

/// The rows of one k-step of 8 nonzeros in the kernels that put nonzeros on the k of
/// m16n8k8 (lane (g, t) holds nonzeros t and t + 4, of output rows r[0] and r[1]; done[h]:
/// nonzero h is absent or taken). Calls step(row, m) once per distinct row among the 8, in
/// the order of its first nonzero, with m[h] whether this lane's nonzero h is in it (every
/// lane gets the same row); the nonzeros of another row are masked out of that pass and
/// taken by a later one. Returns with done[] all true.
template <typename Index, typename Step>
__device__ __forceinline__ void for_each_row(const Index (&r)[2], bool (&done)[2], Step&& step) {
  constexpr unsigned kAll = 0xffffffffu;
  while (true) {
    const unsigned lo = __ballot_sync(kAll, !done[0]) & 0xfu;
    const unsigned hi = __ballot_sync(kAll, !done[1]) & 0xfu;
    const unsigned pend = lo | (hi << 4);  // bit s: nonzero s of the 8 not yet taken
    if (pend == 0) return;
    const int fpos = __ffs(static_cast<int>(pend)) - 1;
    const Index ra = __shfl_sync(kAll, r[0], fpos & 3);
    const Index rb = __shfl_sync(kAll, r[1], fpos & 3);
    const Index row = fpos < 4 ? ra : rb;
    const bool m[2] = {!done[0] && r[0] == row, !done[1] && r[1] == row};
    step(row, m);
    done[0] = done[0] || m[0];
    done[1] = done[1] || m[1];
  }
}

}  // namespace tessera::kernels::cuda::tf32
