// End-to-end tests of `tessera contract` and `tessera bench contract` under mpiexec -n 2:
// small FROSTT inputs written here, the output (.tns, .tns.gz, .h5) against a product
// computed here, self-contraction read once, the run record, and clear errors (non-zero
// exit, a message, no hang) for a bad spec, mismatched lengths, a missing file, a bad
// output name, the memory limit and the cuda backend in a CPU-only build.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "io/h5store.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::mpirun;
using ::tessera::test::run;
using ::tessera::test::tessera;

using Coords = std::vector<std::uint32_t>;  // 1-based, as in the files
using Tensor = std::map<Coords, double>;

class ContractDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-contract-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// A random tensor of the given lengths (integer values, no repeats), written as .tns.
  Tensor write_random(const std::string& file, const std::vector<std::uint32_t>& dims,
                      std::size_t nnz, std::mt19937_64& rng) {
    Tensor t;
    while (t.size() < nnz) {
      Coords c;
      for (auto d : dims) c.push_back(1 + static_cast<std::uint32_t>(rng() % d));
      t[c] = static_cast<double>(1 + rng() % 5) * ((rng() & 1) ? 1 : -1);
    }
    // The largest coordinate of every mode must occur, so the file's dims are `dims`.
    Coords top(dims.begin(), dims.end());
    t[top] = 2;
    std::ofstream f(path(file));
    f << "# test tensor\n";
    for (const auto& [c, v] : t) {
      for (auto i : c) f << i << ' ';
      f << v << '\n';
    }
    return t;
  }
  fs::path dir_;
};

/// Z(i,j,l,m) = sum_k X(i,j,k) Y(k,l,m), output order "ijlm" reordered to `out` positions.
Tensor contract_ijk_klm(const Tensor& x, const Tensor& y) {
  Tensor z;
  for (const auto& [a, va] : x)
    for (const auto& [b, vb] : y)
      if (a[2] == b[0]) z[{a[0], a[1], b[1], b[2]}] += va * vb;
  for (auto it = z.begin(); it != z.end();) it = it->second == 0 ? z.erase(it) : std::next(it);
  return z;
}

/// Reads a FROSTT text file (1-based) into a map, in file order; checks the order.
Tensor read_tns_text(const std::string& p, bool* sorted) {
  std::ifstream f(p);
  Tensor t;
  std::string line;
  Coords prev;
  *sorted = true;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::vector<double> v;
    double d;
    while (is >> d) v.push_back(d);
    Coords c;
    for (std::size_t k = 0; k + 1 < v.size(); ++k) c.push_back(static_cast<std::uint32_t>(v[k]));
    if (!prev.empty() && !(prev < c)) *sorted = false;
    prev = c;
    t[c] = v.back();
  }
  return t;
}

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

