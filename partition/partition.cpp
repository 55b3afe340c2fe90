// Partitioning (DESIGN §4): grid blocks balanced by per-mode nonzero counts, or
// equal-count ranges of the coordinate order found by sample sort. Both route with one
// alltoallv per array (each mode's indices, then the values) and finish with a local
// sort + merge of repeated coordinates.
#include "partition/partition.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "partition/detail.hpp"
#include "util/relabel.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__GLIBCXX__) && defined(_OPENMP)
#include <parallel/algorithm>
#endif
#include "util/error.hpp"
#include "util/progress.hpp"

namespace tessera::partition {

namespace {

using i128 = __int128;
using u128 = unsigned __int128;
using std::size_t;
using std::uint64_t;

// Samples each rank contributes to the nnz scheme's sample sort: many for few ranks (better
// balance), at least 64, at most 2^18 samples in all.
int samples_per_rank(int nranks) {
  return std::clamp((1 << 18) / std::max(nranks, 1), 64, 1024);
}

// Lexicographic comparison of nonzero k of t with the tuple s[0..N).
template <typename T>
int compare_with(const SparseTensor<T>& t, size_t k, const index_t* s) {
  for (int m = 0; m < t.order(); ++m) {
    const index_t v = t.idx[static_cast<size_t>(m)][k];
    if (v != s[m]) return v < s[m] ? -1 : 1;
  }
  return 0;
}

// Writes the merged tensor: `pos(i)` is the original position of the i-th nonzero in
// sorted order, `same(i)` says whether it has the coordinates of the (i-1)-th.
template <typename T, typename Pos, typename Same>
nnz_t gather_merged(SparseTensor<T>& t, size_t n, Pos pos, Same same) {
  std::vector<size_t> first;
  first.reserve(n);
  std::vector<T> vals;
  vals.reserve(n);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t p = pos(i);
    if (i == 0 || !same(i)) {
      if (i > 0) vals.push_back(static_cast<T>(acc));
      first.push_back(p);
      acc = static_cast<double>(t.vals[p]);
    } else {
      acc += static_cast<double>(t.vals[p]);
    }
  }
  if (n > 0) vals.push_back(static_cast<T>(acc));
  const size_t u = first.size();
  std::vector<index_t> tmp(u);
  for (auto& col : t.idx) {
    for (size_t i = 0; i < u; ++i) tmp[i] = col[first[i]];
    col.assign(tmp.begin(), tmp.end());
    col.shrink_to_fit();
  }
  t.vals = std::move(vals);
  return static_cast<nnz_t>(n - u);
}

/// Sort with all of the rank's OpenMP threads (libstdc++ parallel mode) when it pays.
/// Keys are unique (position tie-break), so the result does not depend on the threads.
template <typename It, typename Less>
void parallel_sort(It first, It last, Less less) {
#if defined(__GLIBCXX__) && defined(_OPENMP)
  if (last - first > (1 << 16) && omp_get_max_threads() > 1) {
    __gnu_parallel::sort(first, last, less);
    return;
  }
#endif
  std::sort(first, last, less);
}

template <typename Key, typename T>
nnz_t sort_merge_packed(SparseTensor<T>& t, const std::vector<int>& bits) {
  struct Entry {
    Key key;
    uint64_t pos;
  };
  const size_t n = t.vals.size();
  std::vector<Entry> e(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(n); ++k) {
    Key key(0);
    for (int m = 0; m < t.order(); ++m)
      key = (key << bits[static_cast<size_t>(m)]) |
            Key(t.idx[static_cast<size_t>(m)][static_cast<size_t>(k)]);
    e[static_cast<size_t>(k)] = Entry{key, static_cast<uint64_t>(k)};
  }
  parallel_sort(e.begin(), e.end(), [](const Entry& x, const Entry& y) {
    return x.key < y.key || (x.key == y.key && x.pos < y.pos);
  });
  return gather_merged(
      t, n, [&](size_t i) { return static_cast<size_t>(e[i].pos); },
      [&](size_t i) { return e[i].key == e[i - 1].key; });
}

template <typename T>
nnz_t sort_merge_tuples(SparseTensor<T>& t) {
  const size_t n = t.vals.size();
  const int N = t.order();
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t(0));
  parallel_sort(perm.begin(), perm.end(), [&](size_t x, size_t y) {
    for (int m = 0; m < N; ++m) {
      const auto& col = t.idx[static_cast<size_t>(m)];
      if (col[x] != col[y]) return col[x] < col[y];
    }
    return x < y;
  });
  return gather_merged(
      t, n, [&](size_t i) { return perm[i]; },
      [&](size_t i) {
        for (int m = 0; m < N; ++m) {
          const auto& col = t.idx[static_cast<size_t>(m)];
          if (col[perm[i]] != col[perm[i - 1]]) return false;
        }
        return true;
      });
}

