// Sparse tensor contraction (SpTC): Z = X x Y over the modes an einsum spec names
// (DESIGN §5, §6; docs/sptc.md). Declared once, implemented per backend: reference/ (plain
// loops, double accumulation, the ground truth), cpu/ (OpenMP hash join + row-wise
// accumulation), cuda/ (kernels/cuda/sptc/), through kernels/ops/sptc.hpp (ops::contract_plan /
// ops::contract).
//
// Spec rules ("ijk,klm->ijlm"): two comma-separated input subscripts and an explicit
// output after "->"; one letter (a-z, A-Z) per mode; blanks are ignored. Each input has
// 1..16 modes and a letter at most once (no diagonals or traces). A letter in both inputs
// is matched: it is contracted (summed over) when it is absent from the output, and a
// batch (Hadamard) mode when the output keeps it. A letter in one input only is free and
// must appear in the output. The output lists each letter at most once, only letters of
// the inputs, and has 1..16 modes (a full contraction to a scalar is refused). Matched
// letters must have the same length in X and Y.
//
// Output (every backend): a SparseTensor<T> whose mode k is the output letter k, dims the
// lengths of those letters, coordinates sorted lexicographically (mode 0 slowest) with no
// repeats; products with equal output coordinates are summed (in double); entries whose
// sum rounded to T is exactly zero are dropped. Repeated coordinates in the inputs are
// allowed: every copy is multiplied, so the result is that of the summed inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels {

/// Precision of the tensor-core path of a device backend (DESIGN §5): dense 16 x 16 blocks
/// of the matched structure multiplied as small dense matrices. fp64: DMMA (results as
/// accurate as the sparse path, summation order aside); tf32, bf16, fp16: inputs rounded to
/// that type, products accumulated in float within a block pair, then in double.
enum class TensorCorePrecision { off, fp64, tf32, bf16, fp16 };
/// "off", "fp64", "tf32", "bf16", "fp16".
std::string to_string(TensorCorePrecision p);
/// Parses the names of to_string (case-sensitive); throws InputError listing them.
TensorCorePrecision parse_tensor_core_precision(const std::string& s);

/// How a device backend assembles the output: `rows` accumulates the products of every
/// output row on chip (shared-memory dense rows, block-local sorts of small rows, a global
/// sort only for rows that fit neither) and writes each row at its counted offset; `sort`
/// radix-sorts and reduces the key of every product (the first CUDA kernel; no tensor cores).
enum class ContractAssembly { rows, sort };
std::string to_string(ContractAssembly a);
/// "rows" or "sort"; throws InputError otherwise.
ContractAssembly parse_contract_assembly(const std::string& s);

/// Default block density (nonzeros of a 16 x 16 block / 256, repeats counted) at or over
/// which a block of the matched structure goes to the tensor cores. Measured by `tessera
/// bench contract --tc-sweep` on an H200 (docs/perf/gpu-h200-sptc.md): the tensor-core
/// path never beat the sparse path at any density from 0.01 to 1 (0.66x to 0.96x in fp64),
/// so the default is over 1: no block (the path is opt-in by threshold: --tc-threshold).
inline constexpr double kDefaultTensorCoreThreshold = 2.0;

/// Options of the device kernels. They travel inside ContractSpec through
/// ops::contract_plan; the reference and cpu backends ignore them.
struct ContractDeviceOptions {
  TensorCorePrecision tensor_cores = TensorCorePrecision::fp64;
  /// Block density at or over which a block runs on the tensor cores. < 0: the backend's
  /// Tuning::sptc_tc_threshold (--tc-threshold) when >= 0, else kDefaultTensorCoreThreshold;
  /// 0: every block holding a nonzero (forces the path on); > 1: no block.
  double tc_threshold = -1;
  ContractAssembly assembly = ContractAssembly::rows;
};

/// The threshold in effect: options.tc_threshold when >= 0, else tuning.sptc_tc_threshold
/// (--tc-threshold) when >= 0, else kDefaultTensorCoreThreshold.
double resolve_tc_threshold(const ContractDeviceOptions& options, const Tuning& tuning);

