// Measured limits of the memory planner (plan_limits): host facts read from fixture trees
// (/proc/meminfo, /proc/self/cgroup, cgroup v1/v2 files) and fixture Slurm variables,
// host_limit's choice and division, parse_bytes / human_bytes, and this process's real
// resident memory (VmRSS, VmHWM, resetting the peak).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "plan/limits.hpp"
#include "util/error.hpp"
#include "util/sysfs.hpp"

namespace tessera::plan {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

/// A fixture root folder, removed at the end of the test.
class Tree {
 public:
  Tree() {
    std::string tmpl = (fs::path(testing::TempDir()) / "tessera_limits_XXXXXX").string();
    char* d = ::mkdtemp(tmpl.data());
    EXPECT_NE(d, nullptr) << "mkdtemp " << tmpl;
    root_ = tmpl;
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }
  /// Writes `text` to root/rel, creating folders.
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream f(p, std::ios::binary);
    f << text;
    ASSERT_TRUE(f.good()) << p;
  }
  /// An absolute path under the root, as the notes and sources print it.
  std::string at(const std::string& rel) const { return root_ + "/" + rel; }

 private:
  std::string root_;
};

/// A fixture environment.
struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

bool has_note(const HostFacts& f, const std::string& part) {
  for (const auto& n : f.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string all_notes(const HostFacts& f) {
  std::string s;
  for (const auto& n : f.notes) s += "  " + n + "\n";
  return s;
}

HostFacts facts(const Tree& t, const Env& e = {}) {
  return read_host_facts(t.root(), e.lookup());
}

// ---- /proc/meminfo ------------------------------------------------------------------------

TEST(PlanLimits, MeminfoTotalAndAvailableInBytes) {
  Tree t;
  t.write("proc/meminfo",
          "MemTotal:       131072000 kB\nMemFree:         1000 kB\n"
          "MemAvailable:   120000000 kB\nBuffers:            0 kB\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.mem_total, 131072000 * kKiB);
  EXPECT_EQ(f.mem_available, 120000000 * kKiB);
}

// ---- cgroup v2 ----------------------------------------------------------------------------

TEST(PlanLimits, CgroupV2LimitAtTheLeaf) {
  Tree t;
  t.write("proc/self/cgroup", "0::/slurm/job_1/step_0\n");
  const std::string leaf = "sys/fs/cgroup/slurm/job_1/step_0";
  t.write(leaf + "/memory.max", "8589934592\n");
  t.write(leaf + "/memory.high", "max\n");
  t.write(leaf + "/memory.current", "1073741824\n");
  t.write(leaf + "/memory.stat", "anon 805306368\nfile 268435456\ninactive_file 268435456\n");
  t.write("sys/fs/cgroup/slurm/job_1/memory.max", "max\n");
  t.write("sys/fs/cgroup/slurm/memory.max", "max\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 8 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup.source, "cgroup v2 memory.max (" + t.at(leaf) + ")");
  // memory.current less the inactive page cache.
  EXPECT_EQ(f.cgroup_usage, 1 * kGiB - 256 * kMiB);
  EXPECT_TRUE(has_note(f, "inactive_file")) << all_notes(f);
}

TEST(PlanLimits, CgroupV2TighterAncestorWins) {
  Tree t;
  t.write("proc/self/cgroup", "0::/slurm/job_1/step_0\n");
  const std::string leaf = "sys/fs/cgroup/slurm/job_1/step_0", job = "sys/fs/cgroup/slurm/job_1";
  t.write(leaf + "/memory.max", "17179869184\n");  // 16 GiB
  t.write(leaf + "/memory.current", "1073741824\n");
  t.write(job + "/memory.max", "4294967296\n");   // 4 GiB
  t.write(job + "/memory.high", "6442450944\n");  // 6 GiB
  t.write(job + "/memory.current", "1073741824\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 4 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup.source, "cgroup v2 memory.max (" + t.at(job) + ")");
  EXPECT_EQ(f.cgroup_usage, 1 * kGiB);  // no memory.stat: usage as read
}

TEST(PlanLimits, CgroupV2MemoryHighBelowMemoryMax) {
  Tree t;
  t.write("proc/self/cgroup", "0::/a\n");
  t.write("sys/fs/cgroup/a/memory.max", "8589934592\n");
  t.write("sys/fs/cgroup/a/memory.high", "6442450944\n");
  t.write("sys/fs/cgroup/a/memory.current", "0\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 6 * kGiB);
  EXPECT_EQ(f.cgroup.source, "cgroup v2 memory.high (" + t.at("sys/fs/cgroup/a") + ")");
}

// An ancestor with a larger limit but more used by others leaves less room: it is the limit.
TEST(PlanLimits, CgroupV2KeepsTheLimitLeavingLeastRoom) {
  Tree t;
  t.write("proc/self/cgroup", "0::/job/step\n");
  t.write("sys/fs/cgroup/job/step/memory.max", "4294967296\n");     // 4 GiB
  t.write("sys/fs/cgroup/job/step/memory.current", "536870912\n");  // 0.5 GiB: 3.5 left
  t.write("sys/fs/cgroup/job/memory.max", "10737418240\n");         // 10 GiB
  t.write("sys/fs/cgroup/job/memory.current", "10200547328\n");     // 9.5 GiB: 0.5 left
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 10 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup_usage, 10200547328u);
  const Limit h = host_limit(f, 1);
  EXPECT_EQ(h.bytes, 512 * kMiB);
}

TEST(PlanLimits, CgroupV2MaxEverywhereIsNoLimit) {
  Tree t;
  t.write("proc/self/cgroup", "0::/user.slice/session\n");
  t.write("sys/fs/cgroup/user.slice/session/memory.max", "max\n");
  t.write("sys/fs/cgroup/user.slice/session/memory.high", "max\n");
  t.write("sys/fs/cgroup/user.slice/memory.max", "max\n");
  t.write("sys/fs/cgroup/user.slice/memory.high", "max\n");
  const HostFacts f = facts(t);
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_EQ(f.cgroup.source, "");
  EXPECT_TRUE(has_note(f, "max (no limit)")) << all_notes(f);
  EXPECT_TRUE(has_note(f, "no memory limit")) << all_notes(f);
}

// A container with its own cgroup namespace sees "0::/" and its limit at the mount root.
TEST(PlanLimits, CgroupV2NamespaceRoot) {
  Tree t;
  t.write("proc/self/cgroup", "0::/\n");
  t.write("sys/fs/cgroup/memory.max", "2147483648\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 2 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup.source, "cgroup v2 memory.max (" + t.at("sys/fs/cgroup") + ")");
}

// ---- cgroup v1 ----------------------------------------------------------------------------

TEST(PlanLimits, CgroupV1WithAPathWinsOverTheV2LineOfAHybridHost) {
  Tree t;
  t.write("proc/self/cgroup",
          "12:memory:/slurm/uid_1/job_2\n5:cpu,cpuacct:/slurm/uid_1/job_2\n0::/user.slice\n");
  const std::string job = "sys/fs/cgroup/memory/slurm/uid_1/job_2";
  t.write(job + "/memory.limit_in_bytes", "34359738368\n");  // 32 GiB
  t.write(job + "/memory.usage_in_bytes", "4294967296\n");
  t.write(job + "/memory.stat", "cache 1\ninactive_file 5\ntotal_inactive_file 1073741824\n");
  t.write("sys/fs/cgroup/memory/slurm/uid_1/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("sys/fs/cgroup/user.slice/memory.max", "1073741824\n");  // v2 without memory: ignored
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 32 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup.source, "cgroup v1 memory.limit_in_bytes (" + t.at(job) + ")");
  EXPECT_EQ(f.cgroup_usage, 3 * kGiB);  // hierarchical inactive file pages taken off
}

TEST(PlanLimits, CgroupV1MemoryAmongOtherControllers) {
  Tree t;
  t.write("proc/self/cgroup", "4:cpu,memory:/batch\n");
  t.write("sys/fs/cgroup/memory/batch/memory.limit_in_bytes", "1073741824\n");
  t.write("sys/fs/cgroup/memory/batch/memory.usage_in_bytes", "1048576\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 1 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup_usage, 1 * kMiB);
}

TEST(PlanLimits, CgroupV1ContainerFallsBackToTheMountRoot) {
  Tree t;
  t.write("proc/self/cgroup", "9:memory:/docker/0123abcd\n");
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
  t.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "104857600\n");
  const HostFacts f = facts(t);
  EXPECT_EQ(f.cgroup.bytes, 2 * kGiB) << all_notes(f);
  EXPECT_EQ(f.cgroup.source,
            "cgroup v1 memory.limit_in_bytes (" + t.at("sys/fs/cgroup/memory") + ")");
  EXPECT_EQ(f.cgroup_usage, 100 * kMiB);
  EXPECT_TRUE(has_note(f, "no such cgroup folder")) << all_notes(f);
}

TEST(PlanLimits, CgroupV1UnlimitedSentinelIsNoLimit) {
  Tree t;
  t.write("proc/self/cgroup", "4:memory:/user\n");
  t.write("sys/fs/cgroup/memory/user/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854775807\n");
  const HostFacts f = facts(t);
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_TRUE(has_note(f, "unlimited")) << all_notes(f);
}

// ---- missing and odd files ---------------------------------------------------------------

TEST(PlanLimits, NoFilesAtAllGiveNotesNotErrors) {
  Tree t;
  HostFacts f;
  EXPECT_NO_THROW(f = facts(t));
  EXPECT_EQ(f.mem_total, 0u);
  EXPECT_EQ(f.mem_available, 0u);
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_FALSE(f.slurm.known());
  EXPECT_TRUE(has_note(f, t.at("proc/meminfo") + ": cannot read")) << all_notes(f);
  EXPECT_TRUE(has_note(f, t.at("proc/self/cgroup") + ": cannot read")) << all_notes(f);
  EXPECT_TRUE(has_note(f, "no Slurm limit")) << all_notes(f);
  EXPECT_FALSE(host_limit(f, 2).known());
}

TEST(PlanLimits, CgroupLineButNoCgroupFiles) {
  Tree t;
  t.write("proc/self/cgroup", "0::/a/b\n");
  HostFacts f;
  EXPECT_NO_THROW(f = facts(t));
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_TRUE(has_note(f, "no memory limit")) << all_notes(f);
}

TEST(PlanLimits, GarbageContentsGiveNotesNotErrors) {
  Tree t;
  t.write("proc/meminfo", "garbage\nMemTotal: lots kB\nMemAvailable: 12 parsecs\n\x01\x02\n");
  t.write("proc/self/cgroup", "hello world\n:::\n0::relative\n0::/a\n");
  t.write("sys/fs/cgroup/a/memory.max", "12abc\n");
  t.write("sys/fs/cgroup/a/memory.high", std::string("\x01\x02\xff", 3));
  t.write("sys/fs/cgroup/memory.max", "-5\n");
  Env e;
  e.vars["SLURM_MEM_PER_NODE"] = "lots";
  e.vars["SLURM_MEM_PER_GPU"] = "4Q";
  HostFacts f;
  EXPECT_NO_THROW(f = facts(t, e));
  EXPECT_EQ(f.mem_total, 0u);
  EXPECT_EQ(f.mem_available, 0u);
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_FALSE(f.slurm.known());
  EXPECT_TRUE(has_note(f, "unreadable line")) << all_notes(f);
  EXPECT_TRUE(has_note(f, "3 malformed lines ignored")) << all_notes(f);
  EXPECT_TRUE(has_note(f, t.at("sys/fs/cgroup/a/memory.max") + ": unreadable value '12abc'"))
      << all_notes(f);
  EXPECT_TRUE(has_note(f, "SLURM_MEM_PER_NODE='lots': not a memory size")) << all_notes(f);
  EXPECT_TRUE(has_note(f, "SLURM_MEM_PER_GPU='4Q': not a memory size")) << all_notes(f);
}

TEST(PlanLimits, CgroupPathWithDotDotIsRefused) {
  Tree t;
  t.write("proc/self/cgroup", "0::/../../etc\n");
  HostFacts f;
  EXPECT_NO_THROW(f = facts(t));
  EXPECT_FALSE(f.cgroup.known());
  EXPECT_TRUE(has_note(f, "'..'")) << all_notes(f);
}

// ---- Slurm --------------------------------------------------------------------------------

HostFacts slurm(std::map<std::string, std::string> vars) {
  Tree t;
  Env e{std::move(vars)};
  return facts(t, e);
}

TEST(PlanLimits, SlurmMemPerNode) {
  const HostFacts f = slurm({{"SLURM_MEM_PER_NODE", "40960"}});
  EXPECT_EQ(f.slurm.bytes, 40960 * kMiB);
  EXPECT_EQ(f.slurm.source, "SLURM_MEM_PER_NODE=40960 (MB)");
}

TEST(PlanLimits, SlurmMemPerCpuTimesCpusOnNode) {
  const HostFacts f = slurm({{"SLURM_MEM_PER_CPU", "4096"},
                             {"SLURM_CPUS_ON_NODE", "8"},
                             {"SLURM_JOB_CPUS_PER_NODE", "64(x2)"}});
  EXPECT_EQ(f.slurm.bytes, 8 * 4096 * kMiB);
  EXPECT_EQ(f.slurm.source, "SLURM_MEM_PER_CPU=4096 (MB) x 8 CPUs (SLURM_CPUS_ON_NODE)");
}

TEST(PlanLimits, SlurmMemPerCpuTimesFirstJobCpusPerNode) {
  const HostFacts f = slurm({{"SLURM_MEM_PER_CPU", "2000"}, {"SLURM_JOB_CPUS_PER_NODE", "32(x2)"}});
  EXPECT_EQ(f.slurm.bytes, 32 * 2000 * kMiB);
  EXPECT_NE(f.slurm.source.find("x 32 CPUs (first of SLURM_JOB_CPUS_PER_NODE=32(x2))"),
            std::string::npos)
      << f.slurm.source;
}

TEST(PlanLimits, SlurmMemPerGpuTimesGpusOnNode) {
  const HostFacts f = slurm(
      {{"SLURM_MEM_PER_GPU", "40960"}, {"SLURM_GPUS_ON_NODE", "4"}, {"CUDA_VISIBLE_DEVICES", "0"}});
  EXPECT_EQ(f.slurm.bytes, 4 * 40960 * kMiB);
  EXPECT_EQ(f.slurm.source, "SLURM_MEM_PER_GPU=40960 (MB) x 4 GPUs (SLURM_GPUS_ON_NODE)");
}

TEST(PlanLimits, SlurmMemPerGpuTimesVisibleDevices) {
  const HostFacts f = slurm({{"SLURM_MEM_PER_GPU", "40960"}, {"CUDA_VISIBLE_DEVICES", "0,1,2"}});
  EXPECT_EQ(f.slurm.bytes, 3 * 40960 * kMiB);
  EXPECT_EQ(f.slurm.source,
            "SLURM_MEM_PER_GPU=40960 (MB) x 3 GPUs (entries of CUDA_VISIBLE_DEVICES=0,1,2)");
  // SLURM_STEP_GPUS comes before CUDA_VISIBLE_DEVICES.
  const HostFacts g = slurm({{"SLURM_MEM_PER_GPU", "1024"},
                             {"SLURM_STEP_GPUS", "4,5"},
                             {"CUDA_VISIBLE_DEVICES", "0,1,2"}});
  EXPECT_EQ(g.slurm.bytes, 2 * kGiB);
  // No GPU count at all: one GPU.
  const HostFacts h = slurm({{"SLURM_MEM_PER_GPU", "40960"}});
  EXPECT_EQ(h.slurm.bytes, 40960 * kMiB);
  EXPECT_EQ(h.slurm.source.rfind("SLURM_MEM_PER_GPU=40960 (MB) x 1 GPU", 0), 0u) << h.slurm.source;
}

TEST(PlanLimits, SlurmSuffixedValues) {
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "4G"}}).slurm.bytes, 4 * kGiB);
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "4G"}}).slurm.source, "SLURM_MEM_PER_NODE=4G");
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "4096M"}}).slurm.bytes, 4 * kGiB);
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "1T"}}).slurm.bytes, 1024 * kGiB);
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "524288K"}}).slurm.bytes, 512 * kMiB);
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_NODE", "8GB"}}).slurm.bytes, 8 * kGiB);
  EXPECT_EQ(slurm({{"SLURM_MEM_PER_CPU", "2G"}, {"SLURM_CPUS_ON_NODE", "4"}}).slurm.bytes,
            8 * kGiB);
}

