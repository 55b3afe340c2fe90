// Direct reads of a tensor store with pread() (H5TensorReader::read_direct, see
// h5store.hpp) and the read floor they are measured against (measure_read_bandwidth).
//
// Direct reads (read_direct, used by read_h5 and available to streaming): for unfiltered,
// allocated datasets the file offset of every chunk (or of the contiguous data) is looked
// up once through HDF5; then threads pread() pieces of the range straight into the
// caller's buffers (through a small staging buffer where the value type is converted or a
// chunk at a range end is read whole for its CRC) and check what they read. Errors get a
// key (check stage in read()'s order, then position) and the smallest is thrown, so the
// message is the one read() gives.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <type_traits>

#include "io/h5store.hpp"
#include "io/h5store_internal.hpp"
#include "io/h5store_reader_impl.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace tessera::io {

using namespace detail;
using posix::errno_text;
using posix::pread_full;

void H5TensorReader::Impl::init_direct() {
  if (direct_state != 0) return;
  direct_state = -1;
#if !H5_VERSION_GE(1, 10, 5)
  direct_why = "this HDF5 (older than 1.10.5) cannot report chunk addresses";
#else
  {
    const h5::Handle fcpl = h5::plist(H5Fget_create_plist(file));
    hsize_t user_block = 0;
    if (!fcpl.valid() || H5Pget_userblock(fcpl, &user_block) < 0) {
      direct_why = "cannot read the file's creation properties" + h5::detail();
      return;
    }
    if (user_block != 0) {
      direct_why = "the file starts with a user block";
      return;
    }
  }
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  std::vector<DirectLayout> lay(ds.size());
  for (std::size_t d = 0; d < ds.size(); ++d) {
    const Dataset& dset = ds[d];
    const std::size_t s = stored_size(static_cast<int>(d));
    const h5::Handle t = h5::datatype(H5Dget_type(dset.id));
    const hid_t want = static_cast<int>(d) < order()
                           ? H5T_STD_U32LE
                           : (dset.is_float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
    if (!t.valid() || H5Tequal(t, want) <= 0) {
      direct_why = dset.name + " is not stored as little-endian " + h5::type_text(want);
      return;
    }
    if (nnz == 0) continue;
    const h5::Handle dcpl = h5::plist(H5Dget_create_plist(dset.id));
    const H5D_layout_t layout = dcpl.valid() ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    DirectLayout& L = lay[d];
    if (layout == H5D_CONTIGUOUS) {
      const haddr_t a = H5Pget_external_count(dcpl) == 0 ? H5Dget_offset(dset.id) : HADDR_UNDEF;
      if (a == HADDR_UNDEF) {
        direct_why = dset.name + " has no storage in the file (unwritten, or external)";
        return;
      }
      L.seg = nnz;
      L.addr = {static_cast<std::uint64_t>(a)};
    } else if (layout == H5D_CHUNKED) {
      if (H5Pget_nfilters(dcpl) != 0) {
        direct_why = dset.name + " is compressed (or otherwise filtered)";
        return;
      }
      L.seg = dset.chunk;
      L.addr.resize(div_up(nnz, L.seg));
      for (std::uint64_t k = 0; k < L.addr.size(); ++k) {
        const hsize_t at = k * L.seg;
        unsigned mask = 0;
        haddr_t a = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(dset.id, &at, &mask, &a, &size) < 0 || a == HADDR_UNDEF ||
            mask != 0 || size != L.seg * s) {
          direct_why = "chunk " + std::to_string(k) + " of " + dset.name +
                       " is not allocated as a plain chunk" + h5::detail();
          return;
        }
        L.addr[k] = a;
      }
    } else {
      direct_why = dset.name + " has a compact or virtual layout";
      return;
    }
    for (std::uint64_t k = 0; k < L.addr.size(); ++k) {
      const std::uint64_t len = std::min(L.seg, nnz - k * L.seg);
      if (L.addr[k] + len * s > info.file_bytes) {
        direct_why = dset.name + " has data past the end of the file (truncated?)";
        return;
      }
    }
  }
  fd = ::open(path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    direct_why = "cannot open the file: " + errno_text(errno);
    return;
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead; a hint only
  direct = std::move(lay);
  direct_state = 1;
#endif
}

template <typename T>
void H5TensorReader::Impl::direct_piece(int d, std::uint64_t first, std::uint64_t a,
                                        std::uint64_t b, void* out_v, bool crc,
                                        std::vector<unsigned char>& stage) const {
  const DirectLayout& L = direct[static_cast<std::size_t>(d)];
  const std::size_t s = stored_size(d);
  const bool is_values = d == order();
  const std::size_t out_size = is_values ? sizeof(T) : sizeof(index_t);
  const bool same = out_size == s;  // coordinates are uint32 = index_t; else float/double
  auto* out = static_cast<unsigned char*>(out_v);
  const std::uint64_t seg = L.seg;
  auto out_at = [&](std::uint64_t pos) { return out + (pos - first) * out_size; };
  auto file_at = [&](std::uint64_t pos) {
    const std::uint64_t k = pos / seg;
    return L.addr[static_cast<std::size_t>(k)] + (pos - k * seg) * s;
  };
  // End of the run from `pos` (< limit) whose bytes lie back to back in the file.
  auto run_end = [&](std::uint64_t pos, std::uint64_t limit) {
    std::uint64_t k = pos / seg;
    std::uint64_t stop = std::min(limit, (k + 1) * seg);
    while (stop < limit && L.addr[k + 1] == L.addr[k] + seg * s) {
      ++k;
      stop = std::min(limit, (k + 1) * seg);
    }
    return stop;
  };
  // One pread; with drop-behind, the range then leaves the page cache (clean pages only:
  // the caller flushes a file just written with evict_file).
  auto rd = [&](void* buf, std::uint64_t len, std::uint64_t off) {
    pread_full(fd, buf, static_cast<std::size_t>(len), off, path());
    if (drop_behind)
      ::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
  };
  // Stored elements (float32 or float64 values) to the caller's type.
  auto convert = [&](const unsigned char* src, std::uint64_t pos, std::uint64_t n) {
    T* o = reinterpret_cast<T*>(out_at(pos));
    if (s == 4) {
      const float* f = reinterpret_cast<const float*>(src);
      for (std::uint64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f[i]);
    } else {
      const double* v = reinterpret_cast<const double*>(src);
      for (std::uint64_t i = 0; i < n; ++i) o[i] = static_cast<T>(to_float_as_hdf5(v[i]));
    }
  };
  if (!crc) {
    const std::uint64_t stage_elems = std::max<std::uint64_t>(1, direct_piece_bytes / s);
    for (std::uint64_t pos = a; pos < b;) {
      const std::uint64_t stop = run_end(pos, b);
      if (same) {
        rd(out_at(pos), (stop - pos) * s, file_at(pos));
        pos = stop;
      } else {
        const std::uint64_t n = std::min(stop - pos, stage_elems);
        if (stage.size() < n * s) stage.resize(n * s);
        rd(stage.data(), n * s, file_at(pos));
        convert(stage.data(), pos, n);
        pos += n;
      }
    }
    return;
  }
  // Checksums: every chunk touched is read whole and verified (chunked, equal lengths).
  const std::uint64_t C = seg;
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  const std::uint64_t whole_end = b == nnz ? b : (b / C) * C;  // chunks inside [a, b) end here
  for (std::uint64_t k = a / C; k * C < b;) {
    const std::uint64_t c0 = k * C, c1 = std::min(c0 + C, nnz);
    if (same && c0 >= a && c1 <= b) {
      // A run of whole chunks straight into the caller's buffer, verified in place.
      const std::uint64_t stop = run_end(c0, whole_end);
      rd(out_at(c0), (stop - c0) * s, file_at(c0));
      for (; k * C < stop; ++k) verify_chunk(d, k, out_at(k * C));
      continue;
    }
    if (stage.size() < (c1 - c0) * s) stage.resize((c1 - c0) * s);
    rd(stage.data(), (c1 - c0) * s, L.addr[static_cast<std::size_t>(k)]);
    verify_chunk(d, k, stage.data());
    const std::uint64_t p0 = std::max(a, c0), p1 = std::min(b, c1);
    if (same)
      std::memcpy(out_at(p0), stage.data() + (p0 - c0) * s, (p1 - p0) * s);
    else
      convert(stage.data() + (p0 - c0) * s, p0, p1 - p0);
    ++k;
  }
}

namespace {

/// True when every value is finite (vectorises; the exact position comes from check_values).
template <typename T>
bool all_finite(const T* v, std::size_t n) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t k = 0; k < n; ++k)
    bad |= std::fabs(v[k]) <= std::numeric_limits<T>::max() ? 0 : 1;
  return bad == 0;
}

