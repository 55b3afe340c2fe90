// The output policy (see output.hpp and docs/reliability.md, "Outputs").
#include "io/output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/h5/file.hpp"
#include "io/h5store.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

using posix::errno_text;

/// This host's name as it appears in temporary names ("localhost" when unknown).
std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h(buf);
  for (char& ch : h)
    if (ch == '/' || std::isspace(static_cast<unsigned char>(ch))) ch = '-';
  return h;
}

std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

/// The file a regular output really replaces: the target of a symbolic link to a regular
/// file (so the link is kept), else `path` itself.
std::string replaced_file(const std::string& path) {
  struct stat lst {};
  struct stat st {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode) && ::stat(path.c_str(), &st) == 0 &&
      S_ISREG(st.st_mode)) {
    std::error_code ec;
    const fs::path c = fs::canonical(path, ec);
    if (!ec) return c.string();
  }
  return path;
}

/// A process of this host with this pid runs (or may run: EPERM means it exists).
bool process_runs(long pid) {
  if (pid <= 0) return true;  // not a pid we can judge: keep the file
  if (pid == static_cast<long>(::getpid())) return true;
  if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
  return errno != ESRCH;
}

/// The first line of a text file, plain or gzip (at most 255 bytes; "" when unreadable).
std::string first_line(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  if (g == nullptr) return "";
  char buf[256] = {};
  const char* s = gzgets(g, buf, sizeof(buf));
  gzclose(g);
  return s != nullptr ? std::string(s) : std::string();
}

bool is_tessera_record(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::int64_t>(in.tellg());
  if (size <= 0 || size > (std::int64_t(1) << 28)) return false;
  in.seekg(0);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), size);
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  const auto k = j.find(kRecordKey);
  if (k != j.end()) return k->is_string() && k->get<std::string>() == kRecordValue;
  // Records written before the key existed: the command that wrote them.
  const auto c = j.find("command");
  if (c == j.end() || !c->is_string()) return false;
  const std::string cmd = c->get<std::string>();
  for (const char* known : {"cp", "tucker", "contract", "convert", "plan", "bench"})
    if (cmd == known || cmd.rfind(std::string(known) + " ", 0) == 0) return true;
  return false;
}

const char* describe(OutputKind k) {
  switch (k) {
    case OutputKind::model:
      return "an HDF5 model or checkpoint written by Tessera";
    case OutputKind::store:
      return "an HDF5 tensor store written by Tessera";
    case OutputKind::text:
      return "a FROSTT text file written by Tessera";
    case OutputKind::record:
      return "a JSON run record written by Tessera";
  }
  return "a file written by Tessera";
}

const char* file_type(mode_t m) {
  if (S_ISCHR(m)) return "a character device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a folder";
  return "a special file";
}

