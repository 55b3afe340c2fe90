// Memory tiers of the CUDA backend (DESIGN §8): a memory budget under the size of the
// sorted copies forces tier 2 (host-resident in pinned memory, streamed through two
// device chunk buffers). Tier 2 must give the MTTKRP of tier 1 and of the reference
// backend (fresh random inputs, outputs poisoned with NaN), report itself, refuse a
// budget too small for two chunks with a message, and give CP-ALS the same fit per
// iteration as tier 1, on the device loop with the chunk copies in its CUDA graph as on the
// per-operation path. Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

template <typename T>
class GpuTier : public GpuVsReference<T> {
 protected:
  using GpuVsReference<T>::ref_;

  /// MTTKRP of every mode (then mode 0 again, reusing the chunk buffers) on `be` with
  /// the tensor prepared there, against the reference backend and, when given, against
  /// the tier-1 results `tier1` (one vector per mode). Returns the results per mode.
  std::vector<std::vector<T>> check_mttkrp(Backend<T>& be, const TensorHandle<T>& h,
                                           const SparseTensor<T>& x, int R, std::uint64_t seed,
                                           const std::vector<std::vector<T>>* tier1,
                                           const std::string& what) {
    const int N = x.order();
    const auto fg = random_factors(be, x.dims, R, seed);
    const auto fr = random_factors(*ref_, x.dims, R, seed);
    auto hr = ref_->prepare(x);
    std::vector<std::vector<T>> results(static_cast<std::size_t>(N));
    std::vector<int> modes(static_cast<std::size_t>(N));
    for (int m = 0; m < N; ++m) modes[static_cast<std::size_t>(m)] = m;
    modes.push_back(0);
    for (int mode : modes) {
      auto [got, want] = mttkrp_pair(be, h, fg, *ref_, *hr, fr, mode, R);
      const std::string where = what + ", order " + std::to_string(N) + " mode " +
                                std::to_string(mode) + " R " + std::to_string(R) + " nnz " +
                                std::to_string(x.nnz());
      EXPECT_LT(rel_error(got, want), tol<T>()) << where << " vs reference";
      if (tier1 != nullptr) {
        EXPECT_LT(rel_error(got, (*tier1)[static_cast<std::size_t>(mode)]), tol<T>())
            << where << " vs tier 1";
      }
      // Reporting of the MTTKRP just done.
      const double copy = h.last_copy_seconds(), compute = h.last_compute_seconds();
      const double overlap = h.overlap_fraction();
      EXPECT_GT(compute, 0.0) << where;
      EXPECT_GE(overlap, 0.0) << where;
      EXPECT_LE(overlap, 1.0) << where;
      if (h.tier() == 1) {
        EXPECT_EQ(copy, 0.0) << where;
        EXPECT_EQ(overlap, 1.0) << where;
      } else {
        EXPECT_GT(copy, 0.0) << where;
      }
      results[static_cast<std::size_t>(mode)] = std::move(got);
    }
    return results;
  }

  /// Prepares x in tier 1 and in tier 2 under each budget (a function of the tier-1
  /// bytes) and checks every MTTKRP against the reference and tier 1.
  void compare_tiers(const SparseTensor<T>& x, const std::vector<int>& ranks,
                     const std::vector<std::pair<std::string, std::size_t>>& budgets,
                     std::uint64_t seed, const std::string& expect_in_describe = "") {
    auto be1 = make_backend<T>(BackendKind::cuda);
    auto h1 = be1->prepare(x);
    ASSERT_EQ(h1->tier(), 1) << h1->describe();
    EXPECT_TRUE(contains(h1->describe(), "tier 1")) << h1->describe();
    for (const auto& [name, budget] : budgets) {
      auto be2 = make_backend<T>(BackendKind::cuda);
      be2->set_memory_budget(budget);
      EXPECT_EQ(be2->memory_budget(), budget);
      auto h2 = be2->prepare(x);
      const std::string d = h2->describe();
      ASSERT_EQ(h2->tier(), 2) << name << ": budget " << budget << " of " << h1->bytes() << ": "
                               << d;
      EXPECT_TRUE(contains(d, "tier 2")) << d;
      EXPECT_TRUE(contains(d, "pinned")) << d;
      if (!expect_in_describe.empty()) {
        EXPECT_TRUE(contains(d, expect_in_describe)) << name << ": " << d;
      }
      EXPECT_LE(h2->bytes(), budget) << name << ": device bytes over the budget: " << d;
      EXPECT_GT(h2->bytes(), 0u) << d;
      EXPECT_EQ(h2->nnz(), x.nnz());
      EXPECT_EQ(h2->dims(), x.dims);
      for (int m = 0; m < x.order(); ++m)
        EXPECT_EQ(h2->mttkrp_stream_bytes(m), h1->mttkrp_stream_bytes(m));
      for (int R : ranks) {
        const auto r1 = check_mttkrp(*be1, *h1, x, R, seed + R, nullptr, "tier 1");
        check_mttkrp(*be2, *h2, x, R, seed + R, &r1, "tier 2 (" + name + ", " + d + ")");
      }
    }
  }

