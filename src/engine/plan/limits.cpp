#include "plan/limits.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "comm/mpi_communicator.hpp"
#include "util/error.hpp"
#include "util/sysfs.hpp"

namespace tessera::plan {

namespace {

constexpr std::uint64_t kNoLimitFrom = std::uint64_t{1} << 62;  // v1 "unlimited" is ~2^63
constexpr double kTwoTo64 = 18446744073709551616.0;

using util::read_text_file;
using util::under_root;

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

/// The whole of `s` as an unsigned decimal number.
std::optional<std::uint64_t> to_u64(const std::string& s) {
  std::uint64_t v = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || s.empty()) return std::nullopt;
  return v;
}

/// Up to 40 characters of `s` on one line, for notes about odd contents.
std::string excerpt(const std::string& s) {
  std::string t = trim(s).substr(0, 40);
  for (char& c : t)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return "'" + t + "'";
}

std::string hb(std::uint64_t b) {
  return human_bytes(static_cast<double>(b));
}

// ---- /proc/meminfo ----------------------------------------------------------------

void read_meminfo(const std::string& root, HostFacts& f) {
  const std::string path = under_root(root, "/proc/meminfo");
  auto text = read_text_file(path);
  if (!text) {
    f.notes.push_back(path + ": cannot read (MemAvailable unknown)");
    return;
  }
  std::istringstream in(*text);
  std::string line;
  bool total = false, avail = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, num, unit;
    ls >> key >> num >> unit;
    if (key != "MemTotal:" && key != "MemAvailable:") continue;
    auto v = to_u64(num);
    const std::uint64_t mult = unit == "kB" ? 1024 : unit.empty() ? 1 : 0;
    if (!v || mult == 0 || *v > UINT64_MAX / 1024) {
      f.notes.push_back(path + ": unreadable line " + excerpt(line) + " (skipped)");
      continue;
    }
    if (key == "MemTotal:") {
      f.mem_total = *v * mult;
      total = true;
    } else {
      f.mem_available = *v * mult;
      avail = true;
    }
  }
  if (total || avail) {
    f.notes.push_back(path + ": MemTotal " + (total ? hb(f.mem_total) : "not found") +
                      ", MemAvailable " + (avail ? hb(f.mem_available) : "not found"));
  } else {
    f.notes.push_back(path + ": no MemTotal or MemAvailable line (skipped)");
  }
}

// ---- cgroups ------------------------------------------------------------------------

struct CgroupFlavour {
  const char* name;                      // "cgroup v1" / "cgroup v2"
  std::string mount;                     // root/sys/fs/cgroup[/memory]
  std::vector<const char*> limit_files;  // memory.max, memory.high / memory.limit_in_bytes
  const char* usage_file;                // memory.current / memory.usage_in_bytes
  std::vector<const char*> stat_keys;    // inactive page cache keys of memory.stat, by preference
};

/// A limit file's value: nullopt and a note when there is none or it is odd.
std::optional<std::uint64_t> read_limit_file(const std::string& path, HostFacts& f) {
  auto text = read_text_file(path);
  if (!text) {
    f.notes.push_back(path + ": absent");
    return std::nullopt;
  }
  const std::string v = trim(*text);
  if (v == "max") {
    f.notes.push_back(path + ": max (no limit)");
    return std::nullopt;
  }
  auto n = to_u64(v);
  if (!n) {
    f.notes.push_back(path + ": unreadable value " + excerpt(v) + " (skipped)");
    return std::nullopt;
  }
  if (*n >= kNoLimitFrom) {
    f.notes.push_back(path + ": " + v + " (unlimited sentinel, no limit)");
    return std::nullopt;
  }
  if (*n == 0) {
    f.notes.push_back(path + ": 0 (ignored)");
    return std::nullopt;
  }
  f.notes.push_back(path + ": " + hb(*n));
  return n;
}

/// Memory in use by the cgroup in `dir`: usage less the inactive page cache.
std::uint64_t read_cgroup_usage(const CgroupFlavour& cg, const std::string& dir, HostFacts& f) {
  const std::string upath = dir + "/" + cg.usage_file;
  auto text = read_text_file(upath);
  std::optional<std::uint64_t> usage = text ? to_u64(trim(*text)) : std::nullopt;
  if (!usage) {
    f.notes.push_back(upath + (text ? ": unreadable value " + excerpt(*text) : ": absent") +
                      " (usage taken as 0)");
    return 0;
  }
  std::uint64_t inactive = 0;
  const std::string spath = dir + "/memory.stat";
  if (auto stat = read_text_file(spath)) {
    for (const char* key : cg.stat_keys) {
      std::istringstream in(*stat);
      std::string k, v;
      bool found = false;
      while (in >> k >> v) {
        if (k != key) continue;
        if (auto n = to_u64(v)) {
          inactive = *n;
          found = true;
        }
        break;
      }
      if (found) break;
    }
  }
  if (inactive > *usage) inactive = 0;
  f.notes.push_back(upath + ": " + hb(*usage) +
                    (inactive > 0 ? " less inactive_file " + hb(inactive) +
                                        " of memory.stat = " + hb(*usage - inactive) + " in use"
                                  : " in use"));
  return *usage - inactive;
}

