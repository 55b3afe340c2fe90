// Memory tier 3 (DESIGN §8, src/engine/algo/disk_tier.hpp) under MPI (tier3_disk_np<P>, P = 1, 2,
// 3): reading and streaming a store, and its errors. Random tensors of orders 3 to 5
// without repeated coordinates (an empty slice, a mode of length 1) are written to
// temporary HDF5 stores, plain and with a stored partition of P blocks; then:
//  - DiskTensor streams exactly the stored nonzeros of its range, in order, for every chunk
//    size, and its distinct rows, ||X||^2 and fingerprint equal those of the tensor in
//    memory; an exception from the callback or the reader ends a pass cleanly;
//  - a DiskTensor through the kernels::ops dispatchers (its StreamedOps hooks; reference and
//    cpu, float and double) gives the MTTKRP and TTMc of the backend on the whole tensor;
//  - bad stores, ranges and chunk sizes are InputErrors naming the file.
// CP-ALS and Tucker-HOOI in tier 3 are in tier3_algo_test.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "algo/disk_tier.hpp"
#include "comm/mpi_communicator.hpp"
#include "h5store_test_util.hpp"
#include "io/h5store.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"
#include "kernels/ttmc.hpp"
#include "partition/partition.hpp"
#include "test_util.hpp"
#include "tier3_test_util.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera {
namespace {

using algo::DiskTensor;
using algo::DiskTensorOptions;
using kernels::BackendKind;
using namespace test::tier3;

/// nnz distinct random coordinates (no repeats; the first nonzero has the last index of
/// every mode, so the dims are tight), values +-[0.5, 1.5). Index `empty` of mode 0 is
/// never used: an empty slice.
SparseTensor<double> random_unique(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                                   std::uint64_t seed, index_t empty) {
  SparseTensor<double> x(dims);
  CounterRng rng(seed, 3);
  std::unordered_set<std::uint64_t> seen;
  index_t c[kMaxOrder];
  const auto key = [&] {
    std::uint64_t k = 0;
    for (std::size_t m = 0; m < dims.size(); ++m) k = k * dims[m] + c[m];
    return k;
  };
  for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(dims[m] - 1);
  seen.insert(key());
  x.push_back(c, 1.0);
  while (static_cast<std::size_t>(x.nnz()) < nnz) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    if (c[0] == empty || !seen.insert(key()).second) continue;
    const double v = 0.5 + rng.uniform();
    x.push_back(c, rng.next_u64() % 2 ? v : -v);
  }
  return x;
}

struct Shape {
  std::vector<std::uint64_t> dims;
  std::size_t nnz;
};

/// Orders 3 to 5; a mode of length 1 in two of them; every one has an empty slice of mode 0.
const std::vector<Shape> kShapes = {
    {{50, 40, 30}, 2000},
    {{40, 1, 30}, 500},
    {{12, 15, 1, 9}, 700},
    {{7, 6, 8, 5, 9}, 1500},
};

/// Every shape of kShapes, random (shared seed), in both stores.
std::vector<Stored> stored_shapes(std::uint64_t seed) {
  std::vector<Stored> out;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const auto& sh = kShapes[i];
    out.push_back(
        store(random_unique(sh.dims, sh.nnz, seed + i, static_cast<index_t>(sh.dims[0] / 2)),
              "shape" + std::to_string(i)));
  }
  return out;
}

/// Every chunk of one pass, concatenated; checks the chunk sizes and the dims of each.
template <typename T>
SparseTensor<T> streamed(const DiskTensor<T>& d, nnz_t chunk, const std::string& what) {
  SparseTensor<T> all(d.dims());
  nnz_t chunks = 0;
  d.stream([&](const SparseTensor<T>& c) {
    EXPECT_EQ(c.dims, d.dims()) << what;
    const nnz_t left = d.nnz() - all.nnz();
    EXPECT_EQ(c.nnz(), std::min(chunk, left)) << what << " chunk " << chunks;
    for (int m = 0; m < c.order(); ++m)
      all.idx[m].insert(all.idx[m].end(), c.idx[m].begin(), c.idx[m].end());
    all.vals.insert(all.vals.end(), c.vals.begin(), c.vals.end());
    ++chunks;
  });
  EXPECT_EQ(chunks, d.chunks()) << what;
  return all;
}

