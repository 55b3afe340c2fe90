// Shared by the GPU tests (tests/gpu): relative errors against the reference backend,
// random inputs, NaN-poisoned backend buffers and the MTTKRP comparison, the chunk layout
// of tier 2, raw device buffers, whether every rank of the job has a GPU of its own, and
// the CP-ALS problem and comparison of the multi-rank tests. Header only; tolerances by
// value type come from tests/test_util.hpp (test::tol<T>()).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/generate.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/ops/mttkrp.hpp"
#include "test_util.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace tessera::test {

// ---- Errors and random inputs ----

/// ||got - want||_F / ||want||_F in double; +inf when got has a non-finite entry (an
/// element never written keeps its NaN poison). Absolute when want is zero.
template <typename A, typename B>
double rel_error(const std::vector<A>& got, const std::vector<B>& want) {
  EXPECT_EQ(got.size(), want.size());
  double d2 = 0, w2 = 0;
  for (std::size_t k = 0; k < got.size() && k < want.size(); ++k) {
    const double g = static_cast<double>(got[k]), w = static_cast<double>(want[k]);
    if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
    d2 += (g - w) * (g - w);
    w2 += w * w;
  }
  return w2 > 0 ? std::sqrt(d2 / w2) : std::sqrt(d2);
}

/// n values uniform in [lo, hi) from CounterRng(seed, 11).
template <typename T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  CounterRng rng(seed, 11);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(lo + (hi - lo) * rng.uniform());
  return v;
}

/// Uniform random coordinates, values uniform in [-1, 1); with `skew_mode` >= 0, 70% of
/// the nonzeros share index 0 of that mode: one slice spanning many tiles and chunks.
template <typename T>
SparseTensor<T> random_tensor(std::vector<std::uint64_t> dims, nnz_t nnz, std::uint64_t seed,
                              int skew_mode = -1) {
  SparseTensor<T> x(dims);
  x.reserve(static_cast<std::size_t>(nnz));
  CounterRng rng(seed, 7);
  std::vector<index_t> c(dims.size());
  for (nnz_t k = 0; k < nnz; ++k) {
    for (std::size_t m = 0; m < dims.size(); ++m)
      c[m] = static_cast<index_t>(rng.next_u64() % dims[m]);
    if (skew_mode >= 0 && rng.uniform() < 0.7) c[static_cast<std::size_t>(skew_mode)] = 0;
    x.push_back(c.data(), static_cast<T>(2.0 * rng.uniform() - 1.0));
  }
  return x;
}

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// ---- Layout of the CUDA backend (kernels/cuda/mttkrp/internal.cuh) ----

/// Nonzeros of one warp tile of the CUDA MTTKRP kernel.
constexpr std::size_t kTileNnz = 2048;

/// Device bytes of a chunk (or a sorted copy) of `cnt` nonzeros: order uint32 index
/// arrays padded to 256 bytes, then the values.
template <typename T>
std::size_t chunk_bytes(int order, std::size_t cnt) {
  return (static_cast<std::size_t>(order) * cnt * sizeof(index_t) + 255) / 256 * 256 +
         cnt * sizeof(T);
}

// ---- Backend buffers ----

/// A copy of h in memory of `be`.
template <typename T>
kernels::Array<T> uploaded(kernels::Backend<T>& be, const std::vector<T>& h) {
  kernels::Array<T> a = be.allocate(h.size());
  be.upload(h.data(), h.size(), a.data());
  return a;
}

/// n elements at p (memory of `be`) on the host.
template <typename T>
std::vector<T> downloaded(kernels::Backend<T>& be, const T* p, std::size_t n) {
  std::vector<T> h(n);
  be.download(p, n, h.data());
  return h;
}

/// n elements in memory of `be`, every one NaN (an element never written stays NaN).
template <typename T>
kernels::Array<T> poisoned(kernels::Backend<T>& be, std::size_t n) {
  kernels::Array<T> a = be.allocate(n);
  be.fill(a.data(), n, std::numeric_limits<T>::quiet_NaN());
  return a;
}

/// Factor matrices in memory of one backend, and their pointers by mode.
template <typename T>
struct Factors {
  std::vector<kernels::Array<T>> arrays;
  std::vector<const T*> ptrs;
};

