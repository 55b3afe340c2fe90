// CUDA TTMc and the wide products of Tucker-HOOI against the reference backend, and
// Tucker-HOOI on GPUs (CUDA backend, NCCL sums) against the CPU backend over MPI.
//
// TTMc: orders 1 to 6, unequal ranks chosen so the kernel runs with every column width a
// lane can own (8, 2 and 1 consecutive columns of the last mode) and with several column
// slices (C > 256), the register-blocked kernel at orders 3 to 5 with groups of 4, 8 and 16
// lanes, and the tensor-core kernel (order 3, float; kernels/cuda/ttmc/tc.cuh) with every tile
// shape (prefix rank 8 included) and with rows shorter than its 8-nonzero step, and the
// CUDA-core kernels alone; uniform indices and one slice holding 70% of the nonzeros (rows
// that span many tiles: the boundary atomics); float and double; tier 1 in the plain and the
// blocked (smem, l2) layouts, where rows come in several runs and every row is added with atomics;
// tier 2 with chunks of a few tiles. Rows must equal the reference's exactly, values to the
// precision's tolerance; outputs are NaN-poisoned first. Wide products: Y^T Y, Y W and Y^T P in
// double against the host implementation; the top eigenpairs (cuSOLVER) against LAPACK. Tucker: the
// fit of every iteration and the core norm equal the CPU backend's for the gram and subspace
// methods at 1 and 2 ranks (one GPU each), and tier 2 equals tier 1. Kernel and layout options are
// set through the API (kernels::Tuning given to make_backend). Everything skips (with a message)
// where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "algo/generate.hpp"
#include "algo/tucker.hpp"
#include "gpu_test_util.hpp"
#include "kernels/ops.hpp"
#include "kernels/ttmc.hpp"

namespace tessera {
namespace {

using namespace ::tessera::test;
namespace ops = kernels::ops;
using kernels::BackendKind;

/// Tuning with the TTMc kernel selection (--ttmc-kernel) set.
kernels::Tuning ttmc_kernel(const std::string& kernel) {
  kernels::Tuning t;
  t.ttmc_kernel = kernels::parse_named<kernels::TtmcKernel>(kernel, "--ttmc-kernel");
  return t;
}

/// Tuning with a forced MTTKRP layout (--cuda-layout) and its block rows.
kernels::Tuning forced_layout(const std::string& layout, std::uint64_t block_rows) {
  kernels::Tuning t;
  t.cuda_layout = kernels::parse_named<kernels::CudaLayout>(layout, "--cuda-layout");
  t.cuda_block_rows = block_rows;
  return t;
}

struct TtmcCase {
  std::vector<std::uint64_t> dims;
  std::vector<int> ranks;
  nnz_t nnz;
};

std::vector<TtmcCase> ttmc_cases() {
  return {
      {{300}, {1}, 4000},                       // order 1: sums of values
      {{70, 90}, {8, 16}, 5000},                // order 2: no prefix mode
      {{60, 50, 40}, {16, 16, 16}, 20000},      // W = 8, C = 256 (nell-2's ranks)
      {{60, 50, 40}, {3, 6, 10}, 20000},        // W = 2 (R_L = 10 or 6)
      {{60, 50, 40}, {7, 5, 3}, 20000},         // W = 1 (odd ranks)
      {{40, 30, 50}, {4, 40, 16}, 15000},       // C = 640 for mode 0: three slices
      {{60, 50, 40}, {8, 16, 8}, 20000},        // groups of 4 and 8 lanes; tensor cores 8x8, 8x16
      {{60, 50, 40}, {8, 8, 32}, 20000},        // tensor cores, prefix rank 8 x 32, 8 x 8
      {{60, 50, 40}, {4, 16, 32}, 20000},       // groups of 8 lanes over R_L = 32, and 16, 4
      {{60, 50, 40}, {4, 8, 4}, 20000},         // groups of 4 lanes over R_L = 4 (and 8)
      {{20, 25, 30, 35}, {3, 4, 5, 8}, 15000},  // order 4: any-order kernel
      {{20, 25, 30, 35}, {4, 8, 4, 8}, 15003},  // order 4: register-blocked, 3 inputs
      {{60, 50, 40}, {16, 32, 8}, 20003},       // tensor-core tiles 2x1, 1x1, 1x4
      {{3000, 40, 30}, {32, 32, 32}, 20011},    // 2x4 tiles; mode 0: ~7 nonzeros a row
      {{3000, 50, 40}, {16, 32, 16}, 20011},    // 2x2 tiles (mode 0), 1x2, 1x4; short rows
      {{9, 10, 11, 12, 13}, {4, 4, 4, 8, 4}, 8001},    // order 5: register-blocked, any order
      {{9, 10, 11, 12, 13}, {2, 3, 2, 3, 4}, 8000},    // order 5
      {{6, 7, 8, 5, 6, 7}, {2, 2, 3, 2, 2, 2}, 6000},  // order 6
  };
}

class GpuTtmc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  }

