#include "run/cp_options.hpp"

#include <vector>

#include "run/record.hpp"

namespace tessera::run {

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

}  // namespace tessera::run
