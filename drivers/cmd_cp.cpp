// tessera cp: distributed CP-ALS of a FROSTT tensor.
#include <cmath>
#include <memory>

#include "algo/cp_als.hpp"
#include "algo/cp_init.hpp"
#include "algo/cp_strategy.hpp"
#include "checkpoint.hpp"
#include "comm/nccl_communicator.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "cp_options.hpp"
#include "io/checkpoint.hpp"
#include "io/model_io.hpp"
#include "plan/measure.hpp"
#include "record.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct CpArgs {
  LoadOptions load;
  int rank = 16;
  int iters = 50;
  double tol = 1e-5;
  double max_seconds = 0;
  int print_every = 1;
  std::uint64_t seed = 1;
  std::string init = "random";  ///< random | nvecs | file:MODEL.h5
  CpConstraintArgs con;         ///< constrained, regularised and weighted CP
  ComputeOptions run;
  std::string out;
  CheckpointArgs ckpt;
};

template <typename T>
void run_cp(const CpArgs& a, const comm::MpiCommunicator& world) {
  Timer total;
  algo::CommChoice choice;
  algo::CommStrategy strategy = algo::CommStrategy::allreduce;
  comm::run_collectively(world, [&] {
    strategy = algo::resolve_comm_strategy(
        a.run.strategy,
        a.run.strategy == "auto" ? plan::facts_of_file(a.load.path, world) : plan::TensorFacts{},
        world.size(), a.rank, a.run.precision == "float" ? 4 : 8, &choice);
  });
  if (a.run.strategy == "auto" && world.size() > 1)
    log::info("--comm-strategy auto: " + algo::to_string(strategy) + " (" + choice.why + ")");
  partition::Scheme scheme =
      strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  if (a.load.partition != "auto") scheme = partition::parse_scheme(a.load.partition);
  if (!a.load.grid.empty() && a.load.partition == "auto") scheme = partition::Scheme::grid;

  CheckpointArgs ck = a.ckpt;
  comm::run_collectively(world, [&] {
    if (a.init.rfind("file:", 0) == 0) {
      ck.init_model = a.init.substr(5);
      TESSERA_INPUT_CHECK(!ck.init_model.empty(), "--init file: names no model file");
      TESSERA_INPUT_CHECK(a.ckpt.resume.empty(),
                          "--init " << a.init << " and --resume " << a.ckpt.resume
                                    << ": a run starts from one of them, not both");
    } else {
      TESSERA_INPUT_CHECK(a.init == "random" || a.init == "nvecs",
                          "--init " << a.init << ": expected random, nvecs or file:MODEL.h5");
      TESSERA_INPUT_CHECK(a.init == "random" || a.ckpt.resume.empty(),
                          "--init " << a.init << " and --resume " << a.ckpt.resume
                                    << ": a run starts from one of them, not both");
    }
  });
  // Every output checked before any work (io/output.hpp): none is an input, each can be
  // created, existing files are replaced only by the rule (--force).
  const std::string ckpt_path =
      check_model_outputs(a.load.path, ck, a.out, a.run.json, a.run.force, world);
  auto cx = make_compute<T>(a.run, world);
  const auto kind = cx.kind;
  log::info("tessera cp: " + std::to_string(world.size()) + " rank(s), backend " +
            kernels::to_string(kind) + ", " + std::to_string(effective_threads(a.run.threads)) +
            " thread(s) per rank, " + a.run.precision + ", rank " + std::to_string(a.rank) +
            ", strategy " + algo::to_string(strategy));
  Loaded li;
  PlanContext pc;
  pc.workload = plan::Workload::cp;
  pc.cp_rank = a.rank;
  pc.completion = a.con.observed_only;
  pc.tier1_only = a.con.observed_only || a.con.holdout > 0 || a.init == "nvecs";
  pc.tier1_why = a.con.observed_only ? "--observed-only"
                 : a.con.holdout > 0 ? "--holdout"
                                     : "--init nvecs";
  PeakSampler peaks(kind == kernels::BackendKind::cuda);
  Input<T> in = load_input<T>(a.load, a.run, scheme, strategy == algo::CommStrategy::allreduce, cx,
                              pc, world, &li);
  if (in.dry_run) return;

  algo::CpOptions o;
  o.rank = a.rank;
  o.tensor_name = a.load.path;
  o.max_iters = a.iters;
  o.tol = a.tol;
  o.max_seconds = a.max_seconds;
  o.print_every = a.print_every;
  o.seed = a.seed;
  o.strategy = strategy;
  apply_cp_constraints(a.con, static_cast<int>(in.dims.size()), a.seed, o, world);
  nlohmann::json opts = {{"file", a.load.path},
                         {"rank", a.rank},
                         {"iters", a.iters},
                         {"tol", a.tol},
                         {"max_seconds", a.max_seconds},
                         {"print_every", a.print_every},
                         {"seed", a.seed},
                         {"init", a.init},
                         {"comm_strategy", algo::to_string(strategy)},
                         {"comm_strategy_option", a.run.strategy},
                         {"partition", in.partition_scheme},
                         {"grid", in.grid},
                         {"relabel", a.load.relabel},
                         {"backend", kernels::to_string(kind)},
                         {"precision", a.run.precision},
                         {"index_base", a.load.index_base}};
  add_cp_constraint_options(opts, o);
  if (a.run.strategy == "auto")
    opts["comm_strategy_auto"] = {{"allreduce_comm_seconds", choice.allreduce_comm_s},
                                  {"layer_comm_seconds", choice.layer_comm_s},
                                  {"grid_cost_seconds", choice.grid_cost_s},
                                  {"why", choice.why}};
  if (a.ckpt.every > 0) opts["checkpoint_every"] = a.ckpt.every;
  if (!a.ckpt.resume.empty()) opts["resumed_from"] = a.ckpt.resume;

  // Checkpoint and restart (docs/formats.md): the input's identity, the resumed state and
  // the callback that writes a checkpoint on rank 0 after every K-th iteration.
  io::TensorFingerprint fingerprint;
  if (!ckpt_path.empty() || !a.ckpt.resume.empty()) fingerprint = in.fingerprint(world);
  algo::CpState resumed;
  if (!a.ckpt.resume.empty()) {
    io::ResumeCheck now;
    now.input = fingerprint;
    now.precision = a.run.precision;
    now.options_json = opts.dump();
    now.must_match = {"rank"};
    now.ignore = {"file", "checkpoint_every", "resumed_from", "max_seconds", "print_every"};
    const io::CheckpointInfo info = resume_from(
        a.ckpt.resume, now, a.iters,
        [&](io::CheckpointInfo* i) { resumed.model = io::read_cp_checkpoint(a.ckpt.resume, i); },
        world);
    restore_progress(info, &resumed);
    o.resume = &resumed;
  } else if (!ck.init_model.empty()) {
    // A model file as the start: its factors and weights are the state "after iteration 0".
    comm::run_collectively(world, [&] {
      resumed.model = io::read_kruskal_h5(ck.init_model);
      TESSERA_INPUT_CHECK(resumed.model.dims == in.dims,
                          "--init " << ck.init_model << ": the model's dims "
                                    << format_dims(resumed.model.dims) << " are not the input's "
                                    << format_dims(in.dims));
      TESSERA_INPUT_CHECK(resumed.model.rank == a.rank,
                          "--init " << ck.init_model << ": the model has rank "
                                    << resumed.model.rank << ", the run asks for --rank "
                                    << a.rank);
    });
    resumed.iteration = 0;
    o.resume = &resumed;
    log::info("starting from the model in " + ck.init_model);
  } else if (a.init == "nvecs") {
    // The leading left singular vectors of each unfolding, from the Tucker machinery.
    comm::run_collectively(world, [&] {
      TESSERA_INPUT_CHECK(in.dist.has_value(),
                          "--init nvecs needs the tensor distributed in memory (memory tier 1 "
                          "from a text file or a store read whole); this run holds it as a "
                          "prepared or streamed handle (tier "
                              << in.plan.tier << "): use --init random or file:MODEL.h5");
    });
    Timer tn;
    resumed.model =
        algo::nvecs_start<T>(*in.dist, *cx.backend, world, *cx.data, a.rank, a.seed, o.nonneg);
    resumed.iteration = 0;
    o.resume = &resumed;
    log::info("starting from nvecs (leading singular vectors of each unfolding, " +
              std::to_string(tn.seconds()) + " s)");
  }
  if (!ckpt_path.empty() || test_kill_after_iteration() > 0) {
    o.state_every = state_every(ckpt_path, a.ckpt.every);
    o.on_iteration = [&](const algo::CpState& s) {
      after_iteration(
          ckpt_path, a.ckpt.every, s.iteration,
          [&] {
            io::write_cp_checkpoint(ckpt_path, s.model,
                                    checkpoint_info(s, a.run.precision, fingerprint, opts.dump()));
          },
          world, s.time_limit);
    };
  }
  algo::CpResult res;
  if (in.streamed()) {
    // Memory tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself from host
    // memory or disk through the backend.
    res = algo::cp_als<T>(*in.tensor(), in.dims, in.global_nnz, *cx.backend, world, *cx.data, o);
  } else if (in.handle) {
    res = algo::cp_als<T>(*in.handle, in.dims, in.global_nnz, *cx.backend, world, *cx.data, o);
  } else {
    res = algo::cp_als<T>(*in.dist, *cx.backend, world, *cx.data, o);
  }
  // Iterations run by this process (a resumed run has the saved ones in its history).
  const int ran = std::max(res.iterations - (o.resume ? o.resume->iteration : 0), 1);

  const double kern = res.phases.get("kernel");
  const nnz_t nnz = in.global_nnz;
  const int N = static_cast<int>(in.dims.size());
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "done: fit %.6f after %d iteration(s) (%s), %.4f s per iteration; "
      "MTTKRP %.3g nonzeros/s per rank",
      res.fit, res.iterations, res.stop_reason.c_str(),
      res.history.empty()
          ? 0.0
          : (res.phases.get("kernel") + res.phases.get("comm") + res.phases.get("solve")) / ran,
      kern > 0 ? static_cast<double>(nnz) / world.size() * N * ran / kern : 0.0);
  log::info(line);
  if (o.holdout > 0) {
    std::snprintf(line, sizeof(line),
                  "held-out entries: validation RMSE %.6g on %llu entries (predicting the "
                  "training mean: %.6g)",
                  res.validation_rmse, static_cast<unsigned long long>(res.holdout_entries),
                  res.mean_predictor_rmse);
    log::info(line);
  }
  for (const kernels::TcSplit& s : res.tc_split) log::info(tc_split_line(s));
  peaks.stop();  // the floor's probes below are not the run's memory
  const TierFloor floor =
      in.plan.tier >= 2 ? tier_floor<T>(in.plan, a.load.path, *cx.backend, a.run.threads, world)
                        : TierFloor{};
  double it_s = 0;
  for (const auto& h : res.history) it_s += h.seconds;
  const nlohmann::json tier_json = report_memory_tier(
      res.tier, res.tier_description, res.stream_copy_seconds, res.stream_compute_seconds,
      res.stream_overlap, ran, floor, res.history.empty() ? 0.0 : it_s / res.history.size());
  if (res.solve_fallbacks > 0)
    log::info("note: " + std::to_string(res.solve_fallbacks) +
              " solve(s) used the pseudo-inverse (rank-deficient normal equations)");

  if (!a.out.empty()) {
    Timer tw;
    if (world.rank() == 0) {
      io::ModelRecord rec;
      rec.fit = res.fit;
      rec.iterations = res.iterations;
      for (const auto& h : res.history) rec.fit_history.push_back(h.fit);
      rec.options_json = opts.dump();
      io::write_kruskal_h5(a.out, res.model, rec);
    }
    comm::run_collectively(world, [] {});
    log::info("model written to " + a.out + " (" + std::to_string(tw.seconds()) + " s)");
  }
  const nlohmann::json memory = memory_record(in.plan, peaks, world);
  if (!a.run.json.empty()) {
    double peak = static_cast<double>(peak_rss_bytes());
    world.allreduce(&peak, 1, comm::ReduceOp::max);
    nlohmann::json j = record_envelope("cp", opts, world, kernels::to_string(kind), a.run.threads);
    add_input_fields(j, in);
    j["fit"] = res.fit;
    j["iterations"] = res.iterations;
    j["converged"] = res.converged;
    j["stop_reason"] = res.stop_reason;
    add_cp_constraint_results(j, res, o);
    j["solve_fallbacks"] = res.solve_fallbacks;
    j["memory_tier"] = tier_json;
    j["phases_seconds"] = {{"io", li.read_seconds},
                           {"read", li.read_seconds},
                           {"partition", li.distribute_seconds},
                           {"setup", res.phases.get("setup")},
                           {"kernel", res.phases.get("kernel")},
                           {"comm", res.phases.get("comm")},
                           {"solve", res.phases.get("solve")},
                           {"total", total.seconds()}};
    add_iteration_fields(
        j, cp_iterations_json(res.history), ran,
        {{"kernel", kern}, {"comm", res.phases.get("comm")}, {"solve", res.phases.get("solve")}});
    const double per_it_kernel = kern / ran;
    j["throughput"] = {
        {"mttkrp_nnz_per_s", per_it_kernel > 0 ? static_cast<double>(nnz) * N / per_it_kernel : 0},
        {"read_bytes_per_s", li.read_seconds > 0 ? li.read.bytes / li.read_seconds : 0}};
    j["peak_memory_bytes_per_rank"] = peak;
    j["memory_plan"] = memory;
    write_json(a.run.json, j, world);
  }
}

}  // namespace

