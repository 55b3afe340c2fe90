// Reference SpTC: plain loops, products summed in double. The ground truth the other
// backends are tested against (kernels/sptc.hpp).
#include "kernels/sptc.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "kernels/mttkrp.hpp"
#include "kernels/ops/sptc.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::kernels::reference {

namespace {

/// Outputs of at most this many cells accumulate into a dense array.
constexpr unsigned __int128 kDenseCells = std::uint64_t(1) << 24;

/// Y's nonzeros sorted (stably) by their matched coordinates, with those coordinates
/// copied in that order; X's nonzeros look up the run of Y nonzeros with the same matched
/// coordinates by binary search.
template <typename T>
class Matcher {
 public:
  Matcher(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& s)
      : x_(x), s_(s), nk_(s.x_key.size()), perm_(static_cast<std::size_t>(y.nnz())) {
    std::iota(perm_.begin(), perm_.end(), nnz_t{0});
    std::stable_sort(perm_.begin(), perm_.end(), [&](nnz_t a, nnz_t b) {
      for (int yk : s_.y_key) {
        const index_t ca = y.idx[static_cast<std::size_t>(yk)][static_cast<std::size_t>(a)];
        const index_t cb = y.idx[static_cast<std::size_t>(yk)][static_cast<std::size_t>(b)];
        if (ca != cb) return ca < cb;
      }
      return false;
    });
    keys_.resize(perm_.size() * nk_);
    for (std::size_t p = 0; p < perm_.size(); ++p)
      for (std::size_t c = 0; c < nk_; ++c)
        keys_[p * nk_ + c] =
            y.idx[static_cast<std::size_t>(s_.y_key[c])][static_cast<std::size_t>(perm_[p])];
    // Y's values and its output coordinates, in the sorted order too (sequential reads).
    for (int o = 0; o < s_.out_order(); ++o)
      if (s_.out_from_y[static_cast<std::size_t>(o)]) out_y_.push_back(o);
    ny_ = out_y_.size();
    ycoord_.resize(perm_.size() * ny_);
    yval_.resize(perm_.size());
    for (std::size_t p = 0; p < perm_.size(); ++p) {
      const auto j = static_cast<std::size_t>(perm_[p]);
      for (std::size_t q = 0; q < ny_; ++q)
        ycoord_[p * ny_ + q] =
            y.idx[static_cast<std::size_t>(s_.out_mode[static_cast<std::size_t>(out_y_[q])])][j];
      yval_[p] = static_cast<double>(y.vals[j]);
    }
  }
  /// Positions [first, last) in Y's sorted order of the Y nonzeros matching X nonzero k.
  std::pair<std::size_t, std::size_t> range(nnz_t k) const {
    index_t key[kMaxOrder];
    for (std::size_t c = 0; c < nk_; ++c)
      key[c] = x_.idx[static_cast<std::size_t>(s_.x_key[c])][static_cast<std::size_t>(k)];
    // -1: the Y key at position p is smaller than X's, 0 equal, 1 larger.
    auto cmp = [&](std::size_t p) {
      for (std::size_t c = 0; c < nk_; ++c)
        if (keys_[p * nk_ + c] != key[c]) return keys_[p * nk_ + c] < key[c] ? -1 : 1;
      return 0;
    };
    std::size_t lo = 0, hi = perm_.size();
    while (lo < hi) {  // first position with key >= X's
      const std::size_t mid = (lo + hi) / 2;
      if (cmp(mid) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    std::size_t end = lo;
    while (end < perm_.size() && cmp(end) == 0) ++end;
    return {lo, end};
  }
  /// Output positions taken from Y, and their coordinates / the value of sorted Y
  /// nonzero `pos`.
  const std::vector<int>& out_y() const { return out_y_; }
  const index_t* y_coords(std::size_t pos) const { return ycoord_.data() + pos * ny_; }
  double y_value(std::size_t pos) const { return yval_[pos]; }

 private:
  const SparseTensor<T>& x_;
  const ContractSpec& s_;
  std::size_t nk_;
  std::vector<nnz_t> perm_;
  std::vector<index_t> keys_;  // nk_ matched coordinates per sorted Y nonzero
  std::vector<int> out_y_;
  std::size_t ny_ = 0;
  std::vector<index_t> ycoord_;  // ny_ output coordinates per sorted Y nonzero
  std::vector<double> yval_;
};

/// Number of output cells (product of the dims) when it fits in 128 bits, else 2^127.
unsigned __int128 cell_count(const std::vector<std::uint64_t>& d) {
  unsigned __int128 n = 1;
  const unsigned __int128 cap = static_cast<unsigned __int128>(1) << 127;
  for (auto v : d) {
    if (n > cap / v) return cap;
    n *= v;
  }
  return n;
}

std::uint64_t linearize(const index_t* c, const std::vector<std::uint64_t>& d) {
  std::uint64_t l = 0;
  for (std::size_t m = 0; m < d.size(); ++m) l = l * d[m] + c[m];
  return l;
}
void delinearize(std::uint64_t l, const std::vector<std::uint64_t>& d, index_t* c) {
  for (std::size_t m = d.size(); m-- > 0;) {
    c[m] = static_cast<index_t>(l % d[m]);
    l /= d[m];
  }
}

template <typename T>
std::vector<std::uint64_t> checked_dims(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                        const ContractSpec& s) {
  auto dims = contract_output_dims(s, x.dims, y.dims);
  check_kernel_input(x);
  check_kernel_input(y);
  return dims;
}

/// Calls f(out_coords, x_value, y_value) for every pair of matching nonzeros: X in
/// storage order, then its matches in Y's sorted order. Values as double.
template <typename T, typename F>
void for_each_product(const SparseTensor<T>& x, const ContractSpec& s, const Matcher<T>& match,
                      F&& f) {
  index_t c[kMaxOrder];
  const auto& oy = match.out_y();
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    const auto [first, last] = match.range(k);
    if (first == last) continue;
    for (int o = 0; o < s.out_order(); ++o)
      if (!s.out_from_y[static_cast<std::size_t>(o)])
        c[o] = x.idx[static_cast<std::size_t>(s.out_mode[static_cast<std::size_t>(o)])]
                    [static_cast<std::size_t>(k)];
    const double xv = static_cast<double>(x.vals[static_cast<std::size_t>(k)]);
    for (std::size_t p = first; p < last; ++p) {
      const index_t* yc = match.y_coords(p);
      for (std::size_t q = 0; q < oy.size(); ++q) c[oy[q]] = yc[q];
      f(c, xv, match.y_value(p));
    }
  }
}

}  // namespace

template <typename T>
SparseTensor<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& s,
                         ContractStats* stats) {
  const auto dims = checked_dims(x, y, s);
  ContractStats st;
  Timer t;
  const Matcher<T> match(x, y, s);
  st.match_seconds = t.seconds();
  t.reset();

  SparseTensor<T> out(dims);
  const int N = s.out_order();
  auto emit = [&](const index_t* c, double v) {
    ++st.output_entries;
    const T tv = static_cast<T>(v);
    if (tv == T(0)) return;  // exact zero: dropped
    out.push_back(c, tv);
  };
  const unsigned __int128 cells = cell_count(dims);
  if (cells <= kDenseCells) {
    std::vector<double> acc(static_cast<std::size_t>(cells), 0.0);
    std::vector<char> hit(static_cast<std::size_t>(cells), 0);
    for_each_product(x, s, match, [&](const index_t* c, double xv, double yv) {
      const std::uint64_t l = linearize(c, dims);
      acc[l] += xv * yv;
      hit[l] = 1;
      ++st.products;
    });
    st.multiply_seconds = t.seconds();
    t.reset();
    index_t c[kMaxOrder];
    for (std::uint64_t l = 0; l < static_cast<std::uint64_t>(cells); ++l)
      if (hit[l]) {
        delinearize(l, dims, c);
        emit(c, acc[l]);
      }
  } else if (cells <= (static_cast<unsigned __int128>(1) << 64)) {
    std::unordered_map<std::uint64_t, double> acc;
    for_each_product(x, s, match, [&](const index_t* c, double xv, double yv) {
      acc[linearize(c, dims)] += xv * yv;
      ++st.products;
    });
    st.multiply_seconds = t.seconds();
    t.reset();
    std::vector<std::pair<std::uint64_t, double>> e(acc.begin(), acc.end());
    std::sort(e.begin(), e.end());
    index_t c[kMaxOrder];
    for (const auto& [l, v] : e) {
      delinearize(l, dims, c);
      emit(c, v);
    }
  } else {
    std::map<std::vector<index_t>, double> acc;
    for_each_product(x, s, match, [&](const index_t* c, double xv, double yv) {
      acc[std::vector<index_t>(c, c + N)] += xv * yv;
      ++st.products;
    });
    st.multiply_seconds = t.seconds();
    t.reset();
    for (const auto& [c, v] : acc) emit(c.data(), v);
  }
  st.assemble_seconds = t.seconds();
  st.output_nnz = out.nnz();
  st.zeros_dropped = st.output_entries - st.output_nnz;
  if (stats) *stats = st;
  return out;
}