// ---- validation -------------------------------------------------------------------

template <typename T>
void check_structure(const SparseTensor<T>& t) {
  const int N = t.order();
  TESSERA_INPUT_CHECK(N >= 1 && N <= kMaxOrder, "partition: the tensor has "
                                                    << N << " modes; Tessera supports 1 to "
                                                    << kMaxOrder);
  TESSERA_EXPECTS(t.idx.size() == t.dims.size(), "one index array per mode");
  for (int m = 0; m < N; ++m) {
    TESSERA_EXPECTS(t.idx[static_cast<size_t>(m)].size() == t.vals.size(),
                    "index array of mode " << m << " has " << t.idx[static_cast<size_t>(m)].size()
                                           << " entries but there are " << t.vals.size()
                                           << " values");
    TESSERA_INPUT_CHECK(t.dims[static_cast<size_t>(m)] >= 1, "partition: mode "
                                                                 << m << " has length 0 (dims "
                                                                 << format_dims(t.dims) << ")");
  }
}

template <typename T>
void check_coordinates(const SparseTensor<T>& t, int rank) {
  for (int m = 0; m < t.order(); ++m) {
    const auto& col = t.idx[static_cast<size_t>(m)];
    const uint64_t dim = t.dims[static_cast<size_t>(m)];
    if (col.empty()) continue;
    const auto mx = std::max_element(col.begin(), col.end());
    if (*mx < dim) continue;
    const auto bad = std::find_if(col.begin(), col.end(), [&](index_t v) { return v >= dim; });
    TESSERA_INPUT_CHECK(false, "partition: nonzero "
                                   << (bad - col.begin()) << " on rank " << rank << " has index "
                                   << *bad << " in mode " << m << ", but the mode has length "
                                   << dim << " (indices are 0-based; dims " << format_dims(t.dims)
                                   << ")");
  }
}

// Text of a grid product, saturated at 2^64 while multiplying.
std::string product_text(u128 prod) {
  if (prod >= (u128(1) << 64)) return "more than 2^64";
  return std::to_string(static_cast<uint64_t>(prod));
}

std::string ranks_running(int nranks) {
  return nranks == 1 ? std::string("1 rank is running")
                     : std::to_string(nranks) + " ranks are running";
}

// Every rank must pass the same order, dims, scheme and grid: otherwise the ranks would
// run different collectives and hang. Throws the same InputError on every rank.
void check_agreement(const std::vector<uint64_t>& dims, Scheme scheme, const std::vector<int>& grid,
                     const comm::Communicator& c) {
  std::int64_t a[6] = {
      static_cast<std::int64_t>(dims.size()), -static_cast<std::int64_t>(dims.size()),
      static_cast<std::int64_t>(scheme),      -static_cast<std::int64_t>(scheme),
      static_cast<std::int64_t>(grid.size()), -static_cast<std::int64_t>(grid.size())};
  c.allreduce(a, 6, comm::ReduceOp::max);
  TESSERA_INPUT_CHECK(a[0] == -a[1], "partition: the ranks disagree on the tensor order ("
                                         << -a[1] << " to " << a[0] << " modes)");
  TESSERA_INPUT_CHECK(a[2] == -a[3], "partition: the ranks disagree on the partition scheme");
  TESSERA_INPUT_CHECK(a[4] == -a[5], "partition: the ranks disagree on the grid shape");
  std::vector<uint64_t> lo(dims), hi(dims);
  c.allreduce(lo.data(), lo.size(), comm::ReduceOp::min);
  c.allreduce(hi.data(), hi.size(), comm::ReduceOp::max);
  TESSERA_INPUT_CHECK(lo == hi, "partition: the ranks disagree on the tensor dims (e.g. "
                                    << format_dims(lo) << " and " << format_dims(hi) << ")");
  if (!grid.empty()) {
    std::vector<std::int32_t> glo(grid.begin(), grid.end()), ghi(grid.begin(), grid.end());
    c.allreduce(glo.data(), glo.size(), comm::ReduceOp::min);
    c.allreduce(ghi.data(), ghi.size(), comm::ReduceOp::max);
    TESSERA_INPUT_CHECK(glo == ghi, "partition: the ranks disagree on the grid shape");
  }
}

