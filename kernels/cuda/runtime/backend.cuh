// Internal to the CUDA backend: its executor, CudaBackend<T> (kernels/backend.hpp,
// Backend<T>): device memory, one stream, cuBLAS/cuSOLVER handles (Context, detail.cuh),
// budgets and tuning. The operations (kernels/ops/) are not members: the cuda:: definitions
// in mttkrp/ops.cu, ttmc/ops.cu, sptc/ops.cu and dense/ops.cu cast their executor to this
// class and call the folder's functions on its context.
//
// Stream semantics: every operation is enqueued on the backend's stream, which is a
// *blocking* stream (it synchronises with the legacy default stream). Operations that
// hand data to the host (download, column_norms, column_dots, solve_normal's return
// value) and upload complete before they return; the others may still be running when
// they return. The NCCL communicator orders its collectives after all earlier work of
// blocking streams (see comm/nccl_communicator.cu), so device buffers written here can
// be passed to it without an explicit synchronize().
//
// A tier-2 tensor (host-resident, streamed; see mttkrp/mttkrp.cu) adds a non-blocking stream
// per tensor handle for its chunk copies. mttkrp makes the backend's stream wait (by
// event) for every copy it enqueues, and its last kernel runs on the backend's stream,
// so the contract above holds unchanged: the output is complete, and the chunk copies
// are done, once the backend's stream has passed the mttkrp. mttkrp_accumulate (memory
// tier 3, mttkrp/stream.cu) likewise copies on a stream of its own and computes on the
// backend's stream; it returns once its copies are done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/backend.hpp"
#include "kernels/cuda/mttkrp/stream.cuh"
#include "kernels/cuda/runtime/detail.cuh"
#include "kernels/cuda/runtime/trace.cuh"

namespace tessera::kernels::cuda {

/// The warning of a double backend given --gather-precision fp16|bf16 (backend.cu).
void warn_double_gathers(GatherPrecision g);

template <typename T>
class CudaBackend final : public Backend<T> {
 public:
  CudaBackend() = default;

