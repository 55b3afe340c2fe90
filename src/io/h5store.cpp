// HDF5 tensor store (see h5store.hpp for the layout and the contracts).
//
// Writing
// -------
// Sizes are known before anything is written (the writer's header carries the global nnz),
// so rank 0 creates the whole file up front: attributes (complete = 0), one chunked 1-D
// dataset per mode and one for the values. Without compression the chunks are allocated at
// creation (H5D_ALLOC_TIME_EARLY, never filled), rank 0 asks HDF5 for every chunk's file
// address (H5Dget_chunk_info_by_coord), closes the file and broadcasts the addresses; then
// every rank pwrite()s its nonzeros into the chunks, all ranks at once. An unfiltered chunk
// holds its elements as stored (little-endian uint32 / float64 / float32), so this is the
// same file HDF5 itself would write, without serialising the ranks through one library
// instance (a serial HDF5 build cannot open one file for writing from several processes).
// With compression (deflate > 0) the ranks take turns (rank order): each opens the file
// through HDF5, writes its hyperslabs and closes it. Either way no rank holds more than the
// pieces it passes in.
//
// Checksums: every rank computes the CRC-32 of the part of each chunk it writes; commit()
// gathers the parts on rank 0, checks that every position of every dataset was written
// exactly once (a hole or an overlap is a writer bug, reported, not stored), combines them
// per chunk (crc32_combine) and stores /checksums. Readers verify every chunk they touch,
// so bit rot, a truncated copy or a raw-data overwrite is reported instead of decomposed.
//
// Atomicity: the file is PATH.tmp-HOST_PID (io/output.hpp, rank 0's host and pid) until
// rank 0 sets complete = 1, fsyncs and renames it; any error (agreed by all ranks) removes
// the temporary file.
//
// Reading
// -------
// Every rank opens the file read-only with HDF5 (concurrent readers are fine in serial and
// parallel builds) and reads hyperslabs of its range. Ranges are read chunk-aligned where
// checksums are verified: whole chunks inside the range go straight into the caller's
// buffers, the chunks at the range ends through a staging buffer.
//
// Direct reads (read_direct, used by read_h5 and available to streaming): for unfiltered,
// allocated datasets the file offset of every chunk (or of the contiguous data) is looked
// up once through HDF5; then threads pread() pieces of the range straight into the
// caller's buffers (through a small staging buffer where the value type is converted or a
// chunk at a range end is read whole for its CRC) and check what they read. Errors get a
// key (check stage in read()'s order, then position) and the smallest is thrown, so the
// message is the one read() gives.
#include "io/h5store.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "io/output.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/timer.hpp"

static_assert(std::endian::native == std::endian::little,
              "the tensor store writes little-endian elements straight from memory");

namespace tessera::io {

using posix::errno_text;
using posix::pread_full;
using posix::pwrite_full;

std::string to_string(ValueType t) {
  return t == ValueType::float32 ? "float32" : "float64";
}

ValueType parse_value_type(const std::string& s) {
  if (s == "float64" || s == "double") return ValueType::float64;
  if (s == "float32" || s == "float") return ValueType::float32;
  throw InputError("bad value type '" + s + "': expected float64 or float32");
}

std::pair<nnz_t, nnz_t> H5Partition::block_range(int b) const {
  TESSERA_EXPECTS(b >= 0 && b < nblocks(), "block " << b << " of " << nblocks());
  const auto bb = static_cast<std::size_t>(b);
  return {static_cast<nnz_t>(offsets[bb]), static_cast<nnz_t>(offsets[bb + 1] - offsets[bb])};
}

std::vector<int> H5Partition::block_coords(int b) const {
  std::vector<int> c(grid.size(), 0);
  for (int n = static_cast<int>(grid.size()) - 1; n >= 0; --n) {
    c[static_cast<std::size_t>(n)] = b % grid[static_cast<std::size_t>(n)];
    b /= grid[static_cast<std::size_t>(n)];
  }
  return c;
}

namespace {

constexpr nnz_t kDefaultPiece = nnz_t(16) << 20;
constexpr std::uint64_t kMaxChunkElems = std::uint64_t(1) << 28;
constexpr std::uint64_t kNoError = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kStageBytes = std::size_t(64) << 20;
/// Direct reads: bytes per task (one pread, or one staged piece; the block check takes as
/// many coordinates per task).
constexpr std::uint64_t kDirectPieceBytes = std::uint64_t(8) << 20;

/// Runs body(t) for t = 0 .. n-1 on n threads (the caller is thread 0; n <= 0: one per
/// hardware thread). body must not throw. Fewer threads when the system refuses more.
void run_threads(int n, const std::function<void(int)>& body) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(n - 1));
  for (int t = 1; t < n; ++t) {
    try {
      pool.emplace_back(body, t);
    } catch (const std::system_error&) {
      break;  // the threads started share the work
    }
  }
  body(0);
  for (auto& th : pool) th.join();
}

