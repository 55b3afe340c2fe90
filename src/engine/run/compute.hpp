// The compute side of a run: backend, threads, precision, the options the planner is told,
// the backend and communicators made from them, and small shared helpers (byte sizes,
// machine description, writing a run record).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/mpi_communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/tuning.hpp"
#include "util/cpus.hpp"

namespace tessera::run {

/// Options of every subcommand that computes: backend, threads, precision, strategy, and
/// what the memory planner (src/engine/plan) is told.
struct ComputeOptions {
  std::string backend = "auto";
  std::string precision = "double";
  std::string strategy = "auto";  ///< auto | allreduce | layer (algo/cp_strategy.hpp)
  /// auto | on | off: large modes' all-reduce overlapped with the MTTKRP in row pieces
  /// (CP-ALS on several GPUs; algo::CpOptions::comm_overlap); auto: on across nodes
  std::string overlap = "auto";
  /// auto | flat | node: collectives of a group spanning several nodes composed node-local
  /// + cross-node (comm/hierarchy.hpp)
  std::string hierarchy = "auto";
  /// > 0: treat the ranks as this many nodes of consecutive ranks (jobs/slurm/launch.sh's
  /// TESSERA_EMULATE_NODES); 0: the real nodes (MPI_Comm_split_type)
  int emulate_nodes = 0;
  int threads = 0;
  /// Device memory this rank's tensor and loop may use ("40G"); "" = the GPU's free memory
  /// less a reserve. On host backends it caps the prepared format. --mem-budget is its
  /// older name.
  std::string device_budget;
  /// Host memory this rank may use ("64G"); "" = measured (MemAvailable, cgroup, Slurm)
  /// and shared among the node's ranks.
  std::string host_budget;
  std::string tier =
      "auto";              ///< auto | 1 | 2 | 3: force a memory tier (refused if it does not fit)
  nnz_t stream_chunk = 0;  ///< tiers 2-3: nonzeros per streamed chunk (0: planned)
  int read_ahead = 2;      ///< tier 3: chunks read ahead (algo::DiskTensorOptions::read_ahead)
  /// tier 3: auto | keep (reads go through the page cache and stay there) | drop
  /// (drop-behind: algo::DiskTensorOptions::drop_behind); plan::ReadCache
  std::string read_cache = "auto";
  bool dry_run = false;  ///< print the plan and stop
  std::string json;
  bool force = false;  ///< --force: replace existing outputs Tessera did not write (io/output.hpp)
  /// Kernel tuning (--cuda-layout, --mttkrp-kernel, --cpu-isa, ...: the "Kernel tuning"
  /// group of --help), given to the backend make_compute makes.
  kernels::Tuning tuning;
  /// --nccl-timeout: seconds a NCCL wait may take before the job is aborted (0 = no limit;
  /// comm::NcclOptions::timeout_s).
  double nccl_timeout_s = 1800;
};

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

/// "8G" / "512M" / "64K" / "1e9" -> bytes (K, M, G, T are powers of 1024); InputError.
std::size_t parse_bytes(const std::string& s, const char* what);
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
/// with the rank's OpenMP threads on the host, 2 GiB with the backend's copy on a device;
/// `bytes` > 0: arrays of that size instead. The denominator of every benchmark's floor.
/// `together` (collective over it): every copy starts after a barrier and is timed to the
/// slowest rank's end, so each rank's figure is its share of copies that ran at the same
/// time (their sum over a node's ranks is the node's bandwidth).
template <typename T>
double measure_bandwidth(kernels::Backend<T>& be, int threads, std::size_t bytes = 0,
                         const comm::Communicator* together = nullptr);

/// Peak resident memory of this process in bytes.
std::size_t peak_rss_bytes();

/// Machine description for run records: host, ranks, threads, backend.
nlohmann::json machine_json(const comm::Communicator& world, const std::string& backend,
                            int threads);

/// Writes `j` to `path` (rank 0 only; others return at once) through io::AtomicOutput,
/// with the key io::kRecordKey that marks it as Tessera's run record.
void write_json(const std::string& path, const nlohmann::json& j, const comm::Communicator& world);

/// Threads each rank's OpenMP regions use (0 -> omp_get_max_threads(), at most the CPUs the
/// process may use).
int effective_threads(int requested);
/// --threads VALUE capped to the CPUs this process may use (util::cap_threads), with one
/// warning line on rank 0 when capped; a VALUE that is not a number is returned unchanged.
std::string cap_threads_option(const std::string& value);

/// The CPUs of this rank's node and the ranks on it (MPI_Comm_split_type SHARED): the CPUs
/// are util::node_cpu_limit of the union of the node's ranks' affinity masks, the cgroup
/// CPU quota and SLURM_CPUS_ON_NODE. Collective over `world`.
struct NodeCpus {
  util::CpuLimit limit;
  int ranks = 1;
};
NodeCpus node_cpus(const comm::MpiCommunicator& world);

/// Collective over `world`: OpenMP threads per rank when neither --threads nor
/// OMP_NUM_THREADS gives a count: the node's CPUs divided by the ranks on the node, at most
/// the CPUs this rank may use, at least 1 (util::default_threads_per_rank). main() applies
/// it (omp_set_num_threads) before the subcommand runs.
int default_threads(const comm::MpiCommunicator& world);

/// Collective over `world`: one warning line on rank 0 when the ranks on rank 0's node run
/// more OpenMP threads in all (their `threads` summed) than the node gives them (node_cpus).
/// The line names the numbers and what to change. Returns the line (empty when there is
/// nothing to say), on every rank of that node. main() calls it only for counts the user
/// gave (--threads, OMP_NUM_THREADS): a default is never warned about.
std::string warn_oversubscription(const comm::MpiCommunicator& world, int threads);

/// Human-readable byte count ("1.25 GB").
std::string human_bytes(double b);

}  // namespace tessera::run
