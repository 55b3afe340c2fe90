// FROSTT .tns reader and writer (see tns.hpp for the contract).
//
// Parallel reading
// ----------------
// Plain files. Rank r of P owns the lines that *start* in the byte range
// [r*S/P, (r+1)*S/P) of the S-byte file: its first line starts at the first line start at
// or after r*S/P, and its last line is the last one starting before (r+1)*S/P (it may
// run past the range end; the rank reads on until its '\n'). A rank reads its range with
// pread() in chunks (64 MiB by default), carrying the incomplete last line of a chunk over
// to the next, so no rank holds more than one chunk plus one line. The order N is set by
// the file's first data line: rank 0 reads from offset 0 up to that line and broadcasts N.
//
// .gz files. A gzip stream cannot be entered in the middle, so every rank inflates the
// whole stream (zlib inflate: streaming, concatenated members, CRC checked; anything after
// the last member but the end of the file is an error naming its byte) and parses only
// its share of the text: the decompressed text is cut into fixed-size blocks (4 MiB by
// default), block b belongs to rank b % P, and a line belongs to the block in which it
// starts. Every rank sees every line, so every rank knows N and the global line numbers
// without communication. The cost is P times the inflate work and a read rate bounded by
// one inflate stream; for repeated large reads convert the tensor to HDF5.
//
// Line numbers and errors. Parsing needs no communication; a rank records its first bad
// line (or an I/O, zlib or memory error) and keeps counting lines. Afterwards the ranks
// all-gather their line counts (plain files: the global number of a rank's i-th line is
// the sum of the counts of the ranks before it, plus i), agree on the earliest problem in
// the file (file-level errors first, then the lowest global line) and the rank holding it
// raises it through comm::raise_collectively, so every rank throws the same
// CollectiveError. A rank never leaves early, so no rank hangs in a later collective.
//
// Index base. Coordinates are kept as read (raw) during parsing, with the per-mode maximum
// and whether any coordinate is 0. With IndexBase::automatic the ranks agree (allreduce)
// on "any zero anywhere" -> 0-based, else 1-based; the raw coordinates are then shifted.
// Global dims are the allreduced per-mode maximum + 1 (0-based).
#include "io/tns.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "io/gz_inflater.hpp"
#include "io/output.hpp"
#include "io/posix_io.hpp"
#include "io/pyttb_text.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/timer.hpp"

