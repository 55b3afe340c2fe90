// Tensor-core blocks of the CUDA SpTC's rows assembly (rows_engine.cuh; docs/sptc.md,
// "Tensor cores"): row codes, matched keys and column codes cut into blocks of 16, the dense
// 16 x 16 blocks of X and Y found and filled, paired by key block and grouped by output
// block; the row kernels then skip their products (tc_kernels.cu multiplies them).
#include <algorithm>

#include "kernels/cuda/sptc/rows_engine.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

/// rank[i] = index of the run holding i (flags and their exclusive scan).
__global__ void ranks_kernel(i64 n, const i64* flag, const i64* excl, u32* rank) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    rank[i] = static_cast<u32>(excl[i] + flag[i] - 1);
}

__global__ void set_u32_kernel(u32* a, u32 va) {
  *a = va;
}

__global__ void low4_kernel(i64 n, const u64* code, unsigned char* lo) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    lo[i] = static_cast<unsigned char>(code[i] & 15u);
}

/// table[blk[i] * 16 + code[i] % 16] = i (rows of a row block, columns of a column block).
__global__ void fill_table_kernel(i64 n, const u64* code, const u32* blk, u32* table) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    table[static_cast<u64>(blk[i]) * kTile + (code[i] & 15u)] = static_cast<u32>(i);
}

/// Block of matched X t: row block << 32 | key block of its run.
__global__ void a_keys_kernel(i64 nmx, const u32* mx_row, const u32* mx_first, const u32* rowblk,
                              const u32* ykb, u64* key, u32* idx) {
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[t] = (static_cast<u64>(rowblk[mx_row[t]]) << 32) | ykb[mx_first[t]];
    idx[t] = static_cast<u32>(t);
  }
}

/// Block of sorted Y q: key block << 32 | column block.
__global__ void b_keys_kernel(i64 ny, const u32* ykb, const u32* ysc, const u32* colblk, u64* key,
                              u32* idx) {
  for (i64 q = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q < ny;
       q += static_cast<i64>(gridDim.x) * blockDim.x) {
    key[q] = (static_cast<u64>(ykb[q]) << 32) | colblk[ysc[q]];
    idx[q] = static_cast<u32>(q);
  }
}

/// Runs of sorted keys: start[run] = position; runkey[run] = key (when not null).
__global__ void run_starts_kernel(i64 n, const i64* flag, const i64* excl, const u64* key,
                                  u32* start, u64* runkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    if (flag[i]) {
      start[excl[i]] = static_cast<u32>(i);
      if (runkey) runkey[excl[i]] = key[i];
    }
}

/// dflag[b] = 1 when block b holds at least `need` nonzeros; dflag[nblocks] = 0.
__global__ void dense_flags_kernel(i64 nblocks, const u32* start, i64 n, i64 need, i64* dflag) {
  for (i64 b = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; b <= nblocks;
       b += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (b == nblocks) {
      dflag[b] = 0;
      continue;
    }
    const i64 end = b + 1 < nblocks ? static_cast<i64>(start[b + 1]) : n;
    dflag[b] = end - static_cast<i64>(start[b]) >= need ? 1 : 0;
  }
}

/// Element i (sorted by block; element idx[i]) gets its dense block number or kNone; the
/// first element of a dense block writes the block's key.
__global__ void elem_blocks_kernel(i64 n, const u32* idx, const i64* flag, const i64* excl,
                                   const i64* dflag, const i64* dexcl, const u64* key, u32* tile,
                                   u64* dkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 b = excl[i] + flag[i] - 1;
    const bool dense = dflag[b] != 0;
    tile[idx[i]] = dense ? static_cast<u32>(dexcl[b]) : kNone;
    if (dense && flag[i]) dkey[dexcl[b]] = key[i];
  }
}

