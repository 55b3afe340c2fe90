// ops::mttkrp_accumulate (memory tier 3: out += the MTTKRP of one chunk) on the host
// backends, which share one implementation (prepare the chunk, mttkrp into a scratch kept
// by the backend, Backend::host_accumulate, then add_rows): over chunks that partition a tensor,
// starting from a known nonzero output, the result must be that output plus the backend's mttkrp of
// the whole tensor (and the reference backend's); an empty chunk adds nothing; the times are
// counted and reset. Fresh random inputs each run (TESSERA_TEST_SEED=<n> replays a failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

/// Uniform random coordinates (repeats allowed: the MTTKRP sums them), values in [-1, 1).
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, nnz_t nnz,
                              std::uint64_t seed) {
  SparseTensor<T> x(dims);
  CounterRng rng(seed, 7);
  std::vector<index_t> c(dims.size());
  for (nnz_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    x.push_back(c.data(), static_cast<T>(2.0 * rng.uniform() - 1.0));
  }
  return x;
}

/// Nonzeros [first, first + count) of x, global coordinates.
template <typename T>
SparseTensor<T> slice(const SparseTensor<T>& x, nnz_t first, nnz_t count) {
  SparseTensor<T> c(x.dims);
  for (int m = 0; m < x.order(); ++m)
    c.idx[static_cast<std::size_t>(m)].assign(
        x.idx[static_cast<std::size_t>(m)].begin() + first,
        x.idx[static_cast<std::size_t>(m)].begin() + first + count);
  c.vals.assign(x.vals.begin() + first, x.vals.begin() + first + count);
  return c;
}

template <typename T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
  CounterRng rng(seed, 11);
  std::vector<T> v(n);
  for (auto& a : v) a = static_cast<T>(2.0 * rng.uniform() - 1.0);
  return v;
}

/// ||got - want|| / ||want|| in double.
template <typename T>
double rel_error(const std::vector<T>& got, const std::vector<double>& want) {
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double g = static_cast<double>(got[k]);
    if (!std::isfinite(g)) return INFINITY;
    d2 += (g - want[k]) * (g - want[k]);
    w2 += want[k] * want[k];
  }
  return std::sqrt(d2 / std::max(w2, 1e-300));
}

template <typename T>
class Accumulate : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Accumulate, Types);

TYPED_TEST(Accumulate, ChunksSumToTheWholeMttkrp) {
  using T = TypeParam;
  const std::uint64_t seed = test::fresh_seed();
  auto ref = make_backend<T>(BackendKind::reference);
  const std::vector<std::vector<std::uint64_t>> shapes = {{40, 1, 33}, {13, 9, 11, 7}};
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    auto be = make_backend<T>(kind, 2);
    for (const auto& dims : shapes) {
      const int N = static_cast<int>(dims.size());
      const nnz_t nnz = 3000;
      const auto x = random_tensor<T>(dims, nnz, seed + dims.size());
      const nnz_t cut = 1234;  // two chunks; rows of every mode appear in both
      const SparseTensor<T> chunks[] = {slice(x, 0, cut), slice(x, cut, 0),
                                        slice(x, cut, nnz - cut)};
      auto hx = be->prepare(x);
      auto hr = ref->prepare(x);
      for (int R : {5, 16}) {
        std::vector<std::vector<T>> A;
        std::vector<Array<T>> Ab;
        std::vector<const T*> fb, fr;
        for (int m = 0; m < N; ++m) {
          A.push_back(random_values<T>(static_cast<std::size_t>(dims[static_cast<std::size_t>(m)]) *
                                           static_cast<std::size_t>(R),
                                       seed * 31 + static_cast<std::uint64_t>(m * 7 + R)));
          Ab.push_back(be->allocate(A.back().size()));
          be->upload(A.back().data(), A.back().size(), Ab.back().data());
          fb.push_back(Ab.back().data());
          fr.push_back(A.back().data());
        }
        for (int mode = 0; mode < N; ++mode) {
          const std::string what = to_string(kind) + ", order " + std::to_string(N) + ", mode " +
                                   std::to_string(mode) + ", R " + std::to_string(R) + ", seed " +
                                   std::to_string(seed);
          const std::size_t n = static_cast<std::size_t>(dims[static_cast<std::size_t>(mode)]) * R;
          // out starts at known nonzero values and must accumulate.
          const std::vector<T> before = random_values<T>(n, seed + 1000 + n);
          Array<T> out = be->allocate(n);
          be->upload(before.data(), n, out.data());
          auto skip = fb;
          skip[static_cast<std::size_t>(mode)] = nullptr;  // documented as not read
          (void)ops::take_accumulate_times(*be);
          for (const auto& c : chunks)
            ops::mttkrp_accumulate(*be, c, mode, skip, R, out.data(), -1, false);
          const AccumulateTimes t = ops::take_accumulate_times(*be);
          EXPECT_EQ(t.chunks, 2) << what << ": the empty chunk is not counted";
          EXPECT_EQ(t.copy, 0.0) << what;
          EXPECT_GE(t.compute, 0.0) << what;
          const AccumulateTimes again = ops::take_accumulate_times(*be);
          EXPECT_EQ(again.chunks, 0) << what << ": take resets the sums";
          std::vector<T> got(n);
          be->download(out.data(), n, got.data());

          // Against this backend's mttkrp of the whole tensor, and the reference backend's.
          Array<T> whole = be->allocate(n);
          ops::mttkrp(*be, *hx, mode, fb, R, whole.data());
          std::vector<T> w(n);
          be->download(whole.data(), n, w.data());
          std::vector<T> wr(n);
          ops::mttkrp(*ref, *hr, mode, fr, R, wr.data());
          std::vector<double> want(n), want_ref(n);
          for (std::size_t k = 0; k < n; ++k) {
            want[k] = static_cast<double>(before[k]) + static_cast<double>(w[k]);
            want_ref[k] = static_cast<double>(before[k]) + static_cast<double>(wr[k]);
          }
          EXPECT_LT(rel_error(got, want), 10 * test::tol<T>()) << what;
          EXPECT_LT(rel_error(got, want_ref), 10 * test::tol<T>()) << what << " vs reference";
        }
      }
    }
  }
}

TYPED_TEST(Accumulate, BadArguments) {
  using T = TypeParam;
  auto be = make_backend<T>(BackendKind::cpu, 1);
  const auto x = random_tensor<T>({4, 5, 6}, 20, 3);
  std::vector<T> f0(4 * 2, T(1)), f1(5 * 2, T(1)), f2(6 * 2, T(1)), out(4 * 2, T(0));
  const std::vector<const T*> f = {f0.data(), f1.data(), f2.data()};
  EXPECT_THROW(ops::mttkrp_accumulate(*be, x, 3, f, 2, out.data(), -1, false), Error);
  EXPECT_THROW(ops::mttkrp_accumulate(*be, x, -1, f, 2, out.data(), -1, false), Error);
  EXPECT_THROW(ops::mttkrp_accumulate(*be, x, 0, f, 0, out.data(), -1, false), Error);
  // A coordinate outside its mode is refused (by prepare) and adds nothing.
  auto bad = x;
  bad.idx[1][7] = 5;
  EXPECT_THROW(ops::mttkrp_accumulate(*be, bad, 0, f, 2, out.data(), -1, false), Error);
  for (T v : out) EXPECT_EQ(v, T(0));
}

}  // namespace
}  // namespace tessera::kernels
