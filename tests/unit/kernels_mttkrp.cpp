// MTTKRP on every host backend (reference, cpu) and every cpu variant (schedule,
// instruction set, thread count), float and double, against a brute-force dense
// computation (orders 2..5) or the reference backend (orders 1..16).
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
#include "kernels/cpu/csf.hpp"
#include "kernels/factories.hpp"
#include "kernels/mttkrp.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "test_util.hpp"
#include "util/error.hpp"

namespace tessera::kernels {
namespace {

using test::fresh_seed;

using test::tol;

struct Shape {
  std::vector<std::uint64_t> dims;
  std::size_t nnz = 0;         ///< nonzeros drawn (before removing repeats)
  double dead_frac = 0.25;     ///< fraction of each mode's indices that get no nonzero
  bool allow_repeats = false;  ///< keep repeated coordinates (summed by MTTKRP)
  int skew_mode = -1;          ///< this mode puts ~85% of the nonzeros on index 0
};

/// Random COO tensor: uniform coordinates over the "live" indices of each mode (the dead
/// ones, always including the last index when dims >= 3, stay empty); values in
/// +-[0.25, 1]. Never empty unless nnz == 0.
template <typename T>
SparseTensor<T> random_tensor(const Shape& s, std::mt19937_64& rng) {
  const int N = static_cast<int>(s.dims.size());
  SparseTensor<T> x(s.dims);
  std::vector<std::vector<index_t>> live(static_cast<std::size_t>(N));
  for (int m = 0; m < N; ++m) {
    const auto I = static_cast<index_t>(s.dims[m]);
    std::vector<index_t> all(I);
    for (index_t i = 0; i < I; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    std::size_t dead = static_cast<std::size_t>(s.dead_frac * I);
    if (I >= 3) {
      dead = std::max<std::size_t>(dead, 1);
      std::iter_swap(all.begin(), std::find(all.begin(), all.end(), I - 1));  // last is dead
    }
    dead = std::min<std::size_t>(dead, I - 1);
    live[m].assign(all.begin() + static_cast<std::ptrdiff_t>(dead), all.end());
    std::sort(live[m].begin(), live[m].end());
  }
  std::uniform_real_distribution<double> mag(0.25, 1.0);
  std::set<std::vector<index_t>> seen;
  std::vector<index_t> c(static_cast<std::size_t>(N));
  for (std::size_t k = 0; k < s.nnz; ++k) {
    for (int m = 0; m < N; ++m) {
      const auto& L = live[m];
      if (m == s.skew_mode && std::uniform_real_distribution<double>(0, 1)(rng) < 0.85)
        c[m] = L[0];
      else
        c[m] = L[std::uniform_int_distribution<std::size_t>(0, L.size() - 1)(rng)];
    }
    if (!s.allow_repeats && !seen.insert(c).second) continue;
    const double v = mag(rng) * ((rng() & 1) ? 1.0 : -1.0);
    x.push_back(c.data(), static_cast<T>(v));
  }
  return x;
}

template <typename T>
std::vector<std::vector<T>> random_factors(const std::vector<std::uint64_t>& dims, int R,
                                           std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<std::vector<T>> A(dims.size());
  for (std::size_t m = 0; m < dims.size(); ++m) {
    A[m].resize(dims[m] * static_cast<std::size_t>(R));
    for (auto& a : A[m]) a = static_cast<T>(u(rng));
  }
  return A;
}

using test::pointers;

/// out = X_(mode) * KhatriRao(factors != mode), both materialised densely, in double.
template <typename T>
std::vector<double> dense_mttkrp(const SparseTensor<T>& x, int mode,
                                 const std::vector<std::vector<T>>& A, int R) {
  const int N = x.order();
  std::size_t J = 1;  // columns of the unfolding
  for (int m = 0; m < N; ++m)
    if (m != mode) J *= x.dims[m];
  const std::size_t I = x.dims[mode];
  // Column of the unfolding: mixed radix over the other modes, first mode fastest.
  auto column = [&](const std::vector<index_t>& c) {
    std::size_t j = 0, stride = 1;
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      j += c[m] * stride;
      stride *= x.dims[m];
    }
    return j;
  };
  std::vector<double> Xn(I * J, 0.0);
  std::vector<index_t> c(static_cast<std::size_t>(N));
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    for (int m = 0; m < N; ++m) c[m] = x.idx[m][k];
    Xn[c[mode] * J + column(c)] += static_cast<double>(x.vals[k]);
  }
  std::vector<double> KR(J * static_cast<std::size_t>(R));
  for (std::size_t j = 0; j < J; ++j) {
    std::size_t rest = j;
    for (int r = 0; r < R; ++r) KR[j * R + r] = 1.0;
    for (int m = 0; m < N; ++m) {
      if (m == mode) continue;
      const std::size_t i = rest % x.dims[m];
      rest /= x.dims[m];
      for (int r = 0; r < R; ++r) KR[j * R + r] *= static_cast<double>(A[m][i * R + r]);
    }
  }
  std::vector<double> out(I * static_cast<std::size_t>(R), 0.0);
  for (std::size_t i = 0; i < I; ++i)
    for (std::size_t j = 0; j < J; ++j) {
      const double v = Xn[i * J + j];
      if (v == 0.0) continue;
      for (int r = 0; r < R; ++r) out[i * R + r] += v * KR[j * R + r];
    }
  return out;
}

/// Rows of `mode` that hold no nonzero.
template <typename T>
std::vector<bool> empty_rows(const SparseTensor<T>& x, int mode) {
  std::vector<bool> empty(x.dims[mode], true);
  for (index_t i : x.idx[mode]) empty[i] = false;
  return empty;
}

/// Checks out (poisoned before the run) against ref: every entry finite, rows without
/// nonzeros exactly 0, ||out - ref|| / ||ref|| under the precision's tolerance.
template <typename T>
void expect_matches(const std::vector<T>& out, const std::vector<double>& ref,
                    const std::vector<bool>& empty, int R, const std::string& what,
                    double magnitude2 = 0) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    ASSERT_TRUE(std::isfinite(static_cast<double>(out[k])))
        << what << ": entry " << k << " (row " << k / R << ") not written or not finite";
    const double d = static_cast<double>(out[k]) - ref[k];
    num += d * d;
    den += ref[k] * ref[k];
  }
  for (std::size_t i = 0; i < empty.size(); ++i) {
    if (!empty[i]) continue;
    for (int r = 0; r < R; ++r) {
      ASSERT_EQ(out[i * R + r], T(0)) << what << ": empty row " << i << " not zero";
    }
  }
  // Relative to the magnitude of the terms summed (magnitude2: the squared norm of the
  // MTTKRP of |X| with |A|), not only of their sum: a row whose terms cancel has a small
  // reference but the rounding of its terms, and a float run met 1.5e-5 against 1e-5 on one
  // order-5, R = 1 tensor that way.
  den = std::max(den, magnitude2);
  if (den == 0) {
    EXPECT_EQ(num, 0.0) << what << ": reference is zero, output is not";
  } else {
    EXPECT_LT(std::sqrt(num / den), tol<T>()) << what;
  }
}

