// OpenMP TTMc on the compressed sparse fiber trees of cpu::build_csf.
//
// In the tree rooted at the output mode n (levels l = 0..N-1, level l holding mode p_l),
// the value of a level-l node f (l >= 1) is v_f = U_{p_l}(f, :) (x) (sum of its children's
// values), and a leaf's value is val * U_{p_{N-1}}(leaf, :). A root's output row is the
// sum of its children's values. So each nonzero costs one axpy of length R_{p_{N-1}}, and
// a level-l node one Kronecker update of length R_{p_l} * prod_{j > l} R_{p_j}, paid once per
// fiber instead of once per nonzero (for order 3: t = sum_k val * U_k(k, :) per fiber
// (i, j), then Y(i, :) += U_j(j, :) (x) t).
//
// The tree puts the other modes by increasing length, not by mode number, so the rows
// come out with the Kronecker factors in tree order; one gather per row puts the columns
// into the documented order (increasing mode number, last fastest). The gather is skipped
// when the two orders agree.
#include "kernels/ttmc.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "kernels/cpu/csf.hpp"
#include "kernels/cpu/team.hpp"
#include "util/error.hpp"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
struct TtmcCtx {
  int N = 0;
  std::array<const index_t*, kMaxOrder> fids{};
  std::array<const csf_ptr_t*, kMaxOrder> fptr{};
  std::array<const T*, kMaxOrder> U{};         ///< U[l]: factor of mode_at_level[l] (U[0] unused)
  std::array<std::size_t, kMaxOrder> R{};      ///< R[l]: its rank
  std::array<std::size_t, kMaxOrder + 1> L{};  ///< L[l] = prod_{j >= l} R[j], l >= 1; L[N] = 1
  const T* vals = nullptr;
  std::size_t cols = 0;                  ///< L[1]
  const std::int64_t* gather = nullptr;  ///< output column c = tree column gather[c]; null: same
};

/// acc (length L[l]) += sum of the values of the level-l nodes [b, e). w[l] (length
/// L[l + 1]) is this level's scratch for the sum of a node's children.
template <typename T>
void accumulate(const TtmcCtx<T>& c, int l, csf_ptr_t b, csf_ptr_t e, T* __restrict acc,
                T* const* w) {
  const std::size_t R = c.R[l];
  const T* __restrict U = c.U[l];
  const index_t* id = c.fids[l];
  if (l == c.N - 1) {
    for (csf_ptr_t f = b; f < e; ++f) {
      const T v = c.vals[f];
      const T* __restrict u = U + static_cast<std::size_t>(id[f]) * R;
#pragma omp simd
      for (std::size_t r = 0; r < R; ++r) acc[r] += v * u[r];
    }
    return;
  }
  const std::size_t Lc = c.L[l + 1];
  T* __restrict t = w[l];
  const csf_ptr_t* fp = c.fptr[l];
  for (csf_ptr_t f = b; f < e; ++f) {
    std::fill(t, t + Lc, T(0));
    accumulate(c, l + 1, fp[f], fp[f + 1], t, w);
    const T* __restrict u = U + static_cast<std::size_t>(id[f]) * R;
    for (std::size_t r = 0; r < R; ++r) {
      const T ur = u[r];
      T* __restrict a = acc + r * Lc;
#pragma omp simd
      for (std::size_t q = 0; q < Lc; ++q) a[q] += ur * t[q];
    }
  }
}

/// Per-thread scratch: one buffer per inner level and one row in tree column order.
template <typename T>
struct Scratch {
  std::vector<T> mem;
  std::array<T*, kMaxOrder> w{};
  T* row = nullptr;
  explicit Scratch(const TtmcCtx<T>& c) {
    std::size_t n = c.cols;
    for (int l = 1; l < c.N - 1; ++l) n += c.L[l + 1];
    mem.resize(n);
    row = mem.data();
    std::size_t off = c.cols;
    for (int l = 1; l < c.N - 1; ++l) {
      w[l] = mem.data() + off;
      off += c.L[l + 1];
    }
  }
};

/// out (cols) = the sum of the values of the level-1 nodes [b, e), in output column order.
template <typename T>
void row_range(const TtmcCtx<T>& c, csf_ptr_t b, csf_ptr_t e, T* out, Scratch<T>& s) {
  T* dst = c.gather ? s.row : out;
  std::fill(dst, dst + c.cols, T(0));
  accumulate(c, 1, b, e, dst, s.w.data());
  if (c.gather)
    for (std::size_t q = 0; q < c.cols; ++q) out[q] = dst[c.gather[q]];
}

