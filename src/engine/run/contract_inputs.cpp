// Reading and checking the inputs of a contraction (run/contract_inputs.hpp): shared by
// run_contract and `tessera bench contract`.
#include "run/contract_inputs.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "kernels/ops/sptc.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::run {

void contract_check_input_file(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TESSERA_INPUT_CHECK(!path.empty(), what << ": no file given");
  TESSERA_INPUT_CHECK(fs::exists(path, ec), what << " '" << path << "' does not exist");
  TESSERA_INPUT_CHECK(fs::is_regular_file(path, ec), what << " '" << path << "' is not a file");
  TESSERA_INPUT_CHECK(::access(path.c_str(), R_OK) == 0,
                      what << " '" << path << "' is not readable");
}

namespace {

/// Reads one input file collectively into `dst`; returns its global nonzeros.
template <typename T>
nnz_t read_one(const std::string& path, const std::string& index_base,
               const comm::Communicator& world, SparseTensor<T>& dst, std::uint64_t* bytes) {
  io::TnsReadResult rr;
  // Single precision: values float cannot hold are refused with FILE:LINE (/values[k]).
  if (io::is_tensor_store(path, world)) {
    io::H5ReadOptions ho;
    ho.float_values = std::is_same_v<T, float>;
    rr = io::read_h5(path, world, ho);
  } else {
    io::TnsReadOptions ro;
    ro.base = io::parse_index_base(index_base);
    ro.float_values = std::is_same_v<T, float>;
    rr = io::read_tns(path, world, ro);
  }
  log::info("read " + path + ": " + std::to_string(rr.global_nnz) + " nonzeros, order " +
            std::to_string(rr.local.order()) + ", dims " + format_dims(rr.local.dims));
  *bytes += rr.bytes;
  if constexpr (std::is_same_v<T, double>) {
    dst = std::move(rr.local);
  } else {
    dst = rr.local.template cast<T>();
  }
  return rr.global_nnz;
}

/// This rank's share of arrays as an input; returns the global nonzeros.
template <typename T>
nnz_t take_arrays(SparseTensor<T>& share, const comm::Communicator& world, SparseTensor<T>& dst) {
  nnz_t n = share.nnz();
  world.allreduce(&n, 1);
  dst = std::move(share);
  return n;
}

}  // namespace

template <typename T>
ContractInputs<T> contract_read_inputs(const std::string& xpath, const std::string& ypath,
                                       const std::string& index_base,
                                       const comm::Communicator& world, ContractArrays<T>* arrays) {
  ContractInputs<T> in;
  Timer t;
  std::error_code ec;
  if (arrays != nullptr && arrays->same)
    in.same = true;
  else if (!xpath.empty() && !ypath.empty())
    in.same = xpath == ypath || std::filesystem::equivalent(xpath, ypath, ec);
  in.nnz[0] = xpath.empty() ? take_arrays(arrays->x, world, in.x)
                            : read_one(xpath, index_base, world, in.x, &in.bytes);
  if (in.same) {
    if (!xpath.empty()) log::info("Y is the same file as X: read once (self-contraction)");
    in.nnz[1] = in.nnz[0];
  } else {
    in.nnz[1] = ypath.empty() ? take_arrays(arrays->y, world, in.y)
                              : read_one(ypath, index_base, world, in.y, &in.bytes);
  }
  in.read_seconds = t.seconds();
  return in;
}
template ContractInputs<float> contract_read_inputs<float>(const std::string&, const std::string&,
                                                           const std::string&,
                                                           const comm::Communicator&,
                                                           ContractArrays<float>*);
template ContractInputs<double> contract_read_inputs<double>(const std::string&, const std::string&,
                                                             const std::string&,
                                                             const comm::Communicator&,
                                                             ContractArrays<double>*);

template <typename T>
std::vector<std::uint64_t> contract_fit_dims(const kernels::ContractSpec& spec, bool extend,
                                             ContractInputs<T>& in) {
  SparseTensor<T>& y = in.same ? in.x : in.y;
  if (extend) {
    auto xd = in.x.dims, yd = y.dims;
    kernels::extend_matched_dims(spec, xd, yd, in.same);
    if (xd != in.x.dims || yd != y.dims)
      log::info("--extend-dims: X dims " + format_dims(in.x.dims) + " -> " + format_dims(xd) +
                (in.same ? "" : ", Y dims " + format_dims(y.dims) + " -> " + format_dims(yd)));
    in.x.dims = xd;
    y.dims = yd;
  }
  return kernels::contract_output_dims(spec, in.x.dims, y.dims);
}
template std::vector<std::uint64_t> contract_fit_dims<float>(const kernels::ContractSpec&, bool,
                                                             ContractInputs<float>&);
template std::vector<std::uint64_t> contract_fit_dims<double>(const kernels::ContractSpec&, bool,
                                                              ContractInputs<double>&);

template <typename T>
void contract_probe_backend(kernels::Backend<T>& be, const kernels::ContractSpec& spec) {
  // Empty tensors of the spec's orders: a backend without SpTC throws at once.
  SparseTensor<T> x(std::vector<std::uint64_t>(spec.x.size(), 1));
  SparseTensor<T> y(std::vector<std::uint64_t>(spec.y.size(), 1));
  try {
    kernels::ops::contract_plan(be, x, y, spec);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    TESSERA_INPUT_CHECK(false, "--backend " << be.name() << ": " << e.what()
                                            << "; use --backend cpu or --backend reference");
  }
}
template void contract_probe_backend<float>(kernels::Backend<float>&, const kernels::ContractSpec&);
template void contract_probe_backend<double>(kernels::Backend<double>&,
                                             const kernels::ContractSpec&);

}  // namespace tessera::run
