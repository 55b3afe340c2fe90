// NCCL implementation of Communicator: device buffers, one CUDA stream per communicator,
// bootstrapped from MPI.
//
// Every call returns only after the operation has completed on the device (the
// algorithms use results right away). Completion is awaited by polling the stream and
// ncclCommGetAsyncError: an asynchronous NCCL error (a peer or the network failed)
// aborts the communicator and throws, and so does a wait longer than the creation
// option's timeout (NcclOptions::timeout_s, the drivers' --nccl-timeout: default 1800 s,
// 0 = no limit), so a dead or stuck rank
// ends the job with a message instead of a hang. Communicators are created non-blocking
// (ncclConfig_t::blocking = 0) so that initialisation and split can be polled the same way.
//
// Ordering with compute: before a collective is enqueued, the communicator's stream waits
// for an event recorded on the legacy default stream, i.e. for all work enqueued earlier
// on any blocking stream of the device (the CUDA backend's stream is one). Buffers written
// on a cudaStreamNonBlocking stream must be synchronised by their producer first.
//
// Host buffers (e.g. from Communicator::allreduce_value) are accepted and staged through
// device scratch: correct, but meant for scalars, not for bulk data.
//
// The stream-ordered calls (enqueue_*) are the exception to all of the above: device
// buffers only, enqueued in the caller's stream (the CUDA backend's, so ordered with its
// kernels without an event), not waited for, and captured into the caller's CUDA graph
// when that stream is capturing (the CP device loop on several GPUs, docs/multi-gpu.md).
// wait_stream() then waits for the caller's stream with the same polling and timeout.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"
#include "util/sysfs.hpp"

