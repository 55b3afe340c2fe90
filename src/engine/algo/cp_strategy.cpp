#include "algo/cp_strategy.hpp"

#include <algorithm>
#include <cstdio>

#include "partition/partition.hpp"
#include "util/log.hpp"

namespace tessera::algo {

CommChoice choose_comm_strategy(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks, int R,
                                int value_bytes, const plan::TimeModel& m) {
  CommChoice c;
  if (ranks <= 1) {
    c.why = "one rank: no communication";
    return c;
  }
  if (dims.empty()) {
    c.why =
        "the dims of a text file are known only after reading it (a store's header has "
        "them: tessera convert)";
    return c;
  }
  // The same model as tessera plan --nprocs/--nodes (plan::estimate_cp_*): the collectives
  // priced per link kind by plan/comm_model.hpp, the grid's imbalance by the kernels' floor.
  c.grid = partition::choose_grid(dims, ranks);
  plan::Request req;
  req.cp_rank = R;
  req.value_bytes = value_bytes;
  plan::TensorFacts t;
  t.dims = dims;
  t.nnz = nnz;
  const nnz_t block = (nnz + static_cast<nnz_t>(ranks) - 1) / static_cast<nnz_t>(ranks);
  c.allreduce_comm_s = plan::estimate_cp_iteration(req, t, block, ranks, m).comm_s;
  const plan::IterationEstimate lay = plan::estimate_cp_layer_iteration(req, t, block, c.grid, m);
  c.layer_comm_s = lay.comm_s;
  c.grid_cost_s = lay.grid_cost_s;
  const double bw = m.link_bandwidth, a = m.collective_latency;
  const bool layer = c.layer_comm_s + c.grid_cost_s < c.allreduce_comm_s;
  c.strategy = layer ? CommStrategy::layer : CommStrategy::allreduce;
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "predicted comm per iteration: allreduce %.3g ms, layer %.3g ms + %.3g ms for "
                "the grid's imbalance (link %.0f GB/s, %.0f us per collective)",
                c.allreduce_comm_s * 1e3, c.layer_comm_s * 1e3, c.grid_cost_s * 1e3, bw / 1e9,
                a * 1e6);
  c.why = buf;
  if (lay.nodes > 1) {
    std::snprintf(buf, sizeof buf, "; %d nodes of %d ranks, network %.3g GB/s per GPU, %.0f us",
                  lay.nodes, lay.per_node, m.inter_bandwidth / 1e9, m.inter_latency * 1e6);
    c.why += buf;
  }
  return c;
}

CommStrategy resolve_comm_strategy(const std::string& option, const plan::TensorFacts& facts,
                                   int ranks, int R, int value_bytes, CommChoice* choice) {
  if (option != "auto") return parse_comm_strategy(option);
  // A text file's facts carry no dims (it is read after the choice): allreduce.
  const CommChoice c = choose_comm_strategy(facts.dims, facts.nnz, ranks, R, value_bytes);
  if (ranks > 1) log::info("--comm-strategy auto: " + to_string(c.strategy) + " (" + c.why + ")");
  if (choice != nullptr) *choice = c;
  return c.strategy;
}

}  // namespace tessera::algo
