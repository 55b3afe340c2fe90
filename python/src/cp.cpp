// cp_als of the _tessera extension (docs/python.md): the arguments as run::CpRunOptions
// (initial factors from NumPy, the iteration hook), run::run_cp with the GIL released, and
// the model, history and run record as a dict.
#include "run/cp.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "inputs.hpp"
#include "runtime.hpp"
#include "util/error.hpp"

namespace tessera::python {
namespace {

/// The checks of the arguments the CLI checks as it parses (collective).
void check_cp_args(const run::CpRunOptions& o, const CommonArgs& a, const py::object& init) {
  check_common(a);
  run::check_cp_values(o.als, /*python=*/true);
  if (!py::isinstance<py::str>(init)) return;
  const std::string s = py::cast<std::string>(init);
  TESSERA_INPUT_CHECK(s == "random" || s == "nvecs",
                      "init=\"" << s
                                << "\": expected \"random\", \"nvecs\" or a list of initial "
                                   "factor arrays");
}

/// Sets the row of kCpValues named `name` from a Python value (InputError when the type is
/// not the row's); false when no row has that name.
bool set_cp_keyword(algo::CpOptions& o, const std::string& name, py::handle value) {
  bool found = false;
  run::for_each_cp_value([&]<typename V>(const run::CpValue<V>& v) {
    if (found || v.key != name) return;
    found = true;
    o.*v.field = keyword_value<V>(name, value);
  });
  return found;
}

/// The keyword arguments of the table into o.als (ValueError or TypeError before any run).
void apply_cp_values(run::CpRunOptions& o, const py::dict& values) {
  for (const auto& [key, value] : values) {
    const std::string name = py::cast<std::string>(py::str(key));
    if (value.is_none()) continue;  // None: the default
    bool found = false;
    try {
      found = set_cp_keyword(o.als, name, value);
    } catch (const InputError& e) {
      throw py::value_error(e.what());
    }
    if (!found) throw py::type_error("cp_als: unexpected keyword argument '" + name + "'");
  }
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
  const int rank = o->als.rank;
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
  // loss="poisson": the final log-likelihood (history has it per iteration); else None.
  out["loglik"] =
      std::isnan(res.loglik) ? py::object(py::none()) : py::object(py::float_(res.loglik));
  // GCP (solver "gcp"): the last loss estimate and, with a holdout, the held-out AUC; else None.
  const auto number_or_none = [](double v) {
    return std::isnan(v) ? py::object(py::none()) : py::object(py::float_(v));
  };
  out["loss_estimate"] = number_or_none(res.gcp_loss);
  out["auc"] = number_or_none(res.auc);
  out["holdout_loss"] = number_or_none(res.holdout_loss);
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
  m.def(
      "cp_values",
      [] {
        // key -> (default, help, CLI flag, accepted values in words; "" for a bool)
        py::dict d;
        const algo::CpOptions defaults;
        run::for_each_cp_value([&]<typename V>(const run::CpValue<V>& v) {
          std::string words;
          if constexpr (!std::is_same_v<V, bool>) words = run::cp_range_words(v.lo, v.hi);
          d[py::str(std::string(v.key))] = py::make_tuple(
              py::cast(defaults.*v.field), std::string(v.help), run::cp_flag(v.key), words);
        });
        return d;
      },
      "The plain CP-ALS keywords (run::kCpValues, the CLI's options of the same names): "
      "key -> (default, help, CLI flag, accepted values), in table order.");
  m.def("cp_als",
        [](py::object tensor, py::dict values, py::object init, std::string backend,
           std::string precision, py::object threads, std::string strategy, std::string index_base,
           py::object checkpoint, int checkpoint_every, py::object resume, py::object callback,
           bool verbose, bool share, std::uintptr_t comm, std::string nonneg, std::string l1,
           std::string l2, std::string loss, std::string solver, bool force, py::dict tuning) {
          CommonArgs a = common_args(backend, precision, threads, strategy, index_base, checkpoint,
                                     checkpoint_every, resume, verbose, share);
          a.run.force = force;
          apply_tuning(a, tuning);
          run::CpRunOptions o;
          apply_cp_values(o, values);
          o.con.nonneg = nonneg;
          o.con.l1 = l1;
          o.con.l2 = l2;
          o.con.loss = loss;
          o.con.solver = solver;
          if (precision == "float") return run_cp<float>(tensor, o, init, a, callback, comm);
          return run_cp<double>(tensor, o, init, a, callback, comm);
        });
}

}  // namespace tessera::python
