// OpenMP SpTC (kernels/sptc.hpp, docs/sptc.md).
//
// The contraction is a sparse matrix product in disguise: the "row side" A (X, or Y when
// swapping the roles puts the output in order) is grouped by the coordinates it gives the
// output, the "column side" B by its matched (contracted and batch) coordinates. Every A
// nonzero is joined with the B group of its matched coordinates through a direct-address
// table or an open-addressing hash table (the match), then each output row is the sum over
// its A nonzeros of value x (the B group), accumulated in double per row (Gustavson's
// SpGEMM): into a dense per-thread array indexed by the column's rank when the column side
// has few distinct coordinate tuples, else into a per-row hash table. A first pass counts
// each row's distinct columns, so the output is allocated once at its exact size and every
// row is written at its own offset, without atomics. Coordinate tuples are compared as
// mixed-radix packed 64-bit keys (ranked when the packing would overflow), which keep the
// lexicographic order, so rows and columns come out sorted; when the output letters
// interleave those of the two inputs a final radix sort restores the order.
#include "kernels/sptc.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/mttkrp.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

namespace cpu {

namespace {

using u32 = std::uint32_t;
using u64 = std::uint64_t;
constexpr u32 kNone = 0xFFFFFFFFu;
/// Index arrays are 32-bit: at most this many nonzeros per input (and output) per rank.
constexpr u64 kMaxEntries = 0xFFFFFFFEull;

int team_size(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}
int bit_width(u64 v) {
  return v == 0 ? 0 : 64 - __builtin_clzll(v);
}
/// Smallest power of two >= v (v >= 1).
u64 pow2_at_least(u64 v) {
  u64 p = 1;
  while (p < v) p <<= 1;
  return p;
}
/// Threads worth using for n elements of streaming work.
int team_for(std::size_t n, int threads) {
  const auto t = static_cast<std::size_t>(team_size(threads));
  return static_cast<int>(std::max<std::size_t>(1, std::min(t, n / 32768)));
}

/// Stable LSD radix sort of the pairs (key[k], val[k]) by key (every key < bound). Per-thread
/// histograms over contiguous blocks keep the result independent of the team size.
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
  const int T = team_for(n, threads);
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

/// Coordinate columns of one source of tuples: col[p] is the array of tuple position p.
struct TupleCols {
  std::vector<const index_t*> col;
  std::size_t n = 0;
};

/// Replaces keys by the dense rank of the pairs (key, coordinate), jointly over all
/// sources (so equal pairs in different sources get equal ranks). Returns the rank count.
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

/// Keys of coordinate tuples, jointly over several sources: equal tuples get equal keys,
/// and keys order like the tuples (lexicographic, position 0 first). Mixed-radix packing
/// while the product of the dims fits in 64 bits; ranking (sorts) where it would overflow.
/// *bound receives a bound on the keys (every key < *bound, *bound >= 1).
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

/// True when every output mode taken from X precedes every one taken from Y: then
/// (row, column) order is the output's lexicographic order.
bool natural_order(const ContractSpec& s) {
  bool seen_y = false;
  for (bool from_y : s.out_from_y) {
    if (from_y)
      seen_y = true;
    else if (seen_y)
      return false;
  }
  return true;
}

template <typename T>
std::size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

/// Per-thread row accumulator over column ranks: dense (array of all columns, reset by a
/// stamp) or hashed (open addressing sized for the row).
class RowAccumulator {
 public:
  RowAccumulator(bool dense, u64 ncols) : dense_(dense), ncols_(ncols) {
    if (dense_) {
      acc_.assign(ncols, 0.0);
      mark_.assign(ncols, 0);
    }
  }
  /// Starts a row that adds at most `bound` distinct columns.
  void begin(u64 bound) {
    touched_.clear();
    distinct_ = 0;
    // Rows with many products relative to the columns accumulate without marks and are
    // read back by a scan of all columns (the array is all zeros between rows).
    scan_ = dense_ && ncols_ <= 4 * bound;
    if (dense_) {
      if (++stamp_ == 0) {
        std::fill(mark_.begin(), mark_.end(), 0u);
        stamp_ = 1;
      }
      return;
    }
    const u64 cap = std::max<u64>(16, pow2_at_least(2 * std::min(bound, ncols_)));
    if (keys_.size() < cap) {
      keys_.assign(cap, kNone);
      acc_.resize(cap);
    }
    mask_ = cap - 1;
  }
  /// Count pass: notes the columns cols[0..n) without values.
  void note(const u32* cols, std::int64_t n) {
    if (dense_) {
      u32* mark = mark_.data();
      const u32 st = stamp_;
      u64 d = distinct_;
      for (std::int64_t i = 0; i < n; ++i) {
        const u32 c = cols[i];
        d += mark[c] != st ? 1 : 0;
        mark[c] = st;
      }
      distinct_ = d;
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) slot(cols[i]);
  }
  /// Adds av * vals[i] to column cols[i], i < n.
  void add(const u32* cols, const double* vals, std::int64_t n, double av) {
    if (scan_) {
      double* acc = acc_.data();
      for (std::int64_t i = 0; i < n; ++i) acc[cols[i]] += av * vals[i];
      return;
    }
    if (dense_) {
      double* acc = acc_.data();
      u32* mark = mark_.data();
      const u32 st = stamp_;
      for (std::int64_t i = 0; i < n; ++i) {
        const u32 c = cols[i];
        const double v = av * vals[i];
        if (mark[c] != st) {
          mark[c] = st;
          acc[c] = v;
          touched_.push_back(c);
        } else {
          acc[c] += v;
        }
      }
      distinct_ = touched_.size();
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) acc_[slot(cols[i])] += av * vals[i];
  }
  u64 distinct() const { return distinct_; }
  /// The row's (column, sum) pairs in column order (after add; a scanned row skips the
  /// sums that are exactly zero); leaves the accumulator clear for the next row.
  template <typename F>
  void drain(F&& f) {
    if (scan_) {
      double* acc = acc_.data();
      for (u64 c = 0; c < ncols_; ++c)
        if (acc[c] != 0.0) {
          f(static_cast<u32>(c), acc[c]);
          acc[c] = 0.0;
        }
      return;
    }
    if (dense_) {
      const u64 t = touched_.size();
      if (ncols_ <= 8 * t * static_cast<u64>(bit_width(t) + 1)) {
        for (u64 c = 0; c < ncols_; ++c)
          if (mark_[c] == stamp_) f(static_cast<u32>(c), acc_[c]);
      } else {
        std::sort(touched_.begin(), touched_.end());
        for (u32 c : touched_) f(c, acc_[c]);
      }
      for (u32 c : touched_) acc_[c] = 0.0;
      return;
    }
    pairs_.clear();
    for (u32 sl : touched_) {
      pairs_.push_back({keys_[sl], acc_[sl]});
      keys_[sl] = kNone;
    }
    std::sort(pairs_.begin(), pairs_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [c, v] : pairs_) f(c, v);
  }
  /// Ends a row without reading it (count pass).
  void discard() {
    if (!dense_)
      for (u32 sl : touched_) keys_[sl] = kNone;
  }
  std::size_t bytes() const {
    return bytes_of(acc_) + bytes_of(mark_) + bytes_of(keys_) + touched_.capacity() * sizeof(u32) +
           pairs_.capacity() * sizeof(std::pair<u32, double>);
  }

