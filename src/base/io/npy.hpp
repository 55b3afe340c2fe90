// NumPy .npy files, format version 1.0 (numpy.lib.format): written by `tessera export`
// (docs/formats.md, "Exporting a model"). A file is the magic "\x93NUMPY", the version
// bytes 1 0, a little-endian uint16 header length, the header (a Python dict literal with
// 'descr', 'fortran_order' and 'shape', padded with spaces and ended by '\n' so that the
// data starts at a multiple of 64 bytes), then the values in C (row-major) order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io {

/// The header of a .npy file, magic and padding included: descr '<f8' (or '<f4' when
/// `single`), fortran_order False, the given shape (a 1-D shape is written "(n,)").
/// Its size is a multiple of 64 bytes.
std::string npy_header(const std::vector<std::uint64_t>& shape, bool single = false);

/// A whole .npy file holding `data` (prod(shape) values in row-major order): the header
/// then the values as little-endian float64, or float32 when `single` (rounded to nearest;
/// checked first with check_float32(name, ...)).
std::string npy_file(const std::vector<std::uint64_t>& shape, const double* data,
                     bool single = false, const std::string& name = "values");

/// The guard of every narrowing (float64 -> float32) output: throws InputError
/// "NAME[i, j] = V does not fit float32 (...)" naming the first value that is NaN or
/// infinite, or finite but beyond the float32 range (it would become inf). `shape` gives
/// the multi-index of the flat row-major position.
void check_float32(const std::string& name, const std::vector<std::uint64_t>& shape,
                   const double* data);

}  // namespace tessera::io
