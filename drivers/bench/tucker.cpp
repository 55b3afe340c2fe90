// tessera bench tucker: Tucker-HOOI iterations against the floor of their N TTMcs (ttmc.cpp
// has the TTMc's floor); the SVD and the collectives are beside it, with their shares
// printed.
#include "algo/tucker.hpp"

#include "bench/bench.hpp"
#include "bench/comm.hpp"
#include "bench/harness.hpp"
#include "common.hpp"
#include "kernels/ttmc.hpp"
#include "run/tucker.hpp"
#include "util/log.hpp"

namespace tessera::driver::bench {

namespace {

/// The NCCL floor of the rows and factors an iteration combines on several ranks, per mode
/// as the run combined them (TuckerResult::rows_strategy): an all-reduced mode, an
/// all-reduce of its whole Y_(n) (I_n x C_n values); a mode summed on its owners, a
/// reduce-scatter of the rows a rank's TTMc gives (the largest rank's,
/// TuckerMemory::ttmc_rows, x C_n: (P - 1) / P of them leave it, as the run's exchange
/// sends them) and an all-gather of the new factor (I_n x R_n). The dense stage's small sums
/// (Grams, ||G||^2, the core) are not in it. Its buffers are at most a whole Y_(n) and a
/// P-th of it, allocated after the run has freed its own. Nothing on one rank or a host
/// communicator (collective_floor).
template <typename T>
std::optional<CommFloor> tucker_floor(const algo::TuckerResult& res,
                                      const std::vector<std::uint64_t>& dims,
                                      const std::vector<int>& ranks, kernels::Backend<T>& be,
                                      Context<T>& c) {
  if (c.world.size() < 2) return std::nullopt;
  std::vector<std::string> how;
  for (std::size_t p = 0; p <= res.rows_strategy.size();) {
    const std::size_t q = std::min(res.rows_strategy.find(',', p), res.rows_strategy.size());
    how.push_back(res.rows_strategy.substr(p, q - p));
    p = q + 1;
  }
  std::vector<FloorCall> calls;
  for (std::size_t n = 0; n < dims.size(); ++n) {
    const auto I = dims[n];
    const auto C =
        static_cast<std::uint64_t>(kernels::ttmc_output_cols(ranks, static_cast<int>(n)));
    const int m = static_cast<int>(n);
    if (n < how.size() && how[n] == "allreduce") {
      calls.push_back({Collective::allreduce, I * C, m});
    } else {
      const auto rows =
          n < res.memory.ttmc_rows.size() ? static_cast<std::uint64_t>(res.memory.ttmc_rows[n]) : I;
      calls.push_back({Collective::reduce_scatter, rows * C, m});
      calls.push_back({Collective::allgather, I * static_cast<std::uint64_t>(ranks[n]), m});
    }
  }
  return collective_floor<T>(std::move(calls), be, *c.cx.data, c.world);
}

}  // namespace

template <typename T>
void bench_tucker(Context<T>& c) {
  auto& in = c.in;
  nlohmann::json& j = c.j;
  const int N = static_cast<int>(in.dims.size());
  algo::TuckerOptions o;
  o.ranks = bench_ranks(c.a, N);
  o.max_iters = c.a.iters;
  o.tol = 0;  // run every iteration
  o.svd = algo::parse_svd_method(c.a.svd);
  o.subspace_steps = c.a.subspace_steps;
  o.print_iterations = log::verbosity() >= 2;
  o.rows = algo::parse_tucker_rows(c.a.run.strategy);
  j["ranks"] = o.ranks;
  j["svd"] = c.a.svd;
  if (o.svd == algo::SvdMethod::subspace) j["subspace_steps"] = o.subspace_steps;
  // The floor of an iteration: its N TTMcs (from the handle's counts when generated).
  double bytes = 0;
  if (in.X) {
    const std::vector<double> distinct = distinct_rows(*in.X);
    for (int n = 0; n < N; ++n)
      bytes += ttmc_floor_bytes(static_cast<double>(in.X->mttkrp_stream_bytes(n)), distinct,
                                o.ranks, n, distinct[static_cast<std::size_t>(n)], sizeof(T));
    log::info(
        "fit of the generated tensor: ||X||^2 sums the squares of the stored entries, so it "
        "is approximate where coordinates repeat (often with --dist powerlaw)");
  }
  try {
    auto& be = *c.cx.backend;
    auto res = in.X ? algo::tucker_hooi<T>(std::move(in.X), in.dims, be, c.world, o, c.cx.data)
                    : algo::tucker_hooi<T>(*in.d, be, c.world, o, c.cx.data);
    if (in.d.has_value()) {
      // File input: the block's distinct indices per mode are its TTMc rows, and the
      // stream is what the handle the run prepared reads (CSF on cpu, not the COO block).
      std::vector<double> dr;
      for (int m = 0; m < N; ++m)
        dr.push_back(static_cast<double>(res.memory.ttmc_rows[static_cast<std::size_t>(m)]));
      for (int n = 0; n < N; ++n)
        bytes += ttmc_floor_bytes(res.ttmc_stream_bytes[static_cast<std::size_t>(n)], dr, o.ranks,
                                  n, dr[static_cast<std::size_t>(n)], sizeof(T));
    }
    using H = algo::TuckerIteration;
    const auto m =
        iteration_means(res.history, {&H::seconds, &H::ttmc, &H::comm, &H::svd, &H::svd_products,
                                      &H::svd_eig, &H::svd_orth, &H::svd_core});
    const double it_s = m[0], tt = m[1], cm = m[2], sv = m[3], sp = m[4], se = m[5], so = m[6],
                 sc = m[7];
    const IterationResult it = iteration_vs_floor(it_s, bytes, c.bw, c.world);
    const std::optional<CommFloor> cf = tucker_floor(res, in.dims, o.ranks, be, c);
    const Table table({{"iteration", 10, true},
                       {"seconds", 12},
                       {"ttmc%", 10},
                       {"comm%", 10},
                       {"svd%", 10},
                       {"bytes", 12},
                       {"floor_s", 10},
                       {"ratio", 8},
                       {"comm_floor_s", 12},
                       {"comm/floor", 10},
                       {"fit", 10}});
    table.header();
    table.row({"mean", cell("%.4g", it.seconds), cell("%.1f", 100 * tt / it_s),
               cell("%.1f", 100 * cm / it_s), cell("%.1f", 100 * sv / it_s),
               human_bytes(it.floor.bytes), cell("%.4g", it.floor.seconds),
               cell("%.2f", it.floor.ratio(it.seconds)), cf ? cell("%.4g", cf->seconds) : "-",
               cf ? cell("%.2f", cf->ratio(cm)) : "-", cell("%.6f", res.fit)});
    if (cf) j["comm_floor"] = floor_record(*cf, cm, sizeof(T), c.world, c.cx.data->name());
    if (log::rank() == 0)
      std::printf(
          "svd split (rank 0, s/iter, %s): products %.4g, eigen-solves %.4g, "
          "orthonormalisation %.4g, core %.4g, other %.4g; Lanczos answered %lld of %lld "
          "eigen-solves\n",
          res.dense_method.c_str(), sp, se, so, sc, sv - sp - se - so - sc,
          static_cast<long long>(res.eig_lanczos_answered),
          static_cast<long long>(res.eig_lanczos_answered + res.eig_lanczos_declined));
    flush();
    j["svd_split"] = {{"products", sp}, {"eigen", se}, {"orthonormalize", so}, {"core", sc}};
    j["dense_stage"] = res.dense_method;
    j["phase_timing"] = res.phase_timing;
    j["eig_lanczos"] = {{"answered", res.eig_lanczos_answered},
                        {"declined", res.eig_lanczos_declined}};
    run::add_rank_split(j, res);
    iteration_record(j, it, res.iterations, res.fit);
    // Robust to one slow iteration (e.g. CholeskyQR2's fallback, docs/perf/gpu-h200-tucker.md).
    j["median_seconds_per_iteration"] = iteration_median(res.history, &H::seconds);
    j["share"] = {{"ttmc", tt / it_s}, {"comm", cm / it_s}, {"svd", sv / it_s}};
    j["seconds"] = {{"ttmc", tt}, {"comm", cm}, {"svd", sv}};
    j["prepare_seconds"] = in.prepare_seconds;
    // TTMc is the kernel, the SVD the solve.
    j["timing"] =
        timing_record("iteration", it.seconds, {{"kernel", tt}, {"comm", cm}, {"solve", sv}});
  } catch (const InputError& e) {
    throw CollectiveError(e.what());  // decided from shared data: every rank throws it
  }
}

template void bench_tucker(Context<float>&);
template void bench_tucker(Context<double>&);

}  // namespace tessera::driver::bench
