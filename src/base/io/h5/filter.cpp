// Compressed chunks checked before HDF5 inflates them (see filter.hpp): the chunk's raw
// bytes (H5Dread_chunk) inflated with zlib into a buffer of exactly the chunk's bytes; the
// stream must end there. The cost is one more inflate of each compressed chunk the first
// time it is read (a store read once inflates each chunk twice).
#include "io/h5/filter.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "io/h5/error.hpp"
#include "io/h5/handle.hpp"

namespace tessera::io::h5 {
namespace {

// zlib's largest compression ratio (deflate's 258-byte matches in 2 bits) plus the stream's
// header and trailer: a stored chunk of n bytes inflates to at most kMaxRatio n + kSlack.
constexpr std::size_t kMaxRatio = 1032;
constexpr std::size_t kSlack = 1024;
// Chunks larger than this are not read (Tessera writes at most 2^28 elements of 8 bytes).
constexpr std::size_t kMaxChunkBytes = std::size_t(1) << 31;

/// Inflates `in` into exactly out.size() bytes; false unless the stream is whole and holds
/// exactly that many.
bool inflate_exactly(const std::vector<unsigned char>& in, std::size_t n_in,
                     std::vector<unsigned char>& out) {
  if (n_in > UINT32_MAX || out.size() > UINT32_MAX) return false;
  z_stream z{};
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(n_in);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (inflateInit(&z) != Z_OK) return false;
  int rc = inflate(&z, Z_FINISH);
  if (rc != Z_STREAM_END && z.avail_out == 0 && z.avail_in > 0) {
    // The buffer is full: only the stream's end (the last block's end code, the trailer)
    // may remain, which writes nothing.
    unsigned char spare = 0;
    z.next_out = &spare;
    z.avail_out = 1;
    rc = inflate(&z, Z_FINISH);
    if (z.avail_out != 1) rc = Z_DATA_ERROR;
  }
  const bool ok = rc == Z_STREAM_END && z.total_out == out.size();
  inflateEnd(&z);
  return ok;
}

}  // namespace

std::string compressed_size_problem(hsize_t stored, hsize_t bytes) {
  if (stored > compressBound(static_cast<uLong>(bytes)))
    return "more than its " + std::to_string(bytes) + " bytes compress to";
  if (stored == 0 || (bytes > kSlack && (bytes - kSlack + kMaxRatio - 1) / kMaxRatio > stored))
    return "too few for its " + std::to_string(bytes) + " bytes";
  return "";
}

hsize_t file_size_of(hid_t obj) {
  const hid_t f = H5Iget_file_id(obj);
  if (f < 0) return 0;
  hsize_t n = 0;
  if (H5Fget_filesize(f, &n) < 0) n = 0;
  H5Fclose(f);
  return n;
}

std::string unreadable_filters(hid_t dcpl) {
  const int nf = H5Pget_nfilters(dcpl);
  bool deflate = false;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8] = {};
    std::size_t ncd = 8;
    char fname[64] = {};
    const H5Z_filter_t f = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd,
                                          sizeof(fname), fname, nullptr);
    if (f == H5Z_FILTER_DEFLATE && i == nf - 1)
      deflate = true;
    else if (f != H5Z_FILTER_SHUFFLE || deflate)
      return "is filtered by HDF5 filter " + std::to_string(f) + " at position " +
             std::to_string(i) + ", which Tessera does not read (shuffle, then deflate)";
  }
  return nf <= 0 || deflate ? ""
                            : "is shuffled but not compressed (Tessera reads shuffle, then "
                              "deflate)";
}

ChunkCheck::ChunkCheck(hid_t dset) {
  const Handle dcpl = plist(H5Dget_create_plist(dset));
  if (!dcpl.valid() || H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_nfilters(dcpl) <= 0) return;
  filtered_ = true;
  file_bytes_ = file_size_of(dset);
  unreadable_ = unreadable_filters(dcpl);
  deflate_bit_ = 1u << (H5Pget_nfilters(dcpl) - 1);  // deflate is the last filter
  const int nd = H5Pget_chunk(dcpl, 0, nullptr);
  chunk_dims_.assign(static_cast<std::size_t>(std::max(nd, 0)), 0);
  if (nd <= 0 || H5Pget_chunk(dcpl, nd, chunk_dims_.data()) < 0) {
    unreadable_ = "has an unreadable chunk shape";
    return;
  }
  const Handle t = datatype(H5Dget_type(dset));
  std::size_t bytes = t.valid() ? H5Tget_size(t) : 0;
  for (const hsize_t d : chunk_dims_) bytes = d > 0 && bytes <= kMaxChunkBytes / d ? bytes * d : 0;
  if (bytes == 0 || bytes > kMaxChunkBytes) {
    unreadable_ = "has chunks larger than Tessera reads (2 GiB)";
    return;
  }
  chunk_bytes_ = bytes;
}

