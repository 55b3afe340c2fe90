// `tessera bench mttkrp|cp|ttmc|tucker` (internal to drivers/bench/): the options, the input
// every one of them reads (input.cpp), and one descriptor per benchmarked operation
// (mttkrp.cpp, cp.cpp, ttmc.cpp, tucker.cpp) run by cli.cpp through the harness
// (harness.hpp). `bench contract` is contract.cpp, `bench comm` comm.cpp (comm.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "tensor/synthetic.hpp"

namespace tessera::driver::bench {

struct BenchArgs {
  std::string what;  // mttkrp | cp | ttmc | tucker
  LoadOptions load;
  std::string gen_dims, dist = "uniform";
  double gen_nnz = 0, alpha = 1.0;
  int rank = 16, repeat = 5, iters = 5;
  std::string ranks;  ///< Tucker ranks (bench ttmc|tucker), or the R list of mttkrp --tc-sweep
  std::string svd = "gram";          ///< bench tucker
  int subspace_steps = 3;            ///< bench tucker --svd subspace
  std::string generate_on = "auto";  ///< auto | host | backend
  CpConstraintArgs con;              ///< bench cp: --nonneg, --l1, --l2, --cuda-graph
  algo::CpOptions cp;                ///< bench cp: the bench rows of run::kCpValues
  ComputeOptions run;
  // ---- bench mttkrp --tc-sweep (mttkrp_tc_sweep.cpp) ----
  bool tc_sweep = false;
  std::string tc_dims = "8192x8192x1024";              ///< generated blocky tensors
  std::string tc_densities = "0.05,0.125,0.25,0.5,1";  ///< density of the dense 16 x 16 tiles
  std::string tc_fractions = "0.5,0.9";                ///< share of the nonzeros in the tiles
  std::uint64_t tc_seed = 1;
  /// --bandwidth: the copy bandwidth per rank in bytes per second (a size like 4.2T, as the
  /// bench's log line prints it) instead of measuring it; empty: measured.
  std::string bandwidth;
};

/// The floors' denominator, bytes per second per rank: --bandwidth where given, else
/// measure_bandwidth's copy in the backend's memory (two 512 MiB host or 2 GiB device
/// arrays, best of 5; a few seconds on a small node). Every rank does the same.
template <typename T>
double bench_bandwidth(const BenchArgs& a, kernels::Backend<T>& be) {
  if (!a.bandwidth.empty()) return static_cast<double>(parse_bytes(a.bandwidth, "--bandwidth"));
  return measure_bandwidth(be, a.run.threads);
}

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
  /// Generated on the backend: the synthetic tensor and this rank's nonzero ids [first_id,
  /// first_id + count) (bench mttkrp recomputes sampled rows from them in double).
  std::optional<synthetic::Spec> spec;
  std::uint64_t first_id = 0, count = 0;
  /// bench cp --comm-strategy layer on a tensor generated on the backend: the grid partition
  /// (partition::synthetic_distribution) whose block of this rank X holds, shifted to its
  /// chunks (partition::window_of); first_id 0 and count the whole tensor's ids.
  std::optional<partition::Distribution> grid;
};

/// Collective: the input of the benchmark (input.cpp): read and distributed, or generated
/// on the backend or on the host; prepared into a handle for bench mttkrp and ttmc.
template <typename T>
BenchInput<T> bench_input(const BenchArgs& a, partition::Scheme scheme,
                          const comm::Communicator& world, kernels::Backend<T>& be);

/// Collective: the benchmark's memory plan (input.cpp); a plan that does not fit resident
/// (tier 1) is refused with the command that streams it instead. `nccl` (may be null): the
/// run's NCCL communicator, whose measured buffers the layer strategy's per-mode
/// communicators are planned as.
template <typename T>
plan::Plan bench_plan(const BenchArgs& a, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                      const std::string& path, kernels::BackendKind kind,
                      const comm::MpiCommunicator& world, const comm::Communicator* nccl);

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

/// `bench mttkrp --tc-sweep` (mttkrp_tc_sweep.cpp; one rank): per case (generated blocky
/// tensors, or the file / --generate input), rank R of --ranks and mode, the MTTKRP with the
/// tensor cores off, on in each precision and auto, timed (median of --repeat), with errors
/// against an FP64 reference, the TcSplit and a roofline; a table and the record's "tc_sweep".
/// On a backend without tensor cores only the off times and errors.
template <typename T>
void run_mttkrp_tc_sweep(const BenchArgs& a, const comm::MpiCommunicator& world);
/// A blocky tensor of `dims` (order >= 2) with about `nnz` nonzeros: round(fraction nnz /
/// per_tile) dense 16 x 16 tiles (16 rows of mode 0 x 16 of mode 1, the other indices fixed)
/// at distinct random positions, each with per_tile = round(density 256) distinct random
/// slots; the rest uniform over the cells outside the tiles, without repeated coordinates
/// (where the packed coordinates fit 64 bits). Values in [0.5, 1.5). Deterministic in `seed`.
/// `tiles_out`: the tiles made. Throws InputError on bad parameters.
template <typename T>
SparseTensor<T> generate_tc_blocky(const std::vector<std::uint64_t>& dims, std::uint64_t nnz,
                                   double density, double fraction, std::uint64_t seed,
                                   std::uint64_t* tiles_out = nullptr);

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
/// Factor of mode n of the benchmarks (rows x R, row-major, the values of
/// algo::initial_factor_value with seed 7) on the host (mttkrp.cpp).
template <typename T>
std::vector<T> bench_factor_values(std::uint64_t rows, int R, int n);
/// The same factor in backend memory (mttkrp.cpp).
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
