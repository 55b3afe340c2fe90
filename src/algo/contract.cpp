#include "algo/contract.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "partition/partition.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

namespace {

using kernels::ContractSpec;

/// Binary units, as --mem-limit reads them (K, M, G = 1024^k).
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

/// Where this rank's nonzeros go: positions grouped by destination (stable), the counts
/// both ways.
struct Route {
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> sendcounts, recvcounts;
  std::int64_t recv_total = 0;
};

/// Destinations by the hash of the coordinates of `modes`. An empty list (an outer product,
/// nothing matched) sends everything to one rank: every empty tuple hashes alike.
template <typename T>
Route plan_route(const SparseTensor<T>& t, const std::vector<int>& modes,
                 const comm::Communicator& c) {
  const int P = c.size();
  const auto n = static_cast<std::int64_t>(t.nnz());
  std::vector<int> dest(static_cast<std::size_t>(n));
  const int nm = static_cast<int>(modes.size());
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    index_t co[kMaxOrder];
    for (int j = 0; j < nm; ++j)
      co[j] = t.idx[static_cast<std::size_t>(modes[static_cast<std::size_t>(j)])]
                   [static_cast<std::size_t>(k)];
    dest[static_cast<std::size_t>(k)] = tuple_owner(co, nm, P);
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

/// Moves the nonzeros as planned: one alltoallv per coordinate array and one for the
/// values; the received nonzeros are in source-rank order, each source in its order.
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

template <typename T>
std::size_t tensor_bytes(std::int64_t nnz, int order) {
  return static_cast<std::size_t>(nnz) *
         (static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T));
}

std::size_t max_over(const comm::Communicator& c, std::size_t v) {
  auto x = static_cast<std::uint64_t>(v);
  return static_cast<std::size_t>(c.allreduce_value(x, comm::ReduceOp::max));
}

/// The plan and memory lines of a contraction (rank 0 logs them).
template <typename T>
void report_plan(const ContractResult<T>& res, const ContractSpec& spec, int P,
                 std::size_t memory_limit) {
  const ContractMemory& mem = res.memory;
  char line[512];
  std::snprintf(line, sizeof(line),
                "contraction %s: %lld x %lld nonzeros -> %lld products, %lld partial output "
                "entries (busiest rank: %.1f%% of the products)",
                spec.text.c_str(), static_cast<long long>(res.global_input_nnz[0]),
                static_cast<long long>(res.global_input_nnz[1]),
                static_cast<long long>(res.global_products),
                static_cast<long long>(res.global_partial_entries),
                res.global_products > 0 ? 100.0 * static_cast<double>(res.max_rank_products) /
                                              static_cast<double>(res.global_products)
                                        : 100.0 / P);
  std::ostringstream mem_line;
  mem_line << "memory per rank (busiest): about " << bytes_str(static_cast<double>(mem.total_bytes))
           << " (inputs " << bytes_str(static_cast<double>(mem.input_bytes)) << ", routed "
           << bytes_str(static_cast<double>(mem.routed_bytes)) << ", matching workspace "
           << bytes_str(static_cast<double>(mem.workspace_bytes)) << ", output "
           << bytes_str(static_cast<double>(mem.output_bytes)) << ", exchange "
           << bytes_str(static_cast<double>(mem.exchange_bytes)) << ")";
  if (memory_limit > 0) mem_line << ", limit " << bytes_str(static_cast<double>(memory_limit));
  log::info(line);
  log::info(mem_line.str());
}

}  // namespace

int tuple_owner(const index_t* coords, int n, int P) {
  if (P <= 1) return 0;
  std::uint64_t h = 0x2545F4914F6CDD1Dull;
  for (int k = 0; k < n; ++k) h = mix64(h ^ (coords[k] + 0x9E3779B97F4A7C15ull * (k + 1u)));
  return static_cast<int>(h % static_cast<std::uint64_t>(P));
}

