// Distributed SpTC (algo::contract) under mpiexec at several rank counts: random
// contractions (orders 2..5, 1..3 contracted modes, batch modes, interleaved output
// orders, self-contraction, repeated coordinates, cancellation to exact zeros) on the
// reference and cpu backends against the single-process reference kernel on the whole
// tensors; real tensors (congress "ijy,kjy->ik", a 4-mode tags-math-sx contraction) read
// from ../shared/data against the single-process reference; the gather and sorted-write
// helpers; and errors thrown on every rank alike (bad shapes, the memory limit).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "algo/contract.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/tns.hpp"
#include "kernels/backend.hpp"
#include "kernels/sptc.hpp"
#include "test_util.hpp"
#include "util/rng.hpp"

namespace tessera {
namespace {

using kernels::BackendKind;
using kernels::ContractSpec;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

/// One seed for every rank (rank 0's fresh seed).
std::uint64_t common_seed() {
  std::uint64_t s = test::fresh_seed();
  world().broadcast(&s, 1, 0);
  return s;
}

/// The same random tensor on every rank: integer values in +-[1, 4] (exact sums in any
/// order), repeated coordinates kept.
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                              std::mt19937_64& rng) {
  SparseTensor<T> x(dims);
  std::vector<index_t> c(dims.size());
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(rng() % dims[m]);
    const double v = static_cast<double>(1 + rng() % 4) * ((rng() & 1) ? 1.0 : -1.0);
    x.push_back(c.data(), static_cast<T>(v));
  }
  return x;
}

/// This rank's share: nonzero k goes to rank hash(k) % P (an arbitrary distribution).
template <typename T>
SparseTensor<T> share(const SparseTensor<T>& full, std::uint64_t salt) {
  const int P = world().size(), r = world().rank();
  SparseTensor<T> s(full.dims);
  index_t c[kMaxOrder];
  for (nnz_t k = 0; k < full.nnz(); ++k) {
    if (static_cast<int>(mix64(salt ^ static_cast<std::uint64_t>(k)) % P) != r) continue;
    for (int m = 0; m < full.order(); ++m) c[m] = full.idx[m][k];
    s.push_back(c, full.vals[k]);
  }
  return s;
}

/// Every rank's share, gathered in rank order (no sorting, no merging).
template <typename T>
SparseTensor<T> concat(const SparseTensor<T>& local) {
  const int P = world().size();
  SparseTensor<T> out(local.dims);
  const std::int64_t n = local.nnz();
  std::vector<std::int64_t> counts(P);
  world().allgather(&n, counts.data(), 1);
  std::vector<std::int64_t> send(P, n), sd(P, 0), rd(P, 0);
  std::int64_t total = 0;
  for (int p = 0; p < P; ++p) {
    rd[p] = total;
    total += counts[p];
  }
  for (int m = 0; m < local.order(); ++m) {
    out.idx[m].resize(total);
    world().alltoallv_raw(local.idx[m].data(), send.data(), sd.data(), out.idx[m].data(),
                          counts.data(), rd.data(), comm::DataType::u32);
  }
  out.vals.resize(total);
  world().alltoallv_raw(local.vals.data(), send.data(), sd.data(), out.vals.data(), counts.data(),
                        rd.data(), comm::data_type_of<T>());
  return out;
}

/// Bit-for-bit coordinates; values equal up to rounding (exact for integer data).
template <typename T>
void expect_same(const SparseTensor<T>& got, const SparseTensor<T>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.dims, want.dims) << what;
  ASSERT_EQ(got.nnz(), want.nnz()) << what;
  for (int m = 0; m < want.order(); ++m)
    ASSERT_EQ(got.idx[m], want.idx[m]) << what << " mode " << m;
  for (nnz_t k = 0; k < want.nnz(); ++k)
    ASSERT_LE(std::fabs(static_cast<double>(got.vals[k]) - static_cast<double>(want.vals[k])),
              tol * std::fabs(static_cast<double>(want.vals[k])))
        << what << " nonzero " << k;
}

