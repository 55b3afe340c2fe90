// run_cp (run/cp.hpp): a CP-ALS run, written once for the CLI and the Python module.
#include "run/cp.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "algo/cp_apr.hpp"
#include "algo/cp_gcp.hpp"
#include "algo/cp_init.hpp"
#include "algo/cp_strategy.hpp"
#include "io/checkpoint.hpp"
#include "io/model_io.hpp"
#include "plan/measure.hpp"
#include "run/cp_options.hpp"
#include "run/steps.hpp"
#include "run/validate.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::run {
namespace {

/// The checkpoint arguments of the run, with the model file of --init file:PATH (the options
/// were checked by validate(): one start, a file named).
CheckpointArgs start_args(const CpRunOptions& o) {
  CheckpointArgs ck = o.ckpt;
  if (o.init.rfind("file:", 0) == 0) ck.init_model = o.init.substr(5);
  return ck;
}

/// The factor-update strategy: the option's, or for auto the model's choice (logged; its
/// figures go into the record). Collective.
algo::CommStrategy comm_strategy(const CpRunOptions& o, const comm::MpiCommunicator& world,
                                 algo::CommChoice* choice, int gpus_per_node) {
  algo::CommStrategy strategy = algo::CommStrategy::allreduce;
  if (solver_of(o.con) != algo::Solver::als) return strategy;  // CP-APR's, GCP's
  const bool model = o.run.strategy == "auto" && !o.load.path.empty();
  comm::run_collectively(world, [&] {
    strategy = algo::resolve_comm_strategy(
        o.run.strategy, model ? plan::facts_of_file(o.load.path, world) : plan::TensorFacts{},
        world.size(), o.als.rank, o.run.precision == "float" ? 4 : 8, choice, gpus_per_node,
        o.load.deal);
  });
  return strategy;
}

/// The ranks on each node when the nodes hold equal blocks of consecutive ranks (how Slurm
/// and jobs/slurm/launch.sh place them; the layout the model's layer_group assumes), else 0.
int block_ranks_per_node(const comm::NodeMap& nodes, int ranks) {
  if (nodes.nodes() < 2 || !nodes.uniform()) return 0;
  const int per = ranks / nodes.nodes();
  return nodes.node_of == comm::block_node_map(ranks, per).node_of ? per : 0;
}

PlanContext plan_context(const CpRunOptions& o) {
  PlanContext pc;
  pc.workload = plan::Workload::cp;
  pc.cp_rank = o.als.rank;
  pc.completion = o.als.observed_only;
  const algo::Solver solver = solver_of(o.con);  // validate() checked the pair
  pc.poisson = solver == algo::Solver::apr;
  pc.gcp = solver == algo::Solver::gcp;
  pc.gcp_samples = o.als.gcp_samples;
  pc.gcp_zero_samples = o.als.gcp_zero_samples;
  pc.gcp_eval_samples = o.als.gcp_eval_samples;
  pc.holdout = o.als.holdout;
  const bool not_als = solver != algo::Solver::als;
  pc.tier1_only = o.als.observed_only || o.als.holdout > 0 || o.init == "nvecs" || not_als;
  pc.tier1_why = o.als.observed_only ? std::string("--observed-only")
                 : o.als.holdout > 0 ? "--holdout"
                 : not_als           ? "--loss " + o.con.loss + " (not ALS)"
                                     : "--init nvecs";
  return pc;
}

template <typename T>
Input<T> cp_input(const CpRunOptions& o, partition::Scheme scheme, bool allreduce,
                  bool layer_by_auto, Compute<T>& cx, const comm::MpiCommunicator& world,
                  SparseTensor<T>* arrays, Loaded* li) {
  if (arrays == nullptr) {
    PlanContext pc = plan_context(o);
    pc.layer_by_auto = layer_by_auto;
    return load_input<T>(o.load, o.run, scheme, allreduce, cx, pc, world, li);
  }
  Input<T> in;  // arrays: distributed in memory and planned as a text file is (tiers 1-2)
  in.dist.emplace(partition::distribute(std::move(*arrays), scheme, {}, world));
  fill_stats_from_dist(in);
  plan_in_memory(in, o.name.empty() ? o.load.path : o.name, o.run,
                 allreduce && scheme == partition::Scheme::nnz, cx, plan_context(o), world);
  return in;
}

std::string name_of(const CpRunOptions& o) {
  return o.name.empty() ? o.load.path : o.name;
}

template <typename T>
nlohmann::json record_options(const CpRunOptions& o, const Input<T>& in, const std::string& kind,
                              const CheckpointArgs& ck, const algo::CpOptions& ao,
                              const algo::CommChoice& choice) {
  nlohmann::json opts = {{"file", name_of(o)},
                         {"init", o.init},
                         {"comm_strategy", algo::to_string(ao.strategy)},
                         {"comm_strategy_option", o.run.strategy},
                         {"comm_overlap", o.run.overlap},
                         {"comm_hierarchy", o.run.hierarchy},
                         {"emulate_nodes", o.run.emulate_nodes},
                         {"nodes", ao.nodes.nodes()},
                         {"partition", in.partition_scheme},
                         {"grid", in.grid},
                         {"relabel", o.load.relabel},
                         {"deal", o.load.deal},
                         {"backend", kind},
                         {"precision", o.run.precision},
                         {"index_base", o.load.index_base}};
  add_cp_values(opts, ao);  // rank, iters, tol, seed, ... (kCpValues)
  add_cp_constraint_options(opts, ao);
  if (o.run.strategy == "auto") {  // what auto compared (options hold scalars only)
    opts["comm_strategy_auto_allreduce_seconds"] = choice.allreduce_comm_s;
    opts["comm_strategy_auto_layer_seconds"] = choice.layer_comm_s;
    opts["comm_strategy_auto_grid_cost_seconds"] = choice.grid_cost_s;
    opts["comm_strategy_auto_why"] = choice.why;
  }
  if (ck.every > 0) opts["checkpoint_every"] = ck.every;
  if (!ck.resume.empty()) opts["resumed_from"] = ck.resume;
  return opts;
}

/// The state the iterations start from: a resumed checkpoint, a model file, nvecs or the
/// given factors (o.init); none for a random start. Collective.
template <typename T>
bool cp_start(const CpRunOptions& o, const CheckpointArgs& ck, const Input<T>& in, Compute<T>& cx,
              const io::TensorFingerprint& fingerprint, const nlohmann::json& opts,
              const algo::CpOptions& ao, const comm::MpiCommunicator& world, algo::CpState* start) {
  if (!ck.resume.empty()) {
    io::ResumeCheck now;
    now.input = fingerprint;
    now.precision = o.run.precision;
    now.options_json = opts.dump();
    now.must_match = {"rank"};
    now.ignore = {"file", "checkpoint_every", "resumed_from", "max_seconds", "print_every"};
    const io::CheckpointInfo info = resume_from(
        ck.resume, now, o.als.max_iters,
        [&](io::CheckpointInfo* i) { start->model = io::read_cp_checkpoint(ck.resume, i); }, world);
    restore_progress(info, start);
    return true;
  }
  if (!ck.init_model.empty()) {
    // A model file as the start: its factors and weights are the state "after iteration 0".
    comm::run_collectively(world, [&] {
      start->model = io::read_kruskal_h5(ck.init_model);
      TESSERA_INPUT_CHECK(start->model.dims == in.dims,
                          "--init " << ck.init_model << ": the model's dims "
                                    << format_dims(start->model.dims) << " are not the input's "
                                    << format_dims(in.dims));
      TESSERA_INPUT_CHECK(start->model.rank == o.als.rank,
                          "--init " << ck.init_model << ": the model has rank " << start->model.rank
                                    << ", the run asks for --rank " << o.als.rank);
    });
    log::info("starting from the model in " + ck.init_model);
    return true;
  }
  if (o.init == "factors") {
    comm::run_collectively(world, [&] { o.init_factors(in.dims, &start->model); });
    return true;
  }
  if (o.init != "nvecs") return false;
  // The leading left singular vectors of each unfolding, from the Tucker machinery.
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(in.dist.has_value(),
                        "--init nvecs needs the tensor distributed in memory (memory tier 1 "
                        "from a text file or a store read whole); this run holds it as a "
                        "prepared or streamed handle (tier "
                            << in.plan.tier << "): use --init random or file:MODEL.h5");
  });
  Timer tn;
  start->model = algo::nvecs_start<T>(*in.dist, *cx.backend, world, *cx.data, o.als.rank,
                                      o.als.seed, ao.nonneg);
  log::info("starting from nvecs (leading singular vectors of each unfolding, " +
            std::to_string(tn.seconds()) + " s)");
  return true;
}

