// Measured memory limits for the planner: host memory (MemAvailable, cgroup v1/v2, Slurm),
// free disk for spills, ranks per node, and this process's resident memory.
//
// Host memory one rank may use is the smallest known of
//   - MemAvailable in /proc/meminfo (what the kernel can hand out without swapping),
//   - the cgroup limit minus what the cgroup already uses (plus this rank's own RSS, which
//     the usage already counts),
//   - the memory Slurm grants the job step on this node,
// divided among the ranks of the node.
//
// cgroup rules (read under a `root` folder, normally "/", so tests can use fixture trees):
//   - /proc/self/cgroup names the process's cgroup. A v1 line with the memory controller
//     ("N:memory:/path" or "N:cpu,memory:/path") wins over the v2 line ("0::/path"): on hybrid
//     hosts the v2 hierarchy then holds no memory controller.
//   - v2: memory.max and memory.high of root/sys/fs/cgroup/<path> and of each ancestor up to
//     and including root/sys/fs/cgroup; "max" means none. Files that are absent are skipped
//     (the top cgroup has none), so a path that does not exist in a container's view falls
//     back to its existing ancestors.
//   - v1: memory.limit_in_bytes of root/sys/fs/cgroup/memory/<path> and each ancestor up to
//     root/sys/fs/cgroup/memory (in containers the path often does not exist and the mount
//     root holds the container's limit).
//   - Values >= 2^62 mean none (v1 prints ~2^63 for "unlimited").
//   - Usage is memory.current (v2) / memory.usage_in_bytes (v1) less the reclaimable page
//     cache, inactive_file ("total_inactive_file" on v1) from memory.stat, as the kubelet's
//     working set: page cache charged to the job by earlier reads is not memory in use.
//   - Of several limits on the path, the one leaving the least room (limit - usage) is kept;
//     with equal usage (memory.max and memory.high of one cgroup) that is the smaller limit.
//
// Slurm rules (read through an environment lookup, normally getenv):
//   - SLURM_MEM_PER_NODE (MB) is the per-node grant.
//   - SLURM_MEM_PER_CPU (MB) x CPUs of this job on this node: SLURM_CPUS_ON_NODE, else the
//     first number of SLURM_JOB_CPUS_PER_NODE ("32(x2)" -> 32).
//   - SLURM_MEM_PER_GPU (MB) x GPUs on this node: SLURM_GPUS_ON_NODE, else the number of
//     comma-separated entries of SLURM_STEP_GPUS, else of CUDA_VISIBLE_DEVICES, else 1.
//   - Values are MB (2^20 bytes) when plain; some Slurm versions add a suffix K/M/G/T
//     (powers of 1024, e.g. "4096M", "4G"), which is honoured. If several are set, the
//     smallest grant is kept. If none is set (or none parses), the Slurm limit is unknown.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::comm {
class MpiCommunicator;
}

namespace tessera::plan {

/// One limit in bytes and where it came from ("" source and bytes == 0: unknown / none).
/// A limit that is known but leaves nothing (a full disk, a cgroup at its limit) has
/// bytes == 1, so that known() never mistakes it for "no limit".
struct Limit {
  std::uint64_t bytes = 0;
  std::string source;  ///< e.g. "MemAvailable in /proc/meminfo", "cgroup v2 memory.max
                       ///< (/sys/fs/cgroup/...)", "SLURM_MEM_PER_GPU=40960 (MB) x 1 GPU",
                       ///< "--host-budget 8G"
  bool known() const { return bytes > 0; }
};

/// Facts about this process's host memory, read from files under `root` (normally "/") and
/// from an environment lookup (normally getenv): tests point both at fixtures.
struct HostFacts {
  std::uint64_t mem_total = 0, mem_available = 0;  ///< /proc/meminfo (bytes; 0: not found)
  /// The cgroup memory limit on this process's path that leaves the least room (see the
  /// rules above); unknown when there is none. Usage is NOT subtracted here.
  Limit cgroup;
  /// Usage of the cgroup whose limit is `cgroup` (memory.current / memory.usage_in_bytes
  /// less inactive_file of memory.stat), bytes.
  std::uint64_t cgroup_usage = 0;
  Limit slurm;  ///< per-NODE memory Slurm grants this job step on this node (rules above)
  std::vector<std::string> notes;  ///< one line per source looked at: what was found or why
                                   ///< it was skipped
};

/// Environment lookup: returns the value of a variable or nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

/// Reads /proc/meminfo, /proc/self/cgroup and the cgroup files under `root`, and the Slurm
/// variables through `env` (empty: ::getenv). Never throws on a missing or odd file or
/// variable: records a note instead.
HostFacts read_host_facts(const std::string& root = "/", const EnvLookup& env = {});

/// Host bytes ONE rank may use: the smallest known of MemAvailable, the cgroup limit minus
/// the cgroup's usage plus `own_rss` (this process's current RSS, which the usage counts;
/// what other processes of the cgroup will use is unknowable), and the Slurm per-node grant;
/// divided by `ranks_on_node` (>= 1). The source names the winner and the division, e.g.
/// "MemAvailable in /proc/meminfo (120.30 GB) / 4 ranks on this node". Unknown (bytes 0,
/// source "") when no fact is known.
Limit host_limit(const HostFacts& f, int ranks_on_node, std::uint64_t own_rss = 0);

/// Free bytes for spills in `dir` (statvfs f_bavail * f_frsize); source "free space in DIR".
/// A full disk gives bytes == 1 (known, leaves nothing); a folder that cannot be queried
/// gives bytes == 0 with a source saying why.
Limit disk_free(const std::string& dir);

/// Ranks of `world` on this node: the size of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
/// Collective over `world`.
int ranks_on_node(const comm::MpiCommunicator& world);

/// Current and peak resident set of this process from /proc/self/status (VmRSS, VmHWM),
/// bytes; zeros when the file cannot be read.
struct ProcessMemory {
  std::uint64_t rss = 0, hwm = 0;
};
/// Reads root/proc/self/status (`root` other than "/" only for tests).
ProcessMemory process_memory(const std::string& root = "/");

/// Resets VmHWM to the current RSS (writes "5" to /proc/self/clear_refs, Linux >= 4.0);
/// false if that is not allowed or not supported.
bool reset_peak_rss();

/// "8G" / "512M" / "64K" / "1e9" / "40GB" -> bytes (K, M, G, T are powers of 1024, an
/// optional B/b after them or after a plain number is ignored). InputError naming `what`
/// (the option) on anything else, and on sizes < 1 byte, NaN, infinity or >= 2^64.
std::uint64_t parse_bytes(const std::string& s, const char* what);

/// Human-readable byte count in powers of 1024 with two decimals, the units parse_bytes reads:
/// "1.25 GiB", "512.00 B".
std::string human_bytes(double b);

}  // namespace tessera::plan
