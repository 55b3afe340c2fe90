// The run of the CUDA SpTC's rows assembly (rows_engine.cuh; docs/sptc.md, "CUDA kernel"):
// the row kernels with values write every row's entries at its counted offset, spill rows
// through a global sort, the tensor-core products added, exact zeros dropped, coordinates
// gathered and downloaded into host arrays prepared meanwhile (host_output.cuh).
#include <algorithm>

#include "kernels/cuda/runtime/trace.cuh"
#include "kernels/cuda/sptc/host_output.cuh"
#include "kernels/cuda/sptc/rows_engine.cuh"

namespace tessera::kernels::cuda::sptc {

namespace {

__global__ void spill_first_kernel(i64 n, const u64* ukey, u64 ncols, i64* sfirst) {
  for (i64 u = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; u < n;
       u += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 r = ukey[u] / ncols;
    if (u == 0 || ukey[u - 1] / ncols != r) sfirst[r] = u;
  }
}

__global__ void spill_scatter_kernel(i64 n, const u64* ukey, const double* usum, u64 ncols,
                                     const i64* sfirst, const i64* rowoff, u32* ecol, double* eval,
                                     unsigned* err) {
  for (i64 u = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; u < n;
       u += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 r = ukey[u] / ncols;
    const i64 dst = rowoff[r] + (u - sfirst[r]);
    if (dst >= rowoff[r + 1]) {
      atomicOr(err, sptc::kErrSpill);
      continue;
    }
    ecol[dst] = static_cast<u32>(ukey[u] % ncols);
    eval[dst] = usum[u];
  }
}

/// Output coordinates from representatives: mode o of entry (row r, column c) is column
/// col[o] of X nonzero rowrep[r] (from_y[o] == 0), else of Y nonzero colrep[c].
struct OutGather {
  int n = 0;
  int from_y[kMaxOrder] = {};
  const index_t* col[kMaxOrder] = {};
  u64 dim[kMaxOrder] = {};
  const u32* rowrep = nullptr;
  const u32* colrep = nullptr;
};

/// Kept entry e (flag) to position pos[e]: coordinates (column o at cols + o * stride) and
/// the value rounded to T.
template <typename T>
__global__ void rows_out_kernel(i64 E, const i64* rowoff, i64 nrows, const u32* ecol,
                                const double* eval, const i64* flag, const i64* pos, OutGather g,
                                index_t* cols, i64 stride, T* vals) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < E;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!flag[e]) continue;
    const i64 q = pos[e];
    const i64 r = last_at_most(rowoff, 0, nrows - 1, e);
    const u32 xi = g.rowrep[r], yj = g.colrep[ecol[e]];
    for (int o = 0; o < g.n; ++o) cols[o * stride + q] = g.col[o][g.from_y[o] ? yj : xi];
    vals[q] = static_cast<T>(eval[e]);
  }
}

/// Interleaved output letters: kept entry e becomes (output key, value) at pos[e].
__global__ void rows_outkey_kernel(i64 E, const i64* rowoff, i64 nrows, const u32* ecol,
                                   const double* eval, const i64* flag, const i64* pos, OutGather g,
                                   u64* key, double* val) {
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < E;
       e += static_cast<i64>(gridDim.x) * blockDim.x) {
    if (!flag[e]) continue;
    const i64 q = pos[e];
    const i64 r = last_at_most(rowoff, 0, nrows - 1, e);
    const u32 xi = g.rowrep[r], yj = g.colrep[ecol[e]];
    u64 k = 0;
    for (int o = 0; o < g.n; ++o) k = k * g.dim[o] + g.col[o][g.from_y[o] ? yj : xi];
    key[q] = k;
    val[q] = eval[e];
  }
}

}  // namespace

