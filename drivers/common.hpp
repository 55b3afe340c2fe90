// Shared pieces of the tessera subcommands: loading, run records, machine info.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "algo/disk_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"
#include "util/timer.hpp"

namespace tessera::driver {

/// Options every data-reading subcommand shares.
struct LoadOptions {
  std::string path;
  std::string index_base = "1";
  std::string partition = "auto";  ///< auto | nnz | grid
  std::string grid;                ///< "4x2x1" or empty (automatic)
  bool relabel = false;            ///< random relabelling of indices before partitioning
};

struct Loaded {
  double read_seconds = 0, distribute_seconds = 0;
  io::TnsReadResult read;  ///< read.local is emptied after distribution
};

/// Reads a FROSTT file collectively and distributes it (prints the startup report on
/// rank 0). `scheme` is the scheme chosen for the run.
template <typename T>
partition::Distributed<T> load_and_distribute(const LoadOptions& o, partition::Scheme scheme,
                                              const comm::Communicator& world, Loaded* info);

/// Options of every subcommand that computes: backend, threads, precision, strategy.
struct ComputeOptions {
  std::string backend = "auto";
  std::string precision = "double";
  std::string strategy = "allreduce";
  int threads = 0;
  std::string mem_budget;  ///< backend memory the tensor may use ("8G", "512M"); "" = all
  /// Host memory this rank's block may use; a block over it is streamed from the HDF5
  /// store (memory tier 3). "" = 3/4 of the node's memory shared by its ranks.
  std::string host_budget;
  nnz_t stream_chunk = 0;  ///< tier 3: nonzeros per chunk (0: from the budget, <= 16 Mi)
  std::string json;
};

/// A run's input: this rank's block in memory (tiers 1 and 2: distributed, then prepared by
/// the backend) or on disk (tier 3: a range of an HDF5 store streamed by every MTTKRP/TTMc).
template <typename T>
struct Input {
  std::optional<partition::Distributed<T>> dist;  ///< tiers 1 and 2
  std::unique_ptr<algo::DiskTensor<T>> disk;      ///< tier 3
  std::vector<std::uint64_t> dims;
  nnz_t global_nnz = 0;
  nnz_t duplicates = 0;  ///< summed in tiers 1-2; not looked for in tier 3
  std::vector<int> grid;
  double imbalance = 1.0;
  nnz_t min_block_nnz = 0, max_block_nnz = 0;
  std::string partition_scheme;  ///< "nnz" | "grid" | "store" (tier 3: stored order/blocks)
  /// Collective: the checkpoint fingerprint of the input (io::tensor_fingerprint).
  io::TensorFingerprint fingerprint(const comm::Communicator& world) const;
};

/// Loads the input of cp and tucker (collective). An HDF5 store whose per-rank block needs
/// more host memory than the limit (--host-budget; on host backends --mem-budget too;
/// default 3/4 of the node's memory shared by its ranks) is not loaded: each rank opens
/// its range (its block of a stored partition of exactly P blocks, else an equal share of
/// the stored order) as a DiskTensor (tier 3). Tier 3 needs the allreduce strategy and no
/// --relabel (InputError otherwise). `allreduce` says which strategy the run uses.
template <typename T>
Input<T> load_input(const LoadOptions& o, const ComputeOptions& run, partition::Scheme scheme,
                    bool allreduce, kernels::BackendKind kind, const comm::MpiCommunicator& world,
                    Loaded* info);

/// Rank 0 logs, for tiers 2 and 3, the copy (tier 2: host to GPU; tier 3: disk reads by the
/// prefetch thread) and compute seconds per iteration and the share of copy time hidden
/// behind compute; returns the "memory_tier" object of the run record.
nlohmann::json report_memory_tier(int tier, const std::string& description, double copy_s,
                                  double compute_s, double overlap, int iterations);

/// "8G" / "512M" / "64K" / "1e9" -> bytes (K, M, G, T are powers of 1024); InputError.
std::size_t parse_bytes(const std::string& s, const char* what);
/// Registers --backend --threads --precision --comm-strategy --index-base --json.
void add_compute_options(CLI::App* sub, ComputeOptions& o, LoadOptions& load);

/// A backend and the communicator of its memory space (NCCL for cuda, else `world`).
template <typename T>
struct Compute {
  kernels::BackendKind kind = kernels::BackendKind::cpu;
  std::unique_ptr<comm::Communicator> nccl;  ///< owned when kind == cuda
  const comm::Communicator* data = nullptr;
  std::unique_ptr<kernels::Backend<T>> backend;
};
/// Creates them in the right order: the NCCL bootstrap selects this rank's GPU before the
/// CUDA backend binds to the current device.
template <typename T>
Compute<T> make_compute(const ComputeOptions& o, const comm::MpiCommunicator& world);

/// Calls f.template operator()<float>() or <double>() by o.precision.
template <typename F>
void with_precision(const ComputeOptions& o, F&& f) {
  if (o.precision == "float") {
    f.template operator()<float>();
  } else {
    f.template operator()<double>();
  }
}

/// Default memory limit per rank: 3/4 of this node's physical memory shared by the ranks
/// on the node (the smallest value over ranks, so every rank agrees). Collective.
std::size_t default_memory_limit(const comm::MpiCommunicator& world);

/// Copy bandwidth of the backend's memory in bytes/s (read + write, best of 5): 512 MiB
/// with the rank's OpenMP threads on the host, 2 GiB with the backend's copy on a device.
/// The denominator of every benchmark's floor.
template <typename T>
double measure_bandwidth(kernels::Backend<T>& be, int threads);

/// Peak resident memory of this process in bytes.
std::size_t peak_rss_bytes();

/// Machine description for run records: host, ranks, threads, backend.
nlohmann::json machine_json(const comm::Communicator& world, const std::string& backend,
                            int threads);

/// Writes `j` to `path` (rank 0 only; others return at once).
void write_json(const std::string& path, const nlohmann::json& j, const comm::Communicator& world);

/// Threads each rank's OpenMP regions use (0 -> omp_get_max_threads()).
int effective_threads(int requested);

/// Human-readable byte count ("1.25 GB").
std::string human_bytes(double b);

}  // namespace tessera::driver