 private:
  /// Hash slot of column c, inserted (value 0) when new.
  u64 slot(u32 c) {
    u64 h = (static_cast<u64>(c) * 0x9E3779B97F4A7C15ull >> 20) & mask_;
    while (true) {
      const u32 k = keys_[h];
      if (k == c) return h;
      if (k == kNone) {
        keys_[h] = c;
        acc_[h] = 0.0;
        touched_.push_back(static_cast<u32>(h));
        ++distinct_;
        return h;
      }
      h = (h + 1) & mask_;
    }
  }

  bool dense_, scan_ = false;
  u64 ncols_;
  std::vector<double> acc_;
  std::vector<u32> mark_;
  u32 stamp_ = 0;
  std::vector<u32> keys_;
  u64 mask_ = 0;
  u64 distinct_ = 0;
  std::vector<u32> touched_;  // dense: columns; hashed: slots
  std::vector<std::pair<u32, double>> pairs_;
};

template <typename T>
class CpuContractPlan final : public ContractPlan<T> {
 public:
  CpuContractPlan(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& spec,
                  const ContractOptions& o)
      : spec_(spec), opt_(o) {
    out_dims_ = contract_output_dims(spec, x.dims, y.dims);
    check_kernel_input(x);
    check_kernel_input(y);
    TESSERA_INPUT_CHECK(
        static_cast<u64>(x.nnz()) <= kMaxEntries && static_cast<u64>(y.nnz()) <= kMaxEntries,
        "SpTC (cpu backend): an input has more than 2^32 - 2 nonzeros on one "
        "rank; use more ranks");
    swapped_ = opt_.allow_swap && !natural_order(spec) && natural_order(swap_inputs(spec));
    s_ = swapped_ ? swap_inputs(spec) : spec;
    A_ = swapped_ ? &y : &x;
    B_ = swapped_ ? &x : &y;
    natural_ = natural_order(s_);
    threads_ = team_size(opt_.threads);
    Timer t;
    build();
    match_s_ = t.seconds();
    t.reset();
    count_rows();
    count_s_ = t.seconds();
  }

