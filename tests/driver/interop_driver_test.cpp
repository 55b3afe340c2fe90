// End-to-end tests of the CLI interop (issue 19, point 2): `tessera export` of CP and Tucker
// models as .npy and text (read back here by hand and compared bit for bit with the model
// file), `tessera info` on models and checkpoints, and Tensor Toolbox (pyttb) sptensor text
// as input of `tessera convert`, with file:line errors for malformed headers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "driver_util.hpp"
#include "io/model_io.hpp"

namespace {

namespace fs = std::filesystem;

using ::tessera::test::run;
using ::tessera::test::tessera;

// A small tensor as FROSTT text, and the same tensor as pyttb's export_data writes it.
const char* kFrostt =
    "1 1 1 1.5\n2 3 1 2\n3 2 2 -1\n1 4 2 4\n2 2 1 0.5\n3 4 1 -2.25\n1 2 2 3\n2 4 2 1\n";
const char* kPyttb =
    "sptensor\n3\n3 4 2\n8\n"
    "1 1 1 1.5000000000000000e+00\n2 3 1 2.0000000000000000e+00\n"
    "3 2 2 -1.0000000000000000e+00\n1 4 2 4.0000000000000000e+00\n"
    "2 2 1 5.0000000000000000e-01\n3 4 1 -2.2500000000000000e+00\n"
    "1 2 2 3.0000000000000000e+00\n2 4 2 1.0000000000000000e+00\n";

class Interop : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-interop-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  /// tessera cp or tucker of the small tensor into `model` (one rank, quiet).
  void decompose(const std::string& cmd, const std::string& model, const std::string& extra = "") {
    const auto t = write("x.tns", kFrostt);
    const ::tessera::test::Run r =
        run(tessera() + " " + cmd + " " + t + " -q --out " + model + " " + extra);
    ASSERT_EQ(r.code, 0) << r.out;
  }
  fs::path dir_;
};

/// A .npy file parsed by hand: the shape from the header and the float64 values.
struct Npy {
  std::string header;
  std::vector<double> values;
};
Npy read_npy(const std::string& bytes) {
  Npy n;
  EXPECT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t len =
      static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + len) % 64, 0u);
  n.header = bytes.substr(10, len);
  EXPECT_NE(n.header.find("'descr': '<f8'"), std::string::npos) << n.header;
  EXPECT_NE(n.header.find("'fortran_order': False"), std::string::npos) << n.header;
  n.values.resize((bytes.size() - 10 - len) / 8);
  std::memcpy(n.values.data(), bytes.data() + 10 + len, n.values.size() * 8);
  return n;
}

