// The cpu backend's sparse operations (kernels/ops/mttkrp.hpp, ttmc.hpp, sptc.hpp): the
// OpenMP CSF MTTKRP and TTMc on the handle's trees and the OpenMP SpTC, over the backend's
// team. Memory tier 3 and the contraction paths the host backends lack run the reference
// backend's host versions (kernels/reference/accumulate.cpp, sptc.cpp), whose inner
// operations dispatch back to this backend.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/backend.hpp"
#include "kernels/mttkrp.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/sptc.hpp"
#include "kernels/ops/ttmc.hpp"
#include "kernels/ttmc.hpp"
#include "util/timer.hpp"

namespace tessera::kernels::cpu {

// ---- MTTKRP ----

template <typename T>
void mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode,
            const std::vector<const T*>& factors, int R, T* out) {
  const auto& b = static_cast<const CpuBackend<T>&>(be);
  const CpuTensor<T>& h = cpu_handle(x);
  MttkrpOptions opt;
  opt.threads = b.threads();
  opt.isa = b.isa();
  Timer t;
  cpu::mttkrp(h.csf(), mode, factors, R, out, opt);
  h.record_compute(t.seconds());
}
/// Counted from the tree rooted at `mode` (a root node's leaves are a range of the last
/// level); the rows are computed whole (pieces = false).
template <typename T>
RowRanges mttkrp_row_ranges(Backend<T>& be, const TensorHandle<T>& x, int mode,
                            const std::vector<std::int64_t>& bounds) {
  (void)be;
  const CsfTree<T>& t = cpu_handle(x).csf().tree(mode);
  RowRanges r;
  r.nnz.assign(bounds.size() > 1 ? bounds.size() - 1 : 0, 0);
  const auto& roots = t.fids[0];
  // The leaves under root nodes [a, b): follow the pointers down every level.
  auto leaves = [&](std::size_t a, std::size_t b) {
    for (int l = 0; l + 1 < t.order; ++l) {
      a = static_cast<std::size_t>(t.fptr[static_cast<std::size_t>(l)][a]);
      b = static_cast<std::size_t>(t.fptr[static_cast<std::size_t>(l)][b]);
    }
    return static_cast<nnz_t>(b - a);
  };
  for (std::size_t j = 0; j < r.nnz.size(); ++j) {
    const auto first = std::lower_bound(
        roots.begin(), roots.end(), bounds[j],
        [](index_t v, std::int64_t b) { return static_cast<std::int64_t>(v) < b; });
    const auto last = std::lower_bound(
        roots.begin(), roots.end(), bounds[j + 1],
        [](index_t v, std::int64_t b) { return static_cast<std::int64_t>(v) < b; });
    r.nnz[j] = leaves(static_cast<std::size_t>(first - roots.begin()),
                      static_cast<std::size_t>(last - roots.begin()));
  }
  return r;
}
template <typename T>
void mttkrp_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo,
                 std::int64_t row_hi) {
  reference::mttkrp_rows(be, x, mode, factors, R, out, row_lo, row_hi);
}
template <typename T>
void mttkrp_accumulate(Backend<T>& be, const SparseTensor<T>& chunk, int mode,
                       const std::vector<const T*>& factors, int R, T* out, int sorted_mode,
                       bool persistent) {
  reference::mttkrp_accumulate(be, chunk, mode, factors, R, out, sorted_mode, persistent);
}
template <typename T>
int prepare_stream_chunk(Backend<T>& be, SparseTensor<T>& chunk) {
  return reference::prepare_stream_chunk(be, chunk);
}
template <typename T>
std::size_t stream_chunk_scratch_bytes(const Backend<T>& be, nnz_t chunk_nnz) {
  return reference::stream_chunk_scratch_bytes(be, chunk_nnz);
}
template <typename T>
AccumulateTimes take_accumulate_times(Backend<T>& be) {
  return reference::take_accumulate_times(be);
}

// ---- TTMc, on the CSF trees the handle keeps for MTTKRP (a borrowing plan, O(order)) ----

template <typename T>
std::vector<index_t> ttmc_rows(Backend<T>& be, const TensorHandle<T>& x, int mode) {
  const auto& b = static_cast<const CpuBackend<T>&>(be);
  return cpu::ttmc_rows(TtmcPlan<T>(cpu_handle(x).csf(), b.threads()), mode);
}
template <typename T>
std::size_t ttmc_scratch_bytes(Backend<T>& be, const TensorHandle<T>& x, int mode,
                               const std::vector<int>& ranks) {
  const auto& b = static_cast<const CpuBackend<T>&>(be);
  return cpu::ttmc_scratch_bytes(TtmcPlan<T>(cpu_handle(x).csf(), b.threads()), mode, ranks);
}
template <typename T>
void ttmc(Backend<T>& be, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out) {
  const auto& b = static_cast<const CpuBackend<T>&>(be);
  const CpuTensor<T>& h = cpu_handle(x);
  Timer t;
  cpu::ttmc_into(TtmcPlan<T>(h.csf(), b.threads()), mode, factors, ranks, out);
  h.record_compute(t.seconds());
}

