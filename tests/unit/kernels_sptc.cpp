// SpTC on every host backend (reference; cpu with 1 and 3 threads, with hashed row
// accumulators, and without swapping the inputs), float and double: the einsum spec parser
// (good specs and the messages of bad ones), then the output against a brute-force dense
// contraction for random tensors of orders 2..5 with 1, 2 and 3 contracted modes and random
// output orders (integer values: exact; real values: within rounding), batch modes,
// repeated coordinates in the inputs, exact-zero cancellation, empty results,
// self-contraction, huge dims (keys wider than 64 bits) and order 16 against an all-pairs
// loop, and the merge helper. Fresh random inputs every run (TESSERA_TEST_SEED=<n> replays).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/ops/sptc.hpp"
#include "kernels/sptc.hpp"
#include "sptc_test_util.hpp"
#include "test_util.hpp"
#include "util/error.hpp"

namespace tessera::kernels {
namespace {

using test::fresh_seed;

// ---- spec parsing -------------------------------------------------------------------

TEST(SptcSpec, ParsesContractedFreeAndBatchModes) {
  const auto s = parse_contract_spec(" ijk , klm -> ijlm ");
  EXPECT_EQ(s.text, "ijk,klm->ijlm");
  EXPECT_EQ(s.x, "ijk");
  EXPECT_EQ(s.y, "klm");
  EXPECT_EQ(s.out, "ijlm");
  EXPECT_EQ(s.x_key, (std::vector<int>{2}));
  EXPECT_EQ(s.y_key, (std::vector<int>{0}));
  EXPECT_EQ(s.contracted(), 1);
  EXPECT_EQ(s.batch(), 0);
  EXPECT_EQ(s.x_free, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.y_free, (std::vector<int>{1, 2}));
  EXPECT_EQ(s.out_from_y, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(s.out_mode, (std::vector<int>{0, 1, 1, 2}));

  const auto c = parse_contract_spec("ijy,kjy->ki");
  EXPECT_EQ(c.x_key, (std::vector<int>{1, 2}));
  EXPECT_EQ(c.y_key, (std::vector<int>{1, 2}));
  EXPECT_EQ(c.out_from_y, (std::vector<bool>{true, false}));
  EXPECT_EQ(c.out_mode, (std::vector<int>{0, 0}));

  const auto b = parse_contract_spec("bij,bjk->ikb");  // batch mode b
  EXPECT_EQ(b.x_key, (std::vector<int>{0, 2}));
  EXPECT_EQ(b.y_key, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.key_batch, (std::vector<bool>{true, false}));
  EXPECT_EQ(b.contracted(), 1);
  EXPECT_EQ(b.batch(), 1);
  EXPECT_EQ(b.out_from_y, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(b.out_mode, (std::vector<int>{1, 2, 0}));

  const auto o = parse_contract_spec("i,j->ji");  // outer product: nothing matched
  EXPECT_TRUE(o.x_key.empty());
  EXPECT_EQ(o.out_from_y, (std::vector<bool>{true, false}));

  const auto big = parse_contract_spec("abcdefghiZ,ZABCDEFG->abcdefghiABCDEFG");
  EXPECT_EQ(big.out_order(), 16);
  const auto sw = swap_inputs(s);
  EXPECT_EQ(sw.text, "klm,ijk->ijlm");
}

void expect_spec_error(const std::string& spec, const std::vector<std::string>& parts) {
  try {
    parse_contract_spec(spec);
    ADD_FAILURE() << "no error for '" << spec << "'";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << m << "\n  missing: " << p;
  }
}

TEST(SptcSpec, RejectsMalformedSpecsWithAClearMessage) {
  expect_spec_error("", {"empty einsum spec"});
  expect_spec_error("ijk,klm", {"missing '->'", "ijk,klm->ijlm"});
  expect_spec_error("ijk,klm->ij->lm", {"more than once"});
  expect_spec_error("ijk->ij", {"exactly two inputs", "found 1"});
  expect_spec_error("ij,jk,kl->il", {"exactly two inputs", "found 3"});
  expect_spec_error("ij,jk->i,k", {"found a ','"});
  expect_spec_error("i1,1k->ik", {"'1'", "not a letter"});
  expect_spec_error("...i,ij->j", {"ellipsis"});
  expect_spec_error(",jk->jk", {"X (the first input) has no subscripts"});
  expect_spec_error("ij,->i", {"Y (the second input) has no subscripts"});
  expect_spec_error("ij,ij->", {"scalar"});
  expect_spec_error("iik,kl->il", {"letter 'i' appears twice", "'iik'", "diagonal"});
  expect_spec_error("ij,jk->iik", {"letter 'i' appears twice", "output"});
  expect_spec_error("ij,jk->iz", {"output letter 'z' is in neither input"});
  expect_spec_error("ijq,jk->ik", {"letter 'q' appears only in X", "add 'q' to the output"});
  expect_spec_error("ij,jkq->ik", {"letter 'q' appears only in Y"});
  expect_spec_error("abcdefghijklmnopq,q->a", {"17 modes", "at most 16"});
  expect_spec_error("abcdefghiZ,ZABCDEFGH->abcdefghiABCDEFGH", {"the output has 17 modes"});
}

TEST(SptcSpec, ChecksOrdersAndMatchedLengths) {
  const auto s = parse_contract_spec("ijk,klm->ijlm");
  EXPECT_EQ(contract_output_dims(s, {2, 3, 4}, {4, 5, 6}),
            (std::vector<std::uint64_t>{2, 3, 5, 6}));
  try {
    contract_output_dims(s, {2, 3, 4}, {5, 5, 6});
    ADD_FAILURE() << "no error for mismatched lengths";
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const char* p : {"letter 'k'", "length 4 in X (mode 3)", "5 in Y (mode 1)", "contracted"})
      EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  try {
    contract_output_dims(s, {2, 3}, {4, 5, 6});
    ADD_FAILURE() << "no error for a wrong order";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("X (the first input) has 2 modes but its subscripts "
                                         "'ijk' name 3"),
              std::string::npos)
        << e.what();
  }
  // --extend-dims: matched letters take the larger length; self-contractions link modes.
  {
    std::vector<std::uint64_t> xd = {2, 3, 4}, yd = {5, 5, 6};
    extend_matched_dims(s, xd, yd, false);
    EXPECT_EQ(xd, (std::vector<std::uint64_t>{2, 3, 5}));
    EXPECT_EQ(yd, (std::vector<std::uint64_t>{5, 5, 6}));
    EXPECT_EQ(contract_output_dims(s, xd, yd), (std::vector<std::uint64_t>{2, 3, 5, 6}));
    const auto self = parse_contract_spec("ijkt,jklt->il");  // j: 1 ~ 0, k: 2 ~ 1, t: 3 ~ 3
    std::vector<std::uint64_t> d = {7, 9, 8, 3}, e = d;
    extend_matched_dims(self, d, e, true);
    EXPECT_EQ(d, (std::vector<std::uint64_t>{9, 9, 9, 3}));
    EXPECT_EQ(e, d);
    EXPECT_NO_THROW(contract_output_dims(self, d, e));
  }
  const auto b = parse_contract_spec("bij,bjk->bik");
  try {
    contract_output_dims(b, {3, 2, 2}, {4, 2, 2});
    ADD_FAILURE() << "no error for mismatched batch lengths";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("batch modes must have equal lengths"), std::string::npos);
  }
}

// ---- problems and brute force -------------------------------------------------------

using test::dims_of;
using test::Problem;
using test::random_problem;

/// Random COO tensor with `nnz` draws (repeats kept when allow_repeats, so the kernels must
/// sum them); integer values in +-[1, 3] (exact sums) or reals in +-[0.25, 1].
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, std::size_t nnz,
                              bool integers, bool allow_repeats, std::mt19937_64& rng) {
  SparseTensor<T> x(dims);
  std::map<std::vector<index_t>, bool> seen;
  std::vector<index_t> c(dims.size());
  for (std::size_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] =
          static_cast<index_t>(std::uniform_int_distribution<std::uint64_t>(0, dims[m] - 1)(rng));
    if (!allow_repeats && seen.count(c)) continue;
    seen[c] = true;
    const double sign = (rng() & 1) ? 1.0 : -1.0;
    const double v = integers ? static_cast<double>(1 + rng() % 3)
                              : std::uniform_real_distribution<double>(0.25, 1.0)(rng);
    x.push_back(c.data(), static_cast<T>(sign * v));
  }
  return x;
}

