// The memory planner (DESIGN §8): one place that decides, per rank and before any large
// allocation, where a run's tensor lives (the memory tier), how it is cut into chunks and
// how many bytes each component takes on the host, the device and the disk, from measured
// limits (plan/limits.hpp). Every subcommand that computes (cp, tucker, contract, bench)
// asks it first; `tessera plan` and --dry-run print its answer without running.
//
// Tiers (the first that fits is chosen, unless --tier forces one):
//   1  resident: the backend's prepared format holds the whole block (GPU memory for cuda,
//      host memory for reference/cpu), the raw block stays on the host for the run.
//   2  host-resident, streamed: the raw block (one copy, page-locked for cuda) stays in host
//      memory; every MTTKRP/TTMc streams it chunk by chunk through the backend.
//   3  disk-resident, streamed: the block stays in the HDF5 store and every pass reads it
//      chunk by chunk through a prefetch thread (HDF5 stores with unique coordinates only).
//
// The byte model is written out in docs/planner.md; tests check it against the measured
// peak (VmHWM) on the reference and cpu backends for every tier.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/comm_model.hpp"
#include "plan/limits.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::plan {

/// What computes on the tensor.
enum class Workload {
  cp,        ///< CP-ALS: N MTTKRPs per iteration
  tucker,    ///< Tucker-HOOI: N TTMcs per iteration
  contract,  ///< one sparse contraction (inputs resident; see plan_contract)
  mttkrp,    ///< bench mttkrp: N MTTKRPs per repeat
};
std::string to_string(Workload w);
/// "resident", "host-streamed" or "disk-streamed" for tiers 1 to 3.
const char* tier_name(int tier);

enum class Backend { reference, cpu, cuda };

/// The input as the planner sees it (from the file's header, never its nonzeros).
struct TensorFacts {
  std::string path;        ///< "" for a generated tensor
  bool store = false;      ///< HDF5 tensor store (tier 3 needs one)
  bool generated = false;  ///< made by the backend (bench --generate): no file
  /// Already read and distributed into this process (the Python module's arrays): no read,
  /// and the block is in the process's resident set, which the limits exclude and the
  /// baseline holds, so the plan does not list it again.
  bool held = false;
  int unique = -1;                  ///< store: 1 = coordinates unique, 0 = repeats, -1 = not known
  std::vector<std::uint64_t> dims;  ///< mode lengths
  nnz_t nnz = 0;                    ///< nonzeros (stored entries) in the file
  nnz_t max_block_nnz = 0;          ///< largest per-rank block (0: nnz / ranks, rounded up)
  std::uint64_t file_bytes = 0;     ///< bytes on disk
  int stored_value_bytes = 8;       ///< store: bytes of one stored value (4 or 8)
  std::uint64_t store_chunk_elems = 0;  ///< store: chunk length of its datasets (0: contiguous)
  bool text = false;                    ///< FROSTT text (.tns, .tns.gz): read as double, summed
  int order() const { return static_cast<int>(dims.size()); }
};

/// One part of the plan's memory.
struct Component {
  std::string name;
  std::uint64_t host = 0, device = 0, disk = 0;
  std::string note;
  /// The resident tensor's own device memory (its sorted copies, their device sort, the
  /// tensor-core tiles): what a streamed format replaces (bench's backend_streamed_plan).
  bool tensor = false;
};

/// Tier 3's use of the page cache (--read-cache auto | keep | drop).
enum class ReadCache { automatic, keep, drop };

