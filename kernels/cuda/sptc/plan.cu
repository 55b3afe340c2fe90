// SpTC on the device (kernels/sptc.hpp; Backend::contract_plan / Backend::contract of the
// cuda backend; docs/sptc.md "CUDA kernel"). Two output assemblies
// (ContractSpec::device.assembly):
//
// rows (default): products are combined per output row on chip, so only distinct entries
//   reach device memory.
//   plan  (match) X and Y uploaded; Y sorted by matched key (64-bit mixed-radix codes,
//                 cub::DeviceRadixSort), its output coordinates ranked into columns; X sorted
//                 by its output coordinates (row code), every X nonzero joined with its run of
//                 Y (binary search), unmatched ones dropped, rows = runs of equal row codes.
//                 Rows are classed by their products: small rows (<= 1024) in groups sorted
//                 in shared memory, dense rows (shared-memory accumulator per column tile),
//                 spill rows (too many columns, or a large share of all products) sorted
//                 globally. With tensor cores on, dense 16 x 16 blocks of the matched
//                 structure are found and paired (below).
//        (count) the row kernels without values: entries per row, exact, before any
//                output memory exists; scanned into row offsets.
//   run   (multiply) the row kernels with values write each row's entries (columns
//                ascending) at its offset; spill rows through SortPairs + ReduceByKey; the
//                tensor-core kernel adds the block products to their entries.
//        (assemble) exact zeros flagged out; coordinates gathered from a representative X
//                nonzero per row and Y nonzero per column (or, when the output letters
//                interleave X's and Y's, sorted by output key); downloaded while the host
//                arrays were first touched on helper threads.
//   Summation order: fixed, so a run repeats bit for bit: product order for small and dense
//   rows (dense rows sort each chunk of products by column in shared memory), stable sort
//   and ReduceByKey for spill rows; tensor-core cells add their block products after the
//   sparse part.
//
// Tensor cores (DESIGN §5, BCB-like): row codes, matched keys and column codes are cut into
//   blocks of 16 (code / 16, ranked); a block of X (16 rows x 16 keys) or Y (16 keys x 16
//   columns) whose nonzeros reach threshold x 256 is dense (values summed into a 16 x 16
//   tile, a bit mask per row / column). A product of two dense blocks is left to the
//   tensor cores: block pairs sharing a key block are grouped by output block and
//   multiplied by one warp each (tc_kernels.cu: DMMA for fp64, HMMA for tf32 / bf16 / fp16);
//   the row kernels mark the cells those pairs produce (bit masks) so the counts stay exact.
//
// sort: the first kernel: every product's output key (output mode 0 most significant) and
//   value sorted (SortPairs, stable) and reduced (ReduceByKey); the count pass sorts the
//   keys alone. No tensor cores.
//
// Device memory, rows (P products, E output entries, N output modes, S products of spill
// rows): the plan holds the inputs plus about 28 bytes per matched X and 12 per Y nonzero
// (and the tensor-core blocks); the count pass adds 16 S plus sort temporaries, the run
// 28 E + (4 N + sizeof(T)) E, or 12 E + 32 S during the spill sort. sort: 16 P in the count
// pass, max(32 P, (32 + 4 N) E + sizeof(T) E) in the run. A plan that does not fit the
// device's free memory is refused with InputError (more ranks, or --backend cpu). Keys that
// do not fit 64 bits (product of the matched lengths, or of the output lengths, over 2^64)
// fall back to the cpu backend's implementation with a logged note.
//
// Files (kernels/cuda/sptc/): plan.cu (this: the plan, the sort assembly, the entry points),
// match.cu (matching, row classes, count pass), blocks.cu (tensor-core blocks), run.cu (the
// rows run and output), rows_kernels.cu and tc_kernels.cu (the row and block-product
// kernels), route.cu (the device side of the routed contraction), common.cu (shared helpers).
#include <algorithm>
#include <chrono>
#include <cub/device/device_scan.cuh>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/runtime/trace.cuh"
#include "kernels/cuda/sptc/host_output.cuh"
#include "kernels/cuda/sptc/rows_engine.cuh"
#include "kernels/mttkrp.hpp"
#include "util/log.hpp"

