// Typed attributes of HDF5 objects (src/base/io/h5/, docs/io-hdf5.md), shared by the tensor
// store, model files and checkpoints. `loc` is a file, group or dataset; `path` is the file
// the messages name. Failures are InputErrors in the layer's form (error.hpp), e.g.
// "'x.h5': cannot read attribute 'dims' (HDF5: ...)".
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io::h5 {

/// Whether an attribute exists. HDF5 failing to tell (a corrupted object header) is an
/// error ("cannot read the attributes of 'path' ...: the file is corrupted"), not "missing".
bool has_attr(hid_t loc, const char* name, const std::string& path);

// ---- writing (little-endian file types; the attribute must not exist yet) ----

/// A scalar int64.
void write_i64(hid_t loc, const char* name, long long v, const std::string& path);
/// A scalar uint64.
void write_u64(hid_t loc, const char* name, std::uint64_t v, const std::string& path);
/// A 1-D uint64 array (of v.size() elements).
void write_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v,
                const std::string& path);
/// A scalar float64.
void write_f64(hid_t loc, const char* name, double v, const std::string& path);
/// A scalar fixed-length, null-terminated string ("" is stored as one NUL byte).
void write_string(hid_t loc, const char* name, const std::string& s, const std::string& path);
/// Replaces the value of an existing scalar integer attribute (the store's `complete`).
void overwrite_i64(hid_t loc, const char* name, long long v, const std::string& path);

// ---- reading (the attribute must exist: test has_attr first where it is optional) ----

/// One string, fixed-length or variable-length (as h5py writes them): up to the first NUL,
/// trailing spaces removed.
std::string read_string(hid_t loc, const char* name, const std::string& path);

/// Every value of an integer attribute (any integer type, scalar or array), converted to
/// Int: std::int64_t or std::uint64_t.
template <typename Int>
std::vector<Int> read_ints(hid_t loc, const char* name, const std::string& path);

/// One integer (a scalar or a 1-element array) as int64 / uint64.
long long read_i64(hid_t loc, const char* name, const std::string& path);
std::uint64_t read_u64(hid_t loc, const char* name, const std::string& path);

/// One number (integer or float) as float64.
double read_f64(hid_t loc, const char* name, const std::string& path);

}  // namespace tessera::io::h5
