// TTMc on every host backend (reference, cpu with 1..3 threads and both schedules), float
// and double, against a brute-force dense computation Y_(n) = X_(n) * kron(U_m, m != n)
// (orders 1..5, unequal ranks) or the reference backend (orders up to 9), plus the edge
// cases: empty tensor, one nonzero, repeated coordinates, a skewed short root mode, and
// the argument checks (max_bytes, ranks, overflow).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/ops/ttmc.hpp"
#include "kernels/ttmc.hpp"
#include "test_util.hpp"
#include "util/error.hpp"

namespace tessera::kernels {
namespace {

using test::fresh_seed;

using test::tol;

struct Shape {
  std::vector<std::uint64_t> dims;
  std::size_t nnz = 0;         ///< nonzeros drawn (before removing repeats)
  bool allow_repeats = false;  ///< keep repeated coordinates (summed by TTMc)
  int skew_mode = -1;          ///< this mode puts ~85% of the nonzeros on index 0
};

/// Random COO tensor; the last index of every mode of length >= 3 stays empty so the
/// output always skips a row. Values in +-[0.25, 1].
template <typename T>
SparseTensor<T> random_tensor(const Shape& s, std::mt19937_64& rng) {
  const int N = static_cast<int>(s.dims.size());
  SparseTensor<T> x(s.dims);
  std::uniform_real_distribution<double> mag(0.25, 1.0);
  std::set<std::vector<index_t>> seen;
  std::vector<index_t> c(static_cast<std::size_t>(N));
  for (std::size_t k = 0; k < s.nnz; ++k) {
    for (int m = 0; m < N; ++m) {
      const std::uint64_t live = s.dims[m] >= 3 ? s.dims[m] - 1 : s.dims[m];
      if (m == s.skew_mode && std::uniform_real_distribution<double>(0, 1)(rng) < 0.85)
        c[m] = 0;
      else
        c[m] = static_cast<index_t>(std::uniform_int_distribution<std::uint64_t>(0, live - 1)(rng));
    }
    if (!s.allow_repeats && !seen.insert(c).second) continue;
    x.push_back(c.data(), static_cast<T>(mag(rng) * ((rng() & 1) ? 1.0 : -1.0)));
  }
  return x;
}

template <typename T>
std::vector<std::vector<T>> random_factors(const std::vector<std::uint64_t>& dims,
                                           const std::vector<int>& ranks, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<std::vector<T>> A(dims.size());
  for (std::size_t m = 0; m < dims.size(); ++m) {
    A[m].resize(dims[m] * static_cast<std::size_t>(ranks[m]));
    for (auto& a : A[m]) a = static_cast<T>(u(rng));
  }
  return A;
}

using test::pointers;

/// All I_mode rows of Y_(mode) = X_(mode) * K, with X_(mode) the dense unfolding and K the
/// dense Kronecker product of the other factors (rows and columns both with the last
/// other mode fastest), in double.
template <typename T>
std::vector<double> dense_ttmc(const SparseTensor<T>& x, int mode,
                               const std::vector<std::vector<T>>& A, const std::vector<int>& ranks,
                               std::size_t& cols) {
  const int N = x.order();
  std::size_t J = 1;
  cols = 1;
  for (int m = 0; m < N; ++m)
    if (m != mode) {
      J *= x.dims[m];
      cols *= static_cast<std::size_t>(ranks[m]);
    }
  const std::size_t I = x.dims[mode];
  std::vector<double> Xn(I * J, 0.0);
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    std::size_t j = 0;
    for (int m = 0; m < N; ++m)
      if (m != mode) j = j * x.dims[m] + x.idx[m][k];
    Xn[x.idx[mode][k] * J + j] += static_cast<double>(x.vals[k]);
  }
  std::vector<double> K(J * cols);
  std::vector<std::size_t> i_of(static_cast<std::size_t>(N)), r_of(static_cast<std::size_t>(N));
  for (std::size_t j = 0; j < J; ++j) {
    std::size_t rest = j;
    for (int m = N - 1; m >= 0; --m)
      if (m != mode) {
        i_of[m] = rest % x.dims[m];
        rest /= x.dims[m];
      }
    for (std::size_t c = 0; c < cols; ++c) {
      std::size_t rc = c;
      double p = 1.0;
      for (int m = N - 1; m >= 0; --m)
        if (m != mode) {
          const auto R = static_cast<std::size_t>(ranks[m]);
          p *= static_cast<double>(A[m][i_of[m] * R + rc % R]);
          rc /= R;
        }
      K[j * cols + c] = p;
    }
  }
  std::vector<double> Y(I * cols, 0.0);
  for (std::size_t i = 0; i < I; ++i)
    for (std::size_t j = 0; j < J; ++j) {
      const double v = Xn[i * J + j];
      if (v == 0.0) continue;
      for (std::size_t c = 0; c < cols; ++c) Y[i * cols + c] += v * K[j * cols + c];
    }
  return Y;
}

template <typename T>
std::vector<index_t> distinct(const SparseTensor<T>& x, int mode) {
  std::vector<index_t> r(x.idx[mode]);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

/// y against the full dense result `full` (dims[mode] x cols): rows are the distinct
/// indices present, every entry finite, relative error in float64 under tol<T>().
template <typename T>
void expect_matches_dense(const SemiSparse<T>& y, const SparseTensor<T>& x, int mode,
                          const std::vector<double>& full, std::size_t cols,
                          const std::string& what) {
  ASSERT_EQ(y.rows, distinct(x, mode)) << what << ": rows are not the distinct indices";
  ASSERT_EQ(y.cols, static_cast<std::int64_t>(cols)) << what;
  ASSERT_EQ(y.data.size(), y.rows.size() * cols) << what;
  double num = 0, den = 0;
  for (std::size_t k = 0; k < y.rows.size(); ++k)
    for (std::size_t c = 0; c < cols; ++c) {
      const double got = static_cast<double>(y.data[k * cols + c]);
      ASSERT_TRUE(std::isfinite(got))
          << what << ": row " << y.rows[k] << " column " << c << " not written or not finite";
      const double want = full[y.rows[k] * cols + c];
      num += (got - want) * (got - want);
      den += want * want;
    }
  if (den == 0)
    EXPECT_EQ(num, 0.0) << what;
  else
    EXPECT_LT(std::sqrt(num / den), tol<T>()) << what;
}

/// y against another semi-sparse result (the reference).
template <typename T>
void expect_matches(const SemiSparse<T>& y, const SemiSparse<T>& ref, const std::string& what) {
  ASSERT_EQ(y.rows, ref.rows) << what;
  ASSERT_EQ(y.cols, ref.cols) << what;
  ASSERT_EQ(y.data.size(), ref.data.size()) << what;
  double num = 0, den = 0;
  for (std::size_t k = 0; k < y.data.size(); ++k) {
    const double got = static_cast<double>(y.data[k]), want = static_cast<double>(ref.data[k]);
    ASSERT_TRUE(std::isfinite(got)) << what << ": entry " << k << " not written or not finite";
    num += (got - want) * (got - want);
    den += want * want;
  }
  if (den == 0)
    EXPECT_EQ(num, 0.0) << what;
  else
    EXPECT_LT(std::sqrt(num / den), tol<T>()) << what;
}

struct CpuVariant {
  int threads;
  cpu::Schedule schedule;
};
std::vector<CpuVariant> cpu_variants() {
  std::vector<CpuVariant> v;
  for (cpu::Schedule s : {cpu::Schedule::automatic, cpu::Schedule::slices, cpu::Schedule::chunks})
    for (int t : {1, 2, 3}) v.push_back({t, s});
  return v;
}
const char* name(cpu::Schedule s) {
  return s == cpu::Schedule::slices ? "slices" : s == cpu::Schedule::chunks ? "chunks" : "auto";
}

/// Output poisoned with NaN (and a wrong row list) at the size the run will produce, so
/// an element the kernel does not write fails the check.
template <typename T>
SemiSparse<T> poisoned(std::size_t rows, std::size_t cols) {
  SemiSparse<T> y;
  y.rows.assign(rows + 1, index_t{7777777});
  y.cols = -1;
  y.data.assign(rows * cols, std::numeric_limits<T>::quiet_NaN());
  return y;
}

/// Runs `check(y, label)` on the reference and every cpu variant for every mode.
template <typename T, typename Check>
void run_all(const SparseTensor<T>& x, const std::vector<std::vector<T>>& A,
             const std::vector<int>& ranks, const std::string& label, Check check) {
  const int N = x.order();
  auto plan = cpu::plan_ttmc(x, 2);
  ASSERT_EQ(plan->order(), N);
  ASSERT_EQ(plan->nnz(), x.nnz());
  for (int m = 0; m < N; ++m) {
    const auto rows = distinct(x, m);
    ASSERT_EQ(plan->distinct_rows(m), static_cast<std::int64_t>(rows.size())) << label;
    std::size_t cols = 1;
    for (int k = 0; k < N; ++k)
      if (k != m) cols *= static_cast<std::size_t>(ranks[k]);
    EXPECT_EQ(ttmc_output_bytes(static_cast<std::int64_t>(rows.size()), ranks, m, sizeof(T)),
              rows.size() * cols * sizeof(T));
    {
      std::ostringstream os;
      os << label << " reference mode " << m;
      check(reference::ttmc(x, m, pointers(A, m), ranks), m, os.str());
    }
    for (const CpuVariant& v : cpu_variants()) {
      cpu::TtmcOptions opt;
      opt.threads = v.threads;
      opt.min_nnz_per_thread = 0;  // full teams even on these small tensors
      opt.schedule = v.schedule;
      auto y = poisoned<T>(rows.size(), cols);
      cpu::ttmc(*plan, m, pointers(A, m), ranks, y, 0, opt);
      std::ostringstream os;
      os << label << " cpu threads " << v.threads << " schedule " << name(v.schedule) << " mode "
         << m;
      check(y, m, os.str());
    }
    // Defaults (team shrunk on a small tensor, automatic schedule), fresh output.
    std::ostringstream os;
    os << label << " cpu defaults mode " << m;
    check(cpu::ttmc(*plan, m, pointers(A, m), ranks), m, os.str());
  }
}

template <typename T>
void check_dense(const Shape& s, const std::vector<int>& ranks, const std::string& what) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>(s, rng);
  const auto A = random_factors<T>(s.dims, ranks, rng);
  std::ostringstream os;
  os << what << " (" << (std::is_same_v<T, double> ? "double" : "float") << ", nnz " << x.nnz()
     << ", seed " << seed << ")";
  std::vector<std::vector<double>> full(static_cast<std::size_t>(x.order()));
  std::vector<std::size_t> cols(static_cast<std::size_t>(x.order()));
  for (int m = 0; m < x.order(); ++m) full[m] = dense_ttmc(x, m, A, ranks, cols[m]);
  run_all(x, A, ranks, os.str(), [&](const SemiSparse<T>& y, int m, const std::string& label) {
    expect_matches_dense(y, x, m, full[m], cols[m], label);
  });
}

template <typename T>
void check_vs_reference(const Shape& s, const std::vector<int>& ranks, const std::string& what) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>(s, rng);
  const auto A = random_factors<T>(s.dims, ranks, rng);
  std::ostringstream os;
  os << what << " (" << (std::is_same_v<T, double> ? "double" : "float") << ", nnz " << x.nnz()
     << ", seed " << seed << ")";
  std::vector<SemiSparse<T>> ref;
  for (int m = 0; m < x.order(); ++m) ref.push_back(reference::ttmc(x, m, pointers(A, m), ranks));
  run_all(x, A, ranks, os.str(), [&](const SemiSparse<T>& y, int m, const std::string& label) {
    expect_matches(y, ref[m], label);
  });
}

