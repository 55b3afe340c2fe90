// tessera bench cp: CP-ALS iterations against the floor of their N MTTKRPs (mttkrp.cpp has
// the MTTKRP's floor); the dense R x R work and the collectives are beside it, with their
// shares printed. On 2+ ranks of a communicator that enqueues (NCCL) the comm time is put
// beside its own floor too: the same bytes all-reduced on the node (comm.hpp, bench comm).
#include "algo/cp_als.hpp"
#include "algo/cp_apr.hpp"
#include "algo/cp_gcp.hpp"
#include "bench/bench.hpp"
#include "bench/comm.hpp"
#include "bench/harness.hpp"
#include "common.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "linalg/row_update.hpp"
#include "run/record.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {

namespace {

/// bench cp --loss poisson: CP-APR's iterations, and its Phi passes against their floor: a
/// pass reads what an MTTKRP of the mode reads (mttkrp_floor_bytes) and the mode's own B rows
/// once more (the model at each entry), averaged over the modes.
template <typename T>
void bench_cp_apr(Context<T>& c, const algo::CpOptions& o) {
  auto& in = c.in;
  TESSERA_INPUT_CHECK(in.d.has_value(),
                      "bench cp --loss poisson needs the tensor distributed in memory: a file, or "
                      "--generate on the host (not --generate-on cuda)");
  const int N = static_cast<int>(in.dims.size());
  const int R = o.rank;
  auto res = algo::cp_apr<T>(*in.d, *c.cx.backend, c.world, *c.cx.data, o);
  using H = algo::CpIteration;
  const auto m = iteration_means(res.history, {&H::seconds, &H::kernel, &H::comm, &H::solve});
  const double it_s = m[0], k = m[1], cm = m[2], s = m[3];
  // Inner iterations per iteration over the same iterations as the kernel's mean (the first,
  // which runs the most inner iterations, is not counted in either).
  double inner = 0;
  const std::size_t first = first_counted(res.history.size());
  for (std::size_t i = first; i < res.history.size(); ++i) inner += res.history[i].inner_iters;
  inner /= static_cast<double>(std::max<std::size_t>(res.history.size() - first, 1));
  const std::vector<double> distinct(res.distinct_rows.begin(), res.distinct_rows.end());
  double bytes = 0;
  for (int n = 0; n < N; ++n)
    bytes += mttkrp_floor_bytes(res.mttkrp_stream_bytes[static_cast<std::size_t>(n)], distinct,
                                res.rows_held, n, R, sizeof(T)) +
             distinct[static_cast<std::size_t>(n)] * R * sizeof(T);
  bytes /= N;
  const double pass_s = inner > 0 ? k / inner : 0.0;
  const IterationResult pass = iteration_vs_floor(pass_s, bytes, c.bw, c.world);
  const Table table({{"iteration", 10, true},
                     {"seconds", 12},
                     {"kernel%", 10},
                     {"comm%", 10},
                     {"solve%", 10},
                     {"inner", 8},
                     {"phi_pass_s", 12},
                     {"bytes", 12},
                     {"floor_s", 10},
                     {"ratio", 8},
                     {"loglik", 16}});
  table.header();
  table.row({"mean", cell("%.4g", it_s), cell("%.1f", 100 * k / it_s),
             cell("%.1f", 100 * cm / it_s), cell("%.1f", 100 * s / it_s), cell("%.1f", inner),
             cell("%.4g", pass_s), human_bytes(pass.floor.bytes), cell("%.4g", pass.floor.seconds),
             cell("%.2f", pass.floor.ratio(pass_s)), cell("%.8e", res.loglik)});
  flush();
  nlohmann::json& j = c.j;
  j["loss"] = "poisson";
  j["iterations"] = res.iterations;
  j["fit"] = res.fit;
  j["seconds_per_iteration"] = it_s;
  j["phi_pass_bytes"] = pass.floor.bytes;
  j["phi_pass_floor_seconds"] = pass.floor.seconds;
  j["phi_pass_ratio_to_floor"] = pass.floor.ratio(pass_s);
  j["inner_iterations_per_iteration"] = inner;
  j["phi_pass_seconds"] = pass_s;
  j["loglik"] = res.loglik;
  j["share"] = {{"kernel", k / it_s}, {"comm", cm / it_s}, {"solve", s / it_s}};
  j["timing"] = timing_record("phi pass", pass_s, {});
}

/// bench cp --solver gcp: GCP-SGD's epochs against their floor, the sampled entries per second
/// beside. The floor of an epoch is what its passes must move at the least, per step: the
/// training entries this rank's nonzero samples draw (coordinates and value; a zero sample's
/// coordinates are computed, not read), the factors read once and the gradient written once
/// by the gradient kernel, and Adam's pass (factors, gradient and both moments read; factors
/// and moments written); per epoch, the evaluation sample's entries and the factors once more.
template <typename T>
void bench_cp_gcp(Context<T>& c, const algo::CpOptions& o) {
  auto& in = c.in;
  TESSERA_INPUT_CHECK(in.d.has_value(),
                      "bench cp --solver gcp needs the tensor distributed in memory: a file, or "
                      "--generate on the host (not --generate-on cuda)");
  auto res = algo::cp_gcp<T>(*in.d, *c.cx.backend, c.world, *c.cx.data, o);
  using H = algo::CpIteration;
  const auto m = iteration_means(res.history, {&H::seconds, &H::kernel, &H::comm, &H::solve});
  const double it_s = m[0], k = m[1], cm = m[2], s = m[3];
  const double samples = static_cast<double>(res.gcp_samples + res.gcp_zero_samples) *
                         static_cast<double>(o.gcp_epoch_iters);
  // This rank's share of the nonzero samples: its share of the stored entries.
  const double share =
      static_cast<double>(in.d->block.nnz()) / std::max(static_cast<double>(in.global_nnz), 1.0);
  const double entry = static_cast<double>(in.dims.size() * sizeof(index_t) + sizeof(T));
  double values = 0;  // sum(dims) x R
  for (auto d : in.dims) values += static_cast<double>(d) * o.rank;
  const double vb = values * sizeof(T);
  const double step_bytes = share * static_cast<double>(res.gcp_samples) * entry + 9 * vb;
  const double bytes = static_cast<double>(o.gcp_epoch_iters) * step_bytes +
                       share * static_cast<double>(res.gcp_samples) * entry + vb;
  const IterationResult it = iteration_vs_floor(it_s, bytes, c.bw, c.world);
  const Table table({{"epoch", 10, true},
                     {"seconds", 12},
                     {"kernel%", 10},
                     {"comm%", 10},
                     {"other%", 10},
                     {"bytes", 12},
                     {"floor_s", 10},
                     {"ratio", 8},
                     {"samples", 12},
                     {"samples/s", 12},
                     {"loss", 16}});
  table.header();
  table.row({"mean", cell("%.4g", it.seconds), cell("%.1f", 100 * k / it_s),
             cell("%.1f", 100 * cm / it_s), cell("%.1f", 100 * s / it_s),
             human_bytes(it.floor.bytes), cell("%.4g", it.floor.seconds),
             cell("%.2f", it.floor.ratio(it.seconds)), cell("%.3g", samples),
             cell("%.3g", samples / it.seconds), cell("%.8e", res.gcp_loss)});
  flush();
  nlohmann::json& j = c.j;
  j["loss"] = algo::to_string(o.loss);
  j["solver"] = "gcp";
  j["iterations"] = res.iterations;
  j["fit"] = res.fit;
  j["seconds_per_epoch"] = it.seconds;
  j["samples_per_epoch"] = samples;
  j["samples_per_second"] = samples / it.seconds;
  j["epoch_bytes"] = it.floor.bytes;
  j["epoch_floor_seconds"] = it.floor.seconds;
  j["epoch_ratio_to_floor"] = it.floor.ratio(it.seconds);
  j["loss_estimate"] = res.gcp_loss;
  j["share"] = {{"kernel", k / it_s}, {"comm", cm / it_s}, {"solve", s / it_s}};
  j["timing"] = timing_record("epoch", it.seconds, {});
}

/// The comm floor of the layer strategy (algo/cp_layout.cpp, cp_als_loop.cpp): per mode whose
/// layer holds q > 1 ranks, a reduce-scatter of the layer's rows (padded to q equal blocks, as
/// the run pads them; `sum_width` values a row: the MTTKRP's R, and with --observed-only the
/// packed Grams' W too) and an all-gather of the new rows (R values a row), on a
/// communicator of the layer's ranks (split from `data` as the run splits it; `data` itself
/// where the layer is every rank; every layer times its own at once, as in the run). A layer
/// of one rank moves nothing. The Gram and scalar all-reduces are not in it, as in the
/// allreduce strategy's floor. Nothing where `data` cannot enqueue or on one rank.
template <typename T>
std::optional<CommFloor> layer_floor(const partition::Distribution& dist, int sum_width, int R,
                                     Context<T>& c) {
  const comm::Communicator& data = *c.cx.data;
  if (!data.can_enqueue() || c.world.size() < 2) return std::nullopt;
  CommFloor all;
  for (int n = 0; n < dist.order(); ++n) {
    const int q = dist.layer_size(n);  // the same on every rank: nranks / grid[n]
    if (q < 2) continue;
    const auto [c0, c1] = dist.chunk(n);
    const std::uint64_t b = (c1 - c0 + static_cast<std::uint64_t>(q) - 1) / q;
    const std::uint64_t rows = b * static_cast<std::uint64_t>(q);
    std::unique_ptr<comm::Communicator> own;
    if (q != data.size()) own = data.split(dist.coords[static_cast<std::size_t>(n)], data.rank());
    const std::optional<CommFloor> f = collective_floor<T>(
        {{Collective::reduce_scatter, rows * static_cast<std::uint64_t>(sum_width), n},
         {Collective::allgather, rows * static_cast<std::uint64_t>(R), n}},
        *c.cx.backend, own ? *own : data, c.world);
    if (!f) continue;
    all.timing = f->timing;
    all.seconds += f->seconds;
    all.bytes += f->bytes;
    for (std::size_t k = 0; k < f->counts.size(); ++k) {
      all.seconds_per_call.push_back(f->seconds_per_call[k]);
      all.counts.push_back(f->counts[k]);
      all.ops.push_back(f->ops[k]);
      all.modes.push_back(f->modes[k]);
    }
  }
  return all;
}

}  // namespace

