// Distributed CP-ALS (DESIGN §6), written once against kernels::Backend and comm.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"
#include "kernels/backend.hpp"
#include "model/kruskal.hpp"
#include "partition/partition.hpp"
#include "plan/comm_model.hpp"
#include "util/stop_request.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

/// How the mode-n factor update is combined across ranks (DESIGN §3).
enum class CommStrategy {
  allreduce,  ///< every rank holds all factor rows; MTTKRP output all-reduced
  layer,      ///< medium-grained: reduce-scatter / all-gather inside grid layers
};
CommStrategy parse_comm_strategy(const std::string& s);
std::string to_string(CommStrategy s);

/// The loss a CP run minimises (docs/counts.md).
enum class Loss {
  gaussian,   ///< least squares: CP-ALS (algo::cp_als), or GCP
  poisson,    ///< Poisson log-likelihood of counts: CP-APR (algo::cp_apr), or GCP (log link)
  bernoulli,  ///< 0/1 data, logit link: GCP
  gamma,      ///< positive data: GCP
  rayleigh,   ///< positive data: GCP
  huber,      ///< robust least squares: GCP
};
/// A --loss name; throws InputError naming --loss.
Loss parse_loss(const std::string& s);
std::string to_string(Loss l);

/// How the factors are fitted (docs/counts.md): auto picks als for gaussian, apr for poisson
/// and gcp for the other losses.
enum class Solver { automatic, als, apr, gcp };
/// "auto" | "als" | "apr" | "gcp"; throws InputError naming --solver.
Solver parse_solver(const std::string& s);
std::string to_string(Solver s);
/// The solver `s` means for loss `l` (auto resolved); InputError for a pair that does not
/// exist (als with a loss other than gaussian, apr with one other than poisson).
Solver resolve_solver(Solver s, Loss l);

/// The state of CP-ALS after a completed iteration: everything a run needs to continue
/// exactly as if it had not stopped (checkpoint and restart). Later iterations depend only
/// on the normalised factors (the Gram matrices are recomputed from them), the iteration
/// number (2-norm normalisation on the first iteration, max-norm after) and the previous
/// fit (convergence test); lambda completes the model.
struct CpState {
  int iteration = 0;  ///< iterations completed
  /// Factors in ORIGINAL index order (row i = index i of the input, whatever the rank
  /// count, partition or relabelling), columns normalised as after that iteration; lambda.
  KruskalModel model;
  std::vector<double> fit_history;  ///< fit after each iteration (size == iteration)
  bool converged = false;           ///< the last iteration met the tolerance
  /// The run stops after this iteration before its end: its time limit (CpOptions::max_seconds)
  /// is up or a stop was requested (CpOptions::stop). Not saved: a resumed run continues.
  bool stopping = false;
};

struct CpOptions {
  int rank = 16;
  int max_iters = 50;
  double tol = 1e-5;  ///< stop when |fit change| < tol
  std::uint64_t seed = 1;
  CommStrategy strategy = CommStrategy::allreduce;
  bool print_iterations = true;  ///< one line per iteration on rank 0
  /// With print_iterations: a line every print_every iterations, and the last one.
  int print_every = 1;
  /// > 0: stop after the first iteration that ends more than this many seconds after this
  /// process started iterating (the slowest rank's clock; CpResult::stop_reason "time
  /// limit"). 0: no limit.
  double max_seconds = 0;
  /// Not null: a stop request (a signal; util/stop_request.hpp), read at the end of every
  /// iteration and agreed over the ranks (max), so that every rank stops after the same
  /// iteration, as with max_seconds (CpResult::stop_reason "signal", stop_signal).
  const util::StopRequest* stop = nullptr;
  /// Fill CpResult::distinct_rows (a pass over the stored tensor; benchmarks want it).
  bool count_distinct_rows = false;
  /// Continue from this state instead of the initial factors (same dims and rank; the
  /// caller checks that the tensor is the same). Iterations resume at resume->iteration + 1
  /// and max_iters counts all iterations, the resumed ones included: none run when
  /// resume->iteration >= max_iters or resume->converged. The result equals that of the
  /// uninterrupted run (bitwise on the same ranks and backend, within rounding otherwise).
  const CpState* resume = nullptr;
  /// Called on every rank (it is collective) after every iteration whose number is a
  /// multiple of state_every, with the state after it. Free of I/O: the caller decides what
  /// to do (the driver writes checkpoints on rank 0).
  std::function<void(const CpState&)> on_iteration;
  int state_every = 1;
  /// A benchmark's generated handle keeps repeated coordinates, so ||X||^2 understates the
  /// tensor and the fit is approximate: clamp it (and say so) instead of refusing.
  bool approximate_fit = false;
  /// The tensor's name in messages (the driver passes the input file).
  std::string tensor_name = "the tensor";
  /// Backends with a device loop (cuda; kernels/cp_device.hpp) run plain CP-ALS on one rank
  /// with the whole iteration on the device, captured as a CUDA graph from the second
  /// iteration (docs/cp-device-loop.md). false: the per-operation path with host round
  /// trips (--cuda-graph off).
  bool device_loop = true;
  /// On several ranks with the device loop and the allreduce strategy: a mode whose MTTKRP
  /// rows take at most this many bytes is all-reduced and solved whole on every rank, a
  /// larger one is reduce-scattered, solved in blocks and all-gathered (docs/multi-gpu.md).
  /// The layer strategy always splits.
  double whole_rows_max_bytes = plan::kWholeRowsMaxBytes;
  /// --comm-overlap: with the allreduce strategy on the device loop, a mode over
  /// whole_rows_max_bytes whose MTTKRP the backend can compute in row pieces is all-reduced
  /// piece by piece while later pieces compute, and solved whole (docs/multi-gpu.md,
  /// "Overlap"); false: reduce-scattered after the whole MTTKRP. The run layer sets it for
  /// --comm-overlap on, and for auto when the ranks span nodes.
  bool comm_overlap = false;
  /// The rows of one piece, in bytes (2 to 16 pieces per mode).
  double overlap_piece_bytes = 64.0 * (1 << 20);
  /// --comm-hierarchy: whether the collectives of a group of ranks that spans several nodes
  /// (a layer, or all ranks for the allreduce strategy) are composed from a node-local and a
  /// cross-node collective (comm/hierarchy.hpp). Needs `nodes`.
  comm::Hierarchy hierarchy = comm::Hierarchy::automatic;
  /// The node of each rank of the data communicator (comm::node_map); empty: one node.
  comm::NodeMap nodes;

