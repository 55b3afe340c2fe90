// Tucker-HOOI: recovery of exact multilinear-rank tensors, agreement with an independent
// dense HOOI written here, agreement of the three SVD methods, invariance to the rank
// count, the backend and relabelling, monotone fit on real tensors, the model file, and
// clear errors for bad ranks and the memory limit. Runs under mpiexec at several rank
// counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "algo/tucker_dense.hpp"
#include "comm/mpi_communicator.hpp"
#include "gather_util.hpp"
#include "io/model_io.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "linalg/dense.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

using algo::SvdMethod;
using algo::TuckerInit;
using kernels::BackendKind;
using test::subspace_gap;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

// ---- dense helpers (row-major tensors, the last mode fastest) ----------------------

struct Dense {
  std::vector<std::uint64_t> shape;
  std::vector<double> v;
  std::size_t size() const { return v.size(); }
};

/// out = T with mode m mapped by K: out[a, t, b] = sum_f K(t, f) T[a, f, b], where K has
/// `to` rows and shape[m] columns.
template <typename Coef>
Dense apply_mode(const Dense& t, int m, std::uint64_t to, Coef K) {
  std::uint64_t outer = 1, inner = 1;
  for (int k = 0; k < m; ++k) outer *= t.shape[k];
  for (std::size_t k = static_cast<std::size_t>(m) + 1; k < t.shape.size(); ++k)
    inner *= t.shape[k];
  const std::uint64_t from = t.shape[m];
  Dense o;
  o.shape = t.shape;
  o.shape[m] = to;
  o.v.assign(outer * to * inner, 0.0);
  for (std::uint64_t a = 0; a < outer; ++a)
    for (std::uint64_t f = 0; f < from; ++f)
      for (std::uint64_t q = 0; q < to; ++q) {
        const double k = K(q, f);
        if (k == 0) continue;
        const double* src = t.v.data() + (a * from + f) * inner;
        double* dst = o.v.data() + (a * to + q) * inner;
        for (std::uint64_t b = 0; b < inner; ++b) dst[b] += k * src[b];
      }
  return o;
}

