// Reading a tensor store through HDF5 (see h5store.hpp for the layout and the contracts):
// H5TensorReader's open (metadata and layout checks, the stored partition), its checked
// reads, and the collective readers read_h5_info, read_h5 and verify_h5.
//
// Reading
// -------
// Every rank opens the file read-only with HDF5 (concurrent readers are fine in serial and
// parallel builds) and reads hyperslabs of its range. Ranges are read chunk-aligned where
// checksums are verified: whole chunks inside the range go straight into the caller's
// buffers, the chunks at the range ends through a staging buffer.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <tuple>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "io/dedup.hpp"
#include "io/h5store.hpp"
#include "io/h5store_internal.hpp"
#include "io/h5store_reader_impl.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/timer.hpp"

namespace tessera::io {

using namespace detail;
using posix::errno_text;

void H5TensorReader::Impl::open(const std::string& p, bool verify_checksums) {
  info.path = p;
  verify = verify_checksums;
  const std::string& path = info.path;
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw InputError(path + ": cannot open: " + errno_text(errno));
    if (!S_ISREG(st.st_mode))  // a FIFO or device: refused before anything opens it
      throw InputError(posix::not_regular_message(path, st.st_mode, "an .h5 file"));
    info.file_bytes = static_cast<std::uint64_t>(st.st_size);
  }
  if (!is_hdf5_file(path))
    throw InputError(h5::quoted(path) +
                     " is not an HDF5 file (no HDF5 signature; truncated, or not a tensor store)");
  // Strong close: closing the file also closes whatever a failed call left open in it.
  const h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
  file = h5::try_open_file(path, H5F_ACC_RDONLY, fapl);
  if (!file.valid())
    throw InputError("cannot open " + h5::quoted(path) + " as an HDF5 file" + h5::detail() +
                     ": the file is truncated or corrupted");

  // Format and version first: they say what the rest must be.
  if (!h5::has_attr(file, "format", path))
    throw InputError(h5::quoted(path) +
                     " is not a Tessera tensor store: attribute 'format' is "
                     "missing (expected format '" +
                     std::string(kTensorStoreFormat) + "')");
  const std::string fmt = h5::read_string(file, "format", path);
  if (fmt != kTensorStoreFormat) {
    std::string hint;
    if (fmt == "tessera-kruskal" || fmt == "tessera-tucker")
      hint = " (a decomposition model written by --out, not a tensor)";
    throw InputError(h5::quoted(path) + " has format '" + fmt + "'" + hint + ", expected '" +
                     kTensorStoreFormat + "'");
  }
  require_attr(file, "format_version", path, "format version");
  const long long ver = h5::read_i64(file, "format_version", path);
  if (ver != kTensorStoreVersion)
    throw InputError(
        h5::quoted(path) + ": format_version " + std::to_string(ver) +
        (ver > kTensorStoreVersion ? " is newer than this tessera reads" : " is invalid") +
        " (expected " + std::to_string(kTensorStoreVersion) + ")");
  info.format_version = static_cast<int>(ver);
  if (h5::has_attr(file, "complete", path) && h5::read_i64(file, "complete", path) != 1)
    throw InputError(h5::quoted(path) +
                     " was not completely written (attribute complete = 0: an interrupted "
                     "write?); write it again");

  require_attr(file, "order", path, "number of modes");
  const long long order = h5::read_i64(file, "order", path);
  if (order < 1 || order > kMaxOrder)
    throw InputError(layout_error(path, "attribute order = " + std::to_string(order) +
                                            ", expected 1 to " + std::to_string(kMaxOrder)));
  info.order = static_cast<int>(order);
  require_attr(file, "dims", path, "mode lengths");
  info.dims = h5::read_ints<std::uint64_t>(file, "dims", path);
  if (info.dims.size() != static_cast<std::size_t>(order))
    throw InputError(layout_error(path, "attribute 'dims' has " + std::to_string(info.dims.size()) +
                                            " entries, but order = " + std::to_string(order)));
  for (std::size_t n = 0; n < info.dims.size(); ++n)
    if (info.dims[n] < 1 || info.dims[n] > (std::uint64_t(1) << 32))
      throw InputError(layout_error(path, "attribute dims[" + std::to_string(n) +
                                              "] = " + std::to_string(info.dims[n]) +
                                              ", expected 1 to 2^32"));
  require_attr(file, "nnz", path, "number of nonzeros");
  const auto nnzv = h5::read_ints<std::uint64_t>(file, "nnz", path);
  if (nnzv.size() != 1 || nnzv[0] > static_cast<std::uint64_t>(std::numeric_limits<nnz_t>::max()))
    throw InputError(layout_error(path, "attribute 'nnz' must be one count"));
  info.nnz = static_cast<nnz_t>(nnzv[0]);
  if (h5::has_attr(file, "index_base", path)) {
    const long long b = h5::read_i64(file, "index_base", path);
    if (b != 0)
      throw InputError(layout_error(
          path, "attribute index_base = " + std::to_string(b) +
                    ": stored coordinates must be 0-based (index_base 0) in format version 1"));
  }
  if (h5::has_attr(file, "source_index_base", path))
    info.source_index_base = static_cast<int>(h5::read_i64(file, "source_index_base", path));
  if (h5::has_attr(file, "has_duplicates", path))
    info.has_duplicates = static_cast<int>(h5::read_i64(file, "has_duplicates", path));
  if (h5::has_attr(file, "source", path)) info.source = h5::read_string(file, "source", path);
  if (h5::has_attr(file, "sorted_mode", path)) {
    const long long m = h5::read_i64(file, "sorted_mode", path);
    if (m < -1 || m >= order)
      throw InputError(layout_error(path, "attribute sorted_mode = " + std::to_string(m) +
                                              ": expected -1 (no order) or a mode 0.." +
                                              std::to_string(order - 1)));
    info.sorted_mode = static_cast<int>(m);
  }