template <typename T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

std::vector<cpu::Isa> isas() {
  std::vector<cpu::Isa> v;
  for (cpu::Isa i : {cpu::Isa::base, cpu::Isa::avx2, cpu::Isa::avx512})
    if (cpu::isa_supported(i)) v.push_back(i);
  return v;
}

/// Runs every backend and every cpu variant on x for every mode and compares with
/// `ref(mode)`.
template <typename T, typename RefFn>
void check_all(const SparseTensor<T>& x, const std::vector<std::vector<T>>& A, int R, RefFn ref,
               const std::string& label) {
  const int N = x.order();
  std::vector<std::vector<double>> refs;
  for (int m = 0; m < N; ++m) refs.push_back(ref(m));
  // Per mode, the squared norm of the MTTKRP of |X| with |A| (expect_matches' scale).
  std::vector<double> magnitude2(static_cast<std::size_t>(N), 0.0);
  for (int m = 0; m < N; ++m) {
    std::vector<double> a(static_cast<std::size_t>(x.dims[m]) * static_cast<std::size_t>(R), 0.0);
    for (nnz_t k = 0; k < x.nnz(); ++k)
      for (int r = 0; r < R; ++r) {
        double t = std::abs(static_cast<double>(x.vals[k]));
        for (int n = 0; n < N; ++n)
          if (n != m) t *= std::abs(static_cast<double>(A[n][x.idx[n][k] * R + r]));
        a[x.idx[m][k] * R + r] += t;
      }
    for (double v : a) magnitude2[m] += v * v;
  }

  std::vector<std::unique_ptr<Backend<T>>> backends;
  backends.push_back(make_reference_backend<T>());
  backends.push_back(make_cpu_backend<T>(1));
  backends.push_back(make_cpu_backend<T>(2));
  // The instruction set as the cpu backend's tuning option (Tuning::cpu_isa, --cpu-isa).
  for (cpu::Isa isa : isas()) {
    Tuning t;
    t.cpu_isa = isa;
    backends.push_back(make_backend<T>(BackendKind::cpu, 2, t));
  }
  for (auto& be : backends) {
    auto h = be->prepare(x);
    EXPECT_EQ(h->order(), N);
    EXPECT_EQ(h->nnz(), x.nnz());
    EXPECT_EQ(h->dims(), x.dims);
    for (int m = 0; m < N; ++m) {
      EXPECT_GE(h->mttkrp_stream_bytes(m), static_cast<std::size_t>(x.nnz()) * sizeof(T));
      auto out = poisoned<T>(x.dims[m] * static_cast<std::size_t>(R));
      ops::mttkrp(*be, *h, m, pointers(A, m), R, out.data());
      std::ostringstream os;
      os << label << " backend " << be->name() << " cpu_isa " << name_of(be->tuning().cpu_isa)
         << " mode " << m << " R " << R;
      expect_matches(out, refs[m], empty_rows(x, m), R, os.str(), magnitude2[m]);
    }
  }

  // Every instruction set x schedule x {1, 2} threads, plus 3 threads (an odd team, more
  // chunks than cores) once per schedule.
  struct Variant {
    cpu::Isa isa;
    cpu::Schedule sched;
    int threads;
  };
  std::vector<Variant> variants;
  for (cpu::Schedule sched : {cpu::Schedule::slices, cpu::Schedule::chunks}) {
    for (cpu::Isa isa : isas())
      for (int threads : {1, 2}) variants.push_back({isa, sched, threads});
    variants.push_back({cpu::Isa::automatic, sched, 3});
  }
  auto csf = cpu::build_csf(x, 2);
  for (const Variant& v : variants) {
    cpu::MttkrpOptions opt;
    opt.threads = v.threads;
    opt.min_nnz_per_thread = 0;  // full teams even on these small tensors
    opt.schedule = v.sched;
    opt.isa = v.isa;
    for (int m = 0; m < N; ++m) {
      auto out = poisoned<T>(x.dims[m] * static_cast<std::size_t>(R));
      cpu::mttkrp(*csf, m, pointers(A, m), R, out.data(), opt);
      std::ostringstream os;
      os << label << " cpu isa " << cpu::to_string(v.isa) << " schedule "
         << (v.sched == cpu::Schedule::slices ? "slices" : "chunks") << " threads " << v.threads
         << " mode " << m << " R " << R;
      expect_matches(out, refs[m], empty_rows(x, m), R, os.str(), magnitude2[m]);
    }
  }
}