/// What the run asks for.
struct Request {
  Workload workload = Workload::cp;
  Backend backend = Backend::cpu;
  int value_bytes = 8;            ///< 4 (float) or 8 (double)
  int ranks = 1;                  ///< MPI ranks of the job
  int threads = 1;                ///< threads per rank (store reads stage one buffer each)
  int cp_rank = 16;               ///< CP rank R
  std::vector<int> tucker_ranks;  ///< Tucker ranks R_n
  bool allreduce = true;          ///< strategy: allreduce (else layer, which needs tier 1-2)
  bool relabel = false;           ///< --relabel: tiers 1-2 only
  /// The run needs the distributed block in memory, tier 1 only (CP's --observed-only,
  /// --holdout, --init nvecs): tiers 2-3 are not considered.
  bool tier1_only = false;
  std::string tier1_why;  ///< the option that asks for it, for the plan's reasons
  /// CP --observed-only: a second prepared copy of the block (its pattern) and, per mode,
  /// R(R+1)/2-wide packed outer products and row Grams in the backend's memory.
  bool completion = false;
  /// CP --loss poisson (CP-APR): per mode a Phi (rows x R) beside the factor.
  bool poisson = false;
  /// CP --solver gcp (GCP-SGD): the gradient, Adam's two moments and the last good epoch's
  /// factors and moments: six more arrays of the factors' size; and the samples (below).
  bool gcp = false;
  /// CP --holdout (every solver: ALS, CP-APR, GCP): the fraction of the stored entries held
  /// out; the run keeps a training view of the block beside it on the host and the held-out
  /// entries (holdout_part in planner.cpp). 0: none.
  double holdout = 0;
  /// GCP's --gcp-samples, --gcp-zero-samples and --gcp-eval-samples (0: the defaults of
  /// gcp_sample_counts): the planner counts this rank's share of a step's samples and of the
  /// fixed evaluation sample, and the gradient kernel's per-sample work arrays.
  int gcp_samples = 0, gcp_zero_samples = 0, gcp_eval_samples = 0;
  int force_tier = 0;      ///< --tier: 0 = auto, else 1, 2 or 3
  nnz_t stream_chunk = 0;  ///< --stream-chunk: nonzeros per streamed chunk (0: planned)
  int read_ahead = 2;      ///< --read-ahead: tier 3 chunks read ahead (buffers: + 1)
  /// --read-cache: tier 3 reads through the page cache (keep), dropped behind (drop), or
  /// automatic: drop when the rank's range of the store is larger than its measured share of
  /// the node's memory (the cache could not keep it anyway), else keep.
  ReadCache read_cache = ReadCache::automatic;
  /// --host-budget (bytes per rank): bounds the data the plan lists (tensor, formats,
  /// buffers, dense arrays), not the process's baseline or the fixed slack.
  std::optional<std::uint64_t> host_budget;
  std::optional<std::uint64_t> device_budget;  ///< --device-budget / --mem-budget
  /// Memory the caller adds to every tier (a benchmark's bandwidth probe, say).
  std::vector<Component> extra;
  /// Device memory of one NCCL communicator's buffers, measured when the run's communicator
  /// was made (comm::Communicator::device_buffer_bytes; 0: none or not measured). The layer
  /// strategy splits one communicator per mode after the plan; they are planned as this
  /// much each.
  std::uint64_t comm_device_bytes = 0;
  /// Host memory the same initialisation took (comm::Communicator::host_buffer_bytes): the
  /// layer communicators are planned as this much host memory each too.
  std::uint64_t comm_host_bytes = 0;
  /// The layer strategy's rank grid (partition::Distribution::grid), when known: only a
  /// mode the grid cuts (grid[n] > 1) gets a communicator of its own; a layer of every rank
  /// uses the run's (algo::make_layouts). Empty: not known, every mode counted.
  std::vector<int> grid;
  /// cuda: --tensor-cores is not off, so a tier-1 prepare builds the tensor-core tile sets
  /// (docs/tensor-core-mttkrp.md) in the room left under the tensor's limit; the plan
  /// counts them at their largest.
  bool tensor_cores = true;
  /// --gather-precision fp16|bf16 (float, cuda): the MTTKRP's 16-bit copies of the factors.
  bool gather16 = false;
  double tc_tile_density = 0.25;  ///< --tc-tile-density: a tile's smallest share of nonzeros
  /// Tucker on several ranks: --comm-strategy (how each mode's TTMc rows are combined) and
  /// --svd (all-reduced rows need gram): an all-reduced mode holds the whole Y_(n) and runs
  /// the dense stage on all its rows (tucker_rows_rule).
  TuckerRows tucker_rows = TuckerRows::automatic;
  std::string tucker_svd = "gram";
  /// Tucker rank R_n of `mode` (at least 1): one value names every mode's (--ranks 16), as
  /// the run reads it; a mode past the list is 1.
  int tucker_rank(std::size_t mode) const {
    const auto& r = tucker_ranks;
    return std::max(r.size() == 1 ? r[0] : mode < r.size() ? r[mode] : 1, 1);
  }
};

