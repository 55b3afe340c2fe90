// Internal to the CUDA SpTC: the row-accumulation engine (ContractAssembly::rows). Its
// members are defined by job: matching and row classes in match.cu, the tensor-core blocks
// in blocks.cu, the run in run.cu. Not a public header; docs/sptc.md, "CUDA kernel".
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <string>
#include <vector>

#include "kernels/cuda/sptc/common.cuh"

namespace tessera::kernels::cuda::sptc {

/// The row-accumulation plan (docs/sptc.md, "CUDA kernel"). Roles: X is the row side, Y
/// the column side, for a spec whose output is row-major in them when possible (the plan
/// swaps the inputs for outputs that list Y's letters first).
template <typename T>
class RowsEngine {
 public:
  RowsEngine(Context& ctx, const ContractSpec& ws, const std::vector<u64>& dims, int obits)
      : ctx_(ctx), ws_(ws), dims_(dims), obits_(obits) {
    tc_prec_ = ws.device.tensor_cores;
    tc_thr_ = resolve_tc_threshold(ws.device, ctx.tuning);
    int last_x = -1, first_y = ws.out_order();
    for (int o = 0; o < ws.out_order(); ++o)
      if (ws.out_from_y[static_cast<std::size_t>(o)])
        first_y = std::min(first_y, o);
      else
        last_x = o;
    row_major_ = last_x < first_y;
  }

  /// Matching, row classes, tensor-core blocks and the count pass. Fills count.
  void build(const SparseTensor<T>& x, const SparseTensor<T>& y, ContractCount& count);
  /// The same from inputs already on the device (routed there): X with dims xdims, nx
  /// nonzeros; Y with ny. The engine keeps them.
  void build_device(DeviceTensor<T>&& x, DeviceTensor<T>&& y, const std::vector<u64>& xdims, i64 nx,
                    i64 ny, ContractCount& count);
  /// The output: a new tensor, or (sink given) written into sink->output(...), and then an
  /// empty tensor is returned.
  SparseTensor<T> run(ContractStats& st, ContractSink<T>* sink = nullptr);
  double match_seconds() const { return match_s_; }
  double count_seconds() const { return count_s_; }

 private:
  i64 scan(const i64* in, i64* out, i64 n1);  // exclusive scan of n1 entries; returns out[n1-1]
  /// Blocks of 16 codes (code / 16) over n sorted codes: rank[i] = the block of code i
  /// (allocated here); flag and excl are n + 1 entries of scratch. Returns the blocks.
  i64 block_ranks(i64 n, const u64* code, i64* flag, i64* excl, DeviceMemory& rank);
  /// table[b * 16 + code % 16] = i for the n codes of blocks 0..nb-1 (allocated here),
  /// 0xffffffff where no code is.
  void block_table(i64 n, const u64* code, const DeviceMemory& rank, i64 nb, DeviceMemory& table);
  template <typename V>
  void sort_pairs(cub::DoubleBuffer<u64>& k, cub::DoubleBuffer<V>& v, i64 n, int bits);
  void sort_keys(cub::DoubleBuffer<u64>& k, i64 n, int bits);
  /// Nonzeros 0..n-1 sorted (stable) by the code `m` gives their coordinates (`bits` low
  /// bits significant): keys() the sorted codes, perm() the nonzero ids in that order.
  struct Sorted {
    DeviceMemory k[2], p[2];
    const u64* keys = nullptr;
    const index_t* perm = nullptr;
  };
  void sort_by_code(const KeyMap& m, i64 n, int bits, const char* what, Sorted* out);
  void build_tensor_cores();
  void build_loaded(const std::vector<u64>& xdims, ContractCount& count);
  void check_err(const char* when);
  sptc::RowsView view() const;

  Context& ctx_;
  ContractSpec ws_;
  std::vector<u64> dims_;
  int obits_ = 1;
  bool row_major_ = true;
  TensorCorePrecision tc_prec_ = TensorCorePrecision::off;
  double tc_thr_ = 0;
  DeviceMemory tmp_;  // CUB temporaries (grow-only)
  EventPool ev_;
  DeviceTensor<T> xd_, yd_;  // yd_ empty for a self-contraction
  const DeviceTensor<T>* ydp_ = nullptr;
  i64 nx_ = 0, ny_ = 0, nmx_ = 0, nrows_ = 0, ncols_ = 0, products_ = 0, entries_ = 0;
  // Matched structure.
  DeviceMemory ysc_, ysv_, colrep_, mx_first_, mx_row_, mx_val_, mx_off_, rowstart_, rowp_, rowrep_,
      err_;
  // Row classes.
  i64 ngroups_ = 0, ndense_ = 0, nspill_ = 0, spill_products_ = 0, spill_entries_ = 0;
  int ntiles_ = 1, tile_w_ = 0;
  DeviceMemory gfirst_, gend_, drows_, srows_, soff_, rowoff_, itemoff_;
  // Tensor cores.
  bool tc_on_ = false;
  i64 tc_products_ = 0, tc_blocks_ = 0, tc_pairs_ = 0, nout_ = 0;
  DeviceMemory xtile_, ytile_, atiles_, btiles_, otkey_, ostart_, pa_, pb_, smask_, irow_, jcol_,
      rowblk_, rowlo_;
  double tc_build_s_ = 0;
  std::string tc_note_;
  // Codes read while the tensor-core blocks are built (owned by build()).
  const u64* rowkey_ = nullptr;
  const u64* colkey_ = nullptr;
  const u64* ysk_ = nullptr;
  DeviceMemory colblk_tmp_;
  std::size_t held_ = 0, count_peak_ = 0, run_peak_ = 0;
  double match_s_ = 0, count_s_ = 0;
};

template <typename T>
i64 RowsEngine<T>::scan(const i64* in, i64* out, i64 n1) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n1, ctx_.stream));
  alloc(tmp_, bytes, "SpTC scan temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp_.get(), bytes, in, out, n1, ctx_.stream));
  return download_one(ctx_, out + (n1 - 1));
}

