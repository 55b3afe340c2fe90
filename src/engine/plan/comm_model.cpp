#include "plan/comm_model.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "plan/planner.hpp"

namespace tessera::plan {

LinkTime& LinkTime::operator+=(const LinkTime& o) {
  intra_bytes += o.intra_bytes;
  inter_bytes += o.inter_bytes;
  intra_steps += o.intra_steps;
  inter_steps += o.inter_steps;
  return *this;
}

double LinkTime::seconds(const TimeModel& m) const {
  double s = intra_steps * m.collective_latency + inter_steps * m.inter_latency;
  if (m.link_bandwidth > 0) s += intra_bytes / m.link_bandwidth;
  if (m.inter_bandwidth > 0) s += inter_bytes / m.inter_bandwidth;
  return s;
}

Group job_group(int ranks, int gpus_per_node) {
  const int P = std::max(ranks, 1);
  if (gpus_per_node <= 0 || gpus_per_node >= P) return {P, 1};
  return {gpus_per_node, (P + gpus_per_node - 1) / gpus_per_node};
}

LinkTime reduce_scatter_cost(double bytes, const Group& g) {
  LinkTime t;
  const double G = g.per_node, K = g.nodes;
  if (g.size() <= 1) return t;
  if (G > 1) {
    t.intra_bytes = (G - 1) / G * bytes;
    t.intra_steps = 1;
  }
  if (K > 1) {
    t.inter_bytes = (K - 1) / K * bytes / G;
    t.inter_steps = 1;
  }
  return t;
}

LinkTime allgather_cost(double bytes, const Group& g) {
  return reduce_scatter_cost(bytes, g);
}

LinkTime allreduce_cost(double bytes, const Group& g) {
  LinkTime t;
  const double G = g.per_node, K = g.nodes;
  if (g.size() <= 1) return t;
  if (K <= 1) {  // one ring inside the node
    t.intra_bytes = 2 * (G - 1) / G * bytes;
    t.intra_steps = 1;
    return t;
  }
  if (G > 1) {  // reduce-scatter and all-gather inside the node
    t.intra_bytes = 2 * (G - 1) / G * bytes;
    t.intra_steps = 2;
  }
  t.inter_bytes = 2 * (K - 1) / K * bytes / G;  // ring across the nodes of the node's share
  t.inter_steps = 1;
  return t;
}

LinkTime alltoall_cost(double bytes, const Group& g) {
  LinkTime t;
  const double P = g.size();
  if (P <= 1) return t;
  t.intra_bytes = (g.per_node - 1) / (P - 1) * bytes;
  t.inter_bytes = (P - g.per_node) / (P - 1) * bytes;
  (g.nodes > 1 ? t.inter_steps : t.intra_steps) = 1;
  return t;
}

LinkTime small_allreduce_cost(const Group& g) {
  LinkTime t;
  if (g.size() <= 1) return t;
  (g.nodes > 1 ? t.inter_steps : t.intra_steps) = 1;
  return t;
}

Group layer_group(const std::vector<int>& grid, int mode, int gpus_per_node) {
  int P = 1;
  for (const int p : grid) P *= std::max(p, 1);
  // Rank r's coordinate of `mode` in the row-major numbering: (r / stride) % p_mode.
  int stride = 1;
  for (std::size_t k = static_cast<std::size_t>(mode) + 1; k < grid.size(); ++k)
    stride *= std::max(grid[k], 1);
  const int pm = std::max(grid[static_cast<std::size_t>(mode)], 1);
  std::map<int, int> per_node;  // node -> ranks of the layer on it
  for (int r = 0; r < P; ++r)
    if ((r / stride) % pm == 0) ++per_node[gpus_per_node > 0 ? r / gpus_per_node : 0];
  Group g;
  g.nodes = static_cast<int>(per_node.size());
  g.per_node = 0;
  for (const auto& [node, n] : per_node) g.per_node = std::max(g.per_node, n);
  return g;
}

TuckerRowsRule tucker_rows_rule(TuckerRows rows, std::string_view svd, bool staged,
                                bool stream_ordered) {
  TuckerRowsRule r;
  r.rows = rows;
  if (rows == TuckerRows::allreduce) {
    r.why = "--comm-strategy allreduce";
  } else if (rows == TuckerRows::owners) {
    r.why = "--comm-strategy owners";
  } else if (svd != "gram") {
    r.why = "auto: owners (--svd " + std::string(svd) + ")";
  } else if (staged) {
    r.why = "auto: owners (two-stage combine across nodes, --comm-hierarchy)";
  } else if (!stream_ordered) {
    r.why =
        "auto: owners (no collectives in a device stream: the dense stage's products are "
        "shared out over the ranks)";
  } else {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "auto: allreduce where the whole Y_(n) is at most %.0f MiB",
                  kTuckerRowsAllreduceMaxBytes / (1024.0 * 1024.0));
    r.why = buf;
    r.by_size = true;
  }
  return r;
}

}  // namespace tessera::plan
