// The operation hooks of a streamed tensor handle (memory tier 3, DESIGN §8): a handle whose
// nonzeros the backend never holds whole (algo::DiskTensor reads them from the HDF5 store;
// algo::HostTensor keeps them in host chunks). The ops:: dispatchers of the handle operations
// (ops/mttkrp.hpp, ops/ttmc.hpp) call these hooks instead of the backend's version; a hook runs
// the operation chunk by chunk through the backend's own operations (ops::mttkrp_accumulate,
// ops::ttmc on a prepared chunk, ops::add_rows) and takes the same arguments and gives the
// same result, to rounding, as the backend's version on the whole tensor.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/backend.hpp"

namespace tessera::kernels {

template <typename T>
class StreamedOps {
 public:
  virtual ~StreamedOps() = default;
  /// ops::mttkrp of the whole streamed tensor on `be` (out in be's memory).
  virtual void mttkrp(Backend<T>& be, int mode, const std::vector<const T*>& factors, int R,
                      T* out) const = 0;
  /// ops::ttmc_rows: the sorted distinct indices of `mode` (known without a pass).
  virtual std::vector<index_t> ttmc_rows(Backend<T>& be, int mode) const = 0;
  /// ops::ttmc_scratch_bytes: backend memory a streamed ttmc allocates besides `out` (one
  /// chunk's prepared format, its TTMc scratch and output rows).
  virtual std::size_t ttmc_scratch_bytes(Backend<T>& be, int mode,
                                         const std::vector<int>& ranks) const = 0;
  /// ops::ttmc of the whole streamed tensor on `be`.
  virtual void ttmc(Backend<T>& be, int mode, const std::vector<const T*>& factors,
                    const std::vector<int>& ranks, T* out) const = 0;
};

}  // namespace tessera::kernels
