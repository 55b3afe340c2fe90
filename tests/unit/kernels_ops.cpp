// The per-operation layer (kernels/ops/, issue 17), float and double:
//  - the ops:: dispatchers of gram and mttkrp on the reference and cpu backends give, bit for
//    bit, what the backend's own function (reference::, cpu::) gives when called directly;
//  - an executor of a kind outside BackendKind is an Error naming the kind;
//  - in a build without CUDA, the cuda:: functions (kernels/cuda/stub.cpp) throw Error
//    "built without CUDA" naming the operation;
//  - in a build with CUDA, cuBLAS and cuSOLVER are not loaded until first called
//    (kernels/cuda/runtime/math_libs.cpp), calls through the forwarding functions reach the
//    real libraries, and a library that cannot be opened is an Error naming it;
//  - a handle whose streamed() gives StreamedOps hooks has ops::mttkrp, ttmc_rows,
//    ttmc_scratch_bytes and ttmc run by its hooks with the caller's arguments, never by the
//    backend (whose own version refuses such a handle).
// Fresh random inputs each run (TESSERA_TEST_SEED=<n> replays a failure).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/factories.hpp"
#if defined(TESSERA_HAVE_CUDA)
#include <cublas_v2.h>
#include <cusolverDn.h>

#include "kernels/cuda/runtime/math_libs.hpp"
#endif
#include "kernels/ops/dense.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "kernels/ops/streamed.hpp"
#include "kernels/ops/ttmc.hpp"
#include "test_util.hpp"
#include "util/error.hpp"

namespace tessera::kernels {
namespace {

using test::fresh_seed;
using test::pointers;

template <typename T>
class KernelOps : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelOps, Types);

template <typename T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

/// nnz random coordinates (repeats allowed) below dims, values in [-1, 1).
template <typename T>
SparseTensor<T> random_tensor(const std::vector<std::uint64_t>& dims, int nnz,
                              std::mt19937_64& rng) {
  SparseTensor<T> x(dims);
  std::uniform_real_distribution<double> u(-1, 1);
  index_t c[kMaxOrder];
  for (int k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m) c[m] = static_cast<index_t>(rng() % dims[m]);
    x.push_back(c, static_cast<T>(u(rng)));
  }
  return x;
}

template <typename T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

