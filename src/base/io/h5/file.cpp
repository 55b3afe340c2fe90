// Opening, creating and closing HDF5 files (see file.hpp).
#include "io/h5/file.hpp"

#include "io/h5/attribute.hpp"

namespace tessera::io::h5 {

bool is_hdf5(const std::string& path) {
  quiet_errors();
  const bool yes = H5Fis_hdf5(path.c_str()) > 0;
  H5Eclear2(H5E_DEFAULT);
  return yes;
}

Handle try_open_file(const std::string& path, unsigned flags, hid_t fapl) {
  quiet_errors();
  return file(H5Fopen(path.c_str(), flags, fapl));
}

Handle open_file(const std::string& path, unsigned flags, hid_t fapl) {
  Handle f = try_open_file(path, flags, fapl);
  if (!f.valid()) throw InputError("cannot open " + quoted(path) + " as an HDF5 file" + detail());
  return f;
}

Handle create_file(const std::string& path, unsigned flags, hid_t fcpl, hid_t fapl) {
  quiet_errors();
  Handle f = file(H5Fcreate(path.c_str(), flags, fcpl, fapl));
  if (!f.valid()) throw InputError("cannot create " + quoted(path) + detail());
  return f;
}

void close_file(Handle& f, const std::string& path) {
  const bool flushed = !f.valid() || H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0;
  std::string why = flushed ? std::string() : detail();
  const bool closed = f.close();
  if (!closed && why.empty()) why = detail();
  if (!flushed || !closed) throw InputError("cannot write " + quoted(path) + why);
}

std::string peek_format(const std::string& path) {
  try {
    const Handle f = try_open_file(path, H5F_ACC_RDONLY);
    if (!f.valid() || !has_attr(f, "format", path)) return "";
    return read_string(f, "format", path);
  } catch (...) {
    return "";
  }
}

}  // namespace tessera::io::h5