template <typename T>
algo::CpResult run_algo(const Input<T>& in, Compute<T>& cx, const comm::MpiCommunicator& world,
                        const algo::CpOptions& ao) {
  if (ao.solver != algo::Solver::als) {
    comm::run_collectively(world, [&] {
      TESSERA_INPUT_CHECK(in.dist.has_value(),
                          "--loss " << algo::to_string(ao.loss)
                                    << " needs the tensor distributed in memory (memory tier 1 "
                                       "from a text file or a store read whole); this run holds "
                                       "it as a prepared or streamed handle (tier "
                                    << in.plan.tier << ")");
    });
    if (ao.solver == algo::Solver::gcp)
      return algo::cp_gcp<T>(*in.dist, *cx.backend, world, *cx.data, ao);
    return algo::cp_apr<T>(*in.dist, *cx.backend, world, *cx.data, ao);
  }
  // Memory tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself from host
  // memory or disk through the backend.
  if (in.streamed())
    return algo::cp_als<T>(*in.tensor(), in.dims, in.global_nnz, *cx.backend, world, *cx.data, ao);
  if (in.handle)
    return algo::cp_als<T>(*in.handle, in.dims, in.global_nnz, *cx.backend, world, *cx.data, ao);
  return algo::cp_als<T>(*in.dist, *cx.backend, world, *cx.data, ao);
}

