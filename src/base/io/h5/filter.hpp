// Compressed chunks checked before HDF5 inflates them (see filter.cpp). HDF5 1.10 trusts a
// filter's output length, and a corrupted deflate chunk that inflates to fewer bytes than
// a chunk holds made H5Dread copy past the end of the filter's buffer (found by
// tests/fuzz/fuzz_h5store); HDF5 does not let a predefined filter be replaced. So every
// compressed chunk is read raw and inflated here once, and must give exactly its chunk's
// bytes, before HDF5 reads it. Internal to src/base/io/h5/ (docs/io-hdf5.md).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::io::h5 {

/// The size in bytes of the file that holds `obj` (0 when HDF5 cannot tell).
hsize_t file_size_of(hid_t obj);

/// What is wrong with a deflated chunk of `stored` bytes for `bytes` bytes of data ("":
/// nothing): longer than zlib's bound for them, or too short to inflate to them (zlib
/// compresses 1032:1 at most, plus the stream's header and trailer); free of overflow. The
/// rule of both the open-time check (check_storage_sizes) and ChunkCheck.
std::string compressed_size_problem(hsize_t stored, hsize_t bytes);

/// Why Tessera does not read a dataset with creation property list `dcpl` ("": it does):
/// filtered by anything but deflate, or by shuffle after deflate (Tessera writes shuffle,
/// then deflate).
std::string unreadable_filters(hid_t dcpl);

/// The check of one dataset's compressed chunks, each checked once (a chunk checked is
/// remembered). A dataset that is not chunked and filtered needs none.
class ChunkCheck {
 public:
  explicit ChunkCheck(hid_t dset);
  /// Whether the dataset has chunks to check.
  bool needed() const { return filtered_; }
  /// Checks the chunks that hold elements [first, first + count) of a 1-D dataset; "" when
  /// they are sound, else what is wrong (a read of them must not go to HDF5).
  std::string check_range(hid_t dset, hsize_t first, hsize_t count);
  /// Checks every chunk of the dataset (any rank).
  std::string check_all(hid_t dset);

 private:
  std::string check_chunk(hid_t dset, const hsize_t* offset, hsize_t stored);
  void release();  // the buffers of one check, freed when it ends
  bool filtered_ = false;
  std::string unreadable_;
  std::vector<hsize_t> chunk_dims_;
  std::size_t chunk_bytes_ = 0;  // 0: too large to check (refused)
  unsigned deflate_bit_ = 0;     // deflate's bit in a chunk's filter mask
  hsize_t file_bytes_ = 0;       // no chunk stores more
  std::vector<bool> done_;       // 1-D: per chunk position
  std::vector<unsigned char> raw_, out_;
};

}  // namespace tessera::io::h5
