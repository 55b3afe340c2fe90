// Row-wise factor updates of constrained, regularised and weighted CP on the device: the
// semantics of linalg::row_update (src/base/linalg/row_update.hpp) with one thread per row.
// Each row's working vectors (and its Cholesky factor) live in a scratch laid out
// element-major (element e of row i at e * rows_in_batch + i), so the threads of a warp
// touch consecutive addresses; the shared V is read by every thread alike (a broadcast).
// These updates cost O(rows R^2) per sweep, small next to the MTTKRP that feeds them.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cuda/runtime/detail.cuh"

namespace tessera::kernels::cuda {

namespace {

constexpr std::size_t kScratchBytes = std::size_t(256) << 20;

__device__ __forceinline__ std::int64_t packed_at(int R, int r, int s) {  // r <= s
  return static_cast<std::int64_t>(r) * R - static_cast<std::int64_t>(r) * (r - 1) / 2 + (s - r);
}

/// The (r, c), r <= c, of entry e of a packed R x R triangle (row r holds R - r entries).
__device__ __forceinline__ void packed_pair(int R, std::int64_t e, int* r, int* c) {
  int row = 0;
  while (e >= R - row) {
    e -= R - row;
    ++row;
  }
  *r = row;
  *c = row + static_cast<int>(e);
}

/// H(r, s) of row i: the shared V, or the row's packed Gram.
template <typename T>
__device__ __forceinline__ double h_at(const T* V, const T* G, int R, int r, int s) {
  if (V != nullptr) return static_cast<double>(V[static_cast<std::int64_t>(r) * R + s]);
  return static_cast<double>(r <= s ? G[packed_at(R, r, s)] : G[packed_at(R, s, r)]);
}

template <typename T>
__global__ void pack_outer_kernel(const T* __restrict__ A, std::int64_t rows, int R,
                                  T* __restrict__ P) {
  const std::int64_t W = static_cast<std::int64_t>(R) * (R + 1) / 2;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       t < rows * W; t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = t / W;
    int r = 0, s = 0;
    packed_pair(R, t - i * W, &r, &s);
    P[t] = A[i * R + r] * A[i * R + s];
  }
}

struct Params {
  int R;
  bool nonneg;
  double l1, l2;
  int sweeps;
  bool descent;
};

/// One coordinate-descent step (linalg::RowUpdate): z = m_r - sum_{s != r} H_rs a_s and
/// d = H_rr + l2 give the new a_r.
__device__ __forceinline__ double descent_value(double z, double d, const Params& p) {
  if (!(d > 0)) return 0.0;
  if (p.nonneg) return fmax(0.0, z - p.l1) / d;
  return (z > p.l1 ? z - p.l1 : z < -p.l1 ? z + p.l1 : 0.0) / d;
}

/// One thread per row of a batch [r0, r0 + nb): coordinate descent or the Cholesky solve.
/// S holds (2 R + R(R+1)/2) doubles per row, element-major.
template <typename T>
__global__ void row_update_kernel(T* __restrict__ A, const T* __restrict__ M, std::int64_t r0,
                                  std::int64_t nb, const T* __restrict__ V,
                                  const T* __restrict__ Gp, Params p, double* __restrict__ S,
                                  double* quad, unsigned long long* ridges) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  double q = 0;
  if (k < nb) {
    const int R = p.R;
    const std::int64_t i = r0 + k;
    const std::int64_t W = static_cast<std::int64_t>(R) * (R + 1) / 2;
    const T* G = Gp != nullptr ? Gp + i * W : nullptr;
    double* a = S + k;               // a[e * nb]
    double* m = S + R * nb + k;      // m[e * nb]
    double* L = S + 2 * R * nb + k;  // packed lower Cholesky factor, L[(r(r+1)/2 + c) * nb]
    for (int r = 0; r < R; ++r) {
      m[r * nb] = static_cast<double>(M[i * R + r]);
      a[r * nb] = p.descent ? static_cast<double>(A[i * R + r]) : 0.0;
    }
    if (p.descent) {
      for (int sweep = 0; sweep < p.sweeps; ++sweep)
        for (int r = 0; r < R; ++r) {
          double z = m[r * nb];
          for (int s = 0; s < R; ++s)
            if (s != r) z -= h_at(V, G, R, r, s) * a[s * nb];
          a[r * nb] = descent_value(z, h_at(V, G, R, r, r) + p.l2, p);
        }
    } else {
      double trace = 0;
      for (int r = 0; r < R; ++r) trace += h_at(V, G, R, r, r);
      bool solved = false, ridge = false;
      if (trace + R * p.l2 > 0) {
        for (int attempt = 0; attempt < 2 && !solved; ++attempt) {
          const double add = p.l2 + (attempt == 0 ? 0.0 : 1e-10 * trace / R + DBL_MIN);
          bool ok = true;
          for (int j = 0; j < R && ok; ++j) {
            const std::int64_t jj = static_cast<std::int64_t>(j) * (j + 1) / 2;
            double d = h_at(V, G, R, j, j) + add;
            for (int c = 0; c < j; ++c) d -= L[(jj + c) * nb] * L[(jj + c) * nb];
            if (!(d > 1e-14 * (trace / R + p.l2))) {
              ok = false;
              break;
            }
            d = sqrt(d);
            L[(jj + j) * nb] = d;
            for (int r = j + 1; r < R; ++r) {
              const std::int64_t rr = static_cast<std::int64_t>(r) * (r + 1) / 2;
              double v = h_at(V, G, R, r, j);
              for (int c = 0; c < j; ++c) v -= L[(rr + c) * nb] * L[(jj + c) * nb];
              L[(rr + j) * nb] = v / d;
            }
          }
          if (!ok) {
            ridge = true;
            continue;
          }
          for (int r = 0; r < R; ++r) {  // L y = m
            const std::int64_t rr = static_cast<std::int64_t>(r) * (r + 1) / 2;
            double v = m[r * nb];
            for (int c = 0; c < r; ++c) v -= L[(rr + c) * nb] * a[c * nb];
            a[r * nb] = v / L[(rr + r) * nb];
          }
          for (int r = R - 1; r >= 0; --r) {  // L^T x = y
            double v = a[r * nb];
            for (int c = r + 1; c < R; ++c)
              v -= L[(static_cast<std::int64_t>(c) * (c + 1) / 2 + r) * nb] * a[c * nb];
            a[r * nb] = v / L[(static_cast<std::int64_t>(r) * (r + 1) / 2 + r) * nb];
          }
          solved = true;
        }
      } else {
        ridge = true;  // nothing observed in this row: a = 0
      }
      if (!solved)
        for (int r = 0; r < R; ++r) a[r * nb] = 0.0;
      if (ridge) atomicAdd(ridges, 1ull);
    }
    for (int r = 0; r < R; ++r) A[i * R + r] = static_cast<T>(a[r * nb]);
    if (quad != nullptr && G != nullptr) {
      for (int r = 0; r < R; ++r) {
        const double ar = static_cast<double>(A[i * R + r]);
        double t = 0;
        for (int c = 0; c < R; ++c) t += h_at(V, G, R, r, c) * static_cast<double>(A[i * R + c]);
        q += ar * t;
      }
    }
  }
  if (quad != nullptr) {
    for (int off = 16; off > 0; off /= 2) q += __shfl_down_sync(0xffffffffu, q, off);
    if ((threadIdx.x & 31) == 0 && q != 0) atomicAdd(quad, q);
  }
}