/// True when every element is finite (the NaN poison was overwritten).
template <typename T>
bool all_finite(const std::vector<T>& v) {
  for (T x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// The function of the executor's own backend, called directly (not through ops::).
template <typename T>
void direct_gram(Backend<T>& be, const T* A, std::int64_t rows, int R, T* G) {
  if (be.kind() == BackendKind::reference) return reference::gram(be, A, rows, R, G);
  ASSERT_EQ(be.kind(), BackendKind::cpu);
  cpu::gram(be, A, rows, R, G);
}
template <typename T>
void direct_mttkrp(Backend<T>& be, const TensorHandle<T>& x, int mode,
                   const std::vector<const T*>& factors, int R, T* out) {
  if (be.kind() == BackendKind::reference) return reference::mttkrp(be, x, mode, factors, R, out);
  ASSERT_EQ(be.kind(), BackendKind::cpu);
  cpu::mttkrp(be, x, mode, factors, R, out);
}

/// The host backends, the cpu one on one thread: its reductions then have one order, so two
/// calls on the same inputs agree bit for bit whichever way they were reached.
template <typename T>
std::vector<std::unique_ptr<Backend<T>>> host_backends() {
  std::vector<std::unique_ptr<Backend<T>>> v;
  v.push_back(make_backend<T>(BackendKind::reference));
  v.push_back(make_backend<T>(BackendKind::cpu, 1));
  return v;
}

// ---- dispatch: ops:: gives the backend's own function, bit for bit ----

TYPED_TEST(KernelOps, GramThroughTheDispatcherIsTheBackendsOwn) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (auto& be : host_backends<T>()) {
    for (std::int64_t rows : {1, 37, 500}) {
      for (int R : {1, 5, 16}) {
        const std::string what = be->name() + " rows " + std::to_string(rows) + " R " +
                                 std::to_string(R) + ", seed " + std::to_string(seed);
        const auto A = random_values<T>(static_cast<std::size_t>(rows) * R, rng);
        const std::size_t n = static_cast<std::size_t>(R) * R;
        auto got = poisoned<T>(n), want = poisoned<T>(n);
        ops::gram(*be, A.data(), rows, R, got.data());
        direct_gram(*be, A.data(), rows, R, want.data());
        ASSERT_TRUE(all_finite(want)) << what;
        EXPECT_TRUE(same_bits(got, want)) << what;
        // A^T A has a positive diagonal for random A: the output is real, not a constant.
        for (int r = 0; r < R; ++r) EXPECT_GT(want[r * R + r], T(0)) << what;
      }
    }
  }
}

TYPED_TEST(KernelOps, MttkrpThroughTheDispatcherIsTheBackendsOwn) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<std::uint64_t>> shapes = {{30, 20, 10}, {9, 7, 8, 6}, {50, 40}};
  for (auto& be : host_backends<T>()) {
    for (const auto& dims : shapes) {
      const auto x = random_tensor<T>(dims, 400, rng);
      // Prepared by this backend: the other backend's function would refuse it, so a
      // dispatch to the wrong backend cannot pass unnoticed.
      auto h = be->prepare(x);
      for (int R : {3, 16}) {
        std::vector<std::vector<T>> A;
        for (auto d : dims) A.push_back(random_values<T>(static_cast<std::size_t>(d) * R, rng));
        for (int mode = 0; mode < x.order(); ++mode) {
          const std::string what = be->name() + " order " + std::to_string(x.order()) + " mode " +
                                   std::to_string(mode) + " R " + std::to_string(R) + ", seed " +
                                   std::to_string(seed);
          const std::size_t n = static_cast<std::size_t>(dims[static_cast<std::size_t>(mode)]) * R;
          auto got = poisoned<T>(n), want = poisoned<T>(n);
          ops::mttkrp(*be, *h, mode, pointers(A, mode), R, got.data());
          direct_mttkrp(*be, *h, mode, pointers(A, mode), R, want.data());
          ASSERT_TRUE(all_finite(want)) << what;
          EXPECT_TRUE(same_bits(got, want)) << what;
        }
      }
    }
  }
}

