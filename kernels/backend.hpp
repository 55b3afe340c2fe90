// The compute backend: every operation the algorithms need, declared once and
// implemented per backend (reference loops, OpenMP CPU, CUDA). Algorithms are written
// against this interface only; buffers live in the backend's memory space.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cp_device.hpp"
#include "kernels/tuning.hpp"
#include "linalg/dense.hpp"
#include "linalg/row_update.hpp"
#include "tensor/sparse_tensor.hpp"
#include "util/memory_space.hpp"

namespace tessera::synthetic {
struct Spec;  // tensor/synthetic.hpp
}  // namespace tessera::synthetic

namespace tessera::kernels {

template <typename T>
class ContractPlan;  // kernels/sptc.hpp
template <typename T>
class ContractSink;  // kernels/sptc.hpp
template <typename T>
class ContractRoute;   // kernels/sptc.hpp
struct ContractSpec;   // kernels/sptc.hpp
struct ContractStats;  // kernels/sptc.hpp

enum class BackendKind { reference, cpu, cuda };

/// What a prepared tensor will mostly be used for. A backend may choose the order of its
/// sorted copies by it (the cuda backend blocks one input mode into L1-sized ranges for
/// MTTKRP, which would cost TTMc's wide output rows an atomic flush per short run).
/// Results do not depend on it beyond rounding.
enum class Workload { mttkrp, ttmc };

/// "reference" | "cpu" | "cuda" | "auto" (auto: cuda when built with CUDA and a GPU is
/// present, else cpu). Throws InputError on an unknown name.
BackendKind parse_backend(const std::string& name);
std::string to_string(BackendKind k);

/// True when this build has the CUDA backend and at least one GPU is visible.
bool cuda_device_available();

/// Owning pointer to backend memory (host or device).
template <typename T>
class Array {
 public:
  Array() = default;
  Array(T* p, std::size_t n, std::function<void(T*)> del) : p_(p, std::move(del)), n_(n) {}
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }

 private:
  std::unique_ptr<T, std::function<void(T*)>> p_{nullptr, [](T*) {}};
  std::size_t n_ = 0;
};

/// A rank's nonzeros prepared in a backend's kernel format (sorted copies, CSF, ...).
template <typename T>
class TensorHandle {
 public:
  virtual ~TensorHandle() = default;
  virtual int order() const = 0;
  virtual const std::vector<std::uint64_t>& dims() const = 0;
  virtual nnz_t nnz() const = 0;
  /// Bytes of the stored format (backend memory).
  virtual std::size_t bytes() const = 0;
  /// Bytes one MTTKRP of `mode` must read from the stored format (for the floor).
  virtual std::size_t mttkrp_stream_bytes(int mode) const = 0;
  /// Per mode, the number of distinct indices among the handle's nonzeros (the factor
  /// rows an MTTKRP of another mode reads). May wait for queued work (cuda backend: it
  /// counts row starts of the sorted copies on the device).
  virtual std::vector<std::uint64_t> distinct_rows() const = 0;
  /// Sum of the squared values of the handle's nonzeros, accumulated in double (for the
  /// fit of a tensor that exists only in the backend, e.g. generated on the GPU). May wait
  /// for queued work.
  virtual double value_norm_squared() const = 0;
  /// 2-norm of the handle's values, computed with scaling so that it neither overflows nor
  /// underflows while the norm is a finite double (values near 1e200 or 1e-200 in double
  /// precision). The default, sqrt(value_norm_squared()), is exact only for norms in about
  /// [1e-154, 1e154]: handles that can hold other values override it. May wait for queued
  /// work.
  virtual double value_norm() const { return std::sqrt(value_norm_squared()); }

