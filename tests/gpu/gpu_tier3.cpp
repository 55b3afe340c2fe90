// Memory tier 3 on the CUDA backend (DESIGN §8): a tensor streamed from its HDF5 store
// chunk by chunk on the cuda backend (algo::DiskTensor: the kernels::ops dispatchers run its
// StreamedOps hooks). The MTTKRP goes through ops::mttkrp_accumulate (chunks copied on a copy
// stream, sorted on the device, added into the output; in pieces under a small memory budget); the
// TTMc prepares each chunk in tier 1 or, under a small budget, tier 2. The MTTKRP and TTMc
// of every mode must equal the cuda backend's on the whole tensor in tier 1 and the
// reference backend (fresh random inputs, outputs poisoned with NaN), and CP-ALS in tier 3
// must give the fits and factors of tier 1. mttkrp_accumulate itself is checked on its own:
// chunks of orders 2 to 5 (every sort path), R 16, 32 and 33, rows straddling chunks, an
// empty chunk, a hot row over many tiles, pieces under a budget, a reused host buffer,
// added to a known nonzero output; a coordinate outside its mode is an InputError and adds
// nothing. CP-ALS in tier 2 (algo::HostTensor, the run layer's tier 2) runs the device loop,
// its chunk copies captured in the CUDA graph, with the fits and factors of tier 1 and of the
// per-operation path. Skips (with a message) where no CUDA device is visible.
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
#include "algo/host_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "gpu_test_util.hpp"
#include "io/h5store.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"
#include "kernels/ttmc.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera {
namespace {

using namespace ::tessera::test;
namespace ops = kernels::ops;
using algo::DiskTensor;
using algo::DiskTensorOptions;
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
  /// of `chunk` nonzeros (the DiskTensor's hooks) through a cuda backend with memory
  /// budget `budget` (0: none), against the cuda backend on x in tier 1 and (MTTKRP) the
  /// reference backend.
  void compare(const SparseTensor<double>& x64, const std::string& path, nnz_t chunk,
               std::size_t budget, int expect_chunk_tier, std::uint64_t seed) {
    const SparseTensor<T> x = x64.template cast<T>();
    const int N = x.order();
    auto inner = kernels::make_backend<T>(BackendKind::cuda);
    if (budget > 0) inner->set_memory_budget(budget);
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
    {  // The tier the backend gives one chunk.
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
      this->check_mttkrp(*inner, d, x, R, seed + R, what + " vs reference");
      // Against tier 1 on the GPU.
      const auto fs = random_factors(*inner, x.dims, R, seed + R);
      const auto f1 = random_factors(*be1, x.dims, R, seed + R);
      for (int mode = 0; mode < N; ++mode) {
        const auto [got, want] = mttkrp_pair(*inner, d, fs, *be1, *h1, f1, mode, R);
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
      const auto rows = ops::ttmc_rows(*inner, d, mode);
      ASSERT_EQ(rows, ops::ttmc_rows(*be1, *h1, mode)) << what << ": TTMc rows, mode " << mode;
      const std::size_t n =
          rows.size() * static_cast<std::size_t>(kernels::ttmc_output_cols(ranks, mode));
      auto og = poisoned(*inner, n);
      auto o1 = poisoned(*be1, n);
      auto skip = ps;
      skip[static_cast<std::size_t>(mode)] = nullptr;
      ops::ttmc(*inner, d, mode, skip, ranks, og.data());
      ops::ttmc(*be1, *h1, mode, p1, ranks, o1.data());
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

TYPED_TEST(GpuTier3, StreamedPassReportsDeviceTimes) {
  using T = TypeParam;
  const auto x64 = random_unique({70, 60, 50}, 20000, 990);
  const SparseTensor<T> x = x64.template cast<T>();
  const std::string p = write_store(x64, "times");
  auto inner = kernels::make_backend<T>(BackendKind::cuda);
  DiskTensorOptions o;
  o.path = p;
  o.count = x.nnz();
  o.chunk_nnz = 6000;
  DiskTensor<T> d(o);
  const int R = 32;
  const auto f = random_factors(*inner, x.dims, R, 991);
  auto out = poisoned(*inner, static_cast<std::size_t>(x.dims[0]) * R);
  ops::mttkrp(*inner, d, 0, f.ptrs, R, out.data());
  EXPECT_TRUE(d.last_times().backend_timed);
  EXPECT_GT(d.last_times().upload, 0.0) << "host -> device copies of the chunks";
  EXPECT_GT(d.last_times().device, 0.0) << "sorts and kernels of the chunks";
  EXPECT_EQ(d.last_compute_seconds(), d.last_times().device);
  {  // The chunk buffers are page-locked where this system lets the backend lock memory.
    const std::vector<char> probe(std::size_t(1) << 20);
    if (inner->pin_host(probe.data(), probe.size()) != nullptr) {
      EXPECT_TRUE(contains(d.describe(), "page-locked")) << d.describe();
    }
  }
  this->check_mttkrp(*inner, d, x, R, 992, "tier 3 after a timed pass");
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

// ---- ops::mttkrp_accumulate on the cuda backend ----

/// Nonzeros [first, first + count) of x into `c` (its arrays reused, as DiskTensor does).
template <typename T>
void slice_into(const SparseTensor<T>& x, nnz_t first, nnz_t count, SparseTensor<T>* c) {
  if (c->dims != x.dims) *c = SparseTensor<T>(x.dims);
  for (int m = 0; m < x.order(); ++m) {
    const auto& src = x.idx[static_cast<std::size_t>(m)];
    c->idx[static_cast<std::size_t>(m)].assign(src.begin() + first, src.begin() + first + count);
  }
  c->vals.assign(x.vals.begin() + first, x.vals.begin() + first + count);
}

/// The first mode with the most key bits (the one prepare_stream_chunk sorts by).
int longest_mode(const std::vector<std::uint64_t>& dims) {
  auto bits = [](std::uint64_t d) {
    int b = 0;
    while (d > 1 && ((d - 1) >> b) != 0) ++b;
    return b;
  };
  int m = 0;
  for (int d = 1; d < static_cast<int>(dims.size()); ++d)
    if (bits(dims[static_cast<std::size_t>(d)]) > bits(dims[static_cast<std::size_t>(m)])) m = d;
  return m;
}

template <typename T>
class GpuAccumulate : public GpuVsReference<T> {
 protected:
  using GpuVsReference<T>::ref_;

  /// For every mode and R in {16, 32, 33}: out = `before` (random, nonzero), then
  /// mttkrp_accumulate of the chunks [cuts[j], cuts[j + 1]) of x, all through one host
  /// buffer that is refilled as soon as each call returns (page-locked when `pin`), on a
  /// cuda backend under `budget` (0: none). Must equal before + the reference MTTKRP of
  /// `want_x` (x itself unless nonzeros are expected to be left out). `prepared`: each chunk
  /// goes through prepare_stream_chunk (sorted on the host by its longest mode) and is
  /// passed with that sorted mode, so that mode's MTTKRP skips the device sort.
  void check(const SparseTensor<T>& x, const std::vector<nnz_t>& cuts, std::size_t budget, bool pin,
             std::uint64_t seed, const std::string& what, const SparseTensor<T>* want_x = nullptr,
             bool expect_bad = false, bool prepared = false) {
    const int N = x.order();
    auto be = kernels::make_backend<T>(BackendKind::cuda);
    if (budget > 0) be->set_memory_budget(budget);
    auto hr = ref_->prepare(want_x != nullptr ? *want_x : x);
    nnz_t largest = 0;
    for (std::size_t j = 0; j + 1 < cuts.size(); ++j)
      largest = std::max(largest, cuts[j + 1] - cuts[j]);
    // The host buffer: full size once, so refilling never moves it (it may be locked).
    SparseTensor<T> buf(x.dims);
    for (auto& v : buf.idx) v.reserve(static_cast<std::size_t>(largest));
    buf.vals.reserve(static_cast<std::size_t>(largest));
    std::vector<std::unique_ptr<kernels::HostPin>> pins;
    if (pin && largest > 0) {
      for (auto& v : buf.idx)
        pins.push_back(be->pin_host(v.data(), static_cast<std::size_t>(largest) * sizeof(index_t)));
      pins.push_back(be->pin_host(buf.vals.data(), static_cast<std::size_t>(largest) * sizeof(T)));
    }
    std::int64_t nonempty = 0;
    for (std::size_t j = 0; j + 1 < cuts.size(); ++j) nonempty += cuts[j + 1] > cuts[j] ? 1 : 0;
    for (int R : {16, 32, 33}) {
      const auto fg = random_factors(*be, x.dims, R, seed + R);
      const auto fr = random_factors(*ref_, x.dims, R, seed + R);
      for (int mode = 0; mode < N; ++mode) {
        const std::string at = what + ": order " + std::to_string(N) + " mode " +
                               std::to_string(mode) + " R " + std::to_string(R);
        const std::size_t n = static_cast<std::size_t>(x.dims[static_cast<std::size_t>(mode)]) * R;
        const auto before = random_vector<T>(n, seed * 3 + static_cast<std::uint64_t>(mode));
        auto out = uploaded(*be, before);
        auto skip = fg.ptrs;
        skip[static_cast<std::size_t>(mode)] = nullptr;  // documented as not read
        (void)ops::take_accumulate_times(*be);
        for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
          slice_into(x, cuts[j], cuts[j + 1] - cuts[j], &buf);
          int sorted_mode = -1;
          if (prepared) {
            sorted_mode = ops::prepare_stream_chunk(*be, buf);
            if (buf.nnz() > 0) {
              EXPECT_EQ(sorted_mode, longest_mode(x.dims)) << at;
              const auto& k = buf.idx[static_cast<std::size_t>(sorted_mode)];
              EXPECT_TRUE(std::is_sorted(k.begin(), k.end())) << at;
            }
          }
          ops::mttkrp_accumulate(*be, buf, mode, skip, R, out.data(), sorted_mode, false);
        }
        if (expect_bad) {
          EXPECT_THROW((void)ops::take_accumulate_times(*be), InputError) << at;
        } else {
          const auto t = ops::take_accumulate_times(*be);
          EXPECT_EQ(t.chunks, nonempty) << at;
          if (nonempty > 0) {
            EXPECT_GT(t.copy, 0.0) << at;
            EXPECT_GT(t.compute, 0.0) << at;
          }
        }
        const auto got = downloaded(*be, out.data(), n);
        std::vector<T> m(n);
        ops::mttkrp(*ref_, *hr, mode, fr.ptrs, R, m.data());
        std::vector<double> want(n);
        for (std::size_t k = 0; k < n; ++k)
          want[k] = static_cast<double>(before[k]) + static_cast<double>(m[k]);
        EXPECT_LT(rel_error(got, want), tol<T>()) << at;
      }
    }
  }
};

TYPED_TEST_SUITE(GpuAccumulate, ValueTypes);

TYPED_TEST(GpuAccumulate, ChunksOfEveryOrder) {
  using T = TypeParam;
  const struct {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    int skew;
  } shapes[] = {
      {{60, 50, 45}, 20000, -1},     // order 3: payload sort (3 words float, 4 double)
      {{14, 11, 13, 9}, 15000, -1},  // order 4: payload (float), positions (double)
      {{40, 1, 33}, 9000, -1},       // a mode of one index: no sort for it
      {{300, 40}, 12000, -1},        // order 2: positions (float), payload (double)
      {{9, 8, 7, 10, 6}, 9000, -1},  // order 5: positions
      {{200, 30, 40}, 30000, 0},     // 70% in row 0 of mode 0: one row over many tiles
  };
  std::uint64_t seed = 1200;
  for (const auto& sh : shapes) {
    const auto x = random_tensor<T>(sh.dims, sh.nnz, ++seed, sh.skew);
    // Rows straddle the chunks; an empty chunk in the middle.
    const nnz_t a = sh.nnz / 3, b = sh.nnz / 3 + 4097;
    this->check(x, {0, a, a, b, sh.nnz}, 0, false, seed * 7, "chunks");
  }
}

TYPED_TEST(GpuAccumulate, PreparedChunksSkipTheSortOfTheirMode) {
  using T = TypeParam;
  const struct {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
    int skew;
  } shapes[] = {
      {{60, 50, 45}, 20000, -1},      // sorted by mode 0
      {{14, 11, 130, 9}, 15000, -1},  // sorted by mode 2
      {{40, 1, 33}, 9000, -1},        // a mode of one index
      {{9, 8, 7, 10, 6}, 9000, -1},   // order 5
      {{200, 30, 40}, 30000, 0},      // 70% in row 0 of mode 0
  };
  std::uint64_t seed = 1250;
  for (const auto& sh : shapes) {
    const auto x = random_tensor<T>(sh.dims, sh.nnz, ++seed, sh.skew);
    const nnz_t a = sh.nnz / 3, b = sh.nnz / 3 + 4097;
    this->check(x, {0, a, a, b, sh.nnz}, 0, false, seed * 7, "prepared chunks", nullptr, false,
                true);
  }
  // Pieces: a budget that cuts each prepared chunk into pieces of 4096 nonzeros.
  const auto x = random_tensor<T>({120, 90, 70}, 40000, 1299);
  this->check(x, {0, 15000, 40000}, 1 << 16, false, 1298, "prepared pieces", nullptr, false, true);
}

TYPED_TEST(GpuAccumulate, AChunkPassedAsSortedThatIsNotIsAnError) {
  using T = TypeParam;
  const auto x = random_tensor<T>({50, 40, 30}, 9000, 1450);
  ASSERT_FALSE(std::is_sorted(x.idx[0].begin(), x.idx[0].end()));  // random order
  auto be = kernels::make_backend<T>(BackendKind::cuda);
  const int R = 16;
  const auto f = random_factors(*be, x.dims, R, 1451);
  auto out = uploaded(*be, std::vector<T>(static_cast<std::size_t>(50) * R, T(0)));
  ops::mttkrp_accumulate(*be, x, 0, f.ptrs, R, out.data(), 0, false);
  try {
    (void)ops::take_accumulate_times(*be);
    ADD_FAILURE() << "a false sorted_mode was not reported";
  } catch (const InputError& e) {
    ADD_FAILURE() << "reported as a bad coordinate: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not sorted"), std::string::npos) << e.what();
  }
  // The flag is cleared once reported: an honest call afterwards succeeds.
  ops::mttkrp_accumulate(*be, x, 0, f.ptrs, R, out.data(), -1, false);
  EXPECT_NO_THROW((void)ops::take_accumulate_times(*be));
}

TYPED_TEST(GpuAccumulate, PiecesUnderABudgetFromPinnedMemory) {
  using T = TypeParam;
  // A budget this small gives pieces of the smallest size (4096 nonzeros): a chunk of 15000
  // goes to the device in 4 pieces through the two device buffers.
  const auto x = random_tensor<T>({120, 90, 70}, 40000, 1300);
  this->check(x, {0, 15000, 30000, 40000}, 1 << 16, true, 1301, "pieces");
  this->check(x, {0, 40000}, 0, true, 1302, "one chunk");
}

TYPED_TEST(GpuAccumulate, CoordinateOutsideItsModeAddsNothing) {
  using T = TypeParam;
  const auto x = random_tensor<T>({50, 40, 30}, 9000, 1400);
  // In the last chunk, so the error is reported by take_accumulate_times (an earlier one
  // may be reported by the next call instead).
  const nnz_t bad_k[] = {5005, 5007, 5009};
  auto bad = x;
  bad.idx[1][bad_k[0]] = 40;     // outside mode 1
  bad.idx[0][bad_k[1]] = 1000;   // outside mode 0
  bad.idx[2][bad_k[2]] = 30;     // outside mode 2
  SparseTensor<T> good(x.dims);  // x without those nonzeros
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    if (std::find(std::begin(bad_k), std::end(bad_k), k) != std::end(bad_k)) continue;
    index_t c[3] = {x.idx[0][k], x.idx[1][k], x.idx[2][k]};
    good.push_back(c, x.vals[static_cast<std::size_t>(k)]);
  }
  // One backend for every mode and R: each pass follows the previous pass's reported error,
  // so the error flag must be cleared when it is reported.
  this->check(bad, {0, 3000, 9000}, 0, false, 1401, "bad coordinates", &good, true);
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
  /// `chunk` nonzeros, the backend under `budget`, 0: none).
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
    algo::DiskTensorOptions o;
    o.path = p;
    o.first = 0;
    o.count = d1.block.nnz();
    o.chunk_nnz = chunk;
    const algo::DiskTensor<T> disk(o);
    const auto r3 =
        algo::cp_als<T>(disk, d1.dist.dims, d1.dist.global_nnz, *inner, *world_, *nccl_, opt);
    EXPECT_EQ(r3.tier, 3) << r3.tier_description;
    EXPECT_TRUE(contains(r3.tier_description, "tier 3")) << r3.tier_description;
    EXPECT_GE(r3.stream_overlap, 0.0);
    EXPECT_LE(r3.stream_overlap, 1.0);
    EXPECT_NEAR(r3.norm_x, r1.norm_x, 1e-6 * r1.norm_x);
    expect_same_cp(r3, r1, tol);
    ASSERT_FALSE(r3.history.empty());
    EXPECT_NEAR(r3.history.back().fit, r1.history.back().fit, 1e-4) << "final fit";
    EXPECT_GT(r3.stream_compute_seconds, 0.0) << "device time of the chunks";
    EXPECT_TRUE(disk.last_times().backend_timed);
  }
};