namespace tessera::io {

using posix::errno_text;
using posix::Fd;
using posix::pread_full;
using posix::pwrite_full;

IndexBase parse_index_base(const std::string& s) {
  if (s == "auto") return IndexBase::automatic;
  if (s == "0") return IndexBase::zero;
  if (s == "1") return IndexBase::one;
  throw InputError("bad index base '" + s + "': expected auto, 0 or 1");
}

namespace {

constexpr std::size_t kDefaultChunk = std::size_t(64) << 20;
constexpr std::size_t kDefaultGzChunk = std::size_t(4) << 20;
constexpr std::size_t kDefaultGzBlock = std::size_t(4) << 20;
/// Longer lines are rejected (binary data without newlines would otherwise grow the
/// carry-over buffer without bound).
constexpr std::size_t kMaxLineBytes = std::size_t(16) << 20;
constexpr std::uint64_t kMaxIndex = 0xFFFFFFFFull;  // largest coordinate in the file
constexpr std::uint64_t kNoError = std::numeric_limits<std::uint64_t>::max();

inline bool is_ws(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}
inline bool is_digit(char ch) {
  return static_cast<unsigned>(ch - '0') < 10u;
}

// ---------------------------------------------------------------------------------------
// Token and line diagnostics (the slow path, run only for a line the fast parser rejects)

/// A token for a message: quoted, non-printable bytes escaped, long tokens shortened.
std::string quote(std::string_view t) {
  std::string s = "'";
  const std::size_t n = std::min<std::size_t>(t.size(), 40);
  for (std::size_t i = 0; i < n; ++i) {
    const auto ch = static_cast<unsigned char>(t[i]);
    if (ch >= 0x20 && ch < 0x7f) {
      s += static_cast<char>(ch);
    } else {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", ch);
      s += b;
    }
  }
  if (t.size() > n) s += "...";
  return s + "'";
}

/// First byte of [b, e) that cannot occur in a text data line, or nullptr.
const char* find_binary(const char* b, const char* e) {
  for (const char* p = b; p < e; ++p) {
    const auto ch = static_cast<unsigned char>(*p);
    if ((ch < 0x20 && !is_ws(*p)) || ch >= 0x7f) return p;
  }
  return nullptr;
}

std::string binary_message(const char* b, const char* p) {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "expected ASCII text, found byte 0x%02x at column %zu (binary data? FROSTT .tns "
                "files are plain text)",
                static_cast<unsigned char>(*p), static_cast<std::size_t>(p - b) + 1);
  return buf;
}

std::vector<std::string_view> split_fields(const char* b, const char* e) {
  std::vector<std::string_view> f;
  const char* p = b;
  while (true) {
    while (p < e && is_ws(*p)) ++p;
    if (p == e) break;
    const char* t = p;
    while (p < e && !is_ws(*p)) ++p;
    f.emplace_back(t, static_cast<std::size_t>(p - t));
  }
  return f;
}

std::string fields_message(int order, std::size_t found) {
  return "expected " + std::to_string(order + 1) + " fields (" + std::to_string(order) +
         (order == 1 ? " coordinate" : " coordinates") + " and a value), found " +
         std::to_string(found);
}

enum class ValueStatus { ok, invalid, range, nonfinite };

/// True when v survives the conversion to float (--precision float): finite, and not a
/// nonzero that rounds to 0.
inline bool fits_float(double v) {
  const auto f = static_cast<float>(v);
  return std::isfinite(f) && (f != 0.0f || v == 0.0);
}

std::string float_range_message(std::string_view t) {
  char lim[96];
  std::snprintf(lim, sizeof(lim), "magnitudes %.3g to %.3g, or 0",
                static_cast<double>(std::numeric_limits<float>::denorm_min()),
                static_cast<double>(std::numeric_limits<float>::max()));
  return "value: expected a number representable in single precision (--precision float: " +
         std::string(lim) + "), found " + quote(t) + " (run with --precision double)";
}

/// Parses a value token [b, e) (non-empty, no blanks).
inline ValueStatus parse_value(const char* b, const char* e, double* out) {
  // Plain integers of up to 15 digits convert exactly (the common case in real tensors).
  const std::size_t n = static_cast<std::size_t>(e - b);
  if (n <= 15) {
    std::uint64_t v = 0;
    const char* p = b;
    while (p < e && is_digit(*p)) v = v * 10 + static_cast<unsigned>(*p++ - '0');
    if (p == e && n > 0) {
      *out = static_cast<double>(v);
      return ValueStatus::ok;
    }
  }
  const char* p = b;
  if (p < e && *p == '+') {
    ++p;
    if (p < e && (*p == '-' || *p == '+')) return ValueStatus::invalid;
  }
  if (p == e) return ValueStatus::invalid;
  double v = 0;
  const auto r = std::from_chars(p, e, v);
  if (r.ec == std::errc::invalid_argument || r.ptr != e) return ValueStatus::invalid;
  if (r.ec == std::errc::result_out_of_range) return ValueStatus::range;
  if (!std::isfinite(v)) return ValueStatus::nonfinite;
  *out = v;
  return ValueStatus::ok;
}

/// Checks the shape of the file's first data line [line, e) (b: its first non-blank byte)
/// and returns the order it sets, or an error message.
bool detect_order(const char* line, const char* b, const char* e, int* order, std::string* msg) {
  if (const char* bad = find_binary(b, e)) {
    *msg = binary_message(line, bad);
    return false;
  }
  const std::size_t nf = split_fields(b, e).size();
  if (nf < 2) {
    *msg = "expected 2 to " + std::to_string(kMaxOrder + 1) + " fields (1 to " +
           std::to_string(kMaxOrder) +
           " coordinates and a value; the first data line sets the order), found " +
           std::to_string(nf);
    return false;
  }
  if (nf > static_cast<std::size_t>(kMaxOrder) + 1) {
    *msg = "expected at most " + std::to_string(kMaxOrder + 1) + " fields (" +
           std::to_string(kMaxOrder) + " coordinates and a value; tensors of order up to " +
           std::to_string(kMaxOrder) + " are supported), found " + std::to_string(nf);
    return false;
  }
  *order = static_cast<int>(nf) - 1;
  return true;
}

/// Why the data line [b, e) is malformed: expected vs found, for the user.
std::string describe_bad_line(const char* b, const char* e, int order, IndexBase base,
                              bool float_values) {
  if (const char* bad = find_binary(b, e)) return binary_message(b, bad);
  const auto f = split_fields(b, e);
  if (f.size() != static_cast<std::size_t>(order) + 1) return fields_message(order, f.size());
  const char* min_text = base == IndexBase::one ? ">= 1" : ">= 0";
  for (int m = 0; m < order; ++m) {
    const std::string_view t = f[static_cast<std::size_t>(m)];
    const std::string what = "coordinate " + std::to_string(m + 1) + ": ";
    const bool neg = t[0] == '-';
    const std::string_view digits = neg ? t.substr(1) : t;
    const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(), is_digit);
    if (!all_digits) return what + "expected a non-negative integer index, found " + quote(t);
    if (neg) return what + "expected an index " + min_text + ", found " + quote(t);
    std::uint64_t v = 0;
    for (char ch : digits) v = std::min<std::uint64_t>(v * 10 + (ch - '0'), kMaxIndex + 1);
    if (v > kMaxIndex)
      return what + "expected an index <= 4294967295 (indices are stored in 32 bits), found " +
             quote(t);
    if (v == 0 && base == IndexBase::one)
      return what +
             "expected an index >= 1 (the file is read as 1-based; read 0-based files with "
             "index base 0 or auto), found " +
             quote(t);
  }
  const std::string_view t = f.back();
  double v = 0;
  switch (parse_value(t.data(), t.data() + t.size(), &v)) {
    case ValueStatus::invalid:
      return "value: expected a number, found " + quote(t);
    case ValueStatus::range:
      return "value: expected a number in the range of a double, found " + quote(t);
    case ValueStatus::nonfinite:
      return "value: expected a finite number (NaN and Inf are not allowed), found " + quote(t);
    case ValueStatus::ok:
      if (float_values && !fits_float(v)) return float_range_message(t);
      break;
  }
  return "malformed line";  // not reached: the fast parser accepts what passes the above
}

