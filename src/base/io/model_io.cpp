// HDF5 model files (see model_io.hpp), read and written through the HDF5 layer (src/base/io/h5/).
#include "io/model_io.hpp"

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "io/h5/attribute.hpp"
#include "io/h5/dataset.hpp"
#include "io/h5/file.hpp"
#include "io/output.hpp"
#include "util/error.hpp"

namespace tessera::io {
namespace {

constexpr const char* kFormat = "tessera-kruskal";
constexpr int kVersion = 1;
constexpr const char* kTuckerFormat = "tessera-tucker";
constexpr int kTuckerVersion = 1;

/// Writes a model file: `body(file, tmp)` fills a new HDF5 file at the temporary name, which
/// is flushed, closed and renamed to `path` (io::AtomicOutput: removed on any error).
template <typename Body>
void write_model_file(const std::string& path, Body&& body) {
  AtomicOutput out(path);  // io/output.hpp: a temporary renamed by commit(), removed on error
  TESSERA_INPUT_CHECK(!out.special(), "cannot write model file '"
                                          << path
                                          << "': HDF5 files need a regular (seekable) file");
  const std::string& tmp = out.write_path();
  {
    h5::Handle f = h5::create_file(tmp, H5F_ACC_TRUNC);
    body(f, tmp);
    h5::close_file(f, tmp);
  }
  out.commit();
}

/// The attributes of the run that made the model (after the model's own attributes).
void write_record_attrs(hid_t f, const ModelRecord& rec, const std::string& path) {
  h5::write_f64(f, "fit", rec.fit, path);
  h5::write_i64(f, "iterations", rec.iterations, path);
  h5::write_string(f, "options", rec.options_json, path);
}

constexpr const char* kCrcAttr = "crc32";

/// A float64 dataset of `shape` (row-major `data`) with its crc32 attribute.
void write_dataset(hid_t loc, const std::string& name, const double* data,
                   const std::vector<hsize_t>& shape, const std::string& path) {
  const h5::Handle d = h5::create_dataset(loc, name, H5T_IEEE_F64LE, shape, path);
  h5::write_all(d, H5T_NATIVE_DOUBLE, data, name, path);
  std::size_t total = 1;
  for (hsize_t s : shape) total *= static_cast<std::size_t>(s);
  h5::write_u64(d, kCrcAttr, values_crc32(data, total), path);
}

/// /factors/mode_<n>: one dims[n] x cols matrix per mode.
void write_factors(hid_t f, const std::vector<Matrix<double>>& factors, const std::string& path) {
  const h5::Handle g = h5::group(H5Gcreate2(f, "factors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) h5::fail(path, "create group", "factors");
  for (std::size_t n = 0; n < factors.size(); ++n) {
    const auto& A = factors[n];
    write_dataset(g, "mode_" + std::to_string(n), A.data.data(),
                  {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)}, path);
  }
}

void require_attr(hid_t f, const char* name, const std::string& path) {
  TESSERA_INPUT_CHECK(h5::has_attr(f, name, path), "'" << path
                                                       << "' is not a Tessera model: attribute '"
                                                       << name << "' is missing");
}

long long attr_int(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_i64(f, name, path);
}

std::string attr_string(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_string(f, name, path);
}

/// A uint64 attribute of `expect_len` values.
std::vector<std::uint64_t> attr_u64s(hid_t f, const char* name, const std::string& path,
                                     int expect_len) {
  TESSERA_INPUT_CHECK(h5::has_attr(f, name, path),
                      "'" << path << "': attribute '" << name << "' is missing");
  auto v = h5::read_ints<std::uint64_t>(f, name, path);
  TESSERA_INPUT_CHECK(v.size() == static_cast<std::size_t>(expect_len),
                      "'" << path << "': '" << name << "' has the wrong length");
  return v;
}

/// A float64 dataset whose shape must be `expect` (what the attributes say).
std::vector<double> read_dataset(hid_t loc, const std::string& name, const std::string& path,
                                 const std::vector<hsize_t>& expect) {
  const h5::Handle d = h5::open_dataset(loc, name, path, "float64 values");
  TESSERA_INPUT_CHECK(
      h5::shape_of(d, name, path) == expect,
      "'" << path << "': dataset '" << name << "' has a shape that disagrees with the attributes");
  std::size_t total = 1;
  for (hsize_t s : expect) total *= static_cast<std::size_t>(s);
  std::vector<double> v(total);
  h5::read_all(d, H5T_NATIVE_DOUBLE, v.data(), name, path);
  if (h5::has_attr(d, kCrcAttr, path))
    verify_checksum(path, "dataset '/" + name + "'", h5::read_u64(d, kCrcAttr, path),
                    values_crc32(v.data(), v.size()));
  return v;
}

/// /factors/mode_<n> of dims[n] x cols[n].
std::vector<Matrix<double>> read_factors(hid_t f, const std::string& path,
                                         const std::vector<std::uint64_t>& dims,
                                         const std::vector<int>& cols) {
  std::vector<Matrix<double>> factors;
  for (std::size_t n = 0; n < dims.size(); ++n) {
    Matrix<double> A;
    A.rows = static_cast<std::int64_t>(dims[n]);
    A.cols = cols[n];
    A.data = read_dataset(f, "factors/mode_" + std::to_string(n), path,
                          {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)});
    factors.push_back(std::move(A));
  }
  return factors;
}

/// The run's record: iterations, options, fit history and (when present) the final fit.
void read_record(hid_t f, const std::string& path, ModelRecord* rec) {
  if (!rec) return;
  rec->fit = 0;
  rec->iterations = static_cast<int>(attr_int(f, "iterations", path));
  rec->options_json = attr_string(f, "options", path);
  rec->fit_history = read_dataset(f, "fit_history", path, {static_cast<hsize_t>(rec->iterations)});
  if (h5::has_attr(f, "fit", path)) rec->fit = h5::read_f64(f, "fit", path);
}

/// Opens a model file for reading and checks its format.
h5::Handle open_model(const std::string& path, const char* format) {
  {  // stat() only: HDF5 would open a FIFO with no writer and wait forever.
    std::error_code ec;
    TESSERA_INPUT_CHECK(std::filesystem::is_regular_file(path, ec),
                        "'" << path << "' is not a regular file: expected an HDF5 model file");
  }
  TESSERA_INPUT_CHECK(h5::is_hdf5(path), "'" << path << "' is not an HDF5 file");
  h5::Handle f = h5::open_file(path, H5F_ACC_RDONLY);
  const std::string fmt = attr_string(f, "format", path);
  TESSERA_INPUT_CHECK(fmt == format,
                      "'" << path << "' has format '" << fmt << "', expected '" << format << "'");
  return f;
}

}  // namespace

void verify_checksum(const std::string& path, const std::string& what, std::uint64_t stored,
                     std::uint64_t computed) {
  if (stored == computed) return;
  char sums[96];
  std::snprintf(sums, sizeof(sums), "stored %#llx, computed %#llx",
                static_cast<unsigned long long>(stored), static_cast<unsigned long long>(computed));
  throw ChecksumError("'" + path + "': checksum mismatch in " + what + " (" + sums +
                      "): the file was damaged or changed after Tessera wrote it; use an "
                      "intact copy or write it again");
}

std::uint64_t values_crc32(const double* v, std::size_t n) {
  uLong crc = crc32_z(0, nullptr, 0);
  if constexpr (std::endian::native == std::endian::little) {
    crc =
        crc32_z(crc, reinterpret_cast<const Bytef*>(v), static_cast<z_size_t>(n * sizeof(double)));
  } else {
    for (std::size_t k = 0; k < n; ++k) {  // the file's byte order, not the host's
      unsigned char b[sizeof(double)];
      std::memcpy(b, v + k, sizeof(double));
      for (std::size_t i = 0; i < sizeof(double) / 2; ++i)
        std::swap(b[i], b[sizeof(double) - 1 - i]);
      crc = crc32_z(crc, b, sizeof(b));
    }
  }
  return static_cast<std::uint64_t>(crc);
}

void write_kruskal_h5(const std::string& path, const KruskalModel& m, const ModelRecord& rec) {
  write_model_file(path, [&](hid_t f, const std::string& tmp) {
    h5::write_string(f, "format", kFormat, tmp);
    h5::write_i64(f, "format_version", kVersion, tmp);
    h5::write_i64(f, "order", m.order(), tmp);
    h5::write_i64(f, "rank", m.rank, tmp);
    h5::write_u64s(f, "dims", m.dims, tmp);
    write_record_attrs(f, rec, tmp);
    write_dataset(f, "lambda", m.lambda.data(), {static_cast<hsize_t>(m.rank)}, tmp);
    write_dataset(f, "fit_history", rec.fit_history.data(),
                  {static_cast<hsize_t>(rec.fit_history.size())}, tmp);
    write_factors(f, m.factors, tmp);
  });
}

KruskalModel read_kruskal_h5(const std::string& path, ModelRecord* rec) {
  const h5::Handle f = open_model(path, kFormat);
  KruskalModel m;
  const int order = static_cast<int>(attr_int(f, "order", path));
  m.rank = static_cast<int>(attr_int(f, "rank", path));
  TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder && m.rank >= 1,
                      "'" << path << "': bad order or rank attribute");
  m.dims = attr_u64s(f, "dims", path, order);
  m.lambda = read_dataset(f, "lambda", path, {static_cast<hsize_t>(m.rank)});
  m.factors =
      read_factors(f, path, m.dims, std::vector<int>(static_cast<std::size_t>(order), m.rank));
  read_record(f, path, rec);
  return m;
}

