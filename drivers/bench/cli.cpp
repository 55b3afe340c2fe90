// tessera bench mttkrp|cp|ttmc|tucker: the subcommand's options and the run every tensor
// benchmark shares (the memory plan, the input, the measured bandwidth, the record); the
// operation itself is its descriptor's (bench.hpp). `bench contract` is contract.cpp,
// `bench comm` (collectives, nccl-tests style) comm.cpp.
//
// Bandwidth: a large copy in the backend's memory (bytes read + bytes written), best of 5
// (measure_bandwidth), the denominator of every floor (harness.hpp); --bandwidth gives it
// instead (bench_bandwidth), e.g. the figure an earlier run on the same node printed.
#include <algorithm>
#include <map>

#include "algo/cp_als.hpp"
#include "algo/cp_strategy.hpp"
#include "algo/tucker.hpp"
#include "bench/bench.hpp"
#include "bench/comm.hpp"
#include "bench/harness.hpp"
#include "commands.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "kernels/backend.hpp"
#include "plan/measure.hpp"
#include "run/validate.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace bench {
namespace {

/// The options a benchmark shares with the runs, checked by the run layer before the input
/// is opened or generated (run/validate.hpp): the compute options, bench cp's CP values and
/// constraints, the Tucker ranks of bench ttmc|tucker.
void check_bench_options(const BenchArgs& a) {
  check_compute_options(a.run, a.load);
  if (a.what == "cp") {
    check_cp_values(a.cp, /*python=*/false, CpRows::bench);
    check_cp_constraint_args(a.con);
    solver_of(a.con);  // --loss and --solver: a pair that does not exist is refused here
  }
  if ((a.what == "ttmc" || a.what == "tucker") && !a.ranks.empty()) parse_rank_list(a.ranks);
  if (!a.bandwidth.empty()) parse_bytes(a.bandwidth, "--bandwidth");
}

/// --comm-strategy auto (the default) resolved for bench cp from the generated dims or the
/// store's header (algo::choose_comm_strategy); bench tucker keeps it (algo::TuckerRows); the
/// other benchmarks take allreduce.
void resolve_bench_strategy(BenchArgs& a, const comm::MpiCommunicator& world) {
  // bench tucker: its own auto (algo::TuckerRows), decided per mode inside the run.
  if (a.run.strategy != "auto" || a.what == "tucker") return;
  algo::CommChoice c;
  if (a.what == "cp" && world.size() > 1) {
    comm::run_collectively(world, [&] {
      plan::TensorFacts f;
      if (a.load.path.empty()) {
        f.generated = true;  // dims and nonzeros known before the tensor exists
        f.dims = parse_dims(a.gen_dims);
        f.nnz = static_cast<nnz_t>(a.gen_nnz);
      } else {
        f = plan::facts_of_file(a.load.path, world);
      }
      algo::resolve_comm_strategy("auto", f, world.size(), a.rank,
                                  a.run.precision == "float" ? 4 : 8, &c, 0, a.load.deal);
    });
  }
  a.run.strategy = algo::to_string(c.strategy);
}

template <typename T>
void run_bench(const BenchArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_input("the input", a.load.path);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  // bench tucker: --comm-strategy is algo::TuckerRows (bench_tucker), its tensor nnz-cut.
  if (a.what == "tucker") (void)algo::parse_tucker_rows(a.run.strategy);  // before any work
  const auto strategy = a.what == "tucker" ? algo::CommStrategy::allreduce
                                           : algo::parse_comm_strategy(a.run.strategy);
  const auto scheme =
      strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  auto cx = make_compute<T>(a.run, world);
  const auto kind = cx.kind;
  auto& be = cx.backend;
  PeakSampler peaks(kind == kernels::BackendKind::cuda);
  plan::Plan bp;
  const bool header_plan = a.load.path.empty() || io::is_tensor_store(a.load.path, world);
  if (header_plan) {
    std::vector<std::uint64_t> dims;
    nnz_t nnz = 0;
    if (a.load.path.empty()) {
      comm::run_collectively(world, [&] { dims = parse_dims(a.gen_dims); });
      nnz = static_cast<nnz_t>(a.gen_nnz);
    } else {
      const auto h = io::read_h5_info(a.load.path, world);
      dims = h.dims;
      nnz = h.nnz;
    }
    bp = bench_plan<T>(a, dims, nnz, a.load.path, kind, world, cx.nccl.get());
    if (kind == kernels::BackendKind::cuda) be->set_memory_budget(bp.device_budget);
  }
  auto in = bench_input<T>(a, scheme, world, *be);
  if (!header_plan)
    bp = bench_plan<T>(a, in.dims, in.global_nnz, a.load.path, kind, world, cx.nccl.get());
  const double bw = bench_bandwidth(a, *be);
  const bool bw_given = !a.bandwidth.empty();
  nlohmann::json j;  // the record's body; the envelope is added when the run is done
  bandwidth_record(j, bw, bw_given);
  j["tensor"] = {{"dims", in.dims}, {"nnz", in.global_nnz}};
  // The rank the benchmark runs with: R, or the Tucker ranks of ttmc|tucker (their own
  // record field "ranks", written by ttmc.cpp and tucker.cpp).
  std::string rank_text = ", R = " + std::to_string(a.rank);
  if (a.what == "ttmc" || a.what == "tucker") {
    rank_text = ", ranks = ";
    const auto ranks = bench_ranks(a, static_cast<int>(in.dims.size()));
    for (std::size_t m = 0; m < ranks.size(); ++m)
      rank_text += (m > 0 ? "," : "") + std::to_string(ranks[m]);
  } else {
    j["rank"] = a.rank;
  }
  j["precision"] = a.run.precision;
  log_setup(a.what, kernels::to_string(kind), world.size(), a.run.threads, a.run.precision,
            rank_text, bw, bw_given);
  using Run = void (*)(Context<T>&);
  static const std::map<std::string, Run> ops = {{"mttkrp", &bench_mttkrp<T>},
                                                 {"cp", &bench_cp<T>},
                                                 {"ttmc", &bench_ttmc<T>},
                                                 {"tucker", &bench_tucker<T>}};
  Context<T> c{a, in, cx, world, bw, j};
  ops.at(a.what)(c);
  j["memory_plan"] = memory_record(bp, peaks, world);
  write_record(a.run.json, "bench " + a.what, j, world, kernels::to_string(kind), a.run.threads,
               be->tuning(), peaks.device_peak());
}

}  // namespace
}  // namespace bench

