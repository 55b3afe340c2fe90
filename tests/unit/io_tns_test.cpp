// FROSTT text reader/writer on one process: accepted syntax, chunk boundaries, value
// round trips, gzip variants and writer errors. The multi-rank behaviour (ownership of
// lines, global line numbers, collective errors) is in tests/mpi/io_tns_mpi_test.cpp.
#include <gtest/gtest.h>
#include <mpi.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/tns.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

class IoTns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "tessera-io-unit-XXXXXX").string();
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
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  TnsReadResult read(const std::string& p, TnsReadOptions o = {}) {
    o.progress = false;
    return read_tns(p, self_, o);
  }

  comm::MpiCommunicator self_{MPI_COMM_SELF};
  static std::string dir_;
};
std::string IoTns::dir_;

// Comments, blank lines, tabs, CRLF, leading/trailing blanks, value notations, and a last
// line without '\n'.
const char* const kMixed =
    "# a FROSTT file\n"
    "\n"
    "   # indented comment\n"
    "1\t2\t3\t1.5\n"
    "  4 5 6   -2e-3  \r\n"
    "\t \n"
    "7 8 9 +3\n"
    "#\n"
    "1 1 1 1E+2\r\n"
    "2  3\t 4 .25\n"
    "10 11 12 -0.5";

void expect_mixed(const TnsReadResult& r) {
  const SparseTensor<double>& x = r.local;
  ASSERT_EQ(x.order(), 3);
  ASSERT_EQ(x.nnz(), 6);
  EXPECT_EQ(r.global_nnz, 6);
  EXPECT_EQ(r.index_base, 1);
  EXPECT_EQ(x.dims, (std::vector<std::uint64_t>{10, 11, 12}));
  const std::vector<index_t> i0{0, 3, 6, 0, 1, 9}, i1{1, 4, 7, 0, 2, 10}, i2{2, 5, 8, 0, 3, 11};
  EXPECT_EQ(x.idx[0], i0);
  EXPECT_EQ(x.idx[1], i1);
  EXPECT_EQ(x.idx[2], i2);
  EXPECT_EQ(x.vals, (std::vector<double>{1.5, -2e-3, 3, 100, 0.25, -0.5}));
}

TEST_F(IoTns, ParseIndexBase) {
  EXPECT_EQ(parse_index_base("auto"), IndexBase::automatic);
  EXPECT_EQ(parse_index_base("0"), IndexBase::zero);
  EXPECT_EQ(parse_index_base("1"), IndexBase::one);
  EXPECT_THROW(parse_index_base("2"), InputError);
  EXPECT_THROW(parse_index_base(""), InputError);
}

TEST_F(IoTns, CommentsBlankLinesTabsCrlf) {
  const std::string p = write_file("mixed.tns", kMixed);
  const TnsReadResult r = read(p);
  expect_mixed(r);
  EXPECT_EQ(r.bytes, std::strlen(kMixed));
  EXPECT_EQ(r.text_bytes, std::strlen(kMixed));
}

TEST_F(IoTns, EveryChunkSizeGivesTheSameResult) {
  // Chunk sizes from 1 byte to past the file size: every line crosses some boundary.
  const std::string p = write_file("mixed.tns", kMixed);
  const std::string pz = write_gz("mixed.tns.gz", kMixed);
  for (std::size_t chunk = 1; chunk <= std::strlen(kMixed) + 2; ++chunk) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    TnsReadOptions o;
    o.chunk_bytes = chunk;
    expect_mixed(read(p, o));
    o.gz_block_bytes = chunk;
    expect_mixed(read(pz, o));
  }
}

TEST_F(IoTns, GzipIsRecognisedByContent) {
  const std::string p = write_gz("really-gzip.tns", kMixed);
  const TnsReadResult r = read(p);
  expect_mixed(r);
  EXPECT_EQ(r.text_bytes, std::strlen(kMixed));
  EXPECT_EQ(r.bytes, fs::file_size(p));
  EXPECT_NE(r.bytes, r.text_bytes);
}

