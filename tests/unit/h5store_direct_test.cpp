// H5TensorReader::read_direct (parallel pread of unfiltered stores) against read() (HDF5,
// one thread) on stores written by the store writer (and a contiguous one written here):
// bitwise equal results for float32 and float64 values read as float and double, chunked
// and contiguous datasets, ranges that start and end inside chunks, 1 and 4 threads, with
// and without checksum verification; the same error messages for a corrupted coordinate,
// a NaN, values beyond float range, nonzeros outside their block, and several errors at
// once; deflated stores fall back; measure_read_bandwidth. One process.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <zlib.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "h5store_test_util.hpp"
#include "io/h5store.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::io {
namespace {

const comm::MpiCommunicator& self() {
  static const comm::MpiCommunicator c(MPI_COMM_SELF);
  return c;
}

std::string dir() {
  static const std::string d = [] {
    const std::string p = test::temp_dir() + "/h5store-direct";
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

std::string fresh(const std::string& name) {
  static int counter = 0;
  return dir() + "/" + std::to_string(counter++) + "-" + name;
}

/// Removes this binary's files when the tests end.
class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir(), ec);
    std::filesystem::remove(test::temp_dir(), ec);  // only when empty
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanUp =
    ::testing::AddGlobalTestEnvironment(new CleanUp);

const std::vector<std::uint64_t> kDims = {61, 47, 1000};

/// Random tensor with values of every magnitude that float32 holds (so float32 stores and
/// float reads are exact where they should be) and some that it rounds.
SparseTensor<double> random_tensor(std::size_t nnz, std::uint64_t seed) {
  SparseTensor<double> x(kDims);
  CounterRng rng(seed, 3);
  index_t c[3];
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < 3; ++m) c[m] = static_cast<index_t>(rng.next_u64() % kDims[m]);
    double v = 0;
    switch (k % 4) {
      case 0:
        v = rng.normal();
        break;
      case 1:
        v = std::ldexp(rng.uniform() + 0.5, static_cast<int>(rng.next_u64() % 240) - 120);
        break;
      case 2:
        // float32 subnormals ([2^-141, 2^-139]: none rounds to 0, which the writer refuses)
        v = -std::ldexp(rng.uniform() + 0.5, -140);
        break;
      default:
        v = static_cast<double>(rng.next_u64() % 1000);
    }
    x.push_back(c, v);
  }
  return x;
}

H5WriteOptions wopts(std::uint64_t chunk, ValueType vt, int deflate = 0) {
  H5WriteOptions o;
  o.chunk_elems = chunk;
  o.value_type = vt;
  o.deflate = deflate;
  o.progress = false;
  return o;
}

