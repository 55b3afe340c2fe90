// Tensor Toolbox (pyttb / MATLAB export_data) sptensor text read through read_tns, and the
// .npy writer of `tessera export`, on one process. The example files follow pyttb's
// export_data layout exactly: "sptensor", the number of dimensions, the shape, the number
// of nonzeros, then "i j k value" 1-based with values as '%.16e'.
#include <gtest/gtest.h>
#include <mpi.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/npy.hpp"
#include "io/pyttb_text.hpp"
#include "io/tns.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// pyttb: export_data(ttb.sptensor(subs, vals, (3, 4, 2)), "x.tns")
const char* kPyttb =
    "sptensor\n"
    "3\n"
    "3 4 2\n"
    "5\n"
    "1 1 1 1.5000000000000000e+00\n"
    "2 3 1 2.0000000000000000e+00\n"
    "3 2 2 -1.0000000000000000e+00\n"
    "1 4 2 4.0000000000000000e+00\n"
    "2 2 1 5.0000000000000000e-01\n";
// The same tensor as FROSTT text.
const char* kFrostt =
    "1 1 1 1.5\n"
    "2 3 1 2\n"
    "3 2 2 -1\n"
    "1 4 2 4\n"
    "2 2 1 0.5\n";

class IoPyttb : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "tessera-pyttb-unit-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (fs::path(dir_) / name).string(); }
  static std::string write_file(const std::string& name, const std::string& text) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static std::string write_gz(const std::string& name, const std::string& text) {
    const std::string p = path(name);
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
    gzclose(f);
    return p;
  }
  TnsReadResult read(const std::string& p, TnsReadOptions o = {}) {
    o.progress = false;
    return read_tns(p, self_, o);
  }
  /// The message read_tns throws for `p` ("" when it reads).
  std::string error_of(const std::string& p, TnsReadOptions o = {}) {
    try {
      read(p, o);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
  comm::MpiCommunicator self_{MPI_COMM_SELF};
  static std::string dir_;
};
std::string IoPyttb::dir_;

/// The nonzeros as a coordinate -> value map (order-independent comparison).
std::map<std::vector<index_t>, double> entries(const SparseTensor<double>& x) {
  std::map<std::vector<index_t>, double> m;
  for (std::size_t k = 0; k < x.vals.size(); ++k) {
    std::vector<index_t> c;
    for (const auto& v : x.idx) c.push_back(v[k]);
    m[c] = x.vals[k];
  }
  return m;
}

TEST_F(IoPyttb, HeaderReader) {
  PyttbHeaderReader r;
  const char* lines[] = {"sptensor", "# a comment", "3", "3 4 2", "5"};
  std::uint64_t off = 0, no = 0;
  PyttbHeaderReader::Status st = PyttbHeaderReader::Status::more;
  for (const char* l : lines) {
    off += std::strlen(l) + 1;
    st = r.line(l, l + std::strlen(l), ++no, off);
  }
  ASSERT_EQ(st, PyttbHeaderReader::Status::done) << r.message();
  EXPECT_EQ(r.header().shape, (std::vector<std::uint64_t>{3, 4, 2}));
  EXPECT_EQ(r.header().nnz, 5u);
  EXPECT_EQ(r.header().lines, 5u);
  EXPECT_EQ(r.header().shape_line, 4u);
  EXPECT_EQ(r.header().nnz_line, 5u);
  EXPECT_EQ(r.header().bytes, off);
  const char* kinds[] = {"sptensor", "tensor", "matrix", "ktensor", "  sptensor extra"};
  for (const char* k : kinds) EXPECT_TRUE(is_pyttb_kind_line(k, k + std::strlen(k))) << k;
  const char* data = "1 2 3 4.0";
  EXPECT_FALSE(is_pyttb_kind_line(data, data + std::strlen(data)));
}

TEST_F(IoPyttb, SameTensorAsFrostt) {
  const auto want = read(write_file("same.tns", kFrostt));
  for (const std::string& p : {write_file("pyttb.tns", kPyttb), write_gz("pyttb.tns.gz", kPyttb)}) {
    for (std::size_t chunk : {std::size_t(0), std::size_t(5)}) {  // 5: lines cross chunks
      TnsReadOptions o;
      o.chunk_bytes = chunk;
      o.base = IndexBase::automatic;  // the format is 1-based: auto must not guess 0
      const auto got = read(p, o);
      EXPECT_EQ(got.local.dims, want.local.dims) << p;
      EXPECT_EQ(got.global_nnz, 5);
      EXPECT_EQ(got.index_base, 1);
      EXPECT_EQ(entries(got.local), entries(want.local)) << p << " chunk " << chunk;
    }
  }
}

TEST_F(IoPyttb, DeclaredShapeIsTheTensorsShape) {
  // Trailing empty slices: the largest coordinates are 2 3 1, the shape 5 6 7.
  const auto got = read(write_file("wide.tns", "sptensor\n3\n5 6 7\n2\n1 1 1 1.0\n2 3 1 2.0\n"));
  EXPECT_EQ(got.local.dims, (std::vector<std::uint64_t>{5, 6, 7}));
  EXPECT_EQ(got.global_nnz, 2);
}

TEST_F(IoPyttb, MalformedHeadersNameFileAndLine) {
  struct Case {
    const char* name;
    const char* text;
    const char* where;  // ":LINE: "
    const char* what;
  };
  const Case cases[] = {
      {"ktensor", "ktensor\n3\n2 2 2\n1\n", ":1: ", "'ktensor' export"},
      {"matrix", "# from MATLAB\nmatrix\n2\n2 2\n", ":2: ", "'matrix' export"},
      {"order", "sptensor\nthree\n3 4 2\n1\n1 1 1 1\n", ":2: ", "number of dimensions"},
      {"order0", "sptensor\n0\n\n1\n", ":2: ", "number of dimensions"},
      {"shape_count", "sptensor\n3\n3 4\n1\n1 1 1 1\n", ":3: ", "found 2 field(s)"},
      {"shape_zero", "sptensor\n2\n3 0\n1\n1 1 1\n", ":3: ", "size 2"},
      {"nnz", "sptensor\n2\n3 3\nfive\n1 1 1\n", ":4: ", "number of nonzeros"},
      {"fewer", "sptensor\n2\n3 3\n3\n1 1 1\n2 2 2\n", ":4: ", "declares 3 nonzeros"},
      {"more", "sptensor\n2\n3 3\n1\n1 1 1\n2 2 2\n", ":4: ", "holds 2 data line(s)"},
      {"beyond", "sptensor\n2\n3 3\n2\n1 1 1\n2 4 2\n", ":6: ", "expected an index <= 3"},
      {"fields", "sptensor\n2\n3 3\n1\n1 1 1 1\n", ":5: ", "fields"},
      {"short", "sptensor\n2\n3 3\n", ":3: ", "ends before the header is complete"},
  };
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      const std::string p = gz ? write_gz(std::string(c.name) + ".tns.gz", c.text)
                               : write_file(std::string(c.name) + ".tns", c.text);
      const std::string e = error_of(p);
      EXPECT_NE(e.find(p + c.where), std::string::npos) << c.name << (gz ? " gz" : "") << ": " << e;
      EXPECT_NE(e.find(c.what), std::string::npos) << c.name << (gz ? " gz" : "") << ": " << e;
    }
  }
}

