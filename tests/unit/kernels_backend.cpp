// Backend plumbing of the host backends: names, memory operations, factories.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "tensor/synthetic.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

template <typename T>
class HostBackend : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(HostBackend, Types);

TYPED_TEST(HostBackend, KindsAndNames) {
  auto ref = make_backend<TypeParam>(BackendKind::reference);
  EXPECT_EQ(ref->kind(), BackendKind::reference);
  EXPECT_EQ(ref->name(), "reference");
  EXPECT_EQ(ref->memory_space(), MemorySpace::host);
  for (int threads : {0, 1, 2}) {
    auto cpu = make_backend<TypeParam>(BackendKind::cpu, threads);
    EXPECT_EQ(cpu->kind(), BackendKind::cpu);
    EXPECT_EQ(cpu->name(), "cpu");
    EXPECT_EQ(cpu->memory_space(), MemorySpace::host);
  }
  if (!cuda_built()) {
    try {
      make_backend<TypeParam>(BackendKind::cuda);
      ADD_FAILURE() << "cuda backend created in a build without CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
  }
}

TYPED_TEST(HostBackend, MemoryOperations) {
  using T = TypeParam;
  std::vector<std::unique_ptr<Backend<T>>> backends;
  backends.push_back(make_reference_backend<T>());
  backends.push_back(make_cpu_backend<T>(2));
  for (auto& be : backends) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{3} << 20}) {
      Array<T> a = be->allocate(n), b = be->allocate(n);
      ASSERT_EQ(a.size(), n);
      ASSERT_TRUE(n == 0 || a.data() != nullptr);
      if (be->kind() == BackendKind::cpu && n > 0) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u)
            << "cpu arrays are 64-byte aligned";
      }
      std::vector<T> host(n), back(n, T(-1));
      std::iota(host.begin(), host.end(), T(1));
      be->upload(host.data(), n, a.data());
      be->copy(a.data(), n, b.data());
      be->download(b.data(), n, back.data());
      EXPECT_EQ(back, host) << be->name() << " n " << n;
      be->fill(a.data(), n, T(2.5));
      be->download(a.data(), n, back.data());
      for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(back[k], T(2.5));
      be->synchronize();
    }
  }
}

// The default Backend::prepare_synthetic (COO built on the host, then prepare()) of the
// host backends against prepare() of the same tensor built here from the synthetic
// functions, on the reference backend: same nonzero count, distinct rows and MTTKRP.
TYPED_TEST(HostBackend, PrepareSyntheticDefault) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  auto ref = make_reference_backend<T>();
  std::vector<std::unique_ptr<Backend<T>>> backends;
  backends.push_back(make_reference_backend<T>());
  backends.push_back(make_cpu_backend<T>(2));
  for (bool powerlaw : {false, true})
    for (const std::vector<std::uint64_t>& dims :
         {std::vector<std::uint64_t>{40, 30, 500}, std::vector<std::uint64_t>{20, 1, 300, 9}}) {
      synthetic::Spec spec;
      spec.order = static_cast<int>(dims.size());
      for (int n = 0; n < spec.order; ++n) spec.dims[n] = dims[static_cast<std::size_t>(n)];
      spec.powerlaw = powerlaw;
      spec.alpha = 2.0;
      spec.rank = 4;
      spec.seed = 1;
      for (auto [first, count] : {std::pair<std::uint64_t, std::uint64_t>{0, 0},
                                  {0, 1},
                                  {123, 1},
                                  {0, 3000},
                                  {std::uint64_t(1) << 40, 2001}}) {
        SparseTensor<T> x(dims);
        index_t c[kMaxOrder];
        for (std::uint64_t id = first; id < first + count; ++id) {
          for (int n = 0; n < spec.order; ++n) c[n] = synthetic::coordinate(spec, id, n);
          x.push_back(c, static_cast<T>(synthetic::model_value(spec, c)));
        }
        std::vector<std::uint64_t> distinct(dims.size(), 0);
        for (std::size_t n = 0; n < dims.size(); ++n) {
          std::vector<char> seen(dims[n], 0);
          for (index_t i : x.idx[n])
            if (!seen[i]) seen[i] = 1, ++distinct[n];
        }
        auto hr = ref->prepare(x);
        for (auto& be : backends) {
          const std::string what = be->name() + (powerlaw ? " power-law" : " uniform") + " order " +
                                   std::to_string(dims.size()) + " ids " + std::to_string(first) +
                                   " +" + std::to_string(count);
          auto h = be->prepare_synthetic(spec, first, count);
          ASSERT_EQ(h->nnz(), static_cast<nnz_t>(count)) << what;
          EXPECT_EQ(h->dims(), dims) << what;
          EXPECT_EQ(h->distinct_rows(), distinct) << what;
          EXPECT_EQ(hr->distinct_rows(), distinct) << what;
          const int R = 16;
          std::vector<std::vector<T>> F(dims.size());
          std::vector<const T*> fp(dims.size());
          CounterRng rng(first + count, 3);
          for (std::size_t n = 0; n < dims.size(); ++n) {
            F[n].resize(dims[n] * R);
            for (auto& v : F[n]) v = static_cast<T>(rng.uniform());
            fp[n] = F[n].data();
          }
          for (int mode = 0; mode < spec.order; ++mode) {
            std::vector<T> got(dims[static_cast<std::size_t>(mode)] * R, T(-7)),
                want(got.size(), T(-7));
            ops::mttkrp(*be, *h, mode, fp, R, got.data());
            ops::mttkrp(*ref, *hr, mode, fp, R, want.data());
            double d2 = 0, w2 = 0;
            for (std::size_t k = 0; k < got.size(); ++k) {
              d2 += std::pow(static_cast<double>(got[k]) - want[k], 2);
              w2 += std::pow(static_cast<double>(want[k]), 2);
            }
            EXPECT_LE(std::sqrt(d2), tol * std::sqrt(w2)) << what << " mode " << mode;
          }
        }
      }
    }
  auto be = make_cpu_backend<T>(1);
  synthetic::Spec bad;
  bad.order = 0;
  EXPECT_THROW(be->prepare_synthetic(bad, 0, 1), InputError);
}