int thread_count(int threads) {
  return threads > 0 ? threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// double -> float as HDF5's conversion does it: beyond the float range becomes +-Inf (a
/// plain cast rounds values just above FLT_MAX down to FLT_MAX).
inline float to_float_as_hdf5(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (v > kMax) return std::numeric_limits<float>::infinity();
  if (v < -kMax) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// ---------------------------------------------------------------------------------------
// HDF5 plumbing

/// Owns an HDF5 identifier.
class H5Id {
 public:
  H5Id() = default;
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  /// Closes now and reports failure (a file close flushes: errors matter).
  bool close() {
    const herr_t r = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return r >= 0;
  }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// Turns off HDF5's own error-stack printing in this thread (every public entry point
/// does this): failures become exceptions with our messages. Not restored on purpose:
/// HDF5 1.10 leaks internal free-list blocks after a failed metadata read (a corrupted
/// file) and, with printing on, reports "infinite loop closing library" at exit.
struct H5Quiet {
  H5Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (n == 0 && e && e->desc) *s = e->desc;
  return 0;
}

/// The most specific message on HDF5's error stack (e.g. "truncated file: eof = ..."),
/// in parentheses, or "".
std::string h5_detail() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &s);
  H5Eclear2(H5E_DEFAULT);
  return s.empty() ? std::string() : " (HDF5: " + s + ")";
}

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

std::string base_name(const std::string& path) {
  const auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

/// An InputError about the element at a global position (the earliest one is reported
/// when several ranks find problems).
class PositionedError : public InputError {
 public:
  PositionedError(nnz_t pos, const std::string& msg) : InputError(msg), pos_(pos) {}
  nnz_t position() const { return pos_; }

 private:
  nnz_t pos_;
};

/// H5ReadOptions::float_values: throws PositionedError at the first of v[0, n) (positions
/// first..) that float cannot represent (over 3.4e38, or a nonzero that rounds to 0).
void check_float_range(const std::string& path, nnz_t first, nnz_t n, const double* v) {
  for (nnz_t k = 0; k < n; ++k) {
    const auto f = static_cast<float>(v[k]);
    if (std::isfinite(f) && (f != 0.0f || v[k] == 0.0)) continue;
    std::ostringstream os;
    os << quoted(path) << ": /values[" << first + k << "] = " << v[k]
       << ": expected a value representable in single precision (--precision float: magnitudes "
       << static_cast<double>(std::numeric_limits<float>::denorm_min()) << " to "
       << static_cast<double>(std::numeric_limits<float>::max())
       << ", or 0); run with --precision double";
    throw PositionedError(first + k, os.str());
  }
}

/// Every rank passes its candidate (kNoError: none; 0: a file-level problem; else
/// position + 1); the earliest is thrown as CollectiveError on every rank.
void raise_earliest(const comm::Communicator& c, std::uint64_t key, const std::string& msg) {
  const std::uint64_t kmin = c.allreduce_value(key, comm::ReduceOp::min);
  if (kmin == kNoError) return;
  const std::int32_t cand = key == kmin ? c.rank() : c.size();
  const std::int32_t chosen = c.allreduce_value(cand, comm::ReduceOp::min);
  std::exception_ptr mine;
  if (c.rank() == chosen) mine = std::make_exception_ptr(InputError(msg));
  comm::raise_collectively(c, mine);
}

// ---- attributes ----

void write_attr_i64(hid_t loc, const char* name, long long v, const std::string& path) {
  H5Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

void write_attr_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v,
                     const std::string& path, bool scalar = false) {
  const hsize_t n = v.size();
  H5Id sp(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Id a(H5Acreate2(loc, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_UINT64, v.data()) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

void write_attr_string(hid_t loc, const char* name, const std::string& s, const std::string& path) {
  H5Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, s.empty() ? 1 : s.size());
  H5Tset_strpad(t, H5T_STR_NULLTERM);
  H5Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string buf = s.empty() ? std::string(1, '\0') : s;
  if (!a.valid() || H5Awrite(a, t, buf.data()) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

/// Whether an attribute exists; HDF5 failing to tell (a corrupted object header) is an
/// error, not "missing".
bool has_attr(hid_t loc, const char* name, const std::string& path) {
  const htri_t r = H5Aexists(loc, name);
  if (r < 0)
    throw InputError("cannot read the attributes of " + quoted(path) + h5_detail() +
                     ": the file is corrupted");
  return r > 0;
}

/// Whether a link (dataset or group) exists; failure to tell is an error.
bool has_link(hid_t loc, const std::string& name, const std::string& path) {
  // Component by component: H5Lexists fails (rather than answering no) when a group on the
  // way is missing.
  std::string prefix = name[0] == '/' ? "/" : "";
  std::size_t at = prefix.size();
  while (at < name.size()) {
    const std::size_t slash = std::min(name.find('/', at), name.size());
    prefix += name.substr(at, slash - at);
    const htri_t r = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (r < 0)
      throw InputError("cannot look up '" + prefix + "' in " + quoted(path) + h5_detail() +
                       ": the file is corrupted");
    if (r == 0) return false;
    prefix += '/';
    at = slash + 1;
  }
  return true;
}

std::string layout_error(const std::string& path, const std::string& what) {
  return quoted(path) + ": " + what;
}

/// A string attribute (fixed-length or variable-length, as h5py writes).
std::string read_attr_string(hid_t loc, const char* name, const std::string& path) {
  H5Id a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid())
    throw InputError(
        layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
  H5Id t(H5Aget_type(a), H5Tclose);
  H5Id sp(H5Aget_space(a), H5Sclose);
  if (H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
    throw InputError(layout_error(
        path, std::string("attribute '") + name + "' must be one string (found another type)"));
  std::string s;
  if (H5Tis_variable_str(t) > 0) {
    H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(t));
    char* p = nullptr;
    if (H5Aread(a, mt, &p) < 0)
      throw InputError(
          layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
    if (p) {
      s = p;
      H5free_memory(p);
    }
  } else {
    const std::size_t n = H5Tget_size(t);
    s.assign(n, '\0');
    H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, n);
    H5Tset_strpad(mt, H5Tget_strpad(t));
    if (H5Aread(a, mt, s.data()) < 0)
      throw InputError(
          layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
    const auto z = s.find('\0');
    if (z != std::string::npos) s.resize(z);
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return s;
}

/// Integer attribute values (any integer type), as int64 (signed) or uint64.
template <typename Int>
std::vector<Int> read_attr_ints(hid_t loc, const char* name, const std::string& path) {
  H5Id a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid())
    throw InputError(
        layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
  H5Id t(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(t) != H5T_INTEGER)
    throw InputError(layout_error(
        path, std::string("attribute '") + name + "' must be an integer (found another type)"));
  H5Id sp(H5Aget_space(a), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<Int> v(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  const hid_t mt = std::is_signed_v<Int> ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
  if (!v.empty() && H5Aread(a, mt, v.data()) < 0)
    throw InputError(
        layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
  return v;
}

long long read_attr_scalar(hid_t loc, const char* name, const std::string& path) {
  const auto v = read_attr_ints<std::int64_t>(loc, name, path);
  if (v.size() != 1)
    throw InputError(layout_error(path, std::string("attribute '") + name +
                                            "' must be one integer, found " +
                                            std::to_string(v.size()) + " values"));
  return v[0];
}

/// The attribute, or a message that it is missing.
void require_attr(hid_t loc, const char* name, const std::string& path, const char* meaning) {
  if (!has_attr(loc, name, path))
    throw InputError(layout_error(path, std::string("attribute '") + name + "' (" + meaning +
                                            ") is missing: not a complete " + kTensorStoreFormat +
                                            " store"));
}

// ---- datasets ----

/// What a dataset of the store must be.
enum class Kind { coords, values, index };

struct Dataset {
  H5Id id;
  std::string name;    ///< full path, for messages
  hsize_t length = 0;  ///< elements (1-D)
  hsize_t chunk = 0;   ///< chunk length; 0 = not chunked
  int deflate = 0;
  bool is_float32 = false;  ///< values stored as float32
};

std::string type_text(hid_t t) {
  const H5T_class_t cls = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  std::ostringstream os;
  switch (cls) {
    case H5T_INTEGER:
      os << (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") << 8 * size;
      break;
    case H5T_FLOAT:
      os << "float" << 8 * size;
      break;
    case H5T_STRING:
      os << "string";
      break;
    case H5T_COMPOUND:
      os << "compound";
      break;
    default:
      os << "a non-numeric type";
  }
  return os.str();
}

/// Unfiltered data has a known size: every allocated chunk holds chunk x `elem` bytes, a
/// contiguous or compact dataset length x `elem`. HDF5 1.10 trusts the sizes its chunk index
/// and layout message record, and a corrupted one makes H5Dread copy past its own buffer
/// (found by tests/fuzz/fuzz_h5store); refuse such a file before reading from it.
void check_storage_sizes(const Dataset& d, hid_t dcpl, std::size_t elem, const std::string& path) {
  if (d.length == 0 || H5Pget_nfilters(dcpl) != 0 || H5Pget_external_count(dcpl) != 0) return;
  const auto corrupt = [&](const std::string& what) {
    return InputError(layout_error(path, "dataset '" + d.name + "' " + what +
                                             ": the file is corrupted (its storage sizes "
                                             "disagree with its shape)"));
  };
  const hsize_t storage = H5Dget_storage_size(d.id);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    if (storage != 0 && storage != d.length * elem)
      throw corrupt("stores " + std::to_string(storage) + " bytes for " + std::to_string(d.length) +
                    " elements of " + std::to_string(elem) + " bytes");
    return;
  }
  if (layout != H5D_CHUNKED || d.chunk == 0) return;
  const hsize_t chunk_bytes = d.chunk * elem;
  const hsize_t nchunks = (d.length + d.chunk - 1) / d.chunk;
#if H5_VERSION_GE(1, 10, 5)
  // Every allocated chunk (unallocated ones read as fill values): by position when all are
  // allocated (the usual case, one index lookup each), else by index.
  H5Id space(H5Dget_space(d.id), H5Sclose);
  hsize_t allocated = 0;
  if (!space.valid() || H5Dget_num_chunks(d.id, space, &allocated) < 0)
    throw corrupt("has an unreadable chunk index" + h5_detail());
  if (allocated > nchunks)
    throw corrupt("has " + std::to_string(allocated) + " chunks for " + std::to_string(nchunks) +
                  " chunk positions");
  for (hsize_t k = 0; k < allocated; ++k) {
    hsize_t offset = k * d.chunk, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    const herr_t rc = allocated == nchunks
                          ? H5Dget_chunk_info_by_coord(d.id, &offset, &mask, &addr, &size)
                          : H5Dget_chunk_info(d.id, space, k, &offset, &mask, &addr, &size);
    if (rc < 0) throw corrupt("has an unreadable chunk index" + h5_detail());
    if (addr != HADDR_UNDEF && size != chunk_bytes)
      throw corrupt("has a chunk of " + std::to_string(size) + " bytes at element " +
                    std::to_string(offset) + ", expected " + std::to_string(chunk_bytes));
  }
#else
  if (storage != 0 && storage % chunk_bytes != 0)
    throw corrupt("stores " + std::to_string(storage) + " bytes, not whole chunks of " +
                  std::to_string(chunk_bytes));
#endif
}

/// Opens a 1-D dataset and checks its type; `expect_len` < 0: any length.
Dataset open_dataset(hid_t file, const std::string& name, Kind kind, const std::string& path,
                     long long expect_len, const char* len_meaning,
                     std::size_t chunk_cache = std::size_t(64) << 20) {
  Dataset d;
  d.name = name;
  const char* expected = kind == Kind::coords   ? "uint32 coordinates"
                         : kind == Kind::values ? "float64 or float32 values"
                                                : "unsigned integers";
  if (!has_link(file, name, path))
    throw InputError(layout_error(path, "dataset '" + name + "' (" + expected + ") is missing"));
  // Larger chunk cache than the default 1 MiB, so compressed chunks are not re-inflated.
  H5Id dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  H5Pset_chunk_cache(dapl, 521, chunk_cache, 1.0);
  d.id = H5Id(H5Dopen2(file, name.c_str(), dapl), H5Dclose);
  if (!d.id.valid())
    throw InputError(layout_error(
        path, "cannot open '" + name + "' as a dataset (expected " + expected + ")" + h5_detail()));
  H5Id t(H5Dget_type(d.id), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  bool ok = false;
  switch (kind) {
    case Kind::coords:
      ok = cls == H5T_INTEGER && size == 4 && H5Tget_sign(t) == H5T_SGN_NONE;
      break;
    case Kind::values:
      ok = cls == H5T_FLOAT && (size == 8 || size == 4);
      d.is_float32 = size == 4;
      break;
    case Kind::index:
      ok = cls == H5T_INTEGER && size <= 8;
      break;
  }
  if (!ok)
    throw InputError(layout_error(
        path, "dataset '" + name + "' has type " + type_text(t) + ", expected " + expected));
  H5Id sp(H5Dget_space(d.id), H5Sclose);
  const int nd = H5Sget_simple_extent_ndims(sp);
  if (nd != 1)
    throw InputError(layout_error(path, "dataset '" + name + "' has " + std::to_string(nd) +
                                            " dimensions, expected 1 (a flat array of " + expected +
                                            ")"));
  H5Sget_simple_extent_dims(sp, &d.length, nullptr);
  if (expect_len >= 0 && d.length != static_cast<hsize_t>(expect_len))
    throw InputError(layout_error(path, "dataset '" + name + "' has " + std::to_string(d.length) +
                                            " elements, but " + len_meaning + " is " +
                                            std::to_string(expect_len)));
  H5Id dcpl(H5Dget_create_plist(d.id), H5Pclose);
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t c = 0;
    H5Pget_chunk(dcpl, 1, &c);
    d.chunk = c;
    const int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0, cd[8] = {};
      std::size_t ncd = 8;
      char fname[64];
      const H5Z_filter_t f = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd,
                                            sizeof(fname), fname, nullptr);
      if (f == H5Z_FILTER_DEFLATE) d.deflate = ncd > 0 ? static_cast<int>(cd[0]) : 6;
    }
  }
  check_storage_sizes(d, dcpl, size, path);
  return d;
}

/// Whole 1-D integer dataset as uint64 (small index arrays of the partition).
std::vector<std::uint64_t> read_index_dataset(hid_t file, const std::string& name,
                                              const std::string& path, long long expect_len,
                                              const char* len_meaning) {
  Dataset d = open_dataset(file, name, Kind::index, path, expect_len, len_meaning);
  std::vector<std::uint64_t> v(static_cast<std::size_t>(d.length));
  if (!v.empty() && H5Dread(d.id, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw InputError(layout_error(path, "cannot read '" + name + "'" + h5_detail()));
  return v;
}

/// Reads elements [first, first + count) of a 1-D dataset as `mem_type`.
void h5_read_range(const Dataset& d, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                   const std::string& path) {
  if (count == 0) return;
  H5Id fs(H5Dget_space(d.id), H5Sclose);
  H5Id ms(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0 ||
      H5Dread(d.id, mem_type, ms, fs, H5P_DEFAULT, out) < 0)
    throw PositionedError(static_cast<nnz_t>(first),
                          quoted(path) + ": cannot read " + d.name + "[" + std::to_string(first) +
                              ".." + std::to_string(first + count) + ")" + h5_detail() +
                              ": the file is truncated or corrupted");
}

void h5_write_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, const void* in,
                    const std::string& what) {
  if (count == 0) return;
  H5Id fs(H5Dget_space(dset), H5Sclose);
  H5Id ms(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0 ||
      H5Dwrite(dset, mem_type, ms, fs, H5P_DEFAULT, in) < 0)
    throw InputError("cannot write " + what + h5_detail());
}

std::string dataset_name(int d, int order) {
  return d < order ? "/coords/mode" + std::to_string(d) : std::string("/values");
}

std::uint64_t div_up(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

// =======================================================================================
// Detection

bool is_hdf5_file(const std::string& path) {
  // O_NONBLOCK: a FIFO with no writer must not block the open (it is then not HDF5).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  bool found = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    static const unsigned char kSig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    const auto size = static_cast<std::uint64_t>(st.st_size);
    // The superblock is at 0 or, after a user block, at 512, 1024, 2048, ...
    for (std::uint64_t off = 0; off + 8 <= size && !found; off = off == 0 ? 512 : off * 2) {
      unsigned char b[8];
      if (::pread(fd, b, 8, static_cast<off_t>(off)) != 8) break;
      found = std::memcmp(b, kSig, 8) == 0;
    }
  }
  ::close(fd);
  return found;
}

bool is_hdf5_file(const std::string& path, const comm::Communicator& c) {
  std::int32_t yes = c.rank() == 0 && is_hdf5_file(path) ? 1 : 0;
  c.broadcast(&yes, 1, 0);
  return yes != 0;
}

bool has_h5_extension(const std::string& path) {
  std::string ext;
  const auto dot = path.find_last_of('.');
  if (dot != std::string::npos && path.find('/', dot) == std::string::npos)
    ext = path.substr(dot + 1);
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "h5" || ext == "hdf5";
}

bool is_tensor_store(const std::string& path, const comm::Communicator& c) {
  return has_h5_extension(path) || is_hdf5_file(path, c);
}

// =======================================================================================
// Reader

struct H5TensorReader::Impl {
  H5TensorInfo info;
  bool verify = true;
  H5Id file;
  std::vector<Dataset> ds;         // order coordinate datasets, then the values
  std::vector<std::uint32_t> crc;  // [dataset][chunk], when verifying
  std::uint64_t nchunks = 0;
  std::vector<unsigned char> stage;  // whole chunks at range ends / for type conversion

  const std::string& path() const { return info.path; }
  int order() const { return info.order; }

  std::size_t chunk_cache = std::size_t(64) << 20;
  void open(const std::string& p, bool verify_checksums);
  void read_partition();
  std::size_t stored_size(int d) const {
    return d < order() ? 4 : (ds[static_cast<std::size_t>(d)].is_float32 ? 4 : 8);
  }
  hid_t stored_type(int d) const {
    return d < order() ? H5T_NATIVE_UINT32
                       : (ds[static_cast<std::size_t>(d)].is_float32 ? H5T_NATIVE_FLOAT
                                                                     : H5T_NATIVE_DOUBLE);
  }
  void verify_chunk(int d, std::uint64_t k, const void* p) const;
  /// crc false: no checksum verification (else: when verifying and the store has them).
  void read_range(int d, nnz_t first, nnz_t count, hid_t out_type, std::size_t out_size, void* out,
                  bool crc = true);
  void check_coords(int mode, nnz_t first, nnz_t count, const index_t* v) const;
  template <typename T>
  void check_values(nnz_t first, nnz_t count, const T* v) const;
  /// A nonzero outside its block's index ranges.
  struct BlockError {
    std::uint64_t block = 0, pos = 0, lo = 0, hi = 0;
    int mode = 0;
    index_t value = 0;
  };
  /// The first (block, then mode, then position) nonzero of [from, to) outside its block;
  /// idx[n][0] is nonzero idx_first.
  std::optional<BlockError> find_block_error(std::uint64_t from, std::uint64_t to,
                                             std::uint64_t idx_first,
                                             const index_t* const* idx) const;
  PositionedError block_error(const BlockError& e) const;
  void check_blocks(nnz_t first, nnz_t count, const index_t* const* idx) const;
  /// read() restricted to `checks`, through HDF5 (one thread).
  template <typename T>
  void read_checked(nnz_t first, nnz_t count, index_t* const* idx, T* vals,
                    const H5ReadChecks& checks);

  // ---- direct reads ----
  struct DirectLayout {
    std::uint64_t seg = 1;            ///< elements per segment: the chunk length, or nnz
    std::vector<std::uint64_t> addr;  ///< file offset of every segment
  };
  /// Held by read_direct around every HDF5 call, so that several threads may call it (the
  /// tier-3 prefetch threads): only the preads of the direct path run side by side.
  std::mutex hdf5_mutex;
  int direct_state = 0;  ///< 0: not looked up yet; 1: available; -1: fall back
  std::uint64_t direct_piece_bytes = kDirectPieceBytes;
  std::string direct_why;
  std::vector<DirectLayout> direct;  ///< per dataset (modes, then values)
  int fd = -1;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
  void init_direct();
  template <typename T>
  void read_direct(nnz_t first, nnz_t count, index_t* const* idx, T* vals, int threads,
                   const H5ReadChecks& checks);
  /// Reads the stored elements [a, b) of dataset d (a task of read_direct) into `out`
  /// (element `first` of the range at out), verifying whole chunks when `crc`.
  template <typename T>
  void direct_piece(int d, std::uint64_t first, std::uint64_t a, std::uint64_t b, void* out,
                    bool crc, std::vector<unsigned char>& stage) const;
};

void H5TensorReader::Impl::open(const std::string& p, bool verify_checksums) {
  info.path = p;
  verify = verify_checksums;
  const std::string& path = info.path;
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw InputError(path + ": cannot open: " + errno_text(errno));
    if (!S_ISREG(st.st_mode))  // a FIFO or device: refused before anything opens it
      throw InputError(posix::not_regular_message(path, st.st_mode, "an .h5 file"));
    info.file_bytes = static_cast<std::uint64_t>(st.st_size);
  }
  if (!is_hdf5_file(path))
    throw InputError(quoted(path) +
                     " is not an HDF5 file (no HDF5 signature; truncated, or not a tensor store)");
  // Strong close: closing the file also closes whatever a failed call left open in it.
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
  file = H5Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!file.valid())
    throw InputError("cannot open " + quoted(path) + " as an HDF5 file" + h5_detail() +
                     ": the file is truncated or corrupted");

  // Format and version first: they say what the rest must be.
  if (!has_attr(file, "format", path))
    throw InputError(quoted(path) +
                     " is not a Tessera tensor store: attribute 'format' is "
                     "missing (expected format '" +
                     std::string(kTensorStoreFormat) + "')");
  const std::string fmt = read_attr_string(file, "format", path);
  if (fmt != kTensorStoreFormat) {
    std::string hint;
    if (fmt == "tessera-kruskal" || fmt == "tessera-tucker")
      hint = " (a decomposition model written by --out, not a tensor)";
    throw InputError(quoted(path) + " has format '" + fmt + "'" + hint + ", expected '" +
                     kTensorStoreFormat + "'");
  }
  require_attr(file, "format_version", path, "format version");
  const long long ver = read_attr_scalar(file, "format_version", path);
  if (ver != kTensorStoreVersion)
    throw InputError(
        quoted(path) + ": format_version " + std::to_string(ver) +
        (ver > kTensorStoreVersion ? " is newer than this tessera reads" : " is invalid") +
        " (expected " + std::to_string(kTensorStoreVersion) + ")");
  info.format_version = static_cast<int>(ver);
  if (has_attr(file, "complete", path) && read_attr_scalar(file, "complete", path) != 1)
    throw InputError(quoted(path) +
                     " was not completely written (attribute complete = 0: an interrupted "
                     "write?); write it again");

  require_attr(file, "order", path, "number of modes");
  const long long order = read_attr_scalar(file, "order", path);
  if (order < 1 || order > kMaxOrder)
    throw InputError(layout_error(path, "attribute order = " + std::to_string(order) +
                                            ", expected 1 to " + std::to_string(kMaxOrder)));
  info.order = static_cast<int>(order);
  require_attr(file, "dims", path, "mode lengths");
  info.dims = read_attr_ints<std::uint64_t>(file, "dims", path);
  if (info.dims.size() != static_cast<std::size_t>(order))
    throw InputError(layout_error(path, "attribute 'dims' has " + std::to_string(info.dims.size()) +
                                            " entries, but order = " + std::to_string(order)));
  for (std::size_t n = 0; n < info.dims.size(); ++n)
    if (info.dims[n] < 1 || info.dims[n] > (std::uint64_t(1) << 32))
      throw InputError(layout_error(path, "attribute dims[" + std::to_string(n) +
                                              "] = " + std::to_string(info.dims[n]) +
                                              ", expected 1 to 2^32"));
  require_attr(file, "nnz", path, "number of nonzeros");
  const auto nnzv = read_attr_ints<std::uint64_t>(file, "nnz", path);
  if (nnzv.size() != 1 || nnzv[0] > static_cast<std::uint64_t>(std::numeric_limits<nnz_t>::max()))
    throw InputError(layout_error(path, "attribute 'nnz' must be one count"));
  info.nnz = static_cast<nnz_t>(nnzv[0]);
  if (has_attr(file, "index_base", path)) {
    const long long b = read_attr_scalar(file, "index_base", path);
    if (b != 0)
      throw InputError(layout_error(
          path, "attribute index_base = " + std::to_string(b) +
                    ": stored coordinates must be 0-based (index_base 0) in format version 1"));
  }
  if (has_attr(file, "source_index_base", path))
    info.source_index_base = static_cast<int>(read_attr_scalar(file, "source_index_base", path));
  if (has_attr(file, "has_duplicates", path))
    info.has_duplicates = static_cast<int>(read_attr_scalar(file, "has_duplicates", path));
  if (has_attr(file, "source", path)) info.source = read_attr_string(file, "source", path);

  // Datasets: one per mode, exactly, and the values.
  if (!has_link(file, "coords", path))
    throw InputError(
        layout_error(path, "group '/coords' (one uint32 dataset per mode) is missing"));
  {
    H5Id g(H5Gopen2(file, "coords", H5P_DEFAULT), H5Gclose);
    H5G_info_t gi{};
    if (!g.valid() || H5Gget_info(g, &gi) < 0)
      throw InputError(layout_error(path, "'/coords' is not a group" + h5_detail()));
    if (gi.nlinks != static_cast<hsize_t>(order))
      throw InputError(layout_error(path, "'/coords' holds " + std::to_string(gi.nlinks) +
                                              " objects, but order = " + std::to_string(order) +
                                              " (expected mode0..mode" + std::to_string(order - 1) +
                                              ")"));
  }
  const std::string nnz_text = "attribute nnz";
  for (int n = 0; n < order; ++n)
    ds.push_back(open_dataset(file, dataset_name(n, info.order), Kind::coords, path, info.nnz,
                              nnz_text.c_str(), chunk_cache));
  ds.push_back(
      open_dataset(file, "/values", Kind::values, path, info.nnz, nnz_text.c_str(), chunk_cache));
  info.value_type = ds.back().is_float32 ? ValueType::float32 : ValueType::float64;
  if (has_attr(file, "value_type", path)) {
    const std::string vt = read_attr_string(file, "value_type", path);
    if (vt != to_string(info.value_type))
      throw InputError(layout_error(path, "attribute value_type = '" + vt +
                                              "' but dataset '/values' holds " +
                                              to_string(info.value_type)));
  }
  info.chunk_elems = ds.back().chunk;
  info.deflate = ds.back().deflate;

  // Checksums: per chunk of equal-length chunks.
  if (has_link(file, "checksums", path)) {
    info.has_checksums = true;
    for (const auto& d : ds)
      if (d.chunk == 0 || d.chunk != info.chunk_elems)
        throw InputError(
            layout_error(path, "'/checksums' is present but the datasets are not chunked alike ('" +
                                   d.name + "' has chunk length " + std::to_string(d.chunk) +
                                   ", '/values' " + std::to_string(info.chunk_elems) + ")"));
    nchunks = div_up(static_cast<std::uint64_t>(info.nnz), info.chunk_elems);
    H5Id c(H5Dopen2(file, "checksums", H5P_DEFAULT), H5Dclose);
    if (!c.valid()) throw InputError(layout_error(path, "cannot open '/checksums'" + h5_detail()));
    H5Id t(H5Dget_type(c), H5Tclose);
    H5Id sp(H5Dget_space(c), H5Sclose);
    hsize_t shape[2] = {0, 0};
    const int nd = H5Sget_simple_extent_ndims(sp);
    if (nd == 2) H5Sget_simple_extent_dims(sp, shape, nullptr);
    if (H5Tget_class(t) != H5T_INTEGER || nd != 2 || shape[0] != static_cast<hsize_t>(order + 1) ||
        shape[1] != nchunks)
      throw InputError(layout_error(
          path, "'/checksums' must be uint32[" + std::to_string(order + 1) + "][" +
                    std::to_string(nchunks) + "] (one CRC-32 per chunk of each dataset), found " +
                    type_text(t) + " with " + std::to_string(nd) + " dimensions [" +
                    std::to_string(shape[0]) + "][" + std::to_string(shape[1]) + "]"));
    if (verify) {
      crc.resize(static_cast<std::size_t>((order + 1) * nchunks));
      if (!crc.empty() &&
          H5Dread(c, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, crc.data()) < 0)
        throw InputError(layout_error(path, "cannot read '/checksums'" + h5_detail() +
                                                ": the file is truncated or corrupted"));
    }
  }
  if (has_link(file, "partition", path)) read_partition();
}

void H5TensorReader::Impl::read_partition() {
  const std::string& path = info.path;
  const int N = order();
  H5Partition part;
  const auto g = read_index_dataset(file, "/partition/grid", path, N, "attribute order");
  std::uint64_t nblocks = 1;
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (g[n] < 1)
      throw InputError(layout_error(
          path, "/partition/grid[" + std::to_string(n) + "] = 0, expected at least 1"));
    nblocks *= g[n];
    if (nblocks > (std::uint64_t(1) << 30))
      throw InputError(layout_error(path, "/partition/grid has more than 2^30 blocks"));
    part.grid.push_back(static_cast<int>(g[n]));
  }
  part.offsets =
      read_index_dataset(file, "/partition/offsets", path, static_cast<long long>(nblocks + 1),
                         "the product of /partition/grid plus 1");
  if (part.offsets.front() != 0 || part.offsets.back() != static_cast<std::uint64_t>(info.nnz))
    throw InputError(layout_error(
        path, "/partition/offsets must run from 0 to nnz = " + std::to_string(info.nnz) +
                  ", found " + std::to_string(part.offsets.front()) + " .. " +
                  std::to_string(part.offsets.back())));
  for (std::size_t b = 0; b + 1 < part.offsets.size(); ++b)
    if (part.offsets[b + 1] < part.offsets[b])
      throw InputError(layout_error(
          path, "/partition/offsets decrease at block " + std::to_string(b) + " (" +
                    std::to_string(part.offsets[b]) + " then " +
                    std::to_string(part.offsets[b + 1]) + "): expected non-decreasing"));
  for (int n = 0; n < N; ++n) {
    const std::string name = "/partition/cuts/mode" + std::to_string(n);
    auto cut = read_index_dataset(file, name, path, part.grid[static_cast<std::size_t>(n)] + 1LL,
                                  "/partition/grid[n] plus 1");
    const std::uint64_t dim = info.dims[static_cast<std::size_t>(n)];
    bool ok = cut.front() == 0 && cut.back() == dim;
    for (std::size_t k = 0; k + 1 < cut.size(); ++k) ok = ok && cut[k] <= cut[k + 1];
    if (!ok)
      throw InputError(layout_error(path, name + " must rise from 0 to dims[" + std::to_string(n) +
                                              "] = " + std::to_string(dim)));
    part.cuts.push_back(std::move(cut));
  }
  info.partition = std::move(part);
}

void H5TensorReader::Impl::verify_chunk(int d, std::uint64_t k, const void* p) const {
  const std::uint64_t C = info.chunk_elems;
  const std::uint64_t first = k * C;
  const std::uint64_t len =
      std::min<std::uint64_t>(C, static_cast<std::uint64_t>(info.nnz) - first);
  const auto got = static_cast<std::uint32_t>(
      crc32_z(0, static_cast<const Bytef*>(p), static_cast<z_size_t>(len * stored_size(d))));
  const std::uint32_t want =
      crc[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * nchunks + k)];
  if (got != want) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%08x, expected 0x%08x", got, want);
    throw PositionedError(
        static_cast<nnz_t>(first),
        quoted(path()) + ": checksum mismatch in " + dataset_name(d, order()) + " chunk " +
            std::to_string(k) + " (nonzeros " + std::to_string(first) + ".." +
            std::to_string(first + len) + "): CRC-32 " + buf +
            "; the file is corrupted (or was modified without updating /checksums)");
  }
}

void H5TensorReader::Impl::read_range(int d, nnz_t first_in, nnz_t count_in, hid_t out_type,
                                      std::size_t out_size, void* out, bool crc) {
  if (count_in <= 0) return;
  const Dataset& dset = ds[static_cast<std::size_t>(d)];
  const auto first = static_cast<std::uint64_t>(first_in);
  const auto end = first + static_cast<std::uint64_t>(count_in);
  if (!crc || !verify || !info.has_checksums) {
    h5_read_range(dset, first, end - first, out_type, out, path());
    return;
  }
  const std::size_t ss = stored_size(d);
  const bool same = H5Tequal(out_type, stored_type(d)) > 0;
  const std::uint64_t C = info.chunk_elems;
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  // Positions before whole_end that start a chunk start a chunk wholly inside the range.
  const std::uint64_t whole_end = end == nnz ? end : (end / C) * C;
  auto* o = static_cast<unsigned char*>(out);
  std::uint64_t pos = first;
  while (pos < end) {
    if (same && pos % C == 0 && pos < whole_end) {
      // Whole chunks straight into the caller's buffer, verified in place.
      h5_read_range(dset, pos, whole_end - pos, out_type, o + (pos - first) * out_size, path());
      for (std::uint64_t k = pos / C; k * C < whole_end; ++k)
        verify_chunk(d, k, o + (k * C - first) * out_size);
      pos = whole_end;
      continue;
    }
    // Whole chunks through the staging buffer: the partial chunks at the ends, or all of
    // them when the stored type differs from the caller's.
    const std::uint64_t k0 = pos / C;
    const std::uint64_t group = same ? 1 : std::max<std::uint64_t>(1, kStageBytes / (C * ss));
    const std::uint64_t k1 = std::min(div_up(end, C), k0 + group);  // chunks [k0, k1)
    const std::uint64_t s0 = k0 * C, s1 = std::min(k1 * C, nnz);
    if (stage.size() < (s1 - s0) * ss) stage.resize((s1 - s0) * ss);
    h5_read_range(dset, s0, s1 - s0, stored_type(d), stage.data(), path());
    for (std::uint64_t k = k0; k < k1; ++k) verify_chunk(d, k, stage.data() + (k * C - s0) * ss);
    const std::uint64_t stop = std::min(end, s1);
    if (same) {
      std::memcpy(o + (pos - first) * out_size, stage.data() + (pos - s0) * ss, (stop - pos) * ss);
    } else {
      H5Id mt(H5Tcopy(stored_type(d)), H5Tclose);
      // Convert in place in a copy of the part (H5Tconvert needs room for the larger type).
      std::vector<unsigned char> tmp((stop - pos) * std::max(ss, out_size));
      std::memcpy(tmp.data(), stage.data() + (pos - s0) * ss, (stop - pos) * ss);
      if (H5Tconvert(stored_type(d), out_type, stop - pos, tmp.data(), nullptr, H5P_DEFAULT) < 0)
        throw InputError(quoted(path()) + ": cannot convert " + dset.name + h5_detail());
      std::memcpy(o + (pos - first) * out_size, tmp.data(), (stop - pos) * out_size);
    }
    pos = stop;
  }
}

void H5TensorReader::Impl::check_coords(int mode, nnz_t first, nnz_t count,
                                        const index_t* v) const {
  const std::uint64_t dim = info.dims[static_cast<std::size_t>(mode)];
  if (dim > std::numeric_limits<index_t>::max()) return;  // 2^32: every uint32 fits
  const auto n = static_cast<std::size_t>(count);
  index_t mx = 0;
#pragma omp simd reduction(max : mx)
  for (std::size_t k = 0; k < n; ++k) mx = std::max(mx, v[k]);
  if (n == 0 || mx < dim) return;
  std::size_t k = 0;
  while (v[k] < dim) ++k;
  throw PositionedError(first + static_cast<nnz_t>(k),
                        quoted(path()) + ": " + dataset_name(mode, order()) + "[" +
                            std::to_string(first + static_cast<nnz_t>(k)) +
                            "] = " + std::to_string(v[k]) + " is out of range: attribute dims[" +
                            std::to_string(mode) + "] = " + std::to_string(dim) +
                            " (coordinates are 0-based); the attributes disagree with the data");
}

template <typename T>
void H5TensorReader::Impl::check_values(nnz_t first, nnz_t count, const T* v) const {
  const auto n = static_cast<std::size_t>(count);
  for (std::size_t k = 0; k < n; ++k) {
    if (!std::isfinite(v[k])) {
      std::ostringstream os;
      os << quoted(path()) << ": /values[" << first + static_cast<nnz_t>(k) << "] = " << v[k]
         << ": expected finite values (NaN and Inf are not allowed)";
      if (std::is_same_v<T, float> && info.value_type == ValueType::float64)
        os << " or values in the float32 range of this read (read in double precision)";
      throw PositionedError(first + static_cast<nnz_t>(k), os.str());
    }
  }
}

std::optional<H5TensorReader::Impl::BlockError> H5TensorReader::Impl::find_block_error(
    std::uint64_t from, std::uint64_t end, std::uint64_t idx_first,
    const index_t* const* idx) const {
  const H5Partition& p = *info.partition;
  const auto& off = p.offsets;
  std::uint64_t pos = from;
  // The block holding `pos` (the last of equal offsets: empty blocks hold nothing).
  auto b =
      static_cast<std::size_t>(std::upper_bound(off.begin(), off.end(), pos) - off.begin()) - 1;
  for (; pos < end && b + 1 < off.size(); ++b) {
    const std::uint64_t stop = std::min(end, off[b + 1]);
    if (stop <= pos) continue;
    const std::vector<int> bc = p.block_coords(static_cast<int>(b));
    for (int n = 0; n < order(); ++n) {
      const auto& cut = p.cuts[static_cast<std::size_t>(n)];
      const std::uint64_t lo = cut[static_cast<std::size_t>(bc[static_cast<std::size_t>(n)])];
      const std::uint64_t hi = cut[static_cast<std::size_t>(bc[static_cast<std::size_t>(n)]) + 1];
      const index_t* v = idx[n] + (pos - idx_first);
      for (std::uint64_t k = 0; k < stop - pos; ++k) {
        if (v[k] >= lo && v[k] < hi) continue;
        return BlockError{b, pos + k, lo, hi, n, v[k]};
      }
    }
    pos = stop;
  }
  return std::nullopt;
}

PositionedError H5TensorReader::Impl::block_error(const BlockError& e) const {
  const auto at = static_cast<nnz_t>(e.pos);
  return PositionedError(at, quoted(path()) + ": nonzero " + std::to_string(at) + " (" +
                                 dataset_name(e.mode, order()) + " = " + std::to_string(e.value) +
                                 ") is stored in block " + std::to_string(e.block) +
                                 ", whose mode-" + std::to_string(e.mode) + " range is [" +
                                 std::to_string(e.lo) + ", " + std::to_string(e.hi) +
                                 "): /partition disagrees with the data");
}

void H5TensorReader::Impl::check_blocks(nnz_t first, nnz_t count, const index_t* const* idx) const {
  const auto f = static_cast<std::uint64_t>(first);
  if (const auto e = find_block_error(f, f + static_cast<std::uint64_t>(count), f, idx))
    throw block_error(*e);
}

template <typename T>
void H5TensorReader::Impl::read_checked(nnz_t first, nnz_t count, index_t* const* idx, T* vals,
                                        const H5ReadChecks& checks) {
  for (int n = 0; n < order(); ++n) {
    read_range(n, first, count, H5T_NATIVE_UINT32, sizeof(index_t), idx[n], checks.checksums);
    if (checks.coordinates) check_coords(n, first, count, idx[n]);
  }
  if (info.partition && checks.blocks) check_blocks(first, count, idx);
  read_range(order(), first, count,
             std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, sizeof(T), vals,
             checks.checksums);
  if (checks.values) check_values(first, count, vals);
}

H5TensorReader::H5TensorReader(const std::string& path, bool verify_checksums,
                               std::size_t chunk_cache_bytes)
    : impl_(std::make_unique<Impl>()) {
  const H5Quiet quiet;
  impl_->chunk_cache = chunk_cache_bytes;
  impl_->open(path, verify_checksums);
}

H5TensorReader::~H5TensorReader() = default;

const H5TensorInfo& H5TensorReader::info() const {
  return impl_->info;
}

template <typename T>
void H5TensorReader::read(nnz_t first, nnz_t count, index_t* const* idx, T* vals) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  const H5Quiet quiet;
  Impl& m = *impl_;
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  m.read_checked(first, count, idx, vals, H5ReadChecks{});
}

template void H5TensorReader::read<double>(nnz_t, nnz_t, index_t* const*, double*);
template void H5TensorReader::read<float>(nnz_t, nnz_t, index_t* const*, float*);

void H5TensorReader::read_mode(int mode, nnz_t first, nnz_t count, index_t* out) {
  const H5Quiet quiet;
  Impl& m = *impl_;
  TESSERA_EXPECTS(mode >= 0 && mode < m.order(), "mode " << mode);
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  m.read_range(mode, first, count, H5T_NATIVE_UINT32, sizeof(index_t), out);
  m.check_coords(mode, first, count, out);
}

void H5TensorReader::read(nnz_t first, nnz_t count, SparseTensor<double>* out) {
  const int N = impl_->order();
  if (out->order() == 0) *out = SparseTensor<double>(impl_->info.dims);
  TESSERA_EXPECTS(out->order() == N, "appending to a tensor of order " << out->order());
  const auto old = static_cast<std::size_t>(out->nnz());
  const auto n = static_cast<std::size_t>(count);
  index_t* p[kMaxOrder];
  for (int m = 0; m < N; ++m) {
    out->idx[static_cast<std::size_t>(m)].resize(old + n);
    p[m] = out->idx[static_cast<std::size_t>(m)].data() + old;
  }
  out->vals.resize(old + n);
  read(first, count, p, out->vals.data() + old);
}

template <typename T>
void H5TensorReader::read_block(int block, nnz_t first, nnz_t count, index_t* const* idx, T* vals) {
  Impl& m = *impl_;
  TESSERA_EXPECTS(m.info.partition.has_value(), "the store has no partition");
  const H5Partition& part = *m.info.partition;
  const auto [b0, bn] = part.block_range(block);
  TESSERA_EXPECTS(first >= 0 && count >= 0 && first + count <= bn,
                  "range [" << first << ", " << first + count << ") of block " << block << " with "
                            << bn << " nonzeros");
  read(b0 + first, count, idx, vals);  // checks the block's index ranges too
}

template void H5TensorReader::read_block<double>(int, nnz_t, nnz_t, index_t* const*, double*);
template void H5TensorReader::read_block<float>(int, nnz_t, nnz_t, index_t* const*, float*);

// ---- direct reads ----

void H5TensorReader::Impl::init_direct() {
  if (direct_state != 0) return;
  direct_state = -1;
#if !H5_VERSION_GE(1, 10, 5)
  direct_why = "this HDF5 (older than 1.10.5) cannot report chunk addresses";
#else
  {
    H5Id fcpl(H5Fget_create_plist(file), H5Pclose);
    hsize_t user_block = 0;
    if (!fcpl.valid() || H5Pget_userblock(fcpl, &user_block) < 0) {
      direct_why = "cannot read the file's creation properties" + h5_detail();
      return;
    }
    if (user_block != 0) {
      direct_why = "the file starts with a user block";
      return;
    }
  }
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  std::vector<DirectLayout> lay(ds.size());
  for (std::size_t d = 0; d < ds.size(); ++d) {
    const Dataset& dset = ds[d];
    const std::size_t s = stored_size(static_cast<int>(d));
    H5Id t(H5Dget_type(dset.id), H5Tclose);
    const hid_t want = static_cast<int>(d) < order()
                           ? H5T_STD_U32LE
                           : (dset.is_float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
    if (!t.valid() || H5Tequal(t, want) <= 0) {
      direct_why = dset.name + " is not stored as little-endian " + type_text(want);
      return;
    }
    if (nnz == 0) continue;
    H5Id dcpl(H5Dget_create_plist(dset.id), H5Pclose);
    const H5D_layout_t layout = dcpl.valid() ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    DirectLayout& L = lay[d];
    if (layout == H5D_CONTIGUOUS) {
      const haddr_t a = H5Pget_external_count(dcpl) == 0 ? H5Dget_offset(dset.id) : HADDR_UNDEF;
      if (a == HADDR_UNDEF) {
        direct_why = dset.name + " has no storage in the file (unwritten, or external)";
        return;
      }
      L.seg = nnz;
      L.addr = {static_cast<std::uint64_t>(a)};
    } else if (layout == H5D_CHUNKED) {
      if (H5Pget_nfilters(dcpl) != 0) {
        direct_why = dset.name + " is compressed (or otherwise filtered)";
        return;
      }
      L.seg = dset.chunk;
      L.addr.resize(div_up(nnz, L.seg));
      for (std::uint64_t k = 0; k < L.addr.size(); ++k) {
        const hsize_t at = k * L.seg;
        unsigned mask = 0;
        haddr_t a = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(dset.id, &at, &mask, &a, &size) < 0 || a == HADDR_UNDEF ||
            mask != 0 || size != L.seg * s) {
          direct_why = "chunk " + std::to_string(k) + " of " + dset.name +
                       " is not allocated as a plain chunk" + h5_detail();
          return;
        }
        L.addr[k] = a;
      }
    } else {
      direct_why = dset.name + " has a compact or virtual layout";
      return;
    }
    for (std::uint64_t k = 0; k < L.addr.size(); ++k) {
      const std::uint64_t len = std::min(L.seg, nnz - k * L.seg);
      if (L.addr[k] + len * s > info.file_bytes) {
        direct_why = dset.name + " has data past the end of the file (truncated?)";
        return;
      }
    }
  }
  fd = ::open(path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    direct_why = "cannot open the file: " + errno_text(errno);
    return;
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead; a hint only
  direct = std::move(lay);
  direct_state = 1;
#endif
}

template <typename T>
void H5TensorReader::Impl::direct_piece(int d, std::uint64_t first, std::uint64_t a,
                                        std::uint64_t b, void* out_v, bool crc,
                                        std::vector<unsigned char>& stage) const {
  const DirectLayout& L = direct[static_cast<std::size_t>(d)];
  const std::size_t s = stored_size(d);
  const bool is_values = d == order();
  const std::size_t out_size = is_values ? sizeof(T) : sizeof(index_t);
  const bool same = out_size == s;  // coordinates are uint32 = index_t; else float/double
  auto* out = static_cast<unsigned char*>(out_v);
  const std::uint64_t seg = L.seg;
  auto out_at = [&](std::uint64_t pos) { return out + (pos - first) * out_size; };
  auto file_at = [&](std::uint64_t pos) {
    const std::uint64_t k = pos / seg;
    return L.addr[static_cast<std::size_t>(k)] + (pos - k * seg) * s;
  };
  // End of the run from `pos` (< limit) whose bytes lie back to back in the file.
  auto run_end = [&](std::uint64_t pos, std::uint64_t limit) {
    std::uint64_t k = pos / seg;
    std::uint64_t stop = std::min(limit, (k + 1) * seg);
    while (stop < limit && L.addr[k + 1] == L.addr[k] + seg * s) {
      ++k;
      stop = std::min(limit, (k + 1) * seg);
    }
    return stop;
  };
  // Stored elements (float32 or float64 values) to the caller's type.
  auto convert = [&](const unsigned char* src, std::uint64_t pos, std::uint64_t n) {
    T* o = reinterpret_cast<T*>(out_at(pos));
    if (s == 4) {
      const float* f = reinterpret_cast<const float*>(src);
      for (std::uint64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f[i]);
    } else {
      const double* v = reinterpret_cast<const double*>(src);
      for (std::uint64_t i = 0; i < n; ++i) o[i] = static_cast<T>(to_float_as_hdf5(v[i]));
    }
  };
  if (!crc) {
    const std::uint64_t stage_elems = std::max<std::uint64_t>(1, direct_piece_bytes / s);
    for (std::uint64_t pos = a; pos < b;) {
      const std::uint64_t stop = run_end(pos, b);
      if (same) {
        pread_full(fd, out_at(pos), (stop - pos) * s, file_at(pos), path());
        pos = stop;
      } else {
        const std::uint64_t n = std::min(stop - pos, stage_elems);
        if (stage.size() < n * s) stage.resize(n * s);
        pread_full(fd, stage.data(), n * s, file_at(pos), path());
        convert(stage.data(), pos, n);
        pos += n;
      }
    }
    return;
  }
  // Checksums: every chunk touched is read whole and verified (chunked, equal lengths).
  const std::uint64_t C = seg;
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  const std::uint64_t whole_end = b == nnz ? b : (b / C) * C;  // chunks inside [a, b) end here
  for (std::uint64_t k = a / C; k * C < b;) {
    const std::uint64_t c0 = k * C, c1 = std::min(c0 + C, nnz);
    if (same && c0 >= a && c1 <= b) {
      // A run of whole chunks straight into the caller's buffer, verified in place.
      const std::uint64_t stop = run_end(c0, whole_end);
      pread_full(fd, out_at(c0), (stop - c0) * s, file_at(c0), path());
      for (; k * C < stop; ++k) verify_chunk(d, k, out_at(k * C));
      continue;
    }
    if (stage.size() < (c1 - c0) * s) stage.resize((c1 - c0) * s);
    pread_full(fd, stage.data(), (c1 - c0) * s, L.addr[static_cast<std::size_t>(k)], path());
    verify_chunk(d, k, stage.data());
    const std::uint64_t p0 = std::max(a, c0), p1 = std::min(b, c1);
    if (same)
      std::memcpy(out_at(p0), stage.data() + (p0 - c0) * s, (p1 - p0) * s);
    else
      convert(stage.data() + (p0 - c0) * s, p0, p1 - p0);
    ++k;
  }
}

namespace {

/// True when every value is finite (vectorises; the exact position comes from check_values).
template <typename T>
bool all_finite(const T* v, std::size_t n) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t k = 0; k < n; ++k)
    bad |= std::fabs(v[k]) <= std::numeric_limits<T>::max() ? 0 : 1;
  return bad == 0;
}

/// True when every coordinate is < dim (vectorises better than check_coords' maximum; the
/// exact position comes from check_coords).
bool all_below(const index_t* v, std::size_t n, std::uint64_t dim) {
  if (dim > std::numeric_limits<index_t>::max()) return true;
  const auto last = static_cast<index_t>(dim - 1);
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t k = 0; k < n; ++k) bad |= v[k] > last ? 1 : 0;
  return bad == 0;
}

}  // namespace

template <typename T>
void H5TensorReader::Impl::read_direct(nnz_t first_in, nnz_t count_in, index_t* const* idx, T* vals,
                                       int threads, const H5ReadChecks& checks) {
  if (count_in <= 0) return;
  const int N = order();
  const auto first = static_cast<std::uint64_t>(first_in);
  const auto end = first + static_cast<std::uint64_t>(count_in);
  const bool crc = checks.checksums && verify && info.has_checksums;
  // Tasks: pieces of each dataset's range; with checksums whole chunks (each chunk in one
  // task), else any element boundary.
  struct Task {
    int d;
    std::uint64_t a, b;
  };
  std::vector<Task> tasks;
  for (int d = 0; d <= N; ++d) {
    const std::uint64_t unit = crc ? info.chunk_elems : 1;
    const std::uint64_t piece =
        std::max<std::uint64_t>(1, direct_piece_bytes / (unit * stored_size(d))) * unit;
    for (std::uint64_t w = first / piece * piece; w < end; w += piece)
      tasks.push_back({d, std::max(first, w), std::min(end, w + piece)});
  }
  // Errors are ranked as read() meets them: per mode its CRCs then its coordinates, then
  // the blocks, then the values' CRCs and the values themselves; then by position.
  using Key = std::array<std::uint64_t, 4>;  // stage, then position (blocks: block, mode, pos)
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  Key best{kNone, 0, 0, 0};
  std::exception_ptr best_err;
  std::atomic<std::uint64_t> best_stage{kNone};
  std::mutex mu;
  auto record = [&](const Key& key, std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu);
    if (key < best) {
      best = key;
      best_err = std::move(e);
      best_stage.store(key[0]);
    }
  };
  auto record_current = [&](std::uint64_t stage, std::uint64_t where) {
    try {
      throw;
    } catch (const PositionedError& e) {
      record({stage, static_cast<std::uint64_t>(e.position()), 0, 0}, std::current_exception());
    } catch (...) {
      record({stage, where, 0, 0}, std::current_exception());
    }
  };
  const int nt = static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(thread_count(threads)), tasks.size()));
  std::atomic<std::size_t> next{0};
  run_threads(nt, [&](int) {
    std::vector<unsigned char> stage;
    for (std::size_t i = next++; i < tasks.size(); i = next++) {
      const Task& t = tasks[i];
      const auto read_stage = static_cast<std::uint64_t>(t.d < N ? 2 * t.d : 2 * N + 1);
      if (best_stage.load() < read_stage) continue;  // an earlier stage failed already
      void* out = t.d < N ? static_cast<void*>(idx[t.d]) : static_cast<void*>(vals);
      try {
        direct_piece<T>(t.d, first, t.a, t.b, out, crc, stage);
      } catch (...) {
        record_current(read_stage, t.a);
        continue;
      }
      try {
        const auto a = static_cast<nnz_t>(t.a), n = static_cast<nnz_t>(t.b - t.a);
        if (t.d < N && checks.coordinates) {
          const index_t* v = idx[t.d] + (t.a - first);
          if (!all_below(v, static_cast<std::size_t>(n), info.dims[static_cast<std::size_t>(t.d)]))
            check_coords(t.d, a, n, v);
        } else if (t.d == N && checks.values) {
          const T* v = vals + (t.a - first);
          if (!all_finite(v, static_cast<std::size_t>(n))) check_values(a, n, v);
        }
      } catch (...) {
        record_current(read_stage + 1, t.a);
      }
    }
  });
  const auto block_stage = static_cast<std::uint64_t>(2 * N);
  if (info.partition && checks.blocks && best[0] > block_stage) {
    const std::uint64_t piece = std::max<std::uint64_t>(1, direct_piece_bytes / sizeof(index_t));
    const std::uint64_t pieces = div_up(end - first, piece);
    std::atomic<std::uint64_t> next_piece{0};
    run_threads(static_cast<int>(std::min<std::uint64_t>(
                    static_cast<std::uint64_t>(thread_count(threads)), pieces)),
                [&](int) {
                  for (std::uint64_t i = next_piece++; i < pieces; i = next_piece++) {
                    const std::uint64_t a = first + i * piece;
                    const std::uint64_t b = std::min(end, a + piece);
                    try {
                      if (const auto e = find_block_error(a, b, first, idx))
                        record({block_stage, e->block, static_cast<std::uint64_t>(e->mode), e->pos},
                               std::make_exception_ptr(block_error(*e)));
                    } catch (...) {
                      record_current(block_stage, a);
                    }
                  }
                });
  }
  if (best_err) std::rethrow_exception(best_err);
}

