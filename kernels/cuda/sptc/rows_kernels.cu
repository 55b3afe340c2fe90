// Row accumulation of the CUDA SpTC (views.cuh, docs/sptc.md "CUDA kernel"): the
// products of one output row are combined on chip, so only distinct output entries reach
// device memory, each row at the offset the count pass gave it, columns ascending.
//
//  - groups of small rows: one block loads the group's products (at most kGroupCap - 1)
//    as (row, column, product number) keys into shared memory, sorts them (bitonic) and
//    sums runs of equal (row, column) in product order: deterministic.
//  - dense rows: one block per (row, column tile); a double per column in shared memory and
//    a byte per column marking the entries. Products are taken in chunks of kDenseChunk;
//    a chunk's products are sorted by (column, product) and each column's run is summed in
//    product order: deterministic (no atomics on values).
// Both run twice: without values in the count pass (entries per row), with values in the
// run. Products of two dense tensor-core blocks are skipped; the cells those blocks
// produce are marked from the blocks' bit masks (values are added later by tc_kernels.cu).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/runtime/cuda_check.cuh"
#include "kernels/cuda/sptc/views.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

/// Exclusive prefix sum of one value per thread over the block; *total gets the sum.
/// Every thread of the block must call it (blockDim.x a multiple of 32). s_warp: 33 slots.
__device__ u32 block_exclusive_scan(u32 v, u32* s_warp, u32* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = static_cast<int>(blockDim.x >> 5);
  u32 incl = v;
  for (int d = 1; d < 32; d <<= 1) {
    const u32 t = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += t;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const u32 w = lane < nwarps ? s_warp[lane] : 0u;
    u32 wi = w;
    for (int d = 1; d < 32; d <<= 1) {
      const u32 t = __shfl_up_sync(0xffffffffu, wi, d);
      if (lane >= d) wi += t;
    }
    if (lane < nwarps) s_warp[lane] = wi - w;
    if (lane == 31) s_warp[32] = wi;
  }
  __syncthreads();
  const u32 r = s_warp[warp] + incl - v;
  *total = s_warp[32];
  __syncthreads();  // s_warp may be reused after the return
  return r;
}

/// Product (x, q) belongs to the tensor-core path: both its nonzeros lie in dense blocks
/// (then their blocks share the key block, so the block pair exists).
__device__ __forceinline__ bool on_tensor_cores(const RowsView& v, u32 x, i64 q) {
  return v.tc.xtile != nullptr && v.tc.xtile[x] != kNone && v.tc.ytile[q] != kNone;
}

/// [*lo, *hi): the output blocks of row block ib (otkey sorted, row block in the high half).
__device__ void out_blocks_of(const TcView& tc, u64 ib, i64* lo_out, i64* hi_out) {
  i64 lo = 0, hi = tc.nout;
  while (lo < hi) {
    const i64 mid = (lo + hi) / 2;
    if ((tc.otkey[mid] >> 32) < ib)
      lo = mid + 1;
    else
      hi = mid;
  }
  i64 lo2 = lo, hi2 = tc.nout;
  while (lo2 < hi2) {
    const i64 mid = (lo2 + hi2) / 2;
    if ((tc.otkey[mid] >> 32) <= ib)
      lo2 = mid + 1;
    else
      hi2 = mid;
  }
  *lo_out = lo;
  *hi_out = lo2;
}

/// Calls f(c) for the cells the tensor-core block products give row r: its output blocks
/// o0 + first, o0 + first + step, ... and in each the set bits of the row's mask; c is the
/// cell's column (kNone when the column table lacks it, an error the caller flags).
template <typename F>
__device__ __forceinline__ void for_tc_cells(const RowsView& v, u32 r, i64 first, i64 step, F&& f) {
  i64 o0, o1;
  out_blocks_of(v.tc, v.tc.rowblk[r], &o0, &o1);
  const int rr = v.tc.rowlo[r];
  for (i64 o = o0 + first; o < o1; o += step) {
    u32 bits = v.tc.smask[o * kTile + rr];
    const u64 jb = v.tc.otkey[o] & 0xffffffffull;
    while (bits) {
      const int cc = __ffs(bits) - 1;
      bits &= bits - 1;
      f(v.tc.jcol[jb * kTile + static_cast<u64>(cc)]);
    }
  }
}

