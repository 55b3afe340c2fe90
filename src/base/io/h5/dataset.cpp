// Datasets and links of HDF5 files (see dataset.hpp).
#include "io/h5/dataset.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "io/h5/error.hpp"
#include "io/h5/filter.hpp"

namespace tessera::io::h5 {

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
      throw InputError("cannot look up '" + prefix + "' in " + quoted(path) + detail() +
                       ": the file is corrupted");
    if (r == 0) return false;
    prefix += '/';
    at = slash + 1;
  }
  return true;
}

std::string type_text(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  std::ostringstream os;
  switch (cls) {
    case H5T_INTEGER:
      os << (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") << 8 * size;
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

Handle open_dataset(hid_t loc, const std::string& name, const std::string& path,
                    const std::string& expected, hid_t dapl) {
  if (!has_link(loc, name, path))
    throw InputError(in_file(path, "dataset '" + name + "' (" + expected + ") is missing"));
  Handle d = dataset(H5Dopen2(loc, name.c_str(), dapl));
  if (!d.valid())
    throw InputError(in_file(
        path, "cannot open '" + name + "' as a dataset (expected " + expected + ")" + detail()));
  return d;
}

std::vector<hsize_t> shape_of(hid_t dset, const std::string& name, const std::string& path) {
  const Handle sp = space(H5Dget_space(dset));
  const int nd = sp.valid() ? H5Sget_simple_extent_ndims(sp) : -1;
  if (nd < 0) fail(path, "read the shape of", name);
  std::vector<hsize_t> shape(static_cast<std::size_t>(nd));
  if (nd > 0 && H5Sget_simple_extent_dims(sp, shape.data(), nullptr) < 0)
    fail(path, "read the shape of", name);
  return shape;
}

Handle create_dataset(hid_t loc, const std::string& name, hid_t file_type,
                      const std::vector<hsize_t>& shape, const std::string& path, hid_t dcpl) {
  const Handle sp = space(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr));
  Handle d = dataset(
      sp.valid() ? H5Dcreate2(loc, name.c_str(), file_type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)
                 : -1);
  if (!d.valid()) fail(path, "create dataset", name);
  return d;
}

namespace {

bool empty(hid_t dset) {
  const Handle sp = space(H5Dget_space(dset));
  return sp.valid() && H5Sget_simple_extent_npoints(sp) == 0;
}

/// read_range's and write_range's spaces: dset's file space with [first, first + count)
/// selected (fs) and a memory space of count elements (ms); false where HDF5 fails.
bool select_range(hid_t dset, hsize_t first, hsize_t count, Handle& fs, Handle& ms) {
  fs = space(H5Dget_space(dset));
  ms = space(H5Screate_simple(1, &count, nullptr));
  return fs.valid() && ms.valid() &&
         H5Sselect_hyperslab(fs, H5S_SELECT_SET, &first, nullptr, &count, nullptr) >= 0;
}

}  // namespace

void read_all(hid_t dset, hid_t mem_type, void* out, const std::string& name,
              const std::string& path) {
  if (empty(dset)) return;
  ChunkCheck check(dset);
  const std::string why = check.check_all(dset);
  if (!why.empty()) throw InputError(in_file(path, "dataset '" + name + "' " + why));
  if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) fail(path, "read", name);
}

void write_all(hid_t dset, hid_t mem_type, const void* in, const std::string& name,
               const std::string& path) {
  if (empty(dset)) return;
  if (H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, in) < 0) fail(path, "write", name);
}

herr_t read_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                  ChunkCheck* check, std::string* why) {
  if (count == 0) return 0;
  Handle fs, ms;
  if (!select_range(dset, first, count, fs, ms)) return -1;
  std::optional<ChunkCheck> mine;
  if (check == nullptr) check = &mine.emplace(dset);
  std::string bad = check->check_range(dset, first, count);
  if (!bad.empty()) {
    if (why != nullptr) *why = std::move(bad);
    return -1;
  }
  return H5Dread(dset, mem_type, ms, fs, H5P_DEFAULT, out);
}

