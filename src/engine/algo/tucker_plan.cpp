// Tucker-HOOI's setup before the loop (see tucker_plan.hpp).
#include "algo/tucker_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::algo::detail {

namespace {

std::string bytes_str(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};  // as --max-mem is read
  int i = 0;
  while (b >= 1024 && i < 5) {
    b /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g %s", b, u[i]);
  return buf;
}

std::string ranks_str(const std::vector<int>& r) {
  std::ostringstream os;
  for (std::size_t i = 0; i < r.size(); ++i) os << (i ? "," : "") << r[i];
  return os.str();
}

/// Per-rank counts the memory estimate needs, for every mode.
struct RankCounts {
  std::vector<double> local, recv, own, scratch;  ///< per mode
};

struct Estimate {
  double semi = 0, total = 0;
};

/// wide_scratch(C): backend memory the wide products take for C columns
/// (ops::wide_scratch_bytes: float rows widened to double a chunk at a time).
Estimate estimate_rank(const RankCounts& rc, const std::vector<std::uint64_t>& dims,
                       const std::vector<int>& ranks, std::size_t vsize, int P, SvdMethod svd,
                       const std::function<double(std::int64_t)>& wide_scratch) {
  const int N = static_cast<int>(dims.size());
  double out = 0, recv = 0, own = 0, work = 0, factors = 0;
  for (int n = 0; n < N; ++n) {
    double C = 1;
    for (int m = 0; m < N; ++m)
      if (m != n) C *= ranks[static_cast<std::size_t>(m)];
    const double R = ranks[static_cast<std::size_t>(n)];
    const auto k = static_cast<std::size_t>(n);
    out = std::max(out, rc.local[k] * C * static_cast<double>(vsize) + rc.scratch[k] * C);
    if (P > 1) {
      recv = std::max(recv, rc.recv[k] * C * static_cast<double>(vsize));
      own = std::max(own, rc.own[k] * C * static_cast<double>(vsize));
    }
    const double chunk = wide_scratch(static_cast<std::int64_t>(C));
    const double rows_own = std::max(rc.own[k], P > 1 ? 0.0 : rc.local[k]);
    double w = chunk + 3 * rows_own * R * 8;
    switch (svd) {
      case SvdMethod::gram:
        w += (2 * C * C + C * R) * 8;
        break;
      case SvdMethod::subspace:
        w += 2 * C * R * 8;
        break;
      case SvdMethod::scalapack: {
        const double K = std::ceil(std::max(rows_own, 1.0) / 64) * 64;
        w += (K * C + K * std::min(K * P, C) + (K + C) * 64 * 4) * 8;
        break;
      }
    }
    work = std::max(work, w);
    factors += static_cast<double>(dims[k]) * R * (8.0 * 2 + static_cast<double>(vsize));
  }
  Estimate e;
  e.semi = out + recv + own;
  e.total = e.semi + work + factors;
  return e;
}

}  // namespace

std::vector<std::int64_t> check_options(const std::vector<std::uint64_t>& dims,
                                        const TuckerOptions& opt) {
  const int N = static_cast<int>(dims.size());
  check_tucker_ranks(dims, opt.ranks);
  TESSERA_INPUT_CHECK(opt.max_iters >= 1,
                      "--iters must be at least 1 (got " << opt.max_iters << ")");
  TESSERA_INPUT_CHECK(opt.tol >= 0 && std::isfinite(opt.tol), "--tol must be >= 0");
  TESSERA_INPUT_CHECK(opt.subspace_steps >= 1,
                      "the subspace method needs at least one power "
                      "step per update");
  TESSERA_INPUT_CHECK(opt.svd != SvdMethod::scalapack || scalapack_available(),
                      "--svd scalapack: this tessera was built without ScaLAPACK (reconfigure "
                      "with -DTESSERA_WITH_SCALAPACK=ON where libscalapack is installed), or use "
                      "--svd gram or --svd subspace");
  std::vector<std::int64_t> cols(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    cols[static_cast<std::size_t>(n)] = kernels::ttmc_output_cols(opt.ranks, n);
    TESSERA_INPUT_CHECK(opt.svd != SvdMethod::gram || cols[static_cast<std::size_t>(n)] <= 4096,
                        "--svd gram: mode " << n << " needs a " << cols[static_cast<std::size_t>(n)]
                                            << " x " << cols[static_cast<std::size_t>(n)]
                                            << " Gram matrix (the product of the other modes' "
                                               "ranks); use --svd subspace or smaller ranks");
  }
  return cols;
}