TEST_F(ContractDriver, HelpListsTheOptions) {
  auto r = run(tessera() + " contract --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--einsum", "--out", "--mem-limit", "--extend-dims", "--backend",
                          "--precision", "--threads", "--index-base", "--json"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  r = run(tessera() + " bench contract --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--generate", "--nnz", "--products", "--no-reference", "--einsum"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  // `bench` still needs its benchmark when no subcommand is given.
  r = run(tessera() + " bench");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("what is required"), std::string::npos) << r.out;
}

TEST_F(ContractDriver, ContractsTwoFilesOnTwoRanks) {
  std::mt19937_64 rng(12345);
  const Tensor x = write_random("x.tns", {6, 5, 7}, 90, rng);
  const Tensor y = write_random("y.tns", {7, 4, 3}, 40, rng);
  const Tensor want = contract_ijk_klm(x, y);
  ASSERT_GT(want.size(), 10u);
  std::int64_t products = 0;
  for (const auto& [a, va] : x)
    for (const auto& [b, vb] : y) products += a[2] == b[0] ? 1 : 0;

  for (const std::string out : {"z.tns", "z.tns.gz"}) {
    const auto js = path("run.json");
    auto r = run(mpirun(2) + " contract " + path("x.tns") + " " + path("y.tns") +
                 " --einsum 'ijk,klm->ijlm' --threads 1 --out " + path(out) + " --json " + js);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("done: Z 6x5x4x3"), std::string::npos) << r.out;
    std::string file = path(out);
    if (out.ends_with(".gz")) {
      ASSERT_EQ(run("gzip -dc " + file + " > " + path("unz.tns")).code, 0);
      file = path("unz.tns");
    }
    bool sorted = false;
    const Tensor got = read_tns_text(file, &sorted);
    EXPECT_TRUE(sorted) << out << ": not in lexicographic order";
    EXPECT_EQ(got, want) << out;
    const auto j = read_json(js);
    EXPECT_EQ(j["command"], "contract");
    EXPECT_EQ(j["products"].get<std::int64_t>(), products);
    EXPECT_EQ(j["output"]["nnz"].get<std::size_t>(), want.size());
    EXPECT_EQ(j["output"]["dims"], nlohmann::json({6, 5, 4, 3}));
    EXPECT_EQ(j["machine"]["ranks"].get<int>(), 2);
    for (const char* k : {"match", "count", "multiply", "assemble"})
      EXPECT_TRUE(j["kernel_seconds_max_over_ranks"].contains(k)) << k;
    EXPECT_GT(j["memory_estimate_bytes_per_rank"]["total"].get<double>(), 0);
  }
  // Output letters in another order, float, the reference backend: same numbers.
  auto r =
      run(mpirun(2) + " contract " + path("x.tns") + " " + path("y.tns") +
          " --einsum 'ijk,klm->mjil' --precision float --backend reference --out " + path("p.tns"));
  ASSERT_EQ(r.code, 0) << r.out;
  bool sorted = false;
  const Tensor got = read_tns_text(path("p.tns"), &sorted);
  EXPECT_TRUE(sorted);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [c, v] : want) EXPECT_EQ(got.at({c[3], c[1], c[0], c[2]}), v);
}