/// T x_m U^T (I_m -> R_m) for U (I_m x R_m).
Dense contract(const Dense& t, int m, const Matrix<double>& U) {
  return apply_mode(t, m, static_cast<std::uint64_t>(U.cols),
                    [&](std::uint64_t r, std::uint64_t i) {
                      return U(static_cast<std::int64_t>(i), static_cast<std::int64_t>(r));
                    });
}
/// T x_m U (R_m -> I_m).
Dense expand(const Dense& t, int m, const Matrix<double>& U) {
  return apply_mode(t, m, static_cast<std::uint64_t>(U.rows),
                    [&](std::uint64_t i, std::uint64_t r) {
                      return U(static_cast<std::int64_t>(i), static_cast<std::int64_t>(r));
                    });
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

/// Modified Gram-Schmidt, twice: orthonormal columns with the same span.
void orthonormalize_mgs(Matrix<double>& A) {
  for (int pass = 0; pass < 2; ++pass)
    for (std::int64_t j = 0; j < A.cols; ++j) {
      for (std::int64_t k = 0; k < j; ++k) {
        double d = 0;
        for (std::int64_t i = 0; i < A.rows; ++i) d += A(i, k) * A(i, j);
        for (std::int64_t i = 0; i < A.rows; ++i) A(i, j) -= d * A(i, k);
      }
      double s = 0;
      for (std::int64_t i = 0; i < A.rows; ++i) s += A(i, j) * A(i, j);
      s = std::sqrt(s);
      for (std::int64_t i = 0; i < A.rows; ++i) A(i, j) /= s;
    }
}

double max_gap(const TuckerModel& a, const TuckerModel& b) {
  double g = 0;
  for (int n = 0; n < a.order(); ++n) g = std::max(g, subspace_gap(a.factors[n], b.factors[n]));
  return g;
}

/// The initial factors tucker_hooi uses (same spans): tucker_initial_value orthonormalised.
std::vector<Matrix<double>> initial_factors(const std::vector<std::uint64_t>& dims,
                                            const std::vector<int>& ranks, std::uint64_t seed) {
  std::vector<Matrix<double>> U;
  for (std::size_t n = 0; n < dims.size(); ++n) {
    Matrix<double> A(static_cast<std::int64_t>(dims[n]), ranks[n]);
    for (std::int64_t i = 0; i < A.rows; ++i)
      for (int r = 0; r < ranks[n]; ++r)
        A(i, r) =
            algo::tucker_initial_value(seed, static_cast<int>(n), static_cast<std::uint64_t>(i), r);
    orthonormalize_mgs(A);
    U.push_back(std::move(A));
  }
  return U;
}

/// Independent dense HOOI: Y_(n) by dense mode products, U_n = top eigenvectors of
/// Y_(n) Y_(n)^T (I_n x I_n, dsyevd), fit from the explicit reconstruction. Returns the
/// fit after each iteration.
std::vector<double> dense_hooi(const Dense& X, const std::vector<int>& ranks, std::uint64_t seed,
                               int iters, std::vector<Matrix<double>>* factors_out = nullptr) {
  const int N = static_cast<int>(X.shape.size());
  auto U = initial_factors(X.shape, ranks, seed);
  std::vector<double> fits;
  const double nx = norm(X.v);
  for (int it = 0; it < iters; ++it) {
    Dense core;
    for (int n = 0; n < N; ++n) {
      Dense Y = X;
      for (int m = 0; m < N; ++m)
        if (m != n) Y = contract(Y, m, U[m]);
      // Unfold mode n: rows i_n; the column order does not matter for Y Y^T.
      const std::uint64_t I = X.shape[n];
      std::uint64_t outer = 1, inner = 1;
      for (int k = 0; k < n; ++k) outer *= Y.shape[k];
      for (int k = n + 1; k < N; ++k) inner *= Y.shape[k];
      std::vector<double> S(I * I, 0.0);
      for (std::uint64_t a = 0; a < outer; ++a)
        for (std::uint64_t i = 0; i < I; ++i)
          for (std::uint64_t j = 0; j < I; ++j) {
            const double* yi = Y.v.data() + (a * I + i) * inner;
            const double* yj = Y.v.data() + (a * I + j) * inner;
            double s = 0;
            for (std::uint64_t b = 0; b < inner; ++b) s += yi[b] * yj[b];
            S[i * I + j] += s;
          }
      std::vector<double> w(I), Q(I * I);
      linalg::symmetric_eig(S.data(), static_cast<int>(I), w.data(), Q.data());
      Matrix<double> Un(static_cast<std::int64_t>(I), ranks[n]);
      for (std::uint64_t i = 0; i < I; ++i)
        for (int r = 0; r < ranks[n]; ++r)
          Un(static_cast<std::int64_t>(i), r) = Q[i * I + (I - 1 - r)];
      U[n] = Un;
      if (n == N - 1) core = contract(Y, n, U[n]);
    }
    Dense Xh = core;
    for (int m = 0; m < N; ++m) Xh = expand(Xh, m, U[m]);
    double r2 = 0;
    for (std::size_t k = 0; k < X.size(); ++k) r2 += (X.v[k] - Xh.v[k]) * (X.v[k] - Xh.v[k]);
    fits.push_back(1 - std::sqrt(r2) / nx);
  }
  if (factors_out) *factors_out = U;
  return fits;
}

/// Exact multilinear rank: dense core times orthonormal factors whose rows live on a
/// random subset of `support[n]` indices of each mode (support = dims: fully dense),
/// plus relative Gaussian noise on the support. Same tensor on every rank (seeded).
struct Planted {
  Dense X;  ///< the support sub-block, dense (the whole tensor when support = dims)
  std::vector<std::vector<index_t>> idx;  ///< per mode: the sorted support indices
  std::vector<std::uint64_t> dims;
  std::vector<Matrix<double>> factors;
};
Planted planted(const std::vector<std::uint64_t>& dims, const std::vector<std::uint64_t>& support,
                const std::vector<int>& ranks, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  const int N = static_cast<int>(dims.size());
  Planted p;
  p.dims = dims;
  Dense core;
  for (int n = 0; n < N; ++n) core.shape.push_back(static_cast<std::uint64_t>(ranks[n]));
  core.v.resize(
      std::accumulate(core.shape.begin(), core.shape.end(), std::uint64_t{1}, std::multiplies<>()));
  for (auto& c : core.v) c = g(rng);
  p.X = core;
  for (int n = 0; n < N; ++n) {
    std::vector<index_t> idx(dims[n]);
    std::iota(idx.begin(), idx.end(), index_t{0});
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(support[n]);
    std::sort(idx.begin(), idx.end());
    Matrix<double> A(static_cast<std::int64_t>(dims[n]), ranks[n]);
    for (index_t i : idx)
      for (int r = 0; r < ranks[n]; ++r) A(i, r) = g(rng);
    orthonormalize_mgs(A);
    Matrix<double> B(static_cast<std::int64_t>(idx.size()), ranks[n]);
    for (std::size_t a = 0; a < idx.size(); ++a)
      for (int r = 0; r < ranks[n]; ++r) B(static_cast<std::int64_t>(a), r) = A(idx[a], r);
    p.X = expand(p.X, n, B);
    p.factors.push_back(std::move(A));
    p.idx.push_back(std::move(idx));
  }
  if (noise > 0) {
    const double scale = noise * norm(p.X.v) / std::sqrt(static_cast<double>(p.X.size()));
    for (auto& x : p.X.v) x += scale * g(rng);
  }
  return p;
}

/// This rank's share (entry k on rank k % P) of the planted tensor's entries.
template <typename T>
SparseTensor<T> share(const Planted& p, const comm::Communicator& c) {
  SparseTensor<T> x(p.dims);
  const int N = static_cast<int>(p.dims.size());
  std::vector<index_t> co(static_cast<std::size_t>(N));
  for (std::size_t k = 0; k < p.X.size(); ++k) {
    if (p.X.v[k] == 0 || static_cast<int>(k % static_cast<std::size_t>(c.size())) != c.rank())
      continue;
    std::size_t rest = k;
    for (int n = N - 1; n >= 0; --n) {
      co[n] = p.idx[n][rest % p.X.shape[n]];
      rest /= p.X.shape[n];
    }
    x.push_back(co.data(), static_cast<T>(p.X.v[k]));
  }
  return x;
}

algo::TuckerOptions tucker_opts(std::vector<int> ranks, int iters, double tol,
                                SvdMethod svd = SvdMethod::gram,
                                TuckerInit init = TuckerInit::random, std::uint64_t seed = 3) {
  algo::TuckerOptions o;
  o.ranks = std::move(ranks);
  o.max_iters = iters;
  o.tol = tol;
  o.seed = seed;
  o.svd = svd;
  o.init = init;
  o.subspace_steps = 8;
  o.subspace_tol = 1e-13;
  o.print_iterations = false;
  return o;
}

template <typename T>
algo::TuckerResult run_tucker(SparseTensor<T> x, const comm::Communicator& c, BackendKind kind,
                              const algo::TuckerOptions& o,
                              partition::Scheme scheme = partition::Scheme::nnz) {
  auto d = partition::distribute(std::move(x), scheme, {}, c);
  auto be = kernels::make_backend<T>(kind, 1);
  return algo::tucker_hooi<T>(d, *be, c, o);
}

std::string label(BackendKind k, SvdMethod s, TuckerInit i) {
  return kernels::to_string(k) + "/" + algo::to_string(s) + "/" + algo::to_string(i) + " on " +
         std::to_string(world().size()) + " ranks";
}

std::vector<SvdMethod> svd_methods() {
  std::vector<SvdMethod> m{SvdMethod::gram, SvdMethod::subspace};
  if (algo::scalapack_available()) m.push_back(SvdMethod::scalapack);
  return m;
}

// ---- recovery of exact multilinear rank ------------------------------------------------

TEST(TuckerExact, RecoversDenseMultilinearRankEveryMethod) {
  const std::vector<std::uint64_t> dims{14, 12, 10};
  const std::vector<int> ranks{3, 4, 2};
  const auto p = planted(dims, dims, ranks, 0.0, 41);
  for (auto kind : {BackendKind::reference, BackendKind::cpu})
    for (auto svd : svd_methods())
      for (auto init : {TuckerInit::random, TuckerInit::hosvd}) {
        const auto what = label(kind, svd, init);
        auto res = run_tucker<double>(share<double>(p, world()), world(), kind,
                                      tucker_opts(ranks, 30, 1e-12, svd, init));
        EXPECT_GE(res.fit, 0.999) << what;
        EXPECT_EQ(res.completed_columns, 0) << what;
        for (int n = 0; n < 3; ++n)
          EXPECT_LT(subspace_gap(p.factors[n], res.model.factors[n]), 1e-6)
              << what << " mode " << n;
        // The model reproduces the tensor.
        std::vector<index_t> c(3);
        double r2 = 0;
        for (std::size_t k = 0; k < p.X.size(); ++k) {
          std::size_t rest = k;
          for (int n = 2; n >= 0; --n) {
            c[n] = static_cast<index_t>(rest % dims[n]);
            rest /= dims[n];
          }
          const double d = res.model.value_at(c.data()) - p.X.v[k];
          r2 += d * d;
        }
        EXPECT_LT(std::sqrt(r2), 1e-8 * norm(p.X.v)) << what;
      }
}

TEST(TuckerExact, RecoversSparseSupportOrder4AndFloat) {
  // Nonzero only on a 9x8x7x6 sub-block of a 300x200x150x100 tensor: sparse and exactly of
  // multilinear rank (2,3,2,2).
  const std::vector<std::uint64_t> dims{300, 200, 150, 100};
  const std::vector<int> ranks{2, 3, 2, 2};
  const auto p = planted(dims, {9, 8, 7, 6}, ranks, 0.0, 7);
  const auto x = share<double>(p, world());
  for (auto svd : svd_methods()) {
    auto res = run_tucker<double>(x, world(), BackendKind::cpu, tucker_opts(ranks, 30, 1e-12, svd));
    EXPECT_GE(res.fit, 0.999) << algo::to_string(svd);
    for (int n = 0; n < 4; ++n)
      EXPECT_LT(subspace_gap(p.factors[n], res.model.factors[n]), 1e-6) << algo::to_string(svd);
  }
  auto resf =
      run_tucker<float>(x.cast<float>(), world(), BackendKind::cpu, tucker_opts(ranks, 30, 1e-7));
  EXPECT_GE(resf.fit, 0.999);
  for (int n = 0; n < 4; ++n) EXPECT_LT(subspace_gap(p.factors[n], resf.model.factors[n]), 1e-3);
}

TEST(TuckerExact, HigherOrderAndUnequalRanks) {
  // Order 6, ranks (2,1,3,2,2,1); the core unfoldings are full rank.
  const std::vector<std::uint64_t> dims{5, 4, 6, 3, 4, 3};
  const std::vector<int> ranks{2, 1, 3, 2, 2, 1};
  const auto p = planted(dims, dims, ranks, 0.0, 13);
  for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
    auto res =
        run_tucker<double>(share<double>(p, world()), world(), kind, tucker_opts(ranks, 20, 1e-12));
    EXPECT_GE(res.fit, 0.999) << kernels::to_string(kind);
    EXPECT_EQ(res.model.core.size(), 24u);
  }
}

