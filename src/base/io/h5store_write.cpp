// Writing a tensor store (see h5store.hpp for the layout and the contracts):
// H5TensorWriter and the whole-tensor writer write_h5.
//
// Writing
// -------
// Sizes are known before anything is written (the writer's header carries the global nnz),
// so rank 0 creates the whole file up front: attributes (complete = 0), one chunked 1-D
// dataset per mode and one for the values. Without compression the chunks are allocated at
// creation (H5D_ALLOC_TIME_EARLY, never filled), rank 0 asks HDF5 for every chunk's file
// address (H5Dget_chunk_info_by_coord), closes the file and broadcasts the addresses; then
// every rank pwrite()s its nonzeros into the chunks, all ranks at once. An unfiltered chunk
// holds its elements as stored (little-endian uint32 / float64 / float32), so this is the
// same file HDF5 itself would write, without serialising the ranks through one library
// instance (a serial HDF5 build cannot open one file for writing from several processes).
// With compression (deflate > 0) the ranks take turns (rank order): each opens the file
// through HDF5, writes its hyperslabs and closes it. Either way no rank holds more than the
// pieces it passes in.
//
// Checksums: every rank computes the CRC-32 of the part of each chunk it writes; commit()
// gathers the parts on rank 0, checks that every position of every dataset was written
// exactly once (a hole or an overlap is a writer bug, reported, not stored), combines them
// per chunk (crc32_combine) and stores /checksums. Readers verify every chunk they touch,
// so bit rot, a truncated copy or a raw-data overwrite is reported instead of decomposed.
//
// Atomicity: the file is PATH.tmp-HOST_PID (io/output.hpp, rank 0's host and pid) until
// rank 0 sets complete = 1, fsyncs and renames it; any error (agreed by all ranks) removes
// the temporary file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io/h5store.hpp"
#include "io/h5store_internal.hpp"
#include "io/output.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/progress.hpp"

namespace tessera::io {

using namespace detail;
using posix::errno_text;
using posix::pwrite_full;

namespace {

/// CRC-32 of part of a chunk: dataset d, chunk k, elements [off, off + len) of the chunk.
struct CrcPart {
  std::uint64_t d, k, off, len, crc;
};
constexpr int kCrcWords = 5;

h5::Handle make_fapl() {
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  // The 1.8 object formats (superblock v2, object header v2) carry checksums of the
  // metadata, so corrupted metadata is detected; readable by HDF5 1.8 and later.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

}  // namespace

struct H5TensorWriter::Impl {
  const comm::Communicator& c;
  std::string path, tmp;
  H5Header h;
  H5WriteOptions o;
  int N = 0;
  std::uint64_t C = 0, nchunks = 0;
  bool direct = false;
  bool created = false;  // rank 0: the temporary file exists
  bool committed = false;
  std::vector<std::uint64_t> addr;  // direct: [dataset][chunk] file offsets
  int fd = -1;
  std::vector<CrcPart> parts;
  int rounds = 0;
  std::uint64_t total_bytes = 0, done_bytes = 0;
  std::unique_ptr<Progress> progress;
  std::unique_ptr<SharedOutput> out;  // io/output.hpp

