#include "algo/cp_strategy.hpp"

#include <algorithm>
#include <cstdio>

#include "partition/partition.hpp"
#include "util/log.hpp"

namespace tessera::algo {

namespace {

/// Every grid of `ranks` over the modes with p_k <= dims[k], passed to f; false when there
/// are more than `limit` (none is passed then).
template <typename F>
bool each_grid(const std::vector<std::uint64_t>& dims, int ranks, std::size_t limit, F&& f) {
  std::vector<std::vector<int>> grids{{}};
  for (std::size_t k = 0; k < dims.size(); ++k) {
    std::vector<std::vector<int>> next;
    for (const auto& g : grids) {
      int used = 1;
      for (const int p : g) used *= p;
      const int left = ranks / used;
      if (k + 1 == dims.size()) {
        if (static_cast<std::uint64_t>(left) <= dims[k]) {
          next.push_back(g);
          next.back().push_back(left);
        }
        continue;
      }
      for (int p = 1; p <= left; ++p)
        if (left % p == 0 && static_cast<std::uint64_t>(p) <= dims[k]) {
          next.push_back(g);
          next.back().push_back(p);
        }
      if (next.size() > limit) return false;
    }
    grids = std::move(next);
  }
  for (const auto& g : grids) f(g);
  return true;
}

/// What plan::estimate_cp_* take for a CP run of rank R on `ranks` equal blocks.
struct ModelInputs {
  plan::Request req;
  plan::TensorFacts t;
  nnz_t block = 0;
};
ModelInputs model_inputs(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks, int R,
                         int value_bytes) {
  ModelInputs in;
  in.req.cp_rank = R;
  in.req.value_bytes = value_bytes;
  in.t.dims = dims;
  in.t.nnz = nnz;
  in.block = (nnz + static_cast<nnz_t>(ranks) - 1) / static_cast<nnz_t>(ranks);
  return in;
}

}  // namespace

std::vector<int> choose_layer_grid(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks,
                                   int R, int value_bytes, const plan::TimeModel& m) {
  std::vector<int> best = partition::choose_grid(dims, ranks);
  if (m.gpus_per_node <= 0 || m.gpus_per_node >= ranks) return best;
  const ModelInputs in = model_inputs(dims, nnz, ranks, R, value_bytes);
  double best_s = plan::estimate_cp_layer_iteration(in.req, in.t, in.block, best, m).comm_s;
  each_grid(dims, ranks, 20000, [&](const std::vector<int>& g) {
    const double s = plan::estimate_cp_layer_iteration(in.req, in.t, in.block, g, m).comm_s;
    if (s < best_s * (1 - 1e-9)) {  // strictly better: ties keep choose_grid's
      best = g;
      best_s = s;
    }
  });
  return best;
}

CommChoice choose_comm_strategy(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks, int R,
                                int value_bytes, const plan::TimeModel& m, bool dealt) {
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
  c.grid = choose_layer_grid(dims, nnz, ranks, R, value_bytes, m);
  const ModelInputs in = model_inputs(dims, nnz, ranks, R, value_bytes);
  c.allreduce_comm_s = plan::estimate_cp_iteration(in.req, in.t, in.block, ranks, m).comm_s;
  const plan::IterationEstimate lay =
      plan::estimate_cp_layer_iteration(in.req, in.t, in.block, c.grid, m);
  c.layer_comm_s = lay.comm_s;
  c.grid_cost_s = dealt ? 0.0 : lay.grid_cost_s;
  const double bw = m.link_bandwidth, a = m.collective_latency;
  const bool layer = c.layer_comm_s + c.grid_cost_s < c.allreduce_comm_s;
  c.strategy = layer ? CommStrategy::layer : CommStrategy::allreduce;
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "predicted comm per iteration: allreduce %.3g ms, layer %.3g ms + %.3g ms for "
                "the grid's imbalance%s (link %.0f GB/s, %.0f us per collective)",
                c.allreduce_comm_s * 1e3, c.layer_comm_s * 1e3, c.grid_cost_s * 1e3,
                dealt ? " (dealt: none charged)" : "", bw / 1e9, a * 1e6);
  c.why = buf;
  if (lay.nodes > 1) {
    std::snprintf(buf, sizeof buf, "; %d nodes of %d ranks, network %.3g GB/s per GPU, %.0f us",
                  lay.nodes, lay.per_node, m.inter_bandwidth / 1e9, m.inter_latency * 1e6);
    c.why += buf;
  }
  return c;
}

CommStrategy resolve_comm_strategy(const std::string& option, const plan::TensorFacts& facts,
                                   int ranks, int R, int value_bytes, CommChoice* choice,
                                   int gpus_per_node, bool dealt) {
  if (option != "auto") return parse_comm_strategy(option);
  // A text file's facts carry no dims (it is read after the choice): allreduce.
  plan::TimeModel m;
  m.gpus_per_node = gpus_per_node;
  const CommChoice c = choose_comm_strategy(facts.dims, facts.nnz, ranks, R, value_bytes, m, dealt);
  if (ranks > 1) log::info("--comm-strategy auto: " + to_string(c.strategy) + " (" + c.why + ")");
  if (choice != nullptr) *choice = c;
  return c.strategy;
}

}  // namespace tessera::algo
