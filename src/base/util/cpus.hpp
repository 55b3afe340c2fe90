// The number of CPUs this process may run threads on: its affinity mask and the cgroup CPU
// quota (cpu.max on cgroup v2, cpu.cfs_quota_us / cpu.cfs_period_us on v1), so thread counts
// can be capped to what can run at once (a request of 100000 threads would otherwise exhaust
// the process's stacks inside the OpenMP runtime).
//
// cgroup rules (read under a `root` folder, normally "/", so tests can use fixture trees):
//   - /proc/self/cgroup names the process's cgroup: a v1 line with the cpu controller
//     ("N:cpu,cpuacct:/path") wins over the v2 line ("0::/path").
//   - v2: cpu.max ("QUOTA PERIOD", or "max PERIOD" for none) of root/sys/fs/cgroup/<path> and
//     of each ancestor up to root/sys/fs/cgroup; v1: cpu.cfs_quota_us (-1: none) and
//     cpu.cfs_period_us of root/sys/fs/cgroup/cpu/<path> (also tried: cpu,cpuacct) and each
//     ancestor. Each quota allows ceil(QUOTA / PERIOD) CPUs; the smallest on the path wins.
//   - Files that are absent or unreadable are skipped (no limit from them).
#pragma once

#include <optional>
#include <string>

namespace tessera::util {

/// CPUs this process may use and where the number came from.
struct CpuLimit {
  int cpus = 1;        ///< >= 1
  std::string source;  ///< e.g. "affinity mask", "cgroup v2 cpu.max (/sys/fs/cgroup/x)"
};

/// CPUs in this process's affinity mask (sched_getaffinity), or the online CPUs when the
/// mask cannot be read; at least 1.
int affinity_cpus();

/// CPUs the cgroup CPU quota on this process's path allows (rules above), read under
/// `root`; nullopt when there is no quota. `source` receives the file that set it.
std::optional<int> cgroup_cpu_quota(const std::string& root, std::string* source);

/// The smaller of affinity_cpus() and cgroup_cpu_quota(root) (cached for root "/").
CpuLimit usable_cpus(const std::string& root = "/");

/// The CPUs a node gives its ranks: the smallest of `mask_cpus` (the CPUs in the union of the
/// affinity masks of the node's ranks, `mask_source` naming them), the cgroup CPU quota
/// (`quota`, set by `quota_source`; nullopt: none) and Slurm's grant on the node
/// (`slurm_cpus_on_node`: the text of SLURM_CPUS_ON_NODE; null, or not a positive count:
/// none). The source names the smallest. Pure (the callers measure).
CpuLimit node_cpu_limit(int mask_cpus, const std::string& mask_source, std::optional<int> quota,
                        const std::string& quota_source, const char* slurm_cpus_on_node);

/// OpenMP threads per rank when neither --threads nor OMP_NUM_THREADS gives a count: the
/// node's CPUs (node_cpu_limit) divided by the ranks on the node, rounded down, at most
/// `rank_cpus` (the CPUs this rank may use: usable_cpus()), at least 1. Examples: 64 CPUs
/// and 4 ranks: 16; 2 CPUs and 3 ranks: 1.
int default_threads_per_rank(int node_cpus, int ranks_on_node, int rank_cpus);

/// `requested` threads capped to usable_cpus().cpus. When capped, `*warning` (if not null)
/// receives one line for the user naming `what` (e.g. "--threads 100000"), the limit and
/// its source; otherwise it is left empty. requested <= 0 is returned unchanged.
int cap_threads(int requested, const std::string& what, std::string* warning);

}  // namespace tessera::util
