// Tensor Toolbox text (pyttb's and MATLAB Tensor Toolbox's export_data) as read by
// read_tns (docs/formats.md, "pyttb / Tensor Toolbox sptensor text"). An sptensor export is
//
//   sptensor            <- the kind (first non-blank, non-comment line; first token)
//   3                   <- number of dimensions N
//   4 5 6               <- the shape, N sizes
//   7                   <- number of nonzeros
//   1 1 1 1.0000000000000000e+00    <- nnz lines "i_1 ... i_N value", 1-based
//   ...
//
// The data lines are FROSTT lines, parsed by the .tns reader; this file reads the four
// header lines and words the messages. Other kinds of export_data ("tensor", "matrix",
// "ktensor") are refused with a message naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io {

/// The header of an sptensor export.
struct PyttbHeader {
  std::vector<std::uint64_t> shape;  ///< declared sizes (their count is the order N)
  std::uint64_t nnz = 0;             ///< declared number of nonzeros
  std::uint64_t lines = 0;           ///< lines up to and including the nnz line
  std::uint64_t bytes = 0;  ///< bytes up to and including the nnz line's '\n' (plain files)
  std::uint64_t shape_line = 0, nnz_line = 0;  ///< 1-based line numbers of those lines
  int order() const { return static_cast<int>(shape.size()); }
};

/// True when the line [b, e) (a file's first non-blank, non-comment line) starts with one
/// of export_data's kinds: sptensor, tensor, matrix, ktensor (then the file is read as a
/// Tensor Toolbox export, never as FROSTT text).
bool is_pyttb_kind_line(const char* b, const char* e);

/// Reads the header line by line. Feed every line of the file from the first one
/// (blank lines and '#' comments are skipped) until line() returns done.
class PyttbHeaderReader {
 public:
  enum class Status { more, done, error };
  /// One line [b, e) without its '\n'; `line_no` its 1-based number in the file and
  /// `end_offset` the byte offset just past its '\n'. On error, message() says what was
  /// expected and what was found (the caller prefixes "FILE:LINE: ").
  Status line(const char* b, const char* e, std::uint64_t line_no, std::uint64_t end_offset);
  const PyttbHeader& header() const { return h_; }
  const std::string& message() const { return msg_; }

 private:
  Status fail(std::string m);
  int step_ = 0;  // 0: kind, 1: order, 2: shape, 3: nnz
  PyttbHeader h_;
  std::string msg_;
};

/// The message for a data line whose coordinate `mode` (0-based) is `raw` (as written),
/// beyond the declared shape (the caller prefixes "FILE:LINE: ").
std::string pyttb_beyond_shape_message(const PyttbHeader& h, int mode, std::uint64_t raw,
                                       int index_base);

/// The message when the file holds `found` data lines and the header declared h.nnz
/// (the caller prefixes "FILE:" h.nnz_line ": ").
std::string pyttb_count_message(const PyttbHeader& h, std::uint64_t found);

}  // namespace tessera::io