  Impl(const comm::Communicator& comm) : c(comm) {}
  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (!committed && created) ::unlink(tmp.c_str());
  }
  std::size_t elem_size(int d) const {
    return d < N ? 4 : (o.value_type == ValueType::float32 ? 4 : 8);
  }
  void create();
  void add_crc(int d, std::uint64_t first, std::uint64_t count, const void* data);
};

void H5TensorWriter::Impl::create() {
  const h5::Handle fapl = make_fapl();
  const h5::Handle fcpl = h5::plist(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl, 0);  // no timestamps: the same tensor gives the same bytes
  h5::Handle f = h5::create_file(tmp, H5F_ACC_EXCL, fcpl, fapl);
  created = true;
  h5::write_string(f, "format", kTensorStoreFormat, tmp);
  h5::write_i64(f, "format_version", kTensorStoreVersion, tmp);
  h5::write_i64(f, "order", N, tmp);
  h5::write_u64s(f, "dims", h.dims, tmp);
  h5::write_u64(f, "nnz", static_cast<std::uint64_t>(h.nnz), tmp);
  h5::write_string(f, "value_type", to_string(o.value_type), tmp);
  h5::write_i64(f, "index_base", 0, tmp);
  h5::write_i64(f, "source_index_base", h.source_index_base, tmp);
  h5::write_i64(f, "has_duplicates", h.has_duplicates, tmp);
  if (h.sorted_mode >= 0) h5::write_i64(f, "sorted_mode", h.sorted_mode, tmp);
  h5::write_string(f, "source", h.source, tmp);
  h5::write_i64(f, "complete", 0, tmp);

  const h5::Handle gcpl = h5::plist(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl, 0);
  h5::Handle g = h5::group(H5Gcreate2(f, "coords", H5P_DEFAULT, gcpl, H5P_DEFAULT));
  if (!g.valid()) h5::fail(tmp, "create group", "/coords");
  const hsize_t chunk = C;
  const h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl, 1, &chunk);
  H5Pset_obj_track_times(dcpl, 0);
  if (o.deflate > 0) {
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, static_cast<unsigned>(o.deflate));
  } else {
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  }
  if (direct) addr.assign(static_cast<std::size_t>((N + 1) * nchunks), 0);
  for (int d = 0; d <= N; ++d) {
    const hid_t type = d < N
                           ? H5T_STD_U32LE
                           : (o.value_type == ValueType::float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
    const h5::Handle ds =
        h5::create_dataset(f, dataset_name(d, N), type, {static_cast<hsize_t>(h.nnz)}, tmp, dcpl);
#if H5_VERSION_GE(1, 10, 5)
    if (direct) {
      const hsize_t bytes = C * elem_size(d);
      for (std::uint64_t k = 0; k < nchunks; ++k) {
        const hsize_t at = k * C;
        unsigned mask = 0;
        haddr_t a = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, &at, &mask, &a, &size) < 0 || a == HADDR_UNDEF ||
            size != bytes)
          throw Error("HDF5 did not allocate chunk " + std::to_string(k) + " of " +
                      dataset_name(d, N) + " in " + tmp + h5::detail());
        addr[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * nchunks + k)] = a;
      }
    }
#endif
  }
  g.reset();
  h5::close_file(f, tmp);
}

void H5TensorWriter::Impl::add_crc(int d, std::uint64_t first, std::uint64_t count,
                                   const void* data) {
  const std::size_t s = elem_size(d);
  const auto* p = static_cast<const unsigned char*>(data);
  // Parts of the piece, one per chunk it touches; CRCs in parallel.
  std::vector<CrcPart> mine;
  for (std::uint64_t pos = first; pos < first + count;) {
    const std::uint64_t k = pos / C;
    const std::uint64_t stop = std::min(first + count, (k + 1) * C);
    mine.push_back({static_cast<std::uint64_t>(d), k, pos - k * C, stop - pos, 0});
    pos = stop;
  }
  const auto n = static_cast<std::int64_t>(mine.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < n; ++i) {
    auto& m = mine[static_cast<std::size_t>(i)];
    const std::uint64_t at = m.k * C + m.off - first;
    m.crc = crc32_z(0, p + at * s, static_cast<z_size_t>(m.len * s));
  }
  for (const auto& m : mine) {
    // Adjacent parts of one chunk are combined at once, so the list stays short.
    if (!parts.empty()) {
      CrcPart& last = parts.back();
      if (last.d == m.d && last.k == m.k && last.off + last.len == m.off) {
        last.crc = crc32_combine(static_cast<uLong>(last.crc), static_cast<uLong>(m.crc),
                                 static_cast<z_off_t>(m.len * s));
        last.len += m.len;
        continue;
      }
    }
    parts.push_back(m);
  }
}