/// Sorted distinct indices of every mode.
template <typename T>
std::vector<std::vector<index_t>> distinct(const SparseTensor<T>& x) {
  std::vector<std::vector<index_t>> r;
  for (int m = 0; m < x.order(); ++m) {
    std::set<index_t> s(x.idx[m].begin(), x.idx[m].end());
    r.emplace_back(s.begin(), s.end());
  }
  return r;
}

/// Everything a DiskTensor reports about its range against the range `want` in memory.
template <typename T>
void expect_describes(const DiskTensor<T>& d, const SparseTensor<T>& want, nnz_t first,
                      const std::string& path, const std::string& what) {
  const int N = want.order();
  EXPECT_EQ(d.order(), N) << what;
  EXPECT_EQ(d.dims(), want.dims) << what;
  EXPECT_EQ(d.nnz(), want.nnz()) << what;
  EXPECT_EQ(d.first(), first) << what;
  EXPECT_EQ(d.tier(), 3) << what;
  EXPECT_EQ(d.path(), path) << what;
  EXPECT_TRUE(contains(d.describe(), "tier 3")) << d.describe();
  EXPECT_TRUE(contains(d.describe(), path)) << d.describe();
  const auto rows = distinct(want);
  std::vector<std::uint64_t> counts;
  for (int m = 0; m < N; ++m) {
    EXPECT_EQ(d.rows(m), rows[static_cast<std::size_t>(m)]) << what << " mode " << m;
    counts.push_back(rows[static_cast<std::size_t>(m)].size());
  }
  EXPECT_EQ(d.distinct_rows(), counts) << what;
  const double n2 = want.norm_squared();
  EXPECT_NEAR(d.value_norm_squared(), n2, 1e-14 * n2) << what;
  for (int m = 0; m < N; ++m)
    EXPECT_EQ(d.mttkrp_stream_bytes(m),
              static_cast<std::size_t>(want.nnz()) * (static_cast<std::size_t>(N) * 4 + 8))
        << what;
  EXPECT_GE(d.overlap_fraction(), 0.0) << what;
  EXPECT_LE(d.overlap_fraction(), 1.0) << what;
  EXPECT_GE(d.last_copy_seconds(), 0.0) << what;
  EXPECT_GE(d.last_compute_seconds(), 0.0) << what;
}

// ---- a. DiskTensor ---------------------------------------------------------------------

template <typename T>
void check_streams_in_order(const Stored& st) {
  const int P = world().size(), r = world().rank();
  const nnz_t nnz = st.x.nnz();
  const auto [a, n] = share_range(nnz, r, P);
  struct Range {
    nnz_t first, count;
    const char* name;
  };
  const Range ranges[] = {
      {a, n, "equal share"}, {0, nnz, "whole store"}, {13, nnz - 30, "from inside a store chunk"}};
  for (const auto& rg : ranges)
    for (nnz_t chunk : {nnz_t(1), nnz_t(7), nnz_t(1000), nnz + 1}) {
      if (chunk == 1 && rg.count != n) continue;  // one-nonzero chunks: the share only
      const std::string what = std::string(rg.name) + " [" + std::to_string(rg.first) + ", +" +
                               std::to_string(rg.count) + "), chunk " + std::to_string(chunk) +
                               ", " + shape_name(st.x) + (sizeof(T) == 4 ? ", float" : ", double");
      DiskTensorOptions o;
      o.path = st.plain;
      o.first = rg.first;
      o.count = rg.count;
      o.chunk_nnz = chunk;
      DiskTensor<T> d(o);
      EXPECT_EQ(d.passes(), 1) << what;
      EXPECT_EQ(d.chunks(), (rg.count + chunk - 1) / chunk) << what;
      EXPECT_GT(d.open_times().wall, 0.0) << what;
      const SparseTensor<T> want = range_of<T>(st.x, rg.first, rg.count);
      expect_same(streamed(d, chunk, what), want, what);
      EXPECT_EQ(d.passes(), 2) << what;
      expect_describes(d, want, rg.first, st.plain, what);
      // A second pass reads the same again.
      expect_same(streamed(d, chunk, what + ", pass 3"), want, what + ", pass 3");
    }
}

