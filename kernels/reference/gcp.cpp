// The reference backend's GCP operations (kernels/ops/gcp.hpp): plain loops over the samples
// and the factor rows, in double.
#include "kernels/ops/gcp.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/backend.hpp"
#include "util/error.hpp"

namespace tessera::kernels::reference {

template <typename T>
void gcp_gradient(Backend<T>& be, const SparseTensor<T>& samples, nnz_t nonzero_samples,
                  double w_nonzero, double w_zero, const std::vector<const T*>& factors, int R,
                  const GcpLossSpec& loss, const std::vector<T*>& grads, double* host_loss) {
  (void)be;
  const int N = samples.order();
  const nnz_t S = samples.nnz();
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  TESSERA_EXPECTS(grads.empty() || static_cast<int>(grads.size()) == N,
                  "need no gradient or one per mode: " << grads.size() << " for order " << N);
  TESSERA_EXPECTS(nonzero_samples >= 0 && nonzero_samples <= S,
                  "nonzero_samples " << nonzero_samples << " outside 0.." << S);
  for (int n = 0; n < N; ++n) {
    const auto& ix = samples.idx[static_cast<std::size_t>(n)];
    TESSERA_EXPECTS(static_cast<nnz_t>(ix.size()) == S, "samples: mode "
                                                            << n << " has " << ix.size()
                                                            << " indices for " << S << " values");
    for (index_t i : ix)
      TESSERA_EXPECTS(i < samples.dims[static_cast<std::size_t>(n)],
                      "samples: index " << i << " of mode " << n << " outside 0.."
                                        << samples.dims[static_cast<std::size_t>(n)] - 1);
  }
  const auto Rs = static_cast<std::size_t>(R);
  std::vector<std::vector<double>> acc(grads.size());
  for (std::size_t n = 0; n < grads.size(); ++n)
    acc[n].assign(static_cast<std::size_t>(samples.dims[n]) * Rs, 0.0);
  std::vector<const T*> row(static_cast<std::size_t>(N));
  double total = 0;
  for (nnz_t s = 0; s < S; ++s) {
    for (std::size_t k = 0; k < row.size(); ++k)
      row[k] =
          factors[k] + static_cast<std::size_t>(samples.idx[k][static_cast<std::size_t>(s)]) * Rs;
    double m = 0;
    for (std::size_t r = 0; r < Rs; ++r) {
      double p = 1;
      for (std::size_t k = 0; k < row.size(); ++k) p *= static_cast<double>(row[k][r]);
      m += p;
    }
    double c = 0, d = 0;
    if (s < nonzero_samples) {
      const double x = static_cast<double>(samples.vals[static_cast<std::size_t>(s)]);
      c = w_nonzero * (gcp_value(loss, x, m) - gcp_value(loss, 0.0, m));
      d = w_nonzero * (gcp_deriv(loss, x, m) - gcp_deriv(loss, 0.0, m));
    } else {
      c = w_zero * gcp_value(loss, 0.0, m);
      d = w_zero * gcp_deriv(loss, 0.0, m);
    }
    total += c;
    for (std::size_t n = 0; n < acc.size(); ++n) {
      double* g = acc[n].data() +
                  static_cast<std::size_t>(samples.idx[n][static_cast<std::size_t>(s)]) * Rs;
      for (std::size_t r = 0; r < Rs; ++r) {
        double p = d;
        for (std::size_t k = 0; k < row.size(); ++k)
          if (k != n) p *= static_cast<double>(row[k][r]);
        g[r] += p;
      }
    }
  }
  for (std::size_t n = 0; n < grads.size(); ++n)
    for (std::size_t e = 0; e < acc[n].size(); ++e) grads[n][e] = static_cast<T>(acc[n][e]);
  if (host_loss != nullptr) *host_loss = total;
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_GRADIENT_OP);

/// A host backend reads the training entries where they are.
template <typename T>
GcpEntries<T> gcp_entries(Backend<T>& be, const SparseTensor<T>& train) {
  (void)be;
  return host_gcp_entries(train);
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_ENTRIES_OP);

/// A host backend draws the step's samples into host memory and takes their gradient.
template <typename T>
void gcp_sampled_gradient(Backend<T>& be, const GcpDraw& draw, const GcpEntries<T>& train,
                          const std::vector<std::uint64_t>& dims, double w_nonzero, double w_zero,
                          const std::vector<const T*>& factors, int R, const GcpLossSpec& loss,
                          const std::vector<T*>& grads, double* host_loss) {
  nnz_t k = 0;
  const SparseTensor<T> s = gcp_draw_samples(draw, train, dims, &k);
  gcp_gradient(be, s, k, w_nonzero, w_zero, factors, R, loss, grads, host_loss);
}
TESSERA_INSTANTIATE_OP(TESSERA_GCP_SAMPLED_GRADIENT_OP);

template <typename T>
void adam_step(Backend<T>& be, T* x, const T* g, T* m, T* v, std::int64_t n, double lr,
               double beta1, double beta2, double eps, std::int64_t t, bool nonnegative) {
  (void)be;
  TESSERA_EXPECTS(t >= 1, "adam_step: step t must be >= 1, got " << t);
  TESSERA_EXPECTS(n >= 0, "adam_step: n must be >= 0, got " << n);
  const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
  for (std::int64_t e = 0; e < n; ++e) {
    const double ge = static_cast<double>(g[e]);
    const double me = beta1 * static_cast<double>(m[e]) + (1 - beta1) * ge;
    const double ve = beta2 * static_cast<double>(v[e]) + (1 - beta2) * ge * ge;
    double xe = static_cast<double>(x[e]) - lr * (me / c1) / (std::sqrt(ve / c2) + eps);
    if (nonnegative) xe = std::max(xe, 0.0);
    m[e] = static_cast<T>(me);
    v[e] = static_cast<T>(ve);
    x[e] = static_cast<T>(xe);
  }
}
TESSERA_INSTANTIATE_OP(TESSERA_ADAM_STEP_OP);

}  // namespace tessera::kernels::reference
