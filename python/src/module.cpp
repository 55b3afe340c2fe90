// _tessera: the Python binding of Tessera (docs/python.md). The pure-Python package
// `tessera` (python/tessera) turns the user's inputs into the dicts this module takes and
// its results into result classes.
//
// Every entry point is collective over the communicator it is given (MPI_COMM_WORLD by
// default): each rank calls it with the same options. Compute runs with the GIL released;
// the GIL is taken back at every iteration boundary to run the user's callback and to look
// for Ctrl-C (PyErr_CheckSignals), and the ranks agree on stopping, so every rank raises.
#include <mpi.h>
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "algo/contract.hpp"
#include "algo/cp_als.hpp"
#include "algo/tucker.hpp"
#include "checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "common.hpp"
#include "io/checkpoint.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"
#include "io/tns.hpp"
#include "kernels/factories.hpp"
#include "kernels/sptc.hpp"
#include "plan/measure.hpp"
#include "record.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace py = pybind11;

namespace tessera::python {
namespace {

// ---- MPI ---------------------------------------------------------------------------------

bool g_initialised_mpi = false;  // this module called MPI_Init_thread (so it finalises)

/// MPI initialised once (by mpi4py when imported first, else here, FUNNELED as the CLI).
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

/// The communicator of one call, with logging set for its rank count and verbosity (both
/// restored afterwards).
struct Session {
  comm::MpiCommunicator world;
  int old_verbosity;
  int old_threads;  // threads= sets OpenMP's count for the call only
  Session(std::uintptr_t handle, bool verbose)
      : world((ensure_mpi(), comm_from_handle(handle))),
        old_verbosity(log::verbosity()),
        old_threads(omp_get_max_threads()) {
    log::set_rank(world.rank(), world.size());
    log::set_verbosity(verbose ? 1 : 0);
  }
  ~Session() {
    log::set_verbosity(old_verbosity);
    omp_set_num_threads(old_threads);
  }
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
  void operator()(int iteration, double fit, double delta) {
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
  PendingPyError& pending() { return pending_; }

 private:
  py::object cb_;
  const comm::Communicator& world_;
  PendingPyError pending_;
};

/// Source location " [file.cpp:12]" that TESSERA_EXPECTS/TESSERA_THROW append: a bug or a
/// system failure, not bad input.
bool has_source_location(const std::string& m) {
  const auto open = m.rfind(" [");
  if (open == std::string::npos || m.empty() || m.back() != ']') return false;
  const auto colon = m.rfind(':');
  return colon != std::string::npos && colon > open;
}

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

// ---- inputs ------------------------------------------------------------------------------

/// Coordinate (k, m) of an integer array of any dtype and strides, as int64 (uint64 values
/// over 2^63 become negative and are refused as such, with their value printed as read).
struct CoordView {
  const char* base = nullptr;
  py::ssize_t s0 = 0, s1 = 0;  // strides of (nonzero, mode)
  char kind = 'i';
  int size = 8;
  std::int64_t get(py::ssize_t k, int m) const {
    const char* p = base + k * s0 + m * s1;
    if (kind == 'u') {
      switch (size) {
        case 1:
          return *reinterpret_cast<const std::uint8_t*>(p);
        case 2:
          return *reinterpret_cast<const std::uint16_t*>(p);
        case 4:
          return *reinterpret_cast<const std::uint32_t*>(p);
        default: {
          const std::uint64_t v = *reinterpret_cast<const std::uint64_t*>(p);
          return v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                     ? std::numeric_limits<std::int64_t>::max()
                     : static_cast<std::int64_t>(v);
        }
      }
    }
    switch (size) {
      case 1:
        return *reinterpret_cast<const std::int8_t*>(p);
      case 2:
        return *reinterpret_cast<const std::int16_t*>(p);
      case 4:
        return *reinterpret_cast<const std::int32_t*>(p);
      default:
        return *reinterpret_cast<const std::int64_t*>(p);
    }
  }
};

/// This rank's nonzeros from the dict {"coords", "values", "shape", "layout", "name"}
/// built by tessera/_inputs.py, checked with messages naming the field, the entry and the
/// fix (InputError). `layout`: "nnz_by_mode" (coords[k, m]) or "mode_by_nnz" (coords[m, k]).
/// Called with the GIL held (reads NumPy buffers in place; one copy into the library's
/// per-mode arrays, which partitioning needs anyway).
template <typename T>
SparseTensor<T> tensor_from_arrays(const py::dict& t) {
  const std::string name = py::cast<std::string>(t["name"]);
  auto shape = py::cast<std::vector<std::int64_t>>(t["shape"]);
  const int N = static_cast<int>(shape.size());
  TESSERA_INPUT_CHECK(N >= 1 && N <= kMaxOrder, name << ": shape has " << N
                                                     << " entries; expected an order from 1 to "
                                                     << kMaxOrder);
  std::vector<std::uint64_t> dims(static_cast<std::size_t>(N));
  for (int m = 0; m < N; ++m) {
    const std::int64_t d = shape[static_cast<std::size_t>(m)];
    TESSERA_INPUT_CHECK(
        d >= 1, name << ": shape[" << m << "] = " << d << ": every mode length must be at least 1");
    TESSERA_INPUT_CHECK(static_cast<std::uint64_t>(d) <= (std::uint64_t(1) << 32),
                        name << ": shape[" << m << "] = " << d
                             << " is over 2^32, the longest mode of 32-bit coordinates");
    dims[static_cast<std::size_t>(m)] = static_cast<std::uint64_t>(d);
  }
  py::array coords = py::reinterpret_borrow<py::array>(t["coords"]);
  py::array values = py::reinterpret_borrow<py::array>(t["values"]);
  const bool by_nnz = py::cast<std::string>(t["layout"]) == "nnz_by_mode";
  // dtype facts through Python attributes: pybind11 before 2.12 reads NumPy 2's descriptor
  // layout wrongly (itemsize), and both NumPy 1 and 2 must work.
  auto kind_of = [](const py::array& a) {
    return py::cast<std::string>(a.attr("dtype").attr("kind")).at(0);
  };
  const char ck = kind_of(coords);
  TESSERA_INPUT_CHECK(ck == 'i' || ck == 'u',
                      name << ": coords must be an integer array, got dtype "
                           << py::cast<std::string>(py::str(coords.dtype())));
  TESSERA_INPUT_CHECK(coords.ndim() == 2,
                      name << ": coords must be 2-D, got " << coords.ndim() << " dimension(s)");
  const py::ssize_t nnz = values.ndim() == 1 ? values.shape(0) : -1;
  TESSERA_INPUT_CHECK(values.ndim() == 1,
                      name << ": values must be 1-D, got " << values.ndim() << " dimension(s)");
  const py::ssize_t rows = by_nnz ? coords.shape(0) : coords.shape(1);
  const py::ssize_t cols = by_nnz ? coords.shape(1) : coords.shape(0);
  TESSERA_INPUT_CHECK(cols == N, name << ": coords has " << cols
                                      << " coordinate(s) per nonzero but shape has " << N
                                      << " modes (coords is (nnz, N) or (N, nnz))");
  TESSERA_INPUT_CHECK(rows == nnz,
                      name << ": coords has " << rows << " nonzero(s) but values has " << nnz);
  CoordView cv;
  cv.base = static_cast<const char*>(coords.data());
  cv.s0 = by_nnz ? coords.strides(0) : coords.strides(1);
  cv.s1 = by_nnz ? coords.strides(1) : coords.strides(0);
  cv.kind = ck;
  cv.size = py::cast<int>(coords.attr("itemsize"));
  const char vk = kind_of(values);
  TESSERA_INPUT_CHECK(vk == 'f' || vk == 'i' || vk == 'u' || vk == 'b',
                      name << ": values must be real numbers, got dtype "
                           << py::cast<std::string>(py::str(values.dtype())));
  // Values as float64 (a NumPy cast only when they are not already float64).
  py::array_t<double, py::array::forcecast> v64(values);
  const double* vp = v64.data();
  const py::ssize_t vs = v64.strides(0) / static_cast<py::ssize_t>(sizeof(double));

  SparseTensor<T> x(dims);
  for (int m = 0; m < N; ++m)
    x.idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(nnz));
  x.vals.resize(static_cast<std::size_t>(nnz));
  const char* cname = by_nnz ? "coords[%lld, %d]" : "coords[%d, %lld]";
  auto at = [&](py::ssize_t k, int m) {
    char b[96];
    if (by_nnz)
      std::snprintf(b, sizeof(b), cname, static_cast<long long>(k), m);
    else
      std::snprintf(b, sizeof(b), cname, m, static_cast<long long>(k));
    return std::string(b);
  };
  for (py::ssize_t k = 0; k < nnz; ++k) {
    for (int m = 0; m < N; ++m) {
      const std::int64_t c = cv.get(k, m);
      TESSERA_INPUT_CHECK(c >= 0, name << ": " << at(k, m) << " = " << c
                                       << " is negative: coordinates are 0-based, 0 to shape[" << m
                                       << "] - 1");
      TESSERA_INPUT_CHECK(static_cast<std::uint64_t>(c) < dims[static_cast<std::size_t>(m)],
                          name << ": " << at(k, m) << " = " << c << " is out of range for mode "
                               << m << " of length " << dims[static_cast<std::size_t>(m)]
                               << " (coordinates are 0-based)");
      x.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] = static_cast<index_t>(c);
    }
    const double v = vp[k * vs];
    TESSERA_INPUT_CHECK(std::isfinite(v),
                        name << ": values[" << k << "] = " << v << " is not a finite number");
    if constexpr (std::is_same_v<T, float>) {
      TESSERA_INPUT_CHECK(
          std::abs(v) <= std::numeric_limits<float>::max() &&
              (v == 0 || static_cast<float>(v) != 0.0f),
          name << ": values[" << k << "] = " << v
               << " is not representable in single precision; use precision=\"double\"");
    }
    x.vals[static_cast<std::size_t>(k)] = static_cast<T>(v);
  }
  return x;
}

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
/// `t` is None on ranks without data (rank-0 input).
template <typename T>
Source<T> read_source(const py::object& t, bool share, const comm::MpiCommunicator& world) {
  Source<T> s;
  s.share = share;
  // Kind and path on rank 0 decide (a path must be given on every rank alike).
  std::int32_t kind = -1;  // 0 path, 1 arrays, -1 none
  comm::run_collectively(world, [&] {
    if (t.is_none()) return;
    py::dict d = py::reinterpret_borrow<py::dict>(t);
    if (d.contains("path")) {
      kind = 0;
      s.path = py::cast<std::string>(d["path"]);
    } else {
      kind = 1;
    }
  });
  std::int32_t k0 = kind;
  world.broadcast(&k0, 1, 0);
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(k0 != -1,
                        "no input on rank 0: pass the tensor on rank 0 (other ranks may "
                        "pass None), or every rank's share with distributed=\"share\"");
    if (k0 == 0)
      TESSERA_INPUT_CHECK(kind == 0,
                          "the input is a file on rank 0: pass the same path on every rank");
    if (share && k0 == 1)
      TESSERA_INPUT_CHECK(kind == 1, "distributed=\"share\": rank "
                                         << world.rank()
                                         << " passed no tensor; every rank passes its share "
                                            "(an empty one where it has no nonzeros)");
  });
  if (k0 == 0) {
    s.is_path = true;
    std::int64_t len = static_cast<std::int64_t>(s.path.size());
    world.broadcast(&len, 1, 0);
    std::string p0 = s.path;
    p0.resize(static_cast<std::size_t>(len));
    world.broadcast(p0.data(), p0.size(), 0);
    comm::run_collectively(world, [&] {
      TESSERA_INPUT_CHECK(p0 == s.path, "the input is '" << p0 << "' on rank 0 but '" << s.path
                                                         << "' here: pass one path on every rank");
    });
    s.name = s.path;
    return s;
  }
  const bool mine = share || world.rank() == 0;
  comm::run_collectively(world, [&] {
    if (mine && !t.is_none()) {
      py::dict d = py::reinterpret_borrow<py::dict>(t);
      s.name = py::cast<std::string>(d["name"]);
      s.local = tensor_from_arrays<T>(d);
    }
  });
  // dims: rank 0's, checked against every share.
  std::int32_t N = static_cast<std::int32_t>(s.local.dims.size());
  world.broadcast(&N, 1, 0);
  std::vector<std::uint64_t> dims0 = s.local.dims;
  dims0.resize(static_cast<std::size_t>(N));
  world.broadcast(dims0.data(), dims0.size(), 0);
  comm::run_collectively(world, [&] {
    if (share)
      TESSERA_INPUT_CHECK(s.local.dims == dims0, "distributed=\"share\": rank "
                                                     << world.rank() << " has shape "
                                                     << format_dims(s.local.dims)
                                                     << " but rank 0 has " << format_dims(dims0)
                                                     << "; every share has the global shape");
  });
  if (!mine) s.local = SparseTensor<T>(dims0);
  if (s.name.empty()) s.name = "X";
  return s;
}

