// An experiment of session 23 (issue 43, point 3), kept so that `jobs/gpu-node.sh eig` can
// time it again beside cuSOLVER: the top k eigenpairs of a symmetric n x n matrix S
// (n <= 512) with the tridiagonal reduction in ONE kernel on one thread-block cluster. Not
// used by the library: measured on an H200 it is no faster than cuSOLVER (docs/perf/
// gpu-h200-floors.md, "Session 23").
//
// cuSOLVER's dsyevdx takes about 2 ms at n = 256 whatever the k, 1.4 ms of it in the
// tridiagonal reduction: 255 dependent steps of small kernels. Here the matrix, in double, is
// held in the cluster's shared memory (columns dealt to its B blocks cyclically), and each
// step of LAPACK's unblocked dsytd2 (lower) is two cluster barriers:
//   (a) the owner of column i forms the reflector H(i) = I - tau v v^T (dlarfg) that zeroes
//       A(i+2:n, i) and writes v and tau into every block's shared memory;
//   (b) every block forms p_j = tau (A v)_j for its columns j > i and sends them, and its
//       warps' parts of p^T v, to every block;
//   (c) every block updates its columns: A -= v w^T + w v^T, w = p - (tau/2)(p^T v) v.
// v, p, tau and the partial sums are double-buffered by the step's parity, so a block may
// start step i + 1 while another still reads step i's buffers (a block can run at most one
// step ahead: each step starts with a barrier every block reaches only after its previous
// step). Each column ends as its reflector; d, e, tau and the reflectors go to global memory
// once, at the end. The k wanted pairs of the tridiagonal T would then be found (LAPACK
// dstebz + dstein on the host in the experiment), and back_transform_kernel applies
// Q = H(0) H(1) ... H(n-2) to them: one warp per eigenvector, H(n-2) first.
//
// Self-contained (CUDA only).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace tessera::probe::cluster_eig {

/// Threads per block of both kernels.
constexpr int kClusterEigThreads = 256;
/// Largest n: a column of n doubles per lane group, and 16 registers of z per lane (n / 32).
constexpr int kClusterEigMaxN = 512;
/// Largest cluster: one lane of a warp per block when p_j is sent to every block.
constexpr int kClusterEigMaxBlocks = 16;

/// Warps per block.
constexpr int kClusterEigWarps = kClusterEigThreads / 32;

/// Dynamic shared memory of tridiag_kernel for n and a cluster of B blocks: the block's
/// ceil(n / B) columns (each ends as its reflector), v and p double-buffered, every warp's
/// partial p^T v double-buffered, tau double-buffered, and d, e, tau of the block's columns.
inline std::size_t tridiag_smem_bytes(int n, int B) {
  const std::size_t ncl = static_cast<std::size_t>((n + B - 1) / B);
  return sizeof(double) * (ncl * static_cast<std::size_t>(n) + 4 * static_cast<std::size_t>(n) +
                           2 * static_cast<std::size_t>(B) * kClusterEigWarps + 2 + 3 * ncl);
}

namespace detail {

__device__ inline double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace detail

/// One cluster of B = gridDim.x blocks (the cluster is the whole grid), kClusterEigThreads
/// threads each, tridiag_smem_bytes(n, B) of dynamic shared memory. S: n x n, column-major,
/// its lower triangle read. Writes d[0..n), e[0..n-1), tau[0..n-1) and H (n x n, row i =
/// the reflector v_i, entries i+1..n-1; v_i[i+1] = 1) once, at the end: inside the loop
/// every write is to shared memory, so the barriers wait for nothing in global memory.
__global__ void __launch_bounds__(kClusterEigThreads)
    tridiag_kernel(const double* __restrict__ S, int n, double* __restrict__ d,
                   double* __restrict__ e, double* __restrict__ tau_out, double* __restrict__ H) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int B = static_cast<int>(cluster.num_blocks());
  const int me = static_cast<int>(cluster.block_rank());
  extern __shared__ double sm[];
  constexpr int nw = kClusterEigWarps;
  const int ncl = (n + B - 1) / B;
  double* col = sm;                                      // col[l n + r] = A(r, l B + me)
  double* vb = col + static_cast<std::size_t>(ncl) * n;  // vb[par n + r]
  double* pb = vb + 2 * n;                               // pb[par n + j]
  double* part = pb + 2 * n;                             // part[par B nw + b nw + w]
  double* tau_s = part + 2 * B * nw;                     // tau_s[par]
  double* own_d = tau_s + 2;                             // own_d[l]: d of column l B + me
  double* own_e = own_d + ncl;
  double* own_tau = own_e + ncl;
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int lane = tid & 31, warp = tid >> 5;

