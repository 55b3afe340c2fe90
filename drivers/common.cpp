// The options every subcommand registers, and the CLI's record context (drivers/common.hpp).
#include "common.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/factories.hpp"
#include "plan/measure.hpp"
#include "tuning_options.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

/// This process's command line and its parsed subcommand (main(): set_invocation). The
/// CLI's own state, read only to fill its records' context.
struct Invocation {
  std::vector<std::string> argv;
  const CLI::App* parsed = nullptr;
};

Invocation& invocation() {
  static Invocation inv;
  return inv;
}

/// The value of a command-line string as JSON by the option's declared type (CLI11's type
/// name: INT, UINT, FLOAT, TEXT, ...): numbers for numeric types when the text is one, else
/// the string as given.
nlohmann::json typed_value(const std::string& s, const std::string& type) {
  const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
  const bool floating = type.rfind("FLOAT", 0) == 0;
  if (s.empty() || !(integer || floating)) return s;
  const char* end = s.data() + s.size();
  if (integer) {
    std::int64_t i = 0;
    if (auto [p, ec] = std::from_chars(s.data(), end, i); ec == std::errc() && p == end) return i;
  }
  double d = 0;
  if (auto [p, ec] = std::from_chars(s.data(), end, d); ec == std::errc() && p == end) return d;
  return s;
}

}  // namespace

void add_compute_options(CLI::App* sub, ComputeOptions& o, LoadOptions& load, unsigned which) {
  // Options a subcommand does not use are not registered (`which`): CLI11 then rejects them
  // and main() names them and the subcommands that have them, instead of ignoring them.
  if (which & kStrategyOption)
    sub->add_option("--comm-strategy", o.strategy,
                    "Factor update: auto (by a model of the bytes each moves over the link, "
                    "docs/multi-gpu.md) | allreduce (all-reduce whole MTTKRP outputs; tucker: "
                    "whole TTMc outputs, the dense stage then on every rank) | layer (cp: "
                    "reduce-scatter/all-gather inside grid layers) | owners (tucker: TTMc rows "
                    "summed on their owner ranks)")
        ->check(CLI::IsMember({"auto", "allreduce", "layer", "owners"}));
  if (which & kStrategyOption)
    sub->add_option("--comm-overlap", o.overlap,
                    "CP-ALS on several GPUs, allreduce strategy: auto (on when the ranks span "
                    "nodes) | on (a large mode's MTTKRP in row pieces, each all-reduced while the "
                    "next computes) | off (reduce-scatter after the whole MTTKRP)")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
  if (which & kHierarchyOption) {
    sub->add_option("--comm-hierarchy", o.hierarchy,
                    "Collectives of ranks on several nodes: auto (node-local then across nodes "
                    "when a group has 2+ ranks on each of 2+ nodes) | flat (one collective) | "
                    "node (composed whenever the group spans nodes evenly)")
        ->check(CLI::IsMember({"auto", "flat", "node"}))
        ->capture_default_str();
    sub->add_option("--emulate-nodes", o.emulate_nodes,
                    "Treat the ranks as N nodes of consecutive ranks (as jobs/slurm/launch.sh "
                    "places them for TESSERA_EMULATE_NODES=N); 0: the real nodes")
        ->check(non_negative<decltype(o.emulate_nodes)>())
        ->capture_default_str();
  }
  sub->add_option("--backend", o.backend,
                  "auto (cuda when a GPU is present, else cpu) | reference | cpu | cuda")
      ->check(CLI::IsMember({"auto", "reference", "cpu", "cuda"}));
  sub->add_option("-t,--threads", o.threads,
                  "OpenMP threads per rank (0: OMP_NUM_THREADS, else the node's CPUs divided "
                  "by the ranks on it); more than the CPUs the rank may use (affinity mask, "
                  "cgroup CPU quota) is capped to them with a warning, and ranks x threads over "
                  "the node's CPUs (or SLURM_CPUS_ON_NODE) is warned")
      ->check(non_negative<decltype(o.threads)>())
      ->transform([](std::string s) { return cap_threads_option(s); });
  sub->add_option("--precision", o.precision, "double | float")
      ->check(CLI::IsMember({"double", "float"}));
  sub->add_option("--index-base", load.index_base, "Coordinate base of the file: 1 | 0 | auto")
      ->check(CLI::IsMember({"1", "0", "auto"}));
  if (which & kBudgetOptions) {
    auto* dev = sub->add_option("--device-budget", o.device_budget,
                                "Device memory this rank may use, e.g. 40G (K/M/G/T = 1024^k): "
                                "emulates a smaller GPU; a tensor over it streams from host "
                                "memory (tier 2) or disk (tier 3). On host backends it caps the "
                                "prepared format. Default: the GPU's free memory less a reserve");
    sub->add_option("--mem-budget", o.device_budget, "Older name of --device-budget")
        ->excludes(dev);
    sub->add_option("--host-budget", o.host_budget,
                    "Host memory this rank may use, e.g. 64G; the planner streams what does "
                    "not fit (tier 2 from host memory, tier 3 from an HDF5 store). Default: the "
                    "smallest of MemAvailable, the cgroup limit and Slurm's grant, shared among "
                    "the node's ranks (tessera plan shows it)");
  }
  if (which & kStreamingOptions) {
    sub->add_option("--tier", o.tier,
                    "Memory tier: auto (the first that fits) | 1 (resident) | 2 (host memory, "
                    "streamed) | 3 (HDF5 store, streamed from disk); a forced tier that does not "
                    "fit is refused")
        ->check(CLI::IsMember({"auto", "1", "2", "3"}));
    sub->add_option("--stream-chunk", o.stream_chunk,
                    "Tiers 2-3: nonzeros per streamed chunk (0: planned, at most 16 Mi)")
        ->check(non_negative<decltype(o.stream_chunk)>());
    sub->add_option("--read-ahead", o.read_ahead,
                    "Tier 3: chunks read ahead of the one computing, each by its own prefetch "
                    "thread (host buffers: N + 1 chunks)")
        ->check(CLI::Range(1, 64));
    sub->add_option("--read-cache", o.read_cache,
                    "Tier 3: keep (the store's pages stay in the page cache; a store that fits "
                    "memory is then read from memory on later passes) | drop (drop-behind: "
                    "every chunk leaves the page cache once read, so passes read the disk and "
                    "the store does not push other files out of memory) | auto (drop when the "
                    "rank's range of the store is larger than its share of the node's memory)")
        ->check(CLI::IsMember({"auto", "keep", "drop"}))
        ->capture_default_str();
  }
  if (which & kDryRunOption)
    sub->add_flag("--dry-run", o.dry_run, "Print the memory plan and stop (tessera plan)");
  sub->add_option("--json", o.json, "Write the run record (JSON) here");
  add_force_option(sub, o.force);
  add_tuning_options(sub, o.tuning, o.nccl_timeout_s);
}

