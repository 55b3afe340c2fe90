// Typed attributes of HDF5 objects (see attribute.hpp).
#include "io/h5/attribute.hpp"

#include <algorithm>
#include <type_traits>

#include "io/h5/error.hpp"
#include "io/h5/handle.hpp"

namespace tessera::io::h5 {
namespace {

/// Creates attribute `name` of `file_type` over `sp` and writes `data` (in `mem_type`).
void put(hid_t loc, const char* name, hid_t file_type, const Handle& sp, hid_t mem_type,
         const void* data, const std::string& path) {
  const Handle a = attribute(H5Acreate2(loc, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT));
  if (!sp.valid() || !a.valid() || H5Awrite(a, mem_type, data) < 0)
    fail(path, "write attribute", name);
}

Handle open(hid_t loc, const char* name, const std::string& path) {
  Handle a = attribute(H5Aopen(loc, name, H5P_DEFAULT));
  if (!a.valid()) fail(path, "read attribute", name);
  return a;
}

}  // namespace

bool has_attr(hid_t loc, const char* name, const std::string& path) {
  const htri_t r = H5Aexists(loc, name);
  if (r < 0)
    throw InputError("cannot read the attributes of " + quoted(path) + detail() +
                     ": the file is corrupted");
  return r > 0;
}

void write_i64(hid_t loc, const char* name, long long v, const std::string& path) {
  put(loc, name, H5T_STD_I64LE, space(H5Screate(H5S_SCALAR)), H5T_NATIVE_LLONG, &v, path);
}

void write_u64(hid_t loc, const char* name, std::uint64_t v, const std::string& path) {
  put(loc, name, H5T_STD_U64LE, space(H5Screate(H5S_SCALAR)), H5T_NATIVE_UINT64, &v, path);
}

void write_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v,
                const std::string& path) {
  const hsize_t n = v.size();
  put(loc, name, H5T_STD_U64LE, space(H5Screate_simple(1, &n, nullptr)), H5T_NATIVE_UINT64,
      v.data(), path);
}

void write_f64(hid_t loc, const char* name, double v, const std::string& path) {
  put(loc, name, H5T_IEEE_F64LE, space(H5Screate(H5S_SCALAR)), H5T_NATIVE_DOUBLE, &v, path);
}

void write_string(hid_t loc, const char* name, const std::string& s, const std::string& path) {
  const Handle t = datatype(H5Tcopy(H5T_C_S1));
  if (!t.valid() || H5Tset_size(t, s.empty() ? 1 : s.size()) < 0 ||
      H5Tset_strpad(t, H5T_STR_NULLTERM) < 0)
    fail(path, "write attribute", name);
  const std::string buf = s.empty() ? std::string(1, '\0') : s;
  put(loc, name, t, space(H5Screate(H5S_SCALAR)), t, buf.data(), path);
}

void overwrite_i64(hid_t loc, const char* name, long long v, const std::string& path) {
  const Handle a = attribute(H5Aopen(loc, name, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0) fail(path, "write attribute", name);
}

std::string read_string(hid_t loc, const char* name, const std::string& path) {
  const Handle a = open(loc, name, path);
  const Handle t = datatype(H5Aget_type(a));
  const Handle sp = space(H5Aget_space(a));
  if (H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
    throw InputError(in_file(
        path, std::string("attribute '") + name + "' must be one string (found another type)"));
  std::string s;
  if (H5Tis_variable_str(t) > 0) {
    const Handle mt = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(t));
    char* p = nullptr;
    if (H5Aread(a, mt, &p) < 0) fail(path, "read attribute", name);
    if (p) {
      s = p;
      H5free_memory(p);
    }
  } else {
    const std::size_t n = H5Tget_size(t);
    s.assign(n, '\0');
    const Handle mt = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, n);
    H5Tset_strpad(mt, H5Tget_strpad(t));
    if (H5Aread(a, mt, s.data()) < 0) fail(path, "read attribute", name);
    const auto z = s.find('\0');
    if (z != std::string::npos) s.resize(z);
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return s;
}

template <typename Int>
std::vector<Int> read_ints(hid_t loc, const char* name, const std::string& path) {
  const Handle a = open(loc, name, path);
  const Handle t = datatype(H5Aget_type(a));
  if (H5Tget_class(t) != H5T_INTEGER)
    throw InputError(in_file(
        path, std::string("attribute '") + name + "' must be an integer (found another type)"));
  const Handle sp = space(H5Aget_space(a));
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<Int> v(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  const hid_t mt = std::is_signed_v<Int> ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
  if (!v.empty() && H5Aread(a, mt, v.data()) < 0) fail(path, "read attribute", name);
  return v;
}

template std::vector<std::int64_t> read_ints<std::int64_t>(hid_t, const char*, const std::string&);
template std::vector<std::uint64_t> read_ints<std::uint64_t>(hid_t, const char*,
                                                             const std::string&);

namespace {

template <typename Int>
Int read_one(hid_t loc, const char* name, const std::string& path) {
  const auto v = read_ints<Int>(loc, name, path);
  if (v.size() != 1)
    throw InputError(in_file(path, std::string("attribute '") + name +
                                       "' must be one integer, found " + std::to_string(v.size()) +
                                       " values"));
  return v[0];
}

}  // namespace

long long read_i64(hid_t loc, const char* name, const std::string& path) {
  return read_one<std::int64_t>(loc, name, path);
}

std::uint64_t read_u64(hid_t loc, const char* name, const std::string& path) {
  return read_one<std::uint64_t>(loc, name, path);
}

double read_f64(hid_t loc, const char* name, const std::string& path) {
  const Handle a = open(loc, name, path);
  const Handle t = datatype(H5Aget_type(a));
  const Handle sp = space(H5Aget_space(a));
  const H5T_class_t cls = H5Tget_class(t);
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || H5Sget_simple_extent_npoints(sp) != 1)
    throw InputError(in_file(path, std::string("attribute '") + name + "' must be one number"));
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) fail(path, "read attribute", name);
  return v;
}

}  // namespace tessera::io::h5
