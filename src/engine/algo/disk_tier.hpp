// Memory tier 3 (DESIGN §8): a rank's nonzeros stay in the HDF5 tensor store and every
// MTTKRP or TTMc streams them from disk, chunk by chunk, through a prefetch thread.
//
// DiskTensor is the tier-3 TensorHandle: a range of the store's nonzeros (global
// coordinates) that it never holds whole. It reads the range once when it is opened
// (checking every nonzero as H5TensorReader does, and keeping the distinct indices of every
// mode, ||X||^2 and the checkpoint fingerprint); later passes read chunk k + 1 on a prefetch
// thread while chunk k computes.
//
// StreamingBackend wraps any backend: for a DiskTensor, its MTTKRP zeroes the output once
// and hands every chunk to the wrapped backend's mttkrp_accumulate (the cuda backend copies
// it from the page-locked chunk buffer on a copy stream while the previous chunk computes,
// sorts it on the device and adds it into the output; host backends prepare it and add its
// MTTKRP); its TTMc prepares each chunk with the wrapped backend (tier 1 or 2 there), runs
// the chunk's TTMc and adds the chunk's rows into the output. Every other call is
// forwarded. cp_als and tucker_hooi (their handle overloads) run unchanged on it, on every
// backend.
//
// Results equal tier 1 to rounding (the chunk sums are added in chunk order). Tier 3 does
// not look for repeated coordinates (a coordinate stored k times would count as k entries in
// ||X||^2 and the fingerprint, and the fit would be wrong), so it runs only stores marked
// has_duplicates = 0: every store tessera convert and generate write (io::UniqueWriter sums
// or merges repeats while writing). A store marked 1 or -1 (never checked, e.g. written by an
// older `generate --out X.h5`) is refused for tier 3 before anything is read, with a
// message naming the fix (`tessera convert X.h5 Y.h5` writes a deduplicated copy; the
// check: io::require_unique_store); docs/formats.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/streamed.hpp"
#include "io/checkpoint.hpp"
#include "io/h5store.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"

namespace tessera::algo {

/// Default nonzeros per tier-3 chunk (16 Mi).
inline constexpr nnz_t kDefaultDiskChunkNnz = nnz_t(1) << 24;

/// DiskTensorOptions::read_ahead by default.
inline constexpr int kDefaultReadAhead = 2;

struct DiskTensorOptions {
  std::string path;
  /// Block of the store's partition to stream (>= 0), or -1: the positions
  /// [first, first + count) of the stored order.
  int block = -1;
  nnz_t first = 0;
  nnz_t count = 0;
  nnz_t chunk_nnz = kDefaultDiskChunkNnz;  ///< nonzeros per chunk, >= 1
  /// Threads reading (io::H5TensorReader::read_direct; 0: one per hardware thread), shared
  /// among the prefetch threads.
  int read_threads = 0;
  /// Chunks read ahead of the one computing, each by a prefetch thread of its own (>= 1):
  /// a chunk's read starts while the previous one's last pieces are still being read, so
  /// the read threads do not idle at chunk boundaries. Host chunk buffers: read_ahead + 1.
  int read_ahead = kDefaultReadAhead;
  /// Check coordinates and values again on every pass after the first (which checks
  /// everything, CRCs included). Off where the kernels check coordinates themselves (the
  /// cuda backend's mttkrp_accumulate): later passes are then plain preads.
  bool check_later_passes = true;
  bool verify_checksums = true;
  /// Drop-behind: the store is evicted from the page cache once when opened (io::evict_file)
  /// and every chunk once read (io::H5TensorReader::set_drop_behind), so every pass reads
  /// the disk.
  bool drop_behind = false;
};

/// Seconds of one streamed pass (the last one, and the sums since opening).
struct DiskPassTimes {
  double read = 0;     ///< prefetch thread in HDF5 reads (and checks)
  double wait = 0;     ///< compute thread waiting for a chunk: read time not hidden
  double compute = 0;  ///< compute thread in the chunk calls (enqueueing, copy waits, ...)
  double wall = 0;
  /// MTTKRP passes (StreamingBackend::mttkrp): the backend's own times of the chunks
  /// (Backend::take_accumulate_times): host -> device copies, and sorts and kernels.
  bool backend_timed = false;
  double upload = 0;
  double device = 0;
};

template <typename T>
class DiskTensor final : public StreamedTensor<T> {
 public:
  /// Opens the store and makes the first pass over the range. Local (not collective).
  /// Throws InputError on a bad store, range or chunk size, or bad data in the range.
  explicit DiskTensor(const DiskTensorOptions& o);
  ~DiskTensor() override;