/// Row pieces on the host backends (ops::mttkrp_row_ranges, ops::mttkrp_rows): the counts
/// per row range are the COO's, `pieces` is false (they compute each piece whole), a
/// piece's rows are the MTTKRP's bit for bit and no other row is written; bounds out of
/// order or beyond the mode are an Error before any work.
TYPED_TEST(KernelOps, RowPiecesOnTheHostBackends) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const std::vector<std::uint64_t> dims{30, 20, 10, 7};
  const auto x = random_tensor<T>(dims, 500, rng);
  const int R = 5;
  std::vector<std::vector<T>> A;
  for (auto d : dims) A.push_back(random_values<T>(static_cast<std::size_t>(d) * R, rng));
  for (auto& be : host_backends<T>()) {
    auto h = be->prepare(x);
    for (int mode = 0; mode < x.order(); ++mode) {
      const auto len = static_cast<std::int64_t>(dims[static_cast<std::size_t>(mode)]);
      const std::vector<std::int64_t> bounds{0, 1, len / 2, len / 2, len};
      const std::string what =
          be->name() + " mode " + std::to_string(mode) + ", seed " + std::to_string(seed);
      const RowRanges rr = ops::mttkrp_row_ranges(*be, *h, mode, bounds);
      ASSERT_EQ(rr.nnz.size(), bounds.size() - 1) << what;
      EXPECT_FALSE(rr.pieces) << what;
      for (std::size_t j = 0; j + 1 < bounds.size(); ++j) {
        nnz_t want = 0;
        for (nnz_t k = 0; k < x.nnz(); ++k) {
          const auto i = static_cast<std::int64_t>(x.idx[static_cast<std::size_t>(mode)][k]);
          want += i >= bounds[j] && i < bounds[j + 1];
        }
        EXPECT_EQ(rr.nnz[j], want) << what << " range " << j;
      }
      const std::size_t n = static_cast<std::size_t>(len) * R;
      auto whole = poisoned<T>(n);
      ops::mttkrp(*be, *h, mode, pointers(A, mode), R, whole.data());
      for (std::size_t j = 0; j + 1 < bounds.size(); ++j) {
        auto got = poisoned<T>(n);
        ops::mttkrp_rows(*be, *h, mode, pointers(A, mode), R, got.data(), bounds[j], bounds[j + 1]);
        for (std::size_t k = 0; k < n; ++k) {
          const auto i = static_cast<std::int64_t>(k / R);
          if (i >= bounds[j] && i < bounds[j + 1])
            ASSERT_EQ(std::memcmp(&got[k], &whole[k], sizeof(T)), 0) << what << " row " << i;
          else
            ASSERT_TRUE(std::isnan(got[k])) << what << " piece " << j << " wrote row " << i;
        }
      }
      EXPECT_THROW(ops::mttkrp_row_ranges(*be, *h, mode, {0, len + 1}), Error) << what;
      EXPECT_THROW(ops::mttkrp_row_ranges(*be, *h, mode, {1, 0}), Error) << what;
      std::vector<T> out(n);
      EXPECT_THROW(ops::mttkrp_rows(*be, *h, mode, pointers(A, mode), R, out.data(), 2, 1), Error)
          << what;
      EXPECT_THROW(ops::mttkrp_rows(*be, *h, mode, pointers(A, mode), R, out.data(), 0, len + 1),
                   Error)
          << what;
    }
  }
}

/// Completion's fused pass (ops::completion_rows) equals, on each host backend, its MTTKRP of
/// the tensor and its row Grams of a copy whose values are 1 (the pattern), orders 1-4, R up
/// to 33; only the reference backend says it fuses.
TYPED_TEST(KernelOps, CompletionRowsAreTheMttkrpAndThePatternsGrams) {
  using T = TypeParam;
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const std::vector<std::vector<std::uint64_t>> shapes = {{25}, {30, 20, 10}, {9, 7, 8, 6}};
  for (auto& be : host_backends<T>()) {
    EXPECT_EQ(ops::fuses_completion(*be, 16), be->kind() == BackendKind::reference);
    for (const auto& dims : shapes) {
      const auto x = random_tensor<T>(dims, 300, rng);
      auto ones = x;
      std::fill(ones.vals.begin(), ones.vals.end(), T(1));
      auto h = be->prepare(x);
      auto hp = be->prepare(ones);
      for (int R : {1, 5, 33}) {
        const auto W = static_cast<std::size_t>(R) * (R + 1) / 2;
        std::vector<std::vector<T>> A, P;
        for (auto d : dims) {
          A.push_back(random_values<T>(static_cast<std::size_t>(d) * R, rng));
          P.emplace_back(static_cast<std::size_t>(d) * W);
          ops::pack_outer(*be, A.back().data(), static_cast<std::int64_t>(d), R, P.back().data());
        }
        for (int mode = 0; mode < x.order(); ++mode) {
          const std::string what = be->name() + " order " + std::to_string(x.order()) + " mode " +
                                   std::to_string(mode) + " R " + std::to_string(R) + ", seed " +
                                   std::to_string(seed);
          const auto rows = static_cast<std::size_t>(dims[static_cast<std::size_t>(mode)]);
          auto m = poisoned<T>(rows * R), g = poisoned<T>(rows * W);
          auto m_want = poisoned<T>(rows * R), g_want = poisoned<T>(rows * W);
          ops::completion_rows(*be, *h, mode, pointers(A, mode), R, m.data(), g.data());
          ops::mttkrp(*be, *h, mode, pointers(A, mode), R, m_want.data());
          ops::row_grams(*be, *hp, mode, pointers(A, mode), pointers(P, mode), R, g_want.data());
          ASSERT_TRUE(all_finite(m) && all_finite(g)) << what;
          double em = 0, nm = 0, eg = 0, ng = 0;
          for (std::size_t k = 0; k < m.size(); ++k) {
            em = std::max(em, std::abs(double(m[k]) - double(m_want[k])));
            nm = std::max(nm, std::abs(double(m_want[k])));
          }
          for (std::size_t k = 0; k < g.size(); ++k) {
            eg = std::max(eg, std::abs(double(g[k]) - double(g_want[k])));
            ng = std::max(ng, std::abs(double(g_want[k])));
          }
          EXPECT_GT(nm, 0.0) << what;  // real outputs, not zeros
          EXPECT_GT(ng, 0.0) << what;
          EXPECT_LE(em, tol * nm) << what;
          EXPECT_LE(eg, tol * ng) << what;
        }
      }
    }
  }
}

