// Where CP-ALS keeps its factor rows on each rank (ModeLayout, by strategy), and whether
// its iterations can run as the backend's device loop (kernels/cp_device.hpp). Internal to
// algo/cp_als.cpp and its loop, algo/cp_als_loop.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algo/cp_als.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "linalg/row_update.hpp"
#include "partition/partition.hpp"

namespace tessera::algo::detail {

/// The factor rows one rank holds and owns for one mode.
struct ModeLayout {
  std::uint64_t lo = 0;    ///< first global row held (chunk start)
  std::int64_t len = 0;    ///< rows held (chunk length, or dims[n] for allreduce)
  std::int64_t alloc = 0;  ///< rows allocated (len padded to q * b for layer)
  /// The ranks combining this mode's rows when they are not `data` itself: the layer of
  /// ranks sharing this chunk (layer strategy), or `data` composed across nodes (allreduce
  /// strategy under CpOptions::hierarchy).
  std::shared_ptr<const comm::Communicator> layer;
  std::int64_t b = 0;         ///< rows per layer member (padded block)
  std::int64_t own_lo = 0;    ///< first owned row, relative to lo
  std::int64_t own_n = 0;     ///< rows owned (solved) by this rank
  bool hierarchical = false;  ///< `rows` is composed node-local + cross-node
  /// The ranks the held rows are split over for the solve: the layer (layer strategy), all
  /// of `data` (allreduce strategy on 2+ ranks), or none (one rank: it solves every row).
  const comm::Communicator* rows = nullptr;
};

/// ||X|| over the ranks of `c` from each rank's scaled norm: the largest times the root of
/// the summed squares of the ratios, so no step overflows or underflows (collective).
double global_norm(double mine, const comm::Communicator& c);

/// The factor rows this rank holds and owns, per mode (collective over `data` for the
/// layer strategy, or when the hierarchy composes a group: it splits communicators).
/// `nodes` is the node of each rank of `data` (empty: one node); a group spanning several
/// nodes is composed node-local + cross-node when comm::use_hierarchy(h, its map), and each
/// rank then owns the block of its rank in the composed communicator. A mode whose layer
/// holds every rank uses `data` itself (not split): the layouts must not outlive `data`.
std::vector<ModeLayout> make_layouts(const partition::Distribution& dist, bool layer,
                                     const comm::Communicator& data,
                                     const comm::NodeMap& nodes = {},
                                     comm::Hierarchy h = comm::Hierarchy::flat);

/// "flat" or "node" per mode, comma-separated; empty on one rank.
std::string hierarchy_modes(const std::vector<ModeLayout>& lay);

/// The backend's device loop (kernels/cp_device.hpp) when this run can use it: plain CP
/// in memory tier 1 or 2 (not 3: its buffers are refilled), on one rank or, when the backend's
/// collectives over `data` (and the layers) are stream-ordered, on several: the loop then combines
/// the factor rows with collectives enqueued between its kernels (docs/multi-gpu.md). Sets
/// res.iteration_engine (and res.device_loop_modes on several ranks).
/// `pieces[n]`, set for every mode: empty, or the row ranges [lo, hi) (flattened lo, hi,
/// ...) in which mode n's MTTKRP is enqueued, in that order (the loop's `mttkrp(n, j)` must
/// compute ops::mttkrp_rows of range j).
template <typename T>
std::unique_ptr<kernels::CpDeviceLoop<T>> make_device_loop(
    kernels::Backend<T>& be, const kernels::TensorHandle<T>& X, const std::vector<ModeLayout>& lay,
    const std::vector<linalg::RowUpdate>& upd, std::vector<kernels::Array<T>>& A,
    std::vector<kernels::Array<T>>& G, kernels::Array<T>& M, int R, const comm::Communicator& ctrl,
    const comm::Communicator& data, CpResult& res, const CpOptions& opt, bool holdout,
    std::vector<std::vector<std::int64_t>>& pieces);

/// K contiguous pieces of the rows [fine.front(), fine.back()) cut on the bounds `fine`
/// (ranges j = [fine[j], fine[j + 1]), holding nnz_per_range[j] nonzeros), each with about
/// an equal share of the nonzeros plus the rows (fewer pieces when there are fewer ranges),
/// flattened [lo, hi) pairs ordered by rows per nonzero, most first (ties: row order);
/// `bounds`, if given, gets the pieces' bounds in row order.
std::vector<std::int64_t> cut_row_pieces(const std::vector<std::int64_t>& fine,
                                         const std::vector<double>& nnz_per_range, int K,
                                         std::vector<std::int64_t>* bounds = nullptr);

/// The row pieces of mode n's MTTKRP for the overlap of its all-reduce (docs/multi-gpu.md,
/// "Overlap"), flattened [lo, hi) pairs in the order to compute them, or empty when some
/// rank's backend would compute each piece as a whole MTTKRP (ops::mttkrp_row_ranges) or the
/// mode is too short. Collective over `ctrl` (the ranks' nonzeros per row range are
/// summed, so every rank cuts the same pieces). Between 2 and 16 pieces, about
/// `piece_bytes` of rows each, cut where each has an equal share of the nonzeros plus rows;
/// ordered by rows per nonzero, most first (a piece whose sum moves many bytes for little
/// compute is hidden by the later pieces' kernels). Leaves the backend's pieces of mode n
/// set to these ranges.
template <typename T>
std::vector<std::int64_t> overlap_pieces(kernels::Backend<T>& be, const kernels::TensorHandle<T>& X,
                                         int n, int R, const comm::Communicator& ctrl,
                                         double piece_bytes);

}  // namespace tessera::algo::detail
