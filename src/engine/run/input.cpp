// The input of cp and tucker through the memory planner: measure, plan, refuse or load into
// the chosen tier; and the measured side of the plan (peak host and device memory).
#include "run/input.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "algo/host_tier.hpp"
#include "io/dedup.hpp"
#include "io/h5store.hpp"
#include "kernels/factories.hpp"
#include "plan/measure.hpp"
#include "run/checkpoint.hpp"
#include "run/compute.hpp"
#include "run/record.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"

namespace tessera::run {
namespace {

plan::Backend plan_backend(kernels::BackendKind k) {
  switch (k) {
    case kernels::BackendKind::cuda:
      return plan::Backend::cuda;
    case kernels::BackendKind::reference:
      return plan::Backend::reference;
    default:
      return plan::Backend::cpu;
  }
}

/// The folder that receives spills next to the input (free disk is measured there).
std::string spill_dir_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

/// This rank's range of a store: its block of a stored partition of exactly P blocks, else
/// an equal share of the stored order (one contiguous range; memory tier 3 streams it).
std::pair<nnz_t, nnz_t> store_range(const io::H5TensorInfo& h, int r, int P) {
  if (h.partition && h.partition->nblocks() == P) return h.partition->block_range(r);
  const nnz_t a = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * r / P);
  const nnz_t b = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * (r + 1) / P);
  return {a, b - a};
}

/// Pieces of at least this many nonzeros are dealt to the ranks by store_ranges (default).
constexpr nnz_t kDealPiece = nnz_t(1) << 22;
/// At most this many pieces per rank.
constexpr nnz_t kDealMaxPieces = 64;

/// How a store read in its stored order is shared by the ranks: dealt in pieces of at least
/// the returned count of nonzeros (the default, kDealPiece), or 0: P contiguous ranges.
/// TESSERA_STORE_READ = dealt | dealt:<nonzeros per piece> | contiguous (for comparisons
/// and tests; docs/multi-gpu.md).
nnz_t store_deal_piece() {
  const char* e = std::getenv("TESSERA_STORE_READ");
  const std::string v = e == nullptr ? "" : e;
  if (v.empty() || v == "dealt") return kDealPiece;
  if (v == "contiguous") return 0;
  if (v.rfind("dealt:", 0) == 0) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str() + 6, &end, 10);
    if (end != v.c_str() + 6 && *end == 0 && n >= 1) return static_cast<nnz_t>(n);
  }
  TESSERA_INPUT_CHECK(false,
                      "TESSERA_STORE_READ must be dealt, dealt:<nonzeros per piece> or "
                      "contiguous, got '"
                          << v << "'");
  return 0;
}

/// This rank's ranges of a store in memory tiers 1-2: its block of a stored partition of
/// exactly P blocks; else, with `piece` > 0, pieces of the stored order dealt round-robin
/// (piece j of P k equal pieces to rank j mod P, k <= 64 pieces of >= `piece` nonzeros), so
/// every rank holds a similar mix of the order's heavy and light slices (a contiguous
/// share of a power-law tensor sorted by mode 0 gives one rank the few heaviest slices,
/// docs/multi-gpu.md); with `piece` 0 one contiguous equal share. Counts differ by at most
/// k between ranks.
std::vector<std::pair<nnz_t, nnz_t>> store_ranges(const io::H5TensorInfo& h, int r, int P,
                                                  nnz_t piece) {
  const bool by_block = h.partition && h.partition->nblocks() == P;
  if (by_block || piece == 0 || P == 1) return {store_range(h, r, P)};
  const nnz_t k = std::clamp<nnz_t>(h.nnz / (static_cast<nnz_t>(P) * piece), 1, kDealMaxPieces);
  const auto K = static_cast<__int128>(k) * P;
  std::vector<std::pair<nnz_t, nnz_t>> out;
  for (nnz_t j = static_cast<nnz_t>(r); j < static_cast<nnz_t>(K); j += static_cast<nnz_t>(P)) {
    const auto a = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * j / K);
    const auto b = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * (j + 1) / K);
    out.emplace_back(a, b - a);
  }
  return out;
}

