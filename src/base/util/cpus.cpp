#include "util/cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "util/sysfs.hpp"

namespace tessera::util {
namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  std::string t;
  while (in >> t) w.push_back(t);
  return w;
}

std::optional<std::int64_t> to_i64(const std::string& s) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// ceil(quota / period) CPUs, at least 1; nullopt for "no quota" or unreadable values.
std::optional<int> cpus_of(std::int64_t quota, std::int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  const std::int64_t n = (quota + period - 1) / period;
  return static_cast<int>(std::clamp<std::int64_t>(n, 1, 1 << 20));
}

/// Folders from `mount`/`path` up to `mount`, deepest first; empty when `path` has "..".
std::vector<std::string> folders(const std::string& mount, const std::string& path) {
  std::vector<std::string> parts;
  std::istringstream in(path);
  std::string p;
  while (std::getline(in, p, '/')) {
    if (p.empty() || p == ".") continue;
    if (p == "..") return {};
    parts.push_back(p);
  }
  std::vector<std::string> out;
  for (std::size_t depth = parts.size() + 1; depth-- > 0;) {
    std::string dir = mount;
    for (std::size_t i = 0; i < depth; ++i) dir += "/" + parts[i];
    out.push_back(dir);
  }
  return out;
}

}  // namespace

int affinity_cpus() {
  // A mask large enough for any machine (CPU_SETSIZE is only 1024).
  for (int n = 1024; n <= (1 << 22); n *= 4) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) == 0) {
      const int c = CPU_COUNT_S(bytes, set);
      CPU_FREE(set);
      return std::max(c, 1);
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(std::min<long>(online, 1 << 20)) : 1;
}

std::optional<int> cgroup_cpu_quota(const std::string& root, std::string* source) {
  const auto text = read_text_file(under_root(root, "/proc/self/cgroup"));
  if (!text) return std::nullopt;
  const ProcCgroup cg = parse_proc_cgroup(*text);
  const auto cpu = cg.v1.find("cpu");
  const std::optional<std::string> v1 =
      cpu != cg.v1.end() ? std::optional<std::string>(cpu->second) : std::nullopt;
  const std::optional<std::string>& v2 = cg.v2;
  std::optional<int> best;
  auto keep = [&](std::optional<int> n, const std::string& file, const char* flavour) {
    if (!n || (best && *best <= *n)) return;
    best = n;
    if (source) *source = std::string(flavour) + " " + file;
  };
  if (v1) {
    for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      for (const auto& dir : folders(under_root(root, mount), *v1)) {
        const auto q = read_text_file(dir + "/cpu.cfs_quota_us");
        const auto p = read_text_file(dir + "/cpu.cfs_period_us");
        if (!q || !p) continue;
        const auto qw = words(*q), pw = words(*p);
        if (qw.size() != 1 || pw.size() != 1) continue;
        const auto qv = to_i64(qw[0]), pv = to_i64(pw[0]);
        if (qv && pv) keep(cpus_of(*qv, *pv), dir + "/cpu.cfs_quota_us", "cgroup v1");
      }
    }
  } else if (v2) {
    for (const auto& dir : folders(under_root(root, "/sys/fs/cgroup"), *v2)) {
      const auto t = read_text_file(dir + "/cpu.max");
      if (!t) continue;
      const auto w = words(*t);
      if (w.empty() || w[0] == "max") continue;
      const auto qv = to_i64(w[0]);
      const auto pv = w.size() > 1 ? to_i64(w[1]) : std::optional<std::int64_t>(100000);
      if (qv && pv) keep(cpus_of(*qv, *pv), dir + "/cpu.max", "cgroup v2");
    }
  }
  return best;
}

CpuLimit usable_cpus(const std::string& root) {
  auto compute = [&] {
    CpuLimit l;
    l.cpus = affinity_cpus();
    l.source = "affinity mask of the process";
    std::string src;
    if (const auto q = cgroup_cpu_quota(root, &src); q && *q < l.cpus) {
      l.cpus = *q;
      l.source = src;
    }
    return l;
  };
  if (root != "/") return compute();
  static std::once_flag once;
  static CpuLimit cached;
  std::call_once(once, [&] { cached = compute(); });
  return cached;
}

CpuLimit node_cpu_limit(int mask_cpus, const std::string& mask_source, std::optional<int> quota,
                        const std::string& quota_source, const char* slurm_cpus_on_node) {
  CpuLimit l;
  l.cpus = std::max(mask_cpus, 1);
  l.source = mask_source;
  if (quota && *quota >= 1 && *quota < l.cpus) {
    l.cpus = *quota;
    l.source = "the CPU quota of " + quota_source;
  }
  if (slurm_cpus_on_node != nullptr) {
    const std::string s = slurm_cpus_on_node;
    if (const auto n = to_i64(s); n && *n > 0 && *n < l.cpus) {
      l.cpus = static_cast<int>(*n);
      l.source = "SLURM_CPUS_ON_NODE, Slurm's grant on this node";
    }
  }
  return l;
}

int default_threads_per_rank(int node_cpus, int ranks_on_node, int rank_cpus) {
  const int share = std::max(node_cpus, 1) / std::max(ranks_on_node, 1);
  return std::max(1, std::min(share, std::max(rank_cpus, 1)));
}

int cap_threads(int requested, const std::string& what, std::string* warning) {
  if (warning) warning->clear();
  if (requested <= 0) return requested;
  const CpuLimit l = usable_cpus();
  if (requested <= l.cpus) return requested;
  if (warning)
    *warning = what + " is more than the " + std::to_string(l.cpus) + " CPU" +
               (l.cpus == 1 ? "" : "s") + " this process may use (" + l.source + "): using " +
               std::to_string(l.cpus) + " thread" + (l.cpus == 1 ? "" : "s");
  return l.cpus;
}

}  // namespace tessera::util
