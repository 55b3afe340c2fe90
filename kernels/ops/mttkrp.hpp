// MTTKRP operations (DESIGN §5): out = X_(mode) * KhatriRao(the other factors), on a prepared
// handle (memory tiers 1-2; tier 3 through the handle's StreamedOps hooks) and on host chunks
// streamed through the backend (tier 3). One declaration per operation, implemented by every
// backend (kernels/ops/common.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops/common.hpp"
#include "kernels/ops/streamed.hpp"

/// out (dims[mode] x R, row-major, overwritten) = X_(mode) * KhatriRao(other factors).
/// factors[m] is dims[m] x R row-major in backend memory; factors[mode] is not read.
#define TESSERA_MTTKRP_OP(T)                                      \
  void mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode, \
              const std::vector<const T*>& factors, int R, T* out)

/// out (dims[mode] x R, row-major, backend memory) += the MTTKRP of `chunk`, a part of a
/// tensor streamed through the backend (memory tier 3): its coordinates are global (dims =
/// the whole tensor's, each below its dimension), in any order; factors as for mttkrp().
/// Summing the calls over chunks that partition a tensor gives its mttkrp() to rounding.
/// `chunk`'s host arrays are read only during the call: it returns once they have been read
/// (the caller may refill them), and may return before the device has finished computing
/// (later work of the backend, or synchronize(), is ordered after it). Host backends prepare
/// the chunk, run mttkrp() into a scratch kept between calls (Backend::host_accumulate) and
/// add it with add_rows(); the cuda backend copies the chunk from page-locked memory (see
/// Backend::pin_host) on a copy stream while the previous chunk computes, sorts it on the
/// device and accumulates into `out` (kernels/cuda/mttkrp/stream.cu); its device buffers (two
/// chunk buffers and the sort's, kept between calls) hold pieces of at most 2^25 nonzeros,
/// fewer when the memory budget asks (order 3 float: 72 bytes per nonzero). `sorted_mode` >= 0
/// promises that the chunk's `sorted_mode` indices are non-decreasing (as prepare_stream_chunk
/// leaves them), -1 promises nothing; the cuda backend then skips its sort for that mode (and
/// fails the next call with an Error if the promise was false). `persistent` promises that
/// the chunk's host arrays stay unchanged (and page-locked) for as long as the backend may
/// read them again: memory tier 2's chunks, which the cuda backend may capture into the CP
/// device loop's graph (its replays copy them again); tier 3 refills its buffers (false),
/// and a call inside a capture with false is an Error.
#define TESSERA_MTTKRP_ACCUMULATE_OP(T)                                                        \
  void mttkrp_accumulate(Backend<T>& be, const SparseTensor<T>& chunk, int mode,               \
                         const std::vector<const T*>& factors, int R, T* out, int sorted_mode, \
                         bool persistent)

/// Reorders a host chunk that will be streamed through mttkrp_accumulate many times (memory
/// tier 2) into the order this backend computes fastest, once; returns the mode whose indices
/// are then non-decreasing (pass it as mttkrp_accumulate's sorted_mode), or -1 when the chunk
/// was left as it is (host backends). The cuda backend sorts by (i_m, i_{m+1}), m the mode
/// with the most key bits, as tier 1 orders its copies; scratch: 24 bytes per nonzero
/// (stream_chunk_scratch_bytes), released before it returns.
#define TESSERA_PREPARE_STREAM_CHUNK_OP(T) \
  int prepare_stream_chunk(Backend<T>& be, SparseTensor<T>& chunk)

/// Host bytes prepare_stream_chunk holds at its peak besides the chunk (0: none).
#define TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP(T) \
  std::size_t stream_chunk_scratch_bytes(const Backend<T>& be, nnz_t chunk_nnz)

/// Seconds of the mttkrp_accumulate calls since the last take_accumulate_times() (or the
/// backend's creation), which it resets; waits for those calls to finish.
#define TESSERA_TAKE_ACCUMULATE_TIMES_OP(T) AccumulateTimes take_accumulate_times(Backend<T>& be)