// ---------------------------------------------------------------------------------------
// Line parser

/// A problem found by one rank while reading: `line` is the rank-local 1-based line
/// number (0 for a problem of the whole file), `msg` the text after "FILE:LINE: ".
struct LocalError {
  std::uint64_t line = 0;
  std::string msg;
};

/// Parses complete lines into a tensor of raw (as-written) coordinates; counts lines.
class Parser {
 public:
  /// `order` 0: set by the first data line seen (every rank sees it; .gz reading).
  /// `float_values`: values must survive the conversion to float (fits_float).
  Parser(int order, IndexBase base, SparseTensor<double>* out, bool float_values = false)
      : base_(base), out_(out), float_values_(float_values) {
    if (order > 0) set_order(order);
  }

  /// One line [b, e), without its '\n'. Owned lines are parsed; the others only counted
  /// (and looked at until the order is known).
  void line(const char* b, const char* e, bool owned) {
    ++lines_;
    text_bytes_ += static_cast<std::uint64_t>(e - b) + 1;
    if (error_) return;
    if (pyttb_reader_) {  // a Tensor Toolbox header (.gz: every rank reads it)
      const auto st = pyttb_reader_->line(b, e, lines_, text_bytes_);
      if (st == PyttbHeaderReader::Status::error) fail(pyttb_reader_->message());
      if (st == PyttbHeaderReader::Status::done) expect_pyttb(pyttb_reader_->header());
      if (st != PyttbHeaderReader::Status::more) pyttb_reader_.reset();
      return;
    }
    if (!owned && order_ != 0) return;
    if (static_cast<std::size_t>(e - b) > kMaxLineBytes) {
      fail("line longer than " + std::to_string(kMaxLineBytes >> 20) +
           " MiB: expected lines of coordinates and a value (binary data?)");
      return;
    }
    const char* p = b;
    while (p < e && is_ws(*p)) ++p;
    if (p == e || *p == '#') return;
    if (order_ == 0 && is_pyttb_kind_line(p, e)) {
      pyttb_reader_.emplace();
      --lines_;
      text_bytes_ -= static_cast<std::uint64_t>(e - b) + 1;
      line(b, e, owned);
      return;
    }
    if (order_ == 0) {
      int n = 0;
      std::string msg;
      if (!detect_order(b, p, e, &n, &msg)) {
        fail(msg);
        return;
      }
      set_order(n);
    }
    if (!owned) return;
    if (!parse_data(p, e))
      fail(beyond_ >= 0 ? pyttb_beyond_shape_message(*pyttb_, beyond_, beyond_raw_,
                                                     base_ == IndexBase::zero ? 0 : 1)
                        : describe_bad_line(b, e, order_, base_, float_values_));
  }

