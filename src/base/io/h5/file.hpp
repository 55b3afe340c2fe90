// Opening, creating and closing HDF5 files (src/base/io/h5/, docs/io-hdf5.md). Every function
// here calls h5::quiet_errors() first. Callers stat() the path before: HDF5 would block
// opening a FIFO that has no writer.
#pragma once

#include <string>

#include "io/h5/error.hpp"
#include "io/h5/handle.hpp"

namespace tessera::io::h5 {

/// HDF5's own test for an HDF5 file (H5Fis_hdf5); false on any failure.
bool is_hdf5(const std::string& path);

/// Opens an existing file (flags H5F_ACC_RDONLY or H5F_ACC_RDWR). The handle is invalid on
/// failure and HDF5's reason is left for detail(): for callers with a message of their own.
Handle try_open_file(const std::string& path, unsigned flags, hid_t fapl = H5P_DEFAULT);

/// try_open_file, or InputError "cannot open 'path' as an HDF5 file (HDF5: ...)".
Handle open_file(const std::string& path, unsigned flags, hid_t fapl = H5P_DEFAULT);

/// Creates a file (flags H5F_ACC_TRUNC or H5F_ACC_EXCL), or InputError
/// "cannot create 'path' (HDF5: ...)".
Handle create_file(const std::string& path, unsigned flags, hid_t fcpl = H5P_DEFAULT,
                   hid_t fapl = H5P_DEFAULT);

/// Flushes and closes a file opened for writing; InputError "cannot write 'path' (HDF5: ...)"
/// when either fails (closing writes what HDF5 still caches). Every object opened in the
/// file must be closed before (with the default close degree the file stays open otherwise).
void close_file(Handle& f, const std::string& path);

/// The string attribute `format` at the root of an HDF5 file, or "" when the file is not
/// HDF5, cannot be opened or has none (never throws): what kind of Tessera file this is.
std::string peek_format(const std::string& path);

}  // namespace tessera::io::h5
