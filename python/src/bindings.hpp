// The internal header of the _tessera extension (docs/python.md): what its source files
// share. One file per part, each registering its functions on the module:
//   runtime.{hpp,cpp}  MPI, the communicator of a call, GIL release, the Ctrl-C/callback
//                      hook, C++ exceptions -> Python exceptions; finalize_mpi, mpi_size,
//                      cuda_built, build_info
//   inputs.{hpp,cpp}   NumPy/COO dicts and paths -> this rank's tensor, distribution, the
//                      options every entry point takes
//   results.cpp        NumPy arrays of results and the run record's envelope
//   cp.cpp             cp_als
//   tucker.cpp         tucker_hooi
//   contract.cpp       contract
//   files.cpp          read_tensor, load_model, save_model
//   tuning.cpp         the kernel tuning keywords, from kernels/tuning.hpp
//   module.cpp         PYBIND11_MODULE: the registration calls
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/tuning.hpp"
#include "tensor/sparse_tensor.hpp"

namespace py = pybind11;

namespace tessera::python {

// ---- registration (one per part; module.cpp calls them in this order) ---------------------

void register_cp(py::module_& m);        // cp.cpp: cp_als
void register_tucker(py::module_& m);    // tucker.cpp: tucker_hooi
void register_contract(py::module_& m);  // contract.cpp: contract
void register_files(py::module_& m);     // files.cpp: read_tensor, load_model, save_model
void register_runtime(py::module_& m);   // runtime.cpp: finalize_mpi, ..., build_info
void register_tuning(py::module_& m);    // tuning.cpp: tuning_defaults

// ---- results (results.cpp) ----------------------------------------------------------------

/// A rows x cols float64 array (a copy).
py::array_t<double> matrix_to_numpy(const Matrix<double>& m);

/// A 1-D float64 array (a copy).
py::array_t<double> vector_to_numpy(const std::vector<double>& v);

/// The entries every decomposition's result dict has: "factors" (NumPy copies), "fit",
/// "iterations", "converged" and "record_json" (Result: algo::CpResult, algo::TuckerResult).
template <typename Result>
void put_decomposition(py::dict& out, const Result& res, const nlohmann::json& record) {
  py::list factors;
  for (const auto& f : res.model.factors) factors.append(matrix_to_numpy(f));
  out["factors"] = factors;
  out["fit"] = res.fit;
  out["iterations"] = res.iterations;
  out["converged"] = res.converged;
  out["record_json"] = record.dump();
}

/// A JSON value as Python objects (dicts, lists, numbers, strings; json.loads).
py::object json_to_python(const nlohmann::json& j);

/// The run record: the versioned envelope of run/record.hpp (collective), marked as
/// coming from Python; the callers add what the CLI's --json adds for the command.
nlohmann::json record_base(const std::string& command, const nlohmann::json& opts,
                           const comm::Communicator& world, const std::string& backend, int threads,
                           const kernels::Tuning& tuning);

}  // namespace tessera::python