/// Expected output: coordinates (output mode order, lexicographic), values and, per entry,
/// the sum of |products| (the scale of its rounding error).
struct Expected {
  std::vector<std::vector<index_t>> coords;
  std::vector<double> vals, scale;
  std::int64_t products = 0;
};

/// Matching pairs (X nonzero, Y nonzero), with repeats: every copy counts.
template <typename T>
std::int64_t count_pairs(const SparseTensor<T>& x, const SparseTensor<T>& y,
                         const ContractSpec& s) {
  std::int64_t n = 0;
  for (nnz_t a = 0; a < x.nnz(); ++a)
    for (nnz_t b = 0; b < y.nnz(); ++b) {
      bool eq = true;
      for (std::size_t c = 0; c < s.x_key.size() && eq; ++c)
        eq = x.idx[s.x_key[c]][a] == y.idx[s.y_key[c]][b];
      n += eq ? 1 : 0;
    }
  return n;
}

/// Brute force on dense arrays: every assignment of every letter, Z[out] += X[x] * Y[y].
template <typename T>
Expected dense_contract(const SparseTensor<T>& x, const SparseTensor<T>& y, const Problem& p) {
  const auto& s = p.spec;
  std::string letters;
  for (char c : s.x + s.y)
    if (letters.find(c) == std::string::npos) letters.push_back(c);
  // Repeated coordinates are summed; `absolute` sums their magnitudes instead, the scale
  // of the rounding of kernels that multiply every copy (a1 b + a2 b, not (a1 + a2) b).
  auto dense = [&](const SparseTensor<T>& t, bool absolute) {
    std::size_t n = 1;
    for (auto d : t.dims) n *= d;
    std::vector<double> v(n, 0.0);
    for (nnz_t k = 0; k < t.nnz(); ++k) {
      std::size_t l = 0;
      for (int m = 0; m < t.order(); ++m) l = l * t.dims[m] + t.idx[m][k];
      const double a = static_cast<double>(t.vals[k]);
      v[l] += absolute ? std::fabs(a) : a;
    }
    return v;
  };
  const auto X = dense(x, false), Y = dense(y, false);
  const auto Xa = dense(x, true), Ya = dense(y, true);
  const auto odims = dims_of(s.out, p.len);
  std::size_t ocells = 1;
  for (auto d : odims) ocells *= d;
  std::vector<double> Z(ocells, 0.0), A(ocells, 0.0);
  std::vector<char> hit(ocells, 0);
  std::vector<std::uint64_t> val(letters.size(), 0);
  auto offset = [&](const std::string& sub) {
    std::size_t l = 0;
    for (char c : sub) l = l * p.len.at(c) + val[letters.find(c)];
    return l;
  };
  while (true) {
    const std::size_t ox = offset(s.x), oy = offset(s.y);
    const double a = X[ox], b = Y[oy];
    if (Xa[ox] != 0 && Ya[oy] != 0) {
      const std::size_t o = offset(s.out);
      Z[o] += a * b;
      A[o] += Xa[ox] * Ya[oy];
      hit[o] = 1;
    }
    std::size_t m = letters.size();
    while (m-- > 0) {
      if (++val[m] < p.len.at(letters[m])) break;
      val[m] = 0;
    }
    if (m == static_cast<std::size_t>(-1)) break;
  }
  Expected e;
  for (std::size_t o = 0; o < ocells; ++o) {
    if (!hit[o] || static_cast<T>(Z[o]) == T(0)) continue;
    std::vector<index_t> c(odims.size());
    std::size_t l = o;
    for (std::size_t m = odims.size(); m-- > 0;) {
      c[m] = static_cast<index_t>(l % odims[m]);
      l /= odims[m];
    }
    e.coords.push_back(c);
    e.vals.push_back(Z[o]);
    e.scale.push_back(A[o]);
  }
  e.products = count_pairs(x, y, s);
  return e;
}