TEST(PlanLimits, SlurmUnsetOrAllMemoryIsUnknown) {
  const HostFacts none = slurm({{"SLURM_JOB_ID", "12"}, {"CUDA_VISIBLE_DEVICES", "0"}});
  EXPECT_FALSE(none.slurm.known());
  EXPECT_EQ(none.slurm.source, "");
  const HostFacts all = slurm({{"SLURM_MEM_PER_NODE", "0"}});
  EXPECT_FALSE(all.slurm.known());
  EXPECT_TRUE(has_note(all, "all the node's memory")) << all_notes(all);
}

TEST(PlanLimits, SlurmSeveralGrantsKeepTheSmallest) {
  const HostFacts f = slurm({{"SLURM_MEM_PER_NODE", "65536"},
                             {"SLURM_MEM_PER_CPU", "1024"},
                             {"SLURM_CPUS_ON_NODE", "16"}});
  EXPECT_EQ(f.slurm.bytes, 16 * kGiB);
  EXPECT_EQ(f.slurm.source.rfind("SLURM_MEM_PER_CPU", 0), 0u) << f.slurm.source;
}

// ---- host_limit ---------------------------------------------------------------------------

TEST(PlanLimits, HostLimitPicksTheSmallestAndDividesAmongRanks) {
  HostFacts f;
  f.mem_available = 100 * kGiB;
  f.cgroup = {64 * kGiB, "cgroup v2 memory.max (/sys/fs/cgroup/job)"};
  f.cgroup_usage = 10 * kGiB;
  f.slurm = {40 * kGiB, "SLURM_MEM_PER_NODE=40960 (MB)"};

  // Slurm's 40 GiB is below the cgroup's 64 - 10 + 2 = 56 GiB and MemAvailable.
  Limit h = host_limit(f, 4, 2 * kGiB);
  EXPECT_EQ(h.bytes, 10 * kGiB);
  EXPECT_EQ(h.source, "SLURM_MEM_PER_NODE=40960 (MB) (40.00 GiB) / 4 ranks on this node");

  // Without Slurm, the cgroup's room wins.
  f.slurm = {};
  h = host_limit(f, 2, 2 * kGiB);
  EXPECT_EQ(h.bytes, 28 * kGiB);
  EXPECT_EQ(h.source,
            "cgroup v2 memory.max (/sys/fs/cgroup/job) (64.00 GiB - usage 10.00 GiB + own RSS "
            "2.00 GiB) / 2 ranks on this node");

  // Without the cgroup, MemAvailable.
  f.cgroup = {};
  h = host_limit(f, 1);
  EXPECT_EQ(h.bytes, 100 * kGiB);
  EXPECT_EQ(h.source, "MemAvailable in /proc/meminfo (100.00 GiB) / 1 rank on this node");

  // Nothing known: unknown.
  EXPECT_FALSE(host_limit(HostFacts{}, 3).known());
  EXPECT_EQ(host_limit(HostFacts{}, 3).source, "");
  EXPECT_THROW(host_limit(f, 0), Error);
}

