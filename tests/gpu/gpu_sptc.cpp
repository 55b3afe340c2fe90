// SpTC on the cuda backend (kernels/cuda/sptc.cu) against the reference backend, through
// Backend::contract_plan / Backend::contract: random specs (orders 2..5, 1..3 contracted
// letters, sometimes a batch letter, random output orders), float and double, repeated
// input coordinates, exact-zero cancellation, empty results and empty inputs,
// self-contraction, ~1e6 products, many products per output entry, keys over 64 bits (the
// cpu fallback) and the congress co-sponsorship tensor ("ijy,kjy->ik", when present).
// Coordinates must match exactly; values within test::tol<T>() (relative, Frobenius).
// The plan's count and the run's stats must agree with the reference backend's.
// Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
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
#include "kernels/sptc.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

#define REQUIRE_GPU()                           \
  do {                                          \
    if (!cuda_device_available()) {             \
      GTEST_SKIP() << "no CUDA device visible"; \
    }                                           \
  } while (0)

struct Problem {
  ContractSpec spec;
  std::map<char, std::uint64_t> len;
};

std::vector<std::uint64_t> dims_of(const std::string& sub,
                                   const std::map<char, std::uint64_t>& len) {
  std::vector<std::uint64_t> d;
  for (char c : sub) d.push_back(len.at(c));
  return d;
}

/// X of order ox and Y of order oy sharing `contracted` summed and `batch` kept letters,
/// letters in random positions, the output a random order of the free and batch letters;
/// every length in [1, max_len].
Problem random_problem(int ox, int oy, int contracted, int batch, std::uint64_t max_len,
                       std::mt19937_64& rng) {
  std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::shuffle(letters.begin(), letters.end(), rng);
  std::size_t next = 0;
  std::string shared, xs, ys, out;
  for (int c = 0; c < contracted + batch; ++c) shared.push_back(letters[next++]);
  for (int c = contracted; c < contracted + batch; ++c) out.push_back(shared[c]);
  xs = ys = shared;
  for (int m = contracted + batch; m < ox; ++m) {
    xs.push_back(letters[next]);
    out.push_back(letters[next++]);
  }
  for (int m = contracted + batch; m < oy; ++m) {
    ys.push_back(letters[next]);
    out.push_back(letters[next++]);
  }
  std::shuffle(xs.begin(), xs.end(), rng);
  std::shuffle(ys.begin(), ys.end(), rng);
  std::shuffle(out.begin(), out.end(), rng);
  Problem p;
  p.spec = parse_contract_spec(xs + "," + ys + "->" + out);
  for (char c : xs + ys) p.len[c] = std::uniform_int_distribution<std::uint64_t>(1, max_len)(rng);
  return p;
}

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

/// Runs x (spec) y on the cuda and reference backends and compares everything.
template <typename T>
void expect_matches_reference(const SparseTensor<T>& x, const SparseTensor<T>& y,
                              const ContractSpec& spec, const std::string& what,
                              double tolerance = tol<T>()) {
  SCOPED_TRACE(what + " spec " + spec.text);
  auto cu = make_backend<T>(BackendKind::cuda);
  auto ref = make_backend<T>(BackendKind::reference);
  auto cplan = cu->contract_plan(x, y, spec);
  auto rplan = ref->contract_plan(x, y, spec);
  EXPECT_EQ(cplan->count().products, rplan->count().products);
  EXPECT_EQ(cplan->count().output_entries, rplan->count().output_entries);
  EXPECT_EQ(cplan->count().output_bytes, rplan->count().output_bytes);
  EXPECT_EQ(cplan->output_dims(), rplan->output_dims());
  ContractStats cs, rs;
  const SparseTensor<T> got = cu->contract(*cplan, &cs);
  const SparseTensor<T> want = ref->contract(*rplan, &rs);
  EXPECT_EQ(cs.products, rs.products);
  EXPECT_EQ(cs.output_entries, rs.output_entries);
  EXPECT_EQ(cs.output_nnz, rs.output_nnz);
  EXPECT_EQ(cs.zeros_dropped, rs.zeros_dropped);
  EXPECT_EQ(cs.output_nnz, got.nnz());
  EXPECT_GE(cs.match_seconds, 0.0);
  EXPECT_GE(cs.multiply_seconds, 0.0);
  EXPECT_GE(cs.assemble_seconds, 0.0);
  ASSERT_EQ(got.dims, want.dims);
  ASSERT_EQ(got.idx.size(), want.idx.size());
  ASSERT_EQ(got.nnz(), want.nnz());
  for (std::size_t m = 0; m < want.idx.size(); ++m)
    ASSERT_TRUE(got.idx[m] == want.idx[m]) << "coordinates of output mode " << m << " differ";
  EXPECT_LE(rel_error(got.vals, want.vals), tolerance);
  for (const T v : got.vals) ASSERT_NE(v, T(0)) << "an exact zero was kept";
  // The one-call helper goes through the same overrides.
  const SparseTensor<T> again = contract(*cu, x, y, spec);
  EXPECT_EQ(again.nnz(), got.nnz());
}

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
