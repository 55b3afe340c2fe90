// Tensor Toolbox (pyttb / MATLAB) sptensor text: the header (see pyttb_text.hpp).
#include "io/pyttb_text.hpp"

#include <cstddef>
#include <string_view>

#include "tensor/sparse_tensor.hpp"

namespace tessera::io {
namespace {

constexpr std::uint64_t kMaxSize = 0xFFFFFFFFull;  // coordinates are stored in 32 bits

bool is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

std::vector<std::string_view> tokens(const char* b, const char* e) {
  std::vector<std::string_view> t;
  const char* p = b;
  while (p < e) {
    while (p < e && is_space(*p)) ++p;
    const char* s = p;
    while (p < e && !is_space(*p)) ++p;
    if (p > s) t.emplace_back(s, static_cast<std::size_t>(p - s));
  }
  return t;
}

/// A token for a message: quoted and shortened, non-printable bytes as '?'.
std::string quoted(std::string_view t) {
  std::string s = "'";
  for (std::size_t i = 0; i < t.size() && i < 40; ++i) {
    const auto ch = static_cast<unsigned char>(t[i]);
    s += ch >= 0x20 && ch < 0x7f ? static_cast<char>(ch) : '?';
  }
  if (t.size() > 40) s += "...";
  return s + "'";
}

/// A non-negative decimal integer of at most `max`; false otherwise.
bool parse_count(std::string_view t, std::uint64_t max, std::uint64_t* out) {
  if (t.empty() || t.size() > 20) return false;
  std::uint64_t v = 0;
  for (char ch : t) {
    if (ch < '0' || ch > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(ch - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string t;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) t += ' ';
    t += std::to_string(s[i]);
  }
  return t;
}

}  // namespace

bool is_pyttb_kind_line(const char* b, const char* e) {
  const auto t = tokens(b, e);
  if (t.empty()) return false;
  return t[0] == "sptensor" || t[0] == "tensor" || t[0] == "matrix" || t[0] == "ktensor";
}

PyttbHeaderReader::Status PyttbHeaderReader::fail(std::string m) {
  msg_ = std::move(m);
  return Status::error;
}

PyttbHeaderReader::Status PyttbHeaderReader::line(const char* b, const char* e,
                                                  std::uint64_t line_no, std::uint64_t end_offset) {
  if (!msg_.empty()) return Status::error;
  const auto t = tokens(b, e);
  if (t.empty() || t[0].front() == '#') return Status::more;  // blank line or comment
  switch (step_) {
    case 0:
      if (t[0] != "sptensor") {
        return fail("a Tensor Toolbox '" + std::string(t[0]) +
                    "' export: Tessera reads only sparse tensors, exported as 'sptensor' "
                    "(pyttb: export_data(ttb.sptensor(...), FILE); MATLAB: "
                    "export_data(sptensor(X), FILE))");
      }
      break;
    case 1: {
      std::uint64_t n = 0;
      if (t.size() != 1 || !parse_count(t[0], kMaxOrder, &n) || n < 1)
        return fail(
            "sptensor header: expected the number of dimensions (one integer from 1 "
            "to " +
            std::to_string(kMaxOrder) + ") after the 'sptensor' line, found " +
            quoted(std::string_view(b, static_cast<std::size_t>(e - b))));
      h_.shape.assign(static_cast<std::size_t>(n), 0);
      break;
    }
    case 2: {
      if (t.size() != h_.shape.size())
        return fail("sptensor header: expected the shape, " + std::to_string(h_.shape.size()) +
                    " size(s) (the previous line declares " + std::to_string(h_.shape.size()) +
                    " dimensions), found " + std::to_string(t.size()) + " field(s)");
      for (std::size_t m = 0; m < t.size(); ++m) {
        if (!parse_count(t[m], kMaxSize, &h_.shape[m]) || h_.shape[m] < 1)
          return fail("sptensor header: size " + std::to_string(m + 1) +
                      ": expected an integer from 1 to " + std::to_string(kMaxSize) + ", found " +
                      quoted(t[m]));
      }
      h_.shape_line = line_no;
      break;
    }
    case 3:
      if (t.size() != 1 || !parse_count(t[0], ~std::uint64_t(0) >> 1, &h_.nnz))
        return fail(
            "sptensor header: expected the number of nonzeros (one non-negative "
            "integer) after the shape line, found " +
            quoted(std::string_view(b, static_cast<std::size_t>(e - b))));
      h_.nnz_line = line_no;
      h_.lines = line_no;
      h_.bytes = end_offset;
      step_ = 4;
      return Status::done;
    default:
      return Status::done;
  }
  ++step_;
  return Status::more;
}

std::string pyttb_beyond_shape_message(const PyttbHeader& h, int mode, std::uint64_t raw,
                                       int index_base) {
  const std::uint64_t size = h.shape[static_cast<std::size_t>(mode)];
  return "coordinate " + std::to_string(mode + 1) +
         ": expected an index <= " + std::to_string(index_base == 1 ? size : size - 1) +
         " (the sptensor header on line " + std::to_string(h.shape_line) + " declares shape " +
         shape_text(h.shape) + ", read " + std::to_string(index_base) + "-based), found " +
         std::to_string(raw);
}

std::string pyttb_count_message(const PyttbHeader& h, std::uint64_t found) {
  return "the sptensor header declares " + std::to_string(h.nnz) + " nonzeros, the file holds " +
         std::to_string(found) + " data line(s): a truncated or edited export? (export it again)";
}

}  // namespace tessera::io