  // Datasets: one per mode, exactly, and the values.
  if (!h5::has_link(file, "coords", path))
    throw InputError(
        layout_error(path, "group '/coords' (one uint32 dataset per mode) is missing"));
  {
    const h5::Handle g = h5::group(H5Gopen2(file, "coords", H5P_DEFAULT));
    H5G_info_t gi{};
    if (!g.valid() || H5Gget_info(g, &gi) < 0)
      throw InputError(layout_error(path, "'/coords' is not a group" + h5::detail()));
    if (gi.nlinks != static_cast<hsize_t>(order))
      throw InputError(layout_error(path, "'/coords' holds " + std::to_string(gi.nlinks) +
                                              " objects, but order = " + std::to_string(order) +
                                              " (expected mode0..mode" + std::to_string(order - 1) +
                                              ")"));
  }
  const std::string nnz_text = "attribute nnz";
  for (int n = 0; n < order; ++n)
    ds.push_back(open_dataset(file, dataset_name(n, info.order), Kind::coords, path, info.nnz,
                              nnz_text.c_str(), chunk_cache));
  ds.push_back(
      open_dataset(file, "/values", Kind::values, path, info.nnz, nnz_text.c_str(), chunk_cache));
  info.value_type = ds.back().is_float32 ? ValueType::float32 : ValueType::float64;
  if (h5::has_attr(file, "value_type", path)) {
    const std::string vt = h5::read_string(file, "value_type", path);
    if (vt != to_string(info.value_type))
      throw InputError(layout_error(path, "attribute value_type = '" + vt +
                                              "' but dataset '/values' holds " +
                                              to_string(info.value_type)));
  }
  info.chunk_elems = ds.back().chunk;
  info.deflate = ds.back().deflate;

  // Checksums: per chunk of equal-length chunks.
  if (h5::has_link(file, "checksums", path)) {
    info.has_checksums = true;
    for (const auto& d : ds)
      if (d.chunk == 0 || d.chunk != info.chunk_elems)
        throw InputError(
            layout_error(path, "'/checksums' is present but the datasets are not chunked alike ('" +
                                   d.name + "' has chunk length " + std::to_string(d.chunk) +
                                   ", '/values' " + std::to_string(info.chunk_elems) + ")"));
    nchunks = div_up(static_cast<std::uint64_t>(info.nnz), info.chunk_elems);
    const h5::Handle c = h5::dataset(H5Dopen2(file, "checksums", H5P_DEFAULT));
    if (!c.valid()) throw InputError(layout_error(path, "cannot open '/checksums'" + h5::detail()));
    const h5::Handle t = h5::datatype(H5Dget_type(c));
    const h5::Handle sp = h5::space(H5Dget_space(c));
    hsize_t shape[2] = {0, 0};
    const int nd = H5Sget_simple_extent_ndims(sp);
    if (nd == 2) H5Sget_simple_extent_dims(sp, shape, nullptr);
    if (H5Tget_class(t) != H5T_INTEGER || nd != 2 || shape[0] != static_cast<hsize_t>(order + 1) ||
        shape[1] != nchunks)
      throw InputError(layout_error(
          path, "'/checksums' must be uint32[" + std::to_string(order + 1) + "][" +
                    std::to_string(nchunks) + "] (one CRC-32 per chunk of each dataset), found " +
                    h5::type_text(t) + " with " + std::to_string(nd) + " dimensions [" +
                    std::to_string(shape[0]) + "][" + std::to_string(shape[1]) + "]"));
    if (verify) {
      crc.resize(static_cast<std::size_t>((order + 1) * nchunks));
      if (!crc.empty() &&
          H5Dread(c, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, crc.data()) < 0)
        throw InputError(layout_error(path, "cannot read '/checksums'" + h5::detail() +
                                                ": the file is truncated or corrupted"));
    }
  }
  if (h5::has_link(file, "partition", path)) read_partition();
}

void H5TensorReader::Impl::read_partition() {
  const std::string& path = info.path;
  const int N = order();
  H5Partition part;
  const auto g = read_index_dataset(file, "/partition/grid", path, N, "attribute order");
  std::uint64_t nblocks = 1;
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (g[n] < 1)
      throw InputError(layout_error(
          path, "/partition/grid[" + std::to_string(n) + "] = 0, expected at least 1"));
    nblocks *= g[n];
    if (nblocks > (std::uint64_t(1) << 30))
      throw InputError(layout_error(path, "/partition/grid has more than 2^30 blocks"));
    part.grid.push_back(static_cast<int>(g[n]));
  }
  part.offsets =
      read_index_dataset(file, "/partition/offsets", path, static_cast<long long>(nblocks + 1),
                         "the product of /partition/grid plus 1");
  if (part.offsets.front() != 0 || part.offsets.back() != static_cast<std::uint64_t>(info.nnz))
    throw InputError(layout_error(
        path, "/partition/offsets must run from 0 to nnz = " + std::to_string(info.nnz) +
                  ", found " + std::to_string(part.offsets.front()) + " .. " +
                  std::to_string(part.offsets.back())));
  for (std::size_t b = 0; b + 1 < part.offsets.size(); ++b)
    if (part.offsets[b + 1] < part.offsets[b])
      throw InputError(layout_error(
          path, "/partition/offsets decrease at block " + std::to_string(b) + " (" +
                    std::to_string(part.offsets[b]) + " then " +
                    std::to_string(part.offsets[b + 1]) + "): expected non-decreasing"));
  for (int n = 0; n < N; ++n) {
    const std::string name = "/partition/cuts/mode" + std::to_string(n);
    auto cut = read_index_dataset(file, name, path, part.grid[static_cast<std::size_t>(n)] + 1LL,
                                  "/partition/grid[n] plus 1");
    const std::uint64_t dim = info.dims[static_cast<std::size_t>(n)];
    bool ok = cut.front() == 0 && cut.back() == dim;
    for (std::size_t k = 0; k + 1 < cut.size(); ++k) ok = ok && cut[k] <= cut[k + 1];
    if (!ok)
      throw InputError(layout_error(path, name + " must rise from 0 to dims[" + std::to_string(n) +
                                              "] = " + std::to_string(dim)));
    part.cuts.push_back(std::move(cut));
  }
  info.partition = std::move(part);
}