/// An executor whose kind() is none of BackendKind's values (a corrupted object): only the
/// dispatcher's error path looks at it.
template <typename T>
class UnknownKindBackend final : public Backend<T> {
 public:
  BackendKind kind() const override { return static_cast<BackendKind>(7); }
  std::string name() const override { return "unknown"; }
  MemorySpace memory_space() const override { return MemorySpace::host; }
  Array<T> allocate(std::size_t) override { return {}; }
  void upload(const T*, std::size_t, T*) override {}
  void download(const T*, std::size_t, T*) override {}
  void copy(const T*, std::size_t, T*) override {}
  void fill(T*, std::size_t, T) override {}
  std::unique_ptr<TensorHandle<T>> prepare(const SparseTensor<T>&) override { return nullptr; }
};

TYPED_TEST(KernelOps, AnExecutorOfNoKnownKindIsAnError) {
  using T = TypeParam;
  UnknownKindBackend<T> be;
  const std::vector<T> A(6, T(1));
  std::vector<T> G(4, T(0));
  try {
    ops::gram(be, A.data(), 3, 2, G.data());
    ADD_FAILURE() << "no error for backend kind 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend kind 7"), std::string::npos) << e.what();
  }
  for (T g : G) EXPECT_EQ(g, T(0)) << "nothing written";
}

// ---- the cuda stubs of a build without CUDA ----

#if !defined(TESSERA_HAVE_CUDA)
/// Runs f, expects Error whose message names `op` and says the build has no CUDA.
template <typename F>
void expect_not_built(F&& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << op << ": no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("built without CUDA"), std::string::npos) << m;
    EXPECT_NE(m.find(op), std::string::npos) << m;
  }
}

TYPED_TEST(KernelOps, CudaFunctionsOfABuildWithoutCudaSaySo) {
  using T = TypeParam;
  // The stubs never look at the executor; a reference backend stands in for one.
  auto be = make_backend<T>(BackendKind::reference);
  const auto x = [] {
    SparseTensor<T> t({4, 3, 2});
    const index_t c[3] = {1, 2, 1};
    t.push_back(c, T(0.5));
    return t;
  }();
  auto h = be->prepare(x);
  const std::vector<std::vector<T>> A = {std::vector<T>(8, T(1)), std::vector<T>(6, T(1)),
                                         std::vector<T>(4, T(1))};
  std::vector<T> out(8, T(3));
  expect_not_built([&] { cuda::mttkrp(*be, *h, 0, pointers(A, 0), 2, out.data()); }, "mttkrp");
  expect_not_built([&] { cuda::gram(*be, A[0].data(), 4, 2, out.data()); }, "gram");
  for (T v : out) EXPECT_EQ(v, T(3)) << "nothing written";
}
#else
/// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CudaMathLibraries, OpenOnFirstCall) {
  // Nothing before this test makes a CUDA context where no GPU is visible (CI), so there
  // neither library may be mapped yet: the binary does not depend on them (the first time
  // only: --gtest_repeat runs it again in the same process).
  static bool first = true;
  if (first && cuda_device_count() == 0) {
    EXPECT_FALSE(mapped("libcublas")) << "cuBLAS loaded before its first call";
    EXPECT_FALSE(mapped("libcusolver")) << "cuSOLVER loaded before its first call";
  }
  first = false;
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_TRUE(mapped("libcublas.so"));
  // Without a GPU cusolverDnCreate fails with a status (not a crash); with one it succeeds.
  cusolverDnHandle_t h = nullptr;
  if (cusolverDnCreate(&h) == CUSOLVER_STATUS_SUCCESS) {
    EXPECT_EQ(cusolverDnDestroy(h), CUSOLVER_STATUS_SUCCESS);
  }
  EXPECT_TRUE(mapped("libcusolver.so"));
}