/// Dense A block values (repeats summed) and row masks (bit kk of row rr). A tile row
/// belongs to one output row, so the first matched X of each row sums that row's values in
/// matched-X order: no atomics on values, the same sums on every run.
__global__ void a_fill_kernel(i64 nmx, const u32* xtile, const u32* mx_row, const u32* mx_first,
                              const u64* rowkey, const u64* ysk, const double* mx_val, double* at,
                              u32* mask) {
  for (i64 t0 = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t0 < nmx;
       t0 += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (t0 != 0 && mx_row[t0 - 1] == mx_row[t0]) continue;
    const u32 row = mx_row[t0];
    const u64 rr = rowkey[row] & 15u;
    for (i64 t = t0; t < nmx && mx_row[t] == row; ++t) {
      const u32 a = xtile[t];
      if (a == kNone) continue;
      const u64 kk = ysk[mx_first[t]] & 15u;
      at[static_cast<u64>(a) * 256 + rr * 16 + kk] += mx_val[t];
      atomicOr(mask + static_cast<u64>(a) * 16 + rr, 1u << kk);
    }
  }
}

/// Dense B block values and column masks (bit kk of column cc). A tile row belongs to one
/// matched key, so the first sorted Y of each key sums that key's values in sorted order.
__global__ void b_fill_kernel(i64 ny, const u32* ytile, const u64* ysk, const u32* ysc,
                              const u64* colkey, const double* ysv, double* bt, u32* mask) {
  for (i64 q0 = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q0 < ny;
       q0 += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (q0 != 0 && ysk[q0 - 1] == ysk[q0]) continue;
    const u64 key = ysk[q0], kk = key & 15u;
    for (i64 q = q0; q < ny && ysk[q] == key; ++q) {
      const u32 b = ytile[q];
      if (b == kNone) continue;
      const u64 cc = colkey[ysc[q]] & 15u;
      bt[static_cast<u64>(b) * 256 + kk * 16 + cc] += ysv[q];
      atomicOr(mask + static_cast<u64>(b) * 16 + cc, 1u << kk);
    }
  }
}

/// Per dense A block (row block, key block): the dense B blocks of the same key block.
__global__ void pair_count_kernel(i64 na, const u64* adkey, const u64* bdkey, i64 nb, i64* pcnt,
                                  u32* bfirst) {
  for (i64 a = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; a <= na;
       a += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (a == na) {
      pcnt[a] = 0;
      continue;
    }
    const u64 kb = adkey[a] & 0xffffffffull;
    i64 lo = 0, hi = nb;
    while (lo < hi) {
      const i64 mid = (lo + hi) / 2;
      if ((bdkey[mid] >> 32) < kb)
        lo = mid + 1;
      else
        hi = mid;
    }
    i64 lo2 = lo, hi2 = nb;
    while (lo2 < hi2) {
      const i64 mid = (lo2 + hi2) / 2;
      if ((bdkey[mid] >> 32) <= kb)
        lo2 = mid + 1;
      else
        hi2 = mid;
    }
    bfirst[a] = static_cast<u32>(lo);
    pcnt[a] = lo2 - lo;
  }
}

/// Pair p of A block a: output block (row block of a) << 32 | (column block of b).
__global__ void pair_expand_kernel(i64 na, const i64* poff, const u32* bfirst, const u64* adkey,
                                   const u64* bdkey, u64* okey, u32* pa, u32* pb, u32* pid) {
  for (i64 a = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; a < na;
       a += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 ib = adkey[a] >> 32;
    for (i64 p = poff[a], k = 0; p < poff[a + 1]; ++p, ++k) {
      const u32 b = bfirst[a] + static_cast<u32>(k);
      okey[p] = (ib << 32) | (bdkey[b] & 0xffffffffull);
      pa[p] = static_cast<u32>(a);
      pb[p] = b;
      pid[p] = static_cast<u32>(p);
    }
  }
}

__global__ void gather_pairs_kernel(i64 n, const u32* pid, const u32* pa, const u32* pb, u32* pa2,
                                    u32* pb2) {
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x) {
    pa2[p] = pa[pid[p]];
    pb2[p] = pb[pid[p]];
  }
}

