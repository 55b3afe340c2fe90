// SpTC on the cuda backend (kernels/cuda/sptc/) against the reference backend, through
// ops::contract_plan / ops::contract: random specs (orders 2..5, 1..3 contracted
// letters, sometimes a batch letter, random output orders), float and double, repeated
// input coordinates, exact-zero cancellation, empty results and empty inputs,
// self-contraction, ~1e6 products, many products per output entry, keys over 64 bits (the
// cpu fallback) and the congress co-sponsorship tensor ("ijy,kjy->ik", when present).
// Coordinates must match exactly; values within test::tol<T>() (relative, Frobenius; scaled
// by how much the sums cancel, see cancellation_factor). Each plan runs 5 times: the same
// coordinates and counts every time.
// The plan's count and the run's stats must agree with the reference backend's.
// Both output assemblies (rows: grouped small rows, dense rows, spill rows; sort) and the
// tensor-core path of dense 16 x 16 blocks: forced on (threshold 0, every product on the
// tensor cores), off, and mixed with the sparse path in the same output cells, in fp64
// (tolerance of the value type) and tf32 / fp16 (3e-3) / bf16 (1.5e-2) on positive values.
// Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "gpu_test_util.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "kernels/ops/sptc.hpp"
#include "kernels/sptc.hpp"
#include "sptc_test_util.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

#define REQUIRE_GPU()                           \
  do {                                          \
    if (!cuda_device_available()) {             \
      GTEST_SKIP() << "no CUDA device visible"; \
    }                                           \
  } while (0)

using test::dims_of;
using test::Problem;
using test::random_problem;

/// `nnz` random draws, repeats kept (the kernels must multiply every copy); integer values
/// in +-[1, 3] (exact sums) or reals in +-[0.25, 1].
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                              bool integers, std::mt19937_64& rng, bool positive = false) {
  SparseTensor<T> x(dims);
  std::vector<index_t> c(dims.size());
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] =
          static_cast<index_t>(std::uniform_int_distribution<std::uint64_t>(0, dims[m] - 1)(rng));
    const double sign = positive || (rng() & 1) ? 1.0 : -1.0;
    const double v = integers ? static_cast<double>(1 + rng() % 3)
                              : std::uniform_real_distribution<double>(0.25, 1.0)(rng);
    x.push_back(c.data(), static_cast<T>(sign * v));
  }
  return x;
}

/// x with every value replaced by its magnitude.
template <typename T>
SparseTensor<T> abs_values(SparseTensor<T> x) {
  for (T& v : x.vals) v = v < T(0) ? -v : v;
  return x;
}

/// Frobenius norm of the values.
template <typename T>
double frobenius(const std::vector<T>& v) {
  double s = 0;
  for (const T a : v) s += static_cast<double>(a) * static_cast<double>(a);
  return std::sqrt(s);
}

/// How much cancellation amplifies rounding: ||(|X| spec |Y|)|| / ||X spec Y|| (at least
/// 1). Summation in another order moves each entry by about eps x sum |products| (times a
/// slowly growing factor), so the relative error of an order-dependent sum scales with
/// this; a float intermediate in the double path would still show (its error grows with
/// sqrt(products), this bound with products). Example: 2.25e6 products of +-[0.25, 1]
/// summing to one entry 1.9e5 times smaller than sum |products| differ by 2e-11 between
/// forward and backward summation in double.
template <typename T>
double cancellation_factor(const SparseTensor<T>& x, const SparseTensor<T>& y,
                           const ContractSpec& spec, const SparseTensor<T>& want) {
  const double w = frobenius(want.vals);
  if (w == 0) return 1.0;
  auto ref = make_backend<T>(BackendKind::reference);
  const SparseTensor<T> a = contract(*ref, abs_values(x), abs_values(y), spec);
  return std::max(1.0, frobenius(a.vals) / w);
}