/// Limits the plan is made against (per rank), each with its source.
struct Limits {
  Limit host;    ///< host memory this rank may use
  Limit device;  ///< device memory this rank may use (cuda); unknown on host backends
  Limit disk;    ///< free space for spills
  std::uint64_t baseline_host = 0;  ///< this process's resident memory when planning (VmRSS)
  std::vector<std::string> notes;   ///< every source looked at
};

struct Plan {
  int tier = 0;           ///< 1, 2 or 3 (0: none fits)
  std::string tier_name;  ///< "resident", "host-streamed", "disk-streamed"
  Workload workload = Workload::cp;
  Backend backend = Backend::cpu;
  nnz_t block_nnz = 0;                  ///< nonzeros of the largest per-rank block
  nnz_t chunk_nnz = 0;                  ///< tiers 2-3: nonzeros per streamed chunk
  int read_ahead = 2;                   ///< tier 3: chunks read ahead (Request::read_ahead)
  bool drop_behind = false;             ///< tier 3: reads dropped behind (Request::read_cache)
  std::string read_cache_why;           ///< tier 3: why keep or drop
  nnz_t chunks = 0;                     ///< tiers 2-3: chunks per pass
  std::vector<Component> components;    ///< at the peak (sums to host_peak/device_peak)
  std::uint64_t host_peak = 0;          ///< planned peak resident memory of a rank (with baseline)
  std::uint64_t device_peak = 0;        ///< planned peak device memory of a rank (cuda)
  std::uint64_t device_budget = 0;      ///< what the backend is told it may use for the tensor
  double read_bytes_per_iteration = 0;  ///< tier 3: bytes read from disk per iteration
  double copy_bytes_per_iteration = 0;  ///< cuda tiers 2-3: bytes copied host -> device
  Limits limits;
  std::vector<std::string> reasons;  ///< why each tier was taken or passed over
  bool fits = false;
  std::string refusal;  ///< when !fits: one line naming the limit and the fix

  nlohmann::json to_json() const;
  /// Several lines for `tessera plan` and --dry-run.
  std::string describe() const;
  /// One line for the log of a run.
  std::string summary() const;
};

/// The communicators the layer strategy splits for a tensor of `order` modes: the modes
/// req.grid cuts, or every mode when the grid is not known.
std::uint64_t layer_splits(const Request& req, int order);

/// The plan for `req` on `t` under `lim`. Pure: no I/O, no collectives.
Plan make_plan(const Request& req, const TensorFacts& t, const Limits& lim);