void H5TensorReader::Impl::verify_chunk(int d, std::uint64_t k, const void* p) const {
  const std::uint64_t C = info.chunk_elems;
  const std::uint64_t first = k * C;
  const std::uint64_t len =
      std::min<std::uint64_t>(C, static_cast<std::uint64_t>(info.nnz) - first);
  const auto got = static_cast<std::uint32_t>(
      crc32_z(0, static_cast<const Bytef*>(p), static_cast<z_size_t>(len * stored_size(d))));
  const std::uint32_t want =
      crc[static_cast<std::size_t>(static_cast<std::uint64_t>(d) * nchunks + k)];
  if (got != want) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%08x, expected 0x%08x", got, want);
    throw PositionedError(
        static_cast<nnz_t>(first),
        h5::quoted(path()) + ": checksum mismatch in " + dataset_name(d, order()) + " chunk " +
            std::to_string(k) + " (nonzeros " + std::to_string(first) + ".." +
            std::to_string(first + len) + "): CRC-32 " + buf +
            "; the file is corrupted (or was modified without updating /checksums)");
  }
}

void H5TensorReader::Impl::read_range(int d, nnz_t first_in, nnz_t count_in, hid_t out_type,
                                      std::size_t out_size, void* out, bool crc) {
  if (count_in <= 0) return;
  const Dataset& dset = ds[static_cast<std::size_t>(d)];
  const auto first = static_cast<std::uint64_t>(first_in);
  const auto end = first + static_cast<std::uint64_t>(count_in);
  if (!crc || !verify || !info.has_checksums) {
    h5_read_range(dset, first, end - first, out_type, out, path());
    return;
  }
  const std::size_t ss = stored_size(d);
  const bool same = H5Tequal(out_type, stored_type(d)) > 0;
  const std::uint64_t C = info.chunk_elems;
  const auto nnz = static_cast<std::uint64_t>(info.nnz);
  // Positions before whole_end that start a chunk start a chunk wholly inside the range.
  const std::uint64_t whole_end = end == nnz ? end : (end / C) * C;
  auto* o = static_cast<unsigned char*>(out);
  std::uint64_t pos = first;
  while (pos < end) {
    if (same && pos % C == 0 && pos < whole_end) {
      // Whole chunks straight into the caller's buffer, verified in place.
      h5_read_range(dset, pos, whole_end - pos, out_type, o + (pos - first) * out_size, path());
      for (std::uint64_t k = pos / C; k * C < whole_end; ++k)
        verify_chunk(d, k, o + (k * C - first) * out_size);
      pos = whole_end;
      continue;
    }
    // Whole chunks through the staging buffer: the partial chunks at the ends, or all of
    // them when the stored type differs from the caller's.
    const std::uint64_t k0 = pos / C;
    const std::uint64_t group = same ? 1 : std::max<std::uint64_t>(1, kStageBytes / (C * ss));
    const std::uint64_t k1 = std::min(div_up(end, C), k0 + group);  // chunks [k0, k1)
    const std::uint64_t s0 = k0 * C, s1 = std::min(k1 * C, nnz);
    if (stage.size() < (s1 - s0) * ss) stage.resize((s1 - s0) * ss);
    h5_read_range(dset, s0, s1 - s0, stored_type(d), stage.data(), path());
    for (std::uint64_t k = k0; k < k1; ++k) verify_chunk(d, k, stage.data() + (k * C - s0) * ss);
    const std::uint64_t stop = std::min(end, s1);
    if (same) {
      std::memcpy(o + (pos - first) * out_size, stage.data() + (pos - s0) * ss, (stop - pos) * ss);
    } else {
      // Convert in place in a copy of the part (H5Tconvert needs room for the larger type).
      std::vector<unsigned char> tmp((stop - pos) * std::max(ss, out_size));
      std::memcpy(tmp.data(), stage.data() + (pos - s0) * ss, (stop - pos) * ss);
      if (H5Tconvert(stored_type(d), out_type, stop - pos, tmp.data(), nullptr, H5P_DEFAULT) < 0)
        throw InputError(h5::quoted(path()) + ": cannot convert " + dset.name + h5::detail());
      std::memcpy(o + (pos - first) * out_size, tmp.data(), (stop - pos) * out_size);
    }
    pos = stop;
  }
}

