// The file functions of the _tessera extension (docs/python.md): read_tensor (a .tns or
// HDF5 tensor file into COO arrays, on this process alone), load_model and save_model (the
// model files of io/model_io, as `--out` writes them).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"
#include "io/tns.hpp"
#include "runtime.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::python {
namespace {

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
    } catch (const io::ChecksumError&) {
      throw;  // a damaged CP model: the same line as the CLI, not "nor is it a Tucker model"
    } catch (const InputError& first) {
      try {
        tm = io::read_tucker_h5(path, &rec);
      } catch (const io::ChecksumError&) {
        throw;  // a damaged Tucker model
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

/// Writes a model file on rank 0 of the communicator (others wait), as `--out` does: through
/// the CLI's output guard first (`inputs`: the files the result was computed from, never
/// replaced; `force`: replace a file Tessera did not write), then a temporary renamed when
/// complete (io::AtomicOutput in the model writer).
void save_model(const py::dict& m, const std::string& path, std::uintptr_t comm_handle, bool force,
                const std::vector<std::string>& inputs) {
  Session ss(comm_handle, false);
  const comm::MpiCommunicator& world = ss.world;
  translate(nullptr, world, [&] {
    OutputGuard g;
    g.option = "path";
    g.path = path;
    for (const auto& p : inputs) g.inputs.emplace_back("the input", p);
    guard_output(g, force, world);
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
          // ensure: an array (converted when it is not one), never a cast of another object.
          py::array a = py::array::ensure(fs[n]);
          TESSERA_INPUT_CHECK(a && a.ndim() == 2, "save_model: factors[" << n << "] must be 2-D");
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
          // ensure: an array (converted when it is not one), never a cast of another object.
          py::array a = py::array::ensure(fs[n]);
          TESSERA_INPUT_CHECK(a && a.ndim() == 2, "save_model: factors[" << n << "] must be 2-D");
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

}  // namespace

void register_files(py::module_& m) {
  m.def("read_tensor", &read_tensor);
  m.def("load_model", &load_model);
  m.def("save_model", &save_model, py::arg("model"), py::arg("path"), py::arg("comm"),
        py::arg("force"), py::arg("inputs"));
}

}  // namespace tessera::python