template <typename T>
void H5TensorReader::read_direct(nnz_t first, nnz_t count, index_t* const* idx, T* vals,
                                 int threads, const H5ReadChecks& checks) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  Impl& m = *impl_;
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  {
    std::lock_guard<std::mutex> lk(m.hdf5_mutex);
    const H5Quiet quiet;
    m.init_direct();
  }
  if (m.direct_state > 0) {
    m.read_direct(first, count, idx, vals, threads, checks);  // preads: calls may overlap
  } else {
    std::lock_guard<std::mutex> lk(m.hdf5_mutex);  // HDF5 (serial builds) is not thread-safe
    const H5Quiet quiet;
    m.read_checked(first, count, idx, vals, checks);
  }
}

template void H5TensorReader::read_direct<double>(nnz_t, nnz_t, index_t* const*, double*, int,
                                                  const H5ReadChecks&);
template void H5TensorReader::read_direct<float>(nnz_t, nnz_t, index_t* const*, float*, int,
                                                 const H5ReadChecks&);

bool H5TensorReader::direct_read_available() {
  const H5Quiet quiet;
  impl_->init_direct();
  return impl_->direct_state > 0;
}

std::string H5TensorReader::direct_read_fallback_reason() {
  const H5Quiet quiet;
  impl_->init_direct();
  return impl_->direct_state > 0 ? std::string() : impl_->direct_why;
}

