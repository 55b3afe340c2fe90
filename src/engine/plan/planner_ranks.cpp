// Plans for N ranks (tessera plan --nprocs): each rank's share of the nonzeros, the plan of
// the largest block per rank count, and the CP iteration model (planner.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "plan/planner.hpp"

namespace tessera::plan {
namespace {
std::string human_b(std::uint64_t b) {
  return human_bytes(static_cast<double>(b));
}
}  // namespace

// ---- plans for N ranks (tessera plan --nprocs) ----

namespace {

/// The kernels' bytes floor of N MTTKRPs (cp) on a block of n nonzeros whose modes span
/// `rows[k]` rows: mode k reads the sorted copy of the block (N uint32 and a value per
/// nonzero), each row of the other modes the block touches (at most min(rows_j, n)) once,
/// and writes its output (rows_k x out_cols values).
double kernel_bytes(const std::vector<double>& rows, double n, double v, double R,
                    const std::vector<double>& out_cols) {
  const std::size_t N = rows.size();
  const double copy = n * (4.0 * static_cast<double>(N) + v);
  double total = 0;
  for (std::size_t k = 0; k < N; ++k) {
    double b = copy + std::min(rows[k], out_cols.empty() ? rows[k] : n) * v *
                          (out_cols.empty() ? R : out_cols[k]);
    for (std::size_t j = 0; j < N; ++j)
      if (j != k) b += std::min(rows[j], n) * R * v;
    total += b;
  }
  return total;
}

std::vector<double> dims_of(const TensorFacts& t) {
  std::vector<double> d;
  for (const auto x : t.dims) d.push_back(static_cast<double>(x));
  return d;
}

/// One rank's dense work (TimeModel::dense_s): the fixed part, plus the rest in proportion to
/// the factor rows the rank solves (solved[k] of dims[k]; all of them on one rank).
double dense_seconds(const TimeModel& m, const std::vector<double>& dims,
                     const std::vector<double>& solved) {
  const double fixed = std::min(m.dense_fixed_s, m.dense_s);
  double all = 0, mine = 0;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    all += dims[k];
    mine += solved[k];
  }
  return fixed + (all > 0 ? (m.dense_s - fixed) * mine / all : 0);
}

void finish(IterationEstimate& e, const TimeModel& model, bool several) {
  const TimeModel m = rank_model(model, e.per_node);
  e.floor_s = m.bandwidth > 0 ? e.mttkrp_bytes / m.bandwidth : 0;
  e.kernel_s = e.floor_s * m.kernel_ratio;
  e.comm_s = several ? e.link.seconds(m) + e.host_calls * m.host_wait : 0;
  e.seconds = e.kernel_s + e.comm_s + e.grid_cost_s + e.dense_s;
}

}  // namespace

TimeModel rank_model(const TimeModel& m, int per_node) {
  TimeModel r = m;
  if (m.shared_memory && per_node > 1) {
    // A CPU node's memory and its network port are shared by its ranks.
    r.bandwidth /= per_node;
    r.link_bandwidth /= per_node;
    r.inter_bandwidth /= per_node;
  }
  return r;
}

IterationEstimate estimate_cp_iteration(const Request& req, const TensorFacts& t, nnz_t block_nnz,
                                        int ranks, const TimeModel& m) {
  IterationEstimate e;
  const double n = static_cast<double>(std::max<nnz_t>(block_nnz, 0));
  const double v = req.value_bytes, R = std::max(req.cp_rank, 1);
  const std::vector<double> d = dims_of(t);
  // The output is whole under the allreduce strategy: I_k x R.
  e.mttkrp_bytes = kernel_bytes(d, n, v, R, {});
  const Group g = job_group(ranks, m.gpus_per_node);
  e.nodes = g.nodes;
  e.per_node = g.per_node;
  // A mode over the engine's whole-rows bound is solved split over the ranks (the same
  // bytes reduce-scattered and all-gathered as all-reduced), a smaller one whole on each.
  std::vector<double> solved(d.size());
  for (std::size_t k = 0; k < d.size(); ++k) {
    const double Ik = d[k];
    e.comm_bytes += Ik * R * v;
    e.link += allreduce_cost(Ik * R * v, g);
    const bool split = ranks > 1 && Ik * R * v > m.whole_rows_max_bytes;
    solved[k] = split ? std::ceil(Ik / ranks) : Ik;
  }
  e.dense_s = dense_seconds(m, d, solved);
  finish(e, m, ranks > 1);
  return e;
}

