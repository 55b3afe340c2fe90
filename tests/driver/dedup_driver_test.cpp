// Unique stores end to end through the `tessera` binary (mpiexec -n 1 to 3): generate
// --structure sampled --out X.h5 draws the target count of distinct coordinates with the
// model's values, the same file on every rank count and memory limit; --structure blocks
// sums repeats into the exact low-rank tensor of the text path (CP fits it); convert sums
// repeated lines of a text file and deduplicates a store marked has_duplicates = 1 or -1;
// memory tier 3 refuses a store that may hold repeats, naming the file and the fix. Files
// are checked with the local reader io::H5TensorReader (no MPI in this process).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "h5store_test_util.hpp"
#include "io/h5store.hpp"
#include "tensor/synthetic.hpp"

namespace {

namespace fs = std::filesystem;
namespace th = ::tessera::test::h5;

using ::tessera::index_t;
using ::tessera::nnz_t;
using ::tessera::SparseTensor;
using ::tessera::io::H5TensorReader;
using ::tessera::test::contains;
using ::tessera::test::mpirun;
using ::tessera::test::run;
using RunResult = ::tessera::test::Run;
using Coord = std::vector<index_t>;

int count_of(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The whole store in stored order (checksums verified where present).
SparseTensor<double> load(const std::string& p) {
  H5TensorReader rd(p);
  SparseTensor<double> x;
  rd.read(0, rd.info().nnz, &x);
  return x;
}

/// The store as a map; a coordinate stored twice fails the test.
std::map<Coord, double> unique_map(const std::string& p) {
  const SparseTensor<double> x = load(p);
  std::map<Coord, double> m;
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    Coord c(static_cast<std::size_t>(x.order()));
    for (int n = 0; n < x.order(); ++n)
      c[static_cast<std::size_t>(n)] =
          x.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)];
    EXPECT_TRUE(m.emplace(c, x.vals[static_cast<std::size_t>(k)]).second)
        << p << ": coordinate at position " << k << " stored twice";
  }
  return m;
}

/// A FROSTT text file as a map (1-based in the file, 0-based here); repeats summed in file
/// order.
std::map<Coord, double> text_map(const std::string& p, int order) {
  std::ifstream f(p);
  std::map<Coord, double> m;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    Coord c(static_cast<std::size_t>(order));
    for (auto& x : c) {
      is >> x;
      --x;
    }
    double v = 0;
    is >> v;
    m[c] += v;
  }
  return m;
}

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

class DedupDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-dedup-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static RunResult ok(const std::string& cmd) {
    RunResult r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    return r;
  }
  /// Only stores and inputs the test made: no scratch or temporary file left.
  void expect_only(const std::vector<std::string>& names) const {
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << "left behind: " << n;
    }
  }
  fs::path dir_;
};

