// run_tucker (run/tucker.hpp): a Tucker-HOOI run, written once for the CLI and the Python
// module.
#include "run/tucker.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "io/checkpoint.hpp"
#include "io/model_io.hpp"
#include "run/steps.hpp"
#include "run/validate.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::run {

void add_rank_split(nlohmann::json& j, const algo::TuckerResult& res) {
  if (res.ttmc_mean_seconds > 0)
    j["ttmc_per_rank"] = {{"max_seconds_per_iteration", res.ttmc_max_seconds},
                          {"mean_seconds_per_iteration", res.ttmc_mean_seconds},
                          {"imbalance", res.ttmc_max_seconds / res.ttmc_mean_seconds}};
  if (!res.rows_strategy.empty())
    j["ttmc_rows_strategy"] = {{"modes", res.rows_strategy}, {"why", res.rows_strategy_why}};
  if (res.dense_sums_per_iteration > 0 || res.comm_exchange_seconds > 0)
    j["comm_split"] = {{"ttmc_rows_seconds", res.comm_exchange_seconds},
                       {"dense_sums_seconds", res.comm_dense_seconds},
                       {"dense_sums_per_iteration", res.dense_sums_per_iteration},
                       {"factor_allgather_seconds", res.comm_publish_seconds}};
}
namespace {

/// The algorithm's options that do not depend on the input (collective checks).
algo::TuckerOptions tucker_options(const TuckerRunOptions& o, const comm::MpiCommunicator& world) {
  algo::TuckerOptions to;
  comm::run_collectively(world, [&] {
    to.svd = algo::parse_svd_method(o.svd);
    to.init = algo::parse_tucker_init(o.init);
    TESSERA_INPUT_CHECK(to.svd != algo::SvdMethod::scalapack || algo::scalapack_available(),
                        "--svd scalapack: this tessera was built without ScaLAPACK (reconfigure "
                        "with -DTESSERA_WITH_SCALAPACK=ON where libscalapack is installed), or "
                        "use --svd gram or --svd subspace");
    if (!o.max_mem.empty()) to.memory_limit = parse_bytes(o.max_mem, "--max-mem");
    to.hierarchy = comm::parse_hierarchy(o.run.hierarchy);
    to.rows = algo::parse_tucker_rows(o.run.strategy);
  });
  if (o.max_mem.empty()) to.memory_limit = default_memory_limit(world);
  to.max_iters = o.iters;
  to.tol = o.tol;
  to.seed = o.seed;
  to.tensor_name = o.name.empty() ? o.load.path : o.name;
  to.subspace_steps = o.subspace_steps;
  to.print_iterations = o.print_iterations;
  to.stop = o.stop;
  return to;
}

template <typename T>
Input<T> tucker_input(const TuckerRunOptions& o, Compute<T>& cx, const comm::MpiCommunicator& world,
                      SparseTensor<T>* arrays, Loaded* li) {
  const partition::Scheme scheme = detail::scheme_of(o.load, partition::Scheme::nnz);
  if (arrays == nullptr) {
    PlanContext pc;
    pc.workload = plan::Workload::tucker;
    pc.tucker_ranks = rank_list(o.ranks);
    pc.tucker_svd = o.svd;
    return load_input<T>(o.load, o.run, scheme, true, cx, pc, world, li);
  }
  Input<T> in;  // arrays: distributed in memory as a text file is (tier 1)
  in.dist.emplace(partition::distribute(std::move(*arrays), scheme, {}, world));
  fill_stats_from_dist(in);
  return in;
}

template <typename T>
nlohmann::json record_options(const TuckerRunOptions& o, const Input<T>& in,
                              const algo::TuckerOptions& to, const std::string& kind) {
  nlohmann::json opts = {{"file", o.name.empty() ? o.load.path : o.name},
                         {"ranks", to.ranks},
                         {"svd", o.svd},
                         {"init", o.init},
                         {"iters", o.iters},
                         {"tol", o.tol},
                         {"seed", o.seed},
                         {"subspace_steps", o.subspace_steps},
                         {"max_mem_bytes", to.memory_limit},
                         {"comm_hierarchy", o.run.hierarchy},
                         {"emulate_nodes", o.run.emulate_nodes},
                         {"nodes", to.nodes.nodes()},
                         {"partition", in.partition_scheme},
                         {"grid", in.grid},
                         {"relabel", o.load.relabel},
                         {"deal", o.load.deal},
                         {"backend", kind},
                         {"precision", o.run.precision},
                         {"index_base", o.load.index_base}};
  if (o.ckpt.every > 0) opts["checkpoint_every"] = o.ckpt.every;
  if (!o.ckpt.resume.empty()) opts["resumed_from"] = o.ckpt.resume;
  return opts;
}

/// The resumed checkpoint, if any: the seed matters after a restart too (random completion
/// of undetermined columns), and so does the svd method. Collective.
bool tucker_resume(const TuckerRunOptions& o, const io::TensorFingerprint& fingerprint,
                   const std::string& opts, const algo::TuckerOptions& to,
                   const comm::MpiCommunicator& world, algo::TuckerState* start) {
  if (o.ckpt.resume.empty()) return false;
  io::ResumeCheck now;
  now.input = fingerprint;
  now.precision = o.run.precision;
  now.options_json = opts;
  now.must_match = {"ranks", "svd", "seed"};
  if (to.svd == algo::SvdMethod::subspace) now.must_match.push_back("subspace_steps");
  now.ignore = {"file", "max_mem_bytes", "checkpoint_every", "resumed_from"};
  const io::CheckpointInfo info = resume_from(
      o.ckpt.resume, now, o.iters,
      [&](io::CheckpointInfo* i) { start->model = io::read_tucker_checkpoint(o.ckpt.resume, i); },
      world);
  restore_progress(info, start);
  return true;
}

template <typename T>
algo::TuckerResult run_algo(Input<T>& in, Compute<T>& cx, const comm::MpiCommunicator& world,
                            const algo::TuckerOptions& to) {
  try {
    if (in.streamed()) {
      // Memory tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself from host
      // memory or disk through the backend.
      std::unique_ptr<kernels::TensorHandle<T>> h;
      if (in.disk)
        h = std::move(in.disk);
      else
        h = std::move(in.handle);
      return algo::tucker_hooi<T>(std::move(h), in.dims, *cx.backend, world, to, cx.data);
    }
    if (in.handle)
      return algo::tucker_hooi<T>(std::move(in.handle), in.dims, *cx.backend, world, to, cx.data);
    return algo::tucker_hooi<T>(*in.dist, *cx.backend, world, to, cx.data);
  } catch (const InputError& e) {
    // tucker_hooi decides its InputErrors from data every rank shares: agreed already.
    throw CollectiveError(e.what());
  }
}

void log_done(const algo::TuckerResult& res, nnz_t nnz, int order, int ran,
              const comm::Communicator& world) {
  const double t_ttmc = res.phases.get("ttmc");
  char line[256];
  std::snprintf(line, sizeof(line),
                "done: fit %.6f after %d iteration(s) (%s), %.4f s per iteration; core norm "
                "%.6g; TTMc %.3g nonzeros/s per rank",
                res.fit, res.iterations, res.stop_reason.c_str(),
                (t_ttmc + res.phases.get("comm") + res.phases.get("svd")) / ran, res.core_norm,
                t_ttmc > 0 ? static_cast<double>(nnz) / world.size() * order * ran / t_ttmc : 0.0);
  log::info(line);
  if (res.completed_columns > 0)
    log::info("note: " + std::to_string(res.completed_columns) +
              " factor column(s) were not determined by the data (a mode's unfolding has lower "
              "rank than asked) and were completed with random orthonormal directions");
}

/// What the record needs besides the options and the result.
struct TuckerRecordParts {
  nlohmann::json opts, tier, memory;
  const Loaded* li = nullptr;
  std::string kind, checkpoint;
  int ran = 1;
  double total_s = 0;
  std::size_t memory_limit = 0;
  RecordContext ctx;
};

template <typename T>
nlohmann::json tucker_record(const TuckerRunOptions& o, const Input<T>& in,
                             const algo::TuckerResult& res, const TuckerRecordParts& p,
                             const comm::Communicator& world) {
  double peak = static_cast<double>(peak_rss_bytes());
  world.allreduce(&peak, 1, comm::ReduceOp::max);
  nlohmann::json j = record_envelope("tucker", p.opts, world, p.kind, o.run.threads, p.ctx);
  add_input_fields(j, in);
  j["memory_tier"] = p.tier;
  j["fit"] = res.fit;
  j["core_norm"] = res.core_norm;
  j["norm_x"] = res.norm_x;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["stop_reason"] = res.stop_reason;
  if (res.stop_signal != 0) j["stop_signal"] = util::signal_name(res.stop_signal);
  j["completed_columns"] = res.completed_columns;
  j["dense_stage"] = res.dense_method;
  j["phase_timing"] = res.phase_timing;
  j["eig_lanczos"] = {{"answered", res.eig_lanczos_answered},
                      {"declined", res.eig_lanczos_declined}};
  if (!res.combine.empty()) j["ttmc_combine"] = res.combine;
  if (!res.network_rows.empty()) j["ttmc_network_rows"] = res.network_rows;
  add_rank_split(j, res);
  if (!p.checkpoint.empty()) j["checkpoint"] = p.checkpoint;
  j["memory"].update({{"ttmc_rows", res.memory.ttmc_rows},
                      {"received_rows", res.memory.received_rows},
                      {"combined_rows", res.memory.owned_rows},
                      {"cols", res.memory.cols},
                      {"semi_sparse_bytes_per_rank", res.memory.semi_sparse_bytes},
                      {"total_bytes_per_rank", res.memory.total_bytes},
                      {"limit_bytes_per_rank", p.memory_limit}});
  const double t_ttmc = res.phases.get("ttmc");
  j["phases_seconds"] = {{"io", p.li->read_seconds},
                         {"read", p.li->read_seconds},
                         {"partition", p.li->distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"init", res.phases.get("init")},
                         {"ttmc", t_ttmc},
                         {"comm", res.phases.get("comm")},
                         {"svd", res.phases.get("svd")},
                         {"total", p.total_s}};
  // Split: TTMc is the kernel, the SVD (or Gram eigen-solve) the solve.
  add_iteration_fields(
      j, tucker_iterations_json(res.history), p.ran,
      {{"kernel", t_ttmc}, {"comm", res.phases.get("comm")}, {"solve", res.phases.get("svd")}});
  const double per_it = t_ttmc / p.ran;
  const double nnz = static_cast<double>(in.global_nnz) * static_cast<double>(in.dims.size());
  j["throughput"] = {
      {"ttmc_nnz_per_s", per_it > 0 ? nnz / per_it : 0},
      {"read_bytes_per_s", p.li->read_seconds > 0 ? p.li->read.bytes / p.li->read_seconds : 0}};
  j["peak_memory_bytes_per_rank"] = peak;
  if (!p.memory.is_null()) j["memory_plan"] = p.memory;
  return j;
}

}  // namespace