IterationEstimate estimate_cp_layer_iteration(const Request& req, const TensorFacts& t,
                                              nnz_t block_nnz, const std::vector<int>& grid,
                                              const TimeModel& m) {
  IterationEstimate e;
  e.strategy = "layer";
  e.grid = grid;
  int P = 1;
  for (const int p : grid) P *= std::max(p, 1);
  const double n = static_cast<double>(std::max<nnz_t>(block_nnz, 0));
  const double v = req.value_bytes, R = std::max(req.cp_rank, 1);
  const std::vector<double> d = dims_of(t);
  std::vector<double> chunk(d.size());
  for (std::size_t k = 0; k < d.size(); ++k) {
    const double p = std::max(grid.size() > k ? grid[k] : 1, 1);
    chunk[k] = std::ceil(d[k] / p);
  }
  // The block touches one chunk of each mode; its output is the chunk's rows.
  e.mttkrp_bytes = kernel_bytes(chunk, n, v, R, {});
  const Group g = job_group(P, m.gpus_per_node);
  e.nodes = g.nodes;
  e.per_node = g.per_node;
  for (std::size_t k = 0; k < d.size(); ++k) {
    const double bytes = chunk[k] * R * v;
    e.comm_bytes += bytes;
    const Group layer = layer_group(grid, static_cast<int>(k), m.gpus_per_node);
    if (layer.size() > 1) {
      // The chunk's rows reduce-scattered and all-gathered inside the layer, the column
      // norms and the Gram (with the fit's dots) summed over all ranks.
      e.link += reduce_scatter_cost(bytes, layer);
      e.link += allgather_cost(bytes, layer);
      e.link += small_allreduce_cost(g);
    }
    e.link += small_allreduce_cost(g);  // a layer of one rank sums only its Gram
  }
  const double rank_bw = rank_model(m, g.per_node).bandwidth;
  const double all_floor =
      rank_bw > 0 ? kernel_bytes(d, n, v, R, {}) / rank_bw : 0;  // the allreduce kernels
  e.grid_cost_s = P > 1 ? kGridCostOverKernelFloor * all_floor : 0;
  // Every mode is split: a rank solves its 1 / (P / p_n) of its layer's chunk.
  std::vector<double> solved(d.size());
  for (std::size_t k = 0; k < d.size(); ++k) solved[k] = std::ceil(d[k] / P);
  e.dense_s = dense_seconds(m, d, solved);
  finish(e, m, P > 1);
  return e;
}