  int order() const override { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const override { return dims_; }
  nnz_t nnz() const override { return count_; }
  /// Host bytes of the read_ahead + 1 chunk buffers (the tensor itself is on disk).
  std::size_t bytes() const override;
  /// Bytes one pass reads from disk (every mode's coordinates and the values).
  std::size_t mttkrp_stream_bytes(int mode) const override;
  std::vector<std::uint64_t> distinct_rows() const override;
  double value_norm_squared() const override { return norm2_; }
  /// ||X|| from the chunks' scaled norms of the first pass (no overflow or underflow for
  /// finite values).
  double value_norm() const override { return norm_; }
  int tier() const override { return 3; }
  std::string describe() const override;
  /// Fraction of the last pass's read time hidden behind compute: 1 - wait / read.
  double overlap_fraction() const override;
  /// Seconds the last pass spent reading from disk (prefetch thread).
  double last_copy_seconds() const override { return last_.read; }
  /// Seconds the last pass computed: the backend's compute time of its chunks when it
  /// reported one (MTTKRP passes: device sorts and kernels on the cuda backend), else the
  /// compute thread's time in the chunk calls (TTMc).
  double last_compute_seconds() const override {
    return last_.backend_timed ? last_.device : last_.compute;
  }

  /// Runs f on every chunk, in order (the chunk's nonzeros with global coordinates, dims =
  /// dims()); chunk k + 1 is read by a prefetch thread while f runs on chunk k. The two
  /// chunk buffers are allocated once (at the first pass) and kept: f may not keep a
  /// reference to a chunk after it returns. An exception from the reader or from f ends
  /// the pass and is rethrown here.
  void stream(const std::function<void(const SparseTensor<T>&)>& f) const override;
  /// As stream(), each chunk with the store's sorted mode (io::H5TensorInfo::sorted_mode:
  /// every range of a store written in non-decreasing mode-m order is sorted by m), or -1.
  void stream_sorted(const std::function<void(const SparseTensor<T>&, int)>& f) const override {
    const int m = sorted_mode_;
    stream([&](const SparseTensor<T>& c) { f(c, m); });
  }
  /// Page-locks the chunk buffers for `be`'s copies (Backend::pin_host; nothing on host
  /// backends), once per backend; the locks are kept until the tensor is destroyed or
  /// another backend asks. `be` need not outlive the tensor.
  void pin_buffers(kernels::Backend<T>& be) const override;
  /// Records the backend's times of the last pass (StreamingBackend::mttkrp).
  void set_backend_times(const kernels::AccumulateTimes& t) const override;

  /// Sorted distinct indices of `mode` among the range's nonzeros.
  const std::vector<index_t>& rows(int mode) const override {
    return rows_[static_cast<std::size_t>(mode)];
  }
  /// This rank's part of the checkpoint fingerprint (io::finish_fingerprint completes it).
  const io::TensorFingerprint& fingerprint_part() const { return fingerprint_; }
  nnz_t chunk_nnz() const override { return chunk_; }
  nnz_t chunks() const { return count_ == 0 ? 0 : (count_ + chunk_ - 1) / chunk_; }
  nnz_t first() const { return first_; }
  const std::string& path() const { return path_; }
  const io::H5TensorInfo& info() const;
  /// Times of the first pass (opening) and of the last pass.
  const DiskPassTimes& open_times() const { return open_; }
  const DiskPassTimes& last_times() const { return last_; }
  /// Passes made since opening (the first pass included).
  int passes() const { return passes_; }

 private:
  void read_chunk(nnz_t k, SparseTensor<T>* out) const;
  /// Allocates the chunk buffers (chunk_ nonzeros each) unless done.
  void ensure_buffers() const;

  std::string path_;
  std::unique_ptr<io::H5TensorReader> reader_;  // used by one thread at a time
  std::vector<std::uint64_t> dims_;
  nnz_t first_ = 0, count_ = 0, chunk_ = 1;
  int read_threads_ = 0;
  int sorted_mode_ = -1;
  bool drop_behind_ = false;
  io::H5ReadChecks later_checks_;
  bool first_pass_ = true;
  double norm2_ = 0, norm_ = 0;
  std::vector<std::vector<index_t>> rows_;
  io::TensorFingerprint fingerprint_;
  mutable DiskPassTimes open_, last_;
  mutable int passes_ = 0;
  /// The chunk buffers (read_ahead + 1): chunk k is read into buffer k % size() by
  /// prefetch thread k % read_ahead. Their arrays never reallocate after ensure_buffers()
  /// (resized within capacity).
  mutable std::vector<SparseTensor<T>> buffer_;
  int read_ahead_ = kDefaultReadAhead;
  mutable std::vector<std::unique_ptr<kernels::HostPin>> pins_;  // after buffer_: freed first
  mutable const void* pinned_for_ = nullptr;                     ///< the backend pins_ were made by
};

/// Forwards every call to `inner`, except MTTKRP and TTMc on a DiskTensor, which it runs
/// chunk by chunk (see the top of this file). `inner` must outlive it. It keeps one chunk
/// output buffer for TTMc (the largest needed so far) between calls.
template <typename T>
class StreamingBackend final : public kernels::Backend<T> {
 public:
  explicit StreamingBackend(kernels::Backend<T>& inner) : in_(inner) {}