/// Text as written by export: rows of numbers; returns them all and the count per row.
std::vector<double> read_text(const std::string& text, std::size_t* cols) {
  std::vector<double> v;
  std::istringstream in(text);
  std::string line;
  *cols = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tok;
    std::size_t c = 0;
    while (ls >> tok) {
      v.push_back(std::strtod(tok.c_str(), nullptr));
      ++c;
    }
    if (*cols == 0) *cols = c;
    EXPECT_EQ(c, *cols) << "ragged row: " << line;
  }
  return v;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST_F(Interop, ExportHelp) {
  const ::tessera::test::Run r = run(tessera() + " export --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--format", "--out-dir", "--prefix", "--dtype", "--force", "mode1.mat"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

TEST_F(Interop, ExportCpAsNpyTxtAndMatBitForBit) {
  const auto model = path("cp.h5");
  decompose("cp", model, "--rank 3 --iters 10 --seed 7");
  const ::tessera::KruskalModel m = ::tessera::io::read_kruskal_h5(model);
  ::tessera::test::Run r =
      run(tessera() + " export " + model + " --format npy --out-dir " + path("npy"));
  ASSERT_EQ(r.code, 0) << r.out;
  for (int n = 0; n < 3; ++n) {
    const Npy f = read_npy(slurp(path("npy/mode" + std::to_string(n + 1) + ".npy")));
    const auto& F = m.factors[static_cast<std::size_t>(n)];
    EXPECT_NE(f.header.find("'shape': (" + std::to_string(F.rows) + ", 3)"), std::string::npos)
        << f.header;
    EXPECT_TRUE(same_bits(f.values, F.data)) << "mode " << n + 1;
  }
  const Npy l = read_npy(slurp(path("npy/lambda.npy")));
  EXPECT_NE(l.header.find("'shape': (3,)"), std::string::npos) << l.header;
  EXPECT_TRUE(same_bits(l.values, m.lambda));

  // Text: one row per line, %.17g reads back to the same doubles.
  r = run(tessera() + " export " + model + " --format txt --prefix " + path("run1_"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::size_t cols = 0;
  for (int n = 0; n < 3; ++n) {
    const auto v = read_text(slurp(path("run1_mode" + std::to_string(n + 1) + ".txt")), &cols);
    EXPECT_EQ(cols, 3u);
    EXPECT_TRUE(same_bits(v, m.factors[static_cast<std::size_t>(n)].data)) << "mode " << n + 1;
  }
  EXPECT_TRUE(same_bits(read_text(slurp(path("run1_lambda.txt")), &cols), m.lambda));
  EXPECT_EQ(cols, 1u);  // one weight per line

  // SPLATT names: mode1.mat ... lambda.mat, the same text.
  r = run(tessera() + " export " + model + " --format mat --out-dir " + path("mat"));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* f : {"mode1", "mode2", "mode3", "lambda"})
    EXPECT_EQ(slurp(path(std::string("mat/") + f + ".mat")),
              slurp(path(std::string("run1_") + f + ".txt")))
        << f;
}

TEST_F(Interop, ExportTuckerFactorsAndCore) {
  const auto model = path("tucker.h5");
  decompose("tucker", model, "--ranks 2,3,2 --iters 5");
  const ::tessera::TuckerModel m = ::tessera::io::read_tucker_h5(model);
  ::tessera::test::Run r =
      run(tessera() + " export " + model + " --out-dir " + path("out"));  // npy default
  ASSERT_EQ(r.code, 0) << r.out;
  const Npy core = read_npy(slurp(path("out/core.npy")));
  EXPECT_NE(core.header.find("'shape': (2, 3, 2)"), std::string::npos) << core.header;
  EXPECT_TRUE(same_bits(core.values, m.core));
  const Npy u2 = read_npy(slurp(path("out/mode2.npy")));
  EXPECT_NE(u2.header.find("'shape': (4, 3)"), std::string::npos) << u2.header;
  EXPECT_TRUE(same_bits(u2.values, m.factors[1].data));
  EXPECT_FALSE(fs::exists(path("out/lambda.npy")));
  // The core as text: prod(R_1..R_{N-1}) = 6 lines of R_N = 2 values, row-major.
  r = run(tessera() + " export " + model + " --format txt --out-dir " + path("out"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::size_t cols = 0;
  const std::string text = slurp(path("out/core.txt"));
  EXPECT_TRUE(same_bits(read_text(text, &cols), m.core));
  EXPECT_EQ(cols, 2u);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6);
}

TEST_F(Interop, ExportNeverReplacesTheModelAndAsksForForce) {
  // A model named like one of its own exports: the export would write over it.
  const auto model = path("lambda.npy");
  decompose("cp", model, "--rank 2 --iters 3");
  const std::string before = slurp(model);
  for (const char* force : {"", " --force"}) {
    const ::tessera::test::Run r =
        run(tessera() + " export " + model + " --out-dir " + dir_.string() + force);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("is the same file as the model"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("never writes over an input"), std::string::npos) << r.out;
  }
  EXPECT_EQ(slurp(model), before);
  EXPECT_FALSE(fs::exists(path("mode1.npy")));  // checked before any file is written
  // An existing export is replaced only with --force.
  const auto m2 = path("cp.h5");
  decompose("cp", m2, "--rank 2 --iters 3");
  ::tessera::test::Run r = run(tessera() + " export " + m2 + " --out-dir " + path("e"));
  ASSERT_EQ(r.code, 0) << r.out;
  write("e/mode2.npy", "not an export");
  r = run(tessera() + " export " + m2 + " --out-dir " + path("e"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("mode1.npy' exists: use --force"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(path("e/mode2.npy")), "not an export");
  r = run(tessera() + " export " + m2 + " --out-dir " + path("e") + " --force");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_npy(slurp(path("e/mode2.npy"))).values.size(), 4u * 2u);
  r = run(tessera() + " export " + m2 + " --format txt --dtype f4 --out-dir " + path("f4"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--dtype f4 applies to --format npy only"), std::string::npos) << r.out;
  // Not a model: one clear line.
  r = run(tessera() + " export " + write("x2.tns", kFrostt));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("is not a Tessera model file"), std::string::npos) << r.out;
}

TEST_F(Interop, InfoOnModelsAndCheckpoints) {
  const auto cp = path("cp.h5"), tk = path("tk.h5"), ck = path("cp.ckpt.h5");
  decompose("cp", cp, "--rank 3 --iters 4 --seed 11 --checkpoint-every 1 --checkpoint " + ck);
  decompose("tucker", tk, "--ranks 2,2,2 --iters 3");
  ::tessera::test::Run r = run(tessera() + " info " + cp);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"Tessera model, format tessera-kruskal", "kind: CP (Kruskal), order 3",
                        "dims 3x4x2", "rank 3", "precision: double", "fit: ", "iteration(s)",
                        "options:", "  seed: 11", "  rank: 3"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run(tessera() + " info " + tk);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"kind: Tucker", "ranks 2x2x2 (core of 8 values)", "  svd: "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run(tessera() + " info " + ck);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"Tessera checkpoint", "kind: CP", "checkpoint of an input with 8 nonzeros"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run(tessera() + " info " + cp + " --stats");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("is a model file"), std::string::npos) << r.out;
}

/// Flips one bit in the stored values of `values` (found by their bytes) in the file `p`.
void corrupt(const std::string& p, const std::vector<double>& values) {
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string want(reinterpret_cast<const char*>(values.data()), values.size() * 8);
  const std::size_t at = bytes.find(want);
  ASSERT_NE(at, std::string::npos) << "the dataset's values are not in " << p;
  ASSERT_EQ(bytes.find(want, at + 1), std::string::npos) << "the values are twice in " << p;
  std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(at + 3));
  f.put(static_cast<char>(bytes[at + 3] ^ 0x10));
}

TEST_F(Interop, EveryReaderRefusesADatasetThatFailsItsChecksum) {
  // Models and checkpoints of both kinds, one byte of one dataset changed; every reader
  // (export, info, --init file:, --resume) refuses with the same line naming the file and
  // the dataset.
  const auto cp = path("cp.h5"), ck = path("cp.ckpt.h5"), tk = path("tk.h5"),
             tck = path("tk.ckpt.h5");
  decompose("cp", cp, "--rank 2 --iters 3 --checkpoint-every 1 --checkpoint " + ck);
  decompose("tucker", tk, "--ranks 2,2,2 --iters 3 --checkpoint-every 1 --checkpoint " + tck);
  corrupt(cp, ::tessera::io::read_kruskal_h5(cp).factors[1].data);
  corrupt(ck, ::tessera::io::read_kruskal_h5(ck).lambda);
  corrupt(tk, ::tessera::io::read_tucker_h5(tk).core);
  corrupt(tck, ::tessera::io::read_tucker_h5(tck).factors[2].data);
  // The readers, "@" standing for the file.
  const std::string x = path("x.tns"), cp_run = " cp " + x + " -q --rank 2 ";
  const std::vector<std::string> any = {" export @ --out-dir " + path("out"), " info @"};
  const struct {
    std::string file, dataset, reader;  ///< reader: the one beside `any`
  } cases[] = {
      {cp, "/factors/mode_1", cp_run + "--init file:@"},
      {ck, "/lambda", cp_run + "--resume @"},
      {tk, "/core", ""},
      {tck, "/factors/mode_2", " tucker " + x + " -q --ranks 2,2,2 --resume @"},
  };
  for (const auto& c : cases) {
    const std::string line = "'" + c.file + "': checksum mismatch in dataset '" + c.dataset + "'";
    std::vector<std::string> readers = any;
    if (!c.reader.empty()) readers.push_back(c.reader);
    std::string first;  // the whole line of the first reader; the others must print it too
    for (std::string cmd : readers) {
      cmd.replace(cmd.find('@'), 1, c.file);
      const ::tessera::test::Run r = run(tessera() + cmd);
      EXPECT_NE(r.code, 0) << cmd << "\n" << r.out;
      const std::size_t at = r.out.find(line);
      ASSERT_NE(at, std::string::npos) << cmd << "\n" << r.out;
      const std::string got = r.out.substr(at, r.out.find('\n', at) - at);
      EXPECT_NE(got.find("the file was damaged or changed after Tessera wrote it"),
                std::string::npos)
          << got;
      if (first.empty()) first = got;
      EXPECT_EQ(got, first) << cmd;
    }
  }
  EXPECT_FALSE(fs::exists(path("out/mode1.npy")));  // nothing exported from a damaged file
}

TEST_F(Interop, ExportToFloat32RefusesValuesThatWouldOverflowAndWritesNothing) {
  // A CP model with one factor value beyond the float32 range, another with a NaN weight.
  ::tessera::KruskalModel m;
  m.dims = {3, 4, 2};
  m.rank = 2;
  m.lambda = {2.0, 1.0};
  for (auto d : m.dims) {
    ::tessera::Matrix<double> F(static_cast<std::int64_t>(d), 2, 0.5);
    m.factors.push_back(F);
  }
  m.factors[1](1, 0) = -1e39;
  const auto big = path("big.h5"), nan = path("nan.h5");
  ::tessera::io::write_kruskal_h5(big, m, {});
  m.factors[1](1, 0) = 0.5;
  m.lambda[1] = std::nan("");
  ::tessera::io::write_kruskal_h5(nan, m, {});
  ::tessera::test::Run r =
      run(tessera() + " export " + big + " --dtype f4 --out-dir " + path("f4"));
  EXPECT_NE(r.code, 0) << r.out;
  for (const char* s :
       {"export --dtype f4 of '", "mode2[1, 0] = -", "does not fit float32 (it would become inf",
        "no file written (export with --dtype f8)"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run(tessera() + " export " + nan + " --dtype f4 --out-dir " + path("f4"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lambda[1] = nan does not fit float32 (not a finite number)"),
            std::string::npos)
      << r.out;
  for (const char* f : {"mode1.npy", "mode2.npy", "mode3.npy", "lambda.npy"})
    EXPECT_FALSE(fs::exists(path(std::string("f4/") + f))) << f;
  // float64 keeps them as they are.
  r = run(tessera() + " export " + big + " --out-dir " + path("f8"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_npy(slurp(path("f8/mode2.npy"))).values[2], -1e39);
  // The other narrowing output, a float32 tensor store, refuses the same way.
  const auto t = write("big.tns", "1 1 1 1.5\n2 1 1 3e39\n");
  r = run(tessera() + " convert " + t + " " + path("big32.h5") + " --value-type float32 -q");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("has value 3e+39, too large for float32"), std::string::npos) << r.out;
  // And a nonzero that float32 would round to 0 (it would be lost, not stored as 1e-50).
  const auto small = write("small.tns", "1 1 1 1.5\n2 1 1 1e-50\n");
  r = run(tessera() + " convert " + small + " " + path("small32.h5") + " --value-type float32 -q");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("has value 1e-50, too small for float32"), std::string::npos) << r.out;
  for (const auto& e : fs::directory_iterator(dir_))  // neither the store nor a temporary
    EXPECT_NE(e.path().filename().string().rfind("big32", 0), 0u) << e.path();
  EXPECT_FALSE(fs::exists(path("small32.h5")));
}

TEST_F(Interop, ConvertPyttbGivesTheSameTensorAsFrostt) {
  const auto py = write("py.tns", kPyttb), tns = write("x.tns", kFrostt);
  ::tessera::test::Run r = run(tessera() + " convert " + py + " " + path("a.tns") + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(tessera() + " convert " + tns + " " + path("b.tns") + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(slurp(path("a.tns")).empty());
  EXPECT_EQ(slurp(path("a.tns")), slurp(path("b.tns")));
  // info reads it too, with the declared shape.
  r = run(tessera() + " info " + py);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("dims 3x4x2"), std::string::npos) << r.out;
}

TEST_F(Interop, PyttbOnThreeRanksPlainAndGz) {
  // The header is read by rank 0 (plain) or by every rank (gz); the data lines are shared.
  const auto py = write("py.tns", kPyttb), tns = write("x.tns", kFrostt);
  ::tessera::test::Run r = run(tessera() + " convert " + tns + " " + path("want.tns") + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(run("gzip -k " + py).code, 0);
  for (const std::string& in : {py, py + ".gz"}) {
    r = run(::tessera::test::mpirun(3) + " convert " + in + " " + path("got.tns") + " -q --force");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(slurp(path("got.tns")), slurp(path("want.tns"))) << in;
  }
  const auto bad = write("bad.tns", "sptensor\n3\n3 4 2\n3\n1 1 1 1\n2 2 2 2\n3 5 1 1\n");
  r = run(::tessera::test::mpirun(3) + " convert " + bad + " " + path("bad.h5"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(bad + ":7: coordinate 2: expected an index <= 4"), std::string::npos)
      << r.out;
}

TEST_F(Interop, MalformedPyttbHeadersNameFileAndLine) {
  struct Case {
    const char* text;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"ktensor\n3\n3 4 2\n2\n", ":1: ", "only sparse tensors"},
      {"sptensor\n3\n3 4\n1\n1 1 1 1\n", ":3: ", "expected the shape"},
      {"sptensor\n3\n3 4 2\n9\n1 1 1 1\n", ":4: ", "declares 9 nonzeros"},
      {"sptensor\n3\n3 4 2\n2\n1 1 1 1\n3 5 1 1\n", ":6: ", "expected an index <= 4"},
  };
  int k = 0;
  for (const Case& c : cases) {
    const auto p = write("bad" + std::to_string(k++) + ".tns", c.text);
    const ::tessera::test::Run r = run(tessera() + " convert " + p + " " + path("out.h5"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(p + c.where), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.what), std::string::npos) << r.out;
  }
}

}  // namespace