/// smask[o * 16 + rr]: bit cc set when some pair of output block o has a product in cell
/// (rr, cc) (row mask of A and column mask of B share a key).
__global__ void smask_kernel(i64 nout, const u32* ostart, const u32* pa, const u32* pb,
                             const u32* amask, const u32* bmask, u32* smask) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < nout * kTile;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 o = i / kTile;
    const int rr = static_cast<int>(i % kTile);
    u32 bits = 0;
    for (u32 p = ostart[o]; p < ostart[o + 1]; ++p) {
      const u32 ma = amask[static_cast<u64>(pa[p]) * 16 + rr];
      if (!ma) continue;
      const u32* mb = bmask + static_cast<u64>(pb[p]) * 16;
      for (int cc = 0; cc < kTile; ++cc)
        if (ma & mb[cc]) bits |= 1u << cc;
    }
    smask[i] = bits;
  }
}

/// Products of a dense A nonzero with dense B nonzeros of its run (ydc: exclusive scan of
/// the sorted-Y dense flags).
__global__ void tc_count_kernel(i64 nmx, const u32* xtile, const u32* mx_first, const i64* mx_off,
                                const i64* ydc, unsigned long long* total) {
  unsigned long long local = 0;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x)
    if (xtile[t] != kNone) {
      const i64 f = mx_first[t];
      local += static_cast<unsigned long long>(ydc[f + (mx_off[t + 1] - mx_off[t])] - ydc[f]);
    }
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(total, local);
}

__global__ void not_none_flags_kernel(i64 n, const u32* v, i64* flag) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i <= n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[i] = i < n && v[i] != kNone ? 1 : 0;
}

}  // namespace

template <typename T>
i64 RowsEngine<T>::block_ranks(i64 n, const u64* code, i64* flag, i64* excl, DeviceMemory& rank) {
  launch_change_flags(ctx_.stream, n, code, 4, flag);
  const i64 nb = scan(flag, excl, n + 1);
  dalloc<u32>(rank, n, "SpTC tensor-core blocks");
  ranks_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(n, flag, excl, ptr<u32>(rank));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  return nb;
}