  const ContractSpec& spec() const override { return spec_; }
  const std::vector<std::uint64_t>& output_dims() const override { return out_dims_; }
  const ContractCount& count() const override { return count_; }
  double match_seconds() const override { return match_s_; }
  double count_seconds() const override { return count_s_; }

  SparseTensor<T> run(ContractStats* stats) const;

 private:
  void build();
  void count_rows();
  std::size_t held_bytes() const {
    return bytes_of(b_col_) + bytes_of(b_val_) + bytes_of(g_start_) + bytes_of(col_coord_) +
           bytes_of(direct_) + bytes_of(ht_key_) + bytes_of(ht_grp_) + bytes_of(a_group_) +
           bytes_of(a_val_) + bytes_of(r_start_) + bytes_of(row_rep_) + bytes_of(row_prod_) +
           bytes_of(row_off_);
  }
  u32 lookup(u64 key) const {
    if (!direct_.empty()) return direct_[key];
    if (ht_key_.empty()) return kNone;
    u64 h = mix64(key) & ht_mask_;
    while (ht_grp_[h] != kNone) {
      if (ht_key_[h] == key) return ht_grp_[h];
      h = (h + 1) & ht_mask_;
    }
    return kNone;
  }
  bool dense_acc() const {
    return static_cast<std::int64_t>(ncols_) <= opt_.dense_accumulator_limit;
  }

  ContractSpec spec_, s_;  // as given; as run (inputs swapped when swapped_)
  ContractOptions opt_;
  std::vector<u64> out_dims_;
  ContractCount count_;
  double match_s_ = 0, count_s_ = 0;
  bool swapped_ = false, natural_ = true;
  int threads_ = 1;
  const SparseTensor<T>* A_ = nullptr;  // row side
  const SparseTensor<T>* B_ = nullptr;  // column side
  std::vector<int> a_out_, b_out_;      // output positions taken from A / from B