/// Runs x (spec) y on the cuda and reference backends and compares everything; runs the
/// cuda plan kRepeats times in all (the coordinates and counts must repeat exactly);
/// returns the cuda run's stats. `tolerance` is relative to the result when nothing
/// cancels, scaled by cancellation_factor() when the sums cancel.
constexpr int kRepeats = 5;
template <typename T>
ContractStats expect_matches_reference(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                       const ContractSpec& spec, const std::string& what,
                                       double tolerance = tol<T>()) {
  SCOPED_TRACE(what + " spec " + spec.text);
  auto cu = make_backend<T>(BackendKind::cuda);
  auto ref = make_backend<T>(BackendKind::reference);
  auto cplan = kernels::ops::contract_plan(*cu, x, y, spec);
  auto rplan = kernels::ops::contract_plan(*ref, x, y, spec);
  EXPECT_EQ(cplan->count().products, rplan->count().products);
  EXPECT_EQ(cplan->count().output_entries, rplan->count().output_entries);
  EXPECT_EQ(cplan->count().output_bytes, rplan->count().output_bytes);
  EXPECT_EQ(cplan->output_dims(), rplan->output_dims());
  ContractStats cs, rs;
  const SparseTensor<T> got = kernels::ops::contract(*cu, *cplan, &cs);
  const SparseTensor<T> want = kernels::ops::contract(*ref, *rplan, &rs);
  EXPECT_EQ(cs.products, rs.products);
  EXPECT_EQ(cs.output_entries, rs.output_entries);
  EXPECT_EQ(cs.output_nnz, rs.output_nnz);
  EXPECT_EQ(cs.zeros_dropped, rs.zeros_dropped);
  EXPECT_EQ(cs.output_nnz, got.nnz());
  EXPECT_GE(cs.match_seconds, 0.0);
  EXPECT_GE(cs.multiply_seconds, 0.0);
  EXPECT_GE(cs.assemble_seconds, 0.0);
  EXPECT_GE(cs.tc_products, 0);
  EXPECT_LE(cs.tc_products, cs.products);
  if (spec.device.tensor_cores == TensorCorePrecision::off) {
    EXPECT_EQ(cs.tc_products, 0);
  }
  EXPECT_EQ(got.dims, want.dims);
  EXPECT_EQ(got.idx.size(), want.idx.size());
  EXPECT_EQ(got.nnz(), want.nnz());
  if (got.dims != want.dims || got.idx.size() != want.idx.size() || got.nnz() != want.nnz())
    return cs;
  for (std::size_t m = 0; m < want.idx.size(); ++m)
    EXPECT_TRUE(got.idx[m] == want.idx[m]) << "coordinates of output mode " << m << " differ";
  const double scaled =
      tolerance > 0 ? tolerance * cancellation_factor(x, y, spec, want) : tolerance;
  EXPECT_LE(rel_error(got.vals, want.vals), scaled)
      << "tolerance " << tolerance << " scaled for cancellation to " << scaled;
  for (const T v : got.vals)
    if (v == T(0)) {
      ADD_FAILURE() << "an exact zero was kept";
      break;
    }
  // Determinism: the same plan run again gives the same entries (the summation order is
  // fixed, so also which sums are exactly zero and dropped).
  for (int rep = 1; rep < kRepeats; ++rep) {
    SCOPED_TRACE("repeat " + std::to_string(rep));
    ContractStats rst;
    const SparseTensor<T> r = kernels::ops::contract(*cu, *cplan, &rst);
    EXPECT_EQ(rst.output_entries, cs.output_entries);
    EXPECT_EQ(rst.output_nnz, cs.output_nnz);
    EXPECT_EQ(r.nnz(), got.nnz());
    if (r.nnz() != got.nnz() || r.idx.size() != got.idx.size()) break;
    for (std::size_t m = 0; m < got.idx.size(); ++m)
      EXPECT_TRUE(r.idx[m] == got.idx[m]) << "coordinates of output mode " << m << " differ";
    EXPECT_LE(rel_error(r.vals, got.vals), scaled);
  }
  // The one-call helper goes through the same overrides (and a fresh plan).
  const SparseTensor<T> again = contract(*cu, x, y, spec);
  EXPECT_EQ(again.nnz(), got.nnz());
  if (again.nnz() == got.nnz() && again.idx.size() == got.idx.size()) {
    for (std::size_t m = 0; m < got.idx.size(); ++m)
      EXPECT_TRUE(again.idx[m] == got.idx[m]) << "helper: coordinates of mode " << m << " differ";
    EXPECT_LE(rel_error(again.vals, got.vals), scaled);
  }
  return cs;
}

/// The spec with device options.
ContractSpec with_device(ContractSpec spec, TensorCorePrecision tc, double threshold,
                         ContractAssembly assembly = ContractAssembly::rows) {
  spec.device.tensor_cores = tc;
  spec.device.tc_threshold = threshold;
  spec.device.assembly = assembly;
  return spec;
}

/// Tolerance of a tensor-core precision on positive values (relative, Frobenius): fp64 as
/// the value type; tf32 and fp16 round inputs to 11 significant bits, bf16 to 8.
template <typename T>
double tc_tol(TensorCorePrecision p) {
  switch (p) {
    case TensorCorePrecision::tf32:
    case TensorCorePrecision::fp16:
      return 3e-3;
    case TensorCorePrecision::bf16:
      return 1.5e-2;
    default:
      return tol<T>();
  }
}

