// FROSTT text output: write_tns (io/tns.hpp), 1-based lines, plain or gzip (one member per
// rank, written in rank order), through io::AtomicOutput / SharedOutput (io/output.hpp).
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/output.hpp"
#include "io/posix_io.hpp"
#include "io/tns.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::io {

using posix::errno_text;
using posix::Fd;
using posix::pwrite_full;

namespace {

/// Longest line format_line writes: 16 coordinates of up to 10 digits, a value of up to
/// 24 characters, separators and the newline.
constexpr std::size_t kMaxLineChars = kMaxOrder * 11 + 32;
constexpr std::size_t kWriteChunk = std::size_t(16) << 20;

/// Writes nonzero k as a 1-based line at p; returns the end.
inline char* format_line(const SparseTensor<double>& x, std::size_t k, char* p) {
  for (const auto& v : x.idx) {
    p = std::to_chars(p, p + 11, static_cast<std::uint64_t>(v[k]) + 1).ptr;
    *p++ = ' ';
  }
  // Shortest representation that std::from_chars reads back to the same double.
  p = std::to_chars(p, p + 32, x.vals[k]).ptr;
  *p++ = '\n';
  return p;
}

/// Calls sink(data, n) with the formatted text of all local nonzeros, `prefix` first, in
/// pieces of at most kWriteChunk bytes.
template <typename Sink>
void format_text(const std::string& prefix, const SparseTensor<double>& x, Sink&& sink) {
  if (!prefix.empty()) sink(prefix.data(), prefix.size());
  if (x.nnz() == 0) return;
  const std::size_t cap = std::min(kWriteChunk, static_cast<std::size_t>(x.nnz()) * kMaxLineChars);
  std::vector<char> buf(cap + kMaxLineChars);
  const auto n = static_cast<std::size_t>(x.nnz());
  std::size_t k = 0;
  while (k < n) {
    char* p = buf.data();
    char* const end = buf.data() + cap;
    for (; k < n && p < end; ++k) p = format_line(x, k, p);
    sink(buf.data(), static_cast<std::size_t>(p - buf.data()));
  }
}

/// The local text compressed as one gzip member.
std::vector<char> gzip_member(const std::string& prefix, const SparseTensor<double>& x,
                              const std::string& path) {
  z_stream zs{};
  // Level 1: ~8x faster than the default level 6 on FROSTT text (0.3 s vs 2.6 s for the
  // 37 MB congress tensor) for ~25% larger output; writing is usually the bottleneck.
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw Error(path + ": zlib deflateInit2 failed");
  struct End {
    z_stream* z;
    ~End() { deflateEnd(z); }
  } end{&zs};
  std::vector<char> out;
  std::vector<unsigned char> stage(std::size_t(1) << 18);
  const auto pump = [&](const char* data, std::size_t n, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    zs.avail_in = static_cast<uInt>(n);
    do {
      zs.next_out = stage.data();
      zs.avail_out = static_cast<uInt>(stage.size());
      if (deflate(&zs, flush) == Z_STREAM_ERROR) throw Error(path + ": zlib deflate failed");
      out.insert(out.end(), stage.data(), stage.data() + (stage.size() - zs.avail_out));
    } while (zs.avail_out == 0);
  };
  format_text(prefix, x, [&](const char* d, std::size_t n) { pump(d, n, Z_NO_FLUSH); });
  pump(nullptr, 0, Z_FINISH);
  return out;
}

}  // namespace

