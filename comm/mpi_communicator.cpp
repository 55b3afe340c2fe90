#include "comm/mpi_communicator.hpp"

#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"
#include "util/mpi_env.hpp"
#include "util/sanitizer.hpp"

namespace tessera::comm {

namespace detail {
void throw_mpi(int rc, const char* call, const char* file, int line) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  std::ostringstream os;
  os << "MPI call failed: " << call << ": " << std::string(buf, static_cast<std::size_t>(len))
     << " [" << file << ":" << line << "]";
  throw Error(os.str());
}
}  // namespace detail

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::i32:
      return 4;
    case DataType::i64:
      return 8;
    case DataType::u32:
      return 4;
    case DataType::u64:
      return 8;
    case DataType::f32:
      return 4;
    case DataType::f64:
      return 8;
    case DataType::u8:
      return 1;
  }
  return 1;
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::i64:
      return MPI_INT64_T;
    case DataType::u32:
      return MPI_UINT32_T;
    case DataType::u64:
      return MPI_UINT64_T;
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
    case DataType::u8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    const util::MpiInitEnv env;        // no helper daemon for a singleton (util/mpi_env.hpp)
    const util::LeakCheckPause pause;  // OpenMPI's own allocations (util/sanitizer.hpp)
    TESSERA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    owns_ = true;
  }
  int r = 0, s = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  log::set_rank(r, s);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) {
    util::leak_check_before_mpi_finalize();  // sanitizer builds only (util/sanitizer.hpp)
    MPI_Finalize();
  }
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  TESSERA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm c = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split(comm_, color, key, &c));
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(c, true);
}

void MpiCommunicator::barrier() const {
  TESSERA_MPI_CHECK(MPI_Barrier(comm_));
}

namespace {
// MPI counts are int: large buffers go in pieces.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;
}  // namespace

void MpiCommunicator::allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op) const {
  util::fault::at(util::fault::Point::collective);
  auto* p = static_cast<char*>(buf);
  const std::size_t es = size_of(t);
  for (std::size_t off = 0; off < n; off += kMaxChunk) {
    int cnt = static_cast<int>(std::min(kMaxChunk, n - off));
    TESSERA_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, p + off * es, cnt, mpi_type(t), mpi_op(op), comm_));
  }
}

void MpiCommunicator::reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount,
                                         DataType t, ReduceOp op) const {
  util::fault::at(util::fault::Point::collective);
  TESSERA_EXPECTS(recvcount <= static_cast<std::size_t>(INT_MAX),
                  "reduce_scatter block too large for MPI");
  const std::size_t bytes = recvcount * size_of(t);
  if (recv != static_cast<const char*>(send) + bytes * static_cast<std::size_t>(rank_)) {
    TESSERA_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(recvcount), mpi_type(t),
                                               mpi_op(op), comm_));
    return;
  }
  // In place (the NCCL convention, recv == send + rank * recvcount): MPI_IN_PLACE leaves the
  // result at the start of the buffer; it moves to this rank's block.
  void* base = const_cast<void*>(send);
  TESSERA_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, static_cast<int>(recvcount),
                                             mpi_type(t), mpi_op(op), comm_));
  if (rank_ != 0 && bytes > 0) std::memmove(recv, base, bytes);
}

void MpiCommunicator::allgather_raw(const void* send, void* recv, std::size_t count,
                                    DataType t) const {
  util::fault::at(util::fault::Point::collective);
  TESSERA_EXPECTS(count <= static_cast<std::size_t>(INT_MAX), "allgather block too large for MPI");
  const void* s = send;
  if (send == static_cast<const char*>(recv) + count * size_of(t) * rank_) s = MPI_IN_PLACE;
  TESSERA_MPI_CHECK(MPI_Allgather(s, static_cast<int>(count), mpi_type(t), recv,
                                  static_cast<int>(count), mpi_type(t), comm_));
}

void MpiCommunicator::broadcast_raw(void* buf, std::size_t n, DataType t, int root) const {
  util::fault::at(util::fault::Point::collective);
  auto* p = static_cast<char*>(buf);
  const std::size_t es = size_of(t);
  for (std::size_t off = 0; off < n; off += kMaxChunk) {
    int cnt = static_cast<int>(std::min(kMaxChunk, n - off));
    TESSERA_MPI_CHECK(MPI_Bcast(p + off * es, cnt, mpi_type(t), root, comm_));
  }
}