TEST(PlanLimits, HostLimitOfAFullCgroupIsKnownAndTiny) {
  HostFacts f;
  f.mem_available = 100 * kGiB;
  f.cgroup = {8 * kGiB, "cgroup v1 memory.limit_in_bytes (/x)"};
  f.cgroup_usage = 9 * kGiB;  // over its limit (memory.high can be exceeded)
  const Limit h = host_limit(f, 2);
  EXPECT_TRUE(h.known());
  EXPECT_EQ(h.bytes, 1u);
  EXPECT_NE(h.source.find("cgroup v1"), std::string::npos);
}

TEST(PlanLimits, HostLimitFromAFixtureTree) {
  Tree t;
  t.write("proc/meminfo", "MemTotal: 33554432 kB\nMemAvailable: 25165824 kB\n");  // 32, 24 GiB
  t.write("proc/self/cgroup", "0::/job\n");
  t.write("sys/fs/cgroup/job/memory.max", "17179869184\n");  // 16 GiB
  t.write("sys/fs/cgroup/job/memory.current", "4294967296\n");
  Env e;
  e.vars["SLURM_MEM_PER_NODE"] = "20G";
  const HostFacts f = facts(t, e);
  const Limit h = host_limit(f, 3, 1 * kGiB);  // 16 - 4 + 1 = 13 GiB of the cgroup
  EXPECT_EQ(h.bytes, 13 * kGiB / 3);
  EXPECT_EQ(h.source.rfind("cgroup v2 memory.max (" + t.at("sys/fs/cgroup/job") + ")", 0), 0u)
      << h.source;
  EXPECT_NE(h.source.find("/ 3 ranks on this node"), std::string::npos) << h.source;
}

