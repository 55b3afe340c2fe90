#include "comm/hierarchy.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>

#include "util/error.hpp"

namespace tessera::comm {

int NodeMap::nodes() const {
  int k = 0;
  for (const int n : node_of) k = std::max(k, n + 1);
  return std::max(k, 1);
}

int NodeMap::max_per_node() const {
  if (node_of.empty()) return 0;
  std::vector<int> count(static_cast<std::size_t>(nodes()), 0);
  for (const int n : node_of) ++count[static_cast<std::size_t>(n)];
  return *std::max_element(count.begin(), count.end());
}

bool NodeMap::uniform() const {
  if (node_of.empty()) return true;
  std::vector<int> count(static_cast<std::size_t>(nodes()), 0);
  for (const int n : node_of) ++count[static_cast<std::size_t>(n)];
  return std::all_of(count.begin(), count.end(), [&](int c) { return c == count[0]; });
}

NodeMap NodeMap::restrict_to(const std::vector<int>& members) const {
  NodeMap m;
  if (node_of.empty()) return m;
  std::map<int, int> renumber;
  for (const int r : members) {
    TESSERA_EXPECTS(r >= 0 && r < static_cast<int>(node_of.size()), "member outside the node map");
    const int old = node_of[static_cast<std::size_t>(r)];
    const auto it = renumber.emplace(old, static_cast<int>(renumber.size())).first;
    m.node_of.push_back(it->second);
  }
  return m;
}

std::vector<int> NodeMap::slots() const {
  std::vector<int> seen(static_cast<std::size_t>(nodes()), 0), out;
  for (const int k : node_of) out.push_back(seen[static_cast<std::size_t>(k)]++);
  return out;
}

std::int64_t NodeMap::off_node(int rank, const std::vector<std::int64_t>& per_rank) const {
  std::int64_t n = 0;
  const int mine = node_of[static_cast<std::size_t>(rank)];
  for (std::size_t q = 0; q < node_of.size() && q < per_rank.size(); ++q)
    if (node_of[q] != mine) n += per_rank[q];
  return n;
}

NodeMap block_node_map(int ranks, int per_node) {
  TESSERA_EXPECTS(ranks >= 1 && per_node >= 1, "a node map needs ranks and ranks per node");
  NodeMap m;
  for (int r = 0; r < ranks; ++r) m.node_of.push_back(r / per_node);
  return m;
}

Hierarchy parse_hierarchy(const std::string& s) {
  if (s == "auto") return Hierarchy::automatic;
  if (s == "flat") return Hierarchy::flat;
  if (s == "node") return Hierarchy::node;
  TESSERA_INPUT_CHECK(false, "unknown --comm-hierarchy '" << s << "': expected auto, flat or node");
  return Hierarchy::automatic;
}

std::string to_string(Hierarchy h) {
  switch (h) {
    case Hierarchy::flat:
      return "flat";
    case Hierarchy::node:
      return "node";
    case Hierarchy::automatic:
      break;
  }
  return "auto";
}

bool use_hierarchy(Hierarchy h, const NodeMap& m) {
  if (h == Hierarchy::flat || m.nodes() < 2 || !m.uniform()) return false;
  // auto: composed only when it shrinks the network bytes (2+ ranks of the group per node:
  // plan::allreduce_cost and reduce_scatter_cost divide them by per_node).
  return h == Hierarchy::node || m.max_per_node() > 1;
}

HierarchicalCommunicator::HierarchicalCommunicator(const Communicator& flat, const NodeMap& map,
                                                   std::shared_ptr<const Communicator> owned)
    : flat_(flat), owned_(std::move(owned)) {
  const int P = flat.size();
  TESSERA_EXPECTS(static_cast<int>(map.node_of.size()) == P && map.uniform(),
                  "a hierarchical communicator needs the node of every rank, the same count "
                  "on every node");
  const int K = map.nodes();
  const int me = flat.rank();
  const int my_node = map.node_of[static_cast<std::size_t>(me)];
  // Position of each flat rank on its node (flat order), the numbering of node_'s ranks.
  std::vector<int> local(static_cast<std::size_t>(P));
  std::vector<int> seen(static_cast<std::size_t>(K), 0);
  for (int r = 0; r < P; ++r)
    local[static_cast<std::size_t>(r)] =
        seen[static_cast<std::size_t>(map.node_of[static_cast<std::size_t>(r)])]++;
  node_ = flat.split(my_node, me);
  cross_ = flat.split(local[static_cast<std::size_t>(me)], my_node);
  rank_ = node_->rank() * K + cross_->rank();
  to_flat_.assign(static_cast<std::size_t>(P), 0);
  for (int r = 0; r < P; ++r)
    to_flat_[static_cast<std::size_t>(local[static_cast<std::size_t>(r)] * K +
                                      map.node_of[static_cast<std::size_t>(r)])] = r;
  TESSERA_EXPECTS(node_->size() * K == P && cross_->size() == K &&
                      to_flat_[static_cast<std::size_t>(rank_)] == me,
                  "the node and cross-node communicators disagree with the node map");
}

std::unique_ptr<Communicator> HierarchicalCommunicator::split(int color, int key) const {
  const long long k = static_cast<long long>(key) * size() + rank_;
  TESSERA_EXPECTS(k >= INT_MIN && k <= INT_MAX, "split key out of range");
  return flat_.split(color, static_cast<int>(k));
}

void HierarchicalCommunicator::barrier() const {
  flat_.barrier();
}

namespace {

char* at(void* p, std::size_t elems, DataType t) {
  return static_cast<char*>(p) + elems * size_of(t);
}

}  // namespace

// Every composition below runs the node-local step on G ranks over the group's data and the
// cross-node step on the 1/G share the node reduced, in place where the sub-communicators
// allow it, so no step needs a buffer of its own.

void HierarchicalCommunicator::allreduce_raw(void* buf, std::size_t n, DataType t,
                                             ReduceOp op) const {
  const std::size_t G = static_cast<std::size_t>(node_->size());
  const std::size_t q = n / G, head = q * G, lo = q * static_cast<std::size_t>(node_->rank());
  if (q > 0) {
    node_->reduce_scatter_raw(buf, at(buf, lo, t), q, t, op);
    cross_->allreduce_raw(at(buf, lo, t), q, t, op);
    node_->allgather_raw(at(buf, lo, t), buf, q, t);
  }
  if (n > head) {  // fewer elements than ranks on the node: not worth splitting
    node_->allreduce_raw(at(buf, head, t), n - head, t, op);
    cross_->allreduce_raw(at(buf, head, t), n - head, t, op);
  }
}

void HierarchicalCommunicator::reduce_scatter_raw(const void* send, void* recv,
                                                  std::size_t recvcount, DataType t,
                                                  ReduceOp op) const {
  const std::size_t K = static_cast<std::size_t>(cross_->size());
  const std::size_t P = static_cast<std::size_t>(size()), es = size_of(t);
  char* base = const_cast<char*>(static_cast<const char*>(send));
  std::vector<char> staged;
  const bool in_place = recv == base + static_cast<std::size_t>(rank_) * recvcount * es;
  if (!in_place) {
    TESSERA_EXPECTS(memory_space() == MemorySpace::host,
                    "a hierarchical reduce-scatter of device buffers must be in place (recv == "
                    "send + rank() * recvcount)");
    staged.assign(base, base + P * recvcount * es);
    base = staged.data();
  }
  const std::size_t share = K * recvcount;  // this node position's blocks
  char* mine = at(base, share * static_cast<std::size_t>(node_->rank()), t);
  node_->reduce_scatter_raw(base, mine, share, t, op);
  char* out = at(mine, recvcount * static_cast<std::size_t>(cross_->rank()), t);
  cross_->reduce_scatter_raw(mine, out, recvcount, t, op);
  if (!in_place) std::memcpy(recv, out, recvcount * es);
}

void HierarchicalCommunicator::allgather_raw(const void* send, void* recv, std::size_t count,
                                             DataType t) const {
  const std::size_t share = static_cast<std::size_t>(cross_->size()) * count;
  char* mine = at(recv, share * static_cast<std::size_t>(node_->rank()), t);
  cross_->allgather_raw(send, mine, count, t);
  node_->allgather_raw(mine, recv, share, t);
}

void HierarchicalCommunicator::broadcast_raw(void* buf, std::size_t n, DataType t, int root) const {
  flat_.broadcast_raw(buf, n, t, to_flat(root));
}

HierarchicalCommunicator::FlatCounts HierarchicalCommunicator::to_flat_counts(
    const std::int64_t* sendcounts, const std::int64_t* sdispls, const std::int64_t* recvcounts,
    const std::int64_t* rdispls) const {
  const std::size_t P = static_cast<std::size_t>(size());
  FlatCounts f{std::vector<std::int64_t>(P), std::vector<std::int64_t>(P),
               std::vector<std::int64_t>(P), std::vector<std::int64_t>(P)};
  for (std::size_t h = 0; h < P; ++h) {
    const auto k = static_cast<std::size_t>(to_flat_[h]);
    f.sc[k] = sendcounts[h];
    f.sd[k] = sdispls[h];
    f.rc[k] = recvcounts[h];
    f.rd[k] = rdispls[h];
  }
  return f;
}

void HierarchicalCommunicator::alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                                             const std::int64_t* sdispls, void* recv,
                                             const std::int64_t* recvcounts,
                                             const std::int64_t* rdispls, DataType t) const {
  const FlatCounts f = to_flat_counts(sendcounts, sdispls, recvcounts, rdispls);
  flat_.alltoallv_raw(send, f.sc.data(), f.sd.data(), recv, f.rc.data(), f.rd.data(), t);
}

