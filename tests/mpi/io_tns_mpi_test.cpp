// FROSTT text reader/writer across ranks: round trips (plain and .gz, any rank count,
// more ranks than nonzeros), syntax, index bases, every class of bad input (an identical
// CollectiveError on every rank naming the file and the true global line), and the real
// tensors in ../shared/data. Run at 1, 2, 3 and 4 ranks (io_tns_mpi_np<P>).
#include <gtest/gtest.h>
#include <mpi.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/tns.hpp"
#include "util/rng.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Helpers

/// Every rank's tensor, concatenated in rank order, on every rank.
SparseTensor<double> gather_all(const SparseTensor<double>& x, MPI_Comm comm) {
  int p = 1;
  MPI_Comm_size(comm, &p);
  int n = static_cast<int>(x.nnz());
  std::vector<int> counts(static_cast<std::size_t>(p)), displs(static_cast<std::size_t>(p), 0);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int q = 1; q < p; ++q) displs[q] = displs[q - 1] + counts[q - 1];
  const int total = displs[p - 1] + counts[p - 1];
  SparseTensor<double> all(x.dims);
  for (int m = 0; m < x.order(); ++m) {
    all.idx[m].resize(static_cast<std::size_t>(total));
    MPI_Allgatherv(x.idx[m].data(), n, MPI_UINT32_T, all.idx[m].data(), counts.data(),
                   displs.data(), MPI_UINT32_T, comm);
  }
  all.vals.resize(static_cast<std::size_t>(total));
  MPI_Allgatherv(x.vals.data(), n, MPI_DOUBLE, all.vals.data(), counts.data(), displs.data(),
                 MPI_DOUBLE, comm);
  return all;
}

/// x with its nonzeros sorted by coordinates, then by the value's bits.
SparseTensor<double> sorted(const SparseTensor<double>& x) {
  std::vector<std::size_t> perm(static_cast<std::size_t>(x.nnz()));
  std::iota(perm.begin(), perm.end(), std::size_t(0));
  const auto bits = [&](std::size_t k) {
    std::uint64_t b;
    std::memcpy(&b, &x.vals[k], sizeof(b));
    return b;
  };
  std::sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) {
    for (int m = 0; m < x.order(); ++m)
      if (x.idx[m][a] != x.idx[m][b]) return x.idx[m][a] < x.idx[m][b];
    return bits(a) < bits(b);
  });
  SparseTensor<double> s(x.dims);
  for (std::size_t k : perm) {
    index_t c[kMaxOrder];
    for (int m = 0; m < x.order(); ++m) c[m] = x.idx[m][k];
    s.push_back(c, x.vals[k]);
  }
  return s;
}

/// Same nonzeros (as multisets, or in the same order when `ordered`), values equal bit
/// for bit.
void expect_same(const SparseTensor<double>& got_in, const SparseTensor<double>& want_in,
                 const std::string& what, bool ordered = false) {
  const SparseTensor<double> got = ordered ? got_in : sorted(got_in);
  const SparseTensor<double> want = ordered ? want_in : sorted(want_in);
  ASSERT_EQ(got.order(), want.order()) << what;
  ASSERT_EQ(got.nnz(), want.nnz()) << what;
  for (int m = 0; m < want.order(); ++m)
    EXPECT_EQ(got.idx[m], want.idx[m]) << what << " mode " << m;
  int bad = 0;
  for (std::size_t k = 0; k < want.vals.size(); ++k) {
    if (std::memcmp(&got.vals[k], &want.vals[k], sizeof(double)) != 0 && bad++ < 5)
      ADD_FAILURE() << what << ": value " << k << " is " << got.vals[k] << ", wrote "
                    << want.vals[k];
  }
  EXPECT_EQ(bad, 0) << what;
}

/// Largest coordinate + 1 per mode.
std::vector<std::uint64_t> tight_dims(const SparseTensor<double>& x) {
  std::vector<std::uint64_t> d(static_cast<std::size_t>(x.order()), 0);
  for (int m = 0; m < x.order(); ++m)
    for (index_t i : x.idx[m]) d[m] = std::max<std::uint64_t>(d[m], std::uint64_t(i) + 1);
  return d;
}

