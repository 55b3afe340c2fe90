// The CUDA backend against the reference backend: every Backend operation on fresh random
// inputs, float and double, outputs poisoned with NaN before each run. Skips (with a
// message) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_backend_fixture.hpp"
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace tessera::kernels {
namespace {

using namespace ::tessera::test;

TYPED_TEST_SUITE(CudaBackendTest, ValueTypes);

TYPED_TEST(CudaBackendTest, Identity) {
  using T = TypeParam;
  EXPECT_EQ(this->gpu_->kind(), BackendKind::cuda);
  EXPECT_EQ(this->gpu_->memory_space(), MemorySpace::device);
  EXPECT_NE(this->gpu_->name().find("cuda"), std::string::npos);
  EXPECT_EQ(this->gpu_->allocate(0).size(), 0u);
  EXPECT_EQ(this->gpu_->allocate(5).size(), 5u);
  (void)sizeof(T);
}

TYPED_TEST(CudaBackendTest, MemoryOps) {
  using T = TypeParam;
  const std::size_t n = 100003;
  const auto h = random_vector<T>(n, 1);
  auto a = this->on_gpu(h);
  EXPECT_EQ(this->from_gpu(a.data(), n), h);

  auto b = this->poisoned_gpu(n);
  this->gpu_->copy(a.data(), n, b.data());
  EXPECT_EQ(this->from_gpu(b.data(), n), h);

  this->gpu_->fill(b.data() + 10, 20, T(3.5));
  auto got = this->from_gpu(b.data(), n);
  for (std::size_t k = 0; k < n; ++k) {
    const T want = (k >= 10 && k < 30) ? T(3.5) : h[k];
    ASSERT_EQ(got[k], want) << k;
  }
  this->gpu_->synchronize();
}

TYPED_TEST(CudaBackendTest, MttkrpOrdersAndRanks) {
  using T = TypeParam;
  struct Shape {
    std::vector<std::uint64_t> dims;
    nnz_t nnz;
  };
  const std::vector<Shape> shapes = {
      {{40, 30, 35}, 4000},
      {{12, 9, 15, 7}, 2500},
      {{8, 7, 6, 9, 5}, 2000},
      {{4, 3, 5, 4, 3, 4, 5, 3, 4}, 1500},
      {std::vector<std::uint64_t>(16, 3), 900},
  };
  std::uint64_t seed = 100;
  for (const auto& s : shapes) {
    const auto x = random_tensor<T>(s.dims, s.nnz, ++seed);
    for (int R : {7, 16, 32, 40}) this->mttkrp_all_modes(x, R, ++seed);
  }
}

TYPED_TEST(CudaBackendTest, MttkrpOrderOneAndTwo) {
  using T = TypeParam;
  this->mttkrp_all_modes(random_tensor<T>({50}, 700, 3), 7, 4);
  this->mttkrp_all_modes(random_tensor<T>({60, 45}, 3000, 5), 40, 6);
}

TYPED_TEST(CudaBackendTest, MttkrpSkewed) {
  using T = TypeParam;
  // One slice holds ~70% of 6000 nonzeros (~16 warp tiles); most of the 3000 slices of
  // the skewed mode are empty.
  for (int skew_mode : {0, 2}) {
    std::vector<std::uint64_t> dims = {50, 40, 30};
    dims[static_cast<std::size_t>(skew_mode)] = 3000;
    const auto x = random_tensor<T>(dims, 6000, 20 + skew_mode, skew_mode);
    for (int R : {7, 32, 40}) this->mttkrp_all_modes(x, R, 30 + R);
  }
}

/// Completion's row Grams (ops::row_grams) on the GPU (one pass over the R-wide rows for
/// R <= 32, the pattern's MTTKRP above) against the reference (the pattern's MTTKRP with the
/// packed outer products; the values weigh the terms), every mode, outputs poisoned.
template <typename T>
void expect_row_grams_match(Backend<T>& gpu, Backend<T>& ref, const SparseTensor<T>& x, int R,
                            std::uint64_t seed) {
  const int N = x.order();
  const std::size_t W = static_cast<std::size_t>(R) * (R + 1) / 2;
  auto hg = gpu.prepare(x);
  auto hr = ref.prepare(x);
  const auto fg = random_factors(gpu, x.dims, R, seed);
  const auto fr = random_factors(ref, x.dims, R, seed);
  auto packed = [&](Backend<T>& be, const Factors<T>& f, std::vector<Array<T>>& keep) {
    std::vector<const T*> ptrs;
    for (int m = 0; m < N; ++m) {
      const auto rows = static_cast<std::int64_t>(x.dims[static_cast<std::size_t>(m)]);
      keep.push_back(be.allocate(static_cast<std::size_t>(rows) * W));
      ops::pack_outer(be, f.ptrs[static_cast<std::size_t>(m)], rows, R, keep.back().data());
      ptrs.push_back(keep.back().data());
    }
    return ptrs;
  };
  std::vector<Array<T>> kg, kr;
  const auto pg = packed(gpu, fg, kg);
  const auto pr = packed(ref, fr, kr);
  for (int mode = 0; mode < N; ++mode) {
    const std::size_t n = static_cast<std::size_t>(x.dims[static_cast<std::size_t>(mode)]) * W;
    auto og = poisoned(gpu, n);
    auto orf = poisoned(ref, n);
    ops::row_grams(gpu, *hg, mode, fg.ptrs, pg, R, og.data());
    ops::row_grams(ref, *hr, mode, fr.ptrs, pr, R, orf.data());
    const auto got = downloaded(gpu, og.data(), n);
    const auto want = downloaded(ref, orf.data(), n);
    EXPECT_LT(rel_error(got, want), tol<T>())
        << "order " << N << " mode " << mode << " R " << R << " nnz " << x.nnz();
  }
}

TYPED_TEST(CudaBackendTest, RowGramsMatchThePatternMttkrp) {
  using T = TypeParam;
  std::uint64_t seed = 700;
  // Small (one batch per warp), medium (whole tiles, rows across tiles), orders 3-16.
  const auto x3 = random_tensor<T>({40, 30, 35}, 4000, ++seed);
  const auto big = random_tensor<T>({300, 200, 50}, 400000, ++seed);
  const auto x4 = random_tensor<T>({12, 9, 15, 7}, 2500, ++seed);
  const auto x9 = random_tensor<T>({4, 3, 5, 4, 3, 4, 5, 3, 4}, 1500, ++seed);
  const auto x16 = random_tensor<T>(std::vector<std::uint64_t>(16, 3), 900, ++seed);
  for (int R : {1, 5, 8, 13, 16, 32, 40}) {
    expect_row_grams_match(*this->gpu_, *this->ref_, x3, R, ++seed);
    expect_row_grams_match(*this->gpu_, *this->ref_, x4, R, ++seed);
  }
  for (int R : {16, 32}) expect_row_grams_match(*this->gpu_, *this->ref_, big, R, ++seed);
  expect_row_grams_match(*this->gpu_, *this->ref_, x9, 32, ++seed);
  expect_row_grams_match(*this->gpu_, *this->ref_, x16, 7, ++seed);
  // One slice holding ~70% of the nonzeros (a row across many tiles); most slices empty.
  const auto skew = random_tensor<T>({3000, 40, 30}, 60000, ++seed, 0);
  expect_row_grams_match(*this->gpu_, *this->ref_, skew, 32, ++seed);
  // Patterns (every value 1, as completion passes): the tensor-core kernel reuses one
  // operand for both (kUnit); R 5 keeps the general path.
  auto ones = [](SparseTensor<T> p) {
    std::fill(p.vals.begin(), p.vals.end(), T(1));
    return p;
  };
  for (int R : {5, 13, 16, 32}) {
    expect_row_grams_match(*this->gpu_, *this->ref_, ones(x3), R, ++seed);
    expect_row_grams_match(*this->gpu_, *this->ref_, ones(x4), R, ++seed);
  }
  for (int R : {16, 32}) expect_row_grams_match(*this->gpu_, *this->ref_, ones(big), R, ++seed);
  expect_row_grams_match(*this->gpu_, *this->ref_, ones(skew), 32, ++seed);
  // Float runs the tensor-core kernel (3xTF32); --tensor-cores off the CUDA-core one.
  Tuning t;
  t.tensor_cores = TensorCores::off;
  auto classic = make_backend<T>(BackendKind::cuda, 0, t);
  for (int R : {5, 16, 32}) expect_row_grams_match(*classic, *this->ref_, big, R, ++seed);
  expect_row_grams_match(*classic, *this->ref_, skew, 32, ++seed);
}

/// Completion's fused pass (ops::completion_rows: the MTTKRP of the values and the pattern's
/// row Grams at once) against the reference's, every mode, outputs poisoned; the copy is
/// prepared as completion prepares it (rows whole: Workload::ttmc), resident and in tier-2
/// chunks. The cuda backend fuses in float with tensor cores at R <= 32 only.
template <typename T>
void expect_completion_rows_match(Backend<T>& gpu, Backend<T>& ref, const SparseTensor<T>& x, int R,
                                  std::uint64_t seed, bool tier2 = false) {
  const int N = x.order();
  const std::size_t W = static_cast<std::size_t>(R) * (R + 1) / 2;
  gpu.set_workload(Workload::ttmc);
  auto hg = gpu.prepare(x);
  const std::size_t budget = tier2 ? hg->bytes() / 4 : 0;  // four chunks or more a mode
  if (tier2) {
    gpu.set_memory_budget(budget);
    hg = gpu.prepare(x);
    gpu.set_memory_budget(0);
  }
  gpu.set_workload(Workload::mttkrp);
  ASSERT_EQ(hg->tier(), tier2 ? 2 : 1);
  auto hr = ref.prepare(x);
  const auto fg = random_factors(gpu, x.dims, R, seed);
  const auto fr = random_factors(ref, x.dims, R, seed);
  for (int mode = 0; mode < N; ++mode) {
    const auto rows = static_cast<std::size_t>(x.dims[static_cast<std::size_t>(mode)]);
    auto mg = poisoned(gpu, rows * R), gg = poisoned(gpu, rows * W);
    auto mr = poisoned(ref, rows * R), gr = poisoned(ref, rows * W);
    ops::completion_rows(gpu, *hg, mode, fg.ptrs, R, mg.data(), gg.data());
    ops::completion_rows(ref, *hr, mode, fr.ptrs, R, mr.data(), gr.data());
    const std::string what = "order " + std::to_string(N) + " mode " + std::to_string(mode) +
                             " R " + std::to_string(R) + " nnz " + std::to_string(x.nnz()) +
                             " budget " + std::to_string(budget);
    EXPECT_LT(rel_error(downloaded(gpu, mg.data(), rows * R), downloaded(ref, mr.data(), rows * R)),
              tol<T>())
        << "MTTKRP, " << what;
    EXPECT_LT(rel_error(downloaded(gpu, gg.data(), rows * W), downloaded(ref, gr.data(), rows * W)),
              tol<T>())
        << "Grams, " << what;
  }
}

TYPED_TEST(CudaBackendTest, CompletionRowsMatchTheReference) {
  using T = TypeParam;
  Backend<T>& gpu = *this->gpu_;
  EXPECT_EQ(ops::fuses_completion(gpu, 16), (std::is_same_v<T, float>));
  EXPECT_FALSE(ops::fuses_completion(gpu, 33));
  Tuning off;
  off.tensor_cores = TensorCores::off;
  EXPECT_FALSE(ops::fuses_completion(*make_backend<T>(BackendKind::cuda, 0, off), 16));
  if (!std::is_same_v<T, float>) return;  // completion keeps the pattern's copy in double
  std::uint64_t seed = 900;
  const auto x3 = random_tensor<T>({40, 30, 35}, 4000, ++seed);
  const auto x4 = random_tensor<T>({12, 9, 15, 7}, 2500, ++seed);
  const auto big = random_tensor<T>({300, 200, 50}, 400000, ++seed);
  const auto skew = random_tensor<T>({3000, 40, 30}, 60000, ++seed, 0);
  for (int R : {1, 5, 8, 13, 16, 24, 32}) {
    expect_completion_rows_match(gpu, *this->ref_, x3, R, ++seed);
    expect_completion_rows_match(gpu, *this->ref_, x4, R, ++seed);
  }
  for (int R : {16, 32}) expect_completion_rows_match(gpu, *this->ref_, big, R, ++seed);
  expect_completion_rows_match(gpu, *this->ref_, skew, 16, ++seed);
  // Tier 2: the copies streamed in chunks (the large slice cut between chunks).
  expect_completion_rows_match(gpu, *this->ref_, skew, 16, ++seed, true);
}

/// --gather-precision fp16 | bf16 (the blocked kernel reads 16-bit copies of the input
/// factors): every mode against the reference backend (products and sums in double), orders
/// 3-6, plain and l2 layouts, tier 2; the error is that of the 16-bit rows (above float's,
/// below the bound) and describe() names the gathers. Double runs gather in double.
TYPED_TEST(CudaBackendTest, ReducedGathers) {
  using T = TypeParam;
  std::uint64_t seed = 1300;
  const auto x3 = random_tensor<T>({300, 200, 50}, 200000, ++seed);
  const auto x4 = random_tensor<T>({40, 30, 35, 20}, 30000, ++seed);
  const auto x6 = random_tensor<T>({9, 8, 7, 6, 8, 9}, 20000, ++seed);
  const auto skew = random_tensor<T>({3000, 40, 30}, 60000, ++seed, 0);
  for (const auto& [gp, bound] :
       {std::pair{GatherPrecision::fp16, 2e-3}, std::pair{GatherPrecision::bf16, 2e-2}}) {
    for (const char* layout : {"plain", "l2"}) {
      Tuning t;
      t.gather_precision = gp;
      t.cuda_layout = parse_named<CudaLayout>(layout, "--cuda-layout");
      auto gpu = make_backend<T>(BackendKind::cuda, 0, t);
      for (const auto* x : {&x3, &x4, &x6, &skew}) {
        for (int R : {4, 16, 32, 128}) {
          auto hg = gpu->prepare(*x);
          auto hr = this->ref_->prepare(*x);
          const auto fg = random_factors(*gpu, x->dims, R, ++seed);
          const auto fr = random_factors(*this->ref_, x->dims, R, seed);
          for (int mode = 0; mode < x->order(); ++mode) {
            const auto n = static_cast<std::size_t>(x->dims[static_cast<std::size_t>(mode)]) * R;
            auto og = poisoned(*gpu, n);
            auto orf = poisoned(*this->ref_, n);
            ops::mttkrp(*gpu, *hg, mode, fg.ptrs, R, og.data());
            ops::mttkrp(*this->ref_, *hr, mode, fr.ptrs, R, orf.data());
            const double e =
                rel_error(downloaded(*gpu, og.data(), n), downloaded(*this->ref_, orf.data(), n));
            const std::string what = std::string(name_of(gp)) + " " + layout + " order " +
                                     std::to_string(x->order()) + " mode " + std::to_string(mode) +
                                     " R " + std::to_string(R) + ": " + hg->describe();
            if (std::is_same_v<T, float>) {
              EXPECT_LT(e, bound) << what;
              EXPECT_GT(e, 1e-5) << "no 16-bit rounding seen: " << what;
              EXPECT_NE(hg->describe().find(std::string(name_of(gp)) + " gathers"),
                        std::string::npos)
                  << what;
              if (R == 32 && mode == 0)
                std::printf("ReducedGathers: %s, %s layout, order %d, R 32, mode 0: %.3g\n",
                            std::string(name_of(gp)).c_str(), layout, x->order(), e);
            } else {
              EXPECT_LT(e, tol<T>()) << what;
            }
          }
        }
      }
    }
  }
  if (!std::is_same_v<T, float>) return;
  // Tier 2: the copies streamed in chunks, 16-bit gathers in every chunk.
  Tuning t;
  t.gather_precision = GatherPrecision::fp16;
  auto gpu = make_backend<T>(BackendKind::cuda, 0, t);
  gpu->set_memory_budget(gpu->prepare(skew)->bytes() / 4);
  auto hg = gpu->prepare(skew);
  ASSERT_EQ(hg->tier(), 2);
  auto hr = this->ref_->prepare(skew);
  const auto fg = random_factors(*gpu, skew.dims, 32, ++seed);
  const auto fr = random_factors(*this->ref_, skew.dims, 32, seed);
  for (int mode = 0; mode < 3; ++mode) {
    const auto n = static_cast<std::size_t>(skew.dims[static_cast<std::size_t>(mode)]) * 32;
    auto og = poisoned(*gpu, n);
    auto orf = poisoned(*this->ref_, n);
    ops::mttkrp(*gpu, *hg, mode, fg.ptrs, 32, og.data());
    ops::mttkrp(*this->ref_, *hr, mode, fr.ptrs, 32, orf.data());
    const double e =
        rel_error(downloaded(*gpu, og.data(), n), downloaded(*this->ref_, orf.data(), n));
    EXPECT_LT(e, 2e-3) << "tier 2, mode " << mode;
    EXPECT_GT(e, 1e-5) << "tier 2, mode " << mode;
  }
}

/// The MTTKRP in row pieces (ops::mttkrp_row_ranges, ops::mttkrp_rows; the multi-GPU loop's
/// overlap): each piece's rows equal the whole MTTKRP's, no row outside the piece is
/// written (NaN stays), the ranges' counts are the reference backend's. The plain layout
/// computes pieces by themselves (ranges starting off the 16-byte grid, an empty range, a
/// row of its own, R a multiple of 4 and not); the l2 layout and tier 2 compute them whole.
TYPED_TEST(CudaBackendTest, MttkrpRowPieces) {
  using T = TypeParam;
  std::uint64_t seed = 1400;
  const auto skew = random_tensor<T>({3000, 40, 30}, 60000, ++seed, 0);
  const auto x4 = random_tensor<T>({40, 30, 35, 20}, 30000, ++seed);
  for (const char* layout : {"plain", "l2", "tier 2"}) {
    Tuning t;
    t.tensor_cores = TensorCores::off;
    t.cuda_layout =
        parse_named<CudaLayout>(std::string(layout) == "l2" ? "l2" : "plain", "--cuda-layout");
    auto gpu = make_backend<T>(BackendKind::cuda, 0, t);
    for (const auto* x : {&skew, &x4}) {
      if (std::string(layout) == "tier 2") gpu->set_memory_budget(gpu->prepare(*x)->bytes() / 4);
      auto hg = gpu->prepare(*x);
      auto hr = this->ref_->prepare(*x);
      ASSERT_EQ(hg->tier(), std::string(layout) == "tier 2" ? 2 : 1);
      for (int R : {16, 7}) {
        const auto fg = random_factors(*gpu, x->dims, R, ++seed);
        for (int mode = 0; mode < x->order(); ++mode) {
          SCOPED_TRACE(std::string(layout) + " order " + std::to_string(x->order()) + " mode " +
                       std::to_string(mode) + " R " + std::to_string(R));
          const auto len = static_cast<std::int64_t>(x->dims[static_cast<std::size_t>(mode)]);
          const std::vector<std::int64_t> bounds{
              0, 1, 7, 7 + len / 4, 7 + len / 4, len / 2 + 8, len / 2 + 9, len};  // len >= 20
          const RowRanges rg = ops::mttkrp_row_ranges(*gpu, *hg, mode, bounds);
          const RowRanges rr = ops::mttkrp_row_ranges(*this->ref_, *hr, mode, bounds);
          EXPECT_EQ(rg.nnz, rr.nnz);
          nnz_t total = 0;
          for (nnz_t c : rg.nnz) total += c;
          EXPECT_EQ(total, x->nnz());
          EXPECT_EQ(rg.pieces, std::string(layout) == "plain");
          EXPECT_FALSE(rr.pieces);
          const auto n = static_cast<std::size_t>(len) * static_cast<std::size_t>(R);
          auto whole = poisoned(*gpu, n);
          ops::mttkrp(*gpu, *hg, mode, fg.ptrs, R, whole.data());
          const auto want = downloaded(*gpu, whole.data(), n);
          for (std::size_t j = 0; j + 1 < bounds.size(); ++j) {
            auto out = poisoned(*gpu, n);
            ops::mttkrp_rows(*gpu, *hg, mode, fg.ptrs, R, out.data(), bounds[j], bounds[j + 1]);
            // Which path ran: the piece alone (plain; empty ranges and ranges after them
            // included) or the whole MTTKRP (l2, tier 2).
            EXPECT_EQ(hg->describe().find("row pieces") != std::string::npos,
                      std::string(layout) == "plain")
                << "piece " << j << ": " << hg->describe();
            const auto got = downloaded(*gpu, out.data(), n);
            // Inside: the whole MTTKRP's rows (norm-wise: the atomics add in another order);
            // outside: untouched.
            std::vector<T> in_got, in_want;
            for (std::int64_t i = 0; i < len; ++i) {
              const bool inside = i >= bounds[j] && i < bounds[j + 1];
              for (int r = 0; r < R; ++r) {
                const auto k = static_cast<std::size_t>(i) * static_cast<std::size_t>(R) +
                               static_cast<std::size_t>(r);
                if (inside) {
                  in_got.push_back(got[k]);
                  in_want.push_back(want[k]);
                } else {
                  ASSERT_TRUE(std::isnan(got[k])) << "piece " << j << " wrote row " << i;
                }
              }
            }
            if (!in_want.empty()) {
              EXPECT_LT(rel_error(in_got, in_want), tol<T>()) << "piece " << j;
            }
          }
        }
      }
    }
  }
}

TYPED_TEST(CudaBackendTest, MttkrpEmptyAndSingle) {
  using T = TypeParam;
  const auto empty = random_tensor<T>({17, 5, 9}, 0, 1);
  auto he = this->gpu_->prepare(empty);
  EXPECT_EQ(he->nnz(), 0);
  EXPECT_EQ(he->mttkrp_stream_bytes(0), 0u);
  for (int R : {7, 40}) {
    std::vector<Array<T>> f;
    std::vector<const T*> p;
    for (auto d : empty.dims) {
      f.push_back(this->on_gpu(random_vector<T>(static_cast<std::size_t>(d) * R, d)));
      p.push_back(f.back().data());
    }
    for (int mode = 0; mode < 3; ++mode) {
      const std::size_t n = static_cast<std::size_t>(empty.dims[mode]) * R;
      auto out = this->poisoned_gpu(n);
      ops::mttkrp(*this->gpu_, *he, mode, p, R, out.data());
      for (T v : this->from_gpu(out.data(), n)) ASSERT_EQ(v, T(0));
    }
  }
  const auto one = random_tensor<T>({17, 5, 9}, 1, 2);
  for (int R : {7, 16, 32, 40}) this->mttkrp_all_modes(one, R, 50 + R);
}

TYPED_TEST(CudaBackendTest, TensorHandleBytes) {
  using T = TypeParam;
  const auto x = random_tensor<T>({20, 30, 40, 50}, 1234, 9);
  auto h = this->gpu_->prepare(x);
  const std::size_t per_mode = (4 * sizeof(index_t) + sizeof(T)) * 1234;
  for (int m = 0; m < 4; ++m) EXPECT_EQ(h->mttkrp_stream_bytes(m), per_mode);
  EXPECT_GE(h->bytes(), 4 * per_mode);          // one sorted copy per mode
  EXPECT_LT(h->bytes(), 4 * (per_mode + 256));  // plus alignment padding only
}

TYPED_TEST(CudaBackendTest, MttkrpRejectsBadInput) {
  using T = TypeParam;
  auto x = random_tensor<T>({10, 10, 10}, 50, 1);
  x.idx[1][7] = 10;  // out of range
  EXPECT_THROW(this->gpu_->prepare(x), Error);

  const auto good = random_tensor<T>({10, 10, 10}, 50, 2);
  auto hr = this->ref_->prepare(good);
  auto out = this->poisoned_gpu(10 * 7);
  std::vector<const T*> p(3, out.data());
  EXPECT_THROW(ops::mttkrp(*this->gpu_, *hr, 0, p, 7, out.data()), Error);  // foreign handle
  auto hg = this->gpu_->prepare(good);
  EXPECT_THROW(ops::mttkrp(*this->gpu_, *hg, 3, p, 7, out.data()), Error);  // no such mode
  EXPECT_THROW(
      ops::mttkrp(*this->gpu_, *hg, 0, std::vector<const T*>(2, out.data()), 7, out.data()), Error);
}

TYPED_TEST(CudaBackendTest, Gram) {
  using T = TypeParam;
  std::uint64_t seed = 500;
  for (std::int64_t rows : {0, 1, 1000, 300000}) {
    for (int R : {7, 16, 32, 40}) {
      if (rows == 300000 && R != 7 && R != 40) continue;
      const auto h = random_vector<T>(static_cast<std::size_t>(rows) * R, ++seed);
      auto ag = this->on_gpu(h);
      auto ar = this->on_ref(h);
      const std::size_t n = static_cast<std::size_t>(R) * R;
      auto gg = this->poisoned_gpu(n);
      auto gr = this->poisoned_ref(n);
      ops::gram(*this->gpu_, ag.data(), rows, R, gg.data());
      ops::gram(*this->ref_, ar.data(), rows, R, gr.data());
      const auto got = this->from_gpu(gg.data(), n);
      EXPECT_LT(rel_error(got, this->from_ref(gr.data(), n)), tol<T>())
          << "rows " << rows << " R " << R;
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < R; ++j) ASSERT_EQ(got[i * R + j], got[j * R + i]) << "not symmetric";
    }
  }
}

TYPED_TEST(CudaBackendTest, Hadamard) {
  using T = TypeParam;
  for (int R : {7, 16, 32, 40}) {
    const std::size_t n = static_cast<std::size_t>(R) * R;
    for (int count : {1, 2, 3, 17}) {
      std::vector<Array<T>> g, r;
      std::vector<const T*> pg, pr;
      for (int k = 0; k < count; ++k) {
        // Entries near 1 in magnitude so a product of 17 stays representable.
        const auto h = random_vector<T>(n, 1000 + 31 * R + k, 0.8, 1.25);
        g.push_back(this->on_gpu(h));
        r.push_back(this->on_ref(h));
        pg.push_back(g.back().data());
        pr.push_back(r.back().data());
      }
      auto vg = this->poisoned_gpu(n);
      auto vr = this->poisoned_ref(n);
      ops::hadamard(*this->gpu_, pg, R, vg.data());
      ops::hadamard(*this->ref_, pr, R, vr.data());
      const auto want = this->from_ref(vr.data(), n);
      EXPECT_LT(rel_error(this->from_gpu(vg.data(), n), want), tol<T>())
          << "R " << R << " count " << count;
      // In place: the output is also the first input.
      ops::hadamard(*this->gpu_, pg, R, g[0].data());
      EXPECT_LT(rel_error(this->from_gpu(g[0].data(), n), want), tol<T>());
    }
  }
}

/// Symmetric positive definite R x R: B^T B / m + I with B (3R x R) random.
template <typename T>
std::vector<T> spd_matrix(int R, std::uint64_t seed, int zero_column = -1,
                          int duplicate_column = -1) {
  const int m = 3 * R;
  auto B = random_vector<double>(static_cast<std::size_t>(m) * R, seed);
  for (int i = 0; i < m; ++i) {
    if (zero_column >= 0) B[i * R + zero_column] = 0;
    if (duplicate_column >= 0) B[i * R + duplicate_column] = B[i * R + (duplicate_column + 1) % R];
  }
  const bool singular = zero_column >= 0 || duplicate_column >= 0;
  std::vector<T> V(static_cast<std::size_t>(R) * R);
  for (int p = 0; p < R; ++p)
    for (int q = 0; q < R; ++q) {
      double s = 0;
      for (int i = 0; i < m; ++i) s += B[i * R + p] * B[i * R + q];
      s /= m;
      if (!singular && p == q) s += 1.0;
      V[p * R + q] = static_cast<T>(s);
    }
  // Exactly symmetric after rounding to T.
  for (int p = 0; p < R; ++p)
    for (int q = 0; q < p; ++q) V[p * R + q] = V[q * R + p];
  return V;
}

TYPED_TEST(CudaBackendTest, SolveNormalSpd) {
  using T = TypeParam;
  std::uint64_t seed = 700;
  for (int R : {7, 16, 32, 40}) {
    // 30000 rows at R = 40 take several row chunks of the device solve.
    for (std::int64_t rows : {0, 1, 1000, 30000}) {
      const auto V = spd_matrix<T>(R, ++seed);
      const auto M = random_vector<T>(static_cast<std::size_t>(rows) * R, ++seed);
      auto vg = this->on_gpu(V);
      auto vr = this->on_ref(V);
      auto mg = this->on_gpu(M);
      auto mr = this->on_ref(M);
      EXPECT_FALSE(ops::solve_normal(*this->gpu_, mg.data(), rows, vg.data(), R));
      EXPECT_FALSE(ops::solve_normal(*this->ref_, mr.data(), rows, vr.data(), R));
      const std::size_t n = M.size();
      EXPECT_LT(rel_error(this->from_gpu(mg.data(), n), this->from_ref(mr.data(), n)), tol<T>())
          << "R " << R << " rows " << rows;
    }
  }
}

TYPED_TEST(CudaBackendTest, SolveNormalSingular) {
  using T = TypeParam;
  const std::int64_t rows = 500;
  for (int R : {7, 16, 32, 40}) {
    // A zero row and column: exactly singular, Cholesky fails on both backends.
    const auto V = spd_matrix<T>(R, 800 + R, /*zero_column=*/R / 2);
    const auto M = random_vector<T>(static_cast<std::size_t>(rows) * R, 900 + R);
    auto vg = this->on_gpu(V);
    auto vr = this->on_ref(V);
    auto mg = this->on_gpu(M);
    auto mr = this->on_ref(M);
    EXPECT_TRUE(ops::solve_normal(*this->gpu_, mg.data(), rows, vg.data(), R));
    EXPECT_TRUE(ops::solve_normal(*this->ref_, mr.data(), rows, vr.data(), R));
    const auto got = this->from_gpu(mg.data(), M.size());
    EXPECT_LT(rel_error(got, this->from_ref(mr.data(), M.size())), tol<T>()) << "R " << R;
    // The null direction is dropped: that column is zero up to the eigensolver's rounding.
    for (std::int64_t i = 0; i < rows; ++i)
      ASSERT_LE(std::abs(static_cast<double>(got[i * R + R / 2])), tol<T>());
  }
}

TYPED_TEST(CudaBackendTest, SolveNormalRankDeficient) {
  using T = TypeParam;
  // Two equal columns of B: V has a null vector but no zero row. For M = Y V (rows in
  // the range of V) the pseudo-inverse solution X satisfies X V = M.
  const std::int64_t rows = 300;
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (int R : {7, 16, 32, 40}) {
    const auto V = spd_matrix<T>(R, 1100 + R, -1, /*duplicate_column=*/1);
    const auto Y = random_vector<double>(static_cast<std::size_t>(rows) * R, 1200 + R);
    std::vector<T> M(Y.size());
    std::vector<double> Md(Y.size());
    for (std::int64_t i = 0; i < rows; ++i)
      for (int q = 0; q < R; ++q) {
        double s = 0;
        for (int p = 0; p < R; ++p) s += Y[i * R + p] * static_cast<double>(V[p * R + q]);
        M[i * R + q] = static_cast<T>(s);
        Md[i * R + q] = static_cast<double>(M[i * R + q]);
      }
    auto vg = this->on_gpu(V);
    auto mg = this->on_gpu(M);
    EXPECT_TRUE(ops::solve_normal(*this->gpu_, mg.data(), rows, vg.data(), R)) << "R " << R;
    const auto X = this->from_gpu(mg.data(), M.size());
    std::vector<double> XV(M.size());
    for (std::int64_t i = 0; i < rows; ++i)
      for (int q = 0; q < R; ++q) {
        double s = 0;
        for (int p = 0; p < R; ++p)
          s += static_cast<double>(X[i * R + p]) * static_cast<double>(V[p * R + q]);
        XV[i * R + q] = s;
      }
    EXPECT_LT(rel_error(XV, Md), tol) << "R " << R;
  }
}

TYPED_TEST(CudaBackendTest, SolveNormalZeroMatrix) {
  using T = TypeParam;
  for (int R : {7, 40}) {
    const std::int64_t rows = 100;
    auto vg = this->on_gpu(std::vector<T>(static_cast<std::size_t>(R) * R, T(0)));
    auto mg = this->on_gpu(random_vector<T>(static_cast<std::size_t>(rows) * R, 77));
    EXPECT_TRUE(ops::solve_normal(*this->gpu_, mg.data(), rows, vg.data(), R));
    for (T v : this->from_gpu(mg.data(), static_cast<std::size_t>(rows) * R)) ASSERT_EQ(v, T(0));
  }
}

TYPED_TEST(CudaBackendTest, ColumnReductionsAndScaling) {
  using T = TypeParam;
  std::uint64_t seed = 1300;
  for (std::int64_t rows : {0, 1, 1000, 100000}) {
    for (int R : {7, 16, 32, 40}) {
      const std::size_t n = static_cast<std::size_t>(rows) * R;
      const auto A = random_vector<T>(n, ++seed);
      const auto B = random_vector<T>(n, ++seed);
      auto ag = this->on_gpu(A), bg = this->on_gpu(B);
      auto ar = this->on_ref(A), br = this->on_ref(B);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      for (NormKind kind : {NormKind::two, NormKind::max}) {
        std::vector<double> got(R, nan), want(R, nan);
        ops::column_norms(*this->gpu_, ag.data(), rows, R, kind, got.data());
        ops::column_norms(*this->ref_, ar.data(), rows, R, kind, want.data());
        EXPECT_LT(rel_error(got, want), 1e-12)
            << "rows " << rows << " R " << R << (kind == NormKind::two ? " two" : " max");
      }
      std::vector<double> got(R, nan), want(R, nan);
      ops::column_dots(*this->gpu_, ag.data(), bg.data(), rows, R, got.data());
      ops::column_dots(*this->ref_, ar.data(), br.data(), rows, R, want.data());
      EXPECT_LT(rel_error(got, want), 1e-12) << "dots rows " << rows << " R " << R;

      std::vector<double> scale(R);
      for (int r = 0; r < R; ++r) scale[r] = 0.25 + 0.5 * r;
      ops::scale_columns(*this->gpu_, ag.data(), rows, R, scale.data());
      ops::scale_columns(*this->ref_, ar.data(), rows, R, scale.data());
      scale.assign(R, nan);  // the device copy must not depend on the host array later
      EXPECT_LT(rel_error(this->from_gpu(ag.data(), n), this->from_ref(ar.data(), n)), tol<T>())
          << "scale rows " << rows << " R " << R;
    }
  }
}

TEST(CudaBackendFactory, AvailabilityIsConsistent) {
  EXPECT_TRUE(cuda_device_available() == (parse_backend("auto") == BackendKind::cuda));
  if (cuda_device_available()) {
    EXPECT_NO_THROW(make_backend<float>(BackendKind::cuda));
  } else {
    // Without a device the factory explains instead of crashing.
    EXPECT_THROW(make_backend<double>(BackendKind::cuda), Error);
  }
}

}  // namespace
}  // namespace tessera::kernels
