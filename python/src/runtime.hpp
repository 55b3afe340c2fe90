// The runtime of every _tessera entry point (docs/python.md): MPI initialised once, the
// communicator of one call (mpi4py's handle or MPI_COMM_WORLD) with logging and threads set
// for it, the iteration hook that takes the GIL back to run the user's callback and look for
// Ctrl-C (the ranks agree on stopping), and the translation of C++ exceptions into Python
// ones. Compute runs with the GIL released (py::gil_scoped_release in the entry points).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "comm/mpi_communicator.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::python {

// ---- MPI ---------------------------------------------------------------------------------

/// MPI initialised once (by mpi4py when imported first, else here, FUNNELED as the CLI).
void ensure_mpi();

/// MPI_Finalize, only when this module called MPI_Init_thread.
void finalize_mpi();

/// The communicator of one call, with logging set for its rank count and verbosity (both
/// restored afterwards).
struct Session {
  comm::MpiCommunicator world;
  int old_verbosity;
  int old_threads;  // threads= sets OpenMP's count for the call only
  Session(std::uintptr_t handle, bool verbose);
  ~Session();
};

// ---- errors ------------------------------------------------------------------------------

/// A Python exception (Ctrl-C, or the callback's) fetched at an iteration boundary, to be
/// raised again once the computation has unwound. Owns its references.
struct PendingPyError {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  bool set() const { return type != nullptr; }
  void fetch() { PyErr_Fetch(&type, &value, &trace); }
  /// With the GIL: restores the error (the caller throws error_already_set).
  void restore() {
    PyErr_Restore(type, value, trace);
    type = value = trace = nullptr;
  }
};

/// Thrown (on every rank alike) out of an iteration hook that must stop the computation.
struct Stop {
  int code = 0;  // 1: Ctrl-C (KeyboardInterrupt), 2: the callback raised
};

/// The iteration hook: runs the Python callback with the GIL and checks for signals; the
/// ranks agree (max) whether to stop, so every rank throws Stop at the same iteration.
class IterationHook {
 public:
  IterationHook(py::object callback, const comm::Communicator& world)
      : cb_(std::move(callback)), world_(world) {}
  void operator()(int iteration, double fit, double delta);
  PendingPyError& pending() { return pending_; }

 private:
  py::object cb_;
  const comm::Communicator& world_;
  PendingPyError pending_;
};

// ---- outputs -----------------------------------------------------------------------------

/// One file a module function writes (save_model's path, a run's checkpoint) and the files
/// it must never replace.
struct OutputGuard {
  std::string option;  ///< how the user named the output ("path", "checkpoint")
  std::string path;    ///< "" : nothing is written
  std::vector<std::pair<std::string, std::string>> inputs;  ///< (name, path); "" ignored
  std::string may_replace;  ///< the input name this output may be ("resume"), or ""
};

/// Collective, with the GIL: the CLI's output guard (io::OutputSet, docs/reliability.md
/// "Outputs") on rank 0, agreed by every rank, before any work. The output is never one of
/// the inputs (not even with force); an existing regular file that Tessera did not write as
/// a model is replaced only with `force`; its folder must accept a new file. A refused
/// existing file raises tessera.OutputExistsError (a FileExistsError and a ValueError) on
/// every rank, any other refusal ValueError, with the CLI's text ("force=True" for
/// "--force"). Also removes the stale temporaries this host left for the output.
void guard_output(const OutputGuard& g, bool force, const comm::Communicator& world);

/// Source location " [file.cpp:12]" that TESSERA_EXPECTS/TESSERA_THROW append: a bug or a
/// system failure, not bad input.
bool has_source_location(const std::string& m);

/// Runs `f` (which releases the GIL itself) and turns C++ exceptions into Python ones:
/// InputError -> ValueError; CollectiveError -> ValueError (agreed by every rank; a
/// RuntimeError when it carries a source location, i.e. a failure rather than bad input);
/// Stop -> the fetched Python exception (other ranks: KeyboardInterrupt or RuntimeError);
/// anything else -> RuntimeError on one rank, or, with several ranks, MPI_Abort after one
/// line on stderr: an error found by one rank alone leaves the others waiting in a
/// collective, so the job ends as the CLI ends it.
template <typename F>
auto translate(IterationHook* hook, const comm::Communicator& world, F&& f) -> decltype(f()) {
  auto fail_alone = [&](const std::string& what) {
    if (world.size() > 1) {
      std::fprintf(stderr, "tessera (python) rank %d on %s: %s\n(ending the job: MPI_Abort)\n",
                   world.rank(), log::hostname().c_str(), what.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    throw std::runtime_error(what);
  };
  try {
    return f();
  } catch (const Stop& s) {
    if (hook != nullptr && hook->pending().set()) {
      hook->pending().restore();
      throw py::error_already_set();
    }
    if (s.code == 1) {
      PyErr_SetString(PyExc_KeyboardInterrupt, "interrupted on another rank");
      throw py::error_already_set();
    }
    throw std::runtime_error("the callback raised an exception on another rank");
  } catch (const InputError& e) {
    throw py::value_error(e.what());
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    if (has_source_location(m)) throw std::runtime_error(m);
    throw py::value_error(m);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail_alone("out of memory");
  } catch (const std::exception& e) {
    fail_alone(e.what());
  }
  throw std::runtime_error("unreachable");
}

}  // namespace tessera::python
