// Internal to the CUDA backend: wall-clock phases of one operation, printed on stderr when
// TESSERA_CUDA_TRACE is set (docs/sptc.md, "Tracing"). Every mark waits for the whole
// device, so a traced run is slower than an untraced one; the phases say where the time
// of a run goes, the untraced figures say how long it takes.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/detail.cuh"

namespace tessera::kernels::cuda {

/// True when TESSERA_CUDA_TRACE is set to anything but "" or "0" (read once).
inline bool trace_enabled() {
  static const bool on = [] {
    const char* s = std::getenv("TESSERA_CUDA_TRACE");
    return s != nullptr && *s != '\0' && std::strcmp(s, "0") != 0;
  }();
  return on;
}

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
    std::fprintf(stderr, "[tessera trace rank %s] %s:%s | total %.2f ms\n", rank_name(),
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
  static const char* rank_name() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
      if (const char* s = std::getenv(v)) return s;
    return "0";
  }
  bool on_;
  std::string what_;
  std::ostringstream os_;
  int n_ = 0;
  std::chrono::steady_clock::time_point t_{}, start_{};
  std::int64_t a_ = 0;
};

}  // namespace tessera::kernels::cuda