// ---- results -----------------------------------------------------------------------------

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

Matrix<double> numpy_to_matrix(const py::handle& h, std::int64_t rows, int cols, const char* what) {
  py::array_t<double, py::array::forcecast | py::array::c_style> a =
      py::array_t<double, py::array::forcecast | py::array::c_style>::ensure(h);
  TESSERA_INPUT_CHECK(a && a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == cols,
                      what << ": expected a " << rows << " x " << cols << " array of numbers");
  Matrix<double> m(rows, cols);
  std::copy(a.data(), a.data() + rows * cols, m.data.begin());
  for (double v : m.data) TESSERA_INPUT_CHECK(std::isfinite(v), what << ": not finite: " << v);
  return m;
}

/// The run record: the versioned envelope of drivers/record.hpp (collective), marked as
/// coming from Python; the callers add what the CLI's --json adds for the command.
nlohmann::json record_base(const std::string& command, const nlohmann::json& opts,
                           const comm::Communicator& world, const std::string& backend,
                           int threads) {
  nlohmann::json j = driver::record_envelope(command, opts, world, backend, threads);
  j["interface"] = "python";
  return j;
}

// ---- CP-ALS ------------------------------------------------------------------------------

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
};

driver::ComputeOptions compute_options(const CommonArgs& a) {
  driver::ComputeOptions c;
  c.backend = a.backend;
  c.precision = a.precision;
  c.threads = a.threads;
  c.strategy = a.strategy;
  return c;
}

