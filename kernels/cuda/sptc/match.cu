// Matching of the CUDA SpTC's rows assembly (rows_engine.cuh; docs/sptc.md, "CUDA
// kernel"): the inputs on the device, Y sorted by matched key and its output coordinates
// ranked into columns, X sorted by row code and joined with its runs of Y, rows and their
// classes (small groups, dense tiles, spill), the tensor-core blocks (blocks.cu) and the
// count pass.
#include <algorithm>
#include <utility>

#include "kernels/cuda/runtime/trace.cuh"
#include "kernels/cuda/sptc/rows_engine.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

/// Column ranks: sorted column code i (of Y nonzero cperm[i]) has rank excl[i] + flag[i] - 1;
/// the first of each run is the column's representative and gives its code.
__global__ void col_ranks_kernel(i64 ny, const i64* flag, const i64* excl, const u32* cperm,
                                 const u64* cks, u32* crank, u32* colrep, u64* colkey) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < ny;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = excl[i] + flag[i] - 1;
    crank[cperm[i]] = static_cast<u32>(c);
    if (flag[i]) {
      colrep[c] = cperm[i];
      colkey[c] = cks[i];
    }
  }
}

/// Column table (a small column-code space, no sort): rep[code] = the first Y nonzero with
/// that column code (rep filled with 0xffffffff before).
__global__ void col_table_kernel(i64 ny, KeyMap m, u32* rep) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < ny;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    u32* r = rep + pack(m, k);
    if (__ldcg(r) > static_cast<u32>(k))
      atomicMin(r, static_cast<u32>(k));  // most see a smaller one
  }
}

/// flag[c] = 1 where column code c occurs (c < cells; flag[cells] = 0 for the scan's total).
__global__ void col_present_kernel(i64 cells, const u32* rep, i64* flag) {
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c <= cells;
       c += static_cast<i64>(gridDim.x) * blockDim.x)
    flag[c] = c < cells && rep[c] != 0xffffffffu ? 1 : 0;
}

/// The occurring codes in ascending order: colrep / colkey of rank excl[c], as the sort of the
/// column codes gives them (the representative is the first nonzero of each code).
__global__ void col_table_ranks_kernel(i64 cells, const u32* rep, const i64* flag, const i64* excl,
                                       u32* colrep, u64* colkey) {
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c < cells;
       c += static_cast<i64>(gridDim.x) * blockDim.x)
    if (flag[c]) {
      colrep[excl[c]] = rep[c];
      colkey[excl[c]] = static_cast<u64>(c);
    }
}

/// crank[k] = rank of Y nonzero k's column code (excl over the column table).
__global__ void col_rank_of_kernel(i64 ny, KeyMap m, const i64* excl, u32* crank) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < ny;
       k += static_cast<i64>(gridDim.x) * blockDim.x)
    crank[k] = static_cast<u32>(excl[pack(m, k)]);
}

/// Y in matched-key order: column and value (double) of sorted position q.
template <typename T>
__global__ void y_sorted_kernel(i64 ny, const index_t* yperm, const u32* crank, const T* yv,
                                u32* ysc, double* ysv) {
  for (i64 q = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; q < ny;
       q += static_cast<i64>(gridDim.x) * blockDim.x) {
    const index_t j = yperm[q];
    ysc[q] = crank[j];
    ysv[q] = static_cast<double>(yv[j]);
  }
}

/// X in row order (xperm): the run of equal matched keys among Y's sorted keys; mflag = 1
/// when the run is not empty.
__global__ void x_ranges_sorted_kernel(i64 nx, KeyMap m, const index_t* xperm, const u64* ykey,
                                       i64 ny, u32* first, i64* cnt, i64* mflag) {
  for (i64 s = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; s < nx;
       s += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 key = pack(m, xperm[s]);
    const i64 lo = lower_bound(ykey, 0, ny, key), hi = upper_bound(ykey, lo, ny, key);
    first[s] = static_cast<u32>(lo);
    cnt[s] = hi - lo;
    mflag[s] = hi > lo ? 1 : 0;
  }
}