void H5TensorReader::set_direct_piece_bytes(std::uint64_t bytes) {
  impl_->direct_piece_bytes = std::max<std::uint64_t>(1, bytes);
}

// ---- read floor ----

double measure_read_bandwidth(const std::string& path, std::uint64_t max_bytes, int threads) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot open: " + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(path + ": cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t bytes = max_bytes == 0 ? size : std::min(size, max_bytes);
  if (bytes == 0) return 0.0;
  constexpr std::uint64_t kBlock = std::uint64_t(16) << 20;
  const std::uint64_t nblocks = div_up(bytes, kBlock);
  const int nt = static_cast<int>(
      std::min<std::uint64_t>(static_cast<std::uint64_t>(thread_count(threads)), nblocks));
  ::posix_fadvise(fd, 0, static_cast<off_t>(bytes), POSIX_FADV_SEQUENTIAL);
  // Buffers touched before the clock starts: page faults are not the file's cost.
  std::vector<std::vector<unsigned char>> buf(static_cast<std::size_t>(nt));
  for (auto& b : buf) b.assign(static_cast<std::size_t>(std::min(kBlock, bytes)), 0);
  std::atomic<std::uint64_t> next{0};
  std::exception_ptr err;
  std::mutex mu;
  Timer timer;
  run_threads(nt, [&](int t) {
    auto& b = buf[static_cast<std::size_t>(t)];
    for (std::uint64_t i = next++; i < nblocks; i = next++) {
      const std::uint64_t off = i * kBlock;
      try {
        pread_full(fd, b.data(), static_cast<std::size_t>(std::min(kBlock, bytes - off)), off,
                   path);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err) err = std::current_exception();
        next = nblocks;
      }
    }
  });
  const double seconds = timer.seconds();
  if (err) std::rethrow_exception(err);
  return static_cast<double>(bytes) / std::max(seconds, 1e-9);
}

