// tessera plan: the memory plan of a cp or tucker run, printed without running it (the same
// as --dry-run on cp and tucker); with --nprocs, the plan per rank of runs on other rank
// counts and a predicted CP iteration time for each (docs/planner.md, "Plans for N ranks").
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "algo/cp_strategy.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "kernels/factories.hpp"
#include "partition/partition.hpp"
#include "plan/measure.hpp"
#include "run/validate.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct PlanArgs {
  LoadOptions load;
  std::string workload = "cp";
  int rank = 16;
  std::string ranks = "16";
  std::string svd = "gram";  ///< --svd (tucker)
  ComputeOptions run;
  std::string nprocs;      ///< --nprocs 1,2,4,8 ("" = the ranks of this job only)
  int ranks_per_node = 0;  ///< --ranks-per-node (0: every rank on this node)
  double bandwidth_gbs = 4300, link_gbs = 300, latency_us = 20;
  bool bandwidth_given = false, link_given = false;  ///< --bandwidth, --link-bandwidth typed
  std::string nodes;      ///< --nodes 1,2,4 (with --gpus-per-node: runs of N x G ranks)
  int gpus_per_node = 0;  ///< --gpus-per-node (0: every rank on one node)
  double net_gbs = 25;    ///< --link-gbps: network GB/s per GPU per direction
  double net_latency_us = 50, kernel_ratio = 1, dense_ms = 0;
  double dense_fixed_ms = plan::TimeModel{}.dense_fixed_s * 1e3;
  double host_wait_us = plan::TimeModel{}.host_wait * 1e6;
  std::string contract_nnz;                ///< --contract-nnz X,Y (workload contract)
  std::string contract_order = "3,3";      ///< --contract-order X,Y
  double products = 0, products_rate = 0;  ///< --products, --products-rate
  std::string shape;     ///< --shape 4821207x1774269x1805187: plan a tensor without a file
  double shape_nnz = 0;  ///< --nnz with --shape
};

