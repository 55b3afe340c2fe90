// tessera tucker: distributed Tucker-HOOI of a FROSTT tensor.
#include <unistd.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "algo/tucker.hpp"
#include "checkpoint.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "io/checkpoint.hpp"
#include "io/model_io.hpp"
#include "record.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct TuckerArgs {
  LoadOptions load;
  std::string ranks;
  std::string svd = "gram";
  std::string init = "random";
  int iters = 50;
  double tol = 1e-5;
  std::uint64_t seed = 1;
  int subspace_steps = 3;
  std::string max_mem;
  ComputeOptions run;
  std::string out;
  CheckpointArgs ckpt;
};

template <typename T>
void run_tucker(const TuckerArgs& a, const comm::MpiCommunicator& world) {
  Timer total;
  algo::TuckerOptions o;
  ComputeOptions run = a.run;
  partition::Scheme scheme = partition::Scheme::nnz;
  comm::run_collectively(world, [&] {
    o.svd = algo::parse_svd_method(a.svd);
    o.init = algo::parse_tucker_init(a.init);
    TESSERA_INPUT_CHECK(o.svd != algo::SvdMethod::scalapack || algo::scalapack_available(),
                        "--svd scalapack: this tessera was built without ScaLAPACK (reconfigure "
                        "with -DTESSERA_WITH_SCALAPACK=ON where libscalapack is installed), or "
                        "use --svd gram or --svd subspace");
    if (a.load.partition != "auto") scheme = partition::parse_scheme(a.load.partition);
    if (!a.load.grid.empty() && a.load.partition == "auto") scheme = partition::Scheme::grid;
    if (!a.max_mem.empty()) o.memory_limit = parse_bytes(a.max_mem, "--max-mem");
  });
  if (a.max_mem.empty()) o.memory_limit = default_memory_limit(world);
  if (run.strategy != "auto" && run.strategy != "allreduce")
    log::warn("--comm-strategy does not apply to tucker: TTMc rows always go to their owner rank");

  // Every output checked before any work (check_model_outputs).
  const std::string ckpt_path =
      check_model_outputs(a.load.path, a.ckpt, a.out, run.json, run.force, world);
  auto cx = make_compute<T>(run, world);
  const auto kind = cx.kind;
  log::info("tessera tucker: " + std::to_string(world.size()) + " rank(s), backend " +
            kernels::to_string(kind) + ", " + std::to_string(effective_threads(run.threads)) +
            " thread(s) per rank, " + run.precision + ", ranks " + a.ranks + ", svd " + a.svd +
            ", init " + a.init);
  Loaded li;
  PlanContext pc;
  pc.workload = plan::Workload::tucker;
  pc.tucker_ranks = rank_list(a.ranks);
  PeakSampler peaks(kind == kernels::BackendKind::cuda);
  Input<T> in = load_input<T>(a.load, run, scheme, true, cx, pc, world, &li);
  if (in.dry_run) return;
  const int N = static_cast<int>(in.dims.size());
  comm::run_collectively(world, [&] {
    o.ranks = algo::parse_ranks(a.ranks, N);
    algo::check_tucker_ranks(in.dims, o.ranks);
  });
  o.max_iters = a.iters;
  o.tol = a.tol;
  o.seed = a.seed;
  o.tensor_name = a.load.path;
  o.subspace_steps = a.subspace_steps;
  nlohmann::json opts = {{"file", a.load.path},
                         {"ranks", o.ranks},
                         {"svd", a.svd},
                         {"init", a.init},
                         {"iters", a.iters},
                         {"tol", a.tol},
                         {"seed", a.seed},
                         {"subspace_steps", a.subspace_steps},
                         {"max_mem_bytes", o.memory_limit},
                         {"partition", in.partition_scheme},
                         {"grid", in.grid},
                         {"relabel", a.load.relabel},
                         {"backend", kernels::to_string(kind)},
                         {"precision", run.precision},
                         {"index_base", a.load.index_base}};
  if (a.ckpt.every > 0) opts["checkpoint_every"] = a.ckpt.every;
  if (!a.ckpt.resume.empty()) opts["resumed_from"] = a.ckpt.resume;

  // Checkpoint and restart (docs/formats.md), as for cp: the seed matters after a restart
  // too (random completion of undetermined columns), and so does the svd method.
  io::TensorFingerprint fingerprint;
  if (!ckpt_path.empty() || !a.ckpt.resume.empty()) fingerprint = in.fingerprint(world);
  algo::TuckerState resumed;
  if (!a.ckpt.resume.empty()) {
    io::ResumeCheck now;
    now.input = fingerprint;
    now.precision = run.precision;
    now.options_json = opts.dump();
    now.must_match = {"ranks", "svd", "seed"};
    if (o.svd == algo::SvdMethod::subspace) now.must_match.push_back("subspace_steps");
    now.ignore = {"file", "max_mem_bytes", "checkpoint_every", "resumed_from"};
    const io::CheckpointInfo info = resume_from(
        a.ckpt.resume, now, a.iters,
        [&](io::CheckpointInfo* i) {
          resumed.model = io::read_tucker_checkpoint(a.ckpt.resume, i);
        },
        world);
    restore_progress(info, &resumed);
    o.resume = &resumed;
  }
  if (!ckpt_path.empty() || test_kill_after_iteration() > 0) {
    o.state_every = state_every(ckpt_path, a.ckpt.every);
    o.on_iteration = [&](const algo::TuckerState& s) {
      after_iteration(
          ckpt_path, a.ckpt.every, s.iteration,
          [&] {
            io::write_tucker_checkpoint(
                ckpt_path, s.model, checkpoint_info(s, run.precision, fingerprint, opts.dump()));
          },
          world);
    };
  }

  algo::TuckerResult res;
  try {
    if (in.streamed()) {
      // Memory tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself from host
      // memory or disk through the backend.
      std::unique_ptr<kernels::TensorHandle<T>> h;
      if (in.disk)
        h = std::move(in.disk);
      else
        h = std::move(in.handle);
      res = algo::tucker_hooi<T>(std::move(h), in.dims, *cx.backend, world, o, cx.data);
    } else if (in.handle) {
      res = algo::tucker_hooi<T>(std::move(in.handle), in.dims, *cx.backend, world, o, cx.data);
    } else {
      res = algo::tucker_hooi<T>(*in.dist, *cx.backend, world, o, cx.data);
    }
  } catch (const InputError& e) {
    // tucker_hooi decides its InputErrors from data every rank shares: agreed already.
    throw CollectiveError(e.what());
  }

  const nnz_t nnz = in.global_nnz;
  const double t_ttmc = res.phases.get("ttmc");
  // Iterations run by this process (a resumed run has the saved ones in its history).
  const int ran = std::max(res.iterations - (o.resume ? o.resume->iteration : 0), 1);
  char line[256];
  std::snprintf(line, sizeof(line),
                "done: fit %.6f after %d iteration(s) (%s), %.4f s per iteration; core norm "
                "%.6g; TTMc %.3g nonzeros/s per rank",
                res.fit, res.iterations, res.converged ? "converged" : "iteration limit",
                (t_ttmc + res.phases.get("comm") + res.phases.get("svd")) / ran, res.core_norm,
                t_ttmc > 0 ? static_cast<double>(nnz) / world.size() * N * ran / t_ttmc : 0.0);
  log::info(line);
  const nlohmann::json tier_json =
      report_memory_tier(res.tier, res.tier_description, res.stream_copy_seconds,
                         res.stream_compute_seconds, res.stream_overlap, ran);
  if (res.completed_columns > 0)
    log::info("note: " + std::to_string(res.completed_columns) +
              " factor column(s) were not determined by the data (a mode's unfolding has lower "
              "rank than asked) and were completed with random orthonormal directions");

  if (!a.out.empty()) {
    Timer tw;
    comm::run_collectively(world, [&] {
      if (world.rank() != 0) return;
      io::ModelRecord rec;
      rec.fit = res.fit;
      rec.iterations = res.iterations;
      for (const auto& h : res.history) rec.fit_history.push_back(h.fit);
      rec.options_json = opts.dump();
      io::write_tucker_h5(a.out, res.model, rec);
    });
    log::info("model written to " + a.out + " (" + std::to_string(tw.seconds()) + " s)");
  }
  const nlohmann::json memory = memory_record(in.plan, peaks, world);
  if (!run.json.empty()) {
    double peak = static_cast<double>(peak_rss_bytes());
    world.allreduce(&peak, 1, comm::ReduceOp::max);
    nlohmann::json j =
        record_envelope("tucker", opts, world, kernels::to_string(kind), run.threads);
    add_input_fields(j, in);
    j["memory_tier"] = tier_json;
    j["fit"] = res.fit;
    j["core_norm"] = res.core_norm;
    j["norm_x"] = res.norm_x;
    j["iterations"] = res.iterations;
    j["converged"] = res.converged;
    j["completed_columns"] = res.completed_columns;
    j["dense_stage"] = res.dense_method;
    j["memory"].update({{"ttmc_rows", res.memory.ttmc_rows},
                        {"received_rows", res.memory.received_rows},
                        {"combined_rows", res.memory.owned_rows},
                        {"cols", res.memory.cols},
                        {"semi_sparse_bytes_per_rank", res.memory.semi_sparse_bytes},
                        {"total_bytes_per_rank", res.memory.total_bytes},
                        {"limit_bytes_per_rank", o.memory_limit}});
    j["phases_seconds"] = {{"io", li.read_seconds},
                           {"read", li.read_seconds},
                           {"partition", li.distribute_seconds},
                           {"setup", res.phases.get("setup")},
                           {"init", res.phases.get("init")},
                           {"ttmc", t_ttmc},
                           {"comm", res.phases.get("comm")},
                           {"svd", res.phases.get("svd")},
                           {"total", total.seconds()}};
    // Split: TTMc is the kernel, the SVD (or Gram eigen-solve) the solve.
    add_iteration_fields(
        j, tucker_iterations_json(res.history), ran,
        {{"kernel", t_ttmc}, {"comm", res.phases.get("comm")}, {"solve", res.phases.get("svd")}});
    const double per_it = t_ttmc / ran;
    j["throughput"] = {
        {"ttmc_nnz_per_s", per_it > 0 ? static_cast<double>(nnz) * N / per_it : 0},
        {"read_bytes_per_s", li.read_seconds > 0 ? li.read.bytes / li.read_seconds : 0}};
    j["peak_memory_bytes_per_rank"] = peak;
    j["memory_plan"] = memory;
    write_json(run.json, j, world);
  }
}

}  // namespace