/// A store with contiguous (unchunked) datasets and no checksums, as h5py might write it.
void write_contiguous(const std::string& path, const SparseTensor<double>& x, ValueType vt) {
  const h5::Handle f = h5::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(f.valid());
  auto attr = [&](const char* name, hid_t ftype, const h5::Handle& sp, hid_t mtype, const void* v) {
    const h5::Handle a = h5::attribute(H5Acreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT));
    test::h5::check(a.valid() && H5Awrite(a, mtype, v) >= 0, name);
  };
  auto attr_i64 = [&](const char* name, long long v) {
    attr(name, H5T_STD_I64LE, h5::space(H5Screate(H5S_SCALAR)), H5T_NATIVE_LLONG, &v);
  };
  {
    const h5::Handle t = h5::datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(t, std::strlen(kTensorStoreFormat));
    attr("format", t, h5::space(H5Screate(H5S_SCALAR)), t, kTensorStoreFormat);
  }
  attr_i64("format_version", kTensorStoreVersion);
  attr_i64("order", 3);
  {
    const hsize_t n = 3;
    attr("dims", H5T_STD_U64LE, h5::space(H5Screate_simple(1, &n, nullptr)), H5T_NATIVE_UINT64,
         x.dims.data());
    const auto nnz = static_cast<std::uint64_t>(x.nnz());
    attr("nnz", H5T_STD_U64LE, h5::space(H5Screate(H5S_SCALAR)), H5T_NATIVE_UINT64, &nnz);
  }
  const h5::Handle g = h5::group(H5Gcreate2(f, "coords", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  const hsize_t len = static_cast<hsize_t>(x.nnz());
  const h5::Handle sp = h5::space(H5Screate_simple(1, &len, nullptr));
  for (int m = 0; m < 3; ++m) {
    const std::string name = "mode" + std::to_string(m);
    const h5::Handle d = h5::dataset(
        H5Dcreate2(g, name.c_str(), H5T_STD_U32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.idx[m].data()), 0);
  }
  const h5::Handle d = h5::dataset(
      H5Dcreate2(f, "values", vt == ValueType::float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, sp,
                 H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.vals.data()), 0);
}

/// Recomputes the stored CRC of chunk k of /coords/mode<m> (a bad coordinate that a
/// writer checksummed: only the coordinate check can catch it).
void fix_checksum(const std::string& p, int m, std::uint64_t k) {
  const h5::Handle f = test::h5::open_rw(p);
  std::vector<std::uint32_t> v;
  {
    const h5::Handle d = test::h5::open_dataset(f, "/coords/mode" + std::to_string(m));
    const h5::Handle dcpl = h5::plist(H5Dget_create_plist(d));
    hsize_t C = 0;
    H5Pget_chunk(dcpl, 1, &C);
    const h5::Handle fs = h5::space(H5Dget_space(d));
    hsize_t len = 0;
    H5Sget_simple_extent_dims(fs, &len, nullptr);
    hsize_t at = k * C, n = std::min<hsize_t>(C, len - at);
    v.resize(n);
    const h5::Handle ms = h5::space(H5Screate_simple(1, &n, nullptr));
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, nullptr, &n, nullptr);
    test::h5::check(H5Dread(d, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, v.data()) >= 0, "read");
  }
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(v.data()), v.size() * sizeof(std::uint32_t)));
  const h5::Handle c = test::h5::open_dataset(f, "/checksums");
  const h5::Handle cs = h5::space(H5Dget_space(c));
  const hsize_t pos[2] = {static_cast<hsize_t>(m), k}, one[2] = {1, 1};
  H5Sselect_hyperslab(cs, H5S_SELECT_SET, pos, nullptr, one, nullptr);
  const h5::Handle m1 = h5::space(H5Screate_simple(2, one, nullptr));
  test::h5::check(H5Dwrite(c, H5T_NATIVE_UINT32, m1, cs, H5P_DEFAULT, &crc) >= 0, "write crc");
}

template <typename T>
struct Buffers {
  std::vector<std::vector<index_t>> idx;
  std::vector<T> vals;
  index_t* p[3];
  explicit Buffers(nnz_t n, unsigned char poison)
      : idx(3, std::vector<index_t>(static_cast<std::size_t>(n))),
        vals(static_cast<std::size_t>(n)) {
    if (n > 0) {  // memset of an empty vector's null data() is undefined
      for (auto& v : idx) std::memset(v.data(), poison, v.size() * sizeof(index_t));
      std::memset(vals.data(), poison, vals.size() * sizeof(T));
    }
    for (int m = 0; m < 3; ++m) p[m] = idx[static_cast<std::size_t>(m)].data();
  }
  bool same_bits(const Buffers& o) const {
    for (int m = 0; m < 3; ++m)
      if (idx[static_cast<std::size_t>(m)] != o.idx[static_cast<std::size_t>(m)]) return false;
    return vals.size() == o.vals.size() &&
           (vals.empty() || std::memcmp(vals.data(), o.vals.data(), vals.size() * sizeof(T)) == 0);
  }
};