template <bool kValues>
__global__ void __launch_bounds__(kGroupBlock)
    row_groups_kernel(RowsView v, const u32* gfirst, const u32* gend, i64 ngroups, RowsOut out) {
  __shared__ u64 s_key[kGroupCap];
  __shared__ double s_val[kValues ? kGroupCap : 1];
  __shared__ u32 s_off[kGroupCap + 1];
  __shared__ u32 s_scan[33];
  __shared__ u32 s_n;
  for (i64 g = blockIdx.x; g < ngroups; g += gridDim.x) {
    const u32 ra = gfirst[g], rb = gend[g];
    const u32 xa = v.rowstart[ra], xb = v.rowstart[rb];
    const i64 pa = v.rowp[ra];
    const int n = static_cast<int>(v.rowp[rb] - pa);  // < kGroupCap by construction
    const int nx = static_cast<int>(xb - xa);         // <= n: every matched X has a product
    if (threadIdx.x == 0) s_n = 0;
    for (int k = threadIdx.x; k <= nx; k += blockDim.x)
      s_off[k] = static_cast<u32>(v.mx_off[xa + static_cast<u32>(k)] - pa);
    __syncthreads();
    // Products pl = 0..n-1 of the group, in the global product order.
    for (int pl = threadIdx.x; pl < n; pl += blockDim.x) {
      int lo = 0, hi = nx - 1;  // last k with s_off[k] <= pl
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (s_off[mid] <= static_cast<u32>(pl))
          lo = mid;
        else
          hi = mid - 1;
      }
      const u32 x = xa + static_cast<u32>(lo);
      const i64 q = static_cast<i64>(v.mx_first[x]) + (pl - static_cast<int>(s_off[lo]));
      if (on_tensor_cores(v, x, q)) continue;
      const u32 slot = atomicAdd(&s_n, 1u);
      if (slot >= static_cast<u32>(kGroupCap)) {
        atomicOr(v.err, kErrCapacity);
        continue;
      }
      s_key[slot] = (static_cast<u64>(v.mx_row[x] - ra) << 43) |
                    (static_cast<u64>(v.ysc[q]) << 11) | static_cast<u64>(pl);
      if constexpr (kValues) s_val[slot] = v.mx_val[x] * v.ysv[q];
    }
    // Cells of the tensor-core blocks (value 0 here; tc_kernels.cu adds theirs). Each such
    // cell has at least one skipped product in its row, so the list stays within n.
    if (v.tc.otkey != nullptr) {
      for (u32 r = ra + threadIdx.x; r < rb; r += blockDim.x)
        for_tc_cells(v, r, 0, 1, [&](u32 c) {
          const u32 slot = atomicAdd(&s_n, 1u);
          if (slot >= static_cast<u32>(kGroupCap) || c == kNone) {
            atomicOr(v.err, c == kNone ? kErrTcCell : kErrCapacity);
            return;
          }
          s_key[slot] = (static_cast<u64>(r - ra) << 43) | (static_cast<u64>(c) << 11) |
                        static_cast<u64>(kGroupCap - 1);
          if constexpr (kValues) s_val[slot] = 0.0;
        });
    }
    __syncthreads();
    const int m = min(static_cast<int>(s_n), kGroupCap);
    int m2 = 1;
    while (m2 < m) m2 <<= 1;
    for (int k = m + threadIdx.x; k < m2; k += blockDim.x) s_key[k] = ~0ull;
    __syncthreads();
    // Bitonic sort of s_key[0, m2) ascending (keys are distinct but for the padding).
    for (int k = 2; k <= m2; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < m2; i += blockDim.x) {
          const int ixj = i ^ j;
          if (ixj > i) {
            const u64 a = s_key[i], b = s_key[ixj];
            const bool up = (i & k) == 0;
            if ((a > b) == up) {
              s_key[i] = b;
              s_key[ixj] = a;
              if constexpr (kValues) {
                const double t = s_val[i];
                s_val[i] = s_val[ixj];
                s_val[ixj] = t;
              }
            }
          }
        }
        __syncthreads();
      }
    // Runs of equal (row, column): key >> 11. Thread t owns entries [b0, b1).
    const int seg = (m + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int b0 = min(m, static_cast<int>(threadIdx.x) * seg), b1 = min(m, b0 + seg);
    u32 starts = 0;
    for (int k = b0; k < b1; ++k)
      if (k == 0 || (s_key[k] >> 11) != (s_key[k - 1] >> 11)) ++starts;
    u32 total = 0;
    u32 e = block_exclusive_scan(starts, s_scan, &total);
    if constexpr (!kValues) {
      (void)e;
      for (int k = b0; k < b1; ++k)
        if (k == 0 || (s_key[k] >> 11) != (s_key[k - 1] >> 11))
          atomicAdd(reinterpret_cast<unsigned long long*>(out.rowcnt + ra + (s_key[k] >> 43)),
                    1ull);
    } else {
      const i64 base = out.rowoff[ra];
      if (threadIdx.x == 0 && base + static_cast<i64>(total) != out.rowoff[rb])
        atomicOr(v.err, kErrCount);
      for (int k = b0; k < b1; ++k) {
        const u64 rc = s_key[k] >> 11;
        if (k != 0 && rc == (s_key[k - 1] >> 11)) continue;
        double sum = 0;
        for (int j = k; j < m && (s_key[j] >> 11) == rc; ++j) sum += s_val[j];
        const i64 dst = base + static_cast<i64>(e++);
        if (dst < out.rowoff[rb]) {
          out.ecol[dst] = static_cast<u32>(rc & 0xffffffffull);
          out.eval[dst] = sum;
        }
      }
    }
    __syncthreads();  // the next group reuses the shared arrays
  }
}