void check_common(const CommonArgs& a) {
  TESSERA_INPUT_CHECK(
      a.backend == "auto" || a.backend == "reference" || a.backend == "cpu" || a.backend == "cuda",
      "backend=\"" << a.backend << "\": expected auto, reference, cpu or cuda");
  TESSERA_INPUT_CHECK(a.precision == "double" || a.precision == "float",
                      "precision=\"" << a.precision << "\": expected double or float");
  TESSERA_INPUT_CHECK(a.threads >= 0, "threads=" << a.threads << ": expected >= 0 (0: OpenMP's)");
  TESSERA_INPUT_CHECK(a.strategy == "allreduce" || a.strategy == "layer",
                      "comm_strategy=\"" << a.strategy << "\": expected allreduce or layer");
  TESSERA_INPUT_CHECK(a.checkpoint_every >= 0,
                      "checkpoint_every=" << a.checkpoint_every << ": expected >= 0");
  io::parse_index_base(a.index_base);
}

/// Loads the input of cp/tucker as the CLI does (driver::load_input) for files, or
/// distributes the arrays (tier 1).
template <typename T>
driver::Input<T> load(Source<T>& src, const CommonArgs& a, partition::Scheme scheme, bool allreduce,
                      driver::Compute<T>& cx, const driver::PlanContext& pc,
                      const comm::MpiCommunicator& world, driver::Loaded* li) {
  if (src.is_path) {
    driver::LoadOptions lo;
    lo.path = src.path;
    lo.index_base = a.index_base;
    return driver::load_input<T>(lo, compute_options(a), scheme, allreduce, cx, pc, world, li);
  }
  driver::Input<T> in;
  in.dist.emplace(partition::distribute(std::move(src.local), scheme, {}, world));
  const auto& dd = in.dist->dist;
  in.dims = dd.dims;
  in.global_nnz = dd.global_nnz;
  in.duplicates = dd.duplicates;
  in.grid = dd.grid;
  in.imbalance = dd.imbalance;
  in.min_block_nnz = dd.min_block_nnz;
  in.max_block_nnz = dd.max_block_nnz;
  in.partition_scheme = partition::to_string(dd.scheme);
  return in;
}