void read_cgroup_limits(const CgroupFlavour& cg, const std::string& path, HostFacts& f) {
  // Components of the cgroup path; refuse anything that could leave the mount.
  std::vector<std::string> parts;
  {
    std::istringstream in(path);
    std::string p;
    while (std::getline(in, p, '/')) {
      if (p.empty() || p == ".") continue;
      if (p == "..") {
        f.notes.push_back(std::string(cg.name) + " path " + excerpt(path) +
                          " has '..' (cgroup limits skipped)");
        return;
      }
      parts.push_back(p);
    }
  }
  std::uint64_t best_room = UINT64_MAX;
  for (std::size_t depth = parts.size() + 1; depth-- > 0;) {
    std::string dir = cg.mount;
    for (std::size_t i = 0; i < depth; ++i) dir += "/" + parts[i];
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      f.notes.push_back(dir + ": no such cgroup folder in this view (skipped)");
      continue;
    }
    std::optional<std::uint64_t> usage;  // read once per folder, only if it holds a limit
    for (const char* file : cg.limit_files) {
      auto lim = read_limit_file(dir + "/" + file, f);
      if (!lim) continue;
      if (!usage) usage = read_cgroup_usage(cg, dir, f);
      const std::uint64_t room = *lim > *usage ? *lim - *usage : 0;
      if (room < best_room || (room == best_room && *lim < f.cgroup.bytes)) {
        best_room = room;
        f.cgroup = Limit{*lim, std::string(cg.name) + " " + file + " (" + dir + ")"};
        f.cgroup_usage = *usage;
      }
    }
  }
  if (!f.cgroup.known())
    f.notes.push_back(std::string(cg.name) + ": no memory limit on the path " + path);
}

void read_cgroup(const std::string& root, HostFacts& f) {
  const std::string path = under_root(root, "/proc/self/cgroup");
  auto text = read_text_file(path);
  if (!text) {
    f.notes.push_back(path + ": cannot read (no cgroup limit)");
    return;
  }
  const util::ProcCgroup cg = util::parse_proc_cgroup(*text);
  const int odd = cg.malformed;
  const auto mem = cg.v1.find("memory");
  const std::optional<std::string> v1 =
      mem != cg.v1.end() ? std::optional<std::string>(mem->second) : std::nullopt;
  const std::optional<std::string>& v2 = cg.v2;
  if (odd > 0)
    f.notes.push_back(path + ": " + std::to_string(odd) + " malformed line" + (odd > 1 ? "s" : "") +
                      " ignored");
  if (v1) {
    f.notes.push_back(path + ": cgroup v1 memory controller at " + *v1);
    read_cgroup_limits(CgroupFlavour{"cgroup v1",
                                     under_root(root, "/sys/fs/cgroup/memory"),
                                     {"memory.limit_in_bytes"},
                                     "memory.usage_in_bytes",
                                     {"total_inactive_file", "inactive_file"}},
                       *v1, f);
  } else if (v2) {
    f.notes.push_back(path + ": cgroup v2 at " + *v2);
    read_cgroup_limits(CgroupFlavour{"cgroup v2",
                                     under_root(root, "/sys/fs/cgroup"),
                                     {"memory.max", "memory.high"},
                                     "memory.current",
                                     {"inactive_file"}},
                       *v2, f);
  } else {
    f.notes.push_back(path + ": no memory cgroup line (no cgroup limit)");
  }
}

// ---- Slurm ----------------------------------------------------------------------------

