// TTMc (tensor-times-matrix chain, all modes but one): Y = X x_{m != n} U_m^T, per backend.
// The first building block of Tucker-HOOI (DESIGN.md §6).
//
// Output layout (every backend). The result is semi-sparse: one dense row for each index
// i of mode n that occurs in X (never a dense I_1 x ... x I_N intermediate), with
// cols = prod_{m != n} R_m columns laid out as the Kronecker product of the other modes'
// factor rows in increasing mode order, the last mode varying fastest:
//
//   Y(i, :) = sum_{nonzeros with i_n = i} val * kron(U_{m1}(i_{m1}, :), U_{m2}(i_{m2}, :), ...)
//
// with m1 < m2 < ... and m != n. This is the mode-n unfolding Y_(n) restricted to the rows
// present; column c of row i corresponds to (r_{m1}, r_{m2}, ...) with
// c = (...(r_{m1} * R_{m2} + r_{m2}) * R_{m3} + ...). Order 1: the Kronecker product of no
// rows is the 1 x 1 matrix [1], so cols = 1 and Y(i, 0) is the sum of the values at i.
//
// Argument checks shared by the backends: factors has one pointer per mode and
// factors[m] != nullptr for m != mode (factors[mode] is not read) -> Error;
// ranks has one entry per mode, ranks[m] >= 1 for m != mode (ranks[mode] is not read),
// cols representable in int64, output bytes representable and <= max_bytes when
// max_bytes > 0 -> InputError saying how many bytes were needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/mttkrp.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels {

/// Rows present in one mode and the semi-sparse TTMc output.
template <typename T>
struct SemiSparse {
  std::vector<index_t> rows;  ///< sorted distinct mode-n indices present in X
  std::int64_t cols = 0;      ///< prod_{m != mode} ranks[m]
  std::vector<T> data;        ///< rows.size() x cols, row-major; data[k * cols + c] is row rows[k]
};

/// Columns of the TTMc output of `mode`: prod_{m != mode} ranks[m] (1 for order 1).
/// ranks has one entry per mode (ranks[mode] is not read). Throws Error when mode is
/// outside 0..ranks.size()-1; InputError when a rank of another mode is < 1 or the product
/// overflows int64.
std::int64_t ttmc_output_cols(const std::vector<int>& ranks, int mode);

/// Bytes the TTMc output of `mode` takes: distinct_rows x cols x value_size, known before
/// the run (distinct_rows: cpu::TtmcPlan::distinct_rows, or the count of distinct mode-n
/// indices). Throws InputError as ttmc_output_cols, or when the byte count overflows
/// size_t (the message gives the approximate count and suggests smaller ranks).
std::size_t ttmc_output_bytes(std::int64_t distinct_rows, const std::vector<int>& ranks, int mode,
                              std::size_t value_size);

namespace detail {
/// Argument checks shared by the backends (see the top of this file) for an output of
/// distinct_rows rows; returns cols.
template <typename T>
std::int64_t ttmc_check_args(int order, int mode, const std::vector<const T*>& factors,
                             const std::vector<int>& ranks, std::int64_t distinct_rows,
                             std::size_t max_bytes);
}  // namespace detail

namespace reference {
/// Plain loops over the COO nonzeros, products and sums in double; the ground truth.
/// factors[m] is dims[m] x ranks[m], row-major. max_bytes > 0 refuses (InputError) an
/// output larger than max_bytes before allocating it. Throws Error when x is malformed.
template <typename T>
SemiSparse<T> ttmc(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors,
                   const std::vector<int>& ranks, std::size_t max_bytes = 0);
/// Memory, in bytes, reference::ttmc allocates for an output of `rows` rows besides the
/// returned output itself (its double accumulator and Kronecker buffers).
std::size_t ttmc_scratch_bytes(std::int64_t rows, const std::vector<int>& ranks, int mode);
}  // namespace reference