static_assert(kDenseChunk == 1024 && kDenseTileMax < (1 << 21),
              "dense_rows_kernel packs (column in tile) << 10 | product in chunk into 32 bits");

template <bool kValues>
__global__ void __launch_bounds__(kDenseBlock)
    dense_rows_kernel(RowsView v, const u32* drows, i64 nitems, int ntiles, int W, RowsOut out) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Layout (dense_shared_bytes): s_off, then with values s_acc (W), s_pv and s_ck (one per
  // product of the chunk), then s_flag (W).
  i64* s_off = reinterpret_cast<i64*>(smem);  // kDenseChunk + 1
  unsigned char* p = smem + (kDenseChunk + 1) * 8;
  double* s_acc = reinterpret_cast<double*>(p);                            // W (values)
  double* s_pv = s_acc + (kValues ? W : 0);                                // kDenseChunk (values)
  u32* s_ck = reinterpret_cast<u32*>(s_pv + (kValues ? kDenseChunk : 0));  // kDenseChunk
  unsigned char* s_flag = reinterpret_cast<unsigned char*>(s_ck + (kValues ? kDenseChunk : 0));
  __shared__ u32 s_scan[33];
  __shared__ u32 s_next;
  for (i64 item = blockIdx.x; item < nitems; item += gridDim.x) {
    const u32 r = drows[item / ntiles];
    const int t = static_cast<int>(item % ntiles);
    const i64 cb = static_cast<i64>(t) * W;
    const i64 ce = min(v.ncols, cb + W);
    const int wn = static_cast<int>(max(ce - cb, i64{0}));
    for (int k = threadIdx.x; k < wn; k += blockDim.x) {
      s_flag[k] = 0;
      if constexpr (kValues) s_acc[k] = 0.0;
    }
    const i64 P0 = v.rowp[r], np = v.rowp[r + 1] - P0;
    const u32 xb = v.rowstart[r + 1];
    if (threadIdx.x == 0) s_next = v.rowstart[r];
    __syncthreads();
    for (i64 c0 = 0; c0 < np; c0 += kDenseChunk) {
      const i64 pc = P0 + c0;
      const int cn = static_cast<int>(min(static_cast<i64>(kDenseChunk), np - c0));
      const u32 xbase = s_next;  // the matched X holding product pc
      // At most cn matched X overlap the chunk (each has a product); stage their offsets.
      const int L = static_cast<int>(min(static_cast<i64>(cn), static_cast<i64>(xb - xbase)));
      for (int k = threadIdx.x; k <= L; k += blockDim.x)
        s_off[k] = v.mx_off[xbase + static_cast<u32>(k)];
      __syncthreads();  // s_off staged; every thread has read s_next
      int cn2 = 1;      // the chunk's sort width (values)
      while (cn2 < cn) cn2 <<= 1;
      for (int j = threadIdx.x; j < (kValues ? cn2 : cn); j += blockDim.x) {
        if constexpr (kValues) s_ck[j] = ~0u;  // no product of this tile (sorts last)
        if (j >= cn) continue;
        const i64 pj = pc + j;
        int lo = 0, hi = L - 1;  // last k with s_off[k] <= pj
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (s_off[mid] <= pj)
            lo = mid;
          else
            hi = mid - 1;
        }
        const u32 x = xbase + static_cast<u32>(lo);
        const i64 q = static_cast<i64>(v.mx_first[x]) + (pj - s_off[lo]);
        if (j == cn - 1) s_next = s_off[lo + 1] == pj + 1 ? x + 1 : x;
        const i64 c = v.ysc[q];
        if (c < cb || c >= ce) continue;
        if (on_tensor_cores(v, x, q)) continue;
        s_flag[c - cb] = 1;
        if constexpr (kValues) {
          // Key (column in the tile, product in the chunk): W <= kDenseTileMax < 2^14 and
          // cn <= kDenseChunk = 2^10, so it fits 24 bits.
          s_ck[j] = (static_cast<u32>(c - cb) << 10) | static_cast<u32>(j);
          s_pv[j] = v.mx_val[x] * v.ysv[q];
        }
      }
      __syncthreads();
      if constexpr (kValues) {
        // Deterministic sums: the chunk's products sorted by (column, product), each
        // column's run summed in product order and added once (chunks in order). Shared
        // atomics would make the order, and so the rounding (and which sums come out exactly
        // zero and are dropped), vary from run to run.
        for (int k = 2; k <= cn2; k <<= 1)
          for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < cn2; i += blockDim.x) {
              const int ixj = i ^ j;
              if (ixj > i) {
                const u32 a = s_ck[i], b = s_ck[ixj];
                if ((a > b) == ((i & k) == 0)) {
                  s_ck[i] = b;
                  s_ck[ixj] = a;
                }
              }
            }
            __syncthreads();
          }
        for (int k = threadIdx.x; k < cn; k += blockDim.x) {
          const u32 key = s_ck[k];
          if (key == ~0u) continue;
          const u32 col = key >> 10;
          if (k != 0 && (s_ck[k - 1] >> 10) == col) continue;
          double sum = 0;
          for (int j = k; j < cn && s_ck[j] != ~0u && (s_ck[j] >> 10) == col; ++j)
            sum += s_pv[s_ck[j] & 1023u];
          s_acc[col] += sum;  // one run per column per chunk: no other writer
        }
        __syncthreads();  // s_ck, s_pv and s_off are rewritten by the next chunk
      }
    }
    if (v.tc.otkey != nullptr) {
      for_tc_cells(v, r, threadIdx.x, blockDim.x, [&](u32 c) {
        if (c == kNone)
          atomicOr(v.err, kErrTcCell);
        else if (c >= cb && c < ce)
          s_flag[c - cb] = 1;
      });
      __syncthreads();
    }
    const int seg = (wn + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int b0 = min(wn, static_cast<int>(threadIdx.x) * seg), b1 = min(wn, b0 + seg);
    u32 cnt = 0;
    for (int k = b0; k < b1; ++k) cnt += s_flag[k];
    u32 total = 0;
    u32 e = block_exclusive_scan(cnt, s_scan, &total);
    if constexpr (!kValues) {
      (void)e;
      if (threadIdx.x == 0) {
        out.itemcnt[item] = total;
        atomicAdd(reinterpret_cast<unsigned long long*>(out.rowcnt + r),
                  static_cast<unsigned long long>(total));
      }
    } else {
      const i64 first = out.itemoff[item], n_item = out.itemoff[item + 1] - first;
      const i64 base = out.rowoff[r] + first - out.itemoff[item - t];
      if (threadIdx.x == 0 && static_cast<i64>(total) != n_item) atomicOr(v.err, kErrCount);
      for (int k = b0; k < b1; ++k) {
        if (!s_flag[k]) continue;
        if (static_cast<i64>(e) < n_item) {
          out.ecol[base + e] = static_cast<u32>(cb + k);
          out.eval[base + e] = s_acc[k];
        }
        ++e;
      }
    }
    __syncthreads();  // the next item clears the shared arrays
  }
}