TEST(Tier3Disk, StreamsExactlyTheStoredNonzerosInOrder) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto& st : stored_shapes(seed)) {
    check_streams_in_order<double>(st);
    check_streams_in_order<float>(st);
  }
}

TEST(Tier3Disk, ReadsItsBlockOfAStoredPartition) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int r = world().rank();
  for (const auto& st : stored_shapes(seed)) {
    const std::string what = "block " + std::to_string(r) + ", " + shape_name(st.x);
    const auto [first, count] = st.part.block_range(r);
    for (nnz_t chunk : {nnz_t(5), nnz_t(333)}) {
      DiskTensorOptions o;
      o.path = st.blocked;
      o.block = r;
      o.first = 999999;  // ignored with a block
      o.chunk_nnz = chunk;
      DiskTensor<double> d(o);
      ASSERT_TRUE(d.info().partition.has_value()) << what;
      EXPECT_EQ(d.info().partition->nblocks(), world().size()) << what;
      const SparseTensor<double> want = range_of<double>(st.s, first, count);
      const SparseTensor<double> got = streamed(d, chunk, what);
      expect_same(got, want, what);
      expect_describes(d, want, first, st.blocked, what);
      // Every nonzero of block r lies in mode-0 range r of the partition.
      const auto& cut = st.part.cuts[0];
      for (index_t i : got.idx[0]) {
        EXPECT_GE(i, cut[static_cast<std::size_t>(r)]) << what;
        EXPECT_LT(i, cut[static_cast<std::size_t>(r) + 1]) << what;
      }
    }
  }
}

TEST(Tier3Disk, FingerprintEqualsTheTier1Fingerprint) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int P = world().size(), r = world().rank();
  for (const auto& st : stored_shapes(seed)) {
    const std::string what = shape_name(st.x);
    const auto [a, n] = share_range(st.x.nnz(), r, P);
    // Tier 1: the same nonzeros distributed (sorted, moved between ranks).
    auto dist =
        partition::distribute(range_of<double>(st.x, a, n), partition::Scheme::nnz, {}, world());
    const io::TensorFingerprint want = io::tensor_fingerprint(dist.block, {}, world());
    EXPECT_EQ(want.nnz, static_cast<std::uint64_t>(st.x.nnz())) << what;
    const auto share = open_range(st.plain, a, n, 37);
    const auto block = [&] {
      DiskTensorOptions o;
      o.path = st.blocked;
      o.block = r;
      o.chunk_nnz = 64;
      return std::make_unique<DiskTensor<double>>(o);
    }();
    for (const DiskTensor<double>* d : {share.get(), block.get()}) {
      const io::TensorFingerprint got =
          io::finish_fingerprint(d->fingerprint_part(), st.x.dims, world());
      EXPECT_EQ(got.dims, want.dims) << what;
      EXPECT_EQ(got.nnz, want.nnz) << what;
      EXPECT_EQ(got.coord_hash, want.coord_hash) << what;
      EXPECT_NEAR(got.norm2, want.norm2, 1e-12 * want.norm2) << what;
      // ||X||^2 over the ranks from the handles, as cp_als takes it.
      const double n2 = world().allreduce_value(d->value_norm_squared(), comm::ReduceOp::sum);
      EXPECT_NEAR(n2, st.x.norm_squared(), 1e-12 * n2) << what;
    }
    EXPECT_GT(want.coord_hash, 0u) << what;
  }
}