// ---- against an independent dense HOOI ---------------------------------------------------

TEST(TuckerDense, FitMatchesIndependentDenseHooi) {
  struct Case {
    std::vector<std::uint64_t> dims;
    std::vector<int> ranks;
  };
  for (const Case& cs : {Case{{12, 10, 9}, {3, 3, 2}}, Case{{8, 7, 6, 5}, {2, 3, 2, 2}}}) {
    // Low rank plus 30% noise: fits well below 1, so 1e-8 is a real check.
    const auto p = planted(cs.dims, cs.dims, cs.ranks, 0.3, 99);
    const int iters = 6;
    std::vector<Matrix<double>> ref_factors;
    const auto ref = dense_hooi(p.X, cs.ranks, 5, iters, &ref_factors);
    std::vector<SvdMethod> exact{SvdMethod::gram};
    if (algo::scalapack_available()) exact.push_back(SvdMethod::scalapack);
    for (auto kind : {BackendKind::reference, BackendKind::cpu})
      for (auto svd : exact) {
        const auto what =
            label(kind, svd, TuckerInit::random) + " order " + std::to_string(cs.dims.size());
        auto res =
            run_tucker<double>(share<double>(p, world()), world(), kind,
                               tucker_opts(cs.ranks, iters, 0.0, svd, TuckerInit::random, 5));
        ASSERT_EQ(res.iterations, iters) << what;
        for (int i = 0; i < iters; ++i)
          EXPECT_NEAR(res.history[i].fit, ref[i], 1e-8) << what << " iteration " << i + 1;
        for (std::size_t n = 0; n < cs.dims.size(); ++n)
          EXPECT_LT(subspace_gap(ref_factors[n], res.model.factors[n]), 1e-6) << what;
        EXPECT_LT(ref[iters - 1], 0.95) << "the case should not be nearly exact";
      }
  }
}