/// read_direct against read() on `ranges`, bit for bit, with poisoned outputs (an element
/// left unwritten differs).
template <typename T>
void expect_same_reads(H5TensorReader& rd, const std::vector<std::pair<nnz_t, nnz_t>>& ranges,
                       int threads, const std::string& what) {
  for (const auto& [first, count] : ranges) {
    Buffers<T> want(count, 0xA5), got(count, 0x5A);
    rd.read(first, count, want.p, want.vals.data());
    rd.read_direct(first, count, got.p, got.vals.data(), threads);
    ASSERT_TRUE(got.same_bits(want))
        << what << ": range " << first << "+" << count << ", " << threads << " thread(s)";
  }
}

std::vector<std::pair<nnz_t, nnz_t>> ranges_of(nnz_t n, std::uint64_t chunk, std::uint64_t seed) {
  const auto C = static_cast<nnz_t>(chunk);
  std::vector<std::pair<nnz_t, nnz_t>> r = {
      {0, n},                     // everything
      {0, 0},                     // nothing
      {n - 1, 1},                 // the last element
      {C, 3 * C},                 // chunk-aligned both ends
      {C / 2, 2 * C},             // starts and ends inside chunks
      {3, C - 5},                 // inside one chunk
      {2 * C - 1, 2},             // across one chunk boundary
      {n - C - C / 3, C + C / 3}  // to the end, from inside a chunk
  };
  CounterRng rng(seed, 11);
  for (int t = 0; t < 12; ++t) {
    const auto first = static_cast<nnz_t>(rng.next_u64() % static_cast<std::uint64_t>(n));
    const auto count =
        static_cast<nnz_t>(rng.next_u64() % static_cast<std::uint64_t>(n - first + 1));
    r.push_back({first, count});
  }
  return r;
}

// ---------------------------------------------------------------------------------------

TEST(H5StoreDirect, BitwiseEqualToTheHdf5PathOnEveryLayout) {
  const std::uint64_t seed = test::fresh_seed();
  const SparseTensor<double> x = random_tensor(20011, seed);
  const std::uint64_t chunk = 1000;
  for (ValueType vt : {ValueType::float64, ValueType::float32}) {
    for (bool chunked : {true, false}) {
      const std::string h = fresh("direct.h5");
      if (chunked)
        write_h5(h, x, self(), {}, wopts(chunk, vt));
      else
        write_contiguous(h, x, vt);
      for (bool verify : {true, false}) {
        H5TensorReader rd(h, verify, 0);
        ASSERT_TRUE(rd.direct_read_available()) << rd.direct_read_fallback_reason();
        EXPECT_EQ(rd.info().has_checksums, chunked);
        const auto ranges = ranges_of(x.nnz(), chunk, seed);
        for (std::uint64_t piece :
             {std::uint64_t(8) << 20, std::uint64_t(4096), std::uint64_t(60)}) {
          // One task per dataset; per chunk (or 1 Ki elements); per chunk (or 15 elements).
          rd.set_direct_piece_bytes(piece);
          for (int threads : {1, 4}) {
            const std::string what = "seed " + std::to_string(seed) + ", " + to_string(vt) +
                                     (chunked ? " chunked" : " contiguous") +
                                     (verify ? ", verified" : "") + ", pieces of " +
                                     std::to_string(piece) + " bytes";
            expect_same_reads<double>(rd, ranges, threads, what + ", as double");
            expect_same_reads<float>(rd, ranges, threads, what + ", as float");
          }
        }
      }
      // The values are what was written (not only what read() gives).
      H5TensorReader rd(h);
      Buffers<double> all(x.nnz(), 0);
      rd.read_direct(0, x.nnz(), all.p, all.vals.data(), 4);
      for (int m = 0; m < 3; ++m) EXPECT_EQ(all.idx[m], x.idx[m]);
      for (std::size_t k = 0; k < x.vals.size(); ++k)
        ASSERT_EQ(all.vals[k], vt == ValueType::float32
                                   ? static_cast<double>(static_cast<float>(x.vals[k]))
                                   : x.vals[k])
            << k;
    }
  }
}