H5TensorWriter::H5TensorWriter(const std::string& path, const H5Header& h,
                               const comm::Communicator& c, const H5WriteOptions& o)
    : impl_(std::make_unique<Impl>(c)) {
  h5::quiet_errors();
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "H5TensorWriter needs a host communicator");
  Impl& m = *impl_;
  m.path = path;
  m.h = h;
  m.o = o;
  m.N = static_cast<int>(h.dims.size());
  comm::run_collectively(c, [&] {
    TESSERA_INPUT_CHECK(m.N >= 1 && m.N <= kMaxOrder,
                        "write " << path << ": expected a tensor of order 1 to " << kMaxOrder
                                 << ", found order " << m.N);
    for (std::uint64_t d : h.dims)
      TESSERA_INPUT_CHECK(d >= 1 && d <= (std::uint64_t(1) << 32),
                          "write " << path << ": every mode length must be 1 to 2^32 (dims "
                                   << format_dims(h.dims) << ")");
    TESSERA_INPUT_CHECK(h.nnz >= 1, "write " << path << ": no nonzeros to write");
    TESSERA_INPUT_CHECK(o.chunk_elems >= 1 && o.chunk_elems <= kMaxChunkElems,
                        "write " << path << ": chunk length must be 1 to " << kMaxChunkElems
                                 << " elements, got " << o.chunk_elems);
    TESSERA_INPUT_CHECK(o.deflate >= 0 && o.deflate <= 9,
                        "write " << path << ": deflate level must be 0 to 9, got " << o.deflate);
    TESSERA_INPUT_CHECK(o.deflate == 0 || o.mode != H5WriteOptions::Mode::direct,
                        "write " << path << ": direct writes need an uncompressed store");
  });
  m.C = std::min<std::uint64_t>(o.chunk_elems, static_cast<std::uint64_t>(h.nnz));
  m.nchunks = div_up(static_cast<std::uint64_t>(h.nnz), m.C);
#if H5_VERSION_GE(1, 10, 5)
  m.direct = o.deflate == 0 && o.mode != H5WriteOptions::Mode::turns;
#else
  m.direct = false;  // chunk addresses need H5Dget_chunk_info_by_coord (HDF5 1.10.5)
#endif
  // io/output.hpp: rank 0's temporary PATH.tmp-HOST_PID, renamed by commit() and removed on
  // any error; HDF5 needs a seekable file, so a character device or FIFO is refused.
  m.out = std::make_unique<SharedOutput>(path, c);
  m.tmp = m.out->write_path();
  if (m.out->special())
    throw CollectiveError("cannot write " + path +
                          ": an HDF5 tensor store needs a regular (seekable) file, and this is a "
                          "character device or FIFO");
  comm::run_collectively(c, [&] {
    if (c.rank() == 0) m.create();
  });
  if (m.direct) {
    m.addr.resize(static_cast<std::size_t>((m.N + 1) * m.nchunks));
    c.broadcast(m.addr.data(), m.addr.size(), 0);
    comm::run_collectively(c, [&] {
      m.fd = ::open(m.tmp.c_str(), O_WRONLY | O_CLOEXEC);
      if (m.fd < 0) throw InputError("cannot open " + m.tmp + ": " + errno_text(errno));
    });
  }
  m.total_bytes =
      static_cast<std::uint64_t>(h.nnz) * (4 * static_cast<std::uint64_t>(m.N) + m.elem_size(m.N));
  m.progress = std::make_unique<Progress>(c.rank() == 0 && o.progress, "writing", base_name(path),
                                          m.total_bytes);
}

H5TensorWriter::~H5TensorWriter() = default;

const std::string& H5TensorWriter::temp_path() const {
  return impl_->tmp;
}

std::string H5TensorWriter::mode() const {
  return impl_->direct ? "direct" : "turns";
}

