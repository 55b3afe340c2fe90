// The routing of algo::contract in one place (contract_route.hpp; docs/sptc.md,
// "Distributed"): nonzeros moved between ranks by a hash of their coordinates, on the host
// (plan_route, execute_route: the inputs by their matched coordinates, the partial output by
// its coordinates) and in backend memory (route_on_device: the row side by its output
// coordinates, the column side replicated; the backend buckets and contracts, the
// collectives run here).
#include "algo/contract_route.hpp"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>

#include "kernels/ops/sptc.hpp"
#include "util/error.hpp"

namespace tessera::algo::contract_detail {

std::string bytes_str(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (b >= 1024 && i < 5) {
    b /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g %s", b, u[i]);
  return buf;
}

std::size_t max_over(const comm::Communicator& c, std::size_t v) {
  auto x = static_cast<std::uint64_t>(v);
  return static_cast<std::size_t>(c.allreduce_value(x, comm::ReduceOp::max));
}

template <typename T>
Route plan_route(const SparseTensor<T>& t, const std::vector<int>& modes,
                 const comm::Communicator& c, const std::vector<int>* slot_of) {
  const int P = c.size();
  const int owners = slot_of != nullptr ? static_cast<int>(slot_of->size()) : P;
  const auto n = static_cast<std::int64_t>(t.nnz());
  std::vector<int> dest(static_cast<std::size_t>(n));
  const int nm = static_cast<int>(modes.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    index_t co[kMaxOrder];
    for (int j = 0; j < nm; ++j)
      co[j] = t.idx[static_cast<std::size_t>(modes[static_cast<std::size_t>(j)])]
                   [static_cast<std::size_t>(k)];
    const int owner = tuple_owner(co, nm, owners);
    dest[static_cast<std::size_t>(k)] =
        slot_of != nullptr ? (*slot_of)[static_cast<std::size_t>(owner)] : owner;
  }
  Route r;
  r.sendcounts.assign(static_cast<std::size_t>(P), 0);
  for (int d : dest) ++r.sendcounts[static_cast<std::size_t>(d)];
  std::vector<std::int64_t> off = comm::displacements(r.sendcounts);
  r.order.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k)
    r.order[static_cast<std::size_t>(
        off[static_cast<std::size_t>(dest[static_cast<std::size_t>(k)])]++)] = k;
  r.recvcounts = comm::exchange_counts(c, r.sendcounts);
  for (auto v : r.recvcounts) r.recv_total += v;
  return r;
}

template <typename T>
SparseTensor<T> execute_route(const SparseTensor<T>& t, const Route& r,
                              const comm::Communicator& c) {
  const std::vector<std::int64_t> sd = comm::displacements(r.sendcounts),
                                  rd = comm::displacements(r.recvcounts);
  const auto n = static_cast<std::int64_t>(r.order.size());
  SparseTensor<T> out(t.dims);
  {
    std::vector<index_t> buf(static_cast<std::size_t>(n));
    for (int m = 0; m < t.order(); ++m) {
      const index_t* src = t.idx[static_cast<std::size_t>(m)].data();
#pragma omp parallel for schedule(static)
      for (std::int64_t k = 0; k < n; ++k)
        buf[static_cast<std::size_t>(k)] = src[r.order[static_cast<std::size_t>(k)]];
      auto& dst = out.idx[static_cast<std::size_t>(m)];
      dst.resize(static_cast<std::size_t>(r.recv_total));
      c.alltoallv_raw(buf.data(), r.sendcounts.data(), sd.data(), dst.data(), r.recvcounts.data(),
                      rd.data(), comm::DataType::u32);
    }
  }
  std::vector<T> vbuf(static_cast<std::size_t>(n));
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k)
    vbuf[static_cast<std::size_t>(k)] =
        t.vals[static_cast<std::size_t>(r.order[static_cast<std::size_t>(k)])];
  out.vals.resize(static_cast<std::size_t>(r.recv_total));
  c.alltoallv_raw(vbuf.data(), r.sendcounts.data(), sd.data(), out.vals.data(), r.recvcounts.data(),
                  rd.data(), comm::data_type_of<T>());
  return out;
}

namespace {

/// The row side's exchange: one alltoallv per array (coordinates, then values) from the
/// backend's send buffers into its routed buffers.
template <typename T>
void exchange_row_side(kernels::ContractRoute<T>& r, int order, const comm::Communicator& data,
                       const std::vector<std::int64_t>& sendcounts,
                       const std::vector<std::int64_t>& recvcounts) {
  const std::vector<std::int64_t> sd = comm::displacements(sendcounts),
                                  rd = comm::displacements(recvcounts);
  for (int m = 0; m <= order; ++m)
    data.alltoallv_raw(r.send_buffer(m), sendcounts.data(), sd.data(), r.routed_row_buffer(m),
                       recvcounts.data(), rd.data(),
                       m < order ? comm::DataType::u32 : comm::data_type_of<T>());
}

/// The column side to every rank: the whole local share to every peer, from offset 0;
/// received in rank order.
template <typename T>
void replicate_column_side(kernels::ContractRoute<T>& r, int order, std::int64_t ny_local,
                           const comm::Communicator& data, const std::vector<std::int64_t>& ycounts,
                           const comm::NodeSplit* by_nodes) {
  const int P = data.size();
  const std::vector<std::int64_t> ysc(static_cast<std::size_t>(P), ny_local),
      ysd(static_cast<std::size_t>(P), 0), yrd = comm::displacements(ycounts);
  for (int m = 0; m <= order; ++m) {
    const comm::DataType t = m < order ? comm::DataType::u32 : comm::data_type_of<T>();
    if (by_nodes != nullptr)
      comm::allgatherv_by_nodes(*by_nodes, r.column_buffer(m), r.routed_column_buffer(m), ycounts,
                                yrd, t);
    else
      data.alltoallv_raw(r.column_buffer(m), ysc.data(), ysd.data(), r.routed_column_buffer(m),
                         ycounts.data(), yrd.data(), t);
  }
}

}  // namespace

