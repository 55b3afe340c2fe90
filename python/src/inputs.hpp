// The inputs of the _tessera entry points (docs/python.md): the tensor dicts built by
// tessera/_inputs.py (NumPy/COO arrays, or a path) read into this rank's nonzeros and
// distributed as the CLI distributes a file, the options every entry point takes, and NumPy
// matrices (initial factors, saved models) read into Tessera's matrices.
#pragma once

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "comm/mpi_communicator.hpp"
#include "common.hpp"
#include "kernels/tuning.hpp"

namespace tessera::python {

// ---- tensors -----------------------------------------------------------------------------

/// The input of one call on this rank, read collectively: a file through the driver's
/// loader, or arrays (rank 0's, or every rank's share) distributed as the CLI distributes
/// a text file (partition::distribute, the same scheme).
template <typename T>
struct Source {
  bool is_path = false;
  std::string path;
  std::string name;
  bool share = false;
  SparseTensor<T> local;  // arrays: this rank's nonzeros (read with the GIL)
};

/// Reads the Python tensor dict into a Source (collective: errors agreed on every rank).
/// `t` is None on ranks without data (rank-0 input). T: float or double.
template <typename T>
Source<T> read_source(const py::object& t, bool share, const comm::MpiCommunicator& world);

// ---- options -----------------------------------------------------------------------------

/// The options that cp_als, tucker_hooi and contract share.
struct CommonArgs {
  std::string backend = "auto";
  std::string precision = "double";
  int threads = 0;
  std::string strategy = "allreduce";
  std::string index_base = "1";
  std::string checkpoint;
  int checkpoint_every = 0;
  std::string resume;
  bool verbose = false;
  bool share = false;
  /// The CLI's "Kernel tuning" options (keyword arguments of the fields' names) and
  /// --nccl-timeout (nccl_timeout).
  kernels::Tuning tuning;
  double nccl_timeout_s = 1800;
};

/// CommonArgs from the module functions' arguments (threads, checkpoint, resume: None or a
/// value; paths through str()).
CommonArgs common_args(const std::string& backend, const std::string& precision,
                       const py::object& threads, const std::string& strategy,
                       const std::string& index_base, const py::object& checkpoint,
                       int checkpoint_every, const py::object& resume, bool verbose, bool share);

/// Sets a.tuning and a.nccl_timeout_s from the dict of tuning keyword arguments
/// (tessera/__init__.py passes them by the kernels::Tuning field names, plus nccl_timeout);
/// InputError naming an unknown name or a value of the wrong type. Values are checked by
/// check_common.
void apply_tuning(CommonArgs& a, const py::dict& tuning);
/// Sets the field of the tuning knob `name` (kernels/tuning.hpp; python/src/tuning.cpp) from
/// `value` (an enumeration by name, bool, number); InputError naming the keyword and the
/// option for a wrong type or value; false when `name` is no knob.
bool set_tuning_keyword(kernels::Tuning& t, const std::string& name, py::handle value);
/// "cuda_layout, cuda_block_rows, ..., trace, ": every knob's keyword, for messages.
std::string tuning_keywords();

/// The driver's compute options of these arguments.
driver::ComputeOptions compute_options(const CommonArgs& a);

/// Checks the arguments (InputError naming the option); call collectively.
void check_common(const CommonArgs& a);

/// Loads the input of cp/tucker as the CLI does (driver::load_input) for files, or
/// distributes the arrays (tier 1). T: float or double.
template <typename T>
driver::Input<T> load(Source<T>& src, const CommonArgs& a, partition::Scheme scheme, bool allreduce,
                      driver::Compute<T>& cx, const driver::PlanContext& pc,
                      const comm::MpiCommunicator& world, driver::Loaded* li);

// ---- matrices ----------------------------------------------------------------------------

/// A rows x cols matrix of finite numbers from any array-like `h` (InputError naming `what`).
Matrix<double> numpy_to_matrix(const py::handle& h, std::int64_t rows, int cols, const char* what);

}  // namespace tessera::python