/// Brute force without dense arrays (any dims): every pair, summed in an ordered map.
template <typename T>
Expected pairs_contract(const SparseTensor<T>& x, const SparseTensor<T>& y, const ContractSpec& s) {
  std::map<std::vector<index_t>, std::pair<double, double>> acc;
  Expected e;
  for (nnz_t a = 0; a < x.nnz(); ++a)
    for (nnz_t b = 0; b < y.nnz(); ++b) {
      bool eq = true;
      for (std::size_t c = 0; c < s.x_key.size() && eq; ++c)
        eq = x.idx[s.x_key[c]][a] == y.idx[s.y_key[c]][b];
      if (!eq) continue;
      ++e.products;
      std::vector<index_t> c(static_cast<std::size_t>(s.out_order()));
      for (int k = 0; k < s.out_order(); ++k)
        c[k] = s.out_from_y[k] ? y.idx[s.out_mode[k]][b] : x.idx[s.out_mode[k]][a];
      const double v = static_cast<double>(x.vals[a]) * static_cast<double>(y.vals[b]);
      acc[c].first += v;
      acc[c].second += std::fabs(v);
    }
  for (const auto& [c, v] : acc) {
    if (static_cast<T>(v.first) == T(0)) continue;
    e.coords.push_back(c);
    e.vals.push_back(v.first);
    e.scale.push_back(v.second);
  }
  return e;
}