using bench::BenchArgs;

/// Options of `bench` that the chosen benchmark does not use are refused (one line naming
/// the option and the benchmarks that take it), not ignored. Under `bench contract` and
/// `bench comm` none of bench's own options apply (they reach bench when the subcommand does
/// not know them).
void reject_unused_bench_options(const CLI::App& bench, const BenchArgs& a) {
  const bool contract = !bench.get_subcommands().empty();
  struct Use {
    const char* name;
    std::vector<std::string> whats;  ///< empty: every benchmark but contract
  };
  const std::vector<Use> uses = {{"--repeat", {"mttkrp", "ttmc"}},
                                 {"--iters", {"cp", "tucker"}},
                                 {"--svd", {"tucker"}},
                                 {"--subspace-steps", {"tucker"}},
                                 {"--ranks", {"ttmc", "tucker", "mttkrp"}},
                                 {"--tc-sweep", {"mttkrp"}},
                                 {"--tc-dims", {"mttkrp"}},
                                 {"--tc-densities", {"mttkrp"}},
                                 {"--tc-fractions", {"mttkrp"}},
                                 {"--tc-seed", {"mttkrp"}},
                                 {"--nonneg", {"cp"}},
                                 {"--l1", {"cp"}},
                                 {"--l2", {"cp"}},
                                 {"--inner-sweeps", {"cp"}},
                                 {"--observed-only", {"cp"}},
                                 {"--holdout", {"cp"}},
                                 {"--grid", {"cp"}},
                                 {"--relabel", {"cp"}},
                                 {"--deal", {"cp"}}};
  for (const CLI::Option* o : bench.get_options()) {
    if (o->count() == 0 || o == bench.get_help_ptr()) continue;
    const std::string name = o->get_name();
    if (contract) {
      if (name == "what") continue;  // "bench contract" leaves it empty
      throw CLI::ValidationError(name,
                                 "is an option of bench mttkrp|cp|ttmc|tucker, not of bench " +
                                     bench.get_subcommands().front()->get_name());
    }
    for (const Use& u : uses) {
      if (name != u.name) continue;
      if (std::find(u.whats.begin(), u.whats.end(), a.what) == u.whats.end()) {
        std::string list;
        for (const std::string& w : u.whats) list += (list.empty() ? "" : "|") + w;
        throw CLI::ValidationError(
            u.name, "does not apply to bench " + a.what + " (only to bench " + list + ")");
      }
    }
    const bool blocky_option = name == "--tc-dims" || name == "--tc-densities" ||
                               name == "--tc-fractions" || name == "--tc-seed";
    if (a.what == "mttkrp" && !a.tc_sweep && (name == "--ranks" || blocky_option))
      throw CLI::ValidationError(name, "of bench mttkrp applies only with --tc-sweep");
    const bool blocky_sweep = a.tc_sweep && a.load.path.empty() && a.gen_dims.empty();
    if (a.tc_sweep && !blocky_sweep && blocky_option)
      throw CLI::ValidationError(
          name, "applies to the generated blocky tensors of --tc-sweep (no FILE, no --generate)");
    if (a.gen_dims.empty() && !(blocky_sweep && name == "--nnz") &&
        (name == "--nnz" || name == "--dist" || name == "--alpha"))
      throw CLI::ValidationError(name, "applies only with --generate (a file is read as it is)");
  }
}

