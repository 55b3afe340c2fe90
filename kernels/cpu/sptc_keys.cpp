// Keys and sorts of the OpenMP SpTC (kernels/cpu/sptc_keys.hpp), and sort_sum_drop_zeros
// (kernels/sptc.hpp) on them.
#include "kernels/cpu/sptc_keys.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "kernels/sptc.hpp"
#include "util/error.hpp"

namespace tessera::kernels::cpu::detail {

int team_for(std::size_t n, int threads) {
  const auto t = static_cast<std::size_t>(team_size(threads));
  return static_cast<int>(std::max<std::size_t>(1, std::min(t, n >> 17)));
}

// Per-thread histograms over contiguous blocks keep the result independent of the team size.
void radix_sort_pairs(std::vector<u64>& key, std::vector<u32>& val, u64 bound, int threads) {
  const std::size_t n = key.size();
  if (n <= 1 || bound <= 1) return;
  if (std::is_sorted(key.begin(), key.end())) return;
  if (n < (std::size_t{1} << 14)) {
    std::vector<std::pair<u64, u32>> p(n);
    for (std::size_t k = 0; k < n; ++k) p[k] = {key[k], val[k]};
    std::stable_sort(p.begin(), p.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t k = 0; k < n; ++k) {
      key[k] = p[k].first;
      val[k] = p[k].second;
    }
    return;
  }
  const int bits = bit_width(bound - 1);
  const int passes = (bits + 10) / 11;
  const int width = (bits + passes - 1) / passes;
  const std::size_t B = std::size_t{1} << width;
  // A pass does more per element than a streaming loop: threads pay from 2^15 elements each.
  const int T = static_cast<int>(
      std::max<std::size_t>(1, std::min<std::size_t>(team_size(threads), n >> 15)));
  std::vector<u64> k2(n);
  std::vector<u32> v2(n);
  std::vector<std::size_t> hist(static_cast<std::size_t>(T) * B);
  for (int p = 0; p < passes; ++p) {
    const int shift = p * width;
    const u64 mask = B - 1;
    bool skip = false;
#pragma omp parallel num_threads(T)
    {
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t lo = n * t / static_cast<std::size_t>(T);
      const std::size_t hi = n * (t + 1) / static_cast<std::size_t>(T);
      std::size_t* h = hist.data() + t * B;
      std::fill(h, h + B, std::size_t{0});
      for (std::size_t k = lo; k < hi; ++k) ++h[(key[k] >> shift) & mask];
#pragma omp barrier
#pragma omp single
      {
        std::size_t run = 0;
        for (std::size_t b = 0; b < B && !skip; ++b) {
          std::size_t tot = 0;
          for (std::size_t u = 0; u < static_cast<std::size_t>(T); ++u) tot += hist[u * B + b];
          if (tot == n) skip = true;  // every key has this digit: the pass is the identity
        }
        for (std::size_t b = 0; b < B && !skip; ++b)
          for (std::size_t u = 0; u < static_cast<std::size_t>(T); ++u) {
            const std::size_t c = hist[u * B + b];
            hist[u * B + b] = run;
            run += c;
          }
      }
      if (!skip) {
        for (std::size_t k = lo; k < hi; ++k) {
          const std::size_t d = h[(key[k] >> shift) & mask]++;
          k2[d] = key[k];
          v2[d] = val[k];
        }
      }
    }
    if (!skip) {
      key.swap(k2);
      val.swap(v2);
    }
  }
}

/// Replaces keys by the dense rank of the pairs (key, coordinate), jointly over all
/// sources (so equal pairs in different sources get equal ranks). Returns the rank count.
namespace {

u64 rank_pairs(std::vector<std::vector<u64>>& keys, const std::vector<TupleCols>& src, int pos,
               u64 key_bound, u64 dim, int threads) {
  std::size_t N = 0;
  for (const auto& s : src) N += s.n;
  TESSERA_INPUT_CHECK(N <= kMaxEntries,
                      "SpTC: more than 2^32 - 2 coordinate tuples to rank on "
                      "one rank; use more ranks");
  std::vector<u64> k(N);
  std::vector<u32> id(N);
  {
    std::size_t o = 0;
    for (const auto& s : src) {
      const index_t* c = s.col[static_cast<std::size_t>(pos)];
      for (std::size_t j = 0; j < s.n; ++j) {
        k[o + j] = c[j];
        id[o + j] = static_cast<u32>(o + j);
      }
      o += s.n;
    }
  }
  radix_sort_pairs(k, id, dim, threads);  // by coordinate
  std::vector<u64> hi(N);
  std::vector<u64> flat(N);
  {
    std::size_t o = 0;
    for (std::size_t s = 0; s < src.size(); ++s) {
      std::copy(keys[s].begin(), keys[s].end(), flat.begin() + static_cast<std::ptrdiff_t>(o));
      o += src[s].n;
    }
  }
  std::vector<u64> lo(N);
  for (std::size_t j = 0; j < N; ++j) {
    hi[j] = flat[id[j]];
    lo[j] = k[j];
  }
  // Stable by key: ties keep the coordinate order. Carry the coordinate along as payload
  // through the index into lo (sorted by coordinate, so position j has coordinate lo[j]).
  std::vector<u32> pos_in_lo(N);
  std::iota(pos_in_lo.begin(), pos_in_lo.end(), u32{0});
  radix_sort_pairs(hi, pos_in_lo, key_bound, threads);
  u64 r = 0;
  for (std::size_t j = 0; j < N; ++j) {
    if (j > 0 && (hi[j] != hi[j - 1] || lo[pos_in_lo[j]] != lo[pos_in_lo[j - 1]])) ++r;
    flat[id[pos_in_lo[j]]] = r;
  }
  {
    std::size_t o = 0;
    for (std::size_t s = 0; s < src.size(); ++s) {
      std::copy(flat.begin() + static_cast<std::ptrdiff_t>(o),
                flat.begin() + static_cast<std::ptrdiff_t>(o + src[s].n), keys[s].begin());
      o += src[s].n;
    }
  }
  return N == 0 ? 1 : r + 1;
}

}  // namespace

std::vector<std::vector<u64>> pack_tuples(const std::vector<TupleCols>& src,
                                          const std::vector<u64>& dims, u64* bound, int threads) {
  std::vector<std::vector<u64>> keys(src.size());
  for (std::size_t s = 0; s < src.size(); ++s) keys[s].assign(src[s].n, 0);
  u64 b = 1;
  for (std::size_t p = 0; p < dims.size(); ++p) {
    const u64 d = dims[p];
    if (static_cast<unsigned __int128>(b) * d <= ~u64{0}) {
      for (std::size_t s = 0; s < src.size(); ++s) {
        u64* kk = keys[s].data();
        const index_t* c = src[s].col[p];
        const auto n = static_cast<std::int64_t>(src[s].n);
#pragma omp parallel for schedule(static) num_threads(team_for(src[s].n, threads))
        for (std::int64_t j = 0; j < n; ++j) kk[j] = kk[j] * d + c[j];
      }
      b *= d;
    } else {
      b = rank_pairs(keys, src, static_cast<int>(p), b, d, threads);
    }
  }
  *bound = b;
  return keys;
}

TupleCols tuple_cols(const std::vector<std::vector<index_t>>& idx, const std::vector<int>& modes,
                     std::size_t n) {
  TupleCols t;
  t.n = n;
  for (int m : modes) t.col.push_back(idx[static_cast<std::size_t>(m)].data());
  return t;
}

}  // namespace tessera::kernels::cpu::detail

