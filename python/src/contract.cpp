// contract of the _tessera extension (docs/python.md): a sparse tensor contraction (SpTC)
// of one or two inputs, as `tessera contract` runs it (einsum spec, memory limits), the
// result gathered on rank 0 and broadcast so every rank returns it with the run record.
#include "algo/contract.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "inputs.hpp"
#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "kernels/factories.hpp"
#include "kernels/sptc.hpp"
#include "plan/measure.hpp"
#include "runtime.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::python {
namespace {

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

}  // namespace

void register_contract(py::module_& m) {
  m.def("contract",
        [](py::object x, py::object y, bool same, std::string einsum, bool extend,
           std::string mem_limit, std::string backend, std::string precision, py::object threads,
           std::string index_base, bool verbose, bool share, std::uintptr_t comm, py::dict tuning) {
          CommonArgs a = common_args(backend, precision, threads, "allreduce", index_base,
                                     py::none(), 0, py::none(), verbose, share);
          apply_tuning(a, tuning);
          if (precision == "float")
            return run_contract<float>(x, y, same, einsum, extend, mem_limit, a, comm);
          return run_contract<double>(x, y, same, einsum, extend, mem_limit, a, comm);
        });
}

}  // namespace tessera::python
