// Shared by the GPU tests: whether every rank of the job has a GPU of its own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "util/log.hpp"

namespace tessera::comm {

inline int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// Empty when every rank has a GPU of its own (the same answer on every rank), else why not.
inline std::string gpu_per_rank(const MpiCommunicator& world) {
  const int n = visible_devices();
  const std::int32_t have = n > 0 ? 1 : 0;
  if (world.allreduce_value(have, ReduceOp::min) == 0) return "no CUDA device visible";
  // The device make_nccl_communicator will pick; two ranks on one GPU cannot run.
  const int device = local_rank(world) % n;
  char bus[64] = {0};
  std::uint64_t key[2] = {std::hash<std::string>{}(log::hostname()), 0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess)
    key[1] = std::hash<std::string>{}(bus);
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(world.size()));
  world.allgather(key, all.data(), 2);
  for (int a = 0; a < world.size(); ++a)
    for (int b = a + 1; b < world.size(); ++b)
      if (all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1])
        return "fewer GPUs than ranks on a host (" + std::to_string(world.size()) +
               " ranks need one GPU each)";
  return "";
}

}  // namespace tessera::comm
