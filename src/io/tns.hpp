// FROSTT .tns text (optionally gzip-compressed): N coordinates then a value per line,
// '#' comments, 1-based by default. Reading and writing are collective over ranks.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::io {

enum class IndexBase { automatic, zero, one };
/// "auto" | "0" | "1"; throws InputError otherwise.
IndexBase parse_index_base(const std::string& s);

struct TnsReadOptions {
  IndexBase base = IndexBase::one;
  /// Show a progress bar on rank 0 when stdout is a terminal.
  bool progress = true;
};

struct TnsReadResult {
  /// This rank's share of the file's nonzeros, 0-based, in file order. dims are the
  /// global dims (largest coordinate + 1 in each mode over all ranks).
  SparseTensor<double> local;
  nnz_t global_nnz = 0;
  int index_base = 1;            ///< base the file was read with (after auto-detection)
  std::uint64_t bytes = 0;       ///< file size in bytes (compressed size for .gz)
  std::uint64_t text_bytes = 0;  ///< uncompressed text bytes
  double seconds = 0;            ///< wall time of the read (max over ranks)
};

/// Collective over `c` (host communicator). Plain files: each rank parses its own byte
/// range (boundaries moved to line starts). .gz files: every rank inflates the stream
/// and parses its share of fixed-size blocks. Malformed input (wrong field count,
/// non-numeric, NaN/Inf, zero or negative index with base 1, negative with base 0,
/// index over 2^32-1, inconsistent order, empty file, binary data) throws
/// tessera::CollectiveError on every rank naming the file and line.
TnsReadResult read_tns(const std::string& path, const comm::Communicator& c,
                       const TnsReadOptions& opt = {});

/// Collective: writes every rank's nonzeros (rank order, then local order) to `path`
/// as 1-based FROSTT text (gzip when the name ends in .gz). `x` coordinates are 0-based
/// and global. Written to a temporary name and renamed when complete.
void write_tns(const std::string& path, const SparseTensor<double>& x, const comm::Communicator& c);

}  // namespace tessera::io