TEST(CudaMathLibraries, MissingLibraryIsAnErrorNamingIt) {
  try {
    cuda::detail::open_math_library("cuBLAS", "/nonexistent-folder", "libcublas.so.999");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuBLAS could not be loaded"), std::string::npos) << m;
    EXPECT_NE(m.find("libcublas.so.999"), std::string::npos) << m;
    EXPECT_NE(m.find("LD_LIBRARY_PATH"), std::string::npos) << m;
  }
}
#endif

// ---- a streamed handle's hooks ----

/// A handle whose streamed() is itself: every hook records its call and writes values no
/// kernel would produce (mark()), so a test can tell the hook ran, with which arguments.
template <typename T>
class HookedHandle final : public TensorHandle<T>, public StreamedOps<T> {
 public:
  struct Call {
    std::string op;
    const Backend<T>* be = nullptr;
    int mode = -1;
    int R = 0;
    std::vector<const T*> factors;
    std::vector<int> ranks;
    const T* out = nullptr;
  };

  explicit HookedHandle(std::vector<std::uint64_t> dims) : dims_(std::move(dims)) {}

  /// Element k of a hook's output for `mode`: integers, exact in float.
  static T mark(int mode, std::size_t k) {
    return static_cast<T>(1000 + 100 * mode + static_cast<int>(k % 37));
  }
  /// The rows ttmc_rows gives for `mode`.
  static std::vector<index_t> hook_rows(int mode) { return {0, 2, static_cast<index_t>(3 + mode)}; }
  /// The bytes ttmc_scratch_bytes gives.
  static std::size_t hook_bytes(int mode, const std::vector<int>& ranks) {
    std::size_t b = 777000 + static_cast<std::size_t>(mode);
    for (int r : ranks) b = b * 10 + static_cast<std::size_t>(r);
    return b;
  }

