// Unique tensor stores (see dedup.hpp for the contract).
//
// Records
// -------
// An entry travels and is sorted as one fixed-size record: a 64-bit key (the hash of its
// coordinate, or in the mode-sorted order its index in the sort mode), its entry id, its
// value and K >= N coordinates (K in 2, 4, 8, 16, unused ones zero; 40 bytes for N = 3 or
// 4). Records order by (key, coordinate, id): equal
// coordinates are adjacent, their copies in id order, and since ids are unique the order is
// total, so every sort and merge has one result whatever the input order.
//
// Held entries
// ------------
// A rank's share is held as sorted blocks (at most `block` records each, 4 Mi by default,
// sorted as soon as they fill, so sorting overlaps the adding and reports progress) and an
// unsorted tail the routing receives into. With keep-first, a block keeps only the first
// copy of each coordinate (exact: the smallest id wins in any grouping). With sum nothing is
// merged before the final pass, so every sum is added in id order whatever the grouping.
// The memory limit L is split: at most 256 MiB (L/8) per routing slice, sent and received;
// at most 1 GiB (L/8) of merge buffers and 16 Mi entries (L/8) of output piece in the write
// pass; the held records take the rest. When they would go over it, every block is written
// to the scratch file as a sorted run and nothing is held.
//
// Merging
// -------
// A k-way merge (binary heap) over the scratch runs (read through buffers that share the
// merge budget) and the blocks in memory yields the records in order; equal
// coordinates form a group, reduced by the policy. Counting passes (count_unique, id_cutoff,
// the per-rank counts before writing) and the writing pass run the same merge.
#include "io/dedup.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <parallel/algorithm>  // __gnu_parallel::sort: libstdc++'s OpenMP sorts
#include <random>
#include <utility>
#include <vector>

#include "io/output.hpp"
#include "io/posix_io.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace tessera::io {

std::string to_string(MergePolicy p) {
  return p == MergePolicy::sum ? "sum" : "keep-first";
}

namespace {

/// The suggested name of a deduplicated copy: X.h5 -> X-unique.h5.
std::string unique_copy_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    return path.substr(0, dot) + "-unique" + path.substr(dot);
  return path + "-unique.h5";
}

}  // namespace

int longest_mode(const std::vector<std::uint64_t>& dims) {
  int best = -1;
  for (std::size_t n = 0; n < dims.size(); ++n)
    if (best < 0 || dims[n] > dims[static_cast<std::size_t>(best)]) best = static_cast<int>(n);
  return best;
}

void require_unique_store(const H5TensorInfo& info) {
  TESSERA_INPUT_CHECK(
      info.has_duplicates == 0,
      info.path << " has repeated coordinates or was never checked for them (has_duplicates = "
                << info.has_duplicates
                << "): memory tier 3 would count every stored copy in ||X|| and give a wrong "
                   "fit; run `tessera convert "
                << info.path << " " << unique_copy_name(info.path)
                << "` to write a deduplicated copy (repeats summed) and use that");
}

