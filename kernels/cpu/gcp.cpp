// The cpu backend's GCP operations (kernels/ops/gcp.hpp). The sampled gradient runs in two
// OpenMP passes: each sample's model value, loss term c_s and derivative d_s; then, per mode,
// the samples grouped by their row (a stable counting sort) and the rows spread over the team,
// each row summing its samples' terms in sample order. Every output element is thus summed in
// one fixed order (the reference backend's), whatever the team size, without per-thread copies
// of the gradients. The Adam step is an OpenMP loop.
#include "kernels/ops/gcp.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/cpu/backend.hpp"
#include "util/error.hpp"

namespace tessera::kernels::cpu {

template <typename T>
void gcp_gradient(Backend<T>& be, const SparseTensor<T>& samples, nnz_t nonzero_samples,
                  double w_nonzero, double w_zero, const std::vector<const T*>& factors, int R,
                  const GcpLossSpec& loss, const std::vector<T*>& grads, double* host_loss) {
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
    const index_t top = ix.empty() ? 0 : *std::max_element(ix.begin(), ix.end());
    TESSERA_EXPECTS(ix.empty() || top < samples.dims[static_cast<std::size_t>(n)],
                    "samples: index " << top << " of mode " << n << " outside 0.."
                                      << samples.dims[static_cast<std::size_t>(n)] - 1);
  }
  const int team = team_of(be);
  const auto Rs = static_cast<std::size_t>(R);
  const auto Nz = static_cast<std::size_t>(N);

  // Pass 1: c_s and d_s of every sample.
  std::vector<double> c(static_cast<std::size_t>(S)), d(static_cast<std::size_t>(S));
#pragma omp parallel for num_threads(team) schedule(static) if (S > 256)
  for (nnz_t s = 0; s < S; ++s) {
    const auto su = static_cast<std::size_t>(s);
    double m = 0;
    for (std::size_t r = 0; r < Rs; ++r) {
      double p = 1;
      for (std::size_t k = 0; k < Nz; ++k)
        p *= static_cast<double>(factors[k][static_cast<std::size_t>(samples.idx[k][su]) * Rs + r]);
      m += p;
    }
    if (s < nonzero_samples) {
      const double x = static_cast<double>(samples.vals[su]);
      c[su] = w_nonzero * (gcp_value(loss, x, m) - gcp_value(loss, 0.0, m));
      d[su] = w_nonzero * (gcp_deriv(loss, x, m) - gcp_deriv(loss, 0.0, m));
    } else {
      c[su] = w_zero * gcp_value(loss, 0.0, m);
      d[su] = w_zero * gcp_deriv(loss, 0.0, m);
    }
  }
  if (host_loss != nullptr) {  // S adds in sample order: the reference's sum
    double total = 0;
    for (double v : c) total += v;
    *host_loss = total;
  }
  if (grads.empty()) return;

  // Pass 2, per mode: the samples of each row (stable counting sort), the rows over the team.
  std::vector<nnz_t> start, order(static_cast<std::size_t>(S));
  for (std::size_t n = 0; n < Nz; ++n) {
    const auto rows = static_cast<std::size_t>(samples.dims[n]);
    const auto& ix = samples.idx[n];
    start.assign(rows + 1, 0);
    for (index_t i : ix) ++start[static_cast<std::size_t>(i) + 1];
    for (std::size_t i = 0; i < rows; ++i) start[i + 1] += start[i];
    {
      std::vector<nnz_t> next(start.begin(), start.end() - 1);
      for (nnz_t s = 0; s < S; ++s)
        order[static_cast<std::size_t>(next[ix[static_cast<std::size_t>(s)]]++)] = s;
    }
    T* G = grads[n];
    const auto rows64 = static_cast<std::int64_t>(rows);
#pragma omp parallel num_threads(team) if (rows * Rs > 4096)
    {
      std::vector<double> acc(Rs);
#pragma omp for schedule(dynamic, 64)
      for (std::int64_t i = 0; i < rows64; ++i) {
        const auto iu = static_cast<std::size_t>(i);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (nnz_t q = start[iu]; q < start[iu + 1]; ++q) {
          const auto su = static_cast<std::size_t>(order[static_cast<std::size_t>(q)]);
          for (std::size_t r = 0; r < Rs; ++r) {
            double p = d[su];
            for (std::size_t k = 0; k < Nz; ++k)
              if (k != n)
                p *= static_cast<double>(
                    factors[k][static_cast<std::size_t>(samples.idx[k][su]) * Rs + r]);
            acc[r] += p;
          }
        }
        for (std::size_t r = 0; r < Rs; ++r) G[iu * Rs + r] = static_cast<T>(acc[r]);
      }
    }
  }
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
  TESSERA_EXPECTS(t >= 1, "adam_step: step t must be >= 1, got " << t);
  TESSERA_EXPECTS(n >= 0, "adam_step: n must be >= 0, got " << n);
  const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
#pragma omp parallel for num_threads(team_of(be)) schedule(static) if (n > (1 << 16))
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

}  // namespace tessera::kernels::cpu
