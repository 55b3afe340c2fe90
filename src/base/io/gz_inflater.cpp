// GzInflater (gz_inflater.hpp): gzip members inflated one after another from a descriptor.
#include "io/gz_inflater.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "io/posix_io.hpp"
#include "util/error.hpp"

namespace tessera::io::detail {

using posix::pread_full;

GzInflater::GzInflater(int fd, const std::string& path, std::uint64_t size)
    : fd_(fd), path_(path), size_(size), in_(kInBytes) {
  if (inflateInit2(&zs_, 15 + 16) != Z_OK) throw Error(path + ": zlib inflateInit2 failed");
}

GzInflater::~GzInflater() {
  inflateEnd(&zs_);
}

std::size_t GzInflater::read(char* dst, std::size_t n, std::string* zerr) {
  std::size_t got = 0;
  while (got < n && !done_) {
    if (zs_.avail_in == 0) refill();
    if (zs_.avail_in == 0) {
      *zerr = "unexpected end of file";
      return got;
    }
    const auto room = static_cast<uInt>(std::min<std::size_t>(n - got, 1u << 30));
    zs_.next_out = reinterpret_cast<Bytef*>(dst + got);
    zs_.avail_out = room;
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    got += room - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      next_member();
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs_.avail_in == 0)) {
      *zerr = zs_.msg ? zs_.msg : ("zlib error " + std::to_string(rc));
      return got;
    }
  }
  return got;
}

void GzInflater::refill() {
  const std::size_t keep = zs_.avail_in;
  if (keep > 0 && zs_.next_in != in_.data()) std::memmove(in_.data(), zs_.next_in, keep);
  const auto want = static_cast<std::size_t>(
      std::min<std::uint64_t>(in_.size() - keep, size_ - std::min(pos_, size_)));
  if (want > 0) pread_full(fd_, in_.data() + keep, want, pos_, path_);
  pos_ += want;
  zs_.next_in = in_.data();
  zs_.avail_in = static_cast<uInt>(keep + want);
}

void GzInflater::next_member() {
  ++members_;
  if (zs_.avail_in < 2) refill();
  if (zs_.avail_in == 0) {
    done_ = true;
    return;
  }
  const unsigned char* b = zs_.next_in;
  if (zs_.avail_in >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    if (inflateReset(&zs_) != Z_OK) throw Error(path_ + ": zlib inflateReset failed");
    return;
  }
  const std::uint64_t at = offset();
  const std::size_t show = std::min<std::size_t>(zs_.avail_in, 24);
  std::string found;
  for (std::size_t k = 0; k < show; ++k) {
    const auto ch = b[k];
    if (ch >= 0x20 && ch < 0x7f) {
      found += static_cast<char>(ch);
    } else {
      char e[8];
      std::snprintf(e, sizeof(e), "\\x%02x", ch);
      found += e;
    }
  }
  throw InputError(path_ + ": byte " + std::to_string(at) + ": " + std::to_string(size_ - at) +
                   " byte" + (size_ - at == 1 ? "" : "s") + " after the end of gzip member " +
                   std::to_string(members_) + " are not a gzip member (found '" + found +
                   (zs_.avail_in > show ? "..." : "") +
                   "'): expected the end of the file or another gzip member (data appended "
                   "to a compressed file is not read; recompress the whole text)");
}

}  // namespace tessera::io::detail