/// The identity two outputs share when they are one file: device and inode of the file,
/// or of its folder plus its name when it does not exist yet.
std::string identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    return "i:" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const fs::path p(path);
  if (::stat(folder_of(path).c_str(), &st) == 0)
    return "n:" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + "/" +
           p.filename().string();
  std::error_code ec;
  return "p:" + fs::absolute(p, ec).lexically_normal().string();
}

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<std::size_t>(n, std::size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw InputError("cannot write '" + path + "': " + errno_text(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

std::string temp_path(const std::string& path, const std::string& tag) {
  TESSERA_EXPECTS(tag.empty() || std::isalpha(static_cast<unsigned char>(tag[0])),
                  "a temporary's tag starts with a letter (got '" << tag << "')");
  std::string t = path + ".tmp-" + this_host() + "_" + std::to_string(::getpid());
  if (!tag.empty()) t += "_" + tag;
  return t;
}

bool is_special_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

bool written_by_tessera(const std::string& path, OutputKind kind) {
  try {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    switch (kind) {
      case OutputKind::model: {
        const std::string f = h5::peek_format(path);
        return f == "tessera-kruskal" || f == "tessera-tucker";
      }
      case OutputKind::store:
        return h5::peek_format(path) == kTensorStoreFormat;
      case OutputKind::text:
        return first_line(path).rfind("# FROSTT sparse tensor", 0) == 0;
      case OutputKind::record:
        return is_tessera_record(path);
    }
  } catch (...) {
  }
  return false;
}

void probe_folder(const std::string& path, const std::string& what) {
  const std::string dir = folder_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    TESSERA_INPUT_CHECK(e != ENOENT && e != ENOTDIR,
                        what << ": cannot create it: folder '" << dir << "' does not exist");
    TESSERA_INPUT_CHECK(false,
                        what << ": cannot create it: folder '" << dir << "': " << errno_text(e));
  }
  TESSERA_INPUT_CHECK(S_ISDIR(st.st_mode),
                      what << ": cannot create it: '" << dir << "' is not a folder");
  const std::string probe = temp_path(path, "probe");
  int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {  // a probe of a dead process that had this pid
    ::unlink(probe.c_str());
    fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  }
  TESSERA_INPUT_CHECK(fd >= 0, what << ": cannot create a file in folder '" << dir << "' ("
                                    << errno_text(errno) << ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  std::vector<std::string> removed;
  try {
    const std::string file = replaced_file(path);
    const std::string dir = folder_of(file);
    const std::string prefix = fs::path(file).filename().string() + ".tmp-" + this_host() + "_";
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      // PID, then nothing or "_" and a tag starting with a letter.
      std::size_t k = prefix.size();
      long pid = 0;
      while (k < name.size() && k < prefix.size() + 10 &&
             std::isdigit(static_cast<unsigned char>(name[k])))
        pid = pid * 10 + (name[k++] - '0');
      if (k == prefix.size()) continue;
      const bool tail_ok =
          k == name.size() || (name[k] == '_' && k + 1 < name.size() &&
                               std::isalpha(static_cast<unsigned char>(name[k + 1])));
      if (!tail_ok || process_runs(pid)) continue;
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (::unlink(it->path().c_str()) == 0) removed.push_back(it->path().string());
    }
  } catch (...) {
  }
  return removed;
}

// ---- AtomicOutput ---------------------------------------------------------------------

AtomicOutput::AtomicOutput(const std::string& path, const std::string& tag)
    : path_(path), target_(path) {
  TESSERA_INPUT_CHECK(!path.empty(), "an output file name is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      special_ = true;
      return;
    }
    TESSERA_INPUT_CHECK(S_ISREG(st.st_mode),
                        "cannot write '" << path << "': it is " << file_type(st.st_mode)
                                         << " (Tessera writes regular files, character devices "
                                            "and FIFOs)");
    target_ = replaced_file(path);
  }
  temp_ = temp_path(target_, tag);
  // The name carries this host and this pid: a file of that name is a leftover of a dead
  // process that had the same pid.
  ::unlink(temp_.c_str());
}

AtomicOutput::~AtomicOutput() {
  if (!special_ && !committed_) ::unlink(temp_.c_str());
}

void AtomicOutput::commit() {
  if (special_ || committed_) {
    committed_ = true;
    return;
  }
  const int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_INPUT_CHECK(fd >= 0, "cannot open '" << temp_ << "' to sync it: " << errno_text(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  TESSERA_INPUT_CHECK(rc == 0 || e == EINVAL,
                      "cannot sync '" << temp_ << "' to disk: " << errno_text(e));
  TESSERA_INPUT_CHECK(
      ::rename(temp_.c_str(), target_.c_str()) == 0,
      "cannot rename '" << temp_ << "' to '" << target_ << "': " << errno_text(errno));
  committed_ = true;
  // The rename itself: best effort (some file systems cannot sync folders).
  const int dfd = ::open(folder_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// ---- SharedOutput ---------------------------------------------------------------------

SharedOutput::SharedOutput(const std::string& path, const comm::Communicator& c,
                           const std::string& tag) {
  comm::run_collectively(c, [&] {
    if (c.rank() != 0) return;
    root_ = std::make_unique<AtomicOutput>(path, tag);
    write_path_ = root_->write_path();
    special_ = root_->special();
  });
  std::int64_t len = static_cast<std::int64_t>(write_path_.size());
  std::int32_t sp = special_ ? 1 : 0;
  c.broadcast(&len, 1, 0);
  c.broadcast(&sp, 1, 0);
  write_path_.resize(static_cast<std::size_t>(len));
  if (len > 0) c.broadcast(write_path_.data(), write_path_.size(), 0);
  special_ = sp != 0;
}

SharedOutput::~SharedOutput() = default;

void SharedOutput::commit() {
  if (root_) root_->commit();
}

void write_in_rank_order(const std::string& path, const char* data, std::size_t n,
                         const comm::Communicator& c) {
  const int P = c.size(), me = c.rank();
  const std::uint64_t mine = n;
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(P), 0);
  c.allgather(&mine, sizes.data(), 1);
  std::exception_ptr err;
  int fd = -1;
  if (me == 0) {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      err = std::make_exception_ptr(
          InputError("cannot open '" + path + "' for writing: " + errno_text(errno)));
  }
  auto put = [&](const char* p, std::size_t len) {
    if (err) return;  // keep receiving so no rank waits, report at the end
    try {
      write_all(fd, p, len, path);
    } catch (...) {
      err = std::current_exception();
    }
  };
  if (me == 0) put(data, n);
  constexpr std::uint64_t kPiece = std::uint64_t(64) << 20;
  std::vector<char> buf;
  std::vector<std::int64_t> sc(static_cast<std::size_t>(P)), rc(sc.size()), zero(sc.size(), 0);
  for (int q = 1; q < P; ++q) {
    for (std::uint64_t off = 0; off < sizes[static_cast<std::size_t>(q)]; off += kPiece) {
      const std::uint64_t len = std::min(kPiece, sizes[static_cast<std::size_t>(q)] - off);
      std::fill(sc.begin(), sc.end(), 0);
      std::fill(rc.begin(), rc.end(), 0);
      if (me == q) sc[0] = static_cast<std::int64_t>(len);
      if (me == 0) {
        rc[static_cast<std::size_t>(q)] = static_cast<std::int64_t>(len);
        buf.resize(static_cast<std::size_t>(len));
      }
      c.alltoallv_raw(me == q ? data + off : nullptr, sc.data(), zero.data(),
                      me == 0 ? buf.data() : nullptr, rc.data(), zero.data(), comm::DataType::u8);
      if (me == 0) put(buf.data(), static_cast<std::size_t>(len));
    }
  }
  if (fd >= 0 && ::close(fd) != 0 && !err)
    err = std::make_exception_ptr(InputError("cannot write '" + path + "': " + errno_text(errno)));
  comm::raise_collectively(c, err);
}

// ---- OutputSet ------------------------------------------------------------------------

void OutputSet::add_input(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  Entry e;
  e.option = option;
  e.path = path;
  inputs_.push_back(std::move(e));
}

void OutputSet::add_output(const std::string& option, const std::string& path, OutputKind kind,
                           const std::string& may_replace, const std::string& hint) {
  if (path.empty()) return;
  Entry e;
  e.option = option;
  e.path = path;
  e.kind = kind;
  e.may_replace = may_replace;
  e.hint = hint;
  outputs_.push_back(std::move(e));
}

void OutputSet::check(bool force) const {
  std::vector<std::string> ids;  // identities of the outputs checked so far
  for (const Entry& o : outputs_) {
    const std::string what = o.option + " '" + o.path + "'";
    struct stat st {};
    const bool exists = ::stat(o.path.c_str(), &st) == 0;
    TESSERA_INPUT_CHECK(!exists || !S_ISDIR(st.st_mode),
                        what << " is a folder: give the name of a file");
    // A character device (/dev/null) holds no data to lose: it may be named twice.
    const bool chr = exists && S_ISCHR(st.st_mode);
    bool in_place = false;
    if (exists && !chr) {
      for (const Entry& i : inputs_) {
        struct stat si {};
        if (::stat(i.path.c_str(), &si) != 0 || si.st_dev != st.st_dev || si.st_ino != st.st_ino)
          continue;
        if (!o.may_replace.empty() && i.option == o.may_replace) {
          in_place = true;
          continue;
        }
        TESSERA_INPUT_CHECK(
            false, what << " is the same file as " << i.option << " '" << i.path
                        << "': Tessera never writes over an input, not even "
                           "with "
                        << force_option_ << "; "
                        << (o.hint.empty() ? "choose another name for " + o.option : o.hint));
      }
    }
    const std::string id = identity(o.path);
    if (!chr) {
      for (std::size_t k = 0; k < ids.size(); ++k)
        TESSERA_INPUT_CHECK(ids[k] != id, what << " and " << outputs_[k].option << " '"
                                               << outputs_[k].path
                                               << "' are the same file: give each output its "
                                                  "own name");
    }
    ids.push_back(chr ? std::string() : id);
    if (exists && !S_ISREG(st.st_mode)) {
      const bool fifo = S_ISFIFO(st.st_mode);
      TESSERA_INPUT_CHECK(chr || fifo,
                          what << " is " << file_type(st.st_mode)
                               << ": Tessera writes regular files, character devices and FIFOs");
      TESSERA_INPUT_CHECK(o.kind != OutputKind::model && o.kind != OutputKind::store,
                          what << " is " << file_type(st.st_mode)
                               << ": HDF5 files need a regular (seekable) file; give a file name");
      TESSERA_INPUT_CHECK(::access(o.path.c_str(), W_OK) == 0,
                          what << ": cannot open it for writing (" << errno_text(errno) << ")");
      continue;  // written directly: no temporary, nothing replaced
    }
    const std::string file = replaced_file(o.path);
    if (exists && !in_place && !force)
      TESSERA_INPUT_CHECK(written_by_tessera(file, o.kind),
                          what << " exists and is not " << describe(o.kind) << ": use "
                               << force_option_ << " to replace it, or choose another name");
    probe_folder(file, what);
  }
}

std::vector<std::string> OutputSet::clean() const {
  std::vector<std::string> removed;
  for (const Entry& o : outputs_) {
    if (is_special_file(o.path)) continue;
    for (auto& r : remove_stale_temporaries(o.path)) removed.push_back(std::move(r));
  }
  return removed;
}

std::size_t OutputSet::validate(bool force, const comm::Communicator& c) const {
  comm::run_collectively(c, [&] {
    if (c.rank() == 0) check(force);
  });
  // The first rank of every host cleans that host's stale temporaries.
  const std::uint64_t h = std::hash<std::string>{}(this_host());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(c.size()), 0);
  c.allgather(&h, all.data(), 1);
  const auto first = std::find(all.begin(), all.end(), h) - all.begin();
  if (first != c.rank()) return 0;
  const auto removed = clean();
  if (!removed.empty()) {
    std::string names;
    for (const auto& r : removed) names += (names.empty() ? "" : ", ") + r;
    log::info("removed " + std::to_string(removed.size()) +
              " temporary file(s) left by processes of this host that no longer run: " + names);
  }
  return removed.size();
}

}  // namespace tessera::io