void HierarchicalCommunicator::enqueue_alltoallv_raw(
    const void* send, const std::int64_t* sendcounts, const std::int64_t* sdispls, void* recv,
    const std::int64_t* recvcounts, const std::int64_t* rdispls, DataType t, void* stream) const {
  const FlatCounts f = to_flat_counts(sendcounts, sdispls, recvcounts, rdispls);
  flat_.enqueue_alltoallv_raw(send, f.sc.data(), f.sd.data(), recv, f.rc.data(), f.rd.data(), t,
                              stream);
}

bool HierarchicalCommunicator::can_enqueue() const {
  return flat_.can_enqueue() && node_->can_enqueue() && cross_->can_enqueue();
}

std::uint64_t HierarchicalCommunicator::device_buffer_bytes() const {
  return node_->device_buffer_bytes() + cross_->device_buffer_bytes();
}

std::uint64_t HierarchicalCommunicator::host_buffer_bytes() const {
  return node_->host_buffer_bytes() + cross_->host_buffer_bytes();
}

void HierarchicalCommunicator::enqueue_allreduce_raw(void* buf, std::size_t n, DataType t,
                                                     ReduceOp op, void* stream) const {
  const std::size_t G = static_cast<std::size_t>(node_->size());
  const std::size_t q = n / G, head = q * G, lo = q * static_cast<std::size_t>(node_->rank());
  if (q > 0) {
    node_->enqueue_reduce_scatter_raw(buf, at(buf, lo, t), q, t, op, stream);
    cross_->enqueue_allreduce_raw(at(buf, lo, t), q, t, op, stream);
    node_->enqueue_allgather_raw(at(buf, lo, t), buf, q, t, stream);
  }
  if (n > head) {
    node_->enqueue_allreduce_raw(at(buf, head, t), n - head, t, op, stream);
    cross_->enqueue_allreduce_raw(at(buf, head, t), n - head, t, op, stream);
  }
}