// =======================================================================================
// Collective readers

H5TensorInfo read_h5_info(const std::string& path, const comm::Communicator& c) {
  H5TensorInfo info;
  comm::run_collectively(c, [&] { info = H5TensorReader(path, false).info(); });
  return info;
}

namespace {

/// Reads (keep: into res->local; else into a reused buffer) this rank's share.
void read_share(const std::string& path, const comm::Communicator& c, const H5ReadOptions& opt,
                bool keep, H5ReadResult* res) {
  Timer timer;
  std::unique_ptr<H5TensorReader> rd;
  comm::run_collectively(
      c, [&] { rd = std::make_unique<H5TensorReader>(path, opt.verify_checksums); });
  res->info = rd->info();
  const H5TensorInfo& info = res->info;
  const int P = c.size(), r = c.rank();
  const int N = info.order;
  nnz_t first = 0, count = 0;
  res->by_block = opt.by_block && info.partition && info.partition->nblocks() == P;
  if (res->by_block) {
    std::tie(first, count) = info.partition->block_range(r);
  } else {
    first = static_cast<nnz_t>(static_cast<__int128>(info.nnz) * r / P);
    count = static_cast<nnz_t>(static_cast<__int128>(info.nnz) * (r + 1) / P) - first;
  }
  const nnz_t piece = opt.piece > 0 ? opt.piece : kDefaultPiece;
  const std::uint64_t per_nnz =
      4 * static_cast<std::uint64_t>(N) + (info.value_type == ValueType::float32 ? 4 : 8);
  SparseTensor<double>& x = res->local;
  x = SparseTensor<double>(info.dims);
  std::uint64_t key = kNoError;
  std::string msg;
  try {
    const auto room = static_cast<std::size_t>(keep ? count : std::min(count, piece));
    try {
      for (auto& v : x.idx) v.resize(room);
      x.vals.resize(room);
    } catch (const std::bad_alloc&) {
      throw InputError(path + ": out of memory for " + std::to_string(room) + " nonzeros on rank " +
                       std::to_string(r));
    }
    Progress progress(r == 0 && opt.progress, "reading", base_name(path),
                      static_cast<std::uint64_t>(count) * per_nnz * static_cast<std::uint64_t>(P));
    index_t* p[kMaxOrder];
    int threads = opt.threads;
#ifdef _OPENMP
    if (threads <= 0) threads = omp_get_max_threads();
#endif
    // Block reads are ranges of the block's positions (read_block's checks come with the
    // partition: every nonzero is checked against its block's index ranges).
    for (nnz_t done = 0; done < count; done += piece) {
      const nnz_t n = std::min(piece, count - done);
      const std::size_t at = keep ? static_cast<std::size_t>(done) : 0;
      for (int m = 0; m < N; ++m) p[m] = x.idx[static_cast<std::size_t>(m)].data() + at;
      rd->read_direct(first + done, n, p, x.vals.data() + at, threads);
      if (opt.float_values) check_float_range(path, first + done, n, x.vals.data() + at);
      progress.update(static_cast<std::uint64_t>(done + n) * per_nnz *
                      static_cast<std::uint64_t>(P));
    }
  } catch (const PositionedError& e) {
    key = static_cast<std::uint64_t>(e.position()) + 1;
    msg = e.what();
  } catch (const std::exception& e) {
    key = 0;
    msg = e.what();
  }
  rd.reset();
  raise_earliest(c, key, msg);
  if (!keep) x = SparseTensor<double>(info.dims);
  res->global_nnz = info.nnz;
  res->index_base = 0;
  res->bytes = info.file_bytes;
  res->text_bytes = 0;
  res->seconds = c.allreduce_value(timer.seconds(), comm::ReduceOp::max);
}

}  // namespace

