// Internal to the memory planner (planner.cpp, planner_loop.cpp): the saturating arithmetic,
// the shape the model derives from a request, and the sizes of the run's loop and workload
// parts (factors and outputs, completion, GCP samples, holdout), split from planner.cpp.
#pragma once

#include <cstdint>

#include "plan/planner.hpp"

namespace tessera::plan::detail {

using u64 = std::uint64_t;

inline u64 mul(u64 a, u64 b) {
  const long double p = static_cast<long double>(a) * static_cast<long double>(b);
  return p >= 1.8e19L ? ~u64(0) : a * b;
}
inline u64 add(u64 a, u64 b) {
  return a > ~u64(0) - b ? ~u64(0) : a + b;
}
/// Bytes as the plan prints them (human_bytes).
inline std::string gb(u64 b) {
  return human_bytes(static_cast<double>(b));
}

/// Everything the model needs, derived once from the request and the facts.
struct Shape {
  int N = 0;
  u64 n = 0;                       // nonzeros of the largest block
  u64 read = 0;                    // nonzeros one rank reads from the file (tiers 1-2)
  int v = 8;                       // value bytes of the run
  u64 coo = 0;                     // bytes of the raw block with the run's values
  u64 sum_rows = 0, max_rows = 0;  // sum and max of min(I_n, n)
  u64 sum_dims = 0, max_dim = 0;
  int R = 0;             // CP rank, or the widest Tucker factor
  u64 ttmc_cols = 0;     // widest TTMc output row (product of the other ranks)
  u64 tucker_whole = 0;  // Tucker: the largest all-reduced mode's rows and dense arrays
};

/// Dense bytes of the ALS loop that live in the backend's memory: factors, the MTTKRP or
/// TTMc output and its reduction buffer, Grams.
/// Whether completion on the cuda backend runs the MTTKRP and the rows' Grams in one pass over
/// one copy (kernels::ops::fuses_completion: float, tensor cores, R <= 32).
bool fused_completion(const Request& req, const Shape& s);

u64 loop_backend_bytes(const Request& req, const Shape& s);

/// GCP-SGD (Request::gcp) on one rank: the fixed evaluation sample on the host (coordinates
/// and values; algo/cp_gcp.cpp keeps it) and, on the host backends, its share of a step's
/// samples, drawn on the host (kernels/gcp_sample.hpp), with the gradient kernel's work on the
/// larger of the two (kernels/{reference,cpu}/gcp.cpp): cpu: the loss term, derivative and row
/// order of each sample (8 bytes each) and a row start per row of the largest mode;
/// reference: the gradient in double. The cuda backend draws a step's samples in its kernel
/// from a device copy of the training entries (the block at most): the device holds that
/// copy and the evaluation sample when it is scored. A rank holds the nonzero samples that
/// fall in its block (planned at the mean share and four standard deviations) and every P-th
/// zero sample.
Component gcp_samples_part(const Request& req, const TensorFacts& t, const Shape& s);

/// CP --holdout (Request::holdout) on one rank, on the host for the run: the training view
/// (algo/cp_constraints.cpp's training_view, sized for the whole block; with --observed-only
/// it is the completion part's block copy, not counted twice), the held-out entries (their
/// coordinates twice, count_cold's global ones freed after it, and a double each; planned at
/// the fraction and four standard deviations), the model values scored at them and at as
/// many zeros (GCP and CP-APR, algo/holdout_score.cpp), and count_cold's row marks (a byte
/// per row of every mode).
Component holdout_part(const Request& req, const Shape& s);

/// CP --observed-only beside the plain loop, in the backend's memory: every mode's packed
/// outer products (rows x R(R+1)/2) and the wide MTTKRP output with its reduction buffer.
u64 completion_bytes(const Shape& s);

/// The same where the MTTKRP and the Grams are fused (no packed outer products): the wide
/// output and its reduction buffer.
u64 completion_grams_bytes(const Shape& s);

/// Host bytes of the ALS loop beside the backend's: the model in double, and (host
/// backends) the loop's dense arrays, which then live on the host.
u64 loop_host_bytes(const Request& req, const Shape& s);

}  // namespace tessera::plan::detail
