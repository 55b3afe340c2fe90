// Times cuSOLVER's symmetric eigen-solvers on one n x n Gram matrix, the size of Tucker's
// factor-update eigen-solve (C = product of the other modes' ranks; issue 43, point 3), to
// choose the solver by measured time. Not part of the CMake build: `jobs/gpu-node.sh eig`
// compiles it with nvcc and runs it. Prints, per n and solver, the median milliseconds of 15 solves
// (each on a fresh copy of S, synchronised, the info word read back) and the largest relative
// difference of the top k eigenvalues from syevdx's, so a fast solver that is wrong shows.
// Also: syevdx and syevd captured into a CUDA graph (cuSOLVER refuses), and the one-cluster
// tridiagonal reduction of jobs/probes/eig_cluster.cuh at cluster sizes 4, 8 and 16 with its
// back-transformation (session 23's experiment). And LAPACK's dsyevr (range I, top k) on the
// host with the round trip the library would make (S down, the k vectors up), against the
// same cuSOLVER call (session 27; linked with -llapack, so OPENBLAS_NUM_THREADS applies where
// liblapack.so.3 is OpenBLAS's). And Ssyevdx, the same solve in single precision on S rounded
// to float (session 33), its top k against the double solve's. And the library's one-block
// solver (kernels/cuda/dense/block_eig.cuh, session 34; n <= 256, k <= 16) with 512 and 1024
// threads, with its residual max |S v - w v| / |w_1|, orthogonality max |V^T V - I| and the
// split of its cycles by phase. With `block`, only Dsyevdx (the reference) and the one-block
// solver run: `jobs/gpu-node.sh eig` with TESSERA_BASE_TAR also builds this file against that
// commit's block_eig*.cuh and runs it so, for a before/after in one call.
//   eig_probe [k [block]]     (default k = 16)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "jobs/probes/eig_cluster.cuh"
#include "kernels/cuda/dense/block_eig.cuh"