template <typename T>
ContractCount contract_count(const SparseTensor<T>& x, const SparseTensor<T>& y,
                             const ContractSpec& s) {
  const auto dims = checked_dims(x, y, s);
  const Matcher<T> match(x, y, s);
  ContractCount n;
  const int N = s.out_order();
  const unsigned __int128 cells = cell_count(dims);
  std::size_t acc_bytes = 0;
  if (cells <= kDenseCells) {
    std::vector<char> hit(static_cast<std::size_t>(cells), 0);
    for_each_product(x, s, match, [&](const index_t* c, double, double) {
      hit[linearize(c, dims)] = 1;
      ++n.products;
    });
    n.output_entries = std::count(hit.begin(), hit.end(), char{1});
    acc_bytes = static_cast<std::size_t>(cells) * (sizeof(double) + 1);
  } else if (cells <= (static_cast<unsigned __int128>(1) << 64)) {
    std::unordered_set<std::uint64_t> seen;
    for_each_product(x, s, match, [&](const index_t* c, double, double) {
      seen.insert(linearize(c, dims));
      ++n.products;
    });
    n.output_entries = static_cast<std::int64_t>(seen.size());
    // A hash node (key, value, next pointer) plus its bucket, and the sorted copy.
    acc_bytes = static_cast<std::size_t>(n.output_entries) * (48 + 16);
  } else {
    std::set<std::vector<index_t>> seen;
    for_each_product(x, s, match, [&](const index_t* c, double, double) {
      seen.insert(std::vector<index_t>(c, c + N));
      ++n.products;
    });
    n.output_entries = static_cast<std::int64_t>(seen.size());
    acc_bytes = static_cast<std::size_t>(n.output_entries) *
                (64 + static_cast<std::size_t>(N) * sizeof(index_t) + 8);
  }
  n.output_bytes = static_cast<std::size_t>(n.output_entries) * contract_entry_bytes(s, sizeof(T));
  n.workspace_bytes =
      static_cast<std::size_t>(y.nnz()) * (sizeof(nnz_t) + s.x_key.size() * sizeof(index_t)) +
      acc_bytes;
  return n;
}