template <typename T>
bool route_on_device(const SparseTensor<T>& x, const SparseTensor<T>& y,
                     const kernels::ContractSpec& spec, kernels::Backend<T>& be,
                     const comm::Communicator& host, const comm::Communicator& data,
                     std::size_t memory_limit, SparseTensor<T>* out, kernels::ContractStats* stats,
                     DeviceRouteInfo* info, kernels::ContractSink<T>* sink,
                     const comm::NodeMap* nodes) {
  const int P = host.size();
  if (P < 2 || data.size() != P || data.memory_space() != comm::MemorySpace::device) return false;
  const std::unique_ptr<kernels::ContractRoute<T>> r =
      kernels::ops::contract_route(be, x, y, spec, P);
  if (!r) return false;
  const bool swapped = r->swapped();
  const SparseTensor<T>& ex = swapped ? y : x;  // row side: partitioned
  const SparseTensor<T>& ey = swapped ? x : y;  // column side: replicated
  std::int64_t glob[2] = {ex.nnz(), ey.nnz()};
  host.allreduce(glob, 2);
  int ok = r->fits(glob[0], glob[1], memory_limit) ? 1 : 0;
  host.allreduce(&ok, 1, comm::ReduceOp::min);
  if (!ok) return false;

  const auto t0 = std::chrono::steady_clock::now();
  // ---- local: checks, uploads, owners, partition (agreed before any exchange) ----
  std::vector<std::int64_t> sendcounts;
  comm::run_collectively(host, [&] { sendcounts = r->partition(); });
  // ---- counts, room for the routed inputs, the exchanges over the data communicator ----
  const std::vector<std::int64_t> recvcounts = comm::exchange_counts(host, sendcounts);
  const std::int64_t nx = std::accumulate(recvcounts.begin(), recvcounts.end(), std::int64_t{0});
  const std::int64_t nx_local = ex.nnz(), ny_local = ey.nnz();
  std::vector<std::int64_t> ycounts(static_cast<std::size_t>(P), 0);
  host.allgather(&ny_local, ycounts.data(), 1);
  const std::int64_t ny = std::accumulate(ycounts.begin(), ycounts.end(), std::int64_t{0});
  comm::run_collectively(host, [&] { r->allocate_routed(nx, ny); });
  exchange_row_side(*r, ex.order(), data, sendcounts, recvcounts);
  r->release_sent();
  // On several nodes the replicated side crosses the network once per node (collective).
  const std::unique_ptr<comm::NodeSplit> by_nodes =
      nodes != nullptr ? std::make_unique<comm::NodeSplit>(data, *nodes) : nullptr;
  replicate_column_side(*r, ey.order(), ny_local, data, ycounts, by_nodes.get());
  if (info != nullptr) info->by_nodes = by_nodes != nullptr;
  r->release_columns();
  const auto t1 = std::chrono::steady_clock::now();

  // ---- the local contraction on the routed inputs ----
  kernels::ContractStats st;
  kernels::ContractCount count;
  comm::run_collectively(host, [&] {
    SparseTensor<T> share = r->run(&st, &count, sink);
    if (!sink) *out = std::move(share);
  });
  const auto t2 = std::chrono::steady_clock::now();
  if (stats) *stats = st;
  if (info) {
    const std::size_t ebx = tensor_bytes<T>(1, ex.order()), eby = tensor_bytes<T>(1, ey.order());
    info->route_seconds = std::chrono::duration<double>(t1 - t0).count();
    info->local_seconds = std::chrono::duration<double>(t2 - t1).count();
    info->routed_nnz[0] = swapped ? ny : nx;
    info->routed_nnz[1] = swapped ? nx : ny;
    info->replicated = swapped ? 0 : 1;
    info->input_bytes =
        static_cast<std::size_t>(nx_local) * ebx + static_cast<std::size_t>(ny_local) * eby;
    info->routed_bytes = static_cast<std::size_t>(nx) * ebx + static_cast<std::size_t>(ny) * eby;
    info->count = count;
  }
  return true;
}

#define TESSERA_INSTANTIATE(T)                                                                 \
  template Route plan_route<T>(const SparseTensor<T>&, const std::vector<int>&,                \
                               const comm::Communicator&, const std::vector<int>*);            \
  template SparseTensor<T> execute_route<T>(const SparseTensor<T>&, const Route&,              \
                                            const comm::Communicator&);                        \
  template bool route_on_device<T>(                                                            \
      const SparseTensor<T>&, const SparseTensor<T>&, const kernels::ContractSpec&,            \
      kernels::Backend<T>&, const comm::Communicator&, const comm::Communicator&, std::size_t, \
      SparseTensor<T>*, kernels::ContractStats*, DeviceRouteInfo*, kernels::ContractSink<T>*,  \
      const comm::NodeMap*);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::algo::contract_detail