template <typename T>
void expect_matches(const SparseTensor<T>& z, const ContractStats& st, const Expected& e,
                    const std::vector<std::uint64_t>& dims, const std::string& what) {
  ASSERT_EQ(z.dims, dims) << what;
  ASSERT_EQ(z.order(), static_cast<int>(dims.size())) << what;
  ASSERT_EQ(z.nnz(), static_cast<nnz_t>(e.vals.size())) << what;
  for (const auto& v : z.idx) ASSERT_EQ(v.size(), z.vals.size()) << what;
  EXPECT_EQ(st.products, e.products) << what;
  EXPECT_EQ(st.output_nnz, z.nnz()) << what;
  EXPECT_EQ(st.output_entries - st.zeros_dropped, st.output_nnz) << what;
  EXPECT_GE(st.output_entries, st.output_nnz) << what;
  const double tol = std::is_same_v<T, double> ? 1e-13 : 1e-6;
  for (nnz_t k = 0; k < z.nnz(); ++k) {
    for (int m = 0; m < z.order(); ++m)
      ASSERT_EQ(z.idx[m][k], e.coords[k][m]) << what << ": nonzero " << k << " mode " << m;
    const double err = std::fabs(static_cast<double>(z.vals[k]) - e.vals[k]);
    ASSERT_LE(err, tol * (e.scale[k] + std::fabs(e.vals[k])))
        << what << ": nonzero " << k << " is " << z.vals[k] << ", expected " << e.vals[k];
  }
}

// ---- every host backend -------------------------------------------------------------

struct Variant {
  std::string name;
  BackendKind kind;
  int threads = 0;
  bool direct = false;  ///< call cpu:: with the options below instead of the backend
  cpu::ContractOptions options;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"reference", BackendKind::reference, 0, false, {}});
  v.push_back({"cpu/1 thread", BackendKind::cpu, 1, false, {}});
  v.push_back({"cpu/3 threads", BackendKind::cpu, 3, false, {}});
  cpu::ContractOptions hashed;
  hashed.threads = 2;
  hashed.dense_accumulator_limit = 0;
  v.push_back({"cpu/hashed rows", BackendKind::cpu, 2, true, hashed});
  cpu::ContractOptions noswap;
  noswap.threads = 2;
  noswap.allow_swap = false;
  v.push_back({"cpu/no swap", BackendKind::cpu, 2, true, noswap});
  return v;
}