template <typename T>
class Ttmc : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Ttmc, Types);

TYPED_TEST(Ttmc, Order3Dense) {
  // {7,6,5}: the tree order of the other modes (by length) differs from the mode order
  // (columns gathered); {5,6,7}: it agrees.
  check_dense<TypeParam>({{7, 6, 5}, 120}, {3, 5, 2}, "order 3 dims 7x6x5");
  check_dense<TypeParam>({{5, 6, 7}, 120}, {3, 5, 2}, "order 3 dims 5x6x7");
}

TYPED_TEST(Ttmc, Order4Dense) {
  check_dense<TypeParam>({{5, 4, 6, 3}, 200}, {2, 3, 4, 2}, "order 4 dims 5x4x6x3");
  check_dense<TypeParam>({{3, 6, 4, 5}, 200}, {4, 2, 3, 2}, "order 4 dims 3x6x4x5");
}

TYPED_TEST(Ttmc, Order5Dense) {
  check_dense<TypeParam>({{4, 3, 5, 3, 4}, 250}, {2, 3, 2, 4, 3}, "order 5 dims 4x3x5x3x4");
}

TYPED_TEST(Ttmc, Orders1And2Dense) {
  check_dense<TypeParam>({{9}, 20, true}, {3}, "order 1 with repeats");
  check_dense<TypeParam>({{8, 6}, 30}, {4, 3}, "order 2");
}