void MpiCommunicator::alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                                    const std::int64_t* sdispls, void* recv,
                                    const std::int64_t* recvcounts, const std::int64_t* rdispls,
                                    DataType t) const {
  const int p = size_;
  util::fault::at(util::fault::Point::collective);
  // MPI forbids a send buffer inside the receive buffer (allgatherv_by_nodes passes on a
  // share it received earlier): the sent elements are staged in a copy then.
  {
    const std::size_t es = size_of(t);
    std::int64_t s_end = 0, r_end = 0;
    for (int r = 0; r < p; ++r) {
      if (sendcounts[r] > 0) s_end = std::max(s_end, sdispls[r] + sendcounts[r]);
      if (recvcounts[r] > 0) r_end = std::max(r_end, rdispls[r] + recvcounts[r]);
    }
    const auto* s0 = static_cast<const char*>(send);
    const auto* r0 = static_cast<const char*>(recv);
    const std::size_t sb = static_cast<std::size_t>(s_end) * es,
                      rb = static_cast<std::size_t>(r_end) * es;
    if (sb > 0 && rb > 0 && s0 < r0 + rb && r0 < s0 + sb) {
      const std::vector<char> copy(s0, s0 + sb);
      alltoallv_raw(copy.data(), sendcounts, sdispls, recv, recvcounts, rdispls, t);
      return;
    }
  }
  bool fits = true;
  for (int r = 0; r < p; ++r) {
    fits = fits && sendcounts[r] + sdispls[r] <= INT_MAX && recvcounts[r] + rdispls[r] <= INT_MAX;
  }
  if (fits) {
    std::vector<int> sc(p), sd(p), rc(p), rd(p);
    for (int r = 0; r < p; ++r) {
      sc[r] = static_cast<int>(sendcounts[r]);
      sd[r] = static_cast<int>(sdispls[r]);
      rc[r] = static_cast<int>(recvcounts[r]);
      rd[r] = static_cast<int>(rdispls[r]);
    }
    TESSERA_MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), mpi_type(t), recv, rc.data(),
                                    rd.data(), mpi_type(t), comm_));
    return;
  }
  // Large exchange: pairwise rounds, each message in pieces of at most kMaxChunk.
  const std::size_t es = size_of(t);
  const auto* s = static_cast<const char*>(send);
  auto* d = static_cast<char*>(recv);
  for (int step = 0; step < p; ++step) {
    int to = (rank_ + step) % p;
    int from = (rank_ - step + p) % p;
    std::int64_t ns = sendcounts[to], nr = recvcounts[from];
    std::int64_t os = 0, orr = 0;
    while (os < ns || orr < nr) {
      int cs = static_cast<int>(std::min<std::int64_t>(kMaxChunk, ns - os));
      int cr = static_cast<int>(std::min<std::int64_t>(kMaxChunk, nr - orr));
      TESSERA_MPI_CHECK(MPI_Sendrecv(s + (sdispls[to] + os) * es, cs, mpi_type(t), to, 7,
                                     d + (rdispls[from] + orr) * es, cr, mpi_type(t), from, 7,
                                     comm_, MPI_STATUS_IGNORE));
      os += cs;
      orr += cr;
    }
  }
}

namespace {
[[noreturn]] void no_enqueue(const Communicator& c, const char* call) {
  TESSERA_THROW(call << ": the " << c.name()
                     << " communicator has no stream-ordered collectives (device "
                        "communicators only; check can_enqueue())");
}
}  // namespace

void Communicator::enqueue_allreduce_raw(void*, std::size_t, DataType, ReduceOp, void*) const {
  no_enqueue(*this, "enqueue_allreduce");
}
void Communicator::enqueue_reduce_scatter_raw(const void*, void*, std::size_t, DataType, ReduceOp,
                                              void*) const {
  no_enqueue(*this, "enqueue_reduce_scatter");
}
void Communicator::enqueue_allgather_raw(const void*, void*, std::size_t, DataType, void*) const {
  no_enqueue(*this, "enqueue_allgather");
}
void Communicator::enqueue_alltoallv_raw(const void*, const std::int64_t*, const std::int64_t*,
                                         void*, const std::int64_t*, const std::int64_t*, DataType,
                                         void*) const {
  no_enqueue(*this, "enqueue_alltoallv");
}
void Communicator::wait_stream(void*, const char*) const {
  no_enqueue(*this, "wait_stream");
}