constexpr TensorCorePrecision kAllTc[] = {TensorCorePrecision::fp64, TensorCorePrecision::tf32,
                                          TensorCorePrecision::bf16, TensorCorePrecision::fp16};

template <typename T>
class GpuSptc : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuSptc, Types);

TYPED_TEST(GpuSptc, RandomSpecsMatchReference) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int ox = 2; ox <= 5; ++ox)
    for (int oy = 2; oy <= 5; ++oy)
      for (int contracted = 1; contracted <= 3; ++contracted) {
        if (contracted > std::min(ox, oy)) continue;
        const int batch = (contracted < std::min(ox, oy) && rng() % 3 == 0) ? 1 : 0;
        if (ox + oy - 2 * contracted - batch < 1) continue;  // no output modes left
        const Problem p = random_problem(ox, oy, contracted, batch, 6, rng);
        const bool integers = rng() & 1;
        const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 1500, integers, rng);
        const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 1500, integers, rng);
        std::ostringstream what;
        what << "orders " << ox << "," << oy << " contracted " << contracted << " batch " << batch
             << (integers ? " integers" : " reals");
        expect_matches_reference(x, y, p.spec, what.str());
      }
}

TYPED_TEST(GpuSptc, ExactZeroCancellationIsDropped) {
  REQUIRE_GPU();
  using T = TypeParam;
  const auto spec = parse_contract_spec("ij,jk->ik");
  SparseTensor<T> x({4, 5}), y({5, 3});
  const index_t a[] = {0, 0}, b[] = {0, 1}, c[] = {2, 3};
  x.push_back(a, T(1));
  x.push_back(b, T(1));
  x.push_back(c, T(2));
  const index_t p[] = {0, 0}, q[] = {1, 0}, r[] = {3, 2}, s[] = {1, 1};
  y.push_back(p, T(2));
  y.push_back(q, T(-2));  // (0,0): 1*2 + 1*(-2) = 0, dropped
  y.push_back(r, T(4));   // (2,2): 8
  y.push_back(s, T(3));   // (0,1): 3
  ContractStats st;
  auto be = make_backend<T>(BackendKind::cuda);
  const auto z = contract(*be, x, y, spec, &st);
  EXPECT_EQ(st.products, 4);
  EXPECT_EQ(st.output_entries, 3);
  EXPECT_EQ(st.zeros_dropped, 1);
  ASSERT_EQ(z.nnz(), 2);
  EXPECT_EQ(z.idx[0], (std::vector<index_t>{0, 2}));
  EXPECT_EQ(z.idx[1], (std::vector<index_t>{1, 2}));
  EXPECT_EQ(z.vals, (std::vector<T>{T(3), T(8)}));
  expect_matches_reference(x, y, spec, "hand-made cancellation");

  // Every X nonzero repeated with the opposite sign: all products cancel.
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto spec3 = parse_contract_spec("ijk,kjl->lij");
  auto x3 = random_tensor<T>({7, 6, 5}, 800, true, rng);
  const auto y3 = random_tensor<T>({5, 6, 9}, 800, true, rng);
  const auto n = x3.nnz();
  std::vector<index_t> co(3);
  for (nnz_t k = 0; k < n; ++k) {
    for (int m = 0; m < 3; ++m) co[m] = x3.idx[m][k];
    x3.push_back(co.data(), static_cast<T>(-x3.vals[k]));
  }
  const auto z3 = contract(*be, x3, y3, spec3, &st);
  EXPECT_EQ(z3.nnz(), 0);
  EXPECT_GT(st.products, 0);
  EXPECT_EQ(st.zeros_dropped, st.output_entries);
  expect_matches_reference(x3, y3, spec3, "full cancellation");
}