  // ---- constrained, regularised and weighted CP (docs/constrained-cp.md) ----
  // Per mode (size = the order, or empty: none): the factor update of mode n solves, row by
  // row, min_a 1/2 a^T (H + l2[n] I) a - m^T a + l1[n] |a|_1 (a >= 0 if nonneg[n]) with m the
  // MTTKRP row and H the Hadamard product of the other modes' Grams (linalg::RowUpdate; for
  // nonneg or l1 by `inner_sweeps` coordinate-descent (HALS) sweeps from the current row, else
  // a linear solve). All empty, no observed_only: plain CP-ALS, bitwise as ever.
  std::vector<bool> nonneg;
  std::vector<double> l1, l2;
  int inner_sweeps = 3;
  /// Completion: the loss counts the stored entries only (the others are missing, not zero):
  /// each row's H is the Gram of the Khatri-Rao rows of its own entries (CP-WOPT's row-wise
  /// normal equations), and the fit is 1 - ||P(X - model)|| / ||P X|| over the stored entries.
  /// Needs the tensor in memory (the Distributed overload).
  bool observed_only = false;
  /// Hold this fraction of the stored entries out of the decomposition (chosen by a hash of
  /// (holdout_seed, original coordinates): the same entries on any rank count, partition or
  /// relabelling) and report their RMSE after every iteration. 0: none. The Distributed
  /// overload only.
  double holdout = 0;
  std::uint64_t holdout_seed = 1;

  // ---- Poisson CP (CP-APR, Chi and Kolda 2012; docs/counts.md) ----
  /// poisson: algo::cp_apr's multiplicative updates; tol is then the KKT violation below
  /// which a mode's inner iterations stop (the run converges when every mode stops at once).
  Loss loss = Loss::gaussian;
  int apr_inner_iters = 10;      ///< inner (multiplicative) iterations per mode, at most
  double apr_kappa = 1e-2;       ///< the shift of an inadmissible zero
  double apr_kappa_tol = 1e-10;  ///< entries below this with Phi > 1 are inadmissible zeros
  double apr_eps = 1e-10;        ///< the model's floor in Phi's division and in log()

  // ---- generalized CP by stochastic gradients (GCP-SGD with Adam; algo::cp_gcp) ----
  /// Solver::gcp: max_iters counts epochs and tol is the relative change of the estimated
  /// loss below which the run converges.
  Solver solver = Solver::automatic;
  int gcp_samples = 0;           ///< nonzero samples per step (0: auto)
  int gcp_zero_samples = 0;      ///< zero samples per step (0: as many as nonzero ones)
  int gcp_epoch_iters = 100;     ///< steps per epoch
  double gcp_lr = 1e-3;          ///< Adam's step size at the start
  int gcp_fails = 3;             ///< step-size decreases (x 0.1) before the run stops
  int gcp_eval_samples = 0;      ///< nonzero (and zero) samples of the loss estimate (0: auto)
  double gcp_huber_delta = 1.0;  ///< huber's threshold
};