  /// TTMc of every mode on the cuda backend (budget 0: tier 1) against the reference.
  /// `nnz_div` divides every case's nonzero count (at least 200 remain): the sanitizer-sized
  /// runs (compute-sanitizer racecheck costs ~1e3x per shared-memory access). `tuning` is
  /// given to the cuda backend.
  template <typename T>
  void check(const std::string& what, std::size_t budget_chunk_tiles, int skew, nnz_t nnz_div = 1,
             const kernels::Tuning& tuning = {}, double tolerance = tol<T>()) {
    auto ref = kernels::make_backend<T>(BackendKind::reference);
    std::uint64_t seed = 100;
    for (const auto& tc : ttmc_cases()) {
      const int N = static_cast<int>(tc.dims.size());
      const nnz_t nnz = std::max<nnz_t>(200, tc.nnz / nnz_div);
      auto x = random_tensor<T>(tc.dims, nnz, ++seed, skew < N ? skew : -1);
      auto gpu = kernels::make_backend<T>(BackendKind::cuda, 0, tuning);
      // Tier 2 with chunks of budget_chunk_tiles MTTKRP tiles where that is smaller than
      // tier 1 (tensors of several tiles), else tier 1 within the same budget.
      const std::size_t budget =
          budget_chunk_tiles > 0 ? 2 * chunk_bytes<T>(N, budget_chunk_tiles * kTileNnz) + 4096 : 0;
      if (budget > 0) gpu->set_memory_budget(budget);
      auto hg = gpu->prepare(x);
      auto hr = ref->prepare(x);
      if (budget > 0) {
        ASSERT_EQ(hg->tier(), budget < N * chunk_bytes<T>(N, x.nnz()) ? 2 : 1) << hg->describe();
      }
      std::vector<std::vector<T>> fh(static_cast<std::size_t>(N));
      std::vector<kernels::Array<T>> fd;
      std::vector<const T*> pg, pr;
      for (int m = 0; m < N; ++m) {
        fh[m] = random_vector<T>(tc.dims[m] * static_cast<std::size_t>(tc.ranks[m]), seed + m);
        fd.push_back(uploaded(*gpu, fh[m]));
      }
      for (int m = 0; m < N; ++m) {
        pg.push_back(fd[m].data());
        pr.push_back(fh[m].data());
      }
      for (int mode = 0; mode < N; ++mode) {
        const auto rows_g = ops::ttmc_rows(*gpu, *hg, mode);
        const auto rows_r = ops::ttmc_rows(*ref, *hr, mode);
        ASSERT_EQ(rows_g, rows_r) << what << " order " << N << " mode " << mode;
        const auto C = kernels::ttmc_output_cols(tc.ranks, mode);
        const std::size_t n = rows_r.size() * static_cast<std::size_t>(C);
        std::vector<T> want(n);
        ops::ttmc(*ref, *hr, mode, pr, tc.ranks, want.data());
        auto out = poisoned(*gpu, n);
        ops::ttmc(*gpu, *hg, mode, pg, tc.ranks, out.data());
        const auto got = downloaded(*gpu, out.data(), n);
        EXPECT_LT(rel_error(got, want), tolerance)
            << what << ": order " << N << " mode " << mode << " C " << C << " nnz " << x.nnz()
            << "; " << hg->describe();
      }
    }
  }
};

TEST_F(GpuTtmc, Tier1PlainMatchesReference) {
  check<double>("double", 0, -1);
  check<float>("float", 0, -1);
  check<double>("double, skewed slice", 0, 0);
  check<float>("float, skewed slice", 0, 1);
}

// The CUDA-core kernels alone (Tuning::ttmc_kernel = cores, --ttmc-kernel), where the
// default takes the tensor-core kernel for order 3 in float; a bad value is refused.
TEST_F(GpuTtmc, CudaCoreKernelsMatchReference) {
  check<float>("float, CUDA cores", 0, -1, 1, ttmc_kernel("cores"));
  check<float>("float, CUDA cores, skewed slice", 0, 1, 1, ttmc_kernel("cores"));
  EXPECT_THROW(check<float>("bad kernel name", 0, -1, 1, ttmc_kernel("fast")), InputError);
}

