// Tucker-HOOI's dense stage (DESIGN §6, docs/design-decisions.md "Where the dense stage
// runs"): the factor updates (gram, subspace), CholeskyQR2 with its eigen fallback, the
// core and the factors themselves, written once against kernels::Backend. The owned rows
// of every U_n live in backend memory as doubles, next to the TTMc rows Y, so on the cuda
// backend the whole stage runs on the device (cuBLAS, cuSOLVER, NCCL sums) and only R x R
// matrices and scalars reach the host; on the host backends backend memory is host memory
// and the same code runs the host loops. Internal to src/engine/algo (tucker.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/tucker.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "util/timer.hpp"

namespace tessera::algo::detail {

/// Columns whose squared singular value is below this fraction of the largest are taken
/// as not determined by the data (sigma ratio 1e-11, far above double rounding of the
/// Gram's ~1e-16 relative floor, squared).
inline constexpr double kRankTolSq = 1e-22;

/// Times collectives enqueued in a backend's stream (PhaseTimer's marks).
class CommMarks {
 public:
  virtual ~CommMarks() = default;
  /// Marks the start of a collective about to be enqueued.
  virtual std::size_t comm_start() = 0;
  /// Marks its end: its device time (the wait for the peers included) will be added to every
  /// total in `to` and taken out of every phase it lies in.
  virtual void comm_stop(std::size_t start, std::vector<double*> to) = 0;
};

/// Collectives of the dense stages over one communicator, timed into the comm share.
struct Net {
  explicit Net(const comm::Communicator& comm) : c(comm) {}
  const comm::Communicator& c;
  double seconds = 0;
  long calls = 0;  ///< sums that crossed ranks
  /// Set (with `marks`) where c's collectives are stream-ordered and the phases are timed by
  /// marks: sums are enqueued in this stream (a backend's native_stream) and not waited for;
  /// their device time goes to `seconds` and every total in `also` when the marks settle.
  void* stream = nullptr;
  CommMarks* marks = nullptr;
  std::vector<double*> also;
  /// Set while a dense stage runs on the same whole rows on every rank (an all-reduced
  /// mode, TuckerRows::allreduce): sum() leaves p as it is.
  bool local = false;
  /// In place: p[0..n) summed over the ranks of c (p in c's memory space).
  void sum(double* p, std::size_t n);
};

/// Times the phases of Tucker's iterations: the TTMc, the factor updates and their parts, the
/// core and the factors' conversion (docs/perf/gpu-h200-tucker.md, "Session 50").
/// Waiting (host backends; device backends with another method than gram, or on several ranks
/// whose data communicator is not stream-ordered): host timers, and stop() waits for the
/// backend (Backend::synchronize) first where asked, so that a phase's time holds the work it
/// queued; the host-timed collectives inside a phase are taken out of it. These are the waits
/// the iteration always had. Marks (a device backend with the gram method, on one rank or on
/// several with NCCL): start() and stop() record points of the backend's stream
/// (Backend::stream_mark) and never wait; settle() waits once and adds each phase's device time
/// to its total. The host then waits only where it needs a value (the eigenvalues, CholeskyQR's
/// check, ||G||, and at tiers 2-3 the TTMc's streaming statistics), and the device does not idle
/// between phases while the host catches up (0.3-0.45 ms of a 7 ms iteration of the nell-2
/// shape on one H200 node, 0.02-0.06 ms on another). On several ranks the collectives are
/// enqueued in the stream too (Net::stream, CommMarks): each is timed by its own marks, its
/// device time (the wait for the slowest peer included) goes to the comm totals and is taken
/// out of the phases it lies in.
template <typename T>
class PhaseTimer final : public CommMarks {
 public:
  explicit PhaseTimer(kernels::Backend<T>& be) : be_(be) {}
  /// Marks when `on` and the backend has them; waiting otherwise. Settles first, and forgets
  /// any marks an earlier user of the backend left untaken (a run ended by an exception), so
  /// that this timer's marks count from its own first.
  void use_marks(bool on) {
    settle();
    marks_ = on && be_.has_stream_marks();
    comms_.clear();
    if (marks_) (void)be_.take_marks();
  }
  bool marks() const { return marks_; }
  struct Phase {
    Timer host;
    std::size_t mark = 0;
  };
  Phase start() {
    Phase p;
    if (marks_) p.mark = be_.stream_mark();
    return p;
  }
  /// Adds the phase's time less `less` seconds (host-timed waits inside it that belong to
  /// another share) to *total: at once when waiting (after a synchronize() when `wait`; a
  /// phase that ends in a wait of its own, or whose queued tail the next phase's wait may
  /// take, passes false), the time at settle() with marks.
  void stop(const Phase& p, double* total, double less = 0, bool wait = true) {
    if (!marks_) {
      if (wait) be_.synchronize();
      *total += p.host.seconds() - less;
      return;
    }
    pending_.push_back({p.mark, be_.stream_mark(), total});
    *total -= less;
  }
  /// With marks (several ranks, collectives in the stream; Net::sum): see CommMarks.
  std::size_t comm_start() override { return be_.stream_mark(); }
  void comm_stop(std::size_t start, std::vector<double*> to) override {
    comms_.push_back({start, be_.stream_mark(), std::move(to), 0.0});
  }
  /// With marks: waits for the stream and adds every stopped phase's time to its total, less
  /// the collectives inside it, and every collective's time to its totals (call between
  /// phases only). Waiting: nothing to do.
  void settle() {
    if (!marks_) return;
    const std::vector<double> t = be_.take_marks();
    for (Comm& c : comms_) {
      if (c.b >= t.size()) continue;
      c.seconds = t[c.b] - t[c.a];
      for (double* x : c.to) *x += c.seconds;
    }
    for (const Pending& p : pending_) {
      if (p.b >= t.size()) continue;
      double s = t[p.b] - t[p.a];
      for (const Comm& c : comms_)
        if (p.a <= c.a && c.b <= p.b) s -= c.seconds;  // marks nest: a collective inside
      *p.total += s;
    }
    pending_.clear();
    comms_.clear();
  }