struct CpIteration {
  int iter = 0;
  double fit = 0, delta = 0, seconds = 0;
  double kernel = 0, comm = 0, solve = 0;  ///< seconds in this iteration
  /// RMSE of the model on the held-out entries (CpOptions::holdout), else NaN.
  double validation_rmse = std::numeric_limits<double>::quiet_NaN();
  /// Poisson CP: the log-likelihood sum_k x_k log m_k - sum(model) (without the constant
  /// -sum log x_k!), the largest KKT violation of the modes' last inner iterations, and the
  /// inner iterations run; NaN / 0 otherwise.
  double loglik = std::numeric_limits<double>::quiet_NaN();
  double kkt = std::numeric_limits<double>::quiet_NaN();
  int inner_iters = 0;
  /// GCP: the estimated loss (sum over every entry, from the evaluation sample), the mean loss
  /// on the held-out entries and as many sampled zeros, and their AUC (held-out nonzeros
  /// against the zeros, scored by the model); NaN otherwise.
  double gcp_loss = std::numeric_limits<double>::quiet_NaN();
  double holdout_loss = std::numeric_limits<double>::quiet_NaN();
  double auc = std::numeric_limits<double>::quiet_NaN();
  double lr = std::numeric_limits<double>::quiet_NaN();  ///< GCP: Adam's step size
};

struct CpResult {
  KruskalModel model;  ///< complete on every rank
  double fit = 0;
  int iterations = 0;
  bool converged = false;
  /// Why the iterations stopped: "converged" (|fit change| < tol), "iteration limit"
  /// (max_iters, also when a resumed run had none left), "time limit" (max_seconds),
  /// "signal" (CpOptions::stop) or "degenerate" (the model is zero: algo/degenerate.hpp).
  std::string stop_reason;
  int stop_signal = 0;      ///< stop_reason "signal": the signal number, agreed by the ranks
  int solve_fallbacks = 0;  ///< pseudo-inverse fallbacks taken (rank-deficient V)
  /// How the iterations ran: "cuda graph", "device kernels, no graph (why)" or
  /// "per-operation calls (why)" (CpOptions::device_loop).
  std::string iteration_engine;
  /// On several ranks with the device loop: per mode, "whole" (rows all-reduced, every rank
  /// solves them all) or "split" (reduce-scattered, solved in blocks, all-gathered).
  std::string device_loop_modes;
  /// On several ranks: per mode, how its rows are combined: "flat" (one collective over the
  /// group) or "node" (node-local, then across nodes; CpOptions::hierarchy).
  std::string comm_hierarchy_modes;
  /// MTTKRP seconds per iteration of the iterations this process ran: the slowest rank's
  /// and the mean over the ranks (their ratio is the imbalance the others wait for).
  double kernel_max_seconds = 0, kernel_mean_seconds = 0;
  /// Row solves that needed a ridge (rows with fewer stored entries than R, observed_only).
  std::int64_t ridged_rows = 0;
  /// With CpOptions::holdout: entries held out and kept (over all ranks), the RMSE of the
  /// final model on the held-out entries, and that of predicting the training entries' mean.
  std::uint64_t holdout_entries = 0, training_entries = 0;
  /// Held-out entries with a coordinate whose row (slice) has no training entry on any rank:
  /// the model predicts them from a factor row that no entry updated, so no CP model can
  /// predict them (they weigh on validation_rmse however the run is tuned).
  std::uint64_t holdout_cold_entries = 0;
  double validation_rmse = std::numeric_limits<double>::quiet_NaN();
  double mean_predictor_rmse = std::numeric_limits<double>::quiet_NaN();
  double norm_x = 0;
  std::vector<CpIteration> history;
  PhaseTimes phases;  ///< "kernel", "comm", "solve", "setup" (seconds, this rank)
  /// Per mode, this rank: bytes of the kernel format one MTTKRP reads, and the factor
  /// rows held (output rows of the MTTKRP). For benchmark floors.
  std::vector<double> mttkrp_stream_bytes;
  std::vector<std::uint64_t> rows_held;
  /// Factor rows the block touches, per mode (only with CpOptions::count_distinct_rows).
  std::vector<std::uint64_t> distinct_rows;
  /// Memory tier of this rank's tensor (1 resident, 2 streamed from host) and its
  /// description; for tier 2, seconds of host-to-device copies and of kernels summed
  /// over all MTTKRPs, and the mean fraction of copy time hidden behind compute.
  int tier = 1;
  std::string tier_description;
  double stream_copy_seconds = 0, stream_compute_seconds = 0, stream_overlap = 1;
  /// This rank's tensor-core split per mode after the last iteration (TensorHandle::tc_split;
  /// empty where the backend has none).
  std::vector<kernels::TcSplit> tc_split;
  /// Poisson CP: the final log-likelihood and KKT violation (as CpIteration's), the inner
  /// iterations over the run and the inadmissible zeros shifted (CpOptions::apr_kappa).
  double loglik = std::numeric_limits<double>::quiet_NaN();
  double kkt = std::numeric_limits<double>::quiet_NaN();
  std::int64_t inner_iters = 0, apr_shifts = 0;
  /// GCP: the final estimated loss, held-out loss and AUC (as CpIteration's), the samples
  /// drawn per step (nonzero, zero) and the step-size decreases.
  double gcp_loss = std::numeric_limits<double>::quiet_NaN();
  double holdout_loss = std::numeric_limits<double>::quiet_NaN();
  double auc = std::numeric_limits<double>::quiet_NaN();
  std::int64_t gcp_samples = 0, gcp_zero_samples = 0;
  int gcp_fails = 0;
};