/// Tuning with --gather-precision set (and the TTMc kernel: auto or cores).
kernels::Tuning gathers(const std::string& precision, const std::string& kernel = "auto") {
  kernels::Tuning t = ttmc_kernel(kernel);
  t.gather_precision =
      kernels::parse_named<kernels::GatherPrecision>(precision, "--gather-precision");
  return t;
}

// --gather-precision fp16 | bf16: the tensor-core kernel gathers 16-bit copies of the factors
// (one tf32 product a step); within the copies' rounding of the reference in tiers 1 and 2
// (fp16: 2^-11 an entry, bf16: 2^-8), every other kernel unchanged. The copies must really be
// read: the order-3 outputs differ from the float gathers' by more than float rounding.
TEST_F(GpuTtmc, SixteenBitGathersOnTheTensorCores) {
  check<float>("float, fp16 gathers", 0, -1, 1, gathers("fp16"), 4e-3);
  check<float>("float, bf16 gathers", 0, 1, 1, gathers("bf16"), 3e-2);
  check<float>("float, fp16 gathers, tier 2", 1, 0, 1, gathers("fp16"), 4e-3);
  check<float>("float, fp16 gathers, CUDA cores (full precision)", 0, -1, 1,
               gathers("fp16", "cores"));
  for (const std::vector<int>& ranks : {std::vector<int>{16, 16, 16}, {8, 32, 8}, {32, 16, 32}}) {
    const std::vector<std::uint64_t> dims{60, 50, 40};
    const auto x = random_tensor<float>(dims, 20000, 77, -1);
    std::vector<std::vector<float>> out;
    for (const char* g : {"full", "fp16", "bf16"}) {
      auto gpu = kernels::make_backend<float>(BackendKind::cuda, 0, gathers(g));
      auto h = gpu->prepare(x);
      std::vector<kernels::Array<float>> fd;
      std::vector<const float*> pg;
      for (int m = 0; m < 3; ++m)
        fd.push_back(uploaded(*gpu, random_vector<float>(dims[m] * ranks[m], 300 + m)));
      for (auto& f : fd) pg.push_back(f.data());
      std::vector<float> all;
      for (int mode = 0; mode < 3; ++mode) {
        const std::size_t n = ops::ttmc_rows(*gpu, *h, mode).size() *
                              static_cast<std::size_t>(kernels::ttmc_output_cols(ranks, mode));
        auto y = poisoned(*gpu, n);
        ops::ttmc(*gpu, *h, mode, pg, ranks, y.data());
        const auto got = downloaded(*gpu, y.data(), n);
        all.insert(all.end(), got.begin(), got.end());
      }
      out.push_back(all);
    }
    const double e16 = rel_error(out[1], out[0]), eb16 = rel_error(out[2], out[0]);
    EXPECT_GT(e16, 1e-5) << "fp16 gathers: the copies were not read";
    EXPECT_LT(e16, 4e-3);
    EXPECT_GT(eb16, e16) << "bf16 rounds coarser than fp16";
    EXPECT_LT(eb16, 3e-2);
  }
}

TEST_F(GpuTtmc, BlockedLayoutsMatchReference) {
  for (const char* layout : {"smem", "l2"}) {
    check<double>(std::string("double, ") + layout, 0, 0, 1, forced_layout(layout, 8));
    check<float>(std::string("float, ") + layout, 0, -1, 1, forced_layout(layout, 8));
  }
}

TEST_F(GpuTtmc, Tier2ChunksMatchReference) {
  check<double>("double, tier 2", 1, -1);
  check<float>("float, tier 2", 1, 0);
}

// Every kernel and layout above once, on a tenth of the nonzeros: the cases that
// `jobs/gpu-node.sh sanitize` runs under compute-sanitizer racecheck and memcheck
// (TESSERA_SANITIZE_GTEST='*Small*'; docs/reliability.md). Same checks as the full-size
// tests.
TEST_F(GpuTtmc, SmallEveryKernelAndLayout) {
  check<double>("small, double", 0, -1, 10);
  check<float>("small, float (tensor cores at order 3)", 0, 0, 10);
  check<float>("small, float, CUDA cores", 0, 1, 10, ttmc_kernel("cores"));
  for (const char* layout : {"smem", "l2"})
    check<float>(std::string("small, float, ") + layout, 0, 0, 10, forced_layout(layout, 8));
  check<double>("small, double, tier 2", 1, -1, 4);  // several chunks of one tile
}

