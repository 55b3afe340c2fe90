// The input of `tessera bench mttkrp|cp|ttmc|tucker` (bench.hpp): read and distributed, or
// generated on the backend or on the host, and the memory plan made before it is allocated.
#include "run/input.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "bench/bench.hpp"
#include "io/h5store.hpp"
#include "partition/detail.hpp"
#include "plan/measure.hpp"
#include "run/cp_options.hpp"
#include "tensor/synthetic.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {
namespace {

/// bench cp with a solver other than CP-ALS (CP-APR or GCP: --loss, --solver; the pair was
/// checked by check_bench_options).
bool cp_not_als(const BenchArgs& a) {
  return a.what == "cp" && solver_of(a.con) != algo::Solver::als;
}

/// True when --generate makes the tensor on the host (algo::generate) rather than on the
/// backend: bench cp with --observed-only or --holdout (cp_als takes the distributed block),
/// or with --generate-on host. The layer strategy generates each rank's grid block on the
/// backend (partition::synthetic_distribution, Backend::prepare_synthetic with a window).
bool generates_on_host(const BenchArgs& a) {
  if (!a.load.path.empty()) return false;
  if (a.generate_on == "host") return true;
  if (a.what != "cp") return false;
  return a.cp.observed_only || a.cp.holdout > 0 || cp_not_als(a);
}

/// The plan of the cuda backend's own streamed format (prepare_streamed in
/// kernels/cuda/mttkrp/prepare.cu), which the bench measures when --device-budget is under
/// the resident copies: from `resident`, the tier-1 plan made without a device limit, the
/// tensor's device parts (sorted copies, their device sort, tensor-core tiles) leave; one
/// sorted copy per mode goes to pinned host memory, with the block on the host (generated
/// there, or the input's) and the host sort's two permutations while they are made; the
/// device keeps its other parts (factors, outputs, library workspaces, the bandwidth probe)
/// and gives the rest of the budget to the two chunk buffers, which is what the backend is
/// told (Plan::device_budget), so the device peak is the budget. Refused when the host side
/// is over its limit or the budget leaves nothing for the chunks.
plan::Plan backend_streamed_plan(const plan::Plan& resident, const plan::Limits& lim,
                                 std::uint64_t budget, int order, std::size_t value_bytes,
                                 bool block_on_host) {
  plan::Plan p = resident;
  p.limits = lim;
  p.tier = 2;
  p.tier_name = "host-streamed";
  std::vector<plan::Component> keep;
  std::uint64_t other_device = 0;
  for (const auto& c : resident.components) {
    if (c.tensor) continue;
    other_device += c.device;
    keep.push_back(c);
  }
  const auto nnz = static_cast<std::uint64_t>(resident.block_nnz);
  const std::uint64_t per_nnz = static_cast<std::uint64_t>(order) * sizeof(index_t) + value_bytes;
  keep.push_back({"sorted copies, one per mode (pinned host memory)",
                  static_cast<std::uint64_t>(order) * nnz * per_nnz, 0, 0,
                  "the cuda backend's streamed format"});
  keep.push_back({"host sort of the copies: the block and two permutations",
                  (block_on_host ? nnz * per_nnz : 0) + nnz * 2 * sizeof(nnz_t), 0, 0,
                  "freed after prepare"});
  // Measured on an H200 node beyond the parts above (pinned staging, allocator): 48 MiB for
  // the amazon shape (1.74e9 nonzeros), 92 MiB for the nell-2 shape (7.69e7).
  keep.push_back(
      {"pinned staging and allocator overheads",
       (std::uint64_t(128) << 20) + static_cast<std::uint64_t>(order) * nnz * per_nnz / 100, 0, 0,
       "128 MiB and 1% of the copies"});
  const std::uint64_t chunks = budget > other_device ? budget - other_device : 0;
  keep.push_back({"chunk buffers (two)", 0, chunks, 0, "the budget less the device's other parts"});
  p.components = keep;
  p.host_peak = p.device_peak = 0;
  for (const auto& c : p.components) {
    p.host_peak += c.host;
    p.device_peak += c.device;
  }
  p.device_budget = chunks;
  p.fits = chunks > 0 && p.host_peak <= lim.host.bytes;
  if (!p.fits) {
    std::ostringstream os;
    if (chunks == 0)
      os << "--device-budget " << human_bytes(static_cast<double>(budget))
         << " leaves no room for the streamed chunks beside the factors, outputs and library "
            "workspaces ("
         << human_bytes(static_cast<double>(other_device)) << ")";
    else
      os << "the cuda backend's streamed format needs "
         << human_bytes(static_cast<double>(p.host_peak)) << " of host memory per rank (one "
         << "sorted copy per mode in pinned memory), over the limit of "
         << human_bytes(static_cast<double>(lim.host.bytes)) << " (" << lim.host.source << ")";
    p.refusal = os.str();
  }
  return p;
}
}  // namespace