unsigned grid_of(i64 n) {
  return static_cast<unsigned>(std::clamp<i64>(n, 1, i64{1} << 20));
}

}  // namespace

void launch_row_groups(cudaStream_t s, const RowsView& v, const u32* gfirst, const u32* gend,
                       i64 ngroups, bool values, const RowsOut& out) {
  if (ngroups <= 0) return;
  if (values)
    row_groups_kernel<true><<<grid_of(ngroups), kGroupBlock, 0, s>>>(v, gfirst, gend, ngroups, out);
  else
    row_groups_kernel<false>
        <<<grid_of(ngroups), kGroupBlock, 0, s>>>(v, gfirst, gend, ngroups, out);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void launch_dense_rows(cudaStream_t s, const RowsView& v, const u32* drows, i64 nitems, int ntiles,
                       int W, bool values, const RowsOut& out) {
  if (nitems <= 0) return;
  const std::size_t shm = dense_shared_bytes(W, values);
  if (values) {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(dense_rows_kernel<true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shm)));
    dense_rows_kernel<true>
        <<<grid_of(nitems), kDenseBlock, shm, s>>>(v, drows, nitems, ntiles, W, out);
  } else {
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(dense_rows_kernel<false>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shm)));
    dense_rows_kernel<false>
        <<<grid_of(nitems), kDenseBlock, shm, s>>>(v, drows, nitems, ntiles, W, out);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::kernels::cuda::sptc