/// Largest R of the warp-per-row kernel (its R x R matrix in shared memory, double).
constexpr int kWarpRowMaxR = 64;

/// One warp per row of the packed Grams Gp (the completion's rows): the row's matrix in
/// shared memory, Cholesky (right-looking, the trailing update spread over the lanes) or
/// coordinate-descent sweeps with warp-reduced dot products. Same arithmetic as the host's
/// up to the order of summation.
template <typename T>
__global__ void row_update_warp_kernel(T* __restrict__ A, const T* __restrict__ M,
                                       std::int64_t rows, const T* __restrict__ Gp, Params p,
                                       double* quad, unsigned long long* ridges) {
  extern __shared__ double smem[];
  const int R = p.R;
  const int warps = blockDim.x / 32;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  double* H = smem + static_cast<std::size_t>(w) * (R * R + 2 * R);
  double* a = H + R * R;
  double* m = a + R;
  const std::int64_t W = static_cast<std::int64_t>(R) * (R + 1) / 2;
  double q = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * warps + w; i < rows;
       i += static_cast<std::int64_t>(gridDim.x) * warps) {
    const T* G = Gp + i * W;
    auto load = [&](double add) {
      for (std::int64_t e = lane; e < W; e += 32) {
        int r = 0, c = 0;
        packed_pair(R, e, &r, &c);
        const double v = static_cast<double>(G[e]);
        H[r * R + c] = v + (r == c ? add : 0.0);
        H[c * R + r] = v + (r == c ? add : 0.0);
      }
      __syncwarp();
    };
    for (int r = lane; r < R; r += 32) {
      m[r] = static_cast<double>(M[i * R + r]);
      a[r] = p.descent ? static_cast<double>(A[i * R + r]) : 0.0;
    }
    __syncwarp();
    if (p.descent) {
      load(0.0);
      for (int sweep = 0; sweep < p.sweeps; ++sweep)
        for (int r = 0; r < R; ++r) {
          double z = 0;
          for (int s = lane; s < R; s += 32)
            if (s != r) z += H[r * R + s] * a[s];
          for (int off = 16; off > 0; off /= 2) z += __shfl_xor_sync(0xffffffffu, z, off);
          z = m[r] - z;
          const double v = descent_value(z, H[r * R + r] + p.l2, p);
          __syncwarp();
          if (lane == 0) a[r] = v;
          __syncwarp();
        }
    } else {
      double trace = 0;
      for (int r = lane; r < R; r += 32)
        trace += static_cast<double>(
            G[r * static_cast<std::int64_t>(R) - static_cast<std::int64_t>(r) * (r - 1) / 2]);
      for (int off = 16; off > 0; off /= 2) trace += __shfl_xor_sync(0xffffffffu, trace, off);
      bool solved = false, ridge = false;
      if (trace + R * p.l2 > 0) {
        for (int attempt = 0; attempt < 2 && !solved; ++attempt) {
          load(p.l2 + (attempt == 0 ? 0.0 : 1e-10 * trace / R + DBL_MIN));
          bool ok = true;
          for (int j = 0; j < R && ok; ++j) {  // lower factor in H's lower triangle
            const double d2 = H[j * R + j];
            if (!(d2 > 1e-14 * (trace / R + p.l2))) {
              ok = false;
              break;
            }
            const double d = sqrt(d2);
            __syncwarp();
            for (int r = j + 1 + lane; r < R; r += 32) H[r * R + j] /= d;
            if (lane == 0) H[j * R + j] = d;
            __syncwarp();
            // Trailing update of the lower triangle: (r, c), j < c <= r.
            const int n = R - j - 1;
            for (int t = lane; t < n * n; t += 32) {
              const int r = j + 1 + t / n, c = j + 1 + t % n;
              if (c <= r) H[r * R + c] -= H[r * R + j] * H[c * R + j];
            }
            __syncwarp();
          }
          if (!ok) {
            ridge = true;
            continue;
          }
          if (lane == 0) {  // the triangular solves: R^2 work, small next to the factorisation
            for (int r = 0; r < R; ++r) {
              double v = m[r];
              for (int c = 0; c < r; ++c) v -= H[r * R + c] * a[c];
              a[r] = v / H[r * R + r];
            }
            for (int r = R - 1; r >= 0; --r) {
              double v = a[r];
              for (int c = r + 1; c < R; ++c) v -= H[c * R + r] * a[c];
              a[r] = v / H[r * R + r];
            }
          }
          __syncwarp();
          solved = true;
        }
      } else {
        ridge = true;
      }
      if (!solved) {
        for (int r = lane; r < R; r += 32) a[r] = 0.0;
        __syncwarp();
      }
      if (ridge && lane == 0) atomicAdd(ridges, 1ull);
    }
    for (int r = lane; r < R; r += 32) A[i * R + r] = static_cast<T>(a[r]);
    if (quad != nullptr) {
      // a^T G a with the stored (rounded) values and the packed G itself.
      __syncwarp();
      for (int r = lane; r < R; r += 32) a[r] = static_cast<double>(static_cast<T>(a[r]));
      __syncwarp();
      for (std::int64_t e = lane; e < W; e += 32) {
        int r = 0, c = 0;
        packed_pair(R, e, &r, &c);
        q += (r == c ? 1.0 : 2.0) * static_cast<double>(G[e]) * a[r] * a[c];
      }
    }
    __syncwarp();
  }
  if (quad != nullptr) {
    for (int off = 16; off > 0; off /= 2) q += __shfl_down_sync(0xffffffffu, q, off);
    if (lane == 0 && q != 0) atomicAdd(quad, q);
  }
}