  /// The file is a Tensor Toolbox sptensor export with header `h` (io/pyttb_text.hpp): its
  /// order, and coordinates within the declared shape (1-based unless base 0 was asked).
  void expect_pyttb(const PyttbHeader& h) {
    pyttb_ = h;
    if (base_ == IndexBase::automatic) base_ = IndexBase::one;
    set_order(h.order());
  }
  const std::optional<PyttbHeader>& pyttb() const { return pyttb_; }

  std::uint64_t lines() const { return lines_; }
  int order() const { return order_; }
  bool in_pyttb_header() const { return pyttb_reader_.has_value(); }
  bool saw_zero() const { return saw_zero_; }
  const std::array<index_t, kMaxOrder>& max_raw() const { return max_; }
  const std::optional<LocalError>& error() const { return error_; }

 private:
  void set_order(int n) {
    order_ = n;
    out_->dims.assign(static_cast<std::size_t>(n), 0);
    out_->idx.assign(static_cast<std::size_t>(n), {});
  }
  void fail(std::string msg) { error_ = LocalError{lines_, std::move(msg)}; }

  /// Fast path for a data line starting at its first non-blank byte p.
  bool parse_data(const char* p, const char* e) {
    index_t c[kMaxOrder];
    beyond_ = -1;
    for (int m = 0; m < order_; ++m) {
      const char* t = p;
      std::uint64_t v = 0;
      while (p < e && is_digit(*p)) {
        v = std::min<std::uint64_t>(v * 10 + static_cast<unsigned>(*p - '0'), kMaxIndex + 1);
        ++p;
      }
      if (p == t || v > kMaxIndex || p == e || !is_ws(*p)) return false;
      if (v == 0) {
        if (base_ == IndexBase::one) return false;
        saw_zero_ = true;
      }
      if (pyttb_ && v > pyttb_->shape[static_cast<std::size_t>(m)] - (base_ == IndexBase::zero)) {
        beyond_ = m;
        beyond_raw_ = v;
        return false;
      }
      c[m] = static_cast<index_t>(v);
      max_[static_cast<std::size_t>(m)] = std::max(max_[static_cast<std::size_t>(m)], c[m]);
      while (p < e && is_ws(*p)) ++p;
    }
    const char* t = p;
    while (p < e && !is_ws(*p)) ++p;
    if (p == t) return false;
    double v = 0;
    if (parse_value(t, p, &v) != ValueStatus::ok) return false;
    if (float_values_ && !fits_float(v)) return false;
    while (p < e && is_ws(*p)) ++p;
    if (p != e) return false;
    for (int m = 0; m < order_; ++m) out_->idx[static_cast<std::size_t>(m)].push_back(c[m]);
    out_->vals.push_back(v);
    return true;
  }

  IndexBase base_;
  SparseTensor<double>* out_;
  bool float_values_ = false;
  int order_ = 0;
  std::uint64_t lines_ = 0;
  bool saw_zero_ = false;
  std::array<index_t, kMaxOrder> max_{};
  std::optional<LocalError> error_;
  std::uint64_t text_bytes_ = 0;                   // bytes of the lines seen (headers)
  std::optional<PyttbHeaderReader> pyttb_reader_;  // reading a Tensor Toolbox header
  std::optional<PyttbHeader> pyttb_;               // the header read (or broadcast)
  int beyond_ = -1;                                // mode beyond the declared shape
  std::uint64_t beyond_raw_ = 0;
};