#if H5_VERSION_GE(1, 10, 5)
std::string ChunkCheck::check_chunk(hid_t dset, const hsize_t* offset, hsize_t stored) {
  // A deflated chunk is never longer than zlib's bound for its bytes (one stored as it is
  // holds exactly its bytes), nor shorter than 1/1032 of them.
  std::string bad = compressed_size_problem(stored, chunk_bytes_);
  if (bad.empty() && file_bytes_ > 0 && stored > file_bytes_)
    bad = "more than the file's " + std::to_string(file_bytes_) + " bytes";
  if (!bad.empty())
    return "has a compressed chunk of " + std::to_string(stored) + " bytes, " + bad +
           ": the file is corrupted";
  if (raw_.size() < stored) raw_.resize(stored);
  std::uint32_t mask = 0;
  if (H5Dread_chunk(dset, H5P_DEFAULT, offset, &mask, raw_.data()) < 0)
    return "has an unreadable compressed chunk" + detail() + ": the file is corrupted";
  if ((mask & deflate_bit_) != 0) {
    // HDF5 stores a chunk deflate could not shrink as it is (deflate is an optional
    // filter): then it must hold exactly the chunk's bytes.
    if (stored == chunk_bytes_) return "";
    return "has a chunk stored uncompressed in " + std::to_string(stored) + " bytes, not its " +
           std::to_string(chunk_bytes_) + ": the file is corrupted";
  }
  out_.resize(chunk_bytes_);
  if (!inflate_exactly(raw_, stored, out_))
    return "has a compressed chunk that does not inflate to its " + std::to_string(chunk_bytes_) +
           " bytes: the file is corrupted";
  return "";
}

std::string ChunkCheck::check_range(hid_t dset, hsize_t first, hsize_t count) {
  if (!filtered_ || count == 0) return "";
  if (!unreadable_.empty()) return unreadable_;
  if (chunk_dims_.size() != 1) return check_all(dset);
  const hsize_t C = chunk_dims_[0];
  const hsize_t k1 = (first + count - 1) / C;
  if (done_.size() <= k1) done_.resize(static_cast<std::size_t>(k1) + 1, false);
  for (hsize_t k = first / C; k <= k1; ++k) {
    if (done_[static_cast<std::size_t>(k)]) continue;
    hsize_t at = k * C, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(dset, &at, &mask, &addr, &size) < 0)
      return "has an unreadable chunk index" + detail() + ": the file is corrupted";
    if (addr == HADDR_UNDEF) return "misses a compressed chunk: the file is corrupted";
    const std::string why = check_chunk(dset, &at, size);
    if (!why.empty()) return why;
    done_[static_cast<std::size_t>(k)] = true;
  }
  release();
  return "";
}

void ChunkCheck::release() {
  std::vector<unsigned char>().swap(raw_);
  std::vector<unsigned char>().swap(out_);
}

std::string ChunkCheck::check_all(hid_t dset) {
  if (!filtered_) return "";
  if (!unreadable_.empty()) return unreadable_;
  const Handle sp = space(H5Dget_space(dset));
  hsize_t n = 0;
  if (!sp.valid() || H5Dget_num_chunks(dset, sp, &n) < 0)
    return "has an unreadable chunk index" + detail() + ": the file is corrupted";
  std::vector<hsize_t> offset(chunk_dims_.size());
  for (hsize_t k = 0; k < n; ++k) {
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dset, sp, k, offset.data(), &mask, &addr, &size) < 0)
      return "has an unreadable chunk index" + detail() + ": the file is corrupted";
    if (addr == HADDR_UNDEF) continue;
    const std::string why = check_chunk(dset, offset.data(), size);
    if (!why.empty()) return why;
  }
  release();
  return "";
}

#else
// HDF5 before 1.10.5 has no chunk-index queries (H5Dget_chunk_info*, H5Dread_chunk): the
// compressed chunks go to HDF5 unchecked there.
std::string ChunkCheck::check_chunk(hid_t, const hsize_t*, hsize_t) {
  return "";
}
std::string ChunkCheck::check_range(hid_t, hsize_t, hsize_t) {
  return unreadable_;
}
std::string ChunkCheck::check_all(hid_t) {
  return unreadable_;
}
void ChunkCheck::release() {}
#endif

}  // namespace tessera::io::h5