// A window of a synthetic tensor (tensor/synthetic.hpp: the block of one grid rank, labels
// relabelled or not, coordinates shifted to it) built by make_synthetic_tensor, against the
// same filter written out here from the coordinates and util/relabel.hpp: the same entries
// in id order, bit for bit at any thread count; and prepare_synthetic with it on both host
// backends against prepare() of those entries (count, dims, MTTKRP).
TYPED_TEST(HostBackend, PrepareSyntheticWindow) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  auto ref = make_reference_backend<T>();
  synthetic::Spec spec;
  spec.order = 3;
  spec.dims[0] = 300;
  spec.dims[1] = 40;
  spec.dims[2] = 25;
  spec.powerlaw = true;
  spec.alpha = 1.0;
  spec.rank = 3;
  spec.seed = 9;
  const std::uint64_t first = 17, count = 40000;
  for (bool relabel : {false, true})
    for (const std::vector<std::uint64_t>& lohi : {std::vector<std::uint64_t>{0, 300, 0, 40, 0, 25},
                                                   {3, 120, 0, 40, 0, 25},
                                                   {120, 300, 10, 30, 0, 25},
                                                   {7, 7, 0, 40, 0, 25}}) {
      synthetic::Window w;
      w.relabelled = relabel;
      for (int n = 0; n < 3; ++n) {
        w.lo[n] = lohi[static_cast<std::size_t>(2 * n)];
        w.hi[n] = lohi[static_cast<std::size_t>(2 * n + 1)];
        if (relabel) w.relabel[n] = Relabel(77, n, spec.dims[n]);
      }
      const std::vector<std::uint64_t> dims{w.hi[0] - w.lo[0], w.hi[1] - w.lo[1],
                                            w.hi[2] - w.lo[2]};
      const auto x = test::window_reference<T>(spec, w, first, count);
      const std::string what = std::string(relabel ? "relabelled" : "plain") + " window [" +
                               std::to_string(w.lo[0]) + ", " + std::to_string(w.hi[0]) + ") x [" +
                               std::to_string(w.lo[1]) + ", " + std::to_string(w.hi[1]) + ")";
      if (w.hi[0] - w.lo[0] == 300 && !relabel) {
        EXPECT_TRUE(is_whole(spec, w)) << what;
      } else {
        EXPECT_FALSE(is_whole(spec, w)) << what;
      }
      const auto got = make_synthetic_tensor<T>(spec, w, first, count);
      EXPECT_EQ(got.dims, dims) << what;
      EXPECT_EQ(got.idx, x.idx) << what;
      EXPECT_EQ(got.vals, x.vals) << what;
      if (w.hi[0] > w.lo[0]) {
        EXPECT_GT(x.nnz(), 0) << what;
      }
      auto hr = ref->prepare(x);
      std::vector<std::unique_ptr<Backend<T>>> backends;
      backends.push_back(make_reference_backend<T>());
      backends.push_back(make_cpu_backend<T>(2));
      for (auto& be : backends) {
        auto h = be->prepare_synthetic(spec, w, first, count);
        ASSERT_EQ(h->nnz(), x.nnz()) << what;
        EXPECT_EQ(h->dims(), dims) << what;
        const int R = 8;
        std::vector<std::vector<T>> F(3);
        std::vector<const T*> fp(3);
        CounterRng rng(5, 3);
        for (std::size_t n = 0; n < 3; ++n) {
          F[n].resize(std::max<std::uint64_t>(dims[n], 1) * R);
          for (auto& v : F[n]) v = static_cast<T>(rng.uniform());
          fp[n] = F[n].data();
        }
        for (int mode = 0; mode < 3; ++mode) {
          std::vector<T> a(dims[static_cast<std::size_t>(mode)] * R, T(-7)), b(a.size(), T(-7));
          ops::mttkrp(*be, *h, mode, fp, R, a.data());
          ops::mttkrp(*ref, *hr, mode, fp, R, b.data());
          double d2 = 0, w2 = 0;
          for (std::size_t k = 0; k < a.size(); ++k) {
            d2 += std::pow(static_cast<double>(a[k]) - b[k], 2);
            w2 += std::pow(static_cast<double>(b[k]), 2);
          }
          EXPECT_LE(std::sqrt(d2), tol * std::sqrt(w2)) << what << " mode " << mode;
        }
      }
    }
  synthetic::Window outside = synthetic::whole_window(spec);
  outside.hi[1] = 41;  // past the mode's 40 indices
  EXPECT_THROW(make_synthetic_tensor<T>(spec, outside, 0, 10), InputError);
}

