#include "io/model_io.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "io/output.hpp"
#include "util/error.hpp"

namespace tessera::io {
namespace {

constexpr const char* kFormat = "tessera-kruskal";
constexpr int kVersion = 1;

/// Closes an HDF5 handle on scope exit.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Handle() {
    if (id >= 0 && close) close(id);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  operator hid_t() const { return id; }
};

#define TESSERA_H5_CHECK(expr, what)                 \
  do {                                               \
    if ((expr) < 0) TESSERA_THROW("HDF5: " << what); \
  } while (0)

void write_attr_int(hid_t loc, const char* name, long long v) {
  H5Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle a(H5Acreate2(loc, name, H5T_NATIVE_LLONG, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TESSERA_H5_CHECK(a.id, "create attribute " << name);
  TESSERA_H5_CHECK(H5Awrite(a, H5T_NATIVE_LLONG, &v), "write attribute " << name);
}
void write_attr_double(hid_t loc, const char* name, double v) {
  H5Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle a(H5Acreate2(loc, name, H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TESSERA_H5_CHECK(a.id, "create attribute " << name);
  TESSERA_H5_CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v), "write attribute " << name);
}
void write_attr_string(hid_t loc, const char* name, const std::string& s) {
  H5Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, s.empty() ? 1 : s.size());
  H5Tset_strpad(t, H5T_STR_NULLTERM);
  H5Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle a(H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TESSERA_H5_CHECK(a.id, "create attribute " << name);
  std::string buf = s.empty() ? std::string(1, '\0') : s;
  TESSERA_H5_CHECK(H5Awrite(a, t, buf.data()), "write attribute " << name);
}
void write_attr_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v) {
  hsize_t n = v.size();
  H5Handle sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle a(H5Acreate2(loc, name, H5T_NATIVE_UINT64, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TESSERA_H5_CHECK(a.id, "create attribute " << name);
  TESSERA_H5_CHECK(H5Awrite(a, H5T_NATIVE_UINT64, v.data()), "write attribute " << name);
}
void write_dataset(hid_t loc, const char* name, const double* data, std::vector<hsize_t> shape) {
  H5Handle sp(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), H5Sclose);
  H5Handle d(H5Dcreate2(loc, name, H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             H5Dclose);
  TESSERA_H5_CHECK(d.id, "create dataset " << name);
  bool empty = false;
  for (hsize_t s : shape) empty = empty || s == 0;
  if (!empty) {
    TESSERA_H5_CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                     "write dataset " << name);
  }
}

std::string path_for_error(const std::string& path) {
  return "'" + path + "'";
}

long long read_attr_int(hid_t loc, const char* name, const std::string& path) {
  TESSERA_INPUT_CHECK(H5Aexists(loc, name) > 0, path_for_error(path)
                                                    << " is not a Tessera model: attribute '"
                                                    << name << "' is missing");
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  long long v = 0;
  TESSERA_H5_CHECK(H5Aread(a, H5T_NATIVE_LLONG, &v), "read attribute " << name);
  return v;
}
std::string read_attr_string(hid_t loc, const char* name, const std::string& path) {
  TESSERA_INPUT_CHECK(H5Aexists(loc, name) > 0, path_for_error(path)
                                                    << " is not a Tessera model: attribute '"
                                                    << name << "' is missing");
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  H5Handle t(H5Aget_type(a), H5Tclose);
  TESSERA_INPUT_CHECK(H5Tget_class(t) == H5T_STRING,
                      path_for_error(path) << ": attribute '" << name << "' is not a string");
  std::size_t n = H5Tget_size(t);
  std::string s(n, '\0');
  H5Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt, n);
  TESSERA_H5_CHECK(H5Aread(a, mt, s.data()), "read attribute " << name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}
std::vector<double> read_dataset(hid_t loc, const std::string& name, const std::string& path,
                                 std::vector<hsize_t> expect) {
  TESSERA_INPUT_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0,
                      path_for_error(path) << ": dataset '" << name << "' is missing");
  H5Handle d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  H5Handle sp(H5Dget_space(d), H5Sclose);
  int nd = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> shape(static_cast<std::size_t>(std::max(nd, 0)));
  H5Sget_simple_extent_dims(sp, shape.data(), nullptr);
  TESSERA_INPUT_CHECK(shape == expect, path_for_error(path)
                                           << ": dataset '" << name
                                           << "' has a shape that disagrees with the attributes");
  std::size_t total = 1;
  for (hsize_t s : shape) total *= s;
  std::vector<double> v(total);
  if (total > 0) {
    TESSERA_H5_CHECK(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                     "read dataset " << name);
  }
  return v;
}

}  // namespace

void write_kruskal_h5(const std::string& path, const KruskalModel& m, const ModelRecord& rec) {
  AtomicOutput out(path);  // io/output.hpp: a temporary renamed by commit(), removed on error
  TESSERA_INPUT_CHECK(!out.special(), "cannot write model file '"
                                          << path
                                          << "': HDF5 files need a regular (seekable) file");
  const std::string& tmp = out.write_path();
  {
    H5Handle f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    TESSERA_INPUT_CHECK(f.id >= 0, "cannot create model file '" << tmp << "'");
    write_attr_string(f, "format", kFormat);
    write_attr_int(f, "format_version", kVersion);
    write_attr_int(f, "order", m.order());
    write_attr_int(f, "rank", m.rank);
    write_attr_u64s(f, "dims", m.dims);
    write_attr_double(f, "fit", rec.fit);
    write_attr_int(f, "iterations", rec.iterations);
    write_attr_string(f, "options", rec.options_json);
    write_dataset(f, "lambda", m.lambda.data(), {static_cast<hsize_t>(m.rank)});
    write_dataset(f, "fit_history", rec.fit_history.data(),
                  {static_cast<hsize_t>(rec.fit_history.size())});
    H5Handle g(H5Gcreate2(f, "factors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    TESSERA_H5_CHECK(g.id, "create group factors");
    for (int n = 0; n < m.order(); ++n) {
      const auto& A = m.factors[static_cast<std::size_t>(n)];
      std::string name = "mode_" + std::to_string(n);
      write_dataset(g, name.c_str(), A.data.data(),
                    {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)});
    }
    TESSERA_H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush " << tmp);
  }
  out.commit();
}

KruskalModel read_kruskal_h5(const std::string& path, ModelRecord* rec) {
  H5E_auto2_t old_func = nullptr;
  void* old_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // our messages, not HDF5's stack dumps
  struct Restore {
    H5E_auto2_t f;
    void* d;
    ~Restore() { H5Eset_auto2(H5E_DEFAULT, f, d); }
  } restore{old_func, old_data};

  {  // stat() only: HDF5 would open a FIFO with no writer and wait forever.
    std::error_code ec;
    TESSERA_INPUT_CHECK(std::filesystem::is_regular_file(path, ec),
                        "'" << path << "' is not a regular file: expected an HDF5 model file");
  }
  TESSERA_INPUT_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'" << path << "' is not an HDF5 file");
  H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  TESSERA_INPUT_CHECK(f.id >= 0, "cannot open '" << path << "'");
  std::string fmt = read_attr_string(f, "format", path);
  TESSERA_INPUT_CHECK(fmt == kFormat,
                      "'" << path << "' has format '" << fmt << "', expected '" << kFormat << "'");
  KruskalModel m;
  int order = static_cast<int>(read_attr_int(f, "order", path));
  m.rank = static_cast<int>(read_attr_int(f, "rank", path));
  TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder && m.rank >= 1,
                      "'" << path << "': bad order or rank attribute");
  {
    H5Handle a(H5Aopen(f, "dims", H5P_DEFAULT), H5Aclose);
    TESSERA_INPUT_CHECK(a.id >= 0, "'" << path << "': attribute 'dims' is missing");
    H5Handle sp(H5Aget_space(a), H5Sclose);
    TESSERA_INPUT_CHECK(H5Sget_simple_extent_npoints(sp) == order,
                        "'" << path << "': 'dims' has the wrong length");
    m.dims.resize(static_cast<std::size_t>(order));
    TESSERA_H5_CHECK(H5Aread(a, H5T_NATIVE_UINT64, m.dims.data()), "read dims");
  }
  m.lambda = read_dataset(f, "lambda", path, {static_cast<hsize_t>(m.rank)});
  for (int n = 0; n < order; ++n) {
    Matrix<double> A;
    A.rows = static_cast<std::int64_t>(m.dims[static_cast<std::size_t>(n)]);
    A.cols = m.rank;
    A.data = read_dataset(f, "factors/mode_" + std::to_string(n), path,
                          {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)});
    m.factors.push_back(std::move(A));
  }
  if (rec) {
    rec->fit = 0;
    rec->iterations = static_cast<int>(read_attr_int(f, "iterations", path));
    rec->options_json = read_attr_string(f, "options", path);
    rec->fit_history =
        read_dataset(f, "fit_history", path, {static_cast<hsize_t>(rec->iterations)});
    H5Handle a(H5Aopen(f, "fit", H5P_DEFAULT), H5Aclose);
    if (a.id >= 0) H5Aread(a, H5T_NATIVE_DOUBLE, &rec->fit);
  }
  return m;
}