template <typename T>
ContractResult<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                           const ContractSpec& spec, kernels::Backend<T>& be,
                           const comm::Communicator& c, const ContractOptions& opt,
                           ContractBuffers<T>* buffers) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "algo::contract routes host tensors: it needs a host communicator");
  const comm::Communicator& dc = opt.data != nullptr ? *opt.data : c;
  TESSERA_EXPECTS(dc.size() == c.size() && dc.rank() == c.rank(),
                  "algo::contract: the data communicator must span the ranks of the host one");
  const int P = c.size();
  const bool self = &x == &y;
  // A contraction that throws leaves the buffers' result empty (storage kept), not half
  // written.
  struct Discard {
    ContractBuffers<T>* b;
    bool done = false;
    ~Discard() {
      if (b != nullptr && !done) b->discard();
    }
  } kept{buffers};
  ContractResult<T> res;
  // The rank's share ends in res.local, or in the buffers: written there by the backend
  // (`in_buffers`), else handed over.
  auto finish = [&](SparseTensor<T>&& local, bool in_buffers) {
    local.dims = res.dims;
    if (buffers != nullptr && !in_buffers) buffers->take(std::move(local));
    res.local = buffers ? SparseTensor<T>(res.dims) : std::move(local);
    const SparseTensor<T>& share = buffers ? buffers->result() : res.local;
    res.global_nnz = c.allreduce_value(static_cast<std::int64_t>(share.nnz()));
    kept.done = true;
  };
  // Global dims are the same on every rank: these errors are agreed without a collective.
  res.dims = kernels::contract_output_dims(spec, x.dims, y.dims);
  const int N = spec.out_order();
  Timer t;

  // ---- 1. route the inputs by their matched coordinates ----
  const bool once = self && spec.x_key == spec.y_key;
  res.routed_once = once;
  std::int64_t in_nnz[2] = {x.nnz(), self ? 0 : y.nnz()};
  c.allreduce(in_nnz, 2);
  res.global_input_nnz[0] = in_nnz[0];
  res.global_input_nnz[1] = self ? in_nnz[0] : in_nnz[1];
  const std::size_t input_bytes =
      tensor_bytes<T>(x.nnz(), x.order()) + (self ? 0 : tensor_bytes<T>(y.nnz(), y.order()));
  // ---- routed in backend memory (the cuda backend over NCCL) when it can ----
  if (P > 1 && dc.memory_space() == comm::MemorySpace::device) {
    kernels::ContractRouteInfo info;
    SparseTensor<T> local;
    if (be.contract_routed(x, y, spec, c, dc, opt.memory_limit, &local, &res.stats, &info,
                           buffers)) {
      res.routed_on_device = true;
      res.phases.add("route_inputs", info.route_seconds);
      const double plan_s = res.stats.match_seconds + res.stats.count_seconds;
      res.phases.add("plan", plan_s);
      res.phases.add("multiply", std::max(info.local_seconds - plan_s, 0.0));
      std::int64_t sums[3] = {info.count.output_entries, info.count.products,
                              res.stats.zeros_dropped};
      c.allreduce(sums, 3);
      res.global_partial_entries = sums[0];
      res.global_products = sums[1];
      res.global_zeros_dropped = sums[2];
      res.max_rank_products = c.allreduce_value(info.count.products, comm::ReduceOp::max);
      ContractMemory& mem = res.memory;
      const std::size_t total = info.input_bytes + info.routed_bytes +
                                info.count.workspace_bytes + info.count.output_bytes;
      mem.input_bytes = max_over(c, info.input_bytes);
      mem.routed_bytes = max_over(c, info.routed_bytes);
      mem.workspace_bytes = max_over(c, info.count.workspace_bytes);
      mem.output_bytes = max_over(c, info.count.output_bytes);
      mem.exchange_bytes = 0;
      mem.total_bytes = max_over(c, total);
      mem.mean_total_bytes = static_cast<std::size_t>(
          c.allreduce_value(static_cast<double>(total)) / static_cast<double>(P));
      if (opt.print) {
        report_plan(res, spec, P, opt.memory_limit);
        log::info(std::string("routed on the devices: ") + (info.replicated == 1 ? "X" : "Y") +
                  " partitioned by a hash of its output coordinates, " +
                  (info.replicated == 1 ? "Y" : "X") +
                  " copied to every rank, over the data communicator; no output merge");
      }
      finish(std::move(local), true);
      return res;
    }
  }

  SparseTensor<T> xr, yr;
  const SparseTensor<T>* X = &x;
  const SparseTensor<T>* Y = &y;
  std::size_t routed_bytes = 0;
  if (P > 1) {
    const Route rx = plan_route(x, spec.x_key, c);
    Route ry;
    if (!once) ry = plan_route(y, spec.y_key, c);
    routed_bytes = tensor_bytes<T>(rx.recv_total, x.order()) +
                   (once ? 0 : tensor_bytes<T>(ry.recv_total, y.order()));
    // The routed inputs alone over the limit: refuse before moving them.
    const std::size_t pre = max_over(c, input_bytes + routed_bytes);
    if (opt.memory_limit > 0 && pre > opt.memory_limit) {
      const int ranks = static_cast<int>(
          std::ceil(static_cast<double>(P) * pre / static_cast<double>(opt.memory_limit)));
      TESSERA_INPUT_CHECK(false, "contraction '"
                                     << spec.text << "': the inputs and their routed copies "
                                     << "alone need about " << bytes_str(static_cast<double>(pre))
                                     << " on the busiest rank, over the limit of "
                                     << bytes_str(static_cast<double>(opt.memory_limit))
                                     << " per rank; about " << std::max(ranks, P + 1)
                                     << " ranks would fit, or raise the memory limit");
    }
    xr = execute_route(x, rx, dc);
    X = &xr;
    if (once) {
      Y = &xr;
    } else {
      yr = execute_route(y, ry, dc);
      Y = &yr;
    }
  }
  res.phases.add("route_inputs", t.seconds());
  t.reset();

  // ---- 2. plan: match and count locally; estimate memory; refuse when over ----
  std::unique_ptr<kernels::ContractPlan<T>> plan;
  comm::run_collectively(c, [&] { plan = be.contract_plan(*X, *Y, spec); });
  res.phases.add("plan", t.seconds());
  const kernels::ContractCount cnt = plan->count();
  const std::size_t entry = kernels::contract_entry_bytes(spec, sizeof(T));
  {
    std::int64_t sums[2] = {cnt.output_entries, cnt.products};
    c.allreduce(sums, 2);
    res.global_partial_entries = sums[0];
    res.global_products = sums[1];
    res.max_rank_products = c.allreduce_value(cnt.products, comm::ReduceOp::max);
  }
  ContractMemory& mem = res.memory;
  {
    const std::size_t out_b = cnt.output_bytes;
    std::size_t recv_b = 0, exch_b = 0, stage_b = 0, stage_c = 0;
    const std::size_t stage_a = input_bytes + routed_bytes + cnt.workspace_bytes + out_b;
    if (P > 1) {
      const auto recv_e = std::max(cnt.output_entries, (res.global_partial_entries + P - 1) / P);
      recv_b = static_cast<std::size_t>(recv_e) * entry;
      const std::size_t send_b =
          static_cast<std::size_t>(cnt.output_entries) * std::max(sizeof(index_t), sizeof(T));
      exch_b = send_b + 2 * recv_b;
      stage_b = input_bytes + out_b + send_b + recv_b;
      // sort_sum_drop_zeros: keys and permutation, doubled by the radix sort.
      stage_c = input_bytes + 2 * recv_b + static_cast<std::size_t>(recv_e) * 2 * (8 + 4);
    }
    const std::size_t total = std::max({stage_a, stage_b, stage_c});
    mem.input_bytes = max_over(c, input_bytes);
    mem.routed_bytes = max_over(c, routed_bytes);
    mem.workspace_bytes = max_over(c, cnt.workspace_bytes);
    mem.output_bytes = max_over(c, out_b);
    mem.exchange_bytes = max_over(c, exch_b);
    mem.total_bytes = max_over(c, total);
    mem.mean_total_bytes = static_cast<std::size_t>(c.allreduce_value(static_cast<double>(total)) /
                                                    static_cast<double>(P));
  }
  if (opt.print) report_plan(res, spec, P, opt.memory_limit);
  if (opt.memory_limit > 0 && mem.total_bytes > opt.memory_limit) {
    // The per-rank need falls about as 1/P when the work spreads evenly.
    const double scale = static_cast<double>(mem.mean_total_bytes) / opt.memory_limit;
    const int ranks = std::max(P + 1, static_cast<int>(std::ceil(P * scale * 1.1)));
    std::ostringstream msg;
    msg << "contraction '" << spec.text << "' needs about "
        << bytes_str(static_cast<double>(mem.total_bytes))
        << " on the busiest rank, over the limit of "
        << bytes_str(static_cast<double>(opt.memory_limit)) << " per rank (output "
        << res.global_partial_entries << " entries from " << res.global_products << " products, "
        << bytes_str(static_cast<double>(mem.output_bytes))
        << " on the busiest rank; matching workspace "
        << bytes_str(static_cast<double>(mem.workspace_bytes)) << "; routed inputs "
        << bytes_str(static_cast<double>(mem.routed_bytes)) << "); ";
    if (mem.total_bytes > 2 * mem.mean_total_bytes)
      msg << "the busiest rank holds " << bytes_str(static_cast<double>(mem.total_bytes))
          << " against a mean of " << bytes_str(static_cast<double>(mem.mean_total_bytes))
          << " (skewed contracted indices), so more ranks help less than in proportion; ";
    msg << "about " << ranks << " ranks (" << ranks - P
        << " more) would fit if the work spreads evenly, or raise the memory limit to at least "
        << bytes_str(static_cast<double>(mem.total_bytes));
    TESSERA_INPUT_CHECK(false, msg.str());
  }

  // ---- 3. multiply ----
  t.reset();
  SparseTensor<T> part;
  bool into = false;  // one rank with buffers: written into them where the backend can
  comm::run_collectively(c, [&] {
    if (P == 1 && buffers != nullptr) into = be.contract_into(*plan, &res.stats, *buffers);
    if (!into) part = be.contract(*plan, &res.stats);
  });
  plan.reset();
  xr = SparseTensor<T>();
  yr = SparseTensor<T>();
  res.phases.add("multiply", t.seconds());
  std::int64_t zeros = res.stats.zeros_dropped;

  // ---- 4. route the partial output by its coordinates and sum there ----
  if (P > 1) {
    t.reset();
    std::vector<int> all(static_cast<std::size_t>(N));
    for (int k = 0; k < N; ++k) all[static_cast<std::size_t>(k)] = k;
    const Route ro = plan_route(part, all, c);
    SparseTensor<T> recv = execute_route(part, ro, dc);
    part = SparseTensor<T>();
    res.phases.add("route_output", t.seconds());
    t.reset();
    nnz_t merge_zeros = 0;
    comm::run_collectively(c, [&] { kernels::sort_sum_drop_zeros(recv, 0, &merge_zeros); });
    zeros += merge_zeros;
    part = std::move(recv);  // the merged share
    res.phases.add("merge", t.seconds());
  }
  finish(std::move(part), into);
  res.global_zeros_dropped = c.allreduce_value(zeros);
  return res;
}

