// The thread default under mpirun/srun (issue 36, point 6): without --threads and
// OMP_NUM_THREADS every rank takes the node's CPUs divided by the ranks on the node
// (util::default_threads_per_rank), the node's CPUs being the smallest of the ranks'
// affinity masks, the cgroup CPU quota and Slurm's grant (util::node_cpu_limit).
#include <gtest/gtest.h>

#include <optional>

#include "util/cpus.hpp"

namespace tessera::util {
namespace {

TEST(ThreadsDefault, NodeCpusDividedByTheRanksOnTheNode) {
  EXPECT_EQ(default_threads_per_rank(64, 4, 64), 16);  // mpirun -np 4 on a 64-CPU node
  EXPECT_EQ(default_threads_per_rank(64, 1, 64), 64);  // one rank: the whole node
  EXPECT_EQ(default_threads_per_rank(32, 2, 32), 16);  // 2 GPUs, 32 CPUs
  EXPECT_EQ(default_threads_per_rank(64, 3, 64), 21);  // rounded down: 63 threads in all
  EXPECT_EQ(default_threads_per_rank(2, 2, 2), 1);     // this CI machine at 2 ranks
}

TEST(ThreadsDefault, AtLeastOneThreadWhenRanksOutnumberCpus) {
  EXPECT_EQ(default_threads_per_rank(2, 3, 2), 1);
  EXPECT_EQ(default_threads_per_rank(1, 8, 1), 1);
  EXPECT_EQ(default_threads_per_rank(0, 0, 0), 1);  // nonsense in, one thread out
}

TEST(ThreadsDefault, NeverMoreThanTheRanksOwnCpus) {
  // 64 CPUs over 2 ranks, but each rank is bound to 8 cores: 8 each, not 32.
  EXPECT_EQ(default_threads_per_rank(64, 2, 8), 8);
}

TEST(ThreadsDefault, SlurmsGrantSmallerThanTheMaskWins) {
  const CpuLimit l = node_cpu_limit(64, "mask", std::nullopt, "", "8");
  EXPECT_EQ(l.cpus, 8);
  EXPECT_NE(l.source.find("SLURM_CPUS_ON_NODE"), std::string::npos) << l.source;
  EXPECT_EQ(default_threads_per_rank(l.cpus, 2, 64), 4);  // srun -n 2 -c 4: 4 threads each
  // A grant larger than the mask does not add CPUs; nonsense is ignored.
  EXPECT_EQ(node_cpu_limit(16, "mask", std::nullopt, "", "64").cpus, 16);
  for (const char* bad : {"", "0", "-4", "8x", "lots"}) {
    const CpuLimit b = node_cpu_limit(16, "mask", std::nullopt, "", bad);
    EXPECT_EQ(b.cpus, 16) << bad;
    EXPECT_EQ(b.source, "mask") << bad;
  }
  EXPECT_EQ(node_cpu_limit(16, "mask", std::nullopt, "", nullptr).cpus, 16);
}

TEST(ThreadsDefault, TheSmallestOfMaskQuotaAndSlurm) {
  const CpuLimit q = node_cpu_limit(64, "mask", 6, "cgroup v2 /sys/fs/cgroup/x/cpu.max", "12");
  EXPECT_EQ(q.cpus, 6);
  EXPECT_EQ(q.source, "the CPU quota of cgroup v2 /sys/fs/cgroup/x/cpu.max");
  EXPECT_EQ(default_threads_per_rank(q.cpus, 4, 64), 1);
  const CpuLimit s = node_cpu_limit(64, "mask", 24, "quota", "12");
  EXPECT_EQ(s.cpus, 12);
  EXPECT_EQ(default_threads_per_rank(s.cpus, 4, 64), 3);
  EXPECT_EQ(node_cpu_limit(4, "mask", 24, "quota", nullptr).cpus, 4);
}

}  // namespace
}  // namespace tessera::util