// ---- the three SVD methods agree ---------------------------------------------------------

TEST(TuckerSvd, MethodsReachTheSameSubspaces) {
  const std::vector<std::uint64_t> dims{30, 25, 20};
  const std::vector<int> ranks{4, 3, 3};
  const auto p = planted(dims, dims, ranks, 0.05, 5);
  std::vector<algo::TuckerResult> res;
  for (auto svd : svd_methods())
    res.push_back(run_tucker<double>(share<double>(p, world()), world(), BackendKind::cpu,
                                     tucker_opts(ranks, 200, 1e-14, svd)));
  for (std::size_t k = 1; k < res.size(); ++k) {
    EXPECT_LT(max_gap(res[0].model, res[k].model), 1e-6) << algo::to_string(svd_methods()[k]);
    EXPECT_NEAR(res[0].fit, res[k].fit, 1e-10) << algo::to_string(svd_methods()[k]);
  }
  // gram and scalapack are the same iteration (exact SVDs): the same fit at every step.
  if (res.size() == 3) {
    for (std::size_t i = 0; i < std::min(res[0].history.size(), res[2].history.size()); ++i)
      EXPECT_NEAR(res[0].history[i].fit, res[2].history[i].fit, 1e-10) << "iteration " << i + 1;
  }
}

// ---- same result on every rank count, backend and labelling --------------------------------

using test::gather_all;

/// A single-process reference run (rank 0, reference backend) broadcast to every rank.
template <typename T>
algo::TuckerResult single_process(const SparseTensor<T>& local, const algo::TuckerOptions& o) {
  const auto& w = world();
  auto all = gather_all(local, w);
  algo::TuckerResult ref;
  std::vector<double> fits(static_cast<std::size_t>(o.max_iters), 0.0);
  int iters = 0;
  if (w.rank() == 0) {
    comm::MpiCommunicator self(MPI_COMM_SELF);
    ref = run_tucker<T>(all, self, BackendKind::reference, o);
    iters = ref.iterations;
    for (int i = 0; i < iters; ++i) fits[static_cast<std::size_t>(i)] = ref.history[i].fit;
  } else {
    // Shape only: the values come from rank 0.
    ref.model.dims = local.dims;
    ref.model.ranks = o.ranks;
    for (std::size_t n = 0; n < local.dims.size(); ++n)
      ref.model.factors.emplace_back(static_cast<std::int64_t>(local.dims[n]), o.ranks[n]);
  }
  w.broadcast(&iters, 1, 0);
  w.broadcast(fits.data(), fits.size(), 0);
  ref.history.resize(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) ref.history[i].fit = fits[static_cast<std::size_t>(i)];
  ref.iterations = iters;
  for (auto& f : ref.model.factors) w.broadcast(f.data.data(), f.data.size(), 0);
  return ref;
}

