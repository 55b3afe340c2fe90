// Constrained, regularised and weighted CP (docs/constrained-cp.md) under MPI at 1, 2 and 3
// ranks: nonnegative CP with L1/L2 penalties, completion (--observed-only) and the held-out
// set give the same fits, factors and validation RMSE on every rank count, both update
// strategies, both host backends and a relabelled distribution as one process on the
// reference backend; completion on a real tensor beats the mean and the zeros-for-missing
// CP on its held-out entries; the nvecs start spans the leading singular vectors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>

#include "algo/cp_als.hpp"
#include "algo/cp_init.hpp"
#include "algo/generate.hpp"
#include "comm/mpi_communicator.hpp"
#include "gather_util.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "linalg/dense.hpp"
#include "test_util.hpp"

namespace tessera {
namespace {

using algo::CommStrategy;
using kernels::BackendKind;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

using test::gather_all;

struct Variant {
  const char* name;
  algo::CpOptions opt;
};

std::vector<Variant> variants(int N) {
  std::vector<Variant> v;
  algo::CpOptions o;
  o.rank = 4;
  o.max_iters = 6;
  o.tol = 0;
  o.seed = 5;
  o.print_iterations = false;
  {
    algo::CpOptions a = o;
    a.nonneg.assign(static_cast<std::size_t>(N), true);
    a.l1.assign(static_cast<std::size_t>(N), 0.01);
    a.l2.assign(static_cast<std::size_t>(N), 0.1);
    v.push_back({"nonneg+l1+l2", a});
  }
  {
    algo::CpOptions a = o;
    a.observed_only = true;
    a.l2.assign(static_cast<std::size_t>(N), 1e-3);
    a.holdout = 0.1;
    a.holdout_seed = 9;
    v.push_back({"observed-only+holdout", a});
  }
  {
    algo::CpOptions a = o;
    a.observed_only = true;
    a.nonneg.assign(static_cast<std::size_t>(N), false);
    a.nonneg[0] = true;
    a.inner_sweeps = 2;
    v.push_back({"observed-only+nonneg mode 0", a});
  }
  {
    algo::CpOptions a = o;
    a.holdout = 0.2;
    a.l2.assign(static_cast<std::size_t>(N), 0.5);
    v.push_back({"holdout+l2 (zeros for missing)", a});
  }
  return v;
}

double model_difference(const KruskalModel& a, const KruskalModel& b) {
  double num = 0, den = 0;
  for (int n = 0; n < a.order(); ++n)
    for (std::size_t k = 0; k < a.factors[n].data.size(); ++k) {
      const double x = a.factors[n].data[k], y = b.factors[n].data[k];
      num += (x - y) * (x - y);
      den += x * x;
    }
  for (int r = 0; r < a.rank; ++r) {
    num += (a.lambda[r] - b.lambda[r]) * (a.lambda[r] - b.lambda[r]) /
           (a.lambda[r] * a.lambda[r] + 1e-300);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST(ConstrainedCp, SameOnEveryRankCountStrategyBackendAndRelabelling) {
  algo::GenerateOptions g;
  g.dims = {40, 35, 30};
  g.nnz = 9000;
  g.rank = 3;
  g.noise = 0.05;
  g.seed = 17;
  g.structure = algo::Structure::sampled;
  auto gen = algo::generate(g, world());
  const auto all = gather_all(gen.block, world());
  comm::MpiCommunicator self(MPI_COMM_SELF);
  for (const auto& v : variants(3)) {
    // One process on the reference backend (rank 0), broadcast.
    algo::CpResult ref;
    std::vector<double> buf;
    if (world().rank() == 0) {
      auto d1 = partition::distribute(SparseTensor<double>(all), partition::Scheme::nnz, {}, self);
      auto be = kernels::make_backend<double>(BackendKind::reference, 1);
      ref = algo::cp_als<double>(d1, *be, self, self, v.opt);
    }
    auto bcast_result = [&](algo::CpResult& r) {
      std::int64_t n = world().rank() == 0 ? static_cast<std::int64_t>(r.history.size()) : 0;
      world().broadcast(&n, 1, 0);
      r.history.resize(static_cast<std::size_t>(n));
      for (auto& h : r.history) {
        world().broadcast(&h.fit, 1, 0);
        world().broadcast(&h.validation_rmse, 1, 0);
      }
      world().broadcast(&r.validation_rmse, 1, 0);
      world().broadcast(&r.mean_predictor_rmse, 1, 0);
      world().broadcast(&r.holdout_entries, 1, 0);
    };
    bcast_result(ref);
    KruskalModel ref_model;
    {
      auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
      auto d = partition::distribute(SparseTensor<double>(gen.block), partition::Scheme::nnz, {},
                                     world());
      ref_model = algo::cp_als<double>(d, *be, world(), world(), v.opt).model;  // shapes
      if (world().rank() == 0) ref_model = ref.model;
      world().broadcast(ref_model.lambda.data(), ref_model.lambda.size(), 0);
      for (auto& f : ref_model.factors) world().broadcast(f.data.data(), f.data.size(), 0);
    }
    for (auto s : {CommStrategy::allreduce, CommStrategy::layer})
      for (auto k : {BackendKind::reference, BackendKind::cpu})
        for (bool relabel : {false, true}) {
          const std::string what =
              std::string(v.name) + (s == CommStrategy::layer ? " layer" : " allreduce") +
              (k == BackendKind::cpu ? " cpu" : " reference") + (relabel ? " relabelled" : "") +
              " on " + std::to_string(world().size()) + " rank(s)";
          const auto scheme =
              s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
          auto d =
              relabel ? partition::distribute_relabelled(SparseTensor<double>(gen.block), scheme,
                                                         {}, world(), 77)
                      : partition::distribute(SparseTensor<double>(gen.block), scheme, {}, world());
          auto be = kernels::make_backend<double>(k, 1);
          algo::CpOptions o = v.opt;
          o.strategy = s;
          const auto res = algo::cp_als<double>(d, *be, world(), world(), o);
          ASSERT_EQ(res.history.size(), ref.history.size()) << what;
          for (std::size_t i = 0; i < res.history.size(); ++i) {
            EXPECT_NEAR(res.history[i].fit, ref.history[i].fit, 1e-9) << what << " it " << i + 1;
            if (o.holdout > 0)
              EXPECT_NEAR(res.history[i].validation_rmse, ref.history[i].validation_rmse,
                          1e-9 * ref.history[i].validation_rmse)
                  << what << " it " << i + 1;
            else
              EXPECT_TRUE(std::isnan(res.history[i].validation_rmse)) << what;
          }
          EXPECT_EQ(res.holdout_entries, ref.holdout_entries) << what;
          if (o.holdout > 0)
            EXPECT_NEAR(res.mean_predictor_rmse, ref.mean_predictor_rmse,
                        1e-12 * ref.mean_predictor_rmse)
                << what;
          else
            EXPECT_TRUE(std::isnan(res.mean_predictor_rmse)) << what;
          EXPECT_LT(model_difference(ref_model, res.model), 1e-8) << what;
          for (std::size_t n = 0; n < o.nonneg.size(); ++n) {
            if (o.nonneg[n]) {
              for (double x : res.model.factors[n].data) ASSERT_GE(x, 0.0) << what << " mode " << n;
            }
          }
        }
  }
}

// Held-out entries with a row that has no training entry ("cold": no CP model can predict
// them) are counted the same on any rank count, strategy and relabelling, and equal a count
// made here from the whole tensor and the holdout rule itself.
TEST(ConstrainedCp, ColdHeldOutEntriesAreCountedOnEveryLayout) {
  algo::GenerateOptions g;
  g.dims = {300, 250, 200};
  g.nnz = 600;  // sparse: most rows keep one or two entries
  g.rank = 2;
  g.seed = 23;
  g.structure = algo::Structure::sampled;
  auto gen = algo::generate(g, world());
  const auto all = gather_all(gen.block, world());
  const double fraction = 0.5;
  const std::uint64_t seed = 4;
  // The expected count, from the rule (algo::held_out on original coordinates).
  std::vector<std::vector<bool>> seen;
  for (auto d : g.dims) seen.emplace_back(d, false);
  std::vector<bool> held(all.nnz());
  for (nnz_t k = 0; k < all.nnz(); ++k) {
    std::uint64_t c[3] = {all.idx[0][k], all.idx[1][k], all.idx[2][k]};
    held[k] = algo::held_out(seed, fraction, c, 3);
    if (!held[k])
      for (int n = 0; n < 3; ++n) seen[n][c[n]] = true;
  }
  std::uint64_t expected = 0, held_count = 0;
  for (nnz_t k = 0; k < all.nnz(); ++k) {
    if (!held[k]) continue;
    ++held_count;
    bool cold = false;
    for (int n = 0; n < 3; ++n) cold = cold || !seen[n][all.idx[n][k]];
    expected += cold ? 1 : 0;
  }
  ASSERT_GT(expected, 0u);
  ASSERT_LT(expected, held_count);
  for (auto s : {CommStrategy::allreduce, CommStrategy::layer})
    for (bool relabel : {false, true}) {
      const auto scheme =
          s == CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
      auto d = relabel
                   ? partition::distribute_relabelled(SparseTensor<double>(gen.block), scheme, {},
                                                      world(), 5)
                   : partition::distribute(SparseTensor<double>(gen.block), scheme, {}, world());
      auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
      algo::CpOptions o;
      o.rank = 2;
      o.max_iters = 2;
      o.print_iterations = false;
      o.observed_only = true;
      o.l2 = {0.01, 0.01, 0.01};
      o.holdout = fraction;
      o.holdout_seed = seed;
      o.strategy = s;
      const auto res = algo::cp_als<double>(d, *be, world(), world(), o);
      EXPECT_EQ(res.holdout_entries, held_count);
      EXPECT_EQ(res.holdout_cold_entries, expected)
          << (s == CommStrategy::layer ? "layer" : "allreduce") << (relabel ? " relabelled" : "")
          << " on " << world().size() << " rank(s)";
    }
}

TEST(ConstrainedCp, HandleInputsRefuseCompletionWithOneLine) {
  algo::GenerateOptions g;
  g.dims = {20, 15, 10};
  g.nnz = 500;
  g.rank = 2;
  g.seed = 3;
  g.structure = algo::Structure::sampled;
  auto gen = algo::generate(g, world());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  const nnz_t total = world().allreduce_value(static_cast<std::int64_t>(gen.block.nnz()));
  auto X = be->prepare(gen.block);
  algo::CpOptions o;
  o.rank = 2;
  o.print_iterations = false;
  o.observed_only = true;
  try {
    algo::cp_als<double>(*X, g.dims, total, *be, world(), world(), o);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--observed-only and --holdout need the tensor"),
              std::string::npos)
        << e.what();
  }
  o.observed_only = false;
  o.nonneg = {true, true, true};  // nonnegative CP works on handles (and streamed tiers)
  const auto res = algo::cp_als<double>(*X, g.dims, total, *be, world(), world(), o);
  for (const auto& f : res.model.factors)
    for (double x : f.data) ASSERT_GE(x, 0.0);
  o.nonneg = {true, true};  // wrong length
  EXPECT_THROW(algo::cp_als<double>(*X, g.dims, total, *be, world(), world(), o), InputError);
}

TEST(ConstrainedCp, CompletionOfARealTensorBeatsTheMeanAndZerosForMissing) {
  TESSERA_REQUIRE_SHARED(path, "aminoacid-fluorescence_dense.tns.gz");
  auto rr = io::read_tns(path, world());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  auto run = [&](bool observed) {
    auto d =
        partition::distribute(SparseTensor<double>(rr.local), partition::Scheme::nnz, {}, world());
    algo::CpOptions o;
    o.rank = 3;
    o.max_iters = 100;
    o.tol = 1e-6;
    o.print_iterations = false;
    o.holdout = 0.1;
    o.holdout_seed = 1;
    o.observed_only = observed;
    return algo::cp_als<double>(d, *be, world(), world(), o);
  };
  const auto comp = run(true);
  const auto zeros = run(false);
  const double total = static_cast<double>(comp.holdout_entries + comp.training_entries);
  EXPECT_NEAR(comp.holdout_entries / total, 0.1, 0.01);
  EXPECT_EQ(comp.holdout_entries, zeros.holdout_entries);
  // Measured on 1-3 ranks: completion 5.1, mean 12x that, zeros-for-missing 5x that.
  EXPECT_LT(comp.validation_rmse, 0.5 * comp.mean_predictor_rmse);
  EXPECT_LT(comp.validation_rmse, 0.5 * zeros.validation_rmse);
  if (world().rank() == 0)
    std::printf(
        "aminoacid, 10%% held out: completion RMSE %.4g, mean %.4g, zeros-for-missing %.4g\n",
        comp.validation_rmse, comp.mean_predictor_rmse, zeros.validation_rmse);
}

TEST(Nvecs, StartSpansTheLeadingSingularVectorsOfEachUnfolding) {
  // A tensor of multilinear rank (2, 2, 2) plus nothing else: the leading 2 left singular
  // vectors of each unfolding span its column space exactly.
  const std::vector<std::uint64_t> dims = {9, 8, 7};
  const int R = 2;
  SparseTensor<double> all(dims);
  auto f = [](int n, std::uint64_t i, int r) {
    return std::cos(0.7 * (n + 1) * static_cast<double>(i) + 1.3 * r) + 0.1 * r;
  };
  std::vector<double> dense(9 * 8 * 7);
  for (std::uint64_t i = 0; i < 9; ++i)
    for (std::uint64_t j = 0; j < 8; ++j)
      for (std::uint64_t k = 0; k < 7; ++k) {
        double v = 0;
        for (int r = 0; r < R; ++r) v += (r + 1.0) * f(0, i, r) * f(1, j, r) * f(2, k, r);
        dense[(i * 8 + j) * 7 + k] = v;
        if (world().rank() == 0) {
          all.idx[0].push_back(static_cast<index_t>(i));
          all.idx[1].push_back(static_cast<index_t>(j));
          all.idx[2].push_back(static_cast<index_t>(k));
          all.vals.push_back(v);
        }
      }
  auto d = partition::distribute(std::move(all), partition::Scheme::nnz, {}, world());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  const KruskalModel m = algo::nvecs_start<double>(d, *be, world(), world(), R, 4, {});
  for (int n = 0; n < 3; ++n) {
    const int I = static_cast<int>(dims[static_cast<std::size_t>(n)]);
    // S = X_(n) X_(n)^T from the dense copy, and its top-2 eigenvectors.
    std::vector<double> S(static_cast<std::size_t>(I * I), 0.0);
    for (std::uint64_t i = 0; i < 9; ++i)
      for (std::uint64_t j = 0; j < 8; ++j)
        for (std::uint64_t k = 0; k < 7; ++k) {
          const std::uint64_t c[3] = {i, j, k};
          for (std::uint64_t i2 = 0; i2 < dims[static_cast<std::size_t>(n)]; ++i2) {
            std::uint64_t c2[3] = {i, j, k};
            c2[n] = i2;
            S[c[n] * I + i2] += dense[(i * 8 + j) * 7 + k] * dense[(c2[0] * 8 + c2[1]) * 7 + c2[2]];
          }
        }
    std::vector<double> w(static_cast<std::size_t>(I)), Q(static_cast<std::size_t>(I * I));
    linalg::symmetric_eig(S.data(), I, w.data(), Q.data());
    // || (I - Q2 Q2^T) U || for the start's columns U (Q2 = eigenvectors of the 2 largest).
    const auto& U = m.factors[static_cast<std::size_t>(n)];
    for (int r = 0; r < R; ++r) {
      double res2 = 0, norm2 = 0;
      for (int i = 0; i < I; ++i) {
        double proj = 0;
        for (int e = I - 2; e < I; ++e) {
          double dot = 0;
          for (int k = 0; k < I; ++k) dot += Q[static_cast<std::size_t>(k * I + e)] * U(k, r);
          proj += Q[static_cast<std::size_t>(i * I + e)] * dot;
        }
        res2 += (U(i, r) - proj) * (U(i, r) - proj);
        norm2 += U(i, r) * U(i, r);
      }
      EXPECT_NEAR(norm2, 1.0, 1e-10) << "mode " << n;  // orthonormal columns
      EXPECT_LT(std::sqrt(res2), 1e-8) << "mode " << n << " column " << r;
    }
  }
  // Ranks: clamped to the dims and to the product of the other ranks.
  EXPECT_EQ(algo::nvecs_ranks({100, 2, 2}, 10), (std::vector<int>{4, 2, 2}));
  EXPECT_EQ(algo::nvecs_ranks({5, 50, 60}, 8), (std::vector<int>{5, 8, 8}));
}

}  // namespace
}  // namespace tessera