IterationEstimate estimate_tucker_iteration(const Request& req, const TensorFacts& t,
                                            nnz_t block_nnz, int ranks, const TimeModel& m) {
  IterationEstimate e;
  e.strategy = "tucker";
  const double n = static_cast<double>(std::max<nnz_t>(block_nnz, 0));
  const double v = req.value_bytes;
  const std::vector<double> d = dims_of(t);
  const std::size_t N = d.size();
  std::vector<double> r(N, 1), cols(N, 1);
  for (std::size_t k = 0; k < N; ++k) r[k] = req.tucker_rank(k);
  double core = 1;
  for (std::size_t k = 0; k < N; ++k) {
    core *= r[k];
    for (std::size_t j = 0; j < N; ++j)
      if (j != k) cols[k] *= r[j];
  }
  // The factor rows read are R_j wide; price them with the mean rank (exact when equal).
  double rmean = 0;
  for (const double x : r) rmean += x / static_cast<double>(N);
  // TTMc output: the rows the block touches (min(I_k, n)) x the product of the other ranks.
  e.mttkrp_bytes = kernel_bytes(d, n, v, rmean, cols);
  const Group g = job_group(ranks, m.gpus_per_node);
  e.nodes = g.nodes;
  e.per_node = g.per_node;
  const double P = g.size();
  // Several nodes of 2+ ranks: the rows go through a relay on their node first
  // (--comm-hierarchy auto, algo/tucker_plan.hpp), which sums the node's copies of a row:
  // a relay sends the node's distinct rows (min(I_k, G n)) divided over its G ranks.
  const bool relay = g.nodes > 1 && g.per_node > 1;
  const double G = g.per_node;
  // Per mode the rows all-reduced whole or summed on their owners, by the run's rule
  // (--comm-strategy; the collectives run in a device stream on cuda, with NCCL).
  const TuckerRowsRule rule =
      tucker_rows_rule(req.tucker_rows, req.tucker_svd, relay, req.backend == Backend::cuda);
  bool last_whole = false;
  for (std::size_t k = 0; k < N; ++k) {
    const double whole = d[k] * cols[k] * v;
    last_whole = P > 1 && rule.allreduce(whole);
    if (P > 1) e.rows += std::string(k ? "," : "") + (last_whole ? "allreduce" : "owners");
    if (last_whole) {
      // The whole Y_(n) all-reduced in place; every rank then runs the dense stage on all
      // rows and holds the whole factor (no all-gather). A block that cannot touch every
      // row (fewer nonzeros than rows) first adds its rows at their labels, after one host
      // wait for the row map.
      e.comm_bytes += whole;
      e.link += allreduce_cost(whole, g);
      if (n < d[k]) e.host_calls += 1;
      continue;
    }
    const double rows = std::min(d[k], n) * cols[k] * v;
    e.comm_bytes += rows;
    if (relay) {
      LinkTime in_node;
      in_node.intra_bytes = (G - 1) / G * rows;  // to the relays of the node
      in_node.intra_steps = 1;
      e.link += in_node;
      const double relayed = std::min(d[k], G * n) * cols[k] * v / G;
      e.link += alltoall_cost((P - 1) / P * relayed, g);  // relayed sums to their owners
    } else {
      e.link += alltoall_cost((P - 1) / P * rows, g);  // rows to their owners
    }
    e.link += allgather_cost(d[k] * r[k] * v, g);  // the new factor to every rank
    // The host waits for the row exchange, the Gram's sum, the CholeskyQR Gram's sum and
    // the factor's all-gather (as `tessera tucker`'s comm_split counts them).
    e.host_calls += 4;
  }
  if (P > 1) e.rows_why = rule.why;
  if (last_whole) {
    e.link += small_allreduce_cost(g);  // ||G||^2 agreed over the ranks (every rank has G)
  } else {
    e.link += allreduce_cost(core * v, g);  // the core, once
  }
  e.host_calls += 1;      // either of them
  e.dense_s = m.dense_s;  // the eigen-solves run on every rank
  finish(e, m, ranks > 1);
  return e;
}

SptcEstimate estimate_sptc(double x_nnz, int x_order, double y_nnz, int y_order, double products,
                           int value_bytes, double products_per_s, int ranks, const TimeModel& m) {
  SptcEstimate e;
  const Group g = job_group(ranks, m.gpus_per_node);
  e.nodes = g.nodes;
  e.per_node = g.per_node;
  const double P = g.size();
  const double xb = 4.0 * x_order + value_bytes, yb = 4.0 * y_order + value_bytes;
  // The larger input is the row side (partitioned), the smaller is replicated.
  const double rows = std::max(x_nnz * xb, y_nnz * yb), cols = std::min(x_nnz * xb, y_nnz * yb);
  e.route_bytes = (P - 1) / P * rows / P;
  e.replicate_bytes = cols;  // the whole column side, gathered from every rank's share
  if (P > 1) {
    e.link += alltoall_cost(e.route_bytes, g);
    e.link += allgather_cost(e.replicate_bytes, g);
  }
  e.kernel_s = products_per_s > 0 ? products / P / products_per_s : 0;
  e.comm_s = e.link.seconds(rank_model(m, g.per_node));
  e.seconds = e.kernel_s + e.comm_s;
  return e;
}

std::vector<nnz_t> equal_split(nnz_t nnz, int ranks) {
  const int P = std::max(ranks, 1);
  std::vector<nnz_t> out(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    const auto a = static_cast<nnz_t>(static_cast<__int128>(nnz) * r / P);
    const auto b = static_cast<nnz_t>(static_cast<__int128>(nnz) * (r + 1) / P);
    out[static_cast<std::size_t>(r)] = b - a;
  }
  return out;
}