void add_bench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Benchmarks: time next to the memory-bandwidth floor");
  sub->add_option("what", a->what, "mttkrp | cp | ttmc | tucker")
      ->required()
      ->check(CLI::IsMember({"mttkrp", "cp", "ttmc", "tucker"}));
  sub->add_option("file", a->load.path, "Tensor file (or use --generate)");
  sub->add_option("--generate", a->gen_dims,
                  "Generate a tensor of these dims instead (e.g. 12092x9184x28818)");
  sub->add_option("--nnz", a->gen_nnz, "Nonzeros of the generated tensor");
  sub->add_option("--dist", a->dist, "uniform | powerlaw")
      ->check(CLI::IsMember({"uniform", "powerlaw"}));
  sub->add_option("--alpha", a->alpha,
                  "Power-law exponent (--dist powerlaw): P(index = i) ~ (i + 1)^-alpha")
      ->check(CLI::Range(0.05, 100.0));
  sub->add_option("-r,--rank", a->rank, "CP rank R")->check(CLI::Range(1, 4096));
  sub->add_option("--repeat", a->repeat, "Timed repetitions per mode (median reported)")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--iters", a->iters, "Iterations (bench cp, bench tucker)")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--ranks", a->ranks,
                  "Tucker ranks per mode (bench ttmc|tucker), e.g. 16,16,16; default --rank. "
                  "bench mttkrp --tc-sweep: the ranks R swept (default 16,32,64,128,256)");
  sub->add_option("--svd", a->svd,
                  "Tucker factor update (bench tucker): gram | subspace | scalapack")
      ->check(CLI::IsMember({"gram", "subspace", "scalapack"}));
  sub->add_option("--subspace-steps", a->subspace_steps,
                  "bench tucker --svd subspace: at most this many power steps per factor update")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--generate-on", a->generate_on,
                  "Where --generate makes the tensor: auto (the backend, or the host where the "
                  "run needs the distributed block) | host | backend")
      ->check(CLI::IsMember({"auto", "host", "backend"}))
      ->capture_default_str();
  const std::string sweep = "Tensor-core sweep";
  sub->add_flag("--tc-sweep", a->tc_sweep,
                "bench mttkrp: the tensor-core MTTKRP against CUDA cores (cuda backend, one "
                "rank): generated blocky tensors (no FILE, no --generate) or the input; per "
                "rank R of --ranks and mode, tensor cores off / on per precision / auto")
      ->group(sweep);
  sub->add_option("--tc-dims", a->tc_dims,
                  "--tc-sweep: dims of the generated blocky tensors (--nnz nonzeros, default 2e7)")
      ->group(sweep)
      ->capture_default_str();
  sub->add_option("--tc-densities", a->tc_densities,
                  "--tc-sweep: densities of the dense 16 x 16 tiles, comma-separated")
      ->group(sweep)
      ->capture_default_str();
  sub->add_option("--tc-fractions", a->tc_fractions,
                  "--tc-sweep: shares of the nonzeros in dense tiles (the rest uniform), "
                  "comma-separated")
      ->group(sweep)
      ->capture_default_str();
  sub->add_option("--tc-seed", a->tc_seed, "--tc-sweep: seed of the generated blocky tensors")
      ->group(sweep)
      ->capture_default_str();
  sub->add_option("--grid", a->load.grid,
                  "bench cp --comm-strategy layer: the rank grid, e.g. 2x1x1 (default: chosen "
                  "as tessera cp chooses it)");
  sub->add_flag("--relabel", a->load.relabel,
                "bench cp --comm-strategy layer: relabel the indices by a random bijection "
                "before the grid cuts them (balances skewed modes; results are unchanged)");
  sub->add_flag("--deal", a->load.deal,
                "bench cp --comm-strategy layer: deal the rows of each cut mode round-robin "
                "over its chunks, as tessera cp --deal");
  sub->add_option("--bandwidth", a->bandwidth,
                  "The copy bandwidth of the backend's memory per rank, bytes/s (e.g. 4.2T, as "
                  "the log line prints it), the floors' denominator, instead of measuring it "
                  "(a copy of two 512 MiB host or 2 GiB device arrays, best of 5)");
  add_cp_value_options(sub, a->cp, CpRows::bench);
  add_cp_constraint_flags(sub, a->con);
  add_compute_options(sub, a->run, a->load, kStrategyOption | kBudgetOptions);
  add_bench_contract(sub, run);  // `bench contract` (contract.cpp)
  add_bench_comm(sub, run);      // `bench comm` (comm.cpp)
  // `bench` takes its benchmark as a positional ("bench mttkrp"); "bench contract" and
  // "bench comm" are subcommands of their own (other inputs and options) whose callbacks set
  // the runner. The positional becomes optional; bench's final callback runs after its
  // subcommand's, checks the options, asks for the positional when no subcommand was given
  // and only then sets the runner. It is set as the final callback by name:
  // add_compute_options may have set bench's parse-complete callback (its own checks), which
  // stays.
  CLI::Option* what = sub->get_option("what");
  what->required(false);
  sub->immediate_callback(true);
  sub->final_callback([a, sub, what, &run] {
    reject_unused_bench_options(*sub, *a);
    if (!sub->get_subcommands().empty()) return;  // bench contract|comm: its runner
    if (what->count() == 0) throw CLI::RequiredError("what");
    run = [a](const comm::MpiCommunicator& world) {
      if (a->tc_sweep) {
        with_precision(a->run, [&]<typename T>() { bench::run_mttkrp_tc_sweep<T>(*a, world); });
        return;
      }
      comm::run_collectively(world, [&] { bench::check_bench_options(*a); });
      BenchArgs b = *a;
      bench::resolve_bench_strategy(b, world);
      with_precision(b.run, [&]<typename T>() { bench::run_bench<T>(b, world); });
    };
  });
}

}  // namespace tessera::driver