void log_done(const algo::CpResult& res, nnz_t nnz, int order, int ran, const algo::CpOptions& ao,
              const comm::Communicator& world) {
  const double kern = res.phases.get("kernel");
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "done: fit %.6f after %d iteration(s) (%s), %.4f s per iteration; "
      "MTTKRP %.3g nonzeros/s per rank",
      res.fit, res.iterations, res.stop_reason.c_str(),
      res.history.empty()
          ? 0.0
          : (res.phases.get("kernel") + res.phases.get("comm") + res.phases.get("solve")) / ran,
      kern > 0 ? static_cast<double>(nnz) / world.size() * order * ran / kern : 0.0);
  log::info(line);
  if (ao.solver == algo::Solver::apr) {
    std::snprintf(line, sizeof(line),
                  "Poisson CP: log-likelihood %.10e, KKT violation %.3e, %lld inner iterations, "
                  "%lld inadmissible zero(s) shifted",
                  res.loglik, res.kkt, static_cast<long long>(res.inner_iters),
                  static_cast<long long>(res.apr_shifts));
    log::info(line);
  } else if (ao.solver == algo::Solver::gcp) {
    std::snprintf(line, sizeof(line),
                  "GCP (%s): loss estimate %.10e; %lld nonzero and %lld zero samples per step, "
                  "%d step-size decrease(s)",
                  algo::to_string(ao.loss).c_str(), res.gcp_loss,
                  static_cast<long long>(res.gcp_samples),
                  static_cast<long long>(res.gcp_zero_samples), res.gcp_fails);
    log::info(line);
  }
  if (ao.solver != algo::Solver::als && ao.holdout > 0) {  // CP-APR and GCP
    std::snprintf(line, sizeof(line),
                  "held-out entries: %llu, mean loss %.6g with as many sampled zeros, AUC %.4f",
                  static_cast<unsigned long long>(res.holdout_entries), res.holdout_loss, res.auc);
    log::info(line);
  } else if (ao.holdout > 0) {
    std::snprintf(line, sizeof(line),
                  "held-out entries: validation RMSE %.6g on %llu entries (predicting the "
                  "training mean: %.6g)",
                  res.validation_rmse, static_cast<unsigned long long>(res.holdout_entries),
                  res.mean_predictor_rmse);
    log::info(line);
    if (res.validation_rmse > res.mean_predictor_rmse) {
      std::snprintf(
          line, sizeof(line),
          "the model predicts the held-out entries worse than their training mean (RMSE %.4g "
          "against %.4g); %.1f%% of them have a row with no training entry, which no CP model "
          "can predict (a smaller --rank, a larger --l2 or a denser tensor may help)",
          res.validation_rmse, res.mean_predictor_rmse,
          res.holdout_entries > 0 ? 100.0 * static_cast<double>(res.holdout_cold_entries) /
                                        static_cast<double>(res.holdout_entries)
                                  : 0.0);
      log::warn(line);
    }
  }
  if (res.ridged_rows > 0)
    log::warn(std::to_string(res.ridged_rows) +
              " row solve(s) needed a ridge: those rows have fewer training entries than the "
              "rank, so their normal equations are singular (--l2 makes every one well posed)");
  for (const kernels::TcSplit& s : res.tc_split) log::info(tc_split_line(s));
}