template <typename T>
ContractBuffers<T>::~ContractBuffers() {
  out_pins_.clear();
  in_pins_.clear();
}

template <typename T>
double ContractBuffers<T>::pin_input(const SparseTensor<T>& t) {
  Timer tm;
  for (const auto& col : t.idx) lock(col.data(), col.size() * sizeof(index_t), in_pins_, pinned_in_);
  lock(t.vals.data(), t.vals.size() * sizeof(T), in_pins_, pinned_in_);
  return tm.seconds();
}

template <typename T>
void ContractBuffers<T>::lock(const void* p, std::size_t bytes,
                              std::vector<std::unique_ptr<kernels::HostPin>>& pins,
                              std::size_t& total) {
  constexpr std::size_t kMin = std::size_t{1} << 20;
  if (bytes < kMin) return;
  if (auto h = be_.pin_host(p, bytes)) {
    pins.push_back(std::move(h));
    total += bytes;
  }
}

template <typename T>
SparseTensor<T>& ContractBuffers<T>::output(const std::vector<std::uint64_t>& dims,
                                            std::size_t n) {
  if (out_.idx.size() != dims.size() || n > cap_) {
    out_pins_.clear();  // unlocked before the old storage is released
    pinned_out_ = 0;
    out_ = SparseTensor<T>();  // released before the new storage is taken
    cap_ = 0;
    const std::size_t cap = n + n / 8;
    SparseTensor<T> fresh(dims);
    for (auto& col : fresh.idx) col.reserve(cap);
    fresh.vals.reserve(cap);
    out_ = std::move(fresh);
    cap_ = cap;
    for (const auto& col : out_.idx) lock(col.data(), cap * sizeof(index_t), out_pins_, pinned_out_);
    lock(out_.vals.data(), cap * sizeof(T), out_pins_, pinned_out_);
  }
  out_.dims = dims;
  for (auto& col : out_.idx) col.resize(n);  // within the capacity: the storage stays
  out_.vals.resize(n);
  return out_;
}