TYPED_TEST(Ttmc, HigherOrdersAgainstReference) {
  check_vs_reference<TypeParam>({{4, 3, 5, 2, 3, 4}, 300}, {2, 3, 2, 2, 1, 2}, "order 6");
  check_vs_reference<TypeParam>({{3, 4, 2, 3, 5, 2, 3, 4, 2}, 400}, {2, 1, 2, 2, 2, 1, 2, 2, 2},
                                "order 9");
}

TYPED_TEST(Ttmc, RepeatedCoordinates) {
  // 3x3x3 minus the last indices leaves 8 cells for 200 draws: every cell repeats.
  check_dense<TypeParam>({{3, 3, 3}, 200, true}, {3, 5, 2}, "repeats 3x3x3");
  check_dense<TypeParam>({{4, 3, 3, 4}, 300, true}, {2, 3, 4, 2}, "repeats 4x3x3x4");
}

TYPED_TEST(Ttmc, SkewedShortRootMode) {
  // Mode 0 has 3 indices, 85% of the nonzeros on index 0: automatic picks chunks, and
  // chunks cut the big row across threads.
  check_dense<TypeParam>({{3, 40, 30}, 3000, false, 0}, {3, 5, 2}, "skewed 3x40x30");
  check_dense<TypeParam>({{2, 12, 9, 10}, 2000, false, 0}, {2, 3, 4, 2}, "skewed 2x12x9x10");
}