template <typename T>
SparseTensor<T> RowsEngine<T>::run(ContractStats& st, ContractSink<T>* sink) {
  const auto t_start = std::chrono::steady_clock::now();
  SparseTensor<T> out(dims_);
  st.tc_threshold = tc_thr_;
  {
    std::ostringstream p;
    p << "rows: " << ngroups_ << " groups of small rows, " << ndense_ << " dense rows x " << ntiles_
      << " column tile(s) of " << tile_w_ << ", " << nspill_ << " spill rows (" << spill_products_
      << " products sorted); tensor cores ";
    if (tc_prec_ == TensorCorePrecision::off)
      p << "off";
    else if (tc_on_)
      p << to_string(tc_prec_) << ": " << tc_blocks_ << " dense blocks, " << tc_pairs_
        << " block pairs, " << tc_products_ << " products (threshold " << tc_thr_ << ", built in "
        << tc_build_s_ << " s)";
    else
      p << "unused (threshold " << tc_thr_ << (tc_note_.empty() ? "" : ": " + tc_note_) << ")";
    if (!row_major_) p << "; interleaved output letters: final sort";
    st.path = p.str();
  }
  if (products_ == 0) {
    if (sink) (void)sink->output(dims_, 0);
    return out;
  }
  PhaseTrace tr("sptc run (entries " + std::to_string(entries_) + ")");
  check_fits(ctx_, run_peak_, "the contraction", products_, entries_);
  ev_.ensure(5);
  const std::size_t E = static_cast<std::size_t>(entries_);
  // The output's host arrays are readied meanwhile: first touch of new pages, or the sink's.
  std::optional<HostOutput<T>> host;
  if (sink)
    host.emplace(*sink, dims_, E, ctx_.device);
  else
    host.emplace(out, E);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  DeviceMemory ecol, eval;
  dalloc<u32>(ecol, entries_, "SpTC entries");
  dalloc<double>(eval, entries_, "SpTC entries");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(err_.get(), 0, sizeof(unsigned), ctx_.stream));
  const sptc::RowsView v = view();
  sptc::RowsOut ro;
  ro.rowoff = ptr<i64>(rowoff_);
  ro.itemoff = ptr<i64>(itemoff_);
  ro.ecol = ptr<u32>(ecol);
  ro.eval = ptr<double>(eval);
  sptc::launch_row_groups(ctx_.stream, v, ptr<u32>(gfirst_), ptr<u32>(gend_), ngroups_, true, ro);
  sptc::launch_dense_rows(ctx_.stream, v, ptr<u32>(drows_), ndense_ * ntiles_, ntiles_, tile_w_,
                          true, ro);
  if (spill_products_ > 0) {
    DeviceMemory k[2], vals[2], sfirst, nruns;
    for (int b = 0; b < 2; ++b) {
      dalloc<u64>(k[b], spill_products_, "SpTC spill keys");
      dalloc<double>(vals[b], spill_products_, "SpTC spill values");
    }
    dalloc<i64>(nruns, 1, "SpTC run count");
    launch_spill_keys(ctx_.stream, spill_products_, ptr<i64>(soff_), nspill_, ptr<u32>(srows_), v,
                      ptr<u64>(k[0]), ptr<double>(vals[0]));
    cub::DoubleBuffer<u64> kb(ptr<u64>(k[0]), ptr<u64>(k[1]));
    cub::DoubleBuffer<double> vb(ptr<double>(vals[0]), ptr<double>(vals[1]));
    sort_pairs(kb, vb, spill_products_,
               key_bits(static_cast<u128>(nrows_) * static_cast<u128>(ncols_)));
    const i64 nu = sum_runs(ctx_, tmp_, kb, vb, spill_products_, ptr<i64>(nruns));
    const u64* ukey = kb.Alternate();
    const double* usum = vb.Alternate();
    TESSERA_EXPECTS(nu == spill_entries_, "SpTC (cuda backend): the spill rows gave "
                                              << nu << " entries, the count pass "
                                              << spill_entries_);
    dalloc<i64>(sfirst, nrows_, "SpTC spill rows");
    spill_first_kernel<<<grid_for(nu), kBlock, 0, ctx_.stream>>>(nu, ukey, static_cast<u64>(ncols_),
                                                                 ptr<i64>(sfirst));
    spill_scatter_kernel<<<grid_for(nu), kBlock, 0, ctx_.stream>>>(
        nu, ukey, usum, static_cast<u64>(ncols_), ptr<i64>(sfirst), ptr<i64>(rowoff_),
        ptr<u32>(ecol), ptr<double>(eval), ptr<unsigned>(err_));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[3], ctx_.stream));
  if (tc_on_)
    sptc::launch_tc_products(ctx_.stream, tc_prec_, v.tc, ptr<i64>(rowoff_), ptr<u32>(ecol),
                             ptr<double>(eval), ptr<unsigned>(err_));
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[4], ctx_.stream));
  check_err("in the run");
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  tr.mark("multiply");

  // ---- assemble: drop exact zeros, coordinates from the representatives ----
  const int N = static_cast<int>(dims_.size());
  DeviceMemory flag, pos;
  dalloc<i64>(flag, entries_ + 1, "SpTC flags");
  dalloc<i64>(pos, entries_ + 1, "SpTC positions");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(ptr<i64>(flag) + entries_, 0, sizeof(i64), ctx_.stream));
  keep_flags_kernel<T>
      <<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(entries_, ptr<double>(eval), ptr<i64>(flag));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const i64 nnz = scan(ptr<i64>(flag), ptr<i64>(pos), entries_ + 1);
  OutGather g;
  g.n = N;
  g.rowrep = ptr<u32>(rowrep_);
  g.colrep = ptr<u32>(colrep_);
  for (int o = 0; o < N; ++o) {
    const auto os = static_cast<std::size_t>(o);
    g.from_y[o] = ws_.out_from_y[os] ? 1 : 0;
    g.col[o] = g.from_y[o] ? ydp_->col(ws_.out_mode[os]) : xd_.col(ws_.out_mode[os]);
    g.dim[o] = dims_[os];
  }
  DeviceMemory cols, ovals;
  dalloc<index_t>(cols, std::max<i64>(nnz, 1) * N, "SpTC output");
  dalloc<T>(ovals, nnz, "SpTC output");
  if (nnz > 0 && row_major_) {
    rows_out_kernel<T><<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(
        entries_, ptr<i64>(rowoff_), nrows_, ptr<u32>(ecol), ptr<double>(eval), ptr<i64>(flag),
        ptr<i64>(pos), g, ptr<index_t>(cols), nnz, ptr<T>(ovals));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  } else if (nnz > 0) {
    // Output letters interleave X's and Y's: sort the kept entries by output key.
    DeviceMemory k[2], vv[2];
    for (int b = 0; b < 2; ++b) {
      dalloc<u64>(k[b], nnz, "SpTC output keys");
      dalloc<double>(vv[b], nnz, "SpTC output keys");
    }
    rows_outkey_kernel<<<grid_for(entries_), kBlock, 0, ctx_.stream>>>(
        entries_, ptr<i64>(rowoff_), nrows_, ptr<u32>(ecol), ptr<double>(eval), ptr<i64>(flag),
        ptr<i64>(pos), g, ptr<u64>(k[0]), ptr<double>(vv[0]));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    cub::DoubleBuffer<u64> kb(ptr<u64>(k[0]), ptr<u64>(k[1]));
    cub::DoubleBuffer<double> vb(ptr<double>(vv[0]), ptr<double>(vv[1]));
    sort_pairs(kb, vb, nnz, obits_);
    OutMap om;
    om.n = N;
    for (int o = 0; o < N; ++o) om.dim[o] = dims_[static_cast<std::size_t>(o)];
    scatter_kernel<T><<<grid_for(nnz), kBlock, 0, ctx_.stream>>>(
        nnz, kb.Current(), vb.Current(), nullptr, nullptr, om, ptr<index_t>(cols), nnz,
        ptr<T>(ovals));
    TESSERA_CUDA_CHECK(cudaGetLastError());
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  tr.mark("assemble kernels");
  host->join();
  tr.mark("host pages");
  SparseTensor<T>& dst = host->target();
  const std::size_t n = static_cast<std::size_t>(nnz);
  std::vector<Copy> copies;
  for (int o = 0; o < N; ++o)
    copies.push_back({dst.idx[static_cast<std::size_t>(o)].data(),
                      ptr<index_t>(cols) + static_cast<i64>(o) * nnz, n * sizeof(index_t),
                      cudaMemcpyDeviceToHost});
  copies.push_back({dst.vals.data(), ovals.get(), n * sizeof(T), cudaMemcpyDeviceToHost});
  copy_parallel(ctx_.device, copies, copies.size());
  for (auto& col : dst.idx) col.resize(n);  // shrinks only: the storage stays
  dst.vals.resize(n);
  tr.mark("download");
  st.multiply_seconds = elapsed(ev_[0], ev_[1]);
  st.tc_seconds = tc_on_ ? elapsed(ev_[3], ev_[4]) : 0.0;
  st.assemble_seconds = std::max(
      0.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() -
               st.multiply_seconds);
  st.output_entries = entries_;
  st.output_nnz = nnz;
  st.zeros_dropped = entries_ - nnz;
  st.tc_products = tc_on_ ? tc_products_ : 0;
  st.tc_blocks = tc_on_ ? tc_blocks_ : 0;
  st.tc_block_pairs = tc_on_ ? tc_pairs_ : 0;
  return out;
}

template SparseTensor<float> RowsEngine<float>::run(ContractStats&, ContractSink<float>*);
template SparseTensor<double> RowsEngine<double>::run(ContractStats&, ContractSink<double>*);

}  // namespace tessera::kernels::cuda::sptc
