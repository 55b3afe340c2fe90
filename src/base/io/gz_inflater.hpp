// Inflating a gzip file member after member (internal to src/base/io: the .tns.gz reader of
// tns.cpp).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io::detail {

/// Inflates a gzip file from a descriptor, member after member (RFC 1952 allows several
/// concatenated members: they read as one stream). After each member the file must end or
/// another member must start (magic bytes 1f 8b); anything else (text appended to a
/// compressed file, padding, a second file glued on) is an InputError naming the byte
/// offset, never dropped in silence. zlib's gzread would stop at such data without a word.
class GzInflater {
 public:
  GzInflater(int fd, const std::string& path, std::uint64_t size);
  ~GzInflater();
  GzInflater(const GzInflater&) = delete;
  GzInflater& operator=(const GzInflater&) = delete;

  /// Up to n bytes of text into dst; fewer only at the end of the stream or on an error,
  /// when *zerr receives zlib's reason (the bytes before it are valid).
  std::size_t read(char* dst, std::size_t n, std::string* zerr);
  /// Compressed bytes consumed so far.
  std::uint64_t offset() const { return pos_ - zs_.avail_in; }

 private:
  static constexpr std::size_t kInBytes = std::size_t(1) << 20;

  /// Keeps the unread input and appends what the file has next, up to the buffer's size.
  void refill();

  /// After a member's trailer: the end of the file, or the next member.
  void next_member();

  int fd_;
  const std::string& path_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;  // file offset of the next read
  std::vector<unsigned char> in_;
  z_stream zs_{};
  int members_ = 0;
  bool done_ = false;
};

}  // namespace tessera::io::detail