/// "1,2,4,8" -> {1, 2, 4, 8}, sorted, without repeats; empty on anything that is not a list
/// of counts from 1 to 2^20.
std::vector<int> parse_counts(const std::string& s) {
  std::vector<int> out;
  for (std::size_t p = 0, q; p <= s.size(); p = q + 1) {
    q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    int n = 0;
    const auto [e, ec] = std::from_chars(s.data() + p, s.data() + q, n);
    if (ec != std::errc() || e != s.data() + q || n < 1 || n > (1 << 20)) return {};
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// A number as %.6g prints it (1e+19, 2.5).
std::string human_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

/// A number > 0 (`non_negative`: >= 0), with a message that says so.
CLI::Validator number_check(bool non_negative) {
  return CLI::Validator(
      [non_negative](std::string& v) -> std::string {
        double x = 0;
        const auto [e, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool ok = ec == std::errc() && e == v.data() + v.size() && std::isfinite(x) &&
                        (non_negative ? x >= 0 : x > 0);
        return ok ? std::string()
                  : std::string("expected a number ") + (non_negative ? ">= 0" : "> 0") +
                        ", got '" + v + "'";
      },
      non_negative ? "NUMBER >= 0" : "NUMBER > 0");
}

/// The backend of the plan. `--backend cuda --device-budget B` where no GPU is visible (a
/// login node, a CPU-only build) plans for a card of B per rank without making a backend;
/// without --device-budget there is no card to plan for: refused, naming the option.
template <typename T>
Compute<T> plan_compute(const ComputeOptions& run, const comm::MpiCommunicator& world) {
  if (run.backend == "cuda") {
    const int seen = kernels::cuda_built() ? kernels::cuda_device_count() : 0;
    if (world.allreduce_value(seen, comm::ReduceOp::min) == 0) {
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(
            !run.device_budget.empty(),
            "tessera plan --backend cuda: no GPU is visible here"
                << (kernels::cuda_built() ? "" : " (this build has no CUDA)")
                << " to measure; name the card to plan for with --device-budget, the "
                   "device memory per rank (e.g. --device-budget 80G for an 80 GB card)");
      });
      log::info("no GPU is visible here: planning for a card with --device-budget " +
                run.device_budget + " per rank");
      Compute<T> c;
      c.kind = kernels::BackendKind::cuda;
      c.data = &world;
      return c;
    }
  }
  return make_compute<T>(run, world);
}

/// The time model of --nprocs/--nodes from the options (GB/s, us, ms to SI units).
plan::TimeModel time_model(const PlanArgs& a) {
  plan::TimeModel m;
  m.bandwidth = a.bandwidth_gbs * 1e9;
  m.link_bandwidth = a.link_gbs * 1e9;
  m.collective_latency = a.latency_us * 1e-6;
  m.gpus_per_node = a.gpus_per_node;
  m.inter_bandwidth = a.net_gbs * 1e9;
  m.inter_latency = a.net_latency_us * 1e-6;
  m.kernel_ratio = a.kernel_ratio;
  m.dense_s = a.dense_ms * 1e-3;
  m.dense_fixed_s = a.dense_fixed_ms * 1e-3;
  m.host_wait = a.host_wait_us * 1e-6;
  return m;
}

/// The time model of a host backend (cpu, reference): the ranks of a node share its memory
/// bandwidth (TimeModel::shared_memory), which is measured here unless --bandwidth gives it:
/// every rank of this job copies at once (measure_bandwidth, its threads, two 128 MiB arrays), and
/// the node's is the sum over the ranks on rank 0's node. The ranks of a node exchange rows through
/// that memory: --link-bandwidth defaults to it too. --ranks-per-node places the ranks when
/// --gpus-per-node does not. A GPU backend keeps time_model's defaults (an H200 node).
template <typename T>
plan::TimeModel host_time_model(const PlanArgs& a, const ComputeOptions& run, Compute<T>& cx,
                                const comm::MpiCommunicator& world) {
  plan::TimeModel m = time_model(a);
  if (cx.kind == kernels::BackendKind::cuda || !cx.backend) return m;
  m.shared_memory = true;
  // Ranks per node as the memory limits take them (plan_nprocs' limits): --ranks-per-node,
  // else --gpus-per-node.
  if (a.ranks_per_node > 0) m.gpus_per_node = a.ranks_per_node;
  if (a.bandwidth_given && a.link_given) return m;
  // Arrays of 128 MiB: past the last-level cache of a CPU, a model input in a few tenths of
  // a second (the benchmarks' 512 MiB probe is their floors' denominator). Every copy starts
  // on every rank at once and is timed to the slowest.
  const double mine = measure_bandwidth(*cx.backend, run.threads, std::size_t(128) << 20, &world);
  std::vector<double> all(static_cast<std::size_t>(world.size()));
  world.allgather(&mine, all.data(), 1);
  const comm::NodeMap nodes = comm::node_map(world, 0);
  double node = 0;
  for (int q = 0; q < world.size(); ++q)
    if (nodes.node_of.empty() ||
        nodes.node_of[static_cast<std::size_t>(q)] == nodes.node_of.front())
      node += all[static_cast<std::size_t>(q)];
  if (!a.bandwidth_given) m.bandwidth = node;
  if (!a.link_given) m.link_bandwidth = node;
  char gbs[32];
  std::snprintf(gbs, sizeof gbs, "%.0f", node / 1e9);
  const std::string takes =
      !a.bandwidth_given && !a.link_given ? "--bandwidth and --link-bandwidth take it"
      : a.bandwidth_given                 ? "--link-bandwidth takes it (--bandwidth as given)"
                                          : "--bandwidth takes it (--link-bandwidth as given)";
  log::info("plan: host backend: this node's memory copies at " + std::string(gbs) +
            " GB/s (measured here, every rank of this job at once), shared by the ranks of a "
            "node: " +
            takes);
  return m;
}

template <typename T>
void run_plan_nprocs(const PlanArgs& a, const ComputeOptions& run, Compute<T>& cx,
                     partition::Scheme scheme, bool allreduce, const PlanContext& pc,
                     const comm::MpiCommunicator& world) {
  const std::vector<int> counts = parse_counts(a.nprocs);
  plan::Request req = plan_request(run, cx.kind, static_cast<int>(sizeof(T)), world);
  req.workload = pc.workload;
  req.cp_rank = pc.cp_rank;
  req.tucker_ranks = pc.tucker_ranks;
  req.tucker_svd = pc.tucker_svd;
  req.allreduce = allreduce && scheme == partition::Scheme::nnz && a.load.grid.empty();
  req.relabel = a.load.relabel || a.load.deal;
  req.tensor_cores = run.tuning.tensor_cores != kernels::TensorCores::off;
  req.gather16 = run.tuning.gather_precision != kernels::GatherPrecision::full;
  req.tc_tile_density = run.tuning.tc_tile_density;
  plan::TensorFacts facts;
  std::optional<io::H5TensorInfo> h;
  if (!a.shape.empty()) {
    // --shape and --nnz: a store of that shape with unique coordinates, planned from its
    // "header" (nothing is read).
    facts.dims = parse_dims(a.shape, "--shape");
    double cells = 1;
    for (const auto d : facts.dims) cells *= static_cast<double>(d);
    TESSERA_INPUT_CHECK(a.shape_nnz <= cells, "--nnz " << a.shape_nnz << ": more nonzeros than the "
                                                       << cells << " cells of --shape " << a.shape
                                                       << " (the plan assumes unique coordinates)");
    facts.nnz = static_cast<nnz_t>(a.shape_nnz);
    facts.store = true;
    facts.unique = 1;
    facts.stored_value_bytes = static_cast<int>(sizeof(T));
  } else {
    comm::run_collectively(world, [&] {
      TESSERA_INPUT_CHECK(std::filesystem::exists(a.load.path),
                          "cannot open '" << a.load.path << "': no such file");
    });
    facts = plan::facts_of_file(a.load.path, world);
  }
  if (!a.shape.empty()) {
  } else if (facts.store) {
    h = io::read_h5_info(a.load.path, world);
  } else {
    // Text: its dims and nonzeros (repeats summed) are known after a read.
    log::info("plan: " + a.load.path +
              " is text: reading it to learn its dims and nonzeros (tessera convert writes an "
              "HDF5 store, planned from its header)");
    const auto d = load_and_distribute<T>(a.load, scheme, world, nullptr);
    facts.dims = d.dist.dims;
    facts.nnz = d.dist.global_nnz;
    facts.unique = 1;
    facts.store = false;
  }
  const auto parent = std::filesystem::path(a.load.path).parent_path();
  const std::string spill = parent.empty() ? std::string(".") : parent.string();
  auto blocks = [&](int P) {
    plan::RankBlocks b;
    if (h && h->partition && h->partition->nblocks() == P) {
      for (int r = 0; r < P; ++r) b.nnz.push_back(h->partition->block_range(r).second);
      b.how = "stored partition";
    } else {
      b.nnz = plan::equal_split(facts.nnz, P);
      b.how = "equal split";
    }
    return b;
  };
  // The host memory of this node shared by the ranks a run of P puts on it.
  auto limits = [&](int P) {
    // --gpus-per-node implies the ranks per node unless --ranks-per-node says otherwise.
    const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.gpus_per_node;
    const int here = per_node > 0 ? std::min(P, per_node) : P;
    return plan::measure_limits(world, req.backend, spill, here);
  };
  const plan::TimeModel m = host_time_model(a, run, cx, world);
  // The layer strategy's grid beside the allreduce's estimate (cp, dims known): on several
  // nodes the model's node-aware grid, as --comm-strategy auto would use.
  std::function<std::vector<int>(int)> grid_of;
  if (pc.workload == plan::Workload::cp && !facts.dims.empty())
    grid_of = [&](int P) {
      return algo::choose_layer_grid(facts.dims, facts.nnz, P, a.rank, static_cast<int>(sizeof(T)),
                                     m);
    };
  const std::vector<plan::RanksPlan> plans =
      plan::plan_for_ranks(req, facts, counts, blocks, limits, m, grid_of);
  if (world.rank() == 0) std::printf("%s", plan::describe_ranks(plans, m).c_str());
  std::fflush(stdout);
  const bool any =
      std::any_of(plans.begin(), plans.end(), [](const plan::RanksPlan& p) { return p.plan.fits; });
  if (!run.json.empty()) {
    nlohmann::json j =
        record_envelope("plan", nlohmann::json::object(), world, kernels::to_string(cx.kind),
                        run.threads, cx.backend ? &cx.backend->tuning() : &run.tuning);
    j["file"] = a.load.path;
    j["plans_per_ranks"] = nlohmann::json::array();
    for (const auto& p : plans) j["plans_per_ranks"].push_back(p.to_json());
    j["time_model"] = {{"bandwidth_bytes_per_s", m.bandwidth},
                       {"link_bytes_per_s_per_direction", m.link_bandwidth},
                       {"collective_latency_s", m.collective_latency},
                       {"gpus_per_node", m.gpus_per_node},
                       {"network_bytes_per_s_per_gpu", m.inter_bandwidth},
                       {"network_latency_s", m.inter_latency},
                       {"kernel_ratio", m.kernel_ratio},
                       {"dense_seconds", m.dense_s},
                       {"dense_fixed_seconds", m.dense_fixed_s},
                       {"host_wait_s", m.host_wait},
                       {"whole_rows_max_bytes", m.whole_rows_max_bytes},
                       {"ranks_per_node", a.ranks_per_node},
                       {"shared_memory", m.shared_memory},
                       {"bandwidth_source", a.bandwidth_given ? "given"
                                            : m.shared_memory ? "measured"
                                                              : "default"}};
    if (!any) j["status"] = "refused";
    write_json(run.json, j, world);
  }
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(
        any, "no rank count of --nprocs " << a.nprocs << " fits: " << plans.back().plan.refusal);
  });
}