template <typename T>
void check_vs_dense(const Shape& s, const std::vector<int>& ranks) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (TESSERA_TEST_SEED replays)");
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>(s, rng);
  ASSERT_GT(x.nnz(), 0);
  for (int R : ranks) {
    const auto A = random_factors<T>(x.dims, R, rng);
    check_all(
        x, A, R, [&](int m) { return dense_mttkrp(x, m, A, R); },
        "order " + std::to_string(x.order()) + " vs dense");
  }
}

template <typename T>
void check_vs_reference(const SparseTensor<T>& x, const std::vector<int>& ranks,
                        std::mt19937_64& rng, const std::string& label) {
  for (int R : ranks) {
    const auto A = random_factors<T>(x.dims, R, rng);
    check_all(
        x, A, R,
        [&](int m) {
          std::vector<T> o(x.dims[m] * static_cast<std::size_t>(R));
          reference::mttkrp(x, m, pointers(A, m), R, o.data());
          return std::vector<double>(o.begin(), o.end());
        },
        label);
  }
}

template <typename T>
class Mttkrp : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Mttkrp, Types);

// Ranks cover the compile-time tiles (8, 16, 32, 64 columns), combinations of tiles and
// the scalar tail (1, 3, 13, 37).
const std::vector<int> kRanks = {1, 3, 8, 13, 16, 37, 64};

