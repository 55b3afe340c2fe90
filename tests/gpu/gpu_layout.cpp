// Blocked layouts of the CUDA MTTKRP (kernels/cuda/mttkrp.cu, "Blocked layouts"): the
// copies sorted by (block, i_n, i_s) and read by the shared-memory kernel (smem) or by the
// tile kernel with one mode kept in L2 (l2) must give the reference backend's MTTKRP for
// every mode, order 3 to 6, rank 1 to 70 (one and several column passes), float and
// double, uniform and heavily repeated indices, with tiles small enough (forced through
// TESSERA_CUDA_BLOCK_ROWS) that every mode is cut into many blocks. The layout actually
// used is checked in describe(). distinct_rows and value_norm_squared must agree with the
// reference backend on every layout. The default layout is plain; the automatic planner
// (TESSERA_CUDA_LAYOUT=auto) must pick smem for a small dense-ish tensor whose factors fit
// in shared memory, and plain for a very sparse one.
// Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

/// Sets an environment variable for the lifetime of the guard (restoring "unset").
class EnvGuard {
 public:
  EnvGuard(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~EnvGuard() { ::unsetenv(name_); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
};

/// Coordinates uniform in every mode, or (repeats) with 30% of each mode's indices at 0
/// and 10% at the last index, so rows and blocks are very uneven. Values in [-1, 1).
template <typename T>
SparseTensor<T> make_tensor(const std::vector<std::uint64_t>& dims, nnz_t nnz, bool repeats,
                            std::uint64_t seed) {
  SparseTensor<T> x(dims);
  x.reserve(static_cast<std::size_t>(nnz));
  CounterRng rng(seed, 5);
  std::vector<index_t> c(dims.size());
  for (nnz_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m) {
      const double u = rng.uniform();
      if (repeats && u < 0.3)
        c[m] = 0;
      else if (repeats && u < 0.4)
        c[m] = static_cast<index_t>(dims[m] - 1);
      else
        c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    }
    x.push_back(c.data(), static_cast<T>(2.0 * rng.uniform() - 1.0));
  }
  return x;
}

template <typename T>
class GpuLayout : public GpuVsReference<T> {
 protected:
  /// Prepares x under a forced layout and tile size and checks every mode at every R,
  /// distinct_rows and value_norm_squared against the reference backend.
  void check_forced(const SparseTensor<T>& x, const std::string& layout, int block_rows,
                    const std::vector<int>& ranks, std::uint64_t seed) {
    EnvGuard g1("TESSERA_CUDA_LAYOUT", layout);
    EnvGuard g2("TESSERA_CUDA_BLOCK_ROWS", std::to_string(block_rows));
    auto be = make_backend<T>(BackendKind::cuda);
    auto h = be->prepare(x);
    const std::string d = h->describe();
    ASSERT_EQ(h->tier(), 1) << d;
    for (int m = 0; m < x.order(); ++m)
      EXPECT_TRUE(contains(d, "mode " + std::to_string(m) + " " + layout)) << d;
    const std::string what = layout + " layout, block rows " + std::to_string(block_rows);
    for (int R : ranks) this->check_mttkrp(*be, *h, x, R, seed + static_cast<std::uint64_t>(R), what);

    auto hr = this->ref_->prepare(x);
    EXPECT_EQ(h->distinct_rows(), hr->distinct_rows()) << d;
    EXPECT_NEAR(h->value_norm_squared(), hr->value_norm_squared(),
                1e-12 * hr->value_norm_squared())
        << d;
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuLayout, ValueTypes);

TYPED_TEST(GpuLayout, SmemManyBlocks) {
  using T = TypeParam;
  struct Case {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    bool repeats;
    int block_rows;
  };
  const std::vector<Case> cases = {
      {{300, 200, 100}, 60013, false, 64},   // 3 input tiles of ~32 rows per mode pair
      {{300, 200, 100}, 60013, true, 40},    // uneven blocks, long rows at 0 and the end
      {{2, 5000, 3}, 20011, false, 16},      // short modes kept whole, one long mode cut
      {{40, 30, 20, 50}, 50021, true, 45},   // order 4: three input modes per tile
      {{9, 8, 7, 6, 5}, 30011, false, 12},   // order 5
      {{5, 4, 6, 3, 7, 4}, 20011, true, 10}, // order 6
  };
  std::uint64_t seed = 4100;
  for (const auto& c : cases) {
    const auto x = make_tensor<T>(c.dims, c.nnz, c.repeats, ++seed);
    this->check_forced(x, "smem", c.block_rows, {1, 16, 32, 70}, seed * 3);
  }
}

TYPED_TEST(GpuLayout, L2ManyBlocks) {
  using T = TypeParam;
  struct Case {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    bool repeats;
    int block_rows;
  };
  const std::vector<Case> cases = {
      {{3000, 2000, 1000}, 80021, false, 100},
      {{3000, 2000, 1000}, 80021, true, 37},
      {{50, 40, 300, 20}, 40009, true, 7},
      {{6, 7, 5, 8, 6}, 20011, false, 2},
  };
  std::uint64_t seed = 4200;
  for (const auto& c : cases) {
    const auto x = make_tensor<T>(c.dims, c.nnz, c.repeats, ++seed);
    this->check_forced(x, "l2", c.block_rows, {1, 16, 32, 70}, seed * 3);
  }
}

TYPED_TEST(GpuLayout, PlainForced) {
  using T = TypeParam;
  const auto x = make_tensor<T>({300, 200, 100}, 60013, true, 4301);
  this->check_forced(x, "plain", 64, {16, 33}, 4301);
}

TYPED_TEST(GpuLayout, AutomaticChoice) {
  using T = TypeParam;
  ::unsetenv("TESSERA_CUDA_BLOCK_ROWS");
  auto be = make_backend<T>(BackendKind::cuda);
  {
    // The default is plain.
    const auto x = make_tensor<T>({200, 150, 100}, 40009, false, 4400);
    auto h = be->prepare(x);
    for (int m = 0; m < 3; ++m)
      EXPECT_TRUE(contains(h->describe(), "mode " + std::to_string(m) + " plain")) << h->describe();
  }
  EnvGuard g("TESSERA_CUDA_LAYOUT", "auto");
  // Input factors of every mode fit one shared-memory tile, thousands of nonzeros per
  // output row: smem for every mode.
  const auto dense = make_tensor<T>({200, 150, 100}, 400009, false, 4401);
  auto h = be->prepare(dense);
  for (int m = 0; m < 3; ++m)
    EXPECT_TRUE(contains(h->describe(), "mode " + std::to_string(m) + " smem")) << h->describe();
  this->check_mttkrp(*be, *h, dense, 32, 4401, "automatic smem");
  // Very sparse, factors far smaller than L2: plain for every mode.
  const auto sparse = make_tensor<T>({200000, 150000, 100000}, 50021, false, 4402);
  auto hs = be->prepare(sparse);
  for (int m = 0; m < 3; ++m)
    EXPECT_TRUE(contains(hs->describe(), "mode " + std::to_string(m) + " plain")) << hs->describe();
  this->check_mttkrp(*be, *hs, sparse, 32, 4402, "automatic plain");
}

TEST(GpuLayoutEnv, BadValuesAreRefused) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  const auto x = make_tensor<float>({30, 20, 10}, 1000, false, 4501);
  auto be = make_backend<float>(BackendKind::cuda);
  {
    EnvGuard g("TESSERA_CUDA_LAYOUT", "fast");
    EXPECT_THROW(be->prepare(x), InputError);
  }
  {
    EnvGuard g("TESSERA_CUDA_BLOCK_ROWS", "0");
    EXPECT_THROW(be->prepare(x), InputError);
  }
}

}  // namespace
}  // namespace tessera::kernels
