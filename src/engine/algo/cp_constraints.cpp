// Constrained, regularised and weighted CP outside the ALS loop (docs/constrained-cp.md):
// option parsing, each mode's row update, the held-out split and its squared error.
#include "algo/cp_constraints.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::algo {

bool held_out(std::uint64_t seed, double fraction, const std::uint64_t* coords, int order) {
  std::uint64_t h = hash_keys(seed, 0x484f4c444f5554ull, static_cast<std::uint64_t>(order));
  for (int m = 0; m < order; ++m) h = hash_keys(h, coords[m], static_cast<std::uint64_t>(m));
  return uniform01(h) < fraction;
}

std::vector<bool> parse_mode_set(const std::string& s, int order, const std::string& option) {
  std::vector<bool> out(static_cast<std::size_t>(order), false);
  if (s == "none" || s.empty()) return out;
  if (s == "all") return std::vector<bool>(static_cast<std::size_t>(order), true);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t e = std::min(s.find(',', pos), s.size());
    const std::string t = s.substr(pos, e - pos);
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    TESSERA_INPUT_CHECK(!t.empty() && end != nullptr && *end == '\0' && v >= 0 && v < order,
                        option << " " << s << ": '" << t << "' is not a mode of this order-"
                               << order << " tensor (expected all, none or modes 0.." << order - 1
                               << " separated by commas)");
    out[static_cast<std::size_t>(v)] = true;
    pos = e + 1;
  }
  return out;
}

std::vector<double> parse_mode_values(const std::string& s, int order, const std::string& option) {
  std::vector<double> v;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t e = std::min(s.find(',', pos), s.size());
    const std::string t = s.substr(pos, e - pos);
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    TESSERA_INPUT_CHECK(!t.empty() && end != nullptr && *end == '\0' && std::isfinite(x) && x >= 0,
                        option << " " << s << ": '" << t
                               << "' is not a finite number >= 0 (expected one value, or one "
                                  "per mode separated by commas)");
    v.push_back(x);
    pos = e + 1;
  }
  if (v.size() == 1) return std::vector<double>(static_cast<std::size_t>(order), v[0]);
  TESSERA_INPUT_CHECK(static_cast<int>(v.size()) == order,
                      option << " " << s << ": " << v.size() << " values for an order-" << order
                             << " tensor (give one value, or one per mode)");
  return v;
}