nnz_t total_count(const std::vector<std::pair<nnz_t, nnz_t>>& ranges) {
  nnz_t n = 0;
  for (const auto& [a, c] : ranges) n += c;
  return n;
}

/// Reads this rank's ranges of a store (stored order) straight into the run's arrays, as
/// chunks of `chunk` nonzeros (one chunk of everything when chunk >= the total).
template <typename T>
std::vector<SparseTensor<T>> read_store_chunks(const std::string& path,
                                               const std::vector<std::pair<nnz_t, nnz_t>>& ranges,
                                               nnz_t chunk, int threads) {
  io::H5TensorReader reader(path, true, 0);
  const int N = static_cast<int>(reader.info().dims.size());
  const nnz_t count = total_count(ranges);
  std::vector<SparseTensor<T>> out;
  Progress progress(log::rank() == 0, "reading", std::filesystem::path(path).filename().string(),
                    static_cast<std::uint64_t>(count), "nonzeros");
  // Reads of at most 64 Mi nonzeros: the progress line moves and a bad value is found early.
  const nnz_t piece = nnz_t(1) << 26;
  std::size_t ri = 0;  // the range being read, and how far into it
  nnz_t in_range = 0;
  for (nnz_t at = 0; at < count || (count == 0 && out.empty()); at += chunk) {
    const nnz_t n = std::min(chunk, count - at);
    SparseTensor<T> x(reader.info().dims);
    for (auto& col : x.idx) col.resize(static_cast<std::size_t>(n));
    x.vals.resize(static_cast<std::size_t>(n));
    for (nnz_t done = 0; done < n;) {
      while (in_range == ranges[ri].second) {
        ++ri;
        in_range = 0;
      }
      const nnz_t k = std::min({piece, n - done, ranges[ri].second - in_range});
      index_t* idx[kMaxOrder] = {};
      for (int m = 0; m < N; ++m) idx[m] = x.idx[static_cast<std::size_t>(m)].data() + done;
      reader.read_direct<T>(ranges[ri].first + in_range, k, idx, x.vals.data() + done, threads);
      done += k;
      in_range += k;
      progress.update(static_cast<std::uint64_t>(at + done));
    }
    out.push_back(std::move(x));
    if (count == 0) break;
  }
  return out;
}

template <typename T>
void fill_stats_from_store(Input<T>& in, const io::H5TensorInfo& h, int P, bool by_block,
                           nnz_t deal_piece) {
  nnz_t mx = 0, mn = h.nnz;
  for (int r = 0; r < P; ++r) {
    const nnz_t c = total_count(store_ranges(h, r, P, deal_piece));
    mx = std::max(mx, c);
    mn = std::min(mn, c);
  }
  in.dims = h.dims;
  in.global_nnz = h.nnz;
  in.grid.assign(h.dims.size(), 1);
  in.min_block_nnz = mn;
  in.max_block_nnz = mx;
  const double mean = P > 0 ? static_cast<double>(h.nnz) / P : 0.0;
  in.imbalance = mean > 0 ? static_cast<double>(mx) / mean : 1.0;
  in.partition_scheme = by_block ? "store-blocks" : deal_piece > 0 ? "store-dealt" : "store-order";
}

/// Tier 2 from a distributed block: the raw chunks in host memory (page-locked for cuda).
template <typename T>
void make_host_tier(Input<T>& in, const plan::Plan& p, kernels::Backend<T>& be,
                    const comm::Communicator& world) {
  io::add_to_fingerprint(in.dist->block, original_index_of(in.dist->dist), &in.fingerprint_part);
  SparseTensor<T> block = std::move(in.dist->block);
  in.dist.reset();
  comm::run_collectively(world, [&] {
    in.handle = std::make_unique<algo::HostTensor<T>>(
        std::move(block), p.chunk_nnz, be.kind() == kernels::BackendKind::cuda ? &be : nullptr);
  });
}

}  // namespace