/// True when every coordinate is < dim (vectorises better than check_coords' maximum; the
/// exact position comes from check_coords).
bool all_below(const index_t* v, std::size_t n, std::uint64_t dim) {
  if (dim > std::numeric_limits<index_t>::max()) return true;
  const auto last = static_cast<index_t>(dim - 1);
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t k = 0; k < n; ++k) bad |= v[k] > last ? 1 : 0;
  return bad == 0;
}

}  // namespace

template <typename T>
void H5TensorReader::Impl::read_direct(nnz_t first_in, nnz_t count_in, index_t* const* idx, T* vals,
                                       int threads, const H5ReadChecks& checks) {
  if (count_in <= 0) return;
  const int N = order();
  const auto first = static_cast<std::uint64_t>(first_in);
  const auto end = first + static_cast<std::uint64_t>(count_in);
  const bool crc = checks.checksums && verify && info.has_checksums;
  // Tasks: pieces of each dataset's range; with checksums whole chunks (each chunk in one
  // task), else any element boundary.
  struct Task {
    int d;
    std::uint64_t a, b;
  };
  std::vector<Task> tasks;
  for (int d = 0; d <= N; ++d) {
    const std::uint64_t unit = crc ? info.chunk_elems : 1;
    const std::uint64_t piece =
        std::max<std::uint64_t>(1, direct_piece_bytes / (unit * stored_size(d))) * unit;
    for (std::uint64_t w = first / piece * piece; w < end; w += piece)
      tasks.push_back({d, std::max(first, w), std::min(end, w + piece)});
  }
  // Errors are ranked as read() meets them: per mode its CRCs then its coordinates, then
  // the blocks, then the values' CRCs and the values themselves; then by position.
  using Key = std::array<std::uint64_t, 4>;  // stage, then position (blocks: block, mode, pos)
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  Key best{kNone, 0, 0, 0};
  std::exception_ptr best_err;
  std::atomic<std::uint64_t> best_stage{kNone};
  std::mutex mu;
  auto record = [&](const Key& key, std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu);
    if (key < best) {
      best = key;
      best_err = std::move(e);
      best_stage.store(key[0]);
    }
  };
  auto record_current = [&](std::uint64_t stage, std::uint64_t where) {
    try {
      throw;
    } catch (const PositionedError& e) {
      record({stage, static_cast<std::uint64_t>(e.position()), 0, 0}, std::current_exception());
    } catch (...) {
      record({stage, where, 0, 0}, std::current_exception());
    }
  };
  // Automatic threads: one per kMinBytesPerThread of the read too, so that a small read
  // (a tier-3 chunk of a few nonzeros) does not start a thread per dataset for each chunk.
  std::uint64_t bytes = 0;
  for (const Task& t : tasks) bytes += (t.b - t.a) * stored_size(t.d);
  std::size_t nt_max = static_cast<std::size_t>(thread_count(threads));
  if (threads <= 0)
    nt_max = std::min<std::size_t>(
        nt_max, static_cast<std::size_t>(std::max<std::uint64_t>(1, bytes / kMinBytesPerThread)));
  const int nt = static_cast<int>(std::min(nt_max, tasks.size()));
  std::atomic<std::size_t> next{0};
  run_threads(nt, [&](int) {
    std::vector<unsigned char> stage;
    for (std::size_t i = next++; i < tasks.size(); i = next++) {
      const Task& t = tasks[i];
      const auto read_stage = static_cast<std::uint64_t>(t.d < N ? 2 * t.d : 2 * N + 1);
      if (best_stage.load() < read_stage) continue;  // an earlier stage failed already
      void* out = t.d < N ? static_cast<void*>(idx[t.d]) : static_cast<void*>(vals);
      try {
        direct_piece<T>(t.d, first, t.a, t.b, out, crc, stage);
      } catch (...) {
        record_current(read_stage, t.a);
        continue;
      }
      try {
        const auto a = static_cast<nnz_t>(t.a), n = static_cast<nnz_t>(t.b - t.a);
        if (t.d < N && checks.coordinates) {
          const index_t* v = idx[t.d] + (t.a - first);
          if (!all_below(v, static_cast<std::size_t>(n), info.dims[static_cast<std::size_t>(t.d)]))
            check_coords(t.d, a, n, v);
        } else if (t.d == N && checks.values) {
          const T* v = vals + (t.a - first);
          if (!all_finite(v, static_cast<std::size_t>(n))) check_values(a, n, v);
        }
      } catch (...) {
        record_current(read_stage + 1, t.a);
      }
    }
  });
  const auto block_stage = static_cast<std::uint64_t>(2 * N);
  if (info.partition && checks.blocks && best[0] > block_stage) {
    const std::uint64_t piece = std::max<std::uint64_t>(1, direct_piece_bytes / sizeof(index_t));
    const std::uint64_t pieces = div_up(end - first, piece);
    std::atomic<std::uint64_t> next_piece{0};
    run_threads(static_cast<int>(std::min<std::uint64_t>(
                    static_cast<std::uint64_t>(thread_count(threads)), pieces)),
                [&](int) {
                  for (std::uint64_t i = next_piece++; i < pieces; i = next_piece++) {
                    const std::uint64_t a = first + i * piece;
                    const std::uint64_t b = std::min(end, a + piece);
                    try {
                      if (const auto e = find_block_error(a, b, first, idx))
                        record({block_stage, e->block, static_cast<std::uint64_t>(e->mode), e->pos},
                               std::make_exception_ptr(block_error(*e)));
                    } catch (...) {
                      record_current(block_stage, a);
                    }
                  }
                });
  }
  if (best_err) std::rethrow_exception(best_err);
}

