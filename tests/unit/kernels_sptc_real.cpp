// The OpenMP SpTC on real tensors from ../shared/data (skipped with a message when absent):
// the output of 2 and 3 threads, of the hashed accumulator, of the unswapped inputs and of
// Y a copy of X (not the same object) is bitwise the output of 1 thread (same coordinates in the
// same order, same values), and agrees with the reference backend within rounding. Values are the
// file's values times 1 / (1 + k % 7), so that sums depend on their order in the last bits. The
// contractions cover every row path of the cpu kernel: rows of one group (copied), rows of 2 to 4
// groups (merged group by group), rows accumulated (listed and merged, blocked, scanned), the
// columns taken from the rows (self-contraction), both sides built concurrently (Y a copy,
// 2 or more threads), the input swap and the final sort of an interleaved output.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/tns.hpp"
#include "kernels/sptc.hpp"
#include "test_util.hpp"

namespace tessera::kernels {
namespace {

SparseTensor<double> read_real(const std::string& path) {
  comm::MpiCommunicator world(MPI_COMM_WORLD);
  io::TnsReadOptions o;
  o.progress = false;
  SparseTensor<double> x = io::read_tns(path, world, o).local;
  for (std::size_t k = 0; k < x.vals.size(); ++k) x.vals[k] *= 1.0 / static_cast<double>(1 + k % 7);
  return x;
}

struct Variant {
  std::string name;
  cpu::ContractOptions options;
  bool copy = false;  ///< Y a copy of X instead of X itself
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (int t : {2, 3}) {
    cpu::ContractOptions o;
    o.threads = t;
    v.push_back({std::to_string(t) + " threads", o});
  }
  cpu::ContractOptions hashed;
  hashed.threads = 2;
  hashed.dense_accumulator_limit = 0;
  v.push_back({"hashed rows", hashed});
  cpu::ContractOptions noswap;
  noswap.threads = 2;
  noswap.allow_swap = false;
  v.push_back({"no swap", noswap});
  for (int t : {1, 2}) {
    cpu::ContractOptions o;
    o.threads = t;
    v.push_back({"Y a copy of X, " + std::to_string(t) + " thread(s)", o, true});
  }
  return v;
}

/// Contracts x with itself by `spec` with every variant against 1 thread and the reference.
void check_real(const SparseTensor<double>& x, const std::string& spec, std::int64_t min_nnz) {
  const auto s = parse_contract_spec(spec);
  cpu::ContractOptions one;
  one.threads = 1;
  ContractStats st1;
  const auto z1 = cpu::contract(x, x, s, &st1, one);
  ASSERT_GE(z1.nnz(), min_nnz) << spec;
  EXPECT_EQ(st1.output_nnz, z1.nnz()) << spec;
  // Y a copy of X: the column side is built from Y (not from X's rows), at the same time
  // as the row side with 2 or more threads; the output is the same.
  const SparseTensor<double> y = x;
  for (const auto& v : variants()) {
    ContractStats st;
    const auto z =
        v.copy ? cpu::contract(x, y, s, &st, v.options) : cpu::contract(x, x, s, &st, v.options);
    EXPECT_EQ(st.products, st1.products) << spec << ", " << v.name;
    EXPECT_EQ(z.dims, z1.dims) << spec << ", " << v.name;
    ASSERT_EQ(z.nnz(), z1.nnz()) << spec << ", " << v.name;
    for (int m = 0; m < z.order(); ++m)
      ASSERT_TRUE(z.idx[static_cast<std::size_t>(m)] == z1.idx[static_cast<std::size_t>(m)])
          << spec << ", " << v.name << ": coordinates of mode " << m << " differ";
    // Rows sum in the same order whatever the threads and accumulators: bitwise equal.
    ASSERT_TRUE(z.vals == z1.vals) << spec << ", " << v.name << ": values differ";
  }
  const auto want = reference::contract(x, x, s);
  ASSERT_EQ(want.nnz(), z1.nnz()) << spec;
  for (int m = 0; m < z1.order(); ++m)
    ASSERT_TRUE(want.idx[static_cast<std::size_t>(m)] == z1.idx[static_cast<std::size_t>(m)])
        << spec << ": coordinates of mode " << m << " differ from the reference";
  for (nnz_t k = 0; k < z1.nnz(); ++k)
    ASSERT_LE(
        std::fabs(z1.vals[static_cast<std::size_t>(k)] - want.vals[static_cast<std::size_t>(k)]),
        1e-12 * std::fabs(want.vals[static_cast<std::size_t>(k)]))
        << spec << ": nonzero " << k;
}

TEST(SptcReal, Icews14SameOutputForEveryThreadCount) {
  TESSERA_REQUIRE_SHARED(path, "tkg-icews14_subj-rel-obj-day.tns.gz");
  const auto x = read_real(path);
  // Event pairs of one relation on one day (single-group, listed and scanned rows), and of
  // one subject and relation with an output that interleaves X's and Y's letters.
  check_real(x, "ijkt,ljmt->iklm", 1000000);
  check_real(x, "ijkt,ijmu->kmtu", 1000000);
}

TEST(SptcReal, Fb15kSameOutputForEveryThreadCount) {
  TESSERA_REQUIRE_SHARED(path, "kg-fb15k-237_head-rel-tail.tns.gz");
  const auto x = read_real(path);
  // Relation pairs through a shared (head, tail): few columns, every row scanned; the
  // output order puts Y's letter first (swapped inputs).
  check_real(x, "ijk,ilk->lj", 500);
  // Tails of one (head, relation): wide rows over 14,541 columns.
  check_real(x, "ijk,ijl->kl", 1000000);
}

}  // namespace
}  // namespace tessera::kernels