namespace tessera::kernels::cuda {

namespace sptc {
namespace {

/// Per X nonzero: the first position of its key among Y's sorted keys and the run length.
__global__ void x_ranges_kernel(i64 nx, KeyMap m, const u64* ykey, i64 ny, index_t* first,
                                i64* cnt) {
  for (i64 k = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; k < nx;
       k += static_cast<i64>(gridDim.x) * blockDim.x) {
    const u64 key = pack(m, k);
    const i64 lo = lower_bound(ykey, 0, ny, key), hi = upper_bound(ykey, lo, ny, key);
    first[k] = static_cast<index_t>(lo);
    cnt[k] = hi - lo;
  }
}

/// Product p: X nonzero i (the last with off[i] <= p) times sorted Y nonzero
/// first[i] + p - off[i]. Writes its output key, and with kValues its value in double.
template <typename T, bool kValues>
__global__ void products_kernel(i64 total, const i64* off, i64 nx, const index_t* first,
                                const index_t* yperm, OutMap m, const T* xv, const T* yv, u64* key,
                                double* val) {
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 i = upper_bound(off, 0, nx, p) - 1;
    const i64 j = yperm[static_cast<i64>(first[i]) + (p - off[i])];
    u64 k = 0;
    for (int o = 0; o < m.n; ++o) k = k * m.dim[o] + m.col[o][m.from_y[o] ? j : i];
    key[p] = k;
    if constexpr (kValues) val[p] = static_cast<double>(xv[i]) * static_cast<double>(yv[j]);
  }
}

/// *count += number of positions p with p == 0 or key[p] != key[p - 1] (sorted keys).
__global__ void count_distinct_kernel(i64 n, const u64* key, unsigned long long* count) {
  unsigned long long local = 0;
  for (i64 p = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; p < n;
       p += static_cast<i64>(gridDim.x) * blockDim.x)
    if (p == 0 || key[p] != key[p - 1]) ++local;
  for (int s = 16; s > 0; s /= 2) local += __shfl_down_sync(0xffffffffu, local, s);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(count, local);
}

template <typename T>
class CudaContractPlan final : public ContractPlan<T> {
 public:
  CudaContractPlan(Context& ctx, const SparseTensor<T>& x, const SparseTensor<T>& y,
                   const ContractSpec& spec)
      : ctx_(ctx), spec_(spec) {
    dims_ = contract_output_dims(spec, x.dims, y.dims);
    // Shapes here; the coordinates on the device after the upload (DeviceTensor::load), or
    // by the cpu plan of a fallback.
    check_kernel_shape(x);
    if (&y != &x) check_kernel_shape(y);
    std::vector<u64> kdims;
    for (int m : spec.x_key) kdims.push_back(x.dims[static_cast<std::size_t>(m)]);
    const u128 kcells = cells(kdims), ocells = cells(dims_);
    const u128 lim = static_cast<u128>(1) << 64;
    if (kcells > lim || ocells > lim) {
      log::info(std::string("SpTC (cuda backend): the ") +
                (kcells > lim ? "matched coordinates" : "output coordinates") + " of '" +
                spec.text +
                "' do not fit a 64-bit key (product of their lengths over 2^64); running the "
                "cpu backend's implementation");
      fallback_ = cpu::plan_contract(x, y, spec);
      count_ = fallback_->count();
      return;
    }
    nx_ = x.nnz();
    ny_ = y.nnz();
    TESSERA_INPUT_CHECK(nx_ < (i64{1} << 32) - 1 && ny_ < (i64{1} << 32) - 1,
                        "SpTC (cuda backend): an input has more than 2^32 - 2 nonzeros on one "
                        "rank; use more ranks");
    kbits_ = key_bits(kcells);
    obits_ = key_bits(ocells);
    if (spec.device.assembly == ContractAssembly::rows) {
      // The row side must provide the leading output letters; when Y's letters come
      // first, swap the inputs' roles (same output), else the kept entries are sorted.
      const ContractSpec ws = rows_roles(spec, &swapped_);
      rows_ = std::make_unique<RowsEngine<T>>(ctx, ws, dims_, obits_);
    }
  }

