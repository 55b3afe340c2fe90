// Helpers of the HDF5 tensor store tests: damage a store in every way the readers must
// catch (truncation, flipped bytes, missing or retyped datasets, attributes that disagree
// with the data, bad partitions). One process; HDF5's C API directly, its ids held by the
// io::h5::Handle of src/base/io/h5/handle.hpp (header-only: no link to tessera::io needed).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/h5/handle.hpp"

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

/// The file opened read-write (closed on scope exit, as every handle here).
inline io::h5::Handle open_rw(const std::string& p) {
  io::h5::Handle f = io::h5::file(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  check(f.valid(), "H5Fopen " + p);
  return f;
}

inline io::h5::Handle open_dataset(hid_t f, const std::string& dset) {
  io::h5::Handle d = io::h5::dataset(H5Dopen2(f, dset.c_str(), H5P_DEFAULT));
  check(d.valid(), "open " + dset);
  return d;
}

/// File offset of the chunk holding element `pos` of a 1-D chunked dataset.
inline std::uint64_t chunk_address(const std::string& p, const std::string& dset, hsize_t pos) {
  const auto f = open_rw(p);
  const auto d = open_dataset(f, dset);
  const auto dcpl = io::h5::plist(H5Dget_create_plist(d));
  hsize_t chunk = 0;
  H5Pget_chunk(dcpl, 1, &chunk);
  const hsize_t at = pos / chunk * chunk;
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  check(H5Dget_chunk_info_by_coord(d, &at, &mask, &addr, &size) >= 0, "chunk info");
  return addr;
}

inline void remove(const std::string& p, const std::string& object) {
  const auto f = open_rw(p);
  check(H5Ldelete(f, object.c_str(), H5P_DEFAULT) >= 0, "delete " + object);
}

/// Replaces root attribute `name` with one of `file_type` over `sp`, holding `data`.
inline void set_attr(const std::string& p, const char* name, hid_t file_type, hid_t sp,
                     hid_t mem_type, const void* data) {
  const auto f = open_rw(p);
  if (H5Aexists(f, name) > 0) H5Adelete(f, name);
  const auto a = io::h5::attribute(H5Acreate2(f, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && H5Awrite(a, mem_type, data) >= 0, std::string("attr ") + name);
}

inline void set_attr_u64s(const std::string& p, const char* name,
                          const std::vector<std::uint64_t>& v, bool scalar = false) {
  const hsize_t n = v.size();
  const auto sp = io::h5::space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr));
  set_attr(p, name, H5T_STD_U64LE, sp, H5T_NATIVE_UINT64, v.data());
}

inline void set_attr_i64(const std::string& p, const char* name, long long v) {
  const auto sp = io::h5::space(H5Screate(H5S_SCALAR));
  set_attr(p, name, H5T_STD_I64LE, sp, H5T_NATIVE_LLONG, &v);
}

inline void set_attr_string(const std::string& p, const char* name, const std::string& s) {
  const auto t = io::h5::datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, s.size());
  const auto sp = io::h5::space(H5Screate(H5S_SCALAR));
  set_attr(p, name, t, sp, t, s.data());
}

/// Replaces a dataset with one of the given file type and shape (contents zero).
inline void replace(const std::string& p, const std::string& dset, hid_t type,
                    std::vector<hsize_t> shape) {
  const auto f = open_rw(p);
  H5Ldelete(f, dset.c_str(), H5P_DEFAULT);
  const auto sp =
      io::h5::space(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr));
  const auto d =
      io::h5::dataset(H5Dcreate2(f, dset.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  check(d.valid(), "create " + dset);
}

/// Writes one element of a 1-D dataset (mem_type: H5T_NATIVE_UINT32, _UINT64, _DOUBLE).
template <typename T>
void poke(const std::string& p, const std::string& dset, hsize_t pos, T v, hid_t mem_type) {
  const auto f = open_rw(p);
  const auto d = open_dataset(f, dset);
  const auto fs = io::h5::space(H5Dget_space(d));
  const hsize_t one = 1;
  const auto ms = io::h5::space(H5Screate_simple(1, &one, nullptr));
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &pos, nullptr, &one, nullptr);
  check(H5Dwrite(d, mem_type, ms, fs, H5P_DEFAULT, &v) >= 0, "write " + dset);
}

/// Whole 1-D dataset as uint64.
inline std::vector<std::uint64_t> read_u64s(const std::string& p, const std::string& dset) {
  const auto f = io::h5::file(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  check(f.valid(), "open " + p);
  const auto d = open_dataset(f, dset);
  const auto sp = io::h5::space(H5Dget_space(d));
  std::vector<std::uint64_t> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
  H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  return v;
}

inline void write_u64s(const std::string& p, const std::string& dset,
                       const std::vector<std::uint64_t>& v) {
  const auto f = open_rw(p);
  H5Ldelete(f, dset.c_str(), H5P_DEFAULT);
  const hsize_t n = v.size();
  const auto sp = io::h5::space(H5Screate_simple(1, &n, nullptr));
  const auto d = io::h5::dataset(
      H5Dcreate2(f, dset.c_str(), H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  check(d.valid() && H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0,
        "write " + dset);
}

}  // namespace tessera::test::h5