void H5TensorReader::Impl::check_coords(int mode, nnz_t first, nnz_t count,
                                        const index_t* v) const {
  const std::uint64_t dim = info.dims[static_cast<std::size_t>(mode)];
  if (dim > std::numeric_limits<index_t>::max()) return;  // 2^32: every uint32 fits
  const auto n = static_cast<std::size_t>(count);
  index_t mx = 0;
#pragma omp simd reduction(max : mx)
  for (std::size_t k = 0; k < n; ++k) mx = std::max(mx, v[k]);
  if (n == 0 || mx < dim) return;
  std::size_t k = 0;
  while (v[k] < dim) ++k;
  throw PositionedError(first + static_cast<nnz_t>(k),
                        h5::quoted(path()) + ": " + dataset_name(mode, order()) + "[" +
                            std::to_string(first + static_cast<nnz_t>(k)) +
                            "] = " + std::to_string(v[k]) + " is out of range: attribute dims[" +
                            std::to_string(mode) + "] = " + std::to_string(dim) +
                            " (coordinates are 0-based); the attributes disagree with the data");
}

template <typename T>
void H5TensorReader::Impl::check_values(nnz_t first, nnz_t count, const T* v) const {
  const auto n = static_cast<std::size_t>(count);
  for (std::size_t k = 0; k < n; ++k) {
    if (!std::isfinite(v[k])) {
      std::ostringstream os;
      os << h5::quoted(path()) << ": /values[" << first + static_cast<nnz_t>(k) << "] = " << v[k]
         << ": expected finite values (NaN and Inf are not allowed)";
      if (std::is_same_v<T, float> && info.value_type == ValueType::float64)
        os << " or values in the float32 range of this read (read in double precision)";
      throw PositionedError(first + static_cast<nnz_t>(k), os.str());
    }
  }
}

std::optional<H5TensorReader::Impl::BlockError> H5TensorReader::Impl::find_block_error(
    std::uint64_t from, std::uint64_t end, std::uint64_t idx_first,
    const index_t* const* idx) const {
  const H5Partition& p = *info.partition;
  const auto& off = p.offsets;
  std::uint64_t pos = from;
  // The block holding `pos` (the last of equal offsets: empty blocks hold nothing).
  auto b =
      static_cast<std::size_t>(std::upper_bound(off.begin(), off.end(), pos) - off.begin()) - 1;
  for (; pos < end && b + 1 < off.size(); ++b) {
    const std::uint64_t stop = std::min(end, off[b + 1]);
    if (stop <= pos) continue;
    const std::vector<int> bc = p.block_coords(static_cast<int>(b));
    for (int n = 0; n < order(); ++n) {
      const auto& cut = p.cuts[static_cast<std::size_t>(n)];
      const std::uint64_t lo = cut[static_cast<std::size_t>(bc[static_cast<std::size_t>(n)])];
      const std::uint64_t hi = cut[static_cast<std::size_t>(bc[static_cast<std::size_t>(n)]) + 1];
      const index_t* v = idx[n] + (pos - idx_first);
      for (std::uint64_t k = 0; k < stop - pos; ++k) {
        if (v[k] >= lo && v[k] < hi) continue;
        return BlockError{b, pos + k, lo, hi, n, v[k]};
      }
    }
    pos = stop;
  }
  return std::nullopt;
}

PositionedError H5TensorReader::Impl::block_error(const BlockError& e) const {
  const auto at = static_cast<nnz_t>(e.pos);
  return PositionedError(at, h5::quoted(path()) + ": nonzero " + std::to_string(at) + " (" +
                                 dataset_name(e.mode, order()) + " = " + std::to_string(e.value) +
                                 ") is stored in block " + std::to_string(e.block) +
                                 ", whose mode-" + std::to_string(e.mode) + " range is [" +
                                 std::to_string(e.lo) + ", " + std::to_string(e.hi) +
                                 "): /partition disagrees with the data");
}

void H5TensorReader::Impl::check_blocks(nnz_t first, nnz_t count, const index_t* const* idx) const {
  const auto f = static_cast<std::uint64_t>(first);
  if (const auto e = find_block_error(f, f + static_cast<std::uint64_t>(count), f, idx))
    throw block_error(*e);
}

template <typename T>
void H5TensorReader::Impl::read_checked(nnz_t first, nnz_t count, index_t* const* idx, T* vals,
                                        const H5ReadChecks& checks) {
  for (int n = 0; n < order(); ++n) {
    read_range(n, first, count, H5T_NATIVE_UINT32, sizeof(index_t), idx[n], checks.checksums);
    if (checks.coordinates) check_coords(n, first, count, idx[n]);
  }
  if (info.partition && checks.blocks) check_blocks(first, count, idx);
  read_range(order(), first, count,
             std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, sizeof(T), vals,
             checks.checksums);
  if (checks.values) check_values(first, count, vals);
}

// Also used by the direct reads (h5store_direct.cpp).
template void H5TensorReader::Impl::check_values<double>(nnz_t, nnz_t, const double*) const;
template void H5TensorReader::Impl::check_values<float>(nnz_t, nnz_t, const float*) const;
template void H5TensorReader::Impl::read_checked<double>(nnz_t, nnz_t, index_t* const*, double*,
                                                         const H5ReadChecks&);
template void H5TensorReader::Impl::read_checked<float>(nnz_t, nnz_t, index_t* const*, float*,
                                                        const H5ReadChecks&);

H5TensorReader::H5TensorReader(const std::string& path, bool verify_checksums,
                               std::size_t chunk_cache_bytes)
    : impl_(std::make_unique<Impl>()) {
  h5::quiet_errors();
  impl_->chunk_cache = chunk_cache_bytes;
  impl_->open(path, verify_checksums);
}