template <typename T>
void H5TensorReader::read_direct(nnz_t first, nnz_t count, index_t* const* idx, T* vals,
                                 int threads, const H5ReadChecks& checks) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  Impl& m = *impl_;
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  {
    std::lock_guard<std::mutex> lk(m.hdf5_mutex);
    h5::quiet_errors();
    m.init_direct();
  }
  if (m.direct_state > 0) {
    m.read_direct(first, count, idx, vals, threads, checks);  // preads: calls may overlap
  } else {
    std::lock_guard<std::mutex> lk(m.hdf5_mutex);  // HDF5 (serial builds) is not thread-safe
    h5::quiet_errors();
    m.read_checked(first, count, idx, vals, checks);
  }
}

template void H5TensorReader::read_direct<double>(nnz_t, nnz_t, index_t* const*, double*, int,
                                                  const H5ReadChecks&);
template void H5TensorReader::read_direct<float>(nnz_t, nnz_t, index_t* const*, float*, int,
                                                 const H5ReadChecks&);

bool H5TensorReader::direct_read_available() {
  h5::quiet_errors();
  impl_->init_direct();
  return impl_->direct_state > 0;
}

std::string H5TensorReader::direct_read_fallback_reason() {
  h5::quiet_errors();
  impl_->init_direct();
  return impl_->direct_state > 0 ? std::string() : impl_->direct_why;
}