/// Runs one variant; the stats are poisoned first so an unwritten field fails.
template <typename T>
SparseTensor<T> run_variant(const Variant& v, const SparseTensor<T>& x, const SparseTensor<T>& y,
                            const ContractSpec& s, ContractStats* st) {
  st->products = st->output_entries = st->output_nnz = st->zeros_dropped = -77;
  if (v.direct) return cpu::contract(x, y, s, st, v.options);
  auto be = make_backend<T>(v.kind, v.threads);
  auto plan = ops::contract_plan(*be, x, y, s);
  const ContractCount n = plan->count();
  SparseTensor<T> z = ops::contract(*be, *plan, st);
  EXPECT_EQ(n.products, st->products) << v.name;
  EXPECT_EQ(n.output_entries, st->output_entries) << v.name;
  EXPECT_EQ(n.output_bytes,
            static_cast<std::size_t>(n.output_entries) * contract_entry_bytes(s, sizeof(T)));
  EXPECT_GT(n.workspace_bytes, 0u) << v.name;
  EXPECT_EQ(plan->output_dims(), z.dims);
  return z;
}

template <typename T>
class Sptc : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Sptc, Types);

TYPED_TEST(Sptc, MatchesDenseBruteForceOrders2To5) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  int cases = 0;
  for (int ox = 2; ox <= 5; ++ox)
    for (int oy = 2; oy <= 5; ++oy)
      for (int c = 1; c <= 3; ++c) {
        if (c > std::min(ox, oy) || ox + oy - 2 * c < 1) continue;
        const bool integers = (cases % 2) == 0;
        const std::uint64_t max_len = ox + oy - c > 7 ? 3 : 4;
        const Problem p = random_problem(ox, oy, c, 0, max_len, rng);
        const auto xd = dims_of(p.spec.x, p.len), yd = dims_of(p.spec.y, p.len);
        std::size_t cx = 1, cy = 1;
        for (auto d : xd) cx *= d;
        for (auto d : yd) cy *= d;
        // ~40% dense, with repeated coordinates (summed by the kernels).
        const auto x = random_tensor<T>(xd, cx * 2 / 5 + 1, integers, true, rng);
        const auto y = random_tensor<T>(yd, cy * 2 / 5 + 1, integers, true, rng);
        const Expected e = dense_contract(x, y, p);
        const auto odims = dims_of(p.spec.out, p.len);
        for (const auto& v : variants()) {
          ContractStats st;
          const auto z = run_variant(v, x, y, p.spec, &st);
          expect_matches(z, st, e, odims,
                         v.name + " spec " + p.spec.text + " seed " + std::to_string(seed));
          if (::testing::Test::HasFatalFailure()) return;
        }
        ++cases;
      }
  EXPECT_EQ(cases, 39);
}

TYPED_TEST(Sptc, BatchModesAndOuterProducts) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int rep = 0; rep < 6; ++rep) {
    const int batch = 1 + rep % 2;
    const Problem p = rep < 4 ? random_problem(3 + rep % 2, 3, 1, batch, 4, rng)
                              : random_problem(2, 2, 0, rep - 4, 5, rng);  // outer products
    const auto xd = dims_of(p.spec.x, p.len), yd = dims_of(p.spec.y, p.len);
    const auto x = random_tensor<T>(xd, 30, rep % 2 == 0, true, rng);
    const auto y = random_tensor<T>(yd, 30, rep % 2 == 0, true, rng);
    const Expected e = dense_contract(x, y, p);
    for (const auto& v : variants()) {
      ContractStats st;
      const auto z = run_variant(v, x, y, p.spec, &st);
      expect_matches(z, st, e, dims_of(p.spec.out, p.len),
                     v.name + " spec " + p.spec.text + " seed " + std::to_string(seed));
    }
  }
}

TYPED_TEST(Sptc, OutputOrdersThatInterleaveTheInputs) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  // Natural, swapped (Y's letters first) and interleaved (a final sort) output orders.
  for (const char* text : {"ijk,klm->ijlm", "ijk,klm->lmij", "ijk,klm->iljm", "ijk,klm->mjli",
                           "ijk,kjm->mi", "ab,bc->ca"}) {
    Problem p;
    p.spec = parse_contract_spec(text);
    for (char c : p.spec.x + p.spec.y) p.len[c] = 2 + rng() % 4;
    const auto x = random_tensor<T>(dims_of(p.spec.x, p.len), 40, false, false, rng);
    const auto y = random_tensor<T>(dims_of(p.spec.y, p.len), 40, false, false, rng);
    const Expected e = dense_contract(x, y, p);
    for (const auto& v : variants()) {
      ContractStats st;
      const auto z = run_variant(v, x, y, p.spec, &st);
      expect_matches(z, st, e, dims_of(p.spec.out, p.len),
                     v.name + " spec " + text + " seed " + std::to_string(seed));
    }
  }
}