/// Nonzeros before level-1 node `ch` (its first leaf).
template <typename T>
csf_ptr_t leaf_start(const TtmcCtx<T>& c, csf_ptr_t ch) {
  for (int l = 1; l < c.N - 1; ++l) ch = c.fptr[l][ch];
  return ch;
}

template <typename T>
void run_slices(const TtmcCtx<T>& c, csf_ptr_t nroots, T* out, std::vector<Scratch<T>>& scratch) {
  const int nt = static_cast<int>(scratch.size());
  const csf_ptr_t* rp = c.fptr[0];
  const csf_ptr_t grain = std::max<csf_ptr_t>(1, nroots / (static_cast<csf_ptr_t>(nt) * 64));
#pragma omp parallel num_threads(nt)
  {
    Scratch<T>& s = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, grain)
    for (csf_ptr_t r = 0; r < nroots; ++r)
      row_range(c, rp[r], rp[r + 1], out + static_cast<std::size_t>(r) * c.cols, s);
  }
}

template <typename T>
void run_chunks(const TtmcCtx<T>& c, csf_ptr_t nroots, T* out, std::vector<Scratch<T>>& scratch) {
  // Chunks of level-1 nodes balanced by nonzeros. The chunk holding a row's first level-1
  // node writes that row; a chunk whose first row started in an earlier chunk (at most one
  // per chunk) sums its piece into a private partial row, added after the parallel loop.
  const int nt = static_cast<int>(scratch.size());
  const csf_ptr_t* rp = c.fptr[0];
  const csf_ptr_t n1 = rp[nroots];
  const csf_ptr_t nchunks = std::max<csf_ptr_t>(1, std::min<csf_ptr_t>(n1, 8 * nt));
  const std::vector<csf_ptr_t> bounds =
      balanced_chunks(n1, nchunks, [&](csf_ptr_t i) { return leaf_start(c, i); });
  // Root holding level-1 node `ch`.
  auto root_of = [&](csf_ptr_t ch) {
    return static_cast<csf_ptr_t>(std::upper_bound(rp, rp + nroots + 1, ch) - rp) - 1;
  };
  std::vector<std::int64_t> slot(static_cast<std::size_t>(nchunks), -1);
  std::int64_t nslots = 0;
  for (csf_ptr_t i = 0; i < nchunks; ++i) {
    const csf_ptr_t c0 = bounds[static_cast<std::size_t>(i)];
    if (c0 < bounds[static_cast<std::size_t>(i) + 1] && rp[root_of(c0)] != c0)
      slot[static_cast<std::size_t>(i)] = nslots++;
  }
  std::vector<T> partial(static_cast<std::size_t>(nslots) * c.cols);
#pragma omp parallel num_threads(nt)
  {
    Scratch<T>& s = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (csf_ptr_t i = 0; i < nchunks; ++i) {
      const csf_ptr_t c0 = bounds[static_cast<std::size_t>(i)];
      const csf_ptr_t c1 = bounds[static_cast<std::size_t>(i) + 1];
      if (c0 >= c1) continue;
      for (csf_ptr_t r = root_of(c0); r < nroots && rp[r] < c1; ++r) {
        const csf_ptr_t cb = std::max(rp[r], c0), ce = std::min(rp[r + 1], c1);
        T* dst = cb == rp[r]
                     ? out + static_cast<std::size_t>(r) * c.cols
                     : partial.data() +
                           static_cast<std::size_t>(slot[static_cast<std::size_t>(i)]) * c.cols;
        row_range(c, cb, ce, dst, s);
      }
    }
  }
  for (csf_ptr_t i = 0; i < nchunks; ++i) {
    const std::int64_t p = slot[static_cast<std::size_t>(i)];
    if (p < 0) continue;
    T* o = out + static_cast<std::size_t>(root_of(bounds[static_cast<std::size_t>(i)])) * c.cols;
    const T* q = partial.data() + static_cast<std::size_t>(p) * c.cols;
    for (std::size_t k = 0; k < c.cols; ++k) o[k] += q[k];
  }
}

}  // namespace

template <typename T>
TtmcPlan<T>::TtmcPlan(std::unique_ptr<CsfSet<T>> csf, int threads)
    : owned_(std::move(csf)), csf_(owned_.get()), threads_(team_size(threads)) {
  TESSERA_EXPECTS(csf_ != nullptr, "TtmcPlan needs a CSF set");
  count_rows();
}

template <typename T>
TtmcPlan<T>::TtmcPlan(const CsfSet<T>& csf, int threads)
    : csf_(&csf), threads_(team_size(threads)) {
  count_rows();
}