bool deal_applies(const LoadOptions& o, partition::Scheme scheme) {
  const bool deal = o.deal && scheme == partition::Scheme::grid;
  if (o.deal && !deal)
    log::info("--deal: not used, the nnz partition (the allreduce strategy) cuts no mode");
  return deal;
}

bool keeps_stored_grid(const LoadOptions& o, partition::Scheme scheme) {
  return scheme == partition::Scheme::grid && !o.relabel && !o.deal;
}

std::vector<int> layer_grid(const LoadOptions& o, partition::Scheme scheme,
                            const std::vector<std::uint64_t>& dims, const io::H5TensorInfo* h,
                            const comm::MpiCommunicator& world) {
  const int P = world.size();
  std::vector<int> grid;
  comm::run_collectively(world, [&] {
    if (!o.grid.empty())
      grid = partition::parse_grid(o.grid, static_cast<int>(dims.size()), P);
    else if (h && h->partition && h->partition->nblocks() == P && keeps_stored_grid(o, scheme))
      grid = h->partition->grid;
    else
      grid = partition::choose_grid(dims, P);
  });
  return grid;
}

LoadOptions allreduce_load(const LoadOptions& o) {
  LoadOptions a = o;
  a.grid.clear();
  a.deal = false;
  return a;
}

template <typename T>
void fill_stats_from_dist(Input<T>& in) {
  const auto& dd = in.dist->dist;
  in.dims = dd.dims;
  in.global_nnz = dd.global_nnz;
  in.duplicates = dd.duplicates;
  in.grid = dd.grid;
  in.imbalance = dd.imbalance;
  in.min_block_nnz = dd.min_block_nnz;
  in.max_block_nnz = dd.max_block_nnz;
  in.partition_scheme = partition::to_string(dd.scheme);
}

plan::Request plan_request(const ComputeOptions& run, kernels::BackendKind kind, int value_bytes,
                           const comm::MpiCommunicator& world) {
  plan::Request req;
  req.backend = plan_backend(kind);
  req.value_bytes = value_bytes;
  req.ranks = world.size();
  req.threads = effective_threads(run.threads);
  // The tensor-core tile sets the backend may build (counted per rank, docs/planner.md).
  req.tensor_cores = run.tuning.tensor_cores != kernels::TensorCores::off;
  req.gather16 = run.tuning.gather_precision != kernels::GatherPrecision::full;
  req.tc_tile_density = run.tuning.tc_tile_density;
  // Tucker's rows on several ranks (cp refuses owners; tucker refuses layer).
  req.tucker_rows = run.strategy == "allreduce" ? plan::TuckerRows::allreduce
                    : run.strategy == "owners"  ? plan::TuckerRows::owners
                                                : plan::TuckerRows::automatic;
  comm::run_collectively(world, [&] {
    if (!run.host_budget.empty())
      req.host_budget = plan::parse_bytes(run.host_budget, "--host-budget");
    if (!run.device_budget.empty())
      req.device_budget = plan::parse_bytes(run.device_budget, "--device-budget");
    req.force_tier = run.tier == "auto" ? 0 : std::stoi(run.tier);
    TESSERA_INPUT_CHECK(run.stream_chunk >= 0, "--stream-chunk must be >= 0");
    req.stream_chunk = run.stream_chunk;
    TESSERA_INPUT_CHECK(run.read_ahead >= 1 && run.read_ahead <= 64,
                        "--read-ahead must be 1 to 64, got " << run.read_ahead);
    req.read_ahead = run.read_ahead;
    TESSERA_INPUT_CHECK(
        run.read_cache == "auto" || run.read_cache == "keep" || run.read_cache == "drop",
        "--read-cache must be auto, keep or drop, got '" << run.read_cache << "'");
    req.read_cache = run.read_cache == "keep"   ? plan::ReadCache::keep
                     : run.read_cache == "drop" ? plan::ReadCache::drop
                                                : plan::ReadCache::automatic;
  });
  return req;
}

