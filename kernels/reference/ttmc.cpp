// Reference TTMc: one pass over the COO nonzeros, the Kronecker product of the factor rows
// built per nonzero, products and sums in double. Slow and obviously correct; every other
// backend is tested against it.
#include "kernels/ttmc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops/ttmc.hpp"
#include "kernels/reference/backend.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

std::int64_t ttmc_output_cols(const std::vector<int>& ranks, int mode) {
  const int N = static_cast<int>(ranks.size());
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  std::int64_t cols = 1;
  for (int m = 0; m < N; ++m) {
    if (m == mode) continue;
    TESSERA_INPUT_CHECK(ranks[m] >= 1,
                        "TTMc: the rank of mode " << m << " must be >= 1, got " << ranks[m]);
    TESSERA_INPUT_CHECK(cols <= std::numeric_limits<std::int64_t>::max() / ranks[m],
                        "TTMc of mode " << mode
                                        << ": the product of the other modes' ranks overflows "
                                           "a 64-bit column count; use smaller ranks");
    cols *= ranks[m];
  }
  return cols;
}

std::size_t ttmc_output_bytes(std::int64_t distinct_rows, const std::vector<int>& ranks, int mode,
                              std::size_t value_size) {
  TESSERA_EXPECTS(distinct_rows >= 0, "negative row count " << distinct_rows);
  const std::int64_t cols = ttmc_output_cols(ranks, mode);
  const long double need = static_cast<long double>(distinct_rows) *
                           static_cast<long double>(cols) * static_cast<long double>(value_size);
  TESSERA_INPUT_CHECK(need < static_cast<long double>(std::numeric_limits<std::size_t>::max()) &&
                          need < static_cast<long double>(std::numeric_limits<std::int64_t>::max()),
                      "TTMc of mode " << mode << " needs about " << static_cast<double>(need)
                                      << " bytes (" << distinct_rows << " rows x " << cols
                                      << " columns x " << value_size
                                      << " bytes), more than can be addressed; use smaller ranks");
  return static_cast<std::size_t>(distinct_rows) * static_cast<std::size_t>(cols) * value_size;
}

namespace detail {
template <typename T>
std::int64_t ttmc_check_args(int order, int mode, const std::vector<const T*>& factors,
                             const std::vector<int>& ranks, std::int64_t distinct_rows,
                             std::size_t max_bytes) {
  TESSERA_EXPECTS(mode >= 0 && mode < order, "mode " << mode << " outside 0.." << order - 1);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == order,
                  "need one factor pointer per mode: " << factors.size() << " for order " << order);
  TESSERA_INPUT_CHECK(static_cast<int>(ranks.size()) == order,
                      "TTMc needs one rank per mode: " << ranks.size() << " ranks for an order-"
                                                       << order << " tensor");
  for (int m = 0; m < order; ++m)
    TESSERA_EXPECTS(m == mode || factors[m] != nullptr, "factor " << m << " is null");
  const std::int64_t cols = ttmc_output_cols(ranks, mode);
  const std::size_t bytes = ttmc_output_bytes(distinct_rows, ranks, mode, sizeof(T));
  TESSERA_INPUT_CHECK(max_bytes == 0 || bytes <= max_bytes,
                      "TTMc of mode " << mode << " needs " << bytes << " bytes (" << distinct_rows
                                      << " rows x " << cols << " columns x " << sizeof(T)
                                      << " bytes), over the limit of " << max_bytes
                                      << " bytes; use smaller ranks for the other modes");
  return cols;
}
template std::int64_t ttmc_check_args<float>(int, int, const std::vector<const float*>&,
                                             const std::vector<int>&, std::int64_t, std::size_t);
template std::int64_t ttmc_check_args<double>(int, int, const std::vector<const double*>&,
                                              const std::vector<int>&, std::int64_t, std::size_t);
}  // namespace detail