namespace cpu {

/// How a TTMc run is scheduled. The defaults suit production; tests force the variants.
struct TtmcOptions {
  int threads = 0;  ///< OpenMP team size; 0 = the plan's thread count
  /// The team shrinks so each thread gets at least this many nonzeros (0 keeps it).
  std::int64_t min_nnz_per_thread = 4096;
  /// automatic: one output row per task (dynamic) when the mode has many, balanced rows;
  /// else nonzero-balanced chunks with private partial rows for the cut rows, summed at
  /// the end (skewed or short root modes).
  Schedule schedule = Schedule::automatic;
};

/// Prepared tensor for cpu::ttmc: the compressed sparse fiber tree of every mode (the
/// one cpu::build_csf makes for MTTKRP; root = the output mode, the other modes below it
/// by increasing length so the upper levels, whose Kronecker updates are the widest, have
/// the fewest nodes). Keeps no reference to the SparseTensor it was built from.
template <typename T>
class TtmcPlan {
 public:
  TtmcPlan(std::unique_ptr<CsfSet<T>> csf, int threads);
  /// Borrows `csf` (e.g. the CSF set the cpu backend's tensor handle keeps for MTTKRP),
  /// which must outlive the plan. Cheap: O(order) beyond the borrowed trees.
  TtmcPlan(const CsfSet<T>& csf, int threads);
  ~TtmcPlan();
  TtmcPlan(const TtmcPlan&) = delete;
  TtmcPlan& operator=(const TtmcPlan&) = delete;

  int order() const;
  nnz_t nnz() const;
  const std::vector<std::uint64_t>& dims() const;
  /// Distinct indices of `mode` that hold a nonzero = rows of the TTMc output of `mode`.
  std::int64_t distinct_rows(int mode) const;
  /// Default OpenMP team size of runs on this plan (>= 1).
  int threads() const { return threads_; }
  const CsfSet<T>& csf() const { return *csf_; }

 private:
  void count_rows();
  std::unique_ptr<CsfSet<T>> owned_;  ///< null when the CSF set is borrowed
  const CsfSet<T>* csf_ = nullptr;
  std::vector<std::int64_t> distinct_rows_;
  int threads_ = 1;
};

/// Builds the plan of every mode of x over `threads` OpenMP threads (0 =
/// omp_get_max_threads()); the same count is the default for runs. Throws Error when x is
/// malformed (order outside 1..16, ragged arrays, coordinates >= dims).
template <typename T>
std::unique_ptr<TtmcPlan<T>> plan_ttmc(const SparseTensor<T>& x, int threads = 0);

/// TTMc of `mode` into `out` (rows, cols and data resized and every element overwritten;
/// an existing allocation of the right size is reused, which avoids page faults across
/// Tucker iterations). Accumulates in T. Each output row is written by one thread, except
/// rows cut by a chunk boundary (Schedule::chunks), whose pieces are summed after the
/// parallel loop; no atomics. Extra memory: per thread, one row and one buffer per tree
/// level; for chunks, at most one partial row per chunk (8 chunks per thread).
template <typename T>
void ttmc(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
          const std::vector<int>& ranks, SemiSparse<T>& out, std::size_t max_bytes = 0,
          const TtmcOptions& options = {});

/// As above, returning a fresh output.
template <typename T>
SemiSparse<T> ttmc(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
                   const std::vector<int>& ranks, std::size_t max_bytes = 0,
                   const TtmcOptions& options = {});

/// The output rows of ttmc(plan, mode, ...): sorted distinct mode-`mode` indices
/// (plan.distinct_rows(mode) of them).
template <typename T>
std::vector<index_t> ttmc_rows(const TtmcPlan<T>& plan, int mode);

/// TTMc of `mode` into caller memory: out is plan.distinct_rows(mode) x
/// ttmc_output_cols(ranks, mode), row-major, every element overwritten; rows as
/// ttmc_rows(plan, mode). Same argument checks as ttmc (without a byte limit).
template <typename T>
void ttmc_into(const TtmcPlan<T>& plan, int mode, const std::vector<const T*>& factors,
               const std::vector<int>& ranks, T* out, const TtmcOptions& options = {});

/// Upper bound of the memory, in bytes, one ttmc/ttmc_into run of `mode` allocates
/// besides its output (per-thread scratch rows and level buffers, the partial rows of
/// chunked schedules, the column gather map), for a team of `threads` (0 = the plan's).
/// Throws InputError as ttmc_output_cols.
template <typename T>
std::size_t ttmc_scratch_bytes(const TtmcPlan<T>& plan, int mode, const std::vector<int>& ranks,
                               int threads = 0);

}  // namespace cpu

}  // namespace tessera::kernels