/// Rank `r` of `p`'s contiguous share of x.
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

/// A random tensor with awkward values (full-precision, tiny, huge, negative, integers).
SparseTensor<double> random_tensor(std::vector<std::uint64_t> dims, std::size_t nnz,
                                   std::uint64_t seed) {
  SparseTensor<double> x(dims);
  CounterRng rng(seed, 1);
  for (std::size_t k = 0; k < nnz; ++k) {
    index_t c[kMaxOrder];
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
        v = -std::ldexp(rng.uniform(), -1060);  // subnormal (or -0)
        break;
      default:
        v = (rng.uniform() - 0.5) * 1e300;
    }
    x.push_back(c, v);
  }
  // Corners: the largest storable coordinate in every mode.
  index_t c[kMaxOrder];
  for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(dims[m] - 1);
  if (nnz > 1) x.push_back(c, 0.1);
  return x;
}

struct ErrorCase {
  std::string bad_line;
  IndexBase base;
  std::string expected;  ///< text the message must contain after "FILE:LINE: "
};

class IoTnsMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string d;
    if (rank == 0) {
      std::string tmpl = (fs::temp_directory_path() / "tessera-io-mpi-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) != nullptr) d = tmpl;
    }
    int len = static_cast<int>(d.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    d.resize(static_cast<std::size_t>(len));
    MPI_Bcast(d.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = d;
  }
  static void TearDownTestSuite() {
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0 && !dir_.empty()) fs::remove_all(dir_);
  }

  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "no temporary directory"; }

  static std::string path(const std::string& name) { return (fs::path(dir_) / name).string(); }

  /// Rank 0 writes `text` (gzip-compressed when `gz`); every rank returns after it is done.
  std::string put(const std::string& name, const std::string& text, bool gz = false) {
    const std::string p = path(name);
    if (world_.rank() == 0) {
      if (gz) {
        gzFile f = gzopen(p.c_str(), "wb");
        EXPECT_NE(f, nullptr);
        if (!text.empty()) {
          EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
                    static_cast<int>(text.size()));
        }
        gzclose(f);
      } else {
        std::ofstream(p, std::ios::binary) << text;
      }
    }
    world_.barrier();
    return p;
  }

  TnsReadResult read(const std::string& p, TnsReadOptions o = {}) {
    o.progress = false;
    return read_tns(p, world_, o);
  }

  /// f() must throw CollectiveError on every rank, with the same message everywhere,
  /// containing every needle.
  void expect_collective_error(const std::function<void()>& f,
                               const std::vector<std::string>& needles, const std::string& what) {
    std::string msg;
    int threw = 0;
    try {
      f();
      msg = "no exception";
    } catch (const CollectiveError& e) {
      threw = 1;
      msg = e.what();
    } catch (const std::exception& e) {
      msg = std::string("not a CollectiveError: ") + e.what();
    }
    EXPECT_EQ(threw, 1) << what << ": " << msg;
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos)
          << what << ": expected '" << n << "' in the message: " << msg;
    int all = threw;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(all, world_.size()) << what << ": not every rank threw";
    unsigned long long h[2] = {std::hash<std::string>{}(msg), 0};
    h[1] = ~h[0];
    MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(h[0], ~h[1]) << what << ": ranks threw different messages; this rank: " << msg;
  }

  void expect_read_error(const std::string& p, TnsReadOptions o, long line,
                         const std::string& expected, const std::string& what) {
    const std::string where = line > 0 ? p + ":" + std::to_string(line) + ": " : p + ": ";
    expect_collective_error([&] { read(p, o); }, {where + expected}, what);
  }

  comm::MpiCommunicator world_{MPI_COMM_WORLD};
  static std::string dir_;
};
std::string IoTnsMpi::dir_;

/// Read variants: default chunking, tiny chunks (many boundaries), tiny .gz blocks (every
/// rank owns some blocks).
std::vector<std::pair<std::string, TnsReadOptions>> read_variants() {
  std::vector<std::pair<std::string, TnsReadOptions>> v;
  v.emplace_back("default", TnsReadOptions{});
  TnsReadOptions small;
  small.chunk_bytes = 53;
  small.gz_block_bytes = 101;
  v.emplace_back("small chunks", small);
  return v;
}