TEST(Tier3Disk, EmptyRange) {
  const auto st = store(random_unique({20, 10, 5}, 300, shared_seed(), 3), "empty");
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  for (nnz_t first : {nnz_t(0), nnz_t(5), st.x.nnz()}) {
    const auto d = open_range(st.plain, first, 0, 10);
    EXPECT_EQ(d->nnz(), 0);
    EXPECT_EQ(d->chunks(), 0);
    EXPECT_EQ(d->value_norm_squared(), 0.0);
    EXPECT_EQ(d->distinct_rows(), (std::vector<std::uint64_t>{0, 0, 0}));
    int calls = 0;
    d->stream([&](const SparseTensor<double>&) { ++calls; });
    EXPECT_EQ(calls, 0);
    // MTTKRP of no nonzeros: zeros everywhere (the output is poisoned first).
    const int R = 4;
    std::vector<std::vector<double>> A;
    for (auto n : st.x.dims) A.emplace_back(static_cast<std::size_t>(n) * R, 0.25);
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<double> out(static_cast<std::size_t>(st.x.dims[mode]) * R,
                              std::numeric_limits<double>::quiet_NaN());
      kernels::ops::mttkrp(*be, *d, mode, test::pointers(A, mode), R, out.data());
      for (double v : out) ASSERT_EQ(v, 0.0) << "mode " << mode;
      EXPECT_TRUE(kernels::ops::ttmc_rows(*be, *d, mode).empty());
    }
  }
}

TEST(Tier3Disk, EveryReadAheadStreamsTheSameChunksInOrder) {
  // 1 to 5 prefetch threads, each reading every P-th chunk into read_ahead + 1 buffers: the
  // chunks arrive in store order with the same contents, pass after pass, and the host
  // buffers grow with the read-ahead.
  const auto st = store(random_unique({40, 30, 20}, 2000, shared_seed(), 5), "ahead");
  const nnz_t nnz = st.x.nnz();
  const SparseTensor<double> want = range_of<double>(st.x, 0, nnz);
  for (int ahead : {1, 2, 5}) {
    for (nnz_t chunk : {nnz_t(7), nnz_t(300), nnz + 3}) {
      DiskTensorOptions o;
      o.path = st.plain;
      o.count = nnz;
      o.chunk_nnz = chunk;
      o.read_ahead = ahead;
      o.read_threads = 3;
      DiskTensor<double> d(o);
      const std::string what =
          "read-ahead " + std::to_string(ahead) + ", chunk " + std::to_string(chunk);
      const nnz_t c = std::min(chunk, nnz);
      EXPECT_EQ(d.bytes(), static_cast<std::size_t>(ahead + 1) * static_cast<std::size_t>(c) *
                               (3 * sizeof(index_t) + sizeof(double)))
          << what;
      for (int pass = 0; pass < 2; ++pass)
        expect_same(streamed(d, c, what), want, what + ", pass " + std::to_string(pass));
    }
  }
  DiskTensorOptions bad;
  bad.path = st.plain;
  bad.count = nnz;
  bad.read_ahead = 0;
  EXPECT_THROW(DiskTensor<double>{bad}, InputError);
}

TEST(Tier3Disk, LongModeKeepsItsDistinctRowsSorted) {
  // Modes over 2^28 keep their distinct indices by merging sorted chunk sets (no bitmap).
  const std::vector<std::uint64_t> dims{(std::uint64_t(1) << 28) + 5, 9, 7};
  const auto st = store(random_unique(dims, 600, shared_seed(), 0), "long");
  const auto want = distinct(st.x);
  ASSERT_EQ(want[0].back(), dims[0] - 1);
  for (nnz_t chunk : {nnz_t(1), nnz_t(13), nnz_t(1000)}) {
    if (chunk == 1 && world().rank() != 0) continue;
    const auto d = open_range(st.plain, 0, st.x.nnz(), chunk);
    for (int m = 0; m < 3; ++m) EXPECT_EQ(d->rows(m), want[static_cast<std::size_t>(m)]) << m;
    EXPECT_EQ(d->distinct_rows()[0], want[0].size());
  }
}

