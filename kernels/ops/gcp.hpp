// The operations of generalized CP by stochastic gradients (GCP-SGD with Adam;
// src/engine/algo/cp_gcp.cpp, docs/counts.md): the sampled loss and gradient, and the Adam
// step, one declaration each, implemented by every backend (kernels/ops/common.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gcp_loss.hpp"
#include "kernels/gcp_sample.hpp"
#include "kernels/ops/common.hpp"
#include "tensor/sparse_tensor.hpp"

/// GCP's sampled loss and gradient with semi-stratified weights. `samples` (host memory:
/// idx per mode with global coordinates below dims, vals = the data x_s) holds first
/// `nonzero_samples` entries drawn from the stored nonzeros, then entries drawn uniformly
/// from all entries whose data is taken as 0 (their vals are 0). With m_s the model at sample s
/// (sum_r prod_n factors[n](i_n, r); factors: dims[n] x R row-major, backend memory), and
/// c_s = w_nonzero (f(x_s, m_s) - f(0, m_s)) for a nonzero sample and w_zero f(0, m_s) for a
/// zero sample (derivatives alike: d_s with f'):
///  - *host_loss (if not null) = sum_s c_s, accumulated in double;
///  - grads (empty, or one pointer per mode to dims[n] x R in backend memory, overwritten):
///    grads[n] row i = sum over the samples with i_n = i of d_s prod_{k != n} factors[k](i_k, :).
/// Summed over disjoint sample sets the results add up (the ranks' parts are all-reduced).
#define TESSERA_GCP_GRADIENT_OP(T)                                                                \
  void gcp_gradient(Backend<T>& be, const SparseTensor<T>& samples, nnz_t nonzero_samples,        \
                    double w_nonzero, double w_zero, const std::vector<const T*>& factors, int R, \
                    const GcpLossSpec& loss, const std::vector<T*>& grads, double* host_loss)

/// `train`'s entries for ops::gcp_sampled_gradient (kernels/gcp_sample.hpp's GcpEntries: its
/// own arrays on a host backend, a copy uploaded once on a device backend).
#define TESSERA_GCP_ENTRIES_OP(T) \
  GcpEntries<T> gcp_entries(Backend<T>& be, const SparseTensor<T>& train)

/// gcp_gradient on the samples a step draws (kernels/gcp_sample.hpp) from the training entries
/// `train` (this rank's draw.mine of them, from gcp_entries): the same results as
/// gcp_gradient(be, gcp_draw_samples(draw, train, dims, &k), k, ...) to the
/// order of the sums. The cuda backend draws the samples in its kernel: they never pass
/// through host memory. dims: the tensor's, one per mode.
#define TESSERA_GCP_SAMPLED_GRADIENT_OP(T)                                                   \
  void gcp_sampled_gradient(Backend<T>& be, const GcpDraw& draw, const GcpEntries<T>& train, \
                            const std::vector<std::uint64_t>& dims, double w_nonzero,        \
                            double w_zero, const std::vector<const T*>& factors, int R,      \
                            const GcpLossSpec& loss, const std::vector<T*>& grads,           \
                            double* host_loss)

/// One Adam step (Kingma and Ba) on n values in backend memory at step t >= 1: m = b1 m +
/// (1 - b1) g; v = b2 v + (1 - b2) g^2; x -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) +
/// eps); then x = max(x, 0) when `nonnegative`.
#define TESSERA_ADAM_STEP_OP(T)                                                           \
  void adam_step(Backend<T>& be, T* x, const T* g, T* m, T* v, std::int64_t n, double lr, \
                 double beta1, double beta2, double eps, std::int64_t t, bool nonnegative)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_GCP_GRADIENT_OP)
TESSERA_DECLARE_OP(TESSERA_GCP_ENTRIES_OP)
TESSERA_DECLARE_OP(TESSERA_GCP_SAMPLED_GRADIENT_OP)
TESSERA_DECLARE_OP(TESSERA_ADAM_STEP_OP)

namespace ops {

template <typename T>
inline TESSERA_GCP_GRADIENT_OP(T) {
  TESSERA_DISPATCH(be, gcp_gradient, samples, nonzero_samples, w_nonzero, w_zero, factors, R, loss,
                   grads, host_loss);
}
template <typename T>
inline TESSERA_GCP_ENTRIES_OP(T) {
  TESSERA_DISPATCH(be, gcp_entries, train);
}
template <typename T>
inline TESSERA_GCP_SAMPLED_GRADIENT_OP(T) {
  TESSERA_DISPATCH(be, gcp_sampled_gradient, draw, train, dims, w_nonzero, w_zero, factors, R, loss,
                   grads, host_loss);
}
template <typename T>
inline TESSERA_ADAM_STEP_OP(T) {
  TESSERA_DISPATCH(be, adam_step, x, g, m, v, n, lr, beta1, beta2, eps, t, nonnegative);
}

}  // namespace ops
}  // namespace tessera::kernels
