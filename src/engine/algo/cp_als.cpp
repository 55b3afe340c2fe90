#include "algo/cp_als.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "algo/cp_als_loop.hpp"
#include "algo/cp_constraints.hpp"
#include "algo/cp_layout.hpp"
#include "algo/workload_scope.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

CommStrategy parse_comm_strategy(const std::string& s) {
  if (s == "allreduce") return CommStrategy::allreduce;
  if (s == "layer") return CommStrategy::layer;
  TESSERA_INPUT_CHECK(s != "owners",
                      "--comm-strategy owners applies to tucker only (TTMc rows summed on their "
                      "owner ranks): CP-ALS takes auto, allreduce or layer");
  TESSERA_INPUT_CHECK(false, "unknown --comm-strategy '" << s << "': expected allreduce or layer");
  return CommStrategy::allreduce;
}

std::string to_string(CommStrategy s) {
  return s == CommStrategy::allreduce ? "allreduce" : "layer";
}

double initial_factor_value(std::uint64_t seed, int mode, std::uint64_t row, int col) {
  return uniform01(hash_keys(seed, static_cast<std::uint64_t>(mode) + 0x100, row,
                             static_cast<std::uint64_t>(col)));
}

namespace {

using detail::make_layouts;
using detail::run_als;

/// Input checks both overloads make before any work.
template <typename T>
void check_cp_inputs(kernels::Backend<T>& be, const comm::Communicator& ctrl,
                     const comm::Communicator& data, const CpOptions& opt) {
  TESSERA_INPUT_CHECK(opt.rank >= 1, "--rank must be at least 1 (got " << opt.rank << ")");
  TESSERA_INPUT_CHECK(opt.max_iters >= 1, "--iters must be at least 1");
  TESSERA_EXPECTS(data.memory_space() == be.memory_space(),
                  "data communicator and backend must use the same memory space");
  TESSERA_EXPECTS(ctrl.size() == data.size() && ctrl.rank() == data.rank(),
                  "ctrl and data communicators must span the same ranks");
  TESSERA_INPUT_CHECK(opt.inner_sweeps >= 1,
                      "--inner-sweeps must be at least 1 (got " << opt.inner_sweeps << ")");
  TESSERA_INPUT_CHECK(opt.holdout >= 0 && opt.holdout < 1,
                      "--holdout must be a fraction in [0, 1) (got " << opt.holdout << ")");
  for (double v : opt.l1)
    TESSERA_INPUT_CHECK(std::isfinite(v) && v >= 0, "--l1 values must be finite and >= 0");
  for (double v : opt.l2)
    TESSERA_INPUT_CHECK(std::isfinite(v) && v >= 0, "--l2 values must be finite and >= 0");
}

}  // namespace