TYPED_TEST(Sptc, ExactZerosAreDroppedAndRepeatsSummed) {
  using T = TypeParam;
  const auto s = parse_contract_spec("ij,jk->ik");
  SparseTensor<T> x({2, 3}), y({3, 2});
  const index_t x00[] = {0, 0}, x01[] = {0, 1}, x12[] = {1, 2};
  const index_t y00[] = {0, 0}, y10[] = {1, 0}, y21[] = {2, 1};
  x.push_back(x00, T(1));
  x.push_back(x01, T(2));
  x.push_back(x12, T(3));
  x.push_back(x12, T(-1));  // repeated coordinate: X(1,2) = 2
  y.push_back(y00, T(2));
  y.push_back(y10, T(-1));  // Z(0,0) = 1*2 + 2*(-1) = 0 exactly: dropped
  y.push_back(y21, T(4));   // Z(1,1) = 2*4 = 8
  for (const auto& v : variants()) {
    ContractStats st;
    const auto z = run_variant(v, x, y, s, &st);
    ASSERT_EQ(z.nnz(), 1) << v.name;
    EXPECT_EQ(z.idx[0][0], 1u);
    EXPECT_EQ(z.idx[1][0], 1u);
    EXPECT_EQ(z.vals[0], T(8));
    EXPECT_EQ(st.products, 4) << v.name;  // (0,0)x(0,0), (0,1)x(1,0), two copies of (1,2)x(2,1)
    EXPECT_EQ(st.output_entries, 2) << v.name;
    EXPECT_EQ(st.zeros_dropped, 1) << v.name;
    EXPECT_EQ(st.output_nnz, 1) << v.name;
  }
  // Everything cancels: an empty output of the right shape.
  SparseTensor<T> y2({3, 2});
  y2.push_back(y00, T(2));
  y2.push_back(y10, T(-1));
  for (const auto& v : variants()) {
    ContractStats st;
    SparseTensor<T> x2({2, 3});
    x2.push_back(x00, T(1));
    x2.push_back(x01, T(2));
    const auto z = run_variant(v, x2, y2, s, &st);
    EXPECT_EQ(z.nnz(), 0) << v.name;
    EXPECT_EQ(z.dims, (std::vector<std::uint64_t>{2, 2})) << v.name;
    EXPECT_EQ(st.zeros_dropped, 1) << v.name;
  }
}

TYPED_TEST(Sptc, EmptyInputsAndNoMatches) {
  using T = TypeParam;
  const auto s = parse_contract_spec("ijk,klm->ijlm");
  std::mt19937_64 rng(fresh_seed());
  const auto x = random_tensor<T>({3, 4, 5}, 20, false, false, rng);
  SparseTensor<T> empty_y({5, 2, 3});
  // Y whose contracted index never occurs in X: X uses k < 5, Y only k = 5 of length 6.
  SparseTensor<T> x6 = x;
  x6.dims[2] = 6;
  SparseTensor<T> y6({6, 2, 3});
  const index_t c[] = {5, 1, 2};
  y6.push_back(c, T(1.5));
  for (const auto& v : variants()) {
    ContractStats st;
    auto z = run_variant(v, x, empty_y, s, &st);
    EXPECT_EQ(z.nnz(), 0) << v.name;
    EXPECT_EQ(z.dims, (std::vector<std::uint64_t>{3, 4, 2, 3}));
    EXPECT_EQ(st.products, 0);
    z = run_variant(v, empty_y, empty_y, parse_contract_spec("kab,kcd->abdc"), &st);
    EXPECT_EQ(z.nnz(), 0) << v.name;
    z = run_variant(v, x6, y6, s, &st);
    EXPECT_EQ(z.nnz(), 0) << v.name;
    EXPECT_EQ(st.products, 0) << v.name;
    EXPECT_EQ(st.output_entries, 0) << v.name;
  }
}