 private:
  struct Pending {
    std::size_t a, b;
    double* total;
  };
  struct Comm {
    std::size_t a, b;
    std::vector<double*> to;
    double seconds;
  };
  kernels::Backend<T>& be_;
  bool marks_ = false;
  std::vector<Pending> pending_;
  std::vector<Comm> comms_;
};

/// Fills columns [first, first + ncols) of a host block of this rank's owned rows (row
/// stride ncols) with keyed random values.
using RandomFill = std::function<void(double* Z, int first, int ncols)>;

/// Everything one mode's factor update needs about the combined rows of Y_(n) on this rank.
struct RowsView {
  std::int64_t rows = 0;              ///< combined rows held (present rows of the owned range)
  std::int64_t C = 0;                 ///< columns
  const std::int64_t* pos = nullptr;  ///< host: row j is owned-range row pos[j]
  /// The same map in backend memory; null when it is the identity (rows == own_len).
  const std::int64_t* pos_dev = nullptr;
  std::int64_t own_len = 0;  ///< rows of the owned range
};

/// Seconds (this rank) of the parts of the factor updates, printed with -v: the wide
/// products (with their sums' waits, not the sums), the eigen-solves (the Gram's, the
/// Rayleigh-Ritz rotation), the orthonormalisations (without their Grams' sums, since session
/// 50) and the core: parts of the iteration's svd share, which holds no sum either.
struct DenseTimes {
  double prod = 0, eig = 0, orth = 0, core = 0;
};

/// The dense-stage method in words for the run record and the log, e.g.
/// "gram/device-syevdx+cholqr2" or "subspace/host-cholqr2". A device run's gram eigen-solves
/// are "block-eig" where one_block(C, R) (kernels::ops::eig_in_one_block: the backend runs
/// the one-block solver for that mode's C and R) holds for every mode, "block-eig|syevdx"
/// where it holds for some.
std::string dense_method(SvdMethod svd, comm::MemorySpace where,
                         const std::function<bool(int, int)>& one_block,
                         const std::vector<int>& ranks);

/// CholeskyQR2 through a backend: its memory, the net that sums buffers there, the host
/// net of the eigen fallback and an R x R workspace.
template <typename X>
struct OrthContext {
  kernels::Backend<X>& be;
  Net& gnet;  ///< sums of buffers in be's memory (NCCL for the cuda backend)
  Net& hnet;  ///< sums of host buffers (the fallback)
  kernels::Array<double> G{};
};

/// Orthonormalises the columns of the row-distributed U (rows x R: this rank's rows, in
/// o.be's memory) over all ranks by CholeskyQR2 (column order and span kept). When the
/// Gram is numerically singular, U becomes an orthonormal basis of its well-determined
/// span completed by keyed random directions (on the host: rare). Returns the number of
/// random directions added.
template <typename X>
int orthonormalize(OrthContext<X>& o, double* U, std::int64_t rows, int R, const RandomFill& rnd,
                   int col_offset = 0, int depth = 0);

/// The factor updates and the core of one rank, in the backend's memory.
template <typename T>
class DenseStage {
 public:
  /// `clock` times the parts (times) of every call.
  DenseStage(kernels::Backend<T>& be, Net& net, Net& dnet, PhaseTimer<T>& clock);

