// Node-aware collectives (docs/multi-gpu.md, "Hierarchical collectives"): which node each rank
// sits on (NodeMap), and a Communicator whose all-reduce, reduce-scatter and all-gather are
// composed from a node-local and a cross-node sub-communicator (both from split()), so the
// network carries 1/G of the bytes when G ranks of the group share a node. It works over any
// Communicator (MPI with host buffers, NCCL with device buffers and enqueue_*).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace tessera::comm {

/// The node of each rank of one communicator.
struct NodeMap {
  /// node_of[r]: the node of rank r, numbered 0, 1, ... in the order of first appearance.
  /// Empty: every rank on one node.
  std::vector<int> node_of;

  /// Nodes the ranks span (1 when node_of is empty).
  int nodes() const;
  /// Ranks on the fullest node.
  int max_per_node() const;
  /// Every node holds the same number of ranks.
  bool uniform() const;
  /// The map of the ranks `members` (ranks of this map; the sub-communicator's ranks in
  /// order), with the nodes renumbered by first appearance among them.
  NodeMap restrict_to(const std::vector<int>& members) const;
  /// Each rank's slot: its position among its node's ranks, in rank order (its rank in a
  /// split by node keyed by rank).
  std::vector<int> slots() const;
  /// The sum of per_rank[q] over the ranks q on another node than `rank` (what `rank`
  /// sends over the network when it sends per_rank[q] to each q).
  std::int64_t off_node(int rank, const std::vector<std::int64_t>& per_rank) const;
};

/// `ranks` ranks in consecutive blocks of `per_node` (rank r on node r / per_node): how
/// jobs/slurm/launch.sh emulates nodes (TESSERA_EMULATE_NODES) and how Slurm places a
/// block distribution.
NodeMap block_node_map(int ranks, int per_node);

/// --comm-hierarchy: how a collective over ranks on several nodes is issued.
///   flat: one collective over the group (NCCL's or MPI's own algorithm).
///   node: composed (reduce-scatter in the node, the collective across nodes on 1/G of the
///         data, all-gather in the node) whenever the group spans 2+ nodes evenly.
///   auto: composed when the model (plan/comm_model.hpp) says it pays: the group spans 2+
///         nodes evenly and holds 2+ ranks on each, so the network bytes shrink G-fold.
enum class Hierarchy { automatic, flat, node };
Hierarchy parse_hierarchy(const std::string& s);
std::string to_string(Hierarchy h);

/// Whether a group of ranks placed as `m` is composed under `h` (the same answer on every
/// rank given the same map).
bool use_hierarchy(Hierarchy h, const NodeMap& m);

/// A Communicator over the ranks of `flat`, composed from a node-local and a cross-node
/// sub-communicator. Its ranks are numbered local-major: rank = (position in the node) *
/// nodes + node, so that the block a rank receives from reduce_scatter is inside the block
/// its node reduces first; that is not flat's numbering (rank(), to_flat()).
/// Constraints beyond Communicator's: reduce_scatter on device buffers must be in place
/// (recv == send + rank() * recvcount; host buffers use a staging copy otherwise).
class HierarchicalCommunicator final : public Communicator {
 public:
  /// Collective over `flat` (it splits it twice). `map` is the node of each rank of `flat`
  /// and must be uniform (use_hierarchy). `owned` (may be null) is kept alive with it.
  HierarchicalCommunicator(const Communicator& flat, const NodeMap& map,
                           std::shared_ptr<const Communicator> owned = nullptr);

  int rank() const override { return rank_; }
  int size() const override { return flat_.size(); }
  MemorySpace memory_space() const override { return flat_.memory_space(); }
  std::string name() const override { return flat_.name() + " (node x network)"; }
  /// Nodes and ranks per node of the group.
  int nodes() const { return cross_->size(); }
  int per_node() const { return node_->size(); }
  /// The rank in `flat` of rank h of this communicator.
  int to_flat(int h) const { return to_flat_[static_cast<std::size_t>(h)]; }

