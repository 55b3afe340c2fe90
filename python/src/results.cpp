// The results of the _tessera entry points (bindings.hpp): Tessera's matrices and vectors
// copied into NumPy arrays, and the run record's envelope that every entry point starts from.
#include <algorithm>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "run/record.hpp"

namespace tessera::python {

py::array_t<double> matrix_to_numpy(const Matrix<double>& m) {
  py::array_t<double> a({static_cast<py::ssize_t>(m.rows), static_cast<py::ssize_t>(m.cols)});
  std::copy(m.data.begin(), m.data.end(), a.mutable_data());
  return a;
}

py::array_t<double> vector_to_numpy(const std::vector<double>& v) {
  py::array_t<double> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::object json_to_python(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

/// The run record: the versioned envelope of run/record.hpp (collective), marked as
/// coming from Python; the callers add what the CLI's --json adds for the command.
nlohmann::json record_base(const std::string& command, const nlohmann::json& opts,
                           const comm::Communicator& world, const std::string& backend, int threads,
                           const kernels::Tuning& tuning) {
  run::RecordContext ctx;
  ctx.interface = "python";
  ctx.tuning = tuning;
  return run::record_envelope(command, opts, world, backend, threads, ctx);
}

}  // namespace tessera::python
