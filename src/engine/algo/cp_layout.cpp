#include "algo/cp_layout.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "kernels/ops/cp_device.hpp"
#include "kernels/ops/mttkrp.hpp"
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
      // A layer of every rank (a mode the grid does not cut, and every mode on one rank) is
      // `data` itself: a split would be the same group, and an NCCL split allocates
      // connection buffers of its own (on one H200, 2.6 GiB of device and 90 MiB of host
      // memory for the three of a one-rank run; docs/multi-gpu.md, "Memory"). The same
      // decision on every rank: the grid is global.
      std::shared_ptr<const comm::Communicator> flat =
          dist.layer_size(n) == P
              ? std::shared_ptr<const comm::Communicator>(&data, [](const comm::Communicator*) {})
              : std::shared_ptr<const comm::Communicator>(data.split(color, data.rank()));
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

std::vector<std::int64_t> cut_row_pieces(const std::vector<std::int64_t>& fine,
                                         const std::vector<double>& nnz_per_range, int K,
                                         std::vector<std::int64_t>* bounds_out) {
  const auto B = static_cast<std::int64_t>(nnz_per_range.size());
  TESSERA_EXPECTS(B >= 1 && fine.size() == static_cast<std::size_t>(B + 1) && K >= 1,
                  "cut_row_pieces: " << fine.size() << " bounds for " << B << " ranges");
  const auto& sums = nnz_per_range;
  const double len = static_cast<double>(fine.back() - fine.front());
  double nnz = 0;
  for (double c : sums) nnz += c;
  // K contiguous pieces of equal cost, a range's cost its share of the nonzeros (compute)
  // plus its share of the rows (the bytes its sum moves).
  auto cost = [&](std::int64_t b) {
    const double rows = static_cast<double>(fine[static_cast<std::size_t>(b + 1)] -
                                            fine[static_cast<std::size_t>(b)]);
    return (nnz > 0 ? sums[static_cast<std::size_t>(b)] / nnz : 0.0) + (len > 0 ? rows / len : 0);
  };
  double total = 0;
  for (std::int64_t b = 0; b < B; ++b) total += cost(b);
  std::vector<std::int64_t> cut{0};
  double acc = 0;
  for (std::int64_t b = 0; b + 1 < B; ++b) {
    acc += cost(b);
    if (static_cast<int>(cut.size()) < K &&
        acc >= total * static_cast<double>(cut.size()) / static_cast<double>(K))
      cut.push_back(b + 1);
  }
  cut.push_back(B);
  struct Piece {
    std::int64_t lo, hi;
    double nnz;
  };
  std::vector<Piece> pieces;
  std::vector<std::int64_t> bounds{fine.front()};
  for (std::size_t k = 0; k + 1 < cut.size(); ++k) {
    Piece p{fine[static_cast<std::size_t>(cut[k])], fine[static_cast<std::size_t>(cut[k + 1])], 0};
    for (std::int64_t b = cut[k]; b < cut[k + 1]; ++b) p.nnz += sums[static_cast<std::size_t>(b)];
    pieces.push_back(p);
    bounds.push_back(p.hi);
  }
  // Rows per nonzero, most first: a piece whose sum moves much and computes little goes
  // early, where later pieces' kernels hide its sum; the last piece's sum is not hidden.
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return static_cast<double>(a.hi - a.lo) * (b.nnz + 1) >
           static_cast<double>(b.hi - b.lo) * (a.nnz + 1);
  });
  if (bounds_out) *bounds_out = bounds;
  std::vector<std::int64_t> out;
  for (const auto& p : pieces) {
    out.push_back(p.lo);
    out.push_back(p.hi);
  }
  return out;
}