/// The rows' packed Grams of completion CP (CpOptions::observed_only): out (dims[mode] x
/// R(R+1)/2, row-major, overwritten) row i = the sum over the stored entries x_k of x in row
/// i of `mode` of x_k h h^T packed as linalg::pack_outer packs it, h = the Hadamard product
/// of the other factors' rows (factors as for mttkrp()); completion passes its pattern,
/// whose values are 1.
/// packed[m] = pack_outer of factors[m] (dims[m] x R(R+1)/2): the host backends, a streamed
/// handle and the cuda backend for R > 32 sum those as a W = R(R+1)/2 wide MTTKRP of the
/// pattern; the cuda backend forms h h^T from the R-wide rows in one pass for R <= 32
/// (kernels/cuda/mttkrp/row_grams.cu) and does not read them.
#define TESSERA_ROW_GRAMS_OP(T)                                                                    \
  void row_grams(Backend<T>& be, const TensorHandle<T>& x, int mode,                               \
                 const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R, \
                 T* out)

/// Whether completion_rows() has a one-pass kernel on this backend at rank R: the cuda
/// backend in float with tensor cores (not --tensor-cores off) at R <= 32, and the reference
/// backend (a plain loop, for tests). Where it has, completion CP prepares one copy of its
/// block (rows whole, data values) instead of the data's and the pattern's.
#define TESSERA_FUSES_COMPLETION_OP(T) bool fuses_completion(const Backend<T>& be, int R)

/// Completion CP's two sums over the stored entries of x in one pass: out (dims[mode] x R,
/// overwritten) = the MTTKRP of x (as mttkrp()), grams (dims[mode] x R(R+1)/2, overwritten)
/// row i = the sum over the stored entries in row i of h h^T, packed as linalg::pack_outer
/// packs it: the values of x are not read for it (the Grams are x's pattern's, as
/// row_grams() of a copy whose values are 1). Only where fuses_completion(be, R): the cuda
/// backend's tensor-core row-Gram kernel also sums x_k h on its CUDA cores
/// (kernels/cuda/mttkrp/row_grams.cu); the reference backend loops over the nonzeros; the
/// cpu backend (which does not fuse) walks the mode's CSF tree on one thread.
#define TESSERA_COMPLETION_ROWS_OP(T)                                      \
  void completion_rows(Backend<T>& be, const TensorHandle<T>& x, int mode, \
                       const std::vector<const T*>& factors, int R, T* out, T* grams)

/// How the nonzeros of a handle fall into row ranges of `mode` (mttkrp_row_ranges).
#define TESSERA_MTTKRP_ROW_RANGES_OP(T)                                           \
  RowRanges mttkrp_row_ranges(Backend<T>& be, const TensorHandle<T>& x, int mode, \
                              const std::vector<std::int64_t>& bounds)

/// out's rows [row_lo, row_hi) (dims[mode] x R, row-major; those rows overwritten, no other
/// row written) = those rows of mttkrp(): the piece of an MTTKRP that the multi-rank device
/// loop reduces while the next piece computes (docs/multi-gpu.md, "Overlap"). Where the last
/// mttkrp_row_ranges() of this handle and mode answered `pieces` and [row_lo, row_hi) is one
/// of its ranges, only those rows' nonzeros are read; otherwise the whole MTTKRP is computed
/// into scratch and the rows copied (same values).
#define TESSERA_MTTKRP_ROWS_OP(T)                                                            \
  void mttkrp_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,                       \
                   const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo, \
                   std::int64_t row_hi)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_MTTKRP_ROW_RANGES_OP)