  // ---- memory tier (DESIGN §8) and streaming report ----
  /// 1: the stored format is resident in backend memory (host backends always; the
  /// cuda backend when it fits the budget). 2: host-resident in pinned memory and
  /// streamed to the device in chunks by every MTTKRP.
  virtual int tier() const = 0;
  /// One line for logs: tier, bytes resident in backend memory, chunk size and count,
  /// pinned host bytes (tier 2).
  virtual std::string describe() const = 0;
  /// Fraction, in [0, 1], of the last MTTKRP's host-to-device copy time hidden behind
  /// compute: (copy + compute - wall) / copy. 1 when nothing was copied (tier 1, or no
  /// MTTKRP yet). When the copies take longer than the kernels (the usual tier-2 case),
  /// this is at most compute / copy even for a perfect pipeline. May wait for the last
  /// MTTKRP to finish.
  virtual double overlap_fraction() const = 0;
  /// Seconds the last MTTKRP spent copying the tensor to the device (summed over chunks;
  /// 0 in tier 1 and before the first MTTKRP). May wait for it to finish.
  virtual double last_copy_seconds() const = 0;
  /// Seconds of compute of the last MTTKRP (kernels, summed over chunks; 0 before the
  /// first MTTKRP). May wait for it to finish.
  virtual double last_compute_seconds() const = 0;
};

using ::tessera::NormKind;

/// Seconds of Backend::mttkrp_accumulate calls (Backend::take_accumulate_times).
struct AccumulateTimes {
  double copy = 0;     ///< host -> device copies of the chunks (0 on host backends)
  double compute = 0;  ///< sorts and kernels (device events; host backends: the calls)
  std::int64_t chunks = 0;
};