void write_tns(const std::string& path, const SparseTensor<double>& x,
               const comm::Communicator& c) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "write_tns needs a host communicator");
  const int rank = c.rank();
  const int nranks = c.size();
  const int order = x.order();
  // A rank without nonzeros may hold a default-constructed (order 0) tensor.
  const bool shapeless = order == 0 && x.nnz() == 0;

  // 1. Validate: the same order everywhere, coordinates inside dims, finite values.
  comm::run_collectively(c, [&] {
    if (shapeless) return;
    TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder,
                        "write_tns " << path << ": expected a tensor of order 1 to " << kMaxOrder
                                     << ", found order " << order);
    TESSERA_INPUT_CHECK(x.idx.size() == static_cast<std::size_t>(order),
                        "write_tns " << path << ": expected " << order
                                     << " coordinate arrays, found " << x.idx.size());
    for (int m = 0; m < order; ++m) {
      const auto& v = x.idx[static_cast<std::size_t>(m)];
      TESSERA_INPUT_CHECK(v.size() == x.vals.size(),
                          "write_tns " << path << ": mode " << m << " has " << v.size()
                                       << " coordinates for " << x.vals.size() << " values");
      const std::uint64_t dim = x.dims[static_cast<std::size_t>(m)];
      for (std::size_t k = 0; k < v.size(); ++k) {
        TESSERA_INPUT_CHECK(v[k] < dim, "write_tns " << path << ": nonzero " << k << " of rank "
                                                     << rank << " has coordinate " << v[k]
                                                     << " in mode " << m << " of length " << dim);
        // The text is 1-based and its readers take indices up to 2^32 - 1 (32-bit storage),
        // so the last index of a mode of length 2^32 has no text form they read back.
        TESSERA_INPUT_CHECK(static_cast<std::uint64_t>(v[k]) < 0xFFFFFFFFull,
                            "write_tns " << path << ": nonzero " << k << " of rank " << rank
                                         << " has coordinate " << v[k] << " in mode " << m
                                         << ", 4294967296 in 1-based text: past the largest "
                                            "index a .tns file may hold (4294967295); keep the "
                                            "HDF5 store for this tensor");
      }
    }
    for (std::size_t k = 0; k < x.vals.size(); ++k)
      TESSERA_INPUT_CHECK(std::isfinite(x.vals[k]),
                          "write_tns " << path << ": expected finite values, found " << x.vals[k]
                                       << " at nonzero " << k << " of rank " << rank);
  });
  const std::int32_t omin = c.allreduce_value<std::int32_t>(
      shapeless ? std::numeric_limits<std::int32_t>::max() : order, comm::ReduceOp::min);
  const std::int32_t omax = c.allreduce_value<std::int32_t>(order, comm::ReduceOp::max);
  if (omax == 0)
    throw CollectiveError("write_tns " + path + ": expected a tensor of order 1 to " +
                          std::to_string(kMaxOrder) + ", found order 0 on every rank");
  if (omin != omax)
    throw CollectiveError("write_tns " + path + ": ranks hold tensors of different orders (" +
                          std::to_string(omin) + " to " + std::to_string(omax) + ")");
  std::vector<std::uint64_t> dims = x.dims;
  dims.resize(static_cast<std::size_t>(omax), 0);
  c.allreduce(dims.data(), dims.size(), comm::ReduceOp::max);
  const nnz_t nnz = c.allreduce_value<nnz_t>(x.nnz(), comm::ReduceOp::sum);

  // 2. Where to write (io/output.hpp): rank 0's temporary PATH.tmp-HOST_PID, renamed at the
  // end and removed on any error; a character device or FIFO is written directly.
  SharedOutput out(path, c);
  const std::string& tmp = out.write_path();
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;

  // 3. This rank's bytes: their length first (for the offsets), then the bytes.
  std::string header;
  if (rank == 0)
    header = "# FROSTT sparse tensor, 1-based coordinates: order " + std::to_string(omax) +
             ", dims " + format_dims(dims) + ", nnz " + std::to_string(nnz) + "\n";
  std::vector<char> member;  // .gz: this rank's compressed member
  std::uint64_t my_bytes = 0;
  comm::run_collectively(c, [&] {
    if (gz) {
      if (!header.empty() || x.nnz() > 0) member = gzip_member(header, x, path);
      my_bytes = member.size();
    } else {
      format_text(header, x, [&](const char*, std::size_t n) { my_bytes += n; });
    }
  });
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(nranks), 0);
  c.allgather(&my_bytes, sizes.data(), 1);
  std::uint64_t offset = 0;
  for (int q = 0; q < rank; ++q) offset += sizes[static_cast<std::size_t>(q)];

  // A special file cannot be written at offsets: rank 0 writes every rank's bytes in order.
  if (out.special()) {
    std::string bytes;
    comm::run_collectively(c, [&] {
      if (gz) {
        bytes.assign(member.begin(), member.end());
      } else {
        bytes.reserve(static_cast<std::size_t>(my_bytes));
        format_text(header, x, [&](const char* d, std::size_t n) { bytes.append(d, n); });
      }
    });
    write_in_rank_order(path, bytes.data(), bytes.size(), c);
    return;
  }

  // 4. Rank 0 creates the file; every rank writes its part; rank 0 renames.
  {
    Fd fd;
    comm::run_collectively(c, [&] {
      if (rank != 0) return;
      fd.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd.fd < 0) throw InputError("cannot create " + tmp + ": " + errno_text(errno));
    });
    comm::run_collectively(c, [&] {
      if (my_bytes == 0) return;
      if (rank != 0) {
        fd.fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd.fd < 0) throw InputError("cannot open " + tmp + ": " + errno_text(errno));
      }
      if (gz) {
        pwrite_full(fd.fd, member.data(), member.size(), offset, tmp);
      } else {
        std::uint64_t off = offset;
        format_text(header, x, [&](const char* d, std::size_t n) {
          pwrite_full(fd.fd, d, n, off, tmp);
          off += n;
        });
        TESSERA_EXPECTS(off == offset + my_bytes, "formatted text changed length");
      }
      const int f = fd.fd;
      fd.fd = -1;
      if (::close(f) != 0) throw InputError("cannot close " + tmp + ": " + errno_text(errno));
    });
    comm::run_collectively(c, [&] { out.commit(); });  // rank 0: fsync and rename
  }
}

}  // namespace tessera::io