TEST(Tier3Disk, ExceptionsEndThePassAndTheNextPassWorks) {
  const auto st = store(random_unique({30, 20, 10}, 800, shared_seed(), 4), "throw");
  const nnz_t nnz = st.x.nnz();
  const SparseTensor<double> want = range_of<double>(st.x, 0, nnz);
  for (nnz_t chunk : {nnz_t(50), nnz + 1}) {
    const auto d = open_range(st.plain, 0, nnz, chunk);
    const nnz_t K = d->chunks();
    for (nnz_t at : {nnz_t(0), nnz_t(2), K - 1}) {
      if (at >= K) continue;
      const std::string what = "chunk " + std::to_string(chunk) + ", throw in chunk " +
                               std::to_string(at) + " of " + std::to_string(K);
      nnz_t seen = 0;
      try {
        d->stream([&](const SparseTensor<double>&) {
          if (seen++ == at) throw InputError("callback failed at chunk " + std::to_string(at));
        });
        ADD_FAILURE() << what << ": no exception";
      } catch (const InputError& e) {
        EXPECT_TRUE(contains(e.what(), "callback failed at chunk " + std::to_string(at)))
            << what << ": " << e.what();
      }
      EXPECT_EQ(seen, at + 1) << what << ": chunks after the throw were processed";
      // A non-tessera exception type goes through unchanged too.
      EXPECT_THROW(d->stream([](const SparseTensor<double>&) { throw std::bad_alloc(); }),
                   std::bad_alloc)
          << what;
      // The next pass is complete (the prefetch thread of the failed ones was joined).
      expect_same(streamed(*d, std::min(chunk, nnz), what), want, what + ", pass after");
      EXPECT_GE(d->overlap_fraction(), 0.0);
      EXPECT_LE(d->overlap_fraction(), 1.0);
    }
  }
}

// ---- b. The DiskTensor's StreamedOps hooks (through the kernels::ops dispatchers) ------

template <typename T>
std::vector<std::vector<T>> random_factors(const std::vector<std::uint64_t>& dims,
                                           const std::vector<int>& cols, std::uint64_t seed) {
  std::vector<std::vector<T>> A;
  for (std::size_t m = 0; m < dims.size(); ++m) {
    CounterRng rng(seed, 100 + m);
    std::vector<T> a(static_cast<std::size_t>(dims[m]) * static_cast<std::size_t>(cols[m]));
    for (auto& v : a) v = static_cast<T>(2 * rng.uniform() - 1);
    A.push_back(std::move(a));
  }
  return A;
}

/// ||got - want|| / ||want|| in double; +inf for a non-finite entry (poison never written).
template <typename T>
double rel_error(const std::vector<T>& got, const std::vector<T>& want) {
  EXPECT_EQ(got.size(), want.size());
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < want.size() && k < got.size(); ++k) {
    if (!std::isfinite(static_cast<double>(got[k]))) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[k]) - static_cast<double>(want[k]);
    d2 += d * d;
    w2 += static_cast<double>(want[k]) * static_cast<double>(want[k]);
  }
  return w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
}

template <typename T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

