// Tucker-HOOI's loop on one rank (internal to src/engine/algo): the Hooi class, whose
// setup, iterations and result are in tucker.cpp and whose per-mode steps (the TTMc, its rows
// combined over the ranks, the new factor and its publication) are in tucker_modes.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "algo/tucker.hpp"
#include "algo/tucker_dense.hpp"
#include "algo/tucker_plan.hpp"
#include "algo/tucker_scalapack.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/tucker_dense.hpp"
#include "partition/partition.hpp"

namespace tessera::algo::detail {

/// Whether the data communicator's collectives are ordered in the backend's stream, so that
/// Tucker enqueues them there and times the phases by stream marks: a device backend with
/// marks, a stream-ordered communicator (NCCL), and no two-stage combine (`staged`: the
/// waiter polls dc only, and a failure inside the node's communicator would then be seen
/// only at dc's timeout).
/// Sums over the ranks skipped while alive (Net::local): an all-reduced mode's dense stage,
/// which every rank runs on the same whole Y_(n).
struct LocalSums {
  Net& a;
  Net& b;
  LocalSums(Net& x, Net& y) : a(x), b(y) { a.local = b.local = true; }
  ~LocalSums() { a.local = b.local = false; }
  LocalSums(const LocalSums&) = delete;
  LocalSums& operator=(const LocalSums&) = delete;
};

template <typename T>
bool collectives_in_stream(kernels::Backend<T>& be, const comm::Communicator& dc, bool staged) {
  return be.native_stream() != nullptr && be.has_stream_marks() && dc.can_enqueue() && !staged;
}

/// One run of HOOI after the setup: the prepared tensor, the combine plan, the buffers,
/// the factors and the dense stage of this rank, and the loops over them.
template <typename T>
class Hooi {
 public:
  /// `dnode` (may be null: flat combine) is dc split by node.
  Hooi(const partition::Distribution& dist, std::unique_ptr<kernels::TensorHandle<T>> X,
       std::vector<ModePlan> plan, kernels::Backend<T>& be, const comm::Communicator& c,
       const comm::Communicator& dc, const comm::Communicator* dnode, const TuckerOptions& opt,
       const NormScale& ns, TuckerResult& res);
  Hooi(const Hooi&) = delete;
  Hooi& operator=(const Hooi&) = delete;
  /// Initial factors (random, then HOSVD when asked) or the resumed state's.
  void init();
  /// HOOI iterations until the tolerance or max_iters.
  void iterate();
  /// The model, complete on every rank, rows in original index order (collective).
  void finish();

 private:
  /// Keyed random values for the owned rows of mode n, or all its rows (`all`: an all-reduced
  /// mode); salt separates init and completion.
  RandomFill random_fill(int n, std::uint64_t salt, bool all = false) const;
  void publish(int n);
  bool all_reduced(int n) const { return P_ > 1 && plan_[static_cast<std::size_t>(n)].allreduce; }
  /// All of mode n's rows (an all-reduced mode's dense stage).
  RowsView full_view(int n) const;
  /// TTMc of mode n with the current backend factors, combined on the owners; returns the
  /// combined rows (P == 1: the TTMc output itself).
  const T* ttmc_combined(int n);
  RowsView view_of(int n) const;
  /// New U_n (owned rows, backend memory, in place) from the combined rows Y.
  void factor_update(int n, const T* Y);
  /// The last core on the host (copied from backend memory when newer there).
  const std::vector<double>& host_core();
  std::vector<double> unscaled(std::vector<double> g) const;

  const partition::Distribution& dist_;
  std::unique_ptr<kernels::TensorHandle<T>> X_;
  std::vector<ModePlan> plan_;
  kernels::Backend<T>& be_;
  const comm::Communicator& c_;
  const comm::Communicator& dc_;
  const comm::Communicator* dnode_;
  const TuckerOptions& opt_;
  const NormScale ns_;
  TuckerResult& res_;
  /// The backend's Lanczos eigen-solve counts before this run (finish records the difference).
  const kernels::EigLanczosCounts eig0_;
  const int N_, P_;
  kernels::Array<T> ybuf_, recv_, own_;
  /// All-reduced modes (ModePlan::allreduce): the whole new factor (I_n x R), computed on every
  /// rank, and the mode it holds (-1: none; the HOSVD sweep updates every mode before it
  /// publishes, so only the last one's is still here then).
  kernels::Array<double> ufull_;
  int ufull_of_ = -1;
  /// Per all-reduced mode whose TTMc output is not the whole Y_(n): its rows' labels, where
  /// add_rows puts them (empty elsewhere; made once, not per iteration).
  std::vector<std::vector<std::int64_t>> labels_;
  detail::TuckerFactors<T> factors_;
  std::vector<kernels::Array<std::int64_t>> pos_dev_;
  std::unique_ptr<BlacsGrid> grid_;
  Net net_, dnet_;  // dnet_: sums of backend-memory buffers (NCCL on GPUs)
  /// Times the phases (TuckerResult::phase_timing); before dense_, which keeps a reference.
  detail::PhaseTimer<T> clock_;
  detail::DenseStage<T> dense_;
  double t_ttmc_ = 0, t_comm_ = 0, t_svd_ = 0;  // of the current iteration (or the init)
  // Parts of t_comm_ (the TTMc rows' exchange, the dense stage's sums, the factors'
  // all-gathers) and their sums over this run's iterations.
  double t_exch_ = 0, t_dcomm_ = 0, t_pub_ = 0;
  double sum_ttmc_ = 0, sum_exch_ = 0, sum_dcomm_ = 0, sum_pub_ = 0;
  long dense_calls_ = 0;
  int split_iters_ = 0, run_iters_ = 0;
  double overlap_sum_ = 0;
  int overlap_count_ = 0;
  std::vector<T> yhost_;         // --svd scalapack on a device backend: Y copied to the host
  std::vector<double> core_;     // cs G (the model's core is G)
  bool core_on_device_ = false;  // the last core is in dense_.core_data(), not in core_
  double fit_old_ = 0;
  int stop_signal_ = 0;  // agreed over the ranks (TuckerOptions::stop)
  /// Several ranks with the phases timed by marks: the collectives of the data communicator
  /// are enqueued in the backend's stream, and the backend waits through dc_ (its errors and
  /// timeout), restored by waiter_ when the run ends.
  bool enqueue_ = false;
  struct WaiterGuard {
    kernels::Backend<T>* be = nullptr;
    std::function<void(void*)> prev;
    ~WaiterGuard() {
      if (be) be->set_stream_waiter(std::move(prev));
    }
  } waiter_;
};

}  // namespace tessera::algo::detail