TEST_F(IoTns, MultiMemberGzipIsOneStream) {
  const std::string text = kMixed;
  const std::size_t cut = text.find("7 8 9") + 3;  // a member ends inside a line
  const std::string p = path("members.tns.gz");
  for (int part = 0; part < 2; ++part) {
    gzFile f = gzopen(p.c_str(), part == 0 ? "wb" : "ab");
    ASSERT_NE(f, nullptr);
    const std::string s = part == 0 ? text.substr(0, cut) : text.substr(cut);
    gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
    gzclose(f);
  }
  expect_mixed(read(p));
  TnsReadOptions o;
  o.chunk_bytes = 5;
  o.gz_block_bytes = 7;
  expect_mixed(read(p, o));
}

TEST_F(IoTns, LargestIndexAndIndexBases) {
  const std::string p = write_file("big.tns", "4294967295 1 2.5\n3 0 1\n");
  // 1-based: the 0 is an error; auto: 0-based; 0: 0-based.
  EXPECT_THROW(read(p), CollectiveError);
  TnsReadOptions o;
  o.base = IndexBase::automatic;
  TnsReadResult r = read(p, o);
  EXPECT_EQ(r.index_base, 0);
  EXPECT_EQ(r.local.dims, (std::vector<std::uint64_t>{4294967296ull, 2}));
  EXPECT_EQ(r.local.idx[0], (std::vector<index_t>{4294967295u, 3}));
  EXPECT_EQ(r.local.idx[1], (std::vector<index_t>{1, 0}));
  o.base = IndexBase::zero;
  r = read(p, o);
  EXPECT_EQ(r.index_base, 0);
  EXPECT_EQ(r.local.idx[0], (std::vector<index_t>{4294967295u, 3}));

  const std::string q = write_file("big1.tns", "4294967295 1 2.5\n0003 2 1\n");
  o.base = IndexBase::automatic;  // no zero: 1-based
  r = read(q, o);
  EXPECT_EQ(r.index_base, 1);
  EXPECT_EQ(r.local.dims, (std::vector<std::uint64_t>{4294967295ull, 2}));
  EXPECT_EQ(r.local.idx[0], (std::vector<index_t>{4294967294u, 2}));
  EXPECT_EQ(r.local.idx[1], (std::vector<index_t>{0, 1}));
}

TEST_F(IoTns, ValueNotations) {
  const std::string p = write_file("values.tns",
                                   "1 1e3\n2 -2.5E-3\n3 +4\n4 .5\n5 5.\n6 -0\n7 4.9e-324\n"
                                   "8 1.7976931348623157e308\n9 123456789012345678\n");
  const TnsReadResult r = read(p);
  ASSERT_EQ(r.local.order(), 1);
  const std::vector<double> want{
      1e3, -2.5e-3, 4, 0.5, 5, -0.0, 4.9e-324, 1.7976931348623157e308, 123456789012345678.0};
  ASSERT_EQ(r.local.vals.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    std::uint64_t a, b;
    std::memcpy(&a, &r.local.vals[k], 8);
    std::memcpy(&b, &want[k], 8);
    EXPECT_EQ(a, b) << "value " << k << ": " << r.local.vals[k] << " vs " << want[k];
  }
  for (const char* bad : {"0x1p3", "1e", "--1", "+-1", "1,5", "1.5.2", "infinity", "nan(1)"}) {
    const std::string q = write_file("badvalue.tns", std::string("1 2\n3 ") + bad + "\n");
    try {
      read(q);
      ADD_FAILURE() << "accepted value " << bad;
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find(q + ":2: value: expected a"), std::string::npos)
          << e.what();
    }
  }
}

