// cp_als of the _tessera extension (docs/python.md): CP-ALS on the input of one call, as
// `tessera cp` runs it (options, checkpoints and resume, initial factors from NumPy), with
// the iteration hook after every iteration; returns the model, history and run record.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "algo/cp_als.hpp"
#include "algo/cp_init.hpp"
#include "checkpoint.hpp"
#include "common.hpp"
#include "cp_options.hpp"
#include "inputs.hpp"
#include "io/checkpoint.hpp"
#include "kernels/factories.hpp"
#include "record.hpp"
#include "runtime.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::python {
namespace {

/// Stopping and printing (the CLI's --max-seconds, --print-every).
struct StopArgs {
  double max_seconds = 0;
  int print_every = 1;
};

template <typename T>
py::dict run_cp(const py::object& tensor, int rank, int iters, double tol, std::uint64_t seed,
                const py::object& init, const CommonArgs& a, const StopArgs& stop,
                const driver::CpConstraintArgs& con, const py::object& callback,
                std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  IterationHook hook(callback, world);
  Timer total;
  algo::CpResult res;
  algo::CpOptions o_used;  // the options of the run, for the record
  driver::Input<T> in;
  driver::Loaded li;
  nlohmann::json opts;
  std::string kind_name;
  std::string ckpt_path;
  int first_iteration = 0;  // iterations before this call (resume): the record times the rest
  translate(&hook, world, [&] {
    comm::run_collectively(world, [&] {
      check_common(a);
      TESSERA_INPUT_CHECK(rank >= 1 && rank <= 4096, "rank=" << rank << ": expected 1 to 4096");
      TESSERA_INPUT_CHECK(iters >= 1, "iters=" << iters << ": expected >= 1");
      TESSERA_INPUT_CHECK(tol >= 0 && std::isfinite(tol), "tol=" << tol << ": expected >= 0");
      TESSERA_INPUT_CHECK(stop.max_seconds >= 0 && std::isfinite(stop.max_seconds),
                          "max_seconds=" << stop.max_seconds << ": expected >= 0 (0: no limit)");
      TESSERA_INPUT_CHECK(stop.print_every >= 1,
                          "print_every=" << stop.print_every << ": expected >= 1");
    });
    Source<T> src = read_source<T>(tensor, a.share, world);
    const auto strategy = algo::parse_comm_strategy(a.strategy);
    const partition::Scheme scheme =
        strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
    driver::CheckpointArgs ck;
    ck.path = a.checkpoint;
    ck.every = !a.checkpoint.empty() && a.checkpoint_every == 0 ? 1 : a.checkpoint_every;
    ck.resume = a.resume;
    ckpt_path = driver::check_model_outputs(src.is_path ? src.path : std::string(), ck, "", "",
                                            false, world);
    const bool nvecs = py::isinstance<py::str>(init) && py::cast<std::string>(init) == "nvecs";
    std::optional<driver::Compute<T>> cx;
    algo::CpState resumed;
    algo::CpOptions o;
    {
      py::gil_scoped_release nogil;
      cx.emplace(driver::make_compute<T>(compute_options(a), world));
      kind_name = kernels::to_string(cx->kind);
      driver::PlanContext pc;
      pc.workload = plan::Workload::cp;
      pc.cp_rank = rank;
      pc.completion = con.observed_only;
      pc.tier1_only = con.observed_only || con.holdout > 0 || nvecs;
      pc.tier1_why = con.observed_only ? "observed_only"
                     : con.holdout > 0 ? "holdout"
                                       : "init=\"nvecs\"";
      in = load<T>(src, a, scheme, strategy == algo::CommStrategy::allreduce, *cx, pc, world, &li);
    }
    o.rank = rank;
    o.tensor_name = src.name;
    o.max_iters = iters;
    o.tol = tol;
    o.max_seconds = stop.max_seconds;
    o.print_every = stop.print_every;
    o.seed = seed;
    o.strategy = strategy;
    o.print_iterations = a.verbose;
    driver::apply_cp_constraints(con, static_cast<int>(in.dims.size()), seed, o, world);
    opts = {{"file", src.is_path ? src.path : src.name},
            {"rank", rank},
            {"iters", iters},
            {"tol", tol},
            {"max_seconds", stop.max_seconds},
            {"print_every", stop.print_every},
            {"seed", seed},
            {"comm_strategy", a.strategy},
            {"partition", in.partition_scheme},
            {"grid", in.grid},
            {"relabel", false},
            {"backend", kind_name},
            {"precision", a.precision},
            {"index_base", a.index_base}};
    driver::add_cp_constraint_options(opts, o);
    opts["init"] = init.is_none()                  ? std::string("random")
                   : py::isinstance<py::str>(init) ? py::cast<std::string>(init)
                                                   : std::string("factors");
    if (ck.every > 0) opts["checkpoint_every"] = ck.every;
    if (!a.resume.empty()) opts["resumed_from"] = a.resume;
    io::TensorFingerprint fingerprint;
    if (!ckpt_path.empty() || !a.resume.empty()) fingerprint = in.fingerprint(world);
    if (!a.resume.empty()) {
      io::ResumeCheck now;
      now.input = fingerprint;
      now.precision = a.precision;
      now.options_json = opts.dump();
      now.must_match = {"rank"};
      now.ignore = {"file", "checkpoint_every", "resumed_from", "max_seconds", "print_every"};
      const io::CheckpointInfo info = driver::resume_from(
          a.resume, now, iters,
          [&](io::CheckpointInfo* i) { resumed.model = io::read_cp_checkpoint(a.resume, i); },
          world);
      driver::restore_progress(info, &resumed);
      o.resume = &resumed;
    } else if (!init.is_none() && !py::isinstance<py::str>(init)) {
      // Initial factors given: the state "after iteration 0" (lambda 1).
      py::sequence fs = py::reinterpret_borrow<py::sequence>(init);
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(
            static_cast<std::size_t>(py::len(fs)) == in.dims.size(),
            "init: " << py::len(fs) << " factor(s) for a tensor of order " << in.dims.size());
        resumed.model.dims = in.dims;
        resumed.model.rank = rank;
        resumed.model.lambda.assign(static_cast<std::size_t>(rank), 1.0);
        for (std::size_t n = 0; n < in.dims.size(); ++n) {
          const std::string what = "init[" + std::to_string(n) + "]";
          resumed.model.factors.push_back(
              numpy_to_matrix(fs[n], static_cast<std::int64_t>(in.dims[n]), rank, what.c_str()));
        }
      });
      o.resume = &resumed;
    } else {
      const std::string s = init.is_none() ? "random" : py::cast<std::string>(init);
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(s == "random" || s == "nvecs",
                            "init=\"" << s
                                      << "\": expected \"random\", \"nvecs\" or a list of "
                                         "initial factor arrays");
        TESSERA_INPUT_CHECK(s == "random" || in.dist.has_value(),
                            "init=\"nvecs\" needs the tensor distributed in memory (tier 1); "
                            "this run holds it as a prepared or streamed handle");
      });
      if (s == "nvecs") {
        py::gil_scoped_release nogil;
        resumed.model =
            algo::nvecs_start<T>(*in.dist, *cx->backend, world, *cx->data, rank, seed, o.nonneg);
        o.resume = &resumed;
      }
    }
    o.state_every = 1;  // the hook runs after every iteration (checkpoints every K-th)
    o.on_iteration = [&](const algo::CpState& s) {
      if (!ckpt_path.empty() && (s.iteration % ck.every == 0 || s.time_limit))
        driver::after_iteration(
            ckpt_path, ck.every, s.iteration,
            [&] {
              io::write_cp_checkpoint(
                  ckpt_path, s.model,
                  driver::checkpoint_info(s, a.precision, fingerprint, opts.dump()));
            },
            world, s.time_limit);
      const double f = s.fit_history.empty() ? 0.0 : s.fit_history.back();
      const double prev = s.fit_history.size() > 1 ? s.fit_history[s.fit_history.size() - 2] : 0.0;
      hook(s.iteration, f, f - prev);
    };
    first_iteration = o.resume ? o.resume->iteration : 0;
    o_used = o;
    o_used.on_iteration = nullptr;
    o_used.resume = nullptr;
    {
      py::gil_scoped_release nogil;
      if (in.streamed()) {
        // Tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself through the
        // backend.
        res = algo::cp_als<T>(*in.tensor(), in.dims, in.global_nnz, *cx->backend, world, *cx->data,
                              o);
      } else if (in.handle) {
        res =
            algo::cp_als<T>(*in.handle, in.dims, in.global_nnz, *cx->backend, world, *cx->data, o);
      } else {
        res = algo::cp_als<T>(*in.dist, *cx->backend, world, *cx->data, o);
      }
    }
  });

  nlohmann::json j = record_base("cp", opts, world, kind_name, a.threads);
  driver::add_input_fields(j, in);
  j["fit"] = res.fit;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["stop_reason"] = res.stop_reason;
  j["solve_fallbacks"] = res.solve_fallbacks;
  driver::add_cp_constraint_results(j, res, o_used);
  j["memory_tier"] = {{"tier", res.tier}, {"description", res.tier_description}};
  if (!ckpt_path.empty()) j["checkpoint"] = ckpt_path;
  j["phases_seconds"] = {{"io", li.read_seconds},
                         {"read", li.read_seconds},
                         {"partition", li.distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"kernel", res.phases.get("kernel")},
                         {"comm", res.phases.get("comm")},
                         {"solve", res.phases.get("solve")},
                         {"total", total.seconds()}};
  const nlohmann::json its = driver::cp_iterations_json(res.history);
  const int ran = res.iterations - first_iteration;
  driver::add_iteration_fields(j, its, ran,
                               {{"kernel", res.phases.get("kernel")},
                                {"comm", res.phases.get("comm")},
                                {"solve", res.phases.get("solve")}});
  py::list hist;  // the record's per_iteration entries as dicts
  for (const auto& h : its) hist.append(py::module_::import("json").attr("loads")(h.dump()));
  py::dict out;
  out["weights"] = vector_to_numpy(res.model.lambda);
  py::list factors;
  for (const auto& f : res.model.factors) factors.append(matrix_to_numpy(f));
  out["factors"] = factors;
  out["fit"] = res.fit;
  out["iterations"] = res.iterations;
  out["converged"] = res.converged;
  out["stop_reason"] = res.stop_reason;
  out["validation_rmse"] = res.validation_rmse;
  out["mean_predictor_rmse"] = res.mean_predictor_rmse;
  out["history"] = hist;
  out["record_json"] = j.dump();
  return out;
}

}  // namespace

void register_cp(py::module_& m) {
  m.def("cp_als",
        [](py::object tensor, int rank, int iters, double tol, std::uint64_t seed, py::object init,
           std::string backend, std::string precision, py::object threads, std::string strategy,
           std::string index_base, py::object checkpoint, int checkpoint_every, py::object resume,
           py::object callback, bool verbose, bool share, std::uintptr_t comm, double max_seconds,
           int print_every, std::string nonneg, std::string l1, std::string l2, int inner_sweeps,
           bool observed_only, double holdout, py::dict tuning) {
          CommonArgs a = common_args(backend, precision, threads, strategy, index_base, checkpoint,
                                     checkpoint_every, resume, verbose, share);
          apply_tuning(a, tuning);
          const StopArgs stop{max_seconds, print_every};
          const driver::CpConstraintArgs con{nonneg, l1, l2, inner_sweeps, observed_only, holdout};
          if (precision == "float")
            return run_cp<float>(tensor, rank, iters, tol, seed, init, a, stop, con, callback,
                                 comm);
          return run_cp<double>(tensor, rank, iters, tol, seed, init, a, stop, con, callback, comm);
        });
}

}  // namespace tessera::python