// ---------------------------------------------------------------------------------------
// Round trips

TEST_F(IoTnsMpi, RoundTripRandomTensors) {
  const int r = world_.rank(), p = world_.size();
  const std::vector<std::pair<std::vector<std::uint64_t>, std::size_t>> shapes = {
      {{40, 4294967295ull, 7}, 997},
      {{3, 5, 2, 9, 4}, 500},
      {{1000}, 64},
      {std::vector<std::uint64_t>(16, 3), 50},
  };
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    const SparseTensor<double> global = random_tensor(shapes[s].first, shapes[s].second, 17 + s);
    const SparseTensor<double> mine = share(global, r, p);
    for (const char* ext : {".tns", ".tns.gz"}) {
      const std::string file = path("rt" + std::to_string(s) + ext);
      write_tns(file, mine, world_);
      for (const auto& [vname, o] : read_variants()) {
        const std::string what = file + " (" + vname + ")";
        const TnsReadResult rr = read(file, o);
        EXPECT_EQ(rr.global_nnz, global.nnz()) << what;
        EXPECT_EQ(rr.index_base, 1) << what;
        EXPECT_EQ(rr.local.dims, tight_dims(global)) << what;
        // Plain files: byte ranges, so rank order is file order. .gz: round-robin blocks.
        const bool ordered = std::string(ext) == ".tns";
        expect_same(gather_all(rr.local, MPI_COMM_WORLD), global, what, ordered);
      }
      // One rank alone reads the file the group wrote.
      comm::MpiCommunicator self(MPI_COMM_SELF);
      TnsReadOptions o;
      o.progress = false;
      expect_same(read_tns(file, self, o).local, global, file + " (one rank)", true);
    }
  }
}

TEST_F(IoTnsMpi, MoreRanksThanNonzeros) {
  SparseTensor<double> global({6, 5, 4});
  const index_t a[3] = {5, 0, 3}, b[3] = {0, 4, 0};
  global.push_back(a, 2.5);
  global.push_back(b, -1.0 / 3.0);
  for (const char* ext : {".tns", ".tns.gz"}) {
    const std::string file = path(std::string("two") + ext);
    // Nonzeros live on the last ranks; the others write nothing.
    const int p = world_.size(), r = world_.rank();
    SparseTensor<double> mine(global.dims);
    for (int k = 0; k < 2; ++k) {
      if (r == std::max(0, p - 2 + k)) {
        index_t c[3] = {global.idx[0][k], global.idx[1][k], global.idx[2][k]};
        mine.push_back(c, global.vals[k]);
      }
    }
    write_tns(file, mine, world_);
    for (const auto& [vname, o] : read_variants()) {
      const TnsReadResult rr = read(file, o);
      EXPECT_LE(rr.local.nnz(), 2);
      EXPECT_EQ(rr.global_nnz, 2);
      EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{6, 5, 4}));
      expect_same(gather_all(rr.local, MPI_COMM_WORLD), global, file + " " + vname,
                  std::string(ext) == ".tns");
    }
  }
  // One line without '\n': every rank but one owns nothing.
  const std::string one = put("one.tns", "3 1 2.25");
  const TnsReadResult rr = read(one);
  EXPECT_EQ(rr.global_nnz, 1);
  EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{3, 1}));
  EXPECT_EQ(rr.local.nnz(), world_.rank() == 0 ? 1 : 0);
}

TEST_F(IoTnsMpi, WriteFromRanksWithoutATensorShape) {
  // A rank with no nonzeros may pass a default-constructed tensor.
  SparseTensor<double> x;
  if (world_.rank() == 0) {
    x = SparseTensor<double>({2, 2});
    const index_t c[2] = {1, 0};
    x.push_back(c, 7);
  }
  const std::string file = path("shapeless.tns");
  write_tns(file, x, world_);
  const TnsReadResult rr = read(file);
  EXPECT_EQ(rr.global_nnz, 1);
  EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{2, 1}));
}

// ---------------------------------------------------------------------------------------
// Syntax and index bases

