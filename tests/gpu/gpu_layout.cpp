// Blocked layouts of the CUDA MTTKRP (kernels/cuda/mttkrp/layout.cu, "Blocked layouts"): the
// copies sorted by (block, i_n, i_s) and read by the shared-memory kernel (smem) or by the
// tile kernel with one mode kept in L2 (l2) must give the reference backend's MTTKRP for
// every mode, order 3 to 6, rank 1 to 70 (one and several column passes), float and
// double, uniform and heavily repeated indices, with tiles small enough (forced through
// Tuning::cuda_block_rows, --cuda-block-rows) that every mode is cut into many blocks. The layout
// actually used is checked in describe(). distinct_rows and value_norm_squared must agree with the
// reference backend on every layout. The default layout is the l1 plan where every factor
// fits in L2 and runs are long (MTTKRP and TTMc on it checked), plain for a tensor
// prepared for TTMc and for a very sparse one; the automatic planner
// (Tuning::cuda_layout = auto) must pick smem for a small dense-ish tensor whose factors fit
// in shared memory, and plain for a very sparse one.
// The two tile kernels of the plain and l2 layouts (Tuning::mttkrp_kernel = classic, or
// blocked = the register-blocked kernel of kernels/cuda/mttkrp/blocked.cuh where it applies) must
// each give the reference backend's MTTKRP at orders 3 to 6, at the ranks the blocked kernel takes
// (powers of two, float 4 .. 128, double 2 .. 64) and at ranks it leaves to the classic one (24,
// 40, 6, ...), on uniform and skewed tensors (one slice holding most nonzeros, so its run crosses
// many tiles), with nonzero counts that do and do not allow 16-byte staging, in tier 1 and tier 2
// (streamed chunks); describe() must name the kernel that ran. The options are set through the API
// (make_backend's tuning, Backend::set_tuning), and invalid values are refused there. Skips (with a
// message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"
#include "kernels/ttmc.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

/// Tuning with the MTTKRP layout and tile kernel options set (the others default).
Tuning layout_tuning(const std::string& layout, std::uint64_t block_rows,
                     const std::string& kernel = "auto") {
  Tuning t;
  t.cuda_layout = kernels::parse_named<kernels::CudaLayout>(layout, "--cuda-layout");
  t.cuda_block_rows = block_rows;
  t.mttkrp_kernel = kernels::parse_named<kernels::MttkrpKernel>(kernel, "--mttkrp-kernel");
  t.tensor_cores =
      kernels::TensorCores::off;  // the CUDA-core layouts and kernels (tensor cores: gpu_tc_mttkrp)
  return t;
}

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
  /// Prepares x under a forced layout and tile size (and tile kernel selection) and
  /// checks every mode at every R, distinct_rows and value_norm_squared against the
  /// reference backend.
  void check_forced(const SparseTensor<T>& x, const std::string& layout, int block_rows,
                    const std::vector<int>& ranks, std::uint64_t seed,
                    const std::string& kernel = "auto") {
    auto be =
        make_backend<T>(BackendKind::cuda, 0,
                        layout_tuning(layout, static_cast<std::uint64_t>(block_rows), kernel));
    auto h = be->prepare(x);
    const std::string d = h->describe();
    ASSERT_EQ(h->tier(), 1) << d;
    for (int m = 0; m < x.order(); ++m)
      EXPECT_TRUE(contains(d, "mode " + std::to_string(m) + " " + layout)) << d;
    const std::string what = layout + " layout, block rows " + std::to_string(block_rows);
    for (int R : ranks)
      this->check_mttkrp(*be, *h, x, R, seed + static_cast<std::uint64_t>(R), what);

    auto hr = this->ref_->prepare(x);
    EXPECT_EQ(h->distinct_rows(), hr->distinct_rows()) << d;
    EXPECT_NEAR(h->value_norm_squared(), hr->value_norm_squared(), 1e-12 * hr->value_norm_squared())
        << d;
  }
};

/// Whether the blocked kernel takes an MTTKRP of this order and rank (blocked::supports):
/// order 3 to 6, R / (16 / sizeof(T)) a power of two up to 32.
template <typename T>
bool blocked_applies(int order, int R) {
  const int V = static_cast<int>(16 / sizeof(T));
  if (order < 3 || order > 6 || R % V != 0) return false;
  const int L = R / V;
  return L >= 1 && L <= 32 && (L & (L - 1)) == 0;
}

