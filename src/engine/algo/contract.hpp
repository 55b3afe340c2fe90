// Distributed sparse tensor contraction (DESIGN §6, docs/sptc.md), written once against
// kernels::Backend and comm::Communicator.
//
// Z = X x Y for an einsum spec (kernels/sptc.hpp):
//  1. route: every X and Y nonzero goes to rank hash(matched coordinates) % P, the same
//     hash for both inputs, so every pair of matching nonzeros meets on one rank (one
//     alltoallv per coordinate array and one for the values, over ContractOptions::data:
//     NCCL on GPUs, MPI otherwise);
//  2. plan: the backend matches the local nonzeros and counts the local output exactly;
//     the memory need is estimated from those counts, all-reduced, and the run refused on
//     every rank alike when the busiest rank would pass the limit;
//  3. multiply: the backend computes the local partial output;
//  4. route the partial output nonzeros to rank hash(output coordinates) % P and sum the
//     copies there (in double, in source-rank order), dropping exact zeros.
// Each rank ends with a disjoint share of Z. A self-contraction passes the same tensor for
// X and Y: it is routed once when both roles hash the same modes, else twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"
#include "plan/contract.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

struct ContractOptions {
  /// Bytes per rank the contraction may hold (the caller's input shares, the routed
  /// inputs, the backend's plan, the output and the exchange buffers); 0 = no limit. Over
  /// it the run is refused with an InputError (thrown on every rank alike) that says how
  /// much is needed and what would fit.
  std::size_t memory_limit = 0;
  /// Where memory_limit came from (named in the plan and in refusals).
  std::string memory_limit_source = "ContractOptions::memory_limit";
  /// Device bytes per rank (cuda backend; 0 = not known: no device limit) and its source.
  std::size_t device_limit = 0;
  std::string device_limit_source = "ContractOptions::device_limit";
  /// Stop after the plan (the inputs routed and matched, the output counted): the result
  /// holds the counts, the memory estimate and the piece plan; nothing is multiplied.
  bool dry_run = false;
  /// Testing: make the output in at least this many pieces (0 = as the plan says).
  int min_pieces = 0;
  bool print = true;  ///< the plan and the memory estimate on rank 0 (log::info)
  /// Communicator that moves the nonzeros (the input routing and the partial-output
  /// routing), spanning the ranks of `c` in the same order; null = `c`. The drivers pass
  /// the backend's data communicator: NCCL for the cuda backend (it stages the host arrays
  /// through device buffers), MPI otherwise. Counts, sums and error agreement stay on `c`.
  const comm::Communicator* data = nullptr;
  /// The node of each rank of `c` (comm::node_map; empty: one node) and --comm-hierarchy:
  /// where comm::use_hierarchy says so, the partial output goes first to a relay on its
  /// node, the node peer in its owner's slot, which sums the node's copies of an entry, and
  /// only the sums cross between nodes (docs/sptc.md, "Distribution").
  comm::NodeMap nodes;
  comm::Hierarchy hierarchy = comm::Hierarchy::automatic;
};

/// Memory estimate per rank, in bytes, made before the multiplication (the largest value
/// over ranks for each part). The total is the peak of three stages: plan + multiply
/// (inputs, routed inputs, workspace, local output), output exchange (inputs, local
/// output, one send array, received entries) and merge (inputs, received, merged, sort
/// workspace). Entries received in the output exchange are estimated as
/// max(local entries, global entries / P): hashing spreads output coordinates evenly.
struct ContractMemory {
  std::size_t input_bytes = 0;       ///< the caller's X and Y shares on this rank
  std::size_t routed_bytes = 0;      ///< routed copies of X and Y (0 on one rank)
  std::size_t workspace_bytes = 0;   ///< the backend's plan and run workspace
  std::size_t output_bytes = 0;      ///< the local output before the exchange
  std::size_t exchange_bytes = 0;    ///< send buffer, received and merged entries
  std::size_t total_bytes = 0;       ///< the busiest rank's peak
  std::size_t mean_total_bytes = 0;  ///< the mean over ranks of the per-rank peak
};