std::vector<int> rank_list(const std::string& s) {
  std::vector<int> out;
  for (std::size_t p = 0, q; p <= s.size(); p = q + 1) {
    q = s.find_first_of(",x", p);  // "16,16,4" or "16x16x4", as algo::parse_ranks reads them
    if (q == std::string::npos) q = s.size();
    try {
      out.push_back(std::stoi(s.substr(p, q - p)));
    } catch (...) {
      out.push_back(1);
    }
  }
  return out;
}

template <typename T>
io::TensorFingerprint Input<T>::fingerprint(const comm::Communicator& world) const {
  if (disk) return io::finish_fingerprint(disk->fingerprint_part(), dims, world);
  if (handle) return io::finish_fingerprint(fingerprint_part, dims, world);
  return io::tensor_fingerprint(dist->block, original_index_of(dist->dist), world);
}

/// The planner's request of a run: the options' budgets and backend, the communicator's
/// buffers, and the workload's facts from the plan context.
template <typename T>
plan::Request input_request(const ComputeOptions& run, Compute<T>& cx, const PlanContext& pc,
                            const comm::MpiCommunicator& world) {
  plan::Request req = plan_request(run, cx.kind, static_cast<int>(sizeof(T)), world);
  if (cx.nccl) {
    req.comm_device_bytes = cx.nccl->device_buffer_bytes();
    req.comm_host_bytes = cx.nccl->host_buffer_bytes();
  }
  req.workload = pc.workload;
  req.cp_rank = pc.cp_rank;
  req.tucker_ranks = pc.tucker_ranks;
  req.tucker_svd = pc.tucker_svd;
  req.tier1_only = pc.tier1_only;
  req.tier1_why = pc.tier1_why;
  req.completion = pc.completion;
  req.poisson = pc.poisson;
  req.gcp = pc.gcp;
  req.gcp_samples = pc.gcp_samples;
  req.gcp_zero_samples = pc.gcp_zero_samples;
  req.gcp_eval_samples = pc.gcp_eval_samples;
  req.holdout = pc.holdout;
  return req;
}