TYPED_TEST(Mttkrp, Order3VsDense) {
  check_vs_dense<TypeParam>({{9, 7, 11}, 300}, kRanks);
}

TYPED_TEST(Mttkrp, Order4VsDense) {
  check_vs_dense<TypeParam>({{5, 6, 4, 7}, 350}, kRanks);
}

TYPED_TEST(Mttkrp, Order5VsDense) {
  check_vs_dense<TypeParam>({{4, 3, 5, 3, 4}, 300}, {1, 5, 16, 32});
}

TYPED_TEST(Mttkrp, Order2VsDense) {
  check_vs_dense<TypeParam>({{40, 23}, 400}, kRanks);
}

TYPED_TEST(Mttkrp, RepeatedCoordinatesAreSummed) {
  Shape s{{6, 5, 4}, 500};
  s.allow_repeats = true;
  s.dead_frac = 0.0;
  check_vs_dense<TypeParam>(s, {7, 16});
}

TYPED_TEST(Mttkrp, Order1) {
  std::mt19937_64 rng(fresh_seed());
  Shape s{{50}, 80};
  s.allow_repeats = true;
  const auto x = random_tensor<TypeParam>(s, rng);
  check_vs_reference(x, {1, 4, 16}, rng, "order 1");
  // out(i, r) is the sum of the values at i in every column.
  auto be = make_cpu_backend<TypeParam>(2);
  auto h = be->prepare(x);
  std::vector<TypeParam> out(50 * 3);
  ops::mttkrp(*be, *h, 0, {nullptr}, 3, out.data());
  std::vector<double> sum(50, 0.0);
  for (nnz_t k = 0; k < x.nnz(); ++k) sum[x.idx[0][k]] += x.vals[k];
  for (int i = 0; i < 50; ++i)
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(out[i * 3 + r], sum[i], 1e-5 * (1 + std::abs(sum[i])));
}

TYPED_TEST(Mttkrp, Order8VsReference) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<TypeParam>({{4, 3, 5, 2, 3, 4, 3, 2}, 900}, rng);
  check_vs_reference(x, {3, 16}, rng, "order 8");
}

TYPED_TEST(Mttkrp, Order16VsReference) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Shape s{std::vector<std::uint64_t>(16, 3), 1500};
  s.dims[3] = 2;
  s.dims[9] = 4;
  s.dead_frac = 0.0;
  const auto x = random_tensor<TypeParam>(s, rng);
  check_vs_reference(x, {2, 16}, rng, "order 16");
}

// Coordinates too wide to pack in one 64-bit sort key: the per-level sort path.
TYPED_TEST(Mttkrp, WideCoordinatesVsReference) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<std::uint64_t> dims = {1u << 17, 100000, 1u << 16, 5, 1u << 17};  // 70 bits
  SparseTensor<TypeParam> x(dims);
  std::vector<index_t> c(5);
  for (int k = 0; k < 400; ++k) {
    for (int m = 0; m < 5; ++m)
      c[m] = static_cast<index_t>(
          std::uniform_int_distribution<std::uint64_t>(0, k % 3 == 0 ? 3 : dims[m] - 2)(rng));
    x.push_back(c.data(), static_cast<TypeParam>(0.5 + (k % 7)));
  }
  check_vs_reference(x, {5}, rng, "wide coordinates");
}

