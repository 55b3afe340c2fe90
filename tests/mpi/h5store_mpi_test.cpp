// HDF5 tensor store across ranks (h5store_mpi_np<P>, P = 1..4): exact round trips
// tns -> h5 -> tns (every write mode, chunk lengths that split every share, float32 values),
// the range reader on random ranges, reading by block, the streamed generator's entries
// against generate(), interrupted writes, and every class of bad file (the same
// CollectiveError on every rank, naming the file and what was expected).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "algo/generate.hpp"
#include "comm/mpi_communicator.hpp"
#include "h5store_test_util.hpp"
#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "test_util.hpp"
#include "util/rng.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

const comm::MpiCommunicator& world() {
  static const comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// A fresh path in the (collective) test folder; the same on every rank.
std::string fresh(const std::string& name) {
  static int counter = 0;
  return test::temp_dir() + "/" + std::to_string(counter++) + "-" + name;
}

std::uint64_t shared_seed() {
  std::uint64_t s = test::fresh_seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

/// Every rank's tensor, concatenated in rank order, on every rank.
SparseTensor<double> gather_all(const SparseTensor<double>& x) {
  const int p = world().size();
  int n = static_cast<int>(x.nnz());
  std::vector<int> counts(static_cast<std::size_t>(p)), displs(static_cast<std::size_t>(p), 0);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int q = 1; q < p; ++q) displs[q] = displs[q - 1] + counts[q - 1];
  const int total = displs[p - 1] + counts[p - 1];
  SparseTensor<double> all(x.dims);
  for (int m = 0; m < x.order(); ++m) {
    all.idx[m].resize(static_cast<std::size_t>(total));
    MPI_Allgatherv(x.idx[m].data(), n, MPI_UINT32_T, all.idx[m].data(), counts.data(),
                   displs.data(), MPI_UINT32_T, MPI_COMM_WORLD);
  }
  all.vals.resize(static_cast<std::size_t>(total));
  MPI_Allgatherv(x.vals.data(), n, MPI_DOUBLE, all.vals.data(), counts.data(), displs.data(),
                 MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

/// Same nonzeros in the same order, values equal bit for bit.
void expect_same(const SparseTensor<double>& got, const SparseTensor<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.order(), want.order()) << what;
  ASSERT_EQ(got.nnz(), want.nnz()) << what;
  for (int m = 0; m < want.order(); ++m)
    EXPECT_EQ(got.idx[m], want.idx[m]) << what << " mode " << m;
  int bad = 0;
  for (std::size_t k = 0; k < want.vals.size(); ++k)
    if (std::memcmp(&got.vals[k], &want.vals[k], sizeof(double)) != 0 && bad++ < 5)
      ADD_FAILURE() << what << ": value " << k << " is " << got.vals[k] << ", wrote "
                    << want.vals[k];
  EXPECT_EQ(bad, 0) << what;
}

SparseTensor<double> share(const SparseTensor<double>& x, int r, int p) {
  SparseTensor<double> s(x.dims);
  const auto n = static_cast<std::size_t>(x.nnz());
  for (std::size_t k = n * r / p; k < n * (r + 1) / p; ++k) {
    index_t c[kMaxOrder];
    for (int m = 0; m < x.order(); ++m) c[m] = x.idx[m][k];
    s.push_back(c, x.vals[k]);
  }
  return s;
}

/// Random tensor with awkward values (full precision, tiny, huge, subnormal, integers),
/// repeated coordinates, and the largest coordinate of every mode.
SparseTensor<double> random_tensor(std::vector<std::uint64_t> dims, std::size_t nnz,
                                   std::uint64_t seed) {
  SparseTensor<double> x(dims);
  CounterRng rng(seed, 1);
  index_t c[kMaxOrder];
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    double v = 0;
    switch (k % 5) {
      case 0:
        v = rng.normal();
        break;
      case 1:
        v = std::ldexp(rng.uniform() + 0.5, static_cast<int>(rng.next_u64() % 2000) - 1000);
        break;
      case 2:
        v = static_cast<double>(rng.next_u64() % 1000);
        break;
      case 3:
        v = -std::ldexp(rng.uniform(), -1060);
        break;
      default:
        v = (rng.uniform() - 0.5) * 1e300;
    }
    x.push_back(c, v);
    if (k % 97 == 5) x.push_back(c, 1.25);  // a repeated coordinate
  }
  for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(dims[m] - 1);
  x.push_back(c, 0.1);
  return x;
}

/// Runs f and expects the same CollectiveError on every rank, containing every `parts`.
void expect_collective_error(const std::function<void()>& f, const std::vector<std::string>& parts,
                             const std::string& what) {
  std::string msg;
  bool threw = false;
  try {
    f();
  } catch (const CollectiveError& e) {
    threw = true;
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": expected a CollectiveError, got: " << e.what();
    msg = e.what();
  }
  EXPECT_TRUE(threw) << what << ": no error";
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << what << ": message lacks '" << p << "': " << msg;
  // The same message on every rank.
  const std::uint64_t h = std::hash<std::string>{}(msg);
  std::uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << what << ": ranks report different messages; this one: " << msg;
}

const std::vector<std::uint64_t> kDims = {50, 40, 30};

H5WriteOptions opts(std::uint64_t chunk, int deflate = 0,
                    H5WriteOptions::Mode mode = H5WriteOptions::Mode::automatic) {
  H5WriteOptions o;
  o.chunk_elems = chunk;
  o.deflate = deflate;
  o.mode = mode;
  o.progress = false;
  o.piece = 100;  // several write rounds
  return o;
}

H5ReadOptions ropts(bool verify = true) {
  H5ReadOptions o;
  o.progress = false;
  o.verify_checksums = verify;
  o.piece = 77;
  return o;
}

// ---------------------------------------------------------------------------------------

TEST(H5StoreMpi, RoundTripTnsToH5ToTnsIsExact) {
  const std::uint64_t seed = shared_seed();
  const int P = world().size(), r = world().rank();
  const SparseTensor<double> x = random_tensor(kDims, 1500, seed);
  const std::string t1 = fresh("in.tns");
  write_tns(t1, share(x, r, P), world());
  TnsReadOptions tro;
  tro.progress = false;
  const TnsReadResult rr = read_tns(t1, world(), tro);
  struct Case {
    const char* name;
    H5WriteOptions o;
  };
  const Case cases[] = {
      {"direct, chunk 7", opts(7)},
      {"direct, default chunk", opts(kDefaultChunkElems)},
      {"turns, chunk 64", opts(64, 0, H5WriteOptions::Mode::turns)},
      {"deflate 1, chunk 100", opts(100, 1)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
    const std::string h = fresh("x.h5");
    H5Header meta;
    meta.dims = rr.local.dims;
    meta.source_index_base = rr.index_base;
    meta.source = "test";
    write_h5(h, rr.local, world(), meta, c.o);
    const H5ReadResult hr = read_h5(h, world(), ropts());
    EXPECT_EQ(hr.global_nnz, x.nnz());
    EXPECT_EQ(hr.local.dims, kDims);
    EXPECT_EQ(hr.info.source_index_base, 1);
    EXPECT_EQ(hr.info.source, "test");
    EXPECT_TRUE(hr.info.has_checksums);
    EXPECT_EQ(hr.info.deflate, c.o.deflate);
    expect_same(gather_all(hr.local), x, "h5 contents");
    // And back to text: the same nonzeros, the same bits.
    const std::string t2 = fresh("back.tns.gz");
    write_tns(t2, hr.local, world());
    const TnsReadResult back = read_tns(t2, world(), tro);
    EXPECT_EQ(back.local.dims, kDims);
    expect_same(gather_all(back.local), x, "tns -> h5 -> tns");
  }
}

TEST(H5StoreMpi, Float32ValuesReadBackAsTheirFloats) {
  const std::uint64_t seed = shared_seed();
  const int P = world().size(), r = world().rank();
  SparseTensor<double> x = random_tensor(kDims, 400, seed);
  // Values float32 cannot hold are refused by the writer (too large, or a nonzero it would
  // round to 0: below), so the stored ones are those it holds.
  for (auto& v : x.vals)
    v = std::isfinite(static_cast<float>(v)) && (static_cast<float>(v) != 0 || v == 0) ? v : 1.5;
  const std::string h = fresh("f32.h5");
  H5WriteOptions o = opts(33);
  o.value_type = ValueType::float32;
  write_h5(h, share(x, r, P), world(), {}, o);
  const H5ReadResult hr = read_h5(h, world(), ropts());
  EXPECT_EQ(hr.info.value_type, ValueType::float32);
  SparseTensor<double> want = x;
  for (auto& v : want.vals) v = static_cast<double>(static_cast<float>(v));
  expect_same(gather_all(hr.local), want, "float32 store, seed " + std::to_string(seed));
  // A float64 value too large for float32 is refused, on every rank.
  SparseTensor<double> big = share(x, r, P);
  if (r == 0) big.vals.at(0) = 1e300;
  const std::string h2 = fresh("big.h5");
  expect_collective_error([&] { write_h5(h2, big, world(), {}, o); }, {"too large for float32"},
                          "float32 overflow");
  EXPECT_FALSE(fs::exists(h2));
  // And a nonzero float32 would round to 0 (it would be lost), on every rank.
  SparseTensor<double> tiny = share(x, r, P);
  if (r == P - 1 && tiny.nnz() > 0) tiny.vals.at(0) = 1e-60;
  const std::string h3 = fresh("tiny.h5");
  expect_collective_error([&] { write_h5(h3, tiny, world(), {}, o); }, {"too small for float32"},
                          "float32 underflow to 0");
  EXPECT_FALSE(fs::exists(h3));
}

TEST(H5StoreMpi, RangeReaderMatchesEveryRange) {
  const std::uint64_t seed = shared_seed();
  const int P = world().size(), r = world().rank();
  SparseTensor<double> x = random_tensor(kDims, 900, seed);
  for (auto& v : x.vals) v = std::isfinite(static_cast<float>(v)) ? v : -2.5;  // float reads
  for (int deflate : {0, 3}) {
    const std::string h = fresh("ranges.h5");
    write_h5(h, share(x, r, P), world(), {}, opts(16, deflate));
    // Local reads (no communication): every rank its own random ranges.
    H5TensorReader rd(h);
    H5TensorReader rd_noverify(h, false);
    EXPECT_EQ(rd.info().chunk_elems, 16u);
    CounterRng rng(seed ^ static_cast<std::uint64_t>(r + 1), 7);
    const nnz_t n = x.nnz();
    for (int t = 0; t < 60; ++t) {
      nnz_t first = static_cast<nnz_t>(rng.next_u64() % static_cast<std::uint64_t>(n + 1));
      nnz_t count = static_cast<nnz_t>(rng.next_u64() % static_cast<std::uint64_t>(n - first + 1));
      if (t == 0) first = 0, count = n;
      if (t == 1) first = 16, count = 32;  // chunk-aligned both ends
      if (t == 2) first = n - 1, count = 1;
      std::vector<std::vector<index_t>> idx(3,
                                            std::vector<index_t>(static_cast<std::size_t>(count)));
      index_t* p[3] = {idx[0].data(), idx[1].data(), idx[2].data()};
      std::vector<double> vd(static_cast<std::size_t>(count));
      std::vector<float> vf(static_cast<std::size_t>(count));
      (t % 2 ? rd : rd_noverify).read(first, count, p, vd.data());
      for (nnz_t k = 0; k < count; ++k) {
        const auto s = static_cast<std::size_t>(first + k);
        for (int m = 0; m < 3; ++m)
          ASSERT_EQ(idx[m][static_cast<std::size_t>(k)], x.idx[m][s]) << "seed " << seed;
        ASSERT_EQ(std::memcmp(&vd[static_cast<std::size_t>(k)], &x.vals[s], 8), 0)
            << "seed " << seed << " range " << first << "+" << count;
      }
      rd.read(first, count, p, vf.data());
      for (nnz_t k = 0; k < count; ++k) {
        const auto s = static_cast<std::size_t>(first + k);
        ASSERT_EQ(vf[static_cast<std::size_t>(k)], static_cast<float>(x.vals[s]));
      }
      std::vector<index_t> mode1(static_cast<std::size_t>(count));
      rd.read_mode(1, first, count, mode1.data());
      EXPECT_EQ(mode1, idx[1]);
    }
  }
}

/// x sorted (stably) into the blocks of a grid {P,1,1} cut of mode 0, with its partition.
std::pair<SparseTensor<double>, H5Partition> by_blocks(const SparseTensor<double>& x, int P) {
  H5Partition part;
  part.grid = {P, 1, 1};
  std::vector<std::uint64_t> cut;
  for (int b = 0; b <= P; ++b) cut.push_back(kDims[0] * static_cast<std::uint64_t>(b) / P);
  part.cuts = {cut, {0, kDims[1]}, {0, kDims[2]}};
  SparseTensor<double> s(x.dims);
  part.offsets = {0};
  for (int b = 0; b < P; ++b) {
    for (nnz_t k = 0; k < x.nnz(); ++k) {
      const auto i = x.idx[0][static_cast<std::size_t>(k)];
      if (i < cut[b] || i >= cut[b + 1]) continue;
      index_t c[3] = {x.idx[0][k], x.idx[1][k], x.idx[2][k]};
      s.push_back(c, x.vals[k]);
    }
    part.offsets.push_back(static_cast<std::uint64_t>(s.nnz()));
  }
  return {s, part};
}

/// Writes `s` (every rank passes the whole tensor; rank r writes its share) with `part`.
void write_with_partition(const std::string& h, const SparseTensor<double>& s,
                          const H5Partition& part) {
  const int P = world().size(), r = world().rank();
  H5Header hd;
  hd.dims = s.dims;
  hd.nnz = s.nnz();
  H5TensorWriter w(h, hd, world(), opts(10));
  const nnz_t lo = s.nnz() * r / P, hi = s.nnz() * (r + 1) / P;
  H5Piece pc;
  pc.first = lo;
  pc.count = hi - lo;
  for (int m = 0; m < 3; ++m) pc.idx[m] = s.idx[m].data() + lo;
  pc.vals = s.vals.data() + lo;
  w.write({pc});
  w.commit(&part);
}

TEST(H5StoreMpi, ReadByBlockGivesEachRankItsBlock) {
  const std::uint64_t seed = shared_seed();
  const int P = world().size(), r = world().rank();
  const SparseTensor<double> x = random_tensor(kDims, 700, seed);
  auto [s, part] = by_blocks(x, P);
  const std::string h = fresh("blocks.h5");
  write_with_partition(h, s, part);
  const H5ReadResult hr = read_h5(h, world(), ropts());
  ASSERT_TRUE(hr.info.partition.has_value());
  EXPECT_TRUE(hr.by_block);
  EXPECT_EQ(hr.info.partition->grid, part.grid);
  EXPECT_EQ(hr.info.partition->offsets, part.offsets);
  EXPECT_EQ(hr.info.partition->cuts, part.cuts);
  SparseTensor<double> want(x.dims);
  for (auto k = part.offsets[r]; k < part.offsets[r + 1]; ++k) {
    index_t c[3] = {s.idx[0][k], s.idx[1][k], s.idx[2][k]};
    want.push_back(c, s.vals[k]);
  }
  expect_same(hr.local, want, "block " + std::to_string(r));
  // Equal shares when asked, in stored order.
  H5ReadOptions ro = ropts();
  ro.by_block = false;
  const H5ReadResult eq = read_h5(h, world(), ro);
  EXPECT_FALSE(eq.by_block);
  expect_same(gather_all(eq.local), s, "equal shares");
  // Per-block reader: any piece of any block.
  H5TensorReader rd(h);
  for (int b = 0; b < P; ++b) {
    const auto [first, count] = part.block_range(b);
    if (count < 2) continue;
    std::vector<std::vector<index_t>> idx(
        3, std::vector<index_t>(static_cast<std::size_t>(count - 1)));
    index_t* p[3] = {idx[0].data(), idx[1].data(), idx[2].data()};
    std::vector<double> v(static_cast<std::size_t>(count - 1));
    rd.read_block(b, 1, count - 1, p, v.data());
    for (nnz_t k = 0; k + 1 < count; ++k)
      EXPECT_EQ(idx[0][k], s.idx[0][static_cast<std::size_t>(first + 1 + k)]);
  }
}

TEST(H5StoreMpi, StreamedEntriesSumToTheGeneratedTensor) {
  algo::GenerateOptions o;
  o.dims = {40, 30, 20};
  o.nnz = 3000;
  o.rank = 3;
  o.seed = shared_seed();
  for (auto dist : {algo::IndexDist::uniform, algo::IndexDist::powerlaw}) {
    o.dist = dist;
    SCOPED_TRACE("seed " + std::to_string(o.seed));
    const algo::EntryGenerator gen(o);
    const std::int64_t T = gen.total();
    // Entries do not depend on how the ids are split.
    SparseTensor<double> whole(o.dims), split(o.dims);
    for (auto* t : {&whole, &split}) {
      for (auto& v : t->idx) v.resize(static_cast<std::size_t>(T));
      t->vals.resize(static_cast<std::size_t>(T));
    }
    index_t* pw[3] = {whole.idx[0].data(), whole.idx[1].data(), whole.idx[2].data()};
    gen.fill(0, T, pw, whole.vals.data());
    for (std::int64_t a = 0; a < T; a += 97) {
      const std::int64_t n = std::min<std::int64_t>(97, T - a);
      index_t* ps[3] = {split.idx[0].data() + a, split.idx[1].data() + a, split.idx[2].data() + a};
      gen.fill(a, n, ps, split.vals.data() + a);
    }
    expect_same(split, whole, "split fill");
    // Summing repeated coordinates gives generate()'s tensor (blocks, no noise).
    const int P = world().size(), r = world().rank();
    auto d = partition::distribute(share(whole, r, P), partition::Scheme::nnz, {}, world());
    auto g = algo::generate(o, world());
    const SparseTensor<double> a = gather_all(d.block), b = gather_all(g.block);
    ASSERT_EQ(a.nnz(), b.nnz());
    for (int m = 0; m < 3; ++m) EXPECT_EQ(a.idx[m], b.idx[m]);
    for (std::size_t k = 0; k < a.vals.size(); ++k)
      ASSERT_NEAR(a.vals[k], b.vals[k], 1e-12 * std::abs(b.vals[k])) << k;
  }
}

TEST(H5StoreMpi, InterruptedWriteLeavesNoFile) {
  const int P = world().size(), r = world().rank();
  const SparseTensor<double> x = random_tensor(kDims, 800, shared_seed());
  const std::string dir = test::temp_dir() + "/interrupted-" + std::to_string(P);
  if (r == 0) fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto mode : {H5WriteOptions::Mode::direct, H5WriteOptions::Mode::turns}) {
    const std::string h = dir + "/out.h5";
    H5WriteOptions o = opts(64, 0, mode);
    o.piece = 50;
    o.fail_after_rounds = 1;
    expect_collective_error([&] { write_h5(h, share(x, r, P), world(), {}, o); },
                            {"injected failure"}, "injected failure");
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_FALSE(fs::exists(h));
    int left = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      ADD_FAILURE() << "left behind: " << e.path();
      ++left;
    }
    EXPECT_EQ(left, 0);
  }
  // A folder that does not exist.
  const std::string nowhere = dir + "/no/such/dir/out.h5";
  expect_collective_error([&] { write_h5(nowhere, share(x, r, P), world(), {}, opts(64)); },
                          {"cannot create", "no/such/dir/out.h5.tmp-"}, "missing folder");
  // A temporary file left by a killed writer is refused even if renamed: complete = 0.
  const std::string h = fresh("killed.h5");
  write_h5(h, share(x, r, P), world(), {}, opts(64));
  if (r == 0) test::h5::set_attr_i64(h, "complete", 0);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_collective_error([&] { read_h5(h, world(), ropts()); },
                          {"killed.h5", "was not completely written"}, "complete = 0");
}

