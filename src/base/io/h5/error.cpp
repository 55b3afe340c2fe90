// The error policy of Tessera's HDF5 layer (see error.hpp).
#include "io/h5/error.hpp"

#include <hdf5.h>

#include <algorithm>
#include <string>

namespace tessera::io::h5 {

void quiet_errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

namespace {

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (n == 0 && e && e->desc) {
    *s = e->desc;
    // Some span lines (sec2's "file write failed: time = ...\n, filename = ..."): one
    // line, as every Tessera error.
    std::replace(s->begin(), s->end(), '\n', ' ');
  }
  return 0;
}

}  // namespace

std::string detail() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &s);
  H5Eclear2(H5E_DEFAULT);
  return s.empty() ? std::string() : " (HDF5: " + s + ")";
}

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

std::string in_file(const std::string& path, const std::string& what) {
  return quoted(path) + ": " + what;
}

void fail(const std::string& path, const std::string& operation, const std::string& object) {
  throw InputError(in_file(path, "cannot " + operation + " '" + object + "'" + detail()));
}

}  // namespace tessera::io::h5
