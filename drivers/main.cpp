// tessera: one binary, many subcommands. Run under mpirun/srun, one rank per GPU.
//
// Errors (docs/reliability.md, "Inputs, threads and errors"): one line per failure.
//   - Bad options: every rank parsed the same arguments, rank 0 prints one line, every rank
//     exits with CLI11's code.
//   - CollectiveError: every rank agreed on the error (after a reduction, or through
//     comm::raise_collectively); rank 0 prints it once and every rank exits 1 through
//     MPI_Finalize (no MPI_Abort).
//   - Any other error was found by one rank alone while the others may wait in a collective:
//     the first rank to fail (comm::FirstFailure) prints it with its rank and host, and the
//     job ends with MPI_Abort so that no rank hangs.
//   - cp and tucker stop on SIGINT or SIGTERM after the iteration under way, write what a
//     finished run writes, and every rank exits 128 + signal (130, 143; docs/reliability.md,
//     "Stopping a run"); a second signal ends the process at once.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "app.hpp"
#include "comm/first_failure.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/watchdog.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "kernels/tuning.hpp"
#include "util/cpus.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace {

/// The innermost subcommand the parse reached (the app itself when none).
CLI::App* deepest(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands())
    if (sub->parsed()) return deepest(sub);
  return app;
}

/// "cp, tucker, ..." of the subcommands of `app`.
std::string subcommand_names(CLI::App* app) {
  std::string s;
  for (const CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; }))
    s += (s.empty() ? "" : ", ") + sub->get_name();
  return s;
}

/// "tessera bench contract": the names from the app down to `at`.
std::string command_path(CLI::App* at) {
  std::string s;
  for (CLI::App* a = at; a != nullptr; a = a->get_parent())
    s = a->get_parent() == nullptr ? "tessera" + s : " " + a->get_name() + s;
  return s;
}

/// The subcommands (as "cp", "bench cp") under `app` that have option `name`.
void subcommands_with(CLI::App* app, const std::string& name, const std::string& prefix,
                      std::vector<std::string>* out) {
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_option_no_throw(name) != nullptr) out->push_back(prefix + sub->get_name());
    subcommands_with(sub, name, prefix + sub->get_name() + " ", out);
  }
}

/// Options typed (in the order typed) that the chosen subcommand does not have: "--x and
/// --y do not apply to tessera contract (--x: an option of cp, tucker, plan)". Empty when
/// the unexpected words are not options.
std::string unexpected_options_line(CLI::App& app, CLI::App* at, int argc,
                                    const char* const* argv) {
  std::vector<std::string> extra;
  for (CLI::App* a = at; a != nullptr; a = a->get_parent())
    for (const std::string& w : a->remaining()) extra.push_back(w);
  std::vector<std::string> typed;
  for (int i = 1; i < argc; ++i) {
    std::string w = argv[i];
    w = w.substr(0, w.find('='));
    if (w.size() < 2 || w[0] != '-' || w == "--") continue;
    if (std::find(extra.begin(), extra.end(), w) == extra.end()) continue;
    if (std::find(typed.begin(), typed.end(), w) == typed.end()) typed.push_back(w);
  }
  if (typed.empty()) return {};
  std::string names, where_else;
  for (std::size_t k = 0; k < typed.size(); ++k) {
    names += (k == 0 ? "" : k + 1 == typed.size() ? " and " : ", ") + typed[k];
    std::vector<std::string> subs;
    subcommands_with(&app, typed[k], "", &subs);
    if (subs.empty()) continue;
    // An option of this very subcommand typed before its name (tessera --backend cpu cp
    // ...): CLI11 gives it to tessera itself, which has no such option.
    for (const std::string& x : subs)
      if ("tessera " + x == command_path(at))
        return typed[k] + " is an option of " + command_path(at) +
               ": write it after the subcommand (" + command_path(at) + " ... " + typed[k] +
               " ...; options before the subcommand are tessera's own)";
    std::string list;
    for (const std::string& x : subs) list += (list.empty() ? "" : ", ") + x;
    where_else += (where_else.empty() ? "" : "; ") + typed[k] + ": an option of " + list;
  }
  const std::string where = command_path(at);
  if (where_else.empty())
    return std::string(typed.size() == 1 ? "unknown option " : "unknown options ") + names + "; " +
           where + " --help lists its options";
  return names + (typed.size() == 1 ? " does" : " do") + " not apply to " + where + " (" +
         where_else + "); " + where + " --help lists its options";
}