// A larger tensor: many slices, several chunks per thread, every scheduling path busy.
TYPED_TEST(Mttkrp, MediumVsReference) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<TypeParam>({{300, 40, 200}, 30000}, rng);
  check_vs_reference(x, {10, 16}, rng, "medium");
}

// Mode 0 has 3 slices, one holding ~85% of the nonzeros: the chunked (privatised) path,
// with root slices cut across chunks.
TYPED_TEST(Mttkrp, SkewedShortRootMode) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Shape s{{3, 200, 150}, 20000};  // > 4096 nonzeros per thread: the backend runs 2 threads
  s.skew_mode = 0;
  s.dead_frac = 0.0;
  const auto x = random_tensor<TypeParam>(s, rng);
  check_vs_reference(x, {16, 7}, rng, "skewed");
  // Also against the dense product, mode 0 only (the interesting one).
  const int R = 16;
  const auto A = random_factors<TypeParam>(x.dims, R, rng);
  const auto ref = dense_mttkrp(x, 0, A, R);
  auto be = make_cpu_backend<TypeParam>(2);
  auto h = be->prepare(x);
  auto out = poisoned<TypeParam>(3 * R);
  ops::mttkrp(*be, *h, 0, pointers(A, 0), R, out.data());
  expect_matches(out, ref, empty_rows(x, 0), R, "skewed mode 0 vs dense");
}

TYPED_TEST(Mttkrp, OneNonzero) {
  SparseTensor<TypeParam> x({7, 5, 6, 4});
  const index_t c[4] = {3, 0, 5, 2};
  x.push_back(c, TypeParam(1.75));
  std::mt19937_64 rng(fresh_seed());
  const int R = 16;
  const auto A = random_factors<TypeParam>(x.dims, R, rng);
  check_all(
      x, A, R, [&](int m) { return dense_mttkrp(x, m, A, R); }, "one nonzero");
}

TYPED_TEST(Mttkrp, NoNonzerosGivesZero) {
  for (const auto& dims : std::vector<std::vector<std::uint64_t>>{{5, 4, 3}, {6, 2}, {4}}) {
    SparseTensor<TypeParam> x(dims);
    std::mt19937_64 rng(fresh_seed());
    const auto A = random_factors<TypeParam>(x.dims, 16, rng);
    check_all(
        x, A, 16, [&](int m) { return std::vector<double>(x.dims[m] * 16, 0.0); }, "no nonzeros");
  }
}

TYPED_TEST(Mttkrp, BadInputIsRejected) {
  auto be = make_cpu_backend<TypeParam>(2);
  SparseTensor<TypeParam> x({4, 4, 4});
  const index_t bad[3] = {1, 4, 0};  // 4 >= dims[1]
  x.push_back(bad, TypeParam(1));
  EXPECT_THROW(be->prepare(x), Error);
  EXPECT_THROW(make_reference_backend<TypeParam>()->prepare(x), Error);
  SparseTensor<TypeParam> y({4, 4, 4});
  const index_t ok[3] = {1, 2, 3};
  y.push_back(ok, TypeParam(1));
  auto h = be->prepare(y);
  std::vector<TypeParam> out(16 * 4), f(16 * 4, TypeParam(1));
  EXPECT_THROW(ops::mttkrp(*be, *h, 3, {f.data(), f.data(), f.data()}, 16, out.data()), Error);
  EXPECT_THROW(ops::mttkrp(*be, *h, 0, {f.data(), f.data()}, 16, out.data()), Error);
  // A handle from another backend is refused, not misread.
  auto ref = make_reference_backend<TypeParam>();
  auto rh = ref->prepare(y);
  EXPECT_THROW(ops::mttkrp(*be, *rh, 0, {f.data(), f.data(), f.data()}, 16, out.data()), Error);
  EXPECT_THROW(ops::mttkrp(*ref, *h, 0, {f.data(), f.data(), f.data()}, 16, out.data()), Error);
}