namespace detail {

namespace {
/// Columns of a held-out prediction computed together (a stack array).
constexpr int kPredictChunk = 64;
}  // namespace

/// The row update of mode n (CpOptions: per-mode vectors, empty = none).
linalg::RowUpdate update_of(const CpOptions& opt, int n, int N) {
  auto check = [&](std::size_t size, const char* what) {
    TESSERA_INPUT_CHECK(size == 0 || static_cast<int>(size) == N,
                        what << ": " << size << " values for an order-" << N << " tensor");
  };
  check(opt.nonneg.size(), "nonneg");
  check(opt.l1.size(), "l1");
  check(opt.l2.size(), "l2");
  linalg::RowUpdate u;
  const auto k = static_cast<std::size_t>(n);
  u.nonneg = !opt.nonneg.empty() && opt.nonneg[k];
  u.l1 = opt.l1.empty() ? 0.0 : opt.l1[k];
  u.l2 = opt.l2.empty() ? 0.0 : opt.l2[k];
  u.sweeps = opt.inner_sweeps;
  return u;
}

template <typename T>
SparseTensor<T> training_view(const partition::Distributed<T>& d, bool layer,
                              const std::vector<std::uint64_t>& lo,
                              const std::vector<std::int64_t>& len, const CpOptions& opt,
                              Holdout* hold) {
  const auto& dist = d.dist;
  const int N = dist.order();
  SparseTensor<T> view(std::vector<std::uint64_t>(static_cast<std::size_t>(N)));
  for (int n = 0; n < N; ++n)
    view.dims[static_cast<std::size_t>(n)] =
        layer ? static_cast<std::uint64_t>(len[static_cast<std::size_t>(n)])
              : dist.dims[static_cast<std::size_t>(n)];
  if (opt.holdout > 0) {
    hold->idx.resize(static_cast<std::size_t>(N));
    hold->global_idx.resize(static_cast<std::size_t>(N));
    hold->seen.resize(static_cast<std::size_t>(N));
    for (int n = 0; n < N; ++n)
      hold->seen[static_cast<std::size_t>(n)].assign(dist.dims[static_cast<std::size_t>(n)], 0);
  }
  std::vector<std::uint64_t> orig(static_cast<std::size_t>(N));
  const nnz_t nnz = d.block.nnz();
  for (int n = 0; n < N; ++n) view.idx[static_cast<std::size_t>(n)].reserve(nnz);
  view.vals.reserve(nnz);
  for (nnz_t k = 0; k < nnz; ++k) {
    bool out = false;
    if (opt.holdout > 0) {
      for (int n = 0; n < N; ++n)
        orig[static_cast<std::size_t>(n)] =
            dist.original_index(n, d.block.idx[static_cast<std::size_t>(n)][k]);
      out = held_out(opt.holdout_seed, opt.holdout, orig.data(), N);
    }
    for (int n = 0; n < N; ++n) {
      const auto u = static_cast<std::size_t>(n);
      const std::uint64_t g = d.block.idx[u][k];
      TESSERA_EXPECTS(!layer || (g >= lo[u] && g < lo[u] + static_cast<std::uint64_t>(len[u])),
                      "nonzero outside this rank's grid block");
      const std::uint64_t local = layer ? g - lo[u] : g;
      if (out) {
        hold->idx[u].push_back(local);
        hold->global_idx[u].push_back(g);
      } else {
        view.idx[u].push_back(static_cast<index_t>(local));
        if (opt.holdout > 0) hold->seen[u][g] = 1;
      }
    }
    const T v = d.block.vals[k];
    if (out) {
      hold->vals.push_back(static_cast<double>(v));
    } else {
      view.vals.push_back(v);
      hold->train_sum += static_cast<double>(v);
      ++hold->train_count;
    }
  }
  return view;
}

std::string holdout_line(const CpResult& res, const CpOptions& opt) {
  const auto held = static_cast<unsigned long long>(res.holdout_entries);
  char line[384];
  std::snprintf(line, sizeof(line),
                "held out %llu of %llu stored entries (--holdout %g, seed %llu); predicting "
                "the training mean gives RMSE %.6g on them; %llu (%.1f%%) have a row with no "
                "training entry, which no CP model can predict",
                held, held + static_cast<unsigned long long>(res.training_entries), opt.holdout,
                static_cast<unsigned long long>(opt.holdout_seed), res.mean_predictor_rmse,
                static_cast<unsigned long long>(res.holdout_cold_entries),
                held > 0 ? 100.0 * static_cast<double>(res.holdout_cold_entries) / held : 0.0);
  return line;
}

void count_cold(Holdout* hold, const comm::Communicator& world) {
  for (auto& s : hold->seen) world.allreduce(s.data(), s.size(), comm::ReduceOp::max);
  hold->cold = 0;
  const std::size_t entries = hold->vals.size();
  for (std::size_t k = 0; k < entries; ++k) {
    bool cold = false;
    for (std::size_t u = 0; u < hold->seen.size() && !cold; ++u)
      cold = hold->seen[u][hold->global_idx[u][k]] == 0;
    hold->cold += cold ? 1 : 0;
  }
  hold->seen = {};
  hold->global_idx = {};
}

template <typename T>
double holdout_squared_error(const Holdout& h, const std::vector<std::vector<T>>& A,
                             const std::vector<double>& lambda, int R, double c, double mean,
                             bool use_mean) {
  const int N = static_cast<int>(h.idx.size());
  const auto nk = static_cast<std::int64_t>(h.vals.size());
  double se = 0;
  // Host threads over the held-out entries (OpenMP's default team: the rank's cores).
#pragma omp parallel for schedule(static) reduction(+ : se) if (nk > 65536)
  for (std::int64_t kk = 0; kk < nk; ++kk) {
    const auto k = static_cast<std::size_t>(kk);
    double pred = mean;
    if (!use_mean) {
      // prod[r] = lambda_r prod_m A_m(i_m, r), one factor row at a time.
      double prod[kPredictChunk];
      pred = 0;
      for (int r0 = 0; r0 < R; r0 += kPredictChunk) {
        const int nr = std::min(kPredictChunk, R - r0);
        for (int r = 0; r < nr; ++r) prod[r] = lambda[static_cast<std::size_t>(r0 + r)];
        for (int m = 0; m < N; ++m) {
          const T* row = A[static_cast<std::size_t>(m)].data() +
                         h.idx[static_cast<std::size_t>(m)][k] * R + r0;
          for (int r = 0; r < nr; ++r) prod[r] *= static_cast<double>(row[r]);
        }
        for (int r = 0; r < nr; ++r) pred += prod[r];
      }
      pred /= c;
    }
    const double e = h.vals[k] - pred;
    se += e * e;
  }
  return se;
}

#define TESSERA_CP_CONSTRAINTS_INSTANTIATE(T)                                                  \
  template SparseTensor<T> training_view<T>(                                                   \
      const partition::Distributed<T>&, bool, const std::vector<std::uint64_t>&,               \
      const std::vector<std::int64_t>&, const CpOptions&, Holdout*);                           \
  template double holdout_squared_error<T>(const Holdout&, const std::vector<std::vector<T>>&, \
                                           const std::vector<double>&, int, double, double, bool);

TESSERA_CP_CONSTRAINTS_INSTANTIATE(float)
TESSERA_CP_CONSTRAINTS_INSTANTIATE(double)
#undef TESSERA_CP_CONSTRAINTS_INSTANTIATE

}  // namespace detail
}  // namespace tessera::algo
