// Internal to drivers/: what `tessera bench` (cmd_bench.cpp) shares with the benchmarks
// kept in files of their own (bench_tucker.cpp: bench ttmc and bench tucker).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "cp_options.hpp"

namespace tessera::driver::bench {

struct BenchArgs {
  std::string what;  // mttkrp | cp
  LoadOptions load;
  std::string gen_dims, dist = "uniform";
  double gen_nnz = 0, alpha = 1.0;
  int rank = 16, repeat = 5, iters = 5;
  std::string ranks;         ///< Tucker ranks (bench ttmc|tucker); empty: --rank for every mode
  std::string svd = "gram";  ///< bench tucker
  std::string generate_on = "auto";  ///< auto | host | backend
  CpConstraintArgs con;              ///< bench cp: constrained, regularised, weighted CP
  ComputeOptions run;
};

/// This rank's benchmark input: the prepared handle X (bench mttkrp, and bench cp on a
/// generated tensor with the allreduce strategy; the host block is not kept), or the
/// distributed block d (bench cp otherwise: cp_als prepares it itself).
template <typename T>
struct BenchInput {
  std::vector<std::uint64_t> dims;  ///< global mode lengths
  std::int64_t global_nnz = 0;
  std::optional<partition::Distributed<T>> d;   ///< bench cp from a file, or layer
  std::unique_ptr<kernels::TensorHandle<T>> X;  ///< prepared (or generated) handle
  double prepare_seconds = 0;                   ///< with X: prepare (or generate)
};

/// bench ttmc: every mode's TTMc of the prepared handle timed against its floor (fills j).
template <typename T>
void run_ttmc_bench(const BenchArgs& a, BenchInput<T>& in, kernels::Backend<T>& be,
                    const comm::MpiCommunicator& world, double bw, nlohmann::json& j);
/// bench tucker: Tucker-HOOI iterations timed against the floor of their N TTMcs.
template <typename T>
void run_tucker_bench(const BenchArgs& a, BenchInput<T>& in, Compute<T>& cx,
                      const comm::MpiCommunicator& world, double bw, nlohmann::json& j);

}  // namespace tessera::driver::bench