  for (int l = 0; l < ncl; ++l) {
    const int j = l * B + me;
    if (j >= n) break;
    for (int r = tid; r < n; r += nt)
      col[static_cast<std::size_t>(l) * n + r] =
          r >= j ? S[static_cast<std::size_t>(j) * n + r] : S[static_cast<std::size_t>(r) * n + j];
  }
  __syncthreads();

  for (int i = 0; i + 1 < n; ++i) {
    const int par = i & 1;
    if (me == i % B) {  // (a) the reflector of column i (dlarfg), by every warp alike
      double* c = col + static_cast<std::size_t>(i / B) * n;
      double s = 0;
      for (int r = i + 2 + lane; r < n; r += 32) s += c[r] * c[r];
      s = detail::warp_sum(s);  // the same sum in every warp: no block barrier
      const double alpha = c[i + 1];
      double tau = 0, beta = alpha, scale = 0;
      if (s > 0) {
        const double nrm = hypot(alpha, sqrt(s));
        beta = alpha >= 0 ? -nrm : nrm;
        tau = (beta - alpha) / beta;
        scale = 1.0 / (alpha - beta);
      }
      for (int r = i + 1 + tid; r < n; r += nt) {
        const double v = r == i + 1 ? 1.0 : (s > 0 ? c[r] * scale : 0.0);
        for (int b = 0; b < B; ++b) cluster.map_shared_rank(vb, b)[par * n + r] = v;
      }
      if (tid < B) cluster.map_shared_rank(tau_s, tid)[par] = tau;
      if (tid == 0) {
        own_d[i / B] = c[i];
        own_e[i / B] = beta;
        own_tau[i / B] = tau;
      }
    }
    cluster.sync();
    const double tau = tau_s[par];
    const double* v = vb + par * n;
    if (me == i % B) {  // column i keeps its reflector (nothing reads it again)
      double* c = col + static_cast<std::size_t>(i / B) * n;
      for (int r = i + 1 + tid; r < n; r += nt) c[r] = v[r];
    }
    if (tau != 0) {  // the same value in every block: all take the same branch
      // (b) p_j = tau (A v)_j for this block's columns j > i, sent to every block; each
      // warp's part of p^T v too
      double ps = 0;
      for (int l = warp; l < ncl; l += nw) {
        const int j = l * B + me;
        if (j >= n) break;
        if (j <= i) continue;
        const double* c = col + static_cast<std::size_t>(l) * n;
        double dot = 0;
        for (int r = i + 1 + lane; r < n; r += 32) dot += c[r] * v[r];
        const double pj = tau * detail::warp_sum(dot);
        if (lane < B) cluster.map_shared_rank(pb, lane)[par * n + j] = pj;
        ps += pj * v[j];
      }
      if (lane < B) cluster.map_shared_rank(part, lane)[par * B * nw + me * nw + warp] = ps;
      cluster.sync();
      // (c) A(i+1:, j) -= v w_j + w v_j for this block's columns j > i
      double pv = 0;
      for (int q = 0; q < B * nw; ++q) pv += part[par * B * nw + q];  // same order everywhere
      const double alpha2 = -0.5 * tau * pv;
      const double* p = pb + par * n;
      const int l0 = (i + 1 - me + B - 1) / B;  // first column l B + me > i
      for (int r = i + 1 + tid; r < n; r += nt) {
        const double vr = v[r], wr = p[r] + alpha2 * vr;
        for (int l = l0; l < ncl; ++l) {
          const int j = l * B + me;
          if (j >= n) break;
          const double vj = v[j], wj = p[j] + alpha2 * vj;
          col[static_cast<std::size_t>(l) * n + r] -= vr * wj + wr * vj;
        }
      }
    }
    __syncthreads();
  }
  // Every block's columns: d, e, tau and the reflectors to global memory.
  for (int l = 0; l < ncl; ++l) {
    const int j = l * B + me;
    if (j >= n) break;
    const double* c = col + static_cast<std::size_t>(l) * n;
    if (j + 1 < n) {
      for (int r = j + 1 + tid; r < n; r += nt) H[static_cast<std::size_t>(j) * n + r] = c[r];
      if (tid == 0) {
        d[j] = own_d[l];
        e[j] = own_e[l];
        tau_out[j] = own_tau[l];
      }
    } else if (tid == 0) {
      d[j] = c[j];
    }
  }
  // No block may leave while another may still write into its shared memory.
  cluster.sync();
}