// ---- Tucker models -------------------------------------------------------------------

namespace {

constexpr const char* kTuckerFormat = "tessera-tucker";
constexpr int kTuckerVersion = 1;

std::vector<std::uint64_t> read_attr_u64s(hid_t loc, const char* name, const std::string& path,
                                          int expect_len) {
  TESSERA_INPUT_CHECK(H5Aexists(loc, name) > 0,
                      "'" << path << "': attribute '" << name << "' is missing");
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  H5Handle sp(H5Aget_space(a), H5Sclose);
  TESSERA_INPUT_CHECK(H5Sget_simple_extent_npoints(sp) == expect_len,
                      "'" << path << "': '" << name << "' has the wrong length");
  std::vector<std::uint64_t> v(static_cast<std::size_t>(expect_len));
  TESSERA_H5_CHECK(H5Aread(a, H5T_NATIVE_UINT64, v.data()), "read " << name);
  return v;
}

}  // namespace

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
  AtomicOutput out(path);  // io/output.hpp: a temporary renamed by commit(), removed on error
  TESSERA_INPUT_CHECK(!out.special(), "cannot write model file '"
                                          << path
                                          << "': HDF5 files need a regular (seekable) file");
  const std::string& tmp = out.write_path();
  {
    H5Handle f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    TESSERA_INPUT_CHECK(f.id >= 0, "cannot create model file '" << tmp << "'");
    write_attr_string(f, "format", kTuckerFormat);
    write_attr_int(f, "format_version", kTuckerVersion);
    write_attr_int(f, "order", N);
    write_attr_u64s(f, "ranks", std::vector<std::uint64_t>(m.ranks.begin(), m.ranks.end()));
    write_attr_u64s(f, "dims", m.dims);
    write_attr_double(f, "fit", rec.fit);
    write_attr_int(f, "iterations", rec.iterations);
    write_attr_string(f, "options", rec.options_json);
    write_dataset(f, "core", m.core.data(), core_shape);
    write_dataset(f, "fit_history", rec.fit_history.data(),
                  {static_cast<hsize_t>(rec.fit_history.size())});
    H5Handle g(H5Gcreate2(f, "factors", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    TESSERA_H5_CHECK(g.id, "create group factors");
    for (int n = 0; n < N; ++n) {
      const auto& A = m.factors[static_cast<std::size_t>(n)];
      std::string name = "mode_" + std::to_string(n);
      write_dataset(g, name.c_str(), A.data.data(),
                    {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)});
    }
    TESSERA_H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL), "flush " << tmp);
  }
  out.commit();
}