TYPED_TEST(Sptc, SelfContractionOfOneTensor) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  Problem p;
  p.spec = parse_contract_spec("ijy,kjy->ik");  // congress-like co-occurrence
  p.len = {{'i', 9}, {'j', 9}, {'k', 9}, {'y', 4}};
  const auto x = random_tensor<T>({9, 9, 4}, 150, true, false, rng);
  const Expected e = dense_contract(x, x, p);
  for (const auto& v : variants()) {
    ContractStats st;
    const auto z = run_variant(v, x, x, p.spec, &st);
    expect_matches(z, st, e, {9, 9}, v.name + " seed " + std::to_string(seed));
    // The result is symmetric: Z(i,k) = Z(k,i).
    std::map<std::pair<index_t, index_t>, T> m;
    for (nnz_t k = 0; k < z.nnz(); ++k) m[{z.idx[0][k], z.idx[1][k]}] = z.vals[k];
    for (const auto& [ik, val] : m) EXPECT_EQ(m.at({ik.second, ik.first}), val);
  }
}

TYPED_TEST(Sptc, HugeDimsAndOrder16AgainstAllPairs) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  // Keys of 3 x 32 bits (ranked, not packed), an output of 2^96 cells (ordered-map
  // reference), and a 9 x 8 -> 16-mode contraction.
  struct Case {
    const char* spec;
    std::uint64_t len;
  };
  for (const Case& c : {Case{"abcd,bcde->ae", std::uint64_t(1) << 32},
                        Case{"abc,cde->abde", (std::uint64_t(1) << 32) - 5},
                        Case{"abcd,bcef->eafd", (std::uint64_t(1) << 31) + 3},
                        Case{"abcdefghiZ,ZABCDEFG->aAbBcCdDeEfFgGhi", 7}}) {
    Problem p;
    p.spec = parse_contract_spec(c.spec);
    for (char l : p.spec.x + p.spec.y) p.len[l] = c.len;
    // Few distinct values per mode so that keys match: draw from {0, len-1, len/2}.
    auto tensor = [&](const std::string& sub, std::size_t n) {
      SparseTensor<T> t(dims_of(sub, p.len));
      std::vector<index_t> co(sub.size());
      for (std::size_t k = 0; k < n; ++k) {
        for (std::size_t m = 0; m < sub.size(); ++m) {
          const std::uint64_t L = p.len[sub[m]];
          const std::uint64_t pick[3] = {0, L - 1, L / 2};
          co[m] = static_cast<index_t>(pick[rng() % 3]);
        }
        t.push_back(co.data(), static_cast<T>(1 + rng() % 5));
      }
      return t;
    };
    const auto x = tensor(p.spec.x, 200), y = tensor(p.spec.y, 200);
    const Expected e = pairs_contract(x, y, p.spec);
    ASSERT_GT(e.products, 0);
    for (const auto& v : variants()) {
      ContractStats st;
      const auto z = run_variant(v, x, y, p.spec, &st);
      expect_matches(z, st, e, dims_of(p.spec.out, p.len),
                     v.name + " spec " + c.spec + " seed " + std::to_string(seed));
    }
  }
}

TYPED_TEST(Sptc, SparseRowsInAWideColumnSpace) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  // Rows with few products among many columns (the marked dense accumulator, not the
  // scanned one), and columns that several of a row's groups share (repeated hits).
  const auto s = parse_contract_spec("ij,jk->ik");
  SparseTensor<T> x({60, 500}), y({500, 3000});
  for (index_t i = 0; i < 60; ++i)
    for (int n = 0; n < 3; ++n) {
      const index_t c[] = {i, static_cast<index_t>(rng() % 500)};
      x.push_back(c, static_cast<T>(1 + rng() % 3));
    }
  for (index_t j = 0; j < 500; ++j)
    for (int n = 0; n < 4; ++n) {
      const index_t k =
          (rng() & 1) ? static_cast<index_t>(rng() % 5) : static_cast<index_t>(rng() % 3000);
      const index_t c[] = {j, k};
      y.push_back(c, static_cast<T>((rng() & 1) ? 2 : -1));
    }
  const Expected e = pairs_contract(x, y, s);
  for (const auto& v : variants()) {
    ContractStats st;
    const auto z = run_variant(v, x, y, s, &st);
    expect_matches(z, st, e, {60, 3000}, v.name + " seed " + std::to_string(seed));
  }
}

