#include "algo/holdout_score.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/gcp_sample.hpp"

namespace tessera::algo::detail {

namespace {
// The zeros are GCP's zero samples (kernels/gcp_sample.hpp) of an epoch no run reaches: they
// differ from every training and evaluation sample of GCP.
constexpr std::uint64_t kZeroEpoch = ~std::uint64_t{0} - 1;
constexpr int kAucBins = 4096;
}  // namespace

HoldoutScore holdout_score(const Holdout& hold, const std::vector<std::vector<double>>& factors,
                           int R, const std::vector<std::uint64_t>& dims, std::uint64_t seed,
                           const comm::Communicator& ctrl, const EntryLoss& loss) {
  const int N = static_cast<int>(dims.size());
  // sum_r prod_n F_n(c_n, r) at coordinates c(e, n).
  const auto values = [&](std::int64_t count, const auto& coord, std::vector<double>* out) {
    out->assign(static_cast<std::size_t>(count), 0.0);
#pragma omp parallel for schedule(static) if (count > 16384)
    for (std::int64_t e = 0; e < count; ++e) {
      double m = 0;
      for (int r = 0; r < R; ++r) {
        double p = 1;
        for (int n = 0; n < N; ++n)
          p *= factors[static_cast<std::size_t>(n)][static_cast<std::size_t>(coord(e, n)) * R + r];
        m += p;
      }
      (*out)[static_cast<std::size_t>(e)] = m;
    }
  };
  std::vector<double> pos, neg;
  values(
      static_cast<std::int64_t>(hold.vals.size()),
      [&](std::int64_t e, int n) {
        return hold.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(e)];
      },
      &pos);
  double sums[2] = {0, static_cast<double>(hold.vals.size())};  // loss, held-out count
  for (std::size_t e = 0; e < pos.size(); ++e) sums[0] += loss(hold.vals[e], pos[e]);
  ctrl.allreduce(sums, 2);
  const auto H = static_cast<std::int64_t>(sums[1]);
  const std::int64_t P = ctrl.size(), me = ctrl.rank();
  kernels::GcpDraw zeros;
  zeros.seed = seed;
  zeros.epoch = kZeroEpoch;
  values(
      H > me ? (H - me + P - 1) / P : 0,
      [&](std::int64_t e, int n) {  // this rank's e-th zero
        return static_cast<std::uint64_t>(
            kernels::gcp_zero_coord(zeros, me + e * P, n, dims[static_cast<std::size_t>(n)]));
      },
      &neg);
  double zsum = 0;
  for (double m : neg) zsum += loss(0.0, m);
  ctrl.allreduce(&zsum, 1);
  HoldoutScore s;
  s.loss = H > 0 ? (sums[0] + zsum) / (2.0 * static_cast<double>(H)) : 0.0;
  // AUC of the scores from histograms over [lo, hi] (counts summed over the ranks).
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* v : {&pos, &neg})
    for (double m : *v)
      if (std::isfinite(m)) lo = std::min(lo, m), hi = std::max(hi, m);
  ctrl.allreduce(&lo, 1, comm::ReduceOp::min);
  ctrl.allreduce(&hi, 1, comm::ReduceOp::max);
  std::vector<double> hp(kAucBins, 0.0), hn(kAucBins, 0.0);
  const double width = hi > lo ? (hi - lo) / kAucBins : 1.0;
  const auto bin = [&](double m) {  // a value that is not finite scores lowest
    if (!std::isfinite(m) || !std::isfinite(lo)) return 0;
    const double b = (m - lo) / width;
    return b >= kAucBins ? kAucBins - 1 : b > 0 ? static_cast<int>(b) : 0;
  };
  for (double m : pos) hp[static_cast<std::size_t>(bin(m))] += 1;
  for (double m : neg) hn[static_cast<std::size_t>(bin(m))] += 1;
  ctrl.allreduce(hp.data(), hp.size());
  ctrl.allreduce(hn.data(), hn.size());
  double below = 0, good = 0, np = 0;
  for (int b = 0; b < kAucBins; ++b) {
    good += hp[static_cast<std::size_t>(b)] * (below + 0.5 * hn[static_cast<std::size_t>(b)]);
    below += hn[static_cast<std::size_t>(b)];
    np += hp[static_cast<std::size_t>(b)];
  }
  const double nn = below;
  s.auc = np > 0 && nn > 0 ? good / (np * nn) : std::numeric_limits<double>::quiet_NaN();
  return s;
}

void holdout_counts(const Holdout& hold, std::uint64_t training, const comm::Communicator& ctrl,
                    CpResult* res) {
  double v[3] = {static_cast<double>(hold.vals.size()), static_cast<double>(training),
                 static_cast<double>(hold.cold)};
  ctrl.allreduce(v, 3);
  res->holdout_entries = static_cast<std::uint64_t>(v[0]);
  res->training_entries = static_cast<std::uint64_t>(v[1]);
  res->holdout_cold_entries = static_cast<std::uint64_t>(v[2]);
}

}  // namespace tessera::algo::detail
