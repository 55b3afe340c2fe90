// Times the one-block Lanczos eigen-solver (kernels/cuda/dense/block_lanczos.cuh) beside the
// exact one-block solver (block_eig.cuh) on n x n matrices of known spectra, k = 16, and splits
// the Lanczos kernel's time by its clocks (issue 43, point 3; docs/perf/gpu-h200-tucker.md,
// session 43). Not part of the CMake build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. jobs/probes/lanczos_probe.cu -o lanczos_probe
//   lanczos_probe
// Matrices: Q diag(lambda) Q^T (Q a Householder reflector of a keyed random vector) with
// lambda_q = 1e3 r^q for r = 0.8 .. 0.98 and 1e3 / (1 + q)^p, and the Gram of a 12092 x n
// Gaussian matrix (a flat spectrum, as HOOI's first mode: declined). Per case: the median of
// 15 runs of the Lanczos kernel alone, of the exact kernel alone and of the pair as the
// library launches them, the answer (answered or declined), the steps, the checks, and
// thread 0's cycles per step, in the checks, V, the guard and the final orthonormalisation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/dense/block_eig.cuh"
#include "kernels/cuda/dense/block_lanczos.cuh"

#define CK(x)                                                                      \
  do {                                                                             \
    const int e_ = static_cast<int>(x);                                            \
    if (e_ != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

namespace {

namespace be = tessera::kernels::cuda::block_eig;

struct Case {
  std::string name;
  int n;
  std::vector<double> S;  // n x n, symmetric
};

Case spectral(const std::string& name, const std::vector<double>& lambda) {
  const int n = static_cast<int>(lambda.size());
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g;
  std::vector<double> u(n);
  double nn = 0;
  for (auto& x : u) {
    x = g(rng);
    nn += x * x;
  }
  double ul = 0;
  for (int q = 0; q < n; ++q) ul += u[q] * u[q] * lambda[q];
  Case c{name, n, std::vector<double>(static_cast<std::size_t>(n) * n)};
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)  // (I - 2 u u^T / nn) diag(lambda) (I - 2 u u^T / nn)
      c.S[static_cast<std::size_t>(i) * n + j] = (i == j ? lambda[i] : 0.0) -
                                                 2 * u[i] * u[j] * (lambda[i] + lambda[j]) / nn +
                                                 4 * u[i] * u[j] * ul / (nn * nn);
  return c;
}

Case gaussian_gram(int rows, int n) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g;
  std::vector<double> Y(static_cast<std::size_t>(rows) * n);
  for (auto& y : Y) y = g(rng);
  Case c{"Gaussian " + std::to_string(rows) + " x " + std::to_string(n) + " Gram", n,
         std::vector<double>(static_cast<std::size_t>(n) * n, 0.0)};
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) {
      const double yi = Y[static_cast<std::size_t>(r) * n + i];
      for (int j = 0; j <= i; ++j)
        c.S[static_cast<std::size_t>(i) * n + j] += yi * Y[static_cast<std::size_t>(r) * n + j];
    }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      c.S[static_cast<std::size_t>(i) * n + j] = c.S[static_cast<std::size_t>(j) * n + i];
  return c;
}

template <typename F>
float median_ms(F&& launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[7];
}

void run(const Case& c, int k) {
  const int n = c.n;
  double *dS, *dV, *dw;
  long long* dclk;
  CK(cudaMalloc(&dS, c.S.size() * 8));
  CK(cudaMalloc(&dV, static_cast<std::size_t>(n) * k * 8));
  CK(cudaMalloc(&dw, (k + 1) * 8));
  CK(cudaMalloc(&dclk, 8 * 8));
  CK(cudaMemcpy(dS, c.S.data(), c.S.size() * 8, cudaMemcpyHostToDevice));
  const float tl = median_ms([&] { CK(be::launch_lanczos_top(dS, n, k, dV, dw, nullptr, dclk)); });
  long long clk[8];
  double flag = 0;
  CK(cudaMemcpy(clk, dclk, sizeof clk, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&flag, dw + k, 8, cudaMemcpyDeviceToHost));
  const float te =
      median_ms([&] { CK(be::launch_top_eigenpairs<512>(dS, n, k, dV, dw, nullptr)); });
  const float tp = median_ms([&] {
    CK(be::launch_lanczos_top(dS, n, k, dV, dw, nullptr));
    CK(be::launch_top_eigenpairs<512>(dS, n, k, dV, dw, nullptr, nullptr, true));
  });
  const bool ok = flag == 0;
  const long long steps = clk[6], checks = clk[7];
  const double per_step = static_cast<double>(clk[1] - clk[0] - clk[5]) / std::max(1LL, steps);
  std::printf(
      "%-34s n %3d k %2d: lanczos %.3f ms (%s after %lld steps, %lld checks), exact %.3f ms, "
      "library pair %.3f ms; cycles: %.0f a step, %.0f a check",
      c.name.c_str(), n, k, tl, ok ? "answered" : "declined", steps, checks, te, tp, per_step,
      static_cast<double>(clk[5]) / std::max(1LL, checks));
  if (ok)
    std::printf(", V %lld, guard %lld, orthonormalisation %lld", clk[2] - clk[1], clk[3] - clk[2],
                clk[4] - clk[3]);
  std::printf("\n");
  CK(cudaFree(dS));
  CK(cudaFree(dV));
  CK(cudaFree(dw));
  CK(cudaFree(dclk));
}

}  // namespace

int main() {
  int dev = 0, optin = 0, clock_khz = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  std::printf("lanczos_probe: shared memory a block %d B (Lanczos needs %zu), SM clock %.0f MHz\n",
              optin, be::lanczos_smem_bytes(), clock_khz / 1e3);
  std::vector<Case> cases;
  for (int n : {256, 128}) {
    for (double r : {0.8, 0.9, 0.95, 0.98}) {
      std::vector<double> l(n);
      for (int q = 0; q < n; ++q) l[q] = 1e3 * std::pow(r, q);
      cases.push_back(spectral("decay " + std::to_string(r).substr(0, 4), l));
    }
    for (double p : {1.0, 0.5}) {
      std::vector<double> l(n);
      for (int q = 0; q < n; ++q) l[q] = 1e3 / std::pow(1.0 + q, p);
      cases.push_back(spectral("power law " + std::to_string(p).substr(0, 3), l));
    }
    cases.push_back(gaussian_gram(12092, n));
  }
  for (const auto& c : cases) run(c, 16);
  return 0;
}