H5TensorReader::~H5TensorReader() = default;

const H5TensorInfo& H5TensorReader::info() const {
  return impl_->info;
}

template <typename T>
void H5TensorReader::read(nnz_t first, nnz_t count, index_t* const* idx, T* vals) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  h5::quiet_errors();
  Impl& m = *impl_;
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  m.read_checked(first, count, idx, vals, H5ReadChecks{});
}

template void H5TensorReader::read<double>(nnz_t, nnz_t, index_t* const*, double*);
template void H5TensorReader::read<float>(nnz_t, nnz_t, index_t* const*, float*);

void H5TensorReader::read_mode(int mode, nnz_t first, nnz_t count, index_t* out) {
  h5::quiet_errors();
  Impl& m = *impl_;
  TESSERA_EXPECTS(mode >= 0 && mode < m.order(), "mode " << mode);
  TESSERA_EXPECTS(
      first >= 0 && count >= 0 && first + count <= m.info.nnz,
      "range [" << first << ", " << first + count << ") of " << m.info.nnz << " nonzeros");
  m.read_range(mode, first, count, H5T_NATIVE_UINT32, sizeof(index_t), out);
  m.check_coords(mode, first, count, out);
}

void H5TensorReader::read(nnz_t first, nnz_t count, SparseTensor<double>* out) {
  const int N = impl_->order();
  if (out->order() == 0) *out = SparseTensor<double>(impl_->info.dims);
  TESSERA_EXPECTS(out->order() == N, "appending to a tensor of order " << out->order());
  const auto old = static_cast<std::size_t>(out->nnz());
  const auto n = static_cast<std::size_t>(count);
  index_t* p[kMaxOrder];
  for (int m = 0; m < N; ++m) {
    out->idx[static_cast<std::size_t>(m)].resize(old + n);
    p[m] = out->idx[static_cast<std::size_t>(m)].data() + old;
  }
  out->vals.resize(old + n);
  read(first, count, p, out->vals.data() + old);
}

template <typename T>
void H5TensorReader::read_block(int block, nnz_t first, nnz_t count, index_t* const* idx, T* vals) {
  Impl& m = *impl_;
  TESSERA_EXPECTS(m.info.partition.has_value(), "the store has no partition");
  const H5Partition& part = *m.info.partition;
  const auto [b0, bn] = part.block_range(block);
  TESSERA_EXPECTS(first >= 0 && count >= 0 && first + count <= bn,
                  "range [" << first << ", " << first + count << ") of block " << block << " with "
                            << bn << " nonzeros");
  read(b0 + first, count, idx, vals);  // checks the block's index ranges too
}

template void H5TensorReader::read_block<double>(int, nnz_t, nnz_t, index_t* const*, double*);
template void H5TensorReader::read_block<float>(int, nnz_t, nnz_t, index_t* const*, float*);

// =======================================================================================
// Collective readers

H5TensorInfo read_h5_info(const std::string& path, const comm::Communicator& c) {
  H5TensorInfo info;
  comm::run_collectively(c, [&] { info = H5TensorReader(path, false).info(); });
  return info;
}

namespace {

/// Rank r of P's nonzeros [first, first + count): its block of the stored partition, or an
/// equal share of the stored order.
std::pair<nnz_t, nnz_t> share_of(const H5TensorInfo& info, bool by_block, int r, int P) {
  if (by_block) return info.partition->block_range(r);
  const nnz_t first = static_cast<nnz_t>(static_cast<__int128>(info.nnz) * r / P);
  return {first, static_cast<nnz_t>(static_cast<__int128>(info.nnz) * (r + 1) / P) - first};
}

/// Runs `read`; an error becomes the candidate of raise_earliest (key: position + 1 for a
/// PositionedError, 0 for any other, kNoError when none) and its message.
template <typename F>
void catch_read_error(F&& read, std::uint64_t* key, std::string* msg) {
  try {
    read();
  } catch (const PositionedError& e) {
    *key = static_cast<std::uint64_t>(e.position()) + 1;
    *msg = e.what();
  } catch (const std::exception& e) {
    *key = 0;
    *msg = e.what();
  }
}

/// Called with each piece read (position of its first nonzero, count, coordinates of each
/// mode), in order of position.
using PieceHook = std::function<void(nnz_t, nnz_t, const index_t* const*)>;

/// Reads (keep: into res->local; else into a reused buffer) this rank's share; `on_piece`
/// (may be null) sees every piece after its checks.
void read_share(const std::string& path, const comm::Communicator& c, const H5ReadOptions& opt,
                bool keep, H5ReadResult* res, const PieceHook* on_piece = nullptr) {
  Timer timer;
  std::unique_ptr<H5TensorReader> rd;
  comm::run_collectively(
      c, [&] { rd = std::make_unique<H5TensorReader>(path, opt.verify_checksums); });
  res->info = rd->info();
  const H5TensorInfo& info = res->info;
  const int P = c.size(), r = c.rank();
  const int N = info.order;
  res->by_block = opt.by_block && info.partition && info.partition->nblocks() == P;
  nnz_t first = 0, count = 0;  // not a structured binding: the lambda below captures them
  std::tie(first, count) = share_of(info, res->by_block, r, P);
  const nnz_t piece = opt.piece > 0 ? opt.piece : kDefaultPiece;
  const std::uint64_t per_nnz =
      4 * static_cast<std::uint64_t>(N) + (info.value_type == ValueType::float32 ? 4 : 8);
  SparseTensor<double>& x = res->local;
  x = SparseTensor<double>(info.dims);
  std::uint64_t key = kNoError;
  std::string msg;
  catch_read_error(
      [&] {
        const auto room = static_cast<std::size_t>(keep ? count : std::min(count, piece));
        try {
          for (auto& v : x.idx) v.resize(room);
          x.vals.resize(room);
        } catch (const std::bad_alloc&) {
          throw InputError(path + ": out of memory for " + std::to_string(room) +
                           " nonzeros on rank " + std::to_string(r));
        }
        Progress progress(
            r == 0 && opt.progress, "reading", base_name(path),
            static_cast<std::uint64_t>(count) * per_nnz * static_cast<std::uint64_t>(P));
        index_t* p[kMaxOrder];
        int threads = opt.threads;
#ifdef _OPENMP
        if (threads <= 0) threads = omp_get_max_threads();
#endif
        // Block reads are ranges of the block's positions (read_block's checks come with the
        // partition: every nonzero is checked against its block's index ranges).
        for (nnz_t done = 0; done < count; done += piece) {
          const nnz_t n = std::min(piece, count - done);
          const std::size_t at = keep ? static_cast<std::size_t>(done) : 0;
          for (int m = 0; m < N; ++m) p[m] = x.idx[static_cast<std::size_t>(m)].data() + at;
          rd->read_direct(first + done, n, p, x.vals.data() + at, threads);
          if (opt.float_values) check_float_range(path, first + done, n, x.vals.data() + at);
          if (on_piece != nullptr) (*on_piece)(first + done, n, p);
          progress.update(static_cast<std::uint64_t>(done + n) * per_nnz *
                          static_cast<std::uint64_t>(P));
        }
      },
      &key, &msg);
  rd.reset();
  raise_earliest(c, key, msg);
  if (!keep) x = SparseTensor<double>(info.dims);
  res->global_nnz = info.nnz;
  res->index_base = 0;
  res->bytes = info.file_bytes;
  res->text_bytes = 0;
  res->seconds = c.allreduce_value(timer.seconds(), comm::ReduceOp::max);
}

}  // namespace