/// A .npy file parsed by hand: header text, shape and the float64 values.
struct Npy {
  std::string header;
  std::vector<double> f8;
  std::vector<float> f4;
};
Npy parse_npy(const std::string& f) {
  Npy n;
  EXPECT_EQ(f.substr(0, 6), std::string("\x93NUMPY"));
  EXPECT_EQ(f[6], 1);
  EXPECT_EQ(f[7], 0);
  const std::size_t len =
      static_cast<unsigned char>(f[8]) | (static_cast<unsigned char>(f[9]) << 8);
  EXPECT_EQ((10 + len) % 64, 0u);
  n.header = f.substr(10, len);
  EXPECT_EQ(n.header.back(), '\n');
  const std::string data = f.substr(10 + len);
  if (n.header.find("'<f4'") != std::string::npos) {
    n.f4.resize(data.size() / 4);
    std::memcpy(n.f4.data(), data.data(), n.f4.size() * 4);
  } else {
    n.f8.resize(data.size() / 8);
    std::memcpy(n.f8.data(), data.data(), n.f8.size() * 8);
  }
  return n;
}

TEST(Npy, HeaderAndValues) {
  const std::vector<double> v = {1.0, -2.5, 3.0000000000000004, 1e-300, 0.1, 7.0};
  const Npy m = parse_npy(npy_file({3, 2}, v.data()));
  EXPECT_EQ(m.header.rfind("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", 0), 0u)
      << m.header;
  ASSERT_EQ(m.f8.size(), v.size());
  EXPECT_EQ(std::memcmp(m.f8.data(), v.data(), v.size() * 8), 0);  // bit for bit
  const Npy one = parse_npy(npy_file({6}, v.data()));
  EXPECT_NE(one.header.find("'shape': (6,)"), std::string::npos) << one.header;
  const Npy s = parse_npy(npy_file({2, 3}, v.data(), true));
  EXPECT_NE(s.header.find("'descr': '<f4'"), std::string::npos) << s.header;
  ASSERT_EQ(s.f4.size(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(s.f4[i], static_cast<float>(v[i]));
  // Every header, long shapes too, ends at a multiple of 64 bytes.
  std::vector<std::uint64_t> big(16, 4294967295ull);
  EXPECT_EQ(npy_header(big).size() % 64, 0u);
  EXPECT_EQ(npy_header({}).size() % 64, 0u);
}

}  // namespace
}  // namespace tessera::io
