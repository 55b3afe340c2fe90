#include "algo/contract.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
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
                           ContractBuffers<T>* buffers, ContractPieceSink<T>* sink) {
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
  if (P > 1 && !opt.dry_run && dc.memory_space() == comm::MemorySpace::device) {
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
      const std::size_t total = info.input_bytes + info.routed_bytes + info.count.workspace_bytes +
                                info.count.output_bytes;
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
                                     << " per rank (" << opt.memory_limit_source
                                     << "); the output can be made in pieces but the inputs "
                                        "stay resident for every piece; about "
                                     << std::max(ranks, P + 1)
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

  // ---- 2. plan: match and count locally; plan the memory (pieces); refuse when over ----
  std::unique_ptr<kernels::ContractPlan<T>> plan;
  comm::run_collectively(c, [&] { plan = be.contract_plan(*X, *Y, spec); });
  res.phases.add("plan", t.seconds());
  const kernels::ContractCount cnt = plan->count();
  const std::size_t entry = kernels::contract_entry_bytes(spec, sizeof(T));
  const std::size_t send_entry = std::max(sizeof(index_t), sizeof(T));
  {
    std::int64_t sums[2] = {cnt.output_entries, cnt.products};
    c.allreduce(sums, 2);
    res.global_partial_entries = sums[0];
    res.global_products = sums[1];
    res.max_rank_products = c.allreduce_value(cnt.products, comm::ReduceOp::max);
  }
  // The input that provides output mode 0 is split into pieces by ranges of that
  // coordinate: the pieces' outputs are disjoint ranges of the output's order.
  const bool split_y = spec.out_from_y[0];
  const int split_mode = spec.out_mode[0];
  const plan::ContractSinkKind sink_kind =
      sink != nullptr ? plan::ContractSinkKind::stream : plan::ContractSinkKind::memory;
  const bool on_device = be.memory_space() == comm::MemorySpace::device;
  // This rank's counts (for the mean) and the busiest rank's of each part (for the plan).
  plan::ContractCounts own;
  own.input_bytes = input_bytes;
  own.routed_bytes = routed_bytes;
  own.workspace_bytes = cnt.workspace_bytes;
  own.output_entries = static_cast<std::uint64_t>(cnt.output_entries);
  own.output_bytes = cnt.output_bytes;
  own.global_output_entries = static_cast<std::uint64_t>(res.global_partial_entries);
  own.entry_bytes = entry;
  own.send_entry_bytes = send_entry;
  {
    const SparseTensor<T>& S = split_y ? *Y : *X;
    own.split_bytes = tensor_bytes<T>(S.nnz(), S.order());
  }
  own.write_entry_bytes = sink != nullptr ? sink->bytes_per_entry() : 0;
  own.ranks = P;
  own.device = on_device;
  plan::ContractCounts pc = own;
  {
    std::uint64_t v[6] = {own.input_bytes,    own.routed_bytes, own.workspace_bytes,
                          own.output_entries, own.output_bytes, own.split_bytes};
    c.allreduce(v, 6, comm::ReduceOp::max);
    pc.input_bytes = v[0];
    pc.routed_bytes = v[1];
    pc.workspace_bytes = v[2];
    pc.output_entries = v[3];
    pc.output_bytes = v[4];
    pc.split_bytes = v[5];
  }
  plan::ContractLimits lim;
  if (opt.memory_limit > 0) lim.host = {opt.memory_limit, opt.memory_limit_source};
  if (opt.device_limit > 0 && on_device) lim.device = {opt.device_limit, opt.device_limit_source};
  res.piece_plan = plan::plan_contract_pieces(pc, lim, sink_kind);
  if (res.piece_plan.fits && opt.min_pieces > res.piece_plan.pieces) {
    res.piece_plan.pieces = opt.min_pieces;
    res.piece_plan.host_bytes = plan::contract_host_bytes(pc, opt.min_pieces, sink_kind);
    res.piece_plan.device_bytes = plan::contract_device_bytes(pc, opt.min_pieces);
    res.piece_plan.reason += "; " + std::to_string(opt.min_pieces) + " pieces asked for";
  }
  const int pieces = res.piece_plan.pieces;
  ContractMemory& mem = res.memory;
  {
    std::size_t exch_b = 0;
    if (P > 1) {
      const auto recv_e = std::max(cnt.output_entries, (res.global_partial_entries + P - 1) / P);
      exch_b = static_cast<std::size_t>(cnt.output_entries) * send_entry +
               2 * static_cast<std::size_t>(recv_e) * entry;
    }
    mem.input_bytes = pc.input_bytes;
    mem.routed_bytes = pc.routed_bytes;
    mem.workspace_bytes = pc.workspace_bytes;
    mem.output_bytes = pc.output_bytes;
    mem.exchange_bytes = max_over(c, exch_b);
    mem.total_bytes =
        res.piece_plan.fits ? res.piece_plan.host_bytes : res.piece_plan.one_piece_host_bytes;
    const double own_total =
        static_cast<double>(plan::contract_host_bytes(own, std::max(pieces, 1), sink_kind));
    mem.mean_total_bytes =
        static_cast<std::size_t>(c.allreduce_value(own_total) / static_cast<double>(P));
  }
  if (opt.print) {
    report_plan(res, spec, P, opt.memory_limit);
    log::info("memory plan: " + res.piece_plan.reason);
  }
  TESSERA_INPUT_CHECK(res.piece_plan.fits,
                      "contraction '" << spec.text << "': " << res.piece_plan.reason);
  if (opt.dry_run) {
    res.dry_run = true;
    res.pieces = pieces;
    res.local = SparseTensor<T>(res.dims);
    return res;
  }

  std::int64_t zeros = 0;
  // Step 4: route the partial output by its coordinates and sum there.
  auto finish_merge = [&](SparseTensor<T>&& part) {
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
    part.dims = res.dims;
    return std::move(part);
  };
  // Steps 3 and 4 for one plan: multiply; route the partial output by its coordinates and
  // sum there. `release` runs after the multiplication (frees what is no longer needed).
  auto multiply_and_merge = [&](std::unique_ptr<kernels::ContractPlan<T>>& pl, bool* into,
                                const std::function<void()>& release) {
    t.reset();
    SparseTensor<T> part;
    kernels::ContractStats st;
    // One piece: the backend's statistics as they come; pieces: summed.
    kernels::ContractStats* stp = pieces <= 1 ? &res.stats : &st;
    comm::run_collectively(c, [&] {
      if (into != nullptr && P == 1 && buffers != nullptr)
        *into = be.contract_into(*pl, stp, *buffers);
      if (into == nullptr || !*into) part = be.contract(*pl, stp);
    });
    pl.reset();
    release();
    res.phases.add("multiply", t.seconds());
    zeros += stp->zeros_dropped;
    if (pieces <= 1) return finish_merge(std::move(part));
    res.stats.products += st.products;
    res.stats.output_entries += st.output_entries;
    res.stats.output_nnz += st.output_nnz;
    res.stats.zeros_dropped += st.zeros_dropped;
    res.stats.match_seconds += st.match_seconds;
    res.stats.count_seconds += st.count_seconds;
    res.stats.multiply_seconds += st.multiply_seconds;
    res.stats.assemble_seconds += st.assemble_seconds;
    return finish_merge(std::move(part));
  };

  if (pieces <= 1) {
    bool into = false;  // one rank with buffers: written into them where the backend can
    SparseTensor<T> part = multiply_and_merge(plan, &into, [&] {
      xr = SparseTensor<T>();
      yr = SparseTensor<T>();
    });
    finish(std::move(part), into);
    res.global_zeros_dropped = c.allreduce_value(zeros);
    return res;
  }

  // ---- output in pieces: ranges of output mode 0's coordinate on the split input ----
  plan.reset();  // the whole-output plan; each piece plans its own
  const SparseTensor<T>& S = split_y ? *Y : *X;
  const std::uint64_t dim = S.dims[static_cast<std::size_t>(split_mode)];
  const std::vector<index_t>& sc = S.idx[static_cast<std::size_t>(split_mode)];
  // Ranges of about equal nonzeros from a histogram over at most 4096 buckets (all ranks).
  const std::uint64_t nb = std::max<std::uint64_t>(std::min<std::uint64_t>(dim, 4096), 1);
  std::vector<std::int64_t> hist(static_cast<std::size_t>(nb), 0);
  for (index_t v : sc) ++hist[static_cast<std::size_t>(static_cast<std::uint64_t>(v) * nb / dim)];
  c.allreduce(hist.data(), static_cast<int>(nb));
  auto bucket_lo = [&](std::uint64_t b) { return (b * dim + nb - 1) / nb; };
  std::deque<std::pair<std::uint64_t, std::uint64_t>> todo;  // [lo, hi) coordinates
  {
    const std::int64_t total = std::accumulate(hist.begin(), hist.end(), std::int64_t{0});
    std::uint64_t lo = 0;
    std::int64_t cum = 0;
    int made = 0;
    for (std::uint64_t b = 0; b < nb; ++b) {
      cum += hist[static_cast<std::size_t>(b)];
      const bool cut = b + 1 == nb || (made + 1 < pieces &&
                                       cum * pieces >= total * static_cast<std::int64_t>(made + 1));
      if (cut) {
        const std::uint64_t hi = bucket_lo(b + 1);
        if (hi > lo) todo.emplace_back(lo, hi);
        lo = hi;
        ++made;
      }
    }
  }
  std::vector<SparseTensor<T>> done_pieces;
  std::int64_t streamed_nnz = 0;
  res.pieces = 0;
  while (!todo.empty()) {
    const auto [lo, hi] = todo.front();
    todo.pop_front();
    // This piece's share of the split input (its nonzeros in [lo, hi), in their order).
    SparseTensor<T> sp(S.dims);
    {
      std::vector<std::int64_t> pos;
      for (std::size_t k = 0; k < sc.size(); ++k)
        if (sc[k] >= lo && sc[k] < hi) pos.push_back(static_cast<std::int64_t>(k));
      for (int m = 0; m < S.order(); ++m) {
        auto& dst = sp.idx[static_cast<std::size_t>(m)];
        const auto& src = S.idx[static_cast<std::size_t>(m)];
        dst.resize(pos.size());
        for (std::size_t k = 0; k < pos.size(); ++k) dst[k] = src[static_cast<std::size_t>(pos[k])];
      }
      sp.vals.resize(pos.size());
      for (std::size_t k = 0; k < pos.size(); ++k)
        sp.vals[k] = S.vals[static_cast<std::size_t>(pos[k])];
    }
    t.reset();
    std::unique_ptr<kernels::ContractPlan<T>> pp;
    comm::run_collectively(
        c, [&] { pp = split_y ? be.contract_plan(*X, sp, spec) : be.contract_plan(sp, *Y, spec); });
    res.phases.add("plan", t.seconds());
    const kernels::ContractCount pcnt = pp->count();
    plan::ContractCounts q = pc;
    {
      std::uint64_t v[4] = {static_cast<std::uint64_t>(pcnt.output_entries), pcnt.output_bytes,
                            pcnt.workspace_bytes, tensor_bytes<T>(sp.nnz(), sp.order())};
      c.allreduce(v, 4, comm::ReduceOp::max);
      q.output_entries = v[0];
      q.output_bytes = v[1];
      q.workspace_bytes = v[2];
      q.split_bytes = v[3];
      q.global_output_entries = static_cast<std::uint64_t>(
          c.allreduce_value(static_cast<std::int64_t>(pcnt.output_entries)));
    }
    const std::uint64_t need_h = plan::contract_piece_host_bytes(pc, q, sink_kind),
                        need_d = plan::contract_piece_device_bytes(pc, q);
    const bool over_h = lim.host.known() && need_h > lim.host.bytes,
               over_d = lim.device.known() && need_d > lim.device.bytes;
    if (over_h || over_d) {
      pp.reset();
      if (hi - lo > 1) {  // bisect: the lower half first
        const std::uint64_t mid = lo + (hi - lo) / 2;
        todo.emplace_front(mid, hi);
        todo.emplace_front(lo, mid);
        continue;
      }
      TESSERA_INPUT_CHECK(false, "contraction '"
                                     << spec.text << "': coordinate " << lo
                                     << " of output mode 0 alone needs about "
                                     << bytes_str(static_cast<double>(over_h ? need_h : need_d))
                                     << " on the busiest rank, over the limit of "
                                     << bytes_str(static_cast<double>(over_h ? lim.host.bytes
                                                                             : lim.device.bytes))
                                     << " (" << (over_h ? lim.host.source : lim.device.source)
                                     << "); a piece cannot be smaller: run on more ranks, or "
                                        "raise the limit");
    }
    res.memory.total_bytes = std::max<std::size_t>(res.memory.total_bytes, need_h);
    SparseTensor<T> share = multiply_and_merge(pp, nullptr, [&] { sp = SparseTensor<T>(); });
    ++res.pieces;
    if (sink != nullptr) {
      streamed_nnz += static_cast<std::int64_t>(share.nnz());
      sink->put(std::move(share), res.pieces - 1);
    } else {
      done_pieces.push_back(std::move(share));
    }
  }
  if (opt.print)
    log::info("output made in " + std::to_string(res.pieces) + " pieces (" +
              (sink != nullptr ? "written piece by piece" : "joined in host memory") + ")");
  res.global_zeros_dropped = c.allreduce_value(zeros);
  if (sink != nullptr) {
    res.streamed = true;
    res.global_nnz = c.allreduce_value(streamed_nnz);
    kept.done = true;
    res.local = SparseTensor<T>(res.dims);
    return res;
  }
  // Join the pieces (ascending ranges of output mode 0: the result stays sorted), one
  // array at a time.
  SparseTensor<T> joined(res.dims);
  std::size_t total = 0;
  for (const auto& p : done_pieces) total += static_cast<std::size_t>(p.nnz());
  for (int m = 0; m < N; ++m) {
    auto& dst = joined.idx[static_cast<std::size_t>(m)];
    dst.resize(total);
    std::size_t o = 0;
    for (auto& p : done_pieces) {
      auto& src = p.idx[static_cast<std::size_t>(m)];
      std::copy(src.begin(), src.end(), dst.begin() + static_cast<std::ptrdiff_t>(o));
      o += src.size();
      std::vector<index_t>().swap(src);
    }
  }
  joined.vals.resize(total);
  {
    std::size_t o = 0;
    for (auto& p : done_pieces) {
      std::copy(p.vals.begin(), p.vals.end(), joined.vals.begin() + static_cast<std::ptrdiff_t>(o));
      o += p.vals.size();
      std::vector<T>().swap(p.vals);
    }
  }
  done_pieces.clear();
  finish(std::move(joined), false);
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
  for (const auto& col : t.idx)
    lock(col.data(), col.size() * sizeof(index_t), in_pins_, pinned_in_);
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
SparseTensor<T>& ContractBuffers<T>::output(const std::vector<std::uint64_t>& dims, std::size_t n) {
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
    for (const auto& col : out_.idx)
      lock(col.data(), cap * sizeof(index_t), out_pins_, pinned_out_);
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
                                               const ContractOptions&, ContractBuffers<float>*,
                                               ContractPieceSink<float>*);
template ContractResult<double> contract<double>(const SparseTensor<double>&,
                                                 const SparseTensor<double>&, const ContractSpec&,
                                                 kernels::Backend<double>&,
                                                 const comm::Communicator&, const ContractOptions&,
                                                 ContractBuffers<double>*,
                                                 ContractPieceSink<double>*);
template SparseTensor<float> gather<float>(const SparseTensor<float>&, const comm::Communicator&,
                                           int);
template SparseTensor<double> gather<double>(const SparseTensor<double>&, const comm::Communicator&,
                                             int);
template void write_sorted<float>(const std::string&, const SparseTensor<float>&,
                                  const comm::Communicator&, const std::string&);
template void write_sorted<double>(const std::string&, const SparseTensor<double>&,
                                   const comm::Communicator&, const std::string&);

}  // namespace tessera::algo