  // Column side, sorted by matched key: group g is [g_start[g], g_start[g+1]).
  std::vector<u32> b_col_;     // column rank of each sorted B nonzero
  std::vector<double> b_val_;  // its value
  std::vector<std::int64_t> g_start_;
  u64 ncols_ = 0;
  std::vector<index_t> col_coord_;  // b_out_.size() x ncols: output coordinates of each column
  std::vector<u32> direct_;         // matched key -> group (small key spaces)
  std::vector<u64> ht_key_;         // else open addressing: key, group (kNone = empty)
  std::vector<u32> ht_grp_;
  u64 ht_mask_ = 0;
  // Row side, sorted by its output coordinates: row r is [r_start[r], r_start[r+1]).
  std::vector<u32> a_group_;   // matched group of each sorted A nonzero (kNone: no match)
  std::vector<double> a_val_;  // its value
  std::vector<std::int64_t> r_start_;
  std::vector<u32> row_rep_;            // an A nonzero of each row (its output coordinates)
  std::vector<std::int64_t> row_prod_;  // products of each row
  std::vector<std::int64_t> row_off_;   // output offsets (exclusive prefix of the counts)
  std::size_t build_peak_ = 0;
};

template <typename T>
void CpuContractPlan<T>::build() {
  const SparseTensor<T>& A = *A_;
  const SparseTensor<T>& B = *B_;
  const auto nA = static_cast<std::size_t>(A.nnz()), nB = static_cast<std::size_t>(B.nnz());
  for (int k = 0; k < s_.out_order(); ++k)
    (s_.out_from_y[static_cast<std::size_t>(k)] ? b_out_ : a_out_).push_back(k);

  // ---- matched keys of both sides, jointly packed ----
  std::vector<u64> kdims;
  for (int m : s_.x_key) kdims.push_back(A.dims[static_cast<std::size_t>(m)]);
  u64 kbound = 1;
  auto keys = pack_tuples({tuple_cols(A.idx, s_.x_key, nA), tuple_cols(B.idx, s_.y_key, nB)}, kdims,
                          &kbound, threads_);
  std::vector<u64>& akey = keys[0];
  std::vector<u64> bkey = std::move(keys[1]);

  // ---- column side: sort by matched key, groups, column ranks ----
  std::vector<u32> bperm(nB);
  std::iota(bperm.begin(), bperm.end(), u32{0});
  radix_sort_pairs(bkey, bperm, kbound, threads_);
  std::vector<u64> gkey;
  for (std::size_t q = 0; q < nB; ++q)
    if (q == 0 || bkey[q] != bkey[q - 1]) {
      g_start_.push_back(static_cast<std::int64_t>(q));
      gkey.push_back(bkey[q]);
    }
  g_start_.push_back(static_cast<std::int64_t>(nB));
  const std::size_t ngroups = gkey.size();
  {
    std::vector<u64> cdims;
    std::vector<int> cmodes;
    for (int k : b_out_) {
      cdims.push_back(out_dims_[static_cast<std::size_t>(k)]);
      cmodes.push_back(s_.out_mode[static_cast<std::size_t>(k)]);
    }
    u64 cbound = 1;
    auto ck = pack_tuples({tuple_cols(B.idx, cmodes, nB)}, cdims, &cbound, threads_);
    std::vector<u64> ckey = std::move(ck[0]);
    std::vector<u32> cperm(nB);
    std::iota(cperm.begin(), cperm.end(), u32{0});
    radix_sort_pairs(ckey, cperm, cbound, threads_);
    build_peak_ = std::max(build_peak_, bytes_of(akey) + bytes_of(bkey) + bytes_of(bperm) +
                                            3 * (bytes_of(ckey) + bytes_of(cperm)));
    std::vector<u32> col_of(nB);
    std::vector<u32> reps;
    for (std::size_t q = 0; q < nB; ++q) {
      if (q == 0 || ckey[q] != ckey[q - 1]) reps.push_back(cperm[q]);
      col_of[cperm[q]] = static_cast<u32>(reps.size() - 1);
    }
    ncols_ = reps.size();
    col_coord_.resize(b_out_.size() * ncols_);
    for (std::size_t j = 0; j < cmodes.size(); ++j)
      for (u64 c = 0; c < ncols_; ++c)
        col_coord_[j * ncols_ + c] = B.idx[static_cast<std::size_t>(cmodes[j])][reps[c]];
    b_col_.resize(nB);
    b_val_.resize(nB);
    const auto n = static_cast<std::int64_t>(nB);
#pragma omp parallel for schedule(static) num_threads(team_for(nB, threads_))
    for (std::int64_t q = 0; q < n; ++q) {
      b_col_[static_cast<std::size_t>(q)] = col_of[bperm[static_cast<std::size_t>(q)]];
      b_val_[static_cast<std::size_t>(q)] =
          static_cast<double>(B.vals[bperm[static_cast<std::size_t>(q)]]);
    }
  }
  bkey = {};
  bperm = {};

  // ---- group lookup: a direct table for small key spaces, else a hash table ----
  if (ngroups > 0) {
    if (kbound <= std::max<u64>(u64{1} << 22, 4 * static_cast<u64>(nA + nB))) {
      direct_.assign(kbound, kNone);
      for (std::size_t g = 0; g < ngroups; ++g) direct_[gkey[g]] = static_cast<u32>(g);
    } else {
      const u64 cap = pow2_at_least(std::max<u64>(16, 2 * ngroups));
      ht_key_.assign(cap, 0);
      ht_grp_.assign(cap, kNone);
      ht_mask_ = cap - 1;
      for (std::size_t g = 0; g < ngroups; ++g) {
        u64 h = mix64(gkey[g]) & ht_mask_;
        while (ht_grp_[h] != kNone) h = (h + 1) & ht_mask_;
        ht_key_[h] = gkey[g];
        ht_grp_[h] = static_cast<u32>(g);
      }
    }
  }
  gkey = {};

  // ---- row side: sort by the output coordinates it provides, join with the groups ----
  std::vector<u64> rdims;
  std::vector<int> rmodes;
  for (int k : a_out_) {
    rdims.push_back(out_dims_[static_cast<std::size_t>(k)]);
    rmodes.push_back(s_.out_mode[static_cast<std::size_t>(k)]);
  }
  u64 rbound = 1;
  auto rk = pack_tuples({tuple_cols(A.idx, rmodes, nA)}, rdims, &rbound, threads_);
  std::vector<u64> rkey = std::move(rk[0]);
  std::vector<u32> aperm(nA);
  std::iota(aperm.begin(), aperm.end(), u32{0});
  radix_sort_pairs(rkey, aperm, rbound, threads_);
  build_peak_ =
      std::max(build_peak_, held_bytes() + bytes_of(akey) + 3 * (bytes_of(rkey) + bytes_of(aperm)));
  for (std::size_t q = 0; q < nA; ++q)
    if (q == 0 || rkey[q] != rkey[q - 1]) {
      r_start_.push_back(static_cast<std::int64_t>(q));
      row_rep_.push_back(aperm[q]);
    }
  r_start_.push_back(static_cast<std::int64_t>(nA));
  rkey = {};
  a_group_.resize(nA);
  a_val_.resize(nA);
  {
    const auto n = static_cast<std::int64_t>(nA);
#pragma omp parallel for schedule(static) num_threads(team_for(nA, threads_))
    for (std::int64_t q = 0; q < n; ++q) {
      const u32 i = aperm[static_cast<std::size_t>(q)];
      a_group_[static_cast<std::size_t>(q)] = lookup(akey[i]);
      a_val_[static_cast<std::size_t>(q)] = static_cast<double>(A.vals[i]);
    }
  }
  const auto nrows = static_cast<std::int64_t>(row_rep_.size());
  row_prod_.assign(static_cast<std::size_t>(nrows), 0);
  std::int64_t products = 0;
#pragma omp parallel for schedule(static) num_threads(team_for(nA, threads_)) reduction(+ : products)
  for (std::int64_t r = 0; r < nrows; ++r) {
    std::int64_t p = 0;
    for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
         q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
      const u32 g = a_group_[static_cast<std::size_t>(q)];
      if (g != kNone) p += g_start_[g + 1] - g_start_[g];
    }
    row_prod_[static_cast<std::size_t>(r)] = p;
    products += p;
  }
  count_.products = products;
}

template <typename T>
void CpuContractPlan<T>::count_rows() {
  const auto nrows = static_cast<std::int64_t>(row_rep_.size());
  row_off_.assign(static_cast<std::size_t>(nrows) + 1, 0);
  const int T_ = std::max(1, std::min<int>(threads_, static_cast<int>(std::min<std::int64_t>(
                                                         nrows, count_.products / 4096 + 1))));
  std::size_t acc_bytes = 0;
#pragma omp parallel num_threads(T_) reduction(max : acc_bytes)
  {
    RowAccumulator acc(dense_acc(), ncols_);
#pragma omp for schedule(dynamic, 8)
    for (std::int64_t r = 0; r < nrows; ++r) {
      const std::int64_t prod = row_prod_[static_cast<std::size_t>(r)];
      if (prod <= 1) {
        row_off_[static_cast<std::size_t>(r) + 1] = prod;
        continue;
      }
      acc.begin(static_cast<u64>(prod));
      for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
           q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
        const u32 g = a_group_[static_cast<std::size_t>(q)];
        if (g == kNone) continue;
        acc.note(b_col_.data() + g_start_[g], g_start_[g + 1] - g_start_[g]);
      }
      row_off_[static_cast<std::size_t>(r) + 1] = static_cast<std::int64_t>(acc.distinct());
      acc.discard();
    }
    acc_bytes = acc.bytes();
  }
  for (std::int64_t r = 0; r < nrows; ++r)
    row_off_[static_cast<std::size_t>(r) + 1] += row_off_[static_cast<std::size_t>(r)];
  const std::int64_t entries = row_off_.back();
  TESSERA_INPUT_CHECK(static_cast<u64>(entries) <= kMaxEntries,
                      "SpTC (cpu backend): the output has " << entries
                                                            << " entries on one rank, more than "
                                                               "2^32 - 2; use more ranks");
  count_.output_entries = entries;
  count_.output_bytes = static_cast<std::size_t>(entries) * contract_entry_bytes(spec_, sizeof(T));
  const auto E = static_cast<std::size_t>(entries);
  // The run: per-thread accumulators, kept counts, and for a final sort the keys, the
  // permutation and a gather buffer (each doubled by the radix sort).
  std::size_t run =
      static_cast<std::size_t>(threads_) * acc_bytes + row_rep_.size() * sizeof(std::int64_t);
  if (!natural_) run += 2 * E * (sizeof(u64) + sizeof(u32)) + E * sizeof(double);
  count_.workspace_bytes = std::max(build_peak_, held_bytes() + run);
}

