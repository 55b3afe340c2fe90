// Shared pieces of the tessera subcommands: loading, run records, machine info.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "algo/disk_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "kernels/tuning.hpp"
#include "partition/partition.hpp"
#include "plan/planner.hpp"
#include "util/cpus.hpp"
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

/// Options of every subcommand that computes: backend, threads, precision, strategy, and
/// what the memory planner (src/engine/plan) is told.
struct ComputeOptions {
  std::string backend = "auto";
  std::string precision = "double";
  std::string strategy = "auto";  ///< auto | allreduce | layer (algo/cp_strategy.hpp)
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

/// What the planner is told about the computation (besides ComputeOptions).
struct PlanContext {
  plan::Workload workload = plan::Workload::cp;
  int cp_rank = 16;
  std::vector<int> tucker_ranks;
  /// CP: the run needs the block distributed in memory (tier 1; not a store read in place):
  /// --observed-only, --holdout, --init nvecs; `tier1_why` names the option.
  bool tier1_only = false;
  std::string tier1_why;
  bool completion = false;  ///< CP --observed-only (plan::Request::completion)
};

/// A run's input, where the plan put it:
///  - tier 1 from a text file or a store that must be redistributed: `dist` (the block;
///    the backend prepares it in the algorithm);
///  - tier 1 from a store read in its stored order: `handle`, already prepared by the
///    backend (the raw block is freed);
///  - tier 2: `handle` is an algo::HostTensor (raw chunks in host memory, streamed);
///  - tier 3: `disk` (streamed from the HDF5 store).
/// Tiers 2 and 3 and prepared handles run the allreduce strategy.
template <typename T>
struct Input {
  std::optional<partition::Distributed<T>> dist;
  std::unique_ptr<kernels::TensorHandle<T>> handle;
  std::unique_ptr<algo::DiskTensor<T>> disk;
  plan::Plan plan;
  bool dry_run = false;  ///< the plan was printed and nothing was loaded
  std::vector<std::uint64_t> dims;
  nnz_t global_nnz = 0;
  nnz_t duplicates = 0;  ///< summed in tiers 1-2 (text inputs and unchecked stores)
  std::vector<int> grid;
  double imbalance = 1.0;
  nnz_t min_block_nnz = 0, max_block_nnz = 0;
  std::string
      partition_scheme;  ///< "nnz" | "grid" | "store-order" | "store-dealt" | "store-blocks"
  io::TensorFingerprint fingerprint_part;  ///< handle inputs: this rank's part
  /// An algo::StreamedTensor that streams itself through the backend (tiers 2 and 3).
  bool streamed() const { return disk != nullptr || (handle && handle->tier() == 2); }
  /// The prepared or streamed handle (null for `dist`).
  const kernels::TensorHandle<T>* tensor() const {
    return disk ? static_cast<const kernels::TensorHandle<T>*>(disk.get()) : handle.get();
  }
  /// Collective: the checkpoint fingerprint of the input (io::tensor_fingerprint).
  io::TensorFingerprint fingerprint(const comm::Communicator& world) const;
};

/// The planner's request for this run's options (collective: budgets and --tier are
/// parsed on every rank alike, InputError naming the option). Workload, ranks of the
/// decomposition and strategy are the caller's to set.
plan::Request plan_request(const ComputeOptions& run, kernels::BackendKind kind, int value_bytes,
                           const comm::MpiCommunicator& world);

/// "16,16,4" -> {16, 16, 4}; an entry that is not a number becomes 1 (algo::parse_ranks,
/// which knows the order, reports it).
std::vector<int> rank_list(const std::string& s);

/// Loads the input of cp and tucker (collective), as the memory planner decides: measures
/// the limits (plan::measure_limits), reads the input's header, makes the plan
/// (plan::make_plan), logs it, refuses it up front when nothing fits (InputError naming the
/// limit), and loads the tensor into the chosen tier. With run.dry_run it prints the plan
/// (rank 0) and returns with dry_run set. Text inputs are read before planning (their
/// dims and nonzeros are known only then); the plan then covers what follows the read.
template <typename T>
Input<T> load_input(const LoadOptions& o, const ComputeOptions& run, partition::Scheme scheme,
                    bool allreduce, Compute<T>& cx, const PlanContext& pc,
                    const comm::MpiCommunicator& world, Loaded* info);
/// The tensor, partition and balance fields of `in` from its distributed block (in.dist):
/// the statistics of an input distributed in memory (load_input, the Python module).
template <typename T>
void fill_stats_from_dist(Input<T>& in);

/// Samples the device's free memory (cuda) every few milliseconds on a thread, from
/// construction to stop(), and the process's VmHWM; the measured side of the run record's
/// "memory" object.
class PeakSampler {
 public:
  explicit PeakSampler(bool device);
  ~PeakSampler();
  PeakSampler(const PeakSampler&) = delete;
  PeakSampler& operator=(const PeakSampler&) = delete;
  /// Stops sampling (idempotent). Peaks: host = VmHWM; device = free memory at
  /// construction less the lowest free memory seen.
  void stop();
  std::uint64_t host_peak() const;
  std::uint64_t device_peak() const { return device_peak_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::uint64_t device_peak_ = 0;
};

/// Collective: the run record's "memory" object (planned and measured peaks, max over
/// ranks) and one log line; warns when a measured peak is over its plan.
nlohmann::json memory_record(const plan::Plan& p, PeakSampler& s, const comm::Communicator& world);

/// What a streamed tier must move per iteration and the measured rate of the link it moves
/// over (tier 3: the store's read rate; cuda tier 2: host to device from page-locked memory).
struct TierFloor {
  double bytes_per_iteration = 0, bandwidth = 0;
  std::string what;
};
/// Measures the floor of plan `p`'s tier (collective; the smallest bandwidth over ranks).
template <typename T>
TierFloor tier_floor(const plan::Plan& p, const std::string& path, kernels::Backend<T>& be,
                     int threads, const comm::Communicator& world);

/// Rank 0 logs, for tiers 2 and 3, the copy (tier 2: host to GPU; tier 3: disk reads by the
/// prefetch thread) and compute seconds per iteration, the share of copy time hidden behind
/// compute, the floor and the iteration's ratio to max(floor, compute); returns the
/// "memory_tier" object of the run record.
nlohmann::json report_memory_tier(int tier, const std::string& description, double copy_s,
                                  double compute_s, double overlap, int iterations,
                                  const TierFloor& floor = {}, double iteration_s = 0);

/// "8G" / "512M" / "64K" / "1e9" -> bytes (K, M, G, T are powers of 1024); InputError.
std::size_t parse_bytes(const std::string& s, const char* what);
/// Groups of add_compute_options that not every subcommand uses (one that does not use a
/// group does not register it, so its options are rejected rather than ignored).
enum ComputeOptionGroup : unsigned {
  kStrategyOption = 1u,    ///< --comm-strategy
  kBudgetOptions = 2u,     ///< --device-budget (--mem-budget), --host-budget
  kStreamingOptions = 4u,  ///< --tier, --stream-chunk, --read-ahead
  kDryRunOption = 8u,      ///< --dry-run
  kAllComputeOptions = 15u
};
/// Registers -t/--threads --backend --precision --index-base --json --force, the kernel
/// tuning options (add_tuning_options) and the groups in `which`.
void add_compute_options(CLI::App* sub, ComputeOptions& o, LoadOptions& load,
                         unsigned which = kAllComputeOptions);
/// Registers the "Kernel tuning" group of `sub` into `t` (every field of kernels::Tuning,
/// each with its default in --help and a check; the combination is checked by
/// kernels::check when parsing ends) and --nccl-timeout into `nccl_timeout_s`.
void add_tuning_options(CLI::App* sub, kernels::Tuning& t, double& nccl_timeout_s);
/// Registers --force (every subcommand that writes files): existing outputs that Tessera
/// did not write are replaced only with it; an input never is (io::OutputSet).
void add_force_option(CLI::App* sub, bool& force);

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

}  // namespace tessera::driver