/// Collective over `ctrl` (host communicator, MPI) and `data` (communicator in the
/// backend's memory space; the same object on CPU backends), which must span the same
/// ranks in the same order. `d` comes from partition::distribute; the layer strategy
/// needs the grid scheme (else CollectiveError). Initial factors depend only on (seed,
/// mode, global row), so the result does not depend on the number of ranks beyond rounding.
/// Values far from 1 (any finite values whose 2-norm is a finite double) give the fit of the
/// same tensor scaled to 1: ||X|| is computed with scaling (value_norm) when the plain sum
/// of squares would over- or underflow, and the loop runs on c X for a power of two c when
/// ||X|| is far from 1 (exact; lambda is divided by c in the model). Errors decided from
/// allreduced values (an all-zero tensor, a non-finite norm or fit) are CollectiveErrors
/// naming opt.tensor_name.
template <typename T>
CpResult cp_als(const partition::Distributed<T>& d, kernels::Backend<T>& backend,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt);

/// CP-ALS on a tensor that already lives in the backend, e.g. generated there by
/// Backend::prepare_synthetic: `X` holds this rank's nonzeros with GLOBAL coordinates
/// (X.dims() == dims on every rank), any split of the nonzeros over the ranks, repeated
/// coordinates allowed (the MTTKRP sums them). `dims` are the global mode lengths and
/// `global_nnz` the sum of X.nnz() over the ranks (checked). Only the allreduce strategy:
/// opt.strategy == layer throws InputError (it needs a grid partition; use the overload
/// above). ||X||^2 is the sum over ranks of X.value_norm_squared() (value_norm() when that
/// sum over- or underflows), so a coordinate
/// stored k times counts as k entries there, not as one entry with the summed value.
/// Rows are not relabelled: initial factors are keyed by (seed, mode, global row), as in
/// the overload above, so the two agree on the same nonzeros whatever the rank count.
/// Collective over `ctrl` and `data` (as above).
template <typename T>
CpResult cp_als(const kernels::TensorHandle<T>& X, const std::vector<std::uint64_t>& dims,
                nnz_t global_nnz, kernels::Backend<T>& backend, const comm::Communicator& ctrl,
                const comm::Communicator& data, const CpOptions& opt);

/// CP-ALS with the layer strategy on prepared grid blocks: `dist` a grid Distribution (e.g.
/// partition::synthetic_distribution) and `X` this rank's block as the layer strategy's
/// kernels see it, coordinates shifted to the rank's chunks (X.dims() the chunk lengths;
/// e.g. Backend::prepare_synthetic with partition::window_of). Labels may be relabelled
/// (dist.relabel_seed): initial factors are keyed by original rows, as above. The sum of
/// X.nnz() over the ranks must be dist.global_nnz (checked). opt.strategy must be layer
/// (CollectiveError otherwise); --observed-only and --holdout need the Distributed overload.
/// Collective over `ctrl` and `data` (as above).
template <typename T>
CpResult cp_als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
                kernels::Backend<T>& backend, const comm::Communicator& ctrl,
                const comm::Communicator& data, const CpOptions& opt);

/// Initial factor value: uniform in [0, 1) keyed by (seed, mode, global row, column).
double initial_factor_value(std::uint64_t seed, int mode, std::uint64_t row, int col);

/// True when the entry at these ORIGINAL coordinates is held out (CpOptions::holdout).
bool held_out(std::uint64_t seed, double fraction, const std::uint64_t* coords, int order);

/// "all" | "none" | a comma list of modes ("0,2") -> one flag per mode; throws InputError
/// naming `option`.
std::vector<bool> parse_mode_set(const std::string& s, int order, const std::string& option);
/// "0.1" (every mode) or "0.1,0,0.5" (one per mode) -> one value per mode, each finite and
/// >= 0; throws InputError naming `option`.
std::vector<double> parse_mode_values(const std::string& s, int order, const std::string& option);

}  // namespace tessera::algo