void HierarchicalCommunicator::enqueue_reduce_scatter_raw(const void* send, void* recv,
                                                          std::size_t recvcount, DataType t,
                                                          ReduceOp op, void* stream) const {
  char* base = const_cast<char*>(static_cast<const char*>(send));
  TESSERA_EXPECTS(recv == at(base, static_cast<std::size_t>(rank_) * recvcount, t),
                  "an enqueued hierarchical reduce-scatter must be in place (recv == send + "
                  "rank() * recvcount)");
  const std::size_t share = static_cast<std::size_t>(cross_->size()) * recvcount;
  char* mine = at(base, share * static_cast<std::size_t>(node_->rank()), t);
  node_->enqueue_reduce_scatter_raw(base, mine, share, t, op, stream);
  cross_->enqueue_reduce_scatter_raw(
      mine, at(mine, recvcount * static_cast<std::size_t>(cross_->rank()), t), recvcount, t, op,
      stream);
}

void HierarchicalCommunicator::enqueue_allgather_raw(const void* send, void* recv,
                                                     std::size_t count, DataType t,
                                                     void* stream) const {
  const std::size_t share = static_cast<std::size_t>(cross_->size()) * count;
  char* mine = at(recv, share * static_cast<std::size_t>(node_->rank()), t);
  cross_->enqueue_allgather_raw(send, mine, count, t, stream);
  node_->enqueue_allgather_raw(mine, recv, share, t, stream);
}