// value_norm_squared of both host backends against the sum of squares of the COO it was
// prepared from (repeats kept: every stored entry counts), through prepare() and
// prepare_synthetic().
TYPED_TEST(HostBackend, ValueNormSquared) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-13;
  std::vector<std::unique_ptr<Backend<T>>> backends;
  backends.push_back(make_reference_backend<T>());
  backends.push_back(make_cpu_backend<T>(2));
  const std::uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (TESSERA_TEST_SEED replays)");
  CounterRng rng(seed, 11);
  SparseTensor<T> x({30, 7, 45});
  index_t c[3];
  for (int k = 0; k < 4000; ++k) {
    for (int n = 0; n < 3; ++n)
      c[n] = static_cast<index_t>(rng.uniform() * static_cast<double>(x.dims[n]));
    x.push_back(c, static_cast<T>(rng.uniform() * 4 - 2));
  }
  x.push_back(c, T(3));  // a repeated coordinate: a separate entry
  double want = 0;
  for (T v : x.vals) want += static_cast<double>(v) * static_cast<double>(v);
  synthetic::Spec spec;
  spec.order = 3;
  spec.dims[0] = 20;
  spec.dims[1] = 9;
  spec.dims[2] = 300;
  spec.powerlaw = true;
  const auto sx = make_synthetic_tensor<T>(spec, 17, 2500);
  double want_syn = 0;
  for (T v : sx.vals) want_syn += static_cast<double>(v) * static_cast<double>(v);
  ASSERT_GT(want_syn, 0);
  for (auto& be : backends) {
    EXPECT_NEAR(be->prepare(x)->value_norm_squared(), want, tol * want) << be->name();
    EXPECT_NEAR(be->prepare_synthetic(spec, 17, 2500)->value_norm_squared(), want_syn,
                tol * want_syn)
        << be->name();
    EXPECT_EQ(be->prepare(SparseTensor<T>({4, 5, 6}))->value_norm_squared(), 0.0) << be->name();
  }
}

synthetic::Spec one_mode_spec(std::uint64_t dim, bool powerlaw, double alpha) {
  synthetic::Spec s;
  s.order = 1;
  s.dims[0] = dim;
  s.powerlaw = powerlaw;
  s.alpha = alpha;
  return s;
}

/// Share of `draws` coordinates (ids 0..draws-1, mode 0) below each of `limits`; fails
/// on an index outside [0, dim).
std::vector<double> shares_below(const synthetic::Spec& s, std::uint64_t draws,
                                 const std::vector<std::uint64_t>& limits, double* mean) {
  std::vector<double> below(limits.size(), 0);
  double sum = 0;
  for (std::uint64_t id = 0; id < draws; ++id) {
    const index_t i = synthetic::coordinate(s, id, 0);
    EXPECT_LT(i, s.dims[0]) << "id " << id;
    sum += static_cast<double>(i);
    for (std::size_t k = 0; k < limits.size(); ++k)
      if (i < limits[k]) below[k] += 1;
  }
  for (auto& b : below) b /= static_cast<double>(draws);
  if (mean) *mean = sum / static_cast<double>(draws);
  return below;
}