// ---------------------------------------------------------------------------------------
// Plain files

/// Calls on_line(b, e) for every line starting in [lo, hi) of the `size`-byte file, in
/// order, reading `chunk` bytes at a time; stops early when on_line returns false. A
/// line longer than kMaxLineBytes is passed truncated (longer than kMaxLineBytes, so the
/// handler can reject it) and the rest of it skipped. on_progress(bytes read past lo).
template <typename OnLine, typename OnProgress>
void walk_plain_lines(int fd, const std::string& path, std::uint64_t size, std::uint64_t lo,
                      std::uint64_t hi, std::size_t chunk, OnLine&& on_line,
                      OnProgress&& on_progress) {
  if (lo >= hi) return;
  std::vector<char> buf;
  std::uint64_t pos = lo > 0 ? lo - 1 : 0;  // next file offset to read
  std::uint64_t buf_off = pos;              // file offset of buf[0]
  std::size_t have = 0;                     // valid bytes in buf
  // Skip to just past the next '\n': to the first line start at or after lo, or past the
  // rest of an over-long line.
  bool skip_to_newline = lo > 0;
  while (true) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - pos));
    if (buf.size() < have + want) buf.resize(have + want);
    pread_full(fd, buf.data() + have, want, pos, path);
    have += want;
    pos += want;
    const bool eof = pos >= size;
    char* const b = buf.data();
    std::size_t p = 0;
    if (skip_to_newline) {
      const auto* nl = static_cast<const char*>(std::memchr(b, '\n', have));
      if (nl == nullptr) {
        if (eof) return;
        buf_off += have;
        have = 0;
        continue;
      }
      p = static_cast<std::size_t>(nl - b) + 1;
      skip_to_newline = false;
    }
    while (p < have) {
      if (buf_off + p >= hi) return;
      const auto* nl = static_cast<const char*>(std::memchr(b + p, '\n', have - p));
      if (nl == nullptr) break;
      if (!on_line(b + p, nl)) return;
      p = static_cast<std::size_t>(nl - b) + 1;
    }
    if (eof) {
      if (p < have && buf_off + p < hi) on_line(b + p, b + have);  // last line, no '\n'
      return;
    }
    if (buf_off + p >= hi) return;
    // Carry the incomplete last line over to the next chunk.
    have -= p;
    std::memmove(b, b + p, have);
    buf_off += p;
    if (have > kMaxLineBytes) {
      if (!on_line(b, b + have)) return;
      buf_off += have;
      have = 0;
      skip_to_newline = true;
    }
    on_progress(pos - lo);
  }
}

/// Rank 0: the order set by the first data line (throws InputError "FILE:LINE: ..."), or
/// by a Tensor Toolbox header (returned in `pyttb`).
int find_order_plain(int fd, const std::string& path, std::uint64_t size, std::size_t chunk,
                     std::optional<PyttbHeader>* pyttb) {
  int order = 0;
  std::uint64_t line = 0, offset = 0;
  std::string msg;
  std::optional<PyttbHeaderReader> header;
  walk_plain_lines(
      fd, path, size, 0, size, chunk,
      [&](const char* b, const char* e) {
        ++line;
        offset += static_cast<std::uint64_t>(e - b) + 1;
        if (header) {
          const auto st = header->line(b, e, line, offset);
          if (st == PyttbHeaderReader::Status::error) msg = header->message();
          if (st == PyttbHeaderReader::Status::done) {
            *pyttb = header->header();
            order = (*pyttb)->order();
          }
          return st == PyttbHeaderReader::Status::more;
        }
        if (static_cast<std::size_t>(e - b) > kMaxLineBytes) {
          msg = "line longer than " + std::to_string(kMaxLineBytes >> 20) +
                " MiB: expected lines of coordinates and a value (binary data?)";
          return false;
        }
        const char* p = b;
        while (p < e && is_ws(*p)) ++p;
        if (p == e || *p == '#') return true;
        if (is_pyttb_kind_line(p, e)) {
          header.emplace();
          header->line(b, e, line, offset);  // the kind line: an error is the next line's
          if (!header->message().empty()) {
            msg = header->message();
            return false;
          }
          return true;
        }
        if (!detect_order(b, p, e, &order, &msg)) order = 0;
        return false;
      },
      [](std::uint64_t) {});
  if (order > 0) return order;
  if (!msg.empty()) throw InputError(path + ":" + std::to_string(line) + ": " + msg);
  if (header)
    throw InputError(path + ":" + std::to_string(line) +
                     ": sptensor header: the file ends before the header is complete "
                     "(expected the lines: sptensor, N, the shape, the number of nonzeros)");
  throw InputError(path +
                   ": no data lines: expected lines of coordinates and a value, found an empty "
                   "file or only comments and blank lines");
}