H5ReadResult read_h5(const std::string& path, const comm::Communicator& c,
                     const H5ReadOptions& opt) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host, "read_h5 needs a host communicator");
  H5ReadResult res;
  read_share(path, c, opt, true, &res);
  log::debug("read " + path + ": " + std::to_string(res.global_nnz) + " nonzeros, dims " +
             format_dims(res.local.dims) + (res.by_block ? ", by block" : "") + ", " +
             std::to_string(res.seconds) + " s");
  return res;
}

void verify_h5(const std::string& path, const comm::Communicator& c, const H5ReadOptions& opt) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "verify_h5 needs a host communicator");
  H5ReadResult res;
  read_share(path, c, opt, false, &res);
}

// =======================================================================================
// Writer

namespace {

/// CRC-32 of part of a chunk: dataset d, chunk k, elements [off, off + len) of the chunk.
struct CrcPart {
  std::uint64_t d, k, off, len, crc;
};
constexpr int kCrcWords = 5;

H5Id make_fapl() {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The 1.8 object formats (superblock v2, object header v2) carry checksums of the
  // metadata, so corrupted metadata is detected; readable by HDF5 1.8 and later.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

}  // namespace

struct H5TensorWriter::Impl {
  const comm::Communicator& c;
  std::string path, tmp;
  H5Header h;
  H5WriteOptions o;
  int N = 0;
  std::uint64_t C = 0, nchunks = 0;
  bool direct = false;
  bool created = false;  // rank 0: the temporary file exists
  bool committed = false;
  std::vector<std::uint64_t> addr;  // direct: [dataset][chunk] file offsets
  int fd = -1;
  std::vector<CrcPart> parts;
  int rounds = 0;
  std::uint64_t total_bytes = 0, done_bytes = 0;
  std::unique_ptr<Progress> progress;
  std::unique_ptr<SharedOutput> out;  // io/output.hpp

  Impl(const comm::Communicator& comm) : c(comm) {}
  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (!committed && created) ::unlink(tmp.c_str());
  }
  std::size_t elem_size(int d) const {
    return d < N ? 4 : (o.value_type == ValueType::float32 ? 4 : 8);
  }
  void create();
  void add_crc(int d, std::uint64_t first, std::uint64_t count, const void* data);
};