template <typename T>
py::dict run_cp(const py::object& tensor, int rank, int iters, double tol, std::uint64_t seed,
                const py::object& init, const CommonArgs& a, const py::object& callback,
                std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  IterationHook hook(callback, world);
  Timer total;
  algo::CpResult res;
  driver::Input<T> in;
  driver::Loaded li;
  nlohmann::json opts;
  std::string kind_name;
  std::string ckpt_path;
  translate(&hook, world, [&] {
    comm::run_collectively(world, [&] {
      check_common(a);
      TESSERA_INPUT_CHECK(rank >= 1 && rank <= 4096, "rank=" << rank << ": expected 1 to 4096");
      TESSERA_INPUT_CHECK(iters >= 1, "iters=" << iters << ": expected >= 1");
      TESSERA_INPUT_CHECK(tol >= 0 && std::isfinite(tol), "tol=" << tol << ": expected >= 0");
    });
    Source<T> src = read_source<T>(tensor, a.share, world);
    const auto strategy = algo::parse_comm_strategy(a.strategy);
    const partition::Scheme scheme =
        strategy == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
    driver::CheckpointArgs ck;
    ck.path = a.checkpoint;
    ck.every = !a.checkpoint.empty() && a.checkpoint_every == 0 ? 1 : a.checkpoint_every;
    ck.resume = a.resume;
    ckpt_path = driver::check_model_outputs(src.is_path ? src.path : std::string(), ck, "", "",
                                            false, world);
    std::optional<driver::Compute<T>> cx;
    algo::CpState resumed;
    algo::CpOptions o;
    {
      py::gil_scoped_release nogil;
      cx.emplace(driver::make_compute<T>(compute_options(a), world));
      kind_name = kernels::to_string(cx->kind);
      driver::PlanContext pc;
      pc.workload = plan::Workload::cp;
      pc.cp_rank = rank;
      in = load<T>(src, a, scheme, strategy == algo::CommStrategy::allreduce, *cx, pc, world, &li);
    }
    o.rank = rank;
    o.tensor_name = src.name;
    o.max_iters = iters;
    o.tol = tol;
    o.seed = seed;
    o.strategy = strategy;
    o.print_iterations = a.verbose;
    opts = {{"file", src.is_path ? src.path : src.name},
            {"rank", rank},
            {"iters", iters},
            {"tol", tol},
            {"seed", seed},
            {"comm_strategy", a.strategy},
            {"partition", in.partition_scheme},
            {"grid", in.grid},
            {"relabel", false},
            {"backend", kind_name},
            {"precision", a.precision},
            {"index_base", a.index_base}};
    if (ck.every > 0) opts["checkpoint_every"] = ck.every;
    if (!a.resume.empty()) opts["resumed_from"] = a.resume;
    io::TensorFingerprint fingerprint;
    if (!ckpt_path.empty() || !a.resume.empty()) fingerprint = in.fingerprint(world);
    if (!a.resume.empty()) {
      io::ResumeCheck now;
      now.input = fingerprint;
      now.precision = a.precision;
      now.options_json = opts.dump();
      now.must_match = {"rank"};
      now.ignore = {"file", "checkpoint_every", "resumed_from"};
      const io::CheckpointInfo info = driver::resume_from(
          a.resume, now, iters,
          [&](io::CheckpointInfo* i) { resumed.model = io::read_cp_checkpoint(a.resume, i); },
          world);
      driver::restore_progress(info, &resumed);
      o.resume = &resumed;
    } else if (!init.is_none() && !py::isinstance<py::str>(init)) {
      // Initial factors given: the state "after iteration 0" (lambda 1).
      py::sequence fs = py::reinterpret_borrow<py::sequence>(init);
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(
            static_cast<std::size_t>(py::len(fs)) == in.dims.size(),
            "init: " << py::len(fs) << " factor(s) for a tensor of order " << in.dims.size());
        resumed.model.dims = in.dims;
        resumed.model.rank = rank;
        resumed.model.lambda.assign(static_cast<std::size_t>(rank), 1.0);
        for (std::size_t n = 0; n < in.dims.size(); ++n) {
          const std::string what = "init[" + std::to_string(n) + "]";
          resumed.model.factors.push_back(
              numpy_to_matrix(fs[n], static_cast<std::int64_t>(in.dims[n]), rank, what.c_str()));
        }
      });
      o.resume = &resumed;
    } else {
      comm::run_collectively(world, [&] {
        const std::string s = init.is_none() ? "random" : py::cast<std::string>(init);
        TESSERA_INPUT_CHECK(s == "random", "init=\"" << s
                                                     << "\": expected \"random\" or a list of "
                                                        "initial factor arrays");
      });
    }
    o.state_every = 1;  // the hook runs after every iteration (checkpoints every K-th)
    o.on_iteration = [&](const algo::CpState& s) {
      if (!ckpt_path.empty() && s.iteration % ck.every == 0)
        driver::after_iteration(
            ckpt_path, ck.every, s.iteration,
            [&] {
              io::write_cp_checkpoint(
                  ckpt_path, s.model,
                  driver::checkpoint_info(s, a.precision, fingerprint, opts.dump()));
            },
            world);
      const double f = s.fit_history.empty() ? 0.0 : s.fit_history.back();
      const double prev = s.fit_history.size() > 1 ? s.fit_history[s.fit_history.size() - 2] : 0.0;
      hook(s.iteration, f, f - prev);
    };
    {
      py::gil_scoped_release nogil;
      if (in.streamed()) {
        algo::StreamingBackend<T> streaming(*cx->backend);
        res = algo::cp_als<T>(*in.tensor(), in.dims, in.global_nnz, streaming, world, *cx->data, o);
      } else if (in.handle) {
        res =
            algo::cp_als<T>(*in.handle, in.dims, in.global_nnz, *cx->backend, world, *cx->data, o);
      } else {
        res = algo::cp_als<T>(*in.dist, *cx->backend, world, *cx->data, o);
      }
    }
  });

  nlohmann::json j = record_base("cp", opts, world, kind_name, a.threads);
  j["tensor"] = {{"dims", in.dims}, {"nnz", in.global_nnz}, {"duplicates_summed", in.duplicates}};
  j["partition"] = {{"scheme", in.partition_scheme},
                    {"grid", in.grid},
                    {"imbalance", in.imbalance},
                    {"min_block_nnz", in.min_block_nnz},
                    {"max_block_nnz", in.max_block_nnz}};
  j["fit"] = res.fit;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["solve_fallbacks"] = res.solve_fallbacks;
  j["memory_tier"] = {{"tier", res.tier}, {"description", res.tier_description}};
  if (!ckpt_path.empty()) j["checkpoint"] = ckpt_path;
  py::list hist;
  nlohmann::json its = nlohmann::json::array();
  for (const auto& h : res.history) {
    py::dict d;
    d["iter"] = h.iter;
    d["fit"] = h.fit;
    d["delta"] = h.delta;
    d["seconds"] = h.seconds;
    d["kernel"] = h.kernel;
    d["comm"] = h.comm;
    d["solve"] = h.solve;
    hist.append(d);
    its.push_back({{"iter", h.iter},
                   {"fit", h.fit},
                   {"delta", h.delta},
                   {"seconds", h.seconds},
                   {"kernel", h.kernel},
                   {"comm", h.comm},
                   {"solve", h.solve}});
  }
  j["per_iteration"] = its;
  j["phases_seconds"] = {{"io", li.read_seconds},
                         {"partition", li.distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"kernel", res.phases.get("kernel")},
                         {"comm", res.phases.get("comm")},
                         {"solve", res.phases.get("solve")},
                         {"total", total.seconds()}};
  py::dict out;
  out["weights"] = vector_to_numpy(res.model.lambda);
  py::list factors;
  for (const auto& f : res.model.factors) factors.append(matrix_to_numpy(f));
  out["factors"] = factors;
  out["fit"] = res.fit;
  out["iterations"] = res.iterations;
  out["converged"] = res.converged;
  out["history"] = hist;
  out["record_json"] = j.dump();
  return out;
}