  /// orthonormalize() of U (rows x R, backend memory) with this stage's backend, timed into
  /// times.orth (its Gram's sums left out).
  int orthonormalize(double* U, std::int64_t rows, int R, const RandomFill& rnd);
  /// U (own_len x R, backend memory) := the top R left singular vectors of the combined
  /// Y_(n) (rows x C, backend memory): S = Y^T Y summed over ranks, its top eigenpairs,
  /// U = Y V / sigma scattered to the owned rows, CholeskyQR2. Returns completed columns.
  int update_gram(const T* Y, const RowsView& v, int R, double* U, const RandomFill& rnd);
  /// Block power steps U <- orth(Y Y^T U) from the current U (at most `steps`, stopping
  /// when ||U_new - U U^T U_new||_F < tol), then a Rayleigh-Ritz rotation. U may be
  /// exchanged with a workspace of the same size (the Array keeps the result).
  int update_subspace(const T* Y, const RowsView& v, int R, kernels::Array<double>& U, int steps,
                      double tol, const RandomFill& rnd);
  /// The core G_(N) = U^T Y (C x R, backend memory, row-major, last mode fastest) summed
  /// over ranks; returns ||G||_F^2.
  double core(const T* Y, const RowsView& v, int R, const double* U);
  const double* core_data() const { return core_.data(); }
  std::size_t core_size() const { return core_size_; }

  DenseTimes times;

 private:
  /// U's present rows (v.rows x R): U itself for the identity map, else gathered.
  const double* present(const RowsView& v, int R, const double* U);
  double* ensure(kernels::Array<double>& a, std::size_t n);

  kernels::Backend<T>& be_;
  Net& net_;
  Net& dnet_;
  PhaseTimer<T>& clock_;
  OrthContext<T> orth_;
  kernels::Array<double> s_, v_, z_, p_, b_, m_, unew_, core_;
  std::size_t core_size_ = 0;
};

/// The factors of one rank: every U_n's owned rows (double, backend memory), the backend
/// copy of every factor in T (what TTMc reads, label order) and every rank's host copy in
/// double (checkpoints and the model), gathered only when asked for.
template <typename T>
class TuckerFactors {
 public:
  /// own_len[n], block[n]: this rank's owned rows of mode n and the padded rows per rank.
  TuckerFactors(kernels::Backend<T>& be, const comm::Communicator& c, const comm::Communicator& dc,
                const std::vector<std::uint64_t>& dims, const std::vector<int>& ranks,
                const std::vector<std::int64_t>& own_len, const std::vector<std::int64_t>& block);

  kernels::Array<double>& owned(int n) { return own_[static_cast<std::size_t>(n)]; }
  const T* backend(int n) const { return backend_[static_cast<std::size_t>(n)].data(); }
  /// Owned rows from the host (own_len x R).
  void set_owned(int n, const std::vector<double>& host);
  /// Owned rows -> every rank's backend factor: converted to T in backend memory and
  /// all-gathered over the data communicator (collective). Adds the conversion's seconds
  /// to *t_svd (timed by `clock`) and the gather's to every total in t_comm. With `enqueue`
  /// (marks on several ranks, a stream-ordered data communicator) the gather is enqueued in
  /// the backend's stream and timed by the clock's marks (CommMarks).
  void publish(int n, PhaseTimer<T>& clock, double* t_svd, const std::vector<double*>& t_comm,
               bool enqueue);
  /// The whole factor (I_n x R doubles, backend memory; every rank holds the same, an
  /// all-reduced mode) -> this rank's backend factor, converted to T: no collective. The
  /// owned rows must hold its owned slice already. Adds the conversion's seconds to *t_svd.
  void publish_whole(int n, const double* whole, PhaseTimer<T>& clock, double* t_svd);
  /// Every host copy not gathered since its mode's last publish (collective over c).
  void gather_full();
  /// Host copies, label order (I_n x R_n); current after gather_full().
  const std::vector<std::vector<double>>& full() const { return full_; }

 private:
  kernels::Backend<T>& be_;
  const comm::Communicator& c_;
  const comm::Communicator& dc_;
  std::vector<std::uint64_t> dims_;
  std::vector<int> ranks_;
  std::vector<std::int64_t> len_, block_;
  std::vector<kernels::Array<double>> own_;
  std::vector<kernels::Array<T>> backend_;
  std::vector<std::vector<double>> full_;
  std::vector<char> stale_;
  kernels::Array<T> send_, recv_;  ///< P > 1: the publish buffers (padded blocks)
};

}  // namespace tessera::algo::detail
