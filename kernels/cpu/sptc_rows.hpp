// Row accumulators of the OpenMP SpTC (kernels/cpu/sptc.cpp, docs/sptc.md): one output row
// at a time, over the column ranks of the column side. Each has the same interface, so the
// count and run loops are written once:
//   begin(entries, runs)         starts a row of at most `entries` distinct columns and
//                                `runs` calls of add (0: a count pass)
//   note(cols, n) -> new         count pass: marks columns, returns how many were new
//   clear()                      count pass: ends the row
//   add(cols, vals, n, av)       run: acc[cols[i]] += av * vals[i]
//   drain(f)                     run: f(column, sum) in column order, ends the row
// Sums are in double, in the order of the additions (the first one starts from 0).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/sptc_keys.hpp"

namespace tessera::kernels::cpu::detail {

/// Dense accumulator (column side with at most ContractOptions::dense_accumulator_limit
/// columns): a double and a flag byte per column, zero between rows. Flags are plain stores
/// (a bit array would chain consecutive products on the same word through memory). A row
/// finds its columns in order in one of three ways, whichever costs least for its size:
/// - scanned: the flags, 8 per word (rows dense in the columns);
/// - blocked: a second flag per word of 8 flags, scanned 8 at a time, then the flag words
///   it marks (rows of medium density);
/// - listed: each new column is listed (branch-free) and the list, a concatenation of
///   ascending runs (one per group: groups list their columns in ascending order), merged.
class DenseRow {
 public:
  explicit DenseRow(u64 ncols)
      : ncols_(ncols),
        acc_(ncols, 0.0),
        flag_((ncols + 63) / 64 * 64, 0),
        block_(flag_.size() / 8, 0),
        list_(ncols + 1) {}

  /// `entries`: a bound on the row's distinct columns (its products in the count pass, its
  /// counted entries in the run); `runs`: a bound on the calls of add (0 in the count pass,
  /// which lists a row when a list store per product costs less than clearing every flag).
  void begin(u64 entries, u64 runs) {
    n_ = 0;
    if (runs == 0) {
      mode_ = ncols_ > 32 * entries ? kListed : kScanned;
      return;
    }
    // Rough costs, in units of about one word scanned: the scan of every flag, the scan of
    // the block flags and of the marked flag words, the merge of up to `runs` runs (passes
    // of log2 runs). Measured on ICEWS14 and FB15k-237 (docs/perf/cpu-contract-scipy.md).
    const u64 scanned = ncols_ / 8;
    const u64 blocked = ncols_ / 64 + 2 * entries;
    const u64 listed = entries * (1 + 2 * static_cast<u64>(bit_width(runs - 1)));
    mode_ =
        listed <= std::min(scanned, blocked) ? kListed : (blocked < scanned ? kBlocked : kScanned);
    runs_.assign(1, 0);
  }
  u64 note(const u32* cols, std::int64_t n) {
    if (mode_ == kListed) {
      const u64 before = n_;
      append(cols, n);
      return n_ - before;
    }
    std::uint8_t* flag = flag_.data();
    u64 fresh = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const u32 c = cols[i];
      fresh += flag[c] ^ 1u;
      flag[c] = 1;
    }
    return fresh;
  }
  void clear() {
    if (mode_ == kListed) {
      for (u64 i = 0; i < n_; ++i) flag_[list_[i]] = 0;
    } else {
      std::fill(flag_.begin(), flag_.end(), std::uint8_t{0});
    }
  }
  void add(const u32* cols, const double* vals, std::int64_t n, double av) {
    double* acc = acc_.data();
    std::uint8_t* flag = flag_.data();
    if (mode_ == kListed) {
      for (std::int64_t i = 0; i < n; ++i) acc[cols[i]] += av * vals[i];
      append(cols, n);
      return;
    }
    if (mode_ == kBlocked) {
      std::uint8_t* block = block_.data();
      for (std::int64_t i = 0; i < n; ++i) {
        const u32 c = cols[i];
        acc[c] += av * vals[i];
        flag[c] = 1;
        block[c >> 3] = 1;
      }
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const u32 c = cols[i];
      acc[c] += av * vals[i];
      flag[c] = 1;
    }
  }
  template <typename F>
  void drain(F&& f) {
    double* acc = acc_.data();
    std::uint8_t* flag = flag_.data();
    if (mode_ == kListed) {
      const u32* list = merge_runs();
      for (u64 i = 0; i < n_; ++i) {
        const u32 c = list[i];
        f(c, acc[c]);
        acc[c] = 0.0;
        flag[c] = 0;
      }
      return;
    }
    // The set flags of the word at `base`, in order, cleared.
    auto word = [&](u64 base) {
      u64 x;
      std::memcpy(&x, flag + base, 8);
      if (x == 0) return;
      std::memset(flag + base, 0, 8);
      while (x != 0) {  // flags are 0 or 1: byte j of the word is bit 8 j
        const u64 c = base + static_cast<u64>(__builtin_ctzll(x)) / 8;
        x &= x - 1;
        f(static_cast<u32>(c), acc[c]);
        acc[c] = 0.0;
      }
    };
    if (mode_ == kScanned) {
      for (u64 base = 0; base < flag_.size(); base += 8) word(base);
      return;
    }
    std::uint8_t* block = block_.data();
    for (u64 b = 0; b < block_.size(); b += 8) {
      u64 x;
      std::memcpy(&x, block + b, 8);
      if (x == 0) continue;
      std::memset(block + b, 0, 8);
      while (x != 0) {
        const u64 w = b + static_cast<u64>(__builtin_ctzll(x)) / 8;
        x &= x - 1;
        word(8 * w);
      }
    }
  }
  std::size_t bytes() const {
    return acc_.size() * sizeof(double) + flag_.size() + block_.size() +
           2 * list_.size() * sizeof(u32);
  }