/// Receives the output piece by piece when it is made in pieces (docs/sptc.md, "Pieces").
/// put() is collective: every rank calls it once per piece, in piece order. Pieces are
/// ascending, disjoint ranges of output mode 0's coordinate, so a share's pieces in order
/// are sorted and the pieces of all ranks, each redistributed in order, are the output in
/// global lexicographic order.
template <typename T>
class ContractPieceSink {
 public:
  virtual ~ContractPieceSink() = default;
  /// This rank's share of one piece (sorted, disjoint from the other ranks', no zeros).
  virtual void put(SparseTensor<T>&& share, int piece) = 0;
  /// Host bytes per output entry put() holds besides the share (the planner adds them).
  virtual std::size_t bytes_per_entry() const { return 0; }
};

template <typename T>
struct ContractResult {
  /// This rank's share of Z: GLOBAL 0-based coordinates in output mode order, sorted
  /// lexicographically, no repeated coordinates, no exact zeros. The shares of the ranks
  /// are disjoint: on the host path the owner is a hash of the whole output tuple; routed
  /// in backend memory (ops::contract_route), a hash of the row side's output modes.
  SparseTensor<T> local;
  std::vector<std::uint64_t> dims;  ///< output dims (same on every rank)
  nnz_t global_nnz = 0;
  std::int64_t global_products = 0;         ///< pairs multiplied, summed over ranks
  std::int64_t max_rank_products = 0;       ///< the busiest rank's pairs (balance)
  std::int64_t global_partial_entries = 0;  ///< local output entries summed over ranks
  std::int64_t global_zeros_dropped = 0;    ///< exact zeros dropped (locally and after merging)
  std::int64_t global_input_nnz[2] = {0, 0};
  /// This rank's kernel statistics (matching, counting, multiplication, assembly).
  kernels::ContractStats stats;
  /// This rank's seconds: "route_inputs", "plan" (matching and counting), "multiply" (the
  /// kernel run, assembly included), "route_output", "merge".
  PhaseTimes phases;
  ContractMemory memory;
  /// Self-contraction whose roles hash the same modes: routed once, one local copy.
  bool routed_once = false;
  /// Routed in backend memory through ops::contract_route (no output routing or merge).
  bool routed_on_device = false;
  /// Routed on the device, several nodes: the replicated input crossed the network once per
  /// node, then was copied inside each (comm::allgatherv_by_nodes).
  bool replicated_by_nodes = false;
  /// The planner's answer (plan::plan_contract_pieces) on the host path.
  plan::ContractPiecePlan piece_plan;
  int pieces = 1;         ///< output pieces made (bisected pieces counted)
  bool streamed = false;  ///< pieces went to the sink: `local` is empty
  bool dry_run = false;   ///< stopped after the plan
  /// How the partial output was merged on the host path: "flat" (straight to its owners),
  /// "node" (through a relay on each node), "" (one rank, or routed on the device).
  std::string output_merge;
  /// Partial-output entries that crossed between nodes, over all ranks and pieces (-1: one
  /// node, or not merged on the host).
  std::int64_t network_entries = -1;
};

/// Host buffers kept across contractions by a caller that contracts repeatedly (an
/// iterative method, a benchmark), one per rank (docs/sptc.md, "Host buffers"):
///  - the output's arrays are reused from one contraction to the next (no new pages to
///    fault in) and page-locked once for the backend's copies (Backend::pin_host);
///  - inputs the caller keeps unchanged can be page-locked once (pin_input).
/// With the cuda backend the uploads and downloads then run as DMA at the host link's
/// rate instead of through the driver's staging. Host backends lock nothing; the output
/// arrays are still reused where the backend writes into them. Passed to algo::contract,
/// the result's `local` stays empty and result() holds this rank's share until the next
/// contraction with these buffers.
template <typename T>
class ContractBuffers final : public kernels::ContractSink<T> {
 public:
  explicit ContractBuffers(kernels::Backend<T>& backend) : be_(backend) {}
  ~ContractBuffers() override;
  ContractBuffers(const ContractBuffers&) = delete;
  ContractBuffers& operator=(const ContractBuffers&) = delete;