// ---- routing ------------------------------------------------------------------------

// Sends local nonzero k to rank dest[k] (or, with dest == nullptr, the first sendcounts[0]
// nonzeros to rank 0, the next sendcounts[1] to rank 1, ...). One alltoallv per array;
// each source array is released once sent, so the peak stays near twice the local size.
template <typename T>
SparseTensor<T> exchange(SparseTensor<T>& src, const std::vector<std::int32_t>* dest,
                         const std::vector<std::int64_t>& sendcounts, const comm::Communicator& c) {
  const int P = c.size();
  const std::vector<std::int64_t> recvcounts = comm::exchange_counts(c, sendcounts);
  std::vector<std::int64_t> sd(static_cast<size_t>(P), 0), rd(static_cast<size_t>(P), 0);
  for (int r = 1; r < P; ++r) {
    sd[static_cast<size_t>(r)] =
        sd[static_cast<size_t>(r - 1)] + sendcounts[static_cast<size_t>(r - 1)];
    rd[static_cast<size_t>(r)] =
        rd[static_cast<size_t>(r - 1)] + recvcounts[static_cast<size_t>(r - 1)];
  }
  const auto nrecv = static_cast<size_t>(rd.back() + recvcounts.back());
  SparseTensor<T> out(src.dims);
  auto send_one = [&](auto& arr, auto& recv) {
    using U = typename std::decay_t<decltype(arr)>::value_type;
    recv.resize(nrecv);
    if (dest) {
      std::vector<U> buf(arr.size());
      std::vector<std::int64_t> cur(sd);
      for (size_t k = 0; k < arr.size(); ++k)
        buf[static_cast<size_t>(cur[static_cast<size_t>((*dest)[k])]++)] = arr[k];
      std::vector<U>().swap(arr);
      c.alltoallv_raw(buf.data(), sendcounts.data(), sd.data(), recv.data(), recvcounts.data(),
                      rd.data(), comm::data_type_of<U>());
    } else {
      c.alltoallv_raw(arr.data(), sendcounts.data(), sd.data(), recv.data(), recvcounts.data(),
                      rd.data(), comm::data_type_of<U>());
      std::vector<U>().swap(arr);
    }
  };
  // Rank 0 reports its own sends, one array at a time (a large block can take long).
  const auto n = static_cast<std::uint64_t>(src.vals.size());
  Progress progress(c.rank() == 0, "exchanging", "nonzeros",
                    n * (src.order() * sizeof(index_t) + sizeof(T)));
  for (int m = 0; m < src.order(); ++m) {
    send_one(src.idx[static_cast<size_t>(m)], out.idx[static_cast<size_t>(m)]);
    progress.update(n * (m + 1) * sizeof(index_t));
  }
  send_one(src.vals, out.vals);
  progress.finish();
  return out;
}

// Grid scheme: owner of each nonzero from its chunk in every mode.
template <typename T>
std::vector<std::int32_t> grid_destinations(const SparseTensor<T>& t, const Distribution& d,
                                            std::vector<std::int64_t>& counts) {
  const int N = t.order();
  const size_t n = t.vals.size();
  std::vector<std::int32_t> dest(n, 0);
  std::int32_t stride = 1;
  for (int m = N - 1; m >= 0; --m) {
    const auto& b = d.bounds[static_cast<size_t>(m)];
    const int p = d.grid[static_cast<size_t>(m)];
    if (p > 1) {
      const auto& col = t.idx[static_cast<size_t>(m)];
      for (size_t k = 0; k < n; ++k) {
        // Chunk c with b[c] <= v < b[c+1]: the number of bounds b[1..p] that are <= v.
        const auto c = std::upper_bound(b.begin() + 1, b.end(), uint64_t(col[k])) - (b.begin() + 1);
        dest[k] += static_cast<std::int32_t>(c) * stride;
      }
    }
    stride *= p;
  }
  for (size_t k = 0; k < n; ++k) ++counts[static_cast<size_t>(dest[k])];
  return dest;
}