template <typename T>
NormScale norm_and_scale(double mine2, const std::function<double()>& mine,
                         const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res) {
  // ||X||: the plain sum of squares while it is far from the ends of the double range
  // (results as ever), else scaled norms (values near 1e200 or 1e-200), as CP-ALS does.
  NormScale s;
  s.norm_x2 = mine2;
  c.allreduce(&s.norm_x2, 1);
  const bool plain_norm =
      std::isfinite(s.norm_x2) && s.norm_x2 >= 0x1p-1000 && s.norm_x2 <= 0x1p+1000;
  if (!plain_norm) {
    double own = mine(), mx = own;
    c.allreduce(&mx, 1, comm::ReduceOp::max);
    double r = mx > 0 && std::isfinite(mx) ? (own / mx) * (own / mx) : 0.0;
    c.allreduce(&r, 1);
    res.norm_x = mx > 0 && std::isfinite(mx) ? mx * std::sqrt(r) : mx;
  } else {
    res.norm_x = std::sqrt(s.norm_x2);
  }
  TESSERA_INPUT_CHECK(res.norm_x > 0, opt.tensor_name << ": every value is 0 (no nonzero values): "
                                                         "nothing to decompose");
  TESSERA_INPUT_CHECK(std::isfinite(res.norm_x),
                      opt.tensor_name
                          << ": ||X|| = " << res.norm_x
                          << ": the 2-norm of the values is not a finite double (values "
                             "too large, or this memory tier sums squares without "
                             "scaling); rescale the values");
  // The loop computes on cs X (cs a power of two, exact) when ||X|| is far from 1, so the
  // Grams of the TTMc rows, the core and the fit stay in range: TTMc outputs are scaled as
  // they come out and the core is divided by cs in the model and the saved states.
  const int norm_exp = std::ilogb(res.norm_x);
  const int lo_exp = std::is_same_v<T, float> ? -20 : -128;
  const int hi_exp = std::is_same_v<T, float> ? 32 : 128;
  s.cs = norm_exp >= lo_exp && norm_exp <= hi_exp
             ? 1.0
             : std::ldexp(1.0, -std::clamp(norm_exp, std::is_same_v<T, float> ? -100 : -1000,
                                           std::is_same_v<T, float> ? 100 : 1000));
  if (s.cs != 1.0 || !plain_norm) s.norm_x2 = (s.cs * res.norm_x) * (s.cs * res.norm_x);
  s.norm_cx = s.cs * res.norm_x;
  return s;
}

/// Row ownership (mode-n rows cut into P ranges of ceil(I_n / P)) and the plan that
/// combines the TTMc rows on their owners: one index exchange per mode (collective).
void plan_combine(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                  const comm::Communicator& c) {
  const int P = c.size();
  for (std::size_t n = 0; n < dims.size(); ++n) {
    auto& mp = plan[n];
    const auto I = static_cast<std::int64_t>(dims[n]);
    mp.b = (I + P - 1) / P;
    mp.lo = std::min<std::int64_t>(mp.b * c.rank(), I);
    mp.len = std::min<std::int64_t>(mp.b * (c.rank() + 1), I) - mp.lo;
    if (P == 1) {
      mp.own_pos.assign(mp.local.begin(), mp.local.end());
      continue;
    }
    mp.send_rows.assign(static_cast<std::size_t>(P), 0);
    for (index_t i : mp.local)
      ++mp.send_rows[static_cast<std::size_t>(static_cast<std::int64_t>(i) / mp.b)];
    const std::vector<index_t> rin = c.alltoallv(mp.local, mp.send_rows, &mp.recv_rows);
    mp.recv_total = static_cast<std::int64_t>(rin.size());
    std::vector<std::int64_t> order(rin.size());
    for (std::size_t k = 0; k < rin.size(); ++k) order[k] = static_cast<std::int64_t>(k);
    // Stable by row, so duplicates are summed in rank order on every rank count alike.
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return rin[static_cast<std::size_t>(a)] < rin[static_cast<std::size_t>(b)];
    });
    mp.src_ptr.push_back(0);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const index_t i = rin[static_cast<std::size_t>(order[k])];
      if (k == 0 || i != rin[static_cast<std::size_t>(order[k - 1])]) {
        if (k > 0) mp.src_ptr.push_back(static_cast<std::int64_t>(k));
        mp.own_pos.push_back(static_cast<std::int64_t>(i) - mp.lo);
      }
      mp.src_row.push_back(order[k]);
    }
    if (!order.empty()) mp.src_ptr.push_back(static_cast<std::int64_t>(order.size()));
  }
}