template <typename T>
std::vector<std::int64_t> overlap_pieces(kernels::Backend<T>& be, const kernels::TensorHandle<T>& X,
                                         int n, int R, const comm::Communicator& ctrl,
                                         double piece_bytes) {
  const auto len = static_cast<std::int64_t>(X.dims()[static_cast<std::size_t>(n)]);
  const double bytes = static_cast<double>(len) * R * sizeof(T);
  const int K =
      static_cast<int>(std::clamp(std::ceil(bytes / std::max(piece_bytes, 1.0)), 2.0, 16.0));
  if (len < 2 * K) return {};
  // The global nonzeros of 64 K equal row ranges (every rank's, summed), and whether every
  // rank's backend computes pieces by themselves.
  const std::int64_t B = std::min<std::int64_t>(len, 64 * static_cast<std::int64_t>(K));
  std::vector<std::int64_t> fine(static_cast<std::size_t>(B + 1));
  for (std::int64_t b = 0; b <= B; ++b)
    fine[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(
        static_cast<long double>(len) * static_cast<long double>(b) / static_cast<long double>(B));
  // A streamed handle's MTTKRP is one pass over its chunks, never row pieces; it still takes
  // part in the agreement below (ranks may hold handles of different tiers).
  const kernels::RowRanges rr =
      X.streamed() != nullptr
          ? kernels::RowRanges{std::vector<nnz_t>(static_cast<std::size_t>(B), 0), false}
          : kernels::ops::mttkrp_row_ranges(be, X, n, fine);
  std::vector<double> sums(static_cast<std::size_t>(B + 1), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    sums[static_cast<std::size_t>(b)] = static_cast<double>(rr.nnz[static_cast<std::size_t>(b)]);
  sums[static_cast<std::size_t>(B)] = rr.pieces ? 1.0 : 0.0;
  ctrl.allreduce(sums.data(), sums.size());
  if (sums[static_cast<std::size_t>(B)] < ctrl.size()) return {};
  sums.pop_back();
  std::vector<std::int64_t> bounds;
  std::vector<std::int64_t> out = cut_row_pieces(fine, sums, K, &bounds);
  // The backend keeps the last ranges it was asked about: these.
  (void)kernels::ops::mttkrp_row_ranges(be, X, n, bounds);
  return out;
}

/// The backend's device loop (kernels/cp_device.hpp) when this run can use it: plain CP
/// in memory tier 1 or 2 (tier 2's chunks stay in page-locked host memory, so the graph
/// copies them at every replay; tier 3 refills its buffers from the store), on one rank or,
/// with stream-ordered (NCCL) collectives, on several (docs/multi-gpu.md). Sets
/// res.iteration_engine for the other case.
template <typename T>
std::unique_ptr<kernels::CpDeviceLoop<T>> make_device_loop(
    kernels::Backend<T>& be, const kernels::TensorHandle<T>& X, const std::vector<ModeLayout>& lay,
    const std::vector<linalg::RowUpdate>& upd, std::vector<kernels::Array<T>>& A,
    std::vector<kernels::Array<T>>& G, kernels::Array<T>& M, int R, const comm::Communicator& ctrl,
    const comm::Communicator& data, CpResult& res, const CpOptions& opt, bool holdout,
    std::vector<std::vector<std::int64_t>>& pieces) {
  pieces.assign(lay.size(), {});
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
  else if (res.tier > 2)
    why =
        "memory tier " + std::to_string(res.tier) + " (its chunks are read into refilled buffers)";
  else if (!plain)
    why = "constrained or weighted CP";
  else if (shared)
    why = why_not_shared(stream, lay, data);
  if (shared) {
    // Every rank takes the same path: the loop's collectives (and the pieces' count below)
    // must meet theirs on the other ranks, and a rank may differ (its own memory tier).
    double cannot = why.empty() ? 0.0 : 1.0;
    ctrl.allreduce(&cannot, 1, comm::ReduceOp::max);
    if (cannot > 0 && why.empty()) why = "another rank cannot (memory tier or backend)";
  }
  if (why.empty()) {
    kernels::CpLoopSpec<T> spec;
    spec.R = R;
    spec.M = M.data();
    // Per mode: are the rows reduce-scattered and solved in blocks (split), or all-reduced
    // and solved whole on every rank? The layer strategy always splits (its layers hold
    // different chunks); allreduce splits the modes whose rows are large.
    // A large mode of the allreduce strategy whose MTTKRP the backend computes in row pieces
    // (--comm-overlap on) is all-reduced piece by piece while the next piece computes, and
    // solved whole (docs/multi-gpu.md, "Overlap"): the same bytes as reduce-scatter plus
    // all-gather, hidden behind the kernel.
    auto split = std::make_shared<std::vector<char>>(static_cast<std::size_t>(N), 0);
    std::string modes;
    for (int n = 0; n < N; ++n) {
      const auto& L = lay[static_cast<std::size_t>(n)];
      spec.A.push_back(A[static_cast<std::size_t>(n)].data());
      spec.G.push_back(G[static_cast<std::size_t>(n)].data());
      spec.rows.push_back(L.len);
      const bool large = static_cast<double>(L.len) * R * sizeof(T) > opt.whole_rows_max_bytes;
      auto& pc = pieces[static_cast<std::size_t>(n)];
      if (shared && L.rows != nullptr && opt.strategy == CommStrategy::allreduce && large &&
          opt.comm_overlap &&
          L.len == static_cast<std::int64_t>(X.dims()[static_cast<std::size_t>(n)]))
        pc = overlap_pieces(be, X, n, R, ctrl, opt.overlap_piece_bytes);
      const bool s = shared && L.rows != nullptr && pc.empty() &&
                     (opt.strategy == CommStrategy::layer || large);
      (*split)[static_cast<std::size_t>(n)] = s;
      spec.solve_lo.push_back(s ? L.own_lo : 0);
      spec.solve_n.push_back(s ? L.own_n : L.len);
      spec.pieces.push_back(pc.empty() ? 1 : static_cast<int>(pc.size() / 2));
      if (shared)
        modes += (modes.empty() ? "" : ",") +
                 (!pc.empty() ? "whole in " + std::to_string(pc.size() / 2) + " pieces"
                              : std::string(s ? "split" : "whole"));
    }
    if (shared) {
      const comm::Communicator* d = &data;
      const std::vector<ModeLayout>* ly = &lay;
      T* m = M.data();
      auto& c = spec.comm;
      auto pcs = std::make_shared<std::vector<std::vector<std::int64_t>>>(pieces);
      c.reduce = [=](int n, int j, void* s) {
        const auto& L = (*ly)[static_cast<std::size_t>(n)];
        if (L.rows == nullptr) return;
        const auto& pc = (*pcs)[static_cast<std::size_t>(n)];
        if (!pc.empty()) {
          const std::int64_t lo = pc[2 * static_cast<std::size_t>(j)];
          const std::int64_t hi = pc[2 * static_cast<std::size_t>(j) + 1];
          L.rows->enqueue_allreduce(m + lo * R, static_cast<std::size_t>((hi - lo) * R),
                                    comm::ReduceOp::sum, s);
        } else if ((*split)[static_cast<std::size_t>(n)]) {
          L.rows->enqueue_reduce_scatter(m, m + L.rows->rank() * L.b * R,
                                         static_cast<std::size_t>(L.b * R), s);
        } else {
          L.rows->enqueue_allreduce(m, static_cast<std::size_t>(L.len * R), comm::ReduceOp::sum, s);
        }
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
  if (!dev) pieces.assign(lay.size(), {});
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
    kernels::Backend<float>&, const kernels::TensorHandle<float>&, const std::vector<ModeLayout>&,
    const std::vector<linalg::RowUpdate>&, std::vector<kernels::Array<float>>&,
    std::vector<kernels::Array<float>>&, kernels::Array<float>&, int, const comm::Communicator&,
    const comm::Communicator&, CpResult&, const CpOptions&, bool,
    std::vector<std::vector<std::int64_t>>&);
template std::unique_ptr<kernels::CpDeviceLoop<double>> make_device_loop<double>(
    kernels::Backend<double>&, const kernels::TensorHandle<double>&, const std::vector<ModeLayout>&,
    const std::vector<linalg::RowUpdate>&, std::vector<kernels::Array<double>>&,
    std::vector<kernels::Array<double>>&, kernels::Array<double>&, int, const comm::Communicator&,
    const comm::Communicator&, CpResult&, const CpOptions&, bool,
    std::vector<std::vector<std::int64_t>>&);
template std::vector<std::int64_t> overlap_pieces<float>(kernels::Backend<float>&,
                                                         const kernels::TensorHandle<float>&, int,
                                                         int, const comm::Communicator&, double);
template std::vector<std::int64_t> overlap_pieces<double>(kernels::Backend<double>&,
                                                          const kernels::TensorHandle<double>&, int,
                                                          int, const comm::Communicator&, double);

}  // namespace tessera::algo::detail