TEST_F(ContractDriver, SelfContractionReadsOnceAndWritesTheStore) {
  std::mt19937_64 rng(777);
  const Tensor x = write_random("x.tns", {8, 9, 3}, 120, rng);
  Tensor want;  // Z(i,k) = sum_{j,y} X(i,j,y) X(k,j,y)
  for (const auto& [a, va] : x)
    for (const auto& [b, vb] : x)
      if (a[1] == b[1] && a[2] == b[2]) want[{a[0], b[0]}] += va * vb;
  for (auto it = want.begin(); it != want.end();)
    it = it->second == 0 ? want.erase(it) : std::next(it);
  auto r = run(mpirun(2) + " contract " + path("x.tns") + " " + path("x.tns") +
               " --einsum 'ijy,kjy->ik' --out " + path("z.h5"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("read once"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("read " + path("x.tns")), r.out.rfind("read " + path("x.tns"))) << r.out;
  tessera::io::H5TensorReader h5(path("z.h5"));
  const auto& info = h5.info();
  EXPECT_EQ(info.dims, (std::vector<std::uint64_t>{8, 8}));
  ASSERT_EQ(info.nnz, static_cast<tessera::nnz_t>(want.size()));
  tessera::SparseTensor<double> z;
  h5.read(0, info.nnz, &z);
  Tensor got;
  for (tessera::nnz_t k = 0; k < z.nnz(); ++k) got[{z.idx[0][k] + 1, z.idx[1][k] + 1}] = z.vals[k];
  EXPECT_EQ(got, want);
  for (tessera::nnz_t k = 1; k < z.nnz(); ++k)
    EXPECT_TRUE(std::make_pair(z.idx[0][k - 1], z.idx[1][k - 1]) <
                std::make_pair(z.idx[0][k], z.idx[1][k]));
  // The store reads back as an input.
  r = run(mpirun(2) + " contract " + path("z.h5") + " " + path("z.h5") + " --einsum 'ij,jk->ik'");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(ContractDriver, BadInputsEndWithAClearMessageOnEveryRank) {
  std::mt19937_64 rng(99);
  write_random("x.tns", {6, 5, 7}, 30, rng);
  write_random("y.tns", {8, 4, 3}, 30, rng);  // mode 1 has length 8, X's mode 3 has 7
  const std::string xy = path("x.tns") + " " + path("y.tns");
  struct Bad {
    std::string args, message;
  };
  for (const Bad& b : std::vector<Bad>{
           {xy + " --einsum 'ijk,klm'", "missing '->'"},
           {xy + " --einsum 'iik,klm->ilm'", "appears twice"},
           {xy + " --einsum 'ijk,klm->ijz'", "output letter 'z' is in neither input"},
           {xy + " --einsum 'ijk,klm->ijlm'", "letter 'k' has length 7 in X (mode 3) but 8 in Y"},
           {xy + " --einsum 'ij,jk->ik'", "has 3 modes but its subscripts 'ij' name 2"},
           {path("missing.tns") + " " + path("y.tns") + " --einsum 'ijk,klm->ijlm'",
            "does not exist"},
           {xy + " --einsum 'ijk,klm->ijlm' --extend-dims --out " + path("z.txt"),
            "expected a name ending in .tns, .tns.gz"},
           {xy + " --einsum 'ijk,klm->ijlm' --extend-dims --out " + path("nodir/z.tns"),
            "does not exist"},
           {xy + " --einsum 'ijk,klm->ijlm' --extend-dims --mem-limit 2K", "would fit"},
           {xy + " --einsum 'ijk,klm->ijlm' --backend cuda", "--backend cuda"},
       }) {
    const tessera::test::Run r = run(mpirun(2) + " contract " + b.args);
    EXPECT_NE(r.code, 0) << b.args << "\n" << r.out;
    EXPECT_NE(r.out.find(b.message), std::string::npos) << b.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << r.out;
    // Spec and file errors come before any data is read.
    if (b.message == "missing '->'" || b.message == "does not exist") {
      EXPECT_EQ(r.out.find("read " + path("x.tns")), std::string::npos) << r.out;
    }
  }
  // An empty Z (its two products cancel): refused alike for text and stores, nothing written
  // (a header-only .tns was once written, which no reader took back).
  std::ofstream(path("p.tns")) << "1 1 1\n1 2 -1\n";
  std::ofstream(path("q.tns")) << "1 1 1\n2 1 1\n";
  for (const char* z : {"zero.tns", "zero.h5"}) {
    const tessera::test::Run r = run(mpirun(2) + " contract " + path("p.tns") + " " +
                                     path("q.tns") + " --einsum 'ij,jk->ik' --out " + path(z));
    EXPECT_NE(r.code, 0) << z << "\n" << r.out;
    EXPECT_NE(r.out.find("Z has no nonzeros (2 products, 1 sums of 0 dropped): nothing written"),
              std::string::npos)
        << z << "\n"
        << r.out;
    EXPECT_FALSE(fs::exists(path(z))) << z;
  }
  // --extend-dims pads the shorter contracted mode and runs.
  const tessera::test::Run ok =
      run(mpirun(2) + " contract " + xy + " --einsum 'ijk,klm->ijlm' --extend-dims");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("--extend-dims"), std::string::npos) << ok.out;
}

TEST_F(ContractDriver, BenchReportsProductsTheSplitAndTheFloor) {
  const auto js = path("bench.json");
  auto r = run(mpirun(2) + " bench contract --generate --nnz 20000 --products 2e5 --threads 1 " +
               "--repeat 2 --json " + js);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"expected products", "products/s", "match_s", "reference",
                        "floor:", "check against reference: same nonzeros and products"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  const auto j = read_json(js);
  EXPECT_EQ(j["command"], "bench contract");
  EXPECT_EQ(j["einsum"], "ijk,jkl->il");
  ASSERT_EQ(j["runs"].size(), 2u);  // cpu, reference
  const double products = j["runs"][0]["products"].get<double>();
  EXPECT_EQ(products, j["runs"][1]["products"].get<double>());
  // Uniform coordinates: the products are within a few percent of the expectation.
  EXPECT_NEAR(products, j["expected_products"].get<double>(), 0.1 * products);
  EXPECT_GT(j["floor"]["seconds"].get<double>(), 0);
  // Files and a spec.
  std::mt19937_64 rng(5);
  write_random("x.tns", {6, 5, 7}, 60, rng);
  r = run(mpirun(2) + " bench contract " + path("x.tns") + " " + path("x.tns") +
          " --einsum 'ijk,ljk->il' --no-reference --repeat 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("read once"), std::string::npos) << r.out;
  r = run(mpirun(2) + " bench contract " + path("x.tns"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("give both X and Y"), std::string::npos) << r.out;
}

}  // namespace