template <typename T>
void bench_cp(Context<T>& c) {
  const BenchArgs& a = c.a;
  auto& in = c.in;
  const int N = static_cast<int>(in.dims.size());
  const int R = a.rank;
  algo::CpOptions o = a.cp;  // --inner-sweeps, --observed-only, --holdout
  o.rank = R;
  o.max_iters = a.iters;
  o.tol = 0;  // run every iteration
  o.strategy = algo::parse_comm_strategy(a.run.strategy);
  o.comm_overlap = a.run.overlap == "on";  // auto: off (bench cp runs on one node)
  o.print_iterations = log::verbosity() >= 2;
  o.count_distinct_rows = true;         // for the floor
  o.approximate_fit = in.X != nullptr;  // generated: repeats kept, ||X|| not merged
  apply_cp_constraints(a.con, N, o, c.world);
  if (o.solver == algo::Solver::apr) return bench_cp_apr(c, o);
  if (o.solver == algo::Solver::gcp) return bench_cp_gcp(c, o);
  // A generated tensor runs on its backend handle (the layer strategy's: this rank's grid
  // block); otherwise cp_als prepares the distributed block.
  if (in.X)
    log::info(
        "fit of the generated tensor: ||X||^2 sums the squares of the stored entries, so it "
        "is approximate where coordinates repeat (often with --dist powerlaw): the MTTKRP "
        "sums repeats, ||X|| does not merge them");
  auto& be = *c.cx.backend;
  auto res = in.X && in.grid ? algo::cp_als<T>(*in.X, *in.grid, be, c.world, *c.cx.data, o)
             : in.X ? algo::cp_als<T>(*in.X, in.dims, in.global_nnz, be, c.world, *c.cx.data, o)
                    : algo::cp_als<T>(*in.d, be, c.world, *c.cx.data, o);
  using H = algo::CpIteration;
  const auto m = iteration_means(res.history, {&H::seconds, &H::kernel, &H::comm, &H::solve});
  const double it_s = m[0], k = m[1], cm = m[2], s = m[3];
  // Memory floor of an iteration: the N MTTKRPs' bytes (the dense R x R work and the
  // collectives are not in it; their share is printed beside).
  const std::vector<double> distinct(res.distinct_rows.begin(), res.distinct_rows.end());
  double bytes = 0;
  // Completion adds, per mode, the rows' packed Grams (R(R+1)/2 = W columns of the pattern),
  // as the path cp_als takes moves them (algo/cp_als.cpp, kernels/cuda/mttkrp/row_grams.cu):
  // - fused (ops::fuses_completion: float, tensor cores, R <= 32): the same pass as the
  //   MTTKRP, so only the W-wide output rows are added;
  // - cuda otherwise at R <= 32: a second pass over the pattern's copy, gathering the R-wide
  //   factor rows, writing W-wide rows;
  // - elsewhere (cpu backends, cuda above R 32): the pattern's MTTKRP of the W-wide packed
  //   outer products.
  const int W = static_cast<int>(linalg::packed_size(R));
  const bool fused = o.observed_only && kernels::ops::fuses_completion(be, R);
  const bool narrow =
      o.observed_only && !fused && c.cx.kind == kernels::BackendKind::cuda && R <= 32;
  for (int n = 0; n < N; ++n) {
    const double stream = res.mttkrp_stream_bytes[static_cast<std::size_t>(n)];
    const double mttkrp = mttkrp_floor_bytes(stream, distinct, res.rows_held, n, R, sizeof(T));
    const double out_w =
        static_cast<double>(res.rows_held[static_cast<std::size_t>(n)]) * W * sizeof(T);
    const double out_r =
        static_cast<double>(res.rows_held[static_cast<std::size_t>(n)]) * R * sizeof(T);
    bytes += mttkrp;
    if (fused)
      bytes += out_w;
    else if (narrow)
      bytes += mttkrp - out_r + out_w;
    else if (o.observed_only)
      bytes += mttkrp_floor_bytes(stream, distinct, res.rows_held, n, W, sizeof(T));
  }
  const IterationResult it = iteration_vs_floor(it_s, bytes, c.bw, c.world);
  const double nnzps = static_cast<double>(in.global_nnz) * N / std::max(it.seconds, 1e-12);
  // The comm floor, timed now on the run's data communicator and the backend's stream: per
  // mode an all-reduce of the rows held x R values (and the rows' packed Grams, W wide, with
  // --observed-only); with the layer strategy its layers' reduce-scatters and all-gathers
  // (layer_floor). The Gram (R x R) and the scalars' all-reduces are not in it.
  const int width = o.observed_only ? R + W : R;
  std::optional<CommFloor> cf;
  if (o.strategy == algo::CommStrategy::layer && (in.grid || in.d)) {
    cf = layer_floor<T>(in.grid ? *in.grid : in.d->dist, width, R, c);
  } else {
    std::vector<std::uint64_t> counts;
    for (std::uint64_t rows : res.rows_held)
      counts.push_back(rows * static_cast<std::uint64_t>(width));
    cf = allreduce_floor<T>(counts, be, *c.cx.data, c.world);
  }
  const Table table({{"iteration", 10, true},
                     {"seconds", 12},
                     {"kernel%", 10},
                     {"comm%", 10},
                     {"solve%", 10},
                     {"nnz*N/s", 12},
                     {"bytes", 12},
                     {"floor_s", 10},
                     {"ratio", 8},
                     {"comm_floor_s", 12},
                     {"comm/floor", 10},
                     {"fit", 10}});
  table.header();
  table.row({"mean", cell("%.4g", it.seconds), cell("%.1f", 100 * k / it_s),
             cell("%.1f", 100 * cm / it_s), cell("%.1f", 100 * s / it_s), cell("%.3g", nnzps),
             human_bytes(it.floor.bytes), cell("%.4g", it.floor.seconds),
             cell("%.2f", it.floor.ratio(it.seconds)), cf ? cell("%.4g", cf->seconds) : "-",
             cf ? cell("%.2f", cf->ratio(cm)) : "-", cell("%.6f", res.fit)});
  if (!cf && c.world.size() > 1 && log::rank() == 0)
    std::printf("comm floor: not measured (the %s communicator has no stream-ordered calls)\n",
                c.cx.data->name().c_str());
  flush();
  nlohmann::json& j = c.j;
  if (cf) j["comm_floor"] = floor_record(*cf, cm, sizeof(T), c.world, c.cx.data->name());
  if (res.tier > 1) {
    // Tier 2: the iteration against the larger of its copy and compute times.
    const double it_n = static_cast<double>(res.iterations);
    const double copy = res.stream_copy_seconds / it_n, compute = res.stream_compute_seconds / it_n;
    if (log::rank() == 0)
      std::printf(
          "tier 2 (rank 0): copy %.4f s/iter, compute %.4f s/iter, overlap %.0f%%, "
          "iteration / max(copy, compute) = %.2f\n",
          copy, compute, 100 * res.stream_overlap, it_s / std::max(copy, compute));
    j["tier2"] = {{"copy_seconds_per_iteration", copy},
                  {"compute_seconds_per_iteration", compute},
                  {"overlap_fraction", res.stream_overlap},
                  {"ratio_to_max_copy_compute", it_s / std::max(copy, compute)}};
  }
  j["memory_tier"] = res.tier;
  iteration_record(j, it, res.iterations, res.fit);
  j["median_seconds_per_iteration"] = iteration_median(res.history, &H::seconds);
  j["iteration_engine"] = res.iteration_engine;
  // What ran on tensor cores, and the tile sets' device memory (rank 0's), as tessera cp
  // logs and records it: the device peak includes any tile set built.
  j["tc_split"] = run::tc_split_json(res.tc_split);
  for (const kernels::TcSplit& ts : res.tc_split) log::info(run::tc_split_line(ts));
  if (res.kernel_mean_seconds > 0)  // the ranks' MTTKRP balance (as in the cp record)
    j["kernel_per_rank"] = {{"max_seconds_per_iteration", res.kernel_max_seconds},
                            {"mean_seconds_per_iteration", res.kernel_mean_seconds},
                            {"imbalance", res.kernel_max_seconds / res.kernel_mean_seconds}};
  j["share"] = {{"kernel", k / it_s}, {"comm", cm / it_s}, {"solve", s / it_s}};
  j["strategy"] = a.run.strategy;
  {
    nlohmann::json con;
    add_cp_values(con, o, CpRows::bench);
    add_cp_constraint_options(con, o);
    add_cp_constraint_results(con, res, o);
    j["constraints"] = con;
  }
  if (in.X) {
    j["tensor"]["generated_on_backend"] = true;
    j["prepare_seconds"] = in.prepare_seconds;
  }
  j["timing"] = timing_record("iteration", it.seconds,
                              {{"kernel", it.seconds * (k / it_s)},
                               {"comm", it.seconds * (cm / it_s)},
                               {"solve", it.seconds * (s / it_s)}});
}

template void bench_cp(Context<float>&);
template void bench_cp(Context<double>&);

}  // namespace tessera::driver::bench
