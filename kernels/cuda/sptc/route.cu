// The device side of a routed contraction (ops::contract_route, kernels/sptc.hpp
// ContractRoute; docs/sptc.md, "Distributed"). The engine's row side (X, or Y when the plan
// would swap the inputs) is bucketed by a hash of its output modes, so every output entry
// is made and summed on one rank and the shares are disjoint without a merge; the column
// side is replicated. The exchanges themselves are algo::contract's (src/engine/algo/
// contract_route.cpp): this file only computes and allocates, and the row kernels then run
// on the routed inputs in place. Taken for the rows assembly with 64-bit keys when the row
// side has output modes (contract_route), and when the busiest rank's routed inputs and
// matching fit its free memory and the memory limit (fits).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/runtime/trace.cuh"
#include "kernels/cuda/sptc/rows_engine.cuh"
#include "kernels/mttkrp.hpp"

namespace tessera::kernels::cuda {

namespace sptc {
namespace {

/// splitmix64's finaliser: any fixed mix will do, it only spreads tuples over ranks.
__device__ __forceinline__ u64 route_mix(u64 z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// dest[k] = the rank owning nonzero k's tuple of the modes m; iota[k] = k.
__global__ void route_owner_kernel(i64 n, ColPtrs m, unsigned P, unsigned* dest, index_t* iota) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    u64 h = 0x2545F4914F6CDD1Dull;
    for (int j = 0; j < m.n; ++j)
      h = route_mix(h ^ (static_cast<u64>(m.col[j][k]) + 0x9E3779B97F4A7C15ull * (j + 1u)));
    dest[k] = static_cast<unsigned>(h % P);
    iota[k] = static_cast<index_t>(k);
  }
}

/// first[p] = the first position of rank p in the sorted destinations (p = 0..P).
__global__ void route_bounds_kernel(const unsigned* sorted, i64 n, unsigned P, i64* first) {
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p > P) return;
  first[p] = lower_bound(sorted, 0, n, p);
}

template <typename U>
__global__ void route_gather_kernel(const U* __restrict__ src, const index_t* __restrict__ perm,
                                    i64 n, U* __restrict__ dst) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 k = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride)
    dst[k] = src[perm[k]];
}

template <typename T>
class DeviceRoute final : public ContractRoute<T> {
 public:
  DeviceRoute(Context& ctx, const SparseTensor<T>& x, const SparseTensor<T>& y,
              const ContractSpec& ws, bool swapped, std::vector<int> free_modes, int ranks,
              std::vector<u64> odims)
      : ctx_(ctx),
        x_(x),
        y_(y),
        ex_(swapped ? y : x),
        ey_(swapped ? x : y),
        ws_(ws),
        swapped_(swapped),
        free_modes_(std::move(free_modes)),
        P_(ranks),
        odims_(std::move(odims)) {}

  /// Whatever a failed step left on the device is freed on the backend's device.
  ~DeviceRoute() override {
    DeviceGuardNoThrow g(ctx_.device);
    xsend_.clear();
    exd_ = DeviceTensor<T>();
    eyd_ = DeviceTensor<T>();
    xr_ = DeviceTensor<T>();
    yr_ = DeviceTensor<T>();
  }
  DeviceRoute(const DeviceRoute&) = delete;
  DeviceRoute& operator=(const DeviceRoute&) = delete;

  bool swapped() const override { return swapped_; }

  bool fits(std::int64_t row_total, std::int64_t column_total, std::size_t memory_limit) override {
    DeviceGuard g(ctx_.device);
    PoolScope pool(ctx_);
    if (pooled()) enable_pool_caching();
    // Every rank's routed row side is only known after hashing, so the decision uses the
    // even share (x 1.5 for skew); the replicated side is exact.
    const double routed_x = 1.5 * static_cast<double>(row_total) / P_;
    const double need = static_cast<double>(ex_.nnz()) * ebx() * 2 +
                        static_cast<double>(ey_.nnz()) * eby() + routed_x * ebx() +
                        static_cast<double>(column_total) * eby() +
                        64.0 * (routed_x + static_cast<double>(column_total));
    const std::size_t free_b = free_bytes();
    return need < 0.8 * static_cast<double>(free_b) &&
           (memory_limit == 0 || need < static_cast<double>(memory_limit)) && routed_x < 4.0e9 &&
           column_total < (std::int64_t{1} << 32) - 1;
  }

  std::vector<std::int64_t> partition() override;

  const void* send_buffer(int array) const override {
    return xsend_[static_cast<std::size_t>(array)].get();
  }
  const void* column_buffer(int array) const override {
    return array < ey_.order() ? static_cast<const void*>(eyd_.col(array)) : eyd_.vals.get();
  }

  void allocate_routed(std::int64_t nx, std::int64_t ny) override;

  void* routed_row_buffer(int array) override {
    return array < ex_.order() ? xr_.cols[static_cast<std::size_t>(array)].get() : xr_.vals.get();
  }
  void* routed_column_buffer(int array) override {
    return array < ey_.order() ? yr_.cols[static_cast<std::size_t>(array)].get() : yr_.vals.get();
  }