/// Ranks of the kernel tests: every lane count of the blocked kernel (1 to 32: float R = 4 ..
/// 128, double R = 2 .. 64), and ranks it leaves to the classic kernel (24 and 40: not a
/// power of two of 16-byte packs; 6: not a whole number of them in float; float 2; double
/// 128: more than 32 lanes).
const std::vector<int> kKernelRanks = {2, 4, 6, 8, 16, 24, 32, 40, 64, 128};

template <typename T>
class GpuKernel : public GpuVsReference<T> {
 protected:
  /// Prepares x (under `budget` bytes when non-zero, so tier 2) with each tile kernel
  /// forced in turn and checks every mode at every rank against the reference backend,
  /// and that describe() names the kernel that ran for each mode.
  void check_kernels(const SparseTensor<T>& x, const std::vector<int>& ranks, std::uint64_t seed,
                     std::size_t budget, const std::string& what) {
    for (const std::string kernel : {"classic", "blocked"}) {
      Tuning t;
      t.mttkrp_kernel = kernels::parse_named<kernels::MttkrpKernel>(kernel, "--mttkrp-kernel");
      t.tensor_cores = kernels::TensorCores::off;  // the CUDA-core kernels named in describe()
      auto be = make_backend<T>(BackendKind::cuda, 0, t);
      if (budget > 0) be->set_memory_budget(budget);
      auto h = be->prepare(x);
      ASSERT_EQ(h->tier(), budget > 0 ? 2 : 1) << h->describe();
      for (int R : ranks) {
        const std::string where = what + ", " + kernel + " kernel forced";
        this->check_mttkrp(*be, *h, x, R, seed + static_cast<std::uint64_t>(R), where);
        const std::string ran =
            kernel == "blocked" && blocked_applies<T>(x.order(), R) ? "blocked" : "classic";
        const std::string d = h->describe();
        for (int m = 0; m < x.order(); ++m)
          EXPECT_TRUE(contains(
              d, "mode " + std::to_string(m) + " " + ran + " (R " + std::to_string(R) + ")"))
              << where << ", R " << R << ": expected the " << ran << " kernel: " << d;
      }
    }
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuLayout, ValueTypes);
TYPED_TEST_SUITE(GpuKernel, ValueTypes);

TYPED_TEST(GpuKernel, UniformAndSkewedTier1) {
  using T = TypeParam;
  struct Case {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    int skew_mode;  // random_tensor: 70% of the nonzeros at index 0 of this mode (-1: none)
    bool repeats;   // make_tensor: 30% at index 0 and 10% at the last index in every mode
  };
  const std::vector<Case> cases = {
      {{3000, 2000, 1000}, 50021, -1, false},   // uniform, nnz odd: 4-byte staging
      {{3000, 2000, 1000}, 40964, 0, false},    // mode-0 slice across ~14 tiles, 16-byte staging
      {{300, 4000, 50}, 60013, 1, false},       // long runs in a short output mode too
      {{40, 30, 20, 50}, 30011, -1, true},      // order 4, every mode skewed
      {{60, 50, 40, 30}, 36000, 2, false},      // order 4, 16-byte staging
      {{9, 8, 7, 6, 5}, 20011, -1, true},       // order 5
      {{20, 30, 10, 40, 25}, 24576, 0, false},  // order 5, whole tiles
      {{5, 4, 6, 3, 7, 4}, 10007, -1, true},    // order 6
      {{100, 80, 60}, 1001, 0, false},          // under one tile: most slots empty
  };
  std::uint64_t seed = 4600;
  for (const auto& c : cases) {
    ++seed;
    const auto x = c.repeats ? make_tensor<T>(c.dims, c.nnz, true, seed)
                             : random_tensor<T>(c.dims, c.nnz, seed, c.skew_mode);
    const std::string what = "order " + std::to_string(c.dims.size()) + ", skew mode " +
                             std::to_string(c.skew_mode) + (c.repeats ? ", repeats" : "") +
                             ", tier 1";
    this->check_kernels(x, kKernelRanks, seed * 7, 0, what);
  }
}

TYPED_TEST(GpuKernel, SkewedTier2) {
  using T = TypeParam;
  // Tier 2 streams whole-tile chunks (16-byte staging) and a shorter last one (odd count:
  // 4-byte staging); the slice at index 0 of mode 0 crosses every chunk boundary.
  for (const auto& [dims, nnz, skew] :
       std::vector<std::tuple<std::vector<std::uint64_t>, nnz_t, int>>{
           {{3000, 2000, 1000}, 60013, 0}, {{50, 40, 300, 20}, 50021, 2}}) {
    const auto x = random_tensor<T>(dims, nnz, 4700 + nnz, skew);
    auto be = make_backend<T>(BackendKind::cuda, 0, layout_tuning("default", 0));
    const std::size_t tier1 = be->prepare(x)->bytes();
    this->check_kernels(x, {8, 16, 24, 32, 64}, 4700, tier1 / 4,
                        "order " + std::to_string(dims.size()) + ", skew mode " +
                            std::to_string(skew) + ", tier 2 (budget " + std::to_string(tier1 / 4) +
                            ")");
  }
}

TYPED_TEST(GpuLayout, SmemManyBlocks) {
  using T = TypeParam;
  struct Case {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    bool repeats;
    int block_rows;
  };
  const std::vector<Case> cases = {
      {{300, 200, 100}, 60013, false, 64},    // 3 input tiles of ~32 rows per mode pair
      {{300, 200, 100}, 60013, true, 40},     // uneven blocks, long rows at 0 and the end
      {{2, 5000, 3}, 20011, false, 16},       // short modes kept whole, one long mode cut
      {{40, 30, 20, 50}, 50021, true, 45},    // order 4: three input modes per tile
      {{9, 8, 7, 6, 5}, 30011, false, 12},    // order 5
      {{5, 4, 6, 3, 7, 4}, 20011, true, 10},  // order 6
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
    // Both tile kernels read this layout: the blocked one at R = 8, 16, 32 (rows sorted only
    // within a block, every row added with atomics), the classic one at the others.
    for (const char* kernel : {"classic", "blocked"})
      this->check_forced(x, "l2", c.block_rows, {1, 8, 16, 32, 70}, seed * 3, kernel);
  }
}

// Each tile kernel and blocked layout above once, on a few thousand nonzeros: the cases
// that `jobs/gpu-node.sh sanitize` runs under compute-sanitizer racecheck and memcheck
// (TESSERA_SANITIZE_GTEST='*Small*'; docs/reliability.md). Same checks as the full-size
// tests.
TYPED_TEST(GpuKernel, SmallTier1AndTier2) {
  using T = TypeParam;
  const auto x = random_tensor<T>({3000, 2000, 1000}, 6003, 4801, 0);
  this->check_kernels(x, {8, 24}, 4802, 0, "small, skew mode 0, tier 1");
  const auto x4 = make_tensor<T>({40, 30, 20, 50}, 3001, true, 4803);
  this->check_kernels(x4, {16}, 4804, 0, "small, order 4, repeats, tier 1");
  auto be = make_backend<T>(BackendKind::cuda, 0, layout_tuning("default", 0));
  const std::size_t tier1 = be->prepare(x)->bytes();
  this->check_kernels(x, {16}, 4805, tier1 / 3, "small, tier 2");
}

TYPED_TEST(GpuLayout, SmallSmemAndL2) {
  using T = TypeParam;
  const auto x = make_tensor<T>({300, 200, 100}, 6007, true, 4901);
  this->check_forced(x, "smem", 40, {16, 70}, 4902);
  const auto x4 = make_tensor<T>({40, 30, 20, 50}, 4001, true, 4903);
  this->check_forced(x4, "smem", 45, {16}, 4904);
  const auto y = make_tensor<T>({3000, 2000, 1000}, 8021, true, 4905);
  for (const char* kernel : {"classic", "blocked"})
    this->check_forced(y, "l2", 37, {8, 70}, 4906, kernel);
}

TYPED_TEST(GpuLayout, PlainForced) {
  using T = TypeParam;
  const auto x = make_tensor<T>({300, 200, 100}, 60013, true, 4301);
  for (const char* kernel : {"classic", "blocked"})
    this->check_forced(x, "plain", 64, {16, 33}, 4301, kernel);
}

TYPED_TEST(GpuLayout, AutomaticChoice) {
  using T = TypeParam;
  auto be = make_backend<T>(BackendKind::cuda);  // default tuning: layout "default"
  {
    // The default: factors far smaller than L2 and long runs, so the l1 plan (the l2
    // layout with the shortest input mode cut into 64-row blocks) for every mode; MTTKRP
    // and TTMc on it equal the reference backend's.
    const auto x = make_tensor<T>({200, 150, 100}, 40009, false, 4400);
    auto h = be->prepare(x);
    for (int m = 0; m < 3; ++m)
      EXPECT_TRUE(contains(h->describe(), "mode " + std::to_string(m) + " l2 (l1: mode "))
          << h->describe();
    this->check_mttkrp(*be, *h, x, 32, 4400, "default l1 plan");
    this->check_mttkrp(*be, *h, x, 24, 4410, "default l1 plan, classic kernel");
    auto hr = this->ref_->prepare(x);
    const std::vector<int> ranks = {8, 16, 4};
    std::vector<std::vector<T>> fh;
    std::vector<Array<T>> fd;
    std::vector<const T*> pg, pr;
    for (int m = 0; m < 3; ++m) {
      fh.push_back(random_vector<T>(x.dims[m] * static_cast<std::size_t>(ranks[m]), 4420 + m));
      fd.push_back(uploaded(*be, fh.back()));
    }
    for (int m = 0; m < 3; ++m) pg.push_back(fd[m].data()), pr.push_back(fh[m].data());
    for (int mode = 0; mode < 3; ++mode) {
      const auto rows = kernels::ops::ttmc_rows(*this->ref_, *hr, mode);
      ASSERT_EQ(kernels::ops::ttmc_rows(*be, *h, mode), rows);
      const std::size_t n = rows.size() * static_cast<std::size_t>(ttmc_output_cols(ranks, mode));
      std::vector<T> want(n);
      kernels::ops::ttmc(*this->ref_, *hr, mode, pr, ranks, want.data());
      auto out = poisoned(*be, n);
      kernels::ops::ttmc(*be, *h, mode, pg, ranks, out.data());
      EXPECT_LT(rel_error(downloaded(*be, out.data(), n), want), tol<T>()) << "TTMc, mode " << mode;
    }
    // Prepared for TTMc, the same tensor keeps the plain layout (short runs would each
    // flush a wide TTMc row with atomics).
    be->set_workload(Workload::ttmc);
    auto ht = be->prepare(x);
    for (int m = 0; m < 3; ++m)
      EXPECT_TRUE(contains(ht->describe(), "mode " + std::to_string(m) + " plain"))
          << ht->describe();
    be->set_workload(Workload::mttkrp);
    // Too sparse for runs of 8 per 64-row block: plain.
    const auto thin = make_tensor<T>({20000, 15000, 10000}, 40009, false, 4403);
    auto hp = be->prepare(thin);
    for (int m = 0; m < 3; ++m)
      EXPECT_TRUE(contains(hp->describe(), "mode " + std::to_string(m) + " plain"))
          << hp->describe();
  }
  be->set_tuning(layout_tuning("auto", 0));  // takes effect at the next prepare
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

TEST(GpuLayoutTuning, BadValuesAreRefused) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  const auto x = make_tensor<float>({30, 20, 10}, 1000, false, 4501);
  auto be = make_backend<float>(BackendKind::cuda);
  EXPECT_THROW(be->set_tuning(layout_tuning("fast", 0)), InputError);
  EXPECT_THROW(be->set_tuning(layout_tuning("auto", std::uint64_t(1) << 32)), InputError);
  EXPECT_THROW(make_backend<float>(BackendKind::cuda, 0, layout_tuning("fast", 0)), InputError);
  {
    // The refused options left the previous ones in place: prepare and MTTKRP run.
    auto h = be->prepare(x);
    const auto f = random_factors(*be, x.dims, 8, 4502);
    auto out = be->allocate(static_cast<std::size_t>(x.dims[0]) * 8);
    EXPECT_THROW(be->set_tuning(layout_tuning("default", 0, "fast")), InputError);
    EXPECT_NO_THROW(kernels::ops::mttkrp(*be, *h, 0, f.ptrs, 8, out.data()));
  }
}

}  // namespace
}  // namespace tessera::kernels
