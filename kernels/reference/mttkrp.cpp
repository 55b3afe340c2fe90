// Reference MTTKRP: one pass over the COO nonzeros, products and sums in double. Slow and
// obviously correct; every other backend is tested against it.
#include "kernels/mttkrp.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/ops/mttkrp.hpp"
#include "kernels/reference/backend.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

template <typename T>
void check_kernel_shape(const SparseTensor<T>& x) {
  const int N = x.order();
  TESSERA_EXPECTS(N >= 1 && N <= kMaxOrder,
                  "tensor order " << N << " outside 1.." << kMaxOrder << " for the kernels");
  TESSERA_EXPECTS(static_cast<int>(x.idx.size()) == N,
                  x.idx.size() << " coordinate arrays for an order-" << N << " tensor");
  const std::size_t nnz = x.vals.size();
  for (int m = 0; m < N; ++m) {
    TESSERA_EXPECTS(x.idx[m].size() == nnz, "mode " << m << " has " << x.idx[m].size()
                                                    << " coordinates for " << nnz << " values");
    TESSERA_EXPECTS(x.dims[m] <= (std::uint64_t{1} << 32),
                    "mode " << m << " length " << x.dims[m] << " exceeds 2^32");
  }
}

template <typename T>
void check_kernel_input(const SparseTensor<T>& x) {
  check_kernel_shape(x);
  const int N = x.order();
  const std::size_t nnz = x.vals.size();
  for (int m = 0; m < N; ++m) {
    // The largest coordinate, over the node's threads for large tensors (a memory-bound
    // scan that a GPU run would otherwise wait for on one core).
    const index_t* col = x.idx[m].data();
    const auto n = static_cast<std::int64_t>(nnz);
    index_t mx = 0;
#pragma omp parallel for reduction(max : mx) schedule(static) if (n > (std::int64_t{1} << 20))
    for (std::int64_t k = 0; k < n; ++k) mx = std::max(mx, col[k]);
    TESSERA_EXPECTS(nnz == 0 || mx < x.dims[m],
                    "mode " << m << " coordinate " << mx << " >= mode length " << x.dims[m]);
  }
}

template void check_kernel_input<float>(const SparseTensor<float>&);
template void check_kernel_input<double>(const SparseTensor<double>&);
template void check_kernel_shape<float>(const SparseTensor<float>&);
template void check_kernel_shape<double>(const SparseTensor<double>&);

namespace reference {

template <typename T>
void mttkrp(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors, int R,
            T* out) {
  const int N = x.order();
  TESSERA_EXPECTS(N >= 1 && N <= kMaxOrder, "tensor order " << N << " outside 1.." << kMaxOrder);
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  for (int m = 0; m < N; ++m)
    TESSERA_EXPECTS(m == mode || factors[m] != nullptr || x.nnz() == 0,
                    "factor " << m << " is null");
  const std::size_t rows = static_cast<std::size_t>(x.dims[mode]);
  const std::size_t Rs = static_cast<std::size_t>(R);
  std::vector<double> acc(rows * Rs, 0.0);
  std::vector<double> prod(Rs);
  const nnz_t nnz = x.nnz();
  for (nnz_t k = 0; k < nnz; ++k) {
    // Order 1: the Khatri-Rao product of no factors is a row of ones, so out(i, :) is the
    // sum of the values with coordinate i, in every column.
    std::fill(prod.begin(), prod.end(), static_cast<double>(x.vals[k]));
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      const T* row = factors[m] + static_cast<std::size_t>(x.idx[m][k]) * Rs;
      for (std::size_t r = 0; r < Rs; ++r) prod[r] *= static_cast<double>(row[r]);
    }
    double* o = acc.data() + static_cast<std::size_t>(x.idx[mode][k]) * Rs;
    for (std::size_t r = 0; r < Rs; ++r) o[r] += prod[r];
  }
  for (std::size_t k = 0; k < rows * Rs; ++k) out[k] = static_cast<T>(acc[k]);
}

