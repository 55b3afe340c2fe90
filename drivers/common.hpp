// What the tessera subcommands share on top of the run layer (src/engine/run): the options
// every subcommand registers (CLI11), and the CLI's record context (this process's command
// line and the parsed subcommand, set once by main()).
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "commands.hpp"
#include "kernels/tuning.hpp"
#include "run/checkpoint.hpp"
#include "run/compute.hpp"
#include "run/cp_options.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "util/log.hpp"
#include "util/stop_request.hpp"

namespace tessera::driver {

// The subcommands are adapters over the run layer: its names are theirs.
using namespace ::tessera::run;

/// Groups of add_compute_options that not every subcommand uses (one that does not use a
/// group does not register it, so its options are rejected rather than ignored).
enum ComputeOptionGroup : unsigned {
  kStrategyOption = 1u,    ///< --comm-strategy
  kBudgetOptions = 2u,     ///< --device-budget (--mem-budget), --host-budget
  kStreamingOptions = 4u,  ///< --tier, --stream-chunk, --read-ahead
  kDryRunOption = 8u,      ///< --dry-run
  kAllComputeOptions = 15u,
  kHierarchyOption = 16u,  ///< --comm-hierarchy, --emulate-nodes (cp: not in kAllComputeOptions)
};
/// Registers -t/--threads --backend --precision --index-base --json --force, the kernel
/// tuning options (add_tuning_options) and the groups in `which`.
void add_compute_options(CLI::App* sub, ComputeOptions& o, LoadOptions& load,
                         unsigned which = kAllComputeOptions);
/// Registers the "Kernel tuning" group of `sub` into `t` (every field of kernels::Tuning,
/// each with its default in --help and a check; the combination is checked by
/// kernels::check when parsing ends) and --nccl-timeout into `nccl_timeout_s`.
void add_tuning_options(CLI::App* sub, kernels::Tuning& t, double& nccl_timeout_s);
/// Registers --force (every subcommand that writes files): existing outputs that Tessera
/// did not write are replaced only with it; an input never is (io::OutputSet).
void add_force_option(CLI::App* sub, bool& force);
/// Registers --checkpoint-every, --checkpoint and --resume.
void add_checkpoint_options(CLI::App* sub, CheckpointArgs& a);
/// The options --nonneg, --l1, --l2, --inner-sweeps, --observed-only, --holdout and
/// --cuda-graph of a subcommand (tessera cp, tessera bench cp), with their defaults in --help.
/// The rows of run::kCpValues (rank, iters, tol, ...; `rows`: all, or bench's) as flags
/// into `o`, with their checks and defaults in --help.
/// The inputs cp and tucker read, for their --help.
inline constexpr const char* kTensorInputs =
    "FROSTT text (.tns, .tns.gz) or a Tessera HDF5 store (.h5, from tessera convert)";

void add_cp_value_options(CLI::App* sub, algo::CpOptions& o, CpRows rows = CpRows::all);
void add_cp_constraint_flags(CLI::App* sub, CpConstraintArgs& a);

/// The record context of this CLI process (set_invocation's command line and options); the
/// caller adds the tuning and device peak of its run where it has them.
RecordContext cli_record_context();

/// Registers --partition (`auto_means`: what auto picks), --grid and --relabel.
void add_partition_options(CLI::App* sub, LoadOptions& load, const std::string& auto_means);

/// The subcommand's callback of an adapter over the run layer: once parsed, `run` calls
/// `f.template operator()<T>(*a, world)` in the precision of a->run, with the CLI's record
/// context in a->record.
template <typename Options, typename F>
void run_with(CLI::App* sub, std::shared_ptr<Options> a, Runner& run, F f) {
  sub->callback([a, &run, f] {
    run = [a, f](const comm::MpiCommunicator& world) {
      a->record = cli_record_context();
      with_precision(a->run, [&]<typename T>() { f.template operator()<T>(*a, world); });
    };
  });
}

/// Thrown (by every rank alike) after a run stopped by a signal has written its model,
/// checkpoint and record; main() exits with 128 + signal (130 SIGINT, 143 SIGTERM).
struct StoppedBySignal {
  int signal = 0;
};

/// Runs `run(stop)` with the first SIGINT or SIGTERM turned into a stop request
/// (util::StopOnSignals; a second one ends the process at once): `run` passes `stop` to the
/// run layer, which stops after the current iteration on every rank, and returns the signal
/// the ranks agreed on (0: none). Throws StoppedBySignal with it. A signal that arrives
/// after the last iteration lets the run finish (exit 0) with a note.
template <typename F>
void stop_on_signals(F&& run) {
  util::StopRequest stop;
  int agreed = 0;
  {
    util::StopOnSignals handlers(stop);
    agreed = run(static_cast<const util::StopRequest*>(&stop));
  }
  if (agreed != 0) throw StoppedBySignal{agreed};
  if (stop.signal() != 0)
    log::info(util::signal_name(stop.signal()) +
              " arrived after the last iteration: the run finished as asked");
}

/// main(): this process's command line and the subcommand the parse chose (its options,
/// defaults included, go into every record's "options"). Not collective.
void set_invocation(int argc, const char* const* argv, const CLI::App* parsed);

/// The options of a parsed subcommand, each under its long name with '-' as '_' (positional
/// arguments under their name), with its value or default: flags as booleans, numbers as
/// numbers, the rest as strings ("" when unset and without default).
nlohmann::json cli_options_json(const CLI::App& sub);

/// record_envelope with the CLI's context (cli_record_context()) and, when given, the
/// tuning of the run's backend and this rank's measured device peak.
nlohmann::json record_envelope(const std::string& command, const nlohmann::json& options,
                               const comm::Communicator& world, const std::string& backend,
                               int threads, const kernels::Tuning* tuning = nullptr,
                               std::uint64_t device_peak = 0);

/// ">= 0" for an option of type V, refused in one short line naming what was expected: a
/// whole number within V's range for an integer V (no sign, so an unsigned never wraps), a
/// finite number for a floating V. --help reads "NONNEGATIVE", as CLI::NonNegativeNumber's,
/// whose message prints the whole range of a double and whose unsigned options wrap "-1".
template <typename V>
CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const char* b = s.data();
        const char* e = b + s.size();
        if constexpr (std::is_integral_v<V>) {
          V v{};
          const auto [p, ec] = std::from_chars(b, e, v);
          if (ec == std::errc::result_out_of_range)
            return "expected a whole number from 0 to " +
                   std::to_string(std::numeric_limits<V>::max()) + ", found " + s;
          if (ec != std::errc() || p != e || v < 0 || s.empty())
            return "expected a whole number >= 0, found '" + s + "'";
        } else {
          char* p = nullptr;
          const double v = std::strtod(b, &p);
          if (s.empty() || p != e || !std::isfinite(v) || v < 0)
            return "expected a finite number >= 0, found '" + s + "'";
        }
        return std::string();
      },
      "NONNEGATIVE");
}

}  // namespace tessera::driver
