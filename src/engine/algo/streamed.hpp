// A tensor handle whose nonzeros are streamed chunk by chunk through a backend (memory
// tiers 2 and 3, DESIGN §8): algo::HostTensor (host chunks) and algo::DiskTensor (the HDF5
// store). It is its own kernels::StreamedOps: the ops:: dispatchers of MTTKRP and TTMc on it
// (kernels/ops/mttkrp.hpp, kernels/ops/ttmc.hpp) run the hooks below, which hand the chunks
// to the backend's own operations, so cp_als and tucker_hooi (their handle overloads) run
// unchanged on the plain backend, on every backend.
//
// MTTKRP zeroes the output once and hands every chunk to ops::mttkrp_accumulate (the cuda
// backend copies it from the page-locked chunk buffer on a copy stream while the previous
// chunk computes, sorts it on the device and adds it into the output; host backends prepare
// it and add its MTTKRP). TTMc prepares each chunk with the backend (tier 1 or 2 there),
// runs the chunk's ops::ttmc and adds the chunk's rows into the output (ops::add_rows).
// Results equal tier 1 to rounding (the chunk sums are added in chunk order).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/ops/streamed.hpp"

namespace tessera::algo {

template <typename T>
class StreamedTensor : public kernels::TensorHandle<T>, public kernels::StreamedOps<T> {
 public:
  /// Runs f on every chunk, in order (global coordinates, dims = dims()). f may not keep a
  /// reference to a chunk after it returns.
  virtual void stream(const std::function<void(const SparseTensor<T>&)>& f) const = 0;
  /// As stream(), with each chunk's sorted mode: a mode whose indices are non-decreasing in
  /// the chunk (ops::prepare_stream_chunk), or -1. The default passes -1.
  virtual void stream_sorted(const std::function<void(const SparseTensor<T>&, int)>& f) const {
    stream([&](const SparseTensor<T>& c) { f(c, -1); });
  }
  /// Sorted distinct indices of `mode` among the tensor's nonzeros.
  virtual const std::vector<index_t>& rows(int mode) const = 0;
  /// Nonzeros per chunk (the last may be shorter).
  virtual nnz_t chunk_nnz() const = 0;
  /// Page-locks the host memory the chunks are handed over from for `be`'s copies
  /// (Backend::pin_host; nothing on host backends), once per backend.
  virtual void pin_buffers(kernels::Backend<T>& be) const = 0;
  /// Records the backend's times of the last pass (the MTTKRP hook, mttkrp()).
  virtual void set_backend_times(const kernels::AccumulateTimes& t) const = 0;
  /// The chunks handed to stream_sorted() are the tensor's own arrays, unchanged and
  /// page-locked while the tensor lives (tier 2), so a backend may read them again later
  /// (ops::mttkrp_accumulate's `persistent`: the CP device loop's graph); false where a
  /// buffer is refilled chunk after chunk (tier 3).
  virtual bool persistent_chunks() const { return false; }

  /// This handle's hooks: the ops:: dispatchers stream it (see the top of this file).
  const kernels::StreamedOps<T>* streamed() const override { return this; }

  // ---- the hooks (kernels::StreamedOps) ----
  /// The MTTKRP of the whole tensor on `be`: out is zeroed, then every chunk goes to
  /// ops::mttkrp_accumulate with its sorted mode; the backend's times of the pass are
  /// recorded (set_backend_times).
  void mttkrp(kernels::Backend<T>& be, int mode, const std::vector<const T*>& factors, int R,
              T* out) const override;
  /// rows(mode), known from the first pass.
  std::vector<index_t> ttmc_rows(kernels::Backend<T>& be, int mode) const override;
  /// Per chunk: the chunk's output rows (at most min(chunk, rows) of C values) and the
  /// prepared chunk (bounded by (order + 1) copies of the chunk's COO).
  std::size_t ttmc_scratch_bytes(kernels::Backend<T>& be, int mode,
                                 const std::vector<int>& ranks) const override;
  /// The TTMc of the whole tensor on `be`: each chunk prepared by `be`, its TTMc computed
  /// into a chunk output buffer (kept between calls) and its rows added into out.
  void ttmc(kernels::Backend<T>& be, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) const override;

 private:
  /// A buffer of at least n values in `be`'s memory for a chunk's TTMc output, kept across
  /// calls (every mode of every iteration needs one; allocating each time would cost a
  /// device allocation and free per pass). Grows only; allocated again when another
  /// backend asks.
  T* scratch(kernels::Backend<T>& be, std::size_t n) const;

  mutable kernels::Array<T> scratch_;
  mutable const void* scratch_for_ = nullptr;  ///< the backend scratch_ was allocated by
};

}  // namespace tessera::algo
