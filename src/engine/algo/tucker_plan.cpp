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
  /// Per mode; recv is the larger of a two-stage combine's receptions (an all-reduced mode:
  /// the whole Y_(n)'s rows where the TTMc output is not already it), relay its relayed rows
  /// (held in the combined rows' buffer), dense the rows the dense stage works on.
  std::vector<double> local, recv, own, scratch, relay, dense;
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
      own = std::max(own, std::max(rc.own[k], rc.relay[k]) * C * static_cast<double>(vsize));
    }
    const double chunk = wide_scratch(static_cast<std::int64_t>(C));
    const double rows_own = std::max(rc.dense[k], P > 1 ? 0.0 : rc.local[k]);
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
  TESSERA_INPUT_CHECK(opt.rows != TuckerRows::allreduce || opt.svd == SvdMethod::gram,
                      "--comm-strategy allreduce with --svd "
                          << to_string(opt.svd)
                          << ": the TTMc rows are all-reduced for --svd gram only (use owners or "
                             "auto)");
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
  // As CP-ALS (cp_als_loop.cpp): the TTMc's products of the values with the factors' entries
  // are formed before the loop's scale, so far below 1 they fall into T's subnormal range
  // (double values near 1e-320 gave a fit 2e-4 off after 50 iterations, with no error).
  // Refused below 2^-110 (float) or 2^-1010 (double).
  constexpr bool single = std::is_same_v<T, float>;
  if (std::ilogb(res.norm_x) < (single ? -110 : -1010)) {
    char nx[32];
    std::snprintf(nx, sizeof nx, "%.3g", res.norm_x);
    TESSERA_INPUT_CHECK(
        false,
        opt.tensor_name << ": ||X|| = " << nx << ": the values are too small for Tucker-HOOI in "
                        << (single ? "single" : "double")
                        << " precision (their products with the factors would fall "
                           "below its normal range, "
                        << (single ? "1.2e-38" : "2.2e-308") << ", and lose their precision); "
                        << (single ? "run with --precision double, or multiply" : "multiply")
                        << " the values by a power of ten (the fit does not change; "
                           "the core scales with them)");
  }
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

namespace {

/// The rows received, `rin` (labels in arrival order), merged: the distinct labels in
/// increasing order, and for each the positions in rin that sum into it, stable (so copies
/// are summed in source order, on every run alike).
std::vector<index_t> merge_received(const std::vector<index_t>& rin, std::vector<std::int64_t>& ptr,
                                    std::vector<std::int64_t>& row) {
  std::vector<std::int64_t> order(rin.size());
  for (std::size_t k = 0; k < rin.size(); ++k) order[k] = static_cast<std::int64_t>(k);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return rin[static_cast<std::size_t>(a)] < rin[static_cast<std::size_t>(b)];
  });
  std::vector<index_t> distinct;
  ptr.clear();
  row.clear();
  for (std::size_t k = 0; k < order.size(); ++k) {
    const index_t i = rin[static_cast<std::size_t>(order[k])];
    if (k == 0 || i != distinct.back()) {
      ptr.push_back(static_cast<std::int64_t>(k));
      distinct.push_back(i);
    }
    row.push_back(order[k]);
  }
  ptr.push_back(static_cast<std::int64_t>(order.size()));
  return distinct;
}

/// Per destination, how many of the labels `rows` go there.
template <typename Dest>
std::vector<std::int64_t> counts_by(const std::vector<index_t>& rows, int peers, Dest dest) {
  std::vector<std::int64_t> n(static_cast<std::size_t>(peers), 0);
  for (const index_t i : rows) ++n[static_cast<std::size_t>(dest(i))];
  return n;
}

}  // namespace

void plan_combine(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                  const comm::Communicator& c, const comm::Communicator* node,
                  const std::vector<int>& slot_of) {
  const int P = c.size();
  const int G = node != nullptr ? node->size() : 1;
  TESSERA_EXPECTS(node == nullptr || static_cast<int>(slot_of.size()) == P,
                  "plan_combine: the slot of every rank on its node is needed");
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
    // Rows leave in their (increasing) order, so each owner's rows are contiguous.
    TESSERA_EXPECTS(std::is_sorted(mp.local.begin(), mp.local.end()),
                    "plan_combine: the TTMc rows must be in increasing order");
    const std::int64_t b = mp.b;
    const auto owner = [b](index_t i) {
      return static_cast<int>(static_cast<std::int64_t>(i) / b);
    };
    const std::vector<index_t>* out = &mp.local;
    std::vector<index_t> relayed;
    mp.staged = node != nullptr;
    if (mp.staged) {
      // Stage 1, inside the node: each row to the node peer in its owner's slot, so that
      // every rank of a node relays an equal share of the node's rows over its own link.
      // The rows are grouped by slot first (a stable permutation, applied as a gather).
      const auto slot = [&](index_t i) { return slot_of[static_cast<std::size_t>(owner(i))]; };
      mp.send1 = counts_by(mp.local, G, slot);
      std::vector<std::int64_t> at(static_cast<std::size_t>(G) + 1, 0);
      for (int g = 0; g < G; ++g)
        at[static_cast<std::size_t>(g) + 1] =
            at[static_cast<std::size_t>(g)] + mp.send1[static_cast<std::size_t>(g)];
      std::vector<index_t> grouped(mp.local.size());
      mp.gather_row.assign(mp.local.size(), 0);
      mp.gather_ptr.resize(mp.local.size() + 1);
      for (std::size_t k = 0; k < mp.local.size(); ++k) {
        const auto to = static_cast<std::size_t>(at[static_cast<std::size_t>(slot(mp.local[k]))]++);
        grouped[to] = mp.local[k];
        mp.gather_row[to] = static_cast<std::int64_t>(k);
      }
      for (std::size_t k = 0; k <= mp.local.size(); ++k)
        mp.gather_ptr[k] = static_cast<std::int64_t>(k);
      const std::vector<index_t> rin1 = node->alltoallv(grouped, mp.send1, &mp.recv1);
      mp.recv1_total = static_cast<std::int64_t>(rin1.size());
      relayed = merge_received(rin1, mp.relay_ptr, mp.relay_row);
      mp.relay_rows = static_cast<std::int64_t>(relayed.size());
      out = &relayed;
    }
    // To the owners (stage 2 of the two-stage combine): sorted, so contiguous per owner.
    mp.send_rows = counts_by(*out, P, owner);
    const std::vector<index_t> rin = c.alltoallv(*out, mp.send_rows, &mp.recv_rows);
    mp.recv_total = static_cast<std::int64_t>(rin.size());
    const std::vector<index_t> mine = merge_received(rin, mp.src_ptr, mp.src_row);
    mp.own_pos.clear();
    for (const index_t i : mine) mp.own_pos.push_back(static_cast<std::int64_t>(i) - mp.lo);
  }
}