template <typename T>
void ContractBuffers<T>::discard() {
  for (auto& col : out_.idx) col.clear();
  out_.vals.clear();
}

template <typename T>
void ContractBuffers<T>::take(SparseTensor<T>&& t) {
  out_pins_.clear();
  pinned_out_ = 0;
  cap_ = 0;
  out_ = std::move(t);
}

template class ContractBuffers<float>;
template class ContractBuffers<double>;

template <typename T>
SparseTensor<T> gather(const SparseTensor<T>& local, const comm::Communicator& c, int root) {
  const int P = c.size();
  SparseTensor<T> out(local.dims);
  std::vector<std::int64_t> send(static_cast<std::size_t>(P), 0);
  send[static_cast<std::size_t>(root)] = local.nnz();
  const auto recv = comm::exchange_counts(c, send);
  const std::vector<std::int64_t> sd(static_cast<std::size_t>(P), 0),
      rd = comm::displacements(recv);
  const std::int64_t total = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
  for (int m = 0; m < local.order(); ++m) {
    out.idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(total));
    c.alltoallv_raw(local.idx[static_cast<std::size_t>(m)].data(), send.data(), sd.data(),
                    out.idx[static_cast<std::size_t>(m)].data(), recv.data(), rd.data(),
                    comm::DataType::u32);
  }
  out.vals.resize(static_cast<std::size_t>(total));
  c.alltoallv_raw(local.vals.data(), send.data(), sd.data(), out.vals.data(), recv.data(),
                  rd.data(), comm::data_type_of<T>());
  if (c.rank() == root) kernels::sort_sum_drop_zeros(out, 0);
  return out;
}

