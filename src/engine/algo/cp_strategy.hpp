// --comm-strategy auto: allreduce or layer for a CP-ALS run, from a model of the bytes each
// strategy moves over the link between ranks and what the layer strategy's grid partition
// costs (docs/multi-gpu.md, "Choosing the strategy").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "plan/planner.hpp"

namespace tessera::algo {

/// What --comm-strategy auto decided, with the figures it compared (seconds per iteration).
struct CommChoice {
  CommStrategy strategy = CommStrategy::allreduce;
  double allreduce_comm_s = 0;  ///< per mode one all-reduce of I_n x R values, P ranks
  double layer_comm_s = 0;      ///< per mode reduce-scatter + all-gather inside the layers
  double grid_cost_s = 0;       ///< the grid partition's expected imbalance (see below)
  std::vector<int> grid;        ///< the grid the layer strategy would use
  std::string why;              ///< one line for the log and the record
};

/// Kernel time lost to the grid partition's imbalance, as a multiple of the MTTKRPs' bytes
/// floor (the constant lives with the model, plan/planner.hpp).
inline constexpr double kGridCostOverKernelFloor = plan::kGridCostOverKernelFloor;

/// The layer strategy's grid for `ranks` ranks placed `m.gpus_per_node` to a node in rank
/// order (0: one node): partition::choose_grid's, unless another grid of the same ranks
/// (no mode cut into more chunks than it has indices) has less communication per iteration
/// under the model (plan::estimate_cp_layer_iteration, whose layer_group knows which layers
/// stay inside a node and which cross the network). On one node the grid is
/// partition::choose_grid's. Grids are enumerated only while there are at most 20000.
std::vector<int> choose_layer_grid(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks,
                                   int R, int value_bytes, const plan::TimeModel& m);

/// The choice for a tensor of `dims` with `nnz` nonzeros, CP rank R, `value_bytes` per
/// value, on `ranks` ranks, under the link and memory figures of `m`. The layer strategy
/// is chosen when its communication plus the grid's cost is below the all-reduce's. With
/// one rank, or dims not known yet (a text file is read after the choice), allreduce.
/// `dealt` (--deal): the grid's cut modes are dealt round-robin, whose measured imbalance
/// is charged nothing (kernel time max/mean 1.007 on the power-law amazon shape on 2 H200s,
/// against 1.2-1.3 for the nonzero-balanced cut: docs/multi-gpu.md, "Dealt grids").
CommChoice choose_comm_strategy(const std::vector<std::uint64_t>& dims, nnz_t nnz, int ranks, int R,
                                int value_bytes, const plan::TimeModel& m = {}, bool dealt = false);

/// "allreduce" | "layer" | "auto": the strategy for a run (auto resolved by
/// choose_comm_strategy on the facts' dims and nonzeros: a store's header or a generated
/// tensor's; a text file's facts have no dims and get allreduce; on several ranks the choice
/// is logged). `choice` (may be null) receives auto's figures.
/// `gpus_per_node`: the ranks of each node, in rank order (0: one node), for the model.
CommStrategy resolve_comm_strategy(const std::string& option, const plan::TensorFacts& facts,
                                   int ranks, int R, int value_bytes, CommChoice* choice,
                                   int gpus_per_node = 0, bool dealt = false);

}  // namespace tessera::algo