template <typename T>
void TtmcPlan<T>::count_rows() {
  const int N = csf_->order();
  for (int m = 0; m < N; ++m) {
    const CsfTree<T>& t = csf_->tree(m);
    if (N >= 2) {
      distinct_rows_.push_back(static_cast<std::int64_t>(t.nodes(0)));
    } else {  // order 1: the only level is the leaf level, repeats stay separate leaves
      const auto& id = t.fids[0];
      std::int64_t n = 0;
      for (std::size_t k = 0; k < id.size(); ++k) n += (k == 0 || id[k] != id[k - 1]) ? 1 : 0;
      distinct_rows_.push_back(n);
    }
  }
}

template <typename T>
TtmcPlan<T>::~TtmcPlan() = default;

template <typename T>
int TtmcPlan<T>::order() const {
  return csf_->order();
}
template <typename T>
nnz_t TtmcPlan<T>::nnz() const {
  return csf_->nnz();
}
template <typename T>
const std::vector<std::uint64_t>& TtmcPlan<T>::dims() const {
  return csf_->dims();
}
template <typename T>
std::int64_t TtmcPlan<T>::distinct_rows(int mode) const {
  TESSERA_EXPECTS(mode >= 0 && mode < order(), "mode " << mode << " outside 0.." << order() - 1);
  return distinct_rows_[static_cast<std::size_t>(mode)];
}

template <typename T>
std::unique_ptr<TtmcPlan<T>> plan_ttmc(const SparseTensor<T>& x, int threads) {
  return std::make_unique<TtmcPlan<T>>(build_csf(x, threads), threads);
}

template <typename T>
std::vector<index_t> ttmc_rows(const TtmcPlan<T>& plan, int mode) {
  const int N = plan.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  const auto& id = plan.csf().tree(mode).fids[0];
  if (N >= 2) return id;
  std::vector<index_t> rows;  // order 1: repeats stay separate leaves
  for (std::size_t k = 0; k < id.size(); ++k)
    if (k == 0 || id[k] != id[k - 1]) rows.push_back(id[k]);
  return rows;
}

template <typename T>
std::size_t ttmc_scratch_bytes(const TtmcPlan<T>& plan, int mode, const std::vector<int>& ranks,
                               int threads) {
  const auto cols = static_cast<std::size_t>(ttmc_output_cols(ranks, mode));
  const auto nt = static_cast<std::size_t>(threads > 0 ? threads : plan.threads());
  // Per thread: one row plus level buffers (each at most cols); chunked schedules: at most
  // 8 partial rows per thread; the gather map: cols int64.
  return nt * (2 + 8) * cols * sizeof(T) + cols * sizeof(std::int64_t);
}

template <typename T>
void ttmc_into(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
               const std::vector<int>& ranks, T* out, const TtmcOptions& options) {
  const int N = plan.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  const std::int64_t nrows = plan.distinct_rows(mode);
  const std::int64_t cols64 = detail::ttmc_check_args(N, mode, factors, ranks, nrows, 0);
  const CsfTree<T>& t = plan.csf().tree(mode);
  const auto cols = static_cast<std::size_t>(cols64);

  if (N == 1) {  // cols = 1: each row is the sum of the values at its index
    const auto& id = t.fids[0];
    std::int64_t r = -1;
    for (std::size_t k = 0; k < id.size(); ++k) {
      if (k == 0 || id[k] != id[k - 1]) out[++r] = T(0);
      out[r] += t.vals[k];
    }
    return;
  }
  if (nrows == 0) return;

  TtmcCtx<T> c;
  c.N = N;
  for (int l = 0; l < N; ++l) {
    c.fids[l] = t.fids[l].data();
    if (l < N - 1) c.fptr[l] = t.fptr[l].data();
    if (l > 0) {
      const int m = t.mode_at_level[l];
      c.U[l] = factors[static_cast<std::size_t>(m)];
      c.R[l] = static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)]);
    }
  }
  c.L[N] = 1;
  for (int l = N - 1; l >= 1; --l) c.L[l] = c.L[l + 1] * c.R[l];
  c.cols = cols;
  c.vals = t.vals.data();

  // Gather map from tree column order (level N-1 fastest) to output column order (mode
  // N-1 fastest), unless they agree.
  std::vector<std::int64_t> gather;
  bool same_order = true;
  for (int l = 2; l < N; ++l) same_order &= t.mode_at_level[l - 1] < t.mode_at_level[l];
  if (!same_order) {
    std::array<std::size_t, kMaxOrder> out_stride{};  // by level
    for (int l = 1; l < N; ++l) {
      std::size_t s = 1;
      for (int m = t.mode_at_level[l] + 1; m < N; ++m)
        if (m != mode) s *= static_cast<std::size_t>(ranks[static_cast<std::size_t>(m)]);
      out_stride[l] = s;
    }
    gather.resize(cols);
    std::array<std::size_t, kMaxOrder> digit{};
    std::size_t oc = 0;
    for (std::size_t tc = 0; tc < cols; ++tc) {
      gather[oc] = static_cast<std::int64_t>(tc);
      for (int l = N - 1; l >= 1; --l) {  // next tree column: increment the mixed radix
        oc += out_stride[l];
        if (++digit[l] < c.R[l]) break;
        oc -= digit[l] * out_stride[l];
        digit[l] = 0;
      }
    }
    c.gather = gather.data();
  }

  int nt = options.threads > 0 ? options.threads : plan.threads();
  if (options.min_nnz_per_thread > 0)
    nt = static_cast<int>(std::clamp<std::int64_t>(plan.nnz() / options.min_nnz_per_thread, 1, nt));
  bool slices = true;
  if (options.schedule == Schedule::chunks) {
    slices = false;
  } else if (options.schedule == Schedule::automatic && nt > 1) {
    // Too few or too unequal rows for dynamic scheduling to balance: split by nonzeros.
    slices = nrows >= 16 * static_cast<std::int64_t>(nt) &&
             t.max_slice_nnz * 4 * static_cast<csf_ptr_t>(nt) <= plan.nnz();
  }
  std::vector<Scratch<T>> scratch;
  scratch.reserve(static_cast<std::size_t>(nt));
  for (int i = 0; i < nt; ++i) scratch.emplace_back(c);
  if (slices)
    run_slices(c, static_cast<csf_ptr_t>(nrows), out, scratch);
  else
    run_chunks(c, static_cast<csf_ptr_t>(nrows), out, scratch);
}