/// Keeps the matched X (row order): run, product count, value, input index, row code.
template <typename T>
__global__ void x_compact_kernel(i64 nx, const i64* mflag, const i64* mpos, const index_t* xperm,
                                 const u32* xfirst, const i64* xcnt, const u64* rks, const T* xv,
                                 u32* mx_first, i64* mx_cnt, double* mx_val, u32* mx_orig,
                                 u64* mx_rk) {
  for (i64 s = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; s < nx;
       s += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!mflag[s]) continue;
    const i64 t = mpos[s];
    const index_t i = xperm[s];
    mx_first[t] = xfirst[s];
    mx_cnt[t] = xcnt[s];
    mx_val[t] = static_cast<double>(xv[i]);
    mx_orig[t] = i;
    mx_rk[t] = rks[s];
  }
}

/// Rows: runs of equal row codes among the matched X.
__global__ void rows_build_kernel(i64 nmx, const i64* rf, const i64* rex, const u32* mx_orig,
                                  const u64* mx_rk, const i64* mx_off, u32* mx_row, u32* rowstart,
                                  u32* rowrep, u64* rowkey, i64* rowp) {
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < nmx;
       t += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 r = rex[t] + rf[t] - 1;
    mx_row[t] = static_cast<u32>(r);
    if (rf[t]) {
      rowstart[r] = static_cast<u32>(t);
      rowrep[r] = mx_orig[t];
      rowkey[r] = mx_rk[t];
      rowp[r] = mx_off[t];
    }
  }
}

__global__ void set_tail_kernel(u32* a, u32 va, i64* b, i64 vb) {
  *a = va;
  *b = vb;
}

/// Row classes (docs/sptc.md): small rows are grouped (gs: first row of a group), dense
/// rows get a block per column tile (dflag), the rest spill to the global sort (sflag).
/// Every flag array has nrows + 1 entries, the last 0.
__device__ __forceinline__ bool small_row(const i64* rowp, i64 r) {
  return rowp[r + 1] - rowp[r] <= sptc::kSmallRow;
}
__global__ void row_class_kernel(i64 nrows, const i64* rowp, i64 heavy, int dense_ok, int one_tile,
                                 i64 ncols, i64* dflag, i64* sflag, i64* gs) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r <= nrows;
       r += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (r == nrows) {
      dflag[r] = sflag[r] = gs[r] = 0;
      continue;
    }
    const i64 np = rowp[r + 1] - rowp[r];
    const bool h = np <= sptc::kSmallRow;
    const bool d = !h && np <= heavy && dense_ok && (one_tile || np * sptc::kDenseRatio >= ncols);
    dflag[r] = d ? 1 : 0;
    sflag[r] = !h && !d ? 1 : 0;
    gs[r] = h && (r == 0 || !small_row(rowp, r - 1) ||
                  rowp[r] / sptc::kSmallRow != rowp[r - 1] / sptc::kSmallRow)
                ? 1
                : 0;
  }
}

__global__ void row_lists_kernel(i64 nrows, const i64* rowp, const i64* dflag, const i64* dex,
                                 const i64* sflag, const i64* sex, const i64* gs, const i64* gex,
                                 u32* drows, u32* srows, i64* sprod, u32* gfirst, u32* gend) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r < nrows;
       r += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (dflag[r]) drows[dex[r]] = static_cast<u32>(r);
    if (sflag[r]) {
      srows[sex[r]] = static_cast<u32>(r);
      sprod[sex[r]] = rowp[r + 1] - rowp[r];
    }
    if (gs[r]) gfirst[gex[r]] = static_cast<u32>(r);
    if (small_row(rowp, r) && (r + 1 == nrows || !small_row(rowp, r + 1) || gs[r + 1]))
      gend[gex[r] + gs[r] - 1] = static_cast<u32>(r + 1);
  }
}

/// Count pass of the spill rows: sorted keys, one entry per distinct key.
__global__ void spill_count_kernel(i64 n, const u64* key, u64 ncols, i64* rowcnt,
                                   unsigned long long* distinct) {
  unsigned long long local = 0;
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x)
    if (p == 0 || key[p] != key[p - 1]) {
      atomicAdd(reinterpret_cast<unsigned long long*>(rowcnt + key[p] / ncols), 1ull);
      ++local;
    }
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(distinct, local);
}

}  // namespace

