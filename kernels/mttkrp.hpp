// MTTKRP: out = X_(n) * (A_N ⊙ ... ⊙ A_{n+1} ⊙ A_{n-1} ⊙ ... ⊙ A_1), per backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::kernels {

/// Throws Error unless x is well formed for the kernels: order 1..16, one coordinate array
/// per mode of length nnz, every coordinate < its mode's length, dims <= 2^32.
template <typename T>
void check_kernel_input(const SparseTensor<T>& x);
/// The checks of check_kernel_input without the scan of the coordinates (order, array
/// lengths, dims <= 2^32): for a backend that checks the coordinates where they are read,
/// on the device after the upload (the CUDA SpTC inputs, docs/sptc.md).
template <typename T>
void check_kernel_shape(const SparseTensor<T>& x);

namespace reference {
/// Plain loops over the COO nonzeros; the ground truth. out is dims[mode] x R, overwritten.
template <typename T>
void mttkrp(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors, int R,
            T* out);
/// ops::completion_rows on the COO: out (dims[mode] x R) the MTTKRP, grams (dims[mode] x
/// R(R+1)/2) each row's packed sum of h h^T over its stored entries (values not read).
template <typename T>
void completion_rows(const SparseTensor<T>& x, int mode, const std::vector<const T*>& factors,
                     int R, T* out, T* grams);
/// One stored entry's terms of completion_rows in its row's sums: m += v h, g += h h^T packed
/// (a <= b, row by row); h has R entries.
inline void add_completion_terms(const std::vector<double>& h, double v, double* m, double* g) {
  for (std::size_t a = 0, e = 0; a < h.size(); ++a) {
    m[a] += v * h[a];
    for (std::size_t b = a; b < h.size(); ++b) g[e++] += h[a] * h[b];
  }
}
}  // namespace reference

namespace cpu {
/// Compressed sparse fiber trees, one per mode (root = that mode), for OpenMP MTTKRP
/// with fiber reuse and no atomics. Defined in kernels/cpu/csf.hpp.
template <typename T>
class CsfSet;

/// How mttkrp splits the root mode across threads.
enum class Schedule {
  automatic,  ///< slices when the root mode is long and not skewed, else chunks
  slices,     ///< dynamic over root slices; every output row written by one thread
  chunks,     ///< nonzero-balanced chunks of the level-1 fibers; the slices cut by a
              ///< chunk boundary are summed from per-chunk partial rows at the end
};

// Isa, the instruction set of the inner loops: kernels/tuning.hpp (--cpu-isa).
/// True when this build has kernels for `isa` and the CPU runs them.
bool isa_supported(Isa isa);
/// The instruction set Isa::automatic resolves to on this machine.
Isa isa_selected();
const char* to_string(Isa isa);

struct MttkrpOptions {
  int threads = 0;  ///< OpenMP team size; 0 = omp_get_max_threads()
  /// The team shrinks so each thread gets at least this many nonzeros (tiny tensors run
  /// serially; a fork/join would cost more than the work). 0 keeps the full team.
  std::int64_t min_nnz_per_thread = 4096;
  Schedule schedule = Schedule::automatic;
  Isa isa = Isa::automatic;  ///< an unsupported choice throws
};

/// Builds the CSF of every mode of `x` (coordinates < x.dims), modes in parallel over
/// `threads` (0 = omp_get_max_threads()). Throws when x is malformed (order outside
/// 1..16, ragged arrays, coordinates >= dims).
template <typename T>
std::unique_ptr<CsfSet<T>> build_csf(const SparseTensor<T>& x, int threads = 0);
/// out (dims[mode] x R, row-major, overwritten) = X_(mode) * KhatriRao(other factors),
/// accumulated in T. factors[m] is dims[m] x R row-major; factors[mode] is not read.
/// No allocation proportional to the tensor; out must not alias a factor.
template <typename T>
void mttkrp(const CsfSet<T>& x, int mode, const std::vector<const T*>& factors, int R, T* out,
            const MttkrpOptions& options = {});
}  // namespace cpu

}  // namespace tessera::kernels