// nnz scheme: splitter tuples (flat, K x N, K <= P-1) from regularly spaced samples of the
// locally sorted nonzeros. Each sample stands for the segment of local nonzeros it starts,
// so the weight before a sample in global sample order estimates how many nonzeros are
// smaller; splitter i is the sample whose estimate is closest to i * total / P. Nonzeros
// go to the number of splitters <= their coordinates (upper_bound), so equal coordinates
// share an owner. Splitters past the last sample are "infinite": fewer than P-1 of them
// leave the last ranks empty.
template <typename T>
std::vector<index_t> choose_splitters(const SparseTensor<T>& t, const comm::Communicator& c) {
  const int P = c.size();
  const int N = t.order();
  const int S = samples_per_rank(P);
  const size_t n = t.vals.size();
  std::vector<index_t> mine(static_cast<size_t>(S) * static_cast<size_t>(N), 0);
  std::vector<std::int64_t> w(static_cast<size_t>(S), 0);
  const size_t taken = std::min<size_t>(n, static_cast<size_t>(S));
  for (size_t k = 0; k < taken; ++k) {
    size_t pos = k, next = k + 1;
    if (n > static_cast<size_t>(S)) {
      pos = static_cast<size_t>(u128(k) * n / static_cast<u128>(S));
      next = static_cast<size_t>(u128(k + 1) * n / static_cast<u128>(S));
    }
    w[k] = static_cast<std::int64_t>(next - pos);
    for (int m = 0; m < N; ++m)
      mine[k * static_cast<size_t>(N) + static_cast<size_t>(m)] =
          t.idx[static_cast<size_t>(m)][pos];
  }
  const size_t total = static_cast<size_t>(P) * static_cast<size_t>(S);
  std::vector<index_t> all(total * static_cast<size_t>(N));
  std::vector<std::int64_t> allw(total);
  c.allgather(mine.data(), all.data(), mine.size());
  c.allgather(w.data(), allw.data(), w.size());

  std::vector<size_t> ids;
  ids.reserve(total);
  for (size_t j = 0; j < total; ++j)
    if (allw[j] > 0) ids.push_back(j);
  const auto tuple = [&](size_t j) { return all.data() + j * static_cast<size_t>(N); };
  std::sort(ids.begin(), ids.end(), [&](size_t x, size_t y) {
    const index_t* a = tuple(x);
    const index_t* b = tuple(y);
    for (int m = 0; m < N; ++m)
      if (a[m] != b[m]) return a[m] < b[m];
    return x < y;
  });
  const size_t M = ids.size();
  std::vector<i128> excl(M + 1, 0);  // weight of the samples before sorted sample j
  for (size_t j = 0; j < M; ++j) excl[j + 1] = excl[j] + allw[ids[j]];
  const i128 W = excl[M];

  std::vector<index_t> spl;
  if (W == 0) return spl;
  size_t sel = 0, j = 0;
  for (int i = 1; i < P; ++i) {
    const i128 target = i128(i) * W;   // compared with excl * P
    while (excl[j] * P < target) ++j;  // stops at M at the latest (excl[M] * P = W * P)
    size_t cand = j;
    if (j > 0 && target - excl[j - 1] * P < excl[j] * P - target) cand = j - 1;
    sel = std::max(sel, cand);
    if (sel >= M) break;  // this and all later splitters are infinite
    const index_t* s = tuple(ids[sel]);
    spl.insert(spl.end(), s, s + N);
  }
  return spl;
}

template <typename T>
std::vector<std::int64_t> splitter_counts(const SparseTensor<T>& t, const std::vector<index_t>& spl,
                                          int P) {
  const int N = t.order();
  const size_t n = t.vals.size();
  const size_t K = spl.size() / static_cast<size_t>(N);
  std::vector<std::int64_t> counts(static_cast<size_t>(P), 0);
  size_t prev = 0;
  for (size_t r = 0; r < K; ++r) {
    // Nonzeros with coordinates < splitter r go to ranks <= r.
    const index_t* s = spl.data() + r * static_cast<size_t>(N);
    size_t lo = prev, hi = n;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (compare_with(t, mid, s) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    counts[r] = static_cast<std::int64_t>(lo - prev);
    prev = lo;
  }
  counts[K] = static_cast<std::int64_t>(n - prev);
  return counts;
}

}  // namespace

// ---- names, grid shapes -----------------------------------------------------------------