  // The two releases run between collectives of algo's routing: they must not throw on one
  // rank (freeing never does; the device switch reports instead of throwing).
  void release_sent() override {
    DeviceGuardNoThrow g(ctx_.device);
    PoolScope pool(ctx_);
    xsend_.clear();
    trace().mark("x alltoallv");
  }
  void release_columns() override {
    DeviceGuardNoThrow g(ctx_.device);
    PoolScope pool(ctx_);
    eyd_ = DeviceTensor<T>();
    trace().mark("y allgather");
  }

  SparseTensor<T> run(ContractStats* stats, ContractCount* count, ContractSink<T>* sink) override;

 private:
  std::size_t ebx() const {
    return static_cast<std::size_t>(ex_.order()) * sizeof(index_t) + sizeof(T);
  }
  std::size_t eby() const {
    return static_cast<std::size_t>(ey_.order()) * sizeof(index_t) + sizeof(T);
  }
  PhaseTrace& trace() {
    if (!tr_) tr_.emplace("sptc route (P " + std::to_string(P_) + ")");
    return *tr_;
  }

  Context& ctx_;
  const SparseTensor<T>& x_;
  const SparseTensor<T>& y_;
  const SparseTensor<T>& ex_;  // row side: partitioned
  const SparseTensor<T>& ey_;  // column side: replicated
  ContractSpec ws_;
  bool swapped_ = false;
  std::vector<int> free_modes_;
  int P_ = 1;
  std::vector<u64> odims_;
  DeviceTensor<T> exd_, eyd_;        // the uploaded shares
  std::vector<DeviceMemory> xsend_;  // the row side grouped by destination
  DeviceTensor<T> xr_, yr_;          // routed row side, replicated column side
  i64 nx_ = 0, ny_ = 0;              // their nonzeros
  std::optional<PhaseTrace> tr_;
};

template <typename T>
std::vector<std::int64_t> DeviceRoute<T>::partition() {
  DeviceGuard g(ctx_.device);
  PoolScope pool(ctx_);
  PhaseTrace& tr = trace();
  const int nex = ex_.order();
  const i64 nx_local = ex_.nnz();
  std::vector<std::int64_t> sendcounts(static_cast<std::size_t>(P_), 0);
  xsend_.resize(static_cast<std::size_t>(nex) + 1);
  check_kernel_shape(x_);  // the coordinates are checked on the device by load()
  if (&y_ != &x_) check_kernel_shape(y_);
  tr.mark("checks");
  DeviceTensor<T>::load(ctx_, exd_, ex_, &eyd_, &ey_);  // a self-contraction too: each role
                                                        // keeps a copy of its own
  tr.mark("upload");
  for (int m = 0; m <= nex; ++m) {
    const std::size_t es = m < nex ? sizeof(index_t) : sizeof(T);
    alloc(xsend_[static_cast<std::size_t>(m)], static_cast<std::size_t>(nx_local) * es,
          "SpTC routing");
  }
  if (nx_local > 0) {
    DeviceMemory dest, dest1, perm, perm1, bounds, tmp;
    alloc(dest, static_cast<std::size_t>(nx_local) * 4, "SpTC routing");
    alloc(dest1, static_cast<std::size_t>(nx_local) * 4, "SpTC routing");
    alloc(perm, static_cast<std::size_t>(nx_local) * sizeof(index_t), "SpTC routing");
    alloc(perm1, static_cast<std::size_t>(nx_local) * sizeof(index_t), "SpTC routing");
    ColPtrs rm;
    rm.n = static_cast<int>(free_modes_.size());
    for (int j = 0; j < rm.n; ++j) rm.col[j] = exd_.col(free_modes_[static_cast<std::size_t>(j)]);
    route_owner_kernel<<<grid_for(nx_local), kBlock, 0, ctx_.stream>>>(
        nx_local, rm, static_cast<unsigned>(P_), ptr<unsigned>(dest), ptr<index_t>(perm));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    int bits = 1;
    while ((1 << bits) < P_) ++bits;
    cub::DoubleBuffer<unsigned> keys(ptr<unsigned>(dest), ptr<unsigned>(dest1));
    cub::DoubleBuffer<index_t> vals(ptr<index_t>(perm), ptr<index_t>(perm1));
    radix_sort_pairs(ctx_, tmp, keys, vals, nx_local, bits);
    alloc(bounds, static_cast<std::size_t>(P_ + 1) * sizeof(i64), "SpTC routing");
    route_bounds_kernel<<<1, 128, 0, ctx_.stream>>>(keys.Current(), nx_local,
                                                    static_cast<unsigned>(P_), ptr<i64>(bounds));
    TESSERA_CUDA_CHECK(cudaGetLastError());
    std::vector<i64> first(static_cast<std::size_t>(P_) + 1);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(first.data(), bounds.get(), first.size() * sizeof(i64),
                                       cudaMemcpyDeviceToHost, ctx_.stream));
    for (int m = 0; m <= nex; ++m) {
      if (m < nex)
        route_gather_kernel<index_t><<<grid_for(nx_local), kBlock, 0, ctx_.stream>>>(
            exd_.col(m), vals.Current(), nx_local,
            ptr<index_t>(xsend_[static_cast<std::size_t>(m)]));
      else
        route_gather_kernel<T><<<grid_for(nx_local), kBlock, 0, ctx_.stream>>>(
            ptr<T>(exd_.vals), vals.Current(), nx_local,
            ptr<T>(xsend_[static_cast<std::size_t>(m)]));
      TESSERA_CUDA_CHECK(cudaGetLastError());
    }
    ctx_.sync();
    for (int p = 0; p < P_; ++p)
      sendcounts[static_cast<std::size_t>(p)] =
          first[static_cast<std::size_t>(p) + 1] - first[static_cast<std::size_t>(p)];
  }
  exd_ = DeviceTensor<T>();  // the unsorted row side is no longer needed
  tr.mark("partition");
  return sendcounts;
}