TEST_F(GpuTier3Cp, Double) {
  compare<double>(7000, 0, 1e-9);
}
TEST_F(GpuTier3Cp, Float) {
  compare<float>(7000, 0, 2e-4);
}
TEST_F(GpuTier3Cp, DoubleChunksInTier2) {
  // Chunks of 16 tiles under a budget of two one-tile chunk buffers: the MTTKRP's chunks
  // go to the device in pieces of the smallest size (4096 nonzeros), the TTMc's in tier 2.
  compare<double>(16 * static_cast<nnz_t>(kTileNnz), 2 * chunk_bytes<double>(3, kTileNnz), 1e-9);
}

/// CP-ALS in memory tier 2 as the driver makes it (algo::HostTensor: the block's raw chunks,
/// each sorted by one mode and page-locked) on the device loop: from the second iteration one
/// CUDA graph holds every chunk's copy (memcpy nodes from the page-locked chunks), device sort
/// and kernel, ordered by events as the eager pipeline orders them. Against tier 1 (the
/// device loop on the resident copies) and tier 2's per-operation path on the same chunks:
/// the same fits and factors; the replays' chunk times counted (without them the loop's
/// copy seconds would be the first iteration's, an eighth of the per-operation path's).
/// On several ranks (gpu_tier3_cp_np2) each rank streams its own block's chunks and the
/// loop's NCCL collectives are in the same graph.
class GpuTier2Cp : public GpuJobTest {
 protected:
  template <typename T>
  void compare(nnz_t chunk, std::size_t budget, double tol) {
    auto d1 = cp_problem<T>(algo::CommStrategy::allreduce, 31, *world_);
    const auto opt = cp_test_options(algo::CommStrategy::allreduce);
    auto be1 = kernels::make_backend<T>(kernels::BackendKind::cuda);
    const auto r1 = algo::cp_als<T>(d1, *be1, *world_, *nccl_, opt);
    ASSERT_EQ(r1.tier, 1);
    // "cuda graph" on one rank, "cuda graph on P ranks (...)" on several.
    EXPECT_EQ(r1.iteration_engine.rfind("cuda graph", 0), 0u) << r1.iteration_engine;
    auto run = [&](bool loop) {
      auto be = kernels::make_backend<T>(kernels::BackendKind::cuda);
      if (budget > 0) be->set_memory_budget(budget);
      const algo::HostTensor<T> h(SparseTensor<T>(d1.block), chunk, be.get());
      EXPECT_GE(h.chunks(), 3);
      EXPECT_TRUE(h.pinned());
      auto o = opt;
      o.device_loop = loop;
      return algo::cp_als<T>(h, d1.dist.dims, d1.dist.global_nnz, *be, *world_, *nccl_, o);
    };
    const auto rl = run(true);
    const auto ro = run(false);
    EXPECT_EQ(rl.tier, 2) << rl.tier_description;
    EXPECT_EQ(rl.iteration_engine, r1.iteration_engine);
    EXPECT_NE(ro.iteration_engine.find("--cuda-graph off"), std::string::npos)
        << ro.iteration_engine;
    expect_same_cp(rl, r1, tol);
    expect_same_cp(rl, ro, tol);
    ASSERT_GT(ro.stream_copy_seconds, 0.0);
    ASSERT_GT(ro.stream_compute_seconds, 0.0);
    // The graph's streamed times are measured, not estimated: near the per-operation path's.
    // Ranks sharing a GPU (TESSERA_SHARE_GPU) interleave their work, which skews either.
    if (ranks_share_gpus(*world_)) {
      EXPECT_GT(rl.stream_copy_seconds, 0.0);
      EXPECT_GT(rl.stream_compute_seconds, 0.0);
    } else {
      EXPECT_GT(rl.stream_copy_seconds, 0.4 * ro.stream_copy_seconds);
      EXPECT_GT(rl.stream_compute_seconds, 0.4 * ro.stream_compute_seconds);
    }
    EXPECT_GE(rl.stream_overlap, 0.0);
    EXPECT_LE(rl.stream_overlap, 1.0);
    for (std::size_t i = 1; i < rl.history.size(); ++i) {
      EXPECT_GT(rl.history[i].kernel, 0.0) << "iteration " << i + 1;
    }
  }
};

TEST_F(GpuTier2Cp, Double) {
  compare<double>(3000, 0, 1e-9);
}
TEST_F(GpuTier2Cp, FloatInPieces) {
  // Chunks of 4 tiles under a budget of two one-tile chunk buffers: each chunk goes to the
  // device in several pieces, captured with the same double-buffer order.
  compare<float>(4 * static_cast<nnz_t>(kTileNnz), 2 * chunk_bytes<float>(3, kTileNnz), 2e-4);
}

}  // namespace
}  // namespace tessera