TEST_F(DedupDriver, GenerateSampledDrawsTheTargetDistinctCoordinatesOnAnyRankCount) {
  // Power-law indices repeat a lot: 30000 distinct coordinates take more than one round of
  // draws. Noise 0: every value is the dense model's value at its coordinate.
  const std::string args =
      " generate --dims 300x200x100 --nnz 30000 --rank 3 --structure sampled --dist powerlaw "
      "--noise 0 --seed 11 --chunk-nnz 7000 --out ";
  std::string first;
  std::vector<std::string> names;
  for (int np : {1, 2, 3}) {
    for (const std::string memory : {"", "64K"}) {
      std::string name = "s";
      name += std::to_string(np);
      name += memory.empty() ? ".h5" : "-small.h5";
      names.push_back(name);
      const RunResult r =
          ok(mpirun(np) + args + path(name) + (memory.empty() ? "" : " --dedup-memory " + memory));
      EXPECT_TRUE(contains(r.out, "30000 distinct nonzeros (")) << r.out;
      EXPECT_TRUE(contains(r.out, "repeated draws dropped")) << r.out;
      EXPECT_FALSE(contains(r.out, "short of the target")) << r.out;
      if (!memory.empty()) {
        EXPECT_TRUE(contains(r.out, "sorted runs spilled")) << r.out;
      }
      const H5TensorReader rd(path(name));
      EXPECT_EQ(rd.info().has_duplicates, 0);
      EXPECT_EQ(rd.info().sorted_mode, 0);  // the longest mode (dedup_mpi checks the order)
      EXPECT_EQ(rd.info().nnz, 30000);
      const std::string b = bytes_of(path(name));
      if (first.empty()) {
        first = b;
      } else {
        EXPECT_TRUE(b == first) << name << " differs from s1.h5 byte for byte";
      }
    }
  }
  expect_only(names);
  // No coordinate twice, and the values are the model's.
  tessera::synthetic::Spec spec;
  spec.order = 3;
  spec.dims[0] = 300;
  spec.dims[1] = 200;
  spec.dims[2] = 100;
  spec.powerlaw = true;
  spec.alpha = 1.0;
  spec.rank = 3;
  spec.seed = 11;
  const auto m = unique_map(path("s1.h5"));
  ASSERT_EQ(m.size(), 30000u);
  int bad = 0;
  for (const auto& [c, v] : m)
    if (v != tessera::synthetic::model_value(spec, c.data()) && bad++ < 5)
      ADD_FAILURE() << "value " << v << " is not the model's";
  // A target over the coordinates there are (8x8x8 = 512): as many distinct as the rounds
  // reach, said so.
  const RunResult r = ok(mpirun(2) + " generate --dims 8x8x8 --nnz 600 --structure sampled --out " +
                         path("small.h5"));
  EXPECT_TRUE(contains(r.out, "short of the target 600")) << r.out;
  const auto s = unique_map(path("small.h5"));
  EXPECT_LE(s.size(), 512u);
  EXPECT_GT(s.size(), 400u);
}

TEST_F(DedupDriver, GenerateBlocksSumsRepeatsIntoTheExactLowRankTensor) {
  // Rank 4 on small modes: the components' blocks overlap, so coordinates repeat.
  const std::string args =
      " generate --dims 40x30x20 --nnz 6000 --rank 4 --noise 0 --structure blocks --seed 5 ";
  const RunResult r = ok(mpirun(2) + args + "--out " + path("b.h5") + " --chunk-nnz 1000");
  ok(mpirun(2) + args + "--out " + path("b.tns"));
  EXPECT_TRUE(contains(r.out, "repeated coordinates summed")) << r.out;
  EXPECT_FALSE(contains(r.out, "(0 repeated coordinates summed)"))
      << "the test needs overlapping blocks\n"
      << r.out;
  EXPECT_EQ(H5TensorReader(path("b.h5")).info().has_duplicates, 0);
  // The store is the text path's tensor (which sums repeats itself).
  const auto h = unique_map(path("b.h5"));
  const auto t = text_map(path("b.tns"), 3);
  ASSERT_EQ(h.size(), t.size());
  for (auto a = h.begin(), b = t.begin(); a != h.end(); ++a, ++b) {
    ASSERT_EQ(a->first, b->first);
    EXPECT_NEAR(a->second, b->second, 1e-12 * std::abs(b->second));
  }
  // Exact rank 4, no noise: CP fits it in tier 1.
  const RunResult c =
      ok(mpirun(2) + " cp " + path("b.h5") +
         " --rank 4 --iters 300 --tol 1e-12 --backend reference --json " + path("cp.json"));
  EXPECT_GE(read_json(path("cp.json")).at("fit").get<double>(), 0.999) << c.out;
}