/// Text of `x` (1-based) in many layouts: tabs, runs of blanks, leading and trailing
/// blanks, CRLF, comments and blank lines between lines, no final '\n'.
std::string messy_text(const SparseTensor<double>& x) {
  std::ostringstream os;
  os.precision(17);
  os << "# messy but valid\n\n";
  for (std::size_t k = 0; k < static_cast<std::size_t>(x.nnz()); ++k) {
    const char* sep = (k % 3 == 0) ? "\t" : (k % 3 == 1) ? "   " : " \t ";
    if (k % 4 == 1) os << "  ";
    if (k % 11 == 5) os << "# comment " << k << "\n";
    if (k % 7 == 3) os << "\t \n";
    for (int m = 0; m < x.order(); ++m) os << x.idx[m][k] + 1 << sep;
    os << x.vals[k];
    if (k % 5 == 2) os << " \t";
    if (k + 1 < static_cast<std::size_t>(x.nnz())) os << (k % 6 == 4 ? "\r\n" : "\n");
  }
  return os.str();
}

TEST_F(IoTnsMpi, CommentsBlankLinesAndTabs) {
  SparseTensor<double> global({9, 8, 30});
  CounterRng rng(5, 5);
  for (int k = 0; k < 300; ++k) {
    const index_t c[3] = {static_cast<index_t>(rng.next_u64() % 9),
                          static_cast<index_t>(rng.next_u64() % 8), static_cast<index_t>(k % 30)};
    global.push_back(c, std::round(rng.normal() * 1e6) / 64);  // exact in decimal
  }
  const std::string text = messy_text(global);
  for (bool gz : {false, true}) {
    const std::string file = put(gz ? "messy.tns.gz" : "messy.tns", text, gz);
    for (const auto& [vname, o] : read_variants()) {
      const TnsReadResult rr = read(file, o);
      EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{9, 8, 30}));
      expect_same(gather_all(rr.local, MPI_COMM_WORLD), global, file + " " + vname, !gz);
    }
  }
}

TEST_F(IoTnsMpi, ZeroBasedDetectionAgreesAcrossRanks) {
  // 1-based-looking lines; a single 0 in the last line makes the file 0-based. With
  // several ranks only the last one sees it.
  std::string text = "# zero-based?\n";
  for (int k = 1; k <= 200; ++k)
    text += std::to_string(k) + " " + std::to_string(k % 7 + 1) + " " + std::to_string(k) + "\n";
  const std::string with_zero = text + "5 0 1.5\n";
  // The coordinates as written, with or without the last line.
  const auto as_written = [](bool zero_line) {
    SparseTensor<double> x({201, 8});
    for (int k = 1; k <= 200; ++k) {
      const index_t c[2] = {static_cast<index_t>(k), static_cast<index_t>(k % 7 + 1)};
      x.push_back(c, k);
    }
    const index_t z[2] = {5, 0};
    if (zero_line) x.push_back(z, 1.5);
    return x;
  };
  for (bool gz : {false, true}) {
    const std::string f0 = put(gz ? "z0.tns.gz" : "z0.tns", with_zero, gz);
    const std::string f1 = put(gz ? "z1.tns.gz" : "z1.tns", text, gz);
    for (auto [vname, o] : read_variants()) {
      const std::string what = f0 + " " + vname;
      o.base = IndexBase::automatic;
      TnsReadResult rr = read(f0, o);
      EXPECT_EQ(rr.index_base, 0) << what;
      EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{201, 8})) << what;
      expect_same(gather_all(rr.local, MPI_COMM_WORLD), as_written(true), what);
      // Forced 1-based: the 0 is an error on the last line.
      o.base = IndexBase::one;
      expect_read_error(f0, o, 202, "coordinate 2: expected an index >= 1", what);
      // Auto without any 0: 1-based. Forced 0: as written.
      o.base = IndexBase::automatic;
      rr = read(f1, o);
      EXPECT_EQ(rr.index_base, 1) << what;
      EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{200, 7})) << what;
      o.base = IndexBase::zero;
      rr = read(f1, o);
      EXPECT_EQ(rr.index_base, 0) << what;
      EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{201, 8})) << what;
      expect_same(gather_all(rr.local, MPI_COMM_WORLD), as_written(false), what);
      o.base = IndexBase::one;
      rr = read(f1, o);
      SparseTensor<double> shifted = as_written(false);
      for (auto& v : shifted.idx)
        for (auto& i : v) --i;
      expect_same(gather_all(rr.local, MPI_COMM_WORLD), shifted, what);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Bad input

