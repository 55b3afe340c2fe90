// The reference backend's CP-APR operations (kernels/ops/apr.hpp): plain loops over the COO
// nonzeros and the factor rows, in double. The cpu backend has its own (kernels/cpu/apr.cpp).
#include "kernels/ops/apr.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/backend.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels::reference {

template <typename T>
void poisson_phi(Backend<T>& be, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, double eps, T* out,
                 double* host_sums) {
  (void)be;
  const ReferenceTensor<T>& h = reference_handle(x);
  const SparseTensor<T>& c = h.coo();
  const int N = c.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  TESSERA_EXPECTS(eps > 0, "eps must be positive, got " << eps);
  Timer t;
  const auto Rs = static_cast<std::size_t>(R);
  const auto rows = static_cast<std::size_t>(c.dims[static_cast<std::size_t>(mode)]);
  std::vector<double> acc(out != nullptr ? rows * Rs : 0, 0.0), hk(Rs);
  double loglik = 0, inner = 0;
  for (nnz_t k = 0; k < c.nnz(); ++k) {
    std::fill(hk.begin(), hk.end(), 1.0);
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      const T* row = factors[static_cast<std::size_t>(m)] +
                     static_cast<std::size_t>(c.idx[static_cast<std::size_t>(m)][k]) * Rs;
      for (std::size_t r = 0; r < Rs; ++r) hk[r] *= static_cast<double>(row[r]);
    }
    const auto i = static_cast<std::size_t>(c.idx[static_cast<std::size_t>(mode)][k]);
    const T* b = factors[static_cast<std::size_t>(mode)] + i * Rs;
    double model = 0;
    for (std::size_t r = 0; r < Rs; ++r) model += static_cast<double>(b[r]) * hk[r];
    const double v = static_cast<double>(c.vals[k]);
    const double den = std::max(model, eps);
    loglik += v * std::log(den);
    inner += v * model;
    if (out != nullptr)
      for (std::size_t r = 0; r < Rs; ++r) acc[i * Rs + r] += v / den * hk[r];
  }
  if (out != nullptr)
    for (std::size_t e = 0; e < acc.size(); ++e) out[e] = static_cast<T>(acc[e]);
  if (host_sums != nullptr) {
    host_sums[0] = loglik;
    host_sums[1] = inner;
  }
  h.record_compute(t.seconds());
}
TESSERA_INSTANTIATE_OP(TESSERA_POISSON_PHI_OP);

template <typename T>
double apr_kkt_update(Backend<T>& be, T* B, const T* Phi, std::int64_t rows, int R, bool update) {
  (void)be;
  const std::int64_t n = rows * R;
  double kkt = 0;
  for (std::int64_t e = 0; e < n; ++e)
    kkt = std::max(
        kkt, std::abs(std::min(static_cast<double>(B[e]), 1.0 - static_cast<double>(Phi[e]))));
  if (update)
    for (std::int64_t e = 0; e < n; ++e) B[e] *= Phi[e];
  return kkt;
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_KKT_UPDATE_OP);

template <typename T>
std::int64_t apr_shift(Backend<T>& be, T* A, const T* Phi, std::int64_t rows, int R, double kappa,
                       double kappa_tol) {
  (void)be;
  const std::int64_t n = rows * R;
  std::int64_t changed = 0;
  for (std::int64_t e = 0; e < n; ++e)
    if (static_cast<double>(Phi[e]) > 1.0 && static_cast<double>(A[e]) < kappa_tol) {
      A[e] = static_cast<T>(static_cast<double>(A[e]) + kappa);
      ++changed;
    }
  return changed;
}
TESSERA_INSTANTIATE_OP(TESSERA_APR_SHIFT_OP);

template <typename T>
void column_sums(Backend<T>& be, const T* A, std::int64_t rows, int R, double* host_out) {
  (void)be;
  std::fill(host_out, host_out + R, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int r = 0; r < R; ++r) host_out[r] += static_cast<double>(A[i * R + r]);
}
TESSERA_INSTANTIATE_OP(TESSERA_COLUMN_SUMS_OP);

}  // namespace tessera::kernels::reference