TEST_F(DedupDriver, ConvertSumsRepeatedLinesInFileOrder) {
  // 400 distinct coordinates, each on 1 to 4 lines spread through the file, values that do
  // not add exactly: the store holds each coordinate once with the sum in file order.
  const std::string t = path("r.tns");
  std::map<Coord, double> want;
  {
    std::ofstream f(t);
    f << "# repeated lines\n";
    f.precision(17);
    for (int pass = 0; pass < 4; ++pass) {
      for (int k = 0; k < 400; ++k) {
        if (pass > 0 && (k * 7 + pass) % 4 == 0) continue;  // 1 to 4 copies
        const Coord c = {static_cast<index_t>(k % 20), static_cast<index_t>(k / 20),
                         static_cast<index_t>((k * 13) % 9)};
        const double v = 1.0 / (3.0 + k + 7 * pass);
        f << c[0] + 1 << " " << c[1] + 1 << " " << c[2] + 1 << " " << v << "\n";
        want[c] += v;
      }
    }
  }
  std::string first;
  for (int np : {1, 3}) {
    std::string out = path("r");
    out += std::to_string(np);
    out += ".h5";
    // Three ranks with a tiny limit: sorted runs spill to the scratch folder.
    fs::create_directories(path("scratch"));
    const RunResult r =
        ok(mpirun(np) + " convert " + t + " " + out + " --chunk 64" +
           (np == 3 ? " --dedup-memory 1K --piece 100 --scratch " + path("scratch") : ""));
    EXPECT_TRUE(contains(r.out, "has unique coordinates (has_duplicates = 0): 400 nonzeros"))
        << r.out;
    EXPECT_TRUE(contains(r.out, "repeated coordinates of the input summed")) << r.out;
    EXPECT_EQ(H5TensorReader(out).info().has_duplicates, 0);
    const auto got = unique_map(out);
    ASSERT_EQ(got.size(), want.size());
    auto w = want.cbegin();
    for (auto g = got.cbegin(); g != got.cend(); ++g, ++w) {
      ASSERT_EQ(g->first, w->first);
      EXPECT_EQ(g->second, w->second) << "not the sum in file order (bit for bit)";
    }
    const std::string b = bytes_of(out);
    if (first.empty()) {
      first = b;
    } else {
      EXPECT_TRUE(b == first) << "3 ranks with spills wrote another file than 1 rank";
    }
  }
  EXPECT_TRUE(fs::is_empty(path("scratch")));
  expect_only({"r.tns", "r1.h5", "r3.h5", "scratch"});
}