template <typename T>
__global__ void add_diagonal_kernel(T* V, int R, double v) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < R) V[static_cast<std::int64_t>(r) * R + r] += static_cast<T>(v);
}

}  // namespace

template <typename T>
void pack_outer(Context& ctx, const T* A, std::int64_t rows, int R, T* P) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1, "pack_outer: rows " << rows << ", R " << R);
  if (rows == 0) return;
  const std::int64_t W = static_cast<std::int64_t>(R) * (R + 1) / 2;
  pack_outer_kernel<T><<<grid_for(rows * W), kBlock, 0, ctx.stream>>>(A, rows, R, P);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
std::int64_t row_update(Context& ctx, T* A, const T* M, std::int64_t rows, int R, const T* V,
                        const T* Gp, const linalg::RowUpdate& u, double* host_quad) {
  TESSERA_EXPECTS(rows >= 0 && R >= 1, "row_update: rows " << rows << ", R " << R);
  TESSERA_EXPECTS((V == nullptr) != (Gp == nullptr), "row_update: V or Gp, not both");
  TESSERA_EXPECTS(
      u.sweeps >= 1 && u.l1 >= 0 && u.l2 >= 0 && std::isfinite(u.l1) && std::isfinite(u.l2),
      "row_update: sweeps >= 1 and finite l1, l2 >= 0");
  if (host_quad != nullptr) *host_quad = 0;
  if (rows == 0) return 0;
  if (V != nullptr && !u.descent()) {
    // The shared system: one factorisation for every row (solve_normal), on V + l2 I.
    const std::size_t RR = static_cast<std::size_t>(R) * R;
    void* vp = nullptr;
    TESSERA_CUDA_CHECK(cudaMallocAsync(&vp, RR * sizeof(T), ctx.stream));
    T* Vr = static_cast<T*>(vp);
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(Vr, V, RR * sizeof(T), cudaMemcpyDeviceToDevice, ctx.stream));
    if (u.l2 > 0) {
      add_diagonal_kernel<T><<<(R + 255) / 256, 256, 0, ctx.stream>>>(Vr, R, u.l2);
      TESSERA_CUDA_CHECK_LAUNCH();
    }
    if (A != M)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(A, M, static_cast<std::size_t>(rows) * R * sizeof(T),
                                         cudaMemcpyDeviceToDevice, ctx.stream));
    const bool fallback = solve_normal(ctx, A, rows, Vr, R);
    TESSERA_CUDA_CHECK(cudaFreeAsync(vp, ctx.stream));
    return fallback ? rows : 0;
  }
  const std::int64_t W = static_cast<std::int64_t>(R) * (R + 1) / 2;
  const std::int64_t per_row = (2 * R + (u.descent() ? 0 : W)) * 8;
  const std::int64_t batch =
      std::max<std::int64_t>(1, std::min<std::int64_t>(rows, kScratchBytes / per_row));
  // Counters after the scratch, 8-byte aligned.
  ctx.scratch.reserve(static_cast<std::size_t>(batch * per_row) + 16);
  double* S = static_cast<double*>(ctx.scratch.get());
  double* dquad = S + batch * (per_row / 8);
  auto* dridges = reinterpret_cast<unsigned long long*>(dquad + 1);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dquad, 0, 16, ctx.stream));
  Params p{R, u.nonneg, u.l1, u.l2, u.sweeps, u.descent()};
  if (Gp != nullptr && R <= kWarpRowMaxR) {
    // One warp per row, its matrix in shared memory.
    const int warps = R <= 32 ? 4 : 1;
    const std::size_t shm = static_cast<std::size_t>(warps) * (R * R + 2 * R) * sizeof(double);
    const unsigned blocks =
        static_cast<unsigned>(std::min<std::int64_t>((rows + warps - 1) / warps, 65536));
    row_update_warp_kernel<T><<<blocks, warps * 32, shm, ctx.stream>>>(
        A, M, rows, Gp, p, host_quad != nullptr ? dquad : nullptr, dridges);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  for (std::int64_t r0 = 0; r0 < rows && !(Gp != nullptr && R <= kWarpRowMaxR); r0 += batch) {
    const std::int64_t nb = std::min(batch, rows - r0);
    row_update_kernel<T><<<static_cast<unsigned>((nb + 127) / 128), 128, 0, ctx.stream>>>(
        A, M, r0, nb, V, Gp, p, S, host_quad != nullptr && Gp != nullptr ? dquad : nullptr,
        dridges);
    TESSERA_CUDA_CHECK_LAUNCH();
  }
  double hq[2] = {0, 0};
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(hq, dquad, 16, cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  if (host_quad != nullptr) *host_quad = hq[0];
  unsigned long long nr = 0;
  std::memcpy(&nr, &hq[1], sizeof(nr));
  return static_cast<std::int64_t>(nr);
}

#define TESSERA_ROW_UPDATE_INSTANTIATE(T)                                                  \
  template void pack_outer<T>(Context&, const T*, std::int64_t, int, T*);                  \
  template std::int64_t row_update<T>(Context&, T*, const T*, std::int64_t, int, const T*, \
                                      const T*, const linalg::RowUpdate&, double*);

TESSERA_ROW_UPDATE_INSTANTIATE(float)
TESSERA_ROW_UPDATE_INSTANTIATE(double)
#undef TESSERA_ROW_UPDATE_INSTANTIATE

}  // namespace tessera::kernels::cuda
