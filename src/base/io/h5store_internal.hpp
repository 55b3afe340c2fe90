// Internals shared by the tensor store's sources (h5store*.cpp): sizes, thread helpers, the
// error that names a position, and the store's datasets: opened through the HDF5 layer
// (src/base/io/h5/, docs/io-hdf5.md) and checked against what format tessera-tensor requires.
// Internal to the io library: not installed, included only by src/base/io/h5store*.cpp.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "io/h5/attribute.hpp"
#include "io/h5/dataset.hpp"
#include "io/h5/error.hpp"
#include "io/h5/file.hpp"
#include "io/h5/handle.hpp"
#include "io/h5store.hpp"
#include "util/error.hpp"

namespace tessera::io::detail {

constexpr nnz_t kDefaultPiece = nnz_t(16) << 20;
constexpr std::uint64_t kMaxChunkElems = std::uint64_t(1) << 28;
constexpr std::uint64_t kNoError = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kStageBytes = std::size_t(64) << 20;
/// Direct reads: bytes per task (one pread, or one staged piece; the block check takes as
/// many coordinates per task).
constexpr std::uint64_t kDirectPieceBytes = std::uint64_t(8) << 20;
/// Direct reads with automatic threads (threads <= 0): at most one thread per this many
/// bytes of the read (a thread's start costs tens of microseconds, more under ASan).
constexpr std::uint64_t kMinBytesPerThread = std::uint64_t(1) << 20;

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

std::string base_name(const std::string& path);

/// `'path': what`: a file that is not the store the format describes.
inline std::string layout_error(const std::string& path, const std::string& what) {
  return h5::in_file(path, what);
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
void check_float_range(const std::string& path, nnz_t first, nnz_t n, const double* v);

/// Every rank passes its candidate (kNoError: none; 0: a file-level problem; else
/// position + 1); the earliest is thrown as CollectiveError on every rank.
void raise_earliest(const comm::Communicator& c, std::uint64_t key, const std::string& msg);

/// The attribute, or a message that it is missing from the store.
void require_attr(hid_t loc, const char* name, const std::string& path, const char* meaning);

// ---- the store's datasets ----

/// What a dataset of the store must be.
enum class Kind { coords, values, index };

struct Dataset {
  h5::Handle id;
  std::string name;    ///< full path, for messages
  hsize_t length = 0;  ///< elements (1-D)
  hsize_t chunk = 0;   ///< chunk length; 0 = not chunked
  int deflate = 0;
  bool is_float32 = false;  ///< values stored as float32
  /// Compressed chunks checked before HDF5 reads them, each once (h5/filter.hpp); its
  /// checks return at once where the dataset is not compressed.
  std::shared_ptr<h5::ChunkCheck> check;
};

/// Opens a 1-D dataset and checks its type, length and storage; `expect_len` < 0: any
/// length.
Dataset open_dataset(hid_t file, const std::string& name, Kind kind, const std::string& path,
                     long long expect_len, const char* len_meaning,
                     std::size_t chunk_cache = std::size_t(64) << 20);

/// Whole 1-D integer dataset as uint64 (small index arrays of the partition).
std::vector<std::uint64_t> read_index_dataset(hid_t file, const std::string& name,
                                              const std::string& path, long long expect_len,
                                              const char* len_meaning);

/// Reads elements [first, first + count) of a 1-D dataset as `mem_type`; PositionedError
/// naming the range when HDF5 cannot.
void h5_read_range(const Dataset& d, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                   const std::string& path);

/// "/coords/mode<d>", or "/values" for d == order.
std::string dataset_name(int d, int order);

inline std::uint64_t div_up(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

}  // namespace tessera::io::detail