namespace tessera::kernels {

using cpu::detail::kMaxEntries;
using cpu::detail::pack_tuples;
using cpu::detail::radix_sort_pairs;
using cpu::detail::team_for;
using cpu::detail::tuple_cols;
using cpu::detail::u32;
using cpu::detail::u64;

// Declared in kernels/sptc.hpp: the host merge of partial contraction outputs, on the keys
// and sorts above.
template <typename T>
nnz_t sort_sum_drop_zeros(SparseTensor<T>& t, int threads, nnz_t* zeros_dropped) {
  if (zeros_dropped) *zeros_dropped = 0;
  const int N = t.order();
  TESSERA_EXPECTS(N >= 1 && N <= kMaxOrder && t.idx.size() == static_cast<std::size_t>(N),
                  "tensor of order " << N);
  const auto n = static_cast<std::size_t>(t.nnz());
  for (const auto& v : t.idx) TESSERA_EXPECTS(v.size() == n, "ragged coordinate arrays");
  if (n == 0) return 0;
  TESSERA_INPUT_CHECK(n <= kMaxEntries,
                      "more than 2^32 - 2 nonzeros to merge on one rank; "
                      "use more ranks");
  for (int m = 0; m < N; ++m)
    for (index_t c : t.idx[static_cast<std::size_t>(m)])
      TESSERA_EXPECTS(
          c < t.dims[static_cast<std::size_t>(m)],
          "coordinate " << c << " >= dimension " << t.dims[static_cast<std::size_t>(m)]);
  std::vector<int> all(static_cast<std::size_t>(N));
  std::iota(all.begin(), all.end(), 0);
  u64 bound = 1;
  auto kk = pack_tuples({tuple_cols(t.idx, all, n)}, t.dims, &bound, threads);
  std::vector<u64>& key = kk[0];
  std::vector<u32> perm(n);
  std::iota(perm.begin(), perm.end(), u32{0});
  radix_sort_pairs(key, perm, bound, threads);
  // Runs of equal keys, summed in storage order (the sort is stable); chunks of the sorted
  // range start at run starts so threads never split a run.
  const int T_ = team_for(n, threads);
  std::vector<std::size_t> cut(static_cast<std::size_t>(T_) + 1, n);
  cut[0] = 0;
  for (int c = 1; c < T_; ++c) {
    std::size_t p = n * static_cast<std::size_t>(c) / static_cast<std::size_t>(T_);
    p = std::max(p, cut[static_cast<std::size_t>(c) - 1]);
    while (p < n && p > 0 && key[p] == key[p - 1]) ++p;
    cut[static_cast<std::size_t>(c)] = p;
  }
  std::vector<std::size_t> kept(static_cast<std::size_t>(T_) + 1, 0);
  std::vector<std::size_t> runs(static_cast<std::size_t>(T_), 0);
  auto for_runs = [&](int c, auto&& f) {
    std::size_t a = cut[static_cast<std::size_t>(c)];
    const std::size_t e = cut[static_cast<std::size_t>(c) + 1];
    while (a < e) {
      std::size_t b = a + 1;
      double s = static_cast<double>(t.vals[perm[a]]);
      while (b < e && key[b] == key[a]) s += static_cast<double>(t.vals[perm[b++]]);
      f(perm[a], static_cast<T>(s));
      a = b;
    }
  };
#pragma omp parallel for schedule(static, 1) num_threads(T_)
  for (int c = 0; c < T_; ++c) {
    std::size_t k = 0, r = 0;
    for_runs(c, [&](u32, T v) {
      ++r;
      if (v != T(0)) ++k;
    });
    kept[static_cast<std::size_t>(c) + 1] = k;
    runs[static_cast<std::size_t>(c)] = r;
  }
  std::size_t distinct = 0;
  for (auto r : runs) distinct += r;
  for (int c = 0; c < T_; ++c)
    kept[static_cast<std::size_t>(c) + 1] += kept[static_cast<std::size_t>(c)];
  const std::size_t total = kept.back();
  SparseTensor<T> o(t.dims);
  for (auto& v : o.idx) v.resize(total);
  o.vals.resize(total);
#pragma omp parallel for schedule(static, 1) num_threads(T_)
  for (int c = 0; c < T_; ++c) {
    std::size_t w = kept[static_cast<std::size_t>(c)];
    for_runs(c, [&](u32 i, T v) {
      if (v == T(0)) return;  // exact zero: dropped
      for (int m = 0; m < N; ++m)
        o.idx[static_cast<std::size_t>(m)][w] = t.idx[static_cast<std::size_t>(m)][i];
      o.vals[w] = v;
      ++w;
    });
  }
  t = std::move(o);
  if (zeros_dropped) *zeros_dropped = static_cast<nnz_t>(distinct - total);
  return static_cast<nnz_t>(n - total);
}

template nnz_t sort_sum_drop_zeros<float>(SparseTensor<float>&, int, nnz_t*);
template nnz_t sort_sum_drop_zeros<double>(SparseTensor<double>&, int, nnz_t*);

}  // namespace tessera::kernels