// ---- parse_bytes, human_bytes ----------------------------------------------------------

TEST(PlanLimits, ParseBytesGood) {
  EXPECT_EQ(parse_bytes("8G", "--host-budget"), 8 * kGiB);
  EXPECT_EQ(parse_bytes("512M", "--host-budget"), 512 * kMiB);
  EXPECT_EQ(parse_bytes("64K", "--host-budget"), 64 * kKiB);
  EXPECT_EQ(parse_bytes("1e9", "--host-budget"), 1000000000u);
  EXPECT_EQ(parse_bytes("40GB", "--host-budget"), 40 * kGiB);
  EXPECT_EQ(parse_bytes("8GiB", "--host-budget"), 8 * kGiB);
  EXPECT_EQ(parse_bytes("2t", "--host-budget"), 2048 * kGiB);
  EXPECT_EQ(parse_bytes("1.5g", "--host-budget"), 1536 * kMiB);
  EXPECT_EQ(parse_bytes("4096", "--host-budget"), 4096u);
  EXPECT_EQ(parse_bytes("4096b", "--host-budget"), 4096u);
  EXPECT_EQ(parse_bytes("15T", "--host-budget"), 15 * 1024 * kGiB);
}

TEST(PlanLimits, ParseBytesBadNamesTheOption) {
  for (const char* bad : {"abc", "8X", "8 G", "-1G", "0", "0.5", "nan", "inf", "1e30", "2e19",
                          "16777216T", "G", "8GG"}) {
    try {
      parse_bytes(bad, "--device-budget");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bad --device-budget '" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("expected a"), std::string::npos) << m;
    }
  }
  try {
    parse_bytes("", "--mem-budget");
    ADD_FAILURE() << "an empty size was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--mem-budget is empty");
  }
}