TYPED_TEST(GpuSptc, EmptyResults) {
  REQUIRE_GPU();
  using T = TypeParam;
  const auto spec = parse_contract_spec("ijk,jkl->il");
  // No matches: X's j even, Y's j odd.
  SparseTensor<T> x({5, 8, 4}), y({8, 4, 6});
  for (index_t k = 0; k < 40; ++k) {
    const index_t cx[] = {k % 5, 2 * (k % 4), k % 4};
    const index_t cy[] = {2 * (k % 4) + 1, k % 4, k % 6};
    x.push_back(cx, T(1) + static_cast<T>(k));
    y.push_back(cy, T(2));
  }
  expect_matches_reference(x, y, spec, "no matches");
  ContractStats st;
  auto be = make_backend<T>(BackendKind::cuda);
  const auto z = contract(*be, x, y, spec, &st);
  EXPECT_EQ(z.nnz(), 0);
  EXPECT_EQ(st.products, 0);
  EXPECT_EQ(z.dims, (std::vector<std::uint64_t>{5, 6}));
  // Empty inputs.
  const SparseTensor<T> ex({5, 8, 4}), ey({8, 4, 6});
  expect_matches_reference(ex, y, spec, "empty X");
  expect_matches_reference(x, ey, spec, "empty Y");
  expect_matches_reference(ex, ey, spec, "both empty");
}

TYPED_TEST(GpuSptc, SelfContraction) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto x = random_tensor<T>({9, 9, 9}, 3000, false, rng);
  for (const char* s : {"ijk,ljk->il", "ijk,ijl->kl", "ijk,kjl->ilj", "ijk,lmk->ijlm"})
    expect_matches_reference(x, x, parse_contract_spec(s), "self-contraction");
}

TYPED_TEST(GpuSptc, MillionProducts) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto spec = parse_contract_spec("ijk,jkl->li");
  const auto x = random_tensor<T>({1000, 100, 100}, 100000, false, rng);
  const auto y = random_tensor<T>({100, 100, 1200}, 100000, false, rng);
  ContractStats st;
  auto be = make_backend<T>(BackendKind::cuda);
  (void)contract(*be, x, y, spec, &st);
  EXPECT_GT(st.products, 500000);
  expect_matches_reference(x, y, spec, "about 1e6 products");
}

TYPED_TEST(GpuSptc, ManyProductsPerOutput) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto spec = parse_contract_spec("ij,kj->ki");
  const auto x = random_tensor<T>({4, 50}, 10000, false, rng, true);
  const auto y = random_tensor<T>({4, 50}, 10000, false, rng, true);
  expect_matches_reference(x, y, spec, "~1e5 products per output entry");
}

TYPED_TEST(GpuSptc, KeysOverSixtyFourBitsFallBack) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::uint64_t big = std::uint64_t(1) << 22;
  // Output coordinates over 2^64 (4 x 22 bits = 88).
  {
    const auto spec = parse_contract_spec("abj,jcd->abcd");
    auto x = random_tensor<T>({big, big, 3}, 300, false, rng);
    auto y = random_tensor<T>({3, big, big}, 300, false, rng);
    expect_matches_reference(x, y, spec, "output keys over 64 bits");
  }
  // Matched coordinates over 2^64 (3 x 22 bits = 66): few coordinates, so matches occur.
  {
    const auto spec = parse_contract_spec("iabc,abcj->ij");
    SparseTensor<T> x({5, big, big, big}), y({big, big, big, 6});
    for (int k = 0; k < 200; ++k) {
      const index_t a = static_cast<index_t>(rng() % 3) * 1000003u % big;
      const index_t b = static_cast<index_t>(rng() % 2) + static_cast<index_t>(big - 2);
      const index_t cx[] = {static_cast<index_t>(k % 5), a, b, 7};
      const index_t cy[] = {a, b, 7, static_cast<index_t>(k % 6)};
      x.push_back(cx, static_cast<T>(1 + k % 3));
      y.push_back(cy, static_cast<T>(2 - k % 5));
    }
    expect_matches_reference(x, y, spec, "matched keys over 64 bits");
  }
}

// Column ranks of Y (rows assembly): a column-code space of at most max(2^20, Y nonzeros)
// cells is ranked through a table over the codes, a larger one by sorting Y's column codes;
// both must give the reference output (coordinates exactly), with and without the tensor
// cores' column codes in use.
TYPED_TEST(GpuSptc, ColumnRanksByTableAndBySort) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(777);
  const auto spec = parse_contract_spec("ij,jkl->ikl");
  for (std::uint64_t len : {std::uint64_t{40}, std::uint64_t{3000}}) {  // 1,600 / 9e6 cells
    SCOPED_TRACE("column cells " + std::to_string(len * len));
    const auto x = random_tensor<T>({60, 7}, 3000, false, rng);
    const auto y = random_tensor<T>({7, len, len}, 3000, false, rng);
    expect_matches_reference(x, y, spec, "column ranks");
    expect_matches_reference(
        x, y, with_device(spec, TensorCorePrecision::fp64, 0.0, ContractAssembly::rows),
        "column ranks, tensor cores forced");
  }
}