std::vector<RanksPlan> plan_for_ranks(const Request& req, const TensorFacts& t,
                                      const std::vector<int>& counts,
                                      const std::function<RankBlocks(int)>& blocks,
                                      const std::function<Limits(int)>& limits, const TimeModel& m,
                                      const std::function<std::vector<int>(int)>& grid_of) {
  std::vector<RanksPlan> out;
  for (const int P : counts) {
    RanksPlan rp;
    rp.ranks = P;
    RankBlocks b = blocks(P);
    rp.block_nnz = std::move(b.nnz);
    rp.partition = std::move(b.how);
    Request r = req;
    r.ranks = P;
    TensorFacts f = t;
    nnz_t largest = 0;
    for (const nnz_t n : rp.block_nnz) largest = std::max(largest, n);
    f.max_block_nnz = std::max<nnz_t>(largest, 1);
    const Limits lim = limits(P);
    rp.plan = make_plan(r, f, lim);
    // Every rank runs the tier planned for the largest block; its own bytes follow its own
    // block (blocks of the same size share one plan).
    if (rp.plan.fits) r.force_tier = rp.plan.tier;
    std::map<nnz_t, std::pair<std::uint64_t, std::uint64_t>> seen;
    for (const nnz_t n : rp.block_nnz) {
      auto it = seen.find(n);
      if (it == seen.end()) {
        f.max_block_nnz = std::max<nnz_t>(n, 1);
        const Plan q = make_plan(r, f, lim);
        it = seen.emplace(n, std::make_pair(q.host_peak, q.device_peak)).first;
      }
      rp.host_peak.push_back(it->second.first);
      rp.device_peak.push_back(it->second.second);
    }
    if (req.workload == Workload::cp) {
      rp.has_estimate = true;
      rp.estimate = estimate_cp_iteration(r, t, largest, P, m);
      if (grid_of && P > 1) {
        const std::vector<int> grid = grid_of(P);
        if (!grid.empty()) {
          rp.has_layer = true;
          // The grid's blocks: the equal share (the grid partition balances nonzeros).
          const nnz_t share = (t.nnz + static_cast<nnz_t>(P) - 1) / static_cast<nnz_t>(P);
          rp.layer = estimate_cp_layer_iteration(r, t, share, grid, m);
        }
      }
    } else if (req.workload == Workload::tucker) {
      rp.has_estimate = true;
      rp.estimate = estimate_tucker_iteration(r, t, largest, P, m);
    }
    out.push_back(std::move(rp));
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (!out[k].has_estimate || out[k].estimate.seconds <= 0) continue;
    out[k].speedup = out.front().estimate.seconds / out[k].estimate.seconds;
    if (k > 0 && out[k].estimate.seconds > 0.9 * out[k - 1].estimate.seconds) out[k].no_gain = true;
  }
  return out;
}

nlohmann::json RanksPlan::to_json() const {
  nlohmann::json j = {{"ranks", ranks},
                      {"partition", partition},
                      {"fits", plan.fits},
                      {"tier", plan.tier},
                      {"tier_name", plan.tier_name},
                      {"block_nnz", block_nnz},
                      {"planned_peak_host_bytes", host_peak},
                      {"planned_peak_device_bytes", device_peak},
                      {"plan", plan.to_json()}};
  auto est = [&](const IterationEstimate& e) {
    nlohmann::json j = nlohmann::json{
        {"model", e.strategy == "tucker" ? "tucker-hooi iteration, tier 1"
                                         : "cp-als iteration, " + e.strategy + " strategy, tier 1"},
        {"nodes", e.nodes},
        {"ranks_per_node", e.per_node},
        {"grid", e.grid},
        {"mttkrp_bytes_per_rank", e.mttkrp_bytes},
        {"kernel_floor_seconds", e.floor_s},
        {"mttkrp_seconds", e.kernel_s},
        {"allreduce_bytes", e.comm_bytes},
        {"nvlink_bytes_per_rank", e.link.intra_bytes},
        {"network_bytes_per_rank", e.link.inter_bytes},
        {"nvlink_steps", e.link.intra_steps},
        {"network_steps", e.link.inter_steps},
        {"host_waited_collectives", e.host_calls},
        {"comm_seconds", e.comm_s},
        {"grid_cost_seconds", e.grid_cost_s},
        {"dense_seconds", e.dense_s},
        {"comm_share", e.comm_share()},
        {"seconds_per_iteration", e.seconds}};
    if (!e.rows.empty()) j["ttmc_rows_strategy"] = {{"modes", e.rows}, {"why", e.rows_why}};
    return j;
  };
  if (has_estimate) {
    j["predicted"] = est(estimate);
    j["predicted"]["speedup"] = speedup;
    j["predicted"]["more_ranks_help"] = !no_gain;
  }
  if (has_layer) j["predicted_layer"] = est(layer);
  return j;
}