/// The message read() throws for [0, nnz), and read_direct's with 1 and 4 threads (small
/// pieces: the bad elements fall in different tasks).
template <typename T>
void expect_same_error(H5TensorReader& rd, const std::string& must_contain,
                       const std::string& what) {
  const nnz_t n = rd.info().nnz;
  std::string want;
  try {
    Buffers<T> b(n, 0);
    rd.read(0, n, b.p, b.vals.data());
  } catch (const InputError& e) {
    want = e.what();
  }
  ASSERT_FALSE(want.empty()) << what << ": read() found nothing";
  EXPECT_NE(want.find(must_contain), std::string::npos) << what << ": " << want;
  for (std::uint64_t piece : {std::uint64_t(8) << 20, std::uint64_t(512)}) {
    rd.set_direct_piece_bytes(piece);
    for (int threads : {1, 4}) {
      std::string got;
      try {
        Buffers<T> b(n, 0);
        rd.read_direct(0, n, b.p, b.vals.data(), threads);
      } catch (const InputError& e) {
        got = e.what();
      }
      EXPECT_EQ(got, want) << what << ", " << threads << " thread(s), pieces of " << piece;
    }
  }
}

TEST(H5StoreDirect, BadDataGivesTheSameErrorAsTheHdf5Path) {
  const std::uint64_t seed = test::fresh_seed();
  const SparseTensor<double> x = random_tensor(9000, seed);
  for (ValueType vt : {ValueType::float64, ValueType::float32}) {
    const std::string good = fresh("good.h5");
    write_h5(good, x, self(), {}, wopts(700, vt));
    const hid_t vtype = vt == ValueType::float32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    auto nan_at = [&](const std::string& p, hsize_t pos) {
      if (vt == ValueType::float32)
        test::h5::poke(p, "/values", pos, std::numeric_limits<float>::quiet_NaN(), vtype);
      else
        test::h5::poke(p, "/values", pos, std::numeric_limits<double>::quiet_NaN(), vtype);
    };
    const std::string tag = "seed " + std::to_string(seed) + ", " + to_string(vt);
    {
      // A coordinate out of range: a checksum error when verifying, else the coordinate.
      const std::string h = fresh("coord.h5");
      test::h5::copy(good, h);
      test::h5::poke<std::uint32_t>(h, "/coords/mode1", 5123, 47, H5T_NATIVE_UINT32);
      H5TensorReader verified(h), unverified(h, false);
      expect_same_error<double>(verified, "checksum mismatch in /coords/mode1 chunk 7", tag);
      expect_same_error<double>(unverified, "/coords/mode1[5123] = 47 is out of range", tag);
      expect_same_error<float>(unverified, "/coords/mode1[5123] = 47 is out of range", tag);
    }
    {
      const std::string h = fresh("nan.h5");
      test::h5::copy(good, h);
      nan_at(h, 8999);
      H5TensorReader verified(h), unverified(h, false);
      expect_same_error<double>(verified, "checksum mismatch in /values chunk 12", tag);
      expect_same_error<double>(unverified, "/values[8999] = nan", tag);
      expect_same_error<float>(unverified, "/values[8999] = nan", tag);
    }
    {
      // Several bad elements: the one read() meets first (mode 0 before mode 2 before the
      // values; the earlier position within a dataset).
      const std::string h = fresh("several.h5");
      test::h5::copy(good, h);
      nan_at(h, 10);
      test::h5::poke<std::uint32_t>(h, "/coords/mode2", 3, 1000, H5T_NATIVE_UINT32);
      test::h5::poke<std::uint32_t>(h, "/coords/mode0", 8000, 99, H5T_NATIVE_UINT32);
      test::h5::poke<std::uint32_t>(h, "/coords/mode0", 4000, 61, H5T_NATIVE_UINT32);
      H5TensorReader verified(h), unverified(h, false);
      expect_same_error<double>(verified, "checksum mismatch in /coords/mode0 chunk 5", tag);
      expect_same_error<double>(unverified, "/coords/mode0[4000] = 61", tag);
    }
    {
      // A checksummed bad coordinate early in mode 1 and a checksum error later in mode 1:
      // read() verifies a dataset's chunks before checking its coordinates.
      const std::string h = fresh("crc-then-coords.h5");
      test::h5::copy(good, h);
      test::h5::poke<std::uint32_t>(h, "/coords/mode1", 100, 50, H5T_NATIVE_UINT32);
      fix_checksum(h, 1, 0);
      test::h5::poke<std::uint32_t>(h, "/coords/mode1", 7100, (x.idx[1][7100] + 1) % 47,
                                    H5T_NATIVE_UINT32);
      H5TensorReader verified(h), unverified(h, false);
      expect_same_error<double>(verified, "checksum mismatch in /coords/mode1 chunk 10", tag);
      expect_same_error<double>(unverified, "/coords/mode1[100] = 50", tag);
    }
  }
}