template <typename T>
void check_streaming_kernels(BackendKind kind, const Stored& st, std::uint64_t seed) {
  const int P = world().size(), r = world().rank();
  const int N = st.x.order();
  const auto [a, n] = share_range(st.x.nnz(), r, P);
  auto inner = kernels::make_backend<T>(kind, 1);
  const SparseTensor<T> local = range_of<T>(st.x, a, n);
  auto full = inner->prepare(local);
  CounterRng rng(seed, 9);
  for (nnz_t chunk : {nnz_t(7), nnz_t(97), n + 3}) {
    DiskTensorOptions o;
    o.path = st.plain;
    o.first = a;
    o.count = n;
    o.chunk_nnz = chunk;
    DiskTensor<T> d(o);
    const std::string base = kernels::to_string(kind) + (sizeof(T) == 4 ? " float" : " double") +
                             ", " + shape_name(st.x) + ", share " + std::to_string(n) + ", chunk " +
                             std::to_string(chunk);
    // MTTKRP of every mode.
    for (int R : {5, 16}) {
      const auto A = random_factors<T>(st.x.dims, std::vector<int>(static_cast<std::size_t>(N), R),
                                       seed + static_cast<std::uint64_t>(R));
      for (int mode = 0; mode < N; ++mode) {
        const std::string what =
            base + ", MTTKRP mode " + std::to_string(mode) + " R " + std::to_string(R);
        const std::size_t len = static_cast<std::size_t>(st.x.dims[mode]) * R;
        auto got = poisoned<T>(len), want = poisoned<T>(len);
        kernels::ops::mttkrp(*inner, d, mode, test::pointers(A, mode), R, got.data());
        kernels::ops::mttkrp(*inner, *full, mode, test::pointers(A, mode), R, want.data());
        double w2 = 0;
        for (T v : want) w2 += static_cast<double>(v) * static_cast<double>(v);
        ASSERT_GT(w2, 0.0) << what;
        EXPECT_LT(rel_error(got, want), test::tol<T>()) << what;
      }
    }
    // TTMc of every mode, random ranks 2..4.
    std::vector<int> ranks(static_cast<std::size_t>(N));
    for (auto& q : ranks) q = 2 + static_cast<int>(rng.next_u64() % 3);
    const auto U = random_factors<T>(st.x.dims, ranks, seed + 77);
    for (int mode = 0; mode < N; ++mode) {
      std::string what = base + ", TTMc mode " + std::to_string(mode) + " ranks";
      for (int q : ranks) what += std::to_string(q) + ",";
      const auto rows = kernels::ops::ttmc_rows(*inner, d, mode);
      ASSERT_EQ(rows, kernels::ops::ttmc_rows(*inner, *full, mode)) << what;
      EXPECT_EQ(rows, distinct(local)[static_cast<std::size_t>(mode)]) << what;
      EXPECT_GT(kernels::ops::ttmc_scratch_bytes(*inner, d, mode, ranks), 0u) << what;
      const std::size_t len =
          rows.size() * static_cast<std::size_t>(kernels::ttmc_output_cols(ranks, mode));
      auto got = poisoned<T>(len), want = poisoned<T>(len);
      kernels::ops::ttmc(*inner, d, mode, test::pointers(U, mode), ranks, got.data());
      kernels::ops::ttmc(*inner, *full, mode, test::pointers(U, mode), ranks, want.data());
      EXPECT_LT(rel_error(got, want), test::tol<T>()) << what;
    }
  }
  // A handle that is not streamed runs the backend's own version: tests/unit/kernels_ops.cpp
  // checks the dispatchers against the backends' functions bit for bit.
}

TEST(Tier3Streaming, MttkrpAndTtmcEqualTheBackendOnTheWholeShare) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const auto& st : stored_shapes(seed))
    for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
      check_streaming_kernels<double>(kind, st, seed);
      check_streaming_kernels<float>(kind, st, seed);
    }
}

TEST(Tier3Streaming, AddRowsAddsIntoTheNamedRows) {
  for (auto kind : {BackendKind::reference, BackendKind::cpu}) {
    auto be = kernels::make_backend<double>(kind, 1);
    const std::int64_t rows = 5, C = 3, dst_rows = 9;
    std::vector<double> src(static_cast<std::size_t>(rows * C)), dst(dst_rows * C);
    for (std::size_t k = 0; k < src.size(); ++k) src[k] = 1.0 + static_cast<double>(k);
    for (std::size_t k = 0; k < dst.size(); ++k) dst[k] = 0.5 * static_cast<double>(k);
    const std::vector<std::int64_t> to{8, 0, 3, 7, 2};
    std::vector<double> want = dst;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t c = 0; c < C; ++c) want[to[i] * C + c] += src[i * C + c];
    auto got = dst;
    kernels::ops::add_rows(*be, src.data(), rows, C, to, got.data());
    EXPECT_EQ(got, want) << kernels::to_string(kind);
    // Empty dst_row: row i into row i.
    want = dst;
    for (std::int64_t k = 0; k < rows * C; ++k) want[k] += src[k];
    got = dst;
    kernels::ops::add_rows(*be, src.data(), rows, C, {}, got.data());
    EXPECT_EQ(got, want) << kernels::to_string(kind);
  }
}
// ---- e. bad stores, ranges and chunk sizes ----------------------------------------------