template <typename T>
void RowsEngine<T>::block_table(i64 n, const u64* code, const DeviceMemory& rank, i64 nb,
                                DeviceMemory& table) {
  dalloc<u32>(table, nb * kTile, "SpTC tensor-core blocks");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(table.get(), 0xff, static_cast<std::size_t>(nb) * kTile * 4, ctx_.stream));
  fill_table_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(n, code, ptr<u32>(rank),
                                                             ptr<u32>(table));
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RowsEngine<T>::build_tensor_cores() {
  const i64 need = std::max<i64>(1, static_cast<i64>(std::ceil(tc_thr_ * 256.0 - 1e-9)));
  if (need > 256) return;
  // Row blocks, column blocks, key blocks (ranks of code / 16).
  i64 nib = 0, njb = 0;
  DeviceMemory ykb;
  {
    const i64 nmax = std::max({nrows_, ncols_, ny_});
    DeviceMemory flag, excl;
    dalloc<i64>(flag, nmax + 1, "SpTC tensor-core blocks");
    dalloc<i64>(excl, nmax + 1, "SpTC tensor-core blocks");
    // Rows: blocks, each row's place in its block, and the block -> row table.
    nib = block_ranks(nrows_, rowkey_, ptr<i64>(flag), ptr<i64>(excl), rowblk_);
    dalloc<unsigned char>(rowlo_, nrows_, "SpTC tensor-core blocks");
    low4_kernel<<<grid_for(nrows_), kBlock, 0, ctx_.stream>>>(nrows_, rowkey_,
                                                              ptr<unsigned char>(rowlo_));
    block_table(nrows_, rowkey_, rowblk_, nib, irow_);
    // Columns, then Y's matched keys.
    njb = block_ranks(ncols_, colkey_, ptr<i64>(flag), ptr<i64>(excl), colblk_tmp_);
    block_table(ncols_, colkey_, colblk_tmp_, njb, jcol_);
    block_ranks(ny_, ysk_, ptr<i64>(flag), ptr<i64>(excl), ykb);
  }
  // Dense blocks of one side: block keys sorted, runs counted, dense ones numbered.
  // Returns the number of dense blocks; tile[element] = dense block or kNone; dkey = keys.
  auto dense_blocks = [&](i64 n, DeviceMemory& keys, DeviceMemory& idx, DeviceMemory& tile,
                          DeviceMemory& dkey) -> i64 {
    DeviceMemory k1, i1, flag, excl, start, dflag, dexcl;
    dalloc<u64>(k1, n, "SpTC tensor-core blocks");
    dalloc<u32>(i1, n, "SpTC tensor-core blocks");
    cub::DoubleBuffer<u64> kb(ptr<u64>(keys), ptr<u64>(k1));
    cub::DoubleBuffer<u32> ib(ptr<u32>(idx), ptr<u32>(i1));
    sort_pairs(kb, ib, n, 64);
    dalloc<i64>(flag, n + 1, "SpTC tensor-core blocks");
    dalloc<i64>(excl, n + 1, "SpTC tensor-core blocks");
    launch_change_flags(ctx_.stream, n, kb.Current(), 0, ptr<i64>(flag));
    const i64 nblocks = scan(ptr<i64>(flag), ptr<i64>(excl), n + 1);
    dalloc<u32>(start, nblocks, "SpTC tensor-core blocks");
    run_starts_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(
        n, ptr<i64>(flag), ptr<i64>(excl), kb.Current(), ptr<u32>(start), nullptr);
    dalloc<i64>(dflag, nblocks + 1, "SpTC tensor-core blocks");
    dalloc<i64>(dexcl, nblocks + 1, "SpTC tensor-core blocks");
    dense_flags_kernel<<<grid_for(nblocks + 1), kBlock, 0, ctx_.stream>>>(nblocks, ptr<u32>(start),
                                                                          n, need, ptr<i64>(dflag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    const i64 nd = scan(ptr<i64>(dflag), ptr<i64>(dexcl), nblocks + 1);
    dalloc<u32>(tile, n, "SpTC tensor-core blocks");
    dalloc<u64>(dkey, nd, "SpTC tensor-core blocks");
    elem_blocks_kernel<<<grid_for(n), kBlock, 0, ctx_.stream>>>(
        n, ib.Current(), ptr<i64>(flag), ptr<i64>(excl), ptr<i64>(dflag), ptr<i64>(dexcl),
        kb.Current(), ptr<u32>(tile), ptr<u64>(dkey));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    return nd;
  };
  DeviceMemory adkey, bdkey;
  i64 na = 0, nb = 0;
  {
    DeviceMemory keys, idx;
    dalloc<u64>(keys, nmx_, "SpTC tensor-core blocks");
    dalloc<u32>(idx, nmx_, "SpTC tensor-core blocks");
    a_keys_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<u32>(mx_row_), ptr<u32>(mx_first_), ptr<u32>(rowblk_), ptr<u32>(ykb),
        ptr<u64>(keys), ptr<u32>(idx));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    na = dense_blocks(nmx_, keys, idx, xtile_, adkey);
  }
  {
    DeviceMemory keys, idx;
    dalloc<u64>(keys, ny_, "SpTC tensor-core blocks");
    dalloc<u32>(idx, ny_, "SpTC tensor-core blocks");
    b_keys_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
        ny_, ptr<u32>(ykb), ptr<u32>(ysc_), ptr<u32>(colblk_tmp_), ptr<u64>(keys), ptr<u32>(idx));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nb = dense_blocks(ny_, keys, idx, ytile_, bdkey);
  }
  colblk_tmp_ = DeviceMemory();
  ykb = DeviceMemory();
  auto give_up = [&](const std::string& why) {
    tc_note_ = why;
    for (DeviceMemory* m : {&xtile_, &ytile_, &irow_, &jcol_, &rowblk_, &rowlo_})
      *m = DeviceMemory();
    tc_on_ = false;
  };
  if (na == 0 || nb == 0) return give_up("no dense blocks");
  // Block pairs sharing a key block, grouped by output block.
  DeviceMemory pcnt, poff, bfirst;
  dalloc<i64>(pcnt, na + 1, "SpTC block pairs");
  dalloc<i64>(poff, na + 1, "SpTC block pairs");
  dalloc<u32>(bfirst, na, "SpTC block pairs");
  pair_count_kernel<<<grid_for(na + 1), kBlock, 0, ctx_.stream>>>(
      na, ptr<u64>(adkey), ptr<u64>(bdkey), nb, ptr<i64>(pcnt), ptr<u32>(bfirst));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const i64 np = scan(ptr<i64>(pcnt), ptr<i64>(poff), na + 1);
  if (np == 0) return give_up("no pair of dense blocks");
  if (np >= (i64{1} << 32) - 1) return give_up("over 2^32 block pairs");
  const std::size_t blocks_bytes =
      static_cast<std::size_t>(na + nb) * 256 *
      (8 + (tc_prec_ == TensorCorePrecision::fp64 ? 0 : sptc::tile_value_bytes(tc_prec_)));
  {
    const std::size_t free_b = free_bytes();
    const std::size_t want = blocks_bytes + static_cast<std::size_t>(np) * 40;
    if (want > free_b / 4)
      return give_up("the dense blocks and their pairs would need " + gib(want) +
                     " of device memory");
  }
  DeviceMemory okey, pa, pb, pid;
  {
    DeviceMemory okey1, pid1;
    dalloc<u64>(okey, np, "SpTC block pairs");
    dalloc<u64>(okey1, np, "SpTC block pairs");
    dalloc<u32>(pa, np, "SpTC block pairs");
    dalloc<u32>(pb, np, "SpTC block pairs");
    dalloc<u32>(pid, np, "SpTC block pairs");
    dalloc<u32>(pid1, np, "SpTC block pairs");
    pair_expand_kernel<<<grid_for(na), kBlock, 0, ctx_.stream>>>(
        na, ptr<i64>(poff), ptr<u32>(bfirst), ptr<u64>(adkey), ptr<u64>(bdkey), ptr<u64>(okey),
        ptr<u32>(pa), ptr<u32>(pb), ptr<u32>(pid));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(okey), ptr<u64>(okey1));
    cub::DoubleBuffer<u32> ib(ptr<u32>(pid), ptr<u32>(pid1));
    sort_pairs(kb, ib, np, 64);
    dalloc<u32>(pa_, np, "SpTC block pairs");
    dalloc<u32>(pb_, np, "SpTC block pairs");
    gather_pairs_kernel<<<grid_for(np), kBlock, 0, ctx_.stream>>>(
        np, ib.Current(), ptr<u32>(pa), ptr<u32>(pb), ptr<u32>(pa_), ptr<u32>(pb_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    DeviceMemory flag, excl;
    dalloc<i64>(flag, np + 1, "SpTC block pairs");
    dalloc<i64>(excl, np + 1, "SpTC block pairs");
    launch_change_flags(ctx_.stream, np, kb.Current(), 0, ptr<i64>(flag));
    nout_ = scan(ptr<i64>(flag), ptr<i64>(excl), np + 1);
    dalloc<u32>(ostart_, nout_ + 1, "SpTC block pairs");
    dalloc<u64>(otkey_, nout_, "SpTC block pairs");
    run_starts_kernel<<<grid_for(np), kBlock, 0, ctx_.stream>>>(
        np, ptr<i64>(flag), ptr<i64>(excl), kb.Current(), ptr<u32>(ostart_), ptr<u64>(otkey_));
    set_u32_kernel<<<1, 1, 0, ctx_.stream>>>(ptr<u32>(ostart_) + nout_, static_cast<u32>(np));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  // Block values (double, repeats summed) and masks, then the pair masks per output block.
  DeviceMemory at, bt, amask, bmask;
  dalloc<double>(at, na * 256, "SpTC dense blocks");
  dalloc<double>(bt, nb * 256, "SpTC dense blocks");
  dalloc<u32>(amask, na * kTile, "SpTC dense blocks");
  dalloc<u32>(bmask, nb * kTile, "SpTC dense blocks");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(at.get(), 0, static_cast<std::size_t>(na) * 256 * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(bt.get(), 0, static_cast<std::size_t>(nb) * 256 * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(amask.get(), 0, static_cast<std::size_t>(na) * kTile * 4, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(bmask.get(), 0, static_cast<std::size_t>(nb) * kTile * 4, ctx_.stream));
  a_fill_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
      nmx_, ptr<u32>(xtile_), ptr<u32>(mx_row_), ptr<u32>(mx_first_), rowkey_, ysk_,
      ptr<double>(mx_val_), ptr<double>(at), ptr<u32>(amask));
  b_fill_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
      ny_, ptr<u32>(ytile_), ysk_, ptr<u32>(ysc_), colkey_, ptr<double>(ysv_), ptr<double>(bt),
      ptr<u32>(bmask));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  dalloc<u32>(smask_, nout_ * kTile, "SpTC block pairs");
  smask_kernel<<<grid_for(nout_ * kTile), kBlock, 0, ctx_.stream>>>(
      nout_, ptr<u32>(ostart_), ptr<u32>(pa_), ptr<u32>(pb_), ptr<u32>(amask), ptr<u32>(bmask),
      ptr<u32>(smask_));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  if (tc_prec_ == TensorCorePrecision::fp64) {
    atiles_ = std::move(at);
    btiles_ = std::move(bt);
  } else {
    const std::size_t vb = sptc::tile_value_bytes(tc_prec_);
    alloc(atiles_, static_cast<std::size_t>(na) * 256 * vb, "SpTC dense blocks");
    alloc(btiles_, static_cast<std::size_t>(nb) * 256 * vb, "SpTC dense blocks");
    sptc::launch_convert_tiles(ctx_.stream, tc_prec_, na * 256, ptr<double>(at), atiles_.get());
    sptc::launch_convert_tiles(ctx_.stream, tc_prec_, nb * 256, ptr<double>(bt), btiles_.get());
  }
  // Products the blocks take over (statistics).
  {
    DeviceMemory flag, ydc, total;
    dalloc<i64>(flag, ny_ + 1, "SpTC tensor-core blocks");
    dalloc<i64>(ydc, ny_ + 1, "SpTC tensor-core blocks");
    dalloc<unsigned long long>(total, 1, "SpTC tensor-core blocks");
    not_none_flags_kernel<<<grid_for(ny_ + 1), kBlock, 0, ctx_.stream>>>(ny_, ptr<u32>(ytile_),
                                                                         ptr<i64>(flag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    scan(ptr<i64>(flag), ptr<i64>(ydc), ny_ + 1);
    TESSERA_CUDA_CHECK(cudaMemsetAsync(total.get(), 0, 8, ctx_.stream));
    tc_count_kernel<<<grid_for(nmx_, 4096), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<u32>(xtile_), ptr<u32>(mx_first_), ptr<i64>(mx_off_), ptr<i64>(ydc),
        ptr<unsigned long long>(total));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    tc_products_ = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(total)));
  }
  tc_on_ = true;
  tc_blocks_ = na + nb;
  tc_pairs_ = np;
  held_ += blocks_bytes / 2 + static_cast<std::size_t>(np) * 8 +
           static_cast<std::size_t>(nout_) * 76 + static_cast<std::size_t>(nmx_ + ny_) * 4 +
           static_cast<std::size_t>(nib + njb) * 64 + static_cast<std::size_t>(nrows_) * 5;
}

template void RowsEngine<float>::build_tensor_cores();
template void RowsEngine<double>::build_tensor_cores();

}  // namespace tessera::kernels::cuda::sptc