H5ReadResult read_h5(const std::string& path, const comm::Communicator& c,
                     const H5ReadOptions& opt) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host, "read_h5 needs a host communicator");
  H5ReadResult res;
  read_share(path, c, opt, true, &res);
  log::debug("read " + path + ": " + std::to_string(res.global_nnz) + " nonzeros, dims " +
             format_dims(res.local.dims) + (res.by_block ? ", by block" : "") + ", " +
             std::to_string(res.seconds) + " s");
  return res;
}

namespace {

/// The key order of the unique check's first pass: with a sorted mode m, (index of mode m,
/// coordinate), the order io::UniqueWriter writes; else the coordinate's own.
struct StoreOrder {
  int keys[kMaxOrder + 1];
  int count = 0;
  StoreOrder(int order, int sorted_mode) {
    if (sorted_mode >= 0 && sorted_mode < order) keys[count++] = sorted_mode;
    for (int m = 0; m < order; ++m) keys[count++] = m;
  }
  /// a < b strictly; a and b give each mode's index.
  template <typename A, typename B>
  bool less(const A& a, const B& b) const {
    for (int k = 0; k < count; ++k) {
      const int m = keys[k];
      if (a(m) != b(m)) return a(m) < b(m);
    }
    return false;
  }
};

/// The orders the unique check's first pass tries: with a sorted mode m, (m, coordinate),
/// what io::UniqueWriter writes; without one, (longest mode, coordinate), in which
/// `tessera partition` keeps each block of such a store (it drops sorted_mode), and the
/// coordinate's own.
std::vector<StoreOrder> candidate_orders(const H5TensorInfo& info) {
  std::vector<StoreOrder> o;
  if (info.sorted_mode >= 0) {
    o.emplace_back(info.order, info.sorted_mode);
  } else {
    const int longest = longest_mode(info.dims);
    if (longest > 0) o.emplace_back(info.order, longest);
    o.emplace_back(info.order, -1);
  }
  return o;
}

/// This rank's range in the candidate orders of the unique check: whether it is strictly
/// increasing in each, and its first and last coordinates.
struct RangeOrder {
  std::vector<char> increasing;  ///< per candidate order
  nnz_t seen = 0;
  std::vector<index_t> first, last;
  bool any() const {
    return std::any_of(increasing.begin(), increasing.end(), [](char x) { return x != 0; });
  }
};

/// No position: the sorted mode never decreases in what was read.
constexpr nnz_t kSorted = std::numeric_limits<nnz_t>::max();

/// The store's sorted_mode m (>= 0) promises non-decreasing mode-m indices over the whole
/// stored order: this rank's range's first and last index, and the first position where the
/// index falls (kSorted: none).
struct SortedRange {
  nnz_t seen = 0, start = 0;  ///< nonzeros seen; the range's first position
  index_t first = 0, last = 0;
  nnz_t falls_at = kSorted;
  index_t before = 0, after = 0;  ///< the indices at falls_at - 1 and falls_at
};

/// Distinct coordinates of the store, counted by a UniqueWriter that is never written: a
/// second read of every rank's range (the same ranges as the first), added in pieces; a read
/// error on any rank stops every rank before the next collective add.
nnz_t count_distinct(const std::string& path, const comm::Communicator& c, const H5ReadOptions& opt,
                     const H5VerifyOptions& v, const H5TensorInfo& info, nnz_t first, nnz_t count) {
  UniqueWriterOptions uo;
  uo.memory_limit = v.memory_limit;
  uo.progress = opt.progress;
  uo.scratch_dir = v.scratch_dir;
  const int N = info.order;
  // Pieces of at most 4 Mi nonzeros (as convert's --piece): the buffers come on top of the
  // writer's memory limit.
  const nnz_t piece = std::min<nnz_t>(opt.piece > 0 ? opt.piece : kDefaultPiece, nnz_t(4) << 20);
  std::vector<std::vector<index_t>> idx(static_cast<std::size_t>(N));
  std::vector<double> vals;
  std::unique_ptr<H5TensorReader> rd;
  // What may fail on one rank (the folder, the buffers, the open) is agreed before the
  // collective adds.
  comm::run_collectively(c, [&] {
    if (uo.scratch_dir.empty()) {
      // The store's folder where scratch files can be made there (write and search), else
      // the system's temporary folder.
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      const std::string folder = parent.empty() ? std::string(".") : parent.string();
      uo.scratch_dir = ::access(folder.c_str(), W_OK | X_OK) == 0
                           ? folder
                           : std::filesystem::temp_directory_path().string();
    }
    const auto room = static_cast<std::size_t>(std::min(count, piece));
    try {
      for (auto& w : idx) w.resize(room);
      vals.resize(room);
    } catch (const std::bad_alloc&) {
      throw InputError(path + ": out of memory for " + std::to_string(room) + " nonzeros on rank " +
                       std::to_string(c.rank()) + " (counting its distinct coordinates)");
    }
    rd = std::make_unique<H5TensorReader>(path, false, 0);
  });
  // The writer names its scratch files after this path; nothing is written there.
  UniqueWriter uw(path + ".verify", N, c, uo);
  uw.expect(info.nnz);
  const nnz_t pieces =
      c.allreduce_value<nnz_t>(count == 0 ? 0 : (count - 1) / piece + 1, comm::ReduceOp::max);
  index_t* p[kMaxOrder];
  for (int m = 0; m < N; ++m) p[m] = idx[static_cast<std::size_t>(m)].data();
  int threads = opt.threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  for (nnz_t k = 0; k < pieces; ++k) {
    const nnz_t done = k * piece;
    const nnz_t n = done < count ? std::min(piece, count - done) : 0;
    std::uint64_t key = kNoError;
    std::string msg;
    catch_read_error(
        [&] {
          if (n > 0) rd->read_direct(first + done, n, p, vals.data(), threads);
        },
        &key, &msg);
    raise_earliest(c, key, msg);  // collective: every rank passes here each piece
    uw.add(n, p, vals.data(), static_cast<std::uint64_t>(first + done));
  }
  return uw.count_unique();
}

/// verify_h5's check of has_duplicates = 0 after the first pass: "order" where every range
/// is strictly increasing in one candidate order (a block alone, since a coordinate lies in
/// one block; equal shares also across the ranks' ends), else "sort" after counting the
/// distinct coordinates; a repeat is one agreed error line. "" for fewer than 2 nonzeros.
std::string unique_check(const std::string& path, const H5TensorInfo& info, bool by_block,
                         const RangeOrder& range, const comm::Communicator& c,
                         const H5ReadOptions& opt, const H5VerifyOptions& v) {
  if (info.nnz < 2) return "";
  const int N = info.order;
  const std::vector<StoreOrder> orders = candidate_orders(info);
  const int P = c.size();
  // Per candidate: increasing on every rank (a rank without data counts as increasing).
  std::vector<int> ok(orders.size());
  for (std::size_t o = 0; o < orders.size(); ++o)
    ok[o] =
        c.allreduce_value<int>(range.seen == 0 || range.increasing[o] ? 1 : 0, comm::ReduceOp::min);
  if (!by_block && P > 1 && std::any_of(ok.begin(), ok.end(), [](int x) { return x != 0; })) {
    const auto W = static_cast<std::size_t>(2 * N + 1);
    std::vector<index_t> mine(W, 0), all(W * static_cast<std::size_t>(P));
    mine[0] = range.seen > 0 ? 1 : 0;
    for (int m = 0; m < N && range.seen > 0; ++m) {
      mine[1 + static_cast<std::size_t>(m)] = range.first[static_cast<std::size_t>(m)];
      mine[1 + static_cast<std::size_t>(N + m)] = range.last[static_cast<std::size_t>(m)];
    }
    c.allgather(mine.data(), all.data(), W);
    for (std::size_t o = 0; o < orders.size(); ++o) {
      const index_t* prev = nullptr;
      for (int q = 0; q < P && ok[o]; ++q) {
        const index_t* e = all.data() + W * static_cast<std::size_t>(q);
        if (e[0] == 0) continue;
        if (prev != nullptr && !orders[o].less([prev, N](int m) { return prev[1 + N + m]; },
                                               [e](int m) { return e[1 + m]; }))
          ok[o] = 0;
        prev = e;
      }
    }
  }
  if (std::any_of(ok.begin(), ok.end(), [](int x) { return x != 0; })) return "order";
  const auto [first, count] = share_of(info, by_block, c.rank(), P);
  const nnz_t distinct = count_distinct(path, c, opt, v, info, first, count);
  // Every rank has the same count: one agreed error line, no abort.
  comm::run_collectively(c, [&] {
    TESSERA_INPUT_CHECK(distinct == info.nnz,
                        path << ": has_duplicates = 0, but " << info.nnz - distinct << " of its "
                             << info.nnz
                             << " nonzeros repeat a coordinate (a run trusts the attribute and "
                                "would count each copy, so ||X|| and the fit would be wrong): set "
                                "the attribute to 1 (h5py: f.attrs['has_duplicates'] = 1), then "
                                "tessera convert "
                             << path << " OUT.h5 writes a copy with the repeats summed");
  });
  return "sort";
}

/// The store's sorted_mode over every rank's range (the ranges follow each other in the
/// stored order, rank by rank, shares or blocks alike): the earliest fall, inside a range
/// or between two, is one agreed error line.
void check_sorted_mode(const std::string& path, const H5TensorInfo& info, const SortedRange& s,
                       const comm::Communicator& c) {
  const int P = c.size();
  // Per rank: had data, where its range starts, its first and last index, where it falls
  // and the two indices there.
  const std::vector<std::int64_t> mine = {s.seen > 0 ? 1 : 0, s.start,  s.first, s.last,
                                          s.falls_at,         s.before, s.after};
  const std::size_t W = mine.size();
  std::vector<std::int64_t> all(W * static_cast<std::size_t>(P));
  c.allgather(mine.data(), all.data(), W);
  std::int64_t at = kSorted, before = 0, after = 0, last = 0;
  bool have = false;
  for (int q = 0; q < P && at == kSorted; ++q) {
    const std::int64_t* e = all.data() + W * static_cast<std::size_t>(q);
    if (e[0] == 0) continue;
    if (have && e[2] < last) {  // between the previous range's end and this one's start
      at = e[1];
      before = last;
      after = e[2];
    } else if (e[4] != kSorted) {
      at = e[4];
      before = e[5];
      after = e[6];
    }
    last = e[3];
    have = true;
  }
  comm::run_collectively(c, [&] {
    TESSERA_INPUT_CHECK(
        at == kSorted,
        path << ": sorted_mode = " << info.sorted_mode << ", but the mode-" << info.sorted_mode
             << " index falls from " << before << " to " << after << " at nonzero " << at
             << " (0-based), where the attribute promises a non-decreasing order (memory "
                "tier 3 on a GPU relies on it and refuses a chunk out of that order): remove "
                "the attribute (h5py: del f.attrs['sorted_mode'])");
  });
}

}  // namespace