Scheme parse_scheme(const std::string& s) {
  if (s == "nnz") return Scheme::nnz;
  if (s == "grid") return Scheme::grid;
  TESSERA_INPUT_CHECK(false, "unknown partition scheme '" << s << "': expected nnz or grid");
  return Scheme::nnz;
}

std::string to_string(Scheme s) {
  return s == Scheme::grid ? "grid" : "nnz";
}

std::vector<int> choose_grid(const std::vector<uint64_t>& dims, int nranks) {
  TESSERA_EXPECTS(!dims.empty(), "choose_grid needs at least one mode");
  TESSERA_EXPECTS(nranks >= 1, "choose_grid needs at least one rank (got " << nranks << ")");
  std::vector<int> primes;
  int r = nranks;
  for (int f = 2; static_cast<long long>(f) * f <= r; ++f)
    while (r % f == 0) {
      primes.push_back(f);
      r /= f;
    }
  if (r > 1) primes.push_back(r);
  std::sort(primes.rbegin(), primes.rend());
  const size_t N = dims.size();
  std::vector<int> g(N, 1);
  // dims[a]/g[a] > dims[b]/g[b], exactly.
  const auto longer = [&](size_t a, size_t b) {
    return u128(dims[a]) * u128(g[b]) > u128(dims[b]) * u128(g[a]);
  };
  for (int f : primes) {
    size_t best = N;
    for (size_t m = 0; m < N; ++m) {
      if (u128(g[m]) * u128(f) > u128(dims[m])) continue;
      if (best == N || longer(m, best)) best = m;
    }
    if (best == N) {  // no mode can take f without empty chunks: cut the longest anyway
      best = 0;
      for (size_t m = 1; m < N; ++m)
        if (longer(m, best)) best = m;
    }
    g[best] *= f;
  }
  return g;
}

std::vector<int> parse_grid(const std::string& s, int order, int nranks) {
  const std::vector<uint64_t> v = parse_dims(s, "grid");
  TESSERA_INPUT_CHECK(static_cast<int>(v.size()) == order, "grid " << s << " has " << v.size()
                                                                   << " entries but the tensor has "
                                                                   << order << " modes");
  u128 prod = 1;
  for (uint64_t p : v) {
    TESSERA_INPUT_CHECK(p <= static_cast<uint64_t>(INT_MAX),
                        "grid " << s << ": entry " << p << " is larger than any rank count");
    prod = std::min<u128>(prod * p, u128(1) << 64);
  }
  TESSERA_INPUT_CHECK(prod == static_cast<u128>(nranks), "grid " << s << " multiplies to "
                                                                 << product_text(prod) << " but "
                                                                 << ranks_running(nranks));
  return std::vector<int>(v.begin(), v.end());
}

// ---- detail -------------------------------------------------------------------------------