  std::size_t tier1_bytes(const SparseTensor<T>& x) {
    auto be = make_backend<T>(BackendKind::cuda);
    return be->prepare(x)->bytes();
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuTier, ValueTypes);

TYPED_TEST(GpuTier, FifthOfTier1Bytes) {
  using T = TypeParam;
  struct Shape {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
  };
  const std::vector<Shape> shapes = {
      {{60, 50, 45}, 9000},
      {{14, 11, 13, 9}, 7000},
      {{9, 8, 7, 10, 6}, 6000},
  };
  std::uint64_t seed = 300;
  for (const auto& s : shapes) {
    const auto x = random_tensor<T>(s.dims, s.nnz, ++seed);
    const std::size_t b1 = this->tier1_bytes(x);
    this->compare_tiers(x, {16, 33}, {{"1/5 of tier 1", b1 / 5}}, seed * 17);
  }
}

TYPED_TEST(GpuTier, OneTilePerChunk) {
  using T = TypeParam;
  // Budget of exactly two one-tile chunk buffers: every chunk is one tile, so every
  // tile boundary is also a chunk boundary. nnz is not a multiple of the tile.
  const std::vector<std::vector<std::uint64_t>> shapes = {
      {30, 25, 20}, {10, 9, 12, 8}, {7, 6, 8, 5, 9}};
  std::uint64_t seed = 400;
  for (const auto& dims : shapes) {
    const int N = static_cast<int>(dims.size());
    const auto x = random_tensor<T>(dims, 11 * static_cast<nnz_t>(kTileNnz) + 37, ++seed);
    const std::size_t budget = 2 * chunk_bytes<T>(N, kTileNnz);
    this->compare_tiers(x, {16, 33}, {{"one tile per chunk", budget}}, seed * 19,
                        "of " + std::to_string(kTileNnz) + " nonzeros");
  }
}

TYPED_TEST(GpuTier, ChunkBoundariesInsideLongRows) {
  using T = TypeParam;
  // 70% of the nonzeros share one slice of the skewed mode: that row runs through many
  // tiles and several chunks, so chunk boundaries fall inside it (and inside the long
  // fibres of the other modes' rows). Chunks of 3 and of 5 tiles.
  for (int skew_mode : {0, 1, 2}) {
    std::vector<std::uint64_t> dims = {50, 40, 30};
    dims[static_cast<std::size_t>(skew_mode)] = 2000;
    const auto x = random_tensor<T>(dims, 12000, 500 + skew_mode, skew_mode);
    this->compare_tiers(x, {16, 33},
                        {{"3 tiles per chunk", 2 * chunk_bytes<T>(3, 3 * kTileNnz)},
                         {"5 tiles per chunk", 2 * chunk_bytes<T>(3, 5 * kTileNnz)}},
                        600 + skew_mode);
  }
  // Order 4 and 5 with a skewed middle mode.
  const auto x4 = random_tensor<T>({20, 900, 15, 12}, 8000, 510, 1);
  this->compare_tiers(x4, {16, 33}, {{"2 tiles per chunk", 2 * chunk_bytes<T>(4, 2 * kTileNnz)}},
                      610);
  const auto x5 = random_tensor<T>({9, 8, 700, 7, 6}, 7000, 520, 2);
  this->compare_tiers(x5, {16, 33}, {{"4 tiles per chunk", 2 * chunk_bytes<T>(5, 4 * kTileNnz)}},
                      620);
}

TYPED_TEST(GpuTier, BudgetBoundaries) {
  using T = TypeParam;
  const auto x = random_tensor<T>({40, 35, 30}, 5000, 700);
  const std::size_t b1 = this->tier1_bytes(x);
  {  // A budget equal to the tier-1 size keeps tier 1.
    auto be = make_backend<T>(BackendKind::cuda);
    be->set_memory_budget(b1);
    auto h = be->prepare(x);
    EXPECT_EQ(h->tier(), 1) << h->describe();
    EXPECT_EQ(h->bytes(), b1);
  }
  {  // One byte less streams.
    auto be = make_backend<T>(BackendKind::cuda);
    be->set_memory_budget(b1 - 1);
    auto h = be->prepare(x);
    EXPECT_EQ(h->tier(), 2) << h->describe();
    EXPECT_LE(h->bytes(), b1 - 1);
  }
  {  // Exactly two one-tile chunks is the smallest budget that works.
    auto be = make_backend<T>(BackendKind::cuda);
    be->set_memory_budget(2 * chunk_bytes<T>(3, kTileNnz));
    auto h = be->prepare(x);
    EXPECT_EQ(h->tier(), 2) << h->describe();
    EXPECT_EQ(h->bytes(), 2 * chunk_bytes<T>(3, kTileNnz)) << h->describe();
  }
}

TYPED_TEST(GpuTier, BudgetTooSmallForTwoChunks) {
  using T = TypeParam;
  const auto x = random_tensor<T>({40, 35, 30}, 5000, 710);
  const std::size_t need = 2 * chunk_bytes<T>(3, kTileNnz);
  for (std::size_t budget : {std::size_t(1), std::size_t(1000), need - 1}) {
    auto be = make_backend<T>(BackendKind::cuda);
    be->set_memory_budget(budget);
    EXPECT_THROW(
        {
          try {
            be->prepare(x);
          } catch (const InputError& e) {
            const std::string msg = e.what();
            EXPECT_TRUE(contains(msg, "memory budget of " + std::to_string(budget) + " bytes"))
                << msg;
            EXPECT_TRUE(contains(msg, "too small")) << msg;
            EXPECT_TRUE(contains(msg, "at least " + std::to_string(need) + " bytes")) << msg;
            EXPECT_TRUE(contains(msg, "--mem-budget")) << msg;
            throw;
          }
        },
        InputError)
        << "budget " << budget;
  }
}

TYPED_TEST(GpuTier, HandleBelongsToItsBackend) {
  using T = TypeParam;
  const auto x = random_tensor<T>({30, 20, 25}, 3000, 720);
  auto be = make_backend<T>(BackendKind::cuda);
  be->set_memory_budget(2 * chunk_bytes<T>(3, 2 * kTileNnz));
  auto h = be->prepare(x);
  ASSERT_EQ(h->tier(), 2);
  auto other = make_backend<T>(BackendKind::cuda);
  const int R = 8;
  std::vector<Array<T>> f;
  std::vector<const T*> p;
  for (auto d : x.dims) {
    f.push_back(uploaded(*other, random_vector<T>(static_cast<std::size_t>(d) * R, d)));
    p.push_back(f.back().data());
  }
  auto out = other->allocate(static_cast<std::size_t>(x.dims[0]) * R);
  try {
    kernels::ops::mttkrp(*other, *h, 0, p, R, out.data());
    ADD_FAILURE() << "a tier-2 handle ran on a backend that did not prepare it";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "the CUDA backend that prepared it")) << e.what();
  }
}

