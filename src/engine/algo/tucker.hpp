// Distributed Tucker-HOOI (DESIGN §6), written once against kernels::Backend and comm.
//
// Per mode n of each iteration: Y = X x_{m != n} U_m^T on every rank's nonzeros (TTMc,
// semi-sparse rows), the rows sent to their owner rank (mode-n rows cut into P equal index
// ranges) and summed there, then U_n = the leading R_n left singular vectors of the
// row-distributed Y_(n) by one of three methods (SvdMethod). After the last mode the core
// G = U_N^T Y_(N) is all-reduced and fit = 1 - sqrt(max(||X||^2 - ||G||^2, 0)) / ||X||.
// A small Y_(n) may instead be all-reduced whole, every rank then running the dense stage
// on all rows (TuckerRows; docs/design-decisions.md, "Tucker's TTMc rows all-reduced").
// The dense stages (Gram, products, eigen-solves, QR) run in double for float tensors too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchy.hpp"
#include "kernels/backend.hpp"
#include "model/tucker.hpp"
#include "partition/partition.hpp"
#include "plan/comm_model.hpp"
#include "util/stop_request.hpp"
#include "util/timer.hpp"

namespace tessera::algo {

/// How U_n is computed from the row-distributed Y_(n) (I_n x C, C = prod_{m != n} R_m).
enum class SvdMethod {
  gram,      ///< S = Y^T Y (C x C) all-reduced; top R_n eigenpairs (LAPACK dsyevr); U = Y V / sigma
  subspace,  ///< block power steps U <- orth(Y Y^T U), distributed CholeskyQR2, Rayleigh-Ritz
  scalapack,  ///< ScaLAPACK pdgesvd on the row-distributed Y_(n) (P x 1 process grid)
};
/// "gram" | "subspace" | "scalapack"; throws InputError.
SvdMethod parse_svd_method(const std::string& s);
std::string to_string(SvdMethod m);

enum class TuckerInit {
  random,  ///< random orthonormal factors keyed by (seed, mode, original row, column)
  /// Randomized HOSVD: every U_n = leading left singular vectors of X_(n) times the
  /// Kronecker product of the other modes' random orthonormal factors (one TTMc and one
  /// SVD per mode, each from the random factors), then HOOI starts from these.
  hosvd,
};
/// "random" | "hosvd"; throws InputError.
TuckerInit parse_tucker_init(const std::string& s);
std::string to_string(TuckerInit i);

/// How the TTMc rows of a mode are combined on several ranks (--comm-strategy of tucker):
/// plan::TuckerRows, whose rule the planner predicts with (plan/comm_model.hpp).
using TuckerRows = plan::TuckerRows;
/// "auto" | "allreduce" | "owners"; throws InputError (cp's "layer" included).
TuckerRows parse_tucker_rows(const std::string& s);
/// The largest Y_(n), in bytes, that TuckerRows::automatic all-reduces (64 MiB).
inline constexpr double kRowsAllreduceMaxBytes = plan::kTuckerRowsAllreduceMaxBytes;

/// True when this build has ScaLAPACK (SvdMethod::scalapack works).
bool scalapack_available();

/// "16,16,16" or "16x16x16" (one rank per mode) or "16" (every mode); throws InputError
/// naming what was expected when the count differs from `order` or an entry is not a
/// positive integer.
std::vector<int> parse_ranks(const std::string& s, int order);

/// Throws InputError unless the ranks suit a tensor of shape `dims`: order 2..16, one
/// rank per mode, 1 <= R_n <= I_n, and R_n <= prod_{m != n} R_m (a larger R_n leaves
/// columns of U_n that no data determines).
void check_tucker_ranks(const std::vector<std::uint64_t>& dims, const std::vector<int>& ranks);

/// The state of Tucker-HOOI after a completed iteration: everything a run needs to
/// continue exactly as if it had not stopped (checkpoint and restart). Later iterations
/// depend only on the factors after the last mode's update (the subspace method starts
/// from the previous factor), the previous fit and the seed (random completion of columns
/// no data determines); the core completes the model.
struct TuckerState {
  int iteration = 0;  ///< iterations completed
  /// Core and factors, rows in ORIGINAL index order (independent of the rank count, the
  /// partition and the relabelling).
  TuckerModel model;
  std::vector<double> fit_history;  ///< fit after each iteration (size == iteration)
  bool converged = false;           ///< the last iteration met the tolerance
  /// The run stops after this iteration before its end: a stop was requested
  /// (TuckerOptions::stop). Not saved: a resumed run continues.
  bool stopping = false;
};

struct TuckerOptions {
  std::vector<int> ranks;  ///< R_1..R_N
  int max_iters = 50;
  double tol = 1e-5;  ///< stop when |fit change| < tol
  std::uint64_t seed = 1;
  SvdMethod svd = SvdMethod::gram;
  TuckerInit init = TuckerInit::random;
  /// subspace: at most this many power steps per factor update (>= 1); they stop early
  /// when ||U_new - U_old U_old^T U_new||_F < subspace_tol.
  int subspace_steps = 3;
  double subspace_tol = 1e-10;
  /// The tensor's name in messages (the driver passes the input file).
  std::string tensor_name = "the tensor";
  /// Bytes per rank the semi-sparse rows (TTMc output, received and combined rows), the
  /// SVD workspace and the factors may take; 0 = no limit. Over it, tucker_hooi refuses
  /// with an InputError naming ranks that would fit.
  std::size_t memory_limit = 0;
  bool print_iterations = true;  ///< memory plan and one line per iteration on rank 0
  /// Continue from this state instead of the initialisation (same dims and ranks; the
  /// caller checks the tensor, seed and svd method). Iterations resume at
  /// resume->iteration + 1; max_iters counts all iterations, the resumed ones included:
  /// none run when resume->iteration >= max_iters or resume->converged.
  const TuckerState* resume = nullptr;
  /// Called on every rank (collectively) after every iteration whose number is a multiple
  /// of state_every, with the state after it (the driver writes checkpoints on rank 0).
  std::function<void(const TuckerState&)> on_iteration;
  int state_every = 1;
  /// Not null: a stop request (a signal; util/stop_request.hpp), read at the end of every
  /// iteration and agreed over the ranks (max), so that every rank stops after the same
  /// iteration; the state of that iteration goes to on_iteration (TuckerResult::stop_reason
  /// "signal").
  const util::StopRequest* stop = nullptr;
  /// The node of each rank of `c` (comm::node_map; empty: one node) and --comm-hierarchy:
  /// where comm::use_hierarchy says so, the TTMc rows are combined in two stages, summed
  /// first on a relay in their node, so a row several ranks of a node hold crosses the
  /// network once (docs/multi-gpu.md, "Across nodes").
  comm::NodeMap nodes;
  comm::Hierarchy hierarchy = comm::Hierarchy::automatic;
  /// How the TTMc rows are combined on several ranks (ignored on one).
  TuckerRows rows = TuckerRows::automatic;
};

struct TuckerIteration {
  int iter = 0;
  double fit = 0, delta = 0, seconds = 0;
  double ttmc = 0, comm = 0, svd = 0;  ///< seconds in this iteration
  double core_norm = 0;                ///< ||G||_F
  /// Parts of `svd`: the wide products (TTMc rows times small matrices), the eigen-solves
  /// (gram's Gram, subspace's Rayleigh-Ritz), the orthonormalisations (CholeskyQR2) and
  /// the core (the last mode's product and ||G||).
  double svd_products = 0, svd_eig = 0, svd_orth = 0, svd_core = 0;
};

/// Memory plan, known before the first TTMc. Per mode: the largest value over ranks.
struct TuckerMemory {
  std::vector<std::int64_t> ttmc_rows;      ///< rows of the local TTMc output
  std::vector<std::int64_t> received_rows;  ///< rows received from other ranks (0 on one rank)
  std::vector<std::int64_t> owned_rows;     ///< distinct combined rows a rank holds
  std::vector<std::int64_t> cols;           ///< prod_{m != n} R_m
  std::size_t semi_sparse_bytes = 0;  ///< TTMc output + scratch + received + combined (max rank)
  std::size_t total_bytes = 0;        ///< plus SVD workspace and factors (max over ranks)
};

struct TuckerResult {
  TuckerModel model;  ///< complete on every rank, factors in original index order
  double fit = 0;
  int iterations = 0;
  bool converged = false;
  /// Why the iterations stopped: "converged" (|fit change| < tol), "iteration limit"
  /// (max_iters, also when a resumed run had none left), "signal" (TuckerOptions::stop) or
  /// "degenerate" (a zero core: algo/degenerate.hpp).
  std::string stop_reason;
  int stop_signal = 0;  ///< stop_reason "signal": the signal number, agreed by the ranks
  double norm_x = 0;
  double core_norm = 0;
  /// On several ranks: the TTMc seconds per iteration of the slowest rank and the ranks'
  /// mean (every iteration run here); the exchange that follows waits for the slowest.
  double ttmc_max_seconds = 0, ttmc_mean_seconds = 0;
  /// On several ranks, rank 0's comm per iteration (this run's iterations after its first,
  /// which also sets up the communicators' connections) split by what it
  /// waited for: the exchange and sums of the TTMc rows, the dense stage's sums (the Gram,
  /// CholeskyQR, the core), the all-gather of each new factor; and how many sums the dense
  /// stage made per iteration.
  double comm_exchange_seconds = 0, comm_dense_seconds = 0, comm_publish_seconds = 0;
  double dense_sums_per_iteration = 0;
  std::vector<TuckerIteration> history;
  /// "setup", "init", "ttmc", "comm", "svd" (seconds, this rank; init includes the
  /// HOSVD sweep when asked for).
  PhaseTimes phases;
  TuckerMemory memory;
  /// Per mode, this rank: bytes of the kernel format one TTMc reads (the prepared handle's,
  /// as CpResult::mttkrp_stream_bytes). For benchmark floors.
  std::vector<double> ttmc_stream_bytes;
  /// Memory tier of this rank's tensor (1 resident, 2 streamed from host memory, 3 streamed
  /// from disk) and its description; for tiers 2-3, seconds of copies (tier 3: disk reads)
  /// and of kernels summed over all TTMcs, and the mean fraction of copy time hidden.
  int tier = 1;
  std::string tier_description;
  double stream_copy_seconds = 0, stream_compute_seconds = 0, stream_overlap = 1;
  /// Factor columns no data determined (a mode whose Y_(n) has rank < R_n), filled with
  /// keyed random orthonormal directions; summed over all updates.
  int completed_columns = 0;
  /// Where and how the dense stage ran (algo/tucker_dense.hpp), e.g.
  /// "gram/device-syevdx+cholqr2" (cuda backend) or "subspace/host-cholqr2".
  std::string dense_method;
  /// How the iterations' phases (ttmc, svd and its split) were timed: "stream marks" (one
  /// rank of a device backend with the gram method: events in the backend's stream, no host
  /// wait after each phase) or "host waits" (a synchronize and a host timer per phase).
  std::string phase_timing;
  /// This rank's eigen-solves that the one-block solver's Lanczos kernel answered, and that it
  /// declined to the exact solver (kernels::ops::eig_lanczos_counts; zero where not tried).
  std::int64_t eig_lanczos_answered = 0, eig_lanczos_declined = 0;
  /// How the TTMc rows were combined: "flat" (one exchange to the owners), "node" (through
  /// a relay on each node), "" on one rank.
  std::string combine;
  /// Per mode on several ranks, "allreduce" or "owners" (TuckerRows), comma-separated; and
  /// why (auto's rule or the option); "" on one rank.
  std::string rows_strategy, rows_strategy_why;
  /// Per mode, the TTMc rows that cross between nodes in one iteration, summed over the
  /// ranks (times TuckerMemory::cols values each); empty on one node.
  std::vector<std::int64_t> network_rows;
};

/// Collective over `c` (a host communicator spanning the ranks of `d`). `d` comes from
/// partition::distribute (any scheme; coordinates global, possibly relabelled). The
/// backend must implement ttmc (reference, cpu, cuda). `data_comm` spans the same ranks
/// in the backend's memory space (NCCL for cuda): the TTMc rows are exchanged and the Gram
/// matrices of the factor updates and the core summed over it; nullptr means `c` (host
/// backends only).
/// Initial factors depend only on (seed, mode, original row), so the result does not
/// depend on the number of ranks beyond rounding. Every InputError it throws (options,
/// ranks, an all-zero tensor, the memory limit, a backend without TTMc) is decided from
/// data every rank shares, so it is thrown on every rank alike.
template <typename T>
TuckerResult tucker_hooi(const partition::Distributed<T>& d, kernels::Backend<T>& backend,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm = nullptr);

/// The same on a handle the backend already prepared (for example generated on the GPU by
/// prepare_synthetic): coordinates global (dims = the global dims), no relabelling;
/// ||X|| from the handle's values (repeated coordinates are counted one by one there, as
/// for cp_als on a handle). The handle is consumed.
template <typename T>
TuckerResult tucker_hooi(std::unique_ptr<kernels::TensorHandle<T>> X,
                         const std::vector<std::uint64_t>& dims, kernels::Backend<T>& backend,
                         const comm::Communicator& c, const TuckerOptions& opt,
                         const comm::Communicator* data_comm = nullptr);

/// Entry (row, col) of the random matrix whose orthonormalised columns are the initial
/// factor of `mode`: uniform in [-1, 1) keyed by (seed, mode, original row, column).
double tucker_initial_value(std::uint64_t seed, int mode, std::uint64_t row, int col);

}  // namespace tessera::algo
