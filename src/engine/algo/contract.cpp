#include "algo/contract.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <utility>

#include "algo/contract_route.hpp"
#include "kernels/ops/sptc.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

namespace {

using contract_detail::bytes_str;
using contract_detail::DeviceRouteInfo;
using contract_detail::execute_route;
using contract_detail::max_over;
using contract_detail::plan_route;
using contract_detail::Route;
using contract_detail::tensor_bytes;
using kernels::ContractSpec;

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

/// One call of algo::contract: its arguments and the state its steps share (docs/sptc.md,
/// "Distributed"). run() takes the steps in order: route the inputs (in backend memory when
/// the backend can, else on the host), plan and count, multiply, route and merge the
/// partial output, in one piece or in pieces.
template <typename T>
class Contraction {
 public:
  Contraction(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& spec,
              kernels::Backend<T>& be, const comm::Communicator& c, const ContractOptions& opt,
              ContractBuffers<T>* buffers, ContractPieceSink<T>* sink)
      : x_(x),
        y_(y),
        spec_(spec),
        be_(be),
        c_(c),
        dc_(opt.data != nullptr ? *opt.data : c),
        opt_(opt),
        buffers_(buffers),
        sink_(sink),
        P_(c.size()),
        self_(&x == &y),
        kept_{buffers, true} {}  // armed by run() once its preconditions hold

  ContractResult<T> run();

 private:
  /// A contraction that throws leaves the buffers' result empty (storage kept), not half
  /// written.
  struct Discard {
    ContractBuffers<T>* b;
    bool done = false;
    ~Discard() {
      if (b != nullptr && !done) b->discard();
    }
  };

  bool on_device();
  void route_inputs();
  void plan_pieces();
  void plan_memory(const kernels::ContractCount& cnt);
  SparseTensor<T> merge_output(SparseTensor<T>&& part);
  SparseTensor<T> multiply_and_merge(std::unique_ptr<kernels::ContractPlan<T>>& pl, bool* into,
                                     const std::function<void()>& release);
  ContractResult<T> run_pieces();
  std::deque<std::pair<std::uint64_t, std::uint64_t>> piece_ranges(const std::vector<index_t>& sc,
                                                                   std::uint64_t dim) const;
  SparseTensor<T> piece_input(std::uint64_t lo, std::uint64_t hi) const;
  std::unique_ptr<kernels::ContractPlan<T>> plan_piece(
      const SparseTensor<T>& sp, std::uint64_t lo, std::uint64_t hi,
      std::deque<std::pair<std::uint64_t, std::uint64_t>>& todo);
  void join_pieces(std::vector<SparseTensor<T>>& done_pieces);
  void finish(SparseTensor<T>&& local, bool in_buffers);