// The host backends take the budget and stay in tier 1. No GPU needed.
template <typename T>
class HostTier : public ::testing::Test {};
TYPED_TEST_SUITE(HostTier, ValueTypes);

TYPED_TEST(HostTier, BudgetRecordedTierOne) {
  using T = TypeParam;
  const auto x = random_tensor<T>({30, 20, 25}, 3000, 730);
  const int R = 9;
  for (BackendKind k : {BackendKind::reference, BackendKind::cpu}) {
    auto be = make_backend<T>(k, 1);
    EXPECT_EQ(be->memory_budget(), 0u);
    be->set_memory_budget(1000);  // far under the tensor: ignored by host backends
    EXPECT_EQ(be->memory_budget(), 1000u);
    auto h = be->prepare(x);
    EXPECT_EQ(h->tier(), 1);
    EXPECT_TRUE(contains(h->describe(), "tier 1")) << h->describe();
    EXPECT_TRUE(contains(h->describe(), "host-resident")) << h->describe();
    EXPECT_TRUE(contains(h->describe(), std::to_string(h->bytes()) + " bytes")) << h->describe();
    EXPECT_EQ(h->last_compute_seconds(), 0.0);  // no MTTKRP yet
    std::vector<Array<T>> f;
    std::vector<const T*> p;
    for (auto d : x.dims) {
      f.push_back(uploaded(*be, random_vector<T>(static_cast<std::size_t>(d) * R, d + 1)));
      p.push_back(f.back().data());
    }
    auto out = be->allocate(static_cast<std::size_t>(x.dims[1]) * R);
    kernels::ops::mttkrp(*be, *h, 1, p, R, out.data());
    EXPECT_GT(h->last_compute_seconds(), 0.0);
    EXPECT_EQ(h->last_copy_seconds(), 0.0);
    EXPECT_EQ(h->overlap_fraction(), 1.0);
  }
}

}  // namespace
}  // namespace tessera::kernels