/// The distributed result on every rank must be disjoint, sorted, and together equal to
/// the single-process reference on the whole tensors (compared on rank 0).
template <typename T>
void check_distributed(const algo::ContractResult<T>& r, const SparseTensor<T>& want,
                       const std::string& what) {
  const auto& z = r.local;
  for (nnz_t k = 1; k < z.nnz(); ++k) {
    bool less = false;
    for (int m = 0; m < z.order(); ++m)
      if (z.idx[m][k - 1] != z.idx[m][k]) {
        less = z.idx[m][k - 1] < z.idx[m][k];
        break;
      }
    ASSERT_TRUE(less) << what << ": local share not strictly sorted at " << k;
  }
  // Every nonzero lives on the rank its output coordinates hash to.
  const int P = world().size();
  index_t c[kMaxOrder];
  for (nnz_t k = 0; k < z.nnz(); ++k) {
    for (int m = 0; m < z.order(); ++m) c[m] = z.idx[m][k];
    ASSERT_EQ(algo::tuple_owner(c, z.order(), P), world().rank()) << what;
  }
  const auto all = algo::gather(z, world(), 0);
  EXPECT_EQ(r.global_nnz, want.nnz()) << what;
  if (world().rank() == 0) expect_same(all, want, 1e-12, what);
}

template <typename T>
class ContractMpi : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ContractMpi, Types);

TYPED_TEST(ContractMpi, RandomContractionsMatchTheSingleProcessReference) {
  using T = TypeParam;
  const std::uint64_t seed = common_seed();
  std::mt19937_64 rng(seed);
  struct Case {
    const char* spec;
    std::map<char, std::uint64_t> len;
    std::size_t nx, ny;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{'i', 30}, {'j', 20}, {'k', 25}}, 200, 200},
      {"ijk,klm->ijlm", {{'i', 6}, {'j', 7}, {'k', 9}, {'l', 5}, {'m', 6}}, 300, 300},
      {"ijk,jkl->li", {{'i', 12}, {'j', 6}, {'k', 5}, {'l', 11}}, 250, 250},
      {"abcd,dcbe->ea", {{'a', 5}, {'b', 4}, {'c', 3}, {'d', 4}, {'e', 6}}, 200, 200},
      {"abcde,cdefg->gabf",
       {{'a', 3}, {'b', 3}, {'c', 3}, {'d', 2}, {'e', 3}, {'f', 4}, {'g', 3}},
       200,
       200},
      {"iajb,ajc->cbi", {{'i', 5}, {'a', 4}, {'j', 3}, {'b', 4}, {'c', 6}}, 150, 120},
      {"bij,bjk->ikb", {{'b', 4}, {'i', 6}, {'j', 5}, {'k', 7}}, 200, 200},  // batch mode b
      {"ij,kl->likj", {{'i', 3}, {'j', 4}, {'k', 5}, {'l', 2}}, 10, 12},     // outer product
  };
  for (const auto& c : cases) {
    const ContractSpec s = kernels::parse_contract_spec(c.spec);
    std::vector<std::uint64_t> xd, yd;
    for (char l : s.x) xd.push_back(c.len.at(l));
    for (char l : s.y) yd.push_back(c.len.at(l));
    const auto X = random_tensor<T>(xd, c.nx, rng);
    const auto Y = random_tensor<T>(yd, c.ny, rng);
    const auto want = kernels::reference::contract(X, Y, s);
    ASSERT_GT(want.nnz(), 0) << c.spec;
    const auto xs = share(X, seed + 1), ys = share(Y, seed + 2);
    for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
      auto be = kernels::make_backend<T>(kind, 1);
      algo::ContractOptions o;
      o.print = false;
      const auto r = algo::contract(xs, ys, s, *be, world(), o);
      const std::string what = std::string(c.spec) + " on " + kernels::to_string(kind) + " at " +
                               std::to_string(world().size()) + " ranks, seed " +
                               std::to_string(seed);
      check_distributed(r, want, what);
      EXPECT_EQ(r.dims, want.dims);
      EXPECT_EQ(r.global_input_nnz[0], X.nnz());
      EXPECT_EQ(r.global_input_nnz[1], Y.nnz());
      kernels::ContractStats st;
      kernels::reference::contract(X, Y, s, &st);
      EXPECT_EQ(r.global_products, st.products) << what;
      EXPECT_GE(r.global_partial_entries, want.nnz()) << what;
      EXPECT_GT(r.memory.total_bytes, 0u);
    }
  }
}