  BackendKind kind() const override { return BackendKind::cuda; }
  std::string name() const override {
    cudaDeviceProp p{};
    std::ostringstream os;
    os << "cuda";
    if (cudaGetDeviceProperties(&p, ctx_.device) == cudaSuccess)
      os << " (device " << ctx_.device << ": " << p.name << ")";
    return os.str();
  }
  MemorySpace memory_space() const override { return MemorySpace::device; }
  void synchronize() override {
    DeviceGuard g(ctx_.device);
    ctx_.sync();
  }
  void* native_stream() override { return ctx_.stream; }
  std::function<void(void*)> set_stream_waiter(std::function<void(void*)> w) override {
    std::swap(ctx_.waiter, w);
    return w;
  }
  bool has_stream_marks() const override { return true; }
  std::size_t stream_mark() override {
    TESSERA_EXPECTS(!ctx_.capturing, "stream_mark: the stream is being captured");
    DeviceGuard g(ctx_.device);
    ctx_.marks.ensure(ctx_.marks_used + 1);
    TESSERA_CUDA_CHECK(cudaEventRecord(ctx_.marks[ctx_.marks_used], ctx_.stream));
    return ctx_.marks_used++;
  }
  std::vector<double> take_marks() override {
    const std::size_t n = ctx_.marks_used;
    std::vector<double> t(n, 0.0);
    if (n == 0) return t;
    ctx_.marks_used = 0;
    DeviceGuard g(ctx_.device);
    if (ctx_.waiter) ctx_.sync();  // through the waiter (collectives in the stream)
    TESSERA_CUDA_CHECK(cudaEventSynchronize(ctx_.marks[n - 1]));
    for (std::size_t k = 1; k < n; ++k) {
      float ms = 0;
      TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, ctx_.marks[0], ctx_.marks[k]));
      t[k] = 1e-3 * static_cast<double>(ms);
    }
    return t;
  }

  Array<T> allocate(std::size_t n) override { return device_array<T>(n); }
  void upload(const T* host, std::size_t n, T* dst) override {
    copy_sync(dst, host, n * sizeof(T), cudaMemcpyHostToDevice);
  }
  void download(const T* src, std::size_t n, T* host) override {
    copy_sync(host, src, n * sizeof(T), cudaMemcpyDeviceToHost);
  }

  void copy(const T* src, std::size_t n, T* dst) override {
    if (n == 0 || src == dst) return;
    DeviceGuard g(ctx_.device);
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, ctx_.stream));
  }

  void fill(T* dst, std::size_t n, T value) override {
    DeviceGuard g(ctx_.device);
    cuda::fill(ctx_, dst, n, value);
  }

  Array<double> allocate_double(std::size_t n) override { return device_array<double>(n); }
  void upload_double(const double* host, std::size_t n, double* dst) override {
    copy_sync(dst, host, n * sizeof(double), cudaMemcpyHostToDevice);
  }
  void download_double(const double* src, std::size_t n, double* host) override {
    copy_sync(host, src, n * sizeof(double), cudaMemcpyDeviceToHost);
  }
  // The row maps of Tucker's dense stage (dense/tucker_dense.cu).
  Array<std::int64_t> upload_index(const std::int64_t* host, std::size_t n) override {
    Array<std::int64_t> a = device_array<std::int64_t>(n);
    copy_sync(a.data(), host, n * sizeof(std::int64_t), cudaMemcpyHostToDevice);
    return a;
  }
  std::unique_ptr<HostPin> pin_host(const void* p, std::size_t bytes) override {
    return cuda::pin_host(ctx_.device, p, bytes);
  }

  void set_rank_hint(int R) override {
    Backend<T>::set_rank_hint(R);
    ctx_.rank_hint = this->rank_hint();
  }
  void set_workload(Workload w) override {
    Backend<T>::set_workload(w);
    ctx_.workload = w;
  }
  /// The options reach the kernels through ctx_ (layout fields at the next prepare, kernel
  /// choices per call); Tuning::trace switches the process-wide phase traces (trace.cuh).
  void set_tuning(const Tuning& t) override {
    Backend<T>::set_tuning(t);  // checks t; throws before anything changes
    if (std::is_same_v<T, double> && t.gather_precision != GatherPrecision::full &&
        t.gather_precision != ctx_.tuning.gather_precision)
      warn_double_gathers(t.gather_precision);
    ctx_.tuning = t;
    set_trace_enabled(t.trace);
  }

  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    DeviceGuard g(ctx_.device);
    return cuda::prepare_tensor(ctx_, x, this->memory_budget());
  }

  using Backend<T>::prepare_synthetic;
  std::unique_ptr<TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                     const synthetic::Window& w,
                                                     std::uint64_t first_id,
                                                     std::uint64_t count) override {
    DeviceGuard g(ctx_.device);
    return cuda::prepare_synthetic<T>(ctx_, spec, w, first_id, count, this->memory_budget());
  }

  /// The device, stream, handles and scratch every operation runs on.
  Context& ctx() { return ctx_; }
  const Context& ctx() const { return ctx_; }
  /// ops::mttkrp_accumulate's buffers and streams, made at the first call.
  ChunkAccumulator<T>& accumulator() {
    if (!accumulator_) accumulator_ = std::make_unique<ChunkAccumulator<T>>(ctx_);
    return *accumulator_;
  }
  /// Null before the first ops::mttkrp_accumulate.
  ChunkAccumulator<T>* accumulator_if_made() { return accumulator_.get(); }

 private:
  /// n elements of device memory, freed by the Array; a failed cudaMalloc throws with the
  /// device's free memory.
  template <typename U>
  Array<U> device_array(std::size_t n) {
    if (n == 0) return Array<U>();
    DeviceGuard g(ctx_.device);
    void* p = nullptr;
    const cudaError_t e = malloc_or_trim(&p, n * sizeof(U));
    if (e != cudaSuccess) {
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      TESSERA_THROW("cudaMalloc of " << n * sizeof(U) << " bytes failed on device " << ctx_.device
                                     << " (" << detail::cuda_error_text(e) << "; " << free_b
                                     << " of " << total_b << " bytes free)");
    }
    // The deleter must not throw; cudaFree waits for work still using the block.
    return Array<U>(static_cast<U*>(p), n, [](U* q) { TESSERA_CUDA_CHECK_NOTHROW(cudaFree(q)); });
  }
  /// Host -> device or device -> host, complete on return: the caller may free or reuse
  /// the host side right away (it may be pinned memory).
  void copy_sync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return;
    DeviceGuard g(ctx_.device);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx_.stream));
    ctx_.sync();
  }

  Context ctx_;
  /// mttkrp_accumulate's buffers and streams (made at the first call; released before ctx_).
  std::unique_ptr<ChunkAccumulator<T>> accumulator_;
};

/// The executor of a cuda:: operation (its kind is cuda: the ops:: dispatcher chose it).
template <typename T>
CudaBackend<T>& executor(Backend<T>& be) {
  return static_cast<CudaBackend<T>&>(be);
}
template <typename T>
const CudaBackend<T>& executor(const Backend<T>& be) {
  return static_cast<const CudaBackend<T>&>(be);
}

}  // namespace tessera::kernels::cuda