/// Host memory page-locked by Backend::pin_host; unlocked when destroyed.
class HostPin {
 public:
  virtual ~HostPin() = default;
};

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual MemorySpace memory_space() const = 0;
  /// Blocks until queued work is done (no-op on host backends).
  virtual void synchronize() {}

  // ---- memory ----
  virtual Array<T> allocate(std::size_t n) = 0;
  virtual void upload(const T* host, std::size_t n, T* dst) = 0;
  virtual void download(const T* src, std::size_t n, T* host) = 0;
  virtual void copy(const T* src, std::size_t n, T* dst) = 0;
  virtual void fill(T* dst, std::size_t n, T value) = 0;
  /// Page-locks [p, p + bytes) of host memory until the returned handle is destroyed, so
  /// that this backend's copies from and to it run at the full rate of the host link
  /// (cuda: cudaHostRegister). The memory must stay allocated, in place, while the handle
  /// lives. Null where there is nothing to lock (host backends, bytes == 0) or the system
  /// refuses (logged once; copies then go through the driver's staging, correct and
  /// slower).
  virtual std::unique_ptr<HostPin> pin_host(const void* p, std::size_t bytes) {
    (void)p, (void)bytes;
    return nullptr;
  }

  // ---- sparse ----
  /// Bytes of backend memory a tensor prepared from now on may occupy; 0 (the default)
  /// means no limit beyond the device's free memory. Call before prepare(). The cuda
  /// backend keeps a tensor over the budget in pinned host memory and streams it (tier
  /// 2); a budget too small for two one-tile chunks makes prepare() throw InputError.
  /// Host backends record the value and otherwise ignore it (their format is already
  /// host-resident).
  virtual void set_memory_budget(std::size_t bytes) = 0;
  /// The value last given to set_memory_budget (0 when never called).
  virtual std::size_t memory_budget() const = 0;
  /// The workload of tensors prepared from now on (default: mttkrp). Call before prepare().
  virtual void set_workload(Workload w) { workload_ = w; }
  Workload workload() const { return workload_; }
  /// The kernel tuning options (kernels/tuning.hpp) of operations called from now on;
  /// layout choices take effect at the next prepare(). Throws InputError (kernels::check)
  /// on an invalid value, leaving the previous options in place.
  virtual void set_tuning(const Tuning& t) {
    check(t);
    tuning_ = t;
  }
  const Tuning& tuning() const { return tuning_; }
  /// Prepares `x` (coordinates local to the block: idx[m][k] < x.dims[m]) for repeated
  /// MTTKRP in every mode. The handle keeps what it needs; `x` may be freed after.
  virtual std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>& x) = 0;
  /// The handle prepare() would give for the nonzeros with ids [first_id, first_id +
  /// count) of the "sampled" synthetic tensor `spec` (tensor/synthetic.hpp): nonzero `id`
  /// has coordinates synthetic::coordinate(spec, id, n) and value
  /// synthetic::model_value(spec, coords) cast to T, in id order. Coordinates are global
  /// (dims = spec.dims). Repeated coordinates are NOT merged (unlike algo::generate,
  /// whose distribute step merges them): the MTTKRP sums them, so the tensor is the
  /// merged one with summed values. Throws InputError on an invalid spec (order outside
  /// 1..kMaxOrder, a dimension outside 1..2^32, rank < 1) or an id range past 2^64.
  /// The default builds the COO on the host (OpenMP) and calls prepare(); the cuda
  /// backend generates it on the device.
  virtual std::unique_ptr<TensorHandle<T>> prepare_synthetic(const synthetic::Spec& spec,
                                                             std::uint64_t first_id,
                                                             std::uint64_t count);
  /// out (dims[mode] x R, row-major, overwritten) = X_(mode) * KhatriRao(other factors).
  /// factors[m] is dims[m] x R row-major in backend memory; factors[mode] is not read.
  virtual void mttkrp(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
                      int R, T* out) = 0;
  /// out (dims[mode] x R, row-major, backend memory) += the MTTKRP of `chunk`, a part of a
  /// tensor streamed through the backend (memory tier 3): its coordinates are global (dims
  /// = the whole tensor's, each below its dimension), in any order; factors as for mttkrp().
  /// Summing the calls over chunks that partition a tensor gives its mttkrp() to rounding.
  /// `chunk`'s host arrays are read only during the call: it returns once they have been
  /// read (the caller may refill them), and may return before the device has finished
  /// computing (later work of the backend, or synchronize(), is ordered after it). The
  /// default prepares the chunk, runs mttkrp() into a scratch kept between calls and adds
  /// it with add_rows(); the cuda backend copies the chunk from page-locked memory (see
  /// pin_host) on a copy stream while the previous chunk computes, sorts it on the device
  /// and accumulates into `out` (kernels/cuda/mttkrp/stream.cu); its device buffers (two
  /// chunk buffers and the sort's, kept between calls) hold pieces of at most 2^25
  /// nonzeros, fewer when the memory budget asks (order 3 float: 72 bytes per nonzero).
  /// `sorted_mode` >= 0 promises that the chunk's `sorted_mode` indices are non-decreasing
  /// (as prepare_stream_chunk leaves them); the cuda backend then skips its sort for that
  /// mode (and fails the next call with an Error if the promise was false).
  virtual void mttkrp_accumulate(const SparseTensor<T>& chunk, int mode,
                                 const std::vector<const T*>& factors, int R, T* out,
                                 int sorted_mode = -1);
  /// Reorders a host chunk that will be streamed through mttkrp_accumulate many times (memory
  /// tier 2) into the order this backend computes fastest, once; returns the mode whose
  /// indices are then non-decreasing (pass it as mttkrp_accumulate's sorted_mode), or -1 when
  /// the chunk was left as it is (the default). The cuda backend sorts by (i_m, i_{m+1}),
  /// m the mode with the most key bits, as tier 1 orders its copies; scratch: 24 bytes per
  /// nonzero (stream_chunk_scratch_bytes), released before it returns.
  virtual int prepare_stream_chunk(SparseTensor<T>& chunk);
  /// Host bytes prepare_stream_chunk holds at its peak besides the chunk (0: none).
  virtual std::size_t stream_chunk_scratch_bytes(nnz_t chunk_nnz) const;
  /// Seconds of the mttkrp_accumulate calls since the last take_accumulate_times() (or the
  /// backend's creation), which it resets; waits for those calls to finish.
  virtual AccumulateTimes take_accumulate_times();

  // ---- TTMc (Tucker-HOOI; output layout in kernels/ttmc.hpp) ----
  // The defaults throw Error "ttmc is not implemented by the <name> backend yet"; the
  // reference and cpu backends implement all three.
  /// Rows of the TTMc output of `mode`: the sorted distinct mode-`mode` indices among the
  /// handle's nonzeros, on the host. Known before any TTMc runs (memory planning).
  virtual std::vector<index_t> ttmc_rows(const TensorHandle<T>& x, int mode);
  /// Backend memory, in bytes, one ttmc() of `mode` allocates besides `out` (per-thread
  /// scratch, accumulators). ranks as for ttmc(); throws InputError as ttmc_output_cols.
  virtual std::size_t ttmc_scratch_bytes(const TensorHandle<T>& x, int mode,
                                         const std::vector<int>& ranks);
  /// out (rows x cols, row-major, backend memory, every element overwritten) =
  /// X x_{m != mode} U_m^T restricted to the rows ttmc_rows(x, mode), in that order, with
  /// cols = ttmc_output_cols(ranks, mode). factors[m] is dims[m] x ranks[m] row-major in
  /// backend memory; factors[mode] and ranks[mode] are not read. Throws Error on a null
  /// factor or a handle of another backend, InputError on bad ranks.
  virtual void ttmc(const TensorHandle<T>& x, int mode, const std::vector<const T*>& factors,
                    const std::vector<int>& ranks, T* out);

  // ---- double work buffers in backend memory (for float backends too) ----
  /// n doubles of backend memory, uninitialised.
  virtual Array<double> allocate_double(std::size_t n);
  /// Copies n doubles host -> backend memory (complete on return).
  virtual void upload_double(const double* host, std::size_t n, double* dst);
  /// Copies n doubles backend memory -> host (complete on return).
  virtual void download_double(const double* src, std::size_t n, double* host);

  // ---- wide products of a TTMc output (Tucker-HOOI, DESIGN §6) ----
  // Y is rows x C, row-major, in backend memory, of the tensor's type T (C may be large:
  // the product of the other modes' ranks); the other operands are doubles in backend
  // memory and every product accumulates in double. The defaults run on the host with
  // BLAS (host backends); the cuda backend runs cuBLAS in double.
  /// S (C x C, row-major, both triangles) = Y^T Y. rows may be 0 (S = 0).
  virtual void wide_gram(const T* Y, std::int64_t rows, std::int64_t C, double* S);
  /// Z (rows x R, row-major) = Y W for W (C x R, row-major).
  virtual void wide_times(const T* Y, std::int64_t rows, std::int64_t C, const double* W, int R,
                          double* Z);
  /// B (C x R, row-major) = Y^T P for P (rows x R, row-major). rows may be 0 (B = 0).
  virtual void wide_times_t(const T* Y, std::int64_t rows, std::int64_t C, const double* P, int R,
                            double* B);
  /// The k largest eigenpairs of the symmetric S (n x n, backend memory, both triangles;
  /// S is overwritten): w_host[j] descending, V (n x k, row-major, backend memory) column j
  /// the unit eigenvector of w_host[j] (sign unspecified). The default copies S to the host
  /// and runs LAPACK dsyevr; the cuda backend runs cuSOLVER dsyevdx on the device.
  virtual void symmetric_eig_top(double* S, int n, int k, double* w_host, double* V);

  // ---- Tucker's dense stage: tall-skinny doubles in backend memory (DESIGN §6) ----
  // U, Z, P are row-major rows x R doubles in backend memory (R small: 1..~4096), G and M
  // R x R. Factor updates, CholeskyQR2 and the core run where the TTMc rows are, so only
  // R x R matrices and scalars reach the host. The defaults are the host loops and BLAS
  // calls (host backends); the cuda backend runs kernels, cuBLAS and cuSOLVER in double on
  // its stream (kernels/cuda/tucker_dense.cu). Results agree to rounding.
  /// A copy of n host indices in backend memory (the row maps of gather/scatter_rows_double).
  virtual Array<std::int64_t> upload_index(const std::int64_t* host, std::size_t n);
  /// P (rows x R) row j = U row pos[j]; pos (rows entries, backend memory) null means the
  /// identity map.
  virtual void gather_rows_double(const double* U, int R, const std::int64_t* pos,
                                  std::int64_t rows, double* P);
  /// U (len x R) = 0 except row pos[j] = Z row j (j < rows) times host_scale (R factors on
  /// the host; null: 1). pos (backend memory) holds distinct rows < len; null means the
  /// identity map (rows <= len).
  virtual void scatter_rows_double(const double* Z, std::int64_t rows, int R,
                                   const std::int64_t* pos, std::int64_t len,
                                   const double* host_scale, double* U);
  /// G (R x R, both triangles) = U^T U for U (rows x R). rows may be 0 (G = 0).
  virtual void gram_double(const double* U, std::int64_t rows, int R, double* G);
  /// M (R x R) = A^T B for A, B (rows x R). rows may be 0 (M = 0).
  virtual void inner_double(const double* A, const double* B, std::int64_t rows, int R, double* M);
  /// U (rows x R) := U M for M (R x R).
  virtual void times_small_double(double* U, std::int64_t rows, int R, const double* M);
  /// One CholeskyQR pass of U (rows x R) whose Gram, summed over ranks, is G (R x R, both
  /// triangles): *host_dev = max_ij |G_ij - delta_ij|; when G = L L^T has a Cholesky factor
  /// with finite positive pivots and min L_ii^2 >= 1e-13 max L_ii^2, U := U L^{-T} and true;
  /// else false with U unchanged (numerically singular: the caller's eigen fallback).
  /// Every rank decides alike from the same G.
  virtual bool cholqr_step(double* U, std::int64_t rows, int R, const double* G, double* host_dev);
  /// ||Unew - U M||_F^2 over these rows (U, Unew rows x R; M R x R), accumulated in double.
  virtual double subspace_change(const double* U, const double* Unew, const double* M,
                                 std::int64_t rows, int R);
  /// sum_k x[k]^2 over n doubles in backend memory, accumulated in double.
  virtual double sum_squares_double(const double* x, std::size_t n);
  /// dst[k] = T(src[k]) for k < n (double to the tensor's type, backend memory).
  virtual void convert_from_double(const double* src, std::size_t n, T* dst);
  /// dst (rows x C) row j = sum of src rows row[ptr[j]] .. row[ptr[j + 1] - 1], added in
  /// that order (deterministic); ptr (rows + 1 entries) and row are on the host, src and
  /// dst in backend memory (Tucker: TTMc rows received from other ranks combined on
  /// their owner).
  virtual void sum_rows(const T* src, const std::vector<std::int64_t>& ptr,
                        const std::vector<std::int64_t>& row, std::int64_t C, T* dst);
  /// dst row dst_row[i] += src row i for i < rows (rows x C, row-major, backend memory);
  /// an empty dst_row means dst row i += src row i. The dst_row entries must be distinct.
  /// dst_row is on the host. (Memory tier 3: a chunk's MTTKRP or TTMc rows added into the
  /// whole output.)
  virtual void add_rows(const T* src, std::int64_t rows, std::int64_t C,
                        const std::vector<std::int64_t>& dst_row, T* dst);
  /// Backend memory, in bytes, the wide products allocate for a Y of C columns besides
  /// their operands (conversion of float rows to double, in chunks).
  virtual std::size_t wide_scratch_bytes(std::int64_t C) const;

  // ---- SpTC: sparse tensor contraction (spec, output format: kernels/sptc.hpp) ----
  // Inputs and output are host COO tensors for every backend (a device backend copies
  // them in and out). The defaults throw Error "contract is not implemented by the <name>
  // backend yet"; the reference and cpu backends implement both.
  /// Matches x and y (this rank's nonzeros, coordinates < dims) for `spec` and counts the
  /// output exactly before any output memory is allocated: plan->count() gives the
  /// products, the output entries and the bytes a run needs. x and y may be the same
  /// object (self-contraction) and must outlive the plan. Throws InputError when their
  /// shapes do not fit the spec.
  virtual std::unique_ptr<ContractPlan<T>> contract_plan(const SparseTensor<T>& x,
                                                         const SparseTensor<T>& y,
                                                         const ContractSpec& spec);
  /// Runs a plan made by this backend and returns the output on the host (sorted, no
  /// repeats, no exact zeros). `stats` (may be null) receives the products, the output
  /// sizes and the seconds of every phase, the plan's matching and counting included.
  /// Throws Error for a plan of another backend.
  virtual SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats);
  /// contract() writing the output into sink.output(...) instead of a new tensor. False,
  /// with nothing run, when this backend or this plan's path has no such output (the
  /// default); the caller then runs contract().
  virtual bool contract_into(ContractPlan<T>& plan, ContractStats* stats, ContractSink<T>& sink) {
    (void)plan, (void)stats, (void)sink;
    return false;
  }
  /// The backend side of a distributed contraction routed in backend memory over `ranks`
  /// ranks (kernels/sptc.hpp, ContractRoute: algo::contract runs the collectives, on a
  /// device communicator, between its steps): x and y are this rank's shares (global
  /// coordinates). Null, with nothing done, when the backend has no such path for this spec
  /// (the default: host backends; the cuda backend for the sort assembly, keys over 64 bits,
  /// a row side without output modes); the answer depends only on the spec and the dims,
  /// so every rank gets the same. x and y must outlive the route.
  virtual std::unique_ptr<ContractRoute<T>> contract_route(const SparseTensor<T>& x,
                                                           const SparseTensor<T>& y,
                                                           const ContractSpec& spec, int ranks);

  // ---- dense (R is small: 1..~256) ----
  /// G (R x R) = A^T A for A (rows x R, row-major). rows may be 0 (G = 0).
  virtual void gram(const T* A, std::int64_t rows, int R, T* G) = 0;
  /// V (R x R) = elementwise product of the matrices in Gs (at least one).
  virtual void hadamard(const std::vector<const T*>& Gs, int R, T* V) = 0;
  /// M (rows x R) := M * V^+ for symmetric positive semi-definite V (R x R): Cholesky when
  /// V is positive definite, else the pseudo-inverse from a symmetric eigendecomposition
  /// (eigenvalues under R * eps * max eigenvalue treated as zero). Returns true when the
  /// fallback was used. Never produces NaN from finite input.
  virtual bool solve_normal(T* M, std::int64_t rows, const T* V, int R) = 0;
  /// host_out[r] = sum_i A(i,r)^2 (two) or max_i |A(i,r)| (max), accumulated in double.
  virtual void column_norms(const T* A, std::int64_t rows, int R, NormKind kind,
                            double* host_out) = 0;
  /// A(i, r) *= host_scale[r].
  virtual void scale_columns(T* A, std::int64_t rows, int R, const double* host_scale) = 0;
  /// host_out[r] = sum_i A(i,r) * B(i,r), accumulated in double.
  virtual void column_dots(const T* A, const T* B, std::int64_t rows, int R, double* host_out) = 0;
  /// P (rows x R(R+1)/2) = the packed outer products of A's rows (linalg::pack_outer).
  virtual void pack_outer(const T* A, std::int64_t rows, int R, T* P) = 0;
  /// Row-wise update of constrained, regularised or weighted CP (linalg::row_update, whose
  /// comment is the contract): A (rows x R) from M and the shared V or the rows' packed
  /// Grams Gp; returns the rows that needed a ridge; *host_quad (if given, with Gp) =
  /// sum_i a_i^T G_i a_i in double.
  virtual std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V,
                                  const T* Gp, const linalg::RowUpdate& u, double* host_quad) = 0;
  /// A CP-ALS iteration kept on the device (kernels/cp_device.hpp), or nullptr with *why
  /// set when this backend has none for the spec (host backends; R above the kernels'
  /// limit): the algorithm then runs the per-operation calls above.
  virtual std::unique_ptr<CpDeviceLoop<T>> cp_device_loop(const CpLoopSpec<T>& spec,
                                                          std::string* why) {
    (void)spec;
    if (why) *why = "the " + name() + " backend runs the dense steps on the host";
    return nullptr;
  }

 private:
  Workload workload_ = Workload::mttkrp;
  Tuning tuning_;
  Array<T> accumulate_scratch_;       ///< default mttkrp_accumulate: the chunk's output
  AccumulateTimes accumulate_times_;  ///< default mttkrp_accumulate: since the last take
};

/// Throws InputError unless prepare_synthetic(spec, first_id, count) is valid (see there).
void check_synthetic(const synthetic::Spec& spec, std::uint64_t first_id, std::uint64_t count);

/// The host COO of prepare_synthetic(spec, first_id, count) (OpenMP, OpenMP's default
/// thread count): nonzero k is id first_id + k. Calls check_synthetic.
template <typename T>
SparseTensor<T> make_synthetic_tensor(const synthetic::Spec& spec, std::uint64_t first_id,
                                      std::uint64_t count);

/// Creates a backend. Throws Error "built without CUDA" for cuda in a CPU-only build.
/// `threads` limits OpenMP threads for the cpu backend (0 = OpenMP's default); `tuning`
/// is given to Backend::set_tuning.
template <typename T>
std::unique_ptr<Backend<T>> make_backend(BackendKind kind, int threads = 0,
                                         const Tuning& tuning = {});

}  // namespace tessera::kernels