// ---------------------------------------------------------------------------------------
// .gz files (detail::GzInflater, io/gz_inflater.hpp)

/// Inflates the whole stream; calls parser.line() for every line, owned when its start
/// offset lies in a block of this rank. Returns the number of text bytes.
std::uint64_t read_gz_stream(int fd, const std::string& path, std::uint64_t size, std::size_t chunk,
                             std::size_t block, int rank, int nranks, Parser& parser,
                             Progress& progress) {
  detail::GzInflater gz(fd, path, size);
  const auto owns = [&](std::uint64_t off) {
    return static_cast<int>((off / block) % static_cast<std::uint64_t>(nranks)) == rank;
  };
  const unsigned want = static_cast<unsigned>(std::min<std::size_t>(chunk, INT_MAX));
  std::vector<char> buf;
  std::uint64_t buf_off = 0;  // text offset of buf[0]
  std::size_t have = 0;
  bool skip_to_newline = false;  // rest of an over-long line
  while (true) {
    if (buf.size() < have + want) buf.resize(have + want);
    std::string zmsg;
    const auto n = static_cast<std::int64_t>(gz.read(buf.data() + have, want, &zmsg));
    if (!zmsg.empty()) {
      const auto got = static_cast<std::size_t>(n);
      const auto newlines = std::count(buf.data() + have, buf.data() + have + got, '\n');
      throw InputError(path + ": corrupt or truncated gzip data (zlib: " + zmsg + ") after " +
                       std::to_string(buf_off + have + got) +
                       " bytes of decompressed text, in line " +
                       std::to_string(parser.lines() + static_cast<std::uint64_t>(newlines) + 1));
    }
    have += static_cast<std::size_t>(n);
    const bool eof = static_cast<unsigned>(n) < want;
    char* const b = buf.data();
    std::size_t p = 0;
    if (skip_to_newline) {
      const auto* nl = static_cast<const char*>(std::memchr(b, '\n', have));
      if (nl == nullptr) {
        if (eof) return buf_off + have;
        buf_off += have;
        have = 0;
        continue;
      }
      p = static_cast<std::size_t>(nl - b) + 1;
      skip_to_newline = false;
    }
    while (p < have) {
      const auto* nl = static_cast<const char*>(std::memchr(b + p, '\n', have - p));
      if (nl == nullptr) break;
      parser.line(b + p, nl, owns(buf_off + p));
      p = static_cast<std::size_t>(nl - b) + 1;
    }
    if (eof) {
      if (p < have) parser.line(b + p, b + have, owns(buf_off + p));
      return buf_off + have;
    }
    have -= p;
    std::memmove(b, b + p, have);
    buf_off += p;
    if (have > kMaxLineBytes) {
      parser.line(b, b + have, owns(buf_off));
      buf_off += have;
      have = 0;
      skip_to_newline = true;
    }
    progress.update(gz.offset());
  }
}

// ---------------------------------------------------------------------------------------
// Collective error agreement

/// Every rank calls this with its own candidate (key kNoError: none; 0: a file-level
/// problem; else the global line). The earliest problem (lowest key, then lowest rank)
/// is thrown as CollectiveError on every rank.
void raise_earliest(const comm::Communicator& c, std::uint64_t key, const std::string& msg) {
  const std::uint64_t kmin = c.allreduce_value(key, comm::ReduceOp::min);
  if (kmin == kNoError) return;
  std::exception_ptr mine;
  const std::int32_t cand = key == kmin ? c.rank() : c.size();
  const std::int32_t chosen = c.allreduce_value(cand, comm::ReduceOp::min);
  if (c.rank() == chosen) mine = std::make_exception_ptr(InputError(msg));
  comm::raise_collectively(c, mine);
}