template <typename T>
void RowsEngine<T>::build(const SparseTensor<T>& x, const SparseTensor<T>& y,
                          ContractCount& count) {
  nx_ = x.nnz();
  ny_ = y.nnz();
  if (nx_ == 0 || ny_ == 0) return;
  const bool self = &x == &y;
  const std::size_t in_bytes =
      static_cast<std::size_t>(nx_) * (x.idx.size() * sizeof(index_t) + sizeof(T)) +
      (self ? 0 : static_cast<std::size_t>(ny_) * (y.idx.size() * sizeof(index_t) + sizeof(T)));
  // Peak of the matching: about 56 bytes per Y and 64 per X nonzero besides the inputs.
  check_fits(ctx_, in_bytes + 64 * static_cast<std::size_t>(nx_ + ny_), "matching the inputs", 0,
             -1);
  ev_.ensure(4);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  {
    PhaseTrace tr("sptc upload");
    DeviceTensor<T>::load(ctx_, xd_, x, self ? nullptr : &yd_, &y);
    ydp_ = self ? &xd_ : &yd_;
    tr.mark("inputs");
  }
  build_loaded(x.dims, count);
}

template <typename T>
void RowsEngine<T>::build_device(DeviceTensor<T>&& x, DeviceTensor<T>&& y,
                                 const std::vector<u64>& xdims, i64 nx, i64 ny,
                                 ContractCount& count) {
  nx_ = nx;
  ny_ = ny;
  xd_ = std::move(x);
  yd_ = std::move(y);
  ydp_ = &yd_;
  if (nx_ == 0 || ny_ == 0) return;
  check_fits(ctx_, 64 * static_cast<std::size_t>(nx_ + ny_), "matching the inputs", 0, -1);
  ev_.ensure(4);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  build_loaded(xdims, count);
}

