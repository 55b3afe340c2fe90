#include "run/cp_options.hpp"

#include <cmath>
#include <sstream>
#include <type_traits>
#include <vector>

#include "run/record.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::run {

std::string cp_flag(std::string_view key) {
  std::string s = "--" + std::string(key);
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

std::string cp_range_words(double lo, double hi) {
  std::ostringstream s;
  s.precision(12);
  if (std::isinf(hi))
    s << ">= " << lo;
  else
    s << lo << " to " << hi;
  return s.str();
}

namespace {

template <typename V>
bool wanted(const CpValue<V>& v, CpRows rows) {
  return rows == CpRows::all || v.bench;
}

}  // namespace

void check_cp_values(const algo::CpOptions& o, bool python, CpRows rows) {
  for_each_cp_value([&]<typename V>(const CpValue<V>& v) {
    if constexpr (!std::is_same_v<V, bool>) {
      if (!wanted(v, rows)) return;
      const V x = o.*v.field;
      const double d = static_cast<double>(x);
      TESSERA_INPUT_CHECK(std::isfinite(d) && d >= v.lo && d <= v.hi,
                          (python ? std::string(v.key) + "=" : cp_flag(v.key) + " ")
                              << x << ": expected " << cp_range_words(v.lo, v.hi));
    }
  });
}

void add_cp_values(nlohmann::json& opts, const algo::CpOptions& o, CpRows rows) {
  for_each_cp_value([&]<typename V>(const CpValue<V>& v) {
    if (wanted(v, rows)) opts[std::string(v.key)] = o.*v.field;
  });
}

algo::Solver solver_of(const CpConstraintArgs& a) {
  return algo::resolve_solver(algo::parse_solver(a.solver), algo::parse_loss(a.loss));
}

void apply_cp_constraints(const CpConstraintArgs& a, int order, algo::CpOptions& o,
                          const comm::Communicator& world) {
  comm::run_collectively(world, [&] {
    o.loss = algo::parse_loss(a.loss);
    o.solver = solver_of(a);
    o.nonneg = algo::parse_mode_set(a.nonneg.empty() ? "all" : a.nonneg, order, "--nonneg");
    o.l1 = algo::parse_mode_values(a.l1, order, "--l1");
    std::ostringstream dflt;
    dflt << (o.observed_only ? kCompletionL2 : 0.0);
    o.l2 = algo::parse_mode_values(a.l2.empty() ? dflt.str() : a.l2, order, "--l2");
    if (a.l2.empty() && o.observed_only)
      log::info("--observed-only without --l2: an L2 penalty of " + dflt.str() +
                " on every mode, the completion default (--l2 0 for none; "
                "docs/constrained-cp.md)");
  });
  o.holdout_seed = o.seed;
  o.device_loop = a.cuda_graph == "on";
}

void add_cp_constraint_options(nlohmann::json& opts, const algo::CpOptions& o) {
  std::vector<int> modes;
  for (std::size_t n = 0; n < o.nonneg.size(); ++n)
    if (o.nonneg[n]) modes.push_back(static_cast<int>(n));
  opts["nonneg"] = modes;
  opts["l1"] = o.l1;
  opts["l2"] = o.l2;
  opts["cuda_graph"] = o.device_loop ? "on" : "off";
  opts["loss"] = algo::to_string(o.loss);
  opts["solver"] = algo::to_string(o.solver);
}

void add_cp_constraint_results(nlohmann::json& j, const algo::CpResult& res,
                               const algo::CpOptions& o) {
  j["ridged_rows"] = res.ridged_rows;
  if (o.solver == algo::Solver::gcp)
    j["gcp"] = {{"loss_estimate", res.gcp_loss},
                {"holdout_loss", res.holdout_loss},
                {"auc", res.auc},
                {"samples_per_step", res.gcp_samples},
                {"zero_samples_per_step", res.gcp_zero_samples},
                {"step_decreases", res.gcp_fails}};
  if (o.solver == algo::Solver::apr) {
    j["poisson"] = {{"loglik", res.loglik},
                    {"kkt_violation", res.kkt},
                    {"inner_iterations", res.inner_iters},
                    {"inadmissible_zeros_shifted", res.apr_shifts}};
    if (o.holdout > 0) {  // as GCP's
      j["poisson"]["holdout_loss"] = res.holdout_loss;
      j["poisson"]["auc"] = res.auc;
    }
  }
  j["iteration_engine"] = res.iteration_engine;
  if (!res.comm_hierarchy_modes.empty()) j["comm_hierarchy_modes"] = res.comm_hierarchy_modes;
  if (res.kernel_mean_seconds > 0)
    j["kernel_per_rank"] = {{"max_seconds_per_iteration", res.kernel_max_seconds},
                            {"mean_seconds_per_iteration", res.kernel_mean_seconds},
                            {"imbalance", res.kernel_max_seconds / res.kernel_mean_seconds}};
  if (!res.tc_split.empty()) j["tc_split"] = tc_split_json(res.tc_split);
  if (o.holdout > 0)
    j["holdout"] = {{"fraction", o.holdout},
                    {"held_out_entries", res.holdout_entries},
                    {"cold_entries", res.holdout_cold_entries},
                    {"training_entries", res.training_entries},
                    {"validation_rmse", res.validation_rmse},
                    {"mean_predictor_rmse", res.mean_predictor_rmse}};
}

}  // namespace tessera::run