// A coordinate at or past its mode's length (the cuda backend checks the coordinates on
// the device after the upload): Error naming the mode, coordinate and length, in X or in
// Y, for both assemblies and a self-contraction; the backend stays usable afterwards.
TYPED_TEST(GpuSptc, OutOfRangeCoordinateIsAnError) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(4242);
  auto cu = make_backend<T>(BackendKind::cuda);
  for (ContractAssembly a : {ContractAssembly::rows, ContractAssembly::sort})
    for (int bad = 0; bad < 3; ++bad) {  // 0: X, 1: Y, 2: the same tensor as X and Y
      SCOPED_TRACE(std::string(a == ContractAssembly::rows ? "rows" : "sort") + " bad " +
                   std::to_string(bad));
      const auto spec = with_device(parse_contract_spec(bad == 2 ? "ijy,kjy->ik" : "ijk,jkl->il"),
                                    TensorCorePrecision::off, -1, a);
      auto x = random_tensor<T>({30, 8, 7}, 5000, false, rng);
      auto y = random_tensor<T>({8, 7, 40}, 5000, false, rng);
      if (bad == 2) y = x;
      SparseTensor<T>& t = bad == 1 ? y : x;
      const int mode = bad == 1 ? 2 : 1;
      t.idx[static_cast<std::size_t>(mode)][1234] =
          static_cast<index_t>(t.dims[static_cast<std::size_t>(mode)]);  // one past the end
      const SparseTensor<T>& yarg = bad == 2 ? x : y;
      try {
        (void)contract(*cu, x, yarg, spec);
        ADD_FAILURE() << "no error for an out-of-range coordinate";
      } catch (const Error& e) {
        const std::string want = "mode " + std::to_string(mode) + " coordinate " +
                                 std::to_string(t.dims[static_cast<std::size_t>(mode)]) +
                                 " >= mode length " +
                                 std::to_string(t.dims[static_cast<std::size_t>(mode)]);
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      t.idx[static_cast<std::size_t>(mode)][1234] = 0;  // repaired: the same backend runs
      expect_matches_reference(x, yarg, spec, "after the error");
    }
  // The other input empty: nothing is uploaded, the host checks the coordinates.
  auto x = random_tensor<T>({30, 8, 7}, 500, false, rng);
  x.idx[0][7] = 30;
  const SparseTensor<T> empty({8, 7, 40});
  EXPECT_THROW((void)contract(*cu, x, empty, parse_contract_spec("ijk,jkl->il")), Error);
  EXPECT_THROW((void)contract(*cu, empty, x, parse_contract_spec("jkl,ijk->il")), Error);
}

// The sort assembly (every product's key sorted) stays available and correct.
TYPED_TEST(GpuSptc, SortAssemblyMatchesReference) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int ox = 2; ox <= 4; ++ox)
    for (int contracted = 1; contracted <= 2; ++contracted) {
      const Problem p = random_problem(ox, 3, contracted, 0, 6, rng);
      const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 1200, false, rng);
      const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 1200, false, rng);
      const auto st = expect_matches_reference(
          x, y, with_device(p.spec, TensorCorePrecision::fp64, -1, ContractAssembly::sort),
          "sort assembly");
      EXPECT_EQ(st.tc_products, 0);
      EXPECT_NE(st.path.find("sort"), std::string::npos) << st.path;
    }
}

// Rows of every class of the rows assembly: small rows (groups), dense rows on one and on
// several column tiles, spill rows (too many columns for the shared-memory accumulator).
TYPED_TEST(GpuSptc, RowClassesMatchReference) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto spec = with_device(parse_contract_spec("ij,jk->ik"), TensorCorePrecision::off, -1);
  for (const std::uint64_t K : {std::uint64_t(3000), std::uint64_t(30000), std::uint64_t(400000)}) {
    // Rows 0 and 1 long (every j), rows 2.. short; Y has ~2 nonzeros per (j, column block).
    // Values are multiples of 1/128 (every sum exact in float and double), so the exact
    // zeros (x_a + x_b - 2 x_c with a + b = 2c) do not depend on the summation order.
    SparseTensor<T> x({40, 100}), y({100, K});
    for (index_t j = 0; j < 100; ++j)
      for (index_t i = 0; i < 2; ++i) {
        const index_t c[] = {i, j};
        x.push_back(c, static_cast<T>(0.5 + j / 128.0 + i));
      }
    for (int k = 0; k < 60; ++k) {
      const index_t c[] = {static_cast<index_t>(2 + rng() % 38), static_cast<index_t>(rng() % 100)};
      x.push_back(c, static_cast<T>(1 + rng() % 3));
    }
    const auto ny = static_cast<int>(std::min<std::uint64_t>(K, 100000));
    for (int k = 0; k < ny; ++k) {
      const index_t c[] = {static_cast<index_t>(rng() % 100), static_cast<index_t>(rng() % K)};
      y.push_back(c, static_cast<T>((rng() & 1) ? 1 : -2));
    }
    const auto st = expect_matches_reference(x, y, spec, "columns " + std::to_string(K));
    if (K == 400000)
      EXPECT_EQ(st.path.find(" 0 spill rows"), std::string::npos) << st.path;
    else
      EXPECT_EQ(st.path.find(" 0 dense rows"), std::string::npos) << st.path;
  }
}