void write_tucker_h5(const std::string& path, const TuckerModel& m, const ModelRecord& rec) {
  const int N = m.order();
  TESSERA_EXPECTS(static_cast<int>(m.ranks.size()) == N && static_cast<int>(m.factors.size()) == N,
                  "Tucker model: one rank and one factor per mode");
  std::vector<hsize_t> core_shape;
  std::size_t core_len = 1;
  for (int r : m.ranks) {
    core_shape.push_back(static_cast<hsize_t>(r));
    core_len *= static_cast<std::size_t>(r);
  }
  TESSERA_EXPECTS(m.core.size() == core_len,
                  "Tucker model: core has " << m.core.size() << " values, expected " << core_len);
  write_model_file(path, [&](hid_t f, const std::string& tmp) {
    h5::write_string(f, "format", kTuckerFormat, tmp);
    h5::write_i64(f, "format_version", kTuckerVersion, tmp);
    h5::write_i64(f, "order", N, tmp);
    h5::write_u64s(f, "ranks", std::vector<std::uint64_t>(m.ranks.begin(), m.ranks.end()), tmp);
    h5::write_u64s(f, "dims", m.dims, tmp);
    write_record_attrs(f, rec, tmp);
    write_dataset(f, "core", m.core.data(), core_shape, tmp);
    write_dataset(f, "fit_history", rec.fit_history.data(),
                  {static_cast<hsize_t>(rec.fit_history.size())}, tmp);
    write_factors(f, m.factors, tmp);
  });
}