void add_cp(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CpArgs>();
  auto* sub = app.add_subcommand("cp", "CP-ALS decomposition of a FROSTT tensor (.tns, .tns.gz)");
  sub->add_option("file", a->load.path, "Input tensor (.tns or .tns.gz)")->required();
  sub->add_option("-r,--rank", a->rank, "CP rank R")->check(CLI::Range(1, 4096));
  sub->add_option("-i,--iters", a->iters, "Maximum ALS iterations")->check(CLI::Range(1, 1000000));
  sub->add_option("--tol", a->tol, "Stop when |fit change| < tol (-t is --threads)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-seconds", a->max_seconds,
                  "Stop after the first iteration that ends more than this many seconds after "
                  "the iterations began (0: no limit); the record's stop_reason says \"time "
                  "limit\", and a checkpoint (--checkpoint-every) is written at the stop")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  sub->add_option("--print-every", a->print_every,
                  "Print an iteration line every N iterations (and the last)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sub->add_option("-s,--seed", a->seed, "Seed of the initial factors");
  sub->add_option("--init", a->init,
                  "Initial factors: random (keyed by --seed, mode and row: the same on any rank "
                  "count) | nvecs (leading left singular vectors of each unfolding, from a "
                  "randomized HOSVD and one HOOI step; tier 1) | file:MODEL.h5 (a model written "
                  "by tessera cp --out or the Python module: its factors and weights are the "
                  "start; same dims and rank)")
      ->capture_default_str();
  add_cp_constraint_flags(sub, a->con);
  sub->add_option("--partition", a->load.partition,
                  "Nonzero distribution: auto (nnz for allreduce, grid for layer) | nnz | grid")
      ->check(CLI::IsMember({"auto", "nnz", "grid"}));
  sub->add_option("--grid", a->load.grid, "Rank grid, e.g. 4x2x1 (default: chosen automatically)");
  sub->add_flag("--relabel", a->load.relabel,
                "Relabel indices by a random bijection before partitioning (balances skewed "
                "modes; results are unchanged)");
  add_compute_options(sub, a->run, a->load);
  sub->add_option("-o,--out", a->out, "Write the model (HDF5) here");
  add_checkpoint_options(sub, a->ckpt);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_cp<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