// The power-law draw is a truncated Zipf law: P(i) ~ (i + 1)^-alpha on [0, I), i.e. the
// share below k is ln(k + 1) / ln(I + 1) for alpha = 1 and (1 - (k + 1)^(1 - alpha)) /
// (1 - (I + 1)^(1 - alpha)) otherwise (the continuous density x^-alpha on [1, I + 1)).
TEST(SyntheticIndices, ZipfAlphaOne) {
  const std::uint64_t I = 100000, draws = 200000;
  double mean = 0;
  const auto below = shares_below(one_mode_spec(I, true, 1.0), draws, {1, 1000}, &mean);
  const double L = std::log(static_cast<double>(I) + 1);
  EXPECT_NEAR(below[0], std::log(2.0) / L, 0.1 * std::log(2.0) / L);
  EXPECT_NEAR(below[1], std::log(1001.0) / L, 0.02 * std::log(1001.0) / L);
  // Heavy head, long tail: the mean is (I - ln(I + 1)) / ln(I + 1), far below I / 2.
  EXPECT_NEAR(mean, (static_cast<double>(I) - L) / L, 0.05 * I / L);
}

TEST(SyntheticIndices, ZipfAlphaTwoAndNearOne) {
  const std::uint64_t I = 100000, draws = 200000;
  const double top = static_cast<double>(I) + 1;
  auto share = [&](double alpha, double k) {
    return (1 - std::pow(k + 1, 1 - alpha)) / (1 - std::pow(top, 1 - alpha));
  };
  auto below = shares_below(one_mode_spec(I, true, 2.0), draws, {1, 10}, nullptr);
  EXPECT_NEAR(below[0], (1 - 0.5) / (1 - 1 / top), 0.05 * share(2.0, 1));
  EXPECT_NEAR(below[1], share(2.0, 10), 0.03 * share(2.0, 10));
  // Either side of alpha = 1 (the log1p/expm1 form) joins the alpha = 1 law continuously.
  const double at_one = std::log(1001.0) / std::log(top);
  for (double alpha : {1.0 - 1e-7, 1.0 + 1e-7}) {
    below = shares_below(one_mode_spec(I, true, alpha), draws, {1000}, nullptr);
    EXPECT_NEAR(below[0], at_one, 0.02 * at_one) << "alpha " << alpha;
  }
  // alpha < 1 is a milder skew.
  below = shares_below(one_mode_spec(I, true, 0.5), draws, {1000}, nullptr);
  EXPECT_NEAR(below[0], share(0.5, 1000), 0.05 * share(0.5, 1000));
}

TEST(SyntheticIndices, ExtremesStayInRange) {
  // Tiny modes, steep and flat exponents, and the largest id hashes: every index < I.
  for (std::uint64_t I :
       {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{7}, std::uint64_t{1} << 32})
    for (double alpha : {0.05, 0.5, 1.0, 1.5, 2.0, 100.0}) {
      const auto s = one_mode_spec(I, true, alpha);
      for (std::uint64_t h : {std::uint64_t{0}, ~std::uint64_t{0}, std::uint64_t{1} << 63})
        EXPECT_LT(synthetic::draw_index(s, 0, h), I) << "I " << I << " alpha " << alpha;
      shares_below(s, 2000, {}, nullptr);
    }
  // u -> 1 with alpha = 1 gives x -> I + 1: clamped to the last index.
  EXPECT_EQ(synthetic::draw_index(one_mode_spec(10, true, 1.0), 0, ~std::uint64_t{0}), 9u);
  EXPECT_EQ(synthetic::draw_index(one_mode_spec(10, true, 1.0), 0, 0), 0u);
}

TEST(SyntheticIndices, UniformMeanIsHalf) {
  const std::uint64_t I = 100000, draws = 200000;
  double mean = 0;
  const auto below = shares_below(one_mode_spec(I, false, 1.0), draws, {1000}, &mean);
  EXPECT_NEAR(mean, I / 2.0, 0.01 * I);
  EXPECT_NEAR(below[0], 0.01, 0.002);
}