std::string base_name(const std::string& path) {
  const auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

}  // namespace

TnsReadResult read_tns(const std::string& path, const comm::Communicator& c,
                       const TnsReadOptions& opt) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "read_tns needs a host communicator");
  Timer timer;
  const int rank = c.rank();
  const int nranks = c.size();
  const std::size_t chunk = opt.chunk_bytes;  // 0: the default of the format
  const std::size_t gz_block = opt.gz_block_bytes > 0 ? opt.gz_block_bytes : kDefaultGzBlock;
  TnsReadResult res;

  // 1. Every rank opens the file; rank 0 finds its size and format (gzip magic bytes).
  Fd fd;
  std::uint64_t info[2] = {0, 0};  // size in bytes, is gzip
  comm::run_collectively(c, [&] {
    // Regular files only, opened without blocking (a FIFO with no writer would hang).
    struct stat st {};
    fd.fd = posix::open_regular_input(path, "a .tns file", &st);
    if (rank == 0) {
      info[0] = static_cast<std::uint64_t>(st.st_size);
      unsigned char magic[2] = {0, 0};
      if (info[0] >= 2 && ::pread(fd.fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
        info[1] = 1;
    }
  });
  c.broadcast(info, 2, 0);
  const std::uint64_t size = info[0];
  const bool gz = info[1] != 0;
  res.bytes = size;
  res.text_bytes = size;

  // 2. Plain files: the order comes from the first data line, read by rank 0, or from a
  //    Tensor Toolbox sptensor header (io/pyttb_text.hpp), broadcast to every rank.
  std::int32_t order = 0;
  std::optional<PyttbHeader> pyttb;
  if (!gz) {
    comm::run_collectively(c, [&] {
      // The first data line is usually near the start: read small pieces (the carry-over
      // buffer grows if it is not).
      if (rank == 0) order = find_order_plain(fd.fd, path, size, chunk ? chunk : 64 << 10, &pyttb);
    });
    c.broadcast(&order, 1, 0);
    std::uint64_t h[6 + kMaxOrder] = {};  // present, nnz, lines, bytes, shape/nnz line, shape
    if (pyttb) {
      const std::uint64_t v[6] = {
          1, pyttb->nnz, pyttb->lines, pyttb->bytes, pyttb->shape_line, pyttb->nnz_line};
      std::copy(v, v + 6, h);
      std::copy(pyttb->shape.begin(), pyttb->shape.end(), h + 6);
    }
    c.broadcast(h, 6 + kMaxOrder, 0);
    if (h[0] != 0)
      pyttb = PyttbHeader{
          std::vector<std::uint64_t>(h + 6, h + 6 + order), h[1], h[2], h[3], h[4], h[5]};
  }

  // 3. Parse this rank's lines; no communication, no early exit.
  SparseTensor<double>& x = res.local;
  Parser parser(order, opt.base, &x, opt.float_values);
  if (pyttb) parser.expect_pyttb(*pyttb);
  std::optional<std::string> file_error;
  {
    // Plain files: rank 0's share, scaled to the file (the ranks move at similar speeds).
    Progress progress(rank == 0 && opt.progress, "reading", base_name(path), size);
    try {
      if (gz) {
        res.text_bytes = read_gz_stream(fd.fd, path, size, chunk ? chunk : kDefaultGzChunk,
                                        gz_block, rank, nranks, parser, progress);
        if (parser.in_pyttb_header() && !parser.error())
          file_error = path + ":" + std::to_string(parser.lines()) +
                       ": sptensor header: the file ends before the header is complete "
                       "(expected the lines: sptensor, N, the shape, the number of nonzeros)";
      } else {
        // A Tensor Toolbox header is nobody's: the ranks share the bytes after it.
        const std::uint64_t skip = pyttb ? pyttb->bytes : 0;
        const std::uint64_t lo = std::max(skip, size * static_cast<std::uint64_t>(rank) / nranks);
        const std::uint64_t hi =
            std::max(skip, size * static_cast<std::uint64_t>(rank + 1) / nranks);
        // Reserve from the density of the first lines; plain files only (size known).
        bool reserved = false;
        std::uint64_t seen = 0;
        walk_plain_lines(
            fd.fd, path, size, lo, hi, chunk ? chunk : kDefaultChunk,
            [&](const char* b, const char* e) {
              parser.line(b, e, true);
              seen += static_cast<std::uint64_t>(e - b) + 1;
              if (!reserved && parser.lines() == 4096) {
                reserved = true;
                x.reserve(static_cast<std::size_t>(1.02 * static_cast<double>(x.nnz()) *
                                                   static_cast<double>(hi - lo) /
                                                   static_cast<double>(seen)));
              }
              return true;
            },
            [&](std::uint64_t done) { progress.update(std::min(size, done * nranks)); });
      }
    } catch (const std::exception& e) {
      file_error = e.what();
    } catch (...) {
      file_error = path + ": unknown error while reading";
    }
  }

  // 4. Global line numbers; agree on the earliest problem in the file.
  const std::uint64_t my_lines = parser.lines();
  std::vector<std::uint64_t> lines(static_cast<std::size_t>(nranks), 0);
  c.allgather(&my_lines, lines.data(), 1);
  std::uint64_t line_offset = 0;
  if (!gz) {
    for (int q = 0; q < rank; ++q) line_offset += lines[static_cast<std::size_t>(q)];
    if (pyttb) line_offset += pyttb->lines;  // read by rank 0 before the parse
  }
  std::uint64_t key = kNoError;
  std::string msg;
  if (file_error) {
    key = 0;
    msg = *file_error;
  } else if (parser.error()) {
    key = line_offset + parser.error()->line;
    msg = path + ":" + std::to_string(key) + ": " + parser.error()->msg;
  }
  raise_earliest(c, key, msg);

  // 5. Order (.gz: set in the stream, the same on every rank), base, dims, nnz.
  order = c.allreduce_value<std::int32_t>(parser.order(), comm::ReduceOp::max);
  if (order == 0)
    throw CollectiveError(path +
                          ": no data lines: expected lines of coordinates and a value, found an "
                          "empty file or only comments and blank lines");
  std::int32_t any_zero = parser.saw_zero() ? 1 : 0;
  any_zero = c.allreduce_value(any_zero, comm::ReduceOp::max);
  int base = 1;
  if (opt.base == IndexBase::zero || (opt.base == IndexBase::automatic && any_zero)) base = 0;
  std::vector<std::uint64_t> dims(static_cast<std::size_t>(order));
  for (int m = 0; m < order; ++m)
    dims[static_cast<std::size_t>(m)] = parser.max_raw()[static_cast<std::size_t>(m)];
  c.allreduce(dims.data(), dims.size(), comm::ReduceOp::max);
  for (auto& d : dims) d = base == 1 ? d : d + 1;
  x.dims = dims;
  if (base == 1)
    for (auto& v : x.idx)
      for (auto& i : v) --i;
  res.index_base = base;
  res.global_nnz = c.allreduce_value<nnz_t>(x.nnz(), comm::ReduceOp::sum);
  if (gz) pyttb = parser.pyttb();  // every rank read the header from the stream
  if (pyttb) {  // the declared shape is the tensor's; the declared count must be the file's
    if (static_cast<std::uint64_t>(res.global_nnz) != pyttb->nnz)
      throw CollectiveError(path + ":" + std::to_string(pyttb->nnz_line) + ": " +
                            pyttb_count_message(*pyttb, res.global_nnz));
    x.dims = pyttb->shape;
  }
  if (res.global_nnz == 0)  // a Tensor Toolbox header may declare 0; FROSTT text cannot
    throw CollectiveError(path + ": no nonzeros");
  res.seconds = c.allreduce_value(timer.seconds(), comm::ReduceOp::max);
  log::debug("read " + path + ": " + std::to_string(res.global_nnz) + " nonzeros, dims " +
             format_dims(x.dims) + ", base " + std::to_string(base) + ", " +
             std::to_string(res.seconds) + " s");
  return res;
}

}  // namespace tessera::io