namespace {

template <typename T>
class ReferenceContractPlan final : public ContractPlan<T> {
 public:
  ReferenceContractPlan(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& s)
      : x_(x), y_(y), s_(s), dims_(contract_output_dims(s, x.dims, y.dims)) {
    Timer t;
    count_ = contract_count(x, y, s);
    count_s_ = t.seconds();
  }
  const ContractSpec& spec() const override { return s_; }
  const std::vector<std::uint64_t>& output_dims() const override { return dims_; }
  const ContractCount& count() const override { return count_; }
  double match_seconds() const override { return 0; }
  double count_seconds() const override { return count_s_; }
  SparseTensor<T> run(ContractStats* stats) const {
    ContractStats st;
    auto z = contract(x_, y_, s_, &st);
    st.count_seconds = count_s_;
    st.workspace_bytes = count_.workspace_bytes;
    if (stats) *stats = st;
    return z;
  }

 private:
  const SparseTensor<T>& x_;
  const SparseTensor<T>& y_;
  ContractSpec s_;
  std::vector<std::uint64_t> dims_;
  ContractCount count_;
  double count_s_ = 0;
};

}  // namespace

template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                               const ContractSpec& spec) {
  return std::make_unique<ReferenceContractPlan<T>>(x, y, spec);
}
template <typename T>
SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats) {
  const auto* p = dynamic_cast<const ReferenceContractPlan<T>*>(&plan);
  TESSERA_EXPECTS(p != nullptr, "contraction plan was made by another backend");
  return p->run(stats);
}

template std::unique_ptr<ContractPlan<float>> plan_contract<float>(const SparseTensor<float>&,
                                                                   const SparseTensor<float>&,
                                                                   const ContractSpec&);
template std::unique_ptr<ContractPlan<double>> plan_contract<double>(const SparseTensor<double>&,
                                                                     const SparseTensor<double>&,
                                                                     const ContractSpec&);
template SparseTensor<float> contract<float>(ContractPlan<float>&, ContractStats*);
template SparseTensor<double> contract<double>(ContractPlan<double>&, ContractStats*);

template SparseTensor<float> contract<float>(const SparseTensor<float>&, const SparseTensor<float>&,
                                             const ContractSpec&, ContractStats*);
template SparseTensor<double> contract<double>(const SparseTensor<double>&,
                                               const SparseTensor<double>&, const ContractSpec&,
                                               ContractStats*);
template ContractCount contract_count<float>(const SparseTensor<float>&, const SparseTensor<float>&,
                                             const ContractSpec&);
template ContractCount contract_count<double>(const SparseTensor<double>&,
                                              const SparseTensor<double>&, const ContractSpec&);

// ---- the operations (kernels/ops/sptc.hpp) ----

template <typename T>
std::unique_ptr<ContractPlan<T>> contract_plan(Backend<T>& be, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec) {
  (void)be;
  return reference::plan_contract(x, y, spec);
}
template <typename T>
SparseTensor<T> contract(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats) {
  (void)be;
  return reference::contract(plan, stats);
}
// The host backends (this one and cpu) have no contraction into a sink and no routed path.
template <typename T>
bool contract_into(Backend<T>& be, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink) {
  (void)be, (void)plan, (void)stats, (void)sink;
  return false;
}
template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Backend<T>& be, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks) {
  (void)be, (void)x, (void)y, (void)spec, (void)ranks;
  return nullptr;
}

TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_PLAN_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_INTO_OP);
TESSERA_INSTANTIATE_OP(TESSERA_CONTRACT_ROUTE_OP);

}  // namespace tessera::kernels::reference