TEST_F(DedupDriver, ConvertDeduplicatesAStoreThatMayHoldRepeats) {
  ok(mpirun(2) + " generate --dims 30x20x10 --nnz 2000 --rank 2 --out " + path("x.tns"));
  ok(mpirun(2) + " convert " + path("x.tns") + " " + path("x.h5") + " --chunk 300");
  const SparseTensor<double> x = load(path("x.h5"));
  ASSERT_GT(x.nnz(), 100);
  // A store with repeats, as other tools or older versions wrote it: nonzero 1 moved onto
  // nonzero 0's coordinate (no checksums: the data was changed), has_duplicates = 1.
  const std::string rep = path("rep.h5");
  th::copy(path("x.h5"), rep);
  th::remove(rep, "/checksums");
  for (int n = 0; n < 3; ++n)
    th::poke<std::uint32_t>(rep, "/coords/mode" + std::to_string(n), 1, x.idx[n][0],
                            H5T_NATIVE_UINT32);
  th::set_attr_i64(rep, "has_duplicates", 1);
  RunResult r = ok(mpirun(2) + " convert " + rep + " " + path("fixed.h5"));
  EXPECT_TRUE(contains(r.out, "has repeated coordinates (has_duplicates = 1)")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 repeated coordinates of the input summed")) << r.out;
  EXPECT_EQ(H5TensorReader(path("fixed.h5")).info().has_duplicates, 0);
  const auto fixed = unique_map(path("fixed.h5"));
  EXPECT_EQ(fixed.size(), static_cast<std::size_t>(x.nnz() - 1));
  const Coord c0 = {x.idx[0][0], x.idx[1][0], x.idx[2][0]};
  ASSERT_EQ(fixed.count(c0), 1u);
  EXPECT_EQ(fixed.at(c0), x.vals[0] + x.vals[1]);
  // Marked "never checked" (-1), without repeats: deduplicated all the same, same tensor.
  const std::string unk = path("unk.h5");
  th::copy(path("x.h5"), unk);
  th::set_attr_i64(unk, "has_duplicates", -1);
  r = ok(mpirun(3) + " convert " + unk + " " + path("unk-fixed.h5") + " --piece 250");
  EXPECT_TRUE(contains(r.out, "not been checked for repeated coordinates")) << r.out;
  EXPECT_TRUE(contains(r.out, "0 repeated coordinates of the input summed")) << r.out;
  EXPECT_EQ(unique_map(path("unk-fixed.h5")), unique_map(path("x.h5")));
}

TEST_F(DedupDriver, Tier3RefusesAStoreThatMayHoldRepeats) {
  // Memory tier 3 forced (--tier 3) on a small store.
  ok(mpirun(2) +
     " generate --dims 60x50x40 --nnz 20000 --rank 3 --noise 0.05 --structure blocks --seed 4 "
     "--out " +
     path("t.h5"));
  const std::string old = path("old.h5");
  th::copy(path("t.h5"), old);
  th::set_attr_i64(old, "has_duplicates", -1);  // as `generate --out X.h5` wrote stores before
  const std::string cp = " cp --backend cpu --rank 3 --iters 3 --tier 3 ";
  const RunResult r = run(mpirun(2) + cp + old);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, 124) << "hung\n" << r.out;
  EXPECT_EQ(count_of(r.out, "tessera: error:"), 1) << r.out;
  EXPECT_TRUE(contains(r.out, old)) << r.out;
  EXPECT_TRUE(contains(r.out, "repeated coordinates")) << r.out;
  EXPECT_TRUE(contains(r.out, "tessera convert " + old)) << r.out;
  EXPECT_FALSE(contains(r.out, "iter   1")) << r.out;
  // The store generate wrote (has_duplicates = 0, sorted by its longest mode) runs in tier 3.
  const RunResult t = ok(mpirun(2) + cp + path("t.h5"));
  EXPECT_TRUE(contains(t.out, "tier 3")) << t.out;
  EXPECT_TRUE(contains(t.out, "sorted by mode 0")) << t.out;
  // Drop-behind (the store leaves the page cache as it is read) computes the same thing.
  const RunResult d = ok(mpirun(2) + cp + path("t.h5") + " --read-cache drop");
  EXPECT_TRUE(contains(d.out, "(drop-behind)")) << d.out;
  const auto fits = [](const std::string& out) {
    std::vector<std::string> f;
    for (std::size_t at = out.find(" fit "); at != std::string::npos;
         at = out.find(" fit ", at + 1))
      f.push_back(out.substr(at + 5, out.find(' ', at + 5) - (at + 5)));  // the number
    return f;
  };
  EXPECT_FALSE(fits(t.out).empty()) << t.out;
  EXPECT_EQ(fits(d.out), fits(t.out));
  const RunResult bad = run(mpirun(1) + cp + path("t.h5") + " --read-cache maybe");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_TRUE(contains(bad.out, "--read-cache")) << bad.out;
  // A sorted_mode attribute naming no mode is a layout error naming it.
  const std::string wrong = path("wrong-order.h5");
  th::copy(path("t.h5"), wrong);
  th::set_attr_i64(wrong, "sorted_mode", 3);
  const RunResult w = run(::tessera::test::tessera() + " info " + wrong);
  EXPECT_NE(w.code, 0) << w.out;
  EXPECT_EQ(count_of(w.out, "tessera: error:"), 1) << w.out;
  EXPECT_TRUE(contains(w.out, "sorted_mode = 3")) << w.out;
  EXPECT_TRUE(contains(w.out, wrong)) << w.out;
}

}  // namespace