TEST(H5StoreMpi, BadFilesFailOnEveryRankWithAClearMessage) {
  namespace th = test::h5;
  const int P = world().size(), r = world().rank();
  const SparseTensor<double> x = random_tensor(kDims, 997, shared_seed());
  auto [s, part] = by_blocks(x, P);
  const std::string good = fresh("good.h5");
  write_with_partition(good, s, part);
  const auto nnz = static_cast<std::uint64_t>(s.nnz());
  const auto chunk_of = [&](const std::string& p, const std::string& d, std::uint64_t pos) {
    return th::chunk_address(p, d, pos);
  };
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;  // run on rank 0 on a copy of `good`
    std::vector<std::string> expect;
  };
  std::vector<Case> cases = {
      {"truncated.h5",
       [](const std::string& p) { th::truncate(p, th::size_of(p) * 6 / 10); },
       {"truncated"}},
      {"truncated-to-nothing.h5",
       [](const std::string& p) { th::truncate(p, 5); },
       {"not an HDF5 file"}},
      {"corrupt-data.h5",
       [&](const std::string& p) { th::flip(p, chunk_of(p, "/coords/mode1", 500) + 13, 2); },
       {"checksum mismatch in /coords/mode1 chunk 50", "corrupted"}},
      {"corrupt-values.h5",
       [&](const std::string& p) { th::flip(p, chunk_of(p, "/values", nnz - 1) + 3, 1); },
       {"checksum mismatch in /values chunk"}},
      {"corrupt-superblock.h5",
       [](const std::string& p) { th::flip(p, 20, 4); },
       {"cannot open", "truncated or corrupted"}},
      {"corrupt-header.h5",
       [](const std::string& p) { th::flip(p, 60, 2); },
       {"the file is corrupted"}},
      {"missing-values.h5",
       [](const std::string& p) { th::remove(p, "/values"); },
       {"dataset '/values' (float64 or float32 values) is missing"}},
      {"wrong-type.h5",
       [&](const std::string& p) { th::replace(p, "/coords/mode1", H5T_IEEE_F64LE, {nnz}); },
       {"'/coords/mode1' has type float64, expected uint32 coordinates"}},
      {"wrong-rank.h5",
       [&](const std::string& p) {
         th::replace(p, "/values", H5T_IEEE_F64LE, {nnz, 1});
       },
       {"'/values' has 2 dimensions, expected 1"}},
      {"nnz-disagrees.h5",
       [&](const std::string& p) { th::set_attr_u64s(p, "nnz", {nnz + 1}, true); },
       {"has " + std::to_string(nnz) + " elements, but attribute nnz is " +
        std::to_string(nnz + 1)}},
      {"dims-length.h5",
       [](const std::string& p) {
         th::set_attr_u64s(p, "dims", {50, 40});
       },
       {"attribute 'dims' has 2 entries, but order = 3"}},
      {"order-disagrees.h5",
       [](const std::string& p) {
         th::set_attr_i64(p, "order", 2);
         th::set_attr_u64s(p, "dims", {50, 40});
       },
       {"'/coords' holds 3 objects, but order = 2"}},
      {"coordinate-out-of-range.h5",
       [&](const std::string& p) {
         th::remove(p, "/checksums");
         th::poke<std::uint32_t>(p, "/coords/mode2", nnz / 2, 30, H5T_NATIVE_UINT32);
       },
       {"/coords/mode2[" + std::to_string(nnz / 2) + "] = 30 is out of range", "dims[2] = 30"}},
      {"nan-value.h5",
       [&](const std::string& p) {
         th::remove(p, "/checksums");
         th::poke<double>(p, "/values", 123, std::numeric_limits<double>::quiet_NaN(),
                          H5T_NATIVE_DOUBLE);
       },
       {"/values[123] = nan", "finite"}},
      {"offsets-decrease.h5",
       [&](const std::string& p) {
         auto o = th::read_u64s(p, "/partition/offsets");
         if (o.size() > 2) {
           o[1] = nnz + 5;  // then down to o[2] <= nnz
         } else {
           o.back() = nnz - 1;
         }
         th::write_u64s(p, "/partition/offsets", o);
       },
       {P > 1 ? "/partition/offsets decrease at block 1" : "/partition/offsets must run from 0"}},
      {"offsets-short.h5",
       [&](const std::string& p) {
         auto o = th::read_u64s(p, "/partition/offsets");
         o.back() = nnz - 1;
         th::write_u64s(p, "/partition/offsets", o);
       },
       {"/partition/offsets must run from 0 to nnz = " + std::to_string(nnz)}},
      {"grid-disagrees.h5",
       [&](const std::string& p) {
         th::write_u64s(p, "/partition/grid", {std::uint64_t(P + 1), 1, 1});
       },
       {"'/partition/offsets' has " + std::to_string(P + 1) +
        " elements, but the product of "
        "/partition/grid plus 1 is " +
        std::to_string(P + 2)}},
      {"incomplete.h5",
       [](const std::string& p) { th::set_attr_i64(p, "complete", 0); },
       {"was not completely written"}},
      {"version-2.h5",
       [](const std::string& p) { th::set_attr_i64(p, "format_version", 2); },
       {"format_version 2 is newer than this tessera reads"}},
      {"not-a-store.h5",
       [](const std::string& p) { th::set_attr_string(p, "format", "tessera-kruskal"); },
       {"has format 'tessera-kruskal'", "expected 'tessera-tensor'"}},
      {"text.h5",
       [](const std::string& p) {
         fs::remove(p);
         std::ofstream(p) << "1 2 3 1.0\n";
       },
       {"not an HDF5 file"}},
  };
  if (P > 1)
    cases.push_back({"block-disagrees.h5",
                     [&](const std::string& p) {
                       // Cuts that do not match the stored blocks.
                       std::vector<std::uint64_t> c(static_cast<std::size_t>(P) + 1, kDims[0]);
                       c[0] = 0;
                       th::write_u64s(p, "/partition/cuts/mode0", c);
                     },
                     {"/partition disagrees with the data"}});
  for (const auto& c : cases) {
    const std::string p = fresh(c.name);
    if (r == 0) {
      th::copy(good, p);
      try {
        c.damage(p);
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.name << ": " << e.what();
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<std::string> expect = c.expect;
    expect.push_back(c.name);  // the message names the file
    expect_collective_error([&] { read_h5(p, world(), ropts()); }, expect, c.name);
  }
  // The good file reads (the damage above was to copies).
  EXPECT_NO_THROW(read_h5(good, world(), ropts()));
}

}  // namespace
}  // namespace tessera::io
