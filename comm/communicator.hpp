// One interface for collectives over MPI (host buffers) and NCCL (device buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "util/memory_space.hpp"

namespace tessera::comm {

enum class DataType { i32, i64, u32, u64, f32, f64, u8 };
enum class ReduceOp { sum, max, min };

template <typename T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<std::int32_t>() {
  return DataType::i32;
}
template <>
constexpr DataType data_type_of<std::int64_t>() {
  return DataType::i64;
}
template <>
constexpr DataType data_type_of<std::uint32_t>() {
  return DataType::u32;
}
template <>
constexpr DataType data_type_of<std::uint64_t>() {
  return DataType::u64;
}
template <>
constexpr DataType data_type_of<float>() {
  return DataType::f32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::f64;
}
template <>
constexpr DataType data_type_of<std::uint8_t>() {
  return DataType::u8;
}
template <>
constexpr DataType data_type_of<char>() {
  return DataType::u8;
}

std::size_t size_of(DataType t);

/// Where a communicator's buffers live (util/memory_space.hpp).
using ::tessera::MemorySpace;

/// Collectives over a group of ranks. Buffers live in `memory_space()`.
/// Every call is collective over the group unless stated otherwise; counts are
/// element counts. In-place is allowed where noted (send == recv).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual MemorySpace memory_space() const = 0;
  virtual std::string name() const = 0;

  /// New communicator of the ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
  virtual void barrier() const = 0;

  /// In place: buf[0..n) = op over ranks.
  virtual void allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op) const = 0;
  /// send has recvcount * size() elements; rank r receives block r reduced over ranks.
  /// In place when recv == send + rank() * recvcount elements (the other blocks of send are
  /// then left undefined).
  virtual void reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount, DataType t,
                                  ReduceOp op) const = 0;
  /// recv has count * size() elements, block r from rank r. In place when send == recv +
  /// rank() * count elements.
  virtual void allgather_raw(const void* send, void* recv, std::size_t count, DataType t) const = 0;
  virtual void broadcast_raw(void* buf, std::size_t n, DataType t, int root) const = 0;
  /// Element counts and displacements per peer, as MPI_Alltoallv.
  virtual void alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                             const std::int64_t* sdispls, void* recv,
                             const std::int64_t* recvcounts, const std::int64_t* rdispls,
                             DataType t) const = 0;

  // ---- stream-ordered collectives (device communicators; docs/multi-gpu.md) ----
  /// True when the enqueue_* calls and wait_stream below are available (NCCL: collectives
  /// ordered in a compute stream, and captured into a CUDA graph when that stream is being
  /// captured). Host communicators answer false and throw from them.
  virtual bool can_enqueue() const { return false; }
  /// Device memory its initialisation took (NCCL's connection buffers, measured as the drop
  /// in free device memory; 0 for host communicators). The planner counts this much for
  /// each communicator split from it later (the layer strategy's per-mode ones).
  virtual std::uint64_t device_buffer_bytes() const { return 0; }
  /// Host memory its initialisation took: the growth of the process's private resident
  /// memory (util::private_resident_bytes: NCCL's proxy state, pinned and shared-memory
  /// segments) across it; 0 for host communicators or when it cannot be read. Planned, as
  /// device_buffer_bytes, for each communicator split from it later.
  virtual std::uint64_t host_buffer_bytes() const { return 0; }
  /// Enqueues an in-place allreduce of the device buffer in `stream` (a cudaStream_t)
  /// after the work already there, and returns without waiting: work enqueued in `stream`
  /// afterwards sees the result.
  virtual void enqueue_allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op,
                                     void* stream) const;
  /// As reduce_scatter_raw, enqueued in `stream`; in place when recv == send + rank() *
  /// recvcount elements.
  virtual void enqueue_reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount,
                                          DataType t, ReduceOp op, void* stream) const;
  /// As allgather_raw, enqueued in `stream`; in place when send == recv + rank() * count
  /// elements.
  virtual void enqueue_allgather_raw(const void* send, void* recv, std::size_t count, DataType t,
                                     void* stream) const;
  /// As alltoallv_raw (device buffers, counts and displacements on the host), enqueued in
  /// `stream`.
  virtual void enqueue_alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                                     const std::int64_t* sdispls, void* recv,
                                     const std::int64_t* recvcounts, const std::int64_t* rdispls,
                                     DataType t, void* stream) const;
  /// Blocks until `stream` has run all its work, polling this communicator's error state as
  /// the blocking calls do: a failed peer or a wait past the communicator's timeout aborts
  /// it and throws, naming this rank and `what`.
  virtual void wait_stream(void* stream, const char* what) const;

  // ---- typed helpers ----
  template <typename T>
  void allreduce(T* buf, std::size_t n, ReduceOp op = ReduceOp::sum) const {
    allreduce_raw(buf, n, data_type_of<T>(), op);
  }
  template <typename T>
  T allreduce_value(T v, ReduceOp op = ReduceOp::sum) const {
    static_assert(sizeof(T) <= 8);
    allreduce_raw(&v, 1, data_type_of<T>(), op);  // a host scalar (NCCL stages it)
    return v;
  }
  template <typename T>
  void reduce_scatter(const T* send, T* recv, std::size_t recvcount,
                      ReduceOp op = ReduceOp::sum) const {
    reduce_scatter_raw(send, recv, recvcount, data_type_of<T>(), op);
  }
  template <typename T>
  void enqueue_allreduce(T* buf, std::size_t n, ReduceOp op, void* stream) const {
    enqueue_allreduce_raw(buf, n, data_type_of<T>(), op, stream);
  }
  template <typename T>
  void enqueue_reduce_scatter(const T* send, T* recv, std::size_t recvcount, void* stream) const {
    enqueue_reduce_scatter_raw(send, recv, recvcount, data_type_of<T>(), ReduceOp::sum, stream);
  }
  template <typename T>
  void enqueue_allgather(const T* send, T* recv, std::size_t count, void* stream) const {
    enqueue_allgather_raw(send, recv, count, data_type_of<T>(), stream);
  }
  template <typename T>
  void allgather(const T* send, T* recv, std::size_t count) const {
    allgather_raw(send, recv, count, data_type_of<T>());
  }
  template <typename T>
  void broadcast(T* buf, std::size_t n, int root) const {
    broadcast_raw(buf, n, data_type_of<T>(), root);
  }
  /// Host vectors: exchanges counts first, returns received elements, in rank order.
  /// Only for host communicators.
  template <typename T>
  std::vector<T> alltoallv(const std::vector<T>& send, const std::vector<std::int64_t>& sendcounts,
                           std::vector<std::int64_t>* recvcounts_out = nullptr) const;
};