namespace {

std::string ms_str(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g ms", 1e3 * s);
  return b;
}

std::string grid_str(const std::vector<int>& g) {
  std::string s;
  for (const int p : g) {
    if (!s.empty()) s += 'x';
    s += std::to_string(p);
  }
  return s;
}

/// The time model's table per strategy and its inputs, so the arithmetic can be checked.
std::string describe_time_model(const std::vector<RanksPlan>& plans, const TimeModel& m) {
  std::ostringstream os;
  char line[640];
  const bool tucker = plans.front().estimate.strategy == "tucker";
  const bool layer =
      std::any_of(plans.begin(), plans.end(), [](const RanksPlan& p) { return p.has_layer; });
  os << "  predicted iteration of the rank with the largest block (kernel + comm"
     << (layer ? " + grid imbalance" : "") << " + dense):\n";
  std::snprintf(line, sizeof(line), "  %6s  %11s  %11s  %11s  %11s  %11s  %6s", "ranks",
                "nodes x gpu", "kernel", tucker ? "tucker comm" : "allreduce", "NVLink/rank",
                "net/rank", "share");
  os << line << "  " << (tucker ? "iteration" : "iteration");
  if (layer) os << "    layer: grid  comm  grid cost  iteration  share";
  os << "\n";
  for (const auto& rp : plans) {
    if (!rp.has_estimate) continue;
    const auto& e = rp.estimate;
    const std::string where = std::to_string(e.nodes) + " x " + std::to_string(e.per_node);
    std::snprintf(line, sizeof(line), "  %6d  %11s  %11s  %11s  %11s  %11s  %5.1f%%  %9s", rp.ranks,
                  where.c_str(), ms_str(e.kernel_s).c_str(), ms_str(e.comm_s).c_str(),
                  human_bytes(e.link.intra_bytes).c_str(), human_bytes(e.link.inter_bytes).c_str(),
                  100 * e.comm_share(), ms_str(e.seconds).c_str());
    os << line;
    if (rp.has_layer) {
      const auto& l = rp.layer;
      std::snprintf(line, sizeof(line), "    %8s %9s %10s %10s %5.1f%%", grid_str(l.grid).c_str(),
                    ms_str(l.comm_s).c_str(), ms_str(l.grid_cost_s).c_str(),
                    ms_str(l.seconds).c_str(), 100 * l.comm_share());
      os << line;
    }
    os << "\n";
  }
  std::snprintf(
      line, sizeof(line),
      "  model: kernel = floor bytes / %.0f GB/s (--bandwidth) x %.3g (--kernel-ratio, the "
      "measured kernel time over its floor);\n"
      "    each collective = alpha per step + its bytes over its link: inside a node "
      "alpha %.3g us (--collective-latency),\n"
      "    beta %.0f GB/s per direction (--link-bandwidth); between nodes alpha %.3g us "
      "(--inter-latency), beta %.3g GB/s per GPU\n"
      "    (--link-gbps); %s GPUs per node (--gpus-per-node); dense work %.3g ms per "
      "iteration on one rank (--dense-ms)\n",
      m.bandwidth / 1e9, m.kernel_ratio, m.collective_latency * 1e6, m.link_bandwidth / 1e9,
      m.inter_latency * 1e6, m.inter_bandwidth / 1e9,
      m.gpus_per_node > 0 ? std::to_string(m.gpus_per_node).c_str() : "all", 1e3 * m.dense_s);
  os << line;
  if (!tucker) {
    std::snprintf(line, sizeof(line),
                  "    of which %.3g ms on every rank (--dense-fixed-ms), the rest in proportion "
                  "to the factor rows a rank solves:\n    a mode over %s of rows is solved split "
                  "over the ranks (always with the layer strategy), a smaller one whole\n",
                  1e3 * std::min(m.dense_fixed_s, m.dense_s),
                  human_bytes(m.whole_rows_max_bytes).c_str());
    os << line;
  }
  if (m.shared_memory)
    os << "  host backend: --bandwidth and --link-bandwidth are the node's memory and --link-gbps "
          "its network, which its ranks share\n    (K ranks on a node get 1/K each; "
          "--ranks-per-node, else --gpus-per-node: ranks per node), so more ranks on one "
          "node\n    add no bandwidth; below, NVLink means the node's memory and GPUs its "
          "ranks\n";

  if (tucker) {
    os << "  tucker, per mode by --comm-strategy (auto: allreduce where the collectives run in "
          "a device stream, --svd gram,\n    one node or one GPU per node, and the whole Y_(n) "
          "is at most "
       << human_bytes(kTuckerRowsAllreduceMaxBytes)
       << "; else owners):\n"
          "    allreduce: the whole Y_(n) (I_n x the product of the other ranks) all-reduced "
          "in place, one ring; a block with\n    fewer nonzeros than I_n first waits once "
          "for its row map; ||G||^2 agreed once per iteration;\n"
          "    owners: the TTMc's rows (min(I_n, nnz) x the product of the other ranks) "
          "to their owners by one alltoallv\n    ((P-1)/P of them leave; (G-1)/(P-1) of those "
          "over NVLink, the rest over the network); on several nodes of 2+ GPUs first to a\n"
          "    relay on their node, which sends the node's distinct rows (min(I_n, G nnz)) on, "
          "1/G from each GPU;\n    the new factor (I_n x R_n) all-gathered (inside the node, "
          "then across), the core all-reduced once;\n    the host waits for each owners "
          "collective and the dense stage's sums (4 per mode, and 1 for the core): "
       << 1e6 * m.host_wait
       << " us each\n    beyond alpha (--host-wait-us); the dense stage (eigen-solves) is "
          "--dense-ms on every rank\n";
  } else {
    os << "  allreduce: per mode one all-reduce of S_n = I_n x R x value bytes; one node: a ring, "
          "2 (G-1)/G S_n over NVLink, one alpha;\n    several nodes: reduce-scatter in the node "
          "((G-1)/G S_n), a ring across the K nodes of its 1/G share (2 (K-1)/K S_n / G over the\n"
          "    network), all-gather in the node ((G-1)/G S_n): 2 NVLink alphas and 1 network "
          "alpha per mode\n";
    if (layer)
      os << "  layer: per mode the chunk's rows C_n = ceil(I_n / p_n) x R x value bytes "
            "reduce-scattered and all-gathered inside the layer\n    of P / p_n ranks (inside "
            "each node, then across the nodes it spans), plus 2 small all-reduces over all ranks;"
            "\n    the grid's imbalance costs "
         << kGridCostOverKernelFloor
         << " x the allreduce kernels' bytes floor (slowest rank 1.2x the mean, kernels at 5x "
            "their floor)\n";
  }
  for (const auto& rp : plans) {
    if (!rp.has_estimate || rp.ranks <= 1) continue;
    const auto& e = rp.estimate;
    std::snprintf(line, sizeof(line),
                  "  %d ranks: %s combined rows %s per iteration: NVLink %s and network %s per "
                  "rank, %g + %g alphas -> %s",
                  rp.ranks, tucker ? "tucker" : "allreduce", human_bytes(e.comm_bytes).c_str(),
                  human_bytes(e.link.intra_bytes).c_str(), human_bytes(e.link.inter_bytes).c_str(),
                  e.link.intra_steps, e.link.inter_steps, ms_str(e.comm_s).c_str());
    os << line;
    if (!e.rows.empty()) os << " (TTMc rows: " << e.rows << ", " << e.rows_why << ")";
    os << "\n";
    if (rp.has_layer) {
      const auto& l = rp.layer;
      std::snprintf(line, sizeof(line),
                    "    layer %s: chunk rows %s: NVLink %s and network %s per rank, %g + %g "
                    "alphas -> %s",
                    grid_str(l.grid).c_str(), human_bytes(l.comm_bytes).c_str(),
                    human_bytes(l.link.intra_bytes).c_str(),
                    human_bytes(l.link.inter_bytes).c_str(), l.link.intra_steps, l.link.inter_steps,
                    ms_str(l.comm_s).c_str());
      os << line << "\n";
    }
  }
  // Where communication dominates: the first count whose comm is over its kernel time.
  auto crossover = [&](bool lay) {
    for (const auto& rp : plans) {
      if (lay && !rp.has_layer) continue;
      const auto& e = lay ? rp.layer : rp.estimate;
      if (rp.has_estimate && e.comm_s > e.kernel_s) {
        std::snprintf(line, sizeof(line),
                      "  %s: communication dominates from %d ranks (%d nodes x %d): comm %s > "
                      "kernel %s\n",
                      lay ? "layer" : (tucker ? "tucker" : "allreduce"), rp.ranks, e.nodes,
                      e.per_node, ms_str(e.comm_s).c_str(), ms_str(e.kernel_s).c_str());
        return std::string(line);
      }
    }
    return std::string("  ") + (lay ? "layer" : (tucker ? "tucker" : "allreduce")) +
           ": the kernels stay above communication at every count listed\n";
  };
  os << crossover(false);
  if (layer) os << crossover(true);
  os << "  not counted: the copies or reads of streamed tiers, waiting for slower ranks beyond "
        "the largest block"
     << (tucker ? "" : ", the dense work unless --dense-ms") << "\n";
  return os.str();
}

}  // namespace