void add_tucker(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TuckerArgs>();
  auto* sub =
      app.add_subcommand("tucker", "Tucker-HOOI decomposition of a FROSTT tensor (.tns, .tns.gz)");
  sub->add_option("file", a->load.path, "Input tensor (.tns or .tns.gz)")->required();
  sub->add_option("-r,--ranks", a->ranks,
                  "Tucker ranks, one per mode (16,16,16 or 16x16x16) or one for all")
      ->required();
  sub->add_option("--svd", a->svd,
                  "Factor update: gram (eigen-solve of the all-reduced Gram of the TTMc rows) | "
                  "subspace (block power steps, distributed CholeskyQR2) | scalapack (pdgesvd on "
                  "the row-distributed unfolding)")
      ->check(CLI::IsMember({"gram", "subspace", "scalapack"}));
  sub->add_option("--init", a->init,
                  "Initial factors: random (orthonormal, keyed by seed, mode and row) | hosvd "
                  "(randomized HOSVD)")
      ->check(CLI::IsMember({"random", "hosvd"}));
  sub->add_option("-i,--iters", a->iters, "Maximum HOOI iterations")->check(CLI::Range(1, 1000000));
  sub->add_option("--tol", a->tol, "Stop when |fit change| < tol (-t is --threads)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-s,--seed", a->seed, "Seed of the initial factors");
  sub->add_option("--subspace-steps", a->subspace_steps,
                  "--svd subspace: at most this many power steps per factor update")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--max-mem", a->max_mem,
                  "Memory per rank the semi-sparse TTMc rows, SVD workspace and factors may take, "
                  "e.g. 8G (K/M/G/T = 1024^k); over it the run refuses and names ranks that fit. "
                  "Default: 3/4 of the node's memory shared by its ranks");
  sub->add_option("--partition", a->load.partition,
                  "Nonzero distribution: auto (nnz) | nnz | grid (fewer distinct rows per rank)")
      ->check(CLI::IsMember({"auto", "nnz", "grid"}));
  sub->add_option("--grid", a->load.grid, "Rank grid, e.g. 4x2x1 (default: chosen automatically)");
  sub->add_flag("--relabel", a->load.relabel,
                "Relabel indices by a random bijection before partitioning (balances skewed "
                "modes; results are unchanged)");
  add_compute_options(sub, a->run, a->load);
  sub->add_option("-o,--out", a->out, "Write the model (HDF5: core, factors, fit history) here");
  add_checkpoint_options(sub, a->ckpt);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_tucker<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
