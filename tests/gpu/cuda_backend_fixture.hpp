// The fixture of the CUDA backend's tests against the reference backend
// (gpu_backend.cpp: MTTKRP, row Grams, dense operations; gpu_counts.cpp: CP-APR and GCP):
// a cuda and a reference backend, skipped (with a message) where no CUDA device is visible.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"

namespace tessera::kernels {

template <typename T>
class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
    gpu_ = make_backend<T>(BackendKind::cuda);
    ref_ = make_backend<T>(BackendKind::reference);
  }

  Array<T> on_gpu(const std::vector<T>& h) { return ::tessera::test::uploaded(*gpu_, h); }
  Array<T> on_ref(const std::vector<T>& h) { return ::tessera::test::uploaded(*ref_, h); }
  std::vector<T> from_gpu(const T* p, std::size_t n) {
    return ::tessera::test::downloaded(*gpu_, p, n);
  }
  std::vector<T> from_ref(const T* p, std::size_t n) {
    return ::tessera::test::downloaded(*ref_, p, n);
  }
  Array<T> poisoned_gpu(std::size_t n) { return ::tessera::test::poisoned(*gpu_, n); }
  Array<T> poisoned_ref(std::size_t n) { return ::tessera::test::poisoned(*ref_, n); }

  /// MTTKRP of every mode at rank R on both backends; returns the worst relative error.
  double mttkrp_all_modes(const SparseTensor<T>& x, int R, std::uint64_t seed) {
    const int N = x.order();
    auto hg = gpu_->prepare(x);
    auto hr = ref_->prepare(x);
    EXPECT_EQ(hg->order(), N);
    EXPECT_EQ(hg->nnz(), x.nnz());
    EXPECT_EQ(hg->dims(), x.dims);
    const auto fg = ::tessera::test::random_factors(*gpu_, x.dims, R, seed);
    const auto fr = ::tessera::test::random_factors(*ref_, x.dims, R, seed);
    double worst = 0;
    for (int mode = 0; mode < N; ++mode) {
      const auto [got, want] =
          ::tessera::test::mttkrp_pair(*gpu_, *hg, fg, *ref_, *hr, fr, mode, R);
      const double e = ::tessera::test::rel_error(got, want);
      EXPECT_LT(e, ::tessera::test::tol<T>())
          << "order " << N << " mode " << mode << " R " << R << " nnz " << x.nnz();
      worst = std::max(worst, e);
    }
    return worst;
  }

  std::unique_ptr<Backend<T>> gpu_, ref_;
};

using ValueTypes = ::testing::Types<float, double>;

}  // namespace tessera::kernels