void add_tuning_options(CLI::App* sub, kernels::Tuning& t, double& nccl_timeout_s) {
  const std::string group = "Kernel tuning";
  add_knob_options(sub, t, group);  // every field of kernels::Tuning, from its table
  sub->add_option("--nccl-timeout", nccl_timeout_s,
                  "cuda: seconds a NCCL collective, initialisation or split may wait before the "
                  "communicator is aborted and the job ends with a message (0: no limit)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x >= 0) || !std::isfinite(x))
              return "expected seconds >= 0 (0: no limit), got '" + v + "'";
            return {};
          },
          "NONNEGATIVE"))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--watchdog",
                  "Several ranks: seconds without a heartbeat from a rank (stopped, or its node "
                  "hangs) before the job is ended with a message naming it; a rank that is "
                  "killed or crashes ends the job at once (0: no watchdog; docs/reliability.md)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x >= 0) || !std::isfinite(x) || (x > 0 && x < 1))
              return "expected seconds >= 1 (0: no watchdog), got '" + v + "'";
            return {};
          },
          "0|>=1"))
      ->type_name("FLOAT")
      ->default_val(30)
      ->group(group);
  // The combination, as the backend will check it, once every option is parsed: an
  // InputError becomes CLI11's one-line error with its exit code.
  sub->parse_complete_callback([&t] {
    try {
      kernels::check(t);
    } catch (const InputError& e) {
      throw CLI::ValidationError(e.what());
    }
  });
}

