// The planner's inputs measured on the machine (collective): the limits every rank agrees
// on, and the facts of an input file read from its header.
#pragma once

#include <string>

#include "plan/planner.hpp"

namespace tessera::comm {
class MpiCommunicator;
}

namespace tessera::plan {

/// Collective over `world`: measures each rank's limits (host memory shared among the
/// ranks of its node, free memory of its GPU for cuda, free disk in `spill_dir`) and agrees
/// on the smallest of each and the largest baseline, so every rank makes the same plan.
/// The sources name the rank-0 values and say when another rank had less.
/// `ranks_on_node` > 0 shares the host memory among that many ranks instead of the ranks of
/// `world` on this node (tessera plan --nprocs: a run of another size on this node).
/// cuda without a visible GPU: the device limit is unknown (its source says so), and only a
/// --device-budget (Request::device_budget) lets the planner plan for a card.
Limits measure_limits(const comm::MpiCommunicator& world, Backend backend,
                      const std::string& spill_dir, int ranks_on_node = 0);

/// Collective: the facts of an input from its header. An HDF5 store gives its dims, nnz,
/// value type, chunking, uniqueness and, when it holds a partition of exactly world.size()
/// blocks, the largest block. A text file (.tns, .tns.gz) gives its size only: dims and nnz
/// are known after the read (see facts_of_read).
TensorFacts facts_of_file(const std::string& path, const comm::MpiCommunicator& world);

/// Bytes this process may pin or allocate beyond what the plan counts; for the log.
std::string describe_limits(const Limits& l);

}  // namespace tessera::plan