namespace detail {

void check_grid_shape(const std::vector<int>& grid, const std::vector<uint64_t>& dims, int nranks) {
  const std::string g = detail::join_grid(grid);
  TESSERA_INPUT_CHECK(grid.size() == dims.size(), "grid " << g << " has " << grid.size()
                                                          << " entries but the tensor has "
                                                          << dims.size() << " modes");
  u128 prod = 1;
  for (int p : grid) {
    TESSERA_INPUT_CHECK(p >= 1, "grid " << g << ": every entry must be at least 1");
    prod = std::min<u128>(prod * static_cast<u128>(p), u128(1) << 64);
  }
  TESSERA_INPUT_CHECK(prod == static_cast<u128>(nranks), "grid " << g << " multiplies to "
                                                                 << product_text(prod) << " but "
                                                                 << ranks_running(nranks));
}

void record_block_counts(Distribution& d, nnz_t mine, const comm::Communicator& c) {
  std::int64_t mm[2] = {mine, -mine};
  c.allreduce(mm, 2, comm::ReduceOp::max);
  d.max_block_nnz = mm[0];
  d.min_block_nnz = -mm[1];
  d.imbalance = d.global_nnz == 0 ? 1.0
                                  : static_cast<double>(d.max_block_nnz) /
                                        (static_cast<double>(d.global_nnz) / c.size());
}

std::vector<uint64_t> balanced_cuts(const index_t* idx, size_t n, uint64_t dim, int parts,
                                    const comm::Communicator& c, size_t budget) {
  TESSERA_EXPECTS(parts >= 1, "a mode must be cut into at least one chunk (got " << parts << ")");
  TESSERA_EXPECTS(budget >= 2, "histogram budget must be at least 2");
  std::vector<uint64_t> b(static_cast<size_t>(parts) + 1, 0);
  b.back() = dim;
  if (parts == 1) return b;
  const std::int64_t T = c.allreduce_value(static_cast<std::int64_t>(n));
  std::vector<uint64_t> cut(static_cast<size_t>(parts), 0);  // cut[k], k = 1..parts-1
  if (T == 0) {
    for (int k = 1; k < parts; ++k)
      cut[static_cast<size_t>(k)] = static_cast<uint64_t>(u128(dim) * u128(k) / u128(parts));
  } else {
    // Invariant for cut k: P(a) < k*T/parts <= P(b), with P(x) = global count of indices < x.
    struct Open {
      uint64_t a, b;
      std::int64_t pa, pb;
    };
    std::vector<Open> open(static_cast<size_t>(parts), Open{0, dim, 0, T});
    const auto target = [&](int k) { return i128(k) * i128(T); };  // compared with P * parts
    struct Iv {
      uint64_t a, b, w;
      std::int64_t pa;
      size_t off, nb;
    };
    std::vector<Iv> ivs;
    std::vector<uint64_t> starts;
    std::vector<std::int64_t> hist;
    for (;;) {
      // Intervals still wider than one index. Targets increase with k and the intervals of
      // one round partition a subset of [0, dim), so equal intervals are adjacent.
      ivs.clear();
      for (int k = 1; k < parts; ++k) {
        const Open& o = open[static_cast<size_t>(k)];
        if (o.b - o.a <= 1) continue;
        if (ivs.empty() || ivs.back().a != o.a) ivs.push_back(Iv{o.a, o.b, 1, o.pa, 0, 0});
      }
      if (ivs.empty()) break;
      // At least 2 bins per interval, so every round narrows every interval.
      const size_t s = std::max<size_t>(2, budget / ivs.size());
      size_t total = 0;
      starts.clear();
      for (auto& iv : ivs) {
        const uint64_t len = iv.b - iv.a;
        iv.w = (len + s - 1) / s;
        iv.nb = static_cast<size_t>((len + iv.w - 1) / iv.w);
        iv.off = total;
        total += iv.nb;
        starts.push_back(iv.a);
      }
      hist.assign(total, 0);
      for (size_t k = 0; k < n; ++k) {
        const uint64_t v = idx[k];
        auto it = std::upper_bound(starts.begin(), starts.end(), v);
        if (it == starts.begin()) continue;
        const Iv& iv = ivs[static_cast<size_t>(it - starts.begin()) - 1];
        if (v < iv.b) ++hist[iv.off + static_cast<size_t>((v - iv.a) / iv.w)];
      }
      c.allreduce(hist.data(), hist.size());
      // Inclusive prefix per interval: hist[off + i] = P(min(a + (i+1) w, b)).
      for (const auto& iv : ivs) {
        std::int64_t p = iv.pa;
        for (size_t i = 0; i < iv.nb; ++i) hist[iv.off + i] = p += hist[iv.off + i];
      }
      for (int k = 1; k < parts; ++k) {
        Open& o = open[static_cast<size_t>(k)];
        if (o.b - o.a <= 1) continue;
        const auto it = std::upper_bound(starts.begin(), starts.end(), o.a);
        const Iv& iv = ivs[static_cast<size_t>(it - starts.begin()) - 1];
        const auto first = hist.begin() + static_cast<std::ptrdiff_t>(iv.off);
        const auto last = first + static_cast<std::ptrdiff_t>(iv.nb);
        const auto hit = std::lower_bound(
            first, last, target(k), [&](std::int64_t p, i128 t) { return i128(p) * parts < t; });
        const auto i = static_cast<uint64_t>(hit - first);  // exists: P(b) >= target
        const std::int64_t before = (i == 0) ? iv.pa : *(hit - 1);
        o.a = iv.a + i * iv.w;
        o.b = std::min(o.a + iv.w, iv.b);
        o.pa = before;
        o.pb = *hit;
      }
    }
    for (int k = 1; k < parts; ++k) {
      const Open& o = open[static_cast<size_t>(k)];
      const i128 t = target(k);
      cut[static_cast<size_t>(k)] = (i128(o.pb) * parts - t < t - i128(o.pa) * parts) ? o.b : o.a;
    }
  }
  const bool nonempty = dim >= static_cast<uint64_t>(parts);
  for (int k = 1; k < parts; ++k) {
    const uint64_t lo = b[static_cast<size_t>(k - 1)] + (nonempty ? 1 : 0);
    const uint64_t hi = nonempty ? dim - static_cast<uint64_t>(parts - k) : dim;
    b[static_cast<size_t>(k)] = std::clamp(cut[static_cast<size_t>(k)], lo, hi);
  }
  return b;
}

template <typename T>
nnz_t sort_and_merge(SparseTensor<T>& t) {
  if (t.vals.size() <= 1) return 0;
  std::vector<int> bits(static_cast<size_t>(t.order()));
  int total = 0;
  for (int m = 0; m < t.order(); ++m) {
    const auto& col = t.idx[static_cast<size_t>(m)];
    const index_t mx = *std::max_element(col.begin(), col.end());
    bits[static_cast<size_t>(m)] = static_cast<int>(std::bit_width(mx));
    total += bits[static_cast<size_t>(m)];
  }
  if (total <= 64) return sort_merge_packed<uint64_t>(t, bits);
  if (total <= 128) return sort_merge_packed<u128>(t, bits);
  return sort_merge_tuples(t);
}

std::uint64_t count_distinct(const index_t* v, size_t n) {
  if (n == 0) return 0;
  const auto [mn, mx] = std::minmax_element(v, v + n);
  const uint64_t range = uint64_t(*mx) - *mn + 1;
  if (range <= 64 * uint64_t(n)) {  // bitmap of at most 8 bytes per nonzero
    std::vector<uint64_t> bm(static_cast<size_t>((range + 63) / 64), 0);
    for (size_t k = 0; k < n; ++k) {
      const uint64_t x = uint64_t(v[k]) - *mn;
      bm[static_cast<size_t>(x >> 6)] |= uint64_t(1) << (x & 63);
    }
    uint64_t cnt = 0;
    for (uint64_t w : bm) cnt += static_cast<uint64_t>(std::popcount(w));
    return cnt;
  }
  std::vector<index_t> s(v, v + n);
  std::sort(s.begin(), s.end());
  return static_cast<uint64_t>(std::unique(s.begin(), s.end()) - s.begin());
}

template nnz_t sort_and_merge<float>(SparseTensor<float>&);
template nnz_t sort_and_merge<double>(SparseTensor<double>&);

}  // namespace detail