template <typename T>
SparseTensor<T> CpuContractPlan<T>::run(ContractStats* stats) const {
  const SparseTensor<T>& A = *A_;
  ContractStats st;
  st.match_seconds = match_s_;
  st.count_seconds = count_s_;
  st.products = count_.products;
  st.output_entries = count_.output_entries;
  st.workspace_bytes = count_.workspace_bytes;
  Timer t;
  const auto E = static_cast<std::size_t>(count_.output_entries);
  const int N = s_.out_order();
  SparseTensor<T> out(out_dims_);
  for (auto& v : out.idx) v.resize(E);
  out.vals.resize(E);
  const auto nrows = static_cast<std::int64_t>(row_rep_.size());
  std::vector<std::int64_t> kept(static_cast<std::size_t>(nrows), 0);
  const int T_ = std::max(1, std::min<int>(threads_, static_cast<int>(std::min<std::int64_t>(
                                                         nrows, count_.products / 4096 + 1))));
#pragma omp parallel num_threads(T_)
  {
    RowAccumulator acc(dense_acc(), ncols_);
    index_t* oi[kMaxOrder];
    for (int k = 0; k < N; ++k) oi[k] = out.idx[static_cast<std::size_t>(k)].data();
    T* ov = out.vals.data();
#pragma omp for schedule(dynamic, 8)
    for (std::int64_t r = 0; r < nrows; ++r) {
      const std::int64_t prod = row_prod_[static_cast<std::size_t>(r)];
      if (prod == 0) continue;
      acc.begin(static_cast<u64>(prod));
      for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
           q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
        const u32 g = a_group_[static_cast<std::size_t>(q)];
        if (g == kNone) continue;
        acc.add(b_col_.data() + g_start_[g], b_val_.data() + g_start_[g],
                g_start_[g + 1] - g_start_[g], a_val_[static_cast<std::size_t>(q)]);
      }
      index_t rc[kMaxOrder];
      const u32 rep = row_rep_[static_cast<std::size_t>(r)];
      for (std::size_t j = 0; j < a_out_.size(); ++j)
        rc[j] =
            A.idx[static_cast<std::size_t>(s_.out_mode[static_cast<std::size_t>(a_out_[j])])][rep];
      std::int64_t o = row_off_[static_cast<std::size_t>(r)];
      const std::int64_t first = o;
      acc.drain([&](u32 c, double v) {
        const T tv = static_cast<T>(v);
        if (tv == T(0)) return;  // exact zero: dropped
        for (std::size_t j = 0; j < a_out_.size(); ++j) oi[a_out_[j]][o] = rc[j];
        for (std::size_t j = 0; j < b_out_.size(); ++j)
          oi[b_out_[j]][o] = col_coord_[j * ncols_ + c];
        ov[o] = tv;
        ++o;
      });
      kept[static_cast<std::size_t>(r)] = o - first;
    }
  }
  st.multiply_seconds = t.seconds();
  t.reset();

  // ---- assembly: close the gaps of dropped zeros, restore the output order ----
  std::int64_t nnz = 0;
  for (auto k : kept) nnz += k;
  if (static_cast<std::size_t>(nnz) < E) {
    std::int64_t w = 0;
    for (std::int64_t r = 0; r < nrows; ++r) {
      const std::int64_t from = row_off_[static_cast<std::size_t>(r)];
      const std::int64_t n = kept[static_cast<std::size_t>(r)];
      if (n > 0 && from != w) {
        for (int k = 0; k < N; ++k) {
          index_t* p = out.idx[static_cast<std::size_t>(k)].data();
          std::memmove(p + w, p + from, static_cast<std::size_t>(n) * sizeof(index_t));
        }
        std::memmove(out.vals.data() + w, out.vals.data() + from,
                     static_cast<std::size_t>(n) * sizeof(T));
      }
      w += n;
    }
    for (auto& v : out.idx) v.resize(static_cast<std::size_t>(nnz));
    out.vals.resize(static_cast<std::size_t>(nnz));
  }
  if (!natural_ && nnz > 1) {
    std::vector<int> all(static_cast<std::size_t>(N));
    std::iota(all.begin(), all.end(), 0);
    u64 bound = 1;
    auto kk = pack_tuples({tuple_cols(out.idx, all, static_cast<std::size_t>(nnz))}, out_dims_,
                          &bound, threads_);
    std::vector<u32> perm(static_cast<std::size_t>(nnz));
    std::iota(perm.begin(), perm.end(), u32{0});
    radix_sort_pairs(kk[0], perm, bound, threads_);
    kk.clear();
    const int Tg = team_for(static_cast<std::size_t>(nnz), threads_);
    std::vector<index_t> buf(static_cast<std::size_t>(nnz));
    for (int k = 0; k < N; ++k) {
      auto& v = out.idx[static_cast<std::size_t>(k)];
#pragma omp parallel for schedule(static) num_threads(Tg)
      for (std::int64_t i = 0; i < nnz; ++i)
        buf[static_cast<std::size_t>(i)] = v[perm[static_cast<std::size_t>(i)]];
      v.swap(buf);
    }
    std::vector<T> vb(static_cast<std::size_t>(nnz));
#pragma omp parallel for schedule(static) num_threads(Tg)
    for (std::int64_t i = 0; i < nnz; ++i)
      vb[static_cast<std::size_t>(i)] = out.vals[perm[static_cast<std::size_t>(i)]];
    out.vals.swap(vb);
  }
  st.assemble_seconds = t.seconds();
  st.output_nnz = nnz;
  st.zeros_dropped = st.output_entries - nnz;
  if (stats) *stats = st;
  return out;
}

}  // namespace