  const SparseTensor<T>& x_;
  const SparseTensor<T>& y_;
  const ContractSpec& spec_;
  kernels::Backend<T>& be_;
  const comm::Communicator& c_;
  const comm::Communicator& dc_;
  const ContractOptions& opt_;
  ContractBuffers<T>* buffers_;
  ContractPieceSink<T>* sink_;
  const int P_;
  const bool self_;
  Discard kept_;
  ContractResult<T> res_;
  Timer t_;
  std::size_t input_bytes_ = 0, routed_bytes_ = 0;
  SparseTensor<T> xr_, yr_;  // the routed inputs (P > 1)
  const SparseTensor<T>* X_ = &x_;
  const SparseTensor<T>* Y_ = &y_;
  std::unique_ptr<kernels::ContractPlan<T>> plan_;
  // The memory plan (plan_pieces).
  plan::ContractCounts pc_;
  plan::ContractLimits lim_;
  plan::ContractSinkKind sink_kind_ = plan::ContractSinkKind::memory;
  int pieces_ = 1;
  // The input that provides output mode 0 is split into pieces by ranges of that
  // coordinate: the pieces' outputs are disjoint ranges of the output's order.
  bool split_y_ = false;
  int split_mode_ = 0;
  std::int64_t zeros_ = 0;
  // The partial output's relays (ContractOptions::hierarchy): this rank's node in c and in
  // the data communicator, and each rank's slot on its node; null: merged flat.
  comm::NodeRelays relays_;
  std::int64_t network_ = 0;  // entries this rank sent to another node
};

/// The rank's share ends in res.local, or in the buffers: written there by the backend
/// (`in_buffers`), else handed over.
template <typename T>
void Contraction<T>::finish(SparseTensor<T>&& local, bool in_buffers) {
  local.dims = res_.dims;
  if (buffers_ != nullptr && !in_buffers) buffers_->take(std::move(local));
  res_.local = buffers_ ? SparseTensor<T>(res_.dims) : std::move(local);
  const SparseTensor<T>& share = buffers_ ? buffers_->result() : res_.local;
  res_.global_nnz = c_.allreduce_value(static_cast<std::int64_t>(share.nnz()));
  if (!res_.output_merge.empty() && opt_.nodes.nodes() > 1)
    res_.network_entries = c_.allreduce_value(network_);
  kept_.done = true;
}

template <typename T>
ContractResult<T> Contraction<T>::run() {
  TESSERA_EXPECTS(c_.memory_space() == comm::MemorySpace::host,
                  "algo::contract routes host tensors: it needs a host communicator");
  TESSERA_EXPECTS(dc_.size() == c_.size() && dc_.rank() == c_.rank(),
                  "algo::contract: the data communicator must span the ranks of the host one");
  kept_.done = false;  // from here on, a throw leaves the buffers' result empty
  // Global dims are the same on every rank: these errors are agreed without a collective.
  res_.dims = kernels::contract_output_dims(spec_, x_.dims, y_.dims);
  t_.reset();

  // ---- 1. route the inputs by their matched coordinates ----
  const bool once = self_ && spec_.x_key == spec_.y_key;
  res_.routed_once = once;
  std::int64_t in_nnz[2] = {x_.nnz(), self_ ? 0 : y_.nnz()};
  c_.allreduce(in_nnz, 2);
  res_.global_input_nnz[0] = in_nnz[0];
  res_.global_input_nnz[1] = self_ ? in_nnz[0] : in_nnz[1];
  input_bytes_ =
      tensor_bytes<T>(x_.nnz(), x_.order()) + (self_ ? 0 : tensor_bytes<T>(y_.nnz(), y_.order()));
  // ---- routed in backend memory (the cuda backend over NCCL) when it can ----
  if (P_ > 1 && !opt_.dry_run && dc_.memory_space() == comm::MemorySpace::device && on_device())
    return std::move(res_);
  route_inputs();
  res_.phases.add("route_inputs", t_.seconds());
  // The partial output's relays on each node, when the hierarchy asks for them.
  relays_ = comm::node_relays(c_, dc_, opt_.nodes, opt_.hierarchy);
  if (P_ > 1) res_.output_merge = relays_.host ? "node" : "flat";
  t_.reset();

  // ---- 2. plan: match and count locally; plan the memory (pieces); refuse when over ----
  plan_pieces();
  if (opt_.dry_run) {
    res_.dry_run = true;
    res_.pieces = pieces_;
    res_.local = SparseTensor<T>(res_.dims);
    return std::move(res_);
  }
  if (pieces_ > 1) return run_pieces();
  bool into = false;  // one rank with buffers: written into them where the backend can
  SparseTensor<T> part = multiply_and_merge(plan_, &into, [&] {
    xr_ = SparseTensor<T>();
    yr_ = SparseTensor<T>();
  });
  finish(std::move(part), into);
  res_.global_zeros_dropped = c_.allreduce_value(zeros_);
  return std::move(res_);
}

/// Routed in backend memory (contract_detail::route_on_device); false, with nothing done,
/// when the backend has no such path or the inputs would not fit.
template <typename T>
bool Contraction<T>::on_device() {
  DeviceRouteInfo info;
  SparseTensor<T> local;
  const bool by_nodes = static_cast<int>(opt_.nodes.node_of.size()) == P_ &&
                        comm::use_hierarchy(opt_.hierarchy, opt_.nodes);
  if (!contract_detail::route_on_device(x_, y_, spec_, be_, c_, dc_, opt_.memory_limit, &local,
                                        &res_.stats, &info, buffers_,
                                        by_nodes ? &opt_.nodes : nullptr))
    return false;
  res_.routed_on_device = true;
  res_.replicated_by_nodes = info.by_nodes;
  res_.phases.add("route_inputs", info.route_seconds);
  const double plan_s = res_.stats.match_seconds + res_.stats.count_seconds;
  res_.phases.add("plan", plan_s);
  res_.phases.add("multiply", std::max(info.local_seconds - plan_s, 0.0));
  std::int64_t sums[3] = {info.count.output_entries, info.count.products, res_.stats.zeros_dropped};
  c_.allreduce(sums, 3);
  res_.global_partial_entries = sums[0];
  res_.global_products = sums[1];
  res_.global_zeros_dropped = sums[2];
  res_.max_rank_products = c_.allreduce_value(info.count.products, comm::ReduceOp::max);
  ContractMemory& mem = res_.memory;
  const std::size_t total =
      info.input_bytes + info.routed_bytes + info.count.workspace_bytes + info.count.output_bytes;
  mem.input_bytes = max_over(c_, info.input_bytes);
  mem.routed_bytes = max_over(c_, info.routed_bytes);
  mem.workspace_bytes = max_over(c_, info.count.workspace_bytes);
  mem.output_bytes = max_over(c_, info.count.output_bytes);
  mem.exchange_bytes = 0;
  mem.total_bytes = max_over(c_, total);
  mem.mean_total_bytes = static_cast<std::size_t>(c_.allreduce_value(static_cast<double>(total)) /
                                                  static_cast<double>(P_));
  if (opt_.print) {
    report_plan(res_, spec_, P_, opt_.memory_limit);
    log::info(std::string("routed on the devices: ") + (info.replicated == 1 ? "X" : "Y") +
              " partitioned by a hash of its output coordinates, " +
              (info.replicated == 1 ? "Y" : "X") + " copied to every rank" +
              (info.by_nodes ? " (across nodes once per node, then inside each)" : "") +
              ", over the data communicator; no output merge");
  }
  finish(std::move(local), true);
  return true;
}

/// Step 1 on the host: both inputs routed by a hash of their matched coordinates (once for
/// a self-contraction whose roles hash the same modes); refused before moving anything
/// when the routed copies alone pass the memory limit.
template <typename T>
void Contraction<T>::route_inputs() {
  if (P_ <= 1) return;
  const bool once = res_.routed_once;
  const Route rx = plan_route(x_, spec_.x_key, c_);
  Route ry;
  if (!once) ry = plan_route(y_, spec_.y_key, c_);
  routed_bytes_ = tensor_bytes<T>(rx.recv_total, x_.order()) +
                  (once ? 0 : tensor_bytes<T>(ry.recv_total, y_.order()));
  // The routed inputs alone over the limit: refuse before moving them.
  const std::size_t pre = max_over(c_, input_bytes_ + routed_bytes_);
  if (opt_.memory_limit > 0 && pre > opt_.memory_limit) {
    const int ranks = static_cast<int>(
        std::ceil(static_cast<double>(P_) * pre / static_cast<double>(opt_.memory_limit)));
    TESSERA_INPUT_CHECK(false, "contraction '"
                                   << spec_.text << "': the inputs and their routed copies "
                                   << "alone need about " << bytes_str(static_cast<double>(pre))
                                   << " on the busiest rank, over the limit of "
                                   << bytes_str(static_cast<double>(opt_.memory_limit))
                                   << " per rank (" << opt_.memory_limit_source
                                   << "); the output can be made in pieces but the inputs "
                                      "stay resident for every piece; about "
                                   << std::max(ranks, P_ + 1)
                                   << " ranks would fit, or raise the memory limit");
  }
  xr_ = execute_route(x_, rx, dc_);
  X_ = &xr_;
  if (once) {
    Y_ = &xr_;
  } else {
    yr_ = execute_route(y_, ry, dc_);
    Y_ = &yr_;
  }
}

/// Step 2: the local plan (matching and counting), the counts over ranks, the memory plan
/// (plan::plan_contract_pieces), the report; InputError on every rank when it does not fit.
template <typename T>
void Contraction<T>::plan_pieces() {
  comm::run_collectively(c_, [&] { plan_ = kernels::ops::contract_plan(be_, *X_, *Y_, spec_); });
  res_.phases.add("plan", t_.seconds());
  const kernels::ContractCount cnt = plan_->count();
  {
    std::int64_t sums[2] = {cnt.output_entries, cnt.products};
    c_.allreduce(sums, 2);
    res_.global_partial_entries = sums[0];
    res_.global_products = sums[1];
    res_.max_rank_products = c_.allreduce_value(cnt.products, comm::ReduceOp::max);
  }
  split_y_ = spec_.out_from_y[0];
  split_mode_ = spec_.out_mode[0];
  sink_kind_ = sink_ != nullptr ? plan::ContractSinkKind::stream : plan::ContractSinkKind::memory;
  plan_memory(cnt);
  if (opt_.print) {
    report_plan(res_, spec_, P_, opt_.memory_limit);
    log::info("memory plan: " + res_.piece_plan.reason);
  }
  TESSERA_INPUT_CHECK(res_.piece_plan.fits,
                      "contraction '" << spec_.text << "': " << res_.piece_plan.reason);
}

/// The memory part of plan_pieces: this rank's counts and the busiest rank's (pc_), the
/// limits (lim_), the piece plan and the memory estimate of the result.
template <typename T>
void Contraction<T>::plan_memory(const kernels::ContractCount& cnt) {
  const std::size_t entry = kernels::contract_entry_bytes(spec_, sizeof(T));
  const std::size_t send_entry = std::max(sizeof(index_t), sizeof(T));
  const bool on_device = be_.memory_space() == comm::MemorySpace::device;
  // This rank's counts (for the mean) and the busiest rank's of each part (for the plan).
  plan::ContractCounts own;
  own.input_bytes = input_bytes_;
  own.routed_bytes = routed_bytes_;
  own.workspace_bytes = cnt.workspace_bytes;
  own.output_entries = static_cast<std::uint64_t>(cnt.output_entries);
  own.output_bytes = cnt.output_bytes;
  own.global_output_entries = static_cast<std::uint64_t>(res_.global_partial_entries);
  own.entry_bytes = entry;
  own.send_entry_bytes = send_entry;
  {
    const SparseTensor<T>& S = split_y_ ? *Y_ : *X_;
    own.split_bytes = tensor_bytes<T>(S.nnz(), S.order());
  }
  own.write_entry_bytes = sink_ != nullptr ? sink_->bytes_per_entry() : 0;
  own.ranks = P_;
  own.device = on_device;
  pc_ = own;
  {
    std::uint64_t v[6] = {own.input_bytes,    own.routed_bytes, own.workspace_bytes,
                          own.output_entries, own.output_bytes, own.split_bytes};
    c_.allreduce(v, 6, comm::ReduceOp::max);
    pc_.input_bytes = v[0];
    pc_.routed_bytes = v[1];
    pc_.workspace_bytes = v[2];
    pc_.output_entries = v[3];
    pc_.output_bytes = v[4];
    pc_.split_bytes = v[5];
  }
  if (opt_.memory_limit > 0) lim_.host = {opt_.memory_limit, opt_.memory_limit_source};
  if (opt_.device_limit > 0 && on_device)
    lim_.device = {opt_.device_limit, opt_.device_limit_source};
  res_.piece_plan = plan::plan_contract_pieces(pc_, lim_, sink_kind_);
  if (res_.piece_plan.fits && opt_.min_pieces > res_.piece_plan.pieces) {
    res_.piece_plan.pieces = opt_.min_pieces;
    res_.piece_plan.host_bytes = plan::contract_host_bytes(pc_, opt_.min_pieces, sink_kind_);
    res_.piece_plan.device_bytes = plan::contract_device_bytes(pc_, opt_.min_pieces);
    res_.piece_plan.reason += "; " + std::to_string(opt_.min_pieces) + " pieces asked for";
  }
  pieces_ = res_.piece_plan.pieces;
  ContractMemory& mem = res_.memory;
  std::size_t exch_b = 0;
  if (P_ > 1) {
    const auto recv_e = std::max(cnt.output_entries, (res_.global_partial_entries + P_ - 1) / P_);
    exch_b = static_cast<std::size_t>(cnt.output_entries) * send_entry +
             2 * static_cast<std::size_t>(recv_e) * entry;
  }
  mem.input_bytes = pc_.input_bytes;
  mem.routed_bytes = pc_.routed_bytes;
  mem.workspace_bytes = pc_.workspace_bytes;
  mem.output_bytes = pc_.output_bytes;
  mem.exchange_bytes = max_over(c_, exch_b);
  mem.total_bytes =
      res_.piece_plan.fits ? res_.piece_plan.host_bytes : res_.piece_plan.one_piece_host_bytes;
  const double own_total =
      static_cast<double>(plan::contract_host_bytes(own, std::max(pieces_, 1), sink_kind_));
  mem.mean_total_bytes =
      static_cast<std::size_t>(c_.allreduce_value(own_total) / static_cast<double>(P_));
}

/// Step 4: route the partial output by its coordinates and sum there. With relays, first
/// to the relay of each entry's owner on this node, which sums the node's copies (exact
/// zeros dropped there too), then the sums to their owners.
template <typename T>
SparseTensor<T> Contraction<T>::merge_output(SparseTensor<T>&& part) {
  if (P_ > 1) {
    t_.reset();
    const int N = spec_.out_order();
    std::vector<int> all(static_cast<std::size_t>(N));
    for (int k = 0; k < N; ++k) all[static_cast<std::size_t>(k)] = k;
    if (relays_.host) {
      const Route r1 = plan_route(part, all, *relays_.host, &relays_.slot_of);
      SparseTensor<T> relayed = execute_route(part, r1, *relays_.moves());
      part = SparseTensor<T>();
      nnz_t relay_zeros = 0;
      comm::run_collectively(c_, [&] { kernels::sort_sum_drop_zeros(relayed, 0, &relay_zeros); });
      zeros_ += relay_zeros;
      part = std::move(relayed);
    }
    const Route ro = plan_route(part, all, c_);
    if (static_cast<int>(opt_.nodes.node_of.size()) == P_)
      network_ += opt_.nodes.off_node(c_.rank(), ro.sendcounts);
    SparseTensor<T> recv = execute_route(part, ro, dc_);
    part = SparseTensor<T>();
    res_.phases.add("route_output", t_.seconds());
    t_.reset();
    nnz_t merge_zeros = 0;
    comm::run_collectively(c_, [&] { kernels::sort_sum_drop_zeros(recv, 0, &merge_zeros); });
    zeros_ += merge_zeros;
    part = std::move(recv);  // the merged share
    res_.phases.add("merge", t_.seconds());
  }
  part.dims = res_.dims;
  return std::move(part);
}

/// Steps 3 and 4 for one plan: multiply; route the partial output by its coordinates and
/// sum there. `release` runs after the multiplication (frees what is no longer needed).
template <typename T>
SparseTensor<T> Contraction<T>::multiply_and_merge(std::unique_ptr<kernels::ContractPlan<T>>& pl,
                                                   bool* into,
                                                   const std::function<void()>& release) {
  t_.reset();
  SparseTensor<T> part;
  kernels::ContractStats st;
  // One piece: the backend's statistics as they come; pieces: summed.
  kernels::ContractStats* stp = pieces_ <= 1 ? &res_.stats : &st;
  comm::run_collectively(c_, [&] {
    if (into != nullptr && P_ == 1 && buffers_ != nullptr)
      *into = kernels::ops::contract_into(be_, *pl, stp, *buffers_);
    if (into == nullptr || !*into) part = kernels::ops::contract(be_, *pl, stp);
  });
  pl.reset();
  release();
  res_.phases.add("multiply", t_.seconds());
  zeros_ += stp->zeros_dropped;
  if (pieces_ <= 1) return merge_output(std::move(part));
  kernels::ContractStats& s = res_.stats;
  s.products += st.products;
  s.output_entries += st.output_entries;
  s.output_nnz += st.output_nnz;
  s.zeros_dropped += st.zeros_dropped;
  s.match_seconds += st.match_seconds;
  s.count_seconds += st.count_seconds;
  s.multiply_seconds += st.multiply_seconds;
  s.assemble_seconds += st.assemble_seconds;
  return merge_output(std::move(part));
}

/// This piece's share of the split input: its nonzeros with output mode 0's coordinate in
/// [lo, hi), in their order.
template <typename T>
SparseTensor<T> Contraction<T>::piece_input(std::uint64_t lo, std::uint64_t hi) const {
  const SparseTensor<T>& S = split_y_ ? *Y_ : *X_;
  const std::vector<index_t>& sc = S.idx[static_cast<std::size_t>(split_mode_)];
  SparseTensor<T> sp(S.dims);
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
  return sp;
}

/// Joins the pieces (ascending ranges of output mode 0: the result stays sorted), one
/// array at a time, and finishes with the joined share.
template <typename T>
void Contraction<T>::join_pieces(std::vector<SparseTensor<T>>& done_pieces) {
  const int N = spec_.out_order();
  SparseTensor<T> joined(res_.dims);
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
}

/// The output in pieces: ranges of output mode 0's coordinate on the split input, of about
/// equal nonzeros (a histogram over at most 4096 buckets, all ranks); a piece over the
/// limits is bisected. Each piece is planned, multiplied, routed and merged on its own, then
/// put to the sink or joined.
template <typename T>
ContractResult<T> Contraction<T>::run_pieces() {
  plan_.reset();  // the whole-output plan; each piece plans its own
  const SparseTensor<T>& S = split_y_ ? *Y_ : *X_;
  const std::uint64_t dim = S.dims[static_cast<std::size_t>(split_mode_)];
  std::deque<std::pair<std::uint64_t, std::uint64_t>> todo =
      piece_ranges(S.idx[static_cast<std::size_t>(split_mode_)], dim);
  std::vector<SparseTensor<T>> done_pieces;
  std::int64_t streamed_nnz = 0;
  res_.pieces = 0;
  while (!todo.empty()) {
    const auto [lo, hi] = todo.front();
    todo.pop_front();
    SparseTensor<T> sp = piece_input(lo, hi);
    std::unique_ptr<kernels::ContractPlan<T>> pp = plan_piece(sp, lo, hi, todo);
    if (!pp) continue;  // bisected
    SparseTensor<T> share = multiply_and_merge(pp, nullptr, [&] { sp = SparseTensor<T>(); });
    ++res_.pieces;
    if (sink_ != nullptr) {
      streamed_nnz += static_cast<std::int64_t>(share.nnz());
      sink_->put(std::move(share), res_.pieces - 1);
    } else {
      done_pieces.push_back(std::move(share));
    }
  }
  if (opt_.print)
    log::info("output made in " + std::to_string(res_.pieces) + " pieces (" +
              (sink_ != nullptr ? "written piece by piece" : "joined in host memory") + ")");
  res_.global_zeros_dropped = c_.allreduce_value(zeros_);
  if (sink_ != nullptr) {
    res_.streamed = true;
    res_.global_nnz = c_.allreduce_value(streamed_nnz);
    if (!res_.output_merge.empty() && opt_.nodes.nodes() > 1)
      res_.network_entries = c_.allreduce_value(network_);
    kept_.done = true;
    res_.local = SparseTensor<T>(res_.dims);
    return std::move(res_);
  }
  join_pieces(done_pieces);
  return std::move(res_);
}

/// Ranges [lo, hi) of the split coordinate sc (< dim) with about equal nonzeros over all
/// ranks, pieces_ of them at most: a histogram over at most 4096 buckets, all-reduced.
template <typename T>
std::deque<std::pair<std::uint64_t, std::uint64_t>> Contraction<T>::piece_ranges(
    const std::vector<index_t>& sc, std::uint64_t dim) const {
  const std::uint64_t nb = std::max<std::uint64_t>(std::min<std::uint64_t>(dim, 4096), 1);
  std::vector<std::int64_t> hist(static_cast<std::size_t>(nb), 0);
  for (index_t v : sc) ++hist[static_cast<std::size_t>(static_cast<std::uint64_t>(v) * nb / dim)];
  c_.allreduce(hist.data(), static_cast<int>(nb));
  auto bucket_lo = [&](std::uint64_t b) { return (b * dim + nb - 1) / nb; };
  std::deque<std::pair<std::uint64_t, std::uint64_t>> todo;  // [lo, hi) coordinates
  const std::int64_t total = std::accumulate(hist.begin(), hist.end(), std::int64_t{0});
  std::uint64_t lo = 0;
  std::int64_t cum = 0;
  int made = 0;
  for (std::uint64_t b = 0; b < nb; ++b) {
    cum += hist[static_cast<std::size_t>(b)];
    const bool cut = b + 1 == nb || (made + 1 < pieces_ &&
                                     cum * pieces_ >= total * static_cast<std::int64_t>(made + 1));
    if (cut) {
      const std::uint64_t hi = bucket_lo(b + 1);
      if (hi > lo) todo.emplace_back(lo, hi);
      lo = hi;
      ++made;
    }
  }
  return todo;
}

/// The plan of the piece [lo, hi) whose share of the split input is sp, with its memory
/// need over ranks checked against the limits: null when over them and the range was
/// bisected (its halves pushed to the front of todo); InputError when one coordinate alone
/// is over.
template <typename T>
std::unique_ptr<kernels::ContractPlan<T>> Contraction<T>::plan_piece(
    const SparseTensor<T>& sp, std::uint64_t lo, std::uint64_t hi,
    std::deque<std::pair<std::uint64_t, std::uint64_t>>& todo) {
  t_.reset();
  std::unique_ptr<kernels::ContractPlan<T>> pp;
  comm::run_collectively(c_, [&] {
    pp = split_y_ ? kernels::ops::contract_plan(be_, *X_, sp, spec_)
                  : kernels::ops::contract_plan(be_, sp, *Y_, spec_);
  });
  res_.phases.add("plan", t_.seconds());
  const kernels::ContractCount pcnt = pp->count();
  plan::ContractCounts q = pc_;
  {
    std::uint64_t v[4] = {static_cast<std::uint64_t>(pcnt.output_entries), pcnt.output_bytes,
                          pcnt.workspace_bytes, tensor_bytes<T>(sp.nnz(), sp.order())};
    c_.allreduce(v, 4, comm::ReduceOp::max);
    q.output_entries = v[0];
    q.output_bytes = v[1];
    q.workspace_bytes = v[2];
    q.split_bytes = v[3];
    q.global_output_entries = static_cast<std::uint64_t>(
        c_.allreduce_value(static_cast<std::int64_t>(pcnt.output_entries)));
  }
  const std::uint64_t need_h = plan::contract_piece_host_bytes(pc_, q, sink_kind_),
                      need_d = plan::contract_piece_device_bytes(pc_, q);
  const bool over_h = lim_.host.known() && need_h > lim_.host.bytes,
             over_d = lim_.device.known() && need_d > lim_.device.bytes;
  if (over_h || over_d) {
    pp.reset();
    if (hi - lo > 1) {  // bisect: the lower half first
      const std::uint64_t mid = lo + (hi - lo) / 2;
      todo.emplace_front(mid, hi);
      todo.emplace_front(lo, mid);
      return nullptr;
    }
    TESSERA_INPUT_CHECK(false, "contraction '"
                                   << spec_.text << "': coordinate " << lo
                                   << " of output mode 0 alone needs about "
                                   << bytes_str(static_cast<double>(over_h ? need_h : need_d))
                                   << " on the busiest rank, over the limit of "
                                   << bytes_str(static_cast<double>(over_h ? lim_.host.bytes
                                                                           : lim_.device.bytes))
                                   << " (" << (over_h ? lim_.host.source : lim_.device.source)
                                   << "); a piece cannot be smaller: run on more ranks, or "
                                      "raise the limit");
  }
  res_.memory.total_bytes = std::max<std::size_t>(res_.memory.total_bytes, need_h);
  return pp;
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
  Contraction<T> run(x, y, spec, be, c, opt, buffers, sink);
  return run.run();
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
}  // namespace tessera::algo