// ---- Tucker-HOOI -------------------------------------------------------------------------

template <typename T>
py::dict run_tucker(const py::object& tensor, const py::object& ranks_obj, int iters, double tol,
                    std::uint64_t seed, const std::string& init, const std::string& svd,
                    int subspace_steps, const std::string& max_mem, const CommonArgs& a,
                    const py::object& callback, std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  IterationHook hook(callback, world);
  Timer total;
  algo::TuckerResult res;
  driver::Input<T> in;
  driver::Loaded li;
  nlohmann::json opts;
  std::string kind_name;
  std::string ckpt_path;
  std::string ranks_text;
  if (py::isinstance<py::int_>(ranks_obj)) {
    ranks_text = std::to_string(py::cast<long long>(ranks_obj));
  } else if (py::isinstance<py::str>(ranks_obj)) {
    ranks_text = py::cast<std::string>(ranks_obj);
  } else {
    for (auto r : py::reinterpret_borrow<py::sequence>(ranks_obj))
      ranks_text += (ranks_text.empty() ? "" : ",") + py::cast<std::string>(py::str(r));
  }
  translate(&hook, world, [&] {
    algo::TuckerOptions o;
    comm::run_collectively(world, [&] {
      check_common(a);
      TESSERA_INPUT_CHECK(iters >= 1, "iters=" << iters << ": expected >= 1");
      TESSERA_INPUT_CHECK(tol >= 0 && std::isfinite(tol), "tol=" << tol << ": expected >= 0");
      TESSERA_INPUT_CHECK(subspace_steps >= 1,
                          "subspace_steps=" << subspace_steps << ": expected >= 1");
      o.svd = algo::parse_svd_method(svd);
      o.init = algo::parse_tucker_init(init);
      TESSERA_INPUT_CHECK(o.svd != algo::SvdMethod::scalapack || algo::scalapack_available(),
                          "svd=\"scalapack\": this tessera was built without ScaLAPACK; use "
                          "svd=\"gram\" or \"subspace\"");
      if (!max_mem.empty()) o.memory_limit = driver::parse_bytes(max_mem, "max_mem");
    });
    if (max_mem.empty()) o.memory_limit = driver::default_memory_limit(world);
    Source<T> src = read_source<T>(tensor, a.share, world);
    driver::CheckpointArgs ck;
    ck.path = a.checkpoint;
    ck.every = !a.checkpoint.empty() && a.checkpoint_every == 0 ? 1 : a.checkpoint_every;
    ck.resume = a.resume;
    ckpt_path = driver::check_model_outputs(src.is_path ? src.path : std::string(), ck, "", "",
                                            false, world);
    std::optional<driver::Compute<T>> cx;
    {
      py::gil_scoped_release nogil;
      cx.emplace(driver::make_compute<T>(compute_options(a), world));
      kind_name = kernels::to_string(cx->kind);
      driver::PlanContext pc;
      pc.workload = plan::Workload::tucker;
      pc.tucker_ranks = driver::rank_list(ranks_text);
      in = load<T>(src, a, partition::Scheme::nnz, true, *cx, pc, world, &li);
    }
    const int N = static_cast<int>(in.dims.size());
    comm::run_collectively(world, [&] {
      o.ranks = algo::parse_ranks(ranks_text, N);
      algo::check_tucker_ranks(in.dims, o.ranks);
    });
    o.max_iters = iters;
    o.tol = tol;
    o.seed = seed;
    o.tensor_name = src.name;
    o.subspace_steps = subspace_steps;
    o.print_iterations = a.verbose;
    opts = {{"file", src.is_path ? src.path : src.name},
            {"ranks", o.ranks},
            {"svd", svd},
            {"init", init},
            {"iters", iters},
            {"tol", tol},
            {"seed", seed},
            {"subspace_steps", subspace_steps},
            {"max_mem_bytes", o.memory_limit},
            {"partition", in.partition_scheme},
            {"grid", in.grid},
            {"relabel", false},
            {"backend", kind_name},
            {"precision", a.precision},
            {"index_base", a.index_base}};
    if (ck.every > 0) opts["checkpoint_every"] = ck.every;
    if (!a.resume.empty()) opts["resumed_from"] = a.resume;
    io::TensorFingerprint fingerprint;
    if (!ckpt_path.empty() || !a.resume.empty()) fingerprint = in.fingerprint(world);
    algo::TuckerState resumed;
    if (!a.resume.empty()) {
      io::ResumeCheck now;
      now.input = fingerprint;
      now.precision = a.precision;
      now.options_json = opts.dump();
      now.must_match = {"ranks", "svd", "seed"};
      if (o.svd == algo::SvdMethod::subspace) now.must_match.push_back("subspace_steps");
      now.ignore = {"file", "max_mem_bytes", "checkpoint_every", "resumed_from"};
      const io::CheckpointInfo info = driver::resume_from(
          a.resume, now, iters,
          [&](io::CheckpointInfo* i) { resumed.model = io::read_tucker_checkpoint(a.resume, i); },
          world);
      driver::restore_progress(info, &resumed);
      o.resume = &resumed;
    }
    o.state_every = 1;
    o.on_iteration = [&](const algo::TuckerState& s) {
      if (!ckpt_path.empty() && s.iteration % ck.every == 0)
        driver::after_iteration(
            ckpt_path, ck.every, s.iteration,
            [&] {
              io::write_tucker_checkpoint(
                  ckpt_path, s.model,
                  driver::checkpoint_info(s, a.precision, fingerprint, opts.dump()));
            },
            world);
      const double f = s.fit_history.empty() ? 0.0 : s.fit_history.back();
      const double prev = s.fit_history.size() > 1 ? s.fit_history[s.fit_history.size() - 2] : 0.0;
      hook(s.iteration, f, f - prev);
    };
    py::gil_scoped_release nogil;
    if (in.streamed()) {
      algo::StreamingBackend<T> streaming(*cx->backend);
      std::unique_ptr<kernels::TensorHandle<T>> h;
      if (in.disk)
        h = std::move(in.disk);
      else
        h = std::move(in.handle);
      res = algo::tucker_hooi<T>(std::move(h), in.dims, streaming, world, o, cx->data);
    } else if (in.handle) {
      res = algo::tucker_hooi<T>(std::move(in.handle), in.dims, *cx->backend, world, o, cx->data);
    } else {
      res = algo::tucker_hooi<T>(*in.dist, *cx->backend, world, o, cx->data);
    }
  });

  nlohmann::json j = record_base("tucker", opts, world, kind_name, a.threads);
  j["tensor"] = {{"dims", in.dims}, {"nnz", in.global_nnz}, {"duplicates_summed", in.duplicates}};
  j["fit"] = res.fit;
  j["iterations"] = res.iterations;
  j["converged"] = res.converged;
  j["core_norm"] = res.core_norm;
  j["completed_columns"] = res.completed_columns;
  j["memory_tier"] = {{"tier", res.tier}, {"description", res.tier_description}};
  py::list hist;
  nlohmann::json its = nlohmann::json::array();
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
    its.push_back({{"iter", h.iter},
                   {"fit", h.fit},
                   {"delta", h.delta},
                   {"seconds", h.seconds},
                   {"ttmc", h.ttmc},
                   {"comm", h.comm},
                   {"svd", h.svd},
                   {"core_norm", h.core_norm}});
  }
  j["per_iteration"] = its;
  j["phases_seconds"] = {{"io", li.read_seconds},
                         {"partition", li.distribute_seconds},
                         {"setup", res.phases.get("setup")},
                         {"init", res.phases.get("init")},
                         {"ttmc", res.phases.get("ttmc")},
                         {"comm", res.phases.get("comm")},
                         {"svd", res.phases.get("svd")},
                         {"total", total.seconds()}};
  py::dict out;
  std::vector<py::ssize_t> core_shape(res.model.ranks.begin(), res.model.ranks.end());
  py::array_t<double> core(core_shape);
  std::copy(res.model.core.begin(), res.model.core.end(), core.mutable_data());
  out["core"] = core;
  py::list factors;
  for (const auto& f : res.model.factors) factors.append(matrix_to_numpy(f));
  out["factors"] = factors;
  out["fit"] = res.fit;
  out["iterations"] = res.iterations;
  out["converged"] = res.converged;
  out["history"] = hist;
  out["record_json"] = j.dump();
  return out;
}