/// Random factors: mode m is dims[m] x R, random_vector seeded seed * 131 + m.
template <typename T>
Factors<T> random_factors(kernels::Backend<T>& be, const std::vector<std::uint64_t>& dims, int R,
                          std::uint64_t seed) {
  Factors<T> f;
  for (std::size_t m = 0; m < dims.size(); ++m) {
    f.arrays.push_back(
        uploaded(be, random_vector<T>(static_cast<std::size_t>(dims[m]) * R, seed * 131 + m)));
    f.ptrs.push_back(f.arrays.back().data());
  }
  return f;
}

/// MTTKRP of `mode` at rank R on `be` (tensor prepared as `h`, factors `f`; the mode's own
/// factor is passed as nullptr, documented as not read) and on `ref` (`hr`, `fr`), both
/// outputs poisoned with NaN first. Returns {got, want} on the host.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> mttkrp_pair(kernels::Backend<T>& be,
                                                      const kernels::TensorHandle<T>& h,
                                                      const Factors<T>& f, kernels::Backend<T>& ref,
                                                      const kernels::TensorHandle<T>& hr,
                                                      const Factors<T>& fr, int mode, int R) {
  const std::size_t n = static_cast<std::size_t>(hr.dims()[static_cast<std::size_t>(mode)]) * R;
  auto og = poisoned(be, n);
  auto orf = poisoned(ref, n);
  std::vector<const T*> pgm = f.ptrs;
  pgm[static_cast<std::size_t>(mode)] = nullptr;
  kernels::ops::mttkrp(be, h, mode, pgm, R, og.data());
  kernels::ops::mttkrp(ref, hr, mode, fr.ptrs, R, orf.data());
  return {downloaded(be, og.data(), n), downloaded(ref, orf.data(), n)};
}

/// Fixture of the single-GPU tests of a backend against the reference backend: skips
/// (with a message) where no CUDA device is visible.
template <typename T>
class GpuVsReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
    ref_ = kernels::make_backend<T>(kernels::BackendKind::reference);
  }

  /// MTTKRP of every mode at rank R on `be` (tensor prepared as `h`) against the
  /// reference backend's prepare(x), random factors from `seed` (mttkrp_pair).
  void check_mttkrp(kernels::Backend<T>& be, const kernels::TensorHandle<T>& h,
                    const SparseTensor<T>& x, int R, std::uint64_t seed, const std::string& what) {
    const int N = x.order();
    const auto fg = random_factors(be, x.dims, R, seed);
    const auto fr = random_factors(*ref_, x.dims, R, seed);
    auto hr = ref_->prepare(x);
    for (int mode = 0; mode < N; ++mode) {
      const auto [got, want] = mttkrp_pair(be, h, fg, *ref_, *hr, fr, mode, R);
      EXPECT_LT(rel_error(got, want), tol<T>())
          << what << ": order " << N << " mode " << mode << " R " << R << " nnz " << x.nnz() << "; "
          << h.describe();
    }
  }

  std::unique_ptr<kernels::Backend<T>> ref_;
};