namespace {

using posix::errno_text;

constexpr std::uint64_t kHashSeed = 0x5DEECE66D2545F49ull;
/// Floors whatever the memory limit: records held, routed and written per round.
constexpr std::size_t kMinRecords = 256;
/// Records per scratch-run buffer in the merge, at least.
constexpr std::size_t kMinRunBuffer = 16;
/// Records sorted at a time (a sorted block).
constexpr std::size_t kSortBlock = std::size_t(1) << 22;
/// Caps of the buffers besides the held records (bytes; entries for the output piece).
constexpr std::uint64_t kMaxSliceBytes = std::uint64_t(256) << 20;
constexpr std::uint64_t kMaxMergeBytes = std::uint64_t(1) << 30;
constexpr std::uint64_t kMaxOutEntries = std::uint64_t(16) << 20;
/// Buckets of the first-id histograms of id_cutoff.
constexpr std::uint64_t kHistBuckets = 4096;

template <int K>
struct Rec {
  std::uint64_t h;
  std::uint64_t id;
  double v;
  index_t c[K];
};

template <int K>
inline bool same_key(const Rec<K>& a, const Rec<K>& b) {
  if (a.h != b.h) return false;
  for (int n = 0; n < K; ++n)
    if (a.c[n] != b.c[n]) return false;
  return true;
}

template <int K>
struct RecLess {
  bool operator()(const Rec<K>& a, const Rec<K>& b) const {
    if (a.h != b.h) return a.h < b.h;
    for (int n = 0; n < K; ++n)
      if (a.c[n] != b.c[n]) return a.c[n] < b.c[n];
    return a.id < b.id;
  }
};

inline int owner_of(std::uint64_t h, int P) {
  return static_cast<int>((static_cast<unsigned __int128>(h) * static_cast<unsigned>(P)) >> 64);
}

template <int K>
void sort_records(Rec<K>* b, Rec<K>* e) {
  if (e - b > 65536 && omp_get_max_threads() > 1) {
    // In place (balanced quicksort), so sorting needs no memory beyond the records.
    __gnu_parallel::sort(b, e, RecLess<K>(), __gnu_parallel::balanced_quicksort_tag());
  } else {
    std::sort(b, e, RecLess<K>());
  }
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

namespace detail {
struct UniqueWriterImpl {
  virtual ~UniqueWriterImpl() = default;
  virtual void expect(std::uint64_t entries) = 0;
  virtual void add(nnz_t count, const index_t* const* idx, const double* vals,
                   std::uint64_t first_id) = 0;
  virtual nnz_t count_unique() = 0;
  virtual std::uint64_t id_cutoff(nnz_t target, std::uint64_t lo, std::uint64_t hi) = 0;
  virtual UniqueStats write(H5Header h, const H5WriteOptions& w, std::uint64_t cutoff) = 0;
};
}  // namespace detail

namespace {

template <int K>
class ImplK final : public detail::UniqueWriterImpl {
 public:
  using R = Rec<K>;

  ImplK(const std::string& path, int order, const comm::Communicator& c,
        const UniqueWriterOptions& o)
      : c_(c), path_(path), N_(order), P_(c.size()), me_(c.rank()), o_(o) {
    // The limit: held records, plus the larger of the routing slice (sent and received)
    // and the merge buffers with the output piece (the write pass).
    const std::uint64_t L = o.memory_limit;
    constexpr std::uint64_t rec = sizeof(R);
    const std::uint64_t out_rec = 4 * static_cast<std::uint64_t>(N_) + 8;
    const std::uint64_t slice_bytes = std::min(L / 8, kMaxSliceBytes);
    const std::uint64_t merge_bytes = std::min(L / 8, kMaxMergeBytes);
    const std::uint64_t out_bytes = std::min(L / 8, kMaxOutEntries * out_rec);
    const std::uint64_t reserve = std::max(2 * slice_bytes, merge_bytes + out_bytes);
    cap_ = std::max<std::uint64_t>(kMinRecords, (L > reserve ? L - reserve : 0) / rec);
    slice_ = std::max<std::uint64_t>(kMinRecords, slice_bytes / rec);
    merge_records_ = std::max<std::uint64_t>(kMinRecords, merge_bytes / rec);
    out_piece_ = std::max<std::uint64_t>(kMinRecords, out_bytes / out_rec);
    block_ = std::min<std::size_t>(o.sort_block > 0 ? o.sort_block : kSortBlock, cap_);
    const std::string dir = o.scratch_dir.empty() ? dir_name(path) : o.scratch_dir;
    // io/output.hpp's naming (this rank's host and pid): unlinked at creation, and a file
    // left by a process killed in between is removed by the next run writing `path`.
    scratch_ = temp_path(dir + "/" + base_name(path), "dedup-r" + std::to_string(me_));
    comm::run_collectively(c, [&] {
      struct stat st {};
      const bool exists = ::stat(dir.c_str(), &st) == 0;
      const bool is_dir = exists && S_ISDIR(st.st_mode);
      const bool writable = is_dir && ::access(dir.c_str(), W_OK | X_OK) == 0;
      const std::string problem = !exists   ? std::string("does not exist")
                                  : !is_dir ? std::string("is not a folder")
                                            : "is not writable (" + errno_text(errno) + ")";
      if (o.scratch_dir.empty()) {
        TESSERA_INPUT_CHECK(writable,
                            "cannot create " << path << ": the folder " << dir << " " << problem);
      } else {
        TESSERA_INPUT_CHECK(writable, "scratch folder " << dir << " (for the sorted runs of "
                                                        << path << ") " << problem);
      }
    });
  }

  ~ImplK() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void expect(std::uint64_t entries) override {
    if (progress_) progress_->finish();
    progress_done_ = 0;
    const std::uint64_t mine = entries / static_cast<std::uint64_t>(P_);
    progress_ = std::make_unique<Progress>(o_.progress && me_ == 0, "deduplicating",
                                           base_name(path_), mine * sizeof(R));
  }

  void add(nnz_t count, const index_t* const* idx, const double* vals,
           std::uint64_t first_id) override {
    TESSERA_EXPECTS(!written_, "add after write");
    TESSERA_EXPECTS(count >= 0, "a count >= 0");
    const auto n_all = static_cast<std::uint64_t>(count);
    TESSERA_EXPECTS(
        first_id < (std::uint64_t(1) << 63) && n_all <= (std::uint64_t(1) << 63) - first_id,
        "entry ids below 2^63, got [" << first_id << ", " << first_id + n_all << ")");
    const nnz_t rounds = c_.allreduce_value<nnz_t>(
        static_cast<nnz_t>((n_all + slice_ - 1) / slice_), comm::ReduceOp::max);
    if (n_all > 0) {
      ids_.emplace_back(first_id, first_id + n_all);
      added_ += n_all;
    }
    local_count_valid_ = false;
    if (o_.sort_mode >= 0 && splitters_.empty()) choose_splitters(n_all, idx[o_.sort_mode]);
    std::vector<R> send;
    std::vector<std::uint64_t> hash;
    std::vector<std::int64_t> pos;
    for (nnz_t r = 0; r < rounds; ++r) {
      const std::uint64_t s0 = static_cast<std::uint64_t>(r) * slice_;
      const std::uint64_t n = s0 < n_all ? std::min<std::uint64_t>(slice_, n_all - s0) : 0;
      // Records of the slice, grouped by owner (stable: a counting sort).
      std::vector<std::int64_t> counts(static_cast<std::size_t>(P_), 0);
      hash.resize(n);
      pos.resize(n);
      const auto sn = static_cast<std::int64_t>(n);
      const int sm = o_.sort_mode;
#pragma omp parallel for schedule(static) if (n > 65536)
      for (std::int64_t k = 0; k < sn; ++k) {
        const auto at = static_cast<std::size_t>(s0) + static_cast<std::size_t>(k);
        std::uint64_t h = kHashSeed;
        if (sm >= 0) {
          h = idx[sm][at];  // the key of the mode-sorted order
        } else {
          for (int m = 0; m < N_; ++m)
            h = mix64(h ^ (static_cast<std::uint64_t>(idx[m][at]) |
                           (static_cast<std::uint64_t>(m) << 32)));
        }
        hash[static_cast<std::size_t>(k)] = h;
      }
      for (std::int64_t k = 0; k < sn; ++k)
        ++counts[static_cast<std::size_t>(owner(hash[static_cast<std::size_t>(k)]))];
      std::vector<std::int64_t> next = comm::displacements(counts);
      for (std::int64_t k = 0; k < sn; ++k)
        pos[static_cast<std::size_t>(k)] =
            next[static_cast<std::size_t>(owner(hash[static_cast<std::size_t>(k)]))]++;
      send.resize(n);
#pragma omp parallel for schedule(static) if (n > 65536)
      for (std::int64_t k = 0; k < sn; ++k) {
        const auto at = static_cast<std::size_t>(s0) + static_cast<std::size_t>(k);
        R& x = send[static_cast<std::size_t>(pos[static_cast<std::size_t>(k)])];
        x.h = hash[static_cast<std::size_t>(k)];
        x.id = first_id + at;
        x.v = vals[at];
        for (int m = 0; m < K; ++m) x.c[m] = m < N_ ? idx[m][at] : 0;
      }
      // Exchange, straight into the tail of the held records.
      std::vector<std::int64_t> sbytes(static_cast<std::size_t>(P_));
      for (int q = 0; q < P_; ++q)
        sbytes[static_cast<std::size_t>(q)] =
            counts[static_cast<std::size_t>(q)] * static_cast<std::int64_t>(sizeof(R));
      const std::vector<std::int64_t> rbytes = comm::exchange_counts(c_, sbytes);
      std::int64_t incoming = 0;
      for (auto b : rbytes) incoming += b;
      const auto in_recs = static_cast<std::size_t>(incoming) / sizeof(R);
      std::size_t at = 0;
      comm::run_collectively(c_, [&] {
        if (held_ + in_recs > cap_ && held_ > 0) spill();
        at = tail_.size();
        tail_.resize(at + in_recs);
        held_ += in_recs;
      });
      c_.alltoallv_raw(send.data(), sbytes.data(), comm::displacements(sbytes).data(),
                       tail_.data() + at, rbytes.data(), comm::displacements(rbytes).data(),
                       comm::DataType::u8);
      received_ += in_recs;
      // A full tail is sorted now (and, keep-first, reduced): a block.
      comm::run_collectively(c_, [&] {
        if (tail_.size() >= block_) sort_tail();
      });
      if (progress_) {
        progress_done_ += in_recs * sizeof(R);
        progress_->update(progress_done_);
      }
    }
  }

  /// The owner of a record's key: its hash range, or (mode-sorted order) the splitter
  /// interval of its sort-mode index.
  int owner(std::uint64_t key) const {
    if (o_.sort_mode < 0) return owner_of(key, P_);
    return static_cast<int>(std::upper_bound(splitters_.begin(), splitters_.end(), key) -
                            splitters_.begin());
  }

  /// Mode-sorted order: the P - 1 splitters of the sort-mode indices, quantiles of a sample
  /// of every rank's first non-empty add (collective; chosen once). They balance the
  /// owners' shares only: the store's order is the same whatever they are.
  void choose_splitters(std::uint64_t n, const index_t* key) {
    constexpr std::size_t S = 256;
    std::vector<std::uint64_t> mine(S + 1, 0), all(static_cast<std::size_t>(P_) * (S + 1));
    const std::uint64_t take = std::min<std::uint64_t>(n, S);
    mine[0] = take;
    for (std::uint64_t j = 0; j < take; ++j)
      mine[static_cast<std::size_t>(j) + 1] = key[static_cast<std::size_t>(j * n / take)];
    c_.allgather(mine.data(), all.data(), S + 1);
    std::vector<std::uint64_t> sample;
    for (int q = 0; q < P_; ++q) {
      const std::uint64_t* b = all.data() + static_cast<std::size_t>(q) * (S + 1);
      sample.insert(sample.end(), b + 1, b + 1 + b[0]);
    }
    if (sample.empty()) return;  // nothing added anywhere yet: nothing to route
    std::sort(sample.begin(), sample.end());
    splitters_.resize(static_cast<std::size_t>(P_) - 1);
    for (std::size_t q = 0; q + 1 < static_cast<std::size_t>(P_); ++q)
      splitters_[q] = sample[(q + 1) * sample.size() / static_cast<std::size_t>(P_)];
    if (P_ == 1) splitters_.push_back(std::numeric_limits<std::uint64_t>::max());  // chosen
  }

  nnz_t count_unique() override {
    nnz_t local = 0;
    comm::run_collectively(c_, [&] {
      finish_adding();
      Timer t;
      local = count_local(UniqueWriter::kNoCutoff);
      merge_s_ += t.seconds();
    });
    local_count_ = local;
    count_cutoff_ = UniqueWriter::kNoCutoff;
    local_count_valid_ = true;
    return c_.allreduce_value<nnz_t>(local);
  }

  std::uint64_t id_cutoff(nnz_t target, std::uint64_t lo, std::uint64_t hi) override {
    TESSERA_EXPECTS(o_.policy == MergePolicy::keep_first, "id_cutoff needs the keep-first policy");
    TESSERA_EXPECTS(lo < hi && target >= 1, "a range [lo, hi) and a target >= 1");
    while (true) {
      const std::uint64_t width = (hi - lo + kHistBuckets - 1) / kHistBuckets;
      const std::uint64_t nb = (hi - lo + width - 1) / width;
      // hist[0]: first ids below lo; hist[1 + j]: in [lo + j width, lo + (j + 1) width).
      std::vector<std::uint64_t> hist(static_cast<std::size_t>(nb + 1), 0);
      comm::run_collectively(c_, [&] {
        finish_adding();
        Timer t;
        merge([&](const R& g) {
          if (g.id < lo) {
            ++hist[0];
          } else if (g.id < hi) {
            ++hist[static_cast<std::size_t>(1 + (g.id - lo) / width)];
          }
          return true;
        });
        merge_s_ += t.seconds();
      });
      const std::vector<std::uint64_t> mine = hist;
      c_.allreduce(hist.data(), hist.size());
      std::uint64_t acc = hist[0], total = hist[0];
      for (std::size_t j = 1; j < hist.size(); ++j) total += hist[j];
      TESSERA_EXPECTS(
          acc < static_cast<std::uint64_t>(target) && static_cast<std::uint64_t>(target) <= total,
          "id_cutoff: " << acc << " coordinates first drawn below " << lo << ", " << total
                        << " below " << hi << ", target " << target);
      std::uint64_t j = 0;
      for (; j < nb; ++j) {
        const std::uint64_t in = hist[static_cast<std::size_t>(1 + j)];
        if (acc + in >= static_cast<std::uint64_t>(target)) break;
        acc += in;
      }
      const std::uint64_t blo = lo + j * width;
      if (width == 1) {
        // This rank's count below the cutoff, for write(): no further counting pass.
        std::uint64_t below = 0;
        for (std::uint64_t i = 0; i <= j + 1; ++i) below += mine[static_cast<std::size_t>(i)];
        local_count_ = static_cast<nnz_t>(below);
        count_cutoff_ = blo + 1;
        local_count_valid_ = true;
        return blo + 1;
      }
      hi = std::min(hi, blo + width);
      lo = blo;
    }
  }

  UniqueStats write(H5Header h, const H5WriteOptions& w, std::uint64_t cutoff) override {
    TESSERA_EXPECTS(!written_, "write twice");
    TESSERA_EXPECTS(cutoff == UniqueWriter::kNoCutoff || o_.policy == MergePolicy::keep_first,
                    "a cutoff needs the keep-first policy");
    TESSERA_EXPECTS(static_cast<int>(h.dims.size()) == N_,
                    "header dims of order " << N_ << ", got " << h.dims.size());
    written_ = true;
    nnz_t local = 0;
    comm::run_collectively(c_, [&] {
      finish_adding();
      if (local_count_valid_ && cutoff == count_cutoff_) {
        local = local_count_;
      } else {
        Timer t;
        local = count_local(cutoff);
        merge_s_ += t.seconds();
      }
    });
    std::vector<nnz_t> counts(static_cast<std::size_t>(P_), 0);
    c_.allgather(&local, counts.data(), 1);
    nnz_t offset = 0, total = 0;
    for (int q = 0; q < P_; ++q) {
      if (q < me_) offset += counts[static_cast<std::size_t>(q)];
      total += counts[static_cast<std::size_t>(q)];
    }
    if (total == 0) throw CollectiveError("write " + path_ + ": no nonzeros to write");
    h.nnz = total;
    h.has_duplicates = 0;
    h.sorted_mode = o_.sort_mode;
    Timer tw;
    H5TensorWriter writer(path_, h, c_, w);
    const auto piece = static_cast<nnz_t>(out_piece_);
    const nnz_t rounds =
        c_.allreduce_value<nnz_t>((local + piece - 1) / piece, comm::ReduceOp::max);
    std::vector<std::vector<index_t>> idx(static_cast<std::size_t>(N_));
    std::vector<double> vals;
    std::optional<Merger> mg;
    comm::run_collectively(c_, [&] { mg.emplace(*this); });
    nnz_t at = offset, left = local;
    for (nnz_t r = 0; r < rounds; ++r) {
      const nnz_t n = std::min(piece, left);
      comm::run_collectively(c_, [&] {
        for (auto& v : idx) v.resize(static_cast<std::size_t>(n));
        vals.resize(static_cast<std::size_t>(n));
        nnz_t k = 0;
        R g;
        while (k < n) {
          TESSERA_EXPECTS(mg->next_group(g, o_.policy), "a group for position " << at + k);
          if (g.id >= cutoff) continue;
          for (int m = 0; m < N_; ++m)
            idx[static_cast<std::size_t>(m)][static_cast<std::size_t>(k)] = g.c[m];
          vals[static_cast<std::size_t>(k)] = g.v;
          ++k;
        }
      });
      std::vector<H5Piece> pieces;
      if (n > 0) {
        H5Piece p;
        p.first = at;
        p.count = n;
        for (int m = 0; m < N_; ++m) p.idx[m] = idx[static_cast<std::size_t>(m)].data();
        p.vals = vals.data();
        pieces.push_back(p);
      }
      writer.write(pieces);
      at += n;
      left -= n;
    }
    writer.commit();
    const double write_s = tw.seconds();
    // Nothing held any more; the scratch file (unlinked at creation) goes with its descriptor.
    mg.reset();
    std::vector<R>().swap(tail_);
    blocks_.clear();
    held_ = 0;
    runs_.clear();
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    UniqueStats s;
    std::uint64_t used = 0;
    for (const auto& [a, b] : ids_)
      if (a < cutoff) used += std::min(b, cutoff) - a;
    std::uint64_t sums[4] = {added_, used, local_runs_, spilled_};
    c_.allreduce(sums, 4);
    s.entries = static_cast<nnz_t>(sums[0]);
    s.used = static_cast<nnz_t>(sums[1]);
    s.unique = total;
    s.repeats = s.used - s.unique;
    s.runs = static_cast<nnz_t>(sums[2]);
    s.spilled_bytes = sums[3];
    double secs[3] = {sort_s_, merge_s_, write_s};
    c_.allreduce(secs, 3, comm::ReduceOp::max);
    s.sort_seconds = secs[0];
    s.merge_seconds = secs[1];
    s.write_seconds = secs[2];
    s.write_mode = writer.mode();
    return s;
  }

 private:
  struct Run {
    std::uint64_t offset, count;  // records at byte `offset` of the scratch file
  };

  /// k-way merge of the scratch runs and the blocks in memory, in record order.
  class Merger {
   public:
    explicit Merger(ImplK& m) : m_(m) {
      const std::size_t nruns = m.runs_.size();
      const std::size_t per =
          nruns == 0 ? 0 : std::max<std::size_t>(kMinRunBuffer, m.merge_records_ / nruns);
      src_.reserve(nruns + m.blocks_.size());
      for (const Run& r : m.runs_) {
        Source s;
        s.off = r.offset;
        s.left = r.count;
        s.buf.resize(std::min<std::uint64_t>(per, r.count));
        if (refill(s)) src_.push_back(std::move(s));
      }
      for (const auto& b : m.blocks_) {
        if (b.empty()) continue;
        Source s;
        s.cur = b.data();
        s.end = b.data() + b.size();
        src_.push_back(std::move(s));
      }
      heap_.resize(src_.size());
      for (std::size_t i = 0; i < heap_.size(); ++i) heap_[i] = i;
      std::make_heap(heap_.begin(), heap_.end(), greater());
    }

    /// The next record in order, or nullptr at the end.
    const R* peek() const { return heap_.empty() ? nullptr : src_[heap_.front()].cur; }

    void pop() {
      Source& s = src_[heap_.front()];
      ++s.cur;
      ++consumed_;
      if (s.cur == s.end && !refill(s)) {
        std::pop_heap(heap_.begin(), heap_.end(), greater());
        heap_.pop_back();
      } else if (heap_.size() > 1) {
        std::pop_heap(heap_.begin(), heap_.end(), greater());
        std::push_heap(heap_.begin(), heap_.end(), greater());
      }
    }

    /// The next group of equal coordinates reduced by `policy` (g.id: its first entry id).
    bool next_group(R& g, MergePolicy policy) {
      const R* r = peek();
      if (!r) return false;
      g = *r;
      pop();
      while ((r = peek()) != nullptr && same_key(*r, g)) {
        if (policy == MergePolicy::sum) g.v += r->v;
        pop();
      }
      return true;
    }

    std::uint64_t consumed() const { return consumed_; }

   private:
    struct Source {
      const R* cur = nullptr;
      const R* end = nullptr;
      std::vector<R> buf;  // scratch runs only
      std::uint64_t off = 0, left = 0;
    };
    /// Heap order: the source whose current record is smallest on top.
    auto greater() const {
      return
          [this](std::size_t a, std::size_t b) { return RecLess<K>()(*src_[b].cur, *src_[a].cur); };
    }
    bool refill(Source& s) {
      if (s.left == 0) return false;
      const std::uint64_t n = std::min<std::uint64_t>(s.buf.size(), s.left);
      m_.read_scratch(s.buf.data(), n * sizeof(R), s.off);
      s.off += n * sizeof(R);
      s.left -= n;
      s.cur = s.buf.data();
      s.end = s.cur + n;
      return true;
    }

    ImplK& m_;
    std::vector<Source> src_;
    std::vector<std::size_t> heap_;
    std::uint64_t consumed_ = 0;
  };

  /// Sorts the tail into a block (keep-first: one record per coordinate).
  void sort_tail() {
    if (tail_.empty()) return;
    Timer t;
    sort_records<K>(tail_.data(), tail_.data() + tail_.size());
    if (o_.policy == MergePolicy::keep_first) {
      const auto last = std::unique(tail_.begin(), tail_.end(),
                                    [](const R& x, const R& y) { return same_key(x, y); });
      held_ -= static_cast<std::size_t>(tail_.end() - last);
      tail_.erase(last, tail_.end());
      if (tail_.size() < tail_.capacity() / 2) tail_.shrink_to_fit();
    }
    blocks_.push_back(std::move(tail_));
    tail_ = std::vector<R>();
    sort_s_ += t.seconds();
  }

  /// Before a merge: the tail sorted, the add phase's progress finished.
  void finish_adding() {
    sort_tail();
    if (progress_) progress_->finish();
  }

  /// Writes every held block to the scratch file as a sorted run and holds nothing.
  void spill() {
    sort_tail();
    if (o_.fail_at_spill >= 0 && local_runs_ >= static_cast<std::uint64_t>(o_.fail_at_spill) &&
        me_ == P_ - 1)
      throw InputError("deduplicating " + path_ + ": injected failure at sorted run " +
                       std::to_string(local_runs_ + 1) + " (testing)");
    Timer t;
    if (fd_ < 0) {
      fd_ = ::open(scratch_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd_ < 0)
        throw InputError("cannot create the scratch file " + scratch_ + " (sorted runs of " +
                         path_ + "): " + errno_text(errno));
      // Unlinked at once: the space is freed when the descriptor closes, however the
      // process ends.
      ::unlink(scratch_.c_str());
    }
    for (const auto& b : blocks_) {
      if (b.empty()) continue;
      const std::uint64_t bytes = b.size() * sizeof(R);
      try {
        posix::pwrite_full(fd_, b.data(), bytes, scratch_end_, scratch_);
      } catch (const InputError& e) {
        throw InputError(std::string(e.what()) + " (scratch file of the sorted runs of " + path_ +
                         ": make room there or choose another scratch folder)");
      }
      runs_.push_back({scratch_end_, b.size()});
      ++local_runs_;
      scratch_end_ += bytes;
      spilled_ += bytes;
    }
    blocks_.clear();
    held_ = 0;
    sort_s_ += t.seconds();
  }

  void read_scratch(void* dst, std::uint64_t bytes, std::uint64_t off) const {
    posix::pread_full(fd_, dst, bytes, off, scratch_);
  }

  /// One pass over the groups in order: f(group) for each (reduced by the policy; g.id is
  /// the group's first id); f returns false to stop.
  template <typename F>
  void merge(F&& f) {
    std::uint64_t total = held_;
    for (const Run& r : runs_) total += r.count;
    Progress progress(o_.progress && me_ == 0, "merging sorted entries of", base_name(path_),
                      total * sizeof(R));
    Merger mg(*this);
    R g;
    std::uint64_t n = 0;
    while (mg.next_group(g, o_.policy)) {
      if (!f(g)) break;
      if ((++n & 0xFFFFF) == 0) progress.update(mg.consumed() * sizeof(R));
    }
  }

  nnz_t count_local(std::uint64_t cutoff) {
    nnz_t n = 0;
    merge([&](const R& g) {
      if (g.id < cutoff) ++n;
      return true;
    });
    return n;
  }

  const comm::Communicator& c_;
  std::string path_, scratch_;
  int N_, P_, me_;
  UniqueWriterOptions o_;
  std::uint64_t cap_ = 0, slice_ = 0, merge_records_ = 0, out_piece_ = 0;
  std::size_t block_ = 0;
  std::vector<std::vector<R>> blocks_;  // sorted blocks held in memory
  std::vector<R> tail_;                 // received, not sorted yet
  /// Mode-sorted order: the owners' key bounds (owner q holds keys in
  /// [splitters_[q-1], splitters_[q])); empty until chosen.
  std::vector<std::uint64_t> splitters_;
  std::size_t held_ = 0;  // records in blocks_ and tail_
  std::vector<Run> runs_;
  int fd_ = -1;
  std::uint64_t scratch_end_ = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ids_;  // id ranges added here
  std::uint64_t added_ = 0, received_ = 0, local_runs_ = 0, spilled_ = 0;
  nnz_t local_count_ = 0;                                 // groups with first id below
  std::uint64_t count_cutoff_ = UniqueWriter::kNoCutoff;  // this cutoff, valid until an add
  bool local_count_valid_ = false;
  bool written_ = false;
  double sort_s_ = 0, merge_s_ = 0;
  std::unique_ptr<Progress> progress_;
  std::uint64_t progress_done_ = 0;
};

}  // namespace

UniqueWriter::UniqueWriter(const std::string& out_path, int order, const comm::Communicator& c,
                           const UniqueWriterOptions& o) {
  TESSERA_EXPECTS(c.memory_space() == comm::MemorySpace::host,
                  "UniqueWriter needs a host communicator");
  comm::run_collectively(c, [&] {
    TESSERA_INPUT_CHECK(order >= 1 && order <= kMaxOrder,
                        "write " << out_path << ": expected a tensor of order 1 to " << kMaxOrder
                                 << ", found order " << order);
  });
  if (order <= 2) {
    impl_ = std::make_unique<ImplK<2>>(out_path, order, c, o);
  } else if (order <= 4) {
    impl_ = std::make_unique<ImplK<4>>(out_path, order, c, o);
  } else if (order <= 8) {
    impl_ = std::make_unique<ImplK<8>>(out_path, order, c, o);
  } else {
    impl_ = std::make_unique<ImplK<16>>(out_path, order, c, o);
  }
}

UniqueWriter::~UniqueWriter() = default;

void UniqueWriter::expect(std::uint64_t entries) {
  impl_->expect(entries);
}

void UniqueWriter::add(nnz_t count, const index_t* const* idx, const double* vals,
                       std::uint64_t first_id) {
  impl_->add(count, idx, vals, first_id);
}

nnz_t UniqueWriter::count_unique() {
  return impl_->count_unique();
}

std::uint64_t UniqueWriter::id_cutoff(nnz_t target, std::uint64_t lo, std::uint64_t hi) {
  return impl_->id_cutoff(target, lo, hi);
}

UniqueStats UniqueWriter::write(H5Header h, const H5WriteOptions& w, std::uint64_t cutoff) {
  return impl_->write(std::move(h), w, cutoff);
}

}  // namespace tessera::io
