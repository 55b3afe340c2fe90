#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/h5/attribute.hpp"
#include "io/h5/file.hpp"
#include "io/model_io.hpp"
#include "io/output.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

constexpr int kCheckpointVersion = 1;

/// The attribute, or "'path' is not a complete checkpoint: attribute 'name' is missing".
void require_attr(hid_t f, const char* name, const std::string& path) {
  TESSERA_INPUT_CHECK(
      h5::has_attr(f, name, path),
      "'" << path << "' is not a complete checkpoint: attribute '" << name << "' is missing");
}
long long attr_i64(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_i64(f, name, path);
}
std::uint64_t attr_u64(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_u64(f, name, path);
}
double attr_f64(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_f64(f, name, path);
}
std::string attr_string(hid_t f, const char* name, const std::string& path) {
  require_attr(f, name, path);
  return h5::read_string(f, name, path);
}

/// 64-bit checksum in four independent lanes (fast on large factors).
class Checksum {
 public:
  void add(std::uint64_t x) { lane_[0] = mix64(lane_[0] ^ x); }
  void add(const std::vector<double>& v) {
    add(static_cast<std::uint64_t>(v.size()));
    std::size_t k = 0;
    for (; k + 4 <= v.size(); k += 4)
      for (int l = 0; l < 4; ++l)
        lane_[l] = mix64(lane_[l] ^ bits(v[k + static_cast<std::size_t>(l)]));
    for (; k < v.size(); ++k) lane_[1] = mix64(lane_[1] ^ bits(v[k]));
  }
  void add(const std::string& s) {
    add(static_cast<std::uint64_t>(s.size()));
    for (unsigned char ch : s) lane_[2] = mix64(lane_[2] ^ ch);
  }
  std::uint64_t value() const { return hash_keys(lane_[0], lane_[1], lane_[2], lane_[3]); }

 private:
  static std::uint64_t bits(double d) {
    std::uint64_t u;
    std::memcpy(&u, &d, sizeof(u));
    return u;
  }
  std::uint64_t lane_[4] = {1, 2, 3, 4};
};

/// The checksum covers the state a resumed run uses and the input's identity.
Checksum info_checksum(const CheckpointInfo& info) {
  Checksum c;
  c.add(static_cast<std::uint64_t>(info.iteration));
  c.add(static_cast<std::uint64_t>(info.converged ? 1 : 0));
  c.add(info.fit_history);
  c.add(info.precision);
  for (auto d : info.input.dims) c.add(d);
  c.add(info.input.nnz);
  c.add(std::vector<double>{info.input.norm2});
  c.add(info.input.coord_hash);
  c.add(info.options_json);
  return c;
}
std::uint64_t checksum_of(const KruskalModel& m, const CheckpointInfo& info) {
  Checksum c = info_checksum(info);
  c.add(static_cast<std::uint64_t>(m.rank));
  c.add(m.lambda);
  for (const auto& F : m.factors) c.add(F.data);
  return c.value();
}
std::uint64_t checksum_of(const TuckerModel& m, const CheckpointInfo& info) {
  Checksum c = info_checksum(info);
  for (int r : m.ranks) c.add(static_cast<std::uint64_t>(r));
  c.add(m.core);
  for (const auto& F : m.factors) c.add(F.data);
  return c.value();
}

