// OpenMP SpTC (kernels/sptc.hpp, docs/sptc.md).
//
// The contraction is a sparse matrix product in disguise: the "row side" A (X, or Y when
// swapping the roles puts the output in order) is grouped by the coordinates it gives the
// output, the "column side" B by its matched (contracted and batch) coordinates, each group
// listing its columns (ranks of B's output coordinates) in ascending order. Every A nonzero
// is joined with the B group of its matched coordinates through a direct-address table or
// an open-addressing hash table (the match), then each output row is the sum over its A
// nonzeros of value x (the B group), in double (Gustavson's SpGEMM): a row of one group is
// that group scaled, a row of a few groups their merge, any other row accumulates in a
// per-thread dense array over the column ranks or, for wide column sides, a per-row hash
// table (kernels/cpu/sptc_rows.hpp). A first pass counts each row's distinct columns, so
// the output is allocated once at its exact size and every row is written at its own
// offset, without atomics; both passes run on chunks of rows of about equal products. The
// row side and the column side are sorted at the same time with two threads. Coordinate
// tuples are compared as mixed-radix packed 64-bit keys (ranked when the packing would
// overflow; kernels/cpu/sptc_keys.cpp), which keep the lexicographic order, so rows and
// columns come out sorted; when the output letters interleave those of the two inputs a
// final radix sort restores the order.
#include "kernels/sptc.hpp"

#include <omp.h>

#if defined(__linux__)
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>

#include "kernels/cpu/sptc_keys.hpp"
#include "kernels/cpu/sptc_rows.hpp"
#include "kernels/mttkrp.hpp"
#include "util/error.hpp"
#include "util/huge_pages.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace tessera::kernels {

