// Internal to the CUDA backend: the functions the cuda:: operations (mttkrp/ops.cu,
// ttmc/ops.cu, sptc/ops.cu, dense/ops.cu, dense/tucker_ops.cu) call on the backend's
// context, and, through its includes, the context (context.cuh) and device memory
// (memory.cuh) every file of the backend uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/runtime/context.cuh"
#include "kernels/cuda/runtime/cuda_check.cuh"
#include "kernels/cuda/runtime/memory.cuh"
#include "kernels/sptc.hpp"

namespace tessera::kernels::cuda {

// ---- operations (mttkrp/, ttmc/, sptc/, dense/) ----

/// `budget`: bytes of device memory the prepared tensor may occupy (0 = the device's free
/// memory less a reserve). Over the budget the sorted copies stay in pinned host memory
/// and every mttkrp streams them through two device chunk buffers (tier 2). Tier 1 sorts
/// on the device (CUB radix sort) when the peak of that build (copies + one COO + sort
/// temporaries) also fits the budget, else on the host (OpenMP, host_sort.hpp); tier 2
/// sorts on the host.
template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_tensor(Context& ctx, const SparseTensor<T>& x,
                                                std::size_t budget);
/// Backend::prepare_synthetic: generates the COO of ids [first_id, first_id + count) on
/// the device, in the layout the device sort of prepare_tensor uploads into, and builds
/// the tier-1 copies from it there. When tier 1 or the device sort's peak does not fit
/// (or an allocation fails), builds the COO on the host (make_synthetic_tensor) and calls
/// prepare_tensor; describe() then says so.
/// With a window (tensor/synthetic.hpp) that is not the whole tensor, a first pass counts
/// the kept ids per block of 8192 on the device and a second writes them, in id order.
template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_synthetic(Context& ctx, const synthetic::Spec& spec,
                                                   const synthetic::Window& w,
                                                   std::uint64_t first_id, std::uint64_t count,
                                                   std::size_t budget);
template <typename T>
void mttkrp(Context& ctx, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
            int R, T* out);
/// ops::mttkrp_row_ranges and ops::mttkrp_rows (mttkrp/mttkrp.cu).
template <typename T>
RowRanges mttkrp_row_ranges(Context& ctx, const TensorHandle<T>& x, int mode,
                            const std::vector<std::int64_t>& bounds);
template <typename T>
void mttkrp_rows(Context& ctx, const TensorHandle<T>& x, int mode,
                 const std::vector<const T*>& factors, int R, T* out, std::int64_t row_lo,
                 std::int64_t row_hi);
/// ops::row_grams (mttkrp/row_grams.cu).
template <typename T>
void row_grams(Context& ctx, const TensorHandle<T>& x, int mode,
               const std::vector<const T*>& factors, const std::vector<const T*>& packed, int R,
               T* out);
/// ops::fuses_completion and ops::completion_rows (mttkrp/row_grams.cu).
template <typename T>
bool fuses_completion(const Context& ctx, int R);
template <typename T>
void completion_rows(Context& ctx, const TensorHandle<T>& x, int mode,
                     const std::vector<const T*>& factors, int R, T* out, T* grams);

/// ops::ttmc_rows / ttmc_scratch_bytes / ttmc (ttmc/ttmc.cu). The handle keeps the
/// row map of each mode after its first use.
template <typename T>
std::vector<index_t> ttmc_rows(Context& ctx, const TensorHandle<T>& x, int mode);
template <typename T>
std::size_t ttmc_scratch_bytes(Context& ctx, const TensorHandle<T>& x, int mode,
                               const std::vector<int>& ranks);
template <typename T>
void ttmc(Context& ctx, const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, T* out);

/// ops::wide_gram / wide_times / wide_times_t: cuBLAS DGEMM (float rows widened to
/// double per chunk in ctx.scratch).
template <typename T>
void wide_gram(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, double* S);
template <typename T>
void wide_times(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                double* Z);
template <typename T>
void wide_times_t(Context& ctx, const T* Y, std::int64_t rows, std::int64_t C, const double* P,
                  int R, double* B);
/// ops::symmetric_eig_top: cuSOLVER dsyevdx (range I) on the device; waits for it.
void symmetric_eig_top(Context& ctx, double* S, int n, int k, double* w_host, double* V);
/// Whether the one-block solver takes n, k on ctx's device: ops::block_eig_applies and its
/// shared memory within the device's per-block limit (compute capability 9.0 holds every
/// n <= 256; 8.0 holds n <= 192 at k = 16).
bool block_eig_fits(const Context& ctx, int n, int k);
/// ops::symmetric_eig_top for float where block_eig_fits(n, k): the one-block solver
/// (dense/block_eig.cuh) on S's lower triangle (column-major), for n >= 192 after the Lanczos
/// kernel (dense/block_lanczos.cuh; both triangles), unless ctx.tuning.eig_solver is exact;
/// counts in ctx.eig_lanczos; waits for it.
void block_symmetric_eig_top(Context& ctx, const double* S, int n, int k, double* w_host,
                             double* V);
/// ops::sum_rows (index arrays copied to ctx.scratch; waits for the copies).
template <typename T>
void sum_rows(Context& ctx, const T* src, const std::vector<std::int64_t>& ptr,
              const std::vector<std::int64_t>& row, std::int64_t C, T* dst);
/// ops::add_rows (the row map copied to ctx.scratch; waits for the copy).
template <typename T>
void add_rows(Context& ctx, const T* src, std::int64_t rows, std::int64_t C,
              const std::vector<std::int64_t>& dst_row, T* dst);
/// Scratch bytes of the wide products for C columns of value_size-byte values.
std::size_t wide_scratch_bytes(std::int64_t C, std::size_t value_size);

/// ops::contract_plan / ops::contract (sptc/plan.cu): sort-based SpTC on the device;
/// keys over 64 bits fall back to the cpu implementation (logged). The plan refers to ctx,
/// x and y, which must outlive it.
template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(Context& ctx, const SparseTensor<T>& x,
                                               const SparseTensor<T>& y, const ContractSpec& spec);
template <typename T>
SparseTensor<T> contract(Context& ctx, ContractPlan<T>& plan, ContractStats* stats);
/// ops::contract_into (sptc/plan.cu): the rows assembly writes into the sink; false for the
/// other paths (sort assembly, cpu fallback), with nothing run.
template <typename T>
bool contract_into(Context& ctx, ContractPlan<T>& plan, ContractStats* stats,
                   ContractSink<T>& sink);
/// ops::contract_route (sptc/route.cu): the device side of a routed contraction; its
/// methods set the device themselves.
template <typename T>
std::unique_ptr<ContractRoute<T>> contract_route(Context& ctx, const SparseTensor<T>& x,
                                                 const SparseTensor<T>& y, const ContractSpec& spec,
                                                 int ranks);
/// Backend::pin_host: cudaHostRegister of [p, p + bytes) for the handle's lifetime.
std::unique_ptr<HostPin> pin_host(int device, const void* p, std::size_t bytes);

template <typename T>
void fill(Context& ctx, T* dst, std::size_t n, T value);
template <typename T>
void gram(Context& ctx, const T* A, std::int64_t rows, int R, T* G);
template <typename T>
void hadamard(Context& ctx, const std::vector<const T*>& Gs, int R, T* V);
template <typename T>
bool solve_normal(Context& ctx, T* M, std::int64_t rows, const T* V, int R);
template <typename T>
void column_norms(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                  double* host_out);
template <typename T>
void scale_columns(Context& ctx, T* A, std::int64_t rows, int R, const double* host_scale);
template <typename T>
void column_dots(Context& ctx, const T* A, const T* B, std::int64_t rows, int R, double* host_out);
/// ops::pack_outer and ops::row_update (kernels/cuda/dense/row_update.cu).
template <typename T>
void pack_outer(Context& ctx, const T* A, std::int64_t rows, int R, T* P);
template <typename T>
std::int64_t row_update(Context& ctx, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad);

// ---- CP-ALS iteration on the device (dense/cp_device.cu; helpers in dense/dense.cu) ----

/// ops::cp_device_loop: nullptr (and *why) when R is above the kernels' limit.
template <typename T>
std::unique_ptr<CpDeviceLoop<T>> make_cp_loop(Context& ctx, const CpLoopSpec<T>& spec,
                                              std::string* why);
/// column_norms / column_dots with the R results left in device memory (out_dev); no wait.
template <typename T>
void column_norms_device(Context& ctx, const T* A, std::int64_t rows, int R, NormKind kind,
                         double* out_dev);
template <typename T>
void column_dots_device(Context& ctx, const T* A, const T* B, std::int64_t rows, int R,
                        double* out_dev);
/// Whether times_w runs as one kernel at this R (what the device loop needs).
bool times_w_fits(const Context& ctx, int R);
/// D := S W (S == D allowed) for W (R x R, column-major, double, device memory);
/// times_w_fits(ctx, R). With colmax (device, R doubles, zero or earlier maxima on entry):
/// colmax[c] = max(colmax[c], max_row |D(row, c)|), NaN ignored, in the same pass.
template <typename T>
void times_w(Context& ctx, const T* S, T* D, std::int64_t rows, int R, const double* W,
             double* colmax = nullptr);

// Tucker dense stage (kernels/cuda/dense/tucker_dense.cu): the ops:: operations of the
// same names, in double on ctx.stream. cholqr_step, subspace_change and sum_squares_double
// wait for their host result; the others return with the work queued.
void gather_rows_double(Context& ctx, const double* U, int R, const std::int64_t* pos,
                        std::int64_t rows, double* P);
void scatter_rows_double(Context& ctx, const double* Z, std::int64_t rows, int R,
                         const std::int64_t* pos, std::int64_t len, const double* host_scale,
                         double* U);
void gram_double(Context& ctx, const double* U, std::int64_t rows, int R, double* G);
void inner_double(Context& ctx, const double* A, const double* B, std::int64_t rows, int R,
                  double* M);
void times_small_double(Context& ctx, double* U, std::int64_t rows, int R, const double* M);
bool cholqr_step(Context& ctx, double* U, std::int64_t rows, int R, const double* G,
                 double* host_dev);
double subspace_change(Context& ctx, const double* U, const double* Unew, const double* M,
                       std::int64_t rows, int R);
double sum_squares_double(Context& ctx, const double* x, std::size_t n);
template <typename T>
void convert_from_double(Context& ctx, const double* src, std::size_t n, T* dst);

}  // namespace tessera::kernels::cuda