/// This rank's block of a sampled rank-4 power-law tensor, 60 x 50 x 40, 6000 nonzeros.
partition::Distributed<double> powerlaw_block(std::uint64_t seed) {
  algo::GenerateOptions g;
  g.dims = {60, 50, 40};
  g.nnz = 6000;
  g.rank = 4;
  g.noise = 0.1;
  g.seed = seed;
  g.structure = algo::Structure::sampled;
  g.dist = algo::IndexDist::powerlaw;
  return algo::generate(g, world());
}

TEST(TuckerInvariance, SameOnEveryRankCountBackendAndLabelling) {
  auto gen = powerlaw_block(21);
  for (auto svd : svd_methods()) {
    const auto o = tucker_opts({5, 4, 3}, 5, 0.0, svd, TuckerInit::random);
    const auto ref = single_process(gen.block, o);
    ASSERT_EQ(ref.iterations, 5);
    for (auto kind : {BackendKind::reference, BackendKind::cpu})
      for (auto scheme : {partition::Scheme::nnz, partition::Scheme::grid}) {
        const std::string what = kernels::to_string(kind) + "/" + partition::to_string(scheme) +
                                 "/" + algo::to_string(svd) + " on " +
                                 std::to_string(world().size()) + " ranks";
        auto res = run_tucker<double>(gen.block, world(), kind, o, scheme);
        ASSERT_EQ(res.iterations, 5) << what;
        for (int i = 0; i < 5; ++i)
          EXPECT_NEAR(res.history[i].fit, ref.history[i].fit, 1e-9)
              << what << " iteration " << i + 1;
        EXPECT_LT(max_gap(ref.model, res.model), 1e-6) << what;
      }
    // Relabelled indices: the balance changes, the result does not.
    auto d = partition::distribute_relabelled(SparseTensor<double>(gen.block),
                                              partition::Scheme::grid, {}, world(), 77);
    auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
    auto res = algo::tucker_hooi<double>(d, *be, world(), o);
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(res.history[i].fit, ref.history[i].fit, 1e-9)
          << "relabelled, iteration " << i + 1;
    EXPECT_LT(max_gap(ref.model, res.model), 1e-6) << "relabelled";
  }
}

void expect_input_error(const std::function<void()>& f, const std::string& needle);

