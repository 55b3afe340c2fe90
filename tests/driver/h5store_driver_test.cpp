// End-to-end tests of the HDF5 tensor store through the `tessera` binary (mpiexec -n 2 or
// 3, as a user runs it): convert round trips of a real tensor, cp on .h5 against cp on
// .tns, partition then block-wise reads, generate --out .h5 on any rank count, and every
// class of bad file (a message naming the file, a non-zero exit on every rank, no hang).
// Files are checked with the local reader io::H5TensorReader (no MPI in this process).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "h5store_test_util.hpp"
#include "io/h5store.hpp"

namespace {

namespace fs = std::filesystem;
namespace th = ::tessera::test::h5;

using ::tessera::index_t;
using ::tessera::nnz_t;
using ::tessera::SparseTensor;
using ::tessera::io::H5TensorReader;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

std::string shared(const std::string& name) {
  const char* d = std::getenv("TESSERA_SHARED_DATA");
  if (!d) return "";
  const std::string p = std::string(d) + "/" + name;
  return fs::exists(p) ? p : "";
}

/// The whole store, in stored order (checksums verified).
SparseTensor<double> load(const std::string& p) {
  H5TensorReader rd(p);
  SparseTensor<double> x;
  rd.read(0, rd.info().nnz, &x);
  return x;
}

/// x's nonzeros sorted by coordinates, then value bits (a multiset in canonical order).
SparseTensor<double> sorted(const SparseTensor<double>& x) {
  std::vector<std::size_t> perm(static_cast<std::size_t>(x.nnz()));
  std::iota(perm.begin(), perm.end(), std::size_t(0));
  const auto bits = [&](std::size_t k) {
    std::uint64_t b;
    std::memcpy(&b, &x.vals[k], 8);
    return b;
  };
  std::sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) {
    for (int m = 0; m < x.order(); ++m)
      if (x.idx[m][a] != x.idx[m][b]) return x.idx[m][a] < x.idx[m][b];
    return bits(a) < bits(b);
  });
  SparseTensor<double> s(x.dims);
  for (std::size_t k : perm) {
    index_t c[tessera::kMaxOrder];
    for (int m = 0; m < x.order(); ++m) c[m] = x.idx[m][k];
    s.push_back(c, x.vals[k]);
  }
  return s;
}

void expect_same(const SparseTensor<double>& a, const SparseTensor<double>& b,
                 const std::string& what) {
  ASSERT_EQ(a.order(), b.order()) << what;
  ASSERT_EQ(a.nnz(), b.nnz()) << what;
  EXPECT_EQ(a.dims, b.dims) << what;
  for (int m = 0; m < a.order(); ++m) EXPECT_TRUE(a.idx[m] == b.idx[m]) << what << " mode " << m;
  EXPECT_EQ(std::memcmp(a.vals.data(), b.vals.data(), a.vals.size() * 8), 0) << what << " values";
}

double fit_of(const std::string& json) {
  std::ifstream f(json);
  return nlohmann::json::parse(f)["fit"].get<double>();
}

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class H5Driver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-h5driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// Runs and expects success.
  ::tessera::test::Run ok(const std::string& cmd) {
    ::tessera::test::Run r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return r;
  }
  fs::path dir_;
};