TYPED_TEST(Ttmc, OneNonzero) {
  using T = TypeParam;
  SparseTensor<T> x({4, 5, 3});
  const index_t c[3] = {2, 4, 1};
  x.push_back(c, T(0.75));
  const std::vector<int> ranks = {3, 2, 4};
  std::mt19937_64 rng(fresh_seed());
  const auto A = random_factors<T>(x.dims, ranks, rng);
  // Mode 1: the row of index 4 is 0.75 * kron(U_0(2, :), U_2(1, :)), U_2 fastest.
  std::vector<double> want;
  for (int r0 = 0; r0 < 3; ++r0)
    for (int r2 = 0; r2 < 4; ++r2)
      want.push_back(0.75 * static_cast<double>(A[0][2 * 3 + r0]) *
                     static_cast<double>(A[2][1 * 4 + r2]));
  auto plan = cpu::plan_ttmc(x, 2);
  for (const SemiSparse<T>& y :
       {reference::ttmc(x, 1, pointers(A, 1), ranks), cpu::ttmc(*plan, 1, pointers(A, 1), ranks)}) {
    ASSERT_EQ(y.rows, std::vector<index_t>{4});
    ASSERT_EQ(y.cols, 12);
    for (std::size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(static_cast<double>(y.data[k]), want[k], 1e-6) << "column " << k;
  }
}

TYPED_TEST(Ttmc, EmptyTensor) {
  using T = TypeParam;
  SparseTensor<T> x({4, 5, 3});
  const std::vector<int> ranks = {3, 2, 4};
  std::mt19937_64 rng(fresh_seed());
  const auto A = random_factors<T>(x.dims, ranks, rng);
  auto plan = cpu::plan_ttmc(x, 2);
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(plan->distinct_rows(m), 0);
    auto y = poisoned<T>(0, 1);
    cpu::ttmc(*plan, m, pointers(A, m), ranks, y);
    const auto r = reference::ttmc(x, m, pointers(A, m), ranks);
    for (const SemiSparse<T>* p : {static_cast<const SemiSparse<T>*>(&y), &r}) {
      EXPECT_TRUE(p->rows.empty());
      EXPECT_TRUE(p->data.empty());
      EXPECT_EQ(p->cols, m == 0 ? 8 : m == 1 ? 12 : 6);
    }
  }
}

