// Tucker-HOOI's setup before the loop: the options every rank checks alike, ||X|| and the
// scale the loop computes with, the plan that combines the TTMc rows on their owners, and
// the memory plan (estimate, record, refusal naming ranks that would fit). Internal to
// src/engine/algo (tucker.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algo/tucker.hpp"
#include "comm/communicator.hpp"

namespace tessera::algo::detail {

/// Per mode: the local TTMc rows, their owners, and how received rows combine.
struct ModePlan {
  std::int64_t cols = 0;
  std::vector<index_t> local;           ///< rows of the local TTMc output (global labels)
  std::int64_t lo = 0, len = 0, b = 0;  ///< owned range [lo, lo + len); b = padded block rows
  std::vector<std::int64_t> send_rows, recv_rows;  ///< per peer (P > 1)
  std::int64_t recv_total = 0;
  std::vector<std::int64_t> own_pos;  ///< combined rows, relative to lo, sorted
  std::vector<std::int64_t> src_ptr,
      src_row;                 ///< combined row j sums received rows src_row[src_ptr[j]..]
  double scratch_per_col = 0;  ///< backend TTMc scratch bytes / cols
  /// Two-stage combine (plan_combine with a node communicator): the rows go first to a
  /// relay on their node, the node peer in their owner's slot, which sums the node's
  /// copies of a row and sends the sum on to the owner. The TTMc rows are grouped by relay
  /// (a gather: row j is TTMc row gather_row[j]); stage 1 counts per node peer; the relay's
  /// distinct rows (sorted) sum the stage-1 rows relay_row[relay_ptr[j]..]; send_rows and
  /// recv_rows are then stage 2's.
  bool staged = false;
  std::vector<std::int64_t> gather_ptr, gather_row;
  std::vector<std::int64_t> send1, recv1;
  std::int64_t recv1_total = 0;
  std::int64_t relay_rows = 0;
  std::vector<std::int64_t> relay_ptr, relay_row;
  /// choose_rows: the whole Y_(n) all-reduced (every rank runs the dense stage on all rows)
  /// instead of summed on the owners; identity: every rank's TTMc output is the whole Y_(n)
  /// in label order (local == 0..I_n-1), all-reduced in place.
  bool allreduce = false, identity = false;
};

/// The options every rank sees alike (so every rank throws the same InputError); returns
/// the TTMc output columns of every mode.
std::vector<std::int64_t> check_options(const std::vector<std::uint64_t>& dims,
                                        const TuckerOptions& opt);

/// ||X|| (into res.norm_x) and the scale the loop computes with.
struct NormScale {
  double norm_x2 = 0;  ///< ||cs X||^2
  double cs = 1;       ///< a power of two: the loop runs on cs X
  double norm_cx = 0;  ///< ||cs X||
};

/// `mine2` is this rank's sum of squared values; `mine` its scaled 2-norm (called only when
/// the plain sum leaves the safe range).
template <typename T>
NormScale norm_and_scale(double mine2, const std::function<double()>& mine,
                         const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res);

/// Row ownership (mode-n rows cut into P ranges of ceil(I_n / P)) and the plan that
/// combines the TTMc rows on their owners: one index exchange per mode (collective).
/// `node` (may be null: flat) is this rank's node, c split by node with key c's rank, and
/// slot_of[q] the rank of c's rank q in its node's communicator (every node holds the same
/// number of ranks): then the rows go through relays (ModePlan::staged), so that a row
/// several ranks of a node hold crosses the network once, as a sum, and every rank of a
/// node carries an equal share of the node's traffic.
void plan_combine(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                  const comm::Communicator& c, const comm::Communicator* node = nullptr,
                  const std::vector<int>& slot_of = {});

/// Per mode, whether the TTMc rows are all-reduced or summed on their owners
/// (TuckerOptions::rows; ModePlan::allreduce and ::identity), into res.rows_strategy and its
/// why (collective). auto all-reduces a mode whose whole Y_(n) is at most
/// kRowsAllreduceMaxBytes where the collectives run in a device stream (`stream_ordered`), with
/// --svd gram and no two-stage combine (`staged`).
void choose_rows(std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 std::size_t vsize, bool stream_ordered, bool staged, const comm::Communicator& c,
                 const TuckerOptions& opt, TuckerResult& res);

/// The memory plan: every rank evaluates the same estimate from all ranks' counts
/// (collective), records it in res.memory, prints it and refuses, naming ranks that
/// would fit, when it is over opt.memory_limit.
void plan_memory(const std::vector<ModePlan>& plan, const std::vector<std::uint64_t>& dims,
                 const std::vector<std::int64_t>& cols, std::size_t vsize,
                 const std::function<double(std::int64_t)>& wide_scratch,
                 const comm::Communicator& c, const TuckerOptions& opt, TuckerResult& res);

}  // namespace tessera::algo::detail