void H5TensorWriter::Impl::create() {
  const H5Id fapl = make_fapl();
  H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Pset_obj_track_times(fcpl, 0);  // no timestamps: the same tensor gives the same bytes
  H5Id f(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, fcpl, fapl), H5Fclose);
  if (!f.valid()) throw InputError("cannot create " + tmp + h5_detail());
  created = true;
  write_attr_string(f, "format", kTensorStoreFormat, tmp);
  write_attr_i64(f, "format_version", kTensorStoreVersion, tmp);
  write_attr_i64(f, "order", N, tmp);
  write_attr_u64s(f, "dims", h.dims, tmp);
  write_attr_u64s(f, "nnz", {static_cast<std::uint64_t>(h.nnz)}, tmp, true);
  write_attr_string(f, "value_type", to_string(o.value_type), tmp);
  write_attr_i64(f, "index_base", 0, tmp);
  write_attr_i64(f, "source_index_base", h.source_index_base, tmp);
  write_attr_i64(f, "has_duplicates", h.has_duplicates, tmp);
  write_attr_string(f, "source", h.source, tmp);
  write_attr_i64(f, "complete", 0, tmp);

  H5Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_obj_track_times(gcpl, 0);
  H5Id g(H5Gcreate2(f, "coords", H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw InputError("cannot create group /coords in " + tmp + h5_detail());
  const hsize_t len = static_cast<hsize_t>(h.nnz), chunk = C;
  H5Id space(H5Screate_simple(1, &len, nullptr), H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl, 1, &chunk);
  H5Pset_obj_track_times(dcpl, 0);
  if (o.deflate > 0) {
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, static_cast<unsigned>(o.deflate));
  } else {
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  }
  if (direct) addr.assign(static_cast<std::size_t>((N + 1) * nchunks), 0);
  for (int d = 0; d <= N; ++d) {
    const std::string name = d < N ? "mode" + std::to_string(d) : "values";
    const hid_t type = d < N
                           ? H5T_STD_U32LE
                           : (o.value_type == ValueType::float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
    H5Id ds(H5Dcreate2(d < N ? hid_t(g) : hid_t(f), name.c_str(), type, space, H5P_DEFAULT, dcpl,
                       H5P_DEFAULT),
            H5Dclose);
    if (!ds.valid())
      throw InputError("cannot create dataset " + dataset_name(d, N) + " in " + tmp + h5_detail());
#if H5_VERSION_GE(1, 10, 5)
    if (direct) {
      const hsize_t bytes = C * elem_size(d);
      for (std::uint64_t k = 0; k < nchunks; ++k) {
        const hsize_t at = k * C;
        unsigned mask = 0;
        haddr_t a = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, &at, &mask, &a, &size) < 0 || a == HADDR_UNDEF ||
            size != bytes)
          throw Error("HDF5 did not allocate chunk " + std::to_string(k) + " of " +
                      dataset_name(d, N) + " in " + tmp + h5_detail());
        addr[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * nchunks + k)] = a;
      }
    }
#endif
  }
  g.reset();
  if (!f.close()) throw InputError("cannot write " + tmp + h5_detail());
}

void H5TensorWriter::Impl::add_crc(int d, std::uint64_t first, std::uint64_t count,
                                   const void* data) {
  const std::size_t s = elem_size(d);
  const auto* p = static_cast<const unsigned char*>(data);
  // Parts of the piece, one per chunk it touches; CRCs in parallel.
  std::vector<CrcPart> mine;
  for (std::uint64_t pos = first; pos < first + count;) {
    const std::uint64_t k = pos / C;
    const std::uint64_t stop = std::min(first + count, (k + 1) * C);
    mine.push_back({static_cast<std::uint64_t>(d), k, pos - k * C, stop - pos, 0});
    pos = stop;
  }
  const auto n = static_cast<std::int64_t>(mine.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < n; ++i) {
    auto& m = mine[static_cast<std::size_t>(i)];
    const std::uint64_t at = m.k * C + m.off - first;
    m.crc = crc32_z(0, p + at * s, static_cast<z_size_t>(m.len * s));
  }
  for (const auto& m : mine) {
    // Adjacent parts of one chunk are combined at once, so the list stays short.
    if (!parts.empty()) {
      CrcPart& last = parts.back();
      if (last.d == m.d && last.k == m.k && last.off + last.len == m.off) {
        last.crc = crc32_combine(static_cast<uLong>(last.crc), static_cast<uLong>(m.crc),
                                 static_cast<z_off_t>(m.len * s));
        last.len += m.len;
        continue;
      }
    }
    parts.push_back(m);
  }
}

H5TensorWriter::H5TensorWriter(const std::string& path, const H5Header& h,
                               const comm::Communicator& c, const H5WriteOptions& o)
    : impl_(std::make_unique<Impl>(c)) {
  const H5Quiet quiet;
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "H5TensorWriter needs a host communicator");
  Impl& m = *impl_;
  m.path = path;
  m.h = h;
  m.o = o;
  m.N = static_cast<int>(h.dims.size());
  comm::run_collectively(c, [&] {
    TESSERA_INPUT_CHECK(m.N >= 1 && m.N <= kMaxOrder,
                        "write " << path << ": expected a tensor of order 1 to " << kMaxOrder
                                 << ", found order " << m.N);
    for (std::uint64_t d : h.dims)
      TESSERA_INPUT_CHECK(d >= 1 && d <= (std::uint64_t(1) << 32),
                          "write " << path << ": every mode length must be 1 to 2^32 (dims "
                                   << format_dims(h.dims) << ")");
    TESSERA_INPUT_CHECK(h.nnz >= 1, "write " << path << ": no nonzeros to write");
    TESSERA_INPUT_CHECK(o.chunk_elems >= 1 && o.chunk_elems <= kMaxChunkElems,
                        "write " << path << ": chunk length must be 1 to " << kMaxChunkElems
                                 << " elements, got " << o.chunk_elems);
    TESSERA_INPUT_CHECK(o.deflate >= 0 && o.deflate <= 9,
                        "write " << path << ": deflate level must be 0 to 9, got " << o.deflate);
    TESSERA_INPUT_CHECK(o.deflate == 0 || o.mode != H5WriteOptions::Mode::direct,
                        "write " << path << ": direct writes need an uncompressed store");
  });
  m.C = std::min<std::uint64_t>(o.chunk_elems, static_cast<std::uint64_t>(h.nnz));
  m.nchunks = div_up(static_cast<std::uint64_t>(h.nnz), m.C);
#if H5_VERSION_GE(1, 10, 5)
  m.direct = o.deflate == 0 && o.mode != H5WriteOptions::Mode::turns;
#else
  m.direct = false;  // chunk addresses need H5Dget_chunk_info_by_coord (HDF5 1.10.5)
#endif
  // io/output.hpp: rank 0's temporary PATH.tmp-HOST_PID, renamed by commit() and removed on
  // any error; HDF5 needs a seekable file, so a character device or FIFO is refused.
  m.out = std::make_unique<SharedOutput>(path, c);
  m.tmp = m.out->write_path();
  if (m.out->special())
    throw CollectiveError("cannot write " + path +
                          ": an HDF5 tensor store needs a regular (seekable) file, and this is a "
                          "character device or FIFO");
  comm::run_collectively(c, [&] {
    if (c.rank() == 0) m.create();
  });
  if (m.direct) {
    m.addr.resize(static_cast<std::size_t>((m.N + 1) * m.nchunks));
    c.broadcast(m.addr.data(), m.addr.size(), 0);
    comm::run_collectively(c, [&] {
      m.fd = ::open(m.tmp.c_str(), O_WRONLY | O_CLOEXEC);
      if (m.fd < 0) throw InputError("cannot open " + m.tmp + ": " + errno_text(errno));
    });
  }
  m.total_bytes =
      static_cast<std::uint64_t>(h.nnz) * (4 * static_cast<std::uint64_t>(m.N) + m.elem_size(m.N));
  m.progress = std::make_unique<Progress>(c.rank() == 0 && o.progress, "writing", base_name(path),
                                          m.total_bytes);
}

H5TensorWriter::~H5TensorWriter() = default;

const std::string& H5TensorWriter::temp_path() const {
  return impl_->tmp;
}

std::string H5TensorWriter::mode() const {
  return impl_->direct ? "direct" : "turns";
}

void H5TensorWriter::write(const std::vector<H5Piece>& pieces) {
  const H5Quiet quiet;
  Impl& m = *impl_;
  TESSERA_EXPECTS(!m.committed, "write after commit");
  const int N = m.N;
  const int me = m.c.rank(), P = m.c.size();
  std::vector<std::vector<float>> f32(pieces.size());
  std::uint64_t bytes = 0;
  // 1. Check, convert, checksum; direct mode: write. All ranks at once.
  comm::run_collectively(m.c, [&] {
    if (m.o.fail_after_rounds >= 0 && m.rounds >= m.o.fail_after_rounds && me == P - 1)
      throw InputError("write " + m.path + ": injected failure after " + std::to_string(m.rounds) +
                       " write round(s) (testing)");
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const H5Piece& p = pieces[i];
      if (p.count == 0) continue;
      TESSERA_EXPECTS(
          p.first >= 0 && p.count > 0 && p.first + p.count <= m.h.nnz,
          "piece [" << p.first << ", " << p.first + p.count << ") of " << m.h.nnz << " positions");
      const auto n = static_cast<std::size_t>(p.count);
      for (int d = 0; d < N; ++d) {
        TESSERA_EXPECTS(p.idx[d] != nullptr, "piece without mode " << d);
        const std::uint64_t dim = m.h.dims[static_cast<std::size_t>(d)];
        for (std::size_t k = 0; k < n; ++k)
          TESSERA_INPUT_CHECK(p.idx[d][k] < dim,
                              "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                       << " has mode-" << d << " coordinate " << p.idx[d][k]
                                       << ", but dims[" << d << "] = " << dim);
      }
      for (std::size_t k = 0; k < n; ++k)
        TESSERA_INPUT_CHECK(std::isfinite(p.vals[k]),
                            "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                     << " has value " << p.vals[k] << ": expected finite values");
      if (m.o.value_type == ValueType::float32) {
        f32[i].resize(n);
        for (std::size_t k = 0; k < n; ++k) {
          f32[i][k] = static_cast<float>(p.vals[k]);
          TESSERA_INPUT_CHECK(std::isfinite(f32[i][k]),
                              "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                       << " has value " << p.vals[k]
                                       << ", too large for float32 (write float64)");
        }
      }
      for (int d = 0; d <= N; ++d) {
        const void* src =
            d < N ? static_cast<const void*>(p.idx[d])
                  : (m.o.value_type == ValueType::float32 ? static_cast<const void*>(f32[i].data())
                                                          : static_cast<const void*>(p.vals));
        const auto first = static_cast<std::uint64_t>(p.first);
        m.add_crc(d, first, n, src);
        bytes += n * m.elem_size(d);
        if (!m.direct) continue;
        // Runs of chunks that lie back to back in the file go out in one pwrite.
        const std::size_t s = m.elem_size(d);
        const std::uint64_t* a = m.addr.data() + static_cast<std::uint64_t>(d) * m.nchunks;
        std::uint64_t pos = first;
        const std::uint64_t end = first + n;
        while (pos < end) {
          const std::uint64_t k = pos / m.C;
          const std::uint64_t off = a[k] + (pos - k * m.C) * s;
          std::uint64_t stop = std::min(end, (k + 1) * m.C);
          for (std::uint64_t kk = k + 1; stop < end && a[kk] == a[kk - 1] + m.C * s; ++kk)
            stop = std::min(end, (kk + 1) * m.C);
          pwrite_full(m.fd, static_cast<const unsigned char*>(src) + (pos - first) * s,
                      (stop - pos) * s, off, m.tmp);
          pos = stop;
        }
      }
    }
  });
  // 2. Compressed stores: the ranks take turns writing through HDF5.
  if (!m.direct) {
    for (int q = 0; q < P; ++q) {
      std::exception_ptr err;
      if (q == me && bytes > 0) {
        try {
          const H5Id fapl = make_fapl();
          H5Id f(H5Fopen(m.tmp.c_str(), H5F_ACC_RDWR, fapl), H5Fclose);
          if (!f.valid()) throw InputError("cannot open " + m.tmp + " for writing" + h5_detail());
          H5Id dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
          H5Pset_chunk_cache(dapl, 521, std::size_t(64) << 20, 1.0);
          for (int d = 0; d <= N; ++d) {
            const std::string name = dataset_name(d, N);
            H5Id ds(H5Dopen2(f, name.c_str(), dapl), H5Dclose);
            if (!ds.valid()) throw InputError("cannot open " + name + " in " + m.tmp + h5_detail());
            for (std::size_t i = 0; i < pieces.size(); ++i) {
              const H5Piece& p = pieces[i];
              if (p.count == 0) continue;
              const void* src = d < N ? static_cast<const void*>(p.idx[d])
                                      : (m.o.value_type == ValueType::float32
                                             ? static_cast<const void*>(f32[i].data())
                                             : static_cast<const void*>(p.vals));
              const hid_t mt = d < N ? H5T_NATIVE_UINT32
                                     : (m.o.value_type == ValueType::float32 ? H5T_NATIVE_FLOAT
                                                                             : H5T_NATIVE_DOUBLE);
              h5_write_range(ds, static_cast<hsize_t>(p.first), static_cast<hsize_t>(p.count), mt,
                             src, name + " of " + m.tmp);
            }
          }
          if (!f.close()) throw InputError("cannot write " + m.tmp + h5_detail());
        } catch (...) {
          err = std::current_exception();
        }
      }
      comm::raise_collectively(m.c, err);
    }
  }
  ++m.rounds;
  m.done_bytes += m.c.allreduce_value(bytes);
  m.progress->update(m.done_bytes);
}