H5VerifyResult verify_h5(const std::string& path, const comm::Communicator& c,
                         const H5ReadOptions& opt, const H5VerifyOptions& v) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "verify_h5 needs a host communicator");
  H5VerifyResult out;
  H5ReadResult res;
  // The first pass sees the pieces as they are read; read_share has set res.info (the
  // header) before the first.
  std::vector<StoreOrder> orders;
  int N = 0;
  RangeOrder range;
  SortedRange sorted;
  const PieceHook hook = [&](nnz_t at0, nnz_t n, const index_t* const* p) {
    const int sm = res.info.sorted_mode;
    if (sm >= 0 && n > 0 && sorted.falls_at == kSorted) {
      const index_t* q = p[sm];
      if (sorted.seen > 0 && q[0] < sorted.last) {
        sorted.falls_at = at0;
        sorted.before = sorted.last;
        sorted.after = q[0];
      } else {
        nnz_t fall = kSorted;
#pragma omp parallel for schedule(static) reduction(min : fall) if (n > 65536)
        for (std::int64_t k = 1; k < static_cast<std::int64_t>(n); ++k)
          if (q[k] < q[k - 1]) fall = std::min(fall, static_cast<nnz_t>(k));
        if (fall != kSorted) {
          sorted.falls_at = at0 + fall;
          sorted.before = q[fall - 1];
          sorted.after = q[fall];
        }
      }
      if (sorted.seen == 0) {
        sorted.start = at0;
        sorted.first = q[0];
      }
      sorted.last = q[n - 1];
      sorted.seen += n;
    }
    if (res.info.has_duplicates != 0 || n == 0) return;
    if (orders.empty()) {
      N = res.info.order;
      orders = candidate_orders(res.info);
      range.increasing.assign(orders.size(), 1);
    }
    if (!range.any()) return;
    auto at = [&](nnz_t k) { return [p, k](int m) { return p[m][k]; }; };
    if (range.seen == 0) {
      range.first.assign(static_cast<std::size_t>(N), 0);
      for (int m = 0; m < N; ++m) range.first[static_cast<std::size_t>(m)] = p[m][0];
    }
    const std::vector<index_t>& last = range.last;
    for (std::size_t o = 0; o < orders.size(); ++o) {
      if (!range.increasing[o]) continue;
      const StoreOrder& order = orders[o];
      bool ok = range.seen == 0 ||
                order.less([&last](int m) { return last[static_cast<std::size_t>(m)]; }, at(0));
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n > 65536)
      for (std::int64_t k = 1; k < static_cast<std::int64_t>(n); ++k)
        ok = ok && order.less(at(static_cast<nnz_t>(k - 1)), at(static_cast<nnz_t>(k)));
      range.increasing[o] = ok ? 1 : 0;
    }
    range.last.assign(static_cast<std::size_t>(N), 0);
    for (int m = 0; m < N; ++m) range.last[static_cast<std::size_t>(m)] = p[m][n - 1];
    range.seen += n;
  };
  read_share(path, c, opt, false, &res, &hook);
  const H5TensorInfo& info = res.info;
  if (info.has_duplicates == 0) {
    out.unique_check = unique_check(path, info, res.by_block, range, c, opt, v);
    if (out.unique_check.empty()) out.unique_check = "order";  // fewer than 2 nonzeros
  }
  // After the repeats (which change a result; a false sorted_mode does not).
  if (info.sorted_mode >= 0) check_sorted_mode(path, info, sorted, c);
  return out;
}

}  // namespace tessera::io
