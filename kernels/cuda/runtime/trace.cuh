// Internal to the CUDA backend: wall-clock phases of one operation, printed on stderr when
// tracing is on (Tuning::trace, --trace; docs/sptc.md, "Tracing"). Every mark waits for the whole
// device, so a traced run is slower than an untraced one; the phases say where the time
// of a run goes, the untraced figures say how long it takes.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include "kernels/cuda/runtime/cuda_check.cuh"
#include "kernels/cuda/runtime/memory.cuh"

namespace tessera::kernels::cuda {

/// Tracing is a diagnostic of the process, not of one backend: one process-wide switch,
/// off at start, set by every CUDA backend's set_tuning from Tuning::trace (the last call
/// wins; the drivers give every backend the same options). Defined in trace.cu.
void set_trace_enabled(bool on);
/// Whether PhaseTrace prints (see set_trace_enabled).
bool trace_enabled();
/// The rank of this process as the MPI launcher exports it ("0" when none), for the trace
/// lines. Defined in trace.cu.
const char* trace_rank_name();

/// Phases of one operation: mark(name) closes the phase that began at the previous mark
/// (or at construction). The destructor prints one line:
///   [tessera trace rank R] what: phase 1.23 ms (alloc 0.10) | phase ...
/// where alloc is the part of the phase spent in cudaMalloc/cudaFree of DeviceMemory.
class PhaseTrace {
 public:
  explicit PhaseTrace(std::string what) : on_(trace_enabled()), what_(std::move(what)) {
    if (!on_) return;
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
    t_ = std::chrono::steady_clock::now();
    start_ = t_;
    a_ = alloc_nanos().load();
  }
  ~PhaseTrace() {
    if (!on_) return;
    const double total = std::chrono::duration<double>(t_ - start_).count() * 1e3;
    std::fprintf(stderr, "[tessera trace rank %s] %s:%s | total %.2f ms\n", trace_rank_name(),
                 what_.c_str(), os_.str().c_str(), total);
  }
  PhaseTrace(const PhaseTrace&) = delete;
  PhaseTrace& operator=(const PhaseTrace&) = delete;

  void mark(const char* name) {
    if (!on_) return;
    TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t = std::chrono::steady_clock::now();
    const std::int64_t a = alloc_nanos().load();
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %s %.2f ms", n_++ ? " |" : "", name,
                  std::chrono::duration<double>(t - t_).count() * 1e3);
    os_ << buf;
    if (a - a_ > 10000) {
      std::snprintf(buf, sizeof buf, " (alloc %.2f)", static_cast<double>(a - a_) * 1e-6);
      os_ << buf;
    }
    t_ = t;
    a_ = a;
  }

 private:
  bool on_;
  std::string what_;
  std::ostringstream os_;
  int n_ = 0;
  std::chrono::steady_clock::time_point t_{}, start_{};
  std::int64_t a_ = 0;
};

}  // namespace tessera::kernels::cuda