/// Displacements of blocks packed in rank order: the exclusive prefix sums of counts.
inline std::vector<std::int64_t> displacements(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> d(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), d.begin(), std::int64_t{0});
  return d;
}

/// The largest and the mean of a value over the ranks of c (a rank's time per iteration:
/// the slowest rank and the ranks' mean). Collective; c a host communicator.
struct MaxMean {
  double max = 0, mean = 0;
};
inline MaxMean max_and_mean(const Communicator& c, double x) {
  double v[2] = {x, x};
  c.allreduce(&v[0], 1, ReduceOp::max);
  c.allreduce(&v[1], 1);
  return {v[0], v[1] / c.size()};
}

/// Exchange counts (host) for alltoallv: returns recvcounts.
std::vector<std::int64_t> exchange_counts(const Communicator& c,
                                          const std::vector<std::int64_t>& sendcounts);

template <typename T>
std::vector<T> Communicator::alltoallv(const std::vector<T>& send,
                                       const std::vector<std::int64_t>& sendcounts,
                                       std::vector<std::int64_t>* recvcounts_out) const {
  const int p = size();
  std::vector<std::int64_t> recvcounts = exchange_counts(*this, sendcounts);
  const std::vector<std::int64_t> sd = displacements(sendcounts), rd = displacements(recvcounts);
  std::vector<T> recv(static_cast<std::size_t>(rd[p - 1] + recvcounts[p - 1]));
  alltoallv_raw(send.data(), sendcounts.data(), sd.data(), recv.data(), recvcounts.data(),
                rd.data(), data_type_of<T>());
  if (recvcounts_out) *recvcounts_out = std::move(recvcounts);
  return recv;
}

/// Collective error agreement. Every rank calls it after a step that may fail on some
/// ranks only (parsing, validation). If any rank passes a non-null exception, every
/// rank throws tessera::CollectiveError carrying the message of the lowest failing rank
/// (an InputError keeps its text as is). Must be called on a host communicator.
void raise_collectively(const Communicator& c, std::exception_ptr local_error);

/// Runs f() on every rank and agrees on failure as raise_collectively does.
template <typename F>
void run_collectively(const Communicator& c, F&& f) {
  std::exception_ptr e;
  try {
    f();
  } catch (...) {
    e = std::current_exception();
  }
  raise_collectively(c, e);
}

}  // namespace tessera::comm