template <typename T>
template <typename V>
void RowsEngine<T>::sort_pairs(cub::DoubleBuffer<u64>& k, cub::DoubleBuffer<V>& v, i64 n,
                               int bits) {
  radix_sort_pairs(ctx_, tmp_, k, v, n, bits);
}

template <typename T>
void RowsEngine<T>::sort_by_code(const KeyMap& m, i64 n, int bits, const char* what, Sorted* out) {
  for (int b = 0; b < 2; ++b) {
    dalloc<u64>(out->k[b], n, what);
    dalloc<index_t>(out->p[b], n, "SpTC permutation");
  }
  launch_y_keys(ctx_.stream, n, m, ptr<u64>(out->k[0]), ptr<index_t>(out->p[0]));
  cub::DoubleBuffer<u64> kb(ptr<u64>(out->k[0]), ptr<u64>(out->k[1]));
  cub::DoubleBuffer<index_t> pb(ptr<index_t>(out->p[0]), ptr<index_t>(out->p[1]));
  sort_pairs(kb, pb, n, bits);
  out->keys = kb.Current();
  out->perm = pb.Current();
}

template <typename T>
void RowsEngine<T>::sort_keys(cub::DoubleBuffer<u64>& k, i64 n, int bits) {
  std::size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, k, n, 0, bits, ctx_.stream));
  alloc(tmp_, bytes, "SpTC sort temporaries");
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(tmp_.get(), bytes, k, n, 0, bits, ctx_.stream));
}

template <typename T>
void RowsEngine<T>::check_err(const char* when) {
  const unsigned e = download_one(ctx_, ptr<unsigned>(err_));
  TESSERA_EXPECTS(e == 0, "SpTC (cuda backend, rows assembly): internal check failed "
                              << when << " (error bits " << e
                              << ": 1 group overflow, 2 count mismatch, 4 tensor-core cell "
                                 "missing, 8 spill rows); rerun with the spec's "
                                 "device.assembly = sort and report it");
}

template <typename T>
sptc::RowsView RowsEngine<T>::view() const {
  sptc::RowsView v;
  v.nrows = nrows_;
  v.ncols = ncols_;
  v.rowstart = ptr<u32>(rowstart_);
  v.rowp = ptr<i64>(rowp_);
  v.mx_off = ptr<i64>(mx_off_);
  v.mx_first = ptr<u32>(mx_first_);
  v.mx_row = ptr<u32>(mx_row_);
  v.mx_val = ptr<double>(mx_val_);
  v.ysc = ptr<u32>(ysc_);
  v.ysv = ptr<double>(ysv_);
  v.err = ptr<unsigned>(err_);
  if (tc_on_) {
    sptc::TcView& t = v.tc;
    t.nout = nout_;
    t.otkey = ptr<u64>(otkey_);
    t.ostart = ptr<u32>(ostart_);
    t.pa = ptr<u32>(pa_);
    t.pb = ptr<u32>(pb_);
    t.atiles = atiles_.get();
    t.btiles = btiles_.get();
    t.smask = ptr<u32>(smask_);
    t.irow = ptr<u32>(irow_);
    t.jcol = ptr<u32>(jcol_);
    t.rowblk = ptr<u32>(rowblk_);
    t.rowlo = ptr<unsigned char>(rowlo_);
    t.xtile = ptr<u32>(xtile_);
    t.ytile = ptr<u32>(ytile_);
  }
  return v;
}

/// KeyMap over modes `modes` of a device tensor, with lengths `len`.
template <typename T>
KeyMap key_map(const DeviceTensor<T>& t, const std::vector<int>& modes,
               const std::vector<u64>& len) {
  KeyMap m;
  m.n = static_cast<int>(modes.size());
  for (int c = 0; c < m.n; ++c) {
    m.col[c] = t.col(modes[static_cast<std::size_t>(c)]);
    m.dim[c] = len[static_cast<std::size_t>(c)];
  }
  return m;
}

}  // namespace tessera::kernels::cuda::sptc