 private:
  enum Mode { kScanned, kBlocked, kListed };

  /// Sorts the listed columns: the list is a concatenation of ascending runs (one per call
  /// of append), merged pairwise.
  const u32* merge_runs() {
    u32* a = list_.data();
    if (runs_.size() <= 1) return a;
    if (tmp_.size() < n_) tmp_.resize(list_.size());
    u32* b = tmp_.data();
    runs_.push_back(n_);
    while (runs_.size() > 2) {  // runs_ holds the run starts and the end
      std::size_t w = 0;
      for (std::size_t i = 0; i + 1 < runs_.size(); i += 2) {
        const u64 lo = runs_[i], mid = runs_[i + 1];
        const u64 hi = i + 2 < runs_.size() ? runs_[i + 2] : mid;
        merge(a + lo, a + mid, a + hi, b + lo);
        runs_[w++] = lo;
      }
      runs_[w++] = n_;
      runs_.resize(w);
      std::swap(a, b);
    }
    return a;
  }
  /// Merges the ascending runs [p, mid) and [mid, end) into out, without branches on the
  /// values (they are distinct; which side wins is unpredictable).
  static void merge(const u32* p, const u32* mid, const u32* end, u32* out) {
    const u32* q = mid;
    while (p != mid && q != end) {
      const u32 x = *p, y = *q;
      const bool take_q = y < x;
      *out++ = take_q ? y : x;
      q += take_q ? 1 : 0;
      p += take_q ? 0 : 1;
    }
    out = std::copy(p, mid, out);
    std::copy(q, end, out);
  }
  /// Lists the columns not seen before in this row.
  void append(const u32* cols, std::int64_t n) {
    if (n_ > 0 && cols[0] < list_[n_ - 1]) runs_.push_back(n_);  // a new run starts
    std::uint8_t* flag = flag_.data();
    u32* list = list_.data();
    u64 k = n_;
    for (std::int64_t i = 0; i < n; ++i) {
      const u32 c = cols[i];
      list[k] = c;
      k += flag[c] ^ 1u;
      flag[c] = 1;
    }
    n_ = k;
  }

  u64 ncols_;
  Mode mode_ = kScanned;
  u64 n_ = 0;  // listed columns
  std::vector<double> acc_;
  std::vector<std::uint8_t> flag_;   // per column, whole words of 8
  std::vector<std::uint8_t> block_;  // per flag word (blocked rows), whole words of 8
  std::vector<u32> list_;
  std::vector<u32> tmp_;   // merge buffer
  std::vector<u64> runs_;  // starts of the ascending runs of list_
};