template <typename T>
void DeviceRoute<T>::allocate_routed(std::int64_t nx, std::int64_t ny) {
  DeviceGuard g(ctx_.device);
  PoolScope pool(ctx_);
  trace().mark("counts");
  TESSERA_INPUT_CHECK(nx < (i64{1} << 32) - 1,
                      "SpTC (cuda backend): " << nx
                                              << " routed nonzeros on one rank; use more "
                                                 "ranks");
  nx_ = nx;
  ny_ = ny;
  const int nex = ex_.order(), ney = ey_.order();
  xr_.cols.resize(static_cast<std::size_t>(nex));
  for (int m = 0; m < nex; ++m)
    alloc(xr_.cols[static_cast<std::size_t>(m)],
          static_cast<std::size_t>(std::max<i64>(nx, 1)) * sizeof(index_t), "SpTC routed input");
  alloc(xr_.vals, static_cast<std::size_t>(std::max<i64>(nx, 1)) * sizeof(T), "SpTC routed input");
  yr_.cols.resize(static_cast<std::size_t>(ney));
  for (int m = 0; m < ney; ++m)
    alloc(yr_.cols[static_cast<std::size_t>(m)],
          static_cast<std::size_t>(std::max<i64>(ny, 1)) * sizeof(index_t),
          "SpTC replicated input");
  alloc(yr_.vals, static_cast<std::size_t>(std::max<i64>(ny, 1)) * sizeof(T),
        "SpTC replicated input");
  xr_.bytes = static_cast<std::size_t>(nx) * ebx();
  yr_.bytes = static_cast<std::size_t>(ny) * eby();
  trace().mark("alloc");
}

template <typename T>
SparseTensor<T> DeviceRoute<T>::run(ContractStats* stats, ContractCount* count,
                                    ContractSink<T>* sink) {
  DeviceGuard g(ctx_.device);
  PoolScope pool(ctx_);
  ContractStats st;
  ContractCount cnt;
  std::vector<u64> dims_out = contract_output_dims(ws_, ex_.dims, ey_.dims);
  RowsEngine<T> engine(ctx_, ws_, dims_out, key_bits(cells(odims_)));
  engine.build_device(std::move(xr_), std::move(yr_), ex_.dims, nx_, ny_, cnt);
  trace().mark("build");
  st.match_seconds = engine.match_seconds();
  st.count_seconds = engine.count_seconds();
  st.products = cnt.products;
  st.workspace_bytes = cnt.workspace_bytes;
  SparseTensor<T> share = engine.run(st, sink);
  trace().mark("run");
  tr_.reset();  // the trace line of the whole route
  if (stats) *stats = st;
  if (count) *count = cnt;
  return share;
}

}  // namespace
}  // namespace sptc

template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Context& ctx, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks) {
  if (ranks < 2 || spec.device.assembly != ContractAssembly::rows) return nullptr;
  std::vector<std::uint64_t> odims = contract_output_dims(spec, x.dims, y.dims);
  std::vector<std::uint64_t> kdims;
  for (int m : spec.x_key) kdims.push_back(x.dims[static_cast<std::size_t>(m)]);
  const sptc::u128 lim = static_cast<sptc::u128>(1) << 64;
  if (sptc::cells(kdims) > lim || sptc::cells(odims) > lim) return nullptr;
  bool swapped = false;
  const ContractSpec ws = sptc::rows_roles(spec, &swapped);
  std::vector<int> free_modes;
  for (int o = 0; o < ws.out_order(); ++o)
    if (!ws.out_from_y[static_cast<std::size_t>(o)])
      free_modes.push_back(ws.out_mode[static_cast<std::size_t>(o)]);
  if (free_modes.empty()) return nullptr;
  return std::make_unique<sptc::DeviceRoute<T>>(ctx, x, y, ws, swapped, std::move(free_modes),
                                                ranks, std::move(odims));
}

template std::unique_ptr<ContractRoute<float>> contract_route<float>(Context&,
                                                                     const SparseTensor<float>&,
                                                                     const SparseTensor<float>&,
                                                                     const ContractSpec&, int);
template std::unique_ptr<ContractRoute<double>> contract_route<double>(Context&,
                                                                       const SparseTensor<double>&,
                                                                       const SparseTensor<double>&,
                                                                       const ContractSpec&, int);

}  // namespace tessera::kernels::cuda