TEST_F(GpuTtmc, WideProductsMatchHost) {
  auto run = [](auto tag) {
    using T = decltype(tag);
    auto gpu = kernels::make_backend<T>(BackendKind::cuda);
    auto ref = kernels::make_backend<T>(BackendKind::reference);
    for (std::int64_t rows : {0, 1, 3000}) {
      for (std::int64_t C : {1, 37, 300}) {
        const int R = 7;
        const auto Yh = random_vector<T>(static_cast<std::size_t>(rows * C), 5 + rows + C);
        const auto W = random_vector<double>(static_cast<std::size_t>(C) * R, 6);
        const auto P =
            random_vector<double>(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * R, 7);
        auto Yd = uploaded(*gpu, Yh.empty() ? std::vector<T>(1) : Yh);
        const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " rows " +
                                 std::to_string(rows) + " C " + std::to_string(C);
        // Y^T Y
        std::vector<double> S_want(static_cast<std::size_t>(C * C)), S_got(S_want.size());
        ops::wide_gram(*ref, Yh.data(), rows, C, S_want.data());
        auto S = gpu->allocate_double(S_want.size());
        gpu->upload_double(std::vector<double>(S_want.size(), NAN).data(), S_want.size(), S.data());
        ops::wide_gram(*gpu, Yd.data(), rows, C, S.data());
        gpu->download_double(S.data(), S_got.size(), S_got.data());
        EXPECT_LT(rel_error(S_got, S_want), 1e-12) << "gram " << what;
        // Y^T P
        std::vector<double> B_want(static_cast<std::size_t>(C) * R), B_got(B_want.size());
        ops::wide_times_t(*ref, Yh.data(), rows, C, P.data(), R, B_want.data());
        auto Pd = gpu->allocate_double(P.size());
        gpu->upload_double(P.data(), P.size(), Pd.data());
        auto B = gpu->allocate_double(B_want.size());
        gpu->upload_double(std::vector<double>(B_want.size(), NAN).data(), B_want.size(), B.data());
        ops::wide_times_t(*gpu, Yd.data(), rows, C, Pd.data(), R, B.data());
        gpu->download_double(B.data(), B_got.size(), B_got.data());
        EXPECT_LT(rel_error(B_got, B_want), 1e-12) << "times_t " << what;
        // Y W
        if (rows == 0) continue;
        std::vector<double> Z_want(static_cast<std::size_t>(rows) * R), Z_got(Z_want.size());
        ops::wide_times(*ref, Yh.data(), rows, C, W.data(), R, Z_want.data());
        auto Wd = gpu->allocate_double(W.size());
        gpu->upload_double(W.data(), W.size(), Wd.data());
        auto Z = gpu->allocate_double(Z_want.size());
        gpu->upload_double(std::vector<double>(Z_want.size(), NAN).data(), Z_want.size(), Z.data());
        ops::wide_times(*gpu, Yd.data(), rows, C, Wd.data(), R, Z.data());
        gpu->download_double(Z.data(), Z_got.size(), Z_got.data());
        EXPECT_LT(rel_error(Z_got, Z_want), 1e-12) << "times " << what;
      }
    }
  };
  run(double{});
  run(float{});
}