// ---- contraction -------------------------------------------------------------------------

/// This rank's share of one contraction input: a file read collectively (as `tessera
/// contract` reads it) or the arrays.
template <typename T>
SparseTensor<T> contract_input(Source<T>& s, const std::string& index_base,
                               const comm::MpiCommunicator& world, nnz_t* global_nnz) {
  if (!s.is_path) {
    nnz_t n = s.local.nnz();
    world.allreduce(&n, 1);
    *global_nnz = n;
    return std::move(s.local);
  }
  io::TnsReadResult rr;
  if (io::is_tensor_store(s.path, world)) {
    io::H5ReadOptions ho;
    ho.float_values = std::is_same_v<T, float>;
    rr = io::read_h5(s.path, world, ho);
  } else {
    io::TnsReadOptions ro;
    ro.base = io::parse_index_base(index_base);
    ro.float_values = std::is_same_v<T, float>;
    rr = io::read_tns(s.path, world, ro);
  }
  *global_nnz = rr.global_nnz;
  if constexpr (std::is_same_v<T, double>) {
    return std::move(rr.local);
  } else {
    return rr.local.template cast<T>();
  }
}

template <typename T>
py::dict run_contract(const py::object& x, const py::object& y, bool same,
                      const std::string& einsum, bool extend_dims, const std::string& mem_limit,
                      const CommonArgs& a, std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  Timer total;
  SparseTensor<T> z;
  std::vector<std::uint64_t> zdims;
  nlohmann::json j;
  translate(nullptr, world, [&] {
    kernels::ContractSpec spec;
    algo::ContractOptions o;
    o.print = a.verbose;
    comm::run_collectively(world, [&] {
      check_common(a);
      spec = kernels::parse_contract_spec(einsum);
      if (!mem_limit.empty()) o.memory_limit = driver::parse_bytes(mem_limit, "mem_limit");
    });
    Source<T> sx = read_source<T>(x, a.share, world);
    std::optional<Source<T>> sy;
    if (!same) sy.emplace(read_source<T>(y, a.share, world));
    for (Source<T>* s : {&sx, sy ? &*sy : nullptr}) {
      if (s == nullptr || !s->is_path) continue;
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(std::filesystem::is_regular_file(s->path),
                            "'" << s->path << "' does not exist or is not a file");
      });
    }
    const plan::Limits lim = plan::measure_limits(
        world,
        kernels::parse_backend(a.backend) == kernels::BackendKind::cuda ? plan::Backend::cuda
                                                                        : plan::Backend::cpu,
        "");
    if (mem_limit.empty()) {
      o.memory_limit = static_cast<std::size_t>(lim.host.bytes);
      o.memory_limit_source = lim.host.source;
    } else {
      o.memory_limit_source = "mem_limit " + mem_limit;
    }
    if (lim.device.known()) {
      o.device_limit = static_cast<std::size_t>(lim.device.bytes);
      o.device_limit_source = lim.device.source;
    }
    py::gil_scoped_release nogil;
    auto cx = driver::make_compute<T>(compute_options(a), world);
    o.data = cx.data;
    nnz_t nx = 0, ny = 0;
    SparseTensor<T> X = contract_input(sx, a.index_base, world, &nx);
    SparseTensor<T> Y;
    if (sy) Y = contract_input(*sy, a.index_base, world, &ny);
    SparseTensor<T>& Yr = same ? X : Y;
    comm::run_collectively(world, [&] {
      if (extend_dims) {
        auto xd = X.dims, yd = Yr.dims;
        kernels::extend_matched_dims(spec, xd, yd, same);
        X.dims = xd;
        Yr.dims = yd;
      }
      zdims = kernels::contract_output_dims(spec, X.dims, Yr.dims);
    });
    algo::ContractResult<T> res = algo::contract<T>(X, Yr, spec, *cx.backend, world, o);
    // Result on every rank: gathered on rank 0 (sorted, summed), then broadcast.
    z = algo::gather(res.local, world, 0);
    std::int64_t n = z.nnz();
    world.broadcast(&n, 1, 0);
    if (world.rank() != 0) {
      z = SparseTensor<T>(zdims);
      for (auto& c : z.idx) c.resize(static_cast<std::size_t>(n));
      z.vals.resize(static_cast<std::size_t>(n));
    }
    for (auto& c : z.idx) world.broadcast(c.data(), c.size(), 0);
    world.broadcast(z.vals.data(), z.vals.size(), 0);
    z.dims = zdims;
    j = record_base("contract",
                    {{"x", sx.name},
                     {"y", same ? sx.name : sy->name},
                     {"einsum", spec.text},
                     {"backend", kernels::to_string(cx.kind)},
                     {"precision", a.precision},
                     {"index_base", a.index_base},
                     {"extend_dims", extend_dims},
                     {"memory_limit_bytes", o.memory_limit}},
                    world, kernels::to_string(cx.kind), a.threads);
    j["inputs"] = {{"x", {{"dims", X.dims}, {"nnz", nx}}},
                   {"y", {{"dims", Yr.dims}, {"nnz", same ? nx : ny}}},
                   {"self_contraction", same}};
    j["output"] = {{"dims", zdims}, {"nnz", res.global_nnz}};
    j["products"] = res.global_products;
    j["zeros_dropped"] = res.global_zeros_dropped;
    j["pieces"] = res.pieces;
    nlohmann::json ph;
    for (const char* p : {"route_inputs", "plan", "multiply", "route_output", "merge"})
      ph[p] = res.phases.get(p);
    ph["total"] = total.seconds();
    j["phases_seconds"] = ph;
  });
  const int N = static_cast<int>(zdims.size());
  py::array_t<std::int64_t> coords(
      {static_cast<py::ssize_t>(z.nnz()), static_cast<py::ssize_t>(N)});
  auto c = coords.mutable_unchecked<2>();
  for (nnz_t k = 0; k < z.nnz(); ++k)
    for (int m = 0; m < N; ++m)
      c(k, m) = static_cast<std::int64_t>(
          z.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)]);
  py::array_t<double> vals(static_cast<py::ssize_t>(z.nnz()));
  std::copy(z.vals.begin(), z.vals.end(), vals.mutable_data());
  py::dict out;
  out["coords"] = coords;
  out["values"] = vals;
  out["shape"] = py::tuple(py::cast(zdims));
  out["record_json"] = j.dump();
  return out;
}