template <typename T>
Input<T> load_input(const LoadOptions& o, const ComputeOptions& run, partition::Scheme scheme,
                    bool allreduce, Compute<T>& cx, const PlanContext& pc,
                    const comm::MpiCommunicator& world, Loaded* info) {
  Input<T> in;
  const int P = world.size(), me = world.rank();
  plan::Request req = input_request(run, cx, pc, world);
  req.allreduce = allreduce && scheme == partition::Scheme::nnz && o.grid.empty();
  req.relabel = o.relabel || o.deal;
  plan::TensorFacts facts;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(std::filesystem::exists(o.path),
                        "cannot open '" << o.path << "': no such file");
  });
  facts = plan::facts_of_file(o.path, world);
  const plan::Limits lim = plan::measure_limits(world, req.backend, spill_dir_of(o.path));

  std::optional<io::H5TensorInfo> h;
  if (facts.store) h = io::read_h5_info(o.path, world);
  const bool by_block = h && h->partition && h->partition->nblocks() == P;
  // The layer strategy's grid as load_and_distribute will take it (--grid, else the store's
  // partition, else partition::choose_grid), for its communicators in the header's plan; the
  // plan after distributing takes the grid the distribution used.
  if (!req.allreduce && P > 1 && facts.store)
    req.grid = layer_grid(o, scheme, facts.dims, h ? &*h : nullptr, world);
  // A store with unique coordinates run with the allreduce strategy is read in its stored
  // order: no exchange, no sort (the nnz scheme's equal shares, or the stored blocks).
  const bool store_order =
      facts.store && facts.unique == 1 && req.allreduce && !o.relabel && !o.deal && !pc.tier1_only;

  // Read in memory (tiers 1-2), the stored order is dealt to the ranks in pieces; tier 3
  // streams one contiguous range per rank.
  nnz_t deal_piece = 0;
  if (store_order && !by_block && P > 1)
    comm::run_collectively(world, [&] { deal_piece = store_deal_piece(); });
  const bool dealt = deal_piece > 0;
  if (facts.store) {
    fill_stats_from_store(in, *h, P, by_block, deal_piece);
    facts.max_block_nnz = in.max_block_nnz;
    in.plan = plan::make_plan(req, facts, lim);  // from the header
    if (pc.layer_by_auto && !in.plan.fits) {
      // The layer strategy runs in tier 1 only: allreduce instead, which tiers 2-3 stream.
      std::string why = in.plan.refusal;
      for (const std::string& r : in.plan.reasons)  // tier 1's line says it shortest
        if (r.rfind("tier 1", 0) == 0) why = r;
      log::info(
          "--comm-strategy auto: allreduce after all (the layer strategy runs in memory "
          "tier 1 only, and its plan does not fit: " +
          why + ")");
      PlanContext apc = pc;
      apc.layer_by_auto = false;
      if (o.deal) log::info("--deal: not used, the allreduce strategy cuts no mode");
      const LoadOptions a = allreduce_load(o);
      const partition::Scheme nnz =
          a.partition != "auto" ? partition::parse_scheme(a.partition) : partition::Scheme::nnz;
      Input<T> again = load_input<T>(a, run, nnz, true, cx, apc, world, info);
      again.layer_declined = why;
      return again;
    }
    // Tier 3 cannot sum repeated coordinates: when it is forced or the only way left, the
    // fix is a deduplicated copy, not more memory.
    if (h->has_duplicates != 0 && (req.force_tier == 3 || !in.plan.fits))
      comm::run_collectively(world, [&] { io::require_unique_store(*h); });
  }
  // Text is read before planning (its dims and nonzeros are known only then); a store that
  // must be redistributed (repeats, the layer strategy, --relabel) is read as text is when
  // its header plan says tier 1 or 2, and planned again with the real blocks.
  const bool read_all =
      facts.text || (facts.store && !store_order && in.plan.fits && in.plan.tier <= 2);
  if (read_all && !(run.dry_run && facts.store)) {
    if (facts.text && run.dry_run)
      log::info("plan: " + o.path +
                " is text: reading it to learn its dims and nonzeros "
                "(tessera convert writes an HDF5 store, planned from its header)");
    in.dist.emplace(load_and_distribute<T>(o, scheme, world, info));
    fill_stats_from_dist(in);
    facts.dims = in.dims;
    facts.nnz = in.global_nnz;
    facts.max_block_nnz = in.max_block_nnz;
    facts.unique = 1;     // summed while distributing
    facts.store = false;  // in memory now: tiers 1-2
    req.grid = in.grid;
    in.plan = plan::make_plan(req, facts, lim);
  }
  const plan::Plan& p = in.plan;
  if (run.dry_run) {
    if (me == 0) std::printf("%s", p.describe().c_str());
    std::fflush(stdout);
    in.dry_run = true;
    return in;
  }
  comm::run_collectively(world, [&] { TESSERA_INPUT_CHECK(p.fits, p.refusal); });
  log::info(p.summary());
  log::debug(plan::describe_limits(lim));
  if (cx.kind == kernels::BackendKind::cuda) cx.backend->set_memory_budget(p.device_budget);

  if (p.tier == 3) {
    if (facts.store && !by_block) in.partition_scheme = "store-order";
    if (!o.grid.empty() || o.partition != "auto")
      log::info("memory tier 3: --grid/--partition do not apply (each rank streams " +
                std::string(by_block ? "its block of the stored partition"
                                     : "an equal share of the stored order") +
                ")");
    Timer t;
    comm::run_collectively(world, [&] {
      algo::DiskTensorOptions d;
      d.path = o.path;
      if (by_block) {
        d.block = me;
      } else {
        const auto [a, c] = store_range(*h, me, P);
        d.first = a;
        d.count = c;
      }
      d.chunk_nnz = p.chunk_nnz;
      d.read_threads = effective_threads(run.threads);
      d.read_ahead = p.read_ahead;
      d.drop_behind = p.drop_behind;
      // The cuda backend checks every coordinate on the device (mttkrp_accumulate).
      d.check_later_passes = cx.kind != kernels::BackendKind::cuda;
      in.disk = std::make_unique<algo::DiskTensor<T>>(d);
    });
    const double open_s = world.allreduce_value(t.seconds(), comm::ReduceOp::max);
    in.dist.reset();
    log::info("first pass over " + o.path + " (checks, distinct rows, norm) in " +
              std::to_string(open_s) + " s; rank 0: " + in.disk->describe());
    if (info) {
      info->read_seconds = open_s;
      info->read.bytes = static_cast<std::size_t>(in.disk->mttkrp_stream_bytes(0));
    }
    return in;
  }
  if (in.dist) {
    if (p.tier == 2) make_host_tier(in, p, *cx.backend, world);
    return in;
  }
  // A store read in its stored order, straight into place: tier 1 as one block (prepared,
  // then freed), tier 2 as the streamed chunks themselves.
  Timer t;
  std::vector<SparseTensor<T>> chunks;
  comm::run_collectively(world, [&] {
    const auto ranges = store_ranges(*h, me, P, deal_piece);
    const nnz_t c = total_count(ranges);
    chunks = read_store_chunks<T>(o.path, ranges, p.tier == 2 ? p.chunk_nnz : std::max<nnz_t>(c, 1),
                                  effective_threads(run.threads));
  });
  const double read_s = world.allreduce_value(t.seconds(), comm::ReduceOp::max);
  log::info("read " + o.path + " in its stored order" +
            std::string(dealt ? " (dealt to the ranks in pieces)" : "") + ": " +
            std::to_string(in.global_nnz) + " nonzeros, dims " + format_dims(in.dims) + " in " +
            std::to_string(read_s) + " s");
  if (info) {
    info->read_seconds = read_s;
    info->read.bytes = h->file_bytes;
  }
  for (const auto& c : chunks)
    io::add_to_fingerprint(
        c, [](int, std::uint64_t i) { return i; }, &in.fingerprint_part);
  if (p.tier == 2) {
    comm::run_collectively(world, [&] {
      in.handle = std::make_unique<algo::HostTensor<T>>(
          std::move(chunks), in.dims, p.chunk_nnz,
          cx.kind == kernels::BackendKind::cuda ? cx.backend.get() : nullptr);
    });
  } else {
    // Tier 1: prepared now; the raw block is freed. CP tells the backend its R first, so
    // no tensor-core tile set that auto would decline at that R is built (the algorithm
    // sets it itself for the tensors it prepares).
    if (pc.workload == plan::Workload::cp) cx.backend->set_rank_hint(pc.cp_rank);
    comm::run_collectively(world, [&] { in.handle = cx.backend->prepare(chunks.front()); });
    chunks.clear();
  }
  return in;
}

