// FROSTT .tns text (optionally gzip-compressed): N coordinates then a value per line,
// '#' comments, 1-based by default. Reading and writing are collective over ranks.
//
// Format accepted by read_tns:
//  - one nonzero per line: N integer coordinates, then a value (any decimal or scientific
//    floating-point notation std::from_chars accepts, optionally with a leading '+');
//    fields separated by spaces or tabs; CRLF line ends are accepted;
//  - lines whose first non-blank character is '#' and blank lines are skipped;
//  - the order N is fixed by the first data line of the file (1 <= N <= 16);
//  - coordinates are stored 0-based as index_t (uint32): the largest accepted coordinate
//    in the file is 4294967295;
//  - the format is taken from the content, not the name: a file starting with the gzip
//    magic bytes is inflated (concatenated gzip members are read as one stream; any other
//    data after a member is an error naming its byte offset, never ignored);
//  - only regular files are read: a directory, FIFO, character or block device or socket
//    is refused with a message (never opened in a way that could block).
//  - a file whose first non-blank, non-comment line starts with "sptensor" is Tensor
//    Toolbox text (pyttb / MATLAB export_data, io/pyttb_text.hpp): its four header lines
//    give the order, the dims (the declared shape) and the nonzero count, checked against
//    the data lines that follow (FROSTT lines, 1-based unless IndexBase::zero is asked).
#pragma once

#include <cstddef>
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
  /// Show a progress bar on rank 0 (stderr) when stdout is a terminal; when it is not, a
  /// log line every ~10 s of a long read.
  bool progress = true;
  /// Bytes a rank reads (plain) or inflates (.gz) at a time; 0 = default (64 MiB plain,
  /// 4 MiB .gz). Lines crossing chunk boundaries are handled; tests use tiny values.
  std::size_t chunk_bytes = 0;
  /// Size of the blocks of decompressed text dealt round-robin to the ranks when reading
  /// a .gz file (block b belongs to rank b % P); 0 = default (4 MiB).
  std::size_t gz_block_bytes = 0;
  /// The run computes in single precision (--precision float): a value that float cannot
  /// represent (magnitude over 3.4e38, or a nonzero that would round to 0) is refused as a
  /// malformed line ("FILE:LINE: value: expected a number representable in single
  /// precision ...") instead of becoming Inf or 0 later.
  bool float_values = false;
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
/// tessera::CollectiveError on every rank naming the file and line
/// ("FILE:LINE: what was expected, found what"); line numbers are global 1-based line
/// numbers of the (decompressed) file. When several lines are bad, the first in the file
/// is reported. Unreadable, truncated or corrupt files also throw CollectiveError.
TnsReadResult read_tns(const std::string& path, const comm::Communicator& c,
                       const TnsReadOptions& opt = {});

/// Collective: writes every rank's nonzeros (rank order, then local order) to `path`
/// as 1-based FROSTT text (gzip when the name ends in .gz). `x` coordinates are 0-based
/// and global; values must be finite and are printed in the shortest form that reads
/// back to the same double. A leading '#' comment line records order, dims and nnz.
/// Written to `path + ".tmp-XXXXXXXXXXXXXXXX"` and renamed by rank 0 once every rank has
/// written its part. Plain text: each rank pwrite()s its lines at its offset (exclusive
/// prefix sum of the byte counts). .gz: each rank compresses its own lines (zlib level 1)
/// into one gzip member, held in memory, and the members are written concatenated the
/// same way (RFC 1952 multi-member file; gzip, zcat, zlib's gzread and Python read it as
/// one stream), so compression runs on all ranks at once. Errors (bad values,
/// unwritable directory) throw CollectiveError on every rank and leave no temporary file.
void write_tns(const std::string& path, const SparseTensor<double>& x, const comm::Communicator& c);

}  // namespace tessera::io
