// tessera plan: the memory plan of a cp or tucker run, printed without running it (the same
// as --dry-run on cp and tucker).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "io/output.hpp"
#include "record.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct PlanArgs {
  LoadOptions load;
  std::string workload = "cp";
  int rank = 16;
  std::string ranks = "16";
  ComputeOptions run;
};

template <typename T>
void run_plan(const PlanArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_input("the input", a.load.path);
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  ComputeOptions run = a.run;
  run.dry_run = true;
  auto cx = make_compute<T>(run, world);
  PlanContext pc;
  partition::Scheme scheme = partition::Scheme::nnz;
  bool allreduce = run.strategy == "allreduce";
  if (a.workload == "tucker") {
    pc.workload = plan::Workload::tucker;
    allreduce = true;
    pc.tucker_ranks = rank_list(a.ranks);
  } else {
    pc.workload = plan::Workload::cp;
    pc.cp_rank = a.rank;
    if (!allreduce) scheme = partition::Scheme::grid;
  }
  if (a.load.partition != "auto") scheme = partition::parse_scheme(a.load.partition);
  if (!a.load.grid.empty() && a.load.partition == "auto") scheme = partition::Scheme::grid;
  Input<T> in = load_input<T>(a.load, run, scheme, allreduce, cx, pc, world, nullptr);
  if (!run.json.empty()) {
    // Envelope timing: the default (unit "run", seconds since the start).
    nlohmann::json j = record_envelope("plan", nlohmann::json::object(), world,
                                       kernels::to_string(cx.kind), run.threads);
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
      "running it; exit status 1 when nothing fits");
  sub->add_option("file", a->load.path, "Input tensor (.tns, .tns.gz or HDF5 store)")->required();
  sub->add_option("--workload", a->workload, "What would run: cp | tucker")
      ->check(CLI::IsMember({"cp", "tucker"}));
  sub->add_option("-r,--rank", a->rank, "CP rank R (cp)")->check(CLI::Range(1, 4096));
  sub->add_option("--ranks", a->ranks, "Tucker ranks, e.g. 16,16,4 (tucker)");
  sub->add_option("--partition", a->load.partition, "auto | nnz | grid")
      ->check(CLI::IsMember({"auto", "nnz", "grid"}));
  sub->add_option("--grid", a->load.grid, "Rank grid, e.g. 4x2x1");
  sub->add_flag("--relabel", a->load.relabel, "As cp --relabel");
  add_compute_options(sub, a->run, a->load, kStrategyOption | kBudgetOptions | kStreamingOptions);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { run_plan<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