template <typename T>
void plan_in_memory(Input<T>& in, const std::string& name, const ComputeOptions& run,
                    bool allreduce, Compute<T>& cx, const PlanContext& pc,
                    const comm::MpiCommunicator& world) {
  plan::Request req = input_request(run, cx, pc, world);
  req.allreduce = allreduce;
  req.grid = in.grid;
  plan::TensorFacts facts;
  facts.path = name;  // named in the plan's messages only
  facts.dims = in.dims;
  facts.nnz = in.global_nnz;
  facts.max_block_nnz = in.max_block_nnz;
  facts.unique = 1;   // summed while distributing
  facts.held = true;  // measured below as part of the baseline, not listed again
  const plan::Limits lim = plan::measure_limits(world, req.backend, std::string());
  in.plan = plan::make_plan(req, facts, lim);
  const plan::Plan& p = in.plan;
  comm::run_collectively(world, [&] { TESSERA_INPUT_CHECK(p.fits, p.refusal); });
  log::info(p.summary());
  if (cx.kind == kernels::BackendKind::cuda) cx.backend->set_memory_budget(p.device_budget);
  if (p.tier == 2) make_host_tier(in, p, *cx.backend, world);
}

#define TESSERA_LOAD_INPUT(T)                                                                   \
  template struct Input<T>;                                                                     \
  template Input<T> load_input<T>(const LoadOptions&, const ComputeOptions&, partition::Scheme, \
                                  bool, Compute<T>&, const PlanContext&,                        \
                                  const comm::MpiCommunicator&, Loaded*);                       \
  template void fill_stats_from_dist<T>(Input<T>&);                                             \
  template void plan_in_memory<T>(Input<T>&, const std::string&, const ComputeOptions&, bool,   \
                                  Compute<T>&, const PlanContext&, const comm::MpiCommunicator&);