// --comm-strategy of tucker (algo::TuckerRows): the whole TTMc rows all-reduced, every rank
// then running the dense stage on all rows, give what the owners' exchange and one process
// give, from random and HOSVD starts. The nnz partition cuts mode 0's rows between the
// ranks (each rank's TTMc rows added into the whole Y first) and leaves the dense planted
// tensor's other modes whole on every rank (all-reduced in place).
TEST(TuckerRows, AllreduceMatchesOwnersAndOneProcess) {
  auto gen = powerlaw_block(23);
  const auto dense = planted({14, 12, 10}, {14, 12, 10}, {3, 4, 2}, 0.05, 43);
  const int P = world().size();
  struct Case {
    SparseTensor<double> x;
    std::vector<int> ranks;
  };
  const std::vector<Case> cases{{gen.block, {5, 4, 3}}, {share<double>(dense, world()), {3, 4, 2}}};
  const std::vector<std::pair<std::size_t, TuckerInit>> runs{
      {0, TuckerInit::random}, {0, TuckerInit::hosvd}, {1, TuckerInit::random}};
  for (const auto& [ci, init] : runs) {
    {
      const std::string what = "case " + std::to_string(ci) + ", " + algo::to_string(init) + ", " +
                               std::to_string(P) + " ranks";
      auto o = tucker_opts(cases[ci].ranks, 3, 0.0, SvdMethod::gram, init);
      const auto ref = single_process(cases[ci].x, o);
      ASSERT_EQ(ref.iterations, 3) << what;
      o.rows = algo::TuckerRows::owners;
      const auto own = run_tucker<double>(cases[ci].x, world(), BackendKind::cpu, o);
      o.rows = algo::TuckerRows::allreduce;
      const auto all = run_tucker<double>(cases[ci].x, world(), BackendKind::cpu, o);
      ASSERT_EQ(all.iterations, 3) << what;
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(all.history[i].fit, ref.history[i].fit, 1e-9) << what << ", iteration " << i;
        EXPECT_NEAR(all.history[i].fit, own.history[i].fit, 1e-9) << what << ", iteration " << i;
      }
      EXPECT_LT(max_gap(ref.model, all.model), 1e-6) << what;
      EXPECT_LT(max_gap(own.model, all.model), 1e-6) << what;
      if (P == 1) {
        EXPECT_EQ(all.rows_strategy, "") << what;
        continue;
      }
      EXPECT_EQ(all.rows_strategy, "allreduce,allreduce,allreduce") << what;
      EXPECT_EQ(own.rows_strategy, "owners,owners,owners") << what;
      // No sum of the dense stage, no factor gather: only the rows (and ||G||^2 agreed).
      EXPECT_GT(all.comm_exchange_seconds, 0) << what;
      EXPECT_EQ(all.comm_publish_seconds, 0) << what;
      EXPECT_EQ(all.dense_sums_per_iteration, 1) << what;
      EXPECT_GE(own.dense_sums_per_iteration, 7) << what;
      // Mode 0 is cut by the nnz partition: its rows go into the whole Y_(0) first.
      const auto& mem = all.memory;
      EXPECT_EQ(mem.received_rows[0], static_cast<std::int64_t>(cases[ci].x.dims[0])) << what;
      if (ci == 1) {  // the dense tensor: modes 1 and 2 whole on every rank, all-reduced in place
        for (int n : {1, 2}) EXPECT_EQ(mem.received_rows[static_cast<std::size_t>(n)], 0) << what;
      }
    }
  }
  // auto on a host backend: owners (the dense stage's products shared out over the ranks).
  const auto dflt = run_tucker<double>(cases[1].x, world(), BackendKind::reference,
                                       tucker_opts({3, 4, 2}, 1, 0.0));
  if (P > 1) {
    EXPECT_EQ(dflt.rows_strategy, "owners,owners,owners");
    EXPECT_NE(dflt.rows_strategy_why.find("auto: owners"), std::string::npos)
        << dflt.rows_strategy_why;
  }
  // Only the gram method all-reduces the rows.
  auto o = tucker_opts({5, 4, 3}, 1, 0.0, SvdMethod::subspace);
  o.rows = algo::TuckerRows::allreduce;
  expect_input_error([&] { run_tucker<double>(gen.block, world(), BackendKind::cpu, o); },
                     "for --svd gram only");
}

TEST(TuckerInvariance, FloatAgreesWithDouble) {
  const std::vector<std::uint64_t> dims{16, 14, 12};
  const std::vector<int> ranks{3, 3, 2};
  const auto p = planted(dims, dims, ranks, 0.2, 17);
  for (auto svd : svd_methods()) {
    const auto o = tucker_opts(ranks, 5, 0.0, svd);
    auto a = run_tucker<double>(share<double>(p, world()), world(), BackendKind::cpu, o);
    auto b = run_tucker<float>(share<float>(p, world()), world(), BackendKind::cpu, o);
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(a.history[i].fit, b.history[i].fit, 1e-5) << algo::to_string(svd);
    EXPECT_LT(max_gap(a.model, b.model), 1e-3) << algo::to_string(svd);
  }
}

// ---- real tensors ------------------------------------------------------------------------

struct RealCase {
  const char* file;
  std::vector<int> ranks;
  int iters;
};

class TuckerReal : public ::testing::TestWithParam<RealCase> {};