template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                               const ContractSpec& spec,
                                               const ContractOptions& options) {
  return std::make_unique<CpuContractPlan<T>>(x, y, spec, options);
}

template <typename T>
SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats) {
  const auto* p = dynamic_cast<const CpuContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  return p->run(stats);
}

template <typename T>
SparseTensor<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& spec, ContractStats* stats,
                         const ContractOptions& options) {
  auto plan = plan_contract(x, y, spec, options);
  return contract(*plan, stats);
}

template std::unique_ptr<ContractPlan<float>> plan_contract<float>(const SparseTensor<float>&,
                                                                   const SparseTensor<float>&,
                                                                   const ContractSpec&,
                                                                   const ContractOptions&);
template std::unique_ptr<ContractPlan<double>> plan_contract<double>(const SparseTensor<double>&,
                                                                     const SparseTensor<double>&,
                                                                     const ContractSpec&,
                                                                     const ContractOptions&);
template SparseTensor<float> contract<float>(ContractPlan<float>&, ContractStats*);
template SparseTensor<double> contract<double>(ContractPlan<double>&, ContractStats*);
template SparseTensor<float> contract<float>(const SparseTensor<float>&, const SparseTensor<float>&,
                                             const ContractSpec&, ContractStats*,
                                             const ContractOptions&);