template <typename T>
void write_sorted(const std::string& path, const SparseTensor<T>& local,
                  const comm::Communicator& c, const std::string& source) {
  SparseTensor<double> copy = local.template cast<double>();
  auto d = partition::distribute(std::move(copy), partition::Scheme::nnz, {}, c);
  if (io::has_h5_extension(path)) {
    io::H5Header meta;
    meta.dims = local.dims;
    meta.has_duplicates = 0;
    meta.source = source;
    io::write_h5(path, d.block, c, meta);
  } else {
    io::write_tns(path, d.block, c);
  }
}

template ContractResult<float> contract<float>(const SparseTensor<float>&,
                                               const SparseTensor<float>&, const ContractSpec&,
                                               kernels::Backend<float>&, const comm::Communicator&,
                                               const ContractOptions&, ContractBuffers<float>*);
template ContractResult<double> contract<double>(const SparseTensor<double>&,
                                                 const SparseTensor<double>&, const ContractSpec&,
                                                 kernels::Backend<double>&,
                                                 const comm::Communicator&, const ContractOptions&,
                                                 ContractBuffers<double>*);
template SparseTensor<float> gather<float>(const SparseTensor<float>&, const comm::Communicator&,
                                           int);
template SparseTensor<double> gather<double>(const SparseTensor<double>&, const comm::Communicator&,
                                             int);
template void write_sorted<float>(const std::string&, const SparseTensor<float>&,
                                  const comm::Communicator&, const std::string&);
template void write_sorted<double>(const std::string&, const SparseTensor<double>&,
                                   const comm::Communicator&, const std::string&);

}  // namespace tessera::algo