/// File input: loaded and distributed, then (bench mttkrp) prepared. --generate with
/// bench mttkrp, or with bench cp and the allreduce strategy: generated by the backend
/// (prepare_synthetic; on the GPU for cuda), rank r of P taking the ids [r nnz / P,
/// (r + 1) nnz / P) of the sampled tensor; repeated coordinates are not merged, so the
/// tensor has exactly --nnz nonzeros. --generate with bench cp and the layer strategy
/// (which needs a grid partition): algo::generate on the host (merges repeats) and
/// partition::distribute, as that cp_als takes a partition::Distributed.
template <typename T>
BenchInput<T> bench_input(const BenchArgs& a, partition::Scheme scheme,
                          const comm::Communicator& world, kernels::Backend<T>& be) {
  BenchInput<T> in;
  const bool handle_kind = a.what == "mttkrp" || a.what == "ttmc";
  if (a.what == "ttmc" || a.what == "tucker") be.set_workload(kernels::Workload::ttmc);
  // CP-ALS runs its MTTKRPs at --rank: the tensor-core choice is made at prepare (a file's
  // block is prepared by cp_als, which sets the same hint).
  if (a.what == "cp") be.set_rank_hint(a.rank);
  // bench cp generates on the backend unless asked (--generate-on host) or unless it needs the
  // distributed host block (--observed-only, --holdout: cp_als on a Distributed).
  const bool needs_block =
      a.what == "cp" && (a.cp.observed_only || a.cp.holdout > 0 || cp_not_als(a));
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(
        scheme == partition::Scheme::grid || (a.load.grid.empty() && !a.load.relabel),
        "--grid and --relabel apply to bench cp --comm-strategy layer (the "
        "allreduce strategy does not cut the modes)");
    TESSERA_INPUT_CHECK(!(a.load.deal && a.load.relabel),
                        "--deal and --relabel are two relabellings: give one");
    TESSERA_INPUT_CHECK(
        !(needs_block && a.generate_on == "backend"),
        "--generate-on backend: --observed-only, --holdout, --loss other than gaussian and "
        "--solver gcp need the tensor "
        "distributed from the host (use --generate-on host or auto)");
  });
  run::deal_applies(a.load, scheme);  // logs --deal as unused where no mode is cut
  const bool on_backend = a.load.path.empty() && !generates_on_host(a);
  if (a.load.path.empty()) {
    comm::run_collectively(world, [&] {  // the same options everywhere: agreed
      TESSERA_INPUT_CHECK(!a.gen_dims.empty() && a.gen_nnz >= 1,
                          "bench needs a FILE or --generate DIMS with --nnz N");
    });
  }
  const auto dist = a.load.path.empty() ? algo::parse_index_dist(a.dist) : algo::IndexDist{};

  if (on_backend) {
    synthetic::Spec spec;
    std::vector<std::uint64_t> dims;
    comm::run_collectively(world, [&] {  // the same options everywhere: agreed
      dims = parse_dims(a.gen_dims);
      TESSERA_INPUT_CHECK(dims.size() >= 1 && dims.size() <= static_cast<std::size_t>(kMaxOrder),
                          "--generate: order must be 1.." << kMaxOrder);
      TESSERA_INPUT_CHECK(a.gen_nnz < 9.2e18, "--nnz " << a.gen_nnz << " is too large");
    });
    spec.order = static_cast<int>(dims.size());
    for (int n = 0; n < spec.order; ++n) spec.dims[n] = dims[static_cast<std::size_t>(n)];
    spec.powerlaw = dist == algo::IndexDist::powerlaw;
    spec.alpha = a.alpha;
    spec.rank = 4;
    spec.seed = 1;
    const auto nnz = static_cast<std::uint64_t>(a.gen_nnz);
    in.dims = dims;
    in.global_nnz = static_cast<std::int64_t>(nnz);
    in.spec = spec;
    if (scheme == partition::Scheme::grid) {
      // The layer strategy: every rank runs over all ids and keeps its grid block's.
      partition::Distribution d;
      comm::run_collectively(world, [&] {
        const auto grid = a.load.grid.empty()
                              ? std::vector<int>{}
                              : partition::parse_grid(a.load.grid, spec.order, world.size());
        d = partition::synthetic_distribution(
            spec, static_cast<nnz_t>(nnz), grid, world.rank(), world.size(),
            a.load.relabel ? partition::kRelabelSeed : 0, a.load.deal);
      });
      Timer t;
      in.X = be.prepare_synthetic(spec, partition::window_of(spec, d), 0, nnz);
      be.synchronize();
      in.prepare_seconds = t.seconds();
      const nnz_t mine = in.X->nnz();
      partition::detail::record_block_counts(d, mine, world);
      log::info("generated " + format_dims(dims) + " with " + std::to_string(nnz) + " nonzeros (" +
                a.dist + " indices, repeats not merged) on the backend in " +
                std::to_string(in.prepare_seconds) + " s, this rank's grid block only (" +
                std::to_string(mine) + " nonzeros)");
      log::info(d.describe());
      in.count = nnz;
      in.grid = std::move(d);
      return in;
    }
    const auto P = static_cast<unsigned __int128>(world.size());
    const auto r = static_cast<unsigned __int128>(world.rank());
    const auto lo = static_cast<std::uint64_t>(nnz * r / P);
    const auto hi = static_cast<std::uint64_t>(nnz * (r + 1) / P);
    Timer t;
    in.X = be.prepare_synthetic(spec, lo, hi - lo);
    be.synchronize();
    in.prepare_seconds = t.seconds();
    in.first_id = lo;
    in.count = hi - lo;
    log::info("generated " + format_dims(dims) + " with " + std::to_string(nnz) + " nonzeros (" +
              a.dist + " indices, repeats not merged) on the backend in " +
              std::to_string(in.prepare_seconds) + " s (ids " + std::to_string(lo) + ".." +
              std::to_string(hi) + " on this rank)");
    return in;
  }

  partition::Distributed<T> d;
  if (!a.load.path.empty()) {
    d = load_and_distribute<T>(a.load, scheme, world, nullptr);
  } else {  // bench cp: layer strategy, --generate-on host, or a constraint that needs it
    log::info(
        "bench --generate: generating on the host (algo::generate, repeated coordinates "
        "merged), "
        "distributed by the partition scheme: the layer strategy needs a grid partition, "
        "--observed-only and --holdout the host block; otherwise it was asked for with "
        "--generate-on host");
    algo::GenerateOptions o;
    o.dims = parse_dims(a.gen_dims);
    o.nnz = static_cast<std::int64_t>(a.gen_nnz);
    o.structure = algo::Structure::sampled;
    o.dist = dist;
    o.alpha = a.alpha;
    o.rank = 4;
    Timer t;
    auto g = algo::generate(o, world, nullptr);
    log::info("generated " + format_dims(o.dims) + " with " + std::to_string(g.dist.global_nnz) +
              " nonzeros (" + a.dist + " indices) in " + std::to_string(t.seconds()) + " s");
    std::vector<int> grid;
    comm::run_collectively(world, [&] {
      if (!a.load.grid.empty())
        grid = partition::parse_grid(a.load.grid, static_cast<int>(o.dims.size()), world.size());
    });
    d = a.load.relabel ? partition::distribute_relabelled(g.block.template cast<T>(), scheme, grid,
                                                          world, partition::kRelabelSeed)
        : a.load.deal  ? partition::distribute_dealt(g.block.template cast<T>(), grid, world)
                       : partition::distribute(g.block.template cast<T>(), scheme, grid, world);
  }
  in.dims = d.dist.dims;
  in.global_nnz = static_cast<std::int64_t>(d.dist.global_nnz);
  if (handle_kind) {
    Timer tp;
    in.X = be.prepare(d.block);
    be.synchronize();
    in.prepare_seconds = tp.seconds();
  } else {
    in.d = std::move(d);
  }
  return in;
}