namespace tessera::comm {

namespace {

[[noreturn]] void throw_nccl(ncclResult_t r, const char* call, const char* file, int line,
                             const char* detail = nullptr) {
  std::ostringstream os;
  os << "NCCL call failed: " << call << ": " << ncclGetErrorString(r);
  if (detail && *detail) os << " (" << detail << ")";
  os << " [" << file << ":" << line << "]";
  throw Error(os.str());
}

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA call failed: " << call << ": " << cudaGetErrorName(e) << ": " << cudaGetErrorString(e)
     << " [" << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace

}  // namespace tessera::comm

/// Throws tessera::Error with the call, ncclGetErrorString, file and line. ncclInProgress
/// is not an error: communicators are non-blocking and completion is polled separately.
#define TESSERA_NCCL_CHECK(call)                                                \
  do {                                                                          \
    ncclResult_t tessera_nccl_rc_ = (call);                                     \
    if (tessera_nccl_rc_ != ncclSuccess && tessera_nccl_rc_ != ncclInProgress)  \
      ::tessera::comm::throw_nccl(tessera_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define TESSERA_NCCL_CUDA_CHECK(call)                                           \
  do {                                                                          \
    cudaError_t tessera_cuda_rc_ = (call);                                      \
    if (tessera_cuda_rc_ != cudaSuccess)                                        \
      ::tessera::comm::throw_cuda(tessera_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

/// No-throw variant for destructors: reports on stderr.
#define TESSERA_NCCL_CHECK_NOTHROW(call)                                                    \
  do {                                                                                      \
    ncclResult_t tessera_nccl_rc_ = (call);                                                 \
    if (tessera_nccl_rc_ != ncclSuccess && tessera_nccl_rc_ != ncclInProgress)              \
      std::fprintf(stderr, "warning: NCCL call failed in cleanup: %s: %s [%s:%d]\n", #call, \
                   ncclGetErrorString(tessera_nccl_rc_), __FILE__, __LINE__);               \
  } while (0)

namespace tessera::comm {

namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::i32:
      return ncclInt32;
    case DataType::i64:
      return ncclInt64;
    case DataType::u32:
      return ncclUint32;
    case DataType::u64:
      return ncclUint64;
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::u8:
      return ncclUint8;
  }
  TESSERA_THROW("unknown DataType " << static_cast<int>(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  TESSERA_THROW("unknown ReduceOp " << static_cast<int>(op));
}

/// Grow-only device scratch for staging host buffers.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch() { release(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void release() noexcept {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      if (p_) TESSERA_NCCL_CUDA_CHECK(cudaFree(p_));
      p_ = nullptr;
      bytes_ = 0;
      TESSERA_NCCL_CUDA_CHECK(cudaMalloc(&p_, bytes));
      bytes_ = bytes;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (already initialised) on CUDA device `device`.
  NcclCommunicator(ncclComm_t comm, int device, double timeout_s, std::uint64_t init_bytes = 0,
                   std::uint64_t init_host_bytes = 0)
      : comm_(comm),
        device_(device),
        timeout_s_(timeout_s),
        init_bytes_(init_bytes),
        init_host_bytes_(init_host_bytes) {
    try {
      TESSERA_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
      TESSERA_NCCL_CHECK(ncclCommCount(comm_, &size_));
      TESSERA_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      TESSERA_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    } catch (...) {
      ncclCommAbort(comm_);
      if (stream_) cudaStreamDestroy(stream_);
      throw;
    }
  }

  ~NcclCommunicator() override {
    int prev = device_;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    if (comm_) {
      ncclResult_t st = ncclSuccess;
      const bool healthy = !aborted_ && ncclCommGetAsyncError(comm_, &st) == ncclSuccess &&
                           st == ncclSuccess && std::uncaught_exceptions() == 0;
      if (healthy && finalize()) {
        TESSERA_NCCL_CHECK_NOTHROW(ncclCommDestroy(comm_));
      } else {
        // Unwinding after an error, or the communicator failed: do not wait for peers.
        TESSERA_NCCL_CHECK_NOTHROW(ncclCommAbort(comm_));
      }
      comm_ = nullptr;
    }
    staging_[0].release();
    staging_[1].release();
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    if (prev != device_) cudaSetDevice(prev);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemorySpace memory_space() const override { return MemorySpace::device; }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    TESSERA_EXPECTS(color >= 0, "split color " << color << ": every rank needs a color >= 0");
    Prologue pro(*this);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t child = nullptr;
    ncclResult_t r = ncclCommSplit(comm_, color, key, &child, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) fail(r, "ncclCommSplit");
    // With a non-blocking parent, NCCL fills `child` only once the parent has left
    // ncclInProgress (NCCL issue 1472): wait for the parent first, then for the child.
    settle();
    TESSERA_EXPECTS(child != nullptr, "ncclCommSplit gave no communicator for color " << color);
    wait_ready(child, "ncclCommSplit", timeout_s_);
    return std::make_unique<NcclCommunicator>(child, device_, timeout_s_);
  }

  void barrier() const override {
    Prologue pro(*this);
    void* d = staging_[0].get(sizeof(std::int32_t));
    TESSERA_NCCL_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(std::int32_t), stream_));
    TESSERA_NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm_, stream_));
    wait("barrier (ncclAllReduce)");
  }

  void allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op) const override {
    if (n == 0) return;
    Prologue pro(*this);
    Staged b(*this, buf, n * size_of(t), 0, true);
    TESSERA_NCCL_CHECK(ncclAllReduce(b.dev, b.dev, n, nccl_type(t), nccl_op(op), comm_, stream_));
    wait("ncclAllReduce");
    b.copy_back();
  }