TESSERA_DECLARE_OP(TESSERA_MTTKRP_ROWS_OP)
TESSERA_DECLARE_OP(TESSERA_FUSES_COMPLETION_OP)
TESSERA_DECLARE_OP(TESSERA_COMPLETION_ROWS_OP)
TESSERA_DECLARE_OP(TESSERA_MTTKRP_OP)
TESSERA_DECLARE_OP(TESSERA_MTTKRP_ACCUMULATE_OP)
TESSERA_DECLARE_OP(TESSERA_PREPARE_STREAM_CHUNK_OP)
TESSERA_DECLARE_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP)
TESSERA_DECLARE_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP)
TESSERA_DECLARE_OP(TESSERA_ROW_GRAMS_OP)

namespace ops {

template <typename T>
inline TESSERA_MTTKRP_OP(T) {
  if (const StreamedOps<T>* s = x.streamed()) return s->mttkrp(be, mode, factors, R, out);
  TESSERA_DISPATCH(be, mttkrp, x, mode, factors, R, out);
}
template <typename T>
inline TESSERA_MTTKRP_ACCUMULATE_OP(T) {
  TESSERA_DISPATCH(be, mttkrp_accumulate, chunk, mode, factors, R, out, sorted_mode, persistent);
}
template <typename T>
inline TESSERA_PREPARE_STREAM_CHUNK_OP(T) {
  TESSERA_DISPATCH(be, prepare_stream_chunk, chunk);
}
template <typename T>
inline TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP(T) {
  TESSERA_DISPATCH(be, stream_chunk_scratch_bytes, chunk_nnz);
}
template <typename T>
inline TESSERA_TAKE_ACCUMULATE_TIMES_OP(T) {
  TESSERA_DISPATCH(be, take_accumulate_times);
}
template <typename T>
inline TESSERA_ROW_GRAMS_OP(T) {
  if (const StreamedOps<T>* s = x.streamed())
    return s->mttkrp(be, mode, packed, R * (R + 1) / 2, out);
  TESSERA_DISPATCH(be, row_grams, x, mode, factors, packed, R, out);
}
template <typename T>
inline TESSERA_MTTKRP_ROW_RANGES_OP(T) {
  TESSERA_EXPECTS(x.streamed() == nullptr, "mttkrp_row_ranges on a streamed handle");
  TESSERA_EXPECTS(mode >= 0 && mode < x.order(),
                  "mode " << mode << " of an order-" << x.order() << " tensor");
  const auto len = static_cast<std::int64_t>(x.dims()[static_cast<std::size_t>(mode)]);
  for (std::size_t j = 0; j < bounds.size(); ++j)
    TESSERA_EXPECTS(bounds[j] >= 0 && bounds[j] <= len && (j == 0 || bounds[j] >= bounds[j - 1]),
                    "row bound " << bounds[j] << " (position " << j << ") of mode " << mode << " ("
                                 << len << " rows)");
  TESSERA_DISPATCH(be, mttkrp_row_ranges, x, mode, bounds);
}
template <typename T>
inline TESSERA_MTTKRP_ROWS_OP(T) {
  TESSERA_EXPECTS(x.streamed() == nullptr, "mttkrp_rows on a streamed handle");
  TESSERA_EXPECTS(mode >= 0 && mode < x.order(),
                  "mode " << mode << " of an order-" << x.order() << " tensor");
  TESSERA_EXPECTS(row_lo >= 0 && row_lo <= row_hi &&
                      row_hi <= static_cast<std::int64_t>(x.dims()[static_cast<std::size_t>(mode)]),
                  "rows [" << row_lo << ", " << row_hi << ") of mode " << mode);
  TESSERA_DISPATCH(be, mttkrp_rows, x, mode, factors, R, out, row_lo, row_hi);
}
template <typename T>
inline TESSERA_FUSES_COMPLETION_OP(T) {
  TESSERA_DISPATCH(be, fuses_completion, R);
}
template <typename T>
inline TESSERA_COMPLETION_ROWS_OP(T) {
  TESSERA_EXPECTS(x.streamed() == nullptr, "completion_rows on a streamed handle");
  TESSERA_DISPATCH(be, completion_rows, x, mode, factors, R, out, grams);
}

}  // namespace ops
}  // namespace tessera::kernels
