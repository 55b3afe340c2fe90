// HDF5 tensor store (see h5store.hpp for the layout and the contracts): the value types,
// the stored partition's blocks and the detection of store files. The rest lives in
// h5store_read.cpp (reading through HDF5), h5store_direct.cpp (direct reads, read floor),
// h5store_write.cpp (writing) and h5store_internal.cpp (helpers shared by them); every HDF5
// call goes through the HDF5 layer in src/base/io/h5/ (docs/io-hdf5.md).
#include "io/h5store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace tessera::io {

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

}  // namespace tessera::io
