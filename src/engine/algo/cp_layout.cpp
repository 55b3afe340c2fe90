#include "algo/cp_layout.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "kernels/ops/cp_device.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/log.hpp"

namespace tessera::algo::detail {

/// ||X|| over the ranks of `c` from each rank's scaled norm (Backend value_norm): the largest
/// times the root of the summed squares of the ratios, so no step overflows or underflows.
double global_norm(double mine, const comm::Communicator& c) {
  double mx = mine;
  c.allreduce(&mx, 1, comm::ReduceOp::max);
  if (mx == 0 || !std::isfinite(mx)) return mx;
  double r = (mine / mx) * (mine / mx);
  c.allreduce(&r, 1);
  return mx * std::sqrt(r);
}

/// The factor rows this rank holds and owns, per mode (collective over `data` for the
/// layer strategy or a composed group: it splits communicators).
std::vector<ModeLayout> make_layouts(const partition::Distribution& dist, bool layer,
                                     const comm::Communicator& data, const comm::NodeMap& nodes,
                                     comm::Hierarchy h) {
  const int N = dist.order();
  const int P = data.size();
  TESSERA_EXPECTS(nodes.node_of.empty() || static_cast<int>(nodes.node_of.size()) == P,
                  "the node map has " << nodes.node_of.size() << " ranks, the communicator " << P);
  std::vector<ModeLayout> lay(static_cast<std::size_t>(N));
  // The allreduce strategy's group is every rank, for every mode: composed once.
  std::shared_ptr<const comm::Communicator> whole;
  if (!layer && P > 1 && comm::use_hierarchy(h, nodes))
    whole = std::make_shared<comm::HierarchicalCommunicator>(data, nodes);
  for (int n = 0; n < N; ++n) {
    auto& L = lay[static_cast<std::size_t>(n)];
    if (!layer) {
      // Every rank holds the whole factor. On 2+ ranks the MTTKRP rows are reduce-scattered
      // in equal padded blocks, each rank solves its block, and the factor is allgathered:
      // the same bytes as one allreduce, and the solve divided by the rank count.
      L.lo = 0;
      L.len = static_cast<std::int64_t>(dist.dims[static_cast<std::size_t>(n)]);
      L.layer = whole;
      L.hierarchical = whole != nullptr;
      L.rows = P > 1 ? (whole ? whole.get() : &data) : nullptr;
      const std::int64_t q = P;
      L.b = (L.len + q - 1) / q;
      L.alloc = L.b * q;
      const std::int64_t me = L.rows ? L.rows->rank() : 0;
      L.own_lo = std::min<std::int64_t>(L.b * me, L.len);
      L.own_n = std::min<std::int64_t>(L.b, L.len - L.own_lo);
    } else {
      const auto [c0, c1] = dist.chunk(n);
      const auto [o0, o1] = dist.owned_rows(n);
      L.lo = c0;
      L.len = static_cast<std::int64_t>(c1 - c0);
      const int color = dist.coords[static_cast<std::size_t>(n)];
      std::shared_ptr<const comm::Communicator> flat = data.split(color, data.rank());
      TESSERA_EXPECTS(flat->size() == dist.layer_size(n) && flat->rank() == dist.layer_rank(n),
                      "layer communicator disagrees with the distribution");
      // The layer's members (ranks of `data` with this chunk, in rank order) and their nodes:
      // the same map on every member, so they agree on composing it.
      std::vector<int> members;
      for (int r = 0; r < P; ++r)
        if (dist.coords_of(r)[static_cast<std::size_t>(n)] == color) members.push_back(r);
      L.layer = comm::with_hierarchy(std::move(flat), nodes.restrict_to(members), h);
      L.hierarchical = dynamic_cast<const comm::HierarchicalCommunicator*>(L.layer.get());
      const std::int64_t q = L.layer->size();
      L.b = (L.len + q - 1) / q;  // equal padded blocks: NCCL needs equal counts
      L.alloc = L.b * q;
      if (L.hierarchical) {  // its own rank numbering: the block it receives
        L.own_lo = std::min<std::int64_t>(L.b * L.layer->rank(), L.len);
        L.own_n = std::min<std::int64_t>(L.b, L.len - L.own_lo);
      } else {
        L.own_lo = static_cast<std::int64_t>(o0 - c0);
        L.own_n = static_cast<std::int64_t>(o1 - o0);
      }
      L.rows = L.layer.get();
    }
  }
  return lay;
}

std::string hierarchy_modes(const std::vector<ModeLayout>& lay) {
  std::string s;
  for (const auto& L : lay) {
    if (L.rows == nullptr) return {};
    if (!s.empty()) s += ',';
    s += L.hierarchical ? "node" : "flat";
  }
  return s;
}

namespace {

/// Why the rows of a run on several ranks cannot be combined inside the device loop, or
/// empty when they can: the collectives must be stream-ordered (NCCL) and each split
/// mode's owned rows must be the in-place block of its reduce-scatter.
std::string why_not_shared(void* stream, const std::vector<ModeLayout>& lay,
                           const comm::Communicator& data) {
  if (stream == nullptr || !data.can_enqueue())
    return "the factor rows are split over ranks and this backend's collectives are not "
           "stream-ordered";
  for (const auto& L : lay) {
    if (L.rows == nullptr) continue;
    if (!L.rows->can_enqueue()) return "a layer communicator is not stream-ordered";
    if (L.own_n > 0 && L.own_lo != L.b * L.rows->rank())
      return "the owned rows are not the reduce-scatter's block";
  }
  return {};
}

}  // namespace

/// The backend's device loop (kernels/cp_device.hpp) when this run can use it: plain CP
/// in memory tier 1, on one rank or, with stream-ordered (NCCL) collectives, on several
/// (docs/multi-gpu.md). Sets res.iteration_engine for the other case.
template <typename T>
std::unique_ptr<kernels::CpDeviceLoop<T>> make_device_loop(
    kernels::Backend<T>& be, const std::vector<ModeLayout>& lay,
    const std::vector<linalg::RowUpdate>& upd, std::vector<kernels::Array<T>>& A,
    std::vector<kernels::Array<T>>& G, kernels::Array<T>& M, int R, const comm::Communicator& ctrl,
    const comm::Communicator& data, CpResult& res, const CpOptions& opt, bool holdout) {
  const int N = static_cast<int>(lay.size());
  bool plain = !opt.observed_only && !holdout && N >= 2;
  for (const auto& u : upd) plain = plain && !u.descent() && u.l2 == 0;
  // On one rank every row is held and solved here (a layer of one rank holds the whole
  // mode); on several the rows are combined by the loop's collectives.
  const bool shared = ctrl.size() > 1;
  void* stream = be.native_stream();
  std::string why;
  std::unique_ptr<kernels::CpDeviceLoop<T>> dev;
  if (!opt.device_loop)
    why = "--cuda-graph off";
  else if (res.tier != 1)
    why = "memory tier " + std::to_string(res.tier);
  else if (!plain)
    why = "constrained or weighted CP";
  else if (shared && !(why = why_not_shared(stream, lay, data)).empty()) {
  } else {
    kernels::CpLoopSpec<T> spec;
    spec.R = R;
    spec.M = M.data();
    // Per mode: are the rows reduce-scattered and solved in blocks (split), or all-reduced
    // and solved whole on every rank? The layer strategy always splits (its layers hold
    // different chunks); allreduce splits the modes whose rows are large.
    auto split = std::make_shared<std::vector<char>>(static_cast<std::size_t>(N), 0);
    std::string modes;
    for (int n = 0; n < N; ++n) {
      const auto& L = lay[static_cast<std::size_t>(n)];
      spec.A.push_back(A[static_cast<std::size_t>(n)].data());
      spec.G.push_back(G[static_cast<std::size_t>(n)].data());
      spec.rows.push_back(L.len);
      const bool s = shared && L.rows != nullptr &&
                     (opt.strategy == CommStrategy::layer ||
                      static_cast<double>(L.len) * R * sizeof(T) > opt.whole_rows_max_bytes);
      (*split)[static_cast<std::size_t>(n)] = s;
      spec.solve_lo.push_back(s ? L.own_lo : 0);
      spec.solve_n.push_back(s ? L.own_n : L.len);
      if (shared) modes += (modes.empty() ? "" : ",") + std::string(s ? "split" : "whole");
    }
    if (shared) {
      const comm::Communicator* d = &data;
      const std::vector<ModeLayout>* ly = &lay;
      T* m = M.data();
      auto& c = spec.comm;
      c.reduce = [=](int n) {
        const auto& L = (*ly)[static_cast<std::size_t>(n)];
        if (L.rows == nullptr) return;
        if ((*split)[static_cast<std::size_t>(n)])
          L.rows->enqueue_reduce_scatter(m, m + L.rows->rank() * L.b * R,
                                         static_cast<std::size_t>(L.b * R), stream);
        else
          L.rows->enqueue_allreduce(m, static_cast<std::size_t>(L.len * R), comm::ReduceOp::sum,
                                    stream);
      };
      c.norms = [=](int n, double* norms, bool sum) {
        if (!(*split)[static_cast<std::size_t>(n)]) return;
        d->enqueue_allreduce(norms, static_cast<std::size_t>(R),
                             sum ? comm::ReduceOp::sum : comm::ReduceOp::max, stream);
      };
      std::vector<T*> a, g;
      for (int n = 0; n < N; ++n) {
        a.push_back(A[static_cast<std::size_t>(n)].data());
        g.push_back(G[static_cast<std::size_t>(n)].data());
      }
      c.share = [=](int n) {
        const auto& L = (*ly)[static_cast<std::size_t>(n)];
        if (!(*split)[static_cast<std::size_t>(n)]) return;
        d->enqueue_allreduce(g[static_cast<std::size_t>(n)], static_cast<std::size_t>(R * R),
                             comm::ReduceOp::sum, stream);
        T* an = a[static_cast<std::size_t>(n)];
        L.rows->enqueue_allgather(an + L.rows->rank() * L.b * R, an,
                                  static_cast<std::size_t>(L.b * R), stream);
      };
      if ((*split)[static_cast<std::size_t>(N - 1)])
        c.dots = [=](double* dots) {
          d->enqueue_allreduce(dots, static_cast<std::size_t>(R), comm::ReduceOp::sum, stream);
        };
      c.wait = [=] {
        // The iteration's graph (its collectives included) is in flight.
        util::fault::at(util::fault::Point::collective);
        d->wait_stream(stream, "the CP-ALS iteration on the device");
      };
    }
    dev = kernels::ops::cp_device_loop(be, spec, &why);
    if (dev && shared) res.device_loop_modes = modes;
  }
  res.iteration_engine = dev ? dev->describe() : "per-operation calls (" + why + ")";
  if (opt.print_iterations)
    log::info(dev ? std::string("iterations on the device: the dense steps as kernels, one CUDA "
                                "graph per iteration from the second") +
                        (shared ? ", the factor rows combined by stream-ordered collectives (" +
                                      res.device_loop_modes + ")"
                                : std::string())
                  : "iterations through per-operation backend calls (" + why + ")");
  return dev;
}

template std::unique_ptr<kernels::CpDeviceLoop<float>> make_device_loop<float>(
    kernels::Backend<float>&, const std::vector<ModeLayout>&, const std::vector<linalg::RowUpdate>&,
    std::vector<kernels::Array<float>>&, std::vector<kernels::Array<float>>&,
    kernels::Array<float>&, int, const comm::Communicator&, const comm::Communicator&, CpResult&,
    const CpOptions&, bool);
template std::unique_ptr<kernels::CpDeviceLoop<double>> make_device_loop<double>(
    kernels::Backend<double>&, const std::vector<ModeLayout>&,
    const std::vector<linalg::RowUpdate>&, std::vector<kernels::Array<double>>&,
    std::vector<kernels::Array<double>>&, kernels::Array<double>&, int, const comm::Communicator&,
    const comm::Communicator&, CpResult&, const CpOptions&, bool);

}  // namespace tessera::algo::detail