TEST(H5StoreDirect, FloatReadsOfFloat64BeyondFloatRangeFailAlike) {
  SparseTensor<double> x = random_tensor(3000, 7);
  // Just above FLT_MAX (a plain cast rounds it to FLT_MAX; HDF5 gives Inf), and far above.
  const double above = static_cast<double>(FLT_MAX) * (1 + 1e-9);
  x.vals[2100] = above;
  x.vals[2900] = -1e300;
  const std::string h = fresh("huge.h5");
  write_h5(h, x, self(), {}, wopts(256, ValueType::float64));
  H5TensorReader rd(h);
  expect_same_error<float>(rd, "/values[2100] = inf", "float read of float64");
  // As double everything is fine and equal.
  expect_same_reads<double>(rd, {{0, x.nnz()}, {2000, 1000}}, 4, "double read");
  // Reads that avoid the bad values agree as float, bit for bit.
  expect_same_reads<float>(rd, {{0, 2100}, {2101, 799}}, 4, "float read");
}

TEST(H5StoreDirect, NonzerosOutsideTheirBlockFailAlike) {
  // A 2 x 2 x 1 grid (mode 0 cut at 30, mode 1 at 20); nonzeros sorted by block.
  SparseTensor<double> x = random_tensor(5000, 3);
  SparseTensor<double> s(x.dims);
  H5Partition part;
  part.grid = {2, 2, 1};
  part.cuts = {{0, 30, kDims[0]}, {0, 20, kDims[1]}, {0, kDims[2]}};
  part.offsets = {0};
  for (int b = 0; b < 4; ++b) {
    for (std::size_t k = 0; k < x.vals.size(); ++k) {
      if ((x.idx[0][k] >= 30) != (b / 2 == 1) || (x.idx[1][k] >= 20) != (b % 2 == 1)) continue;
      index_t c[3] = {x.idx[0][k], x.idx[1][k], x.idx[2][k]};
      s.push_back(c, x.vals[k]);
    }
    part.offsets.push_back(static_cast<std::uint64_t>(s.nnz()));
  }
  ASSERT_GT(part.offsets[1], 400u);
  const std::string h = fresh("blocks.h5");
  H5Header hd;
  hd.dims = s.dims;
  hd.nnz = s.nnz();
  {
    H5TensorWriter w(h, hd, self(), wopts(300, ValueType::float64));
    H5Piece pc;
    pc.count = s.nnz();
    for (int m = 0; m < 3; ++m) pc.idx[m] = s.idx[m].data();
    pc.vals = s.vals.data();
    w.write({pc});
    w.commit(&part);
  }
  {
    H5TensorReader rd(h);
    ASSERT_TRUE(rd.info().partition.has_value());
    expect_same_reads<double>(rd, ranges_of(s.nnz(), 300, 5), 4, "partitioned store");
  }
  // Block 0 gets a bad mode-1 coordinate early and a bad mode-0 one later, block 2 one in
  // mode 1: read() checks block by block, mode by mode, so it reports block 0's mode 0
  // (not the earliest position).
  test::h5::poke<std::uint32_t>(h, "/coords/mode1", 5, 33, H5T_NATIVE_UINT32);
  test::h5::poke<std::uint32_t>(h, "/coords/mode0", 390, 40, H5T_NATIVE_UINT32);
  test::h5::poke<std::uint32_t>(h, "/coords/mode1", static_cast<hsize_t>(part.offsets[2]) + 1, 25,
                                H5T_NATIVE_UINT32);
  H5TensorReader rd(h, false);
  expect_same_error<double>(
      rd, "nonzero 390 (/coords/mode0 = 40) is stored in block 0, whose mode-0 range is [0, 30)",
      "2 x 2 blocks");
}

