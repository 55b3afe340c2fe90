// tucker_hooi of the _tessera extension (docs/python.md): the arguments as
// run::TuckerRunOptions (with the iteration hook), run::run_tucker with the GIL released,
// and the model, history and run record as a dict.
#include "run/tucker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "runtime.hpp"
#include "util/error.hpp"

namespace tessera::python {
namespace {

/// Ranks as the CLI's text: an int, a string, or a sequence of ints.
std::string ranks_text(const py::object& ranks) {
  if (py::isinstance<py::int_>(ranks)) return std::to_string(py::cast<long long>(ranks));
  if (py::isinstance<py::str>(ranks)) return py::cast<std::string>(ranks);
  std::string text;
  for (auto r : py::reinterpret_borrow<py::sequence>(ranks))
    text += (text.empty() ? "" : ",") + py::cast<std::string>(py::str(r));
  return text;
}

py::dict tucker_dict(const run::TuckerRun& r) {
  const algo::TuckerResult& res = r.result;
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
  py::dict out;
  std::vector<py::ssize_t> core_shape(res.model.ranks.begin(), res.model.ranks.end());
  py::array_t<double> core(core_shape);
  std::copy(res.model.core.begin(), res.model.core.end(), core.mutable_data());
  put_decomposition(out, res, r.record);
  out["core"] = core;
  out["history"] = hist;
  return out;
}

/// The checks of the arguments the CLI checks as it parses (collective).
void check_tucker_args(const run::TuckerRunOptions& o, const CommonArgs& a) {
  check_common(a);
  TESSERA_INPUT_CHECK(o.iters >= 1, "iters=" << o.iters << ": expected >= 1");
  TESSERA_INPUT_CHECK(o.tol >= 0 && std::isfinite(o.tol), "tol=" << o.tol << ": expected >= 0");
  TESSERA_INPUT_CHECK(o.subspace_steps >= 1,
                      "subspace_steps=" << o.subspace_steps << ": expected >= 1");
}

template <typename T>
py::dict run_tucker(const py::object& tensor, run::TuckerRunOptions o, const CommonArgs& a,
                    const py::object& callback, std::uintptr_t comm_handle) {
  return tucker_dict(run_decomposition<T>(
      tensor, o, a, callback, comm_handle, [&] { check_tucker_args(o, a); },
      [](const run::TuckerRunOptions& ro, const comm::MpiCommunicator& w, SparseTensor<T>* arrays) {
        return run::run_tucker<T>(ro, w, arrays);
      }));
}

}  // namespace

void register_tucker(py::module_& m) {
  m.def("tucker_hooi",
        [](py::object tensor, py::object ranks, int iters, double tol, std::uint64_t seed,
           std::string init, std::string svd, int subspace_steps, std::string max_mem,
           std::string backend, std::string precision, py::object threads, std::string index_base,
           py::object checkpoint, int checkpoint_every, py::object resume, py::object callback,
           bool verbose, bool share, std::uintptr_t comm, bool force, py::dict tuning) {
          // "auto", as `tessera tucker`'s --comm-strategy: the TTMc rows' combine per mode
          // by the run's rule (allreduce is --svd gram's only; subspace and scalapack need
          // owners, which auto picks for them).
          CommonArgs a = common_args(backend, precision, threads, "auto", index_base, checkpoint,
                                     checkpoint_every, resume, verbose, share);
          a.run.force = force;
          apply_tuning(a, tuning);
          run::TuckerRunOptions o;
          o.ranks = ranks_text(ranks);
          o.iters = iters;
          o.tol = tol;
          o.seed = seed;
          o.init = init;
          o.svd = svd;
          o.subspace_steps = subspace_steps;
          o.max_mem = max_mem;
          if (precision == "float") return run_tucker<float>(tensor, o, a, callback, comm);
          return run_tucker<double>(tensor, o, a, callback, comm);
        });
}

}  // namespace tessera::python