void H5TensorWriter::commit(const H5Partition* partition) {
  const H5Quiet quiet;
  Impl& m = *impl_;
  TESSERA_EXPECTS(!m.committed, "commit twice");
  const int N = m.N;
  if (m.direct) {
    comm::run_collectively(m.c, [&] {
      const int fd = m.fd;
      m.fd = -1;
      if (::fdatasync(fd) != 0 && errno != EINVAL && errno != EROFS) {
        const int e = errno;
        ::close(fd);
        throw InputError("cannot write " + m.tmp + ": " + errno_text(e));
      }
      if (::close(fd) != 0) throw InputError("cannot write " + m.tmp + ": " + errno_text(errno));
    });
  }
  m.progress->finish();
  // Checksum parts to rank 0.
  std::vector<std::uint64_t> send;
  send.reserve(m.parts.size() * kCrcWords);
  for (const auto& p : m.parts) send.insert(send.end(), {p.d, p.k, p.off, p.len, p.crc});
  std::vector<std::int64_t> counts(static_cast<std::size_t>(m.c.size()), 0);
  counts[0] = static_cast<std::int64_t>(send.size());
  const std::vector<std::uint64_t> all = m.c.alltoallv(send, counts);
  comm::run_collectively(m.c, [&] {
    if (m.c.rank() != 0) return;
    std::vector<CrcPart> parts(all.size() / kCrcWords);
    for (std::size_t i = 0; i < parts.size(); ++i)
      parts[i] = {all[kCrcWords * i], all[kCrcWords * i + 1], all[kCrcWords * i + 2],
                  all[kCrcWords * i + 3], all[kCrcWords * i + 4]};
    std::sort(parts.begin(), parts.end(), [](const CrcPart& a, const CrcPart& b) {
      return std::tie(a.d, a.k, a.off) < std::tie(b.d, b.k, b.off);
    });
    const auto nnz = static_cast<std::uint64_t>(m.h.nnz);
    std::vector<std::uint32_t> crc(static_cast<std::size_t>((N + 1) * m.nchunks), 0);
    std::size_t i = 0;
    for (int d = 0; d <= N; ++d) {
      for (std::uint64_t k = 0; k < m.nchunks; ++k) {
        const std::uint64_t len = std::min(m.C, nnz - k * m.C);
        std::uint64_t at = 0;
        uLong v = 0;
        for (; i < parts.size() && parts[i].d == static_cast<std::uint64_t>(d) && parts[i].k == k;
             ++i) {
          const CrcPart& p = parts[i];
          if (p.off != at)
            TESSERA_THROW("writing " << m.path << ": position " << k * m.C + std::min(p.off, at)
                                     << " of " << dataset_name(d, N)
                                     << (p.off > at ? " was never written" : " was written twice"));
          v = at == 0 ? static_cast<uLong>(p.crc)
                      : crc32_combine(v, static_cast<uLong>(p.crc),
                                      static_cast<z_off_t>(p.len * m.elem_size(d)));
          at += p.len;
        }
        if (at != len)
          TESSERA_THROW("writing " << m.path << ": position " << k * m.C + std::min(at, len)
                                   << " of " << dataset_name(d, N)
                                   << (at < len ? " was never written" : " was written twice"));
        crc[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * m.nchunks + k)] =
            static_cast<std::uint32_t>(v);
      }
    }
    if (partition) {
      const H5Partition& pt = *partition;
      std::uint64_t nb = 1;
      for (int g : pt.grid) nb *= static_cast<std::uint64_t>(std::max(g, 0));
      TESSERA_EXPECTS(static_cast<int>(pt.grid.size()) == N && pt.cuts.size() == pt.grid.size() &&
                          pt.offsets.size() == nb + 1 && pt.offsets.front() == 0 &&
                          pt.offsets.back() == nnz &&
                          std::is_sorted(pt.offsets.begin(), pt.offsets.end()),
                      "a consistent partition (grid, cuts, offsets)");
    }
    const H5Id fapl = make_fapl();
    H5Id f(H5Fopen(m.tmp.c_str(), H5F_ACC_RDWR, fapl), H5Fclose);
    if (!f.valid()) throw InputError("cannot open " + m.tmp + " to finish it" + h5_detail());
    {
      const hsize_t shape[2] = {static_cast<hsize_t>(N + 1), m.nchunks};
      H5Id sp(H5Screate_simple(2, shape, nullptr), H5Sclose);
      H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_obj_track_times(dcpl, 0);
      H5Id ds(H5Dcreate2(f, "checksums", H5T_STD_U32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT),
              H5Dclose);
      if (!ds.valid() ||
          H5Dwrite(ds, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, crc.data()) < 0)
        throw InputError("cannot write /checksums in " + m.tmp + h5_detail());
      write_attr_string(ds, "algorithm",
                        "CRC-32 (zlib.crc32) of each chunk's little-endian element bytes; rows: "
                        "/coords/mode0.., /values",
                        m.tmp);
    }
    if (partition) {
      H5Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
      H5Pset_obj_track_times(gcpl, 0);
      H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_obj_track_times(dcpl, 0);
      H5Id g(H5Gcreate2(f, "partition", H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose);
      H5Id gc(H5Gcreate2(g, "cuts", H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose);
      if (!g.valid() || !gc.valid())
        throw InputError("cannot create /partition in " + m.tmp + h5_detail());
      const auto put = [&](hid_t loc, const std::string& name, hid_t ftype, hid_t mtype,
                           const void* data, hsize_t n) {
        H5Id sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
        H5Id ds(H5Dcreate2(loc, name.c_str(), ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
        if (!ds.valid() || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
          throw InputError("cannot write /partition/" + name + " in " + m.tmp + h5_detail());
      };
      const std::vector<std::uint32_t> grid(partition->grid.begin(), partition->grid.end());
      put(g, "grid", H5T_STD_U32LE, H5T_NATIVE_UINT32, grid.data(), grid.size());
      put(g, "offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, partition->offsets.data(),
          partition->offsets.size());
      for (int n = 0; n < N; ++n) {
        const auto& cut = partition->cuts[static_cast<std::size_t>(n)];
        put(gc, "mode" + std::to_string(n), H5T_STD_U64LE, H5T_NATIVE_UINT64, cut.data(),
            cut.size());
      }
      write_attr_string(g, "scheme", "grid", m.tmp);
    }
    {
      H5Id a(H5Aopen(f, "complete", H5P_DEFAULT), H5Aclose);
      const long long one = 1;
      if (!a.valid() || H5Awrite(a, H5T_NATIVE_LLONG, &one) < 0)
        throw InputError("cannot write " + m.tmp + h5_detail());
    }
    if (!f.close()) throw InputError("cannot write " + m.tmp + h5_detail());
    m.out->commit();  // fsync and rename
  });
  m.committed = true;
}

// =======================================================================================
// Whole tensors

void write_h5(const std::string& path, const SparseTensor<double>& x, const comm::Communicator& c,
              H5Header meta, const H5WriteOptions& o) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "write_h5 needs a host communicator");
  const int order = x.order();
  const bool shapeless = order == 0 && x.nnz() == 0;
  comm::run_collectively(c, [&] {
    if (shapeless) return;
    TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder,
                        "write " << path << ": expected a tensor of order 1 to " << kMaxOrder
                                 << ", found order " << order);
    TESSERA_INPUT_CHECK(
        x.idx.size() == static_cast<std::size_t>(order),
        "write " << path << ": expected " << order << " coordinate arrays, found " << x.idx.size());
    for (const auto& v : x.idx)
      TESSERA_INPUT_CHECK(v.size() == x.vals.size(), "write " << path << ": " << v.size()
                                                              << " coordinates for "
                                                              << x.vals.size() << " values");
  });
  const std::int32_t omin = c.allreduce_value<std::int32_t>(
      shapeless ? std::numeric_limits<std::int32_t>::max() : order, comm::ReduceOp::min);
  const std::int32_t omax = c.allreduce_value<std::int32_t>(order, comm::ReduceOp::max);
  if (omax == 0 || omin != omax)
    throw CollectiveError("write " + path + ": ranks hold tensors of orders " +
                          std::to_string(omin) + " to " + std::to_string(omax));
  if (meta.dims.empty()) {
    meta.dims = x.dims;
    meta.dims.resize(static_cast<std::size_t>(omax), 0);
    c.allreduce(meta.dims.data(), meta.dims.size(), comm::ReduceOp::max);
  }
  const nnz_t mine = x.nnz();
  std::vector<nnz_t> counts(static_cast<std::size_t>(c.size()), 0);
  c.allgather(&mine, counts.data(), 1);
  nnz_t offset = 0;
  meta.nnz = 0;
  for (int q = 0; q < c.size(); ++q) {
    if (q < c.rank()) offset += counts[static_cast<std::size_t>(q)];
    meta.nnz += counts[static_cast<std::size_t>(q)];
  }
  if (meta.nnz == 0) throw CollectiveError("write " + path + ": no nonzeros to write");
  H5TensorWriter w(path, meta, c, o);
  const nnz_t piece = o.piece > 0 ? o.piece : kDefaultPiece;
  const nnz_t rounds = c.allreduce_value<nnz_t>((mine + piece - 1) / piece, comm::ReduceOp::max);
  for (nnz_t r = 0; r < rounds; ++r) {
    std::vector<H5Piece> pieces;
    const nnz_t at = r * piece;
    if (at < mine) {
      H5Piece p;
      p.first = offset + at;
      p.count = std::min(piece, mine - at);
      for (int n = 0; n < omax; ++n) p.idx[n] = x.idx[static_cast<std::size_t>(n)].data() + at;
      p.vals = x.vals.data() + at;
      pieces.push_back(p);
    }
    w.write(pieces);
  }
  w.commit();
}

}  // namespace tessera::io
