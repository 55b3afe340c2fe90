// HDF5 model files (readable with h5py / h5dump). Layout (format "tessera-kruskal" v1):
//   attributes on /: format (string), format_version (int), order (int), rank (int),
//                    dims (uint64[order]), fit (double), iterations (int),
//                    options (string, JSON of the run's options)
//   /lambda            double[R]
//   /factors/mode_<n>  double[dims[n]][R]  (row-major, row i = index i, 0-based)
//   /fit_history       double[iterations]
// Every dataset carries an attribute crc32 (uint64): zlib's CRC-32 of its values as
// little-endian float64, checked by every reader (verify_checksum below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/kruskal.hpp"
#include "model/tucker.hpp"
#include "util/error.hpp"

namespace tessera::io {

/// A model file or checkpoint whose data no longer matches its stored checksum. Every
/// reader lets it through unchanged, so the CLI, --resume, --init file: and Python print the
/// same line.
class ChecksumError : public InputError {
 public:
  explicit ChecksumError(const std::string& msg) : InputError(msg) {}
};

/// The one checksum check of model files and checkpoints: throws ChecksumError
/// "'PATH': checksum mismatch in WHAT (stored S, computed C): ..." when stored != computed.
/// `what` names the data, e.g. "dataset '/factors/mode_1'".
void verify_checksum(const std::string& path, const std::string& what, std::uint64_t stored,
                     std::uint64_t computed);

/// zlib's CRC-32 of `n` values as little-endian float64 (a dataset's crc32 attribute).
std::uint64_t values_crc32(const double* v, std::size_t n);

struct ModelRecord {
  double fit = 0;
  int iterations = 0;
  std::vector<double> fit_history;
  std::string options_json = "{}";
};

/// Writes the model to `path` through a temporary name renamed when complete, so an
/// interrupted write never leaves a file that looks valid (io::AtomicOutput: the temporary
/// is removed on any error; a character device or FIFO is refused, HDF5 needs a seekable
/// file). Call on one rank.
void write_kruskal_h5(const std::string& path, const KruskalModel& m, const ModelRecord& rec);

/// Reads a file written by write_kruskal_h5; throws InputError on a wrong layout and
/// ChecksumError when a dataset's crc32 does not match (files without crc32 attributes,
/// e.g. written by older versions or by h5py, are read unchecked).
KruskalModel read_kruskal_h5(const std::string& path, ModelRecord* rec = nullptr);

// Tucker layout (format "tessera-tucker" v1, docs/formats.md):
//   attributes on /: format, format_version, order, ranks (uint64[order]),
//                    dims (uint64[order]), fit, iterations, options (JSON string)
//   /core              double[R_1]...[R_N]  (row-major, the last mode fastest)
//   /factors/mode_<n>  double[dims[n]][R_n] (orthonormal columns; row i = index i)
//   /fit_history       double[iterations]

/// Writes a Tucker model through a temporary name renamed when complete. Call on one rank.
void write_tucker_h5(const std::string& path, const TuckerModel& m, const ModelRecord& rec);

/// Reads a file written by write_tucker_h5; errors as read_kruskal_h5.
TuckerModel read_tucker_h5(const std::string& path, ModelRecord* rec = nullptr);

/// What a file holds, from its root attributes alone (no dataset is read): `format` is
/// "tessera-kruskal" or "tessera-tucker" for a model or checkpoint ("" for anything else:
/// not a regular file, not HDF5, another format), `checkpoint` whether it carries the
/// checkpoint attributes (io/checkpoint.hpp); for a CP model, its `rank` and `dims` (0 and
/// empty when unreadable). Never throws.
struct ModelFileKind {
  std::string format;
  bool checkpoint = false;
  int rank = 0;
  std::vector<std::uint64_t> dims;
};
ModelFileKind probe_model_file(const std::string& path);

}  // namespace tessera::io