TEST(PlanLimits, HumanBytes) {
  EXPECT_EQ(human_bytes(1.25e9), "1.16 GiB");
  EXPECT_EQ(human_bytes(512), "512.00 B");
  EXPECT_EQ(human_bytes(80.0 * (1ull << 30)), "80.00 GiB");  // --device-budget 80G
  EXPECT_EQ(human_bytes(999.0e3), "975.59 KiB");
  EXPECT_EQ(human_bytes(120.3e9), "112.04 GiB");
  EXPECT_EQ(human_bytes(2.5e12), "2.27 TiB");
  EXPECT_EQ(human_bytes(3.0e15), "2728.48 TiB");
}

// ---- disk ---------------------------------------------------------------------------------

TEST(PlanLimits, DiskFreeOfTheTempFolder) {
  Tree t;
  const Limit d = disk_free(t.root());
  EXPECT_TRUE(d.known());
  EXPECT_EQ(d.source.rfind("free space in " + t.root(), 0), 0u) << d.source;
  const Limit none = disk_free(t.at("no/such/folder"));
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_NE(none.source.find("unknown (statvfs: "), std::string::npos) << none.source;
}

// ---- this process ---------------------------------------------------------------------------

TEST(PlanLimits, ProcessMemoryFromAFixture) {
  Tree t;
  t.write("proc/self/status", "Name:\tx\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads: 1\n");
  const ProcessMemory m = process_memory(t.root());
  EXPECT_EQ(m.rss, 100 * kMiB);
  EXPECT_EQ(m.hwm, 200 * kMiB);
  const ProcessMemory none = process_memory(t.at("nothing"));
  EXPECT_EQ(none.rss, 0u);
  EXPECT_EQ(none.hwm, 0u);
}

