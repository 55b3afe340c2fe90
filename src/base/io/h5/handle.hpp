// The one RAII type for HDF5 identifiers (src/base/io/h5/: Tessera's HDF5 layer, docs/io-hdf5.md).
// Header-only, so test helpers that craft damaged files with HDF5's C API use it too.
#pragma once

#include <hdf5.h>

#include <utility>

namespace tessera::io::h5 {

/// Owns one HDF5 identifier (file, group, dataset, dataspace, attribute, datatype or
/// property list) and closes it with the matching H5?close on scope exit. Move-only. A
/// failed open or create (an id < 0) is held as "nothing": valid() is false and nothing is
/// closed, so `Handle h = h5::dataset(H5Dopen2(...)); if (!h.valid()) ...` is the pattern.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Handle() = default;
  Handle(hid_t id, Closer close) noexcept : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  /// Closes now, ignoring failure (scope exit, error paths).
  void reset() noexcept {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  /// Closes now and reports whether HDF5 succeeded: closing a file flushes it, so a writer
  /// checks this (h5::close_file turns a failure into an error naming the file).
  [[nodiscard]] bool close() noexcept {
    const herr_t r = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return r >= 0;
  }
  hid_t get() const noexcept { return id_; }
  operator hid_t() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// Named constructors: the closer that matches what created the id.
inline Handle file(hid_t id) noexcept {
  return {id, H5Fclose};
}
inline Handle group(hid_t id) noexcept {
  return {id, H5Gclose};
}
inline Handle dataset(hid_t id) noexcept {
  return {id, H5Dclose};
}
inline Handle space(hid_t id) noexcept {
  return {id, H5Sclose};
}
inline Handle attribute(hid_t id) noexcept {
  return {id, H5Aclose};
}
inline Handle datatype(hid_t id) noexcept {
  return {id, H5Tclose};
}
inline Handle plist(hid_t id) noexcept {
  return {id, H5Pclose};
}

}  // namespace tessera::io::h5
