// The error policy of Tessera's HDF5 layer (src/base/io/h5/, docs/io-hdf5.md): HDF5's own error
// printing is off, and every failing HDF5 call becomes an InputError whose message names the
// file, the object and the operation, with HDF5's innermost reason in parentheses.
#pragma once

#include <string>

#include "util/error.hpp"

namespace tessera::io::h5 {

/// Turns HDF5's automatic error-stack printing off for the calling thread (HDF5 keeps one
/// error stack per thread in thread-safe builds). The only place Tessera touches HDF5's
/// error reporting. Called by the layer's file opens and creates, and by every public entry
/// point that calls HDF5 on a thread of its own (the tier-3 prefetch threads). Not restored
/// on purpose: HDF5 1.10 leaks internal free-list blocks after a failed metadata read (a
/// corrupted file) and, with printing back on, reports "infinite loop closing library" at
/// exit.
void quiet_errors();

/// The most specific message on this thread's HDF5 error stack as " (HDF5: ...)", or "" when
/// the stack is empty. Clears the stack. Call it right after the failing call: every HDF5
/// API call starts by clearing the stack.
std::string detail();

/// `'path'`, as every message quotes a file name.
std::string quoted(const std::string& path);

/// `'path': what`, the form of the layer's messages.
std::string in_file(const std::string& path, const std::string& what);

/// Throws the layer's error for a failing call:
/// InputError("'path': cannot <operation> '<object>' (HDF5: <reason>)").
[[noreturn]] void fail(const std::string& path, const std::string& operation,
                       const std::string& object);

/// `rc` when the call succeeded (rc >= 0: herr_t, htri_t, hid_t, hssize_t), else
/// fail(path, operation, object).
template <typename R>
R check(R rc, const std::string& path, const char* operation, const std::string& object) {
  if (rc < 0) fail(path, operation, object);
  return rc;
}

}  // namespace tessera::io::h5
