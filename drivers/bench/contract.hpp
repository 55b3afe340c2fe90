// `tessera bench contract` (internal to drivers/bench/): its options, its generated inputs
// (contract_inputs.cpp), the throughput benchmark (contract.cpp) and the tensor-core sweep
// (tc_sweep.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "common.hpp"
#include "kernels/sptc.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::driver::bench {

struct BenchContractArgs {
  std::string x, y, einsum;
  bool generate = false;
  double nnz = 1e6, products = 1e8, free_dim = 0;
  std::uint64_t seed = 1;
  int repeat = 3;
  bool no_reference = false, compare_cpu = false, extend_dims = false;
  bool fresh_buffers = false;  // a new output and staged copies every run
  std::string mem_limit;
  std::string tc = "fp64", assembly = "rows";
  std::uint64_t block_size = 0;  ///< 0: uniform coordinates
  double block_density = 0.25;
  bool tc_sweep = false;
  std::string sweep_densities = "0.01,0.02,0.05,0.1,0.2,0.3,0.5,0.75,1";
  LoadOptions load;
  ComputeOptions run;
};

/// The device options from the command line.
inline kernels::ContractDeviceOptions device_options(const BenchContractArgs& a) {
  kernels::ContractDeviceOptions d;
  d.tensor_cores = kernels::parse_tensor_core_precision(a.tc);
  d.assembly = kernels::parse_contract_assembly(a.assembly);
  return d;
}

/// This rank's share (ids [r n / P, (r + 1) n / P)) of a random tensor with subscripts
/// `sub`: coordinate m of nonzero id uniform in [0, len) from a counter-based hash of
/// (seed, id, m), value in [0.5, 1.5). Repeated coordinates are kept (the kernels sum them).
template <typename T>
SparseTensor<T> generate_share(const std::string& sub, const std::map<char, std::uint64_t>& len,
                               std::uint64_t nnz, std::uint64_t seed, int rank, int P);

/// This rank's share of a blocky random tensor. Nonzero id lies in block id / per_block, an
/// aligned box of ext_m = min(B, len_m) cells per mode at a position drawn from (seed,
/// block, m); the block's nonzeros are distinct cells of the box (k = id % per_block maps
/// to cell (a k + offset) mod cells with a coprime to cells), per_block = round(D cells):
/// every box is filled at density D. Values in [0.5, 1.5).
template <typename T>
SparseTensor<T> generate_blocky_share(const std::string& sub,
                                      const std::map<char, std::uint64_t>& len, std::uint64_t nnz,
                                      std::uint64_t seed, int rank, int P, std::uint64_t B,
                                      double D);

/// Lengths of the generated inputs' letters: matched letters share the key space
/// nnz^2 / products evenly, free letters get --free-dim or about products / 16 output
/// cells; with blocks of B, lengths are rounded up to multiples of B. Returns the expected
/// products (nnz^2 / key space).
double generated_lengths(const kernels::ContractSpec& spec, const BenchContractArgs& a,
                         std::uint64_t block, std::map<char, std::uint64_t>& len);

/// --tc-sweep (tc_sweep.cpp): the cuda kernel's tensor-core path against its sparse path on
/// blocky inputs of increasing block density; the crossover density and the errors.
template <typename T>
void run_tc_sweep(const BenchContractArgs& a, const comm::MpiCommunicator& world);

}  // namespace tessera::driver::bench
