#include "algo/cp_layout.hpp"

#include <algorithm>
#include <string>

#include "kernels/ops/cp_device.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::algo::detail {

/// The factor rows this rank holds and owns, per mode (collective over `data` for the
/// layer strategy: it splits the layer communicators).
std::vector<ModeLayout> make_layouts(const partition::Distribution& dist, bool layer,
                                     const comm::Communicator& data) {
  const int N = dist.order();
  std::vector<ModeLayout> lay(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    auto& L = lay[static_cast<std::size_t>(n)];
    if (!layer) {
      // Every rank holds the whole factor. On 2+ ranks the MTTKRP rows are reduce-scattered
      // in equal padded blocks, each rank solves its block, and the factor is allgathered:
      // the same bytes as one allreduce, and the solve divided by the rank count.
      L.lo = 0;
      L.len = static_cast<std::int64_t>(dist.dims[static_cast<std::size_t>(n)]);
      const std::int64_t P = data.size();
      L.b = (L.len + P - 1) / P;
      L.alloc = L.b * P;
      L.own_lo = std::min<std::int64_t>(L.b * data.rank(), L.len);
      L.own_n = std::min<std::int64_t>(L.b, L.len - L.own_lo);
      L.rows = P > 1 ? &data : nullptr;
    } else {
      const auto [c0, c1] = dist.chunk(n);
      const auto [o0, o1] = dist.owned_rows(n);
      L.lo = c0;
      L.len = static_cast<std::int64_t>(c1 - c0);
      L.layer = data.split(dist.coords[static_cast<std::size_t>(n)], data.rank());
      TESSERA_EXPECTS(
          L.layer->size() == dist.layer_size(n) && L.layer->rank() == dist.layer_rank(n),
          "layer communicator disagrees with the distribution");
      const std::int64_t q = L.layer->size();
      L.b = (L.len + q - 1) / q;  // equal padded blocks: NCCL needs equal counts
      L.alloc = L.b * q;
      L.own_lo = static_cast<std::int64_t>(o0 - c0);
      L.own_n = static_cast<std::int64_t>(o1 - o0);
      L.rows = L.layer.get();
    }
  }
  return lay;
}

/// The backend's device loop (kernels/cp_device.hpp) when this run can use it: plain CP
/// on one rank in memory tier 1. Sets res.iteration_engine for the other case.
template <typename T>
std::unique_ptr<kernels::CpDeviceLoop<T>> make_device_loop(
    kernels::Backend<T>& be, const std::vector<ModeLayout>& lay,
    const std::vector<linalg::RowUpdate>& upd, std::vector<kernels::Array<T>>& A,
    std::vector<kernels::Array<T>>& G, kernels::Array<T>& M, int R, const comm::Communicator& ctrl,
    CpResult& res, const CpOptions& opt, bool holdout) {
  const int N = static_cast<int>(lay.size());
  bool plain = !opt.observed_only && !holdout && N >= 2;
  for (const auto& u : upd) plain = plain && !u.descent() && u.l2 == 0;
  bool whole = true;  // every factor row held and owned here
  for (const auto& L : lay)
    whole = whole && L.rows == nullptr && L.lo == 0 && L.alloc == L.len && L.own_lo == 0 &&
            L.own_n == L.len;
  std::string why;
  std::unique_ptr<kernels::CpDeviceLoop<T>> dev;
  if (!opt.device_loop)
    why = "--cuda-graph off";
  else if (ctrl.size() > 1 || !whole)
    why = "the factor rows are split over ranks";
  else if (res.tier != 1)
    why = "memory tier " + std::to_string(res.tier);
  else if (!plain)
    why = "constrained or weighted CP";
  else {
    kernels::CpLoopSpec<T> spec;
    spec.R = R;
    spec.M = M.data();
    for (int n = 0; n < N; ++n) {
      spec.A.push_back(A[static_cast<std::size_t>(n)].data());
      spec.G.push_back(G[static_cast<std::size_t>(n)].data());
      spec.rows.push_back(lay[static_cast<std::size_t>(n)].len);
    }
    dev = kernels::ops::cp_device_loop(be, spec, &why);
  }
  res.iteration_engine = dev ? dev->describe() : "per-operation calls (" + why + ")";
  if (opt.print_iterations)
    log::info(dev ? std::string("iterations on the device: the dense steps as kernels, one CUDA "
                                "graph per iteration from the second")
                  : "iterations through per-operation backend calls (" + why + ")");
  return dev;
}

template std::unique_ptr<kernels::CpDeviceLoop<float>> make_device_loop<float>(
    kernels::Backend<float>&, const std::vector<ModeLayout>&, const std::vector<linalg::RowUpdate>&,
    std::vector<kernels::Array<float>>&, std::vector<kernels::Array<float>>&,
    kernels::Array<float>&, int, const comm::Communicator&, CpResult&, const CpOptions&, bool);
template std::unique_ptr<kernels::CpDeviceLoop<double>> make_device_loop<double>(
    kernels::Backend<double>&, const std::vector<ModeLayout>&,
    const std::vector<linalg::RowUpdate>&, std::vector<kernels::Array<double>>&,
    std::vector<kernels::Array<double>>&, kernels::Array<double>&, int, const comm::Communicator&,
    CpResult&, const CpOptions&, bool);

}  // namespace tessera::algo::detail
