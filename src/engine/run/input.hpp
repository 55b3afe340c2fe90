// The input of a run: what the memory planner decides and where the tensor is loaded
// (tiers 1-3), the measured memory peaks and the streamed tiers' floors.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "algo/disk_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "partition/partition.hpp"
#include "plan/planner.hpp"
#include "run/compute.hpp"

namespace tessera::run {

/// Options every data-reading subcommand shares.
struct LoadOptions {
  std::string path;
  std::string index_base = "1";
  std::string partition = "auto";  ///< auto | nnz | grid
  std::string grid;                ///< "4x2x1" or empty (automatic)
  bool relabel = false;            ///< random relabelling of indices before partitioning
  bool deal = false;               ///< --deal: the grid's cut modes dealt round-robin
};

/// Whether --deal applies to a run partitioned by `scheme`: only the grid cuts modes. Where
/// it was asked for and does not apply, says so (logged, not refused: tessera cp|tucker and
/// bench cp alike).
bool deal_applies(const LoadOptions& o, partition::Scheme scheme);

/// Whether a run without --grid cuts on the grid of a store's partition (when each rank
/// reads its block): the grid scheme, and no relabelling (--relabel or --deal; under the
/// grid scheme --deal always applies, deal_applies).
bool keeps_stored_grid(const LoadOptions& o, partition::Scheme scheme);
/// The layer strategy's rank grid as load_and_distribute takes it for P ranks (for the plan
/// of its communicators): --grid, else the partition of a store (`h`, may be null) with P
/// blocks where keeps_stored_grid, else partition::choose_grid. Collective: a bad --grid is
/// one error on every rank.
std::vector<int> layer_grid(const LoadOptions& o, partition::Scheme scheme,
                            const std::vector<std::uint64_t>& dims, const io::H5TensorInfo* h,
                            const comm::MpiCommunicator& world);
/// The load options of the allreduce strategy taken instead of auto's layer strategy
/// (PlanContext::layer_by_auto): no grid, nothing dealt.
LoadOptions allreduce_load(const LoadOptions& o);

struct Loaded {
  double read_seconds = 0, distribute_seconds = 0;
  io::TnsReadResult read;  ///< read.local is emptied after distribution
};

/// Reads a FROSTT file collectively and distributes it (prints the startup report on
/// rank 0). `scheme` is the scheme chosen for the run.
template <typename T>
partition::Distributed<T> load_and_distribute(const LoadOptions& o, partition::Scheme scheme,
                                              const comm::Communicator& world, Loaded* info);

/// What the planner is told about the computation (besides ComputeOptions).
struct PlanContext {
  plan::Workload workload = plan::Workload::cp;
  int cp_rank = 16;
  std::vector<int> tucker_ranks;
  std::string tucker_svd = "gram";  ///< tucker --svd (plan::Request::tucker_svd)
  /// CP: the run needs the block distributed in memory (tier 1; not a store read in place):
  /// --observed-only, --holdout, --init nvecs; `tier1_why` names the option.
  bool tier1_only = false;
  std::string tier1_why;
  bool completion = false;  ///< CP --observed-only (plan::Request::completion)
  bool poisson = false;     ///< CP --loss poisson (plan::Request::poisson)
  bool gcp = false;         ///< CP --solver gcp (plan::Request::gcp)
  /// GCP's sample counts (plan::Request::gcp_samples, ...; 0: the defaults).
  int gcp_samples = 0, gcp_zero_samples = 0, gcp_eval_samples = 0;
  double holdout = 0;  ///< CP --holdout (plan::Request::holdout)
  /// CP: --comm-strategy auto took the layer strategy. It runs in memory tier 1 only, so
  /// where a store's layer plan does not fit, load_input loads it for the allreduce strategy
  /// instead (allreduce_load's options) and says why in Input::layer_declined.
  bool layer_by_auto = false;
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
  /// PlanContext::layer_by_auto: why the layer strategy's plan did not fit, where the input
  /// was loaded for the allreduce strategy instead; empty otherwise.
  std::string layer_declined;
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

/// "16,16,4" or "16x16x4" -> {16, 16, 4}; an entry that is not a number becomes 1
/// (algo::parse_ranks, which knows the order, reports it).
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
/// Collective: the memory plan of an input already distributed in memory (the Python
/// module's arrays, after fill_stats_from_dist), as load_input plans a text file: refused
/// with the plan's one line where nothing fits; memory tier 2 set up where the plan takes it.
template <typename T>
void plan_in_memory(Input<T>& in, const std::string& name, const ComputeOptions& run,
                    bool allreduce, Compute<T>& cx, const PlanContext& pc,
                    const comm::MpiCommunicator& world);

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

}  // namespace tessera::run