// ---- Raw device buffers ----

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device buffer of n elements of T.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& h) : n_(h.size()) {
    cuda_ok(cudaMalloc(&p_, std::max<std::size_t>(n_, 1) * sizeof(T)), "cudaMalloc");
    if (n_) cuda_ok(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  }
  ~DeviceVector() { cudaFree(p_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* data() { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    if (n_) cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
    return h;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// ---- A GPU per rank ----

inline int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// Empty when every rank has a GPU of its own, or may share one (TESSERA_SHARE_GPU=1, the
/// same answer on every rank), else why not.
inline std::string gpu_per_rank(const comm::MpiCommunicator& world) {
  const int n = visible_devices();
  const std::int32_t have = n > 0 ? 1 : 0;
  if (world.allreduce_value(have, comm::ReduceOp::min) == 0) return "no CUDA device visible";
  // Several ranks on one GPU run only when asked for (comm::share_gpu_requested).
  if (comm::share_gpu_requested()) return "";
  // The device make_nccl_communicator will pick; two ranks on one GPU cannot run.
  const int device = comm::local_rank(world) % n;
  char bus[64] = {0};
  std::uint64_t key[2] = {std::hash<std::string>{}(log::hostname()), 0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess)
    key[1] = std::hash<std::string>{}(bus);
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(world.size()));
  world.allgather(key, all.data(), 2);
  for (int a = 0; a < world.size(); ++a)
    for (int b = a + 1; b < world.size(); ++b)
      if (all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1])
        return "fewer GPUs than ranks on a host (" + std::to_string(world.size()) +
               " ranks need one GPU each, or TESSERA_SHARE_GPU=1)";
  return "";
}

/// True when ranks of this job share a GPU (TESSERA_SHARE_GPU=1, and some host has more ranks
/// than visible GPUs): results are those of one rank per GPU, times are not.
inline bool ranks_share_gpus(const comm::MpiCommunicator& world) {
  const std::int32_t over = comm::local_rank(world) >= visible_devices() ? 1 : 0;
  return comm::share_gpu_requested() && world.allreduce_value(over, comm::ReduceOp::max) > 0;
}

/// Fixture of the multi-rank GPU tests: the MPI world and an NCCL communicator over it,
/// made once per suite. Every rank skips together when the job lacks a GPU per rank; a
/// failed make_nccl_communicator (agreed across ranks) fails every test with its message.
class GpuJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    world_ = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD);
    skip_ = gpu_per_rank(*world_);
    if (!skip_.empty()) return;
    try {
      nccl_ = comm::make_nccl_communicator(*world_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    nccl_.reset();
    world_.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << "make_nccl_communicator failed: " << error_;
  }

  static int rank() { return world_->rank(); }
  static int size() { return world_->size(); }

  static inline std::unique_ptr<comm::MpiCommunicator> world_;
  static inline std::unique_ptr<comm::Communicator> nccl_;
  static inline std::string skip_, error_;
};

// ---- CP-ALS ----

/// The CP-ALS test problem: a sampled rank-5 tensor 300 x 200 x 250 of 60000 nonzeros with
/// power-law indices and noise 0.1 (generator seed `seed`), as T, distributed by the
/// grid scheme for the layer strategy and the nnz scheme otherwise.
template <typename T>
partition::Distributed<T> cp_problem(algo::CommStrategy s, std::uint64_t seed,
                                     const comm::Communicator& world) {
  algo::GenerateOptions o;
  o.dims = {300, 200, 250};
  o.nnz = 60000;
  o.rank = 5;
  o.noise = 0.1;
  o.structure = algo::Structure::sampled;
  o.dist = algo::IndexDist::powerlaw;
  o.seed = seed;
  auto g = algo::generate(o, world);
  const auto scheme =
      s == algo::CommStrategy::layer ? partition::Scheme::grid : partition::Scheme::nnz;
  return partition::distribute(g.block.template cast<T>(), scheme, {}, world);
}

/// Rank 12, 8 iterations, no convergence stop, quiet.
inline algo::CpOptions cp_test_options(algo::CommStrategy s) {
  algo::CpOptions opt;
  opt.rank = 12;
  opt.max_iters = 8;
  opt.tol = 0;
  opt.strategy = s;
  opt.print_iterations = false;
  return opt;
}

/// Same fit per iteration (within tol) and the same factors (relative Frobenius error of
/// every factor under 100 tol).
inline void expect_same_cp(const algo::CpResult& got, const algo::CpResult& want, double tol) {
  ASSERT_EQ(got.history.size(), want.history.size());
  for (std::size_t i = 0; i < got.history.size(); ++i)
    EXPECT_NEAR(got.history[i].fit, want.history[i].fit, tol) << "iteration " << i + 1;
  for (std::size_t n = 0; n < want.model.factors.size(); ++n) {
    double num = 0, den = 0;
    for (std::size_t k = 0; k < want.model.factors[n].data.size(); ++k) {
      const double e = got.model.factors[n].data[k] - want.model.factors[n].data[k];
      num += e * e;
      den += want.model.factors[n].data[k] * want.model.factors[n].data[k];
    }
    EXPECT_LT(std::sqrt(num / den), 100 * tol) << "mode " << n;
  }
}

}  // namespace tessera::test
