// The alpha-beta model of one collective over ranks that sit on one or several nodes
// (docs/planner.md, "Several nodes"): each collective costs alpha per step plus its bytes
// over the link they cross, NVLink inside a node and the network between nodes. The CP,
// Tucker and SpTC iteration models (planner.hpp) and --comm-strategy auto
// (algo/cp_strategy.hpp) price their collectives with these functions only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::plan {

struct TimeModel;

/// On several ranks with the allreduce strategy, a mode whose MTTKRP rows take more bytes
/// than this is reduce-scattered, solved split over the ranks and all-gathered; a smaller one
/// is all-reduced and solved whole on every rank (algo::CpOptions::whole_rows_max_bytes).
inline constexpr double kWholeRowsMaxBytes = 32.0 * (1 << 20);

/// How Tucker-HOOI combines a mode's TTMc rows on several ranks (tucker --comm-strategy;
/// docs/multi-gpu.md, "Tucker-HOOI on several GPUs").
enum class TuckerRows {
  /// allreduce where tucker_rows_rule allows it and the whole Y_(n) is at most
  /// kTuckerRowsAllreduceMaxBytes, else owners; per mode.
  automatic,
  /// The whole Y_(n) (I_n x C) all-reduced in place: every rank then runs the dense stage on
  /// all rows with no further collective and holds the whole new factor (one collective per
  /// mode; --svd gram only).
  allreduce,
  /// Rows sent to their owner rank and summed there; the dense stage on the owned rows, its
  /// Grams summed over the ranks, the new factor all-gathered (five collectives per mode).
  owners,
};

/// The largest Y_(n), in bytes, that TuckerRows::automatic all-reduces: 64 MiB, a quarter
/// of a millisecond of NVLink between two H200s (docs/perf/gpu-h200-scaling.md, "Session 52").
inline constexpr double kTuckerRowsAllreduceMaxBytes = 64.0 * 1024 * 1024;

/// The choice of TuckerRows for a run: which modes all-reduce (allreduce()) and why. One rule
/// for the run (algo::detail::choose_rows) and the planner's prediction
/// (estimate_tucker_iteration).
struct TuckerRowsRule {
  TuckerRows rows = TuckerRows::automatic;
  bool by_size = false;  ///< automatic, and every condition but the size holds
  std::string why;       ///< "--comm-strategy ..." or "auto: ..."
  /// Whether a mode whose whole Y_(n) takes `bytes` is all-reduced.
  bool allreduce(double bytes) const {
    return rows == TuckerRows::allreduce || (by_size && bytes <= kTuckerRowsAllreduceMaxBytes);
  }
};

/// `svd`: the --svd method's name (all-reduced rows need "gram"); `staged`: the rows go
/// through a relay on their node first (several nodes of 2+ ranks, --comm-hierarchy);
/// `stream_ordered`: the collectives run in the backend's device stream (cuda with NCCL).
TuckerRowsRule tucker_rows_rule(TuckerRows rows, std::string_view svd, bool staged,
                                bool stream_ordered);

/// The ranks of one collective: `per_node` of them on each of `nodes` nodes.
struct Group {
  int per_node = 1;
  int nodes = 1;
  int size() const { return per_node * nodes; }
};

/// What one or several collectives move per rank and how many latency-bound steps they take,
/// per link kind. Added up over a mode or an iteration; priced by seconds().
struct LinkTime {
  double intra_bytes = 0;  ///< bytes each rank sends over NVLink (inside its node)
  double inter_bytes = 0;  ///< bytes each rank sends over the network (to other nodes)
  double intra_steps = 0;  ///< collectives (or phases) inside a node: alpha each
  double inter_steps = 0;  ///< collectives (or phases) across nodes: alpha each
  LinkTime& operator+=(const LinkTime& o);
  /// intra_bytes / link_bandwidth + inter_bytes / inter_bandwidth + the alphas.
  double seconds(const TimeModel& m) const;
};

/// The whole job of `ranks` ranks, `gpus_per_node` on a node (0: all on one node); a last
/// node may hold fewer (priced as if full).
Group job_group(int ranks, int gpus_per_node);

/// All-reduce of `bytes` (the vector each rank holds) over `g`. One node: one ring
/// (2 (g - 1) / g of the bytes over NVLink, one alpha). Several nodes, hierarchical: a
/// reduce-scatter inside the node, an all-reduce of the node's 1/per_node share across the
/// nodes (ring: 2 (nodes - 1) / nodes of it over the network), an all-gather inside the node.
LinkTime allreduce_cost(double bytes, const Group& g);

/// Reduce-scatter of `bytes` (each rank ends with bytes / g.size()) over `g`, inside the node
/// first ((per_node - 1) / per_node of the bytes), then across the nodes ((nodes - 1) / nodes
/// of the node's share). All-gather is its mirror image and costs the same.
LinkTime reduce_scatter_cost(double bytes, const Group& g);
LinkTime allgather_cost(double bytes, const Group& g);

/// Alltoallv in which each rank sends `bytes` spread evenly over the other ranks of `g`:
/// (per_node - 1) / (size - 1) of them inside the node, the rest across nodes. One step.
LinkTime alltoall_cost(double bytes, const Group& g);

/// A small all-reduce (norms, Grams, scalars) over `g`: one alpha, of the network's kind when
/// `g` spans nodes.
LinkTime small_allreduce_cost(const Group& g);

/// The layer of mode `mode` under the rank grid `grid` (ranks numbered row-major, the last
/// mode fastest, as partition::Distribution::rank_of numbers them) with `gpus_per_node` ranks
/// on a node (0: one node): the ranks sharing one chunk of that mode, how many of them share a
/// node and how many nodes they span (the layer of chunk 0; the others are alike).
Group layer_group(const std::vector<int>& grid, int mode, int gpus_per_node);

}  // namespace tessera::plan