TESSERA_LOAD_INPUT(float)
TESSERA_LOAD_INPUT(double)
#undef TESSERA_LOAD_INPUT

// ---- measured peaks ----

struct PeakSampler::State {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::uint64_t start_free = 0, min_free = 0;
};

PeakSampler::PeakSampler(bool device) : s_(std::make_unique<State>()) {
  if (!device) return;
  const kernels::DeviceMemory m = kernels::cuda_memory_info(false);
  if (m.total == 0) return;
  s_->start_free = s_->min_free = m.free;
  // This rank's GPU (the NCCL bootstrap made it current here): the sampler thread must name
  // it, or it would start on device 0, put a context there and sample that GPU instead.
  const int gpu = kernels::cuda_current_device();
  s_->thread = std::thread([st = s_.get(), gpu] {
    std::unique_lock<std::mutex> lk(st->mu);
    while (!st->stop) {
      lk.unlock();
      const kernels::DeviceMemory d = kernels::cuda_memory_info(false, gpu);
      lk.lock();
      if (d.total > 0) st->min_free = std::min<std::uint64_t>(st->min_free, d.free);
      st->cv.wait_for(lk, std::chrono::milliseconds(5), [st] { return st->stop; });
    }
  });
}

PeakSampler::~PeakSampler() {
  stop();
}

void PeakSampler::stop() {
  if (!s_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  s_->thread.join();
  device_peak_ = s_->start_free > s_->min_free ? s_->start_free - s_->min_free : 0;
}

std::uint64_t PeakSampler::host_peak() const {
  return plan::process_memory().hwm;
}

nlohmann::json memory_record(const plan::Plan& p, PeakSampler& s, const comm::Communicator& world) {
  s.stop();
  std::uint64_t peaks[2] = {s.host_peak(), s.device_peak()};
  world.allreduce(peaks, 2, comm::ReduceOp::max);
  const bool cuda = p.backend == plan::Backend::cuda;
  char line[320];
  std::snprintf(
      line, sizeof(line), "memory per rank: host peak %s measured (VmHWM) vs %s planned (%.2f)%s%s",
      human_bytes(static_cast<double>(peaks[0])).c_str(),
      human_bytes(static_cast<double>(p.host_peak)).c_str(),
      p.host_peak > 0 ? static_cast<double>(peaks[0]) / static_cast<double>(p.host_peak) : 0.0,
      cuda ? "; device peak " : "",
      cuda ? (human_bytes(static_cast<double>(peaks[1])) + " measured (sampled) vs " +
              human_bytes(static_cast<double>(p.device_peak)) + " planned")
                 .c_str()
           : "");
  log::info(line);
  if (peaks[0] > p.host_peak)
    log::warn("the measured host peak is over the plan: the planner's model missed " +
              human_bytes(static_cast<double>(peaks[0] - p.host_peak)) +
              " (please report it with the run record)");
  if (cuda && peaks[1] > p.device_peak)
    log::warn("the measured device peak is over the plan by " +
              human_bytes(static_cast<double>(peaks[1] - p.device_peak)));
  nlohmann::json j = p.to_json();
  j["measured_peak_host_bytes"] = peaks[0];
  j["measured_peak_host_source"] = "VmHWM of /proc/self/status, max over ranks";
  if (cuda) {
    j["measured_peak_device_bytes"] = peaks[1];
    j["measured_peak_device_source"] =
        "free memory at planning less the lowest free memory sampled every 5 ms, max over ranks";
  }
  return j;
}

}  // namespace tessera::run