  /// The device part of planning (after the cheap checks of the constructor).
  void build(const SparseTensor<T>& x, const SparseTensor<T>& y) {
    if (fallback_) return;  // the cpu plan checked the inputs
    if (nx_ == 0 || ny_ == 0) {
      // Nothing is uploaded, so the device does not check the coordinates: the host does
      // (one input is empty).
      check_kernel_input(x);
      if (&y != &x) check_kernel_input(y);
      return;
    }
    if (rows_) {
      if (swapped_)
        rows_->build(y, x, count_);
      else
        rows_->build(x, y, count_);
      products_ = count_.products;
      match_s_ = rows_->match_seconds();
      count_s_ = rows_->count_seconds();
      return;
    }
    const std::size_t in_bytes =
        static_cast<std::size_t>(nx_) * (x.idx.size() * sizeof(index_t) + sizeof(T)) +
        (&x == &y ? 0
                  : static_cast<std::size_t>(ny_) * (y.idx.size() * sizeof(index_t) + sizeof(T)));
    // Y keys (two) and permutation (two), X first / counts / offsets.
    const std::size_t match_bytes = static_cast<std::size_t>(ny_) * 2 * (8 + sizeof(index_t)) +
                                    static_cast<std::size_t>(nx_) * (sizeof(index_t) + 16);
    check_fits(ctx_, in_bytes + match_bytes, "matching the inputs", 0, -1);
    ev_.ensure(3);
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
    DeviceTensor<T>::load(ctx_, xd_, x, &x == &y ? nullptr : &yd_, &y);
    const DeviceTensor<T>* yd = &x == &y ? &xd_ : &yd_;
    held_ = xd_.bytes + yd_.bytes;
    KeyMap xk, yk;
    xk.n = yk.n = static_cast<int>(spec_.x_key.size());
    for (int c = 0; c < xk.n; ++c) {
      const auto cs = static_cast<std::size_t>(c);
      xk.col[c] = xd_.col(spec_.x_key[cs]);
      yk.col[c] = yd->col(spec_.y_key[cs]);
      xk.dim[c] = yk.dim[c] = x.dims[static_cast<std::size_t>(spec_.x_key[cs])];
    }
    // Y sorted by key, with the permutation.
    {
      DeviceMemory k0, k1, p0;
      alloc(k0, static_cast<std::size_t>(ny_) * 8, "SpTC keys");
      alloc(k1, static_cast<std::size_t>(ny_) * 8, "SpTC keys");
      alloc(p0, static_cast<std::size_t>(ny_) * sizeof(index_t), "SpTC permutation");
      alloc(yperm_, static_cast<std::size_t>(ny_) * sizeof(index_t), "SpTC permutation");
      launch_y_keys(ctx_.stream, ny_, yk, ptr<u64>(k0), ptr<index_t>(p0));
      cub::DoubleBuffer<u64> keys(ptr<u64>(k0), ptr<u64>(k1));
      cub::DoubleBuffer<index_t> perm(ptr<index_t>(p0), ptr<index_t>(yperm_));
      DeviceMemory tmp;
      radix_sort_pairs(ctx_, tmp, keys, perm, ny_, kbits_);
      if (perm.Current() != ptr<index_t>(yperm_)) yperm_ = std::move(p0);
      const u64* ykey = keys.Current();
      // X's ranges and the scan of their lengths.
      alloc(xfirst_, static_cast<std::size_t>(nx_) * sizeof(index_t), "SpTC ranges");
      alloc(xoff_, static_cast<std::size_t>(nx_) * sizeof(i64), "SpTC ranges");
      DeviceMemory cnt;
      alloc(cnt, static_cast<std::size_t>(nx_) * sizeof(i64), "SpTC ranges");
      x_ranges_kernel<<<grid_for(nx_), kBlock, 0, ctx_.stream>>>(
          nx_, xk, ykey, ny_, ptr<index_t>(xfirst_), ptr<i64>(cnt));
      TESSERA_CUDA_CHECK(cudaGetLastError());
      exclusive_sum(ctx_, tmp, ptr<i64>(cnt), ptr<i64>(xoff_), nx_);
      const i64 last_off = download_one(ctx_, ptr<i64>(xoff_) + (nx_ - 1));
      const i64 last_cnt = download_one(ctx_, ptr<i64>(cnt) + (nx_ - 1));
      products_ = last_off + last_cnt;
    }
    held_ += static_cast<std::size_t>(ny_) * sizeof(index_t) +
             static_cast<std::size_t>(nx_) * (sizeof(index_t) + sizeof(i64));
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
    count_.products = products_;

    // Output map (device column pointers).
    om_.n = spec_.out_order();
    for (int o = 0; o < om_.n; ++o) {
      const auto os = static_cast<std::size_t>(o);
      om_.from_y[o] = spec_.out_from_y[os] ? 1 : 0;
      om_.col[o] = om_.from_y[o] ? yd->col(spec_.out_mode[os]) : xd_.col(spec_.out_mode[os]);
      om_.dim[o] = dims_[os];
    }
    // Count pass: distinct output keys.
    i64 entries = 0;
    std::size_t sort_tmp = 0;
    if (products_ > 0) {
      {
        cub::DoubleBuffer<u64> keys(nullptr, nullptr);
        cub::DoubleBuffer<double> vals(nullptr, nullptr);
        TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_tmp, keys, vals, products_,
                                                           0, obits_, ctx_.stream));
      }
      const std::size_t P = static_cast<std::size_t>(products_);
      check_fits(ctx_, 16 * P + sort_tmp + 256, "counting the output", products_, -1);
      DeviceMemory k0, k1, tmp, c;
      alloc(k0, P * 8, "SpTC output keys");
      alloc(k1, P * 8, "SpTC output keys");
      alloc(c, sizeof(unsigned long long), "SpTC count");
      products_kernel<T, false><<<grid_for(products_), kBlock, 0, ctx_.stream>>>(
          products_, ptr<i64>(xoff_), nx_, ptr<index_t>(xfirst_), ptr<index_t>(yperm_), om_,
          nullptr, nullptr, ptr<u64>(k0), nullptr);
      TESSERA_CUDA_CHECK(cudaGetLastError());
      cub::DoubleBuffer<u64> keys(ptr<u64>(k0), ptr<u64>(k1));
      std::size_t tmp_bytes = 0;
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, tmp_bytes, keys, products_, 0,
                                                        obits_, ctx_.stream));
      alloc(tmp, tmp_bytes, "SpTC sort temporaries");
      TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(tmp.get(), tmp_bytes, keys, products_, 0,
                                                        obits_, ctx_.stream));
      TESSERA_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, sizeof(unsigned long long), ctx_.stream));
      count_distinct_kernel<<<grid_for(products_, 4096), kBlock, 0, ctx_.stream>>>(
          products_, keys.Current(), ptr<unsigned long long>(c));
      TESSERA_CUDA_CHECK(cudaGetLastError());
      entries = static_cast<i64>(download_one(ctx_, ptr<unsigned long long>(c)));
      count_peak_ = 16 * P + tmp_bytes;
    }
    TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
    ctx_.sync();
    match_s_ = elapsed(ev_[0], ev_[1]);
    count_s_ = elapsed(ev_[1], ev_[2]);
    count_.output_entries = entries;
    count_.output_bytes =
        static_cast<std::size_t>(entries) * contract_entry_bytes(spec_, sizeof(T));
    const std::size_t P = static_cast<std::size_t>(products_),
                      E = static_cast<std::size_t>(entries);
    run_peak_ = std::max(32 * P + sort_tmp,
                         (32 + 4 * static_cast<std::size_t>(om_.n) + sizeof(T)) * E + sort_tmp) +
                4096;
    count_.workspace_bytes = held_ + std::max(count_peak_, run_peak_);
    if (products_ > 0) check_fits(ctx_, run_peak_, "the contraction", products_, entries);
  }

  const ContractSpec& spec() const override { return spec_; }
  const std::vector<std::uint64_t>& output_dims() const override { return dims_; }
  const ContractCount& count() const override { return count_; }
  double match_seconds() const override {
    return fallback_ ? fallback_->match_seconds() : match_s_;
  }
  double count_seconds() const override {
    return fallback_ ? fallback_->count_seconds() : count_s_;
  }

  SparseTensor<T> run(ContractStats* stats, ContractSink<T>* sink = nullptr);
  /// True when run() can write into a sink: the rows assembly on the device.
  bool sinks() const { return !fallback_ && rows_ != nullptr; }

 private:
  Context& ctx_;
  ContractSpec spec_;
  std::vector<u64> dims_;
  ContractCount count_;
  std::unique_ptr<ContractPlan<T>> fallback_;  ///< keys over 64 bits: the cpu plan
  std::unique_ptr<RowsEngine<T>> rows_;        ///< ContractAssembly::rows
  bool swapped_ = false;                       ///< rows_ works on Y x X
  i64 nx_ = 0, ny_ = 0, products_ = 0;
  int kbits_ = 1, obits_ = 1;
  DeviceTensor<T> xd_, yd_;  // yd_ empty for a self-contraction
  DeviceMemory yperm_, xfirst_, xoff_;
  OutMap om_;
  EventPool ev_;
  std::size_t held_ = 0, count_peak_ = 0, run_peak_ = 0;
  double match_s_ = 0, count_s_ = 0;
};