TEST_F(IoTns, WriteFormatIsExact) {
  SparseTensor<double> x({4, 3});
  const index_t a[2] = {0, 2}, b[2] = {3, 0};
  x.push_back(a, 0.1);
  x.push_back(b, -1e300);
  const std::string p = path("exact.tns");
  write_tns(p, x, self_);
  EXPECT_EQ(slurp(p),
            "# FROSTT sparse tensor, 1-based coordinates: order 2, dims 4x3, nnz 2\n"
            "1 3 0.1\n"
            "4 1 -1e+300\n");
  // Written through a temporary name: nothing else is left in the directory.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(IoTns, WriteThenReadRoundTripsEveryDouble) {
  // Values that need all 17 significant digits, subnormals, extremes, signed zero.
  SparseTensor<double> x({5, 70});
  std::vector<double> v{0.1,
                        1.0 / 3.0,
                        -2.0 / 7.0,
                        6.02214076e23,
                        -0.0,
                        0.0,
                        std::numeric_limits<double>::denorm_min(),
                        std::numeric_limits<double>::min(),
                        std::numeric_limits<double>::max(),
                        -std::numeric_limits<double>::max(),
                        std::nextafter(1.0, 2.0),
                        9007199254740993.0,
                        123456789012345.0};
  for (int k = 0; k < 50; ++k) v.push_back(std::ldexp(1.0 + k * 0.123456789, k * 37 - 900));
  for (std::size_t k = 0; k < v.size(); ++k) {
    const index_t c[2] = {static_cast<index_t>(k % 5), static_cast<index_t>(k)};
    x.push_back(c, v[k]);
  }
  for (const char* name : {"rt.tns", "rt.tns.gz"}) {
    const std::string p = path(name);
    write_tns(p, x, self_);
    const TnsReadResult r = read(p);
    ASSERT_EQ(r.local.nnz(), x.nnz()) << name;
    EXPECT_EQ(r.local.idx, x.idx) << name;
    EXPECT_EQ(r.local.dims, (std::vector<std::uint64_t>{5, v.size()})) << name;
    for (std::size_t k = 0; k < v.size(); ++k) {
      std::uint64_t a, b;
      std::memcpy(&a, &r.local.vals[k], 8);
      std::memcpy(&b, &v[k], 8);
      EXPECT_EQ(a, b) << name << " value " << k << " " << v[k];
    }
  }
}

TEST_F(IoTns, WriteRejectsBadTensorsAndLeavesNoFile) {
  SparseTensor<double> x({3, 3});
  const index_t c[2] = {1, 1};
  x.push_back(c, std::numeric_limits<double>::quiet_NaN());
  const std::string p = path("nan.tns");
  try {
    write_tns(p, x, self_);
    ADD_FAILURE() << "wrote a NaN";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("expected finite values"), std::string::npos) << e.what();
  }
  x.vals[0] = 1;
  x.dims[1] = 1;  // coordinate 1 outside a mode of length 1
  EXPECT_THROW(write_tns(p, x, self_), CollectiveError);
  x.dims[1] = 3;
  {  // the last index of a mode of length 2^32: 4294967296 in 1-based text, which no reader takes
    SparseTensor<double> big({std::uint64_t(1) << 32, 3});
    const index_t last[2] = {0xFFFFFFFFu, 1};
    big.push_back(last, 1.0);
    try {
      write_tns(p, big, self_);
      ADD_FAILURE() << "wrote index 4294967296";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("past the largest index a .tns file may hold"),
                std::string::npos)
          << e.what();
    }
  }
  const std::string nodir = path("no/such/dir/x.tns");
  try {
    write_tns(nodir, x, self_);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find(nodir + ".tmp-"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(p));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(IoTns, MissingFileAndDirectory) {
  const std::string p = path("does-not-exist.tns");
  try {
    read(p);
    ADD_FAILURE();
  } catch (const CollectiveError& e) {
    EXPECT_EQ(std::string(e.what()), p + ": cannot open: No such file or directory");
  }
  try {
    read(dir_);
    ADD_FAILURE();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::io