  /// Ordered by key, ties by this communicator's rank.
  std::unique_ptr<Communicator> split(int color, int key) const override;
  void barrier() const override;
  void allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op) const override;
  void reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount, DataType t,
                          ReduceOp op) const override;
  void allgather_raw(const void* send, void* recv, std::size_t count, DataType t) const override;
  void broadcast_raw(void* buf, std::size_t n, DataType t, int root) const override;
  void alltoallv_raw(const void* send, const std::int64_t* sendcounts, const std::int64_t* sdispls,
                     void* recv, const std::int64_t* recvcounts, const std::int64_t* rdispls,
                     DataType t) const override;

  bool can_enqueue() const override;
  std::uint64_t device_buffer_bytes() const override;
  std::uint64_t host_buffer_bytes() const override;
  void enqueue_allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op,
                             void* stream) const override;
  /// In place only (recv == send + rank() * recvcount elements).
  void enqueue_reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount, DataType t,
                                  ReduceOp op, void* stream) const override;
  void enqueue_allgather_raw(const void* send, void* recv, std::size_t count, DataType t,
                             void* stream) const override;
  /// The flat communicator's, as alltoallv_raw.
  void enqueue_alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                             const std::int64_t* sdispls, void* recv,
                             const std::int64_t* recvcounts, const std::int64_t* rdispls,
                             DataType t, void* stream) const override;
  /// Waits through the cross-node communicator (the one a failed node shows up in).
  void wait_stream(void* stream, const char* what) const override;

 private:
  /// An alltoallv's per-peer counts and displacements reordered to flat_'s numbering.
  struct FlatCounts {
    std::vector<std::int64_t> sc, sd, rc, rd;
  };
  FlatCounts to_flat_counts(const std::int64_t* sendcounts, const std::int64_t* sdispls,
                            const std::int64_t* recvcounts, const std::int64_t* rdispls) const;

  const Communicator& flat_;
  std::shared_ptr<const Communicator> owned_;
  std::unique_ptr<Communicator> node_;   ///< the group's ranks on this node
  std::unique_ptr<Communicator> cross_;  ///< the same position on every node
  std::vector<int> to_flat_;
  int rank_ = 0;
};

/// The split communicators of an exchange in two steps over nodes (flat's ranks placed as
/// `map`, uniform): this rank's node (flat split by node, ordered by flat rank: a rank's
/// position there is its slot) and its slot (flat split by slot, ordered by flat rank:
/// one rank per node), with the flat ranks of each. Collective over `flat`.
struct NodeSplit {
  std::unique_ptr<Communicator> node, cross;
  std::vector<int> node_ranks;   ///< flat rank of each rank of `node`
  std::vector<int> cross_ranks;  ///< flat rank of each rank of `cross`
  /// node_members[k][s]: the flat rank in slot s of node k.
  std::vector<std::vector<int>> node_members;
  int my_node = 0, my_slot = 0;
  NodeSplit(const Communicator& flat, const NodeMap& map);
};

/// The node communicators of an exchange through relays (Tucker's TTMc rows, the
/// contraction's partial output): `host` is c split by node (keyed by c's rank, so a rank's
/// position there is its slot), `data` the same split of the data communicator (null when
/// it is c itself), slot_of[q] the slot of c's rank q. Empty (host null) unless c spans
/// 2+ nodes of `map` and use_hierarchy(h, map). Collective over c and data.
struct NodeRelays {
  std::unique_ptr<Communicator> host, data;
  std::vector<int> slot_of;
  /// The node communicator the rows or entries move over.
  const Communicator* moves() const { return data ? data.get() : host.get(); }
};
NodeRelays node_relays(const Communicator& c, const Communicator& data, const NodeMap& map,
                       Hierarchy h);

/// All-gather of shares of different lengths: flat rank r's `counts[r]` elements (`send`)
/// land at `displs[r]` of `recv` on every rank, in two steps: across nodes among the ranks
/// of one slot (each share crosses the network once per other node, not once per other
/// rank: G-fold fewer network bytes than one flat exchange), then inside each node, one
/// exchange per node whose shares are passed on (from inside `recv`: the MPI communicator
/// stages such a send; NCCL's point-to-point exchange needs no copy). `send` must not lie
/// inside `recv`. Collective over the ranks of `ns`.
void allgatherv_by_nodes(const NodeSplit& ns, const void* send, void* recv,
                         const std::vector<std::int64_t>& counts,
                         const std::vector<std::int64_t>& displs, DataType t);

/// `flat` as it should be used under `h` for ranks placed as `map` (the node of each rank of
/// `flat`): a HierarchicalCommunicator owning it when use_hierarchy(h, map), else `flat`
/// itself. Collective over `flat`.
std::shared_ptr<const Communicator> with_hierarchy(std::shared_ptr<const Communicator> flat,
                                                   const NodeMap& map, Hierarchy h);

}  // namespace tessera::comm
