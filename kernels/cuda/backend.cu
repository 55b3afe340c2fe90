// The CUDA backend: device memory, one stream, cuBLAS/cuSOLVER handles; the sparse and
// dense operations live in mttkrp/ (ttmc/) and dense.cu.
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
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <string>

#include "kernels/cuda/detail.cuh"
#include "kernels/cuda/mttkrp/stream.cuh"
#include "kernels/cuda/trace.cuh"
#include "kernels/factories.hpp"
#include "kernels/sptc.hpp"

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

DeviceMemory cuda_memory_info(bool trim) {
  if (cuda_device_count() == 0) return {};
  if (trim) cuda::trim_pool();  // memory cached by the stream-ordered pool is free for the plan
  DeviceMemory m;
  if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return m;
}

namespace cuda {

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

namespace {

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
  void wide_gram(const T* Y, std::int64_t rows, std::int64_t C, double* S) override {
    DeviceGuard g(ctx_.device);
    cuda::wide_gram(ctx_, Y, rows, C, S);
  }
  void wide_times(const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                  double* Z) override {
    DeviceGuard g(ctx_.device);
    cuda::wide_times(ctx_, Y, rows, C, W, R, Z);
  }
  void wide_times_t(const T* Y, std::int64_t rows, std::int64_t C, const double* P, int R,
                    double* B) override {
    DeviceGuard g(ctx_.device);
    cuda::wide_times_t(ctx_, Y, rows, C, P, R, B);
  }
  void symmetric_eig_top(double* S, int n, int k, double* w_host, double* V) override {
    DeviceGuard g(ctx_.device);
    cuda::symmetric_eig_top(ctx_, S, n, k, w_host, V);
  }
  // Tucker's dense stage (tucker_dense.cu).
  Array<std::int64_t> upload_index(const std::int64_t* host, std::size_t n) override {
    Array<std::int64_t> a = device_array<std::int64_t>(n);
    copy_sync(a.data(), host, n * sizeof(std::int64_t), cudaMemcpyHostToDevice);
    return a;
  }
  void gather_rows_double(const double* U, int R, const std::int64_t* pos, std::int64_t rows,
                          double* P) override {
    DeviceGuard g(ctx_.device);
    cuda::gather_rows_double(ctx_, U, R, pos, rows, P);
  }
  void scatter_rows_double(const double* Z, std::int64_t rows, int R, const std::int64_t* pos,
                           std::int64_t len, const double* host_scale, double* U) override {
    DeviceGuard g(ctx_.device);
    cuda::scatter_rows_double(ctx_, Z, rows, R, pos, len, host_scale, U);
  }
  void gram_double(const double* U, std::int64_t rows, int R, double* G) override {
    DeviceGuard g(ctx_.device);
    cuda::gram_double(ctx_, U, rows, R, G);
  }
  void inner_double(const double* A, const double* B, std::int64_t rows, int R,
                    double* M) override {
    DeviceGuard g(ctx_.device);
    cuda::inner_double(ctx_, A, B, rows, R, M);
  }
  void times_small_double(double* U, std::int64_t rows, int R, const double* M) override {
    DeviceGuard g(ctx_.device);
    cuda::times_small_double(ctx_, U, rows, R, M);
  }
  bool cholqr_step(double* U, std::int64_t rows, int R, const double* G,
                   double* host_dev) override {
    DeviceGuard g(ctx_.device);
    return cuda::cholqr_step(ctx_, U, rows, R, G, host_dev);
  }
  double subspace_change(const double* U, const double* Unew, const double* M, std::int64_t rows,
                         int R) override {
    DeviceGuard g(ctx_.device);
    return cuda::subspace_change(ctx_, U, Unew, M, rows, R);
  }
  double sum_squares_double(const double* x, std::size_t n) override {
    DeviceGuard g(ctx_.device);
    return cuda::sum_squares_double(ctx_, x, n);
  }
  void convert_from_double(const double* src, std::size_t n, T* dst) override {
    DeviceGuard g(ctx_.device);
    cuda::convert_from_double<T>(ctx_, src, n, dst);
  }
  void sum_rows(const T* src, const std::vector<std::int64_t>& ptr,
                const std::vector<std::int64_t>& row, std::int64_t C, T* dst) override {
    DeviceGuard g(ctx_.device);
    cuda::sum_rows(ctx_, src, ptr, row, C, dst);
  }
  void add_rows(const T* src, std::int64_t rows, std::int64_t C,
                const std::vector<std::int64_t>& dst_row, T* dst) override {
    DeviceGuard g(ctx_.device);
    cuda::add_rows(ctx_, src, rows, C, dst_row, dst);
  }
  std::size_t wide_scratch_bytes(std::int64_t C) const override {
    return cuda::wide_scratch_bytes(C, sizeof(T));
  }

  std::vector<index_t> ttmc_rows(const TensorHandle<T>& x, int mode) override {
    DeviceGuard g(ctx_.device);
    return cuda::ttmc_rows(ctx_, x, mode);
  }
  std::size_t ttmc_scratch_bytes(const TensorHandle<T>& x, int mode,
                                 const std::vector<int>& ranks) override {
    DeviceGuard g(ctx_.device);
    return cuda::ttmc_scratch_bytes(ctx_, x, mode, ranks);
  }
  void ttmc(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) override {
    DeviceGuard g(ctx_.device);
    cuda::ttmc(ctx_, x, mode, factors, ranks, out);
  }

