// Internal to the CUDA SpTC: the host arrays of an output, sized (and their pages faulted
// in) on helper threads while the device works. Not a public header.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/sptc/common.cuh"
#include "util/huge_pages.hpp"

namespace tessera::kernels::cuda::sptc {

/// Sizes the output's arrays to n on helper threads, so the first touch of their pages
/// overlaps the device work; join() waits (and rethrows). Joins in the destructor too.
/// The arrays' storage is reserved first and its pages faulted in by several threads at
/// once (one write per page of the still unconstructed storage); each array's resize then
/// only writes its zeros on pages already there. Faulting the pages in is what one thread
/// per array was slow at (docs/perf/gpu-h200-sptc.md, "Phases").
template <typename T>
class HostOutput {
 public:
  /// The arrays of a sink (ContractSink::output, called on the helper thread with the
  /// device set): buffers kept by the caller, usually page-locked and already sized.
  HostOutput(ContractSink<T>& sink, const std::vector<u64>& dims, std::size_t n, int device) {
    th_ = std::thread([this, &sink, dims, n, device] {
      try {
        TESSERA_CUDA_CHECK(cudaSetDevice(device));
        SparseTensor<T>& o = sink.output(dims, n);
        TESSERA_EXPECTS(o.idx.size() == dims.size() && o.vals.size() == n,
                        "SpTC output sink: arrays of the wrong size");
        for (const auto& c : o.idx)
          TESSERA_EXPECTS(c.size() == n, "SpTC output sink: arrays of the wrong size");
        target_ = &o;
      } catch (...) {
        err_ = std::current_exception();
      }
    });
  }
  HostOutput(SparseTensor<T>& out, std::size_t n) : target_(&out) {
    std::vector<std::pair<char*, std::size_t>> spans;
    try {
      for (auto& col : out.idx) {
        col.reserve(n);
        spans.emplace_back(reinterpret_cast<char*>(col.data()), n * sizeof(index_t));
      }
      out.vals.reserve(n);
      spans.emplace_back(reinterpret_cast<char*>(out.vals.data()), n * sizeof(T));
      for (const auto& sp : spans) util::advise_huge_pages(sp.first, sp.second);
    } catch (...) {
      err_ = std::current_exception();
      return;
    }
    th_ = std::thread([this, spans, &out, n] {
      try {
        touch(spans);
        std::vector<std::thread> th;
        std::vector<std::exception_ptr> err(out.idx.size() + 1);
        for (std::size_t k = 0; k <= out.idx.size(); ++k)
          th.emplace_back([&, k] {
            try {
              if (k < out.idx.size())
                out.idx[k].resize(n);
              else
                out.vals.resize(n);
            } catch (...) {
              err[k] = std::current_exception();
            }
          });
        for (auto& t : th) t.join();
        for (auto& e : err)
          if (e) std::rethrow_exception(e);
      } catch (...) {
        err_ = std::current_exception();
      }
    });
  }
  ~HostOutput() { wait(); }
  HostOutput(const HostOutput&) = delete;
  HostOutput& operator=(const HostOutput&) = delete;
  void join() {
    wait();
    if (err_) std::rethrow_exception(err_);
  }
  /// The tensor to download into (after join()).
  SparseTensor<T>& target() const { return *target_; }

 private:
  /// Writes one byte per 4 KiB page of the spans, the pages split over threads: this
  /// process's share of the node's cores (OMPI_COMM_WORLD_LOCAL_SIZE ranks), 1 to 16.
  static void touch(const std::vector<std::pair<char*, std::size_t>>& spans) {
    constexpr std::size_t kPage = 4096;
    std::size_t pages = 0;
    for (const auto& s : spans) pages += (s.second + kPage - 1) / kPage;
    if (pages == 0) return;
    int local = 1;
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      local = std::max(1, std::atoi(v));
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int nt = static_cast<int>(std::clamp<std::size_t>(
        std::min<std::size_t>(static_cast<std::size_t>(hw / local), pages / 256), 1, 16));
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t)
      th.emplace_back([&spans, t, nt] {
        for (const auto& s : spans) {
          const std::size_t np = (s.second + kPage - 1) / kPage;
          const std::size_t lo = np * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
          const std::size_t hi =
              np * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
          volatile char* p = s.first;
          for (std::size_t q = lo; q < hi; ++q) p[q * kPage] = 0;
        }
      });
    for (auto& t : th) t.join();
  }
  void wait() noexcept {
    if (th_.joinable()) th_.join();
  }
  std::exception_ptr err_;  // written by th_ only, read after join
  SparseTensor<T>* target_ = nullptr;
  std::thread th_;
};

}  // namespace tessera::kernels::cuda::sptc
