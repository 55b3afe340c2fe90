// Internals of the tensor store (see h5store_internal.hpp): thread helpers, positioned
// errors, and the store's datasets opened and checked through the HDF5 layer (src/base/io/h5/).
#include "io/h5store_internal.hpp"

#include <cmath>
#include <exception>
#include <sstream>
#include <system_error>
#include <thread>

namespace tessera::io::detail {

void run_threads(int n, const std::function<void(int)>& body) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(n - 1));
  for (int t = 1; t < n; ++t) {
    try {
      pool.emplace_back(body, t);
    } catch (const std::system_error&) {
      break;  // the threads started share the work
    }
  }
  body(0);
  for (auto& th : pool) th.join();
}

int thread_count(int threads) {
  return threads > 0 ? threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string base_name(const std::string& path) {
  const auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

void check_float_range(const std::string& path, nnz_t first, nnz_t n, const double* v) {
  for (nnz_t k = 0; k < n; ++k) {
    const auto f = static_cast<float>(v[k]);
    if (std::isfinite(f) && (f != 0.0f || v[k] == 0.0)) continue;
    std::ostringstream os;
    os << h5::quoted(path) << ": /values[" << first + k << "] = " << v[k]
       << ": expected a value representable in single precision (--precision float: magnitudes "
       << static_cast<double>(std::numeric_limits<float>::denorm_min()) << " to "
       << static_cast<double>(std::numeric_limits<float>::max())
       << ", or 0); run with --precision double";
    throw PositionedError(first + k, os.str());
  }
}

void raise_earliest(const comm::Communicator& c, std::uint64_t key, const std::string& msg) {
  const std::uint64_t kmin = c.allreduce_value(key, comm::ReduceOp::min);
  if (kmin == kNoError) return;
  const std::int32_t cand = key == kmin ? c.rank() : c.size();
  const std::int32_t chosen = c.allreduce_value(cand, comm::ReduceOp::min);
  std::exception_ptr mine;
  if (c.rank() == chosen) mine = std::make_exception_ptr(InputError(msg));
  comm::raise_collectively(c, mine);
}

void require_attr(hid_t loc, const char* name, const std::string& path, const char* meaning) {
  if (!h5::has_attr(loc, name, path))
    throw InputError(layout_error(path, std::string("attribute '") + name + "' (" + meaning +
                                            ") is missing: not a complete " + kTensorStoreFormat +
                                            " store"));
}

Dataset open_dataset(hid_t file, const std::string& name, Kind kind, const std::string& path,
                     long long expect_len, const char* len_meaning, std::size_t chunk_cache) {
  Dataset d;
  d.name = name;
  const char* expected = kind == Kind::coords   ? "uint32 coordinates"
                         : kind == Kind::values ? "float64 or float32 values"
                                                : "unsigned integers";
  // Larger chunk cache than the default 1 MiB, so compressed chunks are not re-inflated.
  const h5::Handle dapl = h5::plist(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(dapl, 521, chunk_cache, 1.0);
  d.id = h5::open_dataset(file, name, path, expected, dapl);
  const h5::Handle t = h5::datatype(H5Dget_type(d.id));
  const H5T_class_t cls = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  bool ok = false;
  switch (kind) {
    case Kind::coords:
      ok = cls == H5T_INTEGER && size == 4 && H5Tget_sign(t) == H5T_SGN_NONE;
      break;
    case Kind::values:
      ok = cls == H5T_FLOAT && (size == 8 || size == 4);
      d.is_float32 = size == 4;
      break;
    case Kind::index:
      ok = cls == H5T_INTEGER && size <= 8;
      break;
  }
  if (!ok)
    throw InputError(layout_error(
        path, "dataset '" + name + "' has type " + h5::type_text(t) + ", expected " + expected));
  const h5::Handle sp = h5::space(H5Dget_space(d.id));
  const int nd = H5Sget_simple_extent_ndims(sp);
  if (nd != 1)
    throw InputError(layout_error(path, "dataset '" + name + "' has " + std::to_string(nd) +
                                            " dimensions, expected 1 (a flat array of " + expected +
                                            ")"));
  H5Sget_simple_extent_dims(sp, &d.length, nullptr);
  if (expect_len >= 0 && d.length != static_cast<hsize_t>(expect_len))
    throw InputError(layout_error(path, "dataset '" + name + "' has " + std::to_string(d.length) +
                                            " elements, but " + len_meaning + " is " +
                                            std::to_string(expect_len)));
  const h5::Handle dcpl = h5::plist(H5Dget_create_plist(d.id));
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t c = 0;
    H5Pget_chunk(dcpl, 1, &c);
    d.chunk = c;
    const int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0, cd[8] = {};
      std::size_t ncd = 8;
      char fname[64];
      const H5Z_filter_t f = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd,
                                            sizeof(fname), fname, nullptr);
      if (f == H5Z_FILTER_DEFLATE) d.deflate = ncd > 0 ? static_cast<int>(cd[0]) : 6;
    }
  }
  h5::check_storage_sizes(d.id, dcpl, d.name, d.length, d.chunk, size, path);
  d.check = std::make_shared<h5::ChunkCheck>(d.id);  // a no-op where nothing is compressed
  return d;
}

std::vector<std::uint64_t> read_index_dataset(hid_t file, const std::string& name,
                                              const std::string& path, long long expect_len,
                                              const char* len_meaning) {
  const Dataset d = open_dataset(file, name, Kind::index, path, expect_len, len_meaning);
  std::vector<std::uint64_t> v(static_cast<std::size_t>(d.length));
  if (!v.empty()) h5::read_all(d.id, H5T_NATIVE_UINT64, v.data(), name, path);
  return v;
}

void h5_read_range(const Dataset& d, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                   const std::string& path) {
  std::string why;
  if (h5::read_range(d.id, first, count, mem_type, out, d.check.get(), &why) < 0)
    throw PositionedError(static_cast<nnz_t>(first),
                          h5::quoted(path) + ": cannot read " + d.name + "[" +
                              std::to_string(first) + ".." + std::to_string(first + count) + ")" +
                              (why.empty() ? h5::detail() + ": the file is truncated or corrupted"
                                           : ": the dataset " + why));
}

std::string dataset_name(int d, int order) {
  return d < order ? "/coords/mode" + std::to_string(d) : std::string("/values");
}

}  // namespace tessera::io::detail
