// The state of an open tensor store, H5TensorReader::Impl: its metadata, datasets and
// checksums, the checked reads through HDF5 (h5store_read.cpp) and the direct reads with
// pread() (h5store_direct.cpp). Internal to the io library: not installed, included only by
// src/base/io/h5store*.cpp.
#pragma once

#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/h5store.hpp"
#include "io/h5store_internal.hpp"

namespace tessera::io {

struct H5TensorReader::Impl {
  H5TensorInfo info;
  bool verify = true;
  h5::Handle file;
  std::vector<detail::Dataset> ds;  // order coordinate datasets, then the values
  std::vector<std::uint32_t> crc;   // [dataset][chunk], when verifying
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
  /// T = double or float (both instantiated in h5store_read.cpp; so is read_checked).
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
  detail::PositionedError block_error(const BlockError& e) const;
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
  std::uint64_t direct_piece_bytes = detail::kDirectPieceBytes;
  std::string direct_why;
  bool drop_behind = false;          ///< set_drop_behind: each range read leaves the page cache
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

}  // namespace tessera::io