TEST_P(TuckerReal, FitNeverDecreases) {
  const auto c = GetParam();
  TESSERA_REQUIRE_SHARED(path, c.file);
  auto rr = io::read_tns(path, world());
  for (auto svd : {SvdMethod::gram, SvdMethod::subspace}) {
    auto res = run_tucker<double>(rr.local, world(), BackendKind::cpu,
                                  tucker_opts(c.ranks, c.iters, 0.0, svd));
    ASSERT_EQ(res.iterations, c.iters);
    for (std::size_t i = 0; i < res.history.size(); ++i) {
      EXPECT_TRUE(std::isfinite(res.history[i].fit));
      if (i > 0) {
        EXPECT_GE(res.history[i].fit, res.history[i - 1].fit - 1e-9)
            << algo::to_string(svd) << " iteration " << i + 1;
      }
    }
    EXPECT_GT(res.fit, 0.0);
    EXPECT_LT(res.fit, 1.0);
    // Orthonormal factors.
    for (const auto& F : res.model.factors) {
      Matrix<double> G(F.cols, F.cols);
      for (std::int64_t i = 0; i < F.rows; ++i)
        for (std::int64_t a = 0; a < F.cols; ++a)
          for (std::int64_t b = 0; b < F.cols; ++b) G(a, b) += F(i, a) * F(i, b);
      for (std::int64_t a = 0; a < F.cols; ++a)
        for (std::int64_t b = 0; b < F.cols; ++b) EXPECT_NEAR(G(a, b), a == b ? 1.0 : 0.0, 1e-10);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    SharedData, TuckerReal,
    ::testing::Values(RealCase{"congress-cosponsor_leg-leg-year.tns.gz", {8, 8, 4}, 4},
                      RealCase{"tkg-icews14_subj-rel-obj-day.tns.gz", {5, 4, 5, 4}, 4},
                      RealCase{"kg-wikipeople-4.tns.gz", {3, 3, 3, 3, 3}, 4}),
    [](const auto& info) {
      const std::string f = info.param.file;
      return f.rfind("congress", 0) == 0 ? std::string("congress_order3")
             : f.rfind("tkg", 0) == 0    ? std::string("icews14_order4")
                                         : std::string("wikipeople_order5");
    });

// ---- model file --------------------------------------------------------------------------

TEST(TuckerModelFile, RoundTrip) {
  const std::vector<std::uint64_t> dims{9, 8, 7};
  const std::vector<int> ranks{3, 2, 2};
  const auto p = planted(dims, dims, ranks, 0.1, 3);
  auto res = run_tucker<double>(share<double>(p, world()), world(), BackendKind::cpu,
                                tucker_opts(ranks, 4, 0.0));
  const std::string path = test::temp_dir() + "/tucker.h5";
  if (world().rank() == 0) {
    io::ModelRecord rec;
    rec.fit = res.fit;
    rec.iterations = res.iterations;
    for (const auto& h : res.history) rec.fit_history.push_back(h.fit);
    rec.options_json = R"({"svd":"gram"})";
    io::write_tucker_h5(path, res.model, rec);
    io::ModelRecord back;
    const auto m = io::read_tucker_h5(path, &back);
    EXPECT_EQ(m.dims, dims);
    EXPECT_EQ(m.ranks, ranks);
    EXPECT_EQ(m.core, res.model.core);
    for (int n = 0; n < 3; ++n) EXPECT_EQ(m.factors[n].data, res.model.factors[n].data);
    EXPECT_EQ(back.fit_history, rec.fit_history);
    EXPECT_EQ(back.iterations, 4);
    EXPECT_DOUBLE_EQ(back.fit, res.fit);
    EXPECT_EQ(back.options_json, rec.options_json);
    // ||G|| is the norm of the model (orthonormal factors).
    EXPECT_NEAR(norm(m.core), res.core_norm, 1e-12 * res.core_norm);
    // A Kruskal file is not a Tucker file, and the other way round.
    EXPECT_THROW(io::read_kruskal_h5(path), InputError);
    std::filesystem::remove(path);
  }
  world().barrier();
}

// ---- bad input ------------------------------------------------------------------------

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError (expected one mentioning '" << needle << "')";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TuckerErrors, BadRanksAndLimitsAreInputErrorsOnEveryRank) {
  const std::vector<std::uint64_t> dims{9, 8, 7};
  const auto p = planted(dims, dims, {3, 2, 2}, 0.1, 3);
  const auto x = share<double>(p, world());
  auto d = partition::distribute(SparseTensor<double>(x), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  auto run = [&](const algo::TuckerOptions& o) { algo::tucker_hooi<double>(d, *be, world(), o); };
  expect_input_error([&] { run(tucker_opts({10, 2, 2}, 2, 0)); }, "exceeds its dimension 9");
  expect_input_error([&] { run(tucker_opts({3, 2}, 2, 0)); }, "2 rank(s) given for an order-3");
  expect_input_error([&] { run(tucker_opts({3, 0, 2}, 2, 0)); }, "at least 1");
  expect_input_error(
      [&] {
        run(tucker_opts({5, 2, 2}, 2, 0));
      },
      "exceeds the product of the other modes' ranks");
  {
    auto o = tucker_opts({3, 2, 2}, 2, 0);
    o.max_iters = 0;
    expect_input_error([&] { run(o); }, "--iters");
  }
  {
    // Over the memory limit: refused before any TTMc, naming ranks that fit.
    auto o = tucker_opts({6, 6, 6}, 2, 0);
    o.memory_limit = 16 * 1024;
    expect_input_error([&] { run(o); }, "would fit");
    o.memory_limit = 100;
    expect_input_error([&] { run(o); }, "no smaller ranks fit");
  }
  expect_input_error([] { algo::parse_ranks("4,4", 3); }, "gives 2 ranks for an order-3");
  expect_input_error([] { algo::parse_ranks("4,,4", 3); }, "positive integers");
  expect_input_error([] { algo::parse_ranks("4,-1,4", 3); }, "not a positive integer");
  expect_input_error([] { algo::parse_ranks("0", 3); }, "at least 1");
  EXPECT_EQ(algo::parse_ranks("16", 3), (std::vector<int>{16, 16, 16}));
  EXPECT_EQ(algo::parse_ranks("4x3x2", 3), (std::vector<int>{4, 3, 2}));
  expect_input_error([] { algo::parse_svd_method("qr"); }, "gram, subspace or scalapack");
  // An all-zero tensor has no fit.
  {
    SparseTensor<double> z(dims);
    if (world().rank() == 0) {
      const index_t c[3] = {1, 2, 3};
      z.push_back(c, 0.0);
    }
    auto dz = partition::distribute(std::move(z), partition::Scheme::nnz, {}, world());
    expect_input_error(
        [&] {
          algo::tucker_hooi<double>(dz, *be, world(), tucker_opts({2, 2, 2}, 2, 0));
        },
        "no nonzero values");
  }
  // Still in step: a normal run works after the errors.
  auto res = algo::tucker_hooi<double>(d, *be, world(), tucker_opts({3, 2, 2}, 2, 0));
  EXPECT_EQ(res.iterations, 2);
}

TEST(TuckerErrors, RankDeficientModeIsCompletedNotNaN) {
  // Mode 0 has only two indices with nonzeros but rank 3: the third column of U_0 is not
  // determined by the data and comes from the keyed random completion.
  const std::vector<std::uint64_t> dims{6, 5, 4};
  SparseTensor<double> x(dims);
  if (world().rank() == 0) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    for (index_t i : {1u, 4u})
      for (index_t j = 0; j < 5; ++j)
        for (index_t k = 0; k < 4; ++k) {
          const index_t c[3] = {i, j, k};
          x.push_back(c, u(rng));
        }
  }
  for (auto svd : svd_methods()) {
    auto res =
        run_tucker<double>(x, world(), BackendKind::cpu, tucker_opts({3, 2, 2}, 4, 0.0, svd));
    EXPECT_GT(res.completed_columns, 0) << algo::to_string(svd);
    for (const auto& h : res.history) EXPECT_TRUE(std::isfinite(h.fit)) << algo::to_string(svd);
    const auto& F = res.model.factors[0];
    for (std::int64_t a = 0; a < 3; ++a)
      for (std::int64_t b = 0; b < 3; ++b) {
        double s = 0;
        for (std::int64_t i = 0; i < F.rows; ++i) s += F(i, a) * F(i, b);
        EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 1e-10) << algo::to_string(svd);
      }
  }
}