/// A parsed, validated einsum spec. Mode numbers are 0-based positions in the subscripts.
struct ContractSpec {
  std::string text;  ///< canonical form "x,y->out" (blanks removed)
  std::string x, y, out;
  /// Matched modes, one entry per letter present in both inputs, ordered by position in
  /// X: mode x_key[c] of X is matched with mode y_key[c] of Y.
  std::vector<int> x_key, y_key;
  /// Per matched letter: true for a batch mode (kept in the output), false when contracted.
  std::vector<bool> key_batch;
  /// Free modes (letter in that input only), in input mode order.
  std::vector<int> x_free, y_free;
  /// Per output mode k: out_from_y[k] is false when it is taken from X (free modes of X
  /// and batch modes), true for the free modes of Y; out_mode[k] is the mode of that input.
  std::vector<bool> out_from_y;
  std::vector<int> out_mode;
  /// Kernel options of device backends (not part of the spec's text; kept by swap_inputs).
  ContractDeviceOptions device;

  int x_order() const { return static_cast<int>(x.size()); }
  int y_order() const { return static_cast<int>(y.size()); }
  int out_order() const { return static_cast<int>(out.size()); }
  /// Letters summed over (matched and absent from the output).
  int contracted() const;
  /// Matched letters kept in the output.
  int batch() const;
};

/// Parses and validates `text` (rules at the top of this file). Throws InputError with
/// the spec, the offending letter or part, and what to write instead.
ContractSpec parse_contract_spec(const std::string& text);

/// Checks the input shapes against the spec and returns the output dims: xdims.size() must
/// be spec.x_order(), ydims.size() spec.y_order(), every length in 1..2^32, and matched
/// letters of equal length. Throws InputError naming the letter, the modes and the two
/// lengths (for .tns inputs a mode's length is its largest coordinate).
std::vector<std::uint64_t> contract_output_dims(const ContractSpec& spec,
                                                const std::vector<std::uint64_t>& xdims,
                                                const std::vector<std::uint64_t>& ydims);

/// Extends every matched letter to the larger of its lengths in X and Y (the missing index
/// range holds no nonzeros, so the product is unchanged; free modes then keep their own
/// lengths, or grow with a matched mode of the same tensor). same_tensor: X and Y are one
/// tensor (self-contraction), so modes linked through matched letters all take the largest
/// length among them and xdims == ydims on return. Orders must fit the spec (InputError).
void extend_matched_dims(const ContractSpec& spec, std::vector<std::uint64_t>& xdims,
                         std::vector<std::uint64_t>& ydims, bool same_tensor);

/// The spec with the inputs swapped: Z = Y x X, same output. (Y's letters first.)
ContractSpec swap_inputs(const ContractSpec& spec);

/// Bytes one output nonzero takes: out_order coordinates and a value of `value_size`.
inline std::size_t contract_entry_bytes(const ContractSpec& spec, std::size_t value_size) {
  return static_cast<std::size_t>(spec.out_order()) * sizeof(index_t) + value_size;
}

/// Sizes known before the output is allocated (the count pass of a plan).
struct ContractCount {
  std::int64_t products = 0;        ///< pairs of matching nonzeros (multiplications)
  std::int64_t output_entries = 0;  ///< distinct output coordinates (>= the output nnz)
  std::size_t output_bytes = 0;     ///< output_entries x contract_entry_bytes
  /// Backend memory the plan holds plus the most the run allocates besides the output.
  std::size_t workspace_bytes = 0;
};