TYPED_TEST(ContractMpi, SelfContractionCancellationAndEmptyResults) {
  using T = TypeParam;
  const std::uint64_t seed = common_seed();
  std::mt19937_64 rng(seed);
  auto be = kernels::make_backend<T>(BackendKind::cpu, 1);
  algo::ContractOptions o;
  o.print = false;
  // Self-contraction, same matched modes in both roles: routed once.
  {
    const auto X = random_tensor<T>({15, 12, 4}, 400, rng);
    const auto s = kernels::parse_contract_spec("ijy,kjy->ik");
    const auto xs = share(X, seed);
    const auto r = algo::contract(xs, xs, s, *be, world(), o);
    EXPECT_TRUE(r.routed_once);
    check_distributed(r, kernels::reference::contract(X, X, s), "self ijy,kjy->ik");
    // Different matched modes in the two roles: routed twice, same answer.
    const auto s2 = kernels::parse_contract_spec("ijk,jkl->il");
    const auto X2 = random_tensor<T>({8, 8, 8}, 300, rng);
    const auto xs2 = share(X2, seed + 5);
    const auto r2 = algo::contract(xs2, xs2, s2, *be, world(), o);
    EXPECT_FALSE(r2.routed_once);
    check_distributed(r2, kernels::reference::contract(X2, X2, s2), "self ijk,jkl->il");
  }
  // Partial outputs that cancel only after the cross-rank merge: X's copies of one
  // nonzero, +v and -v, land on different ranks when shared by position.
  {
    const auto s = kernels::parse_contract_spec("ij,jk->ik");
    SparseTensor<T> X({4, 3}), Y({3, 5});
    const index_t a[] = {1, 2}, b[] = {2, 3}, d[] = {0, 0}, e[] = {0, 1};
    for (int rep = 0; rep < 8; ++rep) X.push_back(a, T(rep % 2 ? -3 : 3));  // sums to 0
    X.push_back(d, T(2));
    Y.push_back(b, T(5));
    Y.push_back(e, T(7));
    const auto want = kernels::reference::contract(X, Y, s);
    ASSERT_EQ(want.nnz(), 1);  // Z(0,1) = 14; Z(1,3) = 0 dropped
    const auto xs = share(X, seed + 3), ys = share(Y, seed + 4);
    const auto r = algo::contract(xs, ys, s, *be, world(), o);
    check_distributed(r, want, "cancellation");
    EXPECT_GE(r.global_zeros_dropped, 1);
  }
  // No matches at all, and empty inputs.
  {
    const auto s = kernels::parse_contract_spec("ij,jk->ik");
    SparseTensor<T> X({4, 3}), Y({3, 5});
    const index_t a[] = {1, 0}, b[] = {2, 3};
    X.push_back(a, T(1));
    Y.push_back(b, T(1));
    const auto r = algo::contract(share(X, seed), share(Y, seed), s, *be, world(), o);
    EXPECT_EQ(r.global_nnz, 0);
    EXPECT_EQ(r.global_products, 0);
    EXPECT_EQ(r.local.dims, (std::vector<std::uint64_t>{4, 5}));
    const SparseTensor<T> E({4, 3});
    const auto r2 =
        algo::contract(E, E, kernels::parse_contract_spec("ij,kj->ik"), *be, world(), o);
    EXPECT_EQ(r2.global_nnz, 0);
  }
}

// Host buffers kept across contractions (algo::ContractBuffers): a larger output, then a
// smaller one, an empty one and the first again with the same buffers: every share equals
// the plain call's (same coordinates and values on this rank), the result's `local` stays
// empty, and the inputs can be page-locked (host backends lock nothing: 0 bytes).
TYPED_TEST(ContractMpi, KeptHostBuffersGiveThePlainResults) {
  using T = TypeParam;
  const std::uint64_t seed = common_seed();
  std::mt19937_64 rng(seed);
  const auto big_s = kernels::parse_contract_spec("ijk,jkl->il");
  const auto X = random_tensor<T>({20, 6, 5}, 900, rng), Y = random_tensor<T>({6, 5, 25}, 900, rng);
  const auto small_s = kernels::parse_contract_spec("ij,jk->ki");
  const auto A = random_tensor<T>({7, 9}, 40, rng), B = random_tensor<T>({9, 6}, 40, rng);
  const auto xs = share(X, seed), ys = share(Y, seed + 1), as = share(A, seed + 2),
             bs = share(B, seed + 3);
  const SparseTensor<T> E({7, 9});
  for (BackendKind kind : {BackendKind::reference, BackendKind::cpu}) {
    SCOPED_TRACE(kernels::to_string(kind));
    auto be = kernels::make_backend<T>(kind, 1);
    algo::ContractOptions o;
    o.print = false;
    algo::ContractBuffers<T> buf(*be);
    EXPECT_GE(buf.pin_input(xs), 0.0);
    EXPECT_EQ(buf.pinned_bytes(), 0u);
    struct Step {
      const SparseTensor<T>* x;
      const SparseTensor<T>* y;
      const ContractSpec* s;
      const char* what;
    };
    const Step steps[] = {{&xs, &ys, &big_s, "large"},
                          {&as, &bs, &small_s, "smaller, other order"},
                          {&E, &bs, &small_s, "empty input"},
                          {&xs, &ys, &big_s, "large again"}};
    for (const Step& st : steps) {
      SCOPED_TRACE(st.what);
      const auto plain = algo::contract(*st.x, *st.y, *st.s, *be, world(), o);
      const auto kept = algo::contract(*st.x, *st.y, *st.s, *be, world(), o, &buf);
      EXPECT_EQ(kept.local.nnz(), 0);
      EXPECT_EQ(kept.global_nnz, plain.global_nnz);
      EXPECT_EQ(kept.global_products, plain.global_products);
      const SparseTensor<T>& got = buf.result();
      EXPECT_EQ(got.dims, plain.local.dims);
      ASSERT_EQ(got.nnz(), plain.local.nnz());
      for (std::size_t m = 0; m < got.idx.size(); ++m)
        EXPECT_TRUE(got.idx[m] == plain.local.idx[m]) << "mode " << m;
      EXPECT_TRUE(got.vals == plain.local.vals);
    }
  }
}

