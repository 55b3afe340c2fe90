// The memory planner's loop and workload parts (planner_detail.hpp): what the ALS loop,
// completion, GCP's samples and a holdout hold besides the tensor.
#include <algorithm>
#include <cmath>

#include "plan/planner_detail.hpp"

namespace tessera::plan::detail {

/// Dense bytes of the ALS loop that live in the backend's memory: factors, the MTTKRP or
/// TTMc output and its reduction buffer, Grams.
/// Whether completion on the cuda backend runs the MTTKRP and the rows' Grams in one pass over
/// one copy (kernels::ops::fuses_completion: float, tensor cores, R <= 32).
bool fused_completion(const Request& req, const Shape& s) {
  return req.completion && req.backend == Backend::cuda && s.v == 4 && req.tensor_cores &&
         s.R <= 32;
}

u64 loop_backend_bytes(const Request& req, const Shape& s) {
  const u64 v = static_cast<u64>(s.v);
  const u64 R = static_cast<u64>(std::max(s.R, 1));
  if (req.workload == Workload::tucker) {
    const u64 out = mul(mul(s.max_rows, s.ttmc_cols), v);
    // --gather-precision fp16|bf16: the tensor-core TTMc's 16-bit copies of the factors
    // (kernels/cuda/ttmc/ttmc.cu: every mode's, 2 bytes an entry, each rounded up to 256
    // bytes; counted wherever the kernel may run, i.e. at most).
    const u64 low = req.gather16 && s.v == 4 && req.backend == Backend::cuda
                        ? add(mul(mul(s.sum_dims, R), 2), 256 * 16)
                        : 0;
    // An all-reduced mode (Shape::tucker_whole) holds the whole Y_(n) and the dense stage on
    // all its rows instead.
    return add(add(mul(mul(s.sum_dims, R), v), std::max(mul(out, 3), s.tucker_whole)), low);
  }
  // --gather-precision fp16|bf16: the MTTKRP's 16-bit copies of the input factors (at most
  // every mode's, 2 bytes an entry; kernels/cuda/mttkrp/mttkrp.cu's to_low).
  // Not where completion runs fused: it never calls the MTTKRP.
  const u64 low =
      req.gather16 && s.v == 4 && req.backend == Backend::cuda && !fused_completion(req, s)
          ? mul(mul(s.sum_dims, R), 2)
          : 0;
  const u64 phi = req.poisson ? mul(mul(s.sum_dims, R), v) : 0;      // CP-APR's Phi per mode
  const u64 gcp = req.gcp ? mul(mul(mul(s.sum_dims, R), v), 6) : 0;  // GCP's Adam arrays
  return add(add(add(add(mul(mul(s.sum_dims, R), v), mul(mul(mul(s.max_dim, R), v), 2)), phi), gcp),
             low);
}

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
Component gcp_samples_part(const Request& req, const TensorFacts& t, const Shape& s) {
  const u64 P = static_cast<u64>(std::max(req.ranks, 1));
  const nnz_t total = std::max<nnz_t>(t.nnz, 1);
  const GcpSamples g =
      gcp_sample_counts(total, req.gcp_samples, req.gcp_zero_samples, req.gcp_eval_samples);
  const auto share = [&](std::int64_t drawn) {  // nonzero samples in the largest block
    if (P == 1) return static_cast<u64>(drawn);
    const double mean =
        static_cast<double>(drawn) * static_cast<double>(s.n) / static_cast<double>(total);
    return std::min(static_cast<u64>(drawn),
                    static_cast<u64>(std::ceil(mean + 4 * std::sqrt(mean))) + 1);
  };
  const auto dealt = [&](std::int64_t drawn) { return (static_cast<u64>(drawn) + P - 1) / P; };
  const u64 step = add(share(g.nonzero), dealt(g.zero));
  const u64 eval = add(share(g.eval), dealt(g.eval));
  const u64 per = static_cast<u64>(s.N) * sizeof(index_t) + static_cast<u64>(s.v);
  Component c;
  c.name = req.backend == Backend::cuda
               ? "GCP samples: the training entries on the device, the evaluation sample"
               : "GCP samples: a step's and the evaluation sample, gradient work";
  const u64 R = static_cast<u64>(std::max(s.R, 1));
  c.host = mul(req.backend == Backend::cuda ? eval : add(step, eval), per);
  if (req.backend == Backend::cuda)
    c.device = add(add(mul(eval, per), 8), s.coo);
  else if (req.backend == Backend::cpu)
    c.host = add(c.host, std::max(add(mul(step, 24), mul(add(s.max_dim, 1), 8)), mul(eval, 16)));
  else
    c.host = add(c.host, mul(mul(s.sum_dims, R), 8));
  char note[160];
  std::snprintf(note, sizeof(note), "%llu + %llu samples per step, %llu + %llu evaluated",
                static_cast<unsigned long long>(g.nonzero), static_cast<unsigned long long>(g.zero),
                static_cast<unsigned long long>(g.eval), static_cast<unsigned long long>(g.eval));
  c.note = note;
  return c;
}

/// CP --holdout (Request::holdout) on one rank, on the host for the run: the training view
/// (algo/cp_constraints.cpp's training_view, sized for the whole block; with --observed-only
/// it is the completion part's block copy, not counted twice), the held-out entries (their
/// coordinates twice, count_cold's global ones freed after it, and a double each; planned at
/// the fraction and four standard deviations), the model values scored at them and at as
/// many zeros (GCP and CP-APR, algo/holdout_score.cpp), and count_cold's row marks (a byte
/// per row of every mode).
Component holdout_part(const Request& req, const Shape& s) {
  const double mean = req.holdout * static_cast<double>(s.n);
  const u64 held = std::min(s.n, static_cast<u64>(std::ceil(mean + 4 * std::sqrt(mean))) + 1);
  const u64 per = add(mul(static_cast<u64>(s.N), 16), 8 + 16);
  Component c;
  c.name = "holdout: the training view, held-out entries";
  c.host = add(add(req.completion ? 0 : s.coo, mul(held, per)), s.sum_dims);
  char note[96];
  std::snprintf(note, sizeof(note), "--holdout %g: %llu held-out entries at most", req.holdout,
                static_cast<unsigned long long>(held));
  c.note = note;
  return c;
}

/// CP --observed-only beside the plain loop, in the backend's memory: every mode's packed
/// outer products (rows x R(R+1)/2) and the wide MTTKRP output with its reduction buffer.
u64 completion_bytes(const Shape& s) {
  const u64 R = static_cast<u64>(std::max(s.R, 1));
  const u64 W = R * (R + 1) / 2;
  const u64 v = static_cast<u64>(s.v);
  return add(mul(mul(s.sum_dims, W), v), mul(mul(mul(s.max_dim, W), v), 2));
}

/// The same where the MTTKRP and the Grams are fused (no packed outer products): the wide
/// output and its reduction buffer.
u64 completion_grams_bytes(const Shape& s) {
  const u64 R = static_cast<u64>(std::max(s.R, 1));
  return mul(mul(mul(s.max_dim, R * (R + 1) / 2), static_cast<u64>(s.v)), 2);
}

/// Host bytes of the ALS loop beside the backend's: the model in double, and (host
/// backends) the loop's dense arrays, which then live on the host.
u64 loop_host_bytes(const Request& req, const Shape& s) {
  const u64 R = static_cast<u64>(std::max(s.R, 1));
  u64 b = mul(mul(s.sum_dims, R), 8);  // the model (double) and its checkpoint copy
  if (req.backend != Backend::cuda)
    b = add(b, loop_backend_bytes(req, s));
  else
    b = add(b, mul(mul(s.max_dim, R), 8));  // a factor row block downloaded per mode
  return b;
}

}  // namespace tessera::plan::detail
