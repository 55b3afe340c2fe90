// The start of CP-ALS besides the seeded random factors (CpOptions::seed): a resumed state's
// check, and the leading
// left singular vectors of each mode's unfolding (Tensor Toolbox's and TensorLy's "nvecs"
// / "svd" start), from the Tucker machinery (algo/tucker.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "algo/cp_als.hpp"

namespace tessera::algo {

/// The nvecs start of a rank-R CP of `d`: factor n's first r_n = min(R, I_n, ...) columns
/// are the leading left singular vectors of X_(n), from a randomized HOSVD refined by one
/// HOOI iteration (tucker_hooi with TuckerInit::hosvd, ranks r_n clamped so that r_n <=
/// prod_{m != n} r_m); its other columns are the random start's (initial_factor_value).
/// Modes with nonneg[n] take absolute values (empty: none). lambda = 1. The result is the
/// model in original index order, complete on every rank (collective over ctrl and data;
/// needs a backend with TTMc, as Tucker does).
template <typename T>
KruskalModel nvecs_start(const partition::Distributed<T>& d, kernels::Backend<T>& backend,
                         const comm::Communicator& ctrl, const comm::Communicator& data, int R,
                         std::uint64_t seed, const std::vector<bool>& nonneg);

/// Throws InputError unless `s` is the state of a run on a tensor of shape `dims` with
/// rank R (a resumed start; decided from data every rank shares, so thrown on every rank
/// alike).
void check_cp_state(const CpState& s, const std::vector<std::uint64_t>& dims, int R);

/// The Tucker ranks nvecs_start uses for a rank-R CP of a tensor of shape `dims`.
std::vector<int> nvecs_ranks(const std::vector<std::uint64_t>& dims, int R);

}  // namespace tessera::algo