  // TensorHandle: a tier-3 tensor of no nonzeros the backend holds.
  int order() const override { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const override { return dims_; }
  nnz_t nnz() const override { return 0; }
  std::size_t bytes() const override { return 0; }
  std::size_t mttkrp_stream_bytes(int) const override { return 0; }
  std::vector<std::uint64_t> distinct_rows() const override {
    return std::vector<std::uint64_t>(dims_.size(), 0);
  }
  double value_norm_squared() const override { return 0; }
  int tier() const override { return 3; }
  std::string describe() const override { return "hooked test handle"; }
  double overlap_fraction() const override { return 1; }
  double last_copy_seconds() const override { return 0; }
  double last_compute_seconds() const override { return 0; }
  const StreamedOps<T>* streamed() const override { return this; }

  // StreamedOps
  void mttkrp(Backend<T>& be, int mode, const std::vector<const T*>& factors, int R,
              T* out) const override {
    calls.push_back({"mttkrp", &be, mode, R, factors, {}, out});
    const std::size_t n = static_cast<std::size_t>(dims_[static_cast<std::size_t>(mode)]) * R;
    for (std::size_t k = 0; k < n; ++k) out[k] = mark(mode, k);
  }
  std::vector<index_t> ttmc_rows(Backend<T>& be, int mode) const override {
    calls.push_back({"ttmc_rows", &be, mode, 0, {}, {}, nullptr});
    return hook_rows(mode);
  }
  std::size_t ttmc_scratch_bytes(Backend<T>& be, int mode,
                                 const std::vector<int>& ranks) const override {
    calls.push_back({"ttmc_scratch_bytes", &be, mode, 0, {}, ranks, nullptr});
    return hook_bytes(mode, ranks);
  }
  void ttmc(Backend<T>& be, int mode, const std::vector<const T*>& factors,
            const std::vector<int>& ranks, T* out) const override {
    calls.push_back({"ttmc", &be, mode, 0, factors, ranks, out});
    const std::size_t n =
        hook_rows(mode).size() * static_cast<std::size_t>(ttmc_output_cols_of(ranks, mode));
    for (std::size_t k = 0; k < n; ++k) out[k] = mark(mode, k);
  }

  /// Product of the ranks of the other modes (the TTMc output's columns).
  static std::int64_t ttmc_output_cols_of(const std::vector<int>& ranks, int mode) {
    std::int64_t c = 1;
    for (std::size_t m = 0; m < ranks.size(); ++m)
      if (static_cast<int>(m) != mode) c *= ranks[m];
    return c;
  }

  mutable std::vector<Call> calls;

 private:
  std::vector<std::uint64_t> dims_;
};

/// Runs f, expects Error: the backend's own version refuses a handle it did not prepare.
template <typename F>
void expect_refused(F&& f, const std::string& what) {
  EXPECT_THROW(f(), Error) << what << ": the backend's own version accepted the hooked handle";
}

TYPED_TEST(KernelOps, AStreamedHandleRunsItsHooks) {
  using T = TypeParam;
  const std::vector<std::uint64_t> dims = {6, 5, 4};
  const int R = 3;
  const std::vector<int> ranks = {2, 3, 4};
  std::mt19937_64 rng(fresh_seed());
  std::vector<std::vector<T>> A, U;
  for (std::size_t m = 0; m < dims.size(); ++m) {
    A.push_back(random_values<T>(static_cast<std::size_t>(dims[m]) * R, rng));
    U.push_back(random_values<T>(static_cast<std::size_t>(dims[m]) * ranks[m], rng));
  }
  for (auto& be : host_backends<T>()) {
    for (int mode = 0; mode < 3; ++mode) {
      const std::string what = be->name() + " mode " + std::to_string(mode);
      HookedHandle<T> h(dims);
      using H = HookedHandle<T>;

      // mttkrp
      const auto fa = pointers(A, mode);
      const std::size_t n = static_cast<std::size_t>(dims[static_cast<std::size_t>(mode)]) * R;
      auto out = poisoned<T>(n);
      ASSERT_NO_THROW(ops::mttkrp(*be, h, mode, fa, R, out.data())) << what;
      ASSERT_EQ(h.calls.size(), 1u) << what;
      EXPECT_EQ(h.calls[0].op, "mttkrp") << what;
      EXPECT_EQ(h.calls[0].be, be.get()) << what;
      EXPECT_EQ(h.calls[0].mode, mode) << what;
      EXPECT_EQ(h.calls[0].R, R) << what;
      EXPECT_EQ(h.calls[0].factors, fa) << what;
      EXPECT_EQ(h.calls[0].out, out.data()) << what;
      for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(out[k], H::mark(mode, k)) << what << " " << k;

      // ttmc_rows
      EXPECT_EQ(ops::ttmc_rows(*be, h, mode), H::hook_rows(mode)) << what;
      ASSERT_EQ(h.calls.size(), 2u) << what;
      EXPECT_EQ(h.calls[1].op, "ttmc_rows") << what;
      EXPECT_EQ(h.calls[1].be, be.get()) << what;
      EXPECT_EQ(h.calls[1].mode, mode) << what;

      // ttmc_scratch_bytes
      EXPECT_EQ(ops::ttmc_scratch_bytes(*be, h, mode, ranks), H::hook_bytes(mode, ranks)) << what;
      ASSERT_EQ(h.calls.size(), 3u) << what;
      EXPECT_EQ(h.calls[2].op, "ttmc_scratch_bytes") << what;
      EXPECT_EQ(h.calls[2].be, be.get()) << what;
      EXPECT_EQ(h.calls[2].mode, mode) << what;
      EXPECT_EQ(h.calls[2].ranks, ranks) << what;

      // ttmc
      const auto fu = pointers(U, mode);
      const std::size_t tn =
          H::hook_rows(mode).size() * static_cast<std::size_t>(H::ttmc_output_cols_of(ranks, mode));
      auto tout = poisoned<T>(tn);
      ASSERT_NO_THROW(ops::ttmc(*be, h, mode, fu, ranks, tout.data())) << what;
      ASSERT_EQ(h.calls.size(), 4u) << what;
      EXPECT_EQ(h.calls[3].op, "ttmc") << what;
      EXPECT_EQ(h.calls[3].be, be.get()) << what;
      EXPECT_EQ(h.calls[3].mode, mode) << what;
      EXPECT_EQ(h.calls[3].factors, fu) << what;
      EXPECT_EQ(h.calls[3].ranks, ranks) << what;
      EXPECT_EQ(h.calls[3].out, tout.data()) << what;
      for (std::size_t k = 0; k < tn; ++k) ASSERT_EQ(tout[k], H::mark(mode, k)) << what << " " << k;

      // The backend's own versions were not the ones run: called directly, they refuse the
      // handle (it is none of theirs), where every dispatched call above returned normally.
      auto mine = poisoned<T>(n);
      if (be->kind() == BackendKind::reference) {
        expect_refused([&] { reference::mttkrp(*be, h, mode, fa, R, mine.data()); }, what);
        expect_refused([&] { (void)reference::ttmc_rows(*be, h, mode); }, what);
        expect_refused([&] { (void)reference::ttmc_scratch_bytes(*be, h, mode, ranks); }, what);
        expect_refused([&] { reference::ttmc(*be, h, mode, fu, ranks, tout.data()); }, what);
      } else {
        expect_refused([&] { cpu::mttkrp(*be, h, mode, fa, R, mine.data()); }, what);
        expect_refused([&] { (void)cpu::ttmc_rows(*be, h, mode); }, what);
        expect_refused([&] { (void)cpu::ttmc_scratch_bytes(*be, h, mode, ranks); }, what);
        expect_refused([&] { cpu::ttmc(*be, h, mode, fu, ranks, tout.data()); }, what);
      }
      EXPECT_EQ(h.calls.size(), 4u) << what << ": a direct call reached a hook";
    }
  }
}

/// A handle that is not streamed (streamed() null, the default) is not sent to any hook:
/// the dispatcher runs the backend's version on it.
TYPED_TEST(KernelOps, APreparedHandleIsNotStreamed) {
  using T = TypeParam;
  for (auto& be : host_backends<T>()) {
    SparseTensor<T> x({3, 2});
    const index_t c[2] = {2, 1};
    x.push_back(c, T(2));
    auto h = be->prepare(x);
    EXPECT_EQ(h->streamed(), nullptr) << be->name();
    const std::vector<std::vector<T>> A = {{T(0), T(0), T(0), T(0), T(0), T(0)},
                                           {T(1), T(1), T(1), T(5), T(5), T(5)}};
    std::vector<T> out = poisoned<T>(9);
    ops::mttkrp(*be, *h, 0, pointers(A, 0), 3, out.data());
    // Row 2 = 2 * A1 row 1 = 10; rows 0, 1 = 0.
    const std::vector<T> want = {T(0), T(0), T(0), T(0), T(0), T(0), T(10), T(10), T(10)};
    EXPECT_EQ(out, want) << be->name();
  }
}

}  // namespace
}  // namespace tessera::kernels