// ---- files -------------------------------------------------------------------------------

py::dict read_tensor(const std::string& path, const std::string& index_base) {
  ensure_mpi();
  comm::MpiCommunicator self(MPI_COMM_SELF);
  io::TnsReadResult rr;
  const int old = log::verbosity();
  log::set_verbosity(0);
  translate(nullptr, self, [&] {
    TESSERA_INPUT_CHECK(std::filesystem::exists(path),
                        "cannot open '" << path << "': no such file");
    py::gil_scoped_release nogil;
    if (io::is_tensor_store(path, self)) {
      io::H5ReadOptions ho;
      ho.progress = false;
      rr = io::read_h5(path, self, ho);
    } else {
      io::TnsReadOptions ro;
      ro.base = io::parse_index_base(index_base);
      ro.progress = false;
      rr = io::read_tns(path, self, ro);
    }
  });
  log::set_verbosity(old);
  const SparseTensor<double>& x = rr.local;
  const int N = x.order();
  py::array_t<std::int64_t> coords(
      {static_cast<py::ssize_t>(x.nnz()), static_cast<py::ssize_t>(N)});
  auto c = coords.mutable_unchecked<2>();
  for (nnz_t k = 0; k < x.nnz(); ++k)
    for (int m = 0; m < N; ++m)
      c(k, m) = static_cast<std::int64_t>(
          x.idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)]);
  py::dict out;
  out["coords"] = coords;
  out["values"] = vector_to_numpy(x.vals);
  out["shape"] = py::tuple(py::cast(x.dims));
  return out;
}

/// {"kind": "cp"|"tucker", ...} from a model file of io/model_io.
py::dict load_model(const std::string& path) {
  ensure_mpi();
  comm::MpiCommunicator self(MPI_COMM_SELF);
  py::dict out;
  io::ModelRecord rec;
  std::optional<KruskalModel> km;
  std::optional<TuckerModel> tm;
  translate(nullptr, self, [&] {
    TESSERA_INPUT_CHECK(std::filesystem::exists(path),
                        "cannot open '" << path << "': no such file");
    try {
      km = io::read_kruskal_h5(path, &rec);
    } catch (const InputError& first) {
      try {
        tm = io::read_tucker_h5(path, &rec);
      } catch (const InputError&) {
        throw InputError(std::string(first.what()) +
                         " (nor is it a Tucker model: expected format tessera-kruskal or "
                         "tessera-tucker)");
      }
    }
  });
  if (km) {
    out["kind"] = "cp";
    out["weights"] = vector_to_numpy(km->lambda);
    py::list f;
    for (const auto& m : km->factors) f.append(matrix_to_numpy(m));
    out["factors"] = f;
  } else {
    out["kind"] = "tucker";
    std::vector<py::ssize_t> shape(tm->ranks.begin(), tm->ranks.end());
    py::array_t<double> core(shape);
    std::copy(tm->core.begin(), tm->core.end(), core.mutable_data());
    out["core"] = core;
    py::list f;
    for (const auto& m : tm->factors) f.append(matrix_to_numpy(m));
    out["factors"] = f;
  }
  out["fit"] = rec.fit;
  out["iterations"] = rec.iterations;
  out["fit_history"] = rec.fit_history;
  out["options_json"] = rec.options_json;
  return out;
}

