// Memory tier 3 on the CUDA backend (DESIGN §8): a tensor streamed from its HDF5 store
// chunk by chunk (algo::DiskTensor) through algo::StreamingBackend over the cuda backend,
// each chunk prepared in tier 1 or, under a small memory budget, in tier 2 (pinned host
// memory streamed to the GPU). The MTTKRP and TTMc of every mode must equal the cuda
// backend's on the whole tensor in tier 1 and the reference backend (fresh random inputs,
// outputs poisoned with NaN), and CP-ALS in tier 3 must give the fits and factors of tier
// 1. Skips (with a message) where no CUDA device is visible.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/disk_tier.hpp"
#include "algo/generate.hpp"
#include "comm/mpi_communicator.hpp"
#include "gpu_test_util.hpp"
#include "io/h5store.hpp"
#include "kernels/backend.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera {
namespace {

using namespace ::tessera::test;
using algo::DiskTensor;
using algo::DiskTensorOptions;
using algo::StreamingBackend;
using kernels::BackendKind;

const comm::MpiCommunicator& self() {
  static const comm::MpiCommunicator s(MPI_COMM_SELF);
  return s;
}

/// A fresh store path of this process.
std::string fresh(const std::string& name) {
  static int counter = 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return temp_dir() + "/gpu-tier3-" + std::to_string(rank) + "-" + std::to_string(counter++) + "-" +
         name;
}

/// nnz distinct random coordinates (no repeats), values uniform in [-1, 1); the first
/// nonzero has the last index of every mode.
SparseTensor<double> random_unique(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                                   std::uint64_t seed) {
  SparseTensor<double> x(dims);
  CounterRng rng(seed, 5);
  std::unordered_set<std::uint64_t> seen;
  index_t c[kMaxOrder];
  const auto key = [&] {
    std::uint64_t k = 0;
    for (std::size_t m = 0; m < dims.size(); ++m) k = k * dims[m] + c[m];
    return k;
  };
  for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(dims[m] - 1);
  seen.insert(key());
  x.push_back(c, 0.75);
  while (static_cast<std::size_t>(x.nnz()) < nnz) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    if (!seen.insert(key()).second) continue;
    x.push_back(c, 2.0 * rng.uniform() - 1.0);
  }
  return x;
}

/// Writes x (this process alone) as a store with chunks of `chunk` nonzeros.
std::string write_store(const SparseTensor<double>& x, const std::string& name,
                        std::uint64_t chunk = 4096) {
  const std::string p = fresh(name + ".h5");
  io::H5Header meta;
  meta.dims = x.dims;
  meta.has_duplicates = 0;
  io::H5WriteOptions o;
  o.chunk_elems = chunk;
  o.progress = false;
  io::write_h5(p, x, self(), meta, o);
  return p;
}

template <typename T>
class GpuTier3 : public GpuVsReference<T> {
 protected:
  using GpuVsReference<T>::ref_;

  /// MTTKRP and TTMc of every mode of the store at `path` (tensor x), streamed in chunks
  /// of `chunk` nonzeros through a StreamingBackend over a cuda backend with memory
  /// budget `budget` (0: none), against the cuda backend on x in tier 1 and (MTTKRP) the
  /// reference backend.
  void compare(const SparseTensor<double>& x64, const std::string& path, nnz_t chunk,
               std::size_t budget, int expect_chunk_tier, std::uint64_t seed) {
    const SparseTensor<T> x = x64.template cast<T>();
    const int N = x.order();
    auto inner = kernels::make_backend<T>(BackendKind::cuda);
    if (budget > 0) inner->set_memory_budget(budget);
    StreamingBackend<T> sb(*inner);
    EXPECT_EQ(sb.kind(), BackendKind::cuda);
    auto be1 = kernels::make_backend<T>(BackendKind::cuda);
    auto h1 = be1->prepare(x);
    ASSERT_EQ(h1->tier(), 1) << h1->describe();
    DiskTensorOptions o;
    o.path = path;
    o.first = 0;
    o.count = x.nnz();
    o.chunk_nnz = chunk;
    DiskTensor<T> d(o);
    ASSERT_EQ(d.tier(), 3);
    {  // The tier the wrapped backend gives one chunk.
      SparseTensor<T> c(x.dims);
      for (int m = 0; m < N; ++m)
        c.idx[m].assign(x.idx[m].begin(), x.idx[m].begin() + std::min(chunk, x.nnz()));
      c.vals.assign(x.vals.begin(), x.vals.begin() + std::min(chunk, x.nnz()));
      ASSERT_EQ(inner->prepare(c)->tier(), expect_chunk_tier)
          << "budget " << budget << ", chunk " << chunk;
    }
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + ", order " +
                             std::to_string(N) + ", nnz " + std::to_string(x.nnz()) + ", chunk " +
                             std::to_string(chunk) + ", budget " + std::to_string(budget) + "; " +
                             d.describe();
    for (int R : {16, 33}) {
      // Against the reference backend (GpuVsReference::check_mttkrp).
      this->check_mttkrp(sb, d, x, R, seed + R, what + " vs reference");
      // Against tier 1 on the GPU.
      const auto fs = random_factors(*inner, x.dims, R, seed + R);
      const auto f1 = random_factors(*be1, x.dims, R, seed + R);
      for (int mode = 0; mode < N; ++mode) {
        const auto [got, want] = mttkrp_pair(sb, d, fs, *be1, *h1, f1, mode, R);
        EXPECT_LT(rel_error(got, want), tol<T>())
            << what << ": MTTKRP mode " << mode << " R " << R << " vs tier 1";
      }
    }
    // TTMc, random ranks 2..4.
    CounterRng rng(seed, 3);
    std::vector<int> ranks(static_cast<std::size_t>(N));
    for (auto& q : ranks) q = 2 + static_cast<int>(rng.next_u64() % 3);
    std::vector<kernels::Array<T>> us, u1;
    std::vector<const T*> ps, p1;
    for (int m = 0; m < N; ++m) {
      const auto h = random_vector<T>(
          static_cast<std::size_t>(x.dims[m]) * static_cast<std::size_t>(ranks[m]), seed * 7 + m);
      us.push_back(uploaded(*inner, h));
      u1.push_back(uploaded(*be1, h));
      ps.push_back(us.back().data());
      p1.push_back(u1.back().data());
    }
    for (int mode = 0; mode < N; ++mode) {
      const auto rows = sb.ttmc_rows(d, mode);
      ASSERT_EQ(rows, be1->ttmc_rows(*h1, mode)) << what << ": TTMc rows, mode " << mode;
      const std::size_t n =
          rows.size() * static_cast<std::size_t>(kernels::ttmc_output_cols(ranks, mode));
      auto og = poisoned(*inner, n);
      auto o1 = poisoned(*be1, n);
      auto skip = ps;
      skip[static_cast<std::size_t>(mode)] = nullptr;
      sb.ttmc(d, mode, skip, ranks, og.data());
      be1->ttmc(*h1, mode, p1, ranks, o1.data());
      const auto got = downloaded(*inner, og.data(), n);
      const auto want = downloaded(*be1, o1.data(), n);
      EXPECT_LT(rel_error(got, want), tol<T>()) << what << ": TTMc mode " << mode;
    }
  }
};

using ValueTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuTier3, ValueTypes);

TYPED_TEST(GpuTier3, StreamedChunksInTier1) {
  const struct {
    std::vector<std::uint64_t> dims;
    std::size_t nnz;
  } shapes[] = {{{60, 50, 45}, 9000}, {{14, 11, 13, 9}, 7000}, {{9, 8, 7, 10, 6}, 6000}};
  std::uint64_t seed = 900;
  for (const auto& s : shapes) {
    const auto x = random_unique(s.dims, s.nnz, ++seed);
    const std::string p = write_store(x, "tier1");
    for (nnz_t chunk : {nnz_t(1000), nnz_t(2500), x.nnz() + 1})
      this->compare(x, p, chunk, 0, 1, seed * 13 + static_cast<std::uint64_t>(chunk));
  }
}

TYPED_TEST(GpuTier3, StreamedChunksInTier2) {
  using T = TypeParam;
  // The smallest budget that works (two one-tile chunk buffers): every chunk of more than
  // two tiles is itself streamed from pinned host memory.
  const auto x = random_unique({80, 70, 60}, 30000, 950);
  const std::string p = write_store(x, "tier2");
  const std::size_t budget = 2 * chunk_bytes<T>(3, kTileNnz);
  for (nnz_t chunk : {nnz_t(5 * kTileNnz + 17), nnz_t(12000)})
    this->compare(x, p, chunk, budget, 2, 970 + static_cast<std::uint64_t>(chunk));
}

}  // namespace
}  // namespace tessera

// ---- CP-ALS: tier 3 gives the fits and factors of tier 1 ----
namespace tessera {
namespace {

using namespace ::tessera::test;

class GpuTier3Cp : public GpuJobTest {
 protected:
  /// The CP test problem of the GPU tests (cp_problem: sampled, power-law, repeats merged)
  /// whole on this one rank, written as a store; CP-ALS in tier 1 and in tier 3 (chunks of
  /// `chunk` nonzeros, the wrapped backend under `budget`, 0: none).
  template <typename T>
  void compare(nnz_t chunk, std::size_t budget, double tol) {
    ASSERT_EQ(size(), 1) << "one GPU: run on one rank";
    auto d1 = cp_problem<T>(algo::CommStrategy::allreduce, 29, *world_);
    const std::string p = write_store(d1.block.template cast<double>(), "cp");
    const auto opt = cp_test_options(algo::CommStrategy::allreduce);
    auto be1 = kernels::make_backend<T>(kernels::BackendKind::cuda);
    const auto r1 = algo::cp_als<T>(d1, *be1, *world_, *nccl_, opt);
    ASSERT_EQ(r1.tier, 1);

    auto inner = kernels::make_backend<T>(kernels::BackendKind::cuda);
    if (budget > 0) inner->set_memory_budget(budget);
    algo::StreamingBackend<T> sb(*inner);
    algo::DiskTensorOptions o;
    o.path = p;
    o.first = 0;
    o.count = d1.block.nnz();
    o.chunk_nnz = chunk;
    const algo::DiskTensor<T> disk(o);
    const auto r3 =
        algo::cp_als<T>(disk, d1.dist.dims, d1.dist.global_nnz, sb, *world_, *nccl_, opt);
    EXPECT_EQ(r3.tier, 3) << r3.tier_description;
    EXPECT_TRUE(contains(r3.tier_description, "tier 3")) << r3.tier_description;
    EXPECT_GE(r3.stream_overlap, 0.0);
    EXPECT_LE(r3.stream_overlap, 1.0);
    EXPECT_NEAR(r3.norm_x, r1.norm_x, 1e-6 * r1.norm_x);
    expect_same_cp(r3, r1, tol);
  }
};

TEST_F(GpuTier3Cp, Double) {
  compare<double>(7000, 0, 1e-9);
}
TEST_F(GpuTier3Cp, Float) {
  compare<float>(7000, 0, 2e-4);
}
TEST_F(GpuTier3Cp, DoubleChunksInTier2) {
  // Chunks of 16 tiles under a budget of two one-tile chunk buffers.
  compare<double>(16 * static_cast<nnz_t>(kTileNnz), 2 * chunk_bytes<double>(3, kTileNnz), 1e-9);
}

}  // namespace
}  // namespace tessera