namespace cpu {

namespace {

using detail::bit_width;
using detail::DenseRow;
using detail::HashRow;
using detail::kMaxEntries;
using detail::kNone;
using detail::pack_tuples;
using detail::pow2_at_least;
using detail::radix_sort_pairs;
using detail::team_for;
using detail::team_size;
using detail::tuple_cols;
using detail::u32;
using detail::u64;

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

/// Boundaries of about `parts` chunks of consecutive rows of about equal work (products
/// plus a fixed cost per row): rows [cut[c], cut[c + 1]) form chunk c.
std::vector<std::int64_t> row_chunks(const std::vector<std::int64_t>& prod, int parts) {
  const auto nrows = static_cast<std::int64_t>(prod.size());
  constexpr std::int64_t kRowCost = 16;
  std::int64_t total = 0;
  for (auto p : prod) total += p + kRowCost;
  const std::int64_t target = std::max<std::int64_t>(1, total / std::max(parts, 1));
  std::vector<std::int64_t> cut{0};
  std::int64_t acc = 0;
  for (std::int64_t r = 0; r < nrows; ++r) {
    acc += prod[static_cast<std::size_t>(r)] + kRowCost;
    if (acc >= target && r + 1 < nrows) {
      cut.push_back(r + 1);
      acc = 0;
    }
  }
  cut.push_back(nrows);
  return cut;
}

/// Sizes every array of out to n entries: storage reserved and advised huge pages first,
/// then the arrays zero-filled (their pages first touched) by up to `threads` threads, one
/// array each, the largest first.
template <typename T>
void size_output(SparseTensor<T>& out, std::size_t n, int threads) {
  for (auto& v : out.idx) {
    v.reserve(n);
    util::advise_huge_pages(v.data(), n * sizeof(index_t));
  }
  out.vals.reserve(n);
  util::advise_huge_pages(out.vals.data(), n * sizeof(T));
  const int arrays = static_cast<int>(out.idx.size()) + 1;
  const int T_ = n < (std::size_t{1} << 18) ? 1 : std::min(team_size(threads), arrays);
  // The storage is reserved: resize neither allocates nor throws.
#pragma omp parallel for schedule(dynamic, 1) num_threads(T_)
  for (int k = 0; k < arrays; ++k) {
    if (k == 0)
      out.vals.resize(n);
    else
      out.idx[static_cast<std::size_t>(k) - 1].resize(n);
  }
}

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
  /// The groups: B's nonzeros sorted by matched key (bkey, consumed; bperm receives the
  /// order), g_start_ and the group lookup. Returns its transient bytes.
  std::size_t build_groups(std::vector<u64>& bkey, u64 kbound, int threads,
                           std::vector<u32>& bperm);
  /// The column ranks: col_of[p] for every B nonzero p, ncols_, col_coord_. Returns its
  /// transient bytes.
  std::size_t build_columns(std::vector<u32>& col_of, int threads);
  /// The row side (r_start_, row_rep_, a_val_); aperm receives the sorted order of A.
  /// Returns its transient bytes.
  std::size_t build_rows(std::vector<u32>& aperm, int threads);
  void count_rows();
  template <typename Acc>
  std::size_t count_rows_with();
  /// The run's rows with accumulator Acc; NB: the output modes taken from B when 1 or 2
  /// (their coordinates written as the entries are found), 0: any number (gathered after).
  template <typename Acc, int NB>
  void multiply_with(SparseTensor<T>& out, std::vector<std::int64_t>& kept) const;
  template <typename Acc>
  void multiply_rows(SparseTensor<T>& out, std::vector<std::int64_t>& kept) const {
    if (b_out_.size() == 1)
      multiply_with<Acc, 1>(out, kept);
    else if (b_out_.size() == 2)
      multiply_with<Acc, 2>(out, kept);
    else
      multiply_with<Acc, 0>(out, kept);
  }
  /// Team size of the row passes.
  int row_team() const {
    return std::max(1, std::min<int>(threads_, static_cast<int>(std::min<std::int64_t>(
                                                   static_cast<std::int64_t>(chunks_.size()) - 1,
                                                   count_.products / 4096 + 1))));
  }
  std::size_t held_bytes() const {
    return bytes_of(b_col_) + bytes_of(b_val_) + bytes_of(g_start_) + bytes_of(g_plain_) +
           bytes_of(col_coord_) + bytes_of(direct_) + bytes_of(ht_key_) + bytes_of(ht_grp_) +
           bytes_of(a_group_) + bytes_of(a_val_) + bytes_of(r_start_) + bytes_of(row_rep_) +
           bytes_of(row_prod_) + bytes_of(row_off_);
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
  /// Rows of at most this many groups, none with repeated columns, are merged group by
  /// group instead of accumulated.
  static constexpr int kMergeGroups = 4;
  /// The group of A nonzero q, scaled by its value.
  detail::ScaledGroup scaled_group(std::int64_t q) const {
    const u32 g = a_group_[static_cast<std::size_t>(q)];
    return {b_col_.data() + g_start_[g], b_val_.data() + g_start_[g],
            static_cast<std::size_t>(g_start_[g + 1] - g_start_[g]),
            a_val_[static_cast<std::size_t>(q)]};
  }
  /// The A nonzero of row r when the row is one group without repeated columns (its only
  /// matched nonzero; `prod` its products): the row is that group scaled. Else -1.
  std::int64_t single_group(std::int64_t r, std::int64_t prod) const {
    for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
         q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
      const u32 g = a_group_[static_cast<std::size_t>(q)];
      if (g == kNone) continue;
      return g_start_[g + 1] - g_start_[g] == prod && g_plain_[g] != 0 ? q : -1;
    }
    return -1;
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
  std::vector<std::uint8_t> g_plain_;  // 1: the group's columns are distinct
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
  std::vector<std::int64_t> chunks_;    // row chunks of about equal products (row_chunks)
  std::int64_t max_row_entries_ = 0;
  std::int64_t max_merge_entries_ = 0;  // of the rows of at most kMergeGroups matched nonzeros
  std::size_t build_peak_ = 0;
};

template <typename T>
std::size_t CpuContractPlan<T>::build_groups(std::vector<u64>& bkey, u64 kbound, int threads,
                                             std::vector<u32>& bperm) {
  const auto nB = bkey.size();
  bperm.resize(nB);
  std::iota(bperm.begin(), bperm.end(), u32{0});
  radix_sort_pairs(bkey, bperm, kbound, threads);
  const std::size_t peak = 3 * (bytes_of(bkey) + bytes_of(bperm));
  std::vector<u64> gkey;
  for (std::size_t q = 0; q < nB; ++q)
    if (q == 0 || bkey[q] != bkey[q - 1]) {
      g_start_.push_back(static_cast<std::int64_t>(q));
      gkey.push_back(bkey[q]);
    }
  g_start_.push_back(static_cast<std::int64_t>(nB));
  const std::size_t ngroups = gkey.size();
  bkey = {};
  // Group lookup: a direct table for small key spaces, else a hash table.
  if (ngroups > 0) {
    const auto nA = static_cast<u64>(A_->nnz());
    if (kbound <= std::max<u64>(u64{1} << 22, 4 * (nA + nB))) {
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
  return peak;
}

template <typename T>
std::size_t CpuContractPlan<T>::build_columns(std::vector<u32>& col_of, int threads) {
  const SparseTensor<T>& B = *B_;
  const auto nB = static_cast<std::size_t>(B.nnz());
  std::vector<u64> cdims;
  std::vector<int> cmodes;
  for (int k : b_out_) {
    cdims.push_back(out_dims_[static_cast<std::size_t>(k)]);
    cmodes.push_back(s_.out_mode[static_cast<std::size_t>(k)]);
  }
  u64 cbound = 1;
  auto ck = pack_tuples({tuple_cols(B.idx, cmodes, nB)}, cdims, &cbound, threads);
  std::vector<u64> ckey = std::move(ck[0]);
  std::vector<u32> cperm(nB);
  std::iota(cperm.begin(), cperm.end(), u32{0});
  radix_sort_pairs(ckey, cperm, cbound, threads);
  const std::size_t peak = 3 * (bytes_of(ckey) + bytes_of(cperm));
  std::vector<u32> reps;
  col_of.resize(nB);
  for (std::size_t q = 0; q < nB; ++q) {
    if (q == 0 || ckey[q] != ckey[q - 1]) reps.push_back(cperm[q]);
    col_of[cperm[q]] = static_cast<u32>(reps.size() - 1);
  }
  ncols_ = reps.size();
  col_coord_.resize(b_out_.size() * ncols_);
  for (std::size_t j = 0; j < cmodes.size(); ++j)
    for (u64 c = 0; c < ncols_; ++c)
      col_coord_[j * ncols_ + c] = B.idx[static_cast<std::size_t>(cmodes[j])][reps[c]];
  return peak;
}

template <typename T>
std::size_t CpuContractPlan<T>::build_rows(std::vector<u32>& aperm, int threads) {
  const SparseTensor<T>& A = *A_;
  const auto nA = static_cast<std::size_t>(A.nnz());
  std::vector<u64> rdims;
  std::vector<int> rmodes;
  for (int k : a_out_) {
    rdims.push_back(out_dims_[static_cast<std::size_t>(k)]);
    rmodes.push_back(s_.out_mode[static_cast<std::size_t>(k)]);
  }
  u64 rbound = 1;
  auto rk = pack_tuples({tuple_cols(A.idx, rmodes, nA)}, rdims, &rbound, threads);
  std::vector<u64> rkey = std::move(rk[0]);
  aperm.resize(nA);
  std::iota(aperm.begin(), aperm.end(), u32{0});
  radix_sort_pairs(rkey, aperm, rbound, threads);
  for (std::size_t q = 0; q < nA; ++q)
    if (q == 0 || rkey[q] != rkey[q - 1]) {
      r_start_.push_back(static_cast<std::int64_t>(q));
      row_rep_.push_back(aperm[q]);
    }
  r_start_.push_back(static_cast<std::int64_t>(nA));
  a_val_.resize(nA);
  for (std::size_t q = 0; q < nA; ++q) a_val_[q] = static_cast<double>(A.vals[aperm[q]]);
  return 3 * (bytes_of(rkey) + bytes_of(aperm));
}

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
  const std::size_t key_bytes = bytes_of(akey) + bytes_of(bkey);

  // ---- three independent sorts: the row side by the output coordinates A provides, the
  // column side by matched key (the groups) and by its output coordinates (the column
  // ranks). A self-contraction whose column letters are the row letters at the same
  // modes (ijk,ljk->il) takes the columns from the rows. With 2 or more threads and inputs
  // worth it they run at the same time: the rows on one thread, the rest on another ----
  bool mirrored = A_ == B_ && a_out_.size() == b_out_.size();
  for (std::size_t j = 0; mirrored && j < a_out_.size(); ++j)
    mirrored = s_.out_mode[static_cast<std::size_t>(a_out_[j])] ==
               s_.out_mode[static_cast<std::size_t>(b_out_[j])];
  std::vector<u32> aperm, bperm, col_of;
  std::size_t peaks[2] = {0, 0};
  std::exception_ptr err[2];
  const int T2 = threads_ >= 2 && nA + nB >= (std::size_t{1} << 15) ? 2 : 1;
  const int inner = T2 == 2 ? 1 : threads_;
#pragma omp parallel num_threads(T2)
  for (int side = 0; side < 2; ++side) {
    if (T2 == 2 && side != omp_get_thread_num()) continue;
    try {
      if (side == 0) {
        peaks[0] = build_rows(aperm, inner);
      } else {
        peaks[1] = build_groups(bkey, kbound, inner, bperm);
        if (!mirrored) peaks[1] = std::max(peaks[1], build_columns(col_of, inner));
      }
    } catch (...) {
      err[side] = std::current_exception();
    }
  }
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  if (mirrored) {  // B is A: the column of nonzero p is the row of p
    ncols_ = row_rep_.size();
    col_of.resize(nB);
    for (std::size_t r = 0; r < ncols_; ++r)
      for (std::int64_t q = r_start_[r]; q < r_start_[r + 1]; ++q)
        col_of[aperm[static_cast<std::size_t>(q)]] = static_cast<u32>(r);
    col_coord_.resize(b_out_.size() * ncols_);
    for (std::size_t j = 0; j < b_out_.size(); ++j) {
      const index_t* m =
          B.idx[static_cast<std::size_t>(s_.out_mode[static_cast<std::size_t>(b_out_[j])])].data();
      for (u64 c = 0; c < ncols_; ++c) col_coord_[j * ncols_ + c] = m[row_rep_[c]];
    }
  }
  build_peak_ = held_bytes() + key_bytes + peaks[0] + peaks[1];

  // ---- the column side in group order, each group's columns ascending (a stable sort of
  // the groups that are not, so repeated columns keep their order); groups without a
  // repeated column are marked plain ----
  b_col_.resize(nB);
  b_val_.resize(nB);
  for (std::size_t q = 0; q < nB; ++q) {
    b_col_[q] = col_of[bperm[q]];
    b_val_[q] = static_cast<double>(B.vals[bperm[q]]);
  }
  col_of = {};
  bperm = {};
  const std::size_t ngroups = g_start_.size() - 1;
  g_plain_.assign(ngroups, 1);
  std::vector<std::pair<u32, double>> tmp;
  for (std::size_t g = 0; g < ngroups; ++g) {
    const auto lo = static_cast<std::size_t>(g_start_[g]),
               hi = static_cast<std::size_t>(g_start_[g + 1]);
    std::size_t q = lo + 1;
    while (q < hi && b_col_[q] > b_col_[q - 1]) ++q;
    if (q == hi) continue;  // strictly ascending
    tmp.clear();
    for (std::size_t i = lo; i < hi; ++i) tmp.emplace_back(b_col_[i], b_val_[i]);
    std::stable_sort(tmp.begin(), tmp.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    for (std::size_t i = lo; i < hi; ++i) {
      b_col_[i] = tmp[i - lo].first;
      b_val_[i] = tmp[i - lo].second;
      if (i > lo && b_col_[i] == b_col_[i - 1]) g_plain_[g] = 0;
    }
  }

  // ---- the match: every row-side nonzero's group ----
  a_group_.resize(nA);
  {
    const auto n = static_cast<std::int64_t>(nA);
    const int Tm = static_cast<int>(std::max<std::size_t>(
        1, std::min<std::size_t>(static_cast<std::size_t>(threads_), nA >> 15)));
#pragma omp parallel for schedule(static) num_threads(Tm)
    for (std::int64_t q = 0; q < n; ++q)
      a_group_[static_cast<std::size_t>(q)] = lookup(akey[aperm[static_cast<std::size_t>(q)]]);
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
  chunks_ = row_chunks(row_prod_, 16 * threads_);
}

template <typename T>
template <typename Acc>
std::size_t CpuContractPlan<T>::count_rows_with() {
  const auto nchunks = static_cast<std::int64_t>(chunks_.size()) - 1;
  std::size_t acc_bytes = 0;
#pragma omp parallel num_threads(row_team()) reduction(max : acc_bytes)
  {
    Acc acc(ncols_);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t ch = 0; ch < nchunks; ++ch)
      for (std::int64_t r = chunks_[static_cast<std::size_t>(ch)];
           r < chunks_[static_cast<std::size_t>(ch) + 1]; ++r) {
        const std::int64_t prod = row_prod_[static_cast<std::size_t>(r)];
        if (prod <= 1 || single_group(r, prod) >= 0) {
          row_off_[static_cast<std::size_t>(r) + 1] = prod;
          continue;
        }
        acc.begin(static_cast<u64>(prod), 0);
        u64 distinct = 0;
        for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
             q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
          const u32 g = a_group_[static_cast<std::size_t>(q)];
          if (g == kNone) continue;
          distinct += acc.note(b_col_.data() + g_start_[g], g_start_[g + 1] - g_start_[g]);
        }
        row_off_[static_cast<std::size_t>(r) + 1] = static_cast<std::int64_t>(distinct);
        acc.clear();
      }
    acc_bytes = acc.bytes();
  }
  return acc_bytes;
}

template <typename T>
void CpuContractPlan<T>::count_rows() {
  const auto nrows = static_cast<std::int64_t>(row_rep_.size());
  row_off_.assign(static_cast<std::size_t>(nrows) + 1, 0);
  const std::size_t acc_bytes =
      dense_acc() ? count_rows_with<DenseRow>() : count_rows_with<HashRow>();
  for (std::int64_t r = 0; r < nrows; ++r) {
    const std::int64_t n = row_off_[static_cast<std::size_t>(r) + 1];
    max_row_entries_ = std::max(max_row_entries_, n);
    int matched = 0;  // the run merges rows of at most kMergeGroups matched nonzeros
    for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
         q < r_start_[static_cast<std::size_t>(r) + 1] && matched <= kMergeGroups; ++q)
      matched += a_group_[static_cast<std::size_t>(q)] != kNone ? 1 : 0;
    if (matched <= kMergeGroups) max_merge_entries_ = std::max(max_merge_entries_, n);
    row_off_[static_cast<std::size_t>(r) + 1] += row_off_[static_cast<std::size_t>(r)];
  }
  const std::int64_t entries = row_off_.back();
  TESSERA_INPUT_CHECK(static_cast<u64>(entries) <= kMaxEntries,
                      "SpTC (cpu backend): the output has " << entries
                                                            << " entries on one rank, more than "
                                                               "2^32 - 2; use more ranks");
  count_.output_entries = entries;
  count_.output_bytes = static_cast<std::size_t>(entries) * contract_entry_bytes(spec_, sizeof(T));
  const auto E = static_cast<std::size_t>(entries);
  // The run: per-thread accumulators and row buffers (a row's columns, the two buffers of
  // merge_groups), kept counts, and for a final sort the keys, the permutation and a gather
  // buffer (each doubled by the radix sort).
  const auto row_buf =
      static_cast<std::size_t>(max_row_entries_) * sizeof(u32) +
      static_cast<std::size_t>(max_merge_entries_) * 2 * (sizeof(u32) + sizeof(double));
  std::size_t run = static_cast<std::size_t>(threads_) * (acc_bytes + row_buf) +
                    row_rep_.size() * sizeof(std::int64_t);
  if (!natural_) run += 2 * E * (sizeof(u64) + sizeof(u32)) + E * sizeof(double);
  count_.workspace_bytes = std::max(build_peak_, held_bytes() + run);
}

template <typename T>
template <typename Acc, int NB>
void CpuContractPlan<T>::multiply_with(SparseTensor<T>& out,
                                       std::vector<std::int64_t>& kept) const {
  const SparseTensor<T>& A = *A_;
  const auto nchunks = static_cast<std::int64_t>(chunks_.size()) - 1;
  const std::size_t na = a_out_.size(), nb = b_out_.size();
#pragma omp parallel num_threads(row_team())
  {
    Acc acc(ncols_);
    // NB = 0: a row's kept columns, then their coordinates gathered mode by mode.
    std::vector<u32> cbuf(NB == 0 ? static_cast<std::size_t>(max_row_entries_) : 0);
    // merge_groups: two (column, sum) buffers.
    std::vector<u32> mc(2 * static_cast<std::size_t>(max_merge_entries_));
    std::vector<double> mv(2 * static_cast<std::size_t>(max_merge_entries_));
    index_t* ai[kMaxOrder];
    index_t* bi[kMaxOrder];
    const index_t* acol[kMaxOrder];
    for (std::size_t j = 0; j < na; ++j) {
      ai[j] = out.idx[static_cast<std::size_t>(a_out_[j])].data();
      acol[j] =
          A.idx[static_cast<std::size_t>(s_.out_mode[static_cast<std::size_t>(a_out_[j])])].data();
    }
    for (std::size_t j = 0; j < nb; ++j)
      bi[j] = out.idx[static_cast<std::size_t>(b_out_[j])].data();
    T* ov = out.vals.data();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t ch = 0; ch < nchunks; ++ch)
      for (std::int64_t r = chunks_[static_cast<std::size_t>(ch)];
           r < chunks_[static_cast<std::size_t>(ch) + 1]; ++r) {
        const std::int64_t entries =
            row_off_[static_cast<std::size_t>(r) + 1] - row_off_[static_cast<std::size_t>(r)];
        if (entries == 0) continue;
        const auto o = static_cast<std::size_t>(row_off_[static_cast<std::size_t>(r)]);
        std::size_t k = 0;
        u32* cb = cbuf.data();
        T* vo = ov + o;
        index_t* b0 = NB >= 1 ? bi[0] + o : nullptr;
        index_t* b1 = NB >= 2 ? bi[1] + o : nullptr;
        const index_t* cc = col_coord_.data();
        auto keep = [&](u32 c, double v) {
          const T tv = static_cast<T>(v);
          if constexpr (NB == 0) cb[k] = c;
          if constexpr (NB >= 1) b0[k] = cc[c];
          if constexpr (NB >= 2) b1[k] = cc[ncols_ + c];
          vo[k] = tv;
          k += tv != T(0) ? 1 : 0;  // exact zero: dropped (overwritten by the next entry)
        };
        // The row's matched nonzeros when they are at most kMergeGroups, of groups without
        // repeated columns; else few = -1.
        std::int64_t qs[kMergeGroups];
        int few = 0;
        for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
             q < r_start_[static_cast<std::size_t>(r) + 1] && few >= 0; ++q) {
          const u32 g = a_group_[static_cast<std::size_t>(q)];
          if (g == kNone) continue;
          few = few < kMergeGroups && g_plain_[g] != 0 ? few : -1;
          if (few >= 0) qs[few++] = q;
        }
        if (few == 1) {  // the row is one group, scaled
          const u32 g = a_group_[static_cast<std::size_t>(qs[0])];
          const double av = a_val_[static_cast<std::size_t>(qs[0])];
          for (std::int64_t i = g_start_[g]; i < g_start_[g + 1]; ++i)
            keep(b_col_[static_cast<std::size_t>(i)], av * b_val_[static_cast<std::size_t>(i)]);
        } else if (few > 1) {
          detail::ScaledGroup gs[kMergeGroups];
          for (int i = 0; i < few; ++i) gs[i] = scaled_group(qs[i]);
          detail::merge_groups(gs, few, mc.data(), mv.data(), mc.size() / 2, keep);
        } else {
          acc.begin(static_cast<u64>(entries),
                    static_cast<u64>(r_start_[static_cast<std::size_t>(r) + 1] -
                                     r_start_[static_cast<std::size_t>(r)]));
          for (std::int64_t q = r_start_[static_cast<std::size_t>(r)];
               q < r_start_[static_cast<std::size_t>(r) + 1]; ++q) {
            const u32 g = a_group_[static_cast<std::size_t>(q)];
            if (g == kNone) continue;
            acc.add(b_col_.data() + g_start_[g], b_val_.data() + g_start_[g],
                    g_start_[g + 1] - g_start_[g], a_val_[static_cast<std::size_t>(q)]);
          }
          acc.drain(keep);
        }
        const u32 rep = row_rep_[static_cast<std::size_t>(r)];
        for (std::size_t j = 0; j < na; ++j) std::fill(ai[j] + o, ai[j] + o + k, acol[j][rep]);
        if constexpr (NB == 0)
          for (std::size_t j = 0; j < nb; ++j) {
            const index_t* ccj = cc + j * ncols_;
            index_t* dst = bi[j] + o;
            for (std::size_t i = 0; i < k; ++i) dst[i] = ccj[cb[i]];
          }
        kept[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(k);
      }
  }
}

template <typename T>
SparseTensor<T> CpuContractPlan<T>::run(ContractStats* stats) const {
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
  size_output(out, E, threads_);
  const auto nrows = static_cast<std::int64_t>(row_rep_.size());
  std::vector<std::int64_t> kept(static_cast<std::size_t>(nrows), 0);
  if (dense_acc())
    multiply_rows<DenseRow>(out, kept);
  else
    multiply_rows<HashRow>(out, kept);
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

}  // namespace tessera::kernels
