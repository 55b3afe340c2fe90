// Building the per-mode sorted copies of the CUDA backend (prepare): the device sort of
// tier 1, the host sort of tier 1 (when the device sort's peak memory is over the limit)
// and the host sort of tier 2 must all give the MTTKRP of the reference backend. The
// MTTKRP kernel writes rows inside a tile with plain stores, so a copy whose rows are
// not contiguous loses contributions and fails the comparison. Tensors have many equal
// indices in every mode (long rows, long runs of equal secondary keys), nnz not a
// multiple of the tile, modes of length 1 (keys of 0 bits) and keys over 32 bits.
// The sorts are checked with the tensor cores off (the copies alone: their bytes are
// compared); a fourth preparation with --tensor-cores on runs the hybrid layout
// (kernels/cuda/mttkrp/hybrid.cuh) on the same shapes: orders 3 to 9, modes of length 1,
// 64-bit sort keys, duplicates. Skips (with a message) where no CUDA device is visible.
//
// LargeCounts (opt-in: TESSERA_GPU_LARGE_TESTS=1, about 30 GB of host memory and 120 GB
// of device memory) prepares an order-2 tensor of 2^31 + 4097 nonzeros (64-bit counts
// in the device sort) and checks the row sums of every mode exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

/// The tuning of the sort checks (the tensor cores off: the handle holds the copies only),
/// or with the tensor cores forced on.
kernels::Tuning tensor_cores(const char* on) {
  kernels::Tuning t;
  t.tensor_cores = kernels::parse_named<kernels::TensorCores>(on, "--tensor-cores");
  return t;
}

/// Random coordinates with many repeats: in every mode, 40% of the nonzeros take index 0
/// and 10% the last index; so rows of every mode are long and the secondary keys of a
/// row repeat. Duplicate coordinates are kept (MTTKRP sums them).
template <typename T>
SparseTensor<T> repetitive_tensor(std::vector<std::uint64_t> dims, nnz_t nnz, std::uint64_t seed) {
  SparseTensor<T> x(dims);
  x.reserve(static_cast<std::size_t>(nnz));
  CounterRng rng(seed, 7);
  std::vector<index_t> c(dims.size());
  for (nnz_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m) {
      const double u = rng.uniform();
      if (u < 0.4)
        c[m] = 0;
      else if (u < 0.5)
        c[m] = static_cast<index_t>(dims[m] - 1);
      else
        c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    }
    x.push_back(c.data(), static_cast<T>(2.0 * rng.uniform() - 1.0));
  }
  return x;
}

template <typename T>
class GpuPrepare : public GpuVsReference<T> {
 protected:
  using GpuVsReference<T>::check_mttkrp;