/// Maps and writes every page of `bytes` fresh anonymous memory; unmapped by the caller.
char* touch_fresh(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  volatile char* c = static_cast<char*>(p);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t i = 0; i < bytes; i += page) c[i] = static_cast<char>(i / page + 1);
  return static_cast<char*>(p);
}

TEST(PlanLimits, PrivateResidentBytesAddAnonAndShmem) {
  // What an NCCL communicator's initialisation is charged on the host (its growth): anonymous
  // and shared-memory pages, not the mapped files (libraries) VmRSS also counts.
  Tree t;
  t.write("proc/self/status",
          "VmRSS:\t  409600 kB\nRssAnon:\t  102400 kB\nRssFile:\t  300000 kB\n"
          "RssShmem:\t    7200 kB\n");
  EXPECT_EQ(util::private_resident_bytes(t.root()), std::optional<std::uint64_t>(109600 * 1024));
  Tree old;  // a kernel before 4.5 has no RssAnon line: unknown, not 0
  old.write("proc/self/status", "VmRSS:\t  409600 kB\n");
  EXPECT_EQ(util::private_resident_bytes(old.root()), std::nullopt);
  EXPECT_EQ(util::private_resident_bytes(t.at("nothing")), std::nullopt);
  // This process: touching 64 MiB of fresh anonymous memory grows it by about that much.
  const auto before = util::private_resident_bytes();
  ASSERT_TRUE(before.has_value());
  constexpr std::size_t kBytes = 64 * kMiB;
  char* p = touch_fresh(kBytes);
  ASSERT_NE(p, nullptr);
  const auto after = util::private_resident_bytes();
  ::munmap(p, kBytes);
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, *before + 60 * kMiB);
}

