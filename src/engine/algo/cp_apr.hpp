// Poisson CP by CP-APR's multiplicative updates (Chi and Kolda, "On tensors, sparsity, and
// nonnegative factorizations", SIMAX 2012; Tensor Toolbox cp_apr 'mu'), written once against
// kernels::Backend and comm (docs/counts.md).
#pragma once

#include "algo/cp_als.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"

namespace tessera::algo {

/// CP-APR on the distributed tensor `d` (nonnegative values: counts), the allreduce strategy
/// (every rank holds every factor row; Phi is all-reduced over `data`).
///
/// The model is lambda and factors whose columns sum to 1. Per outer iteration and mode n:
/// entries of A_n below opt.apr_kappa_tol whose last Phi exceeds 1 are shifted by
/// opt.apr_kappa (after the first iteration this process runs); B = A_n diag(lambda); up to
/// opt.apr_inner_iters times: Phi = ops::poisson_phi(B), stop when the KKT violation
/// max |min(B, 1 - Phi)| < opt.tol, else B .*= Phi; then lambda = the column sums of B and
/// A_n = B diag(1/lambda). The run converges at the first outer iteration in which every mode
/// stops at its first check. After each iteration the log-likelihood
/// sum_k x_k log(max(m_k, apr_eps)) - sum_r lambda_r and the least-squares fit
/// 1 - ||X - M|| / ||X|| are reported (CpIteration::loglik, fit), over the training entries.
/// With opt.holdout, the entries detail::training_view holds out (the same on any rank count)
/// are left out of the fit, and after each iteration the mean Poisson loss
/// m - x log(max(m, apr_eps)) over them and as many sampled zeros, and the AUC of the model's
/// values on them against the zeros, are reported (CpIteration::holdout_loss, auc; as GCP's:
/// detail::holdout_score).
///
/// The start: opt.resume's model (its factors must be >= 0; as from --init file:) or the
/// random factors of cp_als (initial_factor_value), their columns normalised to sum 1 into
/// lambda. The result's model is normalised the conventional way (normalize_conventional).
/// Collective over `ctrl` (host) and `data` (the backend's memory space): negative or
/// non-finite values, a tensor without a positive value, the layer strategy and a rank over
/// the backend's limit are errors on every rank.
template <typename T>
CpResult cp_apr(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt);

}  // namespace tessera::algo