template <typename T>
SparseTensor<T> CudaContractPlan<T>::run(ContractStats* stats, ContractSink<T>* sink) {
  TESSERA_EXPECTS(sink == nullptr || sinks(), "SpTC (cuda backend): this plan has no sink output");
  if (fallback_) return cpu::contract(*fallback_, stats);
  ContractStats st;
  st.match_seconds = match_s_;
  st.count_seconds = count_s_;
  st.products = products_;
  st.workspace_bytes = count_.workspace_bytes;
  if (rows_) {
    SparseTensor<T> out = rows_->run(st, sink);
    if (stats) *stats = st;
    return out;
  }
  st.path = "sort: every product's key radix-sorted and reduced";
  SparseTensor<T> out(dims_);
  if (products_ == 0) {
    if (stats) *stats = st;
    return out;
  }
  check_fits(ctx_, run_peak_, "the contraction", products_, count_.output_entries);
  ev_.ensure(3);
  const std::size_t P = static_cast<std::size_t>(products_);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[0], ctx_.stream));
  // ---- multiply: product keys and values, sorted, equal keys summed ----
  DeviceMemory k[2], v[2], tmp, nruns;
  for (int b = 0; b < 2; ++b) {
    alloc(k[b], P * 8, "SpTC product keys");
    alloc(v[b], P * sizeof(double), "SpTC product values");
  }
  alloc(nruns, sizeof(i64), "SpTC run count");
  products_kernel<T, true><<<grid_for(products_), kBlock, 0, ctx_.stream>>>(
      products_, ptr<i64>(xoff_), nx_, ptr<index_t>(xfirst_), ptr<index_t>(yperm_), om_,
      ptr<T>(xd_.vals), yd_.cols.empty() ? ptr<T>(xd_.vals) : ptr<T>(yd_.vals), ptr<u64>(k[0]),
      ptr<double>(v[0]));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  cub::DoubleBuffer<u64> keys(ptr<u64>(k[0]), ptr<u64>(k[1]));
  cub::DoubleBuffer<double> vals(ptr<double>(v[0]), ptr<double>(v[1]));
  radix_sort_pairs(ctx_, tmp, keys, vals, products_, obits_);
  const int cur = keys.selector;  // the sorted keys; the other buffers receive the sums
  const int vcur = vals.selector;
  const i64 E = sum_runs(ctx_, tmp, keys, vals, products_, ptr<i64>(nruns));
  const u64* ukey = keys.Alternate();
  const double* usum = vals.Alternate();
  TESSERA_EXPECTS(E == count_.output_entries, "SpTC (cuda backend): the run found "
                                                  << E << " output entries, the count pass "
                                                  << count_.output_entries);
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[1], ctx_.stream));
  k[cur] = DeviceMemory();  // the sorted products are no longer needed
  v[vcur] = DeviceMemory();
  // ---- assemble: drop exact zeros, decode, download ----
  const std::size_t Es = static_cast<std::size_t>(E);
  const int N = om_.n;
  DeviceMemory flag, pos, cols, ovals;
  alloc(flag, Es * sizeof(i64), "SpTC flags");
  alloc(pos, Es * sizeof(i64), "SpTC positions");
  keep_flags_kernel<T><<<grid_for(E), kBlock, 0, ctx_.stream>>>(E, usum, ptr<i64>(flag));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  exclusive_sum(ctx_, tmp, ptr<i64>(flag), ptr<i64>(pos), E);
  const i64 nnz =
      download_one(ctx_, ptr<i64>(pos) + (E - 1)) + download_one(ctx_, ptr<i64>(flag) + (E - 1));
  alloc(cols, Es * static_cast<std::size_t>(N) * sizeof(index_t), "SpTC output");
  alloc(ovals, Es * sizeof(T), "SpTC output");
  scatter_kernel<T><<<grid_for(E), kBlock, 0, ctx_.stream>>>(
      E, ukey, usum, ptr<i64>(flag), ptr<i64>(pos), om_, ptr<index_t>(cols), E, ptr<T>(ovals));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  const std::size_t n = static_cast<std::size_t>(nnz);
  for (int o = 0; o < N; ++o) {
    auto& col = out.idx[static_cast<std::size_t>(o)];
    col.resize(n);
    if (n)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(col.data(), ptr<index_t>(cols) + static_cast<i64>(o) * E,
                                         n * sizeof(index_t), cudaMemcpyDeviceToHost, ctx_.stream));
  }
  out.vals.resize(n);
  if (n)
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(out.vals.data(), ovals.get(), n * sizeof(T),
                                       cudaMemcpyDeviceToHost, ctx_.stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(ev_[2], ctx_.stream));
  ctx_.sync();
  st.multiply_seconds = elapsed(ev_[0], ev_[1]);
  st.assemble_seconds = elapsed(ev_[1], ev_[2]);
  st.output_entries = E;
  st.output_nnz = nnz;
  st.zeros_dropped = E - nnz;
  if (stats) *stats = st;
  return out;
}

}  // namespace
}  // namespace sptc