TEST_F(H5Driver, HelpForTheStoreSubcommands) {
  for (const char* sub : {" convert", " partition", " info", " generate"}) {
    auto r = run(tessera() + sub + " --help");
    EXPECT_EQ(r.code, 0) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
  EXPECT_NE(run(tessera() + " convert --help").out.find("--compare-sequential-read"),
            std::string::npos);
}

TEST_F(H5Driver, ConvertRoundTripOfARealTensorIsExact) {
  const std::string src = shared("tkg-icews14_subj-rel-obj-day.tns.gz");
  if (src.empty()) GTEST_SKIP() << "shared tensor not found (set TESSERA_SHARED_DATA)";
  const std::string a = path("a.h5"), b = path("b.tns"), bz = path("b.tns.gz"), c = path("c.h5");
  auto r = ok(mpirun(2) + " convert " + src + " " + a + " --compare-sequential-read --json " +
              path("conv.json"));
  EXPECT_NE(r.out.find("nonzeros/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plain sequential read"), std::string::npos) << r.out;
  std::ifstream jf(path("conv.json"));
  const auto j = nlohmann::json::parse(jf);
  EXPECT_GT(j["read"]["nnz_per_s"].get<double>(), 0);
  EXPECT_GT(j["sequential_read"]["bytes_per_s"].get<double>(), 0);
  ok(mpirun(3) + " convert " + a + " " + b);
  ok(mpirun(2) + " convert " + a + " " + bz);
  ok(mpirun(2) + " convert " + b + " " + c + " --chunk 1000");
  const SparseTensor<double> xa = load(a), xc = load(c);
  expect_same(xc, xa, "tns.gz -> h5 -> tns -> h5");
  ok(mpirun(1) + " convert " + bz + " " + c);
  expect_same(load(c), xa, "h5 -> tns.gz -> h5");
  H5TensorReader rd(a);
  EXPECT_EQ(rd.info().source_index_base, 1);
  EXPECT_TRUE(rd.info().has_checksums);
  r = ok(mpirun(2) + " info " + a + " --verify");
  EXPECT_NE(r.out.find("tessera-tensor v1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(rd.info().nnz) + " nonzeros"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verified"), std::string::npos) << r.out;
  // Compressed and float32 stores hold the same tensor (float32: rounded values).
  const std::string z = path("z.h5");
  ok(mpirun(2) + " convert " + b + " " + z + " --compress 4 --chunk 5000");
  expect_same(load(z), xa, "compressed store");
  EXPECT_EQ(H5TensorReader(z).info().deflate, 4);
}

TEST_F(H5Driver, CpOnAStoreGivesTheSameFitAsOnText) {
  const std::string t = path("t.tns"), h = path("t.h5"), p = path("p.h5");
  ok(mpirun(2) + " generate --dims 60x50x40 --nnz 20000 --rank 4 --noise 0.01 --out " + t);
  ok(mpirun(2) + " convert " + t + " " + h);
  const std::string cp = " cp --rank 4 --iters 30 --tol 0 --backend reference ";
  ok(mpirun(2) + cp + t + " --json " + path("t.json"));
  ok(mpirun(2) + cp + h + " --json " + path("h.json"));
  EXPECT_NEAR(fit_of(path("h.json")), fit_of(path("t.json")), 1e-9);
  // Three ranks, the stored order dealt in pieces of 1000 nonzeros (6 per rank) or cut in
  // three contiguous ranges: the same fit.
  for (const std::string read : {"dealt:1000", "contiguous"}) {
    const std::string j = path("h3-" + read.substr(0, 5) + ".json");
    auto r = ok("TESSERA_STORE_READ=" + read + " " + mpirun(3) + cp + h + " --json " + j);
    EXPECT_NEAR(fit_of(j), fit_of(path("t.json")), 1e-9) << read;
    std::ifstream f(j);
    EXPECT_EQ(nlohmann::json::parse(f).at("partition").at("scheme").get<std::string>(),
              read == "contiguous" ? "store-order" : "store-dealt");
    EXPECT_EQ(r.out.find("dealt to the ranks") != std::string::npos, read != "contiguous") << r.out;
  }
  auto bad = run("TESSERA_STORE_READ=sideways " + mpirun(2) + cp + h);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("TESSERA_STORE_READ must be dealt"), std::string::npos) << bad.out;
  // A store partitioned for two ranks: each rank reads its block; same fit as the text
  // file on the same grid.
  ok(mpirun(3) + " partition " + h + " --grid 2x1x1 --out " + p);
  ok(mpirun(2) + cp + t + " --comm-strategy layer --grid 2x1x1 --json " + path("tl.json"));
  auto r = ok(mpirun(2) + cp + p + " --comm-strategy layer --json " + path("pl.json"));
  EXPECT_NE(r.out.find("using the partition stored in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("grid 2x1x1"), std::string::npos) << r.out;
  EXPECT_NEAR(fit_of(path("pl.json")), fit_of(path("tl.json")), 1e-9);
}

// --comm-strategy auto on a store whose long mode 0 makes the layer strategy move fewer
// bytes (docs/multi-gpu.md, "Choosing the strategy"): layer, on the grid it models. Forced
// into memory tier 3, which runs the allreduce strategy only (and keeps the stored order, so
// --deal has nothing to deal), auto takes allreduce after all instead of refusing the run,
// with the same fit.
TEST_F(H5Driver, AutoTakesAllreduceWhereTheLayerStrategyCannotRun) {
  const std::string h = path("wide.h5");
  ok(tessera() + " generate --dims 2000000x100x100 --nnz 1e5 --rank 3 -q --out " + h);
  const std::string cp = mpirun(2) + " cp " + h +
                         " --rank 4 --iters 2 --tol 0 --backend cpu --precision double --json ";
  const auto record = [&](const std::string& j) {
    std::ifstream f(path(j));
    return nlohmann::json::parse(f);
  };
  auto r = ok(cp + path("auto.json"));
  EXPECT_NE(r.out.find("--comm-strategy auto: layer"), std::string::npos) << r.out;
  const auto a = record("auto.json");
  EXPECT_EQ(a["options"]["comm_strategy"], "layer") << a["options"].dump();
  EXPECT_EQ(a["options"]["grid"], (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(a["memory_plan"]["tier"], 1);
  r = ok(cp + path("t3.json") + " --tier 3 --deal");
  EXPECT_NE(r.out.find("allreduce after all (the layer strategy runs in memory tier 1 only"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--deal: not used"), std::string::npos) << r.out;
  const auto t3 = record("t3.json");
  EXPECT_EQ(t3["options"]["comm_strategy"], "allreduce");
  EXPECT_EQ(t3["options"]["deal"], false);
  EXPECT_EQ(t3["memory_plan"]["tier"], 3);
  EXPECT_NEAR(t3["fit"].get<double>(), a["fit"].get<double>(), 1e-9);
  // tessera plan says the same.
  r = ok(mpirun(2) + " plan " + h + " --rank 4 --tier 3 --backend cpu");
  EXPECT_NE(r.out.find("allreduce after all"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chosen: tier 3"), std::string::npos) << r.out;
}

TEST_F(H5Driver, PartitionThenBlockReadsHoldTheSameNonzeros) {
  const std::string g = path("g.h5"), p = path("p.h5");
  ok(mpirun(2) +
     " generate --dims 300x200x100 --nnz 30000 --rank 3 --structure sampled --dist powerlaw "
     "--noise 0.1 --chunk-nnz 7000 --out " +
     g);
  const SparseTensor<double> x = load(g);
  ok(mpirun(3) + " partition " + g + " --grid 2x2x1 --out " + p + " --piece 4000");
  H5TensorReader rd(p);
  ASSERT_TRUE(rd.info().partition.has_value());
  const auto& part = *rd.info().partition;
  EXPECT_EQ(part.grid, (std::vector<int>{2, 2, 1}));
  ASSERT_EQ(part.nblocks(), 4);
  EXPECT_EQ(part.offsets.back(), static_cast<std::uint64_t>(x.nnz()));
  SparseTensor<double> all(x.dims);
  for (int b = 0; b < 4; ++b) {
    const auto [first, count] = part.block_range(b);
    EXPECT_GT(count, 0);
    std::vector<std::vector<index_t>> idx(3, std::vector<index_t>(static_cast<std::size_t>(count)));
    index_t* q[3] = {idx[0].data(), idx[1].data(), idx[2].data()};
    std::vector<double> v(static_cast<std::size_t>(count));
    rd.read_block(b, 0, count, q, v.data());  // checks the block's index ranges
    for (nnz_t k = 0; k < count; ++k) {
      index_t c[3] = {idx[0][k], idx[1][k], idx[2][k]};
      all.push_back(c, v[static_cast<std::size_t>(k)]);
    }
  }
  expect_same(sorted(all), sorted(x), "blocks vs original");
  auto r = ok(mpirun(2) + " info " + p + " --verify");
  EXPECT_NE(r.out.find("grid 2x2x1 (4 blocks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("imbalance"), std::string::npos) << r.out;
  // In place, with the automatic grid shape for two blocks.
  ok(mpirun(2) + " partition " + g + " --blocks 2");
  H5TensorReader in_place(g);
  ASSERT_TRUE(in_place.info().partition.has_value());
  EXPECT_EQ(in_place.info().partition->nblocks(), 2);
  expect_same(sorted(load(g)), sorted(x), "partitioned in place");
  // --verify reads block by block on 2 ranks: each block in (longest mode, coordinate) order
  // proves its coordinates unique without a sort (partition drops sorted_mode).
  r = ok(mpirun(2) + " info " + g + " --verify");
  EXPECT_NE(r.out.find("block ranges, no repeated coordinate (stored order)"), std::string::npos)
      << r.out;
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  // A partition for two ranks read by three: equal shares, same tensor.
  ok(mpirun(3) + " cp " + g + " --rank 2 --iters 2 --backend reference");
}

TEST_F(H5Driver, GenerateToAStoreIsTheSameOnAnyRankCount) {
  const std::string args =
      " generate --dims 80x70x60x5 --nnz 20000 --rank 5 --noise 0.01 --chunk-nnz 3000 --out ";
  std::vector<SparseTensor<double>> got;
  std::vector<std::vector<std::uint64_t>> crcs;
  std::vector<std::string> bytes;
  for (int np : {1, 2, 3}) {
    // Named, not "g" + std::to_string(np): GCC 12 at -O3 warns (-Wrestrict, a false
    // positive, GCC bug 105329) on a string literal + a temporary std::string.
    const std::string n = std::to_string(np);
    const std::string g = path("g" + n + ".h5");
    auto r = ok(mpirun(np) + args + g);
    // Stores are written with unique coordinates (blocks: repeats summed; the store is
    // ordered by coordinate hash, the same for every rank count).
    EXPECT_NE(r.out.find("repeated coordinates summed"), std::string::npos) << r.out;
    EXPECT_EQ(H5TensorReader(g).info().has_duplicates, 0);
    got.push_back(load(g));
    crcs.push_back(th::read_u64s(g, "/checksums"));
    std::ifstream f(g, std::ios::binary);
    bytes.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  for (std::size_t i = 1; i < got.size(); ++i) {
    expect_same(got[i], got[0], "generate on another rank count");
    EXPECT_EQ(crcs[i], crcs[0]);
    EXPECT_TRUE(bytes[i] == bytes[0]) << "the files differ byte for byte";
  }
  // Exact rank 5 plus 1% noise: CP recovers it, from the store.
  auto r = ok(mpirun(2) + " cp " + path("g1.h5") +
              " --rank 5 --iters 200 --tol 1e-9 --backend reference --json " + path("f.json"));
  EXPECT_GE(fit_of(path("f.json")), 0.97) << r.out;
}

TEST_F(H5Driver, BadFilesEndWithAMessageAndNonZeroExitOnEveryRank) {
  const std::string t = path("t.tns"), good = path("good.h5");
  ok(mpirun(2) + " generate --dims 30x20x10 --nnz 3000 --rank 2 --out " + t);
  ok(mpirun(2) + " convert " + t + " " + good + " --chunk 100");
  ok(mpirun(2) + " partition " + good + " --grid 2x1x1");
  const auto nnz = static_cast<std::uint64_t>(H5TensorReader(good).info().nnz);
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"truncated.h5", [](const std::string& p) { th::truncate(p, th::size_of(p) / 2); },
       "truncated or corrupted"},
      {"corrupt.h5",
       [](const std::string& p) { th::flip(p, th::chunk_address(p, "/coords/mode0", 250) + 7, 3); },
       "checksum mismatch in /coords/mode0 chunk 2"},
      {"header.h5", [](const std::string& p) { th::flip(p, 60, 2); }, "the file is corrupted"},
      {"missing.h5", [](const std::string& p) { th::remove(p, "/coords/mode2"); },
       "'/coords' holds 2 objects, but order = 3"},
      {"wrong-type.h5",
       [&](const std::string& p) { th::replace(p, "/values", H5T_STD_I32LE, {nnz}); },
       "'/values' has type int32, expected float64 or float32 values"},
      {"wrong-rank.h5",
       [&](const std::string& p) {
         th::replace(p, "/coords/mode1", H5T_STD_U32LE, {nnz, 2});
       },
       "'/coords/mode1' has 2 dimensions, expected 1"},
      {"nnz.h5", [&](const std::string& p) { th::set_attr_u64s(p, "nnz", {nnz - 1}, true); },
       "but attribute nnz is " + std::to_string(nnz - 1)},
      {"dims.h5",
       [](const std::string& p) {
         th::set_attr_u64s(p, "dims", {30, 20, 10, 1});
       },
       "attribute 'dims' has 4 entries, but order = 3"},
      {"range.h5",
       [](const std::string& p) {
         th::remove(p, "/checksums");
         th::poke<std::uint32_t>(p, "/coords/mode1", 7, 20, H5T_NATIVE_UINT32);
       },
       "/coords/mode1[7] = 20 is out of range"},
      {"nan.h5",
       [](const std::string& p) {
         th::remove(p, "/checksums");
         th::poke<double>(p, "/values", 11, std::numeric_limits<double>::infinity(),
                          H5T_NATIVE_DOUBLE);
       },
       "/values[11] = inf: expected finite values"},
      {"offsets.h5",
       [&](const std::string& p) {
         th::write_u64s(p, "/partition/offsets", {0, nnz + 1, nnz});
       },
       "/partition/offsets decrease at block 1"},
      {"blocks.h5",
       [](const std::string& p) {
         th::write_u64s(p, "/partition/cuts/mode0", {0, 1, 30});
       },
       "/partition disagrees with the data"},
      {"incomplete.h5", [](const std::string& p) { th::set_attr_i64(p, "complete", 0); },
       "was not completely written"},
  };
  for (const auto& c : cases) {
    const std::string p = path(c.name);
    th::copy(good, p);
    c.damage(p);
    // Every case through cp; the reading paths of convert (equal shares, stored order) on
    // some.
    const bool convert_too = c.name == "truncated.h5" || c.name == "corrupt.h5" ||
                             c.name == "range.h5" || c.name == "blocks.h5";
    const std::string out = path("out.tns");  // named: see GenerateToAStoreIsTheSame...
    for (const char* sub : {" cp ", " convert "}) {
      if (std::string(sub) == " convert " && !convert_too) continue;
      const std::string cmd =
          mpirun(2) + sub + p + (std::string(sub) == " cp " ? " --rank 2 --iters 2" : " " + out);
      auto r = run(cmd);
      EXPECT_NE(r.code, 0) << c.name << sub << "\n" << r.out;
      EXPECT_NE(r.code, 124) << c.name << sub << " hung";
      EXPECT_NE(r.out.find(c.name), std::string::npos) << c.name << ": the message must name "
                                                       << "the file\n"
                                                       << r.out;
      EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.name << sub << "\n" << r.out;
      // Agreed by both ranks: one report from rank 0, no abort.
      EXPECT_EQ(count_of(r.out, "tessera: error:"), 1) << c.name << sub << "\n" << r.out;
      EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
      // Our message only: no HDF5 error-stack dump, no complaint from HDF5 at exit.
      EXPECT_EQ(r.out.find("HDF5-DIAG"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("infinite loop"), std::string::npos) << r.out;
      EXPECT_FALSE(fs::exists(path("out.tns"))) << c.name;
    }
  }
  auto r = run(mpirun(2) + " info " + path("truncated.h5"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("truncated.h5"), std::string::npos) << r.out;
}

TEST_F(H5Driver, FailedWritesLeaveNoOutput) {
  const std::string t = path("t.tns");
  ok(mpirun(2) + " generate --dims 30x20x10 --nnz 3000 --rank 2 --out " + t);
  const std::string nowhere = path("no/such/dir/x.h5");
  for (const std::string& cmd :
       {mpirun(2) + " convert " + t + " " + nowhere,
        mpirun(2) + " generate --dims 30x20x10 --nnz 3000 --rank 2 --out " + nowhere}) {
    auto r = run(cmd);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("cannot create"), std::string::npos) << r.out;
    EXPECT_EQ(count_of(r.out, "tessera: error:"), 1) << r.out;
    EXPECT_FALSE(fs::exists(nowhere));
  }
  // A temporary file of a killed writer is not a store: it fails with a message.
  const std::string h = path("x.h5");
  ok(mpirun(2) + " convert " + t + " " + h);
  const std::string tmp = path("x.h5.tmp-0123456789abcdef");
  th::copy(h, tmp);
  th::set_attr_i64(tmp, "complete", 0);
  auto r = run(mpirun(2) + " cp " + tmp + " --rank 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("was not completely written"), std::string::npos) << r.out;
}

}  // namespace