/// The model of one iteration's time on one rank, for `tessera plan --nprocs/--nodes`
/// (docs/planner.md, "Plans for N ranks" and "Several nodes"): the kernels' bytes over the
/// backend's memory bandwidth times the measured ratio of the kernels to that floor, plus
/// each collective as alpha per step and bytes over the link it crosses (plan/comm_model.hpp:
/// NVLink inside a node, the network between nodes), plus a per-rank constant for the dense
/// work. Rates in bytes/s, latencies and times in s.
struct TimeModel {
  double bandwidth = 4300e9;          ///< --bandwidth: H200 device copy, measured
  double link_bandwidth = 300e9;      ///< --link-bandwidth: per direction, NVLink on an H200 node
  double collective_latency = 20e-6;  ///< --collective-latency: per collective inside a node
  int gpus_per_node = 0;              ///< --gpus-per-node: ranks per node (0: all on one node)
  double inter_bandwidth = 25e9;      ///< --link-gbps: network per GPU per direction
  double inter_latency = 50e-6;       ///< --inter-latency: per collective step across nodes
  double kernel_ratio = 1;            ///< --kernel-ratio: kernel time over its bytes floor
  /// --dense-ms: the dense work (solves, Grams, norms; Tucker's eigen-solves) of one iteration
  /// on ONE rank, measured. CP: dense_fixed_s of it stays on every rank, the rest follows
  /// the factor rows a rank solves (a split mode's rows divide over the ranks, a whole
  /// mode's are solved on every rank; dense_seconds). Tucker: constant per rank.
  double dense_s = 0;
  /// --dense-fixed-ms: the part of dense_s that does not shrink with the rows a rank solves
  /// (launches, the R x R work): congress R16 on one H200 measured 0.10 ms of dense work
  /// with 1.1e3 factor rows, i.e. all of it fixed.
  double dense_fixed_s = 0.1e-3;
  /// --host-wait-us: what a collective the host waits for costs beyond its alpha (Tucker's
  /// row exchanges, dense-stage sums and factor all-gathers; CP's device loop enqueues its
  /// collectives in the graph and pays only alpha): a blocking all-reduce took 68-83 us from
  /// 8 B to 16 MB on 2 H200s (`tessera bench comm`), 20 us of which is the in-stream alpha.
  double host_wait = 50e-6;
  /// The CP engine's rule for the allreduce strategy (algo::CpOptions::whole_rows_max_bytes):
  /// a mode whose rows take more bytes is reduce-scattered and solved split over the ranks.
  double whole_rows_max_bytes = kWholeRowsMaxBytes;
  /// Host backends: `bandwidth` and `link_bandwidth` are a node's memory bandwidth and
  /// `inter_bandwidth` its network, which its ranks share (each rank gets them divided by the
  /// ranks on its node: rank_model). GPUs have their own memory and links: false.
  bool shared_memory = false;
};

/// The model as one of `per_node` ranks on a node sees it (TimeModel::shared_memory: the
/// node's memory, link and network bandwidths divided by them; otherwise `m` itself).
TimeModel rank_model(const TimeModel& m, int per_node);

/// Kernel time lost to the layer strategy's grid partition, as a multiple of the MTTKRPs'
/// bytes floor: the slowest rank's MTTKRP 1.2x the mean (amazon shape, power-law, grid 2x1x1
/// on 2 H200s) with kernels at about 5x their floor (bench cp's ratio there), i.e. 0.2 x 5.
inline constexpr double kGridCostOverKernelFloor = 1.0;

/// One rank's predicted iteration (TimeModel).
struct IterationEstimate {
  std::string strategy = "allreduce";  ///< "allreduce" | "layer" (cp) | "tucker"
  std::vector<int> grid;               ///< layer: the rank grid
  int nodes = 1, per_node = 1;         ///< where the ranks sit
  double mttkrp_bytes = 0;  ///< the kernels' bytes floor (N MTTKRPs or TTMcs) of this rank
  double floor_s = 0;       ///< mttkrp_bytes / bandwidth
  double kernel_s = 0;      ///< floor_s x kernel_ratio
  double comm_bytes = 0;    ///< sum over modes of the combined rows' bytes (I_n x R x v)
  LinkTime link;            ///< what the collectives move per rank, per link kind
  double comm_s = 0;        ///< link.seconds (0 on one rank)
  double grid_cost_s = 0;   ///< layer: the grid's imbalance (kGridCostOverKernelFloor)
  double dense_s = 0;       ///< this rank's share of TimeModel::dense_s (dense_seconds)
  double host_calls = 0;    ///< collectives the host waits for (TimeModel::host_wait each)
  double seconds = 0;       ///< kernel_s + comm_s + grid_cost_s + dense_s
  /// tucker on several ranks: per mode "allreduce" or "owners" (TuckerRows), comma-separated,
  /// and why (tucker_rows_rule), as the run records them (ttmc_rows_strategy).
  std::string rows, rows_why;
  double comm_share() const { return seconds > 0 ? comm_s / seconds : 0; }
};

