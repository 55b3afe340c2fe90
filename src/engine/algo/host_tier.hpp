// Memory tier 2 (DESIGN §8): a rank's nonzeros stay in host memory as raw chunks (one copy,
// page-locked for a device backend) and every MTTKRP or TTMc streams them through the
// backend chunk by chunk (the algo::StreamedTensor hooks), as tier 3 streams them from disk.
//
// The chunks are cut once, when the tensor is built, and never re-cut or re-read: a pass
// hands each chunk to the backend in order. Results equal tier 1 to rounding (chunk sums
// are added in chunk order).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/streamed.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

template <typename T>
class HostTensor final : public StreamedTensor<T> {
 public:
  /// Takes the block's arrays (global coordinates, dims = the tensor's), cutting them into
  /// chunks of `chunk_nnz` (>= 1) nonzeros mode by mode, so the peak is the block plus one
  /// of its arrays. `be`, when given, is the backend the chunks will stream through: each
  /// chunk is prepared for it now (ops::prepare_stream_chunk: the cuda backend sorts it
  /// by one mode, so that mode's MTTKRP needs no device sort; peak scratch
  /// stream_chunk_scratch_bytes(chunk_nnz)), then page-locked (else at the first pass through
  /// a device backend; kept until the tensor is destroyed).
  HostTensor(SparseTensor<T>&& block, nnz_t chunk_nnz, kernels::Backend<T>* be = nullptr);
  /// Takes chunks made by the caller (every one but the last of `chunk_nnz` nonzeros, dims
  /// = `dims`): a store read straight into chunks needs no second copy.
  HostTensor(std::vector<SparseTensor<T>>&& chunks, std::vector<std::uint64_t> dims,
             nnz_t chunk_nnz, kernels::Backend<T>* be = nullptr);
  ~HostTensor() override;

  int order() const override { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const override { return dims_; }
  nnz_t nnz() const override { return nnz_; }
  std::size_t bytes() const override;
  std::size_t mttkrp_stream_bytes(int mode) const override;
  std::vector<std::uint64_t> distinct_rows() const override;
  double value_norm_squared() const override { return norm2_; }
  /// ||X|| from the chunks' scaled norms (no overflow or underflow for finite values).
  double value_norm() const override { return norm_; }
  int tier() const override { return 2; }
  std::string describe() const override;
  double overlap_fraction() const override { return overlap_; }
  double last_copy_seconds() const override { return copy_s_; }
  double last_compute_seconds() const override { return compute_s_; }

  /// Runs f on every chunk, in order (the chunks are the tensor's own arrays: no copy).
  void stream(const std::function<void(const SparseTensor<T>&)>& f) const override;
  /// As stream(), with the mode each chunk was sorted by when it was prepared (or -1).
  void stream_sorted(const std::function<void(const SparseTensor<T>&, int)>& f) const override;
  /// The mode chunk k was sorted by (ops::prepare_stream_chunk), or -1.
  int sorted_mode(nnz_t k) const { return sorted_[static_cast<std::size_t>(k)]; }
  const std::vector<index_t>& rows(int mode) const override {
    return rows_[static_cast<std::size_t>(mode)];
  }
  nnz_t chunk_nnz() const override { return chunk_; }
  void pin_buffers(kernels::Backend<T>& be) const override;
  /// The chunks are this tensor's arrays, never refilled; page-locked for `be` once
  /// pin_buffers(be) has run.
  bool persistent_chunks() const override { return true; }
  /// Copy and compute seconds of the pass, and the share of the copy hidden behind compute
  /// (1 - (wall - compute) / copy, from the pass's wall time since stream() began).
  void set_backend_times(const kernels::AccumulateTimes& t) const override;
  nnz_t chunks() const { return static_cast<nnz_t>(chunks_.size()); }
  bool pinned() const { return !pins_.empty(); }

 private:
  /// nnz, ||X||^2 and the distinct rows of the chunks; then, with `be`, each chunk prepared
  /// for it and page-locked.
  void summarise(kernels::Backend<T>* be);

  std::vector<std::uint64_t> dims_;
  nnz_t nnz_ = 0, chunk_ = 1;
  double norm2_ = 0, norm_ = 0;
  std::vector<SparseTensor<T>> chunks_;
  std::vector<int> sorted_;  ///< per chunk: the mode it is sorted by, or -1
  std::vector<std::vector<index_t>> rows_;
  mutable std::vector<std::unique_ptr<kernels::HostPin>> pins_;
  mutable const void* pinned_for_ = nullptr;
  mutable Timer pass_;
  mutable double copy_s_ = 0, compute_s_ = 0, overlap_ = 0;
};

/// Collective over c (one allreduce): logs, when `print`, this rank's memory tier as
/// "memory tier (rank 0): <description>", with the highest tier of any rank where some
/// ranks stream. CP-ALS and Tucker-HOOI call it once their tensor handle is ready.
void log_memory_tier(int tier, const std::string& description, const comm::Communicator& c,
                     bool print);

}  // namespace tessera::algo