TYPED_TEST(Ttmc, ReusesOutputAcrossModes) {
  // One output object through every mode twice: sizes grow and shrink, every run
  // overwrites it completely.
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>({{7, 6, 5, 4}, 300}, rng);
  const std::vector<int> ranks = {2, 3, 4, 5};
  const auto A = random_factors<T>(x.dims, ranks, rng);
  auto plan = cpu::plan_ttmc(x, 2);
  SemiSparse<T> y;
  for (int pass = 0; pass < 2; ++pass)
    for (int m = 0; m < 4; ++m) {
      cpu::ttmc(*plan, m, pointers(A, m), ranks, y);
      expect_matches(y, reference::ttmc(x, m, pointers(A, m), ranks),
                     "reuse mode " + std::to_string(m) + " seed " + std::to_string(seed));
    }
}

TYPED_TEST(Ttmc, MaxBytesRefusal) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>({{6, 5, 4}, 60}, rng);
  const std::vector<int> ranks = {3, 5, 2};
  const auto A = random_factors<T>(x.dims, ranks, rng);
  auto plan = cpu::plan_ttmc(x, 2);
  for (int m = 0; m < 3; ++m) {
    const std::size_t need = ttmc_output_bytes(plan->distinct_rows(m), ranks, m, sizeof(T));
    ASSERT_GT(need, 0u);
    // Exactly the limit passes; one byte less is refused, naming the bytes needed.
    EXPECT_NO_THROW(reference::ttmc(x, m, pointers(A, m), ranks, need));
    EXPECT_NO_THROW(cpu::ttmc(*plan, m, pointers(A, m), ranks, need));
    for (int backend = 0; backend < 2; ++backend) {
      try {
        if (backend == 0)
          reference::ttmc(x, m, pointers(A, m), ranks, need - 1);
        else
          cpu::ttmc(*plan, m, pointers(A, m), ranks, need - 1);
        ADD_FAILURE() << "backend " << backend << " mode " << m << ": no InputError";
      } catch (const InputError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(std::to_string(need) + " bytes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("smaller ranks"), std::string::npos) << msg;
      }
    }
  }
}

TYPED_TEST(Ttmc, BadArguments) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const auto x = random_tensor<T>({{6, 5, 4, 3}, 60}, rng);
  const std::vector<int> ranks = {3, 5, 2, 2};
  const auto A = random_factors<T>(x.dims, ranks, rng);
  auto plan = cpu::plan_ttmc(x, 1);
  auto run_both = [&](int mode, const std::vector<const T*>& f, const std::vector<int>& r) {
    EXPECT_THROW(reference::ttmc(x, mode, f, r), Error);
    EXPECT_THROW(cpu::ttmc(*plan, mode, f, r), Error);
  };
  // A rank < 1 of another mode is an InputError; ranks[mode] is not read.
  for (int bad : {0, -3}) {
    auto r = ranks;
    r[2] = bad;
    EXPECT_THROW(reference::ttmc(x, 0, pointers(A, 0), r), InputError);
    EXPECT_THROW(cpu::ttmc(*plan, 0, pointers(A, 0), r), InputError);
    EXPECT_NO_THROW(cpu::ttmc(*plan, 2, pointers(A, 2), r));
  }
  // Column count overflowing int64: (2^31 - 1)^3 > 2^63; refused before any factor read.
  {
    const std::vector<int> huge(4, std::numeric_limits<int>::max());
    EXPECT_THROW(reference::ttmc(x, 0, pointers(A, 0), huge), InputError);
    EXPECT_THROW(cpu::ttmc(*plan, 0, pointers(A, 0), huge), InputError);
    EXPECT_THROW(ttmc_output_bytes(10, huge, 0, sizeof(T)), InputError);
    // Columns fit, bytes do not.
    const std::vector<int> big = {1, std::numeric_limits<int>::max(),
                                  std::numeric_limits<int>::max(), 1 << 20};
    EXPECT_THROW(ttmc_output_bytes(1 << 20, big, 0, sizeof(T)), InputError);
  }
  // Null factor of another mode, wrong counts, bad mode.
  {
    auto f = pointers(A, 0);
    f[3] = nullptr;
    run_both(0, f, ranks);
    run_both(0, pointers(A, 0), {3, 5, 2});
    f = pointers(A, 0);
    f.pop_back();
    run_both(0, f, ranks);
    run_both(4, pointers(A, 0), ranks);
    run_both(-1, pointers(A, 0), ranks);
  }
}