/// CP-ALS, allreduce strategy: per mode one all-reduce of I_n x R values over all ranks
/// (hierarchical across nodes), for a rank holding `block_nnz` nonzeros of `t` in a run of
/// `ranks` ranks (req: cp_rank, value_bytes). On one node this is the single-ring model of
/// docs/planner.md. Pure.
IterationEstimate estimate_cp_iteration(const Request& req, const TensorFacts& t, nnz_t block_nnz,
                                        int ranks, const TimeModel& m);

/// CP-ALS, layer (medium-grained) strategy on rank grid `grid`: the block touches one chunk of
/// each mode; per mode the chunk's rows are reduce-scattered and all-gathered inside the layer
/// (inside its nodes first, then across them), plus the norms and the Gram summed over all
/// ranks; plus the grid's imbalance, kGridCostOverKernelFloor x the allreduce kernels' floor.
IterationEstimate estimate_cp_layer_iteration(const Request& req, const TensorFacts& t,
                                              nnz_t block_nnz, const std::vector<int>& grid,
                                              const TimeModel& m);

/// Tucker-HOOI (req.tucker_ranks): per mode the TTMc (the block's sorted copy, the factor rows
/// it touches, its output rows x the product of the other ranks), then, by the run's rule
/// (req.tucker_rows, tucker_rows_rule): the whole Y_(n) all-reduced (allreduce), or the
/// alltoallv of the rows to their owners ((P - 1) / P of them leave the rank) and the
/// all-gather of the new factor (I_n x R_n) (owners); the core all-reduced once after an
/// owners mode, ||G||^2 agreed after an all-reduced one; the dense stage (eigen-solves) is
/// dense_s. Pure.
IterationEstimate estimate_tucker_iteration(const Request& req, const TensorFacts& t,
                                            nnz_t block_nnz, int ranks, const TimeModel& m);

/// One distributed contraction as algo::contract runs it routed on the device (docs/sptc.md):
/// the row side's nonzeros routed by an alltoallv ((P - 1) / P of each rank's share leaves),
/// the column side replicated to every rank (an all-gather of its shares), the products
/// divided over the ranks at `products_per_s` (one GPU's measured rate), no output routing.
struct SptcEstimate {
  double route_bytes = 0, replicate_bytes = 0;  ///< per rank: alltoallv, all-gather
  LinkTime link;
  double kernel_s = 0, comm_s = 0, seconds = 0;
  int nodes = 1, per_node = 1;
};
SptcEstimate estimate_sptc(double x_nnz, int x_order, double y_nnz, int y_order, double products,
                           int value_bytes, double products_per_s, int ranks, const TimeModel& m);

/// The inputs of one contraction's time model (tessera plan --workload contract).
struct SptcFacts {
  double x_nnz = 0, y_nnz = 0;  ///< the inputs' nonzeros
  int x_order = 3, y_order = 3;
  double products = 0;        ///< multiply-adds of the contraction
  double products_per_s = 0;  ///< one GPU's measured rate
  int value_bytes = 8;
};

/// The table `tessera plan --workload contract --nprocs/--nodes` prints: per count the
/// estimate and the model with its inputs. `out_json` (may be null) receives one entry per
/// count.
std::string describe_sptc(const SptcFacts& f, const std::vector<int>& counts, const TimeModel& m,
                          nlohmann::json* out_json);

/// Each rank's nonzeros when `nnz` stored nonzeros are split into `ranks` equal shares of
/// the stored order (rank r: [nnz r / P, nnz (r + 1) / P)), as a store without a stored
/// partition of P blocks is read.
std::vector<nnz_t> equal_split(nnz_t nnz, int ranks);

