// Memory tier 3 on the host backends (kernels/ops/mttkrp.hpp): a streamed chunk is prepared
// as a tensor of its own, its MTTKRP computed into a scratch kept between calls
// (Backend::host_accumulate) and added into the output. Every step goes through the ops::
// dispatchers, so the cpu backend (whose versions call these) runs its own MTTKRP.
#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels::reference {

template <typename T>
void mttkrp_accumulate(Backend<T>& be, const SparseTensor<T>& chunk, int mode,
                       const std::vector<const T*>& factors, int R, T* out, int sorted_mode,
                       bool persistent) {
  (void)sorted_mode;  // host backends do not sort chunks
  (void)persistent;   // nor keep them: the call reads the chunk and is done with it
  TESSERA_EXPECTS(mode >= 0 && mode < chunk.order(), "mttkrp_accumulate: mode "
                                                         << mode << " of an order-" << chunk.order()
                                                         << " chunk");
  TESSERA_EXPECTS(R >= 1, "mttkrp_accumulate: rank R = " << R);
  if (chunk.nnz() == 0) return;
  Timer t;
  auto& acc = be.host_accumulate();
  const auto rows = static_cast<std::int64_t>(chunk.dims[static_cast<std::size_t>(mode)]);
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(R);
  if (acc.scratch.size() < n) {
    acc.scratch = Array<T>();  // free first: the old buffer is too small
    acc.scratch = be.allocate(n);
  }
  {
    auto h = be.prepare(chunk);
    ops::mttkrp(be, *h, mode, factors, R, acc.scratch.data());
    ops::add_rows(be, acc.scratch.data(), rows, R, {}, out);
    be.synchronize();  // the chunk's handle is released after this
  }
  acc.times.compute += t.seconds();
  ++acc.times.chunks;
}

template <typename T>
int prepare_stream_chunk(Backend<T>& be, SparseTensor<T>& chunk) {
  (void)be, (void)chunk;
  return -1;  // left as it is
}

template <typename T>
std::size_t stream_chunk_scratch_bytes(const Backend<T>& be, nnz_t chunk_nnz) {
  (void)be, (void)chunk_nnz;
  return 0;
}

template <typename T>
AccumulateTimes take_accumulate_times(Backend<T>& be) {
  be.synchronize();
  auto& acc = be.host_accumulate();
  const AccumulateTimes t = acc.times;
  acc.times = AccumulateTimes{};
  return t;
}

TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ACCUMULATE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_PREPARE_STREAM_CHUNK_OP);
TESSERA_INSTANTIATE_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP);

}  // namespace tessera::kernels::reference
