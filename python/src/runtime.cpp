// The runtime of the _tessera entry points (runtime.hpp): MPI initialisation and
// finalisation, the communicator of a call from mpi4py's handle, the iteration hook's
// callback/Ctrl-C check, and the module functions finalize_mpi, mpi_size, cuda_built and
// build_info.
#include "runtime.hpp"

#include <mpi.h>
#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "io/output.hpp"
#include "kernels/factories.hpp"
#include "plan/limits.hpp"
#include "run/build_info.hpp"
#include "util/cpus.hpp"
#include "util/mpi_env.hpp"

namespace tessera::python {
namespace {

bool g_initialised_mpi = false;       // this module called MPI_Init_thread (so it finalises)
PyObject* g_output_exists = nullptr;  // tessera.OutputExistsError (register_runtime)

/// mpi4py's MPI._handleof(comm): a pointer (OpenMPI) or an integer (MPICH).
template <typename C>
C comm_cast(std::uintptr_t h) {
  if constexpr (std::is_pointer_v<C>) {
    return reinterpret_cast<C>(h);
  } else {
    return static_cast<C>(h);
  }
}

MPI_Comm comm_from_handle(std::uintptr_t h) {
  return h == 0 ? MPI_COMM_WORLD : comm_cast<MPI_Comm>(h);
}

}  // namespace

// ---- MPI ---------------------------------------------------------------------------------

void ensure_mpi() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin)
    throw std::runtime_error(
        "MPI is already finalized in this process: call tessera functions before "
        "MPI.Finalize()");
  int init = 0;
  MPI_Initialized(&init);
  if (init) return;
  int provided = 0;
  int argc = 0;
  char** argv = nullptr;
  const util::MpiInitEnv env;  // no helper daemon for a singleton (util/mpi_env.hpp)
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed");
  g_initialised_mpi = true;
}

void finalize_mpi() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (g_initialised_mpi && init && !fin) MPI_Finalize();
  g_initialised_mpi = false;
}

Session::Session(std::uintptr_t handle, bool verbose)
    : world((ensure_mpi(), comm_from_handle(handle))),
      old_verbosity(log::verbosity()),
      old_threads(omp_get_max_threads()) {
  log::set_rank(world.rank(), world.size());
  log::set_verbosity(verbose ? 1 : 0);
  // The measured host peak (VmHWM) is this call's, not the process's so far: an earlier,
  // larger call in the same interpreter would otherwise read as this call over its plan.
  plan::reset_peak_rss();
}

Session::~Session() {
  log::set_verbosity(old_verbosity);
  omp_set_num_threads(old_threads);
}

// ---- errors ------------------------------------------------------------------------------

void IterationHook::operator()(int iteration, double fit, double delta) {
  std::int32_t code = 0;
  {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      pending_.fetch();
      code = 1;
    } else if (!cb_.is_none()) {
      py::dict info;
      info["iteration"] = iteration;
      info["fit"] = fit;
      info["delta"] = delta;
      info["rank"] = world_.rank();
      PyObject* r = PyObject_CallOneArg(cb_.ptr(), info.ptr());
      if (r == nullptr) {
        const bool kbd = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
        pending_.fetch();
        code = kbd ? 1 : 2;
      } else {
        Py_DECREF(r);
      }
    }
  }
  world_.allreduce(&code, 1, comm::ReduceOp::max);
  if (code != 0) throw Stop{code};
}

// ---- outputs -----------------------------------------------------------------------------

void guard_output(const OutputGuard& g, bool force, const comm::Communicator& world) {
  if (g.path.empty()) return;
  io::OutputSet set;
  set.set_force_option("force=True");
  for (const auto& [name, path] : g.inputs) set.add_input(name, path);
  set.add_output(g.option, g.path, io::OutputKind::model, g.may_replace);
  std::int32_t code = 0;  // 1: refused (ValueError), 2: an existing file refused
  std::string msg;
  if (world.rank() == 0) {
    try {
      set.check(force);
      set.clean();
    } catch (const std::exception& e) {
      msg = e.what();
      struct stat st {};
      code = ::stat(g.path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? 2 : 1;
    }
  }
  world.broadcast(&code, 1, 0);
  if (code == 0) return;
  std::int64_t len = static_cast<std::int64_t>(msg.size());
  world.broadcast(&len, 1, 0);
  msg.resize(static_cast<std::size_t>(len));
  world.broadcast(msg.data(), msg.size(), 0);
  if (code == 1) throw InputError(msg);
  PyErr_SetString(g_output_exists, msg.c_str());
  throw py::error_already_set();
}

bool has_source_location(const std::string& m) {
  const auto open = m.rfind(" [");
  if (open == std::string::npos || m.empty() || m.back() != ']') return false;
  const auto colon = m.rfind(':');
  return colon != std::string::npos && colon > open;
}

// ---- module functions --------------------------------------------------------------------

void register_runtime(py::module_& m) {
  // Both kinds of caller find it: `except FileExistsError` and `except ValueError`.
  py::tuple bases = py::make_tuple(py::handle(PyExc_FileExistsError), py::handle(PyExc_ValueError));
  g_output_exists = PyErr_NewExceptionWithDoc(
      "tessera.OutputExistsError",
      "An output that Tessera refuses to replace: an input of the call (never replaced), or "
      "an existing file Tessera did not write (replaced only with force=True).",
      bases.ptr(), nullptr);
  if (g_output_exists == nullptr) throw py::error_already_set();
  m.add_object("OutputExistsError", py::handle(g_output_exists));
  m.def("finalize_mpi", &finalize_mpi);
  // threads=: capped as the CLI caps --threads (util::cap_threads, the same rule and words;
  // `what` names the request). Returns (threads, warning); the warning only on rank 0 of
  // the communicator, as the CLI warns on rank 0.
  m.def("cap_threads", [](long long requested, const std::string& what, std::uintptr_t comm) {
    const int n = static_cast<int>(std::clamp<long long>(requested, 0, INT_MAX));
    std::string warning;
    const int capped = util::cap_threads(n, what, &warning);
    ensure_mpi();
    int rank = 0;
    MPI_Comm_rank(comm_from_handle(comm), &rank);
    return py::make_tuple(capped, rank == 0 ? warning : std::string());
  });
  m.def("mpi_size", [] {
    ensure_mpi();
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  });
  m.def("cuda_built", [] { return tessera::kernels::cuda_built(); });
  // run::build_info() as JSON text (python -m tessera); no MPI_Init needed.
  m.def("build_info", [] { return tessera::run::build_info().dump(); });
}

}  // namespace tessera::python