/// Writes a model file on rank 0 of the communicator (others wait), as `--out` does.
void save_model(const py::dict& m, const std::string& path, std::uintptr_t comm_handle) {
  Session ss(comm_handle, false);
  const comm::MpiCommunicator& world = ss.world;
  translate(nullptr, world, [&] {
    comm::run_collectively(world, [&] {
      if (world.rank() != 0) return;
      io::ModelRecord rec;
      rec.fit = py::cast<double>(m["fit"]);
      rec.iterations = py::cast<int>(m["iterations"]);
      rec.fit_history = py::cast<std::vector<double>>(m["fit_history"]);
      rec.options_json = py::cast<std::string>(m["options_json"]);
      py::list fs = py::reinterpret_borrow<py::list>(m["factors"]);
      std::vector<std::uint64_t> dims;
      std::vector<Matrix<double>> factors;
      const std::string kind = py::cast<std::string>(m["kind"]);
      std::vector<int> cols;
      if (kind == "cp") {
        py::array_t<double> w = py::array_t<double, py::array::forcecast>::ensure(m["weights"]);
        TESSERA_INPUT_CHECK(w && w.ndim() == 1, "save_model: weights must be a 1-D array");
        KruskalModel km;
        km.rank = static_cast<int>(w.shape(0));
        km.lambda.assign(w.data(), w.data() + w.shape(0));
        for (std::size_t n = 0; n < fs.size(); ++n) {
          py::array a = py::reinterpret_borrow<py::array>(fs[n]);
          TESSERA_INPUT_CHECK(a.ndim() == 2, "save_model: factors[" << n << "] must be 2-D");
          km.dims.push_back(static_cast<std::uint64_t>(a.shape(0)));
          const std::string what = "save_model: factors[" + std::to_string(n) + "]";
          km.factors.push_back(numpy_to_matrix(fs[n], a.shape(0), km.rank, what.c_str()));
        }
        io::write_kruskal_h5(path, km, rec);
      } else {
        TuckerModel tm;
        py::array_t<double, py::array::forcecast | py::array::c_style> core =
            py::array_t<double, py::array::forcecast | py::array::c_style>::ensure(m["core"]);
        TESSERA_INPUT_CHECK(core && static_cast<std::size_t>(core.ndim()) == fs.size(),
                            "save_model: core must have one mode per factor");
        tm.core.assign(core.data(), core.data() + core.size());
        for (std::size_t n = 0; n < fs.size(); ++n) {
          py::array a = py::reinterpret_borrow<py::array>(fs[n]);
          TESSERA_INPUT_CHECK(a.ndim() == 2, "save_model: factors[" << n << "] must be 2-D");
          tm.dims.push_back(static_cast<std::uint64_t>(a.shape(0)));
          tm.ranks.push_back(static_cast<int>(core.shape(static_cast<py::ssize_t>(n))));
          const std::string what = "save_model: factors[" + std::to_string(n) + "]";
          tm.factors.push_back(numpy_to_matrix(fs[n], a.shape(0), tm.ranks.back(), what.c_str()));
        }
        io::write_tucker_h5(path, tm, rec);
      }
    });
  });
}

CommonArgs common_args(const std::string& backend, const std::string& precision,
                       const py::object& threads, const std::string& strategy,
                       const std::string& index_base, const py::object& checkpoint,
                       int checkpoint_every, const py::object& resume, bool verbose, bool share) {
  CommonArgs a;
  a.backend = backend;
  a.precision = precision;
  a.threads = threads.is_none() ? 0 : py::cast<int>(threads);
  a.strategy = strategy;
  a.index_base = index_base;
  a.checkpoint = checkpoint.is_none() ? "" : py::cast<std::string>(py::str(checkpoint));
  a.checkpoint_every = checkpoint_every;
  a.resume = resume.is_none() ? "" : py::cast<std::string>(py::str(resume));
  a.verbose = verbose;
  a.share = share;
  return a;
}

}  // namespace
}  // namespace tessera::python

PYBIND11_MODULE(_tessera, m) {
  using namespace tessera::python;
  m.doc() = "Tessera's C++ core (use the tessera package, not this module directly)";
  m.def("cp_als",
        [](py::object tensor, int rank, int iters, double tol, std::uint64_t seed, py::object init,
           std::string backend, std::string precision, py::object threads, std::string strategy,
           std::string index_base, py::object checkpoint, int checkpoint_every, py::object resume,
           py::object callback, bool verbose, bool share, std::uintptr_t comm) {
          const CommonArgs a = common_args(backend, precision, threads, strategy, index_base,
                                           checkpoint, checkpoint_every, resume, verbose, share);
          if (precision == "float")
            return run_cp<float>(tensor, rank, iters, tol, seed, init, a, callback, comm);
          return run_cp<double>(tensor, rank, iters, tol, seed, init, a, callback, comm);
        });
  m.def("tucker_hooi",
        [](py::object tensor, py::object ranks, int iters, double tol, std::uint64_t seed,
           std::string init, std::string svd, int subspace_steps, std::string max_mem,
           std::string backend, std::string precision, py::object threads, std::string index_base,
           py::object checkpoint, int checkpoint_every, py::object resume, py::object callback,
           bool verbose, bool share, std::uintptr_t comm) {
          const CommonArgs a = common_args(backend, precision, threads, "allreduce", index_base,
                                           checkpoint, checkpoint_every, resume, verbose, share);
          if (precision == "float")
            return run_tucker<float>(tensor, ranks, iters, tol, seed, init, svd, subspace_steps,
                                     max_mem, a, callback, comm);
          return run_tucker<double>(tensor, ranks, iters, tol, seed, init, svd, subspace_steps,
                                    max_mem, a, callback, comm);
        });
  m.def("contract",
        [](py::object x, py::object y, bool same, std::string einsum, bool extend,
           std::string mem_limit, std::string backend, std::string precision, py::object threads,
           std::string index_base, bool verbose, bool share, std::uintptr_t comm) {
          const CommonArgs a = common_args(backend, precision, threads, "allreduce", index_base,
                                           py::none(), 0, py::none(), verbose, share);
          if (precision == "float")
            return run_contract<float>(x, y, same, einsum, extend, mem_limit, a, comm);
          return run_contract<double>(x, y, same, einsum, extend, mem_limit, a, comm);
        });
  m.def("read_tensor", &read_tensor);
  m.def("load_model", &load_model);
  m.def("save_model", &save_model);
  m.def("finalize_mpi", &finalize_mpi);
  m.def("mpi_size", [] {
    ensure_mpi();
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  });
  m.def("cuda_built", [] { return tessera::kernels::cuda_built(); });
}
