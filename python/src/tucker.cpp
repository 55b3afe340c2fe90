// tucker_hooi of the _tessera extension (docs/python.md): Tucker-HOOI on the input of one
// call, as `tessera tucker` runs it (ranks, SVD method, memory limit, checkpoints and
// resume), with the iteration hook after every iteration; returns the model, history and
// run record.
#include "algo/tucker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint.hpp"
#include "common.hpp"
#include "inputs.hpp"
#include "io/checkpoint.hpp"
#include "kernels/factories.hpp"
#include "record.hpp"
#include "runtime.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::python {
namespace {

template <typename T>
py::dict run_tucker(const py::object& tensor, const py::object& ranks_obj, int iters, double tol,
                    std::uint64_t seed, const std::string& init, const std::string& svd,
                    int subspace_steps, const std::string& max_mem, const CommonArgs& a,
                    const py::object& callback, std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  IterationHook hook(callback, world);
  Timer total;
  algo::TuckerResult res;
  driver::Input<T> in;
  driver::Loaded li;
  nlohmann::json opts;
  std::string kind_name;
  std::string ckpt_path;
  int first_iteration = 0;  // iterations before this call (resume): the record times the rest
  std::string ranks_text;
  if (py::isinstance<py::int_>(ranks_obj)) {
    ranks_text = std::to_string(py::cast<long long>(ranks_obj));
  } else if (py::isinstance<py::str>(ranks_obj)) {
    ranks_text = py::cast<std::string>(ranks_obj);
  } else {
    for (auto r : py::reinterpret_borrow<py::sequence>(ranks_obj))
      ranks_text += (ranks_text.empty() ? "" : ",") + py::cast<std::string>(py::str(r));
  }
  translate(&hook, world, [&] {
    algo::TuckerOptions o;
    comm::run_collectively(world, [&] {
      check_common(a);
      TESSERA_INPUT_CHECK(iters >= 1, "iters=" << iters << ": expected >= 1");
      TESSERA_INPUT_CHECK(tol >= 0 && std::isfinite(tol), "tol=" << tol << ": expected >= 0");
      TESSERA_INPUT_CHECK(subspace_steps >= 1,
                          "subspace_steps=" << subspace_steps << ": expected >= 1");
      o.svd = algo::parse_svd_method(svd);
      o.init = algo::parse_tucker_init(init);
      TESSERA_INPUT_CHECK(o.svd != algo::SvdMethod::scalapack || algo::scalapack_available(),
                          "svd=\"scalapack\": this tessera was built without ScaLAPACK; use "
                          "svd=\"gram\" or \"subspace\"");
      if (!max_mem.empty()) o.memory_limit = driver::parse_bytes(max_mem, "max_mem");
    });
    if (max_mem.empty()) o.memory_limit = driver::default_memory_limit(world);
    Source<T> src = read_source<T>(tensor, a.share, world);
    driver::CheckpointArgs ck;
    ck.path = a.checkpoint;
    ck.every = !a.checkpoint.empty() && a.checkpoint_every == 0 ? 1 : a.checkpoint_every;
    ck.resume = a.resume;
    ckpt_path = driver::check_model_outputs(src.is_path ? src.path : std::string(), ck, "", "",
                                            false, world);
    std::optional<driver::Compute<T>> cx;
    {
      py::gil_scoped_release nogil;
      cx.emplace(driver::make_compute<T>(compute_options(a), world));
      kind_name = kernels::to_string(cx->kind);
      driver::PlanContext pc;
      pc.workload = plan::Workload::tucker;
      pc.tucker_ranks = driver::rank_list(ranks_text);
      in = load<T>(src, a, partition::Scheme::nnz, true, *cx, pc, world, &li);
    }
    const int N = static_cast<int>(in.dims.size());
    comm::run_collectively(world, [&] {
      o.ranks = algo::parse_ranks(ranks_text, N);
      algo::check_tucker_ranks(in.dims, o.ranks);
    });
    o.max_iters = iters;
    o.tol = tol;
    o.seed = seed;
    o.tensor_name = src.name;
    o.subspace_steps = subspace_steps;
    o.print_iterations = a.verbose;
    opts = {{"file", src.is_path ? src.path : src.name},
            {"ranks", o.ranks},
            {"svd", svd},
            {"init", init},
            {"iters", iters},
            {"tol", tol},
            {"seed", seed},
            {"subspace_steps", subspace_steps},
            {"max_mem_bytes", o.memory_limit},
            {"partition", in.partition_scheme},
            {"grid", in.grid},
            {"relabel", false},
            {"backend", kind_name},
            {"precision", a.precision},
            {"index_base", a.index_base}};
    if (ck.every > 0) opts["checkpoint_every"] = ck.every;
    if (!a.resume.empty()) opts["resumed_from"] = a.resume;
    io::TensorFingerprint fingerprint;
    if (!ckpt_path.empty() || !a.resume.empty()) fingerprint = in.fingerprint(world);
    algo::TuckerState resumed;
    if (!a.resume.empty()) {
      io::ResumeCheck now;
      now.input = fingerprint;
      now.precision = a.precision;
      now.options_json = opts.dump();
      now.must_match = {"ranks", "svd", "seed"};
      if (o.svd == algo::SvdMethod::subspace) now.must_match.push_back("subspace_steps");
      now.ignore = {"file", "max_mem_bytes", "checkpoint_every", "resumed_from"};
      const io::CheckpointInfo info = driver::resume_from(
          a.resume, now, iters,
          [&](io::CheckpointInfo* i) { resumed.model = io::read_tucker_checkpoint(a.resume, i); },
          world);
      driver::restore_progress(info, &resumed);
      o.resume = &resumed;
    }
    o.state_every = 1;
    o.on_iteration = [&](const algo::TuckerState& s) {
      if (!ckpt_path.empty() && s.iteration % ck.every == 0)
        driver::after_iteration(
            ckpt_path, ck.every, s.iteration,
            [&] {
              io::write_tucker_checkpoint(
                  ckpt_path, s.model,
                  driver::checkpoint_info(s, a.precision, fingerprint, opts.dump()));
            },
            world);
      const double f = s.fit_history.empty() ? 0.0 : s.fit_history.back();
      const double prev = s.fit_history.size() > 1 ? s.fit_history[s.fit_history.size() - 2] : 0.0;
      hook(s.iteration, f, f - prev);
    };
    first_iteration = o.resume ? o.resume->iteration : 0;
    py::gil_scoped_release nogil;
    if (in.streamed()) {
      // Tiers 2 and 3: the handle (an algo::StreamedTensor) streams itself through the backend.
      std::unique_ptr<kernels::TensorHandle<T>> h;
      if (in.disk)
        h = std::move(in.disk);
      else
        h = std::move(in.handle);
      res = algo::tucker_hooi<T>(std::move(h), in.dims, *cx->backend, world, o, cx->data);
    } else if (in.handle) {
      res = algo::tucker_hooi<T>(std::move(in.handle), in.dims, *cx->backend, world, o, cx->data);
    } else {
      res = algo::tucker_hooi<T>(*in.dist, *cx->backend, world, o, cx->data);
    }
  });

  nlohmann::json j = record_base("tucker", opts, world, kind_name, a.threads);
  driver::add_input_fields(j, in);
  j["fit"] = res.fit;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["core_norm"] = res.core_norm;
  j["completed_columns"] = res.completed_columns;
  j["dense_stage"] = res.dense_method;
  j["memory_tier"] = {{"tier", res.tier}, {"description", res.tier_description}};
  py::list hist;
  for (const auto& h : res.history) {
    py::dict d;
    d["iter"] = h.iter;
    d["fit"] = h.fit;
    d["delta"] = h.delta;
    d["seconds"] = h.seconds;
    d["kernel"] = h.ttmc;
    d["comm"] = h.comm;
    d["solve"] = h.svd;
    d["core_norm"] = h.core_norm;
    hist.append(d);
  }
  j["phases_seconds"] = {{"io", li.read_seconds},
                         {"read", li.read_seconds},
                         {"partition", li.distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"init", res.phases.get("init")},
                         {"ttmc", res.phases.get("ttmc")},
                         {"comm", res.phases.get("comm")},
                         {"svd", res.phases.get("svd")},
                         {"total", total.seconds()}};
  driver::add_iteration_fields(j, driver::tucker_iterations_json(res.history),
                               res.iterations - first_iteration,
                               {{"kernel", res.phases.get("ttmc")},
                                {"comm", res.phases.get("comm")},
                                {"solve", res.phases.get("svd")}});
  py::dict out;
  std::vector<py::ssize_t> core_shape(res.model.ranks.begin(), res.model.ranks.end());
  py::array_t<double> core(core_shape);
  std::copy(res.model.core.begin(), res.model.core.end(), core.mutable_data());
  out["core"] = core;
  py::list factors;
  for (const auto& f : res.model.factors) factors.append(matrix_to_numpy(f));
  out["factors"] = factors;
  out["fit"] = res.fit;
  out["iterations"] = res.iterations;
  out["converged"] = res.converged;
  out["history"] = hist;
  out["record_json"] = j.dump();
  return out;
}

}  // namespace

void register_tucker(py::module_& m) {
  m.def("tucker_hooi",
        [](py::object tensor, py::object ranks, int iters, double tol, std::uint64_t seed,
           std::string init, std::string svd, int subspace_steps, std::string max_mem,
           std::string backend, std::string precision, py::object threads, std::string index_base,
           py::object checkpoint, int checkpoint_every, py::object resume, py::object callback,
           bool verbose, bool share, std::uintptr_t comm, py::dict tuning) {
          CommonArgs a = common_args(backend, precision, threads, "allreduce", index_base,
                                     checkpoint, checkpoint_every, resume, verbose, share);
          apply_tuning(a, tuning);
          if (precision == "float")
            return run_tucker<float>(tensor, ranks, iters, tol, seed, init, svd, subspace_steps,
                                     max_mem, a, callback, comm);
          return run_tucker<double>(tensor, ranks, iters, tol, seed, init, svd, subspace_steps,
                                    max_mem, a, callback, comm);
        });
}

}  // namespace tessera::python