void add_force_option(CLI::App* sub, bool& force) {
  sub->add_flag("--force", force,
                "Replace existing output files that Tessera did not write. Without it an "
                "existing output is replaced only when it is Tessera's own file of the same "
                "kind (model, store, FROSTT text, run record); an input is never replaced, "
                "not even with --force (docs/reliability.md)");
}

void add_checkpoint_options(CLI::App* sub, CheckpointArgs& a) {
  sub->add_option("--checkpoint-every", a.every,
                  "Write a checkpoint after every K-th iteration (0: never); a run that is "
                  "killed loses at most K iterations, one stopped by SIGINT or SIGTERM (or "
                  "--max-seconds) none: it writes one after its last iteration")
      ->check(CLI::Range(0, 1000000));
  sub->add_option("--checkpoint", a.path,
                  "Checkpoint file (HDF5, replaced atomically; default: the --out path with "
                  ".ckpt.h5, e.g. model.h5 -> model.ckpt.h5)");
  sub->add_option("--resume", a.resume,
                  "Continue the run saved in this checkpoint (same tensor, precision and rank(s); "
                  "--iters counts all iterations, the saved ones included)");
  sub->add_option("--inject-fault",
                  "Testing: RANK:KIND:POINT[:ITERATION] makes rank RANK fail on purpose the "
                  "first time it reaches POINT (prepare | kernel | collective) in iteration "
                  ">= ITERATION (default 1): KIND kill (SIGKILL), stop (SIGSTOP), oom (fills "
                  "its GPU, then allocates) or error (docs/reliability.md)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              (void)util::fault::parse(v);
            } catch (const InputError& e) {
              const std::string m = e.what();  // CLI11 names the option already
              const std::string self = "--inject-fault ";
              return m.rfind(self, 0) == 0 ? m.substr(self.size()) : m;
            }
            return {};
          },
          ""))
      ->type_name("RANK:KIND:POINT[:ITERATION]")
      ->group("Testing");
}

void add_cp_value_options(CLI::App* sub, algo::CpOptions& o, CpRows rows) {
  run::for_each_cp_value([&]<typename V>(const run::CpValue<V>& v) {
    if (rows == CpRows::bench && !v.bench) return;
    std::string names = run::cp_flag(v.key);
    if (!v.short_flag.empty()) names = std::string(v.short_flag) + "," + names;
    V& field = o.*v.field;
    if constexpr (std::is_same_v<V, bool>) {
      sub->add_flag(names, field, std::string(v.help));
    } else {
      // CLI11's own validators, so that --help reads as every other option's ("INT in
      // [1 - 4096]", "NONNEGATIVE"); the run layer checks the same ranges (check_cp_values).
      CLI::Option* opt = sub->add_option(names, field, std::string(v.help));
      if (!std::isinf(v.hi))
        opt->check(CLI::Range(static_cast<V>(v.lo), static_cast<V>(v.hi)));
      else if (v.lo == 0)
        opt->check(non_negative<V>());
      else
        opt->check(CLI::Range(static_cast<V>(v.lo), std::numeric_limits<V>::max()));
      opt->capture_default_str();
    }
  });
}

