// The inputs of the _tessera entry points (inputs.hpp): a tensor dict's NumPy/COO arrays
// checked and read into this rank's nonzeros (or a path agreed on by every rank), arrays
// distributed as the CLI distributes a file, the options every entry point shares, and
// NumPy matrices read into Tessera's.
#include "inputs.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "util/error.hpp"

namespace tessera::python {
namespace {

/// Coordinate (k, m) of an integer array of any dtype, byte order and strides, read exactly:
/// its magnitude and sign (a uint64 above 2^63 keeps its value, and is then out of range).
struct CoordView {
  const char* base = nullptr;
  py::ssize_t s0 = 0, s1 = 0;  // strides of (nonzero, mode)
  bool is_signed = true;
  int size = 8;
  bool swap = false;  // the array's byte order is not this machine's
  struct Value {
    bool negative = false;
    std::uint64_t magnitude = 0;
  };
  Value get(py::ssize_t k, int m) const {
    unsigned char b[8];
    std::memcpy(b, base + k * s0 + m * s1, static_cast<std::size_t>(size));
    if (swap) std::reverse(b, b + size);
    std::uint64_t u = 0;  // the value's bits, in this machine's order
    if constexpr (std::endian::native == std::endian::little) {
      for (int i = size - 1; i >= 0; --i) u = (u << 8) | b[i];
    } else {
      for (int i = 0; i < size; ++i) u = (u << 8) | b[i];
    }
    Value v;
    const std::uint64_t sign = std::uint64_t(1) << (8 * size - 1);
    if (is_signed && (u & sign) != 0) {
      v.negative = true;
      // Two's complement magnitude: ~u + 1 within `size` bytes.
      const std::uint64_t mask = size == 8 ? ~std::uint64_t(0) : (sign << 1) - 1;
      v.magnitude = ((~u) & mask) + 1;
    } else {
      v.magnitude = u;
    }
    return v;
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
  cv.is_signed = ck == 'i';
  cv.size = py::cast<int>(coords.attr("itemsize"));
  TESSERA_INPUT_CHECK(cv.size == 1 || cv.size == 2 || cv.size == 4 || cv.size == 8,
                      name << ": coords of dtype " << py::cast<std::string>(py::str(coords.dtype()))
                           << ": expected an integer dtype of 1, 2, 4 or 8 bytes");
  // '=' native, '|' one byte, '<' little, '>' big endian.
  const char order = py::cast<std::string>(coords.attr("dtype").attr("byteorder")).at(0);
  cv.swap = (order == '>' && std::endian::native == std::endian::little) ||
            (order == '<' && std::endian::native == std::endian::big);
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
      const CoordView::Value cv_km = cv.get(k, m);
      const std::uint64_t c = cv_km.magnitude;
      TESSERA_INPUT_CHECK(!cv_km.negative, name << ": " << at(k, m) << " = -" << c
                                                << " is negative: coordinates are 0-based, 0 to "
                                                   "shape["
                                                << m << "] - 1");
      TESSERA_INPUT_CHECK(c < dims[static_cast<std::size_t>(m)],
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

}  // namespace

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

// ---- options -----------------------------------------------------------------------------

CommonArgs common_args(const std::string& backend, const std::string& precision,
                       const py::object& threads, const std::string& strategy,
                       const std::string& index_base, const py::object& checkpoint,
                       int checkpoint_every, const py::object& resume, bool verbose, bool share) {
  CommonArgs a;
  a.run.backend = backend;
  a.run.precision = precision;
  a.run.threads = threads.is_none() ? 0 : py::cast<int>(threads);
  a.run.strategy = strategy;
  a.index_base = index_base;
  a.checkpoint = checkpoint.is_none() ? "" : py::cast<std::string>(py::str(checkpoint));
  a.checkpoint_every = checkpoint_every;
  a.resume = resume.is_none() ? "" : py::cast<std::string>(py::str(resume));
  a.verbose = verbose;
  a.share = share;
  return a;
}

namespace {

void apply_tuning_fields(CommonArgs& a, const py::dict& tuning) {
  for (const auto& [key, value] : tuning) {
    const std::string name = py::cast<std::string>(py::str(key));
    if (name == "nccl_timeout") {
      const bool ok = !py::isinstance<py::bool_>(value) &&
                      (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value));
      TESSERA_INPUT_CHECK(
          ok, name << "=" << py::cast<std::string>(py::repr(value)) << ": expected seconds >= 0");
      a.run.nccl_timeout_s = py::cast<double>(value);
    } else if (name == "comm_hierarchy") {  // cp_als's own keywords (not in TUNING)
      TESSERA_INPUT_CHECK(py::isinstance<py::str>(value),
                          name << "=" << py::cast<std::string>(py::repr(value))
                               << ": expected \"auto\", \"flat\" or \"node\"");
      a.run.hierarchy = py::cast<std::string>(value);
    } else if (name == "comm_overlap") {
      TESSERA_INPUT_CHECK(py::isinstance<py::str>(value),
                          name << "=" << py::cast<std::string>(py::repr(value))
                               << ": expected \"auto\", \"on\" or \"off\"");
      a.run.overlap = py::cast<std::string>(value);
    } else if (name == "emulate_nodes") {
      const bool ok = !py::isinstance<py::bool_>(value) && py::isinstance<py::int_>(value) &&
                      py::cast<long long>(value) >= 0 && py::cast<long long>(value) <= (1 << 20);
      TESSERA_INPUT_CHECK(ok, name << "=" << py::cast<std::string>(py::repr(value))
                                   << ": expected a node count >= 0 (0: the real nodes)");
      a.run.emulate_nodes = py::cast<int>(value);
    } else if (!set_tuning_keyword(a.run.tuning, name, value))  // the knobs' table (tuning.cpp)
      TESSERA_INPUT_CHECK(false, "unknown keyword argument '"
                                     << name << "': the tuning arguments are " << tuning_keywords()
                                     << "and nccl_timeout");
  }
}

}  // namespace

void apply_tuning(CommonArgs& a, const py::dict& tuning) {
  // Called before the guarded run (runtime.hpp) that turns InputError into ValueError.
  try {
    apply_tuning_fields(a, tuning);
  } catch (const InputError& e) {
    throw py::value_error(e.what());
  }
}

void check_common(const CommonArgs& a) {
  TESSERA_INPUT_CHECK(a.run.backend == "auto" || a.run.backend == "reference" ||
                          a.run.backend == "cpu" || a.run.backend == "cuda",
                      "backend=\"" << a.run.backend << "\": expected auto, reference, cpu or cuda");
  TESSERA_INPUT_CHECK(a.run.precision == "double" || a.run.precision == "float",
                      "precision=\"" << a.run.precision << "\": expected double or float");
  TESSERA_INPUT_CHECK(a.run.threads >= 0,
                      "threads=" << a.run.threads << ": expected >= 0 (0: OpenMP's)");
  TESSERA_INPUT_CHECK(
      a.run.strategy == "auto" || a.run.strategy == "allreduce" || a.run.strategy == "layer",
      "comm_strategy=\"" << a.run.strategy << "\": expected auto, allreduce or layer");
  TESSERA_INPUT_CHECK(a.checkpoint_every >= 0,
                      "checkpoint_every=" << a.checkpoint_every << ": expected >= 0");
  io::parse_index_base(a.index_base);
  // The messages name the CLI spelling (--cuda-layout for cuda_layout, --tc-threshold for
  // sptc_tc_threshold, --tensor-cores for tensor_cores): the same options.
  kernels::check(a.run.tuning);
  TESSERA_INPUT_CHECK(
      a.run.nccl_timeout_s >= 0 && std::isfinite(a.run.nccl_timeout_s),
      "nccl_timeout=" << a.run.nccl_timeout_s << ": expected seconds >= 0 (0: no limit)");
}

OutputGuard checkpoint_guard(const py::object& tensor, const CommonArgs& a) {
  OutputGuard g;
  g.option = "checkpoint";
  g.path = a.checkpoint;
  if (py::isinstance<py::dict>(tensor)) {
    const py::dict d = py::reinterpret_borrow<py::dict>(tensor);
    if (d.contains("path")) g.inputs.emplace_back("the input", py::cast<std::string>(d["path"]));
  }
  g.inputs.emplace_back("resume", a.resume);
  g.may_replace = "resume";
  return g;
}

// ---- matrices ----------------------------------------------------------------------------

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

// The two precisions of the entry points.
template Source<float> read_source<float>(const py::object&, bool, const comm::MpiCommunicator&);
template Source<double> read_source<double>(const py::object&, bool, const comm::MpiCommunicator&);

}  // namespace tessera::python