TEST(PlanLimits, ProcessMemoryOfThisProcess) {
  const ProcessMemory m = process_memory();
  EXPECT_GT(m.rss, 0u);
  EXPECT_GE(m.hwm, m.rss);
}

TEST(PlanLimits, ResetPeakRssThenTouchRaisesThePeak) {
  constexpr std::size_t kBytes = 64 * kMiB;
  // Raise the peak well above the current RSS, then give the memory back.
  char* first = touch_fresh(kBytes);
  ASSERT_NE(first, nullptr);
  ::munmap(first, kBytes);
  const ProcessMemory high = process_memory();
  ASSERT_GE(high.hwm, high.rss + 60 * kMiB) << "rss " << high.rss << " hwm " << high.hwm;

  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
  const ProcessMemory reset = process_memory();
  EXPECT_LT(reset.hwm, reset.rss + 60 * kMiB) << "the reset did not lower VmHWM";

  char* second = touch_fresh(kBytes);
  ASSERT_NE(second, nullptr);
  const ProcessMemory after = process_memory();
  ::munmap(second, kBytes);
  EXPECT_GE(after.hwm, reset.hwm + 60 * kMiB) << "hwm " << reset.hwm << " -> " << after.hwm;
  EXPECT_GE(after.hwm, after.rss);
}

}  // namespace
}  // namespace tessera::plan