/// The plan of a run on `ranks` ranks, rank by rank (`tessera plan --nprocs`).
struct RanksPlan {
  int ranks = 1;
  std::string partition;         ///< "stored partition" | "equal split"
  std::vector<nnz_t> block_nnz;  ///< each rank's nonzeros
  Plan plan;                     ///< the plan every rank agrees on (its largest block)
  std::vector<std::uint64_t> host_peak, device_peak;  ///< each rank's, in the plan's tier
  bool has_estimate = false;   ///< CP, Tucker: the iteration time model applies
  IterationEstimate estimate;  ///< of the rank with the largest block (cp: allreduce strategy)
  bool has_layer = false;      ///< CP with a grid: the layer strategy's estimate too
  IterationEstimate layer;
  double speedup = 0;  ///< time of the first entry / this one's
  /// More ranks will not help: this entry's predicted time is not 10% below the previous
  /// entry's (entries in increasing rank counts).
  bool no_gain = false;
  nlohmann::json to_json() const;
};

/// Each rank's nonzeros in a run of P ranks and how they were found.
struct RankBlocks {
  std::vector<nnz_t> nnz;  ///< P entries
  std::string how;         ///< "stored partition" | "equal split"
};

/// Per-rank plans for each count in `counts` (increasing): `blocks(P)` gives each rank's
/// nonzeros and `limits(P)` the limits of one rank when P ranks run. Each rank's bytes are
/// planned for its own block in the tier planned for the largest. `grid_of(P)` (cp, may be
/// empty) gives the layer strategy's grid for P ranks, for its estimate beside the
/// allreduce's. Pure.
std::vector<RanksPlan> plan_for_ranks(const Request& req, const TensorFacts& t,
                                      const std::vector<int>& counts,
                                      const std::function<RankBlocks(int)>& blocks,
                                      const std::function<Limits(int)>& limits, const TimeModel& m,
                                      const std::function<std::vector<int>(int)>& grid_of = {});

/// The table `tessera plan --nprocs` prints: one line per count, the model, and where more
/// ranks stop helping.
std::string describe_ranks(const std::vector<RanksPlan>& plans, const TimeModel& m);

/// Host bytes the planner counts for one raw nonzero block of `nnz` entries of order N with
/// `value_bytes` values (coordinates uint32).
inline std::uint64_t coo_bytes(nnz_t nnz, int order, int value_bytes) {
  return static_cast<std::uint64_t>(nnz) * (static_cast<std::uint64_t>(order) * sizeof(index_t) +
                                            static_cast<std::uint64_t>(value_bytes));
}

/// GCP-SGD's sample counts over all ranks (algo/cp_gcp.cpp draws them; the planner counts
/// them): per step `nonzero` samples of the training nonzeros and `zero` entries taken as 0,
/// and the fixed evaluation sample of `eval` nonzeros and as many zeros.
struct GcpSamples {
  std::int64_t nonzero = 0, zero = 0, eval = 0;
};

/// The counts for `training_nonzeros` (> 0) training nonzeros from the options (0: default):
/// nonzero = samples, else 1% of the training nonzeros and at least 1000; zero =
/// zero_samples, else nonzero; eval = eval_samples, else 100000; nonzero and eval at most
/// the training nonzeros.
inline GcpSamples gcp_sample_counts(nnz_t training_nonzeros, int samples, int zero_samples,
                                    int eval_samples) {
  const std::int64_t nt = training_nonzeros;
  GcpSamples s;
  s.nonzero = samples > 0 ? std::min<std::int64_t>(samples, nt)
                          : std::min<std::int64_t>(nt, std::max<std::int64_t>(1000, nt / 100));
  s.zero = zero_samples > 0 ? zero_samples : s.nonzero;
  s.eval = std::min<std::int64_t>(nt, eval_samples > 0 ? eval_samples : 100000);
  return s;
}

/// Default nonzeros per streamed chunk (16 Mi) and the smallest chunk the planner makes.
inline constexpr nnz_t kDefaultChunkNnz = nnz_t(1) << 24;
inline constexpr nnz_t kMinChunkNnz = nnz_t(1) << 10;

/// Slack added to every host peak: allocator fragmentation and library working memory that
/// the model does not list (MPI, HDF5, OpenMP stacks).
inline constexpr std::uint64_t kHostSlackBytes = std::uint64_t(48) << 20;

}  // namespace tessera::plan