/// What the record needs besides the options and the result.
struct CpRecordParts {
  nlohmann::json opts, tier, memory;
  const Loaded* li = nullptr;
  std::string kind, checkpoint;
  int ran = 1;
  double total_s = 0;
  std::uint64_t device_peak = 0;
  kernels::Tuning tuning;
};

template <typename T>
nlohmann::json cp_record(const CpRunOptions& o, const Input<T>& in, const algo::CpResult& res,
                         const algo::CpOptions& ao, const CpRecordParts& p,
                         const comm::Communicator& world) {
  double peak = static_cast<double>(peak_rss_bytes());
  world.allreduce(&peak, 1, comm::ReduceOp::max);
  RecordContext ctx = o.record;
  ctx.tuning = p.tuning;
  ctx.device_peak = p.device_peak;
  nlohmann::json j = record_envelope("cp", p.opts, world, p.kind, o.run.threads, ctx);
  add_input_fields(j, in);
  j["fit"] = res.fit;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["stop_reason"] = res.stop_reason;
  if (res.stop_signal != 0) j["stop_signal"] = util::signal_name(res.stop_signal);
  add_cp_constraint_results(j, res, ao);
  j["solve_fallbacks"] = res.solve_fallbacks;
  j["memory_tier"] = p.tier;
  if (!p.checkpoint.empty()) j["checkpoint"] = p.checkpoint;
  const double kern = res.phases.get("kernel");
  j["phases_seconds"] = {{"io", p.li->read_seconds},
                         {"read", p.li->read_seconds},
                         {"partition", p.li->distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"kernel", kern},
                         {"comm", res.phases.get("comm")},
                         {"solve", res.phases.get("solve")},
                         {"total", p.total_s}};
  add_iteration_fields(
      j, cp_iterations_json(res.history), p.ran,
      {{"kernel", kern}, {"comm", res.phases.get("comm")}, {"solve", res.phases.get("solve")}});
  const double per_it_kernel = kern / p.ran;
  const double nnz = static_cast<double>(in.global_nnz) * static_cast<double>(in.dims.size());
  j["throughput"] = {
      {"mttkrp_nnz_per_s", per_it_kernel > 0 ? nnz / per_it_kernel : 0},
      {"read_bytes_per_s", p.li->read_seconds > 0 ? p.li->read.bytes / p.li->read_seconds : 0}};
  j["peak_memory_bytes_per_rank"] = peak;
  if (!p.memory.is_null()) j["memory_plan"] = p.memory;
  return j;
}