TuckerModel read_tucker_h5(const std::string& path, ModelRecord* rec) {
  const h5::Handle f = open_model(path, kTuckerFormat);
  const int order = static_cast<int>(attr_int(f, "order", path));
  TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder, "'" << path << "': bad order attribute");
  TuckerModel m;
  m.dims = attr_u64s(f, "dims", path, order);
  std::vector<hsize_t> core_shape;
  for (std::uint64_t r : attr_u64s(f, "ranks", path, order)) {
    TESSERA_INPUT_CHECK(r >= 1 && r <= (1u << 30), "'" << path << "': bad ranks attribute");
    m.ranks.push_back(static_cast<int>(r));
    core_shape.push_back(static_cast<hsize_t>(r));
  }
  m.core = read_dataset(f, "core", path, core_shape);
  m.factors = read_factors(f, path, m.dims, m.ranks);
  read_record(f, path, rec);
  return m;
}

ModelFileKind probe_model_file(const std::string& path) {
  ModelFileKind k;
  try {
    std::error_code ec;  // stat() only: HDF5 would wait on a FIFO with no writer
    if (!std::filesystem::is_regular_file(path, ec) || !h5::is_hdf5(path)) return k;
    const h5::Handle f = h5::try_open_file(path, H5F_ACC_RDONLY);
    if (f.valid() && h5::has_attr(f, "format", path)) {
      const std::string fmt = h5::read_string(f, "format", path);
      if (fmt == kFormat || fmt == kTuckerFormat) k.format = fmt;
      k.checkpoint = !k.format.empty() && h5::has_attr(f, "checkpoint", path);
      if (k.format == kFormat) {  // the header --init file: is checked against (run/validate)
        const int order = static_cast<int>(attr_int(f, "order", path));
        k.rank = static_cast<int>(attr_int(f, "rank", path));
        if (order >= 1 && order <= kMaxOrder) k.dims = attr_u64s(f, "dims", path, order);
      }
    }
  } catch (...) {
    k = ModelFileKind{};
  }
  return k;
}

}  // namespace tessera::io
