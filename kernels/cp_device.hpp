// A CP-ALS iteration kept on the device (docs/cp-device-loop.md): the dense work of every
// mode's update (Hadamard of the Grams, the normal-equation solve with its eigen fallback,
// column norms and weights, the new Gram) and the fit's sums run as a few kernels in the
// backend's stream, with no host round trip; from the second iteration on, the whole
// iteration (the caller's MTTKRPs included) is captured once as a CUDA graph and replayed.
// The host waits once per iteration, for the few scalars the convergence test needs.
//
// On several ranks the algorithm hands the loop its collectives (CpLoopCollectives, enqueued
// in the same stream and captured in the same graph; docs/multi-gpu.md).
//
// The algorithm (algo/cp_als_loop.cpp) asks the backend for a loop (ops::cp_device_loop);
// backends without one (reference, cpu) return nullptr and the iteration runs through the
// per-operation calls (kernels/ops/dense.hpp) as before. Results equal those calls' to rounding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::kernels {

/// The collectives of a loop whose factor rows are shared with other ranks
/// (docs/multi-gpu.md). The algorithm provides them over its communicators (kernels never
/// talk); each enqueues its collective in the backend's stream (Backend::native_stream)
/// and returns without waiting, so the loop's graph captures them with the kernels. An
/// empty function is a step with nothing to combine (that mode's rows are not split).
template <typename T>
struct CpLoopCollectives {
  /// After mode n's MTTKRP, or after each of its pieces (CpLoopSpec::pieces): M's rows
  /// [solve_lo, solve_lo + solve_n), or the piece's rows, summed over the ranks that hold
  /// them (an in-place reduce-scatter or allreduce), enqueued in `stream`: the backend's
  /// stream for a mode in one piece, the loop's own communication stream for pieces (so the
  /// sum of piece j runs while piece j + 1 computes; docs/multi-gpu.md, "Overlap").
  std::function<void(int n, int piece, void* stream)> reduce;
  /// The R column norms of mode n (device doubles) combined over the ranks that solve the
  /// mode's rows: summed (squared 2-norms) when `sum`, else the maximum.
  std::function<void(int n, double* norms, bool sum)> norms;
  /// G[n] (R x R) summed over those ranks, then A[n]'s solved rows to every holder.
  std::function<void(int n)> share;
  /// The last mode's R column dots (device doubles) summed over those ranks.
  std::function<void(double* dots)> dots;
  /// Waits for the backend's stream, polling the communicators for a failed peer (instead
  /// of a plain synchronisation, which would wait for ever).
  std::function<void()> wait;
};

/// What the loop works on, all in backend memory and fixed for its lifetime. On one rank
/// every factor row is held and solved here; on several the rows of mode n that this rank
/// solves are [solve_lo[n], solve_lo[n] + solve_n[n]) of the rows it holds, and `comm`
/// combines the steps between ranks.
template <typename T>
struct CpLoopSpec {
  int R = 0;
  std::vector<T*> A;                            ///< factor n: rows[n] x R, row-major
  std::vector<T*> G;                            ///< Gram of factor n: R x R
  std::vector<std::int64_t> rows;               ///< rows of factor n held here
  std::vector<std::int64_t> solve_lo, solve_n;  ///< rows solved here (empty: all held rows)
  T* M = nullptr;                               ///< the MTTKRP output: max rows x R
  /// Per mode: the pieces its MTTKRP is enqueued in (empty or 1: one). Only for modes whose
  /// rows every rank holds and solves whole (solve_lo 0, solve_n rows).
  std::vector<int> pieces;
  bool graph = true;          ///< capture and replay a CUDA graph (else launch eagerly)
  CpLoopCollectives<T> comm;  ///< between ranks (all empty on one rank)
};

/// One iteration's scalars, read by the host after it.
struct CpLoopSums {
  double norm_m2 = 0;         ///< ||model||^2 = sum_rs lambda_r lambda_s prod_n G_n(r, s)
  double inner = 0;           ///< <X, model> = sum_r lambda_r dots_r (last mode's M and A)
  int fallbacks = 0;          ///< mode solves that took the pseudo-inverse (V numerically singular)
  int bad_mode = -1;          ///< first mode whose column norms were not finite, else -1
  double kernel_seconds = 0;  ///< device time of the MTTKRPs (events in the stream)
  double comm_seconds = 0;    ///< device time of the row collectives (reduce, share)
  double solve_seconds = 0;   ///< device time of the rest
  bool replayed = false;      ///< the iteration ran as a replay of the captured graph
};

template <typename T>
class CpDeviceLoop {
 public:
  virtual ~CpDeviceLoop() = default;
  /// Runs one iteration and waits for it. For each mode n in order: `mttkrp(n)` enqueues
  /// the MTTKRP of mode n into spec.M (scaled as the caller wants) in the backend's
  /// stream, then the loop updates A[n] := M V^-1 (V the Hadamard product of the other
  /// Grams; Cholesky, or the pseudo-inverse by an on-device Jacobi eigen-solve when V is
  /// numerically singular, M V^+; 0 when V is not finite), lambda := its column norms (the
  /// 2-norm when two_norm, else max(max_i |A(i,r)|, 1)), divides A[n]'s columns by lambda
  /// and forms G[n]; after the last mode the fit's sums. An iteration with two_norm false
  /// after the first call is captured as a CUDA graph (spec.graph) and later ones replay
  /// it, without calling `mttkrp` (so it must enqueue the same work every time).
  /// With pieces (spec.pieces[n] = K > 1), `mttkrp(n, j)` for j = 0..K-1 enqueues piece j of
  /// mode n's MTTKRP (its rows only; the pieces partition M's rows) and comm.reduce(n, j, s)
  /// follows each on the loop's communication stream; without, `mttkrp(n, 0)` and
  /// comm.reduce(n, 0, backend stream). comm_seconds is then the time the reductions add
  /// after the last piece.
  virtual CpLoopSums iterate(const std::function<void(int n, int piece)>& mttkrp,
                             bool two_norm) = 0;
  /// lambda (R values) after the last iteration, copied to the host.
  virtual void lambda(double* host) = 0;
  /// How the iterations run: "cuda graph", or "device kernels, no graph (why)".
  virtual std::string describe() const = 0;
};

}  // namespace tessera::kernels