template <typename T>
void RowsEngine<T>::build_loaded(const std::vector<u64>& xdims, ContractCount& count) {
  const DeviceTensor<T>& yd = *ydp_;
  PhaseTrace tr("sptc match (nx " + std::to_string(nx_) + ", ny " + std::to_string(ny_) + ")");
  held_ = xd_.bytes + yd_.bytes;
  alloc(err_, sizeof(unsigned), "SpTC error flags");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(err_.get(), 0, sizeof(unsigned), ctx_.stream));

  // Lengths of the key, row and column codes.
  std::vector<u64> klen, rlen, clen;
  std::vector<int> xrow_modes, ycol_modes;
  for (int m : ws_.x_key) klen.push_back(xdims[static_cast<std::size_t>(m)]);
  for (int o = 0; o < ws_.out_order(); ++o) {
    const auto os = static_cast<std::size_t>(o);
    if (ws_.out_from_y[os]) {
      ycol_modes.push_back(ws_.out_mode[os]);
      clen.push_back(dims_[os]);
    } else {
      xrow_modes.push_back(ws_.out_mode[os]);
      rlen.push_back(dims_[os]);
    }
  }
  const KeyMap xk = key_map(xd_, ws_.x_key, klen), yk = key_map(yd, ws_.y_key, klen);
  const KeyMap rk = key_map(xd_, xrow_modes, rlen), ck = key_map(yd, ycol_modes, clen);
  const int kbits = key_bits(cells(klen)), rbits = key_bits(cells(rlen)),
            cbits = key_bits(cells(clen));

  // ---- Y: sorted by matched key; columns ranked ----
  Sorted ys;  // Y by matched key; the sorted keys are kept for the tensor-core blocks
  sort_by_code(yk, ny_, kbits, "SpTC keys", &ys);
  tr.mark("y key sort");
  const u64* ysk = ys.keys;
  const index_t* yperm = ys.perm;
  DeviceMemory colkey;  // per column: its code (tensor-core blocks)
  {
    DeviceMemory flag, excl, crank;
    dalloc<u32>(crank, ny_, "SpTC column ranks");
    // Column ranks: flags where a new column begins, over a table of the column codes when
    // their space has at most max(2^20, ny) cells (no sort of Y), else over Y's column
    // codes sorted; the scan of the flags ranks them. Same ranks, representatives and codes
    // either way.
    const u128 ccells = cells(clen);
    const bool table = ccells <= std::max<u128>(u128{1} << 20, static_cast<u128>(ny_));
    const i64 nf = table ? static_cast<i64>(ccells) : ny_;  // flags (and one for the total)
    DeviceMemory rep;
    Sorted cs;
    dalloc<i64>(flag, nf + 1, "SpTC flags");
    dalloc<i64>(excl, nf + 1, "SpTC flags");
    if (table) {
      dalloc<u32>(rep, nf, "SpTC column table");
      TESSERA_CUDA_CHECK(
          cudaMemsetAsync(rep.get(), 0xff, static_cast<std::size_t>(nf) * 4, ctx_.stream));
      col_table_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(ny_, ck, ptr<u32>(rep));
      col_present_kernel<<<grid_for(nf + 1), kBlock, 0, ctx_.stream>>>(nf, ptr<u32>(rep),
                                                                       ptr<i64>(flag));
    } else {
      sort_by_code(ck, ny_, cbits, "SpTC column keys", &cs);
      launch_change_flags(ctx_.stream, ny_, cs.keys, 0, ptr<i64>(flag));
    }
    TESSERA_CUDA_CHECK(cudaGetLastError());
    ncols_ = scan(ptr<i64>(flag), ptr<i64>(excl), nf + 1);
    dalloc<u32>(colrep_, ncols_, "SpTC columns");
    dalloc<u64>(colkey, ncols_, "SpTC columns");
    if (table) {
      col_table_ranks_kernel<<<grid_for(nf), kBlock, 0, ctx_.stream>>>(
          nf, ptr<u32>(rep), ptr<i64>(flag), ptr<i64>(excl), ptr<u32>(colrep_), ptr<u64>(colkey));
      col_rank_of_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(ny_, ck, ptr<i64>(excl),
                                                                    ptr<u32>(crank));
    } else {
      col_ranks_kernel<<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
          ny_, ptr<i64>(flag), ptr<i64>(excl), cs.perm, cs.keys, ptr<u32>(crank), ptr<u32>(colrep_),
          ptr<u64>(colkey));
    }
    TESSERA_CUDA_CHECK(cudaGetLastError());
    dalloc<u32>(ysc_, ny_, "SpTC sorted Y");
    dalloc<double>(ysv_, ny_, "SpTC sorted Y");
    y_sorted_kernel<T><<<grid_for(ny_), kBlock, 0, ctx_.stream>>>(
        ny_, yperm, ptr<u32>(crank), ptr<T>(yd.vals), ptr<u32>(ysc_), ptr<double>(ysv_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  ys.p[0] = DeviceMemory();  // the permutation is no longer needed
  ys.p[1] = DeviceMemory();
  yperm = nullptr;
  tr.mark("y columns");
  held_ += static_cast<std::size_t>(ny_) * 12 + static_cast<std::size_t>(ncols_) * 4;

  // ---- X: sorted by row code, matched, compacted; rows ----
  DeviceMemory rowkey;  // per row: its code (tensor-core blocks)
  {
    DeviceMemory xfirst, xcnt, mflag, mpos, mx_cnt, mx_orig, mx_rk;
    Sorted xs;  // stable: a row keeps X's input order
    sort_by_code(rk, nx_, rbits, "SpTC row keys", &xs);
    tr.mark("x row sort");
    dalloc<u32>(xfirst, nx_, "SpTC ranges");
    dalloc<i64>(xcnt, nx_, "SpTC ranges");
    dalloc<i64>(mflag, nx_ + 1, "SpTC flags");
    dalloc<i64>(mpos, nx_ + 1, "SpTC flags");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(mflag) + nx_, 0, sizeof(i64), ctx_.stream));
    x_ranges_sorted_kernel<<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
        nx_, xk, xs.perm, ysk, ny_, ptr<u32>(xfirst), ptr<i64>(xcnt), ptr<i64>(mflag));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    nmx_ = scan(ptr<i64>(mflag), ptr<i64>(mpos), nx_ + 1);
    tr.mark("x match");
    if (nmx_ == 0) {
      TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
      ctx_.sync();
      match_s_ = elapsed(ev_[0], ev_[1]);
      count.products = 0;
      count.workspace_bytes = held_;
      return;
    }
    dalloc<u32>(mx_first_, nmx_, "SpTC matched X");
    dalloc<i64>(mx_cnt, nmx_ + 1, "SpTC matched X");
    dalloc<double>(mx_val_, nmx_, "SpTC matched X");
    dalloc<u32>(mx_orig, nmx_, "SpTC matched X");
    dalloc<u64>(mx_rk, nmx_, "SpTC matched X");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(mx_cnt) + nmx_, 0, sizeof(i64), ctx_.stream));
    x_compact_kernel<T><<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
        nx_, ptr<i64>(mflag), ptr<i64>(mpos), xs.perm, ptr<u32>(xfirst), ptr<i64>(xcnt), xs.keys,
        ptr<T>(xd_.vals), ptr<u32>(mx_first_), ptr<i64>(mx_cnt), ptr<double>(mx_val_),
        ptr<u32>(mx_orig), ptr<u64>(mx_rk));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    // Free the sort buffers before the per-row arrays.
    xs = Sorted();
    xfirst = DeviceMemory();
    xcnt = DeviceMemory();
    dalloc<i64>(mx_off_, nmx_ + 1, "SpTC product offsets");
    products_ = scan(ptr<i64>(mx_cnt), ptr<i64>(mx_off_), nmx_ + 1);
    mx_cnt = DeviceMemory();
    // Rows: runs of equal row codes (mflag/mpos reused as flags and their scan).
    launch_change_flags(ctx_.stream, nmx_, ptr<u64>(mx_rk), 0, ptr<i64>(mflag));
    nrows_ = scan(ptr<i64>(mflag), ptr<i64>(mpos), nmx_ + 1);
    dalloc<u32>(mx_row_, nmx_, "SpTC matched X");
    dalloc<u32>(rowstart_, nrows_ + 1, "SpTC rows");
    dalloc<u32>(rowrep_, nrows_, "SpTC rows");
    dalloc<u64>(rowkey, nrows_, "SpTC rows");
    dalloc<i64>(rowp_, nrows_ + 1, "SpTC rows");
    rows_build_kernel<<<grid_for(nmx_), kBlock, 0, ctx_.stream>>>(
        nmx_, ptr<i64>(mflag), ptr<i64>(mpos), ptr<u32>(mx_orig), ptr<u64>(mx_rk),
        ptr<i64>(mx_off_), ptr<u32>(mx_row_), ptr<u32>(rowstart_), ptr<u32>(rowrep_),
        ptr<u64>(rowkey), ptr<i64>(rowp_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    set_tail_kernel<<<1, 1, 0, ctx_.stream>>>(ptr<u32>(rowstart_) + nrows_, static_cast<u32>(nmx_),
                                              ptr<i64>(rowp_) + nrows_, products_);
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  tr.mark("x compact, rows");
  held_ += static_cast<std::size_t>(nmx_) * 28 + static_cast<std::size_t>(nrows_) * 16;
  count.products = products_;

  // ---- tensor-core blocks ----
  if (tc_prec_ != TensorCorePrecision::off && tc_thr_ <= 1.0) {
    const auto t0 = std::chrono::steady_clock::now();
    rowkey_ = ptr<u64>(rowkey);
    colkey_ = ptr<u64>(colkey);
    ysk_ = ysk;
    build_tensor_cores();
    rowkey_ = colkey_ = ysk_ = nullptr;
    ctx_.sync();
    tc_build_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  rowkey = DeviceMemory();
  colkey = DeviceMemory();
  ys = Sorted();
  tr.mark("tensor-core blocks");

  // ---- row classes ----
  {
    const i64 heavy = std::max<i64>(i64{1} << 20, products_ / 512);
    const bool dense_ok = ncols_ <= static_cast<i64>(sptc::kDenseTileMax) * sptc::kDenseTilesMax;
    const bool one_tile = ncols_ <= sptc::kDenseTileMax;
    DeviceMemory dflag, dex, sflag, sex, gs, gex, sprod;
    for (DeviceMemory* m : {&dflag, &dex, &sflag, &sex, &gs, &gex})
      dalloc<i64>(*m, nrows_ + 1, "SpTC row classes");
    row_class_kernel<<<grid_for(nrows_ + 1), kBlock, 0, ctx_.stream>>>(
        nrows_, ptr<i64>(rowp_), heavy, dense_ok ? 1 : 0, one_tile ? 1 : 0, ncols_, ptr<i64>(dflag),
        ptr<i64>(sflag), ptr<i64>(gs));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    ndense_ = scan(ptr<i64>(dflag), ptr<i64>(dex), nrows_ + 1);
    nspill_ = scan(ptr<i64>(sflag), ptr<i64>(sex), nrows_ + 1);
    ngroups_ = scan(ptr<i64>(gs), ptr<i64>(gex), nrows_ + 1);
    dalloc<u32>(drows_, ndense_, "SpTC row classes");
    dalloc<u32>(srows_, nspill_, "SpTC row classes");
    dalloc<i64>(sprod, nspill_ + 1, "SpTC row classes");
    dalloc<i64>(soff_, nspill_ + 1, "SpTC row classes");
    dalloc<u32>(gfirst_, ngroups_, "SpTC row classes");
    dalloc<u32>(gend_, ngroups_, "SpTC row classes");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(sprod) + nspill_, 0, sizeof(i64), ctx_.stream));
    row_lists_kernel<<<grid_for(nrows_), kBlock, 0, ctx_.stream>>>(
        nrows_, ptr<i64>(rowp_), ptr<i64>(dflag), ptr<i64>(dex), ptr<i64>(sflag), ptr<i64>(sex),
        ptr<i64>(gs), ptr<i64>(gex), ptr<u32>(drows_), ptr<u32>(srows_), ptr<i64>(sprod),
        ptr<u32>(gfirst_), ptr<u32>(gend_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    spill_products_ = scan(ptr<i64>(sprod), ptr<i64>(soff_), nspill_ + 1);
    ntiles_ = static_cast<int>(
        std::max<i64>(1, (ncols_ + sptc::kDenseTileMax - 1) / sptc::kDenseTileMax));
    tile_w_ = static_cast<int>(((ncols_ + ntiles_ - 1) / ntiles_ + 3) / 4 * 4);
    held_ += static_cast<std::size_t>(ndense_ + nspill_ + 2 * ngroups_) * 4 +
             static_cast<std::size_t>(nspill_) * 8;
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  tr.mark("row classes");

  // ---- count pass ----
  const i64 nitems = ndense_ * ntiles_;
  const std::size_t S = static_cast<std::size_t>(spill_products_);
  {
    std::size_t sort_tmp = 0;
    if (S > 0) {
      cub::DoubleBuffer<u64> k(nullptr, nullptr);
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_tmp, k, spill_products_, 0,
                                                        64, ctx_.stream));
    }
    count_peak_ = 16 * S + sort_tmp + static_cast<std::size_t>(nrows_ + nitems) * 16;
    check_fits(ctx_, count_peak_, "counting the output", products_, -1);
  }
  DeviceMemory rowcnt, itemcnt;
  dalloc<i64>(rowcnt, nrows_ + 1, "SpTC row counts");
  dalloc<i64>(itemcnt, nitems + 1, "SpTC row counts");
  dalloc<i64>(rowoff_, nrows_ + 1, "SpTC row offsets");
  dalloc<i64>(itemoff_, nitems + 1, "SpTC row offsets");
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(rowcnt.get(), 0, static_cast<std::size_t>(nrows_ + 1) * 8, ctx_.stream));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(itemcnt.get(), 0, static_cast<std::size_t>(nitems + 1) * 8, ctx_.stream));
  const sptc::RowsView v = view();
  sptc::RowsOut co;
  co.rowcnt = ptr<i64>(rowcnt);
  co.itemcnt = ptr<i64>(itemcnt);
  sptc::launch_row_groups(ctx_.stream, v, ptr<u32>(gfirst_), ptr<u32>(gend_), ngroups_, false, co);
  sptc::launch_dense_rows(ctx_.stream, v, ptr<u32>(drows_), nitems, ntiles_, tile_w_, false, co);
  if (S > 0) {
    DeviceMemory k0, k1, c;
    dalloc<u64>(k0, spill_products_, "SpTC spill keys");
    dalloc<u64>(k1, spill_products_, "SpTC spill keys");
    dalloc<unsigned long long>(c, 1, "SpTC count");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, sizeof(unsigned long long), ctx_.stream));
    launch_spill_keys(ctx_.stream, spill_products_, ptr<i64>(soff_), nspill_, ptr<u32>(srows_), v,
                      ptr<u64>(k0), nullptr);
    cub::DoubleBuffer<u64> kb(ptr<u64>(k0), ptr<u64>(k1));
    sort_keys(kb, spill_products_, key_bits(static_cast<u128>(nrows_) * static_cast<u128>(ncols_)));
    spill_count_kernel<<<grid_for(spill_products_, 4096), kBlock, 0, ctx_.stream>>>(
        spill_products_, kb.Current(), static_cast<u64>(ncols_), ptr<i64>(rowcnt),
        ptr<unsigned long long>(c));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    spill_entries_ = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(c)));
  }
  entries_ = scan(ptr<i64>(rowcnt), ptr<i64>(rowoff_), nrows_ + 1);
  if (nitems > 0) scan(ptr<i64>(itemcnt), ptr<i64>(itemoff_), nitems + 1);
  check_err("in the count pass");
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  tr.mark("count");
  match_s_ = elapsed(ev_[0], ev_[1]);
  count_s_ = elapsed(ev_[1], ev_[2]);
  held_ += static_cast<std::size_t>(nrows_ + nitems) * 8;
  count.output_entries = entries_;
  count.output_bytes = static_cast<std::size_t>(entries_) * contract_entry_bytes(ws_, sizeof(T));
  // The run: entries (12 E), flags and positions (16 E), the device output, the spill sort
  // (32 S + temporaries) or the final sort of interleaved outputs (32 E + temporaries).
  const std::size_t E = static_cast<std::size_t>(entries_);
  std::size_t sort_tmp = 0;
  {
    cub::DoubleBuffer<u64> k(nullptr, nullptr);
    cub::DoubleBuffer<double> vv(nullptr, nullptr);
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_tmp, k, vv, std::max<i64>(spill_products_, entries_), 0, 64, ctx_.stream));
  }
  const std::size_t out_dev = (4 * static_cast<std::size_t>(dims_.size()) + sizeof(T)) * E;
  run_peak_ = 12 * E +
              std::max(32 * S + sort_tmp + 16 * static_cast<std::size_t>(nrows_),
                       16 * E + out_dev + (row_major_ ? 0 : 32 * E + sort_tmp)) +
              4096;
  count.workspace_bytes = held_ + std::max(count_peak_, run_peak_);
  if (products_ > 0) check_fits(ctx_, run_peak_, "the contraction", products_, entries_);
}

template void RowsEngine<float>::build(const SparseTensor<float>&, const SparseTensor<float>&,
                                       ContractCount&);
template void RowsEngine<double>::build(const SparseTensor<double>&, const SparseTensor<double>&,
                                        ContractCount&);
template void RowsEngine<float>::build_device(DeviceTensor<float>&&, DeviceTensor<float>&&,
                                              const std::vector<u64>&, i64, i64, ContractCount&);
template void RowsEngine<double>::build_device(DeviceTensor<double>&&, DeviceTensor<double>&&,
                                               const std::vector<u64>&, i64, i64, ContractCount&);

}  // namespace tessera::kernels::cuda::sptc