/// What one contraction did. Seconds are wall time on this process.
struct ContractStats {
  std::int64_t products = 0;        ///< pairs of matching nonzeros multiplied
  std::int64_t output_entries = 0;  ///< distinct output coordinates: products merged
  std::int64_t output_nnz = 0;      ///< after dropping exact zeros
  std::int64_t zeros_dropped = 0;   ///< output_entries - output_nnz
  double match_seconds = 0;         ///< keys, sorts and the hash join of contracted indices
  double count_seconds = 0;         ///< the count pass (output size per row, before allocation)
  double multiply_seconds = 0;      ///< products and their accumulation into the output
  double assemble_seconds = 0;      ///< dropping zeros, output order
  std::size_t workspace_bytes = 0;
  // Device backends (zero elsewhere):
  std::int64_t tc_products = 0;     ///< products computed as dense block products (tensor cores)
  std::int64_t tc_blocks = 0;       ///< dense 16 x 16 blocks of X and Y on the tensor cores
  std::int64_t tc_block_pairs = 0;  ///< 16 x 16 x 16 block products computed
  double tc_seconds = 0;            ///< the tensor-core kernel (part of multiply_seconds)
  double tc_threshold = 0;          ///< block density threshold in effect
  std::string path;                 ///< how the output was assembled, in words
  double seconds() const {
    return match_seconds + count_seconds + multiply_seconds + assemble_seconds;
  }
};

/// Host buffers a caller keeps across contractions (algo::ContractBuffers): a backend that
/// can writes the output straight into them (ops::contract_into, and
/// ContractRoute::run given a sink) instead of into a new tensor.
template <typename T>
class ContractSink {
 public:
  virtual ~ContractSink() = default;
  /// A tensor with these dims whose arrays hold n nonzeros (contents unspecified), for the
  /// backend to overwrite; its arrays may be page-locked and keep their storage from one
  /// contraction to the next. The backend may shrink them (resize to fewer nonzeros) but
  /// must not grow them. May be called from a helper thread.
  virtual SparseTensor<T>& output(const std::vector<std::uint64_t>& dims, std::size_t n) = 0;
};

/// The backend side of a contraction routed in backend memory (ops::contract_route;
/// docs/sptc.md, "Distributed"): the backend computes, its caller (algo::contract) runs the
/// collectives between the steps, on the buffers below. Roles: the row side (X, or Y when
/// swapped()) is partitioned by a hash of its output modes, so every output entry is made on
/// one rank; the column side is copied to every rank. A side's buffers are its arrays in
/// backend memory: array m < order is mode m's coordinates (index_t), array order its values
/// (T). Steps, in order: fits, partition, (exchange of the counts), allocate_routed,
/// (exchange of the row side) release_sent, (copy of the column side) release_columns, run.
template <typename T>
class ContractRoute {
 public:
  virtual ~ContractRoute() = default;
  /// True when the row side is Y.
  virtual bool swapped() const = 0;
  /// Local: whether this rank's routed inputs and their matching would fit its free
  /// backend memory and memory_limit (bytes; 0: none), given each side's nonzeros summed
  /// over the ranks (the row side's share estimated as 1.5 x the even one).
  virtual bool fits(std::int64_t row_total, std::int64_t column_total,
                    std::size_t memory_limit) = 0;
  /// Local: checks and uploads both sides and buckets the row side's nonzeros by their
  /// destination rank (send_buffer, grouped by rank in rank order, each group in input
  /// order). Returns the nonzeros for each of the `ranks` ranks.
  virtual std::vector<std::int64_t> partition() = 0;
  virtual const void* send_buffer(int array) const = 0;
  /// The column side as uploaded (this rank's share, input order).
  virtual const void* column_buffer(int array) const = 0;
  /// Local: room for nx routed row-side and ny column-side nonzeros (InputError when nx is
  /// 2^32 - 1 or more).
  virtual void allocate_routed(std::int64_t nx, std::int64_t ny) = 0;
  virtual void* routed_row_buffer(int array) = 0;
  virtual void* routed_column_buffer(int array) = 0;
  /// Frees the send buffers (after the row side's exchange).
  virtual void release_sent() = 0;
  /// Frees the uploaded column side (after its copy to every rank).
  virtual void release_columns() = 0;
  /// Local: matching, counting and the run on the routed inputs: this rank's share of Z
  /// (sorted, no repeats, no exact zeros), or with a sink written into sink->output(...) and
  /// an empty tensor returned. *count receives the plan's count.
  virtual SparseTensor<T> run(ContractStats* stats, ContractCount* count,
                              ContractSink<T>* sink) = 0;
};