TEST(H5StoreDirect, DeflatedStoresFallBack) {
  const SparseTensor<double> x = random_tensor(4000, 11);
  const std::string h = fresh("deflated.h5");
  write_h5(h, x, self(), {}, wopts(500, ValueType::float32, 3));
  {
    H5TensorReader rd(h);
    EXPECT_FALSE(rd.direct_read_available());
    EXPECT_NE(rd.direct_read_fallback_reason().find("compressed"), std::string::npos)
        << rd.direct_read_fallback_reason();
    expect_same_reads<double>(rd, ranges_of(x.nnz(), 500, 13), 4, "deflated");
    expect_same_reads<float>(rd, ranges_of(x.nnz(), 500, 13), 1, "deflated");
  }
  // The checks still apply (through the HDF5 path).
  test::h5::poke(h, "/values", 17, std::numeric_limits<float>::infinity(), H5T_NATIVE_FLOAT);
  H5TensorReader bad(h, false);
  expect_same_error<double>(bad, "/values[17] = inf", "deflated");
}

TEST(H5StoreDirect, ChecksCanBeTurnedOff) {
  const SparseTensor<double> x = random_tensor(3000, 17);
  const std::string h = fresh("unchecked.h5");
  write_h5(h, x, self(), {}, wopts(400, ValueType::float64));
  test::h5::poke<std::uint32_t>(h, "/coords/mode1", 1234, 4000, H5T_NATIVE_UINT32);
  H5TensorReader rd(h);
  Buffers<double> b(x.nnz(), 0);
  H5ReadChecks only_crc;
  only_crc.coordinates = false;
  EXPECT_THROW(rd.read_direct(0, x.nnz(), b.p, b.vals.data(), 2, only_crc), InputError);
  H5ReadChecks none;
  none.checksums = none.coordinates = false;
  rd.read_direct(0, x.nnz(), b.p, b.vals.data(), 2, none);
  EXPECT_EQ(b.idx[1][1234], 4000u);  // read as stored, unchecked
  EXPECT_EQ(b.idx[0], x.idx[0]);
}

TEST(H5StoreDirect, MeasureReadBandwidth) {
  const std::string p = fresh("blob.bin");
  {
    std::vector<char> block(std::size_t(1) << 20, 'x');
    std::ofstream f(p, std::ios::binary);
    for (int i = 0; i < 40; ++i) f.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  for (int threads : {1, 4}) {
    const double bw = measure_read_bandwidth(p, 0, threads);
    EXPECT_TRUE(std::isfinite(bw) && bw > 0) << bw;
    const double part = measure_read_bandwidth(p, std::uint64_t(5) << 20, threads);
    EXPECT_TRUE(std::isfinite(part) && part > 0) << part;
  }
  const std::string empty = fresh("empty.bin");
  { std::ofstream f(empty, std::ios::binary); }
  EXPECT_EQ(measure_read_bandwidth(empty, 0, 2), 0.0);
  try {
    measure_read_bandwidth(p + ".missing", 0, 1);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(p + ".missing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::io