  std::unique_ptr<ContractPlan<T>> contract_plan(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                                 const ContractSpec& spec) override {
    DeviceGuard g(ctx_.device);
    return cuda::plan_contract(ctx_, x, y, spec);
  }
  SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats) override {
    DeviceGuard g(ctx_.device);
    return cuda::contract(ctx_, plan, stats);
  }
  bool contract_into(ContractPlan<T>& plan, ContractStats* stats, ContractSink<T>& sink) override {
    DeviceGuard g(ctx_.device);
    return cuda::contract_into(ctx_, plan, stats, sink);
  }
  std::unique_ptr<ContractRoute<T>> contract_route(const SparseTensor<T>& x,
                                                   const SparseTensor<T>& y,
                                                   const ContractSpec& spec, int ranks) override {
    return cuda::contract_route(ctx_, x, y, spec, ranks);
  }
  std::unique_ptr<HostPin> pin_host(const void* p, std::size_t bytes) override {
    return cuda::pin_host(ctx_.device, p, bytes);
  }

  void set_memory_budget(std::size_t bytes) override { budget_ = bytes; }
  std::size_t memory_budget() const override { return budget_; }
  void set_workload(Workload w) override {
    Backend<T>::set_workload(w);
    ctx_.workload = w;
  }
  /// The options reach the kernels through ctx_ (layout fields at the next prepare, kernel
  /// choices per call); Tuning::trace switches the process-wide phase traces (trace.cuh).
  void set_tuning(const Tuning& t) override {
    Backend<T>::set_tuning(t);  // checks t; throws before anything changes
    ctx_.tuning = t;
    set_trace_enabled(t.trace);
  }

  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) override {
    DeviceGuard g(ctx_.device);
    return cuda::prepare_tensor(ctx_, x, budget_);
  }

  std::unique_ptr<TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                     std::uint64_t first_id,
                                                     std::uint64_t count) override {
    DeviceGuard g(ctx_.device);
    return cuda::prepare_synthetic<T>(ctx_, spec, first_id, count, budget_);
  }

  void mttkrp(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors, int R,
              T* out) override {
    DeviceGuard g(ctx_.device);
    cuda::mttkrp(ctx_, x, mode, factors, R, out);
  }
  void mttkrp_accumulate(const SparseTensor<T>& chunk, int mode,
                         const std::vector<const T*>& factors, int R, T* out,
                         int sorted_mode = -1) override {
    DeviceGuard g(ctx_.device);
    if (!accumulator_) accumulator_ = std::make_unique<ChunkAccumulator<T>>(ctx_);
    accumulator_->accumulate(chunk, mode, factors, R, out, budget_, sorted_mode);
  }
  int prepare_stream_chunk(SparseTensor<T>& chunk) override {
    return cuda::sort_stream_chunk(chunk);
  }
  std::size_t stream_chunk_scratch_bytes(nnz_t n) const override {
    return static_cast<std::size_t>(n) * 2 * sizeof(std::int64_t);
  }
  AccumulateTimes take_accumulate_times() override {
    DeviceGuard g(ctx_.device);
    return accumulator_ ? accumulator_->take_times() : AccumulateTimes{};
  }

  void gram(const T* A, std::int64_t rows, int R, T* G) override {
    DeviceGuard g(ctx_.device);
    cuda::gram(ctx_, A, rows, R, G);
  }

  void hadamard(const std::vector<const T*>& Gs, int R, T* V) override {
    DeviceGuard g(ctx_.device);
    cuda::hadamard(ctx_, Gs, R, V);
  }

  bool solve_normal(T* M, std::int64_t rows, const T* V, int R) override {
    DeviceGuard g(ctx_.device);
    return cuda::solve_normal(ctx_, M, rows, V, R);
  }

  void column_norms(const T* A, std::int64_t rows, int R, NormKind kind,
                    double* host_out) override {
    DeviceGuard g(ctx_.device);
    cuda::column_norms(ctx_, A, rows, R, kind, host_out);
  }

  void scale_columns(T* A, std::int64_t rows, int R, const double* host_scale) override {
    DeviceGuard g(ctx_.device);
    cuda::scale_columns(ctx_, A, rows, R, host_scale);
  }

  void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* host_out) override {
    DeviceGuard g(ctx_.device);
    cuda::column_dots(ctx_, A, B, rows, R, host_out);
  }

  void pack_outer(const T* A, std::int64_t rows, int R, T* P) override {
    DeviceGuard g(ctx_.device);
    cuda::pack_outer(ctx_, A, rows, R, P);
  }

  std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                          const linalg::RowUpdate& u, double* host_quad) override {
    DeviceGuard g(ctx_.device);
    return cuda::row_update(ctx_, A, M, rows, R, V, Gp, u, host_quad);
  }

  std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(const CpLoopSpec<T>& spec,
                                                  std::string* why) override {
    DeviceGuard g(ctx_.device);
    return cuda::make_cp_loop(ctx_, spec, why);
  }

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
  std::size_t budget_ = 0;  ///< device bytes a prepared tensor may occupy; 0 = free memory
  /// mttkrp_accumulate's buffers and streams (made at the first call; released before ctx_).
  std::unique_ptr<ChunkAccumulator<T>> accumulator_;
};

}  // namespace
}  // namespace cuda

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    TESSERA_THROW("the cuda backend was requested, but no CUDA device is visible ("
                  << (e != cudaSuccess ? cuda::detail::cuda_error_text(e) : "0 devices")
                  << "; CUDA_VISIBLE_DEVICES=" << (vis ? vis : "<unset>")
                  << "); use --backend cpu, or run on a GPU node");
  }
  return std::make_unique<cuda::CudaBackend<T>>();
}

template std::unique_ptr<Backend<float>> make_cuda_backend<float>();
template std::unique_ptr<Backend<double>> make_cuda_backend<double>();

}  // namespace tessera::kernels