// CholeskyQR2 (algo/tucker_dense.hpp, orthonormalize) takes a single pass where U^T U is
// within kOrthSkip (1e-4) of the identity, and the result is orthonormal to rounding all the
// same (one pass in double leaves about u kappa(U)^2); a random U takes two. The passes are
// counted by the Gram sums across ranks (np >= 2).
TEST(TuckerDense, CholeskyQrOnePassWhereNearlyOrthonormal) {
  auto be = kernels::make_backend<double>(BackendKind::cpu);
  algo::detail::Net gnet{world()}, hnet{world()};
  algo::detail::OrthContext<double> o{*be, gnet, hnet};
  constexpr int R = 16;
  constexpr std::int64_t rows = 500;  // per rank
  std::mt19937_64 rng(test::fresh_seed() + static_cast<std::uint64_t>(world().rank()));
  std::normal_distribution<double> nd;
  std::vector<double> U(static_cast<std::size_t>(rows * R));
  for (double& x : U) x = nd(rng);
  // max |U^T U - I| over all ranks' rows.
  const auto dev_of = [&](const std::vector<double>& A) {
    std::vector<double> G(R * R, 0.0);
    for (std::int64_t i = 0; i < rows; ++i)
      for (int a = 0; a < R; ++a)
        for (int b = 0; b < R; ++b) G[a * R + b] += A[i * R + a] * A[i * R + b];
    MPI_Allreduce(MPI_IN_PLACE, G.data(), R * R, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double d = 0;
    for (int a = 0; a < R; ++a)
      for (int b = 0; b < R; ++b) d = std::max(d, std::fabs(G[a * R + b] - (a == b ? 1.0 : 0.0)));
    return d;
  };
  const algo::detail::RandomFill no_fill = [](double*, int, int) {
    ADD_FAILURE() << "the random completion ran on a well-conditioned U";
  };
  const bool counted = world().size() > 1;
  ASSERT_EQ(algo::detail::orthonormalize(o, U.data(), rows, R, no_fill), 0);
  if (counted) {
    EXPECT_EQ(gnet.calls, 2) << "a random U: two passes";
  }
  EXPECT_LT(dev_of(U), 1e-14);
  // Perturbed to a deviation between 1e-6 and 1e-4: one pass, orthonormal to rounding.
  for (double& x : U) x += 2e-6 * nd(rng);
  const double d0 = dev_of(U);
  ASSERT_GT(d0, 1e-6);
  ASSERT_LT(d0, 1e-4);
  const long before = gnet.calls;
  ASSERT_EQ(algo::detail::orthonormalize(o, U.data(), rows, R, no_fill), 0);
  if (counted) {
    EXPECT_EQ(gnet.calls - before, 1) << "deviation " << d0 << ": one pass";
  }
  EXPECT_LT(dev_of(U), 1e-14) << "after one pass from a deviation of " << d0;
}

}  // namespace
}  // namespace tessera