template <typename T>
TuckerRun run_tucker(const TuckerRunOptions& o, const comm::MpiCommunicator& world,
                     SparseTensor<T>* arrays) {
  Timer total;
  TuckerRun out;
  validate(o, world);  // every option, before the input is opened (run/validate.hpp)
  algo::TuckerOptions to = tucker_options(o, world);
  // The node of every rank (collective): the two-stage combine's relays (--comm-hierarchy).
  if (world.size() > 1) to.nodes = comm::node_map(world, o.run.emulate_nodes);
  if (o.run.overlap != "auto") log::warn("--comm-overlap does not apply to tucker (CP-ALS only)");
  // Every output checked before any work (check_model_outputs).
  out.checkpoint = check_model_outputs(o.load.path, o.ckpt, o.out, o.run.json, o.run.force, world);
  Compute<T> cx = make_compute<T>(o.run, world);
  const std::string kind = kernels::to_string(cx.kind);
  log::info("tessera tucker: " + std::to_string(world.size()) + " rank(s), backend " + kind + ", " +
            std::to_string(effective_threads(o.run.threads)) + " thread(s) per rank, " +
            o.run.precision + ", ranks " + o.ranks + ", svd " + o.svd + ", init " + o.init);
  Loaded li;
  PeakSampler peaks(cx.kind == kernels::BackendKind::cuda);
  Input<T> in = tucker_input<T>(o, cx, world, arrays, &li);
  out.dry_run = in.dry_run;
  if (in.dry_run) return out;
  const int N = static_cast<int>(in.dims.size());
  comm::run_collectively(world, [&] {
    to.ranks = algo::parse_ranks(o.ranks, N);
    algo::check_tucker_ranks(in.dims, to.ranks);
  });
  const std::string opts = record_options(o, in, to, kind).dump();
  io::TensorFingerprint fingerprint;
  if (!out.checkpoint.empty() || !o.ckpt.resume.empty()) fingerprint = in.fingerprint(world);
  algo::TuckerState start;
  if (tucker_resume(o, fingerprint, opts, to, world, &start)) to.resume = &start;
  to.on_iteration = detail::iteration_callback<algo::TuckerState>(
      out.checkpoint, o.ckpt.every,
      [&](const algo::TuckerState& s) {
        io::write_tucker_checkpoint(out.checkpoint, s.model,
                                    checkpoint_info(s, o.run.precision, fingerprint, opts));
      },
      o.on_iteration, world);
  to.state_every = o.on_iteration ? 1 : state_every(out.checkpoint, o.ckpt.every);
  out.result = run_algo<T>(in, cx, world, to);
  const algo::TuckerResult& res = out.result;
  // Iterations run by this process (a resumed run has the saved ones in its history).
  const int ran = std::max(res.iterations - (to.resume ? to.resume->iteration : 0), 1);
  log_done(res, in.global_nnz, N, ran, world);
  TuckerRecordParts p;
  p.tier = report_memory_tier(res.tier, res.tier_description, res.stream_copy_seconds,
                              res.stream_compute_seconds, res.stream_overlap, ran);
  detail::write_model(
      o.out, [&] { io::write_tucker_h5(o.out, res.model, detail::model_record(res, opts)); },
      world);
  detail::log_signal_stop(res.stop_signal, res.iterations, o.out, out.checkpoint);
  // Arrays have no plan: nothing to compare the measured peaks with.
  if (arrays == nullptr) p.memory = memory_record(in.plan, peaks, world);
  peaks.stop();
  if (o.run.json.empty() && !o.make_record) return out;
  p.opts = nlohmann::json::parse(opts);
  p.li = &li;
  p.kind = kind;
  p.checkpoint = out.checkpoint;
  p.ran = ran;
  p.total_s = total.seconds();
  p.memory_limit = to.memory_limit;
  p.ctx = o.record;
  p.ctx.tuning = cx.backend->tuning();
  p.ctx.device_peak = peaks.device_peak();
  out.record = tucker_record(o, in, res, p, world);
  write_json(o.run.json, out.record, world);
  return out;
}

template TuckerRun run_tucker<float>(const TuckerRunOptions&, const comm::MpiCommunicator&,
                                     SparseTensor<float>*);
template TuckerRun run_tucker<double>(const TuckerRunOptions&, const comm::MpiCommunicator&,
                                      SparseTensor<double>*);

}  // namespace tessera::run
