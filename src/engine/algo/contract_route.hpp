// Internal to algo::contract (contract.cpp, contract_route.cpp): the
// routing of nonzeros between ranks, on the host and in backend memory, in one place
// (docs/sptc.md, "Distributed"), and the helpers the contraction's steps share. The
// collectives run here, on the communicators algo::contract is given; the backend only
// computes (kernels::ContractRoute).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algo/contract.hpp"
#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"

namespace tessera::algo::contract_detail {

/// Binary units, as --mem-limit reads them (K, M, G = 1024^k).
std::string bytes_str(double b);

/// Bytes of nnz nonzeros of `order` modes (coordinates and values).
template <typename T>
std::size_t tensor_bytes(std::int64_t nnz, int order) {
  return static_cast<std::size_t>(nnz) *
         (static_cast<std::size_t>(order) * sizeof(index_t) + sizeof(T));
}

/// The largest v over the ranks of c.
std::size_t max_over(const comm::Communicator& c, std::size_t v);

/// Where this rank's nonzeros go: positions grouped by destination (stable), the counts
/// both ways.
struct Route {
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> sendcounts, recvcounts;
  std::int64_t recv_total = 0;
};

/// Destinations by the hash of the coordinates of `modes` (tuple_owner); the counts are
/// exchanged over c. An empty list (an outer product, nothing matched) sends everything to
/// one rank: every empty tuple hashes alike.
/// With `slot_of` (the relay of each owner: its rank in its node's communicator, for a
/// c that is this rank's node), each nonzero goes instead to the relay of its owner among
/// slot_of.size() ranks, the relays being c's ranks.
template <typename T>
Route plan_route(const SparseTensor<T>& t, const std::vector<int>& modes,
                 const comm::Communicator& c, const std::vector<int>* slot_of = nullptr);

/// Moves the nonzeros as planned over c: one alltoallv per coordinate array and one for
/// the values; the received nonzeros are in source-rank order, each source in its order.
template <typename T>
SparseTensor<T> execute_route(const SparseTensor<T>& t, const Route& r,
                              const comm::Communicator& c);

/// What a contraction routed in backend memory did (route_on_device).
struct DeviceRouteInfo {
  double route_seconds = 0;  ///< uploads, hashing, partition and the exchanges of the inputs
  double local_seconds = 0;  ///< matching, counting and the run on the routed inputs
  std::int64_t routed_nnz[2] = {0, 0};  ///< this rank's X and Y after routing
  int replicated = 1;                   ///< the input copied to every rank: 0 = X, 1 = Y
  bool by_nodes = false;                ///< copied across nodes once, then inside each
  std::size_t input_bytes = 0;          ///< this rank's shares as given
  std::size_t routed_bytes = 0;         ///< the routed and replicated inputs
  kernels::ContractCount count;         ///< the local plan's products and output entries
};

/// A distributed contraction with its routing in backend memory over `data` (NCCL on
/// GPUs), the backend's side given by ops::contract_route: x and y are this rank's
/// shares (global coordinates); on true, `out` holds this rank's share of Z (sorted, no
/// repeats, no exact zeros, disjoint from the other ranks'); with a sink, the share is
/// written into sink->output(...) and `out` is left untouched. False on every rank alike,
/// with nothing done, when the backend has no such path for this spec or the routed
/// inputs would not fit; the caller then routes on the host. Collective over host and data.
/// `nodes` (may be null) places data's ranks on nodes (uniform): then the replicated input
/// is copied with comm::allgatherv_by_nodes (each share crosses the network once per node).
template <typename T>
bool route_on_device(const SparseTensor<T>& x, const SparseTensor<T>& y,
                     const kernels::ContractSpec& spec, kernels::Backend<T>& be,
                     const comm::Communicator& host, const comm::Communicator& data,
                     std::size_t memory_limit, SparseTensor<T>* out, kernels::ContractStats* stats,
                     DeviceRouteInfo* info, kernels::ContractSink<T>* sink,
                     const comm::NodeMap* nodes = nullptr);

}  // namespace tessera::algo::contract_detail