  /// Page-locks t's arrays until these buffers are destroyed: t must stay allocated, and
  /// its arrays neither resized nor reallocated, while they live. Do not pass result(). Arrays
  /// under 1 MiB are left alone (nothing to gain). Returns the seconds it took.
  double pin_input(const SparseTensor<T>& t);
  /// This rank's share of the last contraction run with these buffers (sorted, disjoint
  /// from the other ranks', as ContractResult::local).
  const SparseTensor<T>& result() const { return out_; }
  /// Bytes page-locked now (inputs and output).
  std::size_t pinned_bytes() const { return pinned_in_ + pinned_out_; }

  /// ContractSink: the output arrays sized to n nonzeros, reused while n fits their
  /// capacity, else reallocated with 1/8 spare and page-locked again.
  SparseTensor<T>& output(const std::vector<std::uint64_t>& dims, std::size_t n) override;
  /// Takes an output made elsewhere (a backend or path that does not write into a sink).
  void take(SparseTensor<T>&& t);
  /// Empties result(), keeping the storage (algo::contract does it when it throws).
  void discard();

 private:
  /// Page-locks [p, p + bytes) through the backend when at least 1 MiB; the handle goes
  /// to `pins`, the bytes to `total`.
  void lock(const void* p, std::size_t bytes, std::vector<std::unique_ptr<kernels::HostPin>>& pins,
            std::size_t& total);

  kernels::Backend<T>& be_;
  SparseTensor<T> out_;
  std::size_t cap_ = 0;  // nonzeros the page-locked output arrays hold
  std::size_t pinned_in_ = 0, pinned_out_ = 0;
  // Released before the arrays they lock (declared after them; the destructor clears
  // them first as well).
  std::vector<std::unique_ptr<kernels::HostPin>> out_pins_, in_pins_;
};

/// Collective over `c` (a host communicator). x and y are this rank's shares (any
/// distribution; GLOBAL coordinates; dims = the global dims on every rank); pass the same
/// object for a self-contraction. The backend computes the local contraction through
/// ops::contract_plan / ops::contract (host tensors). Throws InputError on every
/// rank alike for shapes that do not fit the spec and for the memory limit; errors of one
/// rank's kernel become a CollectiveError on every rank.
/// With `buffers` (made for this backend), the share is written into buffers->result()
/// and the result's `local` is empty.
/// When one piece of output does not fit the limits (plan::plan_contract_pieces), the
/// output is made in pieces: ranges of output mode 0's coordinate, split on the input that
/// provides it, each piece planned, multiplied, routed and merged on its own. With `sink`
/// each piece goes to it (and `local` stays empty), else the pieces are joined in memory.
template <typename T>
ContractResult<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                           const kernels::ContractSpec& spec, kernels::Backend<T>& backend,
                           const comm::Communicator& c, const ContractOptions& opt = {},
                           ContractBuffers<T>* buffers = nullptr,
                           ContractPieceSink<T>* sink = nullptr);

/// Rank (of P) that owns the tuple coords[0..n): a 64-bit hash of the coordinates modulo
/// P. Used for the matched coordinates of the inputs and for the output coordinates.
int tuple_owner(const index_t* coords, int n, int P);

/// Collective: every rank's share of `local` (same dims everywhere) on rank `root`, sorted
/// lexicographically (repeated coordinates summed, exact zeros dropped); other ranks get an
/// empty tensor of the same dims.
template <typename T>
SparseTensor<T> gather(const SparseTensor<T>& local, const comm::Communicator& c, int root = 0);

/// Collective: writes a distributed result in global lexicographic order: the shares are
/// first redistributed into contiguous ranges of that order (partition::distribute, nnz
/// scheme), then written by io::write_h5 when the name ends in .h5 or .hdf5 (the HDF5
/// tensor store; dims = local.dims, `source` recorded), else by io::write_tns (FROSTT
/// text, gzip for .gz). Values are written as double. Errors throw CollectiveError on
/// every rank.
template <typename T>
void write_sorted(const std::string& path, const SparseTensor<T>& local,
                  const comm::Communicator& c, const std::string& source = "");

}  // namespace tessera::algo
