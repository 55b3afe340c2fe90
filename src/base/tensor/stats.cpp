#include "tensor/stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tessera {

namespace {

/// Slice counts of one mode: non-empty slices, largest slice.
void slice_counts(const std::vector<index_t>& idx, std::uint64_t dim, ModeStats* ms) {
  const std::size_t n = idx.size();
  // Dense counters when the mode is not much longer than the nonzero list (bounded
  // memory), else sort a copy and count runs.
  if (dim <= std::max<std::uint64_t>(std::uint64_t(4) * n, std::uint64_t(1) << 20)) {
    std::vector<nnz_t> count(static_cast<std::size_t>(dim), 0);
    for (index_t i : idx) ++count[i];
    for (nnz_t c : count) {
      if (c == 0) continue;
      ++ms->nonempty_slices;
      ms->max_slice_nnz = std::max(ms->max_slice_nnz, c);
    }
  } else {
    std::vector<index_t> s(idx);
    std::sort(s.begin(), s.end());
    for (std::size_t k = 0; k < n;) {
      std::size_t j = k;
      while (j < n && s[j] == s[k]) ++j;
      ++ms->nonempty_slices;
      ms->max_slice_nnz = std::max(ms->max_slice_nnz, static_cast<nnz_t>(j - k));
      k = j;
    }
  }
  if (ms->nonempty_slices > 0)
    ms->mean_slice_nnz = static_cast<double>(n) / static_cast<double>(ms->nonempty_slices);
}

}  // namespace

TensorStats compute_stats(const SparseTensor<double>& x) {
  TensorStats s;
  s.order = x.order();
  s.dims = x.dims;
  s.nnz = x.nnz();
  TESSERA_EXPECTS(x.idx.size() == x.dims.size(), "one coordinate array per mode");
  double cells = 1;
  for (std::uint64_t d : x.dims) cells *= static_cast<double>(d);
  s.density = (s.nnz > 0 && cells > 0) ? static_cast<double>(s.nnz) / cells : 0.0;
  if (s.nnz > 0) {
    s.min_value = std::numeric_limits<double>::infinity();
    s.max_value = -std::numeric_limits<double>::infinity();
    for (double v : x.vals) {
      s.min_value = std::min(s.min_value, v);
      s.max_value = std::max(s.max_value, v);
    }
  }
  s.norm = std::sqrt(x.norm_squared());
  s.modes.resize(x.dims.size());
  for (std::size_t m = 0; m < x.dims.size(); ++m) {
    const auto& idx = x.idx[m];
    TESSERA_EXPECTS(idx.size() == x.vals.size(), "mode " << m << " has " << idx.size()
                                                         << " coordinates for " << x.vals.size()
                                                         << " values");
    const std::uint64_t dim = x.dims[m];
    for (index_t i : idx)
      TESSERA_EXPECTS(i < dim, "coordinate " << i << " outside mode " << m << " of length " << dim);
    s.modes[m].dim = dim;
    slice_counts(idx, dim, &s.modes[m]);
  }
  return s;
}

std::string format_stats(const TensorStats& s) {
  std::string out;
  char buf[256];
  const auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof(buf), fmt, args...);
    out += buf;
  };
  line("order    %d\n", s.order);
  out += "dims     " + format_dims(s.dims) + "\n";
  line("nnz      %lld\n", static_cast<long long>(s.nnz));
  line("density  %.4g\n", s.density);
  line("values   min %.6g, max %.6g\n", s.min_value, s.max_value);
  line("norm     %.6g (Frobenius)\n", s.norm);
  if (!s.modes.empty()) {
    line("%-6s %12s %16s %14s %15s\n", "mode", "length", "non-empty", "max nnz", "mean nnz");
    line("%-6s %12s %16s %14s %15s\n", "", "", "slices", "per slice", "per slice");
  }
  for (std::size_t m = 0; m < s.modes.size(); ++m) {
    const ModeStats& ms = s.modes[m];
    const double pct =
        ms.dim > 0 ? 100.0 * static_cast<double>(ms.nonempty_slices) / static_cast<double>(ms.dim)
                   : 0.0;
    char ne[48];
    std::snprintf(ne, sizeof(ne), "%llu (%.0f%%)",
                  static_cast<unsigned long long>(ms.nonempty_slices), pct);
    line("%-6zu %12llu %16s %14lld %15.2f\n", m + 1, static_cast<unsigned long long>(ms.dim), ne,
         static_cast<long long>(ms.max_slice_nnz), ms.mean_slice_nnz);
  }
  return out;
}

}  // namespace tessera
