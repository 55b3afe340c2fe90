// The inputs of the _tessera entry points (docs/python.md): the tensor dicts built by
// tessera/_inputs.py (NumPy/COO arrays, or a path) read into this rank's nonzeros and
// distributed as the CLI distributes a file, the options every entry point takes, and NumPy
// matrices (initial factors, saved models) read into Tessera's matrices.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "bindings.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/tuning.hpp"
#include "run/checkpoint.hpp"
#include "run/compute.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "runtime.hpp"

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
  /// backend, precision, threads, comm_strategy, the CLI's "Kernel tuning" options (keyword
  /// arguments of the fields' names) and --nccl-timeout (nccl_timeout): the run layer's
  /// compute options as they are.
  run::ComputeOptions run;
  std::string index_base = "1";
  std::string checkpoint;
  int checkpoint_every = 0;
  std::string resume;
  bool verbose = false;
  bool share = false;
};

/// CommonArgs from the module functions' arguments (threads, checkpoint, resume: None or a
/// value; paths through str()).
CommonArgs common_args(const std::string& backend, const std::string& precision,
                       const py::object& threads, const std::string& strategy,
                       const std::string& index_base, const py::object& checkpoint,
                       int checkpoint_every, const py::object& resume, bool verbose, bool share);

/// Sets a.run.tuning and a.run.nccl_timeout_s from the dict of tuning keyword arguments
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

/// The keyword argument `name`'s `value` as a V of a table (a tuning knob, a CP option): a
/// bool only for bool, an int for integers, an int or float for floating point; else an
/// InputError "name=repr: expected ...".
template <typename V>
V keyword_value(const std::string& name, py::handle value) {
  const std::string shown = name + "=" + py::cast<std::string>(py::repr(value));
  const bool is_bool = py::isinstance<py::bool_>(value);
  const char* expected = std::is_same_v<V, bool>       ? "True or False"
                         : std::is_floating_point_v<V> ? "a number"
                         : std::is_unsigned_v<V>       ? "an integer >= 0"
                                                       : "an integer";
  bool ok = false;
  if constexpr (std::is_same_v<V, bool>)
    ok = is_bool;
  else if constexpr (std::is_floating_point_v<V>)
    ok = !is_bool && (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value));
  else
    ok = !is_bool && py::isinstance<py::int_>(value);
  TESSERA_INPUT_CHECK(ok, shown << ": expected " << expected);
  try {
    return py::cast<V>(value);
  } catch (const py::cast_error&) {
    // An integer the type cannot hold (rank=10**12): its range, not "an integer".
    if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>)
      TESSERA_INPUT_CHECK(false, shown << ": expected an integer from "
                                       << +std::numeric_limits<V>::min() << " to "
                                       << +std::numeric_limits<V>::max());
    TESSERA_INPUT_CHECK(false, shown << ": expected " << expected);
  }
  return V{};
}

/// The run layer's options of these arguments and this input: the input file (none for
/// arrays, named by the source's name instead), the compute options, the checkpoint (a
/// path without checkpoint_every checkpoints every iteration) and the record's interface.
template <typename T>
void set_common(const CommonArgs& a, const Source<T>& src, run::LoadOptions* load,
                std::string* name, run::ComputeOptions* run, run::CheckpointArgs* ck,
                run::RecordContext* record) {
  load->path = src.is_path ? src.path : std::string();
  load->index_base = a.index_base;
  *name = src.is_path ? std::string() : src.name;
  *run = a.run;
  ck->path = a.checkpoint;
  ck->every = !a.checkpoint.empty() && a.checkpoint_every == 0 ? 1 : a.checkpoint_every;
  ck->resume = a.resume;
  record->interface = "python";
}

/// The output guard of a run's checkpoint (runtime.hpp): never the input file (rank 0's
/// path, when `tensor` is one) nor the resume file, unless it continues it.
OutputGuard checkpoint_guard(const py::object& tensor, const CommonArgs& a);

/// The body of cp_als and tucker_hooi: the call's session and iteration hook, the checks
/// (`check`, run collectively), the input read, the run layer's options `o` filled from the
/// common arguments, and `call(o, world, arrays)` (run::run_cp, run::run_tucker) with the GIL
/// released; C++ errors become Python ones (translate). Returns what `call` returns.
template <typename T, typename Options, typename Check, typename Call>
auto run_decomposition(const py::object& tensor, Options& o, const CommonArgs& a,
                       const py::object& callback, std::uintptr_t comm_handle, Check&& check,
                       Call&& call) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  IterationHook hook(callback, world);
  decltype(call(o, world, static_cast<SparseTensor<T>*>(nullptr))) r;
  translate(&hook, world, [&] {
    comm::run_collectively(world, [&] { check(); });
    guard_output(checkpoint_guard(tensor, a), a.run.force, world);
    Source<T> src = read_source<T>(tensor, a.share, world);
    set_common(a, src, &o.load, &o.name, &o.run, &o.ckpt, &o.record);
    o.print_iterations = a.verbose;
    o.make_record = true;
    o.on_iteration = [&hook](int it, double fit, double delta) { hook(it, fit, delta); };
    py::gil_scoped_release nogil;
    r = call(o, world, src.is_path ? nullptr : &src.local);
  });
  return r;
}

/// Checks the arguments (InputError naming the option); call collectively.
void check_common(const CommonArgs& a);

// ---- matrices ----------------------------------------------------------------------------

/// A rows x cols matrix of finite numbers from any array-like `h` (InputError naming `what`).
Matrix<double> numpy_to_matrix(const py::handle& h, std::int64_t rows, int cols, const char* what);

}  // namespace tessera::python
