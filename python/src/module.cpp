// _tessera: the Python binding of Tessera (docs/python.md). The pure-Python package
// `tessera` (python/tessera) turns the user's inputs into the dicts this module takes and
// its results into result classes.
//
// Every entry point is collective over the communicator it is given (MPI_COMM_WORLD by
// default): each rank calls it with the same options. Compute runs with the GIL released;
// the GIL is taken back at every iteration boundary to run the user's callback and to look
// for Ctrl-C (PyErr_CheckSignals), and the ranks agree on stopping, so every rank raises.
//
// This file holds the module's registration only; the parts are listed in bindings.hpp.
#include "bindings.hpp"

PYBIND11_MODULE(_tessera, m) {
  using namespace tessera::python;
  m.doc() = "Tessera's C++ core (use the tessera package, not this module directly)";
  register_cp(m);
  register_tucker(m);
  register_contract(m);
  register_files(m);
  register_runtime(m);
  register_tuning(m);
}