template <typename T>
void row_grams(Backend<T>& be, const TensorHandle<T>& x, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out) {
  (void)factors;  // the pattern's MTTKRP with the packed outer products
  cpu::mttkrp(be, x, mode, packed, R * (R + 1) / 2, out);
}

// ---- SpTC ----

template <typename T>
std::unique_ptr<ContractPlan<T>> contract_plan(Backend<T>& be, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  const auto& b = static_cast<const CpuBackend<T>&>(be);
  ContractOptions o;
  o.threads = b.threads();
  return cpu::plan_contract(x, y, spec, o);
}
template <typename T>
SparseTensor<T> contract(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats) {
  (void)be;
  return cpu::contract(plan, stats);
}
template <typename T>
bool contract_into(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink) {
  return reference::contract_into(be, plan, stats, sink);
}
template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Backend<T>& be, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks) {
  return reference::contract_route(be, x, y, spec, ranks);
}

TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_OP);
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROW_RANGES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROWS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ACCUMULATE_OP);
TESSERA_INSTANTIATE_OP(TESSERA_PREPARE_STREAM_CHUNK_OP);
TESSERA_INSTANTIATE_OP(TESSERA_STREAM_CHUNK_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TAKE_ACCUMULATE_TIMES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_ROW_GRAMS_OP);

template <typename T>
bool fuses_completion(const Backend<T>& be, int R) {
  (void)be, (void)R;  // the pattern's wide MTTKRP on the CSF trees, on every thread
  return false;
}
TESSERA_INSTANTIATE_OP(TESSERA_FUSES_COMPLETION_OP);

/// Not the cpu backend's path (fuses_completion is false: completion runs the pattern's wide
/// MTTKRP on every thread); kept whole for the op's contract: one thread walks the tree
/// rooted at `mode`, the Hadamard products of the factor rows carried down its levels, sums
/// in double.
template <typename T>
void completion_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                     const std::vector<const T*>& factors, int R, T* out, T* grams) {
  (void)be;
  const CpuTensor<T>& h = cpu_handle(x);
  TESSERA_EXPECTS(mode >= 0 && mode < h.order(),
                  "mode " << mode << " outside 0.." << h.order() - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(
      static_cast<int>(factors.size()) == h.order(),
      "need one factor pointer per mode: " << factors.size() << " for order " << h.order());
  Timer timer;
  const CsfTree<T>& t = h.csf().tree(mode);
  const int N = t.order;
  const auto Rs = static_cast<std::size_t>(R);
  const std::size_t W = Rs * (Rs + 1) / 2;
  const auto rows = static_cast<std::size_t>(h.csf().dims()[static_cast<std::size_t>(mode)]);
  std::vector<double> m(rows * Rs, 0.0), g(rows * W, 0.0);
  std::vector<std::vector<double>> part(static_cast<std::size_t>(N), std::vector<double>(Rs, 1.0));
  std::size_t row = 0;
  auto leaf = [&](const std::vector<double>& hv, double v) {
    reference::add_completion_terms(hv, v, m.data() + row * Rs, g.data() + row * W);
  };
  auto visit = [&](auto&& self, int level, csf_ptr_t node) -> void {
    const auto l = static_cast<std::size_t>(level);
    const T* frow = factors[static_cast<std::size_t>(t.mode_at_level[l])] +
                    static_cast<std::size_t>(t.fids[l][static_cast<std::size_t>(node)]) * Rs;
    for (std::size_t r = 0; r < Rs; ++r)
      part[l][r] = (level == 1 ? 1.0 : part[l - 1][r]) * static_cast<double>(frow[r]);
    if (level == N - 1)
      return leaf(part[l], static_cast<double>(t.vals[static_cast<std::size_t>(node)]));
    for (csf_ptr_t c = t.fptr[l][static_cast<std::size_t>(node)];
         c < t.fptr[l][static_cast<std::size_t>(node) + 1]; ++c)
      self(self, level + 1, c);
  };
  for (std::size_t root = 0; root < t.nodes(0); ++root) {
    row = static_cast<std::size_t>(t.fids[0][root]);
    if (N == 1) {
      leaf(part[0], static_cast<double>(t.vals[root]));  // h: a row of ones
      continue;
    }
    for (csf_ptr_t c = t.fptr[0][root]; c < t.fptr[0][root + 1]; ++c) visit(visit, 1, c);
  }
  for (std::size_t k = 0; k < rows * Rs; ++k) out[k] = static_cast<T>(m[k]);
  for (std::size_t k = 0; k < rows * W; ++k) grams[k] = static_cast<T>(g[k]);
  h.record_compute(timer.seconds());
}
TESSERA_INSTANTIATE_OP(TESSERA_COMPLETION_ROWS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_ROWS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_PLAN_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_INTO_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_ROUTE_OP);

}  // namespace tessera::kernels::cpu