template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(Context& ctx, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  sptc::PoolScope pool(ctx);
  if (sptc::pooled()) enable_pool_caching();
  PhaseTrace tr("sptc plan");
  auto p = std::make_unique<sptc::CudaContractPlan<T>>(ctx, x, y, spec);
  tr.mark("checks");
  p->build(x, y);
  tr.mark("build");
  return p;
}

template <typename T>
SparseTensor<T> contract(Context& ctx, ContractPlan<T>& plan, ContractStats* stats) {
  sptc::PoolScope pool(ctx);
  auto* p = dynamic_cast<sptc::CudaContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  return p->run(stats);
}

template <typename T>
bool contract_into(Context& ctx, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink) {
  sptc::PoolScope pool(ctx);
  auto* p = dynamic_cast<sptc::CudaContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  if (!p->sinks()) return false;
  (void)p->run(stats, &sink);
  return true;
}

template std::unique_ptr<ContractPlan<float>> plan_contract<float>(Context&,
                                                                   const SparseTensor<float>&,
                                                                   const SparseTensor<float>&,
                                                                   const ContractSpec&);
template std::unique_ptr<ContractPlan<double>> plan_contract<double>(Context&,
                                                                     const SparseTensor<double>&,
                                                                     const SparseTensor<double>&,
                                                                     const ContractSpec&);
template SparseTensor<float> contract<float>(Context&, ContractPlan<float>&, ContractStats*);
template SparseTensor<double> contract<double>(Context&, ContractPlan<double>&, ContractStats*);
template bool contract_into<float>(Context&, ContractPlan<float>&, ContractStats*,
                                   ContractSink<float>&);
template bool contract_into<double>(Context&, ContractPlan<double>&, ContractStats*,
                                    ContractSink<double>&);

}  // namespace tessera::kernels::cuda
