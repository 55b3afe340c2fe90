// The CUDA backend's context (detail.cuh: device, blocking stream, cuBLAS and cuSOLVER
// handles, scratch) and what the build and the device report (kernels/factories.hpp).
#include <algorithm>

#include "kernels/cuda/runtime/context.cuh"
#include "kernels/factories.hpp"

namespace tessera::kernels {

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not sticky, clear it
    return 0;
  }
  return n;
}

DeviceMemory cuda_memory_info(bool trim, int device) {
  if (cuda_device_count() == 0) return {};
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  if (trim) cuda::trim_pool();  // memory cached by the stream-ordered pool is free for the plan
  DeviceMemory m;
  if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return m;
}

int cuda_current_device() {
  if (cuda_device_count() == 0) return -1;
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

namespace cuda {

namespace {

/// One more replay of a graph whose streamed pieces GraphTimer times (mapped host memory).
__global__ void count_replay(unsigned* n) {
  volatile unsigned* v = n;
  *v = *v + 1u;
}

/// Runs f with the calling thread's capture mode relaxed: creating events or page-locked
/// memory is no stream work, and no capture mode may then refuse it.
template <typename F>
void relaxed(F&& f) {
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  TESSERA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m));
  try {
    f();
  } catch (...) {
    (void)cudaThreadExchangeStreamCaptureMode(&m);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m));
}

}  // namespace

std::int64_t GraphTimer::begin_piece(Context& ctx) {
  if (replays_dev_ == nullptr) {
    relaxed([&] {
      const cudaError_t e = replays_.allocate(sizeof(unsigned));
      TESSERA_EXPECTS(e == cudaSuccess, "the graph's replay count: cudaHostAlloc failed ("
                                            << detail::cuda_error_text(e) << ")");
      *reinterpret_cast<volatile unsigned*>(replays_.get()) = 0;
      void* dev = nullptr;
      TESSERA_CUDA_CHECK(cudaHostGetDevicePointer(&dev, replays_.get(), 0));
      replays_dev_ = static_cast<unsigned*>(dev);
    });
  }
  if (capture_seq_ != ctx.capture_seq) {
    capture_seq_ = ctx.capture_seq;
    pieces_ = 0;
    chunks_ = 0;
    count_replay<<<1, 1, 0, ctx.stream>>>(replays_dev_);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  const std::size_t need = static_cast<std::size_t>(pieces_ + 1) * kPoints;
  if (events_.size() < need)
    relaxed([&] { events_.ensure(std::max<std::size_t>(2 * events_.size(), need)); });
  return pieces_++;
}

void GraphTimer::mark(std::int64_t piece, int which, cudaStream_t s) {
  TESSERA_CUDA_CHECK(cudaEventRecordWithFlags(
      events_[static_cast<std::size_t>(piece) * kPoints + static_cast<std::size_t>(which)], s,
      cudaEventRecordExternal));
}

AccumulateTimes GraphTimer::take() {
  AccumulateTimes t;
  if (replays_dev_ == nullptr) return t;
  const unsigned now = *reinterpret_cast<volatile unsigned*>(replays_.get());
  const unsigned runs = now - seen_;
  seen_ = now;
  if (runs == 0) return t;
  auto seconds = [&](std::int64_t p, int a, int b) {
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(
        &ms, events_[static_cast<std::size_t>(p) * kPoints + static_cast<std::size_t>(a)],
        events_[static_cast<std::size_t>(p) * kPoints + static_cast<std::size_t>(b)]));
    return static_cast<double>(ms) * 1e-3;
  };
  for (std::int64_t p = 0; p < pieces_; ++p) {
    t.copy += seconds(p, kCopyBegin, kCopyEnd);
    t.compute += seconds(p, kComputeBegin, kComputeEnd);
  }
  t.copy *= runs;
  t.compute *= runs;
  t.chunks = static_cast<std::int64_t>(runs) * chunks_;
  return t;
}

Context::Context() {
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
  try {
    TESSERA_CUBLAS_CHECK(cublasCreate(&cublas));
    TESSERA_CUBLAS_CHECK(cublasSetStream(cublas, stream));
    // Plain IEEE arithmetic: no TF32 for the float Gram/solve products.
    TESSERA_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
    TESSERA_CUSOLVER_CHECK(cusolverDnCreate(&cusolver));
    TESSERA_CUSOLVER_CHECK(cusolverDnSetStream(cusolver, stream));
  } catch (...) {
    if (cusolver) cusolverDnDestroy(cusolver);
    if (cublas) cublasDestroy(cublas);
    TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
    throw;
  }
}

Context::~Context() {
  int prev = device;
  TESSERA_CUDA_CHECK_NOTHROW(cudaGetDevice(&prev));
  if (prev != device) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream));
  scratch = DeviceMemory();
  small = DeviceMemory();
  if (cusolver) cusolverDnDestroy(cusolver);
  if (cublas) cublasDestroy(cublas);
  TESSERA_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  if (prev != device) TESSERA_CUDA_CHECK_NOTHROW(cudaSetDevice(prev));
}

}  // namespace cuda
}  // namespace tessera::kernels