/// A Slurm memory value in bytes: plain MB, or K/M/G/T (powers of 1024) with an optional B.
std::optional<double> slurm_mem_bytes(const std::string& s) {
  const std::string t = trim(s);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end == t.c_str() || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string suf(end);
  if (suf.size() == 2 && (suf[1] == 'B' || suf[1] == 'b')) suf.pop_back();
  double mult = 0;
  if (suf.empty() || suf == "M" || suf == "m")
    mult = 1024.0 * 1024;
  else if (suf == "K" || suf == "k")
    mult = 1024.0;
  else if (suf == "G" || suf == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (suf == "T" || suf == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return std::nullopt;
  return v * mult;
}

/// Leading positive integer of `s` ("32(x2),16" -> 32).
std::optional<long long> leading_count(const std::string& s) {
  const std::string t = trim(s);
  long long v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p == t.data() || v <= 0) return std::nullopt;
  return v;
}

/// Non-empty comma-separated entries of `s`.
long long count_entries(const std::string& s) {
  long long n = 0;
  std::istringstream in(s);
  std::string e;
  while (std::getline(in, e, ','))
    if (!trim(e).empty()) ++n;
  return n;
}

void read_slurm(const EnvLookup& env, HostFacts& f) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    const char* v = env ? env(name) : std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
  auto describe = [](const char* name, const std::string& v) {
    const std::string t = trim(v);
    const bool plain = !t.empty() && std::isdigit(static_cast<unsigned char>(t.back()));
    return std::string(name) + "=" + t + (plain ? " (MB)" : "");
  };
  auto offer = [&](double bytes, const std::string& source) {
    if (!(bytes >= 1) || bytes >= kTwoTo64) {
      f.notes.push_back(source + ": out of range (skipped)");
      return;
    }
    const auto b = static_cast<std::uint64_t>(bytes);
    f.notes.push_back(source + " = " + hb(b) + " on this node");
    if (!f.slurm.known() || b < f.slurm.bytes) f.slurm = Limit{b, source};
  };
  // A variable's memory value, or nullopt with a note when unset/odd/zero.
  auto mem = [&](const char* name) -> std::optional<std::pair<double, std::string>> {
    auto v = get(name);
    if (!v) return std::nullopt;
    auto b = slurm_mem_bytes(*v);
    if (!b) {
      f.notes.push_back(std::string(name) + "=" + excerpt(*v) +
                        ": not a memory size (expected MB or a K/M/G/T suffix; skipped)");
      return std::nullopt;
    }
    if (*b == 0) {
      f.notes.push_back(std::string(name) + "=0: all the node's memory (no Slurm limit)");
      return std::nullopt;
    }
    return std::make_pair(*b, describe(name, *v));
  };

  bool any = false;
  if (auto m = mem("SLURM_MEM_PER_NODE")) {
    any = true;
    offer(m->first, m->second);
  }
  if (auto m = mem("SLURM_MEM_PER_CPU")) {
    any = true;
    long long cpus = 0;
    std::string from;
    if (auto v = get("SLURM_CPUS_ON_NODE")) {
      if (auto n = leading_count(*v); n && trim(*v) == std::to_string(*n)) {
        cpus = *n;
        from = "SLURM_CPUS_ON_NODE";
      } else {
        f.notes.push_back("SLURM_CPUS_ON_NODE=" + excerpt(*v) + ": not a count (skipped)");
      }
    }
    if (cpus == 0) {
      if (auto v = get("SLURM_JOB_CPUS_PER_NODE")) {
        if (auto n = leading_count(*v)) {
          cpus = *n;
          from = "first of SLURM_JOB_CPUS_PER_NODE=" + trim(*v);
        } else {
          f.notes.push_back("SLURM_JOB_CPUS_PER_NODE=" + excerpt(*v) + ": not a count (skipped)");
        }
      }
    }
    if (cpus == 0) {
      cpus = 1;
      from = "no CPU count found: assumed 1";
    }
    offer(m->first * static_cast<double>(cpus), m->second + " x " + std::to_string(cpus) +
                                                    (cpus == 1 ? " CPU" : " CPUs") + " (" + from +
                                                    ")");
  }
  if (auto m = mem("SLURM_MEM_PER_GPU")) {
    any = true;
    long long gpus = 0;
    std::string from;
    if (auto v = get("SLURM_GPUS_ON_NODE")) {
      if (auto n = leading_count(*v); n && trim(*v) == std::to_string(*n)) {
        gpus = *n;
        from = "SLURM_GPUS_ON_NODE";
      } else {
        f.notes.push_back("SLURM_GPUS_ON_NODE=" + excerpt(*v) + ": not a count (skipped)");
      }
    }
    for (const char* name : {"SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"}) {
      if (gpus > 0) break;
      if (auto v = get(name); v && count_entries(*v) > 0) {
        gpus = count_entries(*v);
        from = "entries of " + std::string(name) + "=" + trim(*v);
      }
    }
    if (gpus == 0) {
      gpus = 1;
      from = "no GPU count found: assumed 1";
    }
    offer(m->first * static_cast<double>(gpus), m->second + " x " + std::to_string(gpus) +
                                                    (gpus == 1 ? " GPU" : " GPUs") + " (" + from +
                                                    ")");
  }
  if (!any) f.notes.push_back("Slurm: no SLURM_MEM_PER_NODE/CPU/GPU grant (no Slurm limit)");
}

}  // namespace

