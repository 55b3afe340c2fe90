// A tensor handle whose nonzeros are streamed chunk by chunk through a backend (memory
// tiers 2 and 3, DESIGN §8): algo::StreamingBackend runs MTTKRP and TTMc on any of them.
#pragma once

#include <functional>
#include <vector>

#include "kernels/backend.hpp"

namespace tessera::algo {

template <typename T>
class StreamedTensor : public kernels::TensorHandle<T> {
 public:
  /// Runs f on every chunk, in order (global coordinates, dims = dims()). f may not keep a
  /// reference to a chunk after it returns.
  virtual void stream(const std::function<void(const SparseTensor<T>&)>& f) const = 0;
  /// As stream(), with each chunk's sorted mode: a mode whose indices are non-decreasing in
  /// the chunk (Backend::prepare_stream_chunk), or -1. The default passes -1.
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
  /// Records the backend's times of the last pass (StreamingBackend::mttkrp).
  virtual void set_backend_times(const kernels::AccumulateTimes& t) const = 0;
};

}  // namespace tessera::algo