// The k largest eigenpairs of a symmetric matrix on the device against LAPACK dsyevr: with
// cuSOLVER dsyevdx (double backends, and float ones outside ops::block_eig_applies) eigenvalues
// to 1e-12 of the largest, V orthonormal to 1e-12 and ||S V - V diag(w)|| <= 1e-11 ||S||; with
// the one-block solver (float, n <= 256, k <= 16; its reduction in single precision) eigenvalues
// and residual to 1e-6 n max |S_ij| (>= ||S||), V orthonormal to 1e-12. Eigenvectors of repeated
// eigenvalues are not unique, so no vector is compared with LAPACK's, but where the spectrum is
// simple every vector is, up to sign. Matrices: a random Gram with a shifted diagonal (distinct
// eigenvalues), Q diag(lambda) Q^T with geometrically decaying eigenvalues (n 192 and 256, where
// the float one-block solver's Lanczos kernel must answer) and with eigenvalues in tight clusters
// and repeated across the k-th, a Gram of rank 3 (n - 3 eigenvalues zero), the zero matrix and
// diagonal ones; and a NaN, refused. Then Lanczos' decline streak.
template <typename T>
static void check_symmetric_eig_top() {
  auto gpu = kernels::make_backend<T>(BackendKind::cuda);
  auto ref = kernels::make_backend<T>(BackendKind::reference);
  const auto gram = [](const std::vector<double>& A, int rows, int n, double shift) {
    std::vector<double> S(static_cast<std::size_t>(n) * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double v = i == j ? shift * (i + 1.0) : 0.0;
        for (int q = 0; q < rows; ++q)
          v += A[static_cast<std::size_t>(q) * n + i] * A[static_cast<std::size_t>(q) * n + j];
        S[static_cast<std::size_t>(i) * n + j] = v;
      }
    return S;
  };
  // Q diag(lambda) Q^T, Q from the Householder reflector of a random vector (orthogonal).
  const auto spectral = [](const std::vector<double>& lambda, std::uint64_t seed) {
    const int n = static_cast<int>(lambda.size());
    auto u = random_vector<double>(static_cast<std::size_t>(n), seed);
    double nn = 0;
    for (double x : u) nn += x * x;
    std::vector<double> S(static_cast<std::size_t>(n) * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double v = 0;
        for (int q = 0; q < n; ++q) {
          const double qi = (i == q ? 1.0 : 0.0) - 2 * u[i] * u[q] / nn;
          const double qj = (j == q ? 1.0 : 0.0) - 2 * u[j] * u[q] / nn;
          v += qi * lambda[static_cast<std::size_t>(q)] * qj;
        }
        S[static_cast<std::size_t>(i) * n + j] = v;
      }
    return S;
  };
  struct Case {
    std::string what;
    int n;
    std::vector<double> S;
    bool simple;  ///< distinct eigenvalues among the top k + 1: vectors compared too
  };
  std::vector<Case> cases;
  for (int n : {1, 2, 3, 7, 36, 192, 256, 512})
    cases.push_back(
        {"random Gram", n,
         gram(random_vector<double>(static_cast<std::size_t>(n) * n, 40 + n), n, n, 1.0), true});
  // Geometric decay, simple: where Lanczos (float, n >= 192) answers.
  for (int n : {192, 256}) {
    std::vector<double> lambda(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) lambda[static_cast<std::size_t>(q)] = 1e3 * std::pow(0.8, q);
    cases.push_back({"decaying spectrum", n, spectral(lambda, 11 + n), true});
  }
  {
    // Geometric decay with a 16th gap of 0.95, below 1e-3 ||S|| (about 1.0): the guard's margin
    // is then half that gap, and Lanczos answers (a margin of 1e-3 ||S|| declined it).
    const int n = 256;
    std::vector<double> lambda(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q)
      lambda[static_cast<std::size_t>(q)] =
          q < 16 ? 1e3 * std::pow(0.7, q) : 0.8e3 * std::pow(0.7, 15) * std::pow(0.7, q - 16);
    cases.push_back({"small 16th gap", n, spectral(lambda, 5 + n), true});
  }
  for (int n : {64, 256}) {
    std::vector<double> lambda(static_cast<std::size_t>(n));
    // Clusters of 4 within 3e-9 (1e3, 500, 333, ...), and 250 eight times at the 13th to
    // 20th largest, across k = 16.
    for (int q = 0; q < n; ++q)
      lambda[static_cast<std::size_t>(q)] =
          q >= 12 && q < 20 ? 250.0 : 1e3 / (1 + q / 4) + 1e-9 * (q % 4);
    cases.push_back({"clustered spectrum", n, spectral(lambda, 7 + n), false});
    cases.push_back({"rank 3", n,
                     gram(random_vector<double>(3 * static_cast<std::size_t>(n), 9 + n), 3, n, 0),
                     false});
    cases.push_back({"zero", n, std::vector<double>(static_cast<std::size_t>(n) * n, 0.0), false});
    std::vector<double> D(static_cast<std::size_t>(n) * n, 0.0);
    for (int q = 0; q < n; ++q) D[static_cast<std::size_t>(q) * n + q] = (q * 37) % n + 0.5;
    cases.push_back({"diagonal", n, D, true});
  }
  int device = 0, smem_optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  for (const auto& c : cases) {
    const int n = c.n;
    // A backend per matrix: Lanczos' decline streak (block_eig.cu) is the context's.
    gpu = kernels::make_backend<T>(BackendKind::cuda);
    for (int k : {1, std::min(n, 16), n}) {
      // What runs (the run record names it): float where the rule and the device allow; a
      // device with an H100's 227 KiB of shared memory a block holds every n <= 256.
      const bool block = ops::eig_in_one_block(*gpu, n, k);
      if (smem_optin >= 227 * 1024) {
        EXPECT_EQ(block, (std::is_same_v<T, float> && ops::block_eig_applies(n, k)))
            << c.what << ", n " << n << ", k " << k;
      }
      EXPECT_FALSE(ops::eig_in_one_block(*ref, n, k));
      const std::string what = c.what + ", n " + std::to_string(n) + ", k " + std::to_string(k) +
                               (block ? " (one-block solver)" : " (cuSOLVER)");
      std::vector<double> w_ref(k), w_got(k), V_ref(static_cast<std::size_t>(n) * k),
          V_got(V_ref.size());
      std::vector<double> Sr = c.S;
      ops::symmetric_eig_top(*ref, Sr.data(), n, k, w_ref.data(), V_ref.data());
      auto Sd = gpu->allocate_double(c.S.size());
      gpu->upload_double(c.S.data(), c.S.size(), Sd.data());
      auto Vd = gpu->allocate_double(V_got.size());
      gpu->upload_double(std::vector<double>(V_got.size(), NAN).data(), V_got.size(), Vd.data());
      const kernels::EigLanczosCounts before = ops::eig_lanczos_counts(*gpu);
      ops::symmetric_eig_top(*gpu, Sd.data(), n, k, w_got.data(), Vd.data());
      gpu->download_double(Vd.data(), V_got.size(), V_got.data());
      // Lanczos first where n >= 192 (block_lanczos.cuh): it answers the decaying spectra (the
      // one with a small 16th gap too) and, at k > 1, declines the clustered one (one Krylov
      // vector sees one vector of each cluster: the guard finds the others) and the zero matrix
      // (a breakdown after one step). At k = 1 any unit vector of the top cluster, or any at
      // all of the zero matrix, is an answer: Lanczos may give one (the top cluster's rounding
      // brings a second copy in, and its gap to the first is then rounding). The exact solver
      // answers what it declines.
      const kernels::EigLanczosCounts after = ops::eig_lanczos_counts(*gpu);
      const std::int64_t answered = after.answered - before.answered;
      const std::int64_t declined = after.declined - before.declined;
      EXPECT_EQ(answered + declined, block && n >= 192 && smem_optin >= 227 * 1024 ? 1 : 0) << what;
      if (block && n >= 192 && smem_optin >= 227 * 1024) {
        if (c.what == "decaying spectrum" || c.what == "small 16th gap") {
          EXPECT_EQ(answered, 1) << what;
        }
        if ((c.what == "clustered spectrum" || c.what == "zero") && k > 1) {
          EXPECT_EQ(declined, 1) << what;
        }
      }
      double smax = 0;
      for (double x : c.S) smax = std::max(smax, std::abs(x));
      const double scale = std::max(smax * n, 1e-300);
      double werr = 0;
      for (int j = 0; j < k; ++j) werr = std::max(werr, std::abs(w_got[j] - w_ref[j]));
      EXPECT_LE(werr, (block ? 1e-6 : 1e-12) * scale) << what;
      double orth = 0, resid = 0;
      for (int a = 0; a < k; ++a) {
        for (int b = 0; b < k; ++b) {
          double dot = 0;
          for (int i = 0; i < n; ++i)
            dot += V_got[static_cast<std::size_t>(i) * k + a] *
                   V_got[static_cast<std::size_t>(i) * k + b];
          orth = std::max(orth, std::abs(dot - (a == b ? 1.0 : 0.0)));
        }
        for (int i = 0; i < n; ++i) {
          double sv = 0;
          for (int q = 0; q < n; ++q)
            sv += c.S[static_cast<std::size_t>(i) * n + q] *
                  V_got[static_cast<std::size_t>(q) * k + a];
          resid =
              std::max(resid, std::abs(sv - w_got[a] * V_got[static_cast<std::size_t>(i) * k + a]));
        }
      }
      EXPECT_LE(orth, 1e-12 * n) << what;
      EXPECT_LE(resid, (block ? 1e-6 : 1e-11) * scale) << what;
      if (c.simple && k < n)
        for (int j = 0; j < k; ++j) {
          double dot = 0;
          for (int i = 0; i < n; ++i)
            dot += V_got[static_cast<std::size_t>(i) * k + j] *
                   V_ref[static_cast<std::size_t>(i) * k + j];
          EXPECT_NEAR(std::abs(dot), 1.0, block ? 1e-6 : 1e-9) << what << ", vector " << j;
        }
    }
  }
  if (std::is_same_v<T, float> && smem_optin >= 227 * 1024) {
    // Three declines in a row (a uniformly spaced spectrum, n 256, k 16), then Lanczos is
    // tried only every 16th solve, until it answers again (the decaying spectrum).
    gpu = kernels::make_backend<T>(BackendKind::cuda);
    const int n = 256, k = 16;
    auto Vd = gpu->allocate_double(static_cast<std::size_t>(n) * k);
    std::vector<double> w(k);
    const auto solve = [&](const std::vector<double>& S) {
      auto Sd = gpu->allocate_double(S.size());
      gpu->upload_double(S.data(), S.size(), Sd.data());
      ops::symmetric_eig_top(*gpu, Sd.data(), n, k, w.data(), Vd.data());
      const kernels::EigLanczosCounts e = ops::eig_lanczos_counts(*gpu);
      return e.answered + e.declined;
    };
    const auto flat = std::find_if(cases.begin(), cases.end(), [](const Case& c) {
      return c.what == "diagonal" && c.n == 256;
    });
    const auto decaying = std::find_if(cases.begin(), cases.end(), [](const Case& c) {
      return c.what == "decaying spectrum" && c.n == 256;
    });
    ASSERT_TRUE(flat != cases.end() && decaying != cases.end());
    for (int call = 1; call <= 3; ++call) EXPECT_EQ(solve(flat->S), call);
    for (int call = 4; call <= 18; ++call) EXPECT_EQ(solve(decaying->S), 3) << "call " << call;
    EXPECT_EQ(solve(decaying->S), 4);  // the 16th since the streak: tried, and answered
    EXPECT_EQ(ops::eig_lanczos_counts(*gpu).answered, 1);
    EXPECT_EQ(solve(flat->S), 5);  // tried again at once
  }
  if (std::is_same_v<T, float>) {  // a NaN (the one-block solver checks; cuSOLVER may not)
    std::vector<double> S(64, 1.0);
    S[9] = NAN;
    auto Sd = gpu->allocate_double(S.size());
    gpu->upload_double(S.data(), S.size(), Sd.data());
    auto Vd = gpu->allocate_double(16);
    std::vector<double> w(2);
    EXPECT_THROW(ops::symmetric_eig_top(*gpu, Sd.data(), 8, 2, w.data(), Vd.data()),
                 std::exception);
  }
}