herr_t write_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, const void* in) {
  if (count == 0) return 0;
  Handle fs, ms;
  if (!select_range(dset, first, count, fs, ms)) return -1;
  return H5Dwrite(dset, mem_type, ms, fs, H5P_DEFAULT, in);
}

void check_storage_sizes(hid_t dset, hid_t dcpl, const std::string& name, hsize_t length,
                         hsize_t chunk, std::size_t elem, const std::string& path) {
  if (length == 0 || H5Pget_external_count(dcpl) != 0) return;
  const auto corrupt = [&](const std::string& what) {
    return InputError(in_file(path, "dataset '" + name + "' " + what +
                                        ": the file is corrupted (its storage sizes "
                                        "disagree with its shape)"));
  };
  const bool filtered = H5Pget_nfilters(dcpl) > 0;
  if (filtered) {
    const std::string why = unreadable_filters(dcpl);
    if (!why.empty()) throw InputError(in_file(path, "dataset '" + name + "' " + why));
  }
  const hsize_t storage = H5Dget_storage_size(dset);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    if (!filtered && storage != 0 && storage != length * elem)
      throw corrupt("stores " + std::to_string(storage) + " bytes for " + std::to_string(length) +
                    " elements of " + std::to_string(elem) + " bytes");
    return;
  }
  if (layout != H5D_CHUNKED || chunk == 0) return;
  const hsize_t chunk_bytes = chunk * elem;
  const hsize_t nchunks = (length + chunk - 1) / chunk;
  const hsize_t file_bytes = file_size_of(dset);
#if H5_VERSION_GE(1, 10, 5)
  // Every chunk must be stored (Tessera allocates them all at creation, or writes each one
  // compressed; h5py writes every chunk of the data it is given), one index lookup each:
  // an unfiltered chunk holds exactly its bytes; a compressed one must be able to inflate
  // to them (zlib compresses 1032:1 at most), else reading it would allocate what the file
  // cannot fill; none lies at address 0 (the superblock) or past the end of the file. So
  // every chunk buffer HDF5 allocates is bounded by the file's size (x 1032 compressed).
  // HDF5 1.10 reads past its own buffers on chunk indexes that break these
  // (tests/fuzz/fuzz_h5store).
  const Handle sp = space(H5Dget_space(dset));
  hsize_t allocated = 0;
  if (!sp.valid() || H5Dget_num_chunks(dset, sp, &allocated) < 0)
    throw corrupt("has an unreadable chunk index" + detail());
  if (allocated != nchunks)
    throw corrupt("has " + std::to_string(allocated) + " chunks stored for its " +
                  std::to_string(nchunks) + " chunk positions");
  for (hsize_t k = 0; k < nchunks; ++k) {
    hsize_t offset = k * chunk, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(dset, &offset, &mask, &addr, &size) < 0)
      throw corrupt("has an unreadable chunk index" + detail());
    if (addr == HADDR_UNDEF || addr == 0)
      throw corrupt("has no stored chunk at element " + std::to_string(offset) +
                    " though its index counts " + std::to_string(allocated));
    if (file_bytes > 0 && (size > file_bytes || addr > file_bytes - size))
      throw corrupt("has a chunk of " + std::to_string(size) + " bytes at element " +
                    std::to_string(offset) + " beyond the end of the file (" +
                    std::to_string(file_bytes) + " bytes)");
    if (!filtered && size != chunk_bytes)
      throw corrupt("has a chunk of " + std::to_string(size) + " bytes at element " +
                    std::to_string(offset) + ", expected " + std::to_string(chunk_bytes));
    if (filtered) {
      const std::string bad = compressed_size_problem(size, chunk_bytes);
      if (!bad.empty())
        throw corrupt("has a compressed chunk of " + std::to_string(size) + " bytes at element " +
                      std::to_string(offset) + ", " + bad);
    }
  }
#else
  if (!filtered && storage != 0 && storage % chunk_bytes != 0)
    throw corrupt("stores " + std::to_string(storage) + " bytes, not whole chunks of " +
                  std::to_string(chunk_bytes));
#endif
}

}  // namespace tessera::io::h5
