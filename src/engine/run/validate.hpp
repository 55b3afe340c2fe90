// One validation layer for the options of a run (issue 41): every value the CLI, the Python
// module and `tessera plan` pass is checked here, before any input is opened, and a bad one
// is one InputError line naming the option as the CLI spells it ("--l1 abc: ...").
//
// Three steps, in this order, so a bad option is reported even when the input is missing or
// huge:
//   1. values and combinations (check_*_options): no file is touched;
//   2. the files options name (--init file:MODEL.h5, --resume): they exist, are regular
//      files and, for --init, a Tessera CP model of the run's rank (its header only);
//   3. with an HDF5 store as input, what its header decides (dims and order): Tucker ranks
//      against the dims, per-mode lists (--l1, --l2, --nonneg, --grid) against the order,
//      an --init model's dims. Text inputs have no header: these come after the read.
// validate_*(options, world) runs the three collectively (every rank throws the same
// CollectiveError); run_cp, run_tucker and run_contract call it first, and `tessera plan`
// calls it with the options of the command it plans for.
#pragma once

#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "run/compute.hpp"
#include "run/contract.hpp"
#include "run/cp.hpp"
#include "run/input.hpp"
#include "run/tucker.hpp"

namespace tessera::run {

/// Step 1 for what every computing command shares: --backend, --precision, --comm-strategy,
/// --threads, budgets, --tier, --stream-chunk, --read-ahead, --read-cache, --nccl-timeout,
/// the kernel tuning, --index-base, --partition, --grid (syntax; its entries against the
/// order and the ranks come later) and their combinations. InputError naming the option.
void check_compute_options(const ComputeOptions& run, const LoadOptions& load);

/// Step 1 for a CP run: the rows of kCpValues (check_cp_values), --init, --nonneg, --l1,
/// --l2 (syntax; counts against the order come with the order), --cuda-graph, the
/// checkpoint options, and check_compute_options.
void check_cp_options(const CpRunOptions& o);
/// The syntax of --nonneg, --l1 and --l2 (their counts against the order come with the
/// order) and --cuda-graph; part of check_cp_options, and of `tessera bench cp`'s checks.
void check_cp_constraint_args(const CpConstraintArgs& c);
/// Step 1 for a Tucker run: --ranks (syntax), --svd, --init, --iters, --tol,
/// --subspace-steps, --max-mem, the checkpoint options, and check_compute_options.
void check_tucker_options(const TuckerRunOptions& o);
/// Step 1 for a contraction: --einsum, --out's name, --mem-limit, --index-base, and
/// check_compute_options.
void check_contract_options(const ContractRunOptions& o);

/// --ranks "16,16,16" / "16x16" / "8" as integers, each >= 1 (InputError naming --ranks):
/// the syntax check of algo::parse_ranks without an order.
std::vector<int> parse_rank_list(const std::string& s);

/// Collective: steps 1-3 of a CP, Tucker or contraction run on every rank; a failure is a
/// CollectiveError with the lowest failing rank's line on every rank.
void validate(const CpRunOptions& o, const comm::MpiCommunicator& world);
void validate(const TuckerRunOptions& o, const comm::MpiCommunicator& world);
void validate(const ContractRunOptions& o, const comm::MpiCommunicator& world);

}  // namespace tessera::run