void choose_rows(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 std::size_t vsize, bool stream_ordered, bool staged, const comm::Communicator& c,
                 const TuckerOptions& opt, TuckerResult& res) {
  const int N = static_cast<int>(dims.size());
  if (c.size() == 1) return;
  // Whether every rank's TTMc output is the whole Y_(n) in label order (then all-reduced in
  // place): agreed, since the buffers are collective.
  std::vector<std::int32_t> ident(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    bool id = mp.local.size() == dims[static_cast<std::size_t>(n)];
    for (std::size_t i = 0; id && i < mp.local.size(); ++i) id = mp.local[i] == i;
    ident[static_cast<std::size_t>(n)] = id ? 1 : 0;
  }
  c.allreduce(ident.data(), ident.size(), comm::ReduceOp::min);
  const plan::TuckerRowsRule rule =
      plan::tucker_rows_rule(opt.rows, to_string(opt.svd), staged, stream_ordered);
  std::string modes;
  for (int n = 0; n < N; ++n) {
    auto& mp = plan[static_cast<std::size_t>(n)];
    const double bytes = static_cast<double>(dims[static_cast<std::size_t>(n)]) *
                         static_cast<double>(mp.cols) * static_cast<double>(vsize);
    mp.allreduce = rule.allreduce(bytes);
    mp.identity = ident[static_cast<std::size_t>(n)] != 0;
    modes += std::string(n ? "," : "") + (mp.allreduce ? "allreduce" : "owners");
  }
  res.rows_strategy = modes;
  res.rows_strategy_why = rule.why;
  if (opt.print_iterations) log::info("TTMc rows per mode: " + modes + " (" + rule.why + ")");
}

void plan_memory(const std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 const std::vector<std::int64_t>& cols, std::size_t vsize,
                 const std::function<double(std::int64_t)>& wide_scratch,
                 const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res) {
  const int N = static_cast<int>(dims.size()), P = c.size();
  const std::vector<int>& ranks = opt.ranks;
  constexpr int kFields = 6;
  std::vector<double> mine(static_cast<std::size_t>(kFields * N)),
      all(static_cast<std::size_t>(kFields * N * P));
  for (int n = 0; n < N; ++n) {
    const auto& mp = plan[static_cast<std::size_t>(n)];
    double* q = mine.data() + static_cast<std::size_t>(kFields * n);
    q[0] = static_cast<double>(mp.local.size());
    q[3] = mp.scratch_per_col;
    if (mp.allreduce) {  // the whole Y_(n), unless the TTMc output is it; no combined rows
      const auto I = static_cast<double>(dims[static_cast<std::size_t>(n)]);
      q[1] = mp.identity ? 0.0 : I;
      q[5] = I;
      continue;
    }
    q[1] = static_cast<double>(std::max(mp.recv_total, mp.recv1_total));
    q[2] = static_cast<double>(mp.own_pos.size());
    // A two-stage combine groups the TTMc rows by relay in the combined rows' buffer too.
    q[4] = static_cast<double>(
        std::max(mp.relay_rows, mp.staged ? static_cast<std::int64_t>(mp.local.size()) : 0));
    q[5] = q[2];
  }
  c.allgather(mine.data(), all.data(), mine.size());
  std::vector<RankCounts> counts(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p)
    for (int n = 0; n < N; ++n) {
      const double* q = all.data() + static_cast<std::size_t>(kFields * (N * p + n));
      auto& rc = counts[static_cast<std::size_t>(p)];
      rc.local.push_back(q[0]);
      rc.recv.push_back(q[1]);
      rc.own.push_back(q[2]);
      rc.scratch.push_back(q[3]);
      rc.relay.push_back(q[4]);
      rc.dense.push_back(q[5]);
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
    if (P > 1 && plan[static_cast<std::size_t>(n)].allreduce)
      plan_text << ", all " << dims[static_cast<std::size_t>(n)] << " rows all-reduced";
    else if (P > 1)
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