  void reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount, DataType t,
                          ReduceOp op) const override {
    if (recvcount == 0) return;
    Prologue pro(*this);
    const std::size_t bytes = recvcount * size_of(t);
    Staged s(*this, const_cast<void*>(send), bytes * static_cast<std::size_t>(size_), 0, true);
    Staged r(*this, recv, bytes, 1, false);
    TESSERA_NCCL_CHECK(
        ncclReduceScatter(s.dev, r.dev, recvcount, nccl_type(t), nccl_op(op), comm_, stream_));
    wait("ncclReduceScatter");
    r.copy_back();
  }

  void allgather_raw(const void* send, void* recv, std::size_t count, DataType t) const override {
    if (count == 0) return;
    Prologue pro(*this);
    const std::size_t bytes = count * size_of(t);
    Staged s(*this, const_cast<void*>(send), bytes, 0, true);
    Staged r(*this, recv, bytes * static_cast<std::size_t>(size_), 1, false);
    TESSERA_NCCL_CHECK(ncclAllGather(s.dev, r.dev, count, nccl_type(t), comm_, stream_));
    wait("ncclAllGather");
    r.copy_back();
  }

  void broadcast_raw(void* buf, std::size_t n, DataType t, int root) const override {
    TESSERA_EXPECTS(root >= 0 && root < size_, "broadcast root " << root << " of " << size_);
    if (n == 0) return;
    Prologue pro(*this);
    Staged b(*this, buf, n * size_of(t), 0, rank_ == root);
    TESSERA_NCCL_CHECK(ncclBroadcast(b.dev, b.dev, n, nccl_type(t), root, comm_, stream_));
    wait("ncclBroadcast");
    b.copy_back();
  }

  void alltoallv_raw(const void* send, const std::int64_t* sendcounts, const std::int64_t* sdispls,
                     void* recv, const std::int64_t* recvcounts, const std::int64_t* rdispls,
                     DataType t) const override {
    const Extents e = extents(sendcounts, sdispls, recvcounts, rdispls);
    const std::size_t es = size_of(t);
    Prologue pro(*this);
    // Staged receive buffers are filled first, so gaps between blocks keep their values.
    Staged s(*this, const_cast<void*>(send), static_cast<std::size_t>(e.send_end) * es, 0, true);
    Staged r(*this, recv, static_cast<std::size_t>(e.recv_end) * es, 1, true);
    post_alltoallv(s.dev, sendcounts, sdispls, r.dev, recvcounts, rdispls, t, stream_);
    wait("alltoallv (ncclSend/ncclRecv)");
    r.copy_back();
  }

  // ---- stream-ordered collectives: no staging, no wait; the caller's stream orders them ----
  bool can_enqueue() const override { return true; }
  std::uint64_t device_buffer_bytes() const override { return init_bytes_; }
  std::uint64_t host_buffer_bytes() const override { return init_host_bytes_; }

  void enqueue_allreduce_raw(void* buf, std::size_t n, DataType t, ReduceOp op,
                             void* stream) const override {
    if (n == 0) return;
    EnqueuePrologue pro(*this);
    enqueued(ncclAllReduce(buf, buf, n, nccl_type(t), nccl_op(op), comm_,
                           static_cast<cudaStream_t>(stream)),
             "ncclAllReduce (stream-ordered)");
  }

  void enqueue_reduce_scatter_raw(const void* send, void* recv, std::size_t recvcount, DataType t,
                                  ReduceOp op, void* stream) const override {
    if (recvcount == 0) return;
    EnqueuePrologue pro(*this);
    enqueued(ncclReduceScatter(send, recv, recvcount, nccl_type(t), nccl_op(op), comm_,
                               static_cast<cudaStream_t>(stream)),
             "ncclReduceScatter (stream-ordered)");
  }

  void enqueue_allgather_raw(const void* send, void* recv, std::size_t count, DataType t,
                             void* stream) const override {
    if (count == 0) return;
    EnqueuePrologue pro(*this);
    enqueued(
        ncclAllGather(send, recv, count, nccl_type(t), comm_, static_cast<cudaStream_t>(stream)),
        "ncclAllGather (stream-ordered)");
  }

  void enqueue_alltoallv_raw(const void* send, const std::int64_t* sendcounts,
                             const std::int64_t* sdispls, void* recv,
                             const std::int64_t* recvcounts, const std::int64_t* rdispls,
                             DataType t, void* stream) const override {
    (void)extents(sendcounts, sdispls, recvcounts, rdispls);
    EnqueuePrologue pro(*this);
    post_alltoallv(send, sendcounts, sdispls, recv, recvcounts, rdispls, t,
                   static_cast<cudaStream_t>(stream));
    settle();  // in the stream before the caller enqueues more
  }

  void wait_stream(void* stream, const char* what) const override {
    EnqueuePrologue pro(*this);
    wait_on(static_cast<cudaStream_t>(stream), what);
  }

  /// Polls the initialisation of a non-blocking communicator (init or split) until it is
  /// ready; on error or timeout aborts it and throws.
  static void wait_ready(ncclComm_t c, const char* what, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      ncclResult_t st = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(c, &st);
      if (q != ncclSuccess) st = q;
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) {
        std::string detail = ncclGetLastError(c);
        ncclCommAbort(c);
        throw_nccl(st, what, __FILE__, __LINE__, detail.c_str());
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout_s > 0 && s > timeout_s) {
        ncclCommAbort(c);
        TESSERA_THROW(what << " did not complete within " << timeout_s << " s on rank "
                           << log::rank() << " (" << log::hostname()
                           << "): a peer rank may have died or not called it; "
                              "--nccl-timeout sets the limit");
      }
      backoff(spins);
    }
  }

 private:
  /// Where an alltoallv's blocks end (elements), after checking its counts.
  struct Extents {
    std::int64_t send_end = 0, recv_end = 0;
  };
  Extents extents(const std::int64_t* sendcounts, const std::int64_t* sdispls,
                  const std::int64_t* recvcounts, const std::int64_t* rdispls) const {
    Extents e;
    for (int p = 0; p < size_; ++p) {
      TESSERA_EXPECTS(
          sendcounts[p] >= 0 && sdispls[p] >= 0 && recvcounts[p] >= 0 && rdispls[p] >= 0,
          "negative alltoallv count or displacement for peer " << p);
      if (sendcounts[p] > 0) e.send_end = std::max(e.send_end, sdispls[p] + sendcounts[p]);
      if (recvcounts[p] > 0) e.recv_end = std::max(e.recv_end, rdispls[p] + recvcounts[p]);
    }
    TESSERA_EXPECTS(sendcounts[rank_] == recvcounts[rank_],
                    "alltoallv: " << sendcounts[rank_] << " elements sent to self but "
                                  << recvcounts[rank_] << " expected");
    return e;
  }

  /// The exchange of device buffers in `stream`: this rank's own block by a copy, the others
  /// by one group of ncclSend/ncclRecv. Not waited for.
  void post_alltoallv(const void* send, const std::int64_t* sendcounts, const std::int64_t* sdispls,
                      void* recv, const std::int64_t* recvcounts, const std::int64_t* rdispls,
                      DataType t, cudaStream_t stream) const {
    const std::size_t es = size_of(t);
    auto* sb = static_cast<const char*>(send);
    auto* rb = static_cast<char*>(recv);
    if (sendcounts[rank_] > 0)
      TESSERA_NCCL_CUDA_CHECK(cudaMemcpyAsync(rb + rdispls[rank_] * es, sb + sdispls[rank_] * es,
                                              static_cast<std::size_t>(sendcounts[rank_]) * es,
                                              cudaMemcpyDeviceToDevice, stream));
    const ncclDataType_t nt = nccl_type(t);
    ncclResult_t first_error = ncclSuccess;
    const char* failed = nullptr;
    TESSERA_NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < size_ && first_error == ncclSuccess; ++p) {
      if (p == rank_) continue;
      ncclResult_t e = ncclSuccess;
      if (sendcounts[p] > 0) {
        e = ncclSend(sb + sdispls[p] * es, static_cast<std::size_t>(sendcounts[p]), nt, p, comm_,
                     stream);
        if (e != ncclSuccess && e != ncclInProgress) failed = "ncclSend";
      }
      if ((e == ncclSuccess || e == ncclInProgress) && recvcounts[p] > 0) {
        e = ncclRecv(rb + rdispls[p] * es, static_cast<std::size_t>(recvcounts[p]), nt, p, comm_,
                     stream);
        if (e != ncclSuccess && e != ncclInProgress) failed = "ncclRecv";
      }
      if (e != ncclSuccess && e != ncclInProgress) first_error = e;
    }
    // The group is always closed, also after an error, or later NCCL calls would break.
    const ncclResult_t ge = ncclGroupEnd();
    if (first_error != ncclSuccess) fail(first_error, failed);
    if (ge != ncclSuccess && ge != ncclInProgress) fail(ge, "ncclGroupEnd (alltoallv)");
  }

  /// Per-call setup: this communicator's device is current (restored afterwards), the
  /// communicator is usable, and the stream is ordered after earlier device work.
  class Prologue {
   public:
    explicit Prologue(const NcclCommunicator& c) {
      TESSERA_EXPECTS(!c.aborted_, "the NCCL communicator was aborted after an earlier error");
      TESSERA_NCCL_CUDA_CHECK(cudaGetDevice(&prev_));
      if (prev_ != c.device_) TESSERA_NCCL_CUDA_CHECK(cudaSetDevice(c.device_));
      changed_ = prev_ != c.device_;
      c.settle();
      TESSERA_NCCL_CUDA_CHECK(cudaEventRecord(c.ready_, cudaStreamLegacy));
      TESSERA_NCCL_CUDA_CHECK(cudaStreamWaitEvent(c.stream_, c.ready_, 0));
    }
    ~Prologue() {
      if (changed_) cudaSetDevice(prev_);
    }
    Prologue(const Prologue&) = delete;
    Prologue& operator=(const Prologue&) = delete;

   private:
    int prev_ = 0;
    bool changed_ = false;
  };

  /// Per-call setup of the stream-ordered calls: this communicator's device is current and
  /// the communicator usable; nothing is recorded on other streams (a capture may run).
  class EnqueuePrologue {
   public:
    explicit EnqueuePrologue(const NcclCommunicator& c) {
      TESSERA_EXPECTS(!c.aborted_, "the NCCL communicator was aborted after an earlier error");
      TESSERA_NCCL_CUDA_CHECK(cudaGetDevice(&prev_));
      if (prev_ != c.device_) TESSERA_NCCL_CUDA_CHECK(cudaSetDevice(c.device_));
      changed_ = prev_ != c.device_;
      c.settle();
    }
    ~EnqueuePrologue() {
      if (changed_) cudaSetDevice(prev_);
    }
    EnqueuePrologue(const EnqueuePrologue&) = delete;
    EnqueuePrologue& operator=(const EnqueuePrologue&) = delete;

   private:
    int prev_ = 0;
    bool changed_ = false;
  };

  /// The answer of an enqueueing call: an error aborts and throws; ncclInProgress (a
  /// non-blocking communicator still connecting, or launching) is polled until the
  /// collective is in the stream, so that work the caller enqueues next runs after it.
  void enqueued(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess && r != ncclInProgress) fail(r, call);
    settle();
  }

  /// A buffer as NCCL sees it: the caller's pointer when the device can use it, else a
  /// staging copy in device scratch `slot` (filled from the host when `copy_in`).
  struct Staged {
    Staged(const NcclCommunicator& c, void* p, std::size_t bytes, int slot, bool copy_in)
        : comm(c), host(p), bytes(bytes) {
      dev = p;
      if (bytes == 0 || c.device_accessible(p)) return;
      dev = c.staging_[slot].get(bytes);
      staged = true;
      if (copy_in)
        TESSERA_NCCL_CUDA_CHECK(
            cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c.stream_));
    }
    /// After wait(): copies a staged result back to the host buffer.
    void copy_back() {
      if (!staged) return;
      TESSERA_NCCL_CUDA_CHECK(
          cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, comm.stream_));
      TESSERA_NCCL_CUDA_CHECK(cudaStreamSynchronize(comm.stream_));
    }
    const NcclCommunicator& comm;
    void* host;
    std::size_t bytes;
    void* dev = nullptr;
    bool staged = false;
  };

  bool device_accessible(const void* p) const {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (a.type == cudaMemoryTypeManaged) return true;
    if (a.type != cudaMemoryTypeDevice) return false;
    TESSERA_EXPECTS(a.device == device_, "buffer on CUDA device " << a.device
                                                                  << " passed to an NCCL "
                                                                     "communicator on device "
                                                                  << device_);
    return true;
  }

  static void backoff(int spins) {
    if (spins < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 200));
  }

  [[noreturn]] void fail(ncclResult_t r, const char* call) const {
    std::string detail = ncclGetLastError(comm_);
    abort_comm();
    throw_nccl(r, call, __FILE__, __LINE__, detail.c_str());
  }

  void abort_comm() const noexcept {
    if (aborted_) return;
    aborted_ = true;
    TESSERA_NCCL_CHECK_NOTHROW(ncclCommAbort(comm_));
    comm_ = nullptr;
  }

  /// Waits for everything enqueued on the stream: polls the stream and NCCL's
  /// asynchronous error state; aborts and throws on error or timeout.
  /// A non-blocking communicator accepts a new call only once its previous operation has
  /// left ncclInProgress (else NCCL answers ncclInvalidArgument): poll until it has.
  void settle() const {
    for (int spins = 0;; ++spins) {
      ncclResult_t st = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) st = q;
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail(st, "NCCL communicator (state before a new call)");
      backoff(spins);
    }
  }

  void wait(const char* what) const { wait_on(stream_, what); }

  void wait_on(cudaStream_t stream, const char* what) const {
    util::fault::at(util::fault::Point::collective);  // enqueued, not yet complete
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) st = q;
      if (st != ncclSuccess && st != ncclInProgress) {
        std::ostringstream os;
        os << what << " on rank " << rank_ << " of " << size_ << " (" << log::hostname() << ")";
        fail(st, os.str().c_str());
      }
      if (st == ncclSuccess) {  // enqueueing finished: the stream state is meaningful
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) {
          abort_comm();
          throw_cuda(e, "cudaStreamQuery (waiting for NCCL)", __FILE__, __LINE__);
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout_s_ > 0 && s > timeout_s_) {
        abort_comm();
        TESSERA_THROW(what << " did not complete within " << timeout_s_ << " s on rank " << rank_
                           << " of " << size_ << " (" << log::hostname()
                           << "): a peer rank may have died or be stuck; the communicator was "
                              "aborted (--nccl-timeout sets the limit, 0 = none)");
      }
      backoff(spins);
    }
  }

  /// Flushes the communicator before destruction; false when that failed or took too long
  /// (the caller aborts instead).
  bool finalize() noexcept {
    if (ncclCommFinalize(comm_) != ncclSuccess) {
      ncclResult_t st = ncclInProgress;
      // ncclInProgress is the normal answer of a non-blocking communicator.
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return false;
      if (st != ncclSuccess && st != ncclInProgress) return false;
    }
    const double limit = timeout_s_ > 0 ? std::min(timeout_s_, 60.0) : 60.0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      ncclResult_t st = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return false;
      if (st == ncclSuccess) return true;
      if (st != ncclInProgress) return false;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit)
        return false;
      backoff(spins);
    }
  }

  mutable ncclComm_t comm_ = nullptr;
  int device_ = 0;
  double timeout_s_ = 0;
  std::uint64_t init_bytes_ = 0;       ///< device memory the initialisation took
  std::uint64_t init_host_bytes_ = 0;  ///< host memory it took (private resident growth)
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  mutable bool aborted_ = false;
  mutable Scratch staging_[2];
};

}  // namespace

