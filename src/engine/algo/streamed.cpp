#include "algo/streamed.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/ttmc.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"

namespace tessera::algo {

template <typename T>
T* StreamedTensor<T>::scratch(kernels::Backend<T>& be, std::size_t n) const {
  if (scratch_for_ != &be || scratch_.size() < n) {
    scratch_ = kernels::Array<T>();  // free first: too small, or another backend's memory
    scratch_ = be.allocate(n);
    scratch_for_ = &be;
  }
  return scratch_.data();
}

template <typename T>
void StreamedTensor<T>::mttkrp(kernels::Backend<T>& be, int mode,
                               const std::vector<const T*>& factors, int R, T* out) const {
  TESSERA_EXPECTS(mode >= 0 && mode < this->order(), "mttkrp: mode " << mode << " out of range");
  const auto nrows = static_cast<std::int64_t>(this->dims()[static_cast<std::size_t>(mode)]);
  be.fill(out, static_cast<std::size_t>(nrows) * static_cast<std::size_t>(R), T(0));
  if (this->nnz() == 0) return;
  pin_buffers(be);
  (void)kernels::ops::take_accumulate_times(be);  // the sums start at this pass
  const bool persistent = persistent_chunks();
  // Each call returns once it has read the chunk's host arrays (the cuda backend: once the
  // copy to the device is done), so the prefetch thread refills the buffer while the
  // device computes; the backend orders every later use of `out` after the last chunk.
  stream_sorted([&](const SparseTensor<T>& c, int sorted_mode) {
    kernels::ops::mttkrp_accumulate(be, c, mode, factors, R, out, sorted_mode, persistent);
  });
  set_backend_times(kernels::ops::take_accumulate_times(be));  // waits for the last chunk
}

template <typename T>
std::vector<index_t> StreamedTensor<T>::ttmc_rows(kernels::Backend<T>&, int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < this->order(), "ttmc_rows: mode " << mode << " out of range");
  return rows(mode);
}

template <typename T>
std::size_t StreamedTensor<T>::ttmc_scratch_bytes(kernels::Backend<T>&, int mode,
                                                  const std::vector<int>& ranks) const {
  // Per chunk: the chunk's output rows (at most min(chunk, rows) of C values) and the
  // prepared chunk (sorted copies of every mode, bounded by (order + 1) copies of the COO).
  const auto chunk_rows =
      std::min<std::int64_t>(chunk_nnz(), static_cast<std::int64_t>(rows(mode).size()));
  const std::size_t coo = static_cast<std::size_t>(chunk_nnz()) *
                          (static_cast<std::size_t>(this->order()) * sizeof(index_t) + sizeof(T));
  return kernels::ttmc_output_bytes(chunk_rows, ranks, mode, sizeof(T)) +
         coo * static_cast<std::size_t>(this->order() + 1);
}

template <typename T>
void StreamedTensor<T>::ttmc(kernels::Backend<T>& be, int mode,
                             const std::vector<const T*>& factors, const std::vector<int>& ranks,
                             T* out) const {
  TESSERA_EXPECTS(mode >= 0 && mode < this->order(), "ttmc: mode " << mode << " out of range");
  const std::int64_t C = kernels::ttmc_output_cols(ranks, mode);
  const std::vector<index_t>& all = rows(mode);
  const auto nrows = static_cast<std::int64_t>(all.size());
  if (nrows == 0 || C == 0) return;
  be.fill(out, static_cast<std::size_t>(nrows * C), T(0));
  pin_buffers(be);
  std::vector<std::int64_t> map;
  stream([&](const SparseTensor<T>& c) {
    auto h = be.prepare(c);
    const std::vector<index_t> sub = kernels::ops::ttmc_rows(be, *h, mode);
    if (sub.empty()) return;
    T* tmp = scratch(be, sub.size() * static_cast<std::size_t>(C));
    kernels::ops::ttmc(be, *h, mode, factors, ranks, tmp);
    map.resize(sub.size());
    // Both lists are sorted: one merge walk gives every chunk row's position.
    std::size_t j = 0;
    for (std::size_t i = 0; i < sub.size(); ++i) {
      while (j < all.size() && all[j] < sub[i]) ++j;
      TESSERA_EXPECTS(j < all.size() && all[j] == sub[i],
                      "tier 3: chunk row " << sub[i] << " of mode " << mode
                                           << " is not among the rows of the first pass");
      map[i] = static_cast<std::int64_t>(j);
    }
    kernels::ops::add_rows(be, tmp, static_cast<std::int64_t>(sub.size()), C, map, out);
    be.synchronize();
  });
}

template class StreamedTensor<float>;
template class StreamedTensor<double>;

}  // namespace tessera::algo