// ---- distribute ---------------------------------------------------------------------------

namespace {
template <typename T>
Distributed<T> distribute_impl(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                               const comm::Communicator& c, bool deal);
}  // namespace

template <typename T>
Distributed<T> distribute(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                          const comm::Communicator& c) {
  return distribute_impl(std::move(local), scheme, std::move(grid), c, false);
}

template <typename T>
Distributed<T> distribute_dealt(SparseTensor<T>&& local, std::vector<int> grid,
                                const comm::Communicator& c) {
  return distribute_impl(std::move(local), Scheme::grid, std::move(grid), c, true);
}

namespace {
template <typename T>
Distributed<T> distribute_impl(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                               const comm::Communicator& c, bool deal) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "partition::distribute needs a host (MPI) communicator");
  const int P = c.size();
  const int me = c.rank();
  comm::run_collectively(c, [&] { check_structure(local); });
  if (scheme != Scheme::grid) grid.clear();
  check_agreement(local.dims, scheme, grid, c);
  comm::run_collectively(c, [&] { check_coordinates(local, me); });
  const int N = local.order();

  Distributed<T> out;
  Distribution& d = out.dist;
  d.scheme = scheme;
  d.nranks = P;
  d.rank = me;
  d.dims = local.dims;
  const nnz_t input_nnz = c.allreduce_value(local.nnz());

  if (scheme == Scheme::grid) {
    if (grid.empty())
      grid = choose_grid(local.dims, P);
    else
      detail::check_grid_shape(grid, local.dims, P);
    d.grid = grid;
    d.coords = d.coords_of(me);
    d.deal = deal;
    d.bounds.resize(static_cast<size_t>(N));
    for (int m = 0; m < N; ++m) {
      if (deal) {  // each cut mode's indices dealt round-robin, a chunk per residue class
        const Relabel rl = d.relabelling(m);
        auto& idx = local.idx[static_cast<size_t>(m)];
#pragma omp parallel for schedule(static)
        for (std::int64_t k = 0; k < static_cast<std::int64_t>(idx.size()); ++k)
          idx[static_cast<size_t>(k)] =
              static_cast<index_t>(rl.forward(idx[static_cast<size_t>(k)]));
        d.bounds[static_cast<size_t>(m)] =
            dealt_bounds(grid[static_cast<size_t>(m)], local.dims[static_cast<size_t>(m)]);
        continue;
      }
      d.bounds[static_cast<size_t>(m)] = detail::balanced_cuts(
          local.idx[static_cast<size_t>(m)].data(), local.vals.size(),
          local.dims[static_cast<size_t>(m)], grid[static_cast<size_t>(m)], c);
    }
    std::vector<std::int64_t> counts(static_cast<size_t>(P), 0);
    const std::vector<std::int32_t> dest = grid_destinations(local, d, counts);
    out.block = exchange(local, &dest, counts, c);
  } else {
    d.grid.assign(static_cast<size_t>(N), 1);
    d.coords.assign(static_cast<size_t>(N), 0);
    d.bounds.resize(static_cast<size_t>(N));
    for (int m = 0; m < N; ++m)
      d.bounds[static_cast<size_t>(m)] = {0, d.dims[static_cast<size_t>(m)]};
    // Merging local repeats first shrinks what is sent; sorted runs make routing a search.
    detail::sort_and_merge(local);
    const std::vector<index_t> spl = choose_splitters(local, c);
    const std::vector<std::int64_t> counts = splitter_counts(local, spl, P);
    out.block = exchange(local, nullptr, counts, c);
  }
  local = SparseTensor<T>(d.dims);
  detail::sort_and_merge(out.block);

  // ---- statistics ----
  const nnz_t mine = out.block.nnz();
  d.global_nnz = c.allreduce_value(mine);
  d.duplicates = input_nnz - d.global_nnz;
  detail::record_block_counts(d, mine, c);
  d.touched_rows_per_mode.resize(static_cast<size_t>(N));
  for (int m = 0; m < N; ++m)
    d.touched_rows_per_mode[static_cast<size_t>(m)] = detail::count_distinct(
        out.block.idx[static_cast<size_t>(m)].data(), out.block.idx[static_cast<size_t>(m)].size());
  c.allreduce(d.touched_rows_per_mode.data(), d.touched_rows_per_mode.size());
  d.touched_rows =
      std::accumulate(d.touched_rows_per_mode.begin(), d.touched_rows_per_mode.end(), uint64_t(0));
  return out;
}
}  // namespace