/// fsync of a file or folder by name; throws with the reason on failure.
void sync_path(const std::string& p, bool folder) {
  const int fd = ::open(p.c_str(), folder ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TESSERA_INPUT_CHECK(fd >= 0, "cannot open '" << p << "' to sync it: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync folders (EINVAL); the rename is still atomic there.
  TESSERA_INPUT_CHECK(rc == 0 || (folder && (err == EINVAL || err == EBADF)),
                      "cannot sync '" << p << "' to disk: " << std::strerror(err));
}

/// The common write path: the model file (written by `write_model` to a temporary name),
/// the checkpoint attributes, fsync, rename, fsync of the folder. On any error the
/// temporary files are removed and the previous checkpoint is left as it was.
template <typename WriteModel>
void write_atomically(const std::string& path, WriteModel&& write_model, const CheckpointInfo& info,
                      std::uint64_t checksum, const CheckpointWriteHooks* hooks) {
  TESSERA_INPUT_CHECK(!path.empty(), "the checkpoint path is empty");
  std::error_code ec;
  TESSERA_INPUT_CHECK(!fs::is_directory(path, ec),
                      "cannot write checkpoint '" << path << "': it is a folder");
  try {
    // io/output.hpp: PATH.tmp-HOST_PID_ckpt, removed on any error (and by the next run
    // when this process is killed).
    AtomicOutput out(path, "ckpt");
    TESSERA_INPUT_CHECK(!out.special(), "HDF5 files need a regular (seekable) file");
    const std::string& tmp = out.write_path();
    ModelRecord rec;
    rec.fit = info.fit_history.empty() ? 0.0 : info.fit_history.back();
    rec.iterations = info.iteration;
    rec.fit_history = info.fit_history;
    rec.options_json = info.options_json;
    write_model(tmp, rec);
    {
      h5::Handle f = h5::open_file(tmp, H5F_ACC_RDWR);
      h5::write_i64(f, "checkpoint", 1, tmp);
      h5::write_i64(f, "checkpoint_version", kCheckpointVersion, tmp);
      h5::write_i64(f, "converged", info.converged ? 1 : 0, tmp);
      h5::write_string(f, "precision", info.precision, tmp);
      h5::write_u64(f, "input_nnz", info.input.nnz, tmp);
      h5::write_f64(f, "input_norm2", info.input.norm2, tmp);
      h5::write_u64(f, "input_coord_hash", info.input.coord_hash, tmp);
      h5::write_u64(f, "checksum", checksum, tmp);
      h5::close_file(f, tmp);  // flushes: a full disk fails here, not at the rename
    }
    sync_path(tmp, false);
    if (hooks && hooks->before_rename) hooks->before_rename(tmp);
    out.commit();  // fsync, rename, fsync of the folder
  } catch (const std::exception& e) {
    TESSERA_INPUT_CHECK(false, "cannot write checkpoint '" << path << "': " << e.what());
  }
}

/// Reads the checkpoint attributes of `path` (open as `f`; a model file already read into
/// `rec`).
void read_info(hid_t f, const std::string& path, const ModelRecord& rec,
               const std::vector<std::uint64_t>& dims, CheckpointInfo* info) {
  info->iteration = rec.iterations;
  info->fit_history = rec.fit_history;
  info->options_json = rec.options_json;
  info->converged = attr_i64(f, "converged", path) != 0;
  info->precision = attr_string(f, "precision", path);
  info->input.dims = dims;
  info->input.nnz = attr_u64(f, "input_nnz", path);
  info->input.norm2 = attr_f64(f, "input_norm2", path);
  info->input.coord_hash = attr_u64(f, "input_coord_hash", path);
  TESSERA_INPUT_CHECK(
      info->iteration >= 0 && static_cast<int>(info->fit_history.size()) == info->iteration,
      "'" << path << "': the fit history has " << info->fit_history.size() << " entries for "
          << info->iteration << " iterations");
}

template <typename Model, typename ReadModel>
Model read_checkpoint(const std::string& path, const char* format, CheckpointInfo* info,
                      ReadModel&& read_model) {
  std::error_code ec;
  TESSERA_INPUT_CHECK(fs::exists(path, ec), "checkpoint '" << path << "' does not exist");
  TESSERA_INPUT_CHECK(!fs::is_directory(path, ec), "checkpoint '" << path << "' is a folder");
  // stat() only: HDF5 would open a FIFO with no writer and wait forever.
  TESSERA_INPUT_CHECK(fs::is_regular_file(path, ec),
                      "checkpoint '" << path
                                     << "' is not a regular file (a FIFO, device or "
                                        "socket): expected an HDF5 checkpoint");
  const char* hint =
      " (a truncated or corrupted file? checkpoints are replaced atomically, so use an intact "
      "copy or start the run again)";
  // HDF5 failing on the file itself (rather than a piece missing): a damaged file.
  const auto damaged = [&](const auto& read) {
    try {
      return read();
    } catch (const InputError& e) {
      throw InputError("cannot resume from checkpoint '" + path + "': " + e.what() + hint);
    }
  };
  {
    // What kind of file this is: plain messages for a wrong file, the hint for a damaged one.
    TESSERA_INPUT_CHECK(h5::is_hdf5(path),
                        "cannot resume from checkpoint '" << path << "': not an HDF5 file" << hint);
    const h5::Handle f = h5::try_open_file(path, H5F_ACC_RDONLY);
    TESSERA_INPUT_CHECK(f.valid(), "cannot resume from checkpoint '"
                                       << path << "': HDF5 cannot open it" << h5::detail() << hint);
    TESSERA_INPUT_CHECK(damaged([&] { return h5::has_attr(f, "checkpoint", path); }),
                        "cannot resume from '"
                            << path
                            << "': it is not a checkpoint (no 'checkpoint' attribute; "
                               "checkpoints are written by --checkpoint-every)");
    const std::string fmt = damaged([&] {
      return h5::has_attr(f, "format", path) ? h5::read_string(f, "format", path) : std::string();
    });
    TESSERA_INPUT_CHECK(fmt == format, "cannot resume from checkpoint '"
                                           << path << "': it holds a '" << fmt
                                           << "' model, this run needs '" << format << "'");
    const long long version = damaged([&] {
      return h5::has_attr(f, "checkpoint_version", path)
                 ? h5::read_i64(f, "checkpoint_version", path)
                 : 0LL;
    });
    TESSERA_INPUT_CHECK(version >= 1 && version <= kCheckpointVersion,
                        "cannot resume from checkpoint '"
                            << path << "': checkpoint version " << version
                            << ", this tessera reads version " << kCheckpointVersion);
  }
  try {
    ModelRecord rec;
    Model m = read_model(path, &rec);
    CheckpointInfo local;
    CheckpointInfo& ck = info ? *info : local;
    const h5::Handle f = h5::open_file(path, H5F_ACC_RDONLY);
    read_info(f, path, rec, m.dims, &ck);
    // The datasets were verified by their crc32 as they were read; this one also covers
    // the checkpoint's attributes (and is the only one in files of older versions).
    verify_checksum(path, "the checkpoint (attribute 'checksum' over its data and attributes)",
                    attr_u64(f, "checksum", path), checksum_of(m, ck));
    return m;
  } catch (const ChecksumError&) {
    throw;  // the same line from every reader (io/model_io.hpp)
  } catch (const std::exception& e) {
    TESSERA_INPUT_CHECK(false,
                        "cannot resume from checkpoint '" << path << "': " << e.what() << hint);
  }
  return Model{};
}

std::string json_text(const nlohmann::json& j) {
  return j.is_null() ? std::string("(not set)") : j.dump();
}

}  // namespace

template <typename T>
void add_to_fingerprint(const SparseTensor<T>& block,
                        const std::function<std::uint64_t(int, std::uint64_t)>& original_index,
                        TensorFingerprint* local) {
  const int N = block.order();
  const nnz_t nnz = block.nnz();
  double norm2 = 0;
  std::uint64_t h = 0;
#pragma omp parallel for schedule(static) reduction(+ : norm2, h) if (nnz > (1 << 16))
  for (nnz_t k = 0; k < nnz; ++k) {
    std::uint64_t x = 0x243F6A8885A308D3ull;
    for (int n = 0; n < N; ++n) {
      std::uint64_t i = block.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)];
      if (original_index) i = original_index(n, i);
      x = mix64(x ^ (i + static_cast<std::uint64_t>(n) * 0x9E3779B97F4A7C15ull));
    }
    h += x;  // wrapping sum: the same for any split of the nonzeros
    const double v = static_cast<double>(block.vals[static_cast<std::size_t>(k)]);
    norm2 += v * v;
  }
  local->nnz += static_cast<std::uint64_t>(nnz);
  local->coord_hash += h;
  local->norm2 += norm2;
}

