// Memory tier 3 (DESIGN §8): a rank's nonzeros stay in the HDF5 tensor store and every
// MTTKRP or TTMc streams them from disk, chunk by chunk, through a prefetch thread.
//
// DiskTensor is the tier-3 TensorHandle: a range of the store's nonzeros (global
// coordinates) that it never holds whole. It reads the range once when it is opened
// (checking every nonzero as H5TensorReader does, and keeping the distinct indices of every
// mode, ||X||^2 and the checkpoint fingerprint); later passes read chunk k + 1 on a prefetch
// thread while chunk k computes.
//
// As every algo::StreamedTensor (algo/streamed.hpp), it streams itself through the backend
// it is given: kernels::ops::mttkrp on it zeroes the output once and hands every chunk to
// the backend's ops::mttkrp_accumulate (the cuda backend copies it from the page-locked
// chunk buffer on a copy stream while the previous chunk computes, sorts it on the device
// and adds it into the output; host backends prepare it and add its MTTKRP); its
// ops::ttmc prepares each chunk with the backend (tier 1 or 2 there), runs the chunk's
// TTMc and adds the chunk's rows into the output. cp_als and tucker_hooi (their handle
// overloads) run unchanged on it, with the plain backend, on every backend.
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
  /// MTTKRP passes (StreamedTensor::mttkrp): the backend's own times of the chunks
  /// (ops::take_accumulate_times): host -> device copies, and sorts and kernels.
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
  /// Records the backend's times of the last pass (StreamedTensor::mttkrp).
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

}  // namespace tessera::algo
