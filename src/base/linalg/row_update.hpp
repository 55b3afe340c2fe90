// Row-wise factor updates of constrained, regularised and weighted CP (DESIGN §6): every
// row of a factor solves its own small R x R problem, so the rows split over ranks and
// threads like the plain normal-equation solve. The reference and cpu backends use these;
// the cuda backend has the same semantics in kernels/cuda/dense/row_update.cu.
#pragma once

#include <cstdint>

namespace tessera::linalg {

/// What a row update solves, per row a (1 x R) with right-hand side m (the MTTKRP row) and
/// Gram H (the Hadamard product V of the other modes' Grams, or the row's own Gram G_i of
/// the Khatri-Rao rows of its observed entries):
///   min_a  1/2 a^T (H + l2 I) a - m^T a + l1 sum_r |a_r|   subject to a >= 0 if nonneg.
/// Without nonneg and l1 it is the linear system (H + l2 I) a = m (Cholesky; a row whose
/// matrix is not positive definite gets a ridge, see row_update). With nonneg or l1 > 0 it
/// runs `sweeps` cyclic coordinate-descent sweeps r = 0..R-1 from the row's current value
/// (for the shared V this is HALS: column r of the factor updated from all the others):
///   a_r = max(0, z_r - l1) / (H_rr + l2)       (nonneg)
///   a_r = soft(z_r, l1) / (H_rr + l2)          (l1 only; soft(z,t) = sign(z) max(|z|-t,0))
///   z_r = m_r - sum_{s != r} H_rs a_s,         a_r = 0 when H_rr + l2 <= 0.
struct RowUpdate {
  bool nonneg = false;
  double l1 = 0, l2 = 0;
  int sweeps = 3;
  /// Coordinate descent (nonneg or l1) rather than the linear solve.
  bool descent() const { return nonneg || l1 > 0; }
};

/// Packed symmetric storage of an R x R matrix: entries (r, s), r <= s, row by row.
inline std::int64_t packed_size(int R) {
  return static_cast<std::int64_t>(R) * (R + 1) / 2;
}

/// P (rows x packed_size(R)) row i = the packed outer product a_i a_i^T of row i of A
/// (rows x R). The MTTKRP of the tensor's pattern (values 1) with these as factors gives,
/// per output row, the packed Gram of the Khatri-Rao rows of its entries.
template <typename T>
void pack_outer(const T* A, std::int64_t rows, int R, T* P, int threads = 0);

/// A (rows x R, in: the start for coordinate descent; out: the solution) from M (rows x R)
/// and either the shared V (R x R, Gp == nullptr) or the rows' packed Grams Gp (rows x
/// packed_size(R), V == nullptr). Returns the number of rows whose linear system needed a
/// ridge (not positive definite: a row with fewer observed entries than R and l2 = 0; it
/// is solved with (H + (l2 + 1e-10 trace(H)/R + tiny) I), and a row with H = 0 gets a = 0).
/// With quad != nullptr and Gp given: *quad = sum_i a_i^T G_i a_i (the model's squared
/// norm over the observed entries when A holds the unnormalised factor), in double.
template <typename T>
std::int64_t row_update(T* A, const T* M, std::int64_t rows, int R, const T* V, const T* Gp,
                        const RowUpdate& u, double* quad, int threads = 0);

}  // namespace tessera::linalg
