// The inputs of a contraction, shared by run_contract (run/contract.hpp) and `tessera bench
// contract`: read from files or given as arrays, checked, their output dims.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::run {

/// This rank's shares of the two inputs of a contraction, read from files.
template <typename T>
struct ContractInputs {
  SparseTensor<T> x, y;     ///< y is empty when same (use x for both)
  bool same = false;        ///< X and Y are one file (read once: a self-contraction)
  nnz_t nnz[2] = {0, 0};    ///< global nonzeros of X and Y
  std::uint64_t bytes = 0;  ///< file bytes read
  double read_seconds = 0;
};

/// Throws InputError unless `path` is an existing readable file ("X 'a.tns' does not exist").
void contract_check_input_file(const std::string& path, const char* what);

/// Inputs given as arrays (the Python module): this rank's share of X and of Y; an input
/// whose path is "" is taken from here. `same`: Y is X (a self-contraction; y unused).
template <typename T>
struct ContractArrays {
  SparseTensor<T> x, y;
  bool same = false;
};

/// Collective: reads X and Y (FROSTT text with `index_base`, or an HDF5 tensor store, told
/// apart as tessera's other commands do; a "" path: that input's arrays); the same file is
/// read once. Bad files throw CollectiveError on every rank.
template <typename T>
ContractInputs<T> contract_read_inputs(const std::string& xpath, const std::string& ypath,
                                       const std::string& index_base,
                                       const comm::Communicator& world,
                                       ContractArrays<T>* arrays = nullptr);

/// Output dims of the spec for the inputs read; with `extend`, matched modes of unequal
/// lengths first get the larger one (kernels::extend_matched_dims; the dims of `in` change).
/// Throws InputError (same on every rank: the dims are global).
template <typename T>
std::vector<std::uint64_t> contract_fit_dims(const kernels::ContractSpec& spec, bool extend,
                                             ContractInputs<T>& in);

/// Throws InputError naming the backend when it does not implement SpTC (checked on empty
/// tensors, before any data is read).
template <typename T>
void contract_probe_backend(kernels::Backend<T>& be, const kernels::ContractSpec& spec);

}  // namespace tessera::run