/// ~400 lines of a valid order-3 file (comments and blank lines included) with `bad`
/// inserted at about `where` of the way; returns the text and the bad line's number.
/// `offset` (optional) receives the byte offset of the bad line.
std::pair<std::string, long> text_with_bad_line(const std::string& bad, double where = 0.85,
                                                std::size_t* offset = nullptr) {
  std::string text = "# test tensor\n";
  long line = 1, bad_at = 0;
  const int n = 400;
  for (int k = 0; k < n; ++k) {
    if (k == static_cast<int>(where * n)) {
      if (offset) *offset = text.size();
      text += bad + "\n";
      bad_at = ++line;
    }
    if (k % 9 == 4) {
      text += "# comment\n";
      ++line;
    }
    if (k % 13 == 6) {
      text += "\n";
      ++line;
    }
    text += std::to_string(k % 17 + 1) + " " + std::to_string(k % 5 + 1) + " " +
            std::to_string(k + 1) + " " + std::to_string(k * 0.25) + "\n";
    ++line;
  }
  return {text, bad_at};
}

TEST_F(IoTnsMpi, BadLinesAreReportedWithTheirGlobalLineOnEveryRank) {
  const std::vector<ErrorCase> cases = {
      {"1 2 3", IndexBase::one, "expected 4 fields (3 coordinates and a value), found 3"},
      {"1 2 3 4 5", IndexBase::one, "expected 4 fields (3 coordinates and a value), found 5"},
      {"1 x 3 4.0", IndexBase::one,
       "coordinate 2: expected a non-negative integer index, found 'x'"},
      {"1 2.5 3 4", IndexBase::one,
       "coordinate 2: expected a non-negative integer index, found '2.5'"},
      {"1 2 3 abc", IndexBase::one, "value: expected a number, found 'abc'"},
      {"1 2 3 4x", IndexBase::one, "value: expected a number, found '4x'"},
      {"1 2 3 nan", IndexBase::one,
       "value: expected a finite number (NaN and Inf are not allowed), found 'nan'"},
      {"1 2 3 -Inf", IndexBase::automatic,
       "value: expected a finite number (NaN and Inf are not allowed), found '-Inf'"},
      {"1 2 3 1e999", IndexBase::one,
       "value: expected a number in the range of a double, found '1e999'"},
      {"1 0 3 4", IndexBase::one,
       "coordinate 2: expected an index >= 1 (the file is read as 1-based"},
      {"1 -2 3 4", IndexBase::one, "coordinate 2: expected an index >= 1, found '-2'"},
      {"1 -2 3 4", IndexBase::zero, "coordinate 2: expected an index >= 0, found '-2'"},
      {"-1 2 3 4", IndexBase::automatic, "coordinate 1: expected an index >= 0, found '-1'"},
      {"1 2 4294967296 4", IndexBase::one,
       "coordinate 3: expected an index <= 4294967295 (indices are stored in 32 bits), found "
       "'4294967296'"},
      {"99999999999999999999999 2 3 4", IndexBase::zero,
       "coordinate 1: expected an index <= 4294967295"},
      {std::string("1 2\0 3 4", 8), IndexBase::one,
       "expected ASCII text, found byte 0x00 at column 4"},
      {"\x7f"
       "ELF\x02\x01\x01",
       IndexBase::one, "expected ASCII text, found byte 0x7f at column 1"},
      {"1 2 3 \xe2\x88\x92"
       "1",
       IndexBase::one, "expected ASCII text, found byte 0xe2 at column 7"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ErrorCase& c = cases[i];
    std::size_t offset = 0;
    const auto [text, line] = text_with_bad_line(c.bad_line, 0.85, &offset);
    // The premise: with several ranks the bad line lies in the last rank's byte range, so
    // its number depends on the lines counted by all the others.
    const std::size_t p = static_cast<std::size_t>(world_.size());
    ASSERT_GE(offset, text.size() * (p - 1) / p);
    for (bool gz : {false, true}) {
      const std::string file = put("bad" + std::to_string(i) + (gz ? ".tns.gz" : ".tns"), text, gz);
      for (auto [vname, o] : read_variants()) {
        o.base = c.base;
        expect_read_error(file, o, line, c.expected, file + " " + vname);
      }
    }
  }
}

TEST_F(IoTnsMpi, BadLastLineWithoutNewline) {
  auto [text, line] = text_with_bad_line("", 2.0);  // no bad line inserted
  text += "1 2";
  const long last = static_cast<long>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (bool gz : {false, true}) {
    const std::string file = put(gz ? "badlast.tns.gz" : "badlast.tns", text, gz);
    for (const auto& [vname, o] : read_variants())
      expect_read_error(file, o, last, "expected 4 fields (3 coordinates and a value), found 2",
                        file + " " + vname);
  }
}

TEST_F(IoTnsMpi, TheFirstBadLineInTheFileIsReported) {
  // Bad lines near the middle and near the end: with several ranks they are found by
  // different ranks, and the earlier one must win.
  auto [text, first] = text_with_bad_line("1 2 3 oops", 0.55);
  std::string tail = "4 4 4 x\n";
  text += tail;
  for (bool gz : {false, true}) {
    const std::string file = put(gz ? "twobad.tns.gz" : "twobad.tns", text, gz);
    for (const auto& [vname, o] : read_variants())
      expect_read_error(file, o, first, "value: expected a number, found 'oops'",
                        file + " " + vname);
  }
}

TEST_F(IoTnsMpi, OrderIsSetByTheFirstDataLine) {
  std::string seventeen;
  for (int m = 1; m <= 17; ++m) seventeen += std::to_string(m) + " ";
  const std::vector<std::tuple<std::string, long, std::string>> cases = {
      {"# c\n# c\n\n" + seventeen + "1.0\n1 2 3\n", 4,
       "expected at most 17 fields (16 coordinates and a value; tensors of order up to 16 are "
       "supported), found 18"},
      {"# c\n  5\n1 2\n", 2,
       "expected 2 to 17 fields (1 to 16 coordinates and a value; the first data line sets the "
       "order), found 1"},
      {std::string("\n \t\x01\x02\x03 4 5\n1 2 3\n"), 2,
       "expected ASCII text, found byte 0x01 at column 3"},
      // The order is 2 from line 2, so line 3 with 3 coordinates is wrong.
      {"#\n1 2 3\n1 2 3 4\n", 3, "expected 3 fields (2 coordinates and a value), found 4"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [text, line, expected] = cases[i];
    for (bool gz : {false, true}) {
      const std::string file =
          put("order" + std::to_string(i) + (gz ? ".tns.gz" : ".tns"), text, gz);
      for (const auto& [vname, o] : read_variants())
        expect_read_error(file, o, line, expected, file + " " + vname);
    }
  }
}

TEST_F(IoTnsMpi, EmptyFilesAreAnError) {
  const std::string expected =
      "no data lines: expected lines of coordinates and a value, found an empty file or only "
      "comments and blank lines";
  int i = 0;
  for (const std::string& text : {std::string(), std::string("# only\n\n   \n#x\n\t")}) {
    for (bool gz : {false, true}) {
      const std::string file =
          put("empty" + std::to_string(i++) + (gz ? ".tns.gz" : ".tns"), text, gz);
      for (const auto& [vname, o] : read_variants())
        expect_read_error(file, o, 0, expected, file + " " + vname);
    }
  }
}

TEST_F(IoTnsMpi, BinaryFileIsAnError) {
  std::string junk(20000, '\0');
  CounterRng rng(9, 9);
  for (std::size_t k = 1; k < junk.size(); ++k) junk[k] = static_cast<char>(rng.next_u64());
  junk[0] = '\x89';  // the first line is a data line holding a non-text byte
  const std::string file = put("junk.tns", junk);
  for (const auto& [vname, o] : read_variants())
    expect_read_error(file, o, 1, "expected ASCII text, found byte 0x89 at column 1",
                      file + " " + vname);
}

TEST_F(IoTnsMpi, OverlongLineIsAnError) {
  std::string text = "1 2 3 4\n2 2 2 2\n";
  text += std::string((std::size_t(16) << 20) + 100, '7');
  text += "\n3 3 3 3\n";
  for (bool gz : {false, true}) {
    const std::string file = put(gz ? "long.tns.gz" : "long.tns", text, gz);
    TnsReadOptions o;
    expect_read_error(file, o, 3,
                      "line longer than 16 MiB: expected lines of coordinates and a value", file);
    o.chunk_bytes = 1 << 20;
    expect_read_error(file, o, 3,
                      "line longer than 16 MiB: expected lines of coordinates and a value", file);
  }
}

TEST_F(IoTnsMpi, TruncatedAndCorruptGzipAreErrors) {
  std::string text;
  CounterRng rng(3, 3);
  for (int k = 0; k < 20000; ++k)
    text += std::to_string(rng.next_u64() % 1000 + 1) + " " +
            std::to_string(rng.next_u64() % 1000 + 1) + " " + std::to_string(rng.uniform()) + "\n";
  const std::string good = put("good.tns.gz", text, true);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 1000u);
  std::string corrupt = bytes;
  for (std::size_t k = bytes.size() / 2; k < bytes.size() / 2 + 16; ++k) corrupt[k] ^= 0x55;
  const std::string truncated_file = put("truncated.tns.gz", bytes.substr(0, bytes.size() / 2));
  const std::string corrupt_file = put("corrupt.tns.gz", corrupt);
  const std::string no_trailer = put("notrailer.tns.gz", bytes.substr(0, bytes.size() - 4));
  for (const std::string& f : {truncated_file, corrupt_file, no_trailer})
    for (const auto& [vname, o] : read_variants())
      expect_read_error(f, o, 0, "corrupt or truncated gzip data (zlib: ", f + " " + vname);
}

TEST_F(IoTnsMpi, MissingFileIsAnError) {
  const std::string file = path("missing.tns");
  expect_read_error(file, {}, 0, "cannot open: No such file or directory", file);
}

TEST_F(IoTnsMpi, WriteErrorsAreCollective) {
  SparseTensor<double> x({3});
  const index_t c[1] = {2};
  x.push_back(c, world_.rank() == world_.size() - 1 ? std::nan("") : 1.0);
  const std::string file = path("nanwrite.tns");
  expect_collective_error([&] { write_tns(file, x, world_); }, {"expected finite values"}, file);
  x.vals[0] = 1;
  const std::string nodir = path("missing-dir/x.tns.gz");
  expect_collective_error([&] { write_tns(nodir, x, world_); }, {"cannot create " + nodir}, nodir);
  world_.barrier();
  EXPECT_FALSE(fs::exists(file));
}

// ---------------------------------------------------------------------------------------
// Real tensors

struct Checksums {
  long long nnz = 0;
  std::vector<std::uint64_t> max;         // largest 1-based coordinate per mode
  std::vector<unsigned long long> sum_i;  // sum of 0-based coordinates per mode
  double sum = 0;                         // sum of values
};

/// An independent, sequential reader (zlib gzgets + strtoull/strtod) for the check.
Checksums sequential_checksums(const std::string& file) {
  Checksums s;
  gzFile f = gzopen(file.c_str(), "rb");
  if (!f) return s;
  std::vector<char> line(1 << 16);
  while (gzgets(f, line.data(), static_cast<int>(line.size())) != nullptr) {
    const char* p = line.data();
    while (*p == ' ' || *p == '\t') ++p;
    if (*p == '#' || *p == '\n' || *p == '\0') continue;
    std::vector<double> fields;
    char* end = nullptr;
    for (double v = std::strtod(p, &end); end != p; v = std::strtod(p, &end)) {
      fields.push_back(v);
      p = end;
    }
    const std::size_t order = fields.size() - 1;
    if (s.max.empty()) {
      s.max.assign(order, 0);
      s.sum_i.assign(order, 0);
    }
    for (std::size_t m = 0; m < order; ++m) {
      const auto i = static_cast<std::uint64_t>(fields[m]);
      s.max[m] = std::max(s.max[m], i);
      s.sum_i[m] += i - 1;
    }
    s.sum += fields.back();
    ++s.nnz;
  }
  gzclose(f);
  return s;
}

void check_real(const comm::MpiCommunicator& world, const std::string& name, int order,
                long long nnz, const std::vector<std::uint64_t>& dims) {
  const char* env = std::getenv("TESSERA_SHARED_DATA");
  const std::string dir = env ? env : "../shared/data";
  const std::string file = dir + "/" + name;
  if (!fs::exists(file)) GTEST_SKIP() << "real tensor " << file << " not found";
  const Checksums want = sequential_checksums(file);
  ASSERT_EQ(want.nnz, nnz) << "the sequential reader disagrees with the data README";
  ASSERT_EQ(want.max, dims);

  std::vector<std::pair<std::string, TnsReadOptions>> variants;
  variants.emplace_back("default", TnsReadOptions{});
  TnsReadOptions spread;  // 16 KiB blocks: every rank owns part of the text
  spread.gz_block_bytes = 16 << 10;
  variants.emplace_back("16 KiB blocks", spread);
  for (const auto& [vname, o0] : variants) {
    TnsReadOptions o = o0;
    o.progress = false;
    const TnsReadResult rr = read_tns(file, world, o);
    const std::string what = name + " " + vname;
    EXPECT_EQ(rr.local.order(), order) << what;
    EXPECT_EQ(rr.global_nnz, nnz) << what;
    EXPECT_EQ(rr.local.dims, dims) << what;
    EXPECT_EQ(rr.index_base, 1) << what;
    double sum = 0;
    for (double v : rr.local.vals) sum += v;
    std::vector<unsigned long long> sum_i(static_cast<std::size_t>(order), 0);
    for (int m = 0; m < order; ++m)
      for (index_t i : rr.local.idx[m]) sum_i[m] += i;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, sum_i.data(), order, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
    EXPECT_NEAR(sum, want.sum, 1e-12 * std::abs(want.sum)) << what;
    EXPECT_EQ(sum_i, want.sum_i) << what;
    if (vname != "default") {
      EXPECT_GT(rr.local.nnz(), 0) << what << ": rank owns no lines";
    }
  }
}

TEST_F(IoTnsMpi, RealTensorWikiPeople) {
  check_real(world_, "kg-wikipeople-4.tns.gz", 5, 15188, {50, 9524, 9528, 9507, 9506});
}

TEST_F(IoTnsMpi, RealTensorIcews14) {
  check_real(world_, "tkg-icews14_subj-rel-obj-day.tns.gz", 4, 90730, {7127, 230, 7128, 365});
}

TEST_F(IoTnsMpi, RealTensorIcews14Uncompressed) {
  // The same tensor as plain text (byte ranges instead of blocks), written by write_tns.
  const char* env = std::getenv("TESSERA_SHARED_DATA");
  const std::string src =
      std::string(env ? env : "../shared/data") + "/tkg-icews14_subj-rel-obj-day.tns.gz";
  if (!fs::exists(src)) GTEST_SKIP() << "real tensor " << src << " not found";
  TnsReadOptions o;
  o.progress = false;
  const TnsReadResult gz = read_tns(src, world_, o);
  const std::string plain = path("icews14.tns");
  write_tns(plain, gz.local, world_);
  const TnsReadResult rr = read_tns(plain, world_, o);
  EXPECT_EQ(rr.global_nnz, 90730);
  EXPECT_EQ(rr.local.dims, (std::vector<std::uint64_t>{7127, 230, 7128, 365}));
  expect_same(gather_all(rr.local, MPI_COMM_WORLD), gather_all(gz.local, MPI_COMM_WORLD),
              "icews14 plain vs gz", true);
  if (world_.size() > 1) {
    EXPECT_GT(rr.local.nnz(), 0) << "byte ranges should give every rank lines";
  }
}

}  // namespace
}  // namespace tessera::io