TEST_F(GpuTtmc, SymmetricEigTopMatchesLapack) {
  check_symmetric_eig_top<double>();
}
TEST_F(GpuTtmc, SymmetricEigTopFloatMatchesLapack) {
  check_symmetric_eig_top<float>();
}

// ---- Tucker-HOOI on GPUs ----

class GpuTucker : public GpuJobTest {
 protected:
  template <typename T>
  void compare(algo::SvdMethod svd, std::size_t budget, double tol) {
    algo::GenerateOptions g;
    g.dims = {60, 50, 40};
    g.nnz = 8000;
    g.rank = 4;
    g.noise = 0.1;
    g.seed = 31;
    g.structure = algo::Structure::sampled;
    g.dist = algo::IndexDist::powerlaw;
    auto gen = algo::generate(g, *world_);
    SparseTensor<T> x(gen.block.dims);
    for (nnz_t k = 0; k < gen.block.nnz(); ++k) {
      index_t c[kMaxOrder];
      for (int m = 0; m < 3; ++m) c[m] = gen.block.idx[m][k];
      x.push_back(c, static_cast<T>(gen.block.vals[k]));
    }
    auto d = partition::distribute(std::move(x), partition::Scheme::nnz, {}, *world_);
    algo::TuckerOptions o;
    o.ranks = {5, 4, 6};
    o.max_iters = 5;
    o.tol = 0;
    o.svd = svd;
    o.print_iterations = false;
    auto cpu = kernels::make_backend<T>(BackendKind::cpu, 1);
    auto rc = algo::tucker_hooi<T>(d, *cpu, *world_, o);
    // On several ranks the gram method's auto all-reduces these small TTMc outputs (every
    // rank runs the dense stage on all rows); the owners' exchange is run too.
    const bool both = svd == algo::SvdMethod::gram && world_->size() > 1;
    for (auto rows : {algo::TuckerRows::automatic, algo::TuckerRows::owners}) {
      if (rows == algo::TuckerRows::owners && !both) continue;
      o.rows = rows;
      auto gpu = kernels::make_backend<T>(BackendKind::cuda);
      if (budget > 0) gpu->set_memory_budget(budget);
      auto rg = algo::tucker_hooi<T>(d, *gpu, *world_, o, nccl_.get());
      const bool all = both && rows == algo::TuckerRows::automatic;
      const std::string what = algo::to_string(svd) + " on " + std::to_string(world_->size()) +
                               " rank(s)" + (budget ? ", tier 2" : "") +
                               (all ? ", rows all-reduced" : "");
      check(rg, rc, svd, all, tol, *gpu, what);
    }
  }
  template <typename T>
  void check(const algo::TuckerResult& rg, const algo::TuckerResult& rc, algo::SvdMethod svd,
             bool all, double tol, kernels::Backend<T>& gpu, const std::string& what) {
    ASSERT_EQ(rg.iterations, rc.iterations) << what;
    for (int i = 0; i < rc.iterations; ++i)
      EXPECT_NEAR(rg.history[i].fit, rc.history[i].fit, tol) << what << " iteration " << i + 1;
    EXPECT_NEAR(rg.core_norm, rc.core_norm, tol * rc.core_norm) << what;
    // A sampled low-rank tensor is far from low multilinear rank: the fit is modest but
    // must be a real one.
    EXPECT_TRUE(std::isfinite(rg.fit) && rg.fit > 0.01 && rg.fit < 1) << what << " fit " << rg.fit;
    // The phases: stream marks with the gram method (no host wait after each phase; on
    // several ranks the NCCL collectives are in the stream too, timed by their own marks),
    // host waits otherwise. Either way they are disjoint parts of the iteration, and the
    // split's parts are parts of the svd share.
    const bool marks = svd == algo::SvdMethod::gram;
    EXPECT_EQ(rg.phase_timing, marks ? "stream marks" : "host waits") << what;
    EXPECT_EQ(rc.phase_timing, "host waits") << what;
    // The run put the backend's own wait back (it waits through NCCL only while it runs).
    EXPECT_FALSE(static_cast<bool>(gpu.set_stream_waiter({}))) << what;
    if (all) {
      // One collective per mode (the rows) and ||G||^2 agreed: no dense-stage sum, no gather.
      EXPECT_EQ(rg.rows_strategy, "allreduce,allreduce,allreduce") << what;
      EXPECT_NE(rg.rows_strategy_why.find("auto: allreduce"), std::string::npos)
          << what << ": " << rg.rows_strategy_why;
      EXPECT_GT(rg.comm_exchange_seconds, 0) << what;
      EXPECT_EQ(rg.comm_publish_seconds, 0) << what;
      EXPECT_EQ(rg.dense_sums_per_iteration, 1) << what;
    } else if (world_->size() > 1) {
      // Rows, dense-stage sums and factor all-gathers, each measured, as many sums as on CPUs.
      EXPECT_GT(rg.comm_exchange_seconds, 0) << what;
      EXPECT_GT(rg.comm_dense_seconds, 0) << what;
      EXPECT_GT(rg.comm_publish_seconds, 0) << what;
      // (CholeskyQR's second pass may run on one side only: its test is a rounding threshold.)
      EXPECT_NEAR(rg.dense_sums_per_iteration, rc.dense_sums_per_iteration, 1.0) << what;
    }
    for (const auto& h : rg.history) {
      const std::string at = what + " iteration " + std::to_string(h.iter);
      EXPECT_GT(h.ttmc, 0) << at;
      EXPECT_GT(h.svd, 0) << at;
      EXPECT_GT(h.svd_products, 0) << at;
      EXPECT_GT(h.svd_orth, 0) << at;
      EXPECT_GT(h.svd_core, 0) << at;
      if (svd == algo::SvdMethod::gram) {
        EXPECT_GT(h.svd_eig, 0) << at;
      }
      EXPECT_LE(h.ttmc + h.svd + h.comm, 1.01 * h.seconds + 5e-5) << at;
      if (world_->size() > 1) {
        EXPECT_GT(h.comm, 0) << at;  // rows, sums and factors exchanged
      }
      EXPECT_LE(h.svd_products + h.svd_eig + h.svd_orth + h.svd_core, 1.01 * h.svd + 5e-5) << at;
    }
  }
};

TEST_F(GpuTucker, GramDouble) {
  compare<double>(algo::SvdMethod::gram, 0, 1e-9);
}
TEST_F(GpuTucker, SubspaceDouble) {
  compare<double>(algo::SvdMethod::subspace, 0, 1e-9);
}
TEST_F(GpuTucker, GramFloat) {
  compare<float>(algo::SvdMethod::gram, 0, 2e-4);
}
TEST_F(GpuTucker, GramDoubleTier2) {
  compare<double>(algo::SvdMethod::gram, 2 * chunk_bytes<double>(3, kTileNnz) + 4096, 1e-9);
}

}  // namespace
}  // namespace tessera