/// The options of the run planned for, checked as that command checks them (run/validate.hpp):
/// `tessera plan` refuses what `tessera cp` or `tessera tucker` would, with the same line.
void validate_as_command(const PlanArgs& a, const comm::MpiCommunicator& world) {
  LoadOptions load = a.load;
  if (!a.nprocs.empty()) {
    // --nprocs plans other rank counts: --grid is checked for its syntax only, not against
    // the ranks of this job.
    comm::run_collectively(world, [&] {
      if (!load.grid.empty()) parse_dims(load.grid, "--grid");
    });
    load.grid.clear();
  }
  if (a.workload == "tucker") {
    TuckerRunOptions t;
    t.load = load;
    t.ranks = a.ranks;
    t.svd = a.svd;
    t.run = a.run;
    validate(t, world);
    return;
  }
  CpRunOptions c;
  c.load = load;
  c.als.rank = a.rank;
  c.run = a.run;
  validate(c, world);
}

/// "a,b" -> {a, b} (numbers > 0), refused naming `what`.
std::vector<double> parse_pair(const std::string& s, const char* what) {
  const auto c = s.find(',');
  double x = 0, y = 0;
  bool ok = c != std::string::npos;
  if (ok) {
    const auto [e1, ec1] = std::from_chars(s.data(), s.data() + c, x);
    const auto [e2, ec2] = std::from_chars(s.data() + c + 1, s.data() + s.size(), y);
    ok = ec1 == std::errc() && e1 == s.data() + c && ec2 == std::errc() &&
         e2 == s.data() + s.size() && x > 0 && y > 0 && std::isfinite(x) && std::isfinite(y);
  }
  if (!ok) throw CLI::ValidationError(what, "expected two numbers > 0 as A,B, got '" + s + "'");
  return {x, y};
}