std::string describe_ranks(const std::vector<RanksPlan>& plans, const TimeModel& m) {
  std::ostringstream os;
  if (plans.empty()) return {};
  const bool cuda = plans.front().plan.backend == Backend::cuda;
  const bool timed = plans.front().has_estimate;
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4g ms", 1e3 * s);
    return std::string(b);
  };
  os << "plans per rank count (each rank's block, the tier planned for the largest, the planned "
        "peaks per rank)\n";
  char line[512];
  std::snprintf(line, sizeof(line), "  %6s  %-18s  %14s  %12s  %12s", "ranks", "tier",
                "largest block", "host/rank", cuda ? "device/rank" : "");
  os << line;
  if (timed) {
    const bool tucker = plans.front().estimate.strategy == "tucker";
    std::snprintf(line, sizeof(line), "  %11s  %11s  %11s  %7s", tucker ? "TTMcs" : "MTTKRPs",
                  tucker ? "comm" : "all-reduce", "iteration", "speedup");
    os << line;
  }
  os << "\n";
  for (const auto& rp : plans) {
    const std::uint64_t h = rp.host_peak.empty()
                                ? rp.plan.host_peak
                                : *std::max_element(rp.host_peak.begin(), rp.host_peak.end());
    const std::uint64_t d = rp.device_peak.empty()
                                ? rp.plan.device_peak
                                : *std::max_element(rp.device_peak.begin(), rp.device_peak.end());
    const std::string tier =
        rp.plan.fits ? std::to_string(rp.plan.tier) + " (" + rp.plan.tier_name + ")" : "REFUSED";
    std::snprintf(line, sizeof(line), "  %6d  %-18s  %14lld  %12s  %12s", rp.ranks, tier.c_str(),
                  static_cast<long long>(rp.plan.block_nnz), human_b(h).c_str(),
                  cuda ? human_b(d).c_str() : "");
    os << line;
    if (timed) {
      std::snprintf(line, sizeof(line), "  %11s  %11s  %11s  %6.2fx",
                    ms(rp.estimate.kernel_s).c_str(), ms(rp.estimate.comm_s).c_str(),
                    ms(rp.estimate.seconds).c_str(), rp.speedup);
      os << line;
    }
    os << "\n";
  }
  os << "  nonzeros per rank:\n";
  for (const auto& rp : plans) {
    os << "    " << rp.ranks << (rp.ranks == 1 ? " rank" : " ranks") << " (" << rp.partition
       << "):";
    // Runs of ranks with the same planned peaks, one line each (their nonzeros as a range),
    // at most 8 lines.
    std::size_t lines = 0, r = 0;
    const std::size_t P = rp.block_nnz.size();
    auto peaks = [&](std::size_t k) {
      return std::make_pair(k < rp.host_peak.size() ? rp.host_peak[k] : 0,
                            k < rp.device_peak.size() ? rp.device_peak[k] : 0);
    };
    while (r < P && lines < 8) {
      std::size_t e = r + 1;
      nnz_t lo = rp.block_nnz[r], hi = rp.block_nnz[r];
      while (e < P && peaks(e) == peaks(r)) {
        lo = std::min(lo, rp.block_nnz[e]);
        hi = std::max(hi, rp.block_nnz[e]);
        ++e;
      }
      os << "\n      ";
      if (e - r > 1)
        os << "ranks " << r << "-" << (e - 1);
      else
        os << "rank " << r;
      os << ": " << lo;
      if (hi > lo) os << "-" << hi;
      os << " nonzeros, host " << human_b(peaks(r).first);
      if (cuda) os << ", device " << human_b(peaks(r).second);
      ++lines;
      r = e;
    }
    if (r < P) os << "\n      ... (the run record lists every rank)";
    os << "\n";
  }
  for (const auto& rp : plans)
    if (!rp.plan.fits) os << "  " << rp.ranks << " ranks REFUSED: " << rp.plan.refusal << "\n";
  if (timed) os << describe_time_model(plans, m);
  if (timed) {
    for (std::size_t k = 1; k < plans.size(); ++k) {
      if (!plans[k].no_gain) continue;
      std::snprintf(line, sizeof(line),
                    "  more ranks will not help beyond %d: %d ranks are predicted at %s per "
                    "iteration against %s on %d, not 10%% faster",
                    plans[k - 1].ranks, plans[k].ranks, ms(plans[k].estimate.seconds).c_str(),
                    ms(plans[k - 1].estimate.seconds).c_str(), plans[k - 1].ranks);
      os << line << "\n";
      break;
    }
  }
  return os.str();
}

