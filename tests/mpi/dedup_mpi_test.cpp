// io::UniqueWriter across ranks (dedup_mpi_np<P>, P = 1..3): entries with many repeated
// coordinates, added in pieces in any order, give a store equal to a std::map reference (sum
// in entry-id order, bit for bit; keep-first by entry id), has_duplicates = 0, the same file
// byte for byte on sub-communicators of 1..P ranks and with a memory limit so small that
// sorted runs spill to scratch files (which are gone afterwards); the id cutoff of
// keep-first; an injected failure in the middle of the external sort leaves no file; and
// require_unique_store's message. Both store orders: by coordinate hash, and by the
// longest mode (sorted_mode, what convert and generate write).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/dedup.hpp"
#include "io/h5store.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

const comm::MpiCommunicator& world() {
  static const comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

std::uint64_t shared_seed() {
  std::uint64_t s = test::fresh_seed();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

/// A folder of its own under the test folder (created by rank 0; same name on every rank).
std::string fresh_dir(const std::string& name) {
  static int counter = 0;
  const std::string d = test::temp_dir() + "/" + std::to_string(counter++) + "-" + name;
  if (world().rank() == 0) fs::create_directories(d);
  MPI_Barrier(MPI_COMM_WORLD);
  return d;
}

using Coord = std::vector<index_t>;

/// The entries of a test: entry id -> coordinate (skewed, so that low indices repeat a lot)
/// and a value (not dyadic: sums depend on their order).
struct Entries {
  std::vector<std::uint64_t> dims;
  std::uint64_t count = 0, seed = 0;
  Coord coord(std::uint64_t id) const {
    Coord c(dims.size());
    for (std::size_t n = 0; n < dims.size(); ++n) {
      const double u = uniform01(hash_keys(seed, id, n));
      c[n] = static_cast<index_t>(static_cast<double>(dims[n]) * u * u);  // skewed to 0
    }
    return c;
  }
  double value(std::uint64_t id) const { return 2 * uniform01(hash_keys(seed, id, 99)) - 1; }
};

/// The std::map reference: sum in id order, or the value of the smallest id; only ids below
/// `cutoff`.
std::map<Coord, double> reference(const Entries& e, MergePolicy policy,
                                  std::uint64_t cutoff = UniqueWriter::kNoCutoff) {
  std::map<Coord, double> m;
  for (std::uint64_t id = 0; id < e.count && id < cutoff; ++id) {
    const Coord c = e.coord(id);
    auto it = m.find(c);
    if (it == m.end()) {
      m.emplace(c, e.value(id));
    } else if (policy == MergePolicy::sum) {
      it->second += e.value(id);
    }
  }
  return m;
}

/// Adds this rank's ids (a contiguous share of [0, count)) in three pieces of unequal size,
/// last piece first.
void add_share(UniqueWriter& u, const Entries& e, const comm::Communicator& c) {
  const auto P = static_cast<std::uint64_t>(c.size()), r = static_cast<std::uint64_t>(c.rank());
  const std::uint64_t lo = e.count * r / P, hi = e.count * (r + 1) / P;
  const std::uint64_t cut[4] = {lo, lo + (hi - lo) / 7, lo + 4 * (hi - lo) / 7, hi};
  const int N = static_cast<int>(e.dims.size());
  u.expect(e.count);
  for (int p = 2; p >= 0; --p) {
    const std::uint64_t a = cut[p], b = cut[p + 1];
    std::vector<std::vector<index_t>> idx(static_cast<std::size_t>(N));
    std::vector<double> vals;
    for (std::uint64_t id = a; id < b; ++id) {
      const Coord x = e.coord(id);
      for (int n = 0; n < N; ++n) idx[static_cast<std::size_t>(n)].push_back(x[n]);
      vals.push_back(e.value(id));
    }
    const index_t* ptr[kMaxOrder] = {};
    for (int n = 0; n < N; ++n) ptr[n] = idx[static_cast<std::size_t>(n)].data();
    u.add(static_cast<nnz_t>(b - a), ptr, vals.data(), a);
  }
}

H5Header header(const Entries& e) {
  H5Header h;
  h.dims = e.dims;
  h.source = "dedup test";
  h.has_duplicates = -1;  // the writer sets 0
  return h;
}

H5WriteOptions write_options() {
  H5WriteOptions w;
  w.chunk_elems = 97;  // chunks that split every rank's range
  w.progress = false;
  return w;
}

UniqueWriterOptions options(MergePolicy policy, std::uint64_t memory, const std::string& scratch) {
  UniqueWriterOptions o;
  o.policy = policy;
  o.memory_limit = memory;
  o.scratch_dir = scratch;
  o.progress = false;
  return o;
}

/// The store read back (every nonzero, stored order) and checked: has_duplicates = 0, no
/// coordinate twice, sorted_mode as written (-1: none) and, when one, the stored order
/// non-decreasing in that mode.
std::map<Coord, double> read_back(const std::string& path, nnz_t* nnz = nullptr,
                                  int sorted_mode = -1) {
  H5TensorReader rd(path);
  EXPECT_EQ(rd.info().has_duplicates, 0) << path;
  EXPECT_EQ(rd.info().sorted_mode, sorted_mode) << path;
  SparseTensor<double> x;
  rd.read(0, rd.info().nnz, &x);
  if (nnz) *nnz = x.nnz();
  if (sorted_mode >= 0) {
    const auto& k = x.idx[static_cast<std::size_t>(sorted_mode)];
    EXPECT_TRUE(std::is_sorted(k.begin(), k.end()))
        << path << ": not in non-decreasing mode-" << sorted_mode << " order";
  }
  std::map<Coord, double> m;
  for (nnz_t k = 0; k < x.nnz(); ++k) {
    Coord c(static_cast<std::size_t>(x.order()));
    for (int n = 0; n < x.order(); ++n)
      c[static_cast<std::size_t>(n)] =
          x.idx[static_cast<std::size_t>(n)][static_cast<std::size_t>(k)];
    EXPECT_TRUE(m.emplace(c, x.vals[static_cast<std::size_t>(k)]).second)
        << path << ": a repeated coordinate at position " << k;
  }
  return m;
}

void expect_equal(const std::map<Coord, double>& got, const std::map<Coord, double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  auto g = got.begin();
  for (auto w = want.begin(); w != want.end(); ++w, ++g) {
    ASSERT_EQ(g->first, w->first) << what;
    if (std::memcmp(&g->second, &w->second, sizeof(double)) != 0 && bad++ < 5)
      ADD_FAILURE() << what << ": value " << g->second << ", expected " << w->second
                    << " (bit for bit)";
  }
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

int entries_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ADD_FAILURE() << "left behind: " << e.path();
    ++n;
  }
  return n;
}

/// Writes the entries on the first q ranks of the world (a sub-communicator), the other
/// ranks wait. Returns the stats on the writing ranks.
UniqueStats write_on(int q, const Entries& e, const UniqueWriterOptions& o, const std::string& out,
                     std::uint64_t cutoff = UniqueWriter::kNoCutoff) {
  const int r = world().rank();
  auto sub = world().split(r < q ? 0 : 1, r);
  UniqueStats s;
  if (r < q) {
    UniqueWriter u(out, static_cast<int>(e.dims.size()), *sub, o);
    add_share(u, e, *sub);
    s = u.write(header(e), write_options(), cutoff);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return s;
}

struct Shape {
  std::vector<std::uint64_t> dims;
  std::uint64_t count;
  bool spills;  ///< with the sum policy and the tiny limit, on every rank count
};

/// The tiny memory limit: about 1200 records held per rank (the rest of the 48 KiB goes to
/// the routing slices and the merge and output buffers at their floors).
constexpr std::uint64_t kTinyMemory = std::uint64_t(48) << 10;

const std::vector<Shape> kShapes = {
    {{9, 7, 5}, 8000, true},                        // order 3 (records of 4 coordinates)
    {{30}, 2000, false},                            // order 1
    {{4, 3, 5, 2, 3}, 1500, false},                 // order 5 (records of 8 coordinates)
    {{2, 2, 2, 2, 1, 2, 2, 2, 2, 3}, 1500, false},  // order 10 (records of 16 coordinates)
};

TEST(DedupMpi, UniqueStoreEqualsTheMapReferenceOnEveryRankCountAndMemoryLimit) {
  const int P = world().size();
  // Both orders: by coordinate hash (sort mode -1) and by the longest mode's index (what
  // convert and generate write; owners hold index ranges).
  for (int sorted : {0, 1})
    for (MergePolicy policy : {MergePolicy::sum, MergePolicy::keep_first}) {
      for (const Shape& sh : kShapes) {
        Entries e;
        e.dims = sh.dims;
        e.count = sh.count;
        e.seed = shared_seed();
        const int sort_mode = sorted ? longest_mode(sh.dims) : -1;
        const std::string what = to_string(policy) + ", order " + std::to_string(sh.dims.size()) +
                                 ", sort mode " + std::to_string(sort_mode) + ", seed " +
                                 std::to_string(e.seed);
        SCOPED_TRACE(what);
        const auto want = reference(e, policy);
        ASSERT_LT(want.size(), e.count / 2 + 1) << "the test needs many repeats";
        const std::string dir = fresh_dir("unique"), scratch = fresh_dir("scratch");
        std::string first;
        // Every rank count 1..P, with plenty of memory and with a tiny limit (spills) and
        // sorted blocks of 64 records (several blocks in memory before a spill).
        for (int q = 1; q <= P; ++q) {
          for (int tiny : {0, 1}) {
            UniqueWriterOptions o =
                options(policy, tiny ? kTinyMemory : std::uint64_t(1) << 30, scratch);
            if (tiny) o.sort_block = 64;
            o.sort_mode = sort_mode;
            const std::string out = dir + "/q" + std::to_string(q) + (tiny ? "-tiny" : "") + ".h5";
            const UniqueStats s = write_on(q, e, o, out);
            if (world().rank() == 0) {
              const std::string run =
                  what + ", " + std::to_string(q) + " rank(s)" + (tiny ? ", tiny memory" : "");
              nnz_t nnz = 0;
              expect_equal(read_back(out, &nnz, sort_mode), want, run);
              EXPECT_EQ(s.unique, static_cast<nnz_t>(want.size())) << run;
              EXPECT_EQ(s.entries, static_cast<nnz_t>(e.count)) << run;
              EXPECT_EQ(s.used, s.entries) << run;
              EXPECT_EQ(s.repeats, s.entries - s.unique) << run;
              if (tiny && policy == MergePolicy::sum && sh.spills) {
                // sum keeps every copy until the end (keep-first holds one per coordinate per
                // sorted block, which may stay under the limit).
                EXPECT_GT(s.runs, 0) << run << ": nothing spilled";
                EXPECT_GT(s.spilled_bytes, 0u) << run;
              } else if (!tiny) {
                EXPECT_EQ(s.runs, 0) << run;
              }
              // The same file for every rank count and memory limit.
              const std::string b = bytes_of(out);
              if (first.empty()) {
                first = b;
              } else {
                EXPECT_TRUE(b == first) << run << ": the file differs from 1 rank's";
              }
            }
            MPI_Barrier(MPI_COMM_WORLD);
          }
        }
        if (world().rank() == 0) {
          EXPECT_EQ(entries_in(scratch), 0);
        }
        MPI_Barrier(MPI_COMM_WORLD);
      }
    }
}

TEST(DedupMpi, KeepFirstCutoffKeepsExactlyTheTargetFirstDrawn) {
  const int P = world().size();
  Entries e;
  e.dims = {12, 10, 8};
  e.count = 5000;
  e.seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(e.seed));
  const auto all = reference(e, MergePolicy::keep_first);
  const auto distinct = static_cast<nnz_t>(all.size());
  ASSERT_GT(distinct, 100);
  const std::string dir = fresh_dir("cutoff"), scratch = fresh_dir("cutoff-scratch");
  for (int tiny : {0, 1}) {
    UniqueWriterOptions o = options(MergePolicy::keep_first, tiny ? 1 : 1 << 26, scratch);
    UniqueWriter u(dir + "/c" + std::to_string(tiny) + ".h5", 3, world(), o);
    add_share(u, e, world());
    EXPECT_EQ(u.count_unique(), distinct);
    const nnz_t target = distinct - distinct / 3;
    // Coordinates first drawn below id 1 (one) and below e.count (all): the whole range.
    const std::uint64_t t = u.id_cutoff(target, 1, e.count);
    const auto want = reference(e, MergePolicy::keep_first, t);
    EXPECT_EQ(static_cast<nnz_t>(want.size()), target);
    EXPECT_EQ(static_cast<nnz_t>(reference(e, MergePolicy::keep_first, t - 1).size()), target - 1)
        << "the cutoff is not the smallest";
    const UniqueStats s = u.write(header(e), write_options(), t);
    EXPECT_EQ(s.unique, target);
    EXPECT_EQ(s.used, static_cast<nnz_t>(t));
    EXPECT_EQ(s.repeats, static_cast<nnz_t>(t) - target);
    if (world().rank() == 0)
      expect_equal(read_back(dir + "/c" + std::to_string(tiny) + ".h5"), want,
                   tiny ? "cutoff, tiny memory" : "cutoff");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  (void)P;
  if (world().rank() == 0) {
    EXPECT_EQ(entries_in(scratch), 0);
  }
}

TEST(DedupMpi, AddingAfterCountingKeepsCounting) {
  // The rounds of `generate --structure sampled`: count, add more ids, count again.
  Entries e;
  e.dims = {6, 6, 6};
  e.count = 3000;
  e.seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(e.seed));
  const std::string dir = fresh_dir("rounds");
  for (std::uint64_t memory : {std::uint64_t(1) << 26, std::uint64_t(1)}) {
    UniqueWriter u(dir + "/r.h5", 3, world(), options(MergePolicy::keep_first, memory, ""));
    const int P = world().size(), r = world().rank();
    nnz_t last = 0;
    for (std::uint64_t upto : {500, 1500, 3000}) {
      const std::uint64_t from = upto == 500 ? 0 : (upto == 1500 ? 500 : 1500);
      const std::uint64_t lo = from + (upto - from) * r / P,
                          hi = from + (upto - from) * (r + 1) / P;
      std::vector<std::vector<index_t>> idx(3);
      std::vector<double> vals;
      for (std::uint64_t id = lo; id < hi; ++id) {
        const Coord x = e.coord(id);
        for (int n = 0; n < 3; ++n) idx[n].push_back(x[n]);
        vals.push_back(e.value(id));
      }
      const index_t* ptr[3] = {idx[0].data(), idx[1].data(), idx[2].data()};
      u.add(static_cast<nnz_t>(hi - lo), ptr, vals.data(), lo);
      Entries sofar = e;
      sofar.count = upto;
      const nnz_t got = u.count_unique();
      EXPECT_EQ(got, static_cast<nnz_t>(reference(sofar, MergePolicy::keep_first).size()));
      EXPECT_GE(got, last);
      last = got;
    }
    u.write(header(e), write_options());
    if (r == 0)
      expect_equal(read_back(dir + "/r.h5"), reference(e, MergePolicy::keep_first), "after rounds");
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) fs::remove(dir + "/r.h5");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (world().rank() == 0) {
    int left = 0;
    for (const auto& x : fs::directory_iterator(dir)) {
      ADD_FAILURE() << "left behind: " << x.path();
      ++left;
    }
    EXPECT_EQ(left, 0) << "scratch files in the output's folder";
  }
}

TEST(DedupMpi, AFailureInTheExternalSortLeavesNoFile) {
  Entries e;
  e.dims = {20, 20, 20};
  e.count = 6000;
  e.seed = shared_seed();
  const std::string dir = fresh_dir("failure"), scratch = fresh_dir("failure-scratch");
  const std::string out = dir + "/out.h5";
  UniqueWriterOptions o = options(MergePolicy::sum, 1, scratch);
  o.fail_at_spill = 1;  // the second sorted run of the last rank
  std::string msg;
  bool collective = false;
  try {
    UniqueWriter u(out, 3, world(), o);
    add_share(u, e, world());
    u.write(header(e), write_options());
  } catch (const CollectiveError& x) {
    collective = true;
    msg = x.what();
  } catch (const std::exception& x) {
    msg = x.what();
  }
  EXPECT_TRUE(collective) << "expected a CollectiveError on every rank, got: " << msg;
  EXPECT_NE(msg.find("injected failure"), std::string::npos) << msg;
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) {
    EXPECT_FALSE(fs::exists(out));
    EXPECT_EQ(entries_in(dir), 0);
    EXPECT_EQ(entries_in(scratch), 0);
  }
  // A scratch folder that does not exist: refused up front, on every rank.
  o.fail_at_spill = -1;
  o.scratch_dir = dir + "/no/such/folder";
  collective = false;
  try {
    UniqueWriter u(out, 3, world(), o);
  } catch (const CollectiveError& x) {
    collective = true;
    msg = x.what();
  }
  EXPECT_TRUE(collective);
  EXPECT_NE(msg.find("no/such/folder"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

/// verify_h5 on the world; the message of its error ("" when none) and the check it made.
std::string verify_message(const std::string& path, std::string* check) {
  H5ReadOptions ro;
  ro.progress = false;
  ro.piece = 173;  // several pieces per rank: the order is checked across their ends too
  H5VerifyOptions vo;
  vo.memory_limit = kTinyMemory;  // the count's sort spills
  try {
    *check = verify_h5(path, world(), ro, vo).unique_check;
  } catch (const CollectiveError& x) {
    return x.what();
  }
  return "";
}

TEST(DedupMpi, VerifyChecksThatAStoreSayingUniqueIs) {
  // A store that says has_duplicates = 0 and holds repeats gives a wrong ||X|| and fit in
  // every run (runs trust the attribute): verify_h5 finds them, by the stored order where
  // it proves uniqueness, else by counting. Ranks 1..3 read equal shares of the order.
  Entries e;
  e.dims = {9, 7, 5};
  e.count = 4000;
  e.seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(e.seed));
  const std::string dir = fresh_dir("verify");
  const int P = world().size();
  for (int sort_mode : {longest_mode(e.dims), -1}) {
    UniqueWriterOptions o = options(MergePolicy::sum, std::uint64_t(1) << 30, dir);
    o.sort_mode = sort_mode;
    const std::string unique = dir + "/u" + std::to_string(sort_mode + 1) + ".h5";
    write_on(P, e, o, unique);
    std::string check;
    EXPECT_EQ(verify_message(unique, &check), "") << "sort mode " << sort_mode;
    // (mode m, coordinate) is the writer's order: proven without a sort; by hash it is not.
    EXPECT_EQ(check, sort_mode >= 0 ? "order" : "sort") << "sort mode " << sort_mode;
  }
  // The sorted store with one nonzero repeated: beside its copy (the order's strict test
  // fails on it) and at the end (out of order). Written on rank 0, sorted_mode kept.
  SparseTensor<double> x;
  H5Header meta;
  {
    H5TensorReader rd(dir + "/u" + std::to_string(longest_mode(e.dims) + 1) + ".h5");
    rd.read(0, rd.info().nnz, &x);
    meta.dims = rd.info().dims;
    meta.sorted_mode = rd.info().sorted_mode;
  }
  meta.has_duplicates = 0;  // the lie
  // Where the copy lands, so that every end the first pass compares across is crossed:
  // beside its original inside a piece (the middle), across the end of a piece (verify reads
  // pieces of 173), across the end of rank 1's share (an equal share of nnz + 1 entries),
  // and at the end of the store (out of order; that store promises no sorted mode).
  struct Place {
    const char* name;
    nnz_t k;  ///< the copy follows nonzero k (-1: at the end)
  };
  std::vector<Place> places = {{"middle", x.nnz() / 2}, {"piece-end", 172}, {"end", -1}};
  if (P > 1) places.push_back({"share-end", (x.nnz() + 1) / P - 1});
  ASSERT_GT(x.nnz(), 200) << "the test needs more than a piece";
  for (const Place& at : places) {
    SparseTensor<double> y(x.dims);
    const nnz_t k = at.k >= 0 ? at.k : x.nnz() / 2;
    for (nnz_t q = 0; q < x.nnz(); ++q) {
      index_t c[3] = {x.idx[0][q], x.idx[1][q], x.idx[2][q]};
      y.push_back(c, x.vals[static_cast<std::size_t>(q)]);
      if (at.k >= 0 && q == k) y.push_back(c, 1.5);
    }
    if (at.k < 0) {
      index_t c[3] = {x.idx[0][k], x.idx[1][k], x.idx[2][k]};
      y.push_back(c, 1.5);
    }
    const std::string lie = dir + "/" + at.name + ".h5";
    H5Header h = meta;
    if (at.k < 0) h.sorted_mode = -1;
    write_h5(lie, world().rank() == 0 ? y : SparseTensor<double>(y.dims), world(), h,
             write_options());
    std::string check;
    const std::string m = verify_message(lie, &check);
    EXPECT_NE(m.find(lie + ": has_duplicates = 0, but 1 of its " + std::to_string(y.nnz()) +
                     " nonzeros repeat a coordinate"),
              std::string::npos)
        << at.name << ": " << m;
    EXPECT_NE(m.find("tessera convert " + lie + " OUT.h5"), std::string::npos) << m;
  }
  // A repeat under a false sorted_mode: the repeat is reported (it changes a result; the
  // attribute does not).
  {
    SparseTensor<double> y(x.dims);
    for (nnz_t q = 0; q < x.nnz(); ++q) {
      index_t c[3] = {x.idx[0][q], x.idx[1][q], x.idx[2][q]};
      y.push_back(c, x.vals[static_cast<std::size_t>(q)]);
    }
    index_t c[3] = {x.idx[0][0], x.idx[1][0], x.idx[2][0]};
    y.push_back(c, 1.5);  // the first coordinate again, at the end: the sorted mode falls too
    const std::string lie = dir + "/both.h5";
    write_h5(lie, world().rank() == 0 ? y : SparseTensor<double>(y.dims), world(), meta,
             write_options());
    std::string check;
    const std::string m = verify_message(lie, &check);
    EXPECT_NE(m.find("has_duplicates = 0, but 1 of its"), std::string::npos) << m;
  }
  // One nonzero, has_duplicates = 0: unique by itself (the check reports the order).
  {
    SparseTensor<double> y(x.dims);
    index_t c[3] = {x.idx[0][0], x.idx[1][0], x.idx[2][0]};
    y.push_back(c, 2.0);
    const std::string one = dir + "/one.h5";
    write_h5(one, world().rank() == 0 ? y : SparseTensor<double>(y.dims), world(), meta,
             write_options());
    std::string check;
    EXPECT_EQ(verify_message(one, &check), "");
    EXPECT_EQ(check, "order");
  }
  // The sorted store with its halves swapped, unique but with a false sorted_mode: the
  // earliest fall is named, whether it lies inside a piece, between pieces or between ranks.
  {
    SparseTensor<double> y(x.dims);
    const nnz_t k = x.nnz() / 2;
    const int sm = meta.sorted_mode;
    for (nnz_t j = 0; j < x.nnz(); ++j) {
      const nnz_t q = (j + k) % x.nnz();
      index_t c[3] = {x.idx[0][q], x.idx[1][q], x.idx[2][q]};
      y.push_back(c, x.vals[static_cast<std::size_t>(q)]);
    }
    const std::string lie = dir + "/swapped.h5";
    write_h5(lie, world().rank() == 0 ? y : SparseTensor<double>(y.dims), world(), meta,
             write_options());
    std::string check;
    const std::string m = verify_message(lie, &check);
    const auto& ms = x.idx[static_cast<std::size_t>(sm)];
    EXPECT_NE(m.find(lie + ": sorted_mode = " + std::to_string(sm) + ", but the mode-" +
                     std::to_string(sm) + " index falls from " + std::to_string(ms.back()) +
                     " to " + std::to_string(ms.front()) + " at nonzero " +
                     std::to_string(x.nnz() - k) + " (0-based)"),
              std::string::npos)
        << m;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) {
    // Nothing of the counts' scratch files is left, and no ".verify" file was written.
    for (const auto& f : fs::directory_iterator(dir))
      EXPECT_EQ(f.path().extension(), ".h5") << f.path();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DedupMpi, RequireUniqueStoreNamesTheFileAndTheFix) {
  H5TensorInfo info;
  info.path = "data/amz.h5";
  info.has_duplicates = 0;
  EXPECT_NO_THROW(require_unique_store(info));
  for (int flag : {-1, 1}) {
    info.has_duplicates = flag;
    try {
      require_unique_store(info);
      ADD_FAILURE() << "has_duplicates = " << flag << " accepted";
    } catch (const InputError& x) {
      const std::string m = x.what();
      EXPECT_NE(m.find("data/amz.h5 has repeated coordinates or was never checked"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("has_duplicates = " + std::to_string(flag)), std::string::npos) << m;
      EXPECT_NE(m.find("run `tessera convert data/amz.h5 data/amz-unique.h5`"), std::string::npos)
          << m;
    }
  }
}

}  // namespace
}  // namespace tessera::io
