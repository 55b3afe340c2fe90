// HDF5 plumbing of the tensor store (h5store*.cpp): owned HDF5 identifiers, quiet error
// stacks and their messages, attributes, the store's 1-D datasets (opened, checked against
// their storage, read and written by ranges), the error that names a position, and the
// thread helpers of the direct reads and the read floor. Internal to the io library: not
// installed, included only by src/io/h5store*.cpp.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "io/h5store.hpp"
#include "util/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "the tensor store writes little-endian elements straight from memory");

namespace tessera::io::detail {

constexpr nnz_t kDefaultPiece = nnz_t(16) << 20;
constexpr std::uint64_t kMaxChunkElems = std::uint64_t(1) << 28;
constexpr std::uint64_t kNoError = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kStageBytes = std::size_t(64) << 20;
/// Direct reads: bytes per task (one pread, or one staged piece; the block check takes as
/// many coordinates per task).
constexpr std::uint64_t kDirectPieceBytes = std::uint64_t(8) << 20;

/// Runs body(t) for t = 0 .. n-1 on n threads (the caller is thread 0; n <= 0: one per
/// hardware thread). body must not throw. Fewer threads when the system refuses more.
void run_threads(int n, const std::function<void(int)>& body);

int thread_count(int threads);

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

/// The most specific message on HDF5's error stack (e.g. "truncated file: eof = ..."),
/// in parentheses, or "".
std::string h5_detail();

std::string quoted(const std::string& path);

std::string base_name(const std::string& path);

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
void check_float_range(const std::string& path, nnz_t first, nnz_t n, const double* v);

/// Every rank passes its candidate (kNoError: none; 0: a file-level problem; else
/// position + 1); the earliest is thrown as CollectiveError on every rank.
void raise_earliest(const comm::Communicator& c, std::uint64_t key, const std::string& msg);

// ---- attributes ----

void write_attr_i64(hid_t loc, const char* name, long long v, const std::string& path);

void write_attr_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v,
                     const std::string& path, bool scalar = false);

void write_attr_string(hid_t loc, const char* name, const std::string& s, const std::string& path);

/// Whether an attribute exists; HDF5 failing to tell (a corrupted object header) is an
/// error, not "missing".
bool has_attr(hid_t loc, const char* name, const std::string& path);

/// Whether a link (dataset or group) exists; failure to tell is an error.
bool has_link(hid_t loc, const std::string& name, const std::string& path);

std::string layout_error(const std::string& path, const std::string& what);

/// A string attribute (fixed-length or variable-length, as h5py writes).
std::string read_attr_string(hid_t loc, const char* name, const std::string& path);

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

long long read_attr_scalar(hid_t loc, const char* name, const std::string& path);

/// The attribute, or a message that it is missing.
void require_attr(hid_t loc, const char* name, const std::string& path, const char* meaning);

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
std::string type_text(hid_t t);

/// Opens a 1-D dataset and checks its type; `expect_len` < 0: any length.
Dataset open_dataset(hid_t file, const std::string& name, Kind kind, const std::string& path,
                     long long expect_len, const char* len_meaning,
                     std::size_t chunk_cache = std::size_t(64) << 20);

/// Whole 1-D integer dataset as uint64 (small index arrays of the partition).
std::vector<std::uint64_t> read_index_dataset(hid_t file, const std::string& name,
                                              const std::string& path, long long expect_len,
                                              const char* len_meaning);

/// Reads elements [first, first + count) of a 1-D dataset as `mem_type`.
void h5_read_range(const Dataset& d, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                   const std::string& path);

void h5_write_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, const void* in,
                    const std::string& what);

std::string dataset_name(int d, int order);

inline std::uint64_t div_up(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace tessera::io::detail