/// A contraction matched and counted by one backend, ready to run (ops::contract_plan).
/// It may refer to the input tensors, which must outlive it.
template <typename T>
class ContractPlan {
 public:
  virtual ~ContractPlan() = default;
  virtual const ContractSpec& spec() const = 0;
  virtual const std::vector<std::uint64_t>& output_dims() const = 0;
  virtual const ContractCount& count() const = 0;
  /// Seconds of matching and counting spent building the plan.
  virtual double match_seconds() const = 0;
  virtual double count_seconds() const = 0;
};

/// Plan and run on `backend` in one call (see ops::contract_plan).
template <typename T>
SparseTensor<T> contract(Backend<T>& backend, const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& spec, ContractStats* stats = nullptr);

/// Sorts t lexicographically (mode 0 slowest), sums repeated coordinates in double (in
/// the order they appear in t) and drops entries whose sum rounded to T is exactly zero.
/// OpenMP over `threads` (0 = omp_get_max_threads()); the result does not depend on it.
/// Returns the number of entries removed (merged or zero); *zeros_dropped (when not null)
/// receives the number of distinct coordinates dropped as zero. A host helper for the
/// algorithms (partial outputs received from other ranks); throws Error on a malformed t.
template <typename T>
nnz_t sort_sum_drop_zeros(SparseTensor<T>& t, int threads = 0, nnz_t* zeros_dropped = nullptr);

namespace reference {
/// Plain loops: Y sorted by its matched coordinates, every X nonzero looks up its range
/// by binary search, products accumulated in double into a dense array (output of at most
/// 2^24 cells), a hash map of linearized coordinates, or an ordered map of coordinate
/// tuples. The ground truth. Throws InputError when the shapes do not fit the spec, Error
/// on malformed tensors.
template <typename T>
SparseTensor<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& spec, ContractStats* stats = nullptr);
/// Products and distinct output coordinates of contract(x, y, spec), counted with the
/// same loops without values (memory of the order of the output).
template <typename T>
ContractCount contract_count(const SparseTensor<T>& x, const SparseTensor<T>& y,
                             const ContractSpec& spec);
/// The reference backend's plan: contract_count at planning time (keeps references to x
/// and y, which must outlive it); contract(plan) then runs contract(x, y, spec). Throws
/// Error for a plan of another backend.
template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                               const ContractSpec& spec);
template <typename T>
SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats = nullptr);
}  // namespace reference

namespace cpu {

struct ContractOptions {
  int threads = 0;  ///< OpenMP team size; 0 = omp_get_max_threads()
  /// Rows accumulate into a dense per-thread array when the column side has at most this
  /// many distinct coordinate tuples (memory: up to about 17 bytes each per thread: a double,
  /// a flag byte and two list slots), else into a
  /// per-row open-addressing hash table. Tests set 0 to force the hash tables.
  std::int64_t dense_accumulator_limit = std::int64_t(1) << 20;
  /// Let the kernel swap the roles of X and Y when that makes the output come out in
  /// order (no final sort). Tests turn it off to cover both paths.
  bool allow_swap = true;
};

/// The OpenMP plan: both inputs keyed (mixed-radix packed coordinates, ranked when they
/// overflow 64 bits), the column side (Y, or X when swapped) grouped by matched key with a
/// hash table over the groups, the row side grouped by its output coordinates, every
/// row-side nonzero joined with its group, and the exact output size of every row
/// counted. Keeps references to x and y. Throws InputError for shapes that do not fit the
/// spec or inputs over 2^32 - 1 nonzeros, Error on malformed tensors.
template <typename T>
std::unique_ptr<ContractPlan<T>> plan_contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                                               const ContractSpec& spec,
                                               const ContractOptions& options = {});
/// Runs a plan from plan_contract: per row, the products accumulated in double and
/// written at the row's counted offset (rows in parallel), then zeros removed and, when
/// the output letters interleave the two inputs', a final sort. Throws Error for a plan of
/// another backend.
template <typename T>
SparseTensor<T> contract(ContractPlan<T>& plan, ContractStats* stats = nullptr);
/// plan_contract + contract.
template <typename T>
SparseTensor<T> contract(const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& spec, ContractStats* stats = nullptr,
                         const ContractOptions& options = {});

}  // namespace cpu

}  // namespace tessera::kernels
