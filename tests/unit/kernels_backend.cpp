// Backend plumbing of the host backends: names, memory operations, factories.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#include "tensor/synthetic.hpp"
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
  EXPECT_EQ(ref->memory_space(), comm::MemorySpace::host);
  for (int threads : {0, 1, 2}) {
    auto cpu = make_backend<TypeParam>(BackendKind::cpu, threads);
    EXPECT_EQ(cpu->kind(), BackendKind::cpu);
    EXPECT_EQ(cpu->name(), "cpu");
    EXPECT_EQ(cpu->memory_space(), comm::MemorySpace::host);
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
            be->mttkrp(*h, mode, fp, R, got.data());
            ref->mttkrp(*hr, mode, fp, R, want.data());
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

}  // namespace
}  // namespace tessera::kernels
