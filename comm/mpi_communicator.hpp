// MPI implementation of Communicator (host buffers) and MPI bootstrap.
#pragma once

#include <mpi.h>

#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"

/// Throws tessera::Error naming the failing MPI call and its error string.
#define TESSERA_MPI_CHECK(call)                                                       \
  do {                                                                                \
    int tessera_mpi_rc_ = (call);                                                     \
    if (tessera_mpi_rc_ != MPI_SUCCESS)                                               \
      ::tessera::comm::detail::throw_mpi(tessera_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

namespace tessera::comm {

namespace detail {
[[noreturn]] void throw_mpi(int rc, const char* call, const char* file, int line);
}

MPI_Datatype mpi_type(DataType t);
MPI_Op mpi_op(ReduceOp op);

/// Initialises MPI (thread level FUNNELED) on construction and finalises on
/// destruction, unless MPI was already initialised by someone else.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

 private:
  bool owns_ = false;
};

/// Communicator over an MPI_Comm. Owns the comm if created by split().
class MpiCommunicator final : public Communicator {
 public:
  /// Wraps (does not own) `comm`, e.g. MPI_COMM_WORLD.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, bool owned = false);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemorySpace memory_space() const override { return MemorySpace::host; }
  std::string name() const override { return "mpi"; }
  MPI_Comm mpi_comm() const { return comm_; }

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

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

/// The node of each rank of `world` (collective). `emulate_nodes` > 0: the ranks in that
/// many consecutive equal blocks, as jobs/slurm/launch.sh places emulated nodes
/// (TESSERA_EMULATE_NODES; it must divide the rank count). 0: the real nodes, the groups of
/// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
NodeMap node_map(const MpiCommunicator& world, int emulate_nodes);

}  // namespace tessera::comm
