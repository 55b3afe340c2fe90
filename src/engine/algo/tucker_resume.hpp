// Checkpoint/restart helpers of tucker_hooi (internal to src/engine/algo): the state in original
// index order, and back to the label order and row ownership of a distribution.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "algo/tucker.hpp"
#include "partition/partition.hpp"
#include "util/error.hpp"

namespace tessera::algo::detail {

/// Throws InputError unless `s` is the state of a run on a tensor of shape `dims` with
/// these ranks (decided from data every rank shares, so thrown on every rank alike).
inline void check_tucker_state(const TuckerState& s, const std::vector<std::uint64_t>& dims,
                               const std::vector<int>& ranks) {
  const auto& m = s.model;
  TESSERA_INPUT_CHECK(m.dims == dims, "resume: the saved model has dims "
                                          << format_dims(m.dims) << ", the tensor has dims "
                                          << format_dims(dims));
  TESSERA_INPUT_CHECK(m.ranks == ranks && m.factors.size() == dims.size(),
                      "resume: the saved model has other ranks than this run");
  std::size_t core_len = 1;
  for (int r : ranks) core_len *= static_cast<std::size_t>(r);
  TESSERA_INPUT_CHECK(m.core.size() == core_len, "resume: the saved core has the wrong size");
  for (std::size_t n = 0; n < dims.size(); ++n)
    TESSERA_INPUT_CHECK(
        m.factors[n].rows == static_cast<std::int64_t>(dims[n]) && m.factors[n].cols == ranks[n] &&
            m.factors[n].data.size() == dims[n] * static_cast<std::size_t>(ranks[n]),
        "resume: the saved factor of mode " << n << " has the wrong shape");
  TESSERA_INPUT_CHECK(
      s.iteration >= 0 && static_cast<int>(s.fit_history.size()) == s.iteration,
      "resume: " << s.fit_history.size() << " saved fits for " << s.iteration << " iterations");
}

/// `out` (len x R, row-major) = rows [lo, lo + len) (labels) of the mode-`mode` factor
/// saved in original index order.
inline void saved_rows(const TuckerState& s, const partition::Distribution& dist, int mode,
                       std::uint64_t lo, std::int64_t len, std::vector<double>& out) {
  const auto& F = s.model.factors[static_cast<std::size_t>(mode)];
  const std::int64_t R = F.cols;
  out.assign(static_cast<std::size_t>(len * R), 0.0);
  for (std::int64_t i = 0; i < len; ++i) {
    const auto orig =
        static_cast<std::int64_t>(dist.original_index(mode, lo + static_cast<std::uint64_t>(i)));
    std::copy(F.row(orig), F.row(orig) + R, out.begin() + i * R);
  }
}

/// The resumed run's record so far: history, fit, iterations, convergence, core and the
/// previous fit of the convergence test.
inline void resume_record(const TuckerState& s, TuckerResult& res, std::vector<double>& core,
                          double& fit_old) {
  double g2 = 0;
  for (double g : s.model.core) g2 += g * g;
  for (int i = 0; i < s.iteration; ++i) {
    TuckerIteration rec;
    rec.iter = i + 1;
    rec.fit = s.fit_history[static_cast<std::size_t>(i)];
    rec.delta = rec.fit - (i > 0 ? s.fit_history[static_cast<std::size_t>(i - 1)] : 0.0);
    if (i + 1 == s.iteration) rec.core_norm = std::sqrt(g2);
    res.history.push_back(rec);
  }
  fit_old = s.iteration > 0 ? s.fit_history.back() : 0.0;
  res.fit = fit_old;
  res.iterations = s.iteration;
  res.converged = s.converged;
  res.core_norm = std::sqrt(g2);
  core = s.model.core;
}

/// The state after `iteration` from the full factors in label order (`full[n]` is
/// dims[n] x ranks[n], row-major, the same on every rank) and the core.
inline TuckerState tucker_state(int iteration, bool converged,
                                const std::vector<std::uint64_t>& dims,
                                const std::vector<int>& ranks, const std::vector<double>& core,
                                const std::vector<std::vector<double>>& full,
                                const std::vector<TuckerIteration>& history,
                                const partition::Distribution& dist) {
  TuckerState s;
  s.iteration = iteration;
  s.converged = converged;
  s.model.dims = dims;
  s.model.ranks = ranks;
  s.model.core = core;
  for (std::size_t n = 0; n < dims.size(); ++n) {
    const int R = ranks[n];
    const auto I = static_cast<std::int64_t>(dims[n]);
    Matrix<double> F(I, R, 0.0);
    for (std::int64_t i = 0; i < I; ++i) {
      const auto row = static_cast<std::int64_t>(
          dist.original_index(static_cast<int>(n), static_cast<std::uint64_t>(i)));
      std::copy(full[n].begin() + i * R, full[n].begin() + (i + 1) * R, F.row(row));
    }
    s.model.factors.push_back(std::move(F));
  }
  for (const auto& h : history) s.fit_history.push_back(h.fit);
  return s;
}

}  // namespace tessera::algo::detail