TensorFingerprint finish_fingerprint(const TensorFingerprint& local,
                                     const std::vector<std::uint64_t>& dims,
                                     const comm::Communicator& c) {
  TensorFingerprint fp;
  fp.dims = dims;
  std::uint64_t counts[2] = {static_cast<std::uint64_t>(local.nnz), local.coord_hash};
  c.allreduce(counts, 2);
  double norm2 = local.norm2;
  c.allreduce(&norm2, 1);
  fp.nnz = counts[0];
  fp.coord_hash = counts[1];
  fp.norm2 = norm2;
  return fp;
}

template <typename T>
TensorFingerprint tensor_fingerprint(
    const SparseTensor<T>& block,
    const std::function<std::uint64_t(int, std::uint64_t)>& original_index,
    const comm::Communicator& c) {
  TensorFingerprint local;
  add_to_fingerprint(block, original_index, &local);
  return finish_fingerprint(local, block.dims, c);
}

template void add_to_fingerprint<float>(const SparseTensor<float>&,
                                        const std::function<std::uint64_t(int, std::uint64_t)>&,
                                        TensorFingerprint*);
template void add_to_fingerprint<double>(const SparseTensor<double>&,
                                         const std::function<std::uint64_t(int, std::uint64_t)>&,
                                         TensorFingerprint*);
template TensorFingerprint tensor_fingerprint<float>(
    const SparseTensor<float>&, const std::function<std::uint64_t(int, std::uint64_t)>&,
    const comm::Communicator&);
template TensorFingerprint tensor_fingerprint<double>(
    const SparseTensor<double>&, const std::function<std::uint64_t(int, std::uint64_t)>&,
    const comm::Communicator&);

void write_cp_checkpoint(const std::string& path, const KruskalModel& m, const CheckpointInfo& info,
                         const CheckpointWriteHooks* hooks) {
  TESSERA_EXPECTS(m.dims == info.input.dims, "checkpoint: model dims differ from the input's");
  write_atomically(
      path, [&](const std::string& tmp, const ModelRecord& rec) { write_kruskal_h5(tmp, m, rec); },
      info, checksum_of(m, info), hooks);
}