/// ops::completion_rows on a COO: out = the MTTKRP of x, grams row i = sum over the stored
/// entries in row i of h h^T packed (values not read), in double.
template <typename T>
void completion_rows(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors,
                     int R, T* out, T* grams) {
  const int N = x.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  const std::size_t rows = static_cast<std::size_t>(x.dims[mode]);
  const std::size_t Rs = static_cast<std::size_t>(R);
  const std::size_t W = Rs * (Rs + 1) / 2;
  std::vector<double> m(rows * Rs, 0.0), g(rows * W, 0.0), h(Rs);
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    std::fill(h.begin(), h.end(), 1.0);
    for (int n = 0; n < N; ++n) {
      if (n == mode) continue;
      const T* row = factors[n] + static_cast<std::size_t>(x.idx[n][k]) * Rs;
      for (std::size_t r = 0; r < Rs; ++r) h[r] *= static_cast<double>(row[r]);
    }
    const auto i = static_cast<std::size_t>(x.idx[mode][k]);
    add_completion_terms(h, static_cast<double>(x.vals[k]), m.data() + i * Rs, g.data() + i * W);
  }
  for (std::size_t k = 0; k < rows * Rs; ++k) out[k] = static_cast<T>(m[k]);
  for (std::size_t k = 0; k < rows * W; ++k) grams[k] = static_cast<T>(g[k]);
}

template void completion_rows<float>(const SparseTensor<float>&, int,
                                     const std::vector<const float*>&, int, float*, float*);
template void completion_rows<double>(const SparseTensor<double>&, int,
                                      const std::vector<const double*>&, int, double*, double*);
template void mttkrp<float>(const SparseTensor<float>&, int, const std::vector<const float*>&, int,
                            float*);
template void mttkrp<double>(const SparseTensor<double>&, int, const std::vector<const double*>&,
                             int, double*);

template <typename T>
void mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode,
            const std::vector<const T*>& factors, int R, T* out) {
  (void)be;
  const ReferenceTensor<T>& h = reference_handle(x);
  Timer t;
  reference::mttkrp(h.coo(), mode, factors, R, out);
  h.record_compute(t.seconds());
}

TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_OP);

/// Counted over the COO; the rows are computed whole (pieces = false).
template <typename T>
RowRanges mttkrp_row_ranges(Backend<T>& be, const TensorHandle<T>& x, int mode,
                            const std::vector<std::int64_t>& bounds) {
  (void)be;
  const SparseTensor<T>& c = reference_handle(x).coo();
  RowRanges r;
  r.nnz.assign(bounds.size() > 1 ? bounds.size() - 1 : 0, 0);
  if (r.nnz.empty()) return r;
  for (nnz_t k = 0; k < c.nnz(); ++k) {
    const auto i = static_cast<std::int64_t>(c.idx[static_cast<std::size_t>(mode)][k]);
    const auto it = std::upper_bound(bounds.begin(), bounds.end(), i);
    // Range j holds bounds[j] <= i < bounds[j + 1]; rows outside every range are not counted.
    if (it == bounds.begin() || it == bounds.end()) continue;
    ++r.nnz[static_cast<std::size_t>(it - bounds.begin() - 1)];
  }
  return r;
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROW_RANGES_OP);

/// The host backends' (the cpu backend calls this one): the backend's own whole MTTKRP
/// (dispatched) into scratch, then the rows.
template <typename T>
void mttkrp_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo,
                 std::int64_t row_hi) {
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  const auto Rs = static_cast<std::size_t>(R);
  std::vector<T> whole(static_cast<std::size_t>(x.dims()[static_cast<std::size_t>(mode)]) * Rs);
  ops::mttkrp(be, x, mode, factors, R, whole.data());
  std::copy(whole.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(row_lo) * Rs),
            whole.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(row_hi) * Rs),
            out + static_cast<std::size_t>(row_lo) * Rs);
}
TESSERA_INSTANTIATE_OP(TESSERA_MTTKRP_ROWS_OP);

template <typename T>
void row_grams(Backend<T>& be, const TensorHandle<T>& x, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out) {
  (void)factors;  // the pattern's MTTKRP with the packed outer products
  reference::mttkrp(be, x, mode, packed, R * (R + 1) / 2, out);
}
TESSERA_INSTANTIATE_OP(TESSERA_ROW_GRAMS_OP);

template <typename T>
bool fuses_completion(const Backend<T>& be, int R) {
  (void)be;
  return R >= 1;
}
TESSERA_INSTANTIATE_OP(TESSERA_FUSES_COMPLETION_OP);

template <typename T>
void completion_rows(Backend<T>& be, const TensorHandle<T>& x, int mode,
                     const std::vector<const T*>& factors, int R, T* out, T* grams) {
  (void)be;
  const ReferenceTensor<T>& h = reference_handle(x);
  Timer t;
  completion_rows(h.coo(), mode, factors, R, out, grams);
  h.record_compute(t.seconds());
}
TESSERA_INSTANTIATE_OP(TESSERA_COMPLETION_ROWS_OP);

}  // namespace reference
}  // namespace tessera::kernels