template <typename T>
Distributed<T> distribute_relabelled(SparseTensor<T>&& local, Scheme scheme, std::vector<int> grid,
                                     const comm::Communicator& c, std::uint64_t seed) {
  TESSERA_EXPECTS(seed != 0, "relabelling needs a non-zero seed");
  const int N = local.order();
  comm::run_collectively(c, [&] {
    check_structure(local);
    check_coordinates(local, c.rank());
  });
  for (int m = 0; m < N; ++m) {
    const Relabel rl(seed, m, local.dims[static_cast<size_t>(m)]);
    auto& idx = local.idx[static_cast<size_t>(m)];
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(idx.size()); ++k)
      idx[static_cast<size_t>(k)] = static_cast<index_t>(rl.forward(idx[static_cast<size_t>(k)]));
  }
  auto out = distribute(std::move(local), scheme, std::move(grid), c);
  out.dist.relabel_seed = seed;
  return out;
}

template Distributed<float> distribute_dealt<float>(SparseTensor<float>&&, std::vector<int>,
                                                    const comm::Communicator&);
template Distributed<double> distribute_dealt<double>(SparseTensor<double>&&, std::vector<int>,
                                                      const comm::Communicator&);
template Distributed<float> distribute<float>(SparseTensor<float>&&, Scheme, std::vector<int>,
                                              const comm::Communicator&);
template Distributed<double> distribute<double>(SparseTensor<double>&&, Scheme, std::vector<int>,
                                                const comm::Communicator&);

template Distributed<float> distribute_relabelled<float>(SparseTensor<float>&&, Scheme,
                                                         std::vector<int>,
                                                         const comm::Communicator&, std::uint64_t);
template Distributed<double> distribute_relabelled<double>(SparseTensor<double>&&, Scheme,
                                                           std::vector<int>,
                                                           const comm::Communicator&,
                                                           std::uint64_t);

}  // namespace tessera::partition