/// tessera plan --workload contract: the contraction's time model per rank count (no file).
void run_plan_contract(const PlanArgs& a, const comm::MpiCommunicator& world) {
  plan::SptcFacts f;
  const auto n = parse_pair(a.contract_nnz, "--contract-nnz");
  const auto o = parse_pair(a.contract_order, "--contract-order");
  f.x_nnz = n[0];
  f.y_nnz = n[1];
  f.x_order = static_cast<int>(o[0]);
  f.y_order = static_cast<int>(o[1]);
  f.products = a.products;
  f.products_per_s = a.products_rate;
  f.value_bytes = a.run.precision == "float" ? 4 : 8;
  nlohmann::json entries;
  const std::string table = plan::describe_sptc(f, parse_counts(a.nprocs), time_model(a), &entries);
  if (world.rank() == 0) std::printf("%s", table.c_str());
  std::fflush(stdout);
  if (!a.run.json.empty()) {
    nlohmann::json j = {{"command", "plan"}, {"workload", "contract"}, {"predicted", entries}};
    write_json(a.run.json, j, world);
  }
}

template <typename T>
void run_plan(const PlanArgs& a, const comm::MpiCommunicator& world) {
  validate_as_command(a, world);
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    if (a.shape.empty()) outputs.add_input("the input", a.load.path);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  ComputeOptions run = a.run;
  run.dry_run = true;
  auto cx = plan_compute<T>(run, world);
  PlanContext pc;
  partition::Scheme scheme = partition::Scheme::nnz;
  bool allreduce = run.strategy != "layer";  // auto: resolved below for cp
  if (a.workload != "tucker" && run.strategy == "auto") {
    comm::run_collectively(world, [&] {
      plan::TensorFacts f;
      if (a.shape.empty()) f = plan::facts_of_file(a.load.path, world);
      allreduce = algo::resolve_comm_strategy("auto", f, world.size(), a.rank,
                                              run.precision == "float" ? 4 : 8, nullptr, 0,
                                              a.load.deal) == algo::CommStrategy::allreduce;
    });
  }
  pc.layer_by_auto = run.strategy == "auto" && !allreduce;  // tucker: never layer
  if (a.workload == "tucker") {
    pc.workload = plan::Workload::tucker;
    allreduce = true;
    pc.tucker_ranks = rank_list(a.ranks);
    pc.tucker_svd = a.svd;
  } else {
    pc.workload = plan::Workload::cp;
    pc.cp_rank = a.rank;
    if (!allreduce) scheme = partition::Scheme::grid;
  }
  if (a.load.partition != "auto") scheme = partition::parse_scheme(a.load.partition);
  if (!a.load.grid.empty() && a.load.partition == "auto") scheme = partition::Scheme::grid;
  if (!a.nprocs.empty()) return run_plan_nprocs<T>(a, run, cx, scheme, allreduce, pc, world);
  Input<T> in = load_input<T>(a.load, run, scheme, allreduce, cx, pc, world, nullptr);
  if (!run.json.empty()) {
    // Envelope timing: the default (unit "run", seconds since the start).
    nlohmann::json j =
        record_envelope("plan", nlohmann::json::object(), world, kernels::to_string(cx.kind),
                        run.threads, cx.backend ? &cx.backend->tuning() : &run.tuning);
    j["file"] = a.load.path;
    j["plan"] = in.plan.to_json();
    if (!in.plan.fits) j["status"] = "refused";  // written, then the exit status is 1
    write_json(run.json, j, world);
  }
  // The plan was printed; a plan that fits nothing is an error (exit status 1).
  comm::run_collectively(world, [&] { TESSERA_INPUT_CHECK(in.plan.fits, in.plan.refusal); });
}

}  // namespace

