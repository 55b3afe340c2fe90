// TTMc operations (Tucker-HOOI, DESIGN §6; output layout in kernels/ttmc.hpp): one
// declaration per operation, implemented by every backend (kernels/ops/common.hpp). A streamed
// handle (memory tier 3) runs them through its StreamedOps hooks.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/ops/common.hpp"
#include "kernels/ops/streamed.hpp"

/// Rows of the TTMc output of `mode`: the sorted distinct mode-`mode` indices among the
/// handle's nonzeros, on the host. Known before any TTMc runs (memory planning).
#define TESSERA_TTMC_ROWS_OP(T) \
  std::vector<index_t> ttmc_rows(Backend<T>& be, const TensorHandle<T>& x, int mode)

/// Backend memory, in bytes, one ttmc() of `mode` allocates besides `out` (per-thread
/// scratch, accumulators). ranks as for ttmc(); throws InputError as ttmc_output_cols.
#define TESSERA_TTMC_SCRATCH_BYTES_OP(T)                                             \
  std::size_t ttmc_scratch_bytes(Backend<T>& be, const TensorHandle<T>& x, int mode, \
                                 const std::vector<int>& ranks)

/// out (rows x cols, row-major, backend memory, every element overwritten) =
/// X x_{m != mode} U_m^T restricted to the rows ttmc_rows(x, mode), in that order, with
/// cols = ttmc_output_cols(ranks, mode). factors[m] is dims[m] x ranks[m] row-major in
/// backend memory; factors[mode] and ranks[mode] are not read. Throws Error on a null
/// factor or a handle of another backend, InputError on bad ranks.
#define TESSERA_TTMC_OP(T)                                      \
  void ttmc(Backend<T>& be, const TensorHandle<T>& x, int mode, \
            const std::vector<const T*>& factors, const std::vector<int>& ranks, T* out)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_TTMC_ROWS_OP)
TESSERA_DECLARE_OP(TESSERA_TTMC_SCRATCH_BYTES_OP)
TESSERA_DECLARE_OP(TESSERA_TTMC_OP)

namespace ops {

template <typename T>
inline TESSERA_TTMC_ROWS_OP(T) {
  if (const StreamedOps<T>* s = x.streamed()) return s->ttmc_rows(be, mode);
  TESSERA_DISPATCH(be, ttmc_rows, x, mode);
}
template <typename T>
inline TESSERA_TTMC_SCRATCH_BYTES_OP(T) {
  if (const StreamedOps<T>* s = x.streamed()) return s->ttmc_scratch_bytes(be, mode, ranks);
  TESSERA_DISPATCH(be, ttmc_scratch_bytes, x, mode, ranks);
}
template <typename T>
inline TESSERA_TTMC_OP(T) {
  if (const StreamedOps<T>* s = x.streamed()) return s->ttmc(be, mode, factors, ranks, out);
  TESSERA_DISPATCH(be, ttmc, x, mode, factors, ranks, out);
}

}  // namespace ops
}  // namespace tessera::kernels