template SparseTensor<double> contract<double>(const SparseTensor<double>&,
                                               const SparseTensor<double>&, const ContractSpec&,
                                               ContractStats*, const ContractOptions&);

}  // namespace cpu

template <typename T>
nnz_t sort_sum_drop_zeros(SparseTensor<T>& t, int threads, nnz_t* zeros_dropped) {
  if (zeros_dropped) *zeros_dropped = 0;
  const int N = t.order();
  TESSERA_EXPECTS(N >= 1 && N <= kMaxOrder && t.idx.size() == static_cast<std::size_t>(N),
                  "tensor of order " << N);
  const auto n = static_cast<std::size_t>(t.nnz());
  for (const auto& v : t.idx) TESSERA_EXPECTS(v.size() == n, "ragged coordinate arrays");
  if (n == 0) return 0;
  TESSERA_INPUT_CHECK(n <= cpu::kMaxEntries,
                      "more than 2^32 - 2 nonzeros to merge on one rank; "
                      "use more ranks");
  for (int m = 0; m < N; ++m)
    for (index_t c : t.idx[static_cast<std::size_t>(m)])
      TESSERA_EXPECTS(
          c < t.dims[static_cast<std::size_t>(m)],
          "coordinate " << c << " >= dimension " << t.dims[static_cast<std::size_t>(m)]);
  std::vector<int> all(static_cast<std::size_t>(N));
  std::iota(all.begin(), all.end(), 0);
  cpu::u64 bound = 1;
  auto kk = cpu::pack_tuples({cpu::tuple_cols(t.idx, all, n)}, t.dims, &bound, threads);
  std::vector<cpu::u64>& key = kk[0];
  std::vector<cpu::u32> perm(n);
  std::iota(perm.begin(), perm.end(), cpu::u32{0});
  cpu::radix_sort_pairs(key, perm, bound, threads);
  // Runs of equal keys, summed in storage order (the sort is stable); chunks of the sorted
  // range start at run starts so threads never split a run.
  const int T_ = cpu::team_for(n, threads);
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
    for_runs(c, [&](cpu::u32, T v) {
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
    for_runs(c, [&](cpu::u32 i, T v) {
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
