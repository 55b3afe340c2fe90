// Unique tensor stores (DESIGN §8: "stores hold unique coordinates"): a collective writer
// that merges repeated coordinates while it writes an HDF5 tensor store.
//
// Every rank adds pieces of entries (coordinates of N <= 16 modes, double values, entry ids)
// in any order. Each entry is routed to an owner rank by a 64-bit hash of its coordinate
// (the owner of hash h is floor(h * P / 2^64), so owners hold contiguous hash ranges); the
// owner keeps its share sorted by (hash, coordinate, entry id) and merges equal coordinates
// by a policy: the sum of the copies added in entry-id order, or the copy with the smallest
// entry id. The unique entries are written into a new store (has_duplicates = 0) with the
// exact unique count, rank r at the exclusive scan of the per-rank counts.
//
// The store is ordered by (hash, coordinate), or with UniqueWriterOptions::sort_mode = m by
// (index of mode m, coordinate) with owners holding mode-m index ranges: the same order for
// any number of ranks and any memory limit, so the file is the same byte for byte (and
// sums, added in entry-id order, are the same bit for bit).
//
// When a rank's share is over its memory limit, sorted runs spill to one scratch file per
// rank (in the scratch folder, default the output's folder) and are merged k ways at the end
// (an external sort). Scratch files are unlinked as soon as they are created: nothing is
// left behind on success, on an error, or when the job is killed.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "io/h5store.hpp"

namespace tessera::io {

namespace detail {
struct UniqueWriterImpl;
}

/// How the copies of a repeated coordinate become one entry.
enum class MergePolicy {
  sum,         ///< the sum of the copies' values, added in entry-id order (a tensor's meaning)
  keep_first,  ///< the value of the copy with the smallest entry id (a model sampled there)
};
/// "sum" | "keep-first".
std::string to_string(MergePolicy p);

struct UniqueWriterOptions {
  MergePolicy policy = MergePolicy::sum;
  /// Bytes of host memory this rank's buffers may use: the held entries, the routing slices,
  /// the merge buffers and the output pieces (the caller's own pieces are extra). Over it,
  /// sorted runs spill to the scratch file. A few hundred entries are held whatever the
  /// limit (about 256 entries of each buffer).
  std::uint64_t memory_limit = std::uint64_t(1) << 30;
  /// Folder of the scratch files; "" = the output's folder.
  std::string scratch_dir;
  /// Rank 0 reports progress (a bar on a terminal, log lines otherwise).
  bool progress = true;
  /// Records sorted at a time (a block; sorting overlaps adding and reports progress):
  /// 0 = 4 Mi; tuning and testing.
  std::size_t sort_block = 0;
  /// -1: the store is ordered by (hash of the coordinate, coordinate). A mode m >= 0: by
  /// (index of mode m, coordinate), so every run of the store is sorted by mode m (the
  /// store's sorted_mode attribute; memory tier 3 then skips that mode's sort on the
  /// device). Entries are then routed to owners by mode-m index ranges (splitters sampled
  /// at the first add). Either order is the same for any number of ranks and memory limit.
  int sort_mode = -1;
  /// Testing only: the last rank fails when it is about to write its (n+1)-th sorted run to
  /// the scratch file (an error in the middle of an external sort). -1: never.
  int fail_at_spill = -1;
};

/// What a write did (global counts; seconds: the maximum over ranks).
struct UniqueStats {
  nnz_t entries = 0;  ///< entries added
  nnz_t used = 0;     ///< entries with an id below the cutoff (all of them without one)
  nnz_t unique = 0;   ///< distinct coordinates written
  nnz_t repeats = 0;  ///< used - unique: copies summed (sum) or dropped (keep-first)
  nnz_t runs = 0;     ///< sorted runs spilled to scratch files
  std::uint64_t spilled_bytes = 0;
  double sort_seconds = 0;   ///< sorting and spilling (during add and before merging)
  double merge_seconds = 0;  ///< counting passes (merge without writing)
  double write_seconds = 0;  ///< the merge-and-write pass
  std::string write_mode;    ///< H5TensorWriter::mode()
};

/// Collective writer of a store without repeated coordinates. Every call is collective over
/// the communicator (a host communicator); an error on any rank throws the same
/// CollectiveError on every rank, and the writer then removes what it made.
class UniqueWriter {
 public:
  /// No cutoff: every distinct coordinate is written.
  static constexpr std::uint64_t kNoCutoff = std::numeric_limits<std::uint64_t>::max();

  /// `out_path`: the store to write (it names the scratch files; nothing is created there
  /// before write()). `order`: N, 1..16. Throws on a bad order or scratch folder.
  UniqueWriter(const std::string& out_path, int order, const comm::Communicator& c,
               const UniqueWriterOptions& o = {});
  ~UniqueWriter();
  UniqueWriter(const UniqueWriter&) = delete;
  UniqueWriter& operator=(const UniqueWriter&) = delete;

  /// Announces that the coming add() calls bring about `entries` entries over all ranks
  /// (for the progress report only).
  void expect(std::uint64_t entries);

  /// Collective (every rank calls it, possibly with count 0): adds this rank's entries k <
  /// count with coordinates idx[n][k] (0-based), values vals[k] and entry ids first_id + k.
  /// Entry ids must be unique over all calls and ranks, and below 2^63.
  void add(nnz_t count, const index_t* const* idx, const double* vals, std::uint64_t first_id);

  /// Collective: the number of distinct coordinates among the entries added so far.
  nnz_t count_unique();

  /// Collective, keep-first policy: the smallest cutoff t such that exactly `target`
  /// distinct coordinates have their first (smallest) entry id below t. Preconditions:
  /// fewer than `target` coordinates have their first id below `lo`, and at least `target`
  /// below `hi`. A few counting passes (histograms of first ids in [lo, hi)).
  std::uint64_t id_cutoff(nnz_t target, std::uint64_t lo, std::uint64_t hi);

  /// Collective: writes the unique entries into a store at `path` (the constructor's) with
  /// the header's dims, source and source_index_base; nnz and has_duplicates (0) are set
  /// here. With a cutoff (keep-first only), the coordinates whose first entry id is >= the
  /// cutoff are left out: the store is then the tensor of the entries with ids below it.
  /// Call once; the scratch file is gone afterwards.
  UniqueStats write(H5Header h, const H5WriteOptions& w, std::uint64_t cutoff = kNoCutoff);

 private:
  std::unique_ptr<detail::UniqueWriterImpl> impl_;
};

/// The first mode of the largest dimension (the sort mode convert and generate give
/// UniqueWriterOptions::sort_mode); -1 for no modes.
int longest_mode(const std::vector<std::uint64_t>& dims);

/// The check for memory tier 3 (and any consumer that cannot sum repeated coordinates):
/// throws InputError naming the file and the fix when info.has_duplicates != 0 (1: repeated
/// coordinates; -1: never checked, e.g. written by an older `tessera generate --out X.h5`).
void require_unique_store(const H5TensorInfo& info);

}  // namespace tessera::io