void H5TensorWriter::write(const std::vector<H5Piece>& pieces) {
  h5::quiet_errors();
  Impl& m = *impl_;
  TESSERA_EXPECTS(!m.committed, "write after commit");
  const int N = m.N;
  const int me = m.c.rank(), P = m.c.size();
  std::vector<std::vector<float>> f32(pieces.size());
  std::uint64_t bytes = 0;
  // 1. Check, convert, checksum; direct mode: write. All ranks at once.
  comm::run_collectively(m.c, [&] {
    if (m.o.fail_after_rounds >= 0 && m.rounds >= m.o.fail_after_rounds && me == P - 1)
      throw InputError("write " + m.path + ": injected failure after " + std::to_string(m.rounds) +
                       " write round(s) (testing)");
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const H5Piece& p = pieces[i];
      if (p.count == 0) continue;
      TESSERA_EXPECTS(
          p.first >= 0 && p.count > 0 && p.first + p.count <= m.h.nnz,
          "piece [" << p.first << ", " << p.first + p.count << ") of " << m.h.nnz << " positions");
      const auto n = static_cast<std::size_t>(p.count);
      for (int d = 0; d < N; ++d) {
        TESSERA_EXPECTS(p.idx[d] != nullptr, "piece without mode " << d);
        const std::uint64_t dim = m.h.dims[static_cast<std::size_t>(d)];
        for (std::size_t k = 0; k < n; ++k)
          TESSERA_INPUT_CHECK(p.idx[d][k] < dim,
                              "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                       << " has mode-" << d << " coordinate " << p.idx[d][k]
                                       << ", but dims[" << d << "] = " << dim);
      }
      for (std::size_t k = 0; k < n; ++k)
        TESSERA_INPUT_CHECK(std::isfinite(p.vals[k]),
                            "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                     << " has value " << p.vals[k] << ": expected finite values");
      if (m.o.value_type == ValueType::float32) {
        f32[i].resize(n);
        for (std::size_t k = 0; k < n; ++k) {
          f32[i][k] = static_cast<float>(p.vals[k]);
          TESSERA_INPUT_CHECK(std::isfinite(f32[i][k]),
                              "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                       << " has value " << p.vals[k]
                                       << ", too large for float32 (write float64)");
          // A nonzero that float32 rounds to 0 would be lost silently (the reader refuses
          // such values for --precision float too).
          TESSERA_INPUT_CHECK(f32[i][k] != 0.0f || p.vals[k] == 0,
                              "write " << m.path << ": nonzero " << p.first + static_cast<nnz_t>(k)
                                       << " has value " << p.vals[k]
                                       << ", too small for float32: it would be stored as 0 "
                                          "(write float64)");
        }
      }
      for (int d = 0; d <= N; ++d) {
        const void* src =
            d < N ? static_cast<const void*>(p.idx[d])
                  : (m.o.value_type == ValueType::float32 ? static_cast<const void*>(f32[i].data())
                                                          : static_cast<const void*>(p.vals));
        const auto first = static_cast<std::uint64_t>(p.first);
        m.add_crc(d, first, n, src);
        bytes += n * m.elem_size(d);
        if (!m.direct) continue;
        // Runs of chunks that lie back to back in the file go out in one pwrite.
        const std::size_t s = m.elem_size(d);
        const std::uint64_t* a = m.addr.data() + static_cast<std::uint64_t>(d) * m.nchunks;
        std::uint64_t pos = first;
        const std::uint64_t end = first + n;
        while (pos < end) {
          const std::uint64_t k = pos / m.C;
          const std::uint64_t off = a[k] + (pos - k * m.C) * s;
          std::uint64_t stop = std::min(end, (k + 1) * m.C);
          for (std::uint64_t kk = k + 1; stop < end && a[kk] == a[kk - 1] + m.C * s; ++kk)
            stop = std::min(end, (kk + 1) * m.C);
          pwrite_full(m.fd, static_cast<const unsigned char*>(src) + (pos - first) * s,
                      (stop - pos) * s, off, m.tmp);
          pos = stop;
        }
      }
    }
  });
  // 2. Compressed stores: the ranks take turns writing through HDF5.
  if (!m.direct) {
    for (int q = 0; q < P; ++q) {
      std::exception_ptr err;
      if (q == me && bytes > 0) {
        try {
          const h5::Handle fapl = make_fapl();
          h5::Handle f = h5::open_file(m.tmp, H5F_ACC_RDWR, fapl);
          const h5::Handle dapl = h5::plist(H5Pcreate(H5P_DATASET_ACCESS));
          H5Pset_chunk_cache(dapl, 521, std::size_t(64) << 20, 1.0);
          for (int d = 0; d <= N; ++d) {
            const std::string name = dataset_name(d, N);
            const h5::Handle ds = h5::dataset(H5Dopen2(f, name.c_str(), dapl));
            if (!ds.valid()) h5::fail(m.tmp, "open dataset", name);
            for (std::size_t i = 0; i < pieces.size(); ++i) {
              const H5Piece& p = pieces[i];
              if (p.count == 0) continue;
              const void* src = d < N ? static_cast<const void*>(p.idx[d])
                                      : (m.o.value_type == ValueType::float32
                                             ? static_cast<const void*>(f32[i].data())
                                             : static_cast<const void*>(p.vals));
              const hid_t mt = d < N ? H5T_NATIVE_UINT32
                                     : (m.o.value_type == ValueType::float32 ? H5T_NATIVE_FLOAT
                                                                             : H5T_NATIVE_DOUBLE);
              h5::check(h5::write_range(ds, static_cast<hsize_t>(p.first),
                                        static_cast<hsize_t>(p.count), mt, src),
                        m.tmp, "write", name);
            }
          }
          h5::close_file(f, m.tmp);
        } catch (...) {
          err = std::current_exception();
        }
      }
      comm::raise_collectively(m.c, err);
    }
  }
  ++m.rounds;
  m.done_bytes += m.c.allreduce_value(bytes);
  m.progress->update(m.done_bytes);
}