template <typename T>
void ttmc(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, SemiSparse<T>& out, std::size_t max_bytes,
          const TtmcOptions& options) {
  const int N = plan.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  const std::int64_t nrows = plan.distinct_rows(mode);
  // Checks (the byte limit included) before anything is allocated.
  out.cols = detail::ttmc_check_args(N, mode, factors, ranks, nrows, max_bytes);
  out.data.resize(static_cast<std::size_t>(nrows) * static_cast<std::size_t>(out.cols));
  out.rows = ttmc_rows(plan, mode);
  ttmc_into(plan, mode, factors, ranks, out.data.data(), options);
}

template <typename T>
SemiSparse<T> ttmc(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
                   const std::vector<int>& ranks, std::size_t max_bytes,
                   const TtmcOptions& options) {
  SemiSparse<T> out;
  ttmc(plan, mode, factors, ranks, out, max_bytes, options);
  return out;
}

template class TtmcPlan<float>;
template class TtmcPlan<double>;
template std::unique_ptr<TtmcPlan<float>> plan_ttmc<float>(const SparseTensor<float>&, int);
template std::unique_ptr<TtmcPlan<double>> plan_ttmc<double>(const SparseTensor<double>&, int);
template void ttmc<float>(const TtmcPlan<float>&, int, const std::vector<const float*>&,
                          const std::vector<int>&, SemiSparse<float>&, std::size_t,
                          const TtmcOptions&);
template void ttmc<double>(const TtmcPlan<double>&, int, const std::vector<const double*>&,
                           const std::vector<int>&, SemiSparse<double>&, std::size_t,
                           const TtmcOptions&);
template std::vector<index_t> ttmc_rows<float>(const TtmcPlan<float>&, int);
template std::vector<index_t> ttmc_rows<double>(const TtmcPlan<double>&, int);
template std::size_t ttmc_scratch_bytes<float>(const TtmcPlan<float>&, int, const std::vector<int>&,
                                               int);
template std::size_t ttmc_scratch_bytes<double>(const TtmcPlan<double>&, int,
                                                const std::vector<int>&, int);
template void ttmc_into<float>(const TtmcPlan<float>&, int, const std::vector<const float*>&,
                               const std::vector<int>&, float*, const TtmcOptions&);
template void ttmc_into<double>(const TtmcPlan<double>&, int, const std::vector<const double*>&,
                                const std::vector<int>&, double*, const TtmcOptions&);
template SemiSparse<float> ttmc<float>(const TtmcPlan<float>&, int,
                                       const std::vector<const float*>&, const std::vector<int>&,
                                       std::size_t, const TtmcOptions&);
template SemiSparse<double> ttmc<double>(const TtmcPlan<double>&, int,
                                         const std::vector<const double*>&, const std::vector<int>&,
                                         std::size_t, const TtmcOptions&);

}  // namespace tessera::kernels::cpu