// The CSF trees: root = the mode, the others by increasing length, sizes consistent.
TEST(Csf, TreeShape) {
  std::mt19937_64 rng(fresh_seed());
  const auto x = random_tensor<double>({{30, 5, 200, 12}, 2000}, rng);
  auto csf = cpu::build_csf(x, 2);
  const std::vector<std::vector<int>> expect = {
      {0, 1, 3, 2}, {1, 3, 0, 2}, {2, 1, 3, 0}, {3, 1, 0, 2}};
  std::size_t total = 0;
  for (int m = 0; m < 4; ++m) {
    const auto& t = csf->tree(m);
    for (int l = 0; l < 4; ++l) EXPECT_EQ(t.mode_at_level[l], expect[m][l]) << m << " " << l;
    EXPECT_EQ(t.vals.size(), static_cast<std::size_t>(x.nnz()));
    EXPECT_EQ(t.nodes(3), static_cast<std::size_t>(x.nnz()));
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(t.fptr[l].size(), t.nodes(l) + 1);
      EXPECT_EQ(t.fptr[l].back(), static_cast<cpu::csf_ptr_t>(t.nodes(l + 1)));
      EXPECT_LE(t.nodes(l), t.nodes(l + 1));
    }
    // Root coordinates strictly increasing: one node per non-empty slice.
    for (std::size_t s = 1; s < t.nodes(0); ++s) EXPECT_LT(t.fids[0][s - 1], t.fids[0][s]);
    std::size_t bytes = t.vals.size() * sizeof(double);
    for (const auto& f : t.fids) bytes += f.size() * sizeof(index_t);
    for (const auto& p : t.fptr) bytes += p.size() * sizeof(cpu::csf_ptr_t);
    EXPECT_EQ(t.stream_bytes(), bytes);
    total += bytes;
  }
  EXPECT_EQ(csf->bytes(), total);
}

TEST(Csf, IsaSelection) {
  EXPECT_TRUE(cpu::isa_supported(cpu::Isa::base));
  EXPECT_TRUE(cpu::isa_supported(cpu::isa_selected()));
  EXPECT_NE(cpu::isa_selected(), cpu::Isa::automatic);
}

// --cpu-isa is the cpu backend's tuning option: an unknown name or an instruction set the
// CPU or build lacks is refused when the backend is made (InputError naming the flag), and
// set_tuning keeps the previous options when it refuses.
TEST(Csf, CpuIsaIsATuningOption) {
  auto expect_refused = [](cpu::Isa isa) {
    Tuning t;
    t.cpu_isa = isa;
    try {
      make_backend<double>(BackendKind::cpu, 1, t);
      ADD_FAILURE() << "--cpu-isa " << static_cast<int>(isa) << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--cpu-isa"), std::string::npos) << e.what();
    }
  };
  EXPECT_FALSE(parse_name<cpu::Isa>("sse9").has_value());  // refused where it is parsed
  expect_refused(static_cast<cpu::Isa>(17));
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512})
    if (!cpu::isa_supported(isa)) expect_refused(isa);
  auto be = make_backend<double>(BackendKind::cpu, 1);
  EXPECT_EQ(name_of(be->tuning().cpu_isa), "auto");
  Tuning bad;
  bad.cpu_isa = static_cast<cpu::Isa>(17);
  EXPECT_THROW(be->set_tuning(bad), InputError);
  EXPECT_EQ(be->tuning().cpu_isa, cpu::Isa::automatic);
  Tuning base;
  base.cpu_isa = *parse_name<cpu::Isa>("base");
  be->set_tuning(base);
  EXPECT_EQ(name_of(be->tuning().cpu_isa), "base");
}

}  // namespace
}  // namespace tessera::kernels