HostFacts read_host_facts(const std::string& root, const EnvLookup& env) {
  HostFacts f;
  // Each reader records notes instead of throwing; guard against the unexpected too
  // (allocation failures aside, nothing here should throw).
  try {
    read_meminfo(root, f);
  } catch (const std::exception& e) {
    f.notes.push_back(std::string("meminfo: ") + e.what());
  }
  try {
    read_cgroup(root, f);
  } catch (const std::exception& e) {
    f.notes.push_back(std::string("cgroup: ") + e.what());
  }
  try {
    read_slurm(env, f);
  } catch (const std::exception& e) {
    f.notes.push_back(std::string("Slurm: ") + e.what());
  }
  return f;
}

Limit host_limit(const HostFacts& f, int ranks_on_node, std::uint64_t own_rss) {
  TESSERA_EXPECTS(ranks_on_node >= 1,
                  "ranks on this node must be at least 1, got " << ranks_on_node);
  std::vector<Limit> c;
  if (f.mem_available > 0)
    c.push_back({f.mem_available, "MemAvailable in /proc/meminfo (" + hb(f.mem_available) + ")"});
  if (f.cgroup.known()) {
    // Room for this process: limit - usage of everyone + what this process already holds.
    const std::uint64_t have = f.cgroup.bytes + own_rss;
    std::uint64_t room = have > f.cgroup_usage ? have - f.cgroup_usage : 0;
    room = std::clamp<std::uint64_t>(room, 1, f.cgroup.bytes);
    std::string s = f.cgroup.source + " (" + hb(f.cgroup.bytes) + " - usage " + hb(f.cgroup_usage) +
                    (own_rss > 0 ? " + own RSS " + hb(own_rss) : "") + ")";
    c.push_back({room, s});
  }
  if (f.slurm.known())
    c.push_back({f.slurm.bytes, f.slurm.source + " (" + hb(f.slurm.bytes) + ")"});
  if (c.empty()) return {};
  const Limit& w = *std::min_element(
      c.begin(), c.end(), [](const Limit& a, const Limit& b) { return a.bytes < b.bytes; });
  const auto n = static_cast<std::uint64_t>(ranks_on_node);
  return {std::max<std::uint64_t>(w.bytes / n, 1),
          w.source + " / " + std::to_string(n) + (n == 1 ? " rank" : " ranks") + " on this node"};
}

Limit disk_free(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    const int err = errno;
    return {0, "free space in " + dir + " unknown (statvfs: " + std::strerror(err) + ")"};
  }
  const double b = static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize);
  if (b < 1) return {1, "free space in " + dir + " (the disk is full)"};
  const std::uint64_t bytes = b >= kTwoTo64 ? UINT64_MAX
                                            : static_cast<std::uint64_t>(st.f_bavail) *
                                                  static_cast<std::uint64_t>(st.f_frsize);
  return {bytes, "free space in " + dir};
}

int ranks_on_node(const comm::MpiCommunicator& world) {
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(),
                                        MPI_INFO_NULL, &node));
  int n = 0;
  const int rc = MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  TESSERA_MPI_CHECK(rc);
  return n;
}

ProcessMemory process_memory(const std::string& root) {
  const auto status = util::proc_status_bytes(root);
  ProcessMemory m;
  if (const auto rss = status.find("VmRSS"); rss != status.end()) m.rss = rss->second;
  if (const auto hwm = status.find("VmHWM"); hwm != status.end()) m.hwm = hwm->second;
  return m;
}

bool reset_peak_rss() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

std::uint64_t parse_bytes(const std::string& s, const char* what) {
  TESSERA_INPUT_CHECK(!s.empty(), what << " is empty");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1;
  std::string suffix = end ? std::string(end) : "";
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && suffix.back() == 'i') suffix.pop_back();  // 8GiB as 8G
  if (suffix == "K" || suffix == "k")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "m")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    TESSERA_INPUT_CHECK(suffix.empty(),
                        "bad " << what << " '" << s << "': expected a size like 8G, 512M or 1e9");
  const double b = v * mult;
  TESSERA_INPUT_CHECK(
      errno == 0 && end != s.c_str() && std::isfinite(b) && b >= 1 && b < kTwoTo64,
      "bad " << what << " '" << s << "': expected a positive size like 8G, 512M or 1e9");
  return static_cast<std::uint64_t>(b);
}

std::string human_bytes(double b) {
  // Binary units, as sizes are read (parse_bytes: 80G is 80 x 2^30 bytes): --device-budget
  // 80G is printed "80.00 GiB", not "85.90 GB".
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) {
    b /= 1024;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", b, u[i]);
  return buf;
}

}  // namespace tessera::plan