/// Runs f, expects an InputError whose message contains every part.
void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts,
                        const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const InputError& e) {
    for (const auto& p : parts)
      EXPECT_TRUE(contains(e.what(), p)) << what << ": message lacks '" << p << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": expected an InputError, got: " << e.what();
  }
}

TEST(Tier3Errors, DamagedStoresRangesAndChunkSizes) {
  namespace th = test::h5;
  const auto st = store(random_unique({40, 30, 20}, 1200, shared_seed(), 5), "bad");
  const nnz_t nnz = st.x.nnz();
  const auto whole = [&](const std::string& p) { return [p, nnz] { open_range(p, 0, nnz, 100); }; };
  // Every rank damages a copy of its own (reads are local).
  {
    const std::string p = mine("corrupt-coords");
    th::copy(st.plain, p);
    th::flip(p, th::chunk_address(p, "/coords/mode1", static_cast<hsize_t>(nnz / 2)) + 13, 2);
    expect_input_error(whole(p), {p, "checksum mismatch in /coords/mode1"}, "corrupt coordinates");
    // A range that touches no damaged chunk opens (a rank reads its range only).
    const auto d = open_range(p, 0, 64, 10);
    EXPECT_EQ(d->nnz(), 64);
  }
  {
    const std::string p = mine("corrupt-values");
    th::copy(st.plain, p);
    th::flip(p, th::chunk_address(p, "/values", static_cast<hsize_t>(nnz - 1)) + 3, 1);
    expect_input_error(whole(p), {p, "checksum mismatch in /values"}, "corrupt values");
  }
  {
    const std::string p = mine("out-of-range");
    th::copy(st.plain, p);
    th::remove(p, "/checksums");
    th::poke<std::uint32_t>(p, "/coords/mode2", static_cast<hsize_t>(nnz / 3), 20,
                            H5T_NATIVE_UINT32);
    expect_input_error(whole(p), {p, "out of range"}, "coordinate out of range");
  }
  // Ranges, blocks and chunk sizes.
  const auto opts = [&](nnz_t first, nnz_t count) {
    DiskTensorOptions o;
    o.path = st.plain;
    o.first = first;
    o.count = count;
    return o;
  };
  const auto expect_bad = [&](DiskTensorOptions o, const std::vector<std::string>& parts,
                              const std::string& what) {
    expect_input_error([&] { DiskTensor<double> d(o); }, parts, what);
    expect_input_error([&] { DiskTensor<float> d(o); }, parts, what + " (float)");
  };
  expect_bad(opts(nnz - 3, 5), {st.plain, "outside the store's " + std::to_string(nnz)},
             "range past the end");
  expect_bad(opts(nnz + 1, 0), {st.plain, "outside"}, "empty range past the end");
  expect_bad(opts(-1, 5), {st.plain, "outside"}, "negative first");
  expect_bad(opts(0, -2), {st.plain, "outside"}, "negative count");
  auto o = opts(0, nnz);
  o.chunk_nnz = 0;
  expect_bad(o, {"chunk size must be at least one nonzero, got 0"}, "chunk 0");
  o.chunk_nnz = -4;
  expect_bad(o, {"got -4"}, "negative chunk");
  o = opts(0, 0);
  o.block = 0;
  expect_bad(o, {st.plain, "no block 0 in the stored partition"},
             "block of an unpartitioned store");
  o.path = st.blocked;
  o.block = world().size();
  expect_bad(o, {st.blocked, "no block " + std::to_string(world().size())}, "block past the last");
  o = opts(0, 1);
  o.path = test::temp_dir() + "/no-such-store.h5";
  expect_bad(o, {"no-such-store.h5"}, "missing file");
}

}  // namespace
}  // namespace tessera