// Tensor cores forced on (threshold 0: every block with a nonzero is dense, so every
// product runs on the tensor cores) and forced off, on random specs (orders 2..5, 1..3
// contracted letters, batch letters, interleaved outputs) whose short modes make the
// matched structure dense. fp64 with signed values at the value type's tolerance; the
// reduced precisions on positive values.
TYPED_TEST(GpuSptc, TensorCoresForcedOnAndOff) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int ox = 2; ox <= 5; ++ox)
    for (int oy = 2; oy <= 5; ++oy)
      for (int contracted = 1; contracted <= 3; ++contracted) {
        if (contracted > std::min(ox, oy)) continue;
        const int batch = (contracted < std::min(ox, oy) && rng() % 3 == 0) ? 1 : 0;
        if (ox + oy - 2 * contracted - batch < 1) continue;
        const Problem p = random_problem(ox, oy, contracted, batch, 6, rng);
        std::ostringstream what;
        what << "orders " << ox << "," << oy << " contracted " << contracted << " batch " << batch;
        {
          const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 1500, false, rng);
          const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 1500, false, rng);
          const auto on = expect_matches_reference(
              x, y, with_device(p.spec, TensorCorePrecision::fp64, 0), what.str() + " fp64 on");
          EXPECT_EQ(on.tc_products, on.products) << on.path;
          if (on.products > 0) {
            EXPECT_GT(on.tc_block_pairs, 0) << on.path;
          }
          expect_matches_reference(x, y, with_device(p.spec, TensorCorePrecision::off, 0),
                                   what.str() + " off");
        }
        const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 1500, false, rng, true);
        const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 1500, false, rng, true);
        for (const TensorCorePrecision prec : kAllTc) {
          const auto on =
              expect_matches_reference(x, y, with_device(p.spec, prec, 0),
                                       what.str() + " on " + to_string(prec), tc_tol<T>(prec));
          EXPECT_EQ(on.tc_products, on.products) << on.path;
        }
      }
}

/// X of "ijk,jkl->il" (i 64, j 8, k 8; key code j k, 4 key blocks of 16): rows 0..15 dense
/// over every key (density ~0.8); Y: j < 4 (key blocks 0, 1) dense for l < 16, plus a
/// sparse background over everything. So some block pairs run on the tensor cores and the
/// same output cells also get products of sparse blocks.
template <typename T>
void mixed_inputs(std::mt19937_64& rng, bool positive, SparseTensor<T>& x, SparseTensor<T>& y) {
  x = SparseTensor<T>({64, 8, 8});
  y = SparseTensor<T>({8, 8, 64});
  std::uniform_real_distribution<double> val(0.25, 1.0);
  auto v = [&] { return static_cast<T>((positive || (rng() & 1) ? 1 : -1) * val(rng)); };
  for (index_t i = 0; i < 16; ++i)
    for (index_t j = 0; j < 8; ++j)
      for (index_t k = 0; k < 8; ++k)
        if (rng() % 10 < 8) {
          const index_t c[] = {i, j, k};
          x.push_back(c, v());
        }
  for (int n = 0; n < 400; ++n) {
    const index_t c[] = {static_cast<index_t>(16 + rng() % 48), static_cast<index_t>(rng() % 8),
                         static_cast<index_t>(rng() % 8)};
    x.push_back(c, v());
  }
  for (index_t j = 0; j < 4; ++j)
    for (index_t k = 0; k < 8; ++k)
      for (index_t l = 0; l < 16; ++l)
        if (rng() % 10 < 8) {
          const index_t c[] = {j, k, l};
          y.push_back(c, v());
        }
  for (int n = 0; n < 600; ++n) {
    const index_t c[] = {static_cast<index_t>(rng() % 8), static_cast<index_t>(rng() % 8),
                         static_cast<index_t>(rng() % 64)};
    y.push_back(c, v());
  }
}

