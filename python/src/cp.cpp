// cp_als of the _tessera extension (docs/python.md): the arguments as run::CpRunOptions
// (initial factors from NumPy, the iteration hook), run::run_cp with the GIL released, and
// the model, history and run record as a dict.
#include "run/cp.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "inputs.hpp"
#include "runtime.hpp"
#include "util/error.hpp"

namespace tessera::python {
namespace {

/// The checks of the arguments the CLI checks as it parses (collective).
void check_cp_args(const run::CpRunOptions& o, const CommonArgs& a, const py::object& init) {
  check_common(a);
  TESSERA_INPUT_CHECK(o.rank >= 1 && o.rank <= 4096, "rank=" << o.rank << ": expected 1 to 4096");
  TESSERA_INPUT_CHECK(o.iters >= 1, "iters=" << o.iters << ": expected >= 1");
  TESSERA_INPUT_CHECK(o.tol >= 0 && std::isfinite(o.tol), "tol=" << o.tol << ": expected >= 0");
  TESSERA_INPUT_CHECK(o.max_seconds >= 0 && std::isfinite(o.max_seconds),
                      "max_seconds=" << o.max_seconds << ": expected >= 0 (0: no limit)");
  TESSERA_INPUT_CHECK(o.print_every >= 1, "print_every=" << o.print_every << ": expected >= 1");
  if (!py::isinstance<py::str>(init)) return;
  const std::string s = py::cast<std::string>(init);
  TESSERA_INPUT_CHECK(s == "random" || s == "nvecs",
                      "init=\"" << s
                                << "\": expected \"random\", \"nvecs\" or a list of initial "
                                   "factor arrays");
}

/// init: None, "random", "nvecs", or initial factors (a sequence of arrays, lambda 1).
void set_init(const py::object& init, run::CpRunOptions* o) {
  if (init.is_none()) return;
  if (py::isinstance<py::str>(init)) {
    o->init = py::cast<std::string>(init);
    return;
  }
  o->init = "factors";
  py::sequence fs = py::reinterpret_borrow<py::sequence>(init);
  const int rank = o->rank;
  o->init_factors = [fs, rank](const std::vector<std::uint64_t>& dims, KruskalModel* m) {
    py::gil_scoped_acquire gil;
    TESSERA_INPUT_CHECK(
        static_cast<std::size_t>(py::len(fs)) == dims.size(),
        "init: " << py::len(fs) << " factor(s) for a tensor of order " << dims.size());
    m->dims = dims;
    m->rank = rank;
    m->lambda.assign(static_cast<std::size_t>(rank), 1.0);
    for (std::size_t n = 0; n < dims.size(); ++n) {
      const std::string what = "init[" + std::to_string(n) + "]";
      m->factors.push_back(
          numpy_to_matrix(fs[n], static_cast<std::int64_t>(dims[n]), rank, what.c_str()));
    }
  };
}

py::dict cp_dict(const run::CpRun& r) {
  const algo::CpResult& res = r.result;
  py::dict out;
  put_decomposition(out, res, r.record);
  out["weights"] = vector_to_numpy(res.model.lambda);
  out["stop_reason"] = res.stop_reason;
  out["validation_rmse"] = res.validation_rmse;
  out["mean_predictor_rmse"] = res.mean_predictor_rmse;
  out["history"] = json_to_python(r.record.at("per_iteration"));
  return out;
}

template <typename T>
py::dict run_cp(const py::object& tensor, run::CpRunOptions o, const py::object& init,
                const CommonArgs& a, const py::object& callback, std::uintptr_t comm_handle) {
  set_init(init, &o);
  return cp_dict(run_decomposition<T>(
      tensor, o, a, callback, comm_handle, [&] { check_cp_args(o, a, init); },
      [](const run::CpRunOptions& ro, const comm::MpiCommunicator& w, SparseTensor<T>* arrays) {
        return run::run_cp<T>(ro, w, arrays);
      }));
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
          run::CpRunOptions o;
          o.rank = rank;
          o.iters = iters;
          o.tol = tol;
          o.seed = seed;
          o.max_seconds = max_seconds;
          o.print_every = print_every;
          o.con = run::CpConstraintArgs{nonneg, l1, l2, inner_sweeps, observed_only, holdout};
          if (precision == "float") return run_cp<float>(tensor, o, init, a, callback, comm);
          return run_cp<double>(tensor, o, init, a, callback, comm);
        });
}

}  // namespace tessera::python