void H5TensorWriter::commit(const H5Partition* partition) {
  h5::quiet_errors();
  Impl& m = *impl_;
  TESSERA_EXPECTS(!m.committed, "commit twice");
  const int N = m.N;
  if (m.direct) {
    comm::run_collectively(m.c, [&] {
      const int fd = m.fd;
      m.fd = -1;
      if (::fdatasync(fd) != 0 && errno != EINVAL && errno != EROFS) {
        const int e = errno;
        ::close(fd);
        throw InputError("cannot write " + m.tmp + ": " + errno_text(e));
      }
      if (::close(fd) != 0) throw InputError("cannot write " + m.tmp + ": " + errno_text(errno));
    });
  }
  m.progress->finish();
  // Checksum parts to rank 0.
  std::vector<std::uint64_t> send;
  send.reserve(m.parts.size() * kCrcWords);
  for (const auto& p : m.parts) send.insert(send.end(), {p.d, p.k, p.off, p.len, p.crc});
  std::vector<std::int64_t> counts(static_cast<std::size_t>(m.c.size()), 0);
  counts[0] = static_cast<std::int64_t>(send.size());
  const std::vector<std::uint64_t> all = m.c.alltoallv(send, counts);
  comm::run_collectively(m.c, [&] {
    if (m.c.rank() != 0) return;
    std::vector<CrcPart> parts(all.size() / kCrcWords);
    for (std::size_t i = 0; i < parts.size(); ++i)
      parts[i] = {all[kCrcWords * i], all[kCrcWords * i + 1], all[kCrcWords * i + 2],
                  all[kCrcWords * i + 3], all[kCrcWords * i + 4]};
    std::sort(parts.begin(), parts.end(), [](const CrcPart& a, const CrcPart& b) {
      return std::tie(a.d, a.k, a.off) < std::tie(b.d, b.k, b.off);
    });
    const auto nnz = static_cast<std::uint64_t>(m.h.nnz);
    std::vector<std::uint32_t> crc(static_cast<std::size_t>((N + 1) * m.nchunks), 0);
    std::size_t i = 0;
    for (int d = 0; d <= N; ++d) {
      for (std::uint64_t k = 0; k < m.nchunks; ++k) {
        const std::uint64_t len = std::min(m.C, nnz - k * m.C);
        std::uint64_t at = 0;
        uLong v = 0;
        for (; i < parts.size() && parts[i].d == static_cast<std::uint64_t>(d) && parts[i].k == k;
             ++i) {
          const CrcPart& p = parts[i];
          if (p.off != at)
            TESSERA_THROW("writing " << m.path << ": position " << k * m.C + std::min(p.off, at)
                                     << " of " << dataset_name(d, N)
                                     << (p.off > at ? " was never written" : " was written twice"));
          v = at == 0 ? static_cast<uLong>(p.crc)
                      : crc32_combine(v, static_cast<uLong>(p.crc),
                                      static_cast<z_off_t>(p.len * m.elem_size(d)));
          at += p.len;
        }
        if (at != len)
          TESSERA_THROW("writing " << m.path << ": position " << k * m.C + std::min(at, len)
                                   << " of " << dataset_name(d, N)
                                   << (at < len ? " was never written" : " was written twice"));
        crc[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * m.nchunks + k)] =
            static_cast<std::uint32_t>(v);
      }
    }
    if (partition) {
      const H5Partition& pt = *partition;
      std::uint64_t nb = 1;
      for (int g : pt.grid) nb *= static_cast<std::uint64_t>(std::max(g, 0));
      TESSERA_EXPECTS(static_cast<int>(pt.grid.size()) == N && pt.cuts.size() == pt.grid.size() &&
                          pt.offsets.size() == nb + 1 && pt.offsets.front() == 0 &&
                          pt.offsets.back() == nnz &&
                          std::is_sorted(pt.offsets.begin(), pt.offsets.end()),
                      "a consistent partition (grid, cuts, offsets)");
    }
    const h5::Handle fapl = make_fapl();
    h5::Handle f = h5::open_file(m.tmp, H5F_ACC_RDWR, fapl);
    {
      const h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
      H5Pset_obj_track_times(dcpl, 0);
      const h5::Handle ds = h5::create_dataset(
          f, "checksums", H5T_STD_U32LE, {static_cast<hsize_t>(N + 1), m.nchunks}, m.tmp, dcpl);
      h5::write_all(ds, H5T_NATIVE_UINT32, crc.data(), "/checksums", m.tmp);
      h5::write_string(ds, "algorithm",
                       "CRC-32 (zlib.crc32) of each chunk's little-endian element bytes; rows: "
                       "/coords/mode0.., /values",
                       m.tmp);
    }
    if (partition) {
      const h5::Handle gcpl = h5::plist(H5Pcreate(H5P_GROUP_CREATE));
      H5Pset_obj_track_times(gcpl, 0);
      const h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
      H5Pset_obj_track_times(dcpl, 0);
      const h5::Handle g = h5::group(H5Gcreate2(f, "partition", H5P_DEFAULT, gcpl, H5P_DEFAULT));
      if (!g.valid()) h5::fail(m.tmp, "create group", "/partition");
      const h5::Handle gc = h5::group(H5Gcreate2(g, "cuts", H5P_DEFAULT, gcpl, H5P_DEFAULT));
      if (!gc.valid()) h5::fail(m.tmp, "create group", "/partition/cuts");
      const auto put = [&](hid_t loc, const std::string& name, hid_t ftype, hid_t mtype,
                           const void* data, hsize_t n) {
        const h5::Handle ds = h5::create_dataset(loc, name, ftype, {n}, m.tmp, dcpl);
        h5::write_all(ds, mtype, data, name, m.tmp);
      };
      const std::vector<std::uint32_t> grid(partition->grid.begin(), partition->grid.end());
      put(g, "/partition/grid", H5T_STD_U32LE, H5T_NATIVE_UINT32, grid.data(), grid.size());
      put(g, "/partition/offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, partition->offsets.data(),
          partition->offsets.size());
      for (int n = 0; n < N; ++n) {
        const auto& cut = partition->cuts[static_cast<std::size_t>(n)];
        put(gc, "/partition/cuts/mode" + std::to_string(n), H5T_STD_U64LE, H5T_NATIVE_UINT64,
            cut.data(), cut.size());
      }
      h5::write_string(g, "scheme", "grid", m.tmp);
    }
    h5::overwrite_i64(f, "complete", 1, m.tmp);
    h5::close_file(f, m.tmp);
    m.out->commit();  // fsync and rename
  });
  m.committed = true;
}