/// The bench's memory plan, made before anything large is allocated: a generated tensor or
/// an HDF5 store from its header, a text file after its read (bench_input). The bench
/// measures resident kernels: a plan whose first fitting tier is not 1 is refused with the
/// command that streams it instead.
template <typename T>
plan::Plan bench_plan(const BenchArgs& a, const std::vector<std::uint64_t>& dims, nnz_t nnz,
                      const std::string& path, kernels::BackendKind kind,
                      const comm::MpiCommunicator& world, const comm::Communicator* nccl) {
  plan::Request req = plan_request(a.run, kind, static_cast<int>(sizeof(T)), world);
  if (nccl != nullptr) {  // the layer strategy's communicators, as tessera cp plans them
    req.comm_device_bytes = nccl->device_buffer_bytes();
    req.comm_host_bytes = nccl->host_buffer_bytes();
  }
  req.workload = a.what == "ttmc" || a.what == "tucker" ? plan::Workload::tucker
                 : a.what == "cp"                       ? plan::Workload::cp
                                                        : plan::Workload::mttkrp;
  req.cp_rank = a.rank;
  req.tucker_ranks = std::vector<int>(dims.size(), a.rank);
  if (!a.ranks.empty() && req.workload == plan::Workload::tucker)
    req.tucker_ranks = algo::parse_ranks(a.ranks, static_cast<int>(dims.size()));
  req.tucker_svd = a.svd;
  // The layer strategy's grid (cp, mttkrp); Tucker's rows are its own (req.tucker_rows).
  req.allreduce = req.workload == plan::Workload::tucker || a.run.strategy != "layer";
  // bench ttmc runs the TTMcs alone: no rows combined, no dense stage.
  if (a.what == "ttmc") req.tucker_rows = plan::TuckerRows::owners;
  if (!req.allreduce && world.size() > 1) {  // the grid bench_input's distribution takes
    std::optional<io::H5TensorInfo> h;
    if (!path.empty() && io::is_tensor_store(path, world)) h = io::read_h5_info(path, world);
    req.grid = layer_grid(a.load, partition::Scheme::grid, dims, h ? &*h : nullptr, world);
  }
  req.force_tier = 1;  // bench measures resident kernels
  // measure_bandwidth's two arrays: 512 MiB each on the host, 2 GiB each on a device; none
  // where --bandwidth gives the figure.
  if (a.bandwidth.empty()) {
    const bool dev = kind == kernels::BackendKind::cuda;
    req.extra.push_back({"bandwidth probe (2 arrays)", dev ? 0 : std::uint64_t(1) << 30,
                         dev ? std::uint64_t(4) << 30 : 0, 0, ""});
  }
  req.completion = a.what == "cp" && a.cp.observed_only;
  const algo::Solver solver = a.what == "cp" ? solver_of(a.con) : algo::Solver::als;
  req.poisson = solver == algo::Solver::apr;
  req.gcp = solver == algo::Solver::gcp;
  req.gcp_samples = a.cp.gcp_samples;
  req.gcp_zero_samples = a.cp.gcp_zero_samples;
  req.gcp_eval_samples = a.cp.gcp_eval_samples;
  if (a.what == "cp") req.holdout = a.cp.holdout;
  if (generates_on_host(a)) {
    // algo::generate beyond what a text read holds: the packed keys and the permutation of
    // its sort, 24 bytes per generated nonzero of this rank (measured: 6.01 GB for 76.9M
    // float nonzeros of order 3 on one rank, against 4.54 GB without this part).
    const auto per_rank =
        static_cast<std::uint64_t>(std::ceil(static_cast<double>(nnz) / std::max(world.size(), 1)));
    req.extra.push_back({"host generation (algo::generate: sort keys, permutation)", per_rank * 24,
                         0, 0, "freed before the run"});
  }
  plan::TensorFacts facts;
  if (path.empty()) {
    // On the backend: nothing read. On the host, algo::generate's block is made, merged and
    // distributed like a text input's (modelled as one).
    facts.generated = !generates_on_host(a);
    facts.text = !facts.generated;
    facts.dims = dims;
    facts.nnz = nnz;
    facts.unique = 1;
  } else {
    facts = plan::facts_of_file(path, world);
    if (!facts.store) {  // text, already read: plan what follows
      facts.dims = dims;
      facts.nnz = nnz;
      facts.unique = 1;
    }
  }
  const plan::Limits lim = plan::measure_limits(world, req.backend, ".");
  plan::Plan p = plan::make_plan(req, facts, lim);
  if (!p.fits && req.device_budget && kind == kernels::BackendKind::cuda) {
    // An explicit device budget under the resident copies: the cuda backend's own streamed
    // format (sorted copies in pinned host memory, docs/design-decisions.md) is what the
    // bench then measures, planned here (backend_streamed_plan).
    plan::Request host_only = req;
    host_only.device_budget.reset();
    plan::Limits big = lim;
    big.device.bytes = ~std::uint64_t(0) >> 1;
    const plan::Plan q = plan::make_plan(host_only, facts, big);
    if (q.fits) {
      const auto order = static_cast<int>(dims.size());
      p = backend_streamed_plan(q, lim, *req.device_budget, order, sizeof(T), facts.generated);
      if (p.fits)
        log::info(
            "bench: --device-budget is under the resident copies: the cuda backend streams "
            "its sorted copies from pinned host memory");
    }
  }
  if (!p.fits) {
    req.force_tier = 0;
    const plan::Plan any = plan::make_plan(req, facts, lim);
    std::string hint;
    if (any.fits)
      hint = " (the planner would stream it in tier " + std::to_string(any.tier) +
             ": run `tessera cp " + (path.empty() ? std::string("X.h5") : path) +
             "` for that; bench measures resident kernels)";
    else if (path.empty())
      hint = " (write it with `tessera generate --dims " + a.gen_dims +
             " --nnz N --structure sampled --out X.h5` and run `tessera cp X.h5`, which "
             "streams it)";
    comm::run_collectively(world, [&] { TESSERA_INPUT_CHECK(false, p.refusal + hint); });
  }
  log::info(p.summary());
  return p;
}

#define TESSERA_BENCH_INPUT(T)                                                                  \
  template BenchInput<T> bench_input<T>(const BenchArgs&, partition::Scheme,                    \
                                        const comm::Communicator&, kernels::Backend<T>&);       \
  template plan::Plan bench_plan<T>(const BenchArgs&, const std::vector<std::uint64_t>&, nnz_t, \
                                    const std::string&, kernels::BackendKind,                   \
                                    const comm::MpiCommunicator&, const comm::Communicator*);
TESSERA_BENCH_INPUT(float)
TESSERA_BENCH_INPUT(double)
#undef TESSERA_BENCH_INPUT

}  // namespace tessera::driver::bench