// Dense blocks on the tensor cores and the rest on the sparse path, merged in the same
// output cells, at a threshold between the blocks' densities; output orders that make
// the row side X, Y (swapped roles) or neither (final sort).
TYPED_TEST(GpuSptc, TensorCoresMixedWithSparsePath) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const char* text : {"ijk,jkl->il", "ijk,jkl->li"}) {
    SparseTensor<T> x, y;
    mixed_inputs(rng, false, x, y);
    const auto spec = parse_contract_spec(text);
    const auto st = expect_matches_reference(
        x, y, with_device(spec, TensorCorePrecision::fp64, 0.5), std::string(text) + " fp64 mixed");
    EXPECT_GT(st.tc_products, 0) << st.path;
    EXPECT_LT(st.tc_products, st.products) << st.path;
    const auto off = expect_matches_reference(
        x, y, with_device(spec, TensorCorePrecision::off, 0.5), std::string(text) + " off");
    EXPECT_EQ(off.tc_products, 0);
    // The default threshold (whatever it is) must give the same result.
    expect_matches_reference(x, y, with_device(spec, TensorCorePrecision::fp64, -1),
                             std::string(text) + " default threshold");
    SparseTensor<T> xp, yp;
    mixed_inputs(rng, true, xp, yp);
    for (const TensorCorePrecision prec : kAllTc) {
      const auto r = expect_matches_reference(xp, yp, with_device(spec, prec, 0.5),
                                              std::string(text) + " mixed " + to_string(prec),
                                              tc_tol<T>(prec));
      EXPECT_GT(r.tc_products, 0) << r.path;
      EXPECT_LT(r.tc_products, r.products) << r.path;
    }
  }
  // Interleaved output letters (rows of X, final sort) with a batch letter.
  {
    const auto spec = parse_contract_spec("ibjk,bjkl->ilb");
    SparseTensor<T> x({32, 3, 8, 8}), y({3, 8, 8, 32});
    for (int n = 0; n < 5000; ++n) {
      const index_t cx[] = {static_cast<index_t>(rng() % 16), static_cast<index_t>(rng() % 3),
                            static_cast<index_t>(rng() % 8), static_cast<index_t>(rng() % 8)};
      const index_t cy[] = {static_cast<index_t>(rng() % 3), static_cast<index_t>(rng() % 8),
                            static_cast<index_t>(rng() % 8), static_cast<index_t>(rng() % 32)};
      x.push_back(cx, static_cast<T>(1 + rng() % 3));
      y.push_back(cy, static_cast<T>(2 - static_cast<int>(rng() % 5)));
    }
    const auto st =
        expect_matches_reference(x, y, with_device(spec, TensorCorePrecision::fp64, 0.15),
                                 "interleaved with a batch letter");
    EXPECT_GT(st.tc_products, 0) << st.path;
  }
}

/// One cuda run of x (spec) y against the reference (coordinates exactly, values within
/// `tolerance` scaled for cancellation): the sanitizer-sized check, without the repeats of
/// expect_matches_reference. Returns the run's stats.
template <typename T>
ContractStats expect_once(const SparseTensor<T>& x, const SparseTensor<T>& y,
                          const ContractSpec& spec, const std::string& what,
                          double tolerance = tol<T>()) {
  SCOPED_TRACE(what + " spec " + spec.text);
  auto cu = make_backend<T>(BackendKind::cuda);
  auto ref = make_backend<T>(BackendKind::reference);
  ContractStats cs;
  const SparseTensor<T> got = contract(*cu, x, y, spec, &cs);
  const SparseTensor<T> want = contract(*ref, x, y, spec);
  EXPECT_EQ(got.dims, want.dims);
  EXPECT_EQ(got.nnz(), want.nnz());
  if (got.nnz() != want.nnz() || got.idx.size() != want.idx.size()) return cs;
  for (std::size_t m = 0; m < want.idx.size(); ++m)
    EXPECT_TRUE(got.idx[m] == want.idx[m]) << "coordinates of output mode " << m << " differ";
  EXPECT_LE(rel_error(got.vals, want.vals), tolerance * cancellation_factor(x, y, spec, want));
  return cs;
}

