// Helpers of the HDF5 tensor store tests: damage a store in every way the readers must
// catch (truncation, flipped bytes, missing or retyped datasets, attributes that disagree
// with the data, bad partitions). One process; HDF5's C API directly.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::test::h5 {

inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("test helper failed: " + what);
}

inline void copy(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

inline std::uint64_t size_of(const std::string& p) {
  return std::filesystem::file_size(p);
}

inline void truncate(const std::string& p, std::uint64_t bytes) {
  std::filesystem::resize_file(p, bytes);
}

/// Inverts n bytes at `offset`.
inline void flip(const std::string& p, std::uint64_t offset, int n = 1) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  check(f.good(), "open " + p);
  for (int i = 0; i < n; ++i) {
    f.seekg(static_cast<std::streamoff>(offset + i));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(~c);
    f.seekp(static_cast<std::streamoff>(offset + i));
    f.write(&c, 1);
  }
}

/// An open file (read-write) closed on scope exit.
struct File {
  hid_t id;
  explicit File(const std::string& p) : id(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    check(id >= 0, "H5Fopen " + p);
  }
  ~File() { H5Fclose(id); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
};

/// File offset of the chunk holding element `pos` of a 1-D chunked dataset.
inline std::uint64_t chunk_address(const std::string& p, const std::string& dset, hsize_t pos) {
  File f(p);
  hid_t d = H5Dopen2(f.id, dset.c_str(), H5P_DEFAULT);
  check(d >= 0, "open " + dset);
  hid_t dcpl = H5Dget_create_plist(d);
  hsize_t chunk = 0;
  H5Pget_chunk(dcpl, 1, &chunk);
  H5Pclose(dcpl);
  const hsize_t at = pos / chunk * chunk;
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  check(H5Dget_chunk_info_by_coord(d, &at, &mask, &addr, &size) >= 0, "chunk info");
  H5Dclose(d);
  return addr;
}

inline void remove(const std::string& p, const std::string& object) {
  File f(p);
  check(H5Ldelete(f.id, object.c_str(), H5P_DEFAULT) >= 0, "delete " + object);
}

inline void set_attr_u64s(const std::string& p, const char* name,
                          const std::vector<std::uint64_t>& v, bool scalar = false) {
  File f(p);
  if (H5Aexists(f.id, name) > 0) H5Adelete(f.id, name);
  const hsize_t n = v.size();
  hid_t sp = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(f.id, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, v.data()) >= 0, std::string("attr ") + name);
  H5Aclose(a);
  H5Sclose(sp);
}

inline void set_attr_i64(const std::string& p, const char* name, long long v) {
  File f(p);
  if (H5Aexists(f.id, name) > 0) H5Adelete(f.id, name);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f.id, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0, std::string("attr ") + name);
  H5Aclose(a);
  H5Sclose(sp);
}

inline void set_attr_string(const std::string& p, const char* name, const std::string& s) {
  File f(p);
  if (H5Aexists(f.id, name) > 0) H5Adelete(f.id, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, s.size());
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f.id, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, t, s.data()) >= 0, std::string("attr ") + name);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}

/// Replaces a dataset with one of the given file type and shape (contents zero).
inline void replace(const std::string& p, const std::string& dset, hid_t type,
                    std::vector<hsize_t> shape) {
  File f(p);
  H5Ldelete(f.id, dset.c_str(), H5P_DEFAULT);
  hid_t sp = H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr);
  hid_t d = H5Dcreate2(f.id, dset.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  check(d >= 0, "create " + dset);
  H5Dclose(d);
  H5Sclose(sp);
}

/// Writes one element of a 1-D dataset (mem_type: H5T_NATIVE_UINT32, _UINT64, _DOUBLE).
template <typename T>
void poke(const std::string& p, const std::string& dset, hsize_t pos, T v, hid_t mem_type) {
  File f(p);
  hid_t d = H5Dopen2(f.id, dset.c_str(), H5P_DEFAULT);
  check(d >= 0, "open " + dset);
  hid_t fs = H5Dget_space(d);
  const hsize_t one = 1;
  hid_t ms = H5Screate_simple(1, &one, nullptr);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &pos, nullptr, &one, nullptr);
  check(H5Dwrite(d, mem_type, ms, fs, H5P_DEFAULT, &v) >= 0, "write " + dset);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
}

/// Whole 1-D dataset as uint64.
inline std::vector<std::uint64_t> read_u64s(const std::string& p, const std::string& dset) {
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  check(f >= 0, "open " + p);
  hid_t d = H5Dopen2(f, dset.c_str(), H5P_DEFAULT);
  check(d >= 0, "open " + dset);
  hid_t sp = H5Dget_space(d);
  std::vector<std::uint64_t> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
  H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

inline void write_u64s(const std::string& p, const std::string& dset,
                       const std::vector<std::uint64_t>& v) {
  File f(p);
  H5Ldelete(f.id, dset.c_str(), H5P_DEFAULT);
  const hsize_t n = v.size();
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t d =
      H5Dcreate2(f.id, dset.c_str(), H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  check(d >= 0 && H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0,
        "write " + dset);
  H5Dclose(d);
  H5Sclose(sp);
}

}  // namespace tessera::test::h5