// ---- CP-ALS: tier 1 and tier 2 give the same fit per iteration ----
namespace tessera {
namespace {

using algo::CommStrategy;

using namespace ::tessera::test;

class GpuTierCp : public GpuJobTest {
 protected:
  template <typename T>
  void compare(CommStrategy s, double tol) {
    auto d = cp_problem<T>(s, 23, *world_);
    const auto opt = cp_test_options(s);
    auto be1 = kernels::make_backend<T>(kernels::BackendKind::cuda);
    auto be2 = kernels::make_backend<T>(kernels::BackendKind::cuda);
    // This rank's budget: a fifth of its block's tier-1 size; check it streams.
    const std::size_t b1 = be1->prepare(d.block)->bytes();
    ASSERT_GT(b1, 0u);
    be2->set_memory_budget(b1 / 5);
    {
      auto probe = be2->prepare(d.block);
      ASSERT_EQ(probe->tier(), 2) << probe->describe();
    }
    auto r1 = algo::cp_als<T>(d, *be1, *world_, *nccl_, opt);
    auto r2 = algo::cp_als<T>(d, *be2, *world_, *nccl_, opt);
    expect_same_cp(r2, r1, tol);
    if (s != CommStrategy::allreduce) return;
    // The device loop captures the streamed format's chunk copies too (docs/cp-device-loop.md,
    // "Memory tier 2 in the graph"): the engine of tier 1, and every iteration's chunk times,
    // the replays' included (against the per-operation path on the same streamed copies).
    EXPECT_EQ(r2.tier, 2);
    EXPECT_EQ(r2.iteration_engine, r1.iteration_engine);
    EXPECT_EQ(r2.iteration_engine.rfind("cuda graph", 0), 0u) << r2.iteration_engine;
    auto off = opt;
    off.device_loop = false;
    auto r3 = algo::cp_als<T>(d, *be2, *world_, *nccl_, off);
    expect_same_cp(r3, r1, tol);
    ASSERT_GT(r3.stream_copy_seconds, 0.0);
    EXPECT_GT(r2.stream_copy_seconds, 0.4 * r3.stream_copy_seconds);
    EXPECT_GT(r2.stream_compute_seconds, 0.4 * r3.stream_compute_seconds);
  }
};

TEST_F(GpuTierCp, AllreduceDouble) {
  compare<double>(CommStrategy::allreduce, 1e-9);
}
TEST_F(GpuTierCp, LayerDouble) {
  compare<double>(CommStrategy::layer, 1e-9);
}
TEST_F(GpuTierCp, AllreduceFloat) {
  compare<float>(CommStrategy::allreduce, 2e-4);
}

}  // namespace
}  // namespace tessera
