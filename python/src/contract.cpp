// contract of the _tessera extension (docs/python.md): the arguments as
// run::ContractRunOptions (inputs as paths or arrays), run::run_contract with the GIL
// released and Z gathered on every rank, and Z and the run record as a dict.
#include "run/contract.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "inputs.hpp"
#include "runtime.hpp"
#include "util/error.hpp"

namespace tessera::python {
namespace {

/// One input of the contraction into the run's options: a path, or arrays (this rank's
/// share) named for the record.
template <typename T>
void set_input(Source<T>& s, std::string* path, std::string* name, SparseTensor<T>* share) {
  if (s.is_path) {
    *path = s.path;
    return;
  }
  *name = s.name;
  *share = std::move(s.local);
}

py::dict z_dict(const run::ContractRun<double>& r) {
  const SparseTensor<double>& z = r.z;
  const int N = static_cast<int>(r.dims.size());
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
  out["shape"] = py::tuple(py::cast(r.dims));
  out["record_json"] = r.record.dump();
  return out;
}

template <typename T>
py::dict run_contract(const py::object& x, const py::object& y, run::ContractRunOptions o,
                      bool same, const CommonArgs& a, std::uintptr_t comm_handle) {
  Session ss(comm_handle, a.verbose);
  const comm::MpiCommunicator& world = ss.world;
  run::ContractRun<double> r;
  translate(nullptr, world, [&] {
    comm::run_collectively(world, [&] { check_common(a); });
    Source<T> sx = read_source<T>(x, a.share, world);
    std::optional<Source<T>> sy;
    if (!same) sy.emplace(read_source<T>(y, a.share, world));
    run::ContractArrays<T> arrays;
    arrays.same = same;
    set_input(sx, &o.x, &o.x_name, &arrays.x);
    if (sy) set_input(*sy, &o.y, &o.y_name, &arrays.y);
    if (same) o.y = o.x, o.y_name = o.x_name;
    o.load.index_base = a.index_base;
    o.run = a.run;
    o.print = a.verbose;
    o.gather = true;
    o.make_record = true;
    o.record.interface = "python";
    py::gil_scoped_release nogil;
    run::ContractRun<T> rt = run::run_contract<T>(o, world, &arrays);
    r.dims = rt.dims;
    r.record = std::move(rt.record);
    if constexpr (std::is_same_v<T, double>)
      r.z = std::move(rt.z);
    else
      r.z = rt.z.template cast<double>();
  });
  return z_dict(r);
}

}  // namespace

void register_contract(py::module_& m) {
  m.def("contract",
        [](py::object x, py::object y, bool same, std::string einsum, bool extend,
           std::string mem_limit, std::string backend, std::string precision, py::object threads,
           std::string index_base, bool verbose, bool share, std::uintptr_t comm, py::dict tuning) {
          CommonArgs a = common_args(backend, precision, threads, "allreduce", index_base,
                                     py::none(), 0, py::none(), verbose, share);
          apply_tuning(a, tuning);
          run::ContractRunOptions o;
          o.einsum = einsum;
          o.extend_dims = extend;
          o.mem_limit = mem_limit;
          if (precision == "float") return run_contract<float>(x, y, o, same, a, comm);
          return run_contract<double>(x, y, o, same, a, comm);
        });
}

}  // namespace tessera::python