/// V (n x k, row-major) column k - 1 - q = Q z_q, z_q column q of Z (n x k, column-major, the
/// eigenvectors of T in ascending order of their eigenvalues): descending order in V. One
/// warp per vector, z in registers (lane holds rows lane + 32 t); the reflectors are read from
/// H (L2-resident), the next one loaded while the current one is applied.
__global__ void __launch_bounds__(kClusterEigThreads)
    back_transform_kernel(const double* __restrict__ H, const double* __restrict__ tau, int n,
                          int k, const double* __restrict__ Z, double* __restrict__ V) {
  constexpr int kT = kClusterEigMaxN / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int q = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  if (q >= k) return;
  double z[kT], h[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int r = lane + 32 * t;
    z[t] = r < n ? Z[static_cast<std::size_t>(q) * n + r] : 0.0;
  }
  auto load = [&](int i, double* dst) {
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const int r = lane + 32 * t;
      dst[t] = (r > i && r < n) ? __ldg(H + static_cast<std::size_t>(i) * n + r) : 0.0;
    }
  };
  if (n >= 2) load(n - 2, h);
  for (int i = n - 2; i >= 0; --i) {
    double hn[kT];
    if (i > 0) load(i - 1, hn);
    const double ti = __ldg(tau + i);
    if (ti != 0) {
      double dot = 0;
#pragma unroll
      for (int t = 0; t < kT; ++t) dot += h[t] * z[t];
      const double f = ti * detail::warp_sum(dot);
#pragma unroll
      for (int t = 0; t < kT; ++t) z[t] -= f * h[t];
    }
    if (i > 0) {
#pragma unroll
      for (int t = 0; t < kT; ++t) h[t] = hn[t];
    }
  }
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int r = lane + 32 * t;
    if (r < n) V[static_cast<std::size_t>(r) * k + (k - 1 - q)] = z[t];
  }
}

/// A launch of tridiag_kernel on one cluster of B blocks (cfg.attrs points into attr: set up
/// in place by prepare_tridiag, not copied).
struct TridiagLaunch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1] = {};
};

/// Sets the kernel's attributes for n and B (shared memory, non-portable cluster sizes) and
/// fills l; returns the first error (e.g. shared memory over the device's limit).
inline cudaError_t prepare_tridiag(int n, int B, cudaStream_t stream, TridiagLaunch& l) {
  const std::size_t smem = tridiag_smem_bytes(n, B);
  cudaError_t err = cudaFuncSetAttribute(
      tridiag_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err == cudaSuccess && B > 8)
    err = cudaFuncSetAttribute(tridiag_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  l.cfg.gridDim = dim3(static_cast<unsigned>(B), 1, 1);
  l.cfg.blockDim = dim3(kClusterEigThreads, 1, 1);
  l.cfg.dynamicSmemBytes = smem;
  l.cfg.stream = stream;
  l.attr[0].id = cudaLaunchAttributeClusterDimension;
  l.attr[0].val.clusterDim.x = static_cast<unsigned>(B);
  l.attr[0].val.clusterDim.y = 1;
  l.attr[0].val.clusterDim.z = 1;
  l.cfg.attrs = l.attr;
  l.cfg.numAttrs = 1;
  return err;
}

/// Launches tridiag_kernel on one cluster of B blocks on `stream`. Returns the launch's error
/// (cudaSuccess, or e.g. cudaErrorInvalidConfiguration where the cluster cannot be formed).
inline cudaError_t launch_tridiag(const double* S, int n, int B, double* d, double* e, double* tau,
                                  double* H, cudaStream_t stream) {
  TridiagLaunch l;
  const cudaError_t err = prepare_tridiag(n, B, stream, l);
  if (err != cudaSuccess) return err;
  return cudaLaunchKernelEx(&l.cfg, tridiag_kernel, S, n, d, e, tau, H);
}

/// The cluster size for n on the current device, 0 when none fits: 8 blocks, else 16,
/// whichever first fits a block's shared memory and can be scheduled.
inline int tridiag_cluster_size(int n) {
  if (n < 2 || n > kClusterEigMaxN) return 0;
  int dev = 0, optin = 0, cc = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || cc < 9)
    return 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return 0;
  for (int B : {8, 16}) {
    if (tridiag_smem_bytes(n, B) > static_cast<std::size_t>(optin)) continue;
    TridiagLaunch l;
    if (prepare_tridiag(n, B, nullptr, l) != cudaSuccess) continue;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, tridiag_kernel, &l.cfg) == cudaSuccess &&
        clusters > 0)
      return B;
  }
  cudaGetLastError();  // clear what a refused attribute left
  return 0;
}

}  // namespace tessera::probe::cluster_eig
