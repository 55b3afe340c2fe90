// The options of a CP run as the CLI (`tessera cp`, `tessera bench cp`) and the Python module
// take them, described once (issue 40): the table kCpValues of the plain values of
// algo::CpOptions (rank, iterations, tolerance, ...), from which the CLI's flags and --help
// (drivers/common.cpp), the Python keywords and tessera.CP_OPTIONS (python/src/cp.cpp), the
// checks and the run record's "options" entries are made; and the constrained-CP options that
// are parsed per mode (CpConstraintArgs: --nonneg, --l1, --l2) with --cuda-graph.
//
// Adding a plain CP option: its field (with its default) in algo::CpOptions, its use in the
// algorithm, its row below (docs/architecture.md, "Adding a CP option").
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>

#include "algo/cp_als.hpp"
#include "comm/communicator.hpp"

namespace tessera::run {

/// One plain value of algo::CpOptions that a user sets. Its default is the field's initial
/// value (algo::CpOptions{}): written once, in the algorithm's header.
template <typename V>
struct CpValue {
  using Value = V;
  /// The user's name: the Python keyword and the run record's "options" key. The CLI flag is
  /// "--" + key with '-' for '_' (cp_flag()), with `short_flag` beside it ("-i"; "" none).
  std::string_view key;
  V algo::CpOptions::*field;
  std::string_view help;
  std::string_view short_flag = {};
  /// Numbers: the accepted values [lo, hi] (hi infinite: no upper bound). bool: unused.
  double lo = 0;
  double hi = std::numeric_limits<double>::infinity();
  /// `tessera bench cp` takes it too (bench has its own --rank, --iters and --seed).
  bool bench = false;
};

/// Every plain CP value, in the order of --help.
inline constexpr auto kCpValues = std::make_tuple(
    CpValue<int>{.key = "rank",
                 .field = &algo::CpOptions::rank,
                 .help = "CP rank R",
                 .short_flag = "-r",
                 .lo = 1,
                 .hi = 4096},
    CpValue<int>{.key = "iters",
                 .field = &algo::CpOptions::max_iters,
                 .help = "Maximum ALS iterations (a resumed run counts the saved ones)",
                 .short_flag = "-i",
                 .lo = 1,
                 .hi = 1000000},
    CpValue<double>{.key = "tol",
                    .field = &algo::CpOptions::tol,
                    .help = "Stop when |fit change| < tol (-t is --threads)"},
    CpValue<double>{.key = "max_seconds",
                    .field = &algo::CpOptions::max_seconds,
                    .help = "Stop after the first iteration that ends more than this many "
                            "seconds after the iterations began (0: no limit); the record's "
                            "stop_reason says \"time limit\", and a checkpoint "
                            "(--checkpoint-every) is written at the stop",
                    .hi = 1e9},
    CpValue<int>{.key = "print_every",
                 .field = &algo::CpOptions::print_every,
                 .help = "Print an iteration line every N iterations (and the last)",
                 .lo = 1,
                 .hi = 1000000},
    CpValue<std::uint64_t>{.key = "seed",
                           .field = &algo::CpOptions::seed,
                           .help = "Seed of the initial factors (and of --holdout's choice)",
                           .short_flag = "-s"},
    CpValue<int>{.key = "inner_sweeps",
                 .field = &algo::CpOptions::inner_sweeps,
                 .help = "Coordinate-descent sweeps per factor update with --nonneg or --l1",
                 .lo = 1,
                 .hi = 1000,
                 .bench = true},
    CpValue<bool>{.key = "observed_only",
                  .field = &algo::CpOptions::observed_only,
                  .help = "Completion: the stored entries are the observed ones and the loss "
                          "counts only them (row-wise normal equations; the fit is over the "
                          "stored entries)",
                  .bench = true},
    CpValue<double>{.key = "holdout",
                    .field = &algo::CpOptions::holdout,
                    .help = "Hold this fraction of the stored entries out (chosen by --seed and "
                            "the coordinates) and print their RMSE after every iteration (0: "
                            "none)",
                    .hi = 0.99,
                    .bench = true},
    CpValue<int>{.key = "apr_inner_iters",
                 .field = &algo::CpOptions::apr_inner_iters,
                 .help = "--loss poisson: multiplicative updates per mode and iteration, at "
                         "most (each stops when the mode's KKT violation is below --tol)",
                 .lo = 1,
                 .hi = 1000,
                 .bench = true},
    CpValue<double>{.key = "apr_kappa",
                    .field = &algo::CpOptions::apr_kappa,
                    .help = "--loss poisson: the shift that moves a factor entry off an "
                            "inadmissible zero",
                    .hi = 1e6,
                    .bench = true},
    CpValue<double>{.key = "apr_kappa_tol",
                    .field = &algo::CpOptions::apr_kappa_tol,
                    .help = "--loss poisson: factor entries below this whose Phi exceeds 1 are "
                            "inadmissible zeros",
                    .hi = 1,
                    .bench = true},
    CpValue<double>{.key = "apr_eps",
                    .field = &algo::CpOptions::apr_eps,
                    .help = "--loss poisson: the model's floor in Phi's division and in the "
                            "log-likelihood",
                    .lo = 1e-300,
                    .hi = 1,
                    .bench = true},
    CpValue<int>{.key = "gcp_samples",
                 .field = &algo::CpOptions::gcp_samples,
                 .help = "--solver gcp: nonzeros sampled per step (0: 1% of them, at least "
                         "1000)",
                 .hi = 2e9,
                 .bench = true},
    CpValue<int>{.key = "gcp_zero_samples",
                 .field = &algo::CpOptions::gcp_zero_samples,
                 .help = "--solver gcp: entries sampled as zeros per step (0: as many as "
                         "--gcp-samples)",
                 .hi = 2e9,
                 .bench = true},
    CpValue<int>{.key = "gcp_epoch_iters",
                 .field = &algo::CpOptions::gcp_epoch_iters,
                 .help = "--solver gcp: Adam steps per epoch (--iters counts epochs)",
                 .lo = 1,
                 .hi = 1e8,
                 .bench = true},
    CpValue<double>{.key = "gcp_lr",
                    .field = &algo::CpOptions::gcp_lr,
                    .help = "--solver gcp: Adam's step size at the start (divided by 10 after "
                            "each epoch whose loss rose, which is undone)",
                    .lo = 1e-300,
                    .hi = 1e6,
                    .bench = true},
    CpValue<int>{.key = "gcp_fails",
                 .field = &algo::CpOptions::gcp_fails,
                 .help = "--solver gcp: step-size decreases before the run stops",
                 .hi = 100,
                 .bench = true},
    CpValue<int>{.key = "gcp_eval_samples",
                 .field = &algo::CpOptions::gcp_eval_samples,
                 .help = "--solver gcp: nonzeros (and as many zeros) of the fixed sample the "
                         "loss is estimated on after each epoch (0: up to 100000)",
                 .hi = 2e9,
                 .bench = true},
    CpValue<double>{.key = "gcp_huber_delta",
                    .field = &algo::CpOptions::gcp_huber_delta,
                    .help = "--loss huber: the threshold between its quadratic and linear parts",
                    .lo = 1e-300,
                    .hi = 1e300,
                    .bench = true});

template <typename F>
constexpr void for_each_cp_value(F&& f) {
  std::apply([&](const auto&... v) { (f(v), ...); }, kCpValues);
}

/// "--" + key with '-' for '_'.
std::string cp_flag(std::string_view key);

/// The accepted values of a number in words ("1 to 4096", ">= 0").
std::string cp_range_words(double lo, double hi);

/// Which rows: every one, or those `tessera bench cp` takes.
enum class CpRows { all, bench };

/// Checks every row's value in `o` (finite, in its range): an InputError names the option as
/// the user wrote it, "--iters 0: ..." from the CLI, "iters=0: ..." from Python (`python`).
void check_cp_values(const algo::CpOptions& o, bool python, CpRows rows = CpRows::all);

/// The rows' values as the run record's "options" entries, merged into `opts`.
void add_cp_values(nlohmann::json& opts, const algo::CpOptions& o, CpRows rows = CpRows::all);

/// The constrained-CP options parsed per mode (docs/constrained-cp.md) and --cuda-graph.
struct CpConstraintArgs {
  /// gaussian | poisson | bernoulli | gamma | rayleigh | huber (docs/counts.md)
  std::string loss = "gaussian";
  /// auto | als | apr | gcp (algo::Solver; auto: als for gaussian, apr for poisson, else gcp)
  std::string solver = "auto";
  std::string nonneg = "none";  ///< all | none | modes "0,2"; "" (a bare --nonneg): all
  std::string l1 = "0";         ///< one value, or one per mode "0.1,0,0"
  /// "" (not given): kCompletionL2 on every mode with observed_only, else 0.
  std::string l2;
  /// on: plain CP on one rank with the cuda backend runs its iterations on the device as a
  /// CUDA graph (docs/cp-device-loop.md); off: per-operation calls (the phase split of
  /// every step is then timed on the host).
  std::string cuda_graph = "on";
};

/// The L2 penalty of a completion run (observed_only) that names none: without one, rows with
/// fewer training entries than the rank have singular normal equations, and on sparse
/// ratings-like data the model's held-out RMSE was 10^4-10^33 times the mean predictor's
/// (splatt-med, R = 2-8); 0.01 removes that and leaves a dense tensor's completion as it was
/// (aminoacid, R = 3: held-out RMSE 5.134 against 5.135; docs/constrained-cp.md).
inline constexpr double kCompletionL2 = 0.01;

/// The solver a run's --loss and --solver mean (auto resolved); InputError for a pair that
/// does not exist.
algo::Solver solver_of(const CpConstraintArgs& a);

/// Sets o.nonneg, l1, l2 for a tensor of this order, o.holdout_seed (= o.seed) and
/// o.device_loop. Collective: an InputError names the option on every rank.
void apply_cp_constraints(const CpConstraintArgs& a, int order, algo::CpOptions& o,
                          const comm::Communicator& world);

/// The options' entries of the run record ("nonneg" as a list of modes, "l1", "l2" per
/// mode, "cuda_graph"), merged into `opts`.
void add_cp_constraint_options(nlohmann::json& opts, const algo::CpOptions& o);

/// The result's entries: "ridged_rows", "iteration_engine", "holdout" (fraction, entries,
/// RMSEs) when entries were held out, and "tc_split" (record.hpp tc_split_json; rank 0's
/// tensor-core split per mode) when the backend has one.
void add_cp_constraint_results(nlohmann::json& j, const algo::CpResult& res,
                               const algo::CpOptions& o);

}  // namespace tessera::run