bool nccl_available() {
  return true;
}

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& boot,
                                                     const NcclOptions& options) {
  // NVLink SHARP (NVLS) stays off unless the user asked for it: it needs multicast
  // objects from the fabric manager / IMEX, reserves large buffers per communicator and
  // fails or degrades on shared nodes, MIG slices and containers. Must be set before
  // NCCL's first call reads its environment.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Connections (and their device buffers, several hundred MB per rank on a 4-GPU NVLink
  // node) at initialisation rather than at the first collective of each kind: the
  // communicator is made before the memory plan, whose measured free device memory then
  // holds them, so a run's device peak stays within its plan (docs/multi-gpu.md).
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  TESSERA_INPUT_CHECK(
      options.timeout_s >= 0 && std::isfinite(options.timeout_s),
      "--nccl-timeout " << options.timeout_s << ": expected seconds >= 0 (0 = no limit)");
  const double timeout_s = options.timeout_s;

  // Device selection: collective agreement first, so a rank without a usable GPU makes
  // every rank throw instead of leaving the others waiting in NCCL's bootstrap.
  const int lr = local_rank(boot);
  int device = -1;
  std::uint64_t gpu_key[2] = {std::hash<std::string>{}(log::hostname()), 0};
  run_collectively(boot, [&] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
      TESSERA_THROW("NCCL communicator: no CUDA device visible on rank "
                    << boot.rank() << " (" << log::hostname() << "; "
                    << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices")
                    << "; CUDA_VISIBLE_DEVICES=" << (vis ? vis : "<unset>") << ")");
    }
    device = lr % n;
    TESSERA_NCCL_CUDA_CHECK(cudaSetDevice(device));
    TESSERA_NCCL_CUDA_CHECK(cudaFree(nullptr));  // create the context now
    char bus[64] = {0};
    TESSERA_NCCL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
    gpu_key[1] = std::hash<std::string>{}(bus);
  });

  // One rank per GPU: NCCL refuses two ranks of a communicator on one GPU, with a message
  // that does not say what to change. Under TESSERA_SHARE_GPU=1 (testing: docs/multi-gpu.md,
  // "Several ranks on one GPU") the ranks sharing a GPU get NCCL host ids of their own
  // instead: the k-th rank on a GPU joins "host" k of its node, so NCCL connects ranks on one
  // GPU over its socket transport, and ranks on different GPUs with the same k as usual.
  const int p = boot.size();
  std::int32_t share = 0;
  run_collectively(boot, [&] { share = share_gpu_requested() ? 1 : 0; });
  share = boot.allreduce_value(share, ReduceOp::min);
  std::vector<std::uint64_t> keys(2 * static_cast<std::size_t>(p));
  boot.allgather(gpu_key, keys.data(), 2);
  int slot = 0, sharing = 0;  // this rank's index among the ranks on its GPU; ranks sharing one
  bool one_host = true;
  for (int a = 0; a < p; ++a) {
    one_host = one_host && keys[2 * a] == keys[0];
    for (int b = a + 1; b < p; ++b) {
      if (keys[2 * a] == keys[2 * b] && keys[2 * a + 1] == keys[2 * b + 1]) {
        if (!share) {
          TESSERA_THROW("ranks " << a << " and " << b
                                 << " would share one GPU: Tessera runs one rank per GPU; start "
                                    "at most as many ranks per node as it has visible GPUs (or "
                                    "set TESSERA_SHARE_GPU=1 on every rank to test several "
                                    "ranks on one GPU)");
        }
        ++sharing;
        if (b == boot.rank()) ++slot;
      }
    }
  }
  if (sharing > 0) {
    // Read by NCCL when the communicator is made (its host hash), so set before any NCCL call;
    // built on the user's own NCCL_HOSTID where there is one.
    const char* user_id = std::getenv("NCCL_HOSTID");
    const std::string host_id = (user_id && *user_id ? std::string(user_id) : log::hostname()) +
                                ".tessera-share-" + std::to_string(slot);
    setenv("NCCL_HOSTID", host_id.c_str(), /*overwrite=*/1);
    setenv("NCCL_MNNVL_ENABLE", "0", /*overwrite=*/0);  // no fabric between a GPU and itself
    if (one_host) {  // the "hosts" are this node: NCCL's own sockets on the loopback interface
      setenv("NCCL_NET", "Socket", /*overwrite=*/0);
      setenv("NCCL_SOCKET_IFNAME", "lo", /*overwrite=*/0);
      setenv("NCCL_IB_DISABLE", "1", /*overwrite=*/0);
    }
    if (boot.rank() == 0) {
      log::warn("TESSERA_SHARE_GPU: " + std::to_string(p) +
                " ranks on fewer GPUs; NCCL joins the ranks of one GPU over sockets. For "
                "testing the multi-rank code: times are not those of one rank per GPU, and "
                "each rank plans with its GPU's whole free memory (give --device-budget)");
    }
  }

  ncclUniqueId id{};
  run_collectively(boot, [&] {
    if (boot.rank() == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  });
  boot.broadcast_raw(&id, sizeof(id), DataType::u8, 0);

  ncclComm_t comm = nullptr;
  std::exception_ptr init_error;
  std::size_t free_before = 0, free_after = 0, total = 0;
  if (cudaMemGetInfo(&free_before, &total) != cudaSuccess) (void)cudaGetLastError();
  const std::optional<std::uint64_t> host_before = util::private_resident_bytes();
  try {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "tessera";
    const ncclResult_t r = ncclCommInitRankConfig(&comm, boot.size(), id, boot.rank(), &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm) ncclCommAbort(comm);
      comm = nullptr;
      throw_nccl(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    }
    NcclCommunicator::wait_ready(comm, "ncclCommInitRankConfig", timeout_s);  // aborts on error
  } catch (...) {
    comm = nullptr;
    init_error = std::current_exception();
  }
  try {
    raise_collectively(boot, init_error);
  } catch (...) {
    if (comm) ncclCommAbort(comm);  // ready here, failed on another rank
    throw;
  }
  if (cudaMemGetInfo(&free_after, &total) != cudaSuccess) (void)cudaGetLastError();
  const std::uint64_t init_bytes = free_before > free_after ? free_before - free_after : 0;
  const std::optional<std::uint64_t> host_after = util::private_resident_bytes();
  const std::uint64_t init_host =
      host_before && host_after && *host_after > *host_before ? *host_after - *host_before : 0;
  return std::make_unique<NcclCommunicator>(comm, device, timeout_s, init_bytes, init_host);
}

}  // namespace tessera::comm
