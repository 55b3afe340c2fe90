#include "cp_options.hpp"

#include <vector>

#include "record.hpp"

namespace tessera::driver {

void add_cp_constraint_flags(CLI::App* sub, CpConstraintArgs& a) {
  sub->add_option("--nonneg", a.nonneg,
                  "Nonnegative factors on these modes: all | none | a list such as 0,2 (HALS: "
                  "coordinate descent on each row, --inner-sweeps per update)")
      ->capture_default_str();
  sub->add_option("--l1", a.l1,
                  "L1 penalty l1 * sum |a| on each factor update: one value, or one per mode "
                  "(0.1,0,0)")
      ->capture_default_str();
  sub->add_option("--l2", a.l2,
                  "L2 (Frobenius) penalty l2/2 * ||A||^2 on each factor update: one value, or one "
                  "per mode")
      ->capture_default_str();
  sub->add_option("--inner-sweeps", a.inner_sweeps,
                  "Coordinate-descent sweeps per factor update with --nonneg or --l1")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_flag("--observed-only", a.observed_only,
                "Completion: the stored entries are the observed ones and the loss counts only "
                "them (row-wise normal equations; the fit is over the stored entries)");
  sub->add_option("--holdout", a.holdout,
                  "Hold this fraction of the stored entries out (chosen by --seed and the "
                  "coordinates) and print their RMSE after every iteration (0: none)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  sub->add_option("--cuda-graph", a.cuda_graph,
                  "on: with --backend cuda on one rank, plain CP runs each iteration on the "
                  "device (dense steps as kernels, one CUDA graph replayed per iteration, one "
                  "wait for the fit); off: per-operation calls with host round trips")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

void apply_cp_constraints(const CpConstraintArgs& a, int order, std::uint64_t seed,
                          algo::CpOptions& o, const comm::Communicator& world) {
  comm::run_collectively(world, [&] {
    o.nonneg = algo::parse_mode_set(a.nonneg, order, "--nonneg");
    o.l1 = algo::parse_mode_values(a.l1, order, "--l1");
    o.l2 = algo::parse_mode_values(a.l2, order, "--l2");
    TESSERA_INPUT_CHECK(a.inner_sweeps >= 1 && a.inner_sweeps <= 1000,
                        "--inner-sweeps " << a.inner_sweeps << ": expected 1 to 1000");
    TESSERA_INPUT_CHECK(a.holdout >= 0 && a.holdout <= 0.99,
                        "--holdout " << a.holdout << ": expected a fraction from 0 to 0.99");
  });
  o.inner_sweeps = a.inner_sweeps;
  o.observed_only = a.observed_only;
  o.holdout = a.holdout;
  o.holdout_seed = seed;
  o.device_loop = a.cuda_graph == "on";
}

void add_cp_constraint_options(nlohmann::json& opts, const algo::CpOptions& o) {
  std::vector<int> modes;
  for (std::size_t n = 0; n < o.nonneg.size(); ++n)
    if (o.nonneg[n]) modes.push_back(static_cast<int>(n));
  opts["nonneg"] = modes;
  opts["l1"] = o.l1;
  opts["l2"] = o.l2;
  opts["inner_sweeps"] = o.inner_sweeps;
  opts["observed_only"] = o.observed_only;
  opts["holdout"] = o.holdout;
  opts["cuda_graph"] = o.device_loop ? "on" : "off";
}

void add_cp_constraint_results(nlohmann::json& j, const algo::CpResult& res,
                               const algo::CpOptions& o) {
  j["ridged_rows"] = res.ridged_rows;
  j["iteration_engine"] = res.iteration_engine;
  if (res.kernel_mean_seconds > 0)
    j["kernel_per_rank"] = {{"max_seconds_per_iteration", res.kernel_max_seconds},
                            {"mean_seconds_per_iteration", res.kernel_mean_seconds},
                            {"imbalance", res.kernel_max_seconds / res.kernel_mean_seconds}};
  if (!res.tc_split.empty()) j["tc_split"] = tc_split_json(res.tc_split);
  if (o.holdout > 0)
    j["holdout"] = {{"fraction", o.holdout},
                    {"held_out_entries", res.holdout_entries},
                    {"training_entries", res.training_entries},
                    {"validation_rmse", res.validation_rmse},
                    {"mean_predictor_rmse", res.mean_predictor_rmse}};
}

}  // namespace tessera::driver