TEST(ContractMpiErrors, ShapesAndMemoryLimitAreRefusedOnEveryRank) {
  std::mt19937_64 rng(common_seed());
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  const auto X = random_tensor<double>({20, 30, 40}, 2000, rng);
  const auto Y = random_tensor<double>({40, 25}, 500, rng);
  algo::ContractOptions o;
  o.print = false;
  const auto xs = share(X, 1), ys = share(Y, 2);
  // Mismatched contracted lengths: X's k is 40, Y's is 25 here.
  try {
    algo::contract(xs, ys, kernels::parse_contract_spec("ijk,lk->ijl"), *be, world(), o);
    ADD_FAILURE() << "no error for mismatched lengths";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("letter 'k' has length 40 in X (mode 3) but 25 in Y"),
              std::string::npos)
        << e.what();
  }
  // Wrong order for the spec.
  EXPECT_THROW(algo::contract(xs, ys, kernels::parse_contract_spec("ij,jk->ik"), *be, world(), o),
               InputError);
  // A memory limit too small: refused before the multiplication, saying what would fit.
  o.memory_limit = 4096;
  try {
    algo::contract(xs, ys, kernels::parse_contract_spec("ijk,kl->ijl"), *be, world(), o);
    ADD_FAILURE() << "no error for the memory limit";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const char* p : {"ijk,kl->ijl", "over the limit of", "ranks", "would fit"})
      EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  // A generous limit runs.
  o.memory_limit = std::size_t(1) << 30;
  const auto r =
      algo::contract(xs, ys, kernels::parse_contract_spec("ijk,kl->ijl"), *be, world(), o);
  EXPECT_GT(r.global_nnz, 0);
  EXPECT_LE(r.memory.total_bytes, o.memory_limit);
}

TEST(ContractMpiHelpers, GatherAndSortedWriteRoundTrip) {
  const std::uint64_t seed = common_seed();
  std::mt19937_64 rng(seed);
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  const auto X = random_tensor<double>({30, 40, 10}, 3000, rng);
  const auto s = kernels::parse_contract_spec("ijy,kjy->ki");
  algo::ContractOptions o;
  o.print = false;
  const auto xs = share(X, seed);
  const auto r = algo::contract(xs, xs, s, *be, world(), o);
  const auto all = algo::gather(r.local, world(), 0);
  const std::string path = test::temp_dir() + "/contract-out.tns";
  algo::write_sorted(path, r.local, world());
  // Read back in file order: the concatenation of the shares in rank order.
  const auto back = concat(io::read_tns(path, world()).local);
  if (world().rank() == 0) {
    ASSERT_EQ(back.nnz(), all.nnz());
    // The file is in global lexicographic order, identical to the gathered result.
    for (int m = 0; m < 2; ++m) EXPECT_EQ(back.idx[m], all.idx[m]);
    for (nnz_t k = 0; k < all.nnz(); ++k) EXPECT_EQ(back.vals[k], all.vals[k]);
  }
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(path);
}

