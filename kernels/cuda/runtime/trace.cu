// The process-wide switch of the CUDA phase traces and the rank their lines name
// (trace.cuh).
#include <atomic>
#include <cstdlib>

#include "kernels/cuda/runtime/trace.cuh"

namespace tessera::kernels::cuda {

namespace {
std::atomic<bool> g_trace{false};
}  // namespace

void set_trace_enabled(bool on) {
  g_trace.store(on, std::memory_order_relaxed);
}

bool trace_enabled() {
  return g_trace.load(std::memory_order_relaxed);
}

const char* trace_rank_name() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return s;
  return "0";
}

}  // namespace tessera::kernels::cuda