  /// Prepares x three ways and checks each against the reference: tier 1 sorted on the
  /// device (no budget), tier 1 sorted on the host (budget = the tier-1 bytes, under the
  /// device sort's peak) and tier 2 (a quarter of the tier-1 bytes, at least two
  /// one-tile chunk buffers; tier 1 where that is not smaller than tier 1).
  void check_three_ways(const SparseTensor<T>& x, const std::vector<int>& ranks,
                        std::uint64_t seed) {
    const int N = x.order();
    auto be1 = make_backend<T>(BackendKind::cuda, 0, tensor_cores("off"));
    auto h1 = be1->prepare(x);
    const std::string d1 = h1->describe();
    ASSERT_EQ(h1->tier(), 1) << d1;
    EXPECT_TRUE(contains(d1, "sorted on the device")) << d1;
    const std::size_t b1 = h1->bytes();

    auto be2 = make_backend<T>(BackendKind::cuda, 0, tensor_cores("off"));
    be2->set_memory_budget(b1);
    auto h2 = be2->prepare(x);
    const std::string d2 = h2->describe();
    ASSERT_EQ(h2->tier(), 1) << d2;
    EXPECT_EQ(h2->bytes(), b1) << d2;
    EXPECT_TRUE(contains(d2, "sorted on the host")) << d2;

    const std::size_t min_t2 =
        2 * chunk_bytes<T>(N, std::min<std::size_t>(kTileNnz, static_cast<std::size_t>(x.nnz())));
    auto be3 = make_backend<T>(BackendKind::cuda, 0, tensor_cores("off"));
    const std::size_t budget3 = std::max(b1 / 4, min_t2);
    be3->set_memory_budget(budget3);
    auto h3 = be3->prepare(x);
    // Tier 2 whenever the two one-tile chunk buffers are smaller than tier 1 (every shape
    // of a few tiles); a tensor under that keeps tier 1 within the same budget.
    ASSERT_EQ(h3->tier(), budget3 < b1 ? 2 : 1) << h3->describe();

    auto be4 = make_backend<T>(BackendKind::cuda, 0, tensor_cores("on"));
    auto h4 = be4->prepare(x);
    for (int R : ranks) {
      check_mttkrp(*be1, *h1, x, R, seed + R, "tier 1, device sort");
      check_mttkrp(*be2, *h2, x, R, seed + R, "tier 1, host sort");
      check_mttkrp(*be3, *h3, x, R, seed + R, "tier 2, host sort");
      check_mttkrp(*be4, *h4, x, R, seed + R, "tier 1, tensor cores on");
    }
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuPrepare, ValueTypes);

TYPED_TEST(GpuPrepare, RepeatedIndicesOrders3To9) {
  using T = TypeParam;
  struct Shape {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
  };
  const std::vector<Shape> shapes = {
      {{60, 50, 45}, 20011},
      {{3, 1000, 2}, 15013},       // short modes: very long rows and runs of equal keys
      {{70000, 90000, 5}, 30011},  // mode 0: 17 + 17 bits, a 64-bit key
      {{12, 900, 15, 300000}, 15013},
      {{9, 8, 700, 7, 6}, 9001},
      {{4, 3, 5, 4, 3, 4, 5, 3, 4}, 5003},
      {{4, 3, 5, 4, 200000, 4, 5, 3, 4}, 7001},
  };
  std::uint64_t seed = 900;
  for (const auto& s : shapes) {
    const auto x = repetitive_tensor<T>(s.dims, s.nnz, ++seed);
    this->check_three_ways(x, {16, 33}, seed * 7);
  }
}

TYPED_TEST(GpuPrepare, ModesOfLengthOne) {
  using T = TypeParam;
  // Keys of 0 bits: a primary or secondary mode of length 1, and both (the copy is the
  // input order).
  const std::vector<std::vector<std::uint64_t>> shapes = {
      {1, 40, 3000}, {1, 1, 500}, {30, 1, 1}, {1, 1, 1}, {1, 1}, {5000}, {1}};
  std::uint64_t seed = 950;
  for (const auto& dims : shapes) {
    const auto x = repetitive_tensor<T>(dims, 3 * static_cast<nnz_t>(kTileNnz) + 1001, ++seed);
    this->check_three_ways(x, {16}, seed * 7);
  }
}

TYPED_TEST(GpuPrepare, TinyTensors) {
  using T = TypeParam;
  std::uint64_t seed = 970;
  for (nnz_t nnz : {nnz_t(1), nnz_t(2), nnz_t(255), nnz_t(257)}) {
    const auto x = repetitive_tensor<T>({7, 6, 9, 5}, nnz, ++seed);
    auto be = make_backend<T>(BackendKind::cuda);
    auto h = be->prepare(x);
    ASSERT_EQ(h->tier(), 1) << h->describe();
    EXPECT_TRUE(contains(h->describe(), "sorted on the device")) << h->describe();
    this->check_mttkrp(*be, *h, x, 33, seed, "tiny, device sort");
  }
}

/// Opt-in: 2^31 + 4097 nonzeros (over INT_MAX: 64-bit perm and CUB counts), order 2,
/// float, all values 1, keys of 13 + 20 bits (64-bit). MTTKRP with factors of ones at
/// R = 1 gives the nonzero count of every row, exact in float (< 2^24).
TEST(GpuPrepareLarge, LargeCounts) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  const char* env = std::getenv("TESSERA_GPU_LARGE_TESTS");
  if (env == nullptr || std::string(env) != "1")
    GTEST_SKIP() << "set TESSERA_GPU_LARGE_TESTS=1 to run (30 GB host, 120 GB device memory)";
  using T = float;
  const std::vector<std::uint64_t> dims = {5000, std::uint64_t(1) << 20};
  const nnz_t nnz = (nnz_t(1) << 31) + 4097;
  SparseTensor<T> x(dims);
  x.idx[0].resize(static_cast<std::size_t>(nnz));
  x.idx[1].resize(static_cast<std::size_t>(nnz));
  x.vals.assign(static_cast<std::size_t>(nnz), T(1));
#pragma omp parallel for schedule(static)
  for (nnz_t k = 0; k < nnz; ++k) {
    std::uint64_t h = static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    x.idx[0][static_cast<std::size_t>(k)] = static_cast<index_t>(h % dims[0]);
    x.idx[1][static_cast<std::size_t>(k)] = static_cast<index_t>((h >> 13) % dims[1]);
  }
  auto be = make_backend<T>(BackendKind::cuda);
  auto h = be->prepare(x);
  ASSERT_EQ(h->tier(), 1) << h->describe();
  EXPECT_TRUE(contains(h->describe(), "sorted on the device")) << h->describe();
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<std::uint64_t> want(static_cast<std::size_t>(dims[mode]), 0);
    for (index_t i : x.idx[mode]) ++want[i];
    const int other = 1 - mode;
    const std::vector<T> ones(static_cast<std::size_t>(dims[other]), T(1));
    auto f = be->allocate(ones.size());
    be->upload(ones.data(), ones.size(), f.data());
    std::vector<const T*> factors(2, nullptr);
    factors[static_cast<std::size_t>(other)] = f.data();
    auto out = be->allocate(static_cast<std::size_t>(dims[mode]));
    kernels::ops::mttkrp(*be, *h, mode, factors, 1, out.data());
    std::vector<T> got(static_cast<std::size_t>(dims[mode]));
    be->download(out.data(), got.size(), got.data());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (static_cast<double>(got[i]) != static_cast<double>(want[i]) && bad++ < 5)
        ADD_FAILURE() << "mode " << mode << " row " << i << ": " << got[i] << " != " << want[i];
    EXPECT_EQ(bad, 0u) << "mode " << mode << "; " << h->describe();
  }
}

}  // namespace
}  // namespace tessera::kernels