/// True when the parse stopped at a command that needs a subcommand and none was typed
/// (`tessera` alone, `tessera bench contract` without one): the usage is printed with the
/// error line.
bool subcommand_missing(CLI::App& app) {
  CLI::App* at = deepest(&app);
  if (at->get_require_subcommand_min() == 0 || !at->get_subcommands().empty()) return false;
  for (const std::string& w : at->remaining())
    if (!w.empty() && w[0] != '-') return false;
  return !at->get_subcommands([](CLI::App*) { return true; }).empty();
}

/// The one line for a failed parse: an unknown subcommand names the word typed and lists
/// the subcommands; options the subcommand does not have are named with the subcommands
/// that have them; other errors are CLI11's message.
std::string parse_error_line(CLI::App& app, const CLI::ParseError& e, int argc,
                             const char* const* argv) {
  CLI::App* at = deepest(&app);
  const std::string where = command_path(at);
  const bool wants_sub = at->get_require_subcommand_min() > 0 && at->get_subcommands().empty() &&
                         !at->get_subcommands([](CLI::App*) { return true; }).empty();
  if (wants_sub) {
    for (const std::string& w : at->remaining()) {
      if (w.empty() || w[0] == '-') continue;
      return "unknown subcommand '" + w + "'" + (at == &app ? "" : " of " + where) +
             ": expected one of " + subcommand_names(at) + " (" + where + " --help describes them)";
    }
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::string line = unexpected_options_line(app, at, argc, argv);
    if (!line.empty()) return line;
  }
  return std::string(e.what()) + " (" + where + " --help lists the options)";
}

/// Environment variables that earlier versions read inside the kernels and that are now
/// options (kernels::Tuning, comm::NcclOptions; docs/reliability.md): one warning line each
/// on rank 0 when set, so a job script that still sets one learns it has no effect.
void warn_retired_variables(int rank) {
  if (rank != 0) return;
  auto warn = [](const std::string& variable, const std::string& option) {
    if (const char* v = std::getenv(variable.c_str()); v != nullptr && *v != '\0')
      tessera::log::warn(variable + " is set but no longer read: use the option " + option +
                         " (tessera SUBCOMMAND --help, Kernel tuning)");
  };
  tessera::kernels::for_each_knob([&](const auto& k) {  // the table: kernels/tuning.hpp
    if (!k.retired_env.empty()) warn(std::string(k.retired_env), tessera::kernels::flag(k));
  });
  warn("TESSERA_NCCL_TIMEOUT_S", "--nccl-timeout");
}