#define CK(x)                                                                      \
  do {                                                                             \
    const int e_ = static_cast<int>(x);                                            \
    if (e_ != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

extern "C" void dsyevr_(const char* jobz, const char* range, const char* uplo, const int* n,
                        double* a, const int* lda, const double* vl, const double* vu,
                        const int* il, const int* iu, const double* abstol, int* m, double* w,
                        double* z, const int* ldz, int* isuppz, double* work, const int* lwork,
                        int* iwork, const int* liwork, int* info, std::size_t, std::size_t,
                        std::size_t);

namespace {

/// The top k eigenvalues (ascending) of the tridiagonal (d, e) by bisection on Sturm counts,
/// to check the cluster tridiagonalisation without LAPACK.
std::vector<double> tridiagonal_top(const std::vector<double>& d, const std::vector<double>& e,
                                    int k) {
  const int n = static_cast<int>(d.size());
  double lo = d[0], hi = d[0];
  for (int i = 0; i < n; ++i) {
    const double r = (i > 0 ? std::abs(e[i - 1]) : 0.0) + (i + 1 < n ? std::abs(e[i]) : 0.0);
    lo = std::min(lo, d[i] - r);
    hi = std::max(hi, d[i] + r);
  }
  const double pivmin = 1e-300 * std::max(1.0, hi - lo);
  auto below = [&](double x) {  // eigenvalues < x
    int c = 0;
    double q = d[0] - x;
    if (std::abs(q) < pivmin) q = -pivmin;
    if (q < 0) ++c;
    for (int i = 1; i < n; ++i) {
      q = d[i] - x - e[i - 1] * e[i - 1] / q;
      if (std::abs(q) < pivmin) q = -pivmin;
      if (q < 0) ++c;
    }
    return c;
  };
  std::vector<double> w;
  for (int idx = n - k; idx < n; ++idx) {  // the idx-th smallest (0-based)
    double a = lo - 1e-12 * std::abs(lo) - 1e-300, b = hi + 1e-12 * std::abs(hi) + 1e-300;
    for (int it = 0; it < 200 && b - a > 1e-15 * std::max(std::abs(a), std::abs(b)); ++it) {
      const double m = 0.5 * (a + b);
      if (below(m) > idx)
        b = m;
      else
        a = m;
    }
    w.push_back(0.5 * (a + b));
  }
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Probe {
  cusolverDnHandle_t h{};
  cusolverDnParams_t params{};
  cudaStream_t s{};
  int n = 0, k = 0;
  double* S = nullptr;  // the matrix, column-major, both triangles
  double* A = nullptr;  // the copy a solver overwrites
  double* w = nullptr;
  int* info = nullptr;
  void* work = nullptr;
  std::size_t work_bytes = 0;

  void* workspace(std::size_t bytes) {
    if (bytes > work_bytes) {
      if (work) CK(cudaFree(work));
      CK(cudaMalloc(&work, bytes));
      work_bytes = bytes;
    }
    return work;
  }

  /// Median ms of 15 runs of `solve` (after 2 warm-ups), each after `reset` restored its input
  /// and synchronised; the info word is read back and must be 0.
  double timed(const std::function<void()>& reset, const std::function<void()>& solve) {
    std::vector<double> ms;
    for (int rep = 0; rep < 17; ++rep) {
      reset();
      CK(cudaStreamSynchronize(s));
      const auto t0 = std::chrono::steady_clock::now();
      solve();
      int hinfo = -1;
      CK(cudaMemcpyAsync(&hinfo, info, sizeof(int), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      const auto t1 = std::chrono::steady_clock::now();
      if (hinfo != 0) {
        std::fprintf(stderr, "info %d\n", hinfo);
        std::exit(1);
      }
      if (rep >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return median(ms);
  }

  /// Median ms of `solve` on a fresh copy of S in A (which must leave the eigenvalues
  /// ascending in w) and the top k.
  double time(const std::function<void()>& solve, std::vector<double>& top) {
    const double ms = timed(
        [&] { CK(cudaMemcpyAsync(A, S, sizeof(double) * n * n, cudaMemcpyDeviceToDevice, s)); },
        solve);
    std::vector<double> wh(n);
    CK(cudaMemcpy(wh.data(), w, sizeof(double) * n, cudaMemcpyDeviceToHost));
    top.assign(wh.end() - k, wh.end());
    return ms;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int k = argc > 1 ? std::atoi(argv[1]) : 16;
  const bool block_only = argc > 2 && std::string(argv[2]) == "block";
  cublasHandle_t blas{};
  Probe p;
  CK(cudaStreamCreate(&p.s));
  CK(cusolverDnCreate(&p.h));
  CK(cusolverDnSetStream(p.h, p.s));
  CK(cusolverDnCreateParams(&p.params));
  CK(cublasCreate(&blas));
  CK(cublasSetStream(blas, p.s));
  std::printf("%-6s %-28s %10s %14s\n", "n", "solver", "ms/solve", "top-k rel diff");
  for (const int n : {64, 128, 192, 256, 512, 1024}) {
    if (block_only && n > tessera::kernels::cuda::block_eig::kMaxN) break;
    p.n = n;
    p.k = std::min(k, n);
    // S = Y^T Y for a 4n x n Y with decaying column scales (a Gram with a spread spectrum).
    const int m = 4 * n;
    std::vector<double> Yh(static_cast<std::size_t>(m) * n);
    std::mt19937_64 rng(42 + n);
    std::normal_distribution<double> nd;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i)
        Yh[static_cast<std::size_t>(j) * m + i] = nd(rng) / (1.0 + j / 8.0);
    double* Y = nullptr;
    CK(cudaMalloc(&Y, sizeof(double) * Yh.size()));
    CK(cudaMemcpy(Y, Yh.data(), sizeof(double) * Yh.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&p.S, sizeof(double) * n * n));
    CK(cudaMalloc(&p.A, sizeof(double) * n * n));
    CK(cudaMalloc(&p.w, sizeof(double) * n));
    CK(cudaMalloc(&p.info, sizeof(int)));
    const double one = 1.0, zero = 0.0;
    CK(cublasDgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, m, &one, Y, m, Y, m, &zero, p.S, n));
    CK(cudaStreamSynchronize(p.s));
    const int il = n - p.k + 1, iu = n;
    std::vector<double> ref, top;
    auto report = [&](const char* name, double ms, bool is_ref) {
      double d = 0;
      if (!is_ref)
        for (int j = 0; j < p.k; ++j)
          d = std::max(d, std::abs(top[j] - ref[j]) / std::abs(ref[p.k - 1]));
      std::printf("%-6d %-28s %10.3f %14.2e\n", n, name, ms, d);
      std::fflush(stdout);
    };

    {  // syevdx, range I: what Tucker runs today (kernels/cuda/dense/dense.cu)
      int lwork = 0, meig = 0;
      CK(cusolverDnDsyevdx_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                      CUBLAS_FILL_MODE_LOWER, n, p.A, n, 0, 0, il, iu, &meig, p.w,
                                      &lwork));
      auto* wk = static_cast<double*>(p.workspace(sizeof(double) * lwork));
      // syevdx returns the k wanted in w[0..k): shift them to the end for time()'s view.
      const double ms = p.time(
          [&] {
            CK(cusolverDnDsyevdx(p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                 CUBLAS_FILL_MODE_LOWER, n, p.A, n, 0, 0, il, iu, &meig, p.w, wk,
                                 lwork, p.info));
            CK(cudaMemcpyAsync(p.w + n - p.k, p.w, sizeof(double) * p.k, cudaMemcpyDeviceToDevice,
                               p.s));
          },
          ref);
      report("Dsyevdx (range I)", ms, true);
    }
    if (!block_only) {  // Ssyevdx, range I: the same solve in single precision, on S rounded to
                        // float
      std::vector<double> Sh(static_cast<std::size_t>(n) * n);
      CK(cudaMemcpy(Sh.data(), p.S, sizeof(double) * Sh.size(), cudaMemcpyDeviceToHost));
      std::vector<float> Sfh(Sh.begin(), Sh.end());
      float *Sf = nullptr, *Af = nullptr, *wf = nullptr;
      CK(cudaMalloc(&Sf, sizeof(float) * Sfh.size()));
      CK(cudaMalloc(&Af, sizeof(float) * Sfh.size()));
      CK(cudaMalloc(&wf, sizeof(float) * n));
      CK(cudaMemcpy(Sf, Sfh.data(), sizeof(float) * Sfh.size(), cudaMemcpyHostToDevice));
      int lwork = 0, meig = 0;
      CK(cusolverDnSsyevdx_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                      CUBLAS_FILL_MODE_LOWER, n, Af, n, 0.f, 0.f, il, iu, &meig, wf,
                                      &lwork));
      auto* wk = static_cast<float*>(p.workspace(sizeof(float) * lwork));
      const double ms = p.timed(
          [&] {
            CK(cudaMemcpyAsync(Af, Sf, sizeof(float) * Sfh.size(), cudaMemcpyDeviceToDevice, p.s));
          },
          [&] {
            CK(cusolverDnSsyevdx(p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                 CUBLAS_FILL_MODE_LOWER, n, Af, n, 0.f, 0.f, il, iu, &meig, wf, wk,
                                 lwork, p.info));
          });
      std::vector<float> wh(static_cast<std::size_t>(p.k));
      CK(cudaMemcpy(wh.data(), wf, sizeof(float) * p.k, cudaMemcpyDeviceToHost));
      top.assign(wh.begin(), wh.end());
      report("Ssyevdx (range I, float)", ms, false);
      CK(cudaFree(Sf));
      CK(cudaFree(Af));
      CK(cudaFree(wf));
    }
    if (n <= tessera::kernels::cuda::block_eig::kMaxN &&
        p.k <= tessera::kernels::cuda::block_eig::kMaxK) {  // the one-block solver
      namespace be = tessera::kernels::cuda::block_eig;
      double *V = nullptr, *wb = nullptr;
      CK(cudaMalloc(&V, sizeof(double) * n * p.k));
      CK(cudaMalloc(&wb, sizeof(double) * (p.k + 1)));
      // 512 threads (the library's), 1024.
      const auto launch = [&](int threads, long long* clk) {
        return threads == 512 ? be::launch_top_eigenpairs<512>(p.S, n, p.k, V, wb, p.s, clk)
                              : be::launch_top_eigenpairs<1024>(p.S, n, p.k, V, wb, p.s, clk);
      };
      for (const int threads : {512, 1024}) {
        const int variant = threads;
        const double ms = p.timed([] {}, [&] { CK(launch(variant, nullptr)); });
        std::vector<double> wh(static_cast<std::size_t>(p.k) + 1),
            Vh(static_cast<std::size_t>(n) * p.k), Sh(static_cast<std::size_t>(n) * n);
        CK(cudaMemcpy(wh.data(), wb, sizeof(double) * wh.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(Vh.data(), V, sizeof(double) * Vh.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(Sh.data(), p.S, sizeof(double) * Sh.size(), cudaMemcpyDeviceToHost));
        if (wh[static_cast<std::size_t>(p.k)] != 0) {
          std::fprintf(stderr, "block solver: status %g\n", wh[static_cast<std::size_t>(p.k)]);
          std::exit(1);
        }
        top.assign(wh.rbegin() + 1, wh.rend());  // ascending, as the reference
        double resid = 0, orth = 0;
        for (int a = 0; a < p.k; ++a) {
          for (int i = 0; i < n; ++i) {
            double sv = 0;
            for (int q = 0; q < n; ++q)
              sv += Sh[static_cast<std::size_t>(q) * n + i] *
                    Vh[static_cast<std::size_t>(q) * p.k + a];
            resid =
                std::max(resid, std::abs(sv - wh[a] * Vh[static_cast<std::size_t>(i) * p.k + a]));
          }
          for (int b = 0; b < p.k; ++b) {
            double dot = 0;
            for (int i = 0; i < n; ++i)
              dot += Vh[static_cast<std::size_t>(i) * p.k + a] *
                     Vh[static_cast<std::size_t>(i) * p.k + b];
            orth = std::max(orth, std::abs(dot - (a == b ? 1.0 : 0.0)));
          }
        }
        char name[96];
        std::snprintf(name, sizeof name, "block %d (res %.1e, orth %.1e)", threads,
                      resid / std::abs(wh[0]), orth);
        report(name, ms, false);
        // Where the time goes: clock64 at the phase ends, one more launch.
        long long* clk = nullptr;
        long long ch[8] = {};  // an older kernel (TESSERA_BASE_TAR) stamps the first 5
        CK(cudaMalloc(&clk, sizeof ch));
        CK(cudaMemcpy(clk, ch, sizeof ch, cudaMemcpyHostToDevice));
        CK(launch(variant, clk));
        CK(cudaMemcpy(ch, clk, sizeof ch, cudaMemcpyDeviceToHost));
        CK(cudaFree(clk));
        int dev = 0, khz = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
        std::printf(
            "%-6d   phases (kcycles): reduction %.1f, multisection %.1f, inverse "
            "iteration %.1f, back-transform %.1f (clock %d MHz)\n",
            n, (ch[1] - ch[0]) / 1e3, (ch[2] - ch[1]) / 1e3, (ch[3] - ch[2]) / 1e3,
            (ch[4] - ch[3]) / 1e3, khz / 1000);
        if (ch[5] != 0 && ch[6] != 0 && ch[7] != 0)
          std::printf(
              "%-6d   inverse iteration (kcycles): factorisations %.1f, first solves %.1f, first "
              "Gram-Schmidt %.1f, the rest %.1f\n",
              n, (ch[5] - ch[2]) / 1e3, (ch[6] - ch[5]) / 1e3, (ch[7] - ch[6]) / 1e3,
              (ch[3] - ch[7]) / 1e3);
      }
      CK(cudaFree(V));
      CK(cudaFree(wb));
    }
    if (!block_only) {  // the other solvers
      {  // LAPACK dsyevr (range I) on the host: S copied down, the top k vectors copied up
        std::vector<double> Sh(static_cast<std::size_t>(n) * n), a(Sh.size()), wa(n),
            z(static_cast<std::size_t>(n) * p.k), work(1);
        std::vector<int> isuppz(2 * static_cast<std::size_t>(p.k)), iwork(1);
        double *V = nullptr, *pinned = nullptr;
        CK(cudaMalloc(&V, sizeof(double) * n * p.k));
        CK(cudaMallocHost(&pinned, sizeof(double) * n * n));
        const char jobz = 'V', range = 'I', uplo = 'L';
        const double vl = 0, vu = 0, abstol = 0;
        int m = 0, info = 0, lwork = -1, liwork = -1;
        double wq = 0;
        int iwq = 0;
        dsyevr_(&jobz, &range, &uplo, &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &m, wa.data(),
                z.data(), &n, isuppz.data(), &wq, &lwork, &iwq, &liwork, &info, 1, 1, 1);
        lwork = static_cast<int>(wq) + 1;
        liwork = iwq;
        work.resize(lwork);
        iwork.resize(liwork);
        for (const bool with_copies : {true, false}) {
          std::vector<double> ms;
          for (int rep = 0; rep < 17; ++rep) {
            CK(cudaStreamSynchronize(p.s));
            const auto t0 = std::chrono::steady_clock::now();
            if (with_copies) {
              CK(cudaMemcpyAsync(pinned, p.S, sizeof(double) * n * n, cudaMemcpyDeviceToHost, p.s));
              CK(cudaStreamSynchronize(p.s));
              std::copy(pinned, pinned + static_cast<std::size_t>(n) * n, a.begin());
            } else {
              CK(cudaMemcpy(Sh.data(), p.S, sizeof(double) * n * n, cudaMemcpyDeviceToHost));
              a = Sh;
            }
            const auto t1 = std::chrono::steady_clock::now();
            dsyevr_(&jobz, &range, &uplo, &n, a.data(), &n, &vl, &vu, &il, &iu, &abstol, &m,
                    wa.data(), z.data(), &n, isuppz.data(), work.data(), &lwork, iwork.data(),
                    &liwork, &info, 1, 1, 1);
            if (info != 0 || m != p.k) {
              std::fprintf(stderr, "dsyevr info %d, %d of %d\n", info, m, p.k);
              std::exit(1);
            }
            if (with_copies) {
              CK(cudaMemcpyAsync(V, z.data(), sizeof(double) * n * p.k, cudaMemcpyHostToDevice,
                                 p.s));
              CK(cudaStreamSynchronize(p.s));
            }
            const auto t2 = std::chrono::steady_clock::now();
            if (rep >= 2)
              ms.push_back(
                  std::chrono::duration<double, std::milli>(with_copies ? t2 - t0 : t2 - t1)
                      .count());
          }
          top.assign(wa.begin(), wa.begin() + p.k);
          report(with_copies ? "host dsyevr + copies" : "host dsyevr alone", median(ms), false);
        }
        CK(cudaFree(V));
        CK(cudaFreeHost(pinned));
      }
      // The same solvers captured once into a CUDA graph (with the copy of S) and replayed:
      // whether cuSOLVER lets itself be captured, and what replaying saves of the launches.
      for (const bool x : {true, false}) {
        const char* name = x ? "Dsyevdx (range I), graph" : "Dsyevd (all), graph";
        int lwork = 0, meig = 0;
        if (x)
          CK(cusolverDnDsyevdx_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I,
                                          CUBLAS_FILL_MODE_LOWER, n, p.A, n, 0, 0, il, iu, &meig,
                                          p.w, &lwork));
        else
          CK(cusolverDnDsyevd_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n,
                                         p.A, n, p.w, &lwork));
        auto* wk = static_cast<double*>(p.workspace(sizeof(double) * lwork));
        CK(cudaStreamSynchronize(p.s));
        cudaGraph_t g{};
        cudaGraphExec_t ge{};
        int st = static_cast<int>(cudaStreamBeginCapture(p.s, cudaStreamCaptureModeThreadLocal));
        int solver_status = -1;
        if (st == 0) {
          cudaMemcpyAsync(p.A, p.S, sizeof(double) * n * n, cudaMemcpyDeviceToDevice, p.s);
          solver_status =
              x ? static_cast<int>(cusolverDnDsyevdx(
                      p.h, CUSOLVER_EIG_MODE_VECTOR, CUSOLVER_EIG_RANGE_I, CUBLAS_FILL_MODE_LOWER,
                      n, p.A, n, 0, 0, il, iu, &meig, p.w, wk, lwork, p.info))
                : static_cast<int>(cusolverDnDsyevd(p.h, CUSOLVER_EIG_MODE_VECTOR,
                                                    CUBLAS_FILL_MODE_LOWER, n, p.A, n, p.w, wk,
                                                    lwork, p.info));
          if (x)
            cudaMemcpyAsync(p.w + n - p.k, p.w, sizeof(double) * p.k, cudaMemcpyDeviceToDevice,
                            p.s);
          st = static_cast<int>(cudaStreamEndCapture(p.s, &g));
        }
        if (st == 0 && solver_status == 0) st = static_cast<int>(cudaGraphInstantiate(&ge, g, 0));
        if (st != 0 || solver_status != 0) {
          std::printf("%-6d %-28s %10s %14s\n", n, name, "refused",
                      (std::string("cuda ") + std::to_string(st) + " solver " +
                       std::to_string(solver_status))
                          .c_str());
          cudaGetLastError();
          if (g) cudaGraphDestroy(g);
          continue;
        }
        std::vector<double> ms;
        for (int rep = 0; rep < 17; ++rep) {
          CK(cudaStreamSynchronize(p.s));
          const auto t0 = std::chrono::steady_clock::now();
          CK(cudaGraphLaunch(ge, p.s));
          int hinfo = -1;
          CK(cudaMemcpyAsync(&hinfo, p.info, sizeof(int), cudaMemcpyDeviceToHost, p.s));
          CK(cudaStreamSynchronize(p.s));
          const auto t1 = std::chrono::steady_clock::now();
          if (rep >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        std::vector<double> wh(n);
        CK(cudaMemcpy(wh.data(), p.w, sizeof(double) * n, cudaMemcpyDeviceToHost));
        top.assign(wh.end() - p.k, wh.end());
        report(name, median(ms), false);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
      {  // syevd: every eigenpair
        int lwork = 0;
        CK(cusolverDnDsyevd_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n,
                                       p.A, n, p.w, &lwork));
        auto* wk = static_cast<double*>(p.workspace(sizeof(double) * lwork));
        const double ms = p.time(
            [&] {
              CK(cusolverDnDsyevd(p.h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, p.A, n,
                                  p.w, wk, lwork, p.info));
            },
            top);
        report("Dsyevd (all)", ms, false);
      }
      for (const double tol : {0.0, 1e-10}) {  // Jacobi: default tolerance (eps), and looser
        syevjInfo_t j{};
        CK(cusolverDnCreateSyevjInfo(&j));
        if (tol > 0) CK(cusolverDnXsyevjSetTolerance(j, tol));
        int lwork = 0;
        CK(cusolverDnDsyevj_bufferSize(p.h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n,
                                       p.A, n, p.w, &lwork, j));
        auto* wk = static_cast<double*>(p.workspace(sizeof(double) * lwork));
        const double ms = p.time(
            [&] {
              CK(cusolverDnDsyevj(p.h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, p.A, n,
                                  p.w, wk, lwork, p.info, j));
            },
            top);
        report(tol > 0 ? "Dsyevj (tol 1e-10)" : "Dsyevj (default tol)", ms, false);
        CK(cusolverDnDestroySyevjInfo(j));
      }
      {  // the 64-bit API's syevBatched with one matrix
        std::size_t dev = 0, host = 0;
        CK(cusolverDnXsyevBatched_bufferSize(p.h, p.params, CUSOLVER_EIG_MODE_VECTOR,
                                             CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, p.A, n,
                                             CUDA_R_64F, p.w, CUDA_R_64F, &dev, &host, 1));
        void* wk = p.workspace(std::max<std::size_t>(dev, 1));
        std::vector<char> hw(std::max<std::size_t>(host, 1));
        const double ms = p.time(
            [&] {
              CK(cusolverDnXsyevBatched(p.h, p.params, CUSOLVER_EIG_MODE_VECTOR,
                                        CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, p.A, n, CUDA_R_64F,
                                        p.w, CUDA_R_64F, wk, dev, hw.data(), host, p.info, 1));
            },
            top);
        report("XsyevBatched (batch 1)", ms, false);
      }
      {  // the tridiagonal reduction alone (the first stage of syevd/syevdx)
        int lwork = 0;
        double *d = nullptr, *e = nullptr, *tau = nullptr;
        CK(cudaMalloc(&d, sizeof(double) * n));
        CK(cudaMalloc(&e, sizeof(double) * n));
        CK(cudaMalloc(&tau, sizeof(double) * n));
        CK(cusolverDnDsytrd_bufferSize(p.h, CUBLAS_FILL_MODE_LOWER, n, p.A, n, d, e, tau, &lwork));
        auto* wk = static_cast<double*>(p.workspace(sizeof(double) * lwork));
        const double ms = p.time(
            [&] {
              CK(cusolverDnDsytrd(p.h, CUBLAS_FILL_MODE_LOWER, n, p.A, n, d, e, tau, wk, lwork,
                                  p.info));
            },
            top);
        std::printf("%-6d %-28s %10.3f %14s\n", n, "Dsytrd only", ms, "-");
        CK(cudaFree(d));
        CK(cudaFree(e));
        CK(cudaFree(tau));
      }
      // The cluster tridiagonalisation (jobs/probes/eig_cluster.cuh, an experiment) on clusters
      // of B blocks, its top k checked by bisection on the host; then its back-transformation of
      // k vectors.
      if (n <= tessera::probe::cluster_eig::kClusterEigMaxN) {
        namespace eg = tessera::probe::cluster_eig;
        double *d = nullptr, *e = nullptr, *tau = nullptr, *H = nullptr, *Z = nullptr, *V = nullptr;
        CK(cudaMalloc(&d, sizeof(double) * n));
        CK(cudaMalloc(&e, sizeof(double) * n));
        CK(cudaMalloc(&tau, sizeof(double) * n));
        CK(cudaMalloc(&H, sizeof(double) * n * n));
        CK(cudaMalloc(&Z, sizeof(double) * n * p.k));
        CK(cudaMalloc(&V, sizeof(double) * n * p.k));
        CK(cudaMemset(Z, 0, sizeof(double) * n * p.k));
        std::printf("%-6d %-28s %10d\n", n, "cluster size chosen", eg::tridiag_cluster_size(n));
        for (const int B : {4, 8, 16}) {
          std::vector<double> ms;
          bool ok = true;
          for (int rep = 0; rep < 17 && ok; ++rep) {
            CK(cudaStreamSynchronize(p.s));
            const auto t0 = std::chrono::steady_clock::now();
            ok = eg::launch_tridiag(p.S, n, B, d, e, tau, H, p.s) == cudaSuccess;
            CK(cudaStreamSynchronize(p.s));
            const auto t1 = std::chrono::steady_clock::now();
            if (rep >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          }
          if (!ok) {
            std::printf("%-6d cluster sytrd B=%-14d %10s %14s\n", n, B, "refused",
                        cudaGetErrorString(cudaGetLastError()));
            continue;
          }
          std::vector<double> dh(n), eh(n);
          CK(cudaMemcpy(dh.data(), d, sizeof(double) * n, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(eh.data(), e, sizeof(double) * n, cudaMemcpyDeviceToHost));
          top = tridiagonal_top(dh, eh, p.k);
          char name[64];
          std::snprintf(name, sizeof name, "cluster sytrd B=%d", B);
          report(name, median(ms), false);
        }
        std::vector<double> ms;
        for (int rep = 0; rep < 17; ++rep) {
          CK(cudaStreamSynchronize(p.s));
          const auto t0 = std::chrono::steady_clock::now();
          eg::back_transform_kernel<<<(p.k + 7) / 8, eg::kClusterEigThreads, 0, p.s>>>(H, tau, n,
                                                                                       p.k, Z, V);
          CK(cudaGetLastError());
          CK(cudaStreamSynchronize(p.s));
          const auto t1 = std::chrono::steady_clock::now();
          if (rep >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        std::printf("%-6d %-28s %10.3f %14s\n", n, "cluster back-transform", median(ms), "-");
        for (double* x : {d, e, tau, H, Z, V}) CK(cudaFree(x));
      }
    }  // !block_only
    CK(cudaFree(Y));
    CK(cudaFree(p.S));
    CK(cudaFree(p.A));
    CK(cudaFree(p.w));
    CK(cudaFree(p.info));
  }
  return 0;
}