template <typename T>
CpResult cp_als(const partition::Distributed<T>& d, kernels::Backend<T>& be,
                const comm::Communicator& ctrl, const comm::Communicator& data,
                const CpOptions& opt) {
  check_cp_inputs(be, ctrl, data, opt);
  const auto& dist = d.dist;
  const int N = dist.order();
  const bool layer = opt.strategy == CommStrategy::layer;
  if (layer && dist.scheme != partition::Scheme::grid)  // the same on every rank: agreed
    throw CollectiveError("the layer strategy needs the grid partition (use --partition grid)");
  TESSERA_EXPECTS(d.block.order() == N,
                  "block of order " << d.block.order() << " for a distribution of order " << N);
  Timer setup_timer;
  auto lay = make_layouts(dist, layer, data, opt.nodes, opt.hierarchy);
  // The R the MTTKRPs will take, for the prepares below (Backend::set_rank_hint), restored
  // when the run ends.
  struct RankHint {
    kernels::Backend<T>& be;
    const int was;
    RankHint(kernels::Backend<T>& b, int R) : be(b), was(b.rank_hint()) { be.set_rank_hint(R); }
    ~RankHint() { be.set_rank_hint(was); }
  } hint(be, opt.rank);

  // The kernel's view of the local block: global coordinates (allreduce), or shifted to
  // the held chunks (layer); with a holdout, its training entries only.
  const bool plain_view = !layer && opt.holdout == 0 && !opt.observed_only;
  std::unique_ptr<kernels::TensorHandle<T>> X, Xones;
  util::fault::at(util::fault::Point::prepare);  // the tensor goes to the backend next
  if (plain_view) {
    X = be.prepare(d.block);
    return run_als(*X, dist, lay, be, ctrl, data, opt, setup_timer);
  }
  std::vector<std::uint64_t> lo;
  std::vector<std::int64_t> len;
  for (const auto& L : lay) {
    lo.push_back(L.lo);
    len.push_back(L.len);
  }
  detail::Holdout hold;
  SparseTensor<T> view = detail::training_view(d, layer, lo, len, opt, &hold);
  if (opt.holdout > 0) {
    detail::count_cold(&hold, ctrl);
    double counts[2] = {static_cast<double>(hold.train_count),
                        static_cast<double>(hold.vals.size())};
    ctrl.allreduce(counts, 2);
    if (counts[0] == 0) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "--holdout %g held out all %.0f stored entries: none is left to train on "
                    "(lower --holdout)",
                    opt.holdout, counts[1]);
      throw CollectiveError(line);
    }
  }
  if (opt.observed_only && kernels::ops::fuses_completion(be, opt.rank)) {
    // One copy, rows whole as TTMc's and with the data's values: ops::completion_rows forms
    // the MTTKRP and the rows' Grams (of the pattern: the values not read) in one pass. The
    // loop knows it by the pattern handle being the data's.
    const WorkloadScope<T> rows_whole(be, kernels::Workload::ttmc);
    X = be.prepare(view);
    return run_als(*X, dist, lay, be, ctrl, data, opt, setup_timer, X.get(),
                   opt.holdout > 0 ? &hold : nullptr);
  }
  X = be.prepare(view);
  if (opt.observed_only) {
    std::fill(view.vals.begin(), view.vals.end(), T(1));  // the pattern of the stored entries
    be.set_rank_hint(static_cast<int>(linalg::packed_size(opt.rank)));  // its MTTKRP's width
    // Its copies are ordered as TTMc's, each output row's nonzeros together: the row Grams
    // (and the wide MTTKRP above R 32) flush a row's packed Gram with atomics whenever the
    // row changes, which input-mode blocks for L1 would make every few nonzeros.
    const WorkloadScope<T> rows_whole(be, kernels::Workload::ttmc);
    Xones = be.prepare(view);
  }
  return run_als(*X, dist, lay, be, ctrl, data, opt, setup_timer, Xones.get(),
                 opt.holdout > 0 ? &hold : nullptr);
}

template <typename T>
CpResult cp_als(const kernels::TensorHandle<T>& X, const std::vector<std::uint64_t>& dims,
                nnz_t global_nnz, kernels::Backend<T>& be, const comm::Communicator& ctrl,
                const comm::Communicator& data, const CpOptions& opt) {
  check_cp_inputs(be, ctrl, data, opt);
  TESSERA_INPUT_CHECK(!opt.observed_only && opt.holdout == 0,
                      opt.tensor_name
                          << ": --observed-only and --holdout need the tensor distributed in "
                             "memory (memory tier 1 from a text file or a store read whole); "
                             "this run holds it as a prepared or streamed handle (tier "
                          << X.tier() << "): use --tier 1 (or a larger memory budget)");
  TESSERA_INPUT_CHECK(opt.strategy == CommStrategy::allreduce,
                      "CP-ALS on a tensor prepared in the backend supports only the allreduce "
                      "strategy: the layer strategy needs a grid partition of the nonzeros "
                      "(distribute them with the grid scheme and use --comm-strategy layer "
                      "on that, or use --comm-strategy allreduce)");
  const int N = static_cast<int>(dims.size());
  TESSERA_INPUT_CHECK(N >= 1 && N <= kMaxOrder,
                      "tensor order must be 1.." << kMaxOrder << " (got " << N << ")");
  Timer setup_timer;
  // Checked on every rank together, so a mismatch on one rank throws everywhere.
  const std::int32_t bad_dims = X.dims() != dims ? 1 : 0;
  std::int32_t bad_dims_any = bad_dims;
  ctrl.allreduce(&bad_dims_any, 1, comm::ReduceOp::max);
  TESSERA_INPUT_CHECK(bad_dims_any == 0,
                      "cp_als: the tensor handle's dims differ from the global dims "
                          << (bad_dims ? "on this rank" : "on another rank")
                          << " (the handle must hold global coordinates)");
  const nnz_t total = ctrl.allreduce_value(static_cast<std::int64_t>(X.nnz()));
  TESSERA_INPUT_CHECK(total == global_nnz, "cp_als: the handles hold "
                                               << total << " nonzeros over all ranks, but "
                                               << global_nnz << " were announced");

  // The global description: nnz scheme, no relabelling (identity original_index).
  partition::Distribution dist;
  dist.scheme = partition::Scheme::nnz;
  dist.nranks = ctrl.size();
  dist.rank = ctrl.rank();
  dist.dims = dims;
  dist.grid.assign(static_cast<std::size_t>(N), 1);
  dist.coords.assign(static_cast<std::size_t>(N), 0);
  for (int n = 0; n < N; ++n) dist.bounds.push_back({0, dims[static_cast<std::size_t>(n)]});
  dist.global_nnz = global_nnz;
  auto lay = make_layouts(dist, false, data, opt.nodes, opt.hierarchy);
  return run_als(X, dist, lay, be, ctrl, data, opt, setup_timer);
}