  kernels::BackendKind kind() const override { return in_.kind(); }
  std::string name() const override { return in_.name(); }
  comm::MemorySpace memory_space() const override { return in_.memory_space(); }
  void synchronize() override { in_.synchronize(); }

  kernels::Array<T> allocate(std::size_t n) override { return in_.allocate(n); }
  void upload(const T* h, std::size_t n, T* d) override { in_.upload(h, n, d); }
  void download(const T* s, std::size_t n, T* h) override { in_.download(s, n, h); }
  void copy(const T* s, std::size_t n, T* d) override { in_.copy(s, n, d); }
  void fill(T* d, std::size_t n, T v) override { in_.fill(d, n, v); }

  void set_memory_budget(std::size_t b) override { in_.set_memory_budget(b); }
  std::size_t memory_budget() const override { return in_.memory_budget(); }
  void set_workload(kernels::Workload w) override {
    kernels::Backend<T>::set_workload(w);
    in_.set_workload(w);
  }
  void set_tuning(const kernels::Tuning& t) override {
    in_.set_tuning(t);  // first: a refusal leaves both as they were
    kernels::Backend<T>::set_tuning(t);
  }
  std::unique_ptr<kernels::TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    return in_.prepare(x);
  }
  std::unique_ptr<kernels::TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                              std::uint64_t first_id,
                                                              std::uint64_t count) override {
    return in_.prepare_synthetic(spec, first_id, count);
  }
  void mttkrp(const kernels::TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
              int R, T* out) override;
  void mttkrp_accumulate(const SparseTensor<T>& chunk, int mode,
                         const std::vector<const T*>& factors, int R, T* out,
                         int sorted_mode = -1) override {
    in_.mttkrp_accumulate(chunk, mode, factors, R, out, sorted_mode);
  }
  int prepare_stream_chunk(SparseTensor<T>& chunk) override {
    return in_.prepare_stream_chunk(chunk);
  }
  std::size_t stream_chunk_scratch_bytes(nnz_t n) const override {
    return in_.stream_chunk_scratch_bytes(n);
  }
  kernels::AccumulateTimes take_accumulate_times() override { return in_.take_accumulate_times(); }
  std::unique_ptr<kernels::HostPin> pin_host(const void* p, std::size_t bytes) override {
    return in_.pin_host(p, bytes);
  }

  std::vector<index_t> ttmc_rows(const kernels::TensorHandle<T>& x, int mode) override;
  std::size_t ttmc_scratch_bytes(const kernels::TensorHandle<T>& x, int mode,
                                 const std::vector<int>& ranks) override;
  void ttmc(const kernels::TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) override;