TuckerModel read_tucker_h5(const std::string& path, ModelRecord* rec) {
  H5E_auto2_t old_func = nullptr;
  void* old_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // our messages, not HDF5's stack dumps
  struct Restore {
    H5E_auto2_t f;
    void* d;
    ~Restore() { H5Eset_auto2(H5E_DEFAULT, f, d); }
  } restore{old_func, old_data};

  {  // stat() only: HDF5 would open a FIFO with no writer and wait forever.
    std::error_code ec;
    TESSERA_INPUT_CHECK(std::filesystem::is_regular_file(path, ec),
                        "'" << path << "' is not a regular file: expected an HDF5 model file");
  }
  TESSERA_INPUT_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'" << path << "' is not an HDF5 file");
  H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  TESSERA_INPUT_CHECK(f.id >= 0, "cannot open '" << path << "'");
  const std::string fmt = read_attr_string(f, "format", path);
  TESSERA_INPUT_CHECK(fmt == kTuckerFormat, "'" << path << "' has format '" << fmt
                                                << "', expected '" << kTuckerFormat << "'");
  const int order = static_cast<int>(read_attr_int(f, "order", path));
  TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder, "'" << path << "': bad order attribute");
  TuckerModel m;
  m.dims = read_attr_u64s(f, "dims", path, order);
  std::vector<hsize_t> core_shape;
  for (std::uint64_t r : read_attr_u64s(f, "ranks", path, order)) {
    TESSERA_INPUT_CHECK(r >= 1 && r <= (1u << 30), "'" << path << "': bad ranks attribute");
    m.ranks.push_back(static_cast<int>(r));
    core_shape.push_back(static_cast<hsize_t>(r));
  }
  m.core = read_dataset(f, "core", path, core_shape);
  for (int n = 0; n < order; ++n) {
    Matrix<double> A;
    A.rows = static_cast<std::int64_t>(m.dims[static_cast<std::size_t>(n)]);
    A.cols = m.ranks[static_cast<std::size_t>(n)];
    A.data = read_dataset(f, "factors/mode_" + std::to_string(n), path,
                          {static_cast<hsize_t>(A.rows), static_cast<hsize_t>(A.cols)});
    m.factors.push_back(std::move(A));
  }
  if (rec) {
    rec->fit = 0;
    rec->iterations = static_cast<int>(read_attr_int(f, "iterations", path));
    rec->options_json = read_attr_string(f, "options", path);
    rec->fit_history =
        read_dataset(f, "fit_history", path, {static_cast<hsize_t>(rec->iterations)});
    H5Handle a(H5Aopen(f, "fit", H5P_DEFAULT), H5Aclose);
    if (a.id >= 0) H5Aread(a, H5T_NATIVE_DOUBLE, &rec->fit);
  }
  return m;
}

ModelFileKind probe_model_file(const std::string& path) {
  ModelFileKind k;
  try {
    std::error_code ec;  // stat() only: HDF5 would wait on a FIFO with no writer
    if (!std::filesystem::is_regular_file(path, ec)) return k;
    struct Quiet {  // no HDF5 error stack on stderr for a file that is not one
      H5E_auto2_t func = nullptr;
      void* data = nullptr;
      Quiet() {
        H5Eget_auto2(H5E_DEFAULT, &func, &data);
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      }
      ~Quiet() { H5Eset_auto2(H5E_DEFAULT, func, data); }
    } quiet;
    if (H5Fis_hdf5(path.c_str()) > 0) {
      H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
      if (f.id >= 0 && H5Aexists(f, "format") > 0) {
        const std::string fmt = read_attr_string(f, "format", path);
        if (fmt == kFormat || fmt == kTuckerFormat) k.format = fmt;
        k.checkpoint = !k.format.empty() && H5Aexists(f, "checkpoint") > 0;
      }
    }
  } catch (...) {
    k = ModelFileKind{};
  }
  return k;
}

}  // namespace tessera::io
