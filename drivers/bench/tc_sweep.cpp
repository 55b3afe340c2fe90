// tessera bench contract --tc-sweep (contract.hpp): on blocky inputs of increasing block
// density, the cuda kernel with the tensor cores off, forced on in each precision, and at
// the default threshold; the crossover density (the threshold to use) and the error of
// each tensor-core precision against the float64 sparse result (docs/sptc.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/contract.hpp"
#include "bench/harness.hpp"
#include "io/output.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/sptc.hpp"

namespace tessera::driver::bench {
namespace {

/// One configuration of the sweep: median kernel seconds of `repeat` runs (after a warm-up)
/// through the backend's plan and run, the stats of that run and the last output.
template <typename T>
struct SweepRun {
  double kernel = 0;
  kernels::ContractStats stats;
  SparseTensor<T> out;
};

template <typename T>
SweepRun<T> time_direct(kernels::Backend<T>& be, const SparseTensor<T>& x, const SparseTensor<T>& y,
                        const kernels::ContractSpec& spec, int repeat) {
  SweepRun<T> r;
  using Run = std::pair<double, kernels::ContractStats>;
  const Run med = median_run<Run>(
      repeat > 1 ? 1 : 0, repeat,
      [&](bool) {
        kernels::ContractStats st;
        auto plan = kernels::ops::contract_plan(be, x, y, spec);
        r.out = kernels::ops::contract(be, *plan, &st);
        return Run{st.seconds(), st};
      },
      [](const Run& p, const Run& q) { return p.first < q.first; });
  r.kernel = med.first;
  r.stats = med.second;
  return r;
}

/// Largest elementwise relative error and the Frobenius relative error of got against the
/// float64 reference; +inf when the coordinates differ.
struct SweepError {
  double max_rel = 0, norm_rel = 0;
  bool same = true;
};
template <typename T>
SweepError sweep_error(const SparseTensor<T>& got, const SparseTensor<double>& want) {
  SweepError e;
  if (got.idx != want.idx) {
    e.same = false;
    e.max_rel = e.norm_rel = std::numeric_limits<double>::infinity();
    return e;
  }
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < want.vals.size(); ++k) {
    const double g = static_cast<double>(got.vals[k]), w = want.vals[k];
    d2 += (g - w) * (g - w);
    w2 += w * w;
    if (w != 0) e.max_rel = std::max(e.max_rel, std::fabs(g - w) / std::fabs(w));
  }
  e.norm_rel = w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
  return e;
}

}  // namespace