void add_plan(CLI::App& app, Runner& run) {
  auto a = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand(
      "plan",
      "Print the memory plan of a cp or tucker run (tier, bytes per component on host "
      "and device, chunks, reads per iteration, the limits and their sources) without "
      "running it; exit status 1 when nothing fits. --nprocs: the plan per rank for other "
      "rank counts and a predicted CP or Tucker iteration time; --nodes with --gpus-per-node "
      "and --link-gbps: the same across nodes, NVLink inside a node and the network between; "
      "--workload contract: the SpTC time model");
  sub->add_option("file", a->load.path,
                  "Input tensor (.tns, .tns.gz or HDF5 store); or --shape and --nnz");
  sub->add_option("--workload", a->workload,
                  "What would run: cp | tucker | contract (contract: the time model only, "
                  "from --contract-nnz, --products and --products-rate, with --nprocs or --nodes)")
      ->check(CLI::IsMember({"cp", "tucker", "contract"}));
  sub->add_option("-r,--rank", a->rank, "CP rank R (cp)")->check(CLI::Range(1, 4096));
  sub->add_option("--ranks", a->ranks, "Tucker ranks, e.g. 16,16,4 (tucker)");
  sub->add_option("--svd", a->svd,
                  "As tucker --svd (tucker): gram | subspace | scalapack; on several ranks "
                  "--comm-strategy auto all-reduces the TTMc rows with gram only")
      ->check(CLI::IsMember({"gram", "subspace", "scalapack"}))
      ->capture_default_str();
  sub->add_option("--partition", a->load.partition, "auto | nnz | grid")
      ->check(CLI::IsMember({"auto", "nnz", "grid"}));
  sub->add_option("--grid", a->load.grid, "Rank grid, e.g. 4x2x1");
  sub->add_flag("--relabel", a->load.relabel, "As cp --relabel");
  sub->add_flag("--deal", a->load.deal, "As cp --deal");
  add_compute_options(sub, a->run, a->load, kStrategyOption | kBudgetOptions | kStreamingOptions);
  const std::string group = "Plans for N ranks";
  sub->add_option("--nprocs", a->nprocs,
                  "Plan runs on these MPI rank counts, e.g. 4 or 1,2,4,8, without starting them: "
                  "each rank's nonzeros (the store's partition of that many blocks, else an "
                  "equal split), the tier, host and device bytes per rank, and (cp) a predicted "
                  "iteration time; exit status 1 only when no count fits")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return parse_counts(v).empty()
                       ? "expected rank counts from 1 to 1048576 separated by commas, got '" + v +
                             "'"
                       : std::string();
          },
          "N[,N...]"))
      ->group(group);
  sub->add_option("--ranks-per-node", a->ranks_per_node,
                  "--nprocs: ranks per node, sharing this node's host memory (0: "
                  "--gpus-per-node, else all on this node); the device limit is per GPU, one "
                  "rank per GPU")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--bandwidth", a->bandwidth_gbs,
                  "--nprocs: memory bandwidth of one rank's backend in GB/s for the MTTKRP "
                  "bytes (default: an H200's measured device copy; host backends: this node's "
                  "copy, measured, shared by its ranks)")
      ->check(number_check(false))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--link-bandwidth", a->link_gbs,
                  "--nprocs: GB/s per direction between two ranks for the all-reduces (default: "
                  "NVLink between the H200s of one node; host backends: the node's memory, as "
                  "--bandwidth)")
      ->check(number_check(false))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--collective-latency", a->latency_us,
                  "--nprocs: microseconds each all-reduce takes whatever its size")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(group);
  const std::string nodes_group = "Several nodes (--nprocs or --nodes)";
  auto* nodes = sub->add_option(
      "--nodes", a->nodes,
      "Plan runs on these node counts of --gpus-per-node ranks each, e.g. 1,2,4,...,64 (N x G "
      "ranks, one per GPU): as --nprocs, with the collectives priced per link (NVLink inside a "
      "node, the network between nodes)");
  nodes
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return parse_counts(v).empty()
                       ? "expected node counts from 1 to 1048576 separated by commas, got '" + v +
                             "'"
                       : std::string();
          },
          "N[,N...]"))
      ->group(nodes_group);
  auto* gpn = sub->add_option("--gpus-per-node", a->gpus_per_node,
                              "GPUs (ranks) per node: the ranks of one node talk over NVLink "
                              "(--link-bandwidth), the others over the network (--link-gbps; "
                              "unset: all on one node); "
                              "needed by --nodes; with --nprocs P ranks fill ceil(P / G) nodes")
                  ->check(CLI::Range(1, 1024))
                  ->group(nodes_group);
  nodes->needs(gpn);
  nodes->excludes("--nprocs");
  sub->add_option("--link-gbps", a->net_gbs,
                  "Network bandwidth between nodes in GB/s per GPU per direction (InfiniBand or "
                  "Ethernet: 25-50)")
      ->check(number_check(false))
      ->capture_default_str()
      ->group(nodes_group);
  sub->add_option("--inter-latency", a->net_latency_us,
                  "Microseconds each step of a collective across nodes takes whatever its size")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(nodes_group);
  sub->add_option("--kernel-ratio", a->kernel_ratio,
                  "The kernels' measured time over their bytes floor (bench cp's "
                  "ratio_to_floor; docs/perf), multiplying the kernel term (1: the floor)")
      ->check(number_check(false))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--dense-ms", a->dense_ms,
                  "Milliseconds of dense work per iteration on ONE rank (solves, Grams; "
                  "Tucker's eigen-solves). CP: --dense-fixed-ms of it stays on every rank, the "
                  "rest follows the factor rows a rank solves; Tucker: on every rank")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--dense-fixed-ms", a->dense_fixed_ms,
                  "CP: the part of --dense-ms that does not shrink with the rows a rank solves")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(group);
  sub->add_option("--host-wait-us", a->host_wait_us,
                  "Tucker: microseconds each collective the host waits for costs beyond its "
                  "alpha (row exchanges, dense-stage sums, factor all-gathers)")
      ->check(number_check(true))
      ->capture_default_str()
      ->group(group);
  auto* shape = sub->add_option("--shape", a->shape,
                                "Plan a tensor of these dims, e.g. 4821207x1774269x1805187, "
                                "without a file (with --nnz and --nprocs or --nodes)")
                    ->group(group);
  auto* nnz = sub->add_option("--nnz", a->shape_nnz, "Nonzeros of the --shape tensor, e.g. 1.74e9")
                  ->check(number_check(false))
                  ->group(group);
  sub->add_option("--contract-nnz", a->contract_nnz,
                  "--workload contract: the two inputs' nonzeros, e.g. 2e7,2e7")
      ->group(group);
  sub->add_option("--contract-order", a->contract_order,
                  "--workload contract: the two inputs' orders")
      ->capture_default_str()
      ->group(group);
  sub->add_option("--products", a->products,
                  "--workload contract: the contraction's multiply-adds, e.g. 1.2e9")
      ->check(number_check(false))
      ->group(group);
  sub->add_option("--products-rate", a->products_rate,
                  "--workload contract: one GPU's measured products per second (bench contract)")
      ->check(number_check(false))
      ->group(group);
  shape->needs(nnz);
  nnz->needs(shape);
  sub->callback([a, &run, sub] {
    // Parse errors (CLI11 reports them as it reports its own: one line, exit status 2).
    const bool contract = a->workload == "contract";
    if (contract && (a->contract_nnz.empty() || a->products <= 0 || a->products_rate <= 0))
      throw CLI::ValidationError("--workload contract",
                                 "needs --contract-nnz, --products and --products-rate");
    if (contract && a->nprocs.empty() && a->nodes.empty())
      throw CLI::ValidationError("--workload contract", "needs --nprocs or --nodes");
    if (contract) {
      parse_pair(a->contract_nnz, "--contract-nnz");
      for (const double order : parse_pair(a->contract_order, "--contract-order"))
        if (order != std::floor(order) || order > kMaxOrder)
          throw CLI::ValidationError("--contract-order",
                                     "expected two orders from 1 to " + std::to_string(kMaxOrder) +
                                         " as A,B, got '" + a->contract_order + "'");
    }
    if (!contract && a->shape.empty() == a->load.path.empty())
      throw CLI::ValidationError("file", "give the input file or --shape with --nnz, one of them");
    if (!a->shape.empty() && (a->shape_nnz != std::floor(a->shape_nnz) || a->shape_nnz >= 0x1p63))
      throw CLI::ValidationError("--nnz", "expected a whole number of nonzeros below 2^63, found " +
                                              human_number(a->shape_nnz));
    if (!a->shape.empty() && a->nprocs.empty() && a->nodes.empty())
      throw CLI::ValidationError("--shape",
                                 "plans other rank counts only: add --nprocs or --nodes");
    if (!a->nodes.empty()) {
      std::string counts;
      for (const int n : parse_counts(a->nodes)) {
        const long long p = static_cast<long long>(n) * a->gpus_per_node;
        if (p > (1 << 20))
          throw CLI::ValidationError("--nodes", a->nodes + " x --gpus-per-node " +
                                                    std::to_string(a->gpus_per_node) +
                                                    ": more than 1048576 ranks");
        counts += (counts.empty() ? "" : ",") + std::to_string(p);
      }
      a->nprocs = counts;
    }
    // An option that does not apply to what is planned is refused, not ignored without a
    // word: one line naming it and where it applies.
    const auto only = [sub](bool applies, std::initializer_list<const char*> names,
                            const std::string& where) {
      if (applies) return;
      for (const char* n : names)
        if (sub->count(n) > 0) throw CLI::ValidationError(n, "applies only " + where);
    };
    a->bandwidth_given = sub->count("--bandwidth") > 0;
    a->link_given = sub->count("--link-bandwidth") > 0;
    only(!a->nprocs.empty(),
         {"--ranks-per-node", "--bandwidth", "--link-bandwidth", "--collective-latency",
          "--gpus-per-node", "--link-gbps", "--inter-latency", "--kernel-ratio", "--dense-ms",
          "--dense-fixed-ms", "--host-wait-us"},
         "with --nprocs or --nodes (the plans for other rank counts)");
    only(contract, {"--contract-nnz", "--contract-order", "--products", "--products-rate"},
         "with --workload contract");
    only(!contract, {"--rank", "--ranks", "--kernel-ratio", "--bandwidth", "--dense-ms"},
         "with --workload cp or tucker");
    only(a->workload == "cp", {"--rank", "--dense-fixed-ms"}, "with --workload cp");
    only(a->workload == "tucker", {"--ranks", "--host-wait-us", "--svd"}, "with --workload tucker");
    if (contract) {
      run = [a](const comm::MpiCommunicator& world) { run_plan_contract(*a, world); };
      return;
    }
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_plan<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