std::vector<std::int64_t> exchange_counts(const Communicator& c,
                                          const std::vector<std::int64_t>& sendcounts) {
  TESSERA_EXPECTS(static_cast<int>(sendcounts.size()) == c.size(), "one send count per rank");
  TESSERA_EXPECTS(c.memory_space() == MemorySpace::host,
                  "count exchange needs a host communicator");
  const int p = c.size();
  std::vector<std::int64_t> ones(p, 1), disp(p);
  for (int r = 0; r < p; ++r) disp[r] = r;
  std::vector<std::int64_t> recv(p);
  c.alltoallv_raw(sendcounts.data(), ones.data(), disp.data(), recv.data(), ones.data(),
                  disp.data(), DataType::i64);
  return recv;
}

void raise_collectively(const Communicator& c, std::exception_ptr local_error) {
  TESSERA_EXPECTS(c.memory_space() == MemorySpace::host,
                  "raise_collectively needs a host communicator");
  std::string msg;
  bool input = false;
  if (local_error) {
    try {
      std::rethrow_exception(local_error);
    } catch (const InputError& e) {
      msg = e.what();
      input = true;
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
      msg = "unknown error";
    }
  }
  std::int32_t first = local_error ? c.rank() : c.size();
  c.allreduce(&first, 1, ReduceOp::min);
  if (first == c.size()) return;
  std::int64_t len = static_cast<std::int64_t>(msg.size());
  std::int32_t in = input ? 1 : 0;
  c.broadcast(&len, 1, first);
  c.broadcast(&in, 1, first);
  msg.resize(static_cast<std::size_t>(len));
  if (len > 0) c.broadcast(msg.data(), msg.size(), first);
  if (c.size() > 1 && first != 0 && in == 0) msg += " (on rank " + std::to_string(first) + ")";
  throw CollectiveError(msg);
}

NodeMap node_map(const MpiCommunicator& world, int emulate_nodes) {
  const int P = world.size();
  if (emulate_nodes > 0) {
    TESSERA_INPUT_CHECK(P % emulate_nodes == 0, "--emulate-nodes " << emulate_nodes
                                                                   << " does not divide the " << P
                                                                   << " ranks into equal nodes");
    return block_node_map(P, P / emulate_nodes);
  }
  // Each node named by its lowest rank, gathered; numbered by first appearance.
  MPI_Comm shared = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(),
                                        MPI_INFO_NULL, &shared));
  MpiCommunicator node(shared, true);
  std::int32_t leader = world.rank();
  node.allreduce(&leader, 1, ReduceOp::min);
  std::vector<std::int32_t> leaders(static_cast<std::size_t>(P));
  world.allgather(&leader, leaders.data(), 1);
  std::vector<int> index(static_cast<std::size_t>(P), -1);
  NodeMap m;
  int next = 0;
  for (const std::int32_t l : leaders) {
    int& i = index[static_cast<std::size_t>(l)];
    if (i < 0) i = next++;
    m.node_of.push_back(i);
  }
  return m;
}

int local_rank(const MpiCommunicator& boot) {
  const std::uint64_t h = std::hash<std::string>{}(log::hostname());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(boot.size()));
  boot.allgather(&h, all.data(), 1);
  int lr = 0;
  for (int r = 0; r < boot.rank(); ++r) lr += (all[r] == h) ? 1 : 0;
  return lr;
}

bool share_gpu_requested() {
  const char* e = std::getenv("TESSERA_SHARE_GPU");
  if (!e) return false;
  std::string v(e);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "0" || v == "no" || v == "off" || v == "false") return false;
  if (v == "1" || v == "yes" || v == "on" || v == "true") return true;
  TESSERA_INPUT_CHECK(false, "TESSERA_SHARE_GPU=" << e
                                                  << ": expected 1 (several ranks may share "
                                                     "one GPU, for testing) or 0");
  return false;
}

}  // namespace tessera::comm