/// A group of the column side: its columns (ascending, distinct) and values, to be scaled.
struct ScaledGroup {
  const u32* col;
  const double* val;
  std::size_t n;
  double scale;
};

/// A row that is the union of the groups g[0..n) (n >= 2), without an accumulator: the
/// groups merged left to right, so that a column's products are summed in the order the
/// accumulators add them; the last merge calls keep(column, sum) in column order. mc, mv:
/// two buffers of `half` entries each, at least the row's entries.
template <typename F>
void merge_groups(const ScaledGroup* g, int n, u32* mc, double* mv, std::size_t half, F&& keep) {
  u32* rc = mc;  // the union so far
  double* rv = mv;
  u32* wc = mc + half;  // the next union
  double* wv = mv + half;
  std::size_t nr = g[0].n;
  for (std::size_t i = 0; i < nr; ++i) {
    rc[i] = g[0].col[i];
    rv[i] = g[0].scale * g[0].val[i];
  }
  for (int k = 1; k < n; ++k) {
    const u32* gc = g[k].col;
    const double* gv = g[k].val;
    const double av = g[k].scale;
    const std::size_t ng = g[k].n;
    std::size_t i = 0, j = 0, w = 0;
    auto out = [&](u32 c, double v) {
      if (k + 1 == n) {
        keep(c, v);
      } else {
        wc[w] = c;
        wv[w++] = v;
      }
    };
    while (i < nr && j < ng) {
      if (rc[i] < gc[j]) {
        out(rc[i], rv[i]);
        ++i;
      } else if (gc[j] < rc[i]) {
        out(gc[j], av * gv[j]);
        ++j;
      } else {
        out(rc[i], rv[i] + av * gv[j]);
        ++i;
        ++j;
      }
    }
    for (; i < nr; ++i) out(rc[i], rv[i]);
    for (; j < ng; ++j) out(gc[j], av * gv[j]);
    std::swap(rc, wc);
    std::swap(rv, wv);
    nr = w;
  }
}

/// Hashed accumulator (wide column sides): open addressing sized for the row, its
/// (column, sum) pairs sorted when drained.
class HashRow {
 public:
  explicit HashRow(u64 ncols) : ncols_(ncols) {}

  void begin(u64 entries, u64 /*runs*/) {
    touched_.clear();
    const u64 cap = std::max<u64>(16, pow2_at_least(2 * std::min(entries, ncols_)));
    if (keys_.size() < cap) {
      keys_.assign(cap, kNone);
      acc_.resize(cap);
    }
    mask_ = cap - 1;
  }
  u64 note(const u32* cols, std::int64_t n) {
    const std::size_t before = touched_.size();
    for (std::int64_t i = 0; i < n; ++i) slot(cols[i]);
    return touched_.size() - before;
  }
  void clear() {
    for (u32 sl : touched_) keys_[sl] = kNone;
  }
  void add(const u32* cols, const double* vals, std::int64_t n, double av) {
    for (std::int64_t i = 0; i < n; ++i) acc_[slot(cols[i])] += av * vals[i];
  }
  template <typename F>
  void drain(F&& f) {
    pairs_.clear();
    for (u32 sl : touched_) {
      pairs_.push_back({keys_[sl], acc_[sl]});
      keys_[sl] = kNone;
    }
    std::sort(pairs_.begin(), pairs_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [c, v] : pairs_) f(c, v);
  }
  std::size_t bytes() const {
    return acc_.capacity() * sizeof(double) + keys_.capacity() * sizeof(u32) +
           touched_.capacity() * sizeof(u32) + pairs_.capacity() * sizeof(std::pair<u32, double>);
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
        return h;
      }
      h = (h + 1) & mask_;
    }
  }

  u64 ncols_;
  std::vector<double> acc_;
  std::vector<u32> keys_;
  u64 mask_ = 0;
  std::vector<u32> touched_;  // slots
  std::vector<std::pair<u32, double>> pairs_;
};

}  // namespace tessera::kernels::cpu::detail