// Kernel tuning options are checked where they are given (make_backend, set_tuning), on
// every backend kind, with a message naming the command-line option; a refused value
// leaves the previous options in place.
TEST(BackendTuning, InvalidValuesAreRefusedNamingTheOption) {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "no InputError";
  };
  // A name outside the table is refused where it is parsed (the CLI, Python); a value
  // outside the enumeration (a cast) by the backend.
  EXPECT_FALSE(parse_name<CudaLayout>("fast").has_value());
  EXPECT_EQ(parse_name<CudaLayout>("smem"), CudaLayout::smem);
  Tuning bad;
  bad.cuda_layout = static_cast<CudaLayout>(99);
  const std::string m =
      message_of([&] { (void)make_backend<double>(BackendKind::reference, 0, bad); });
  EXPECT_NE(m.find("--cuda-layout"), std::string::npos) << m;
  EXPECT_NE(m.find("99"), std::string::npos) << m;

  auto be = make_backend<float>(BackendKind::reference);
  Tuning good;
  good.cuda_layout = CudaLayout::smem;
  good.ttmc_tile = 128;
  be->set_tuning(good);
  Tuning tile;
  tile.ttmc_tile = 100;  // not a multiple of 32
  const std::string mt = message_of([&] { be->set_tuning(tile); });
  EXPECT_NE(mt.find("--ttmc-tile"), std::string::npos) << mt;
  Tuning kernel;
  kernel.mttkrp_kernel = static_cast<MttkrpKernel>(7);
  const std::string mk = message_of([&] { be->set_tuning(kernel); });
  EXPECT_NE(mk.find("--mttkrp-kernel"), std::string::npos) << mk;
  EXPECT_EQ(be->tuning().cuda_layout, CudaLayout::smem);
  EXPECT_EQ(be->tuning().ttmc_tile, 128);
}

// The tensor-core MTTKRP's options (issue 18): each bad value is one InputError naming the
// option and the value; the ends of (0, 1] and every listed precision are accepted.
TEST(BackendTuning, TensorCoreOptionsAreChecked) {
  auto message_of = [](const Tuning& t) -> std::string {
    try {
      check(t);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no InputError";
  };
  Tuning defaults;
  EXPECT_EQ(defaults.tensor_cores, TensorCores::automatic);
  EXPECT_EQ(defaults.tc_precision, TcPrecisionOption::automatic);
  EXPECT_EQ(name_of(defaults.tensor_cores), "auto");
  EXPECT_EQ(name_of(defaults.tc_precision), "auto");
  EXPECT_EQ(defaults.tc_tile_density, 0.25);
  EXPECT_NO_THROW(check(defaults));

  Tuning cores;
  EXPECT_FALSE(parse_name<TensorCores>("maybe").has_value());
  cores.tensor_cores = static_cast<TensorCores>(5);
  const std::string mc = message_of(cores);
  EXPECT_NE(mc.find("--tensor-cores"), std::string::npos) << mc;
  EXPECT_NE(mc.find("auto, on or off"), std::string::npos) << mc;
  for (const char* v : {"auto", "on", "off"}) {
    cores.tensor_cores = *parse_name<TensorCores>(v);
    EXPECT_NO_THROW(check(cores)) << v;
  }

  Tuning prec;
  EXPECT_FALSE(parse_name<TcPrecisionOption>("fp8").has_value());
  prec.tc_precision = static_cast<TcPrecisionOption>(9);
  const std::string mp = message_of(prec);
  EXPECT_NE(mp.find("--tc-precision"), std::string::npos) << mp;
  for (const char* v : {"auto", "3xtf32", "tf32", "bf16", "fp64"}) {
    prec.tc_precision = *parse_name<TcPrecisionOption>(v);
    EXPECT_EQ(name_of(prec.tc_precision), v);
    EXPECT_NO_THROW(check(prec)) << v;
  }

  Tuning dens;
  for (double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    dens.tc_tile_density = bad;
    const std::string md = message_of(dens);
    EXPECT_NE(md.find("--tc-tile-density"), std::string::npos) << bad << ": " << md;
  }
  for (double good : {1e-9, 0.25, 1.0}) {
    dens.tc_tile_density = good;
    EXPECT_NO_THROW(check(dens)) << good;
  }

  // Refused by set_tuning too, leaving the previous options in place.
  auto be = make_backend<double>(BackendKind::cpu);
  Tuning on;
  on.tensor_cores = TensorCores::on;
  be->set_tuning(on);
  Tuning bad;
  bad.tc_tile_density = 0;
  EXPECT_THROW(be->set_tuning(bad), InputError);
  EXPECT_EQ(be->tuning().tensor_cores, TensorCores::on);
  EXPECT_EQ(be->tuning().tc_tile_density, 0.25);
}

}  // namespace
}  // namespace tessera::kernels