KruskalModel read_cp_checkpoint(const std::string& path, CheckpointInfo* info) {
  return read_checkpoint<KruskalModel>(
      path, "tessera-kruskal", info,
      [](const std::string& p, ModelRecord* rec) { return read_kruskal_h5(p, rec); });
}

void write_tucker_checkpoint(const std::string& path, const TuckerModel& m,
                             const CheckpointInfo& info, const CheckpointWriteHooks* hooks) {
  TESSERA_EXPECTS(m.dims == info.input.dims, "checkpoint: model dims differ from the input's");
  write_atomically(
      path, [&](const std::string& tmp, const ModelRecord& rec) { write_tucker_h5(tmp, m, rec); },
      info, checksum_of(m, info), hooks);
}

TuckerModel read_tucker_checkpoint(const std::string& path, CheckpointInfo* info) {
  return read_checkpoint<TuckerModel>(
      path, "tessera-tucker", info,
      [](const std::string& p, ModelRecord* rec) { return read_tucker_h5(p, rec); });
}

std::vector<std::string> check_resume(const std::string& path, const CheckpointInfo& saved,
                                      const ResumeCheck& now) {
  std::vector<std::string> bad;
  const auto& a = saved.input;
  const auto& b = now.input;
  if (a.dims != b.dims) {
    bad.push_back("tensor dims " + format_dims(a.dims) + " in the checkpoint, " +
                  format_dims(b.dims) + " now");
  } else if (a.nnz != b.nnz) {
    bad.push_back("tensor nonzeros " + std::to_string(a.nnz) + " in the checkpoint, " +
                  std::to_string(b.nnz) + " now");
  } else {
    if (a.coord_hash != b.coord_hash)
      bad.push_back(
          "the coordinates of the tensor's nonzeros differ (same dims and nonzero count)");
    if (std::abs(a.norm2 - b.norm2) > 1e-9 * std::max(std::abs(a.norm2), std::abs(b.norm2))) {
      char line[160];
      std::snprintf(line, sizeof(line), "sum of squared values %.17g in the checkpoint, %.17g now",
                    a.norm2, b.norm2);
      bad.push_back(line);
    }
  }
  if (saved.precision != now.precision)
    bad.push_back("precision " + saved.precision + " in the checkpoint, " + now.precision + " now");
  nlohmann::json js, jn;
  try {
    js = nlohmann::json::parse(saved.options_json);
    jn = nlohmann::json::parse(now.options_json);
  } catch (const std::exception& e) {
    TESSERA_INPUT_CHECK(
        false, "checkpoint '" << path << "': its options are not valid JSON (" << e.what() << ")");
  }
  TESSERA_INPUT_CHECK(js.is_object() && jn.is_object(),
                      "checkpoint '" << path << "': its options are not a JSON object");
  auto get = [](const nlohmann::json& j, const std::string& k) {
    return j.contains(k) ? j.at(k) : nlohmann::json();
  };
  for (const auto& k : now.must_match)
    if (get(js, k) != get(jn, k))
      bad.push_back("--" + k + " " + json_text(get(js, k)) + " in the checkpoint, " +
                    json_text(get(jn, k)) + " now");
  if (!bad.empty()) {
    std::ostringstream os;
    os << "checkpoint '" << path << "' does not match this run: ";
    for (std::size_t i = 0; i < bad.size(); ++i) os << (i ? "; " : "") << bad[i];
    os << ". Resume with the same input tensor, precision and options, or start a new run "
          "without --resume";
    TESSERA_INPUT_CHECK(false, os.str());
  }
  std::set<std::string> keys;
  for (auto it = js.begin(); it != js.end(); ++it) keys.insert(it.key());
  for (auto it = jn.begin(); it != jn.end(); ++it) keys.insert(it.key());
  std::vector<std::string> notes;
  for (const auto& k : keys) {
    bool skip = false;
    for (const auto& m : now.must_match) skip = skip || m == k;
    for (const auto& m : now.ignore) skip = skip || m == k;
    if (!skip && get(js, k) != get(jn, k))
      notes.push_back(k + ": " + json_text(get(js, k)) + " -> " + json_text(get(jn, k)));
  }
  return notes;
}

std::string default_checkpoint_path(const std::string& model_path) {
  const std::string ext = ".h5";
  std::string base = model_path;
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
    base.resize(base.size() - ext.size());
  return base + ".ckpt.h5";
}

void check_checkpoint_writable(const std::string& path) {
  TESSERA_INPUT_CHECK(!path.empty(), "the checkpoint path is empty");
  std::error_code ec;
  TESSERA_INPUT_CHECK(!fs::is_directory(path, ec),
                      "cannot write checkpoint '" << path << "': it is a folder");
  probe_folder(path, "cannot write checkpoint '" + path + "'");  // io/output.hpp
}

}  // namespace tessera::io