// =======================================================================================
// Whole tensors

void write_h5(const std::string& path, const SparseTensor<double>& x, const comm::Communicator& c,
              H5Header meta, const H5WriteOptions& o) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "write_h5 needs a host communicator");
  const int order = x.order();
  const bool shapeless = order == 0 && x.nnz() == 0;
  comm::run_collectively(c, [&] {
    if (shapeless) return;
    TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder,
                        "write " << path << ": expected a tensor of order 1 to " << kMaxOrder
                                 << ", found order " << order);
    TESSERA_INPUT_CHECK(
        x.idx.size() == static_cast<std::size_t>(order),
        "write " << path << ": expected " << order << " coordinate arrays, found " << x.idx.size());
    for (const auto& v : x.idx)
      TESSERA_INPUT_CHECK(v.size() == x.vals.size(), "write " << path << ": " << v.size()
                                                              << " coordinates for "
                                                              << x.vals.size() << " values");
  });
  const std::int32_t omin = c.allreduce_value<std::int32_t>(
      shapeless ? std::numeric_limits<std::int32_t>::max() : order, comm::ReduceOp::min);
  const std::int32_t omax = c.allreduce_value<std::int32_t>(order, comm::ReduceOp::max);
  if (omax == 0 || omin != omax)
    throw CollectiveError("write " + path + ": ranks hold tensors of orders " +
                          std::to_string(omin) + " to " + std::to_string(omax));
  if (meta.dims.empty()) {
    meta.dims = x.dims;
    meta.dims.resize(static_cast<std::size_t>(omax), 0);
    c.allreduce(meta.dims.data(), meta.dims.size(), comm::ReduceOp::max);
  }
  const nnz_t mine = x.nnz();
  std::vector<nnz_t> counts(static_cast<std::size_t>(c.size()), 0);
  c.allgather(&mine, counts.data(), 1);
  nnz_t offset = 0;
  meta.nnz = 0;
  for (int q = 0; q < c.size(); ++q) {
    if (q < c.rank()) offset += counts[static_cast<std::size_t>(q)];
    meta.nnz += counts[static_cast<std::size_t>(q)];
  }
  if (meta.nnz == 0) throw CollectiveError("write " + path + ": no nonzeros to write");
  H5TensorWriter w(path, meta, c, o);
  const nnz_t piece = o.piece > 0 ? o.piece : kDefaultPiece;
  const nnz_t rounds = c.allreduce_value<nnz_t>((mine + piece - 1) / piece, comm::ReduceOp::max);
  for (nnz_t r = 0; r < rounds; ++r) {
    std::vector<H5Piece> pieces;
    const nnz_t at = r * piece;
    if (at < mine) {
      H5Piece p;
      p.first = offset + at;
      p.count = std::min(piece, mine - at);
      for (int n = 0; n < omax; ++n) p.idx[n] = x.idx[static_cast<std::size_t>(n)].data() + at;
      p.vals = x.vals.data() + at;
      pieces.push_back(p);
    }
    w.write(pieces);
  }
  w.commit();
}

}  // namespace tessera::io