std::string describe_sptc(const SptcFacts& f, const std::vector<int>& counts, const TimeModel& m,
                          nlohmann::json* out_json) {
  std::ostringstream os;
  char line[512];
  os << "predicted contraction (routed on the device; the rank with the mean share):\n";
  std::snprintf(line, sizeof(line), "  %6s  %11s  %11s  %11s  %11s  %11s  %11s  %6s\n", "ranks",
                "nodes x gpu", "products", "exchange", "NVLink/rank", "net/rank", "total", "share");
  os << line;
  if (out_json) *out_json = nlohmann::json::array();
  for (const int P : counts) {
    const SptcEstimate e = estimate_sptc(f.x_nnz, f.x_order, f.y_nnz, f.y_order, f.products,
                                         f.value_bytes, f.products_per_s, P, m);
    const std::string where = std::to_string(e.nodes) + " x " + std::to_string(e.per_node);
    std::snprintf(line, sizeof(line), "  %6d  %11s  %11s  %11s  %11s  %11s  %11s  %5.1f%%\n", P,
                  where.c_str(), ms_str(e.kernel_s).c_str(), ms_str(e.comm_s).c_str(),
                  human_bytes(e.link.intra_bytes).c_str(), human_bytes(e.link.inter_bytes).c_str(),
                  ms_str(e.seconds).c_str(), e.seconds > 0 ? 100 * e.comm_s / e.seconds : 0.0);
    os << line;
    if (out_json)
      out_json->push_back({{"ranks", P},
                           {"nodes", e.nodes},
                           {"ranks_per_node", e.per_node},
                           {"route_bytes_per_rank", e.route_bytes},
                           {"replicate_bytes", e.replicate_bytes},
                           {"nvlink_bytes_per_rank", e.link.intra_bytes},
                           {"network_bytes_per_rank", e.link.inter_bytes},
                           {"kernel_seconds", e.kernel_s},
                           {"comm_seconds", e.comm_s},
                           {"seconds", e.seconds}});
  }
  std::snprintf(line, sizeof(line),
                "  model: the products (%.4g) divided over the ranks at %.4g per second "
                "(--products-rate, one GPU's);\n    the larger input's nonzeros (%.4g x (4 x %d + "
                "%d) bytes) routed by one alltoallv ((P-1)/P of each rank's share leaves),\n"
                "    the smaller (%.4g x (4 x %d + %d) bytes) gathered whole by every rank; no "
                "output routing;\n    NVLink alpha %.3g us, beta %.0f GB/s; network alpha %.3g us, "
                "beta %.3g GB/s per GPU; %s GPUs per node\n",
                f.products, f.products_per_s, std::max(f.x_nnz, f.y_nnz),
                f.x_nnz >= f.y_nnz ? f.x_order : f.y_order, f.value_bytes,
                std::min(f.x_nnz, f.y_nnz), f.x_nnz >= f.y_nnz ? f.y_order : f.x_order,
                f.value_bytes, m.collective_latency * 1e6, m.link_bandwidth / 1e9,
                m.inter_latency * 1e6, m.inter_bandwidth / 1e9,
                m.gpus_per_node > 0 ? std::to_string(m.gpus_per_node).c_str() : "all");
  os << line;
  os << "  not counted: uploads and downloads between host and GPU, hashing and partitioning, "
        "the output's assembly\n";
  return os.str();
}

}  // namespace tessera::plan
