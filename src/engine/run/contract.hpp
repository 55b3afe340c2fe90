// A sparse tensor contraction run from one options struct: what `tessera contract` and the
// Python module's contract both do (docs/architecture.md, "The run layer"; docs/sptc.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "run/compute.hpp"
#include "run/contract_inputs.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::run {

/// Everything a contraction run is told. Option names in messages are the CLI's.
struct ContractRunOptions {
  std::string x, y;            ///< input files ("" for an input given as arrays)
  std::string x_name, y_name;  ///< names of inputs given as arrays, for the record
  std::string einsum;          ///< "ijk,klm->ijlm"
  std::string out;             ///< write Z here (.tns, .tns.gz, .h5); "": not written
  std::string mem_limit;       ///< "8G"; "": the planner's measured host limit
  bool extend_dims = false;
  LoadOptions load;  ///< load.index_base of text inputs
  ComputeOptions run;
  bool print = true;    ///< the contraction's own lines on rank 0
  bool gather = false;  ///< Z gathered (sorted, summed) on every rank in ContractRun::z
  RecordContext record;
  bool make_record = false;  ///< build the record even without run.json (Python returns it)
};

/// What a contraction run returns.
template <typename T>
struct ContractRun {
  bool dry_run = false;
  std::vector<std::uint64_t> dims;  ///< Z's dims
  SparseTensor<T> z;                ///< with gather: all of Z on every rank; else empty
  nlohmann::json record;            ///< null unless run.json or make_record
};

/// Collective: checks the spec, inputs and outputs, measures the memory limits, makes the
/// backend, reads the inputs (files, or `arrays` for inputs without a path), contracts
/// (in pieces when Z does not fit), logs the summary, writes --out and --json.
template <typename T>
ContractRun<T> run_contract(const ContractRunOptions& o, const comm::MpiCommunicator& world,
                            ContractArrays<T>* arrays = nullptr);

}  // namespace tessera::run