void H5TensorReader::set_direct_piece_bytes(std::uint64_t bytes) {
  impl_->direct_piece_bytes = std::max<std::uint64_t>(1, bytes);
}

void H5TensorReader::set_drop_behind(bool on) {
  impl_->drop_behind = on;
}

bool evict_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Dirty pages (a store just written) are not dropped: flush them first. fdatasync on a
  // read-only descriptor is allowed on Linux; a file system that cannot is left as it is.
  const bool synced = ::fdatasync(fd) == 0;
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return synced && dropped;
}

// ---- read floor ----

double measure_read_bandwidth(const std::string& path, std::uint64_t max_bytes, int threads,
                              bool cold) {
  if (cold) evict_file(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot open: " + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(path + ": cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t bytes = max_bytes == 0 ? size : std::min(size, max_bytes);
  if (bytes == 0) return 0.0;
  constexpr std::uint64_t kBlock = std::uint64_t(16) << 20;
  const std::uint64_t nblocks = div_up(bytes, kBlock);
  const int nt = static_cast<int>(
      std::min<std::uint64_t>(static_cast<std::uint64_t>(thread_count(threads)), nblocks));
  ::posix_fadvise(fd, 0, static_cast<off_t>(bytes), POSIX_FADV_SEQUENTIAL);
  // Buffers touched before the clock starts: page faults are not the file's cost.
  std::vector<std::vector<unsigned char>> buf(static_cast<std::size_t>(nt));
  for (auto& b : buf) b.assign(static_cast<std::size_t>(std::min(kBlock, bytes)), 0);
  std::atomic<std::uint64_t> next{0};
  std::exception_ptr err;
  std::mutex mu;
  Timer timer;
  run_threads(nt, [&](int t) {
    auto& b = buf[static_cast<std::size_t>(t)];
    for (std::uint64_t i = next++; i < nblocks; i = next++) {
      const std::uint64_t off = i * kBlock;
      try {
        const auto len = static_cast<std::size_t>(std::min(kBlock, bytes - off));
        pread_full(fd, b.data(), len, off, path);
        if (cold)  // drop-behind, as the tier-3 reader's: the blocks stay cold for later
          ::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(len),
                          POSIX_FADV_DONTNEED);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err) err = std::current_exception();
        next = nblocks;
      }
    }
  });
  const double seconds = timer.seconds();
  if (err) std::rethrow_exception(err);
  return static_cast<double>(bytes) / std::max(seconds, 1e-9);
}

}  // namespace tessera::io