algo::CpOptions algo_options(const CpRunOptions& o, algo::CommStrategy strategy, int order,
                             const comm::Communicator& world) {
  algo::CpOptions ao = o.als;
  ao.tensor_name = name_of(o);
  ao.stop = o.stop;
  ao.print_iterations = o.print_iterations;
  ao.strategy = strategy;
  ao.hierarchy = comm::parse_hierarchy(o.run.hierarchy);
  apply_cp_constraints(o.con, order, ao, world);
  return ao;
}

}  // namespace

template <typename T>
CpRun run_cp(const CpRunOptions& o, const comm::MpiCommunicator& world, SparseTensor<T>* arrays) {
  Timer total;
  CpRun out;
  validate(o, world);  // every option, before the input is opened (run/validate.hpp)
  // The node of every rank (collective): the hierarchy's groups and auto's model use it.
  const comm::NodeMap nodes =
      world.size() > 1 ? comm::node_map(world, o.run.emulate_nodes) : comm::NodeMap{};
  const int per_node = block_ranks_per_node(nodes, world.size());
  algo::CommChoice choice;
  algo::CommStrategy strategy = comm_strategy(o, world, &choice, per_node);
  const bool auto_layer = o.run.strategy == "auto" && strategy == algo::CommStrategy::layer;
  // On several nodes auto's layer grid is the model's node-aware one (algo::choose_layer_grid)
  // unless --grid gives one.
  CpRunOptions node_grid;
  const CpRunOptions* po = &o;
  if (auto_layer && o.load.grid.empty() && per_node > 0 && !choice.grid.empty()) {
    node_grid = o;
    for (const int p : choice.grid) {
      if (!node_grid.load.grid.empty()) node_grid.load.grid += 'x';
      node_grid.load.grid += std::to_string(p);
    }
    po = &node_grid;
  }
  const CheckpointArgs ck = start_args(o);
  // Every output checked before any work (io/output.hpp): none is an input, each can be
  // created, existing files are replaced only by the rule (--force).
  out.checkpoint = check_model_outputs(o.load.path, ck, o.out, o.run.json, o.run.force, world);
  Compute<T> cx = make_compute<T>(o.run, world);
  const std::string kind = kernels::to_string(cx.kind);
  log::info("tessera cp: " + std::to_string(world.size()) + " rank(s), backend " + kind + ", " +
            std::to_string(effective_threads(o.run.threads)) + " thread(s) per rank, " +
            o.run.precision + ", rank " + std::to_string(o.als.rank) + ", strategy " +
            algo::to_string(strategy));
  Loaded li;
  PeakSampler peaks(cx.kind == kernels::BackendKind::cuda);
  const partition::Scheme scheme =
      detail::scheme_of(o.load, strategy == algo::CommStrategy::layer ? partition::Scheme::grid
                                                                      : partition::Scheme::nnz);
  Input<T> in = cp_input<T>(*po, scheme, strategy == algo::CommStrategy::allreduce, auto_layer, cx,
                            world, arrays, &li);
  CpRunOptions as_allreduce;
  if (!in.layer_declined.empty()) {  // loaded for allreduce instead (PlanContext::layer_by_auto)
    strategy = algo::CommStrategy::allreduce;
    choice.strategy = strategy;
    choice.why += "; the layer strategy's plan does not fit in memory tier 1";
    as_allreduce = o;  // the options that ran, for the record
    as_allreduce.load = allreduce_load(o.load);
    po = &as_allreduce;
  }
  out.dry_run = in.dry_run;
  if (in.dry_run) return out;

  algo::CpOptions ao = algo_options(o, strategy, static_cast<int>(in.dims.size()), world);
  ao.nodes = nodes;
  // --comm-overlap auto: on when the ranks span nodes (a network link, where the sums cost
  // as much as the kernels), off inside one node (NVLink: measured slower; multi-gpu.md).
  ao.comm_overlap = o.run.overlap == "on" || (o.run.overlap == "auto" && nodes.nodes() > 1);
  const nlohmann::json opts = record_options(*po, in, kind, ck, ao, choice);
  // Checkpoint and restart (docs/formats.md): the input's identity, the start state and the
  // callback that writes a checkpoint on rank 0 after every K-th iteration.
  io::TensorFingerprint fingerprint;
  if (!out.checkpoint.empty() || !ck.resume.empty()) fingerprint = in.fingerprint(world);
  algo::CpState start;
  if (cp_start<T>(o, ck, in, cx, fingerprint, opts, ao, world, &start)) ao.resume = &start;
  const std::string opts_text = opts.dump();
  ao.on_iteration = detail::iteration_callback<algo::CpState>(
      out.checkpoint, ck.every,
      [&](const algo::CpState& s) {
        io::write_cp_checkpoint(out.checkpoint, s.model,
                                checkpoint_info(s, o.run.precision, fingerprint, opts_text));
      },
      o.on_iteration, world);
  ao.state_every = o.on_iteration ? 1 : state_every(out.checkpoint, ck.every);
  out.result = run_algo<T>(in, cx, world, ao);
  const algo::CpResult& res = out.result;
  // Iterations run by this process (a resumed run has the saved ones in its history).
  const int ran = std::max(res.iterations - (ao.resume ? ao.resume->iteration : 0), 1);
  log_done(res, in.global_nnz, static_cast<int>(in.dims.size()), ran, ao, world);
  peaks.stop();  // the floor's probes below are not the run's memory
  const TierFloor floor =
      in.plan.tier >= 2 ? tier_floor<T>(in.plan, o.load.path, *cx.backend, o.run.threads, world)
                        : TierFloor{};
  double it_s = 0;
  for (const auto& h : res.history) it_s += h.seconds;
  CpRecordParts p;
  p.tier = report_memory_tier(res.tier, res.tier_description, res.stream_copy_seconds,
                              res.stream_compute_seconds, res.stream_overlap, ran, floor,
                              res.history.empty() ? 0.0 : it_s / res.history.size());
  if (res.solve_fallbacks > 0)
    log::info("note: " + std::to_string(res.solve_fallbacks) +
              " solve(s) used the pseudo-inverse (rank-deficient normal equations)");
  detail::write_model(
      o.out, [&] { io::write_kruskal_h5(o.out, res.model, detail::model_record(res, opts_text)); },
      world);
  detail::log_signal_stop(res.stop_signal, res.iterations, o.out, out.checkpoint);
  // Arrays are planned too (plan_in_memory), but the process's high-water mark (VmHWM) also
  // holds the caller's own arrays and their conversion before the run, so it is not set
  // beside that plan.
  if (arrays == nullptr) p.memory = memory_record(in.plan, peaks, world);
  if (o.run.json.empty() && !o.make_record) return out;
  p.opts = opts;
  p.li = &li;
  p.kind = kind;
  p.checkpoint = out.checkpoint;
  p.ran = ran;
  p.total_s = total.seconds();
  p.device_peak = peaks.device_peak();
  p.tuning = cx.backend->tuning();
  ao.on_iteration = nullptr;
  ao.resume = nullptr;
  out.record = cp_record(o, in, res, ao, p, world);
  write_json(o.run.json, out.record, world);
  return out;
}

template CpRun run_cp<float>(const CpRunOptions&, const comm::MpiCommunicator&,
                             SparseTensor<float>*);
template CpRun run_cp<double>(const CpRunOptions&, const comm::MpiCommunicator&,
                              SparseTensor<double>*);

}  // namespace tessera::run