/// OpenMP's team (OMP_NUM_THREADS, or every CPU of the node) capped to the CPUs this process
/// may use (--threads is capped where it is parsed): a warning when OMP_NUM_THREADS asked
/// for more; a debug line when OpenMP's own default is over a cgroup CPU quota, which is
/// normal in containers. main() replaces OpenMP's own default by driver::default_threads.
void cap_openmp_default() {
  const int have = omp_get_max_threads();
  const bool asked = std::getenv("OMP_NUM_THREADS") != nullptr;
  std::string warning;
  const int capped =
      tessera::util::cap_threads(have,
                                 (asked ? "OMP_NUM_THREADS asks for " : "OpenMP's default of ") +
                                     std::to_string(have) + " threads, which",
                                 &warning);
  if (capped < have) {
    omp_set_num_threads(capped);
    if (asked)
      tessera::log::warn(warning);
    else
      tessera::log::debug(warning);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  comm::MpiRuntime mpi(&argc, &argv);
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  comm::FirstFailure first_failure(MPI_COMM_WORLD);  // freed before MPI_Finalize

  CLI::App app;
  driver::Runner run;
  int verbosity = 1;
  driver::build_app(app, run, verbosity);  // drivers/app.cpp

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same arguments: rank 0 reports, all exit with the same code.
    if (e.get_exit_code() == 0) return world.rank() == 0 ? app.exit(e) : 0;  // --help, --version
    if (world.rank() == 0) {
      if (subcommand_missing(app)) std::fputs(deepest(&app)->help().c_str(), stderr);
      std::fprintf(stderr, "tessera: error: %s\n", parse_error_line(app, e, argc, argv).c_str());
      std::fflush(stderr);
    }
    return e.get_exit_code();
  }
  log::set_verbosity(verbosity);
  // Run records (drivers/common.hpp): the command line and the options with their defaults.
  driver::set_invocation(argc, argv, deepest(&app));
  warn_retired_variables(world.rank());
  // Threads per rank (docs/reliability.md): a count the user gave (--threads, already capped
  // to this rank's CPUs where it was parsed, or OMP_NUM_THREADS) is kept, and one warning
  // line on rank 0 says when ranks x threads is over the node's CPUs (or Slurm's grant);
  // without one, every rank takes the node's CPUs divided by the ranks on the node, which
  // never oversubscribes, so nothing is warned about.
  int given = 0;
  if (const CLI::Option* t = deepest(&app)->get_option_no_throw("--threads");
      t != nullptr && t->count() > 0 && t->as<int>() > 0)
    given = t->as<int>();
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  const bool user_count = given > 0 || (omp_env != nullptr && *omp_env != '\0');
  if (user_count) cap_openmp_default();
  try {
    if (user_count) {
      driver::warn_oversubscription(world, given > 0 ? given : omp_get_max_threads());
    } else {
      const int threads = driver::default_threads(world);
      omp_set_num_threads(threads);
      log::debug("threads per rank: " + std::to_string(threads) +
                 " (the node's CPUs divided by the ranks on it; --threads or OMP_NUM_THREADS "
                 "sets another count)");
    }
  } catch (const std::exception& e) {
    if (!user_count) cap_openmp_default();
    log::debug(std::string("thread default or oversubscription check skipped: ") + e.what());
  }

  // The watchdog (comm/watchdog.hpp): on several ranks a rank that is killed or stops
  // answering ends the job with one message instead of leaving the others in a collective.
  double watchdog_s = 30;
  if (const CLI::Option* o = deepest(&app)->get_option_no_throw("--watchdog"); o != nullptr)
    watchdog_s = o->as<double>();
  comm::Watchdog watchdog(MPI_COMM_WORLD, watchdog_s);  // ended before MPI_Finalize
  if (const CLI::Option* o = deepest(&app)->get_option_no_throw("--inject-fault");
      o != nullptr && o->count() > 0)
    util::fault::arm(util::fault::parse(o->as<std::string>()), world.rank());

  try {
    run(world);
  } catch (const driver::StoppedBySignal& s) {
    // cp and tucker stopped by SIGINT or SIGTERM after an iteration every rank agreed on;
    // the model, checkpoint and record are written. The shell's convention: 128 + signal.
    return 128 + s.signal;
  } catch (const CollectiveError& e) {
    // All ranks agreed on this error: rank 0 reports it, every rank exits non-zero.
    if (world.rank() == 0) {
      std::fprintf(stderr, "tessera: error: %s\n", e.what());
      std::fflush(stderr);
    }
    return 1;
  } catch (const std::exception& e) {
    // This rank failed on its own, maybe while others wait in a collective: the first
    // failing rank reports with rank and host, and the whole job ends so no rank waits
    // forever. Later failing ranks stay silent and give the first one time to print.
    watchdog.failing();  // this message is the job's: the watchdogs report nothing more
    const bool first = first_failure.claim();
    if (first) log::error_here(e.what());
    if (world.size() > 1) {
      if (!first) std::this_thread::sleep_for(std::chrono::seconds(5));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
  }
  return 0;
}