// ---- through the kernels::ops dispatchers (what Tucker-HOOI calls) ----

/// ops::ttmc_rows / ttmc_scratch_bytes / ttmc on the reference and cpu backends
/// against the brute-force dense result, output poisoned with NaN before each run.
template <typename T>
void check_backend_interface(const Shape& s, const std::vector<int>& ranks,
                             const std::string& what) {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>(s, rng);
  const auto A = random_factors<T>(s.dims, ranks, rng);
  const int N = x.order();
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    auto be = make_backend<T>(kind, 2);
    auto h = be->prepare(x);
    // Factors in backend memory (host for these backends, but through the interface).
    std::vector<Array<T>> F;
    for (int m = 0; m < N; ++m) {
      F.push_back(be->allocate(A[m].size()));
      be->upload(A[m].data(), A[m].size(), F.back().data());
    }
    for (int m = 0; m < N; ++m) {
      std::ostringstream os;
      os << what << " " << be->name() << " mode " << m << " ("
         << (std::is_same_v<T, double> ? "double" : "float") << ", seed " << seed << ")";
      std::size_t cols = 0;
      const auto full = dense_ttmc(x, m, A, ranks, cols);
      SemiSparse<T> y;
      y.rows = ops::ttmc_rows(*be, *h, m);
      ASSERT_EQ(y.rows, distinct(x, m)) << os.str();
      EXPECT_GT(ops::ttmc_scratch_bytes(*be, *h, m, ranks), 0u) << os.str();
      y.cols = static_cast<std::int64_t>(cols);
      auto out = be->allocate(y.rows.size() * cols);
      be->fill(out.data(), out.size(), std::numeric_limits<T>::quiet_NaN());
      std::vector<const T*> ptrs;
      for (int k = 0; k < N; ++k) ptrs.push_back(k == m ? nullptr : F[k].data());
      ops::ttmc(*be, *h, m, ptrs, ranks, out.data());
      y.data.resize(out.size());
      be->download(out.data(), out.size(), y.data.data());
      expect_matches_dense(y, x, m, full, cols, os.str());
    }
  }
}

TYPED_TEST(Ttmc, BackendInterfaceOrders3To5) {
  check_backend_interface<TypeParam>({{7, 6, 5}, 150}, {3, 5, 2}, "order 3");
  check_backend_interface<TypeParam>({{5, 4, 6, 3}, 200}, {2, 3, 4, 2}, "order 4");
  check_backend_interface<TypeParam>({{4, 3, 5, 3, 4}, 250}, {2, 3, 2, 4, 3}, "order 5");
}

TYPED_TEST(Ttmc, BackendInterfaceRejectsBadCalls) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const auto x = random_tensor<T>({{6, 5, 4}, 60}, rng);
  const std::vector<int> ranks = {3, 5, 2};
  const auto A = random_factors<T>(x.dims, ranks, rng);
  auto ref = make_backend<T>(BackendKind::reference, 1);
  auto cpu = make_backend<T>(BackendKind::cpu, 1);
  auto hr = ref->prepare(x);
  auto hc = cpu->prepare(x);
  std::vector<T> out(x.dims[0] * 10, T(0));
  // A handle of another backend.
  EXPECT_THROW(ops::ttmc(*cpu, *hr, 0, pointers(A, 0), ranks, out.data()), Error);
  EXPECT_THROW(ops::ttmc(*ref, *hc, 0, pointers(A, 0), ranks, out.data()), Error);
  EXPECT_THROW(ops::ttmc_rows(*cpu, *hr, 0), Error);
  // Rank < 1 of another mode: InputError on both.
  for (auto* be : {ref.get(), cpu.get()}) {
    auto& h = be == ref.get() ? *hr : *hc;
    EXPECT_THROW(ops::ttmc(*be, h, 0, pointers(A, 0), {3, 0, 2}, out.data()), InputError);
    EXPECT_THROW(ops::ttmc_scratch_bytes(*be, h, 0, {3, 5, 0}), InputError);
    auto f = pointers(A, 0);
    f[2] = nullptr;
    EXPECT_THROW(ops::ttmc(*be, h, 0, f, ranks, out.data()), Error);
  }
}

}  // namespace
}  // namespace tessera::kernels
