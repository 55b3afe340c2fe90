// Generalized CP (GCP; Hong, Kolda and Duersch 2020) by stochastic gradients with Adam
// (GCP-SGD; Kolda and Hong 2020; GenTen's gcp_sgd), written once against kernels::Backend
// and comm (docs/counts.md).
#pragma once

#include "algo/cp_als.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"

namespace tessera::algo {

/// GCP of the distributed tensor `d` (the nnz partition: every rank holds every factor row)
/// for opt.loss (kernels/gcp_loss.hpp), minimising sum over ALL entries of f(x, m).
///
/// Every step draws opt.gcp_samples nonzero samples (uniform over the training nonzeros,
/// numbered in global coordinate order: the nnz partition, which run_cp uses for it) and
/// opt.gcp_zero_samples zero samples (uniform over all entries, taken as 0) from a counter-based
/// generator keyed by (seed, epoch, step, sample), so the samples do not depend on the rank count;
/// a rank computes the samples it holds (nonzeros) or is dealt (zeros: sample j on rank j mod P),
/// and the ranks' gradients are summed by one all-reduce per step. The weights are semi-stratified:
/// nonzero samples carry (f(x,m) - f(0,m)) nnz/s, zero samples f(0,m) prod(dims)/z. Adam
/// (opt.gcp_lr, 0.9, 0.999, 1e-8; its step count runs across epochs) updates the factors (kept >= 0
/// for gamma and rayleigh). An epoch is opt.gcp_epoch_iters steps; after it the loss is estimated
/// on a fixed evaluation sample. An epoch whose estimate rose is undone (factors, moments and step
/// count) and the step size divided by 10; the run stops at the (opt.gcp_fails + 1)-th such
/// epoch (GenTen's max_fails; stop reason "converged"), or when the estimate changed by less
/// than opt.tol relative. opt.max_iters counts epochs. With opt.holdout, the held-out entries
/// are not drawn as nonzero samples (a zero sample may land on one, as on any stored entry:
/// semi-stratified sampling); each epoch reports their mean loss with as many sampled zeros, and
/// the AUC of the model's values on them against the zeros. The model's least-squares fit is
/// computed once at the end (a pass over the nonzeros on the host). Collective over `ctrl` and
/// `data`.
template <typename T>
CpResult cp_gcp(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt);

}  // namespace tessera::algo
