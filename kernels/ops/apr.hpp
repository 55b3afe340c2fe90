// The operations of Poisson CP (CP-APR, the multiplicative updates of Chi and Kolda, 2012;
// src/engine/algo/cp_apr.cpp, docs/counts.md): the sparse Phi pass over a prepared tensor and
// the elementwise steps on the factor rows, one declaration each, implemented by every
// backend (kernels/ops/common.hpp; cuda: kernels/cuda/mttkrp/phi.cu, kernels/cuda/dense/apr.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops/common.hpp"

/// CP-APR's Phi for `mode` n: out (dims[n] x R, row-major, backend memory, overwritten) row i
/// = sum over the stored entries x_k of x in row i of mode n of (x_k / max(m_k, eps)) h_k,
/// where h_k (R) is the Hadamard product of the other factors' rows at x_k's coordinates,
/// m_k = <b_i, h_k> the model at x_k, and b_i row i of factors[n] (the mode's factor with the
/// weights folded in: B = A_n diag(lambda)). Rows without stored entries are 0. factors as for
/// mttkrp(), but factors[n] is read. out == nullptr: no Phi (only the sums).
/// host_sums (if not null, 2 values, overwritten): [0] = sum_k x_k log(max(m_k, eps)),
/// [1] = sum_k x_k m_k, accumulated in double (the log-likelihood's data term and <X, model>).
/// Memory tiers 1 and 2 (a streamed handle, tier 3, throws InputError).
#define TESSERA_POISSON_PHI_OP(T)                                                   \
  void poisson_phi(Backend<T>& be, const TensorHandle<T>& x, int mode,              \
                   const std::vector<const T*>& factors, int R, double eps, T* out, \
                   double* host_sums)

/// CP-APR's inner step on B and Phi (rows x R, backend memory): returns the KKT violation
/// max_{i,r} |min(B(i,r), 1 - Phi(i,r))| (0 when rows == 0), computed before any change;
/// when `update`, then B(i,r) *= Phi(i,r).
#define TESSERA_APR_KKT_UPDATE_OP(T) \
  double apr_kkt_update(Backend<T>& be, T* B, const T* Phi, std::int64_t rows, int R, bool update)

/// CP-APR's fix of inadmissible zeros (Chi and Kolda, section 4.3): A(i,r) += kappa where
/// Phi(i,r) > 1 and A(i,r) < kappa_tol (rows x R, backend memory). Returns the entries
/// changed.
#define TESSERA_APR_SHIFT_OP(T)                                                        \
  std::int64_t apr_shift(Backend<T>& be, T* A, const T* Phi, std::int64_t rows, int R, \
                         double kappa, double kappa_tol)

/// host_out[r] = sum_i A(i,r) (rows x R, backend memory), accumulated in double.
#define TESSERA_COLUMN_SUMS_OP(T) \
  void column_sums(Backend<T>& be, const T* A, std::int64_t rows, int R, double* host_out)

namespace tessera::kernels {

TESSERA_DECLARE_OP(TESSERA_POISSON_PHI_OP)
TESSERA_DECLARE_OP(TESSERA_APR_KKT_UPDATE_OP)
TESSERA_DECLARE_OP(TESSERA_APR_SHIFT_OP)
TESSERA_DECLARE_OP(TESSERA_COLUMN_SUMS_OP)

namespace ops {

template <typename T>
inline TESSERA_POISSON_PHI_OP(T) {
  TESSERA_INPUT_CHECK(x.streamed() == nullptr,
                      "Poisson CP (--loss poisson) needs the tensor in memory (memory tier 1 "
                      "or 2); this run streams it from disk (tier 3): give it a larger "
                      "--host-budget");
  TESSERA_DISPATCH(be, poisson_phi, x, mode, factors, R, eps, out, host_sums);
}
template <typename T>
inline TESSERA_APR_KKT_UPDATE_OP(T) {
  TESSERA_DISPATCH(be, apr_kkt_update, B, Phi, rows, R, update);
}
template <typename T>
inline TESSERA_APR_SHIFT_OP(T) {
  TESSERA_DISPATCH(be, apr_shift, A, Phi, rows, R, kappa, kappa_tol);
}
template <typename T>
inline TESSERA_COLUMN_SUMS_OP(T) {
  TESSERA_DISPATCH(be, column_sums, A, rows, R, host_out);
}

}  // namespace ops
}  // namespace tessera::kernels