void add_cp_constraint_flags(CLI::App* sub, CpConstraintArgs& a) {
  // --nonneg alone means every mode: CLI11 stores an option's default string when it is given
  // without its optional value, so that string is "" (not the captured "none"), and
  // apply_cp_constraints reads "" as all.
  sub->add_option("--nonneg", a.nonneg,
                  "Nonnegative factors on these modes: all | none | a list such as 0,2; "
                  "--nonneg alone is all (after FILE, or it takes FILE as its value); default "
                  "none (HALS: coordinate descent on each row, --inner-sweeps per update)")
      ->expected(0, 1)
      ->default_str("");
  sub->add_option("--l1", a.l1,
                  "L1 penalty l1 * sum |a| on each factor update: one value, or one per mode "
                  "(0.1,0,0)")
      ->capture_default_str();
  sub->add_option("--l2", a.l2,
                  "L2 (Frobenius) penalty l2/2 * ||A||^2 on each factor update: one value, or one "
                  "per mode (default 0; 0.01 with --observed-only)");
  sub->add_option("--loss", a.loss,
                  "gaussian: least squares (CP-ALS); poisson: counts, the Poisson "
                  "log-likelihood by CP-APR's multiplicative updates, --tol its KKT violation; "
                  "bernoulli (0/1 data, logit link), gamma, rayleigh, huber: GCP by stochastic "
                  "gradients (docs/counts.md)")
      ->check(CLI::IsMember({"gaussian", "poisson", "bernoulli", "gamma", "rayleigh", "huber"}))
      ->capture_default_str();
  sub->add_option("--solver", a.solver,
                  "auto: ALS for gaussian, CP-APR for poisson, GCP otherwise; gcp: GCP-SGD with "
                  "Adam for any --loss (poisson with a log link; --iters counts epochs, --tol "
                  "the relative change of the estimated loss)")
      ->check(CLI::IsMember({"auto", "als", "apr", "gcp"}))
      ->capture_default_str();
  sub->add_option("--cuda-graph", a.cuda_graph,
                  "on: with --backend cuda (one rank, or several with NCCL; memory tiers 1-2), "
                  "plain CP runs each iteration on the device (dense steps as kernels, one CUDA "
                  "graph replayed per iteration, one wait for the fit); off: per-operation "
                  "calls with host round trips")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

/// The value of a command-line string as JSON by the option's declared type (CLI11's type
/// name: INT, UINT, FLOAT, TEXT, ...): numbers for numeric types when the text is one, else
/// the string as given.

nlohmann::json cli_options_json(const CLI::App& sub) {
  nlohmann::json j = nlohmann::json::object();
  for (const CLI::Option* opt : sub.get_options()) {
    if (opt == sub.get_help_ptr() || opt == sub.get_help_all_ptr()) continue;
    std::string name = opt->get_single_name();
    if (name.empty()) continue;
    std::replace(name.begin(), name.end(), '-', '_');
    const bool flag = opt->get_expected_max() == 0;
    if (flag) {
      bool on = opt->count() > 0;
      for (const std::string& r : opt->results())
        if (r == "false" || r == "0" || r == "-1") on = false;
      j[name] = on;
      continue;
    }
    const std::string type = opt->get_type_name();
    const std::vector<std::string> values =
        opt->count() > 0 ? opt->results() : std::vector<std::string>{opt->get_default_str()};
    if (opt->get_expected_max() > 1 && opt->count() > 0) {
      nlohmann::json a = nlohmann::json::array();
      for (const std::string& v : values) a.push_back(typed_value(v, type));
      j[name] = a;
    } else {
      j[name] = values.empty() ? nlohmann::json("") : typed_value(values.back(), type);
    }
  }
  return j;
}

void add_partition_options(CLI::App* sub, LoadOptions& load, const std::string& auto_means) {
  sub->add_option("--partition", load.partition,
                  "Nonzero distribution: auto (" + auto_means + ") | nnz | grid")
      ->check(CLI::IsMember({"auto", "nnz", "grid"}));
  sub->add_option("--grid", load.grid, "Rank grid, e.g. 4x2x1 (default: chosen automatically)");
  sub->add_flag("--relabel", load.relabel,
                "Relabel indices by a random bijection before partitioning (balances skewed "
                "modes; results are unchanged)");
  sub->add_flag("--deal", load.deal,
                "Grid partition: deal the rows of each cut mode round-robin over its chunks, "
                "so chunks hold equal rows and keep them in order (power-law modes; results "
                "are unchanged; docs/multi-gpu.md, \"Dealt grids\")");
}

void set_invocation(int argc, const char* const* argv, const CLI::App* parsed) {
  Invocation& inv = invocation();
  inv.argv.assign(argv, argv + argc);
  inv.parsed = parsed;
}

RecordContext cli_record_context() {
  const Invocation& inv = invocation();
  RecordContext ctx;
  ctx.argv = inv.argv;
  if (inv.parsed) ctx.front_end_options = cli_options_json(*inv.parsed);
  return ctx;
}

nlohmann::json record_envelope(const std::string& command, const nlohmann::json& options,
                               const comm::Communicator& world, const std::string& backend,
                               int threads, const kernels::Tuning* tuning,
                               std::uint64_t device_peak) {
  RecordContext ctx = cli_record_context();
  if (tuning) ctx.tuning = *tuning;
  ctx.device_peak = device_peak;
  return run::record_envelope(command, options, world, backend, threads, ctx);
}

}  // namespace tessera::driver