/// The memory plan: every rank evaluates the same estimate from all ranks' counts
/// (collective), records it in res.memory, prints it and refuses, naming ranks that
/// would fit, when it is over opt.memory_limit.
void plan_memory(const std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 const std::vector<std::int64_t>& cols, std::size_t vsize,
                 const std::function<double(std::int64_t)>& wide_scratch,
                 const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res) {
  const int N = static_cast<int>(dims.size()), P = c.size();
  const std::vector<int>& ranks = opt.ranks;
  std::vector<double> mine(static_cast<std::size_t>(4 * N)),
      all(static_cast<std::size_t>(4 * N * P));
  for (int n = 0; n < N; ++n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    mine[static_cast<std::size_t>(4 * n)] = static_cast<double>(mp.local.size());
    mine[static_cast<std::size_t>(4 * n + 1)] = static_cast<double>(mp.recv_total);
    mine[static_cast<std::size_t>(4 * n + 2)] = static_cast<double>(mp.own_pos.size());
    mine[static_cast<std::size_t>(4 * n + 3)] = mp.scratch_per_col;
  }
  c.allgather(mine.data(), all.data(), mine.size());
  std::vector<RankCounts> counts(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p)
    for (int n = 0; n < N; ++n) {
      const double* q = all.data() + static_cast<std::size_t>(4 * (N * p + n));
      auto& rc = counts[static_cast<std::size_t>(p)];
      rc.local.push_back(q[0]);
      rc.recv.push_back(q[1]);
      rc.own.push_back(q[2]);
      rc.scratch.push_back(q[3]);
    }
  auto estimate = [&](const std::vector<int>& r) {
    Estimate worst;
    for (const auto& rc : counts) {
      const Estimate e = estimate_rank(rc, dims, r, vsize, P, opt.svd, wide_scratch);
      worst.semi = std::max(worst.semi, e.semi);
      worst.total = std::max(worst.total, e.total);
    }
    return worst;
  };
  const Estimate need = estimate(ranks);
  auto& mem = res.memory;
  mem.cols = cols;
  for (int n = 0; n < N; ++n) {
    std::int64_t a = 0, r = 0, o = 0;
    for (const auto& rc : counts) {
      a = std::max(a, static_cast<std::int64_t>(rc.local[static_cast<std::size_t>(n)]));
      r = std::max(r, static_cast<std::int64_t>(rc.recv[static_cast<std::size_t>(n)]));
      o = std::max(o, static_cast<std::int64_t>(rc.own[static_cast<std::size_t>(n)]));
    }
    mem.ttmc_rows.push_back(a);
    mem.received_rows.push_back(r);
    mem.owned_rows.push_back(o);
  }
  const double cap = static_cast<double>(std::numeric_limits<std::size_t>::max()) / 2;
  mem.semi_sparse_bytes = static_cast<std::size_t>(std::min(need.semi, cap));
  mem.total_bytes = static_cast<std::size_t>(std::min(need.total, cap));
  std::ostringstream plan_text;
  for (int n = 0; n < N; ++n) {
    plan_text << (n ? "; " : "") << "mode " << n << ": "
              << mem.ttmc_rows[static_cast<std::size_t>(n)] << " rows x "
              << cols[static_cast<std::size_t>(n)] << " cols ("
              << bytes_str(static_cast<double>(mem.ttmc_rows[static_cast<std::size_t>(n)]) *
                           static_cast<double>(cols[static_cast<std::size_t>(n)] *
                                               static_cast<std::int64_t>(vsize)))
              << ")";
    if (P > 1)
      plan_text << ", " << mem.received_rows[static_cast<std::size_t>(n)] << " received, "
                << mem.owned_rows[static_cast<std::size_t>(n)] << " combined";
  }
  if (opt.print_iterations) {
    log::info("TTMc semi-sparse rows per rank (largest rank): " + plan_text.str());
    log::info("memory per rank: " + bytes_str(need.semi) + " for the semi-sparse rows, " +
              bytes_str(need.total) + " with SVD workspace and factors" +
              (opt.memory_limit > 0
                   ? " (limit " + bytes_str(static_cast<double>(opt.memory_limit)) + ")"
                   : ""));
  }
  if (opt.memory_limit > 0 && need.total > static_cast<double>(opt.memory_limit)) {
    std::ostringstream msg;
    msg << "Tucker with ranks " << ranks_str(ranks) << " needs about " << bytes_str(need.total)
        << " per rank (semi-sparse TTMc rows " << bytes_str(need.semi) << ": " << plan_text.str()
        << "), over the limit of " << bytes_str(static_cast<double>(opt.memory_limit)) << "; ";
    const int rmax = *std::max_element(ranks.begin(), ranks.end());
    bool found = false;
    for (int r = rmax - 1; r >= 1 && !found; --r) {
      std::vector<int> cand(ranks);
      for (auto& x : cand) x = std::min(x, r);
      bool valid = true;
      try {
        check_tucker_ranks(dims, cand);
      } catch (const InputError&) {
        valid = false;
      }
      if (!valid) continue;
      const Estimate e = estimate(cand);
      if (e.total <= static_cast<double>(opt.memory_limit)) {
        msg << "ranks " << ranks_str(cand) << " would fit (about " << bytes_str(e.total)
            << " per rank)";
        found = true;
      }
    }
    if (!found) msg << "no smaller ranks fit";
    msg << "; more MPI ranks (fewer rows each) or a larger memory limit also help";
    TESSERA_INPUT_CHECK(false, msg.str());
  }
}

template NormScale norm_and_scale<float>(double, const std::function<double()>&,
                                         const comm::Communicator&, const TuckerOptions&,
                                         TuckerResult&);
template NormScale norm_and_scale<double>(double, const std::function<double()>&,
                                          const comm::Communicator&, const TuckerOptions&,
                                          TuckerResult&);

}  // namespace tessera::algo::detail
