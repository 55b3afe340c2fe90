// Plans for N ranks (tessera plan --nprocs): each rank's share of the nonzeros, the plan of
// the largest block per rank count, and the CP iteration model (planner.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "plan/planner.hpp"

namespace tessera::plan {
namespace {
std::string human_b(std::uint64_t b) {
  return human_bytes(static_cast<double>(b));
}
}  // namespace

// ---- plans for N ranks (tessera plan --nprocs) ----

IterationEstimate estimate_cp_iteration(const Request& req, const TensorFacts& t, nnz_t block_nnz,
                                        int ranks, const TimeModel& m) {
  IterationEstimate e;
  const int N = t.order();
  const double n = static_cast<double>(std::max<nnz_t>(block_nnz, 0));
  const double v = req.value_bytes, R = std::max(req.cp_rank, 1);
  // Mode k's MTTKRP reads the sorted copy of the block (N uint32 and a value per nonzero),
  // each factor row of the other modes the block touches (at most min(I_j, n)) once, and
  // writes its output (I_k x R, whole under the allreduce strategy).
  const double copy = n * (4.0 * N + v);
  for (int k = 0; k < N; ++k) {
    const double Ik = static_cast<double>(t.dims[static_cast<std::size_t>(k)]);
    double b = copy + Ik * R * v;
    for (int j = 0; j < N; ++j)
      if (j != k)
        b += std::min(static_cast<double>(t.dims[static_cast<std::size_t>(j)]), n) * R * v;
    e.mttkrp_bytes += b;
    e.comm_bytes += Ik * R * v;
  }
  e.kernel_s = m.bandwidth > 0 ? e.mttkrp_bytes / m.bandwidth : 0;
  if (ranks > 1) {
    const double P = ranks;
    e.comm_s = (m.link_bandwidth > 0 ? 2.0 * (P - 1) / P * e.comm_bytes / m.link_bandwidth : 0) +
               N * m.collective_latency;
  }
  e.seconds = e.kernel_s + e.comm_s;
  return e;
}

std::vector<nnz_t> equal_split(nnz_t nnz, int ranks) {
  const int P = std::max(ranks, 1);
  std::vector<nnz_t> out(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    const auto a = static_cast<nnz_t>(static_cast<__int128>(nnz) * r / P);
    const auto b = static_cast<nnz_t>(static_cast<__int128>(nnz) * (r + 1) / P);
    out[static_cast<std::size_t>(r)] = b - a;
  }
  return out;
}

std::vector<RanksPlan> plan_for_ranks(const Request& req, const TensorFacts& t,
                                      const std::vector<int>& counts,
                                      const std::function<RankBlocks(int)>& blocks,
                                      const std::function<Limits(int)>& limits,
                                      const TimeModel& m) {
  std::vector<RanksPlan> out;
  for (const int P : counts) {
    RanksPlan rp;
    rp.ranks = P;
    RankBlocks b = blocks(P);
    rp.block_nnz = std::move(b.nnz);
    rp.partition = std::move(b.how);
    Request r = req;
    r.ranks = P;
    TensorFacts f = t;
    nnz_t largest = 0;
    for (const nnz_t n : rp.block_nnz) largest = std::max(largest, n);
    f.max_block_nnz = std::max<nnz_t>(largest, 1);
    const Limits lim = limits(P);
    rp.plan = make_plan(r, f, lim);
    // Every rank runs the tier planned for the largest block; its own bytes follow its own
    // block (blocks of the same size share one plan).
    if (rp.plan.fits) r.force_tier = rp.plan.tier;
    std::map<nnz_t, std::pair<std::uint64_t, std::uint64_t>> seen;
    for (const nnz_t n : rp.block_nnz) {
      auto it = seen.find(n);
      if (it == seen.end()) {
        f.max_block_nnz = std::max<nnz_t>(n, 1);
        const Plan q = make_plan(r, f, lim);
        it = seen.emplace(n, std::make_pair(q.host_peak, q.device_peak)).first;
      }
      rp.host_peak.push_back(it->second.first);
      rp.device_peak.push_back(it->second.second);
    }
    if (req.workload == Workload::cp) {
      rp.has_estimate = true;
      rp.estimate = estimate_cp_iteration(r, t, largest, P, m);
    }
    out.push_back(std::move(rp));
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (!out[k].has_estimate || out[k].estimate.seconds <= 0) continue;
    out[k].speedup = out.front().estimate.seconds / out[k].estimate.seconds;
    if (k > 0 && out[k].estimate.seconds > 0.9 * out[k - 1].estimate.seconds) out[k].no_gain = true;
  }
  return out;
}

nlohmann::json RanksPlan::to_json() const {
  nlohmann::json j = {{"ranks", ranks},
                      {"partition", partition},
                      {"fits", plan.fits},
                      {"tier", plan.tier},
                      {"tier_name", plan.tier_name},
                      {"block_nnz", block_nnz},
                      {"planned_peak_host_bytes", host_peak},
                      {"planned_peak_device_bytes", device_peak},
                      {"plan", plan.to_json()}};
  if (has_estimate)
    j["predicted"] = {{"model", "cp-als iteration, allreduce strategy, tier 1"},
                      {"mttkrp_bytes_per_rank", estimate.mttkrp_bytes},
                      {"mttkrp_seconds", estimate.kernel_s},
                      {"allreduce_bytes", estimate.comm_bytes},
                      {"comm_seconds", estimate.comm_s},
                      {"seconds_per_iteration", estimate.seconds},
                      {"speedup", speedup},
                      {"more_ranks_help", !no_gain}};
  return j;
}

std::string describe_ranks(const std::vector<RanksPlan>& plans, const TimeModel& m) {
  std::ostringstream os;
  if (plans.empty()) return {};
  const bool cuda = plans.front().plan.backend == Backend::cuda;
  const bool timed = plans.front().has_estimate;
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4g ms", 1e3 * s);
    return std::string(b);
  };
  os << "plans per rank count (each rank's block, the tier planned for the largest, the planned "
        "peaks per rank)\n";
  char line[512];
  std::snprintf(line, sizeof(line), "  %6s  %-18s  %14s  %12s  %12s", "ranks", "tier",
                "largest block", "host/rank", cuda ? "device/rank" : "");
  os << line;
  if (timed) {
    std::snprintf(line, sizeof(line), "  %11s  %11s  %11s  %7s", "MTTKRPs", "all-reduce",
                  "iteration", "speedup");
    os << line;
  }
  os << "\n";
  for (const auto& rp : plans) {
    const std::uint64_t h = rp.host_peak.empty()
                                ? rp.plan.host_peak
                                : *std::max_element(rp.host_peak.begin(), rp.host_peak.end());
    const std::uint64_t d = rp.device_peak.empty()
                                ? rp.plan.device_peak
                                : *std::max_element(rp.device_peak.begin(), rp.device_peak.end());
    const std::string tier =
        rp.plan.fits ? std::to_string(rp.plan.tier) + " (" + rp.plan.tier_name + ")" : "REFUSED";
    std::snprintf(line, sizeof(line), "  %6d  %-18s  %14lld  %12s  %12s", rp.ranks, tier.c_str(),
                  static_cast<long long>(rp.plan.block_nnz), human_b(h).c_str(),
                  cuda ? human_b(d).c_str() : "");
    os << line;
    if (timed) {
      std::snprintf(line, sizeof(line), "  %11s  %11s  %11s  %6.2fx",
                    ms(rp.estimate.kernel_s).c_str(), ms(rp.estimate.comm_s).c_str(),
                    ms(rp.estimate.seconds).c_str(), rp.speedup);
      os << line;
    }
    os << "\n";
  }
  os << "  nonzeros per rank:\n";
  for (const auto& rp : plans) {
    os << "    " << rp.ranks << (rp.ranks == 1 ? " rank" : " ranks") << " (" << rp.partition
       << "):";
    // Runs of ranks with the same planned peaks, one line each (their nonzeros as a range),
    // at most 8 lines.
    std::size_t lines = 0, r = 0;
    const std::size_t P = rp.block_nnz.size();
    auto peaks = [&](std::size_t k) {
      return std::make_pair(k < rp.host_peak.size() ? rp.host_peak[k] : 0,
                            k < rp.device_peak.size() ? rp.device_peak[k] : 0);
    };
    while (r < P && lines < 8) {
      std::size_t e = r + 1;
      nnz_t lo = rp.block_nnz[r], hi = rp.block_nnz[r];
      while (e < P && peaks(e) == peaks(r)) {
        lo = std::min(lo, rp.block_nnz[e]);
        hi = std::max(hi, rp.block_nnz[e]);
        ++e;
      }
      os << "\n      ";
      if (e - r > 1)
        os << "ranks " << r << "-" << (e - 1);
      else
        os << "rank " << r;
      os << ": " << lo;
      if (hi > lo) os << "-" << hi;
      os << " nonzeros, host " << human_b(peaks(r).first);
      if (cuda) os << ", device " << human_b(peaks(r).second);
      ++lines;
      r = e;
    }
    if (r < P) os << "\n      ... (the run record lists every rank)";
    os << "\n";
  }
  for (const auto& rp : plans)
    if (!rp.plan.fits) os << "  " << rp.ranks << " ranks REFUSED: " << rp.plan.refusal << "\n";
  if (timed) {
    char model[512];
    std::snprintf(model, sizeof(model),
                  "  time model (CP-ALS iteration of the largest block, allreduce strategy): the "
                  "N MTTKRPs' bytes\n    over %.0f GB/s (--bandwidth), plus per mode one "
                  "all-reduce of I_n x R values over %.0f GB/s\n    per direction "
                  "(--link-bandwidth; a ring moves 2 (P-1)/P of the bytes) and %.0f us "
                  "(--collective-latency);\n    not counted: the copies or reads of streamed "
                  "tiers, the dense R x R work\n",
                  m.bandwidth / 1e9, m.link_bandwidth / 1e9, m.collective_latency * 1e6);
    os << model;
    for (std::size_t k = 1; k < plans.size(); ++k) {
      if (!plans[k].no_gain) continue;
      std::snprintf(line, sizeof(line),
                    "  more ranks will not help beyond %d: %d ranks are predicted at %s per "
                    "iteration against %s on %d, not 10%% faster",
                    plans[k - 1].ranks, plans[k].ranks, ms(plans[k].estimate.seconds).c_str(),
                    ms(plans[k - 1].estimate.seconds).c_str(), plans[k - 1].ranks);
      os << line << "\n";
      break;
    }
  }
  return os.str();
}

}  // namespace tessera::plan