TYPED_TEST(Sptc, PlansRunTwiceAndRejectForeignPlans) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  const auto s = parse_contract_spec("ijk,kl->lij");
  const auto x = random_tensor<T>({4, 5, 6}, 60, false, false, rng);
  const auto y = random_tensor<T>({6, 7}, 20, false, false, rng);
  auto cpu_be = make_backend<T>(BackendKind::cpu, 2);
  auto ref_be = make_backend<T>(BackendKind::reference);
  auto plan = ops::contract_plan(*cpu_be, x, y, s);
  ContractStats a, b;
  const auto z1 = ops::contract(*cpu_be, *plan, &a);
  SparseTensor<T> z2 = random_tensor<T>({4, 5, 6}, 10, false, false, rng);  // poisoned
  z2 = ops::contract(*cpu_be, *plan, &b);
  EXPECT_EQ(z1.idx, z2.idx);
  EXPECT_EQ(z1.vals, z2.vals);
  EXPECT_EQ(a.products, b.products);
  EXPECT_THROW(ops::contract(*ref_be, *plan, &a), Error);
  auto rplan = ops::contract_plan(*ref_be, x, y, s);
  EXPECT_THROW(ops::contract(*cpu_be, *rplan, &a), Error);
  // Shapes that do not fit the spec are refused at planning time.
  const auto bad = random_tensor<T>({4, 5}, 5, false, false, rng);
  EXPECT_THROW(ops::contract_plan(*cpu_be, bad, y, s), InputError);
  EXPECT_THROW(ops::contract_plan(*ref_be, bad, y, s), InputError);
  // The free helper plans and runs.
  const auto z3 = contract(*ref_be, x, y, s);
  ASSERT_EQ(z3.nnz(), z1.nnz());
  EXPECT_EQ(z3.idx, z1.idx);
}

TYPED_TEST(Sptc, SortSumDropZerosMergesRepeats) {
  using T = TypeParam;
  std::mt19937_64 rng(fresh_seed());
  for (int threads : {1, 3}) {
    auto t = random_tensor<T>({5, 3, 4}, 300000, true, true, rng);
    // Force cancellations: append the negation of the first 100 entries' sums later.
    std::map<std::vector<index_t>, double> ref;
    for (nnz_t k = 0; k < t.nnz(); ++k)
      ref[{t.idx[0][k], t.idx[1][k], t.idx[2][k]}] += static_cast<double>(t.vals[k]);
    int cancelled = 0;
    for (const auto& [c, v] : ref) {
      if (cancelled++ >= 10) break;
      t.push_back(c.data(), static_cast<T>(-v));
    }
    ref.clear();
    for (nnz_t k = 0; k < t.nnz(); ++k)
      ref[{t.idx[0][k], t.idx[1][k], t.idx[2][k]}] += static_cast<double>(t.vals[k]);
    const nnz_t before = t.nnz();
    const nnz_t removed = sort_sum_drop_zeros(t, threads);
    std::size_t k = 0;
    for (const auto& [c, v] : ref) {
      if (static_cast<T>(v) == T(0)) continue;
      ASSERT_LT(k, t.vals.size());
      EXPECT_EQ(t.idx[0][k], c[0]);
      EXPECT_EQ(t.idx[1][k], c[1]);
      EXPECT_EQ(t.idx[2][k], c[2]);
      EXPECT_EQ(t.vals[k], static_cast<T>(v));
      ++k;
    }
    EXPECT_EQ(k, t.vals.size());
    EXPECT_EQ(removed, before - t.nnz());
    EXPECT_LE(t.nnz(), 60 - 10);  // 5 x 3 x 4 cells, at least 10 cancelled
  }
}

}  // namespace
}  // namespace tessera::kernels
