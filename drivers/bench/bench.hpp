// `tessera bench mttkrp|cp|ttmc|tucker` (internal to drivers/bench/): the options, the input
// every one of them reads (input.cpp), and one descriptor per benchmarked operation
// (mttkrp.cpp, cp.cpp, ttmc.cpp, tucker.cpp) run by cli.cpp through the harness
// (harness.hpp). `bench contract` is contract.cpp.
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
  std::string what;  // mttkrp | cp | ttmc | tucker
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

/// Collective: the input of the benchmark (input.cpp): read and distributed, or generated
/// on the backend or on the host; prepared into a handle for bench mttkrp and ttmc.
template <typename T>
BenchInput<T> bench_input(const BenchArgs& a, partition::Scheme scheme,
                          const comm::Communicator& world, kernels::Backend<T>& be);

/// Collective: the benchmark's memory plan (input.cpp); a plan that does not fit resident
/// (tier 1) is refused with the command that streams it instead.
template <typename T>
plan::Plan bench_plan(const BenchArgs& a, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                      const std::string& path, kernels::BackendKind kind,
                      const comm::MpiCommunicator& world);

/// What a benchmarked operation is given: the options, its input, the backend and its
/// communicators, the measured copy bandwidth (the floors' denominator) and the record's
/// body to fill (the harness adds the memory plan and the envelope).
template <typename T>
struct Context {
  const BenchArgs& a;
  BenchInput<T>& in;
  Compute<T>& cx;
  const comm::MpiCommunicator& world;
  double bw;
  nlohmann::json& j;
};

/// The descriptors: each times its operation against its floor, prints its table and fills
/// the record's body (its fields and "timing").
template <typename T>
void bench_mttkrp(Context<T>& c);
template <typename T>
void bench_cp(Context<T>& c);
template <typename T>
void bench_ttmc(Context<T>& c);
template <typename T>
void bench_tucker(Context<T>& c);

/// Bytes one MTTKRP of `mode` with R columns must move on this rank (mttkrp.cpp): the
/// stored format once, each touched factor row of the other modes once, the output once.
double mttkrp_floor_bytes(double stream_bytes, const std::vector<double>& distinct,
                          const std::vector<std::uint64_t>& dims, int mode, int R,
                          std::size_t value_size);
/// Bytes one TTMc of `mode` must move on this rank (ttmc.cpp): the stored format once,
/// each touched row of the other modes' factors once, the output rows once.
double ttmc_floor_bytes(double stream_bytes, const std::vector<double>& distinct,
                        const std::vector<int>& ranks, int mode, double out_rows,
                        std::size_t value_size);
/// Tucker ranks of the benchmark: --ranks, or --rank for every mode (ttmc.cpp).
std::vector<int> bench_ranks(const BenchArgs& a, int N);
/// Factor of mode n (rows x R, the values of algo::initial_factor_value with seed 7) in
/// backend memory (mttkrp.cpp).
template <typename T>
kernels::Array<T> bench_factor(kernels::Backend<T>& be, std::uint64_t rows, int R, int n);
/// The distinct indices per mode of a prepared handle, as doubles.
template <typename T>
std::vector<double> distinct_rows(const kernels::TensorHandle<T>& X) {
  std::vector<double> d;
  for (std::uint64_t c : X.distinct_rows()) d.push_back(static_cast<double>(c));
  return d;
}

}  // namespace tessera::driver::bench
