// Backend plumbing of the host backends: names, memory operations, factories.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"

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

}  // namespace
}  // namespace tessera::kernels