// Every device path of the contraction once, on a few thousand nonzeros: the cases that
// `jobs/gpu-node.sh sanitize` runs under compute-sanitizer racecheck and memcheck
// (TESSERA_SANITIZE_GTEST='*Small*'; docs/reliability.md). Row classes of the rows
// assembly (small rows in groups, dense rows on one and on several column tiles, spill
// rows), the sort assembly, a self-contraction, and the tensor-core blocks in every
// precision, forced on and mixed with the sparse path. The stats' path names the classes,
// so each case asserts that it ran the path it is there for.
TYPED_TEST(GpuSptc, SmallEveryPathOnce) {
  REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(2026);
  const auto off = with_device(parse_contract_spec("ij,jk->ik"), TensorCorePrecision::off, -1);
  // Columns are Y's distinct k. K 3000 (~1900 columns, ranked by a table): one column
  // tile; row 0 meets every j (3000 products): a dense row. K 3e6 (ranked by sorting the
  // codes; ~20000 columns, over one tile): row 0 meets every j (20000 products, x 4 >=
  // columns): dense on several tiles; row 1 meets 20 j (~4000 products, x 4 < columns):
  // spill. Rows 2.. are small (groups).
  for (const std::uint64_t K : {std::uint64_t(3000), std::uint64_t(3000000)}) {
    SparseTensor<T> x({40, 100}), y({100, K});
    for (index_t j = 0; j < 100; ++j) {
      const index_t c[] = {0, j};
      x.push_back(c, static_cast<T>(0.5 + j / 128.0));
      if (K > 3000 && j % 5 == 0) {
        const index_t c1[] = {1, j};
        x.push_back(c1, static_cast<T>(1.5 - j / 128.0));
      }
    }
    for (int k = 0; k < 60; ++k) {
      const index_t c[] = {static_cast<index_t>(2 + rng() % 38), static_cast<index_t>(rng() % 100)};
      x.push_back(c, static_cast<T>(1 + rng() % 3));
    }
    const int ny = K == 3000 ? 3000 : 20000;
    for (int k = 0; k < ny; ++k) {
      const index_t c[] = {static_cast<index_t>(rng() % 100), static_cast<index_t>(rng() % K)};
      y.push_back(c, static_cast<T>((rng() & 1) ? 1 : -2));
    }
    const auto st = expect_once(x, y, off, "row classes, K " + std::to_string(K));
    EXPECT_EQ(st.path.find(" 0 groups"), std::string::npos) << st.path;
    EXPECT_EQ(st.path.find(" 0 dense rows"), std::string::npos) << st.path;
    if (K > 3000) {
      EXPECT_EQ(st.path.find(" 0 spill rows"), std::string::npos) << st.path;
      EXPECT_EQ(st.path.find(" x 1 column tile"), std::string::npos) << st.path;
    }
  }
  {
    const Problem p = random_problem(3, 3, 1, 0, 6, rng);
    const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 1200, false, rng);
    const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 1200, false, rng);
    const auto st = expect_once(
        x, y, with_device(p.spec, TensorCorePrecision::fp64, -1, ContractAssembly::sort), "sort");
    EXPECT_NE(st.path.find("sort"), std::string::npos) << st.path;
  }
  {
    const auto x = random_tensor<T>({9, 9, 9}, 1000, false, rng);
    expect_once(x, x, parse_contract_spec("ijy,kjy->ik"), "self-contraction");
  }
  for (const bool positive : {false, true}) {
    SparseTensor<T> x, y;
    mixed_inputs(rng, positive, x, y);
    const auto spec = parse_contract_spec("ijk,jkl->il");
    for (const TensorCorePrecision prec : kAllTc) {
      if (!positive && prec != TensorCorePrecision::fp64) continue;
      for (const double threshold : {0.0, 0.5}) {
        const auto st = expect_once(
            x, y, with_device(spec, prec, threshold),
            "tensor cores " + to_string(prec) + " threshold " + std::to_string(threshold),
            tc_tol<T>(prec));
        EXPECT_GT(st.tc_products, 0) << st.path;
        if (threshold == 0.0)
          EXPECT_EQ(st.tc_products, st.products) << st.path;
        else
          EXPECT_LT(st.tc_products, st.products) << st.path;
      }
    }
  }
}

TEST(GpuSptcReal, CongressCoSponsorship) {
  REQUIRE_GPU();
  TESSERA_REQUIRE_SHARED(path, "congress-cosponsor_leg-leg-year.tns.gz");
  const comm::MpiCommunicator self(MPI_COMM_SELF);
  const auto rr = io::read_tns(path, self);
  const SparseTensor<double>& x = rr.local;
  ASSERT_GT(x.nnz(), 0);
  expect_matches_reference(x, x, parse_contract_spec("ijy,kjy->ik"), "congress", 0.0);
}

}  // namespace
}  // namespace tessera::kernels