  kernels::Array<double> allocate_double(std::size_t n) override { return in_.allocate_double(n); }
  void upload_double(const double* h, std::size_t n, double* d) override {
    in_.upload_double(h, n, d);
  }
  void download_double(const double* s, std::size_t n, double* h) override {
    in_.download_double(s, n, h);
  }
  void wide_gram(const T* Y, std::int64_t rows, std::int64_t C, double* S) override {
    in_.wide_gram(Y, rows, C, S);
  }
  void wide_times(const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                  double* Z) override {
    in_.wide_times(Y, rows, C, W, R, Z);
  }
  void wide_times_t(const T* Y, std::int64_t rows, std::int64_t C, const double* P, int R,
                    double* B) override {
    in_.wide_times_t(Y, rows, C, P, R, B);
  }
  void symmetric_eig_top(double* S, int n, int k, double* w, double* V) override {
    in_.symmetric_eig_top(S, n, k, w, V);
  }
  // Tucker's dense stage runs where the wrapped backend's memory is.
  kernels::Array<std::int64_t> upload_index(const std::int64_t* h, std::size_t n) override {
    return in_.upload_index(h, n);
  }
  void gather_rows_double(const double* U, int R, const std::int64_t* pos, std::int64_t rows,
                          double* P) override {
    in_.gather_rows_double(U, R, pos, rows, P);
  }
  void scatter_rows_double(const double* Z, std::int64_t rows, int R, const std::int64_t* pos,
                           std::int64_t len, const double* scale, double* U) override {
    in_.scatter_rows_double(Z, rows, R, pos, len, scale, U);
  }
  void gram_double(const double* U, std::int64_t rows, int R, double* G) override {
    in_.gram_double(U, rows, R, G);
  }
  void inner_double(const double* A, const double* B, std::int64_t rows, int R,
                    double* M) override {
    in_.inner_double(A, B, rows, R, M);
  }
  void times_small_double(double* U, std::int64_t rows, int R, const double* M) override {
    in_.times_small_double(U, rows, R, M);
  }
  bool cholqr_step(double* U, std::int64_t rows, int R, const double* G, double* dev) override {
    return in_.cholqr_step(U, rows, R, G, dev);
  }
  double subspace_change(const double* U, const double* Unew, const double* M, std::int64_t rows,
                         int R) override {
    return in_.subspace_change(U, Unew, M, rows, R);
  }
  double sum_squares_double(const double* x, std::size_t n) override {
    return in_.sum_squares_double(x, n);
  }
  void convert_from_double(const double* src, std::size_t n, T* dst) override {
    in_.convert_from_double(src, n, dst);
  }
  void sum_rows(const T* src, const std::vector<std::int64_t>& ptr,
                const std::vector<std::int64_t>& row, std::int64_t C, T* dst) override {
    in_.sum_rows(src, ptr, row, C, dst);
  }
  void add_rows(const T* src, std::int64_t rows, std::int64_t C,
                const std::vector<std::int64_t>& dst_row, T* dst) override {
    in_.add_rows(src, rows, C, dst_row, dst);
  }
  std::size_t wide_scratch_bytes(std::int64_t C) const override {
    return in_.wide_scratch_bytes(C);
  }
  std::unique_ptr<kernels::ContractPlan<T>> contract_plan(
      const SparseTensor<T>& x, const SparseTensor<T>& y,
      const kernels::ContractSpec& spec) override {
    return in_.contract_plan(x, y, spec);
  }
  SparseTensor<T> contract(kernels::ContractPlan<T>& plan, kernels::ContractStats* s) override {
    return in_.contract(plan, s);
  }

  void gram(const T* A, std::int64_t rows, int R, T* G) override { in_.gram(A, rows, R, G); }
  void hadamard(const std::vector<const T*>& Gs, int R, T* V) override { in_.hadamard(Gs, R, V); }
  bool solve_normal(T* M, std::int64_t rows, const T* V, int R) override {
    return in_.solve_normal(M, rows, V, R);
  }
  void column_norms(const T* A, std::int64_t rows, int R, NormKind k, double* out) override {
    in_.column_norms(A, rows, R, k, out);
  }
  void scale_columns(T* A, std::int64_t rows, int R, const double* s) override {
    in_.scale_columns(A, rows, R, s);
  }
  void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* out) override {
    in_.column_dots(A, B, rows, R, out);
  }
  void pack_outer(const T* A, std::int64_t rows, int R, T* P) override {
    in_.pack_outer(A, rows, R, P);
  }
  std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                          const linalg::RowUpdate& u, double* host_quad) override {
    return in_.row_update(A, M, rows, R, V, Gp, u, host_quad);
  }

 private:
  /// A buffer of at least n values in backend memory for a chunk's output, kept across
  /// calls (every mode of every iteration needs one; allocating each time would cost a
  /// device allocation and free per pass). Grows only.
  T* scratch(std::size_t n);

  kernels::Backend<T>& in_;
  kernels::Array<T> scratch_;
};

}  // namespace tessera::algo