/// --tc-sweep: blocky inputs of increasing block density; per density the cuda kernel with
/// the tensor cores off, forced on (threshold 0: every block holding a nonzero) in each
/// precision, and at the default threshold. Prints kernel seconds, the crossover density
/// and the errors against the float64 sparse result (docs/sptc.md, "Tensor cores").
template <typename T>
void run_tc_sweep(const BenchContractArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  kernels::ContractSpec spec;
  std::vector<double> densities;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(world.size() == 1,
                        "--tc-sweep runs on one rank (found " << world.size() << ")");
    TESSERA_INPUT_CHECK(a.x.empty(), "--tc-sweep generates its inputs; give no files");
    spec = kernels::parse_contract_spec(a.einsum.empty() ? "ijk,jkl->il" : a.einsum);
    spec.device = device_options(a);
    std::stringstream ss(a.sweep_densities);
    for (std::string item; std::getline(ss, item, ',');) {
      char* end = nullptr;
      const double d = std::strtod(item.c_str(), &end);
      TESSERA_INPUT_CHECK(end != item.c_str() && *end == '\0' && d > 0 && d <= 1,
                          "--sweep-densities: '" << item << "' is not a density in (0, 1]");
      densities.push_back(d);
    }
    TESSERA_INPUT_CHECK(!densities.empty(), "--sweep-densities is empty");
    std::sort(densities.begin(), densities.end());
  });
  auto cx = make_compute<T>(a.run, world);
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(cx.kind == kernels::BackendKind::cuda,
                        "--tc-sweep measures the cuda backend's tensor-core path; use --backend "
                        "cuda");
  });
  kernels::Backend<T>& be = *cx.backend;
  std::unique_ptr<kernels::Backend<double>> be64;
  if constexpr (!std::is_same_v<T, double>)
    be64 = kernels::make_backend<double>(kernels::BackendKind::cuda, 0, a.run.tuning);
  const std::uint64_t B = a.block_size > 0 ? a.block_size : 16;
  std::map<char, std::uint64_t> len;
  const double expected = generated_lengths(spec, a, B, len);
  const auto n = static_cast<std::uint64_t>(a.nnz);
  const kernels::TensorCorePrecision precs[] = {
      kernels::TensorCorePrecision::fp64, kernels::TensorCorePrecision::tf32,
      kernels::TensorCorePrecision::bf16, kernels::TensorCorePrecision::fp16};
  kernels::ContractSpec off = spec;
  off.device.tensor_cores = kernels::TensorCorePrecision::off;
  kernels::ContractSpec autos = spec;
  if (autos.device.tensor_cores == kernels::TensorCorePrecision::off)
    autos.device.tensor_cores = kernels::TensorCorePrecision::fp64;
  const double auto_thr = kernels::resolve_tc_threshold(autos.device, be.tuning());
  std::printf(
      "tc sweep %s: blocks of %llu per mode, %llu nonzeros per input, ~%.3g products; cuda, "
      "%s; kernel seconds (median of %d); tensor cores off, forced on (threshold 0) per "
      "precision, and auto (threshold %.3g); errors: largest elementwise relative error "
      "against the float64 result with tensor cores off\n",
      spec.text.c_str(), static_cast<unsigned long long>(B), static_cast<unsigned long long>(n),
      expected, a.run.precision.c_str(), a.repeat, auto_thr);
  const Table table({{"density", 8},
                     {"products", 11},
                     {"tc_share", 8},
                     {"pairs", 10},
                     {"off_s", 9},
                     {"fp64_s", 9},
                     {"speedup", 8},
                     {"auto_s", 9},
                     {"tf32_s", 9},
                     {"bf16_s", 9},
                     {"fp16_s", 9},
                     {"err_fp64", 9},
                     {"err_tf32", 9},
                     {"err_bf16", 9},
                     {"err_fp16", 9}});
  table.header();
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> speedups;
  for (double d : densities) {
    const SparseTensor<T> X = generate_blocky_share<T>(spec.x, len, n, a.seed, 0, 1, B, d);
    const SparseTensor<T> Y = generate_blocky_share<T>(spec.y, len, n, a.seed + 0x5EED, 0, 1, B, d);
    const SweepRun<T> r_off = time_direct(be, X, Y, off, a.repeat);
    SparseTensor<double> ref;
    if constexpr (std::is_same_v<T, double>) {
      ref = r_off.out;
    } else {
      const auto X64 = X.template cast<double>(), Y64 = Y.template cast<double>();
      auto plan = kernels::ops::contract_plan(*be64, X64, Y64, off);
      ref = kernels::ops::contract(*be64, *plan, nullptr);
    }
    SweepRun<T> r[4];
    SweepError err[4];
    for (int p = 0; p < 4; ++p) {
      kernels::ContractSpec sp = spec;
      sp.device.tensor_cores = precs[p];
      sp.device.tc_threshold = 0;
      r[p] = time_direct(be, X, Y, sp, a.repeat);
      err[p] = sweep_error(r[p].out, ref);
    }
    const SweepRun<T> r_auto = time_direct(be, X, Y, autos, a.repeat);
    const double speedup = r[0].kernel > 0 ? r_off.kernel / r[0].kernel : 0.0;
    speedups.push_back(speedup);
    const auto P = r_off.stats.products;
    const double share =
        P > 0 ? 100.0 * static_cast<double>(r[0].stats.tc_products) / static_cast<double>(P) : 0;
    table.row({cell("%.3g", d), cell("%.4g", static_cast<double>(P)), cell("%.1f%%", share),
               cell("%lld", static_cast<long long>(r[0].stats.tc_block_pairs)),
               cell("%.4f", r_off.kernel), cell("%.4f", r[0].kernel), cell("%.2f", speedup),
               cell("%.4f", r_auto.kernel), cell("%.4f", r[1].kernel), cell("%.4f", r[2].kernel),
               cell("%.4f", r[3].kernel), cell("%.2g", err[0].max_rel),
               cell("%.2g", err[1].max_rel), cell("%.2g", err[2].max_rel),
               cell("%.2g", err[3].max_rel)});
    flush();
    nlohmann::json row = {{"density", d},
                          {"products", P},
                          {"output_nnz", r_off.stats.output_nnz},
                          {"off",
                           {{"kernel_seconds", r_off.kernel},
                            {"multiply_seconds", r_off.stats.multiply_seconds},
                            {"path", r_off.stats.path}}},
                          {"auto",
                           {{"kernel_seconds", r_auto.kernel},
                            {"tc_products", r_auto.stats.tc_products},
                            {"path", r_auto.stats.path}}}};
    for (int p = 0; p < 4; ++p)
      row[kernels::to_string(precs[p])] = {{"kernel_seconds", r[p].kernel},
                                           {"multiply_seconds", r[p].stats.multiply_seconds},
                                           {"tc_seconds", r[p].stats.tc_seconds},
                                           {"tc_products", r[p].stats.tc_products},
                                           {"tc_block_pairs", r[p].stats.tc_block_pairs},
                                           {"same_coordinates", err[p].same},
                                           {"max_relative_error", err[p].max_rel},
                                           {"frobenius_relative_error", err[p].norm_rel},
                                           {"path", r[p].stats.path}};
    rows.push_back(row);
  }
  // Crossover: the density where the fp64 tensor-core kernel starts to beat the sparse one
  // (linear interpolation of the speedup between the neighbouring densities).
  double crossover = -1;
  std::string verdict;
  std::size_t k = 0;
  while (k < speedups.size() && speedups[k] < 1.0) ++k;
  if (k == speedups.size()) {
    verdict = "the tensor cores never win up to density " + std::to_string(densities.back()) +
              "; keep them off (threshold > 1) for such inputs";
  } else if (k == 0) {
    crossover = densities[0];
    verdict = "the tensor cores win already at the lowest density; the threshold is at most " +
              std::to_string(densities[0]);
  } else {
    const double d0 = densities[k - 1], d1 = densities[k], s0 = speedups[k - 1], s1 = speedups[k];
    crossover = s1 > s0 ? d0 + (1.0 - s0) * (d1 - d0) / (s1 - s0) : d1;
    verdict = "crossover at block density " + std::to_string(crossover) + " (speedup " +
              std::to_string(s0) + " at " + std::to_string(d0) + ", " + std::to_string(s1) +
              " at " + std::to_string(d1) + ")";
  }
  std::printf("%s\n", verdict.c_str());
  if (crossover > 0)
    std::printf(
        "use it: --tc-threshold %.3g; the built-in default is %.3g "
        "(kernels::kDefaultTensorCoreThreshold)\n",
        crossover, kernels::kDefaultTensorCoreThreshold);
  std::fflush(stdout);
  nlohmann::json j;
  j["command"] = "bench contract --tc-sweep";
  j["einsum"] = spec.text;
  j["precision"] = a.run.precision;
  j["block_size"] = B;
  j["nnz"] = n;
  j["expected_products"] = expected;
  j["default_threshold"] = auto_thr;
  j["rows"] = rows;
  j["crossover_density"] = crossover;
  j["verdict"] = verdict;
  write_record(a.run.json, "bench contract", j, world, "cuda", a.run.threads, cx.backend->tuning());
}

template void run_tc_sweep<float>(const BenchContractArgs&, const comm::MpiCommunicator&);
template void run_tc_sweep<double>(const BenchContractArgs&, const comm::MpiCommunicator&);

}  // namespace tessera::driver::bench
