// HDF5 plumbing of the tensor store (see h5_plumbing.hpp): error text, attributes,
// datasets and their storage checks, thread helpers.
#include "io/h5_plumbing.hpp"

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

namespace {

herr_t innermost_error(unsigned n, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (n == 0 && e && e->desc) *s = e->desc;
  return 0;
}

}  // namespace

std::string h5_detail() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &s);
  H5Eclear2(H5E_DEFAULT);
  return s.empty() ? std::string() : " (HDF5: " + s + ")";
}

std::string quoted(const std::string& path) {
  return "'" + path + "'";
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
    os << quoted(path) << ": /values[" << first + k << "] = " << v[k]
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

// ---- attributes ----

void write_attr_i64(hid_t loc, const char* name, long long v, const std::string& path) {
  H5Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

void write_attr_u64s(hid_t loc, const char* name, const std::vector<std::uint64_t>& v,
                     const std::string& path, bool scalar) {
  const hsize_t n = v.size();
  H5Id sp(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Id a(H5Acreate2(loc, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_UINT64, v.data()) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

void write_attr_string(hid_t loc, const char* name, const std::string& s, const std::string& path) {
  H5Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, s.empty() ? 1 : s.size());
  H5Tset_strpad(t, H5T_STR_NULLTERM);
  H5Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string buf = s.empty() ? std::string(1, '\0') : s;
  if (!a.valid() || H5Awrite(a, t, buf.data()) < 0)
    throw InputError(quoted(path) + ": cannot write attribute '" + name + "'" + h5_detail());
}

bool has_attr(hid_t loc, const char* name, const std::string& path) {
  const htri_t r = H5Aexists(loc, name);
  if (r < 0)
    throw InputError("cannot read the attributes of " + quoted(path) + h5_detail() +
                     ": the file is corrupted");
  return r > 0;
}

bool has_link(hid_t loc, const std::string& name, const std::string& path) {
  // Component by component: H5Lexists fails (rather than answering no) when a group on the
  // way is missing.
  std::string prefix = name[0] == '/' ? "/" : "";
  std::size_t at = prefix.size();
  while (at < name.size()) {
    const std::size_t slash = std::min(name.find('/', at), name.size());
    prefix += name.substr(at, slash - at);
    const htri_t r = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (r < 0)
      throw InputError("cannot look up '" + prefix + "' in " + quoted(path) + h5_detail() +
                       ": the file is corrupted");
    if (r == 0) return false;
    prefix += '/';
    at = slash + 1;
  }
  return true;
}

std::string layout_error(const std::string& path, const std::string& what) {
  return quoted(path) + ": " + what;
}

std::string read_attr_string(hid_t loc, const char* name, const std::string& path) {
  H5Id a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid())
    throw InputError(
        layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
  H5Id t(H5Aget_type(a), H5Tclose);
  H5Id sp(H5Aget_space(a), H5Sclose);
  if (H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
    throw InputError(layout_error(
        path, std::string("attribute '") + name + "' must be one string (found another type)"));
  std::string s;
  if (H5Tis_variable_str(t) > 0) {
    H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(t));
    char* p = nullptr;
    if (H5Aread(a, mt, &p) < 0)
      throw InputError(
          layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
    if (p) {
      s = p;
      H5free_memory(p);
    }
  } else {
    const std::size_t n = H5Tget_size(t);
    s.assign(n, '\0');
    H5Id mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, n);
    H5Tset_strpad(mt, H5Tget_strpad(t));
    if (H5Aread(a, mt, s.data()) < 0)
      throw InputError(
          layout_error(path, std::string("cannot read attribute '") + name + "'" + h5_detail()));
    const auto z = s.find('\0');
    if (z != std::string::npos) s.resize(z);
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return s;
}

long long read_attr_scalar(hid_t loc, const char* name, const std::string& path) {
  const auto v = read_attr_ints<std::int64_t>(loc, name, path);
  if (v.size() != 1)
    throw InputError(layout_error(path, std::string("attribute '") + name +
                                            "' must be one integer, found " +
                                            std::to_string(v.size()) + " values"));
  return v[0];
}

void require_attr(hid_t loc, const char* name, const std::string& path, const char* meaning) {
  if (!has_attr(loc, name, path))
    throw InputError(layout_error(path, std::string("attribute '") + name + "' (" + meaning +
                                            ") is missing: not a complete " + kTensorStoreFormat +
                                            " store"));
}

std::string type_text(hid_t t) {
  const H5T_class_t cls = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  std::ostringstream os;
  switch (cls) {
    case H5T_INTEGER:
      os << (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") << 8 * size;
      break;
    case H5T_FLOAT:
      os << "float" << 8 * size;
      break;
    case H5T_STRING:
      os << "string";
      break;
    case H5T_COMPOUND:
      os << "compound";
      break;
    default:
      os << "a non-numeric type";
  }
  return os.str();
}

namespace {

/// Unfiltered data has a known size: every allocated chunk holds chunk x `elem` bytes, a
/// contiguous or compact dataset length x `elem`. HDF5 1.10 trusts the sizes its chunk index
/// and layout message record, and a corrupted one makes H5Dread copy past its own buffer
/// (found by tests/fuzz/fuzz_h5store); refuse such a file before reading from it.
void check_storage_sizes(const Dataset& d, hid_t dcpl, std::size_t elem, const std::string& path) {
  if (d.length == 0 || H5Pget_nfilters(dcpl) != 0 || H5Pget_external_count(dcpl) != 0) return;
  const auto corrupt = [&](const std::string& what) {
    return InputError(layout_error(path, "dataset '" + d.name + "' " + what +
                                             ": the file is corrupted (its storage sizes "
                                             "disagree with its shape)"));
  };
  const hsize_t storage = H5Dget_storage_size(d.id);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    if (storage != 0 && storage != d.length * elem)
      throw corrupt("stores " + std::to_string(storage) + " bytes for " + std::to_string(d.length) +
                    " elements of " + std::to_string(elem) + " bytes");
    return;
  }
  if (layout != H5D_CHUNKED || d.chunk == 0) return;
  const hsize_t chunk_bytes = d.chunk * elem;
  const hsize_t nchunks = (d.length + d.chunk - 1) / d.chunk;
#if H5_VERSION_GE(1, 10, 5)
  // Every allocated chunk (unallocated ones read as fill values): by position when all are
  // allocated (the usual case, one index lookup each), else by index.
  H5Id space(H5Dget_space(d.id), H5Sclose);
  hsize_t allocated = 0;
  if (!space.valid() || H5Dget_num_chunks(d.id, space, &allocated) < 0)
    throw corrupt("has an unreadable chunk index" + h5_detail());
  if (allocated > nchunks)
    throw corrupt("has " + std::to_string(allocated) + " chunks for " + std::to_string(nchunks) +
                  " chunk positions");
  for (hsize_t k = 0; k < allocated; ++k) {
    hsize_t offset = k * d.chunk, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    const herr_t rc = allocated == nchunks
                          ? H5Dget_chunk_info_by_coord(d.id, &offset, &mask, &addr, &size)
                          : H5Dget_chunk_info(d.id, space, k, &offset, &mask, &addr, &size);
    if (rc < 0) throw corrupt("has an unreadable chunk index" + h5_detail());
    if (addr != HADDR_UNDEF && size != chunk_bytes)
      throw corrupt("has a chunk of " + std::to_string(size) + " bytes at element " +
                    std::to_string(offset) + ", expected " + std::to_string(chunk_bytes));
  }
#else
  if (storage != 0 && storage % chunk_bytes != 0)
    throw corrupt("stores " + std::to_string(storage) + " bytes, not whole chunks of " +
                  std::to_string(chunk_bytes));
#endif
}

}  // namespace

Dataset open_dataset(hid_t file, const std::string& name, Kind kind, const std::string& path,
                     long long expect_len, const char* len_meaning, std::size_t chunk_cache) {
  Dataset d;
  d.name = name;
  const char* expected = kind == Kind::coords   ? "uint32 coordinates"
                         : kind == Kind::values ? "float64 or float32 values"
                                                : "unsigned integers";
  if (!has_link(file, name, path))
    throw InputError(layout_error(path, "dataset '" + name + "' (" + expected + ") is missing"));
  // Larger chunk cache than the default 1 MiB, so compressed chunks are not re-inflated.
  H5Id dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  H5Pset_chunk_cache(dapl, 521, chunk_cache, 1.0);
  d.id = H5Id(H5Dopen2(file, name.c_str(), dapl), H5Dclose);
  if (!d.id.valid())
    throw InputError(layout_error(
        path, "cannot open '" + name + "' as a dataset (expected " + expected + ")" + h5_detail()));
  H5Id t(H5Dget_type(d.id), H5Tclose);
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
        path, "dataset '" + name + "' has type " + type_text(t) + ", expected " + expected));
  H5Id sp(H5Dget_space(d.id), H5Sclose);
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
  H5Id dcpl(H5Dget_create_plist(d.id), H5Pclose);
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
  check_storage_sizes(d, dcpl, size, path);
  return d;
}

std::vector<std::uint64_t> read_index_dataset(hid_t file, const std::string& name,
                                              const std::string& path, long long expect_len,
                                              const char* len_meaning) {
  Dataset d = open_dataset(file, name, Kind::index, path, expect_len, len_meaning);
  std::vector<std::uint64_t> v(static_cast<std::size_t>(d.length));
  if (!v.empty() && H5Dread(d.id, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw InputError(layout_error(path, "cannot read '" + name + "'" + h5_detail()));
  return v;
}

void h5_read_range(const Dataset& d, hsize_t first, hsize_t count, hid_t mem_type, void* out,
                   const std::string& path) {
  if (count == 0) return;
  H5Id fs(H5Dget_space(d.id), H5Sclose);
  H5Id ms(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0 ||
      H5Dread(d.id, mem_type, ms, fs, H5P_DEFAULT, out) < 0)
    throw PositionedError(static_cast<nnz_t>(first),
                          quoted(path) + ": cannot read " + d.name + "[" + std::to_string(first) +
                              ".." + std::to_string(first + count) + ")" + h5_detail() +
                              ": the file is truncated or corrupted");
}

void h5_write_range(hid_t dset, hsize_t first, hsize_t count, hid_t mem_type, const void* in,
                    const std::string& what) {
  if (count == 0) return;
  H5Id fs(H5Dget_space(dset), H5Sclose);
  H5Id ms(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &first, nullptr, &count, nullptr) < 0 ||
      H5Dwrite(dset, mem_type, ms, fs, H5P_DEFAULT, in) < 0)
    throw InputError("cannot write " + what + h5_detail());
}

std::string dataset_name(int d, int order) {
  return d < order ? "/coords/mode" + std::to_string(d) : std::string("/values");
}

}  // namespace tessera::io::detail