template <typename T>
CpResult cp_als(const kernels::TensorHandle<T>& X, const partition::Distribution& dist,
                kernels::Backend<T>& be, const comm::Communicator& ctrl,
                const comm::Communicator& data, const CpOptions& opt) {
  check_cp_inputs(be, ctrl, data, opt);
  TESSERA_INPUT_CHECK(!opt.observed_only && opt.holdout == 0,
                      opt.tensor_name << ": --observed-only and --holdout need the tensor "
                                         "distributed in memory, not a prepared grid block");
  if (opt.strategy != CommStrategy::layer || dist.scheme != partition::Scheme::grid)
    throw CollectiveError(  // the same options on every rank: agreed
        "CP-ALS on prepared grid blocks runs the layer strategy on a grid distribution");
  const int N = dist.order();
  Timer setup_timer;
  // Each rank's handle must be its block as the layer strategy's kernels see it: shifted to
  // its chunks. Checked on every rank together, so a mismatch throws everywhere.
  std::int32_t bad = X.order() != N ? 1 : 0;
  for (int n = 0; bad == 0 && n < N; ++n) {
    const auto [c0, c1] = dist.chunk(n);
    if (X.dims()[static_cast<std::size_t>(n)] != c1 - c0) bad = 1;
  }
  std::int32_t bad_any = bad;
  ctrl.allreduce(&bad_any, 1, comm::ReduceOp::max);
  TESSERA_INPUT_CHECK(bad_any == 0, "cp_als: a prepared grid block's dims differ from its chunks "
                                        << (bad ? "on this rank" : "on another rank"));
  const nnz_t total = ctrl.allreduce_value(static_cast<std::int64_t>(X.nnz()));
  TESSERA_INPUT_CHECK(total == dist.global_nnz, "cp_als: the grid blocks hold "
                                                    << total << " nonzeros over all ranks, but "
                                                    << dist.global_nnz << " were announced");
  auto lay = make_layouts(dist, true, data, opt.nodes, opt.hierarchy);
  return run_als(X, dist, lay, be, ctrl, data, opt, setup_timer);
}

template CpResult cp_als<float>(const kernels::TensorHandle<float>&, const partition::Distribution&,
                                kernels::Backend<float>&, const comm::Communicator&,
                                const comm::Communicator&, const CpOptions&);
template CpResult cp_als<double>(const kernels::TensorHandle<double>&,
                                 const partition::Distribution&, kernels::Backend<double>&,
                                 const comm::Communicator&, const comm::Communicator&,
                                 const CpOptions&);
template CpResult cp_als<float>(const partition::Distributed<float>&, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_als<double>(const partition::Distributed<double>&, kernels::Backend<double>&,
                                 const comm::Communicator&, const comm::Communicator&,
                                 const CpOptions&);
template CpResult cp_als<float>(const kernels::TensorHandle<float>&,
                                const std::vector<std::uint64_t>&, nnz_t, kernels::Backend<float>&,
                                const comm::Communicator&, const comm::Communicator&,
                                const CpOptions&);
template CpResult cp_als<double>(const kernels::TensorHandle<double>&,
                                 const std::vector<std::uint64_t>&, nnz_t,
                                 kernels::Backend<double>&, const comm::Communicator&,
                                 const comm::Communicator&, const CpOptions&);

}  // namespace tessera::algo
