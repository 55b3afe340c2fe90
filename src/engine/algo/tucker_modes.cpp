// Tucker-HOOI's steps for one mode (the Hooi class, tucker_hooi.hpp): the TTMc, its rows
// combined over the ranks (summed on their owners or all-reduced whole, TuckerRows), the new
// factor from the combined rows (the dense stage) and its publication to every rank.
#include <algorithm>
#include <cmath>
#include <vector>

#include "algo/tucker_hooi.hpp"
#include "kernels/ops/dense.hpp"
#include "kernels/ops/ttmc.hpp"
#include "util/error.hpp"
#include "util/fault.hpp"
#include "util/timer.hpp"

namespace tessera::algo::detail {

template <typename T>
RandomFill Hooi<T>::random_fill(int n, std::uint64_t salt, bool all) const {
  return [this, n, salt, all](double* Z, int first, int ncols) {
    const auto& mp = plan_[static_cast<std::size_t>(n)];
    const std::int64_t lo = all ? 0 : mp.lo;
    const std::int64_t len =
        all ? static_cast<std::int64_t>(dist_.dims[static_cast<std::size_t>(n)]) : mp.len;
    for (std::int64_t i = 0; i < len; ++i) {
      const std::uint64_t orig = dist_.original_index(n, static_cast<std::uint64_t>(lo + i));
      for (int j = 0; j < ncols; ++j)
        Z[static_cast<std::size_t>(i * ncols + j)] =
            tucker_initial_value(opt_.seed + salt, n, orig, first + j);
    }
  };
}

template <typename T>
const T* Hooi<T>::ttmc_combined(int n) {
  const auto& mp = plan_[static_cast<std::size_t>(n)];
  std::vector<const T*> fptr(static_cast<std::size_t>(N_));
  for (int m = 0; m < N_; ++m)
    fptr[static_cast<std::size_t>(m)] = m == n ? nullptr : factors_.backend(m);
  // Tiers 2-3 wait inside the TTMc (chunk events, sorts freeing memory) without the backend's
  // waiter: let the collectives before it finish through the waiter first.
  if (enqueue_ && res_.tier > 1) be_.synchronize();
  const auto phase = clock_.start();
  util::fault::at(util::fault::Point::kernel);
  kernels::ops::ttmc(be_, *X_, n, fptr, opt_.ranks, ybuf_.data());
  if (ns_.cs != 1.0) {
    const std::vector<double> up(static_cast<std::size_t>(mp.cols), ns_.cs);
    kernels::ops::scale_columns(be_, ybuf_.data(), static_cast<std::int64_t>(mp.local.size()),
                                static_cast<int>(mp.cols), up.data());
  }
  clock_.stop(phase, &t_ttmc_);
  if (res_.tier > 1) {
    res_.stream_copy_seconds += X_->last_copy_seconds();
    res_.stream_compute_seconds += X_->last_compute_seconds();
    overlap_sum_ += X_->overlap_fraction();
    ++overlap_count_;
  }
  if (P_ == 1) return ybuf_.data();
  if (mp.allreduce) {
    // The whole Y_(n) summed on every rank, in place: the TTMc output where it is the whole
    // Y_(n) in label order, else its rows added into zeros at their labels first.
    const auto I = static_cast<std::int64_t>(dist_.dims[static_cast<std::size_t>(n)]);
    const std::size_t count = static_cast<std::size_t>(I) * static_cast<std::size_t>(mp.cols);
    T* full = mp.identity ? ybuf_.data() : recv_.data();
    if (!mp.identity) {
      // add_rows copies its row map from pageable memory, which may wait for the stream
      // inside CUDA: wait through the backend's waiter first (collectives in the stream).
      if (enqueue_) be_.synchronize();
      be_.fill(full, count, T(0));
      kernels::ops::add_rows(be_, ybuf_.data(), static_cast<std::int64_t>(mp.local.size()), mp.cols,
                             labels_[static_cast<std::size_t>(n)], full);
    }
    if (enqueue_) {
      const std::size_t mark = clock_.comm_start();
      dc_.enqueue_allreduce_raw(full, count, comm::data_type_of<T>(), comm::ReduceOp::sum,
                                be_.native_stream());
      clock_.comm_stop(mark, {&t_comm_, &t_exch_});
      return full;
    }
    Timer t;
    be_.synchronize();  // the TTMc's rows, before a host-enqueued collective reads them
    dc_.allreduce_raw(full, count, comm::data_type_of<T>(), comm::ReduceOp::sum);
    t_comm_ += t.seconds();
    t_exch_ += t.seconds();
    return full;
  }
  Timer t;
  // One exchange of rows over `x` (counts in rows, per peer) from `src` into recv_.
  const auto exchange = [&](const comm::Communicator& x, const std::vector<std::int64_t>& sr,
                            const std::vector<std::int64_t>& rr, const T* src) {
    const auto Q = sr.size();
    std::vector<std::int64_t> sc(Q), sd(Q), rc(Q), rd(Q);
    for (std::size_t p = 0; p < Q; ++p) {
      sc[p] = sr[p] * mp.cols;
      rc[p] = rr[p] * mp.cols;
      if (p > 0) {
        sd[p] = sd[p - 1] + sc[p - 1];
        rd[p] = rd[p - 1] + rc[p - 1];
      }
    }
    if (enqueue_)
      x.enqueue_alltoallv_raw(src, sc.data(), sd.data(), recv_.data(), rc.data(), rd.data(),
                              comm::data_type_of<T>(), be_.native_stream());
    else
      x.alltoallv_raw(src, sc.data(), sd.data(), recv_.data(), rc.data(), rd.data(),
                      comm::data_type_of<T>());
  };
  // Enqueued: the exchange and the sums on the owners are one collective for the marks.
  const std::size_t mark = enqueue_ ? clock_.comm_start() : 0;
  const T* out = ybuf_.data();
  if (mp.staged) {
    // Stage 1 inside the node, the rows grouped by relay in own_ first; the relayed sums
    // then wait in own_ for stage 2.
    kernels::ops::sum_rows(be_, ybuf_.data(), mp.gather_ptr, mp.gather_row, mp.cols, own_.data());
    be_.synchronize();
    exchange(*dnode_, mp.send1, mp.recv1, own_.data());  // never enqueued (no dnode with enqueue_)
    kernels::ops::sum_rows(be_, recv_.data(), mp.relay_ptr, mp.relay_row, mp.cols, own_.data());
    be_.synchronize();
    out = own_.data();
  }
  exchange(dc_, mp.send_rows, mp.recv_rows, out);
  // Duplicates summed in a fixed order (stable by source rank): the same on every run. The
  // sums copy their index arrays from host memory and wait (through the backend's waiter):
  // the rows cost one host wait per mode (device-resident index arrays would remove it).
  kernels::ops::sum_rows(be_, recv_.data(), mp.src_ptr, mp.src_row, mp.cols, own_.data());
  if (enqueue_) {
    clock_.comm_stop(mark, {&t_comm_, &t_exch_});
    return own_.data();
  }
  be_.synchronize();
  t_comm_ += t.seconds();
  t_exch_ += t.seconds();
  return own_.data();
}

template <typename T>
RowsView Hooi<T>::view_of(int n) const {
  const auto& mp = plan_[static_cast<std::size_t>(n)];
  RowsView v;
  v.rows = static_cast<std::int64_t>(mp.own_pos.size());
  v.C = mp.cols;
  v.pos = mp.own_pos.data();
  v.pos_dev = pos_dev_[static_cast<std::size_t>(n)].data();
  v.own_len = mp.len;
  return v;
}

template <typename T>
RowsView Hooi<T>::full_view(int n) const {
  RowsView v;
  v.rows = static_cast<std::int64_t>(dist_.dims[static_cast<std::size_t>(n)]);
  v.C = plan_[static_cast<std::size_t>(n)].cols;
  v.own_len = v.rows;
  return v;
}

template <typename T>
void Hooi<T>::publish(int n) {
  if (ufull_of_ == n) {  // an all-reduced mode: every rank holds the whole factor
    factors_.publish_whole(n, ufull_.data(), clock_, &t_svd_);
    return;
  }
  factors_.publish(n, clock_, &t_svd_, {&t_comm_, &t_pub_}, enqueue_);
}

template <typename T>
void Hooi<T>::factor_update(int n, const T* Y) {
  const int R = opt_.ranks[static_cast<std::size_t>(n)];
  auto& U = factors_.owned(n);
  if (all_reduced(n)) {
    // The dense stage on all rows, as on one rank; the owned rows kept for the checkpoints
    // and the model (TuckerFactors::gather_full).
    const auto& mp = plan_[static_cast<std::size_t>(n)];
    const auto phase = clock_.start();
    {
      const LocalSums local(net_, dnet_);
      res_.completed_columns += dense_.update_gram(Y, full_view(n), R, ufull_.data(),
                                                   random_fill(n, 0x5EED0000ull, true));
    }
    if (mp.len > 0)
      kernels::ops::gather_rows_double(be_, ufull_.data() + mp.lo * R, R, nullptr, mp.len,
                                       U.data());
    ufull_of_ = n;
    clock_.stop(phase, &t_svd_, 0, false);
    return;
  }
  ufull_of_ = -1;
  const RowsView v = view_of(n);
  const RandomFill rnd = random_fill(n, 0x5EED0000ull);
  const auto phase = clock_.start();
  const double net0 = net_.seconds + dnet_.seconds;
  int added = 0;
  switch (opt_.svd) {
    case SvdMethod::gram:
      added = dense_.update_gram(Y, v, R, U.data(), rnd);
      break;
    case SvdMethod::subspace:
      added = dense_.update_subspace(Y, v, R, U, opt_.subspace_steps, opt_.subspace_tol, rnd);
      break;
    case SvdMethod::scalapack: {
      const T* Yh = Y;
      if (be_.memory_space() != comm::MemorySpace::host) {
        yhost_.resize(static_cast<std::size_t>(v.rows * v.C));
        be_.download(Y, yhost_.size(), yhost_.data());
        Yh = yhost_.data();
      }
      std::vector<double> Uh;
      update_scalapack(Yh, v, R, Uh, net_, *grid_);
      factors_.set_owned(n, Uh);
      added = dense_.orthonormalize(U.data(), v.own_len, R, rnd);
      break;
    }
  }
  const double in_net = net_.seconds + dnet_.seconds - net0;
  clock_.stop(phase, &t_svd_, in_net, false);
  t_comm_ += in_net;
  t_dcomm_ += in_net;
  res_.completed_columns += added;
}

template class Hooi<float>;
template class Hooi<double>;

}  // namespace tessera::algo::detail