void HierarchicalCommunicator::wait_stream(void* stream, const char* what) const {
  cross_->wait_stream(stream, what);
}

std::shared_ptr<const Communicator> with_hierarchy(std::shared_ptr<const Communicator> flat,
                                                   const NodeMap& map, Hierarchy h) {
  if (!use_hierarchy(h, map)) return flat;
  const Communicator& f = *flat;
  return std::make_shared<HierarchicalCommunicator>(f, map, std::move(flat));
}

NodeSplit::NodeSplit(const Communicator& flat, const NodeMap& map) {
  const int P = flat.size(), me = flat.rank();
  TESSERA_EXPECTS(static_cast<int>(map.node_of.size()) == P && map.uniform(),
                  "an exchange over nodes needs the node of every rank, the same count on "
                  "every node");
  node_members.assign(static_cast<std::size_t>(map.nodes()), {});
  const std::vector<int> slot = map.slots();
  for (int r = 0; r < P; ++r)
    node_members[static_cast<std::size_t>(map.node_of[static_cast<std::size_t>(r)])].push_back(r);
  my_node = map.node_of[static_cast<std::size_t>(me)];
  my_slot = slot[static_cast<std::size_t>(me)];
  node_ranks = node_members[static_cast<std::size_t>(my_node)];
  for (int r = 0; r < P; ++r)
    if (slot[static_cast<std::size_t>(r)] == my_slot) cross_ranks.push_back(r);
  node = flat.split(my_node, me);
  cross = flat.split(my_slot, me);
}

NodeRelays node_relays(const Communicator& c, const Communicator& data, const NodeMap& map,
                       Hierarchy h) {
  NodeRelays r;
  if (c.size() < 2 || static_cast<int>(map.node_of.size()) != c.size() || !use_hierarchy(h, map))
    return r;
  const int color = map.node_of[static_cast<std::size_t>(c.rank())];
  r.host = c.split(color, c.rank());
  if (&data != &c) r.data = data.split(color, c.rank());  // data's ranks are c's
  r.slot_of = map.slots();
  return r;
}

void allgatherv_by_nodes(const NodeSplit& ns, const void* send, void* recv,
                         const std::vector<std::int64_t>& counts,
                         const std::vector<std::int64_t>& displs, DataType t) {
  const std::size_t esize = size_of(t);
  auto* out = static_cast<unsigned char*>(recv);
  const int me = ns.node_ranks[static_cast<std::size_t>(ns.my_slot)];
  // 1. Across nodes, among the ranks of this slot: each its own share.
  {
    const std::size_t K = ns.cross_ranks.size();
    std::vector<std::int64_t> sc(K, counts[static_cast<std::size_t>(me)]), sd(K, 0), rc(K), rd(K);
    for (std::size_t i = 0; i < K; ++i) {
      rc[i] = counts[static_cast<std::size_t>(ns.cross_ranks[i])];
      rd[i] = displs[static_cast<std::size_t>(ns.cross_ranks[i])];
    }
    ns.cross->alltoallv_raw(send, sc.data(), sd.data(), recv, rc.data(), rd.data(), t);
  }
  // 2. Inside the node, once per node k: each rank passes on the share of the rank of its
  // slot on node k (its own for this node), and receives those of the other slots.
  const std::size_t G = ns.node_ranks.size();
  for (std::size_t k = 0; k < ns.node_members.size(); ++k) {
    const auto& members = ns.node_members[k];
    const int from = members[static_cast<std::size_t>(ns.my_slot)];
    const void* src =
        static_cast<int>(k) == ns.my_node
            ? send
            : out + static_cast<std::size_t>(displs[static_cast<std::size_t>(from)]) * esize;
    std::vector<std::int64_t> sc(G), sd(G, 0), rc(G), rd(G);
    for (std::size_t j = 0; j < G; ++j) {
      const bool self = static_cast<int>(j) == ns.my_slot;
      sc[j] = self ? 0 : counts[static_cast<std::size_t>(from)];
      rc[j] = self ? 0 : counts[static_cast<std::size_t>(members[j])];
      rd[j] = displs[static_cast<std::size_t>(members[j])];
    }
    ns.node->alltoallv_raw(src, sc.data(), sd.data(), recv, rc.data(), rd.data(), t);
  }
}

}  // namespace tessera::comm