namespace reference {

template <typename T>
SemiSparse<T> ttmc(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors,
                   const std::vector<int>& ranks, std::size_t max_bytes) {
  check_kernel_input(x);
  const int N = x.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  SemiSparse<T> y;
  y.rows = x.idx[static_cast<std::size_t>(mode)];
  std::sort(y.rows.begin(), y.rows.end());
  y.rows.erase(std::unique(y.rows.begin(), y.rows.end()), y.rows.end());
  y.cols = detail::ttmc_check_args(N, mode, factors, ranks,
                                   static_cast<std::int64_t>(y.rows.size()), max_bytes);
  const auto cols = static_cast<std::size_t>(y.cols);
  std::vector<double> acc(y.rows.size() * cols, 0.0);
  std::vector<double> kron(cols), next(cols);
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    // kron = val * U_{m1}(i_{m1}, :) (x) U_{m2}(i_{m2}, :) (x) ..., built left to right so
    // the last mode varies fastest.
    std::size_t len = 1;
    kron[0] = static_cast<double>(x.vals[k]);
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      const auto R = static_cast<std::size_t>(ranks[m]);
      const T* u = factors[m] + static_cast<std::size_t>(x.idx[m][k]) * R;
      for (std::size_t a = 0; a < len; ++a)
        for (std::size_t r = 0; r < R; ++r) next[a * R + r] = kron[a] * static_cast<double>(u[r]);
      len *= R;
      std::swap(kron, next);
    }
    const index_t i = x.idx[static_cast<std::size_t>(mode)][k];
    const auto row = static_cast<std::size_t>(std::lower_bound(y.rows.begin(), y.rows.end(), i) -
                                              y.rows.begin());
    double* o = acc.data() + row * cols;
    for (std::size_t c = 0; c < cols; ++c) o[c] += kron[c];
  }
  y.data.assign(acc.begin(), acc.end());
  return y;
}

std::size_t ttmc_scratch_bytes(std::int64_t rows, const std::vector<int>& ranks, int mode) {
  const auto cols = static_cast<std::size_t>(ttmc_output_cols(ranks, mode));
  return (static_cast<std::size_t>(std::max<std::int64_t>(rows, 0)) + 2) * cols * sizeof(double);
}

template SemiSparse<float> ttmc<float>(const SparseTensor<float>&, int,
                                       const std::vector<const float*>&, const std::vector<int>&,
                                       std::size_t);
template SemiSparse<double> ttmc<double>(const SparseTensor<double>&, int,
                                         const std::vector<const double*>&, const std::vector<int>&,
                                         std::size_t);

template <typename T>
std::vector<index_t> ttmc_rows(Backend<T>& be, const TensorHandle<T>& x, int mode) {
  (void)be;
  const auto& c = reference_handle(x).coo();
  TESSERA_EXPECTS(mode >= 0 && mode < c.order(),
                  "mode " << mode << " outside 0.." << c.order() - 1);
  std::vector<index_t> rows = c.idx[static_cast<std::size_t>(mode)];
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

template <typename T>
std::size_t ttmc_scratch_bytes(Backend<T>& be, const TensorHandle<T>& x, int mode,
                               const std::vector<int>& ranks) {
  const auto rows = static_cast<std::int64_t>(reference::ttmc_rows(be, x, mode).size());
  // reference::ttmc returns a fresh output that is copied into `out`.
  return reference::ttmc_scratch_bytes(rows, ranks, mode) +
         ttmc_output_bytes(rows, ranks, mode, sizeof(T));
}

template <typename T>
void ttmc(Backend<T>& be, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out) {
  (void)be;
  const ReferenceTensor<T>& h = reference_handle(x);
  Timer t;
  const SemiSparse<T> y = reference::ttmc(h.coo(), mode, factors, ranks);
  std::copy(y.data.begin(), y.data.end(), out);
  h.record_compute(t.seconds());
}

TESSERA_INSTANTIATE_OP(TESSERA_TTMC_ROWS_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_SCRATCH_BYTES_OP);
TESSERA_INSTANTIATE_OP(TESSERA_TTMC_OP);

}  // namespace reference
}  // namespace tessera::kernels