/// Reads a shared tensor; every rank holds its share (file order); the full tensor on
/// every rank through `full`.
SparseTensor<double> read_shared(const std::string& path, SparseTensor<double>* full) {
  auto rr = io::read_tns(path, world());
  *full = concat(rr.local);
  return std::move(rr.local);
}

TEST(ContractMpiReal, CongressCoSponsorshipMatchesTheReference) {
  TESSERA_REQUIRE_SHARED(path, "congress-cosponsor_leg-leg-year.tns.gz");
  SparseTensor<double> X;
  const auto xs = read_shared(path, &X);
  const auto s = kernels::parse_contract_spec("ijy,kjy->ik");
  auto be = kernels::make_backend<double>(BackendKind::cpu, 1);
  algo::ContractOptions o;
  o.print = false;
  const auto r = algo::contract(xs, xs, s, *be, world(), o);
  EXPECT_TRUE(r.routed_once);
  // Products = sum over (j, y) fibers of their length squared, counted independently.
  std::map<std::pair<index_t, index_t>, std::int64_t> fiber;
  for (nnz_t k = 0; k < X.nnz(); ++k) ++fiber[{X.idx[1][k], X.idx[2][k]}];
  std::int64_t products = 0;
  for (const auto& [f, n] : fiber) products += n * n;
  EXPECT_EQ(r.global_products, products);
  SparseTensor<double> want;
  if (world().rank() == 0) want = kernels::reference::contract(X, X, s);
  std::int64_t want_nnz = want.nnz();
  world().broadcast(&want_nnz, 1, 0);
  if (world().rank() != 0) want = SparseTensor<double>(r.dims);
  const auto all = algo::gather(r.local, world(), 0);
  EXPECT_EQ(r.global_nnz, want_nnz);
  if (world().rank() == 0) {
    expect_same(all, want, 0.0, "congress ijy,kjy->ik");  // integer data: exact
    // Co-sponsorship counts are symmetric and non-negative.
    std::map<std::pair<index_t, index_t>, double> m;
    for (nnz_t k = 0; k < all.nnz(); ++k) m[{all.idx[0][k], all.idx[1][k]}] = all.vals[k];
    for (const auto& [ik, v] : m) {
      EXPECT_GT(v, 0);
      EXPECT_EQ(m.at({ik.second, ik.first}), v);
    }
  }
}

TEST(ContractMpiReal, TagsMathSx4ModeMatchesTheReference) {
  TESSERA_REQUIRE_SHARED(path, "tags-math-sx_tag-tag-tag-month.tns.gz");
  SparseTensor<double> X;
  const auto xs = read_shared(path, &X);
  // Tag i followed by the pair (j, k) in month t, against pairs (j, k) followed by tag l:
  // X's matched modes (1, 2, 3) differ from Y's (0, 1, 3), so the tensor is routed twice.
  // The three tag modes index the same tag set but their lengths (largest coordinates)
  // differ: extend them to a common length, as tessera contract --extend-dims does.
  const auto s0 = kernels::parse_contract_spec("ijkt,jklt->il");
  auto xd = X.dims, yd = X.dims;
  kernels::extend_matched_dims(s0, xd, yd, true);
  const std::uint64_t tags = std::max({X.dims[0], X.dims[1], X.dims[2]});
  EXPECT_EQ(xd, (std::vector<std::uint64_t>{tags, tags, tags, X.dims[3]}));
  X.dims = xd;
  auto xs_ext = xs;
  xs_ext.dims = xd;
  for (const char* spec : {"ijkt,jklt->il", "ijkt,ijlt->lk"}) {
    const auto s = kernels::parse_contract_spec(spec);
    for (BackendKind kind : {BackendKind::cpu, BackendKind::reference}) {
      auto be = kernels::make_backend<double>(kind, 1);
      algo::ContractOptions o;
      o.print = false;
      const auto r = algo::contract(xs_ext, xs_ext, s, *be, world(), o);
      SparseTensor<double> want(r.dims);
      if (world().rank() == 0) want = kernels::reference::contract(X, X, s);
      const auto all = algo::gather(r.local, world(), 0);
      if (world().rank() == 0) {
        ASSERT_GT(want.nnz(), 1000);
        expect_same(all, want, 0.0, std::string(spec) + " on " + kernels::to_string(kind));
      }
      std::int64_t n = want.nnz();
      world().broadcast(&n, 1, 0);
      EXPECT_EQ(r.global_nnz, n);
    }
  }
}

}  // namespace
}  // namespace tessera
