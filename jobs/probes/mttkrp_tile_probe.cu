// Probe for issue 43 (docs/perf/gpu-h200-floors.md, "Session 32"): how near an order-3
// MTTKRP at R = 32 gets to its floor when the rows of both input factors that a block of
// nonzeros needs sit in shared memory, against the same kernel gathering them from global
// memory (L2), in float and with 16-bit factor copies. Not part of the library; built and
// run by `jobs/gpu-node.sh mttkrp-tile` (or by hand: nvcc -O3 -arch=sm_90 FILE -o probe).
//
// The tensor: uniform random coordinates in I x J x K (default the nell-2 shape, 12092 x
// 9184 x 28818, 76.9e6 nonzeros), as `bench mttkrp --generate` draws them. For the output
// mode m and input modes a < b, the nonzeros are sorted by (tile, i_m), where a tile is a
// T x T block of (i_a, i_b); each nonzero is stored as 12 bytes (i_m, the two in-tile
// coordinates as 16 bits each, the value). Persistent blocks take equal ranges of the sorted
// nonzeros; at each tile a block copies the tile's T rows of each input factor into shared
// memory. Eight lanes take one nonzero (four columns each as one 16-byte load of each row;
// "L4" variants: four lanes, eight columns); a warp takes 32 / lanes consecutive nonzeros per
// step and keeps a running sum per output row, added to the output with float4 atomics by
// one lane group when the row changes.
// "global" runs the same kernel with one tile covering the whole (i_a, i_b) plane and the
// rows read from global memory, as the library's kernels read them. "-atom" and "-gath"
// variants leave out the output's atomics or the gathers (timing only; no error printed);
// "h2" variants multiply the two fp16 rows in half precision before widening to float.
// TESSERA_PROBE_ONLY ('|'-separated parts of variant names) and TESSERA_PROBE_MODES (e.g.
// "0") limit the run, e.g. to one launch under Nsight Compute.
//
// Prints per mode and variant: ms (median of the repeats, output zeroing included), the
// floor (the library's: 16 bytes per nonzero, the distinct factor rows and the output,
// over the copy bandwidth measured here) and the ratio, and the error against an
// atomic float reference relative to its norm.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cub/cub.cuh>
#include <string>
#include <type_traits>
#include <vector>

namespace {

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int R = 32;
constexpr unsigned kFull = 0xffffffffu;
// Timing-only variants (wrong results, printed as such): the output's atomics left out, or
// the factor-row gathers (rows of ones); they split the time between the kernel's parts.
constexpr int kSkipAtomics = 1;
constexpr int kSkipGathers = 2;

__host__ __device__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void generate(std::int64_t nnz, uint3 dims, std::uint32_t* c0, std::uint32_t* c1,
                         std::uint32_t* c2, float* v) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < nnz;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h0 = mix(4 * n), h1 = mix(4 * n + 1), h2 = mix(4 * n + 2);
    c0[n] = std::uint32_t((h0 >> 32) % dims.x);
    c1[n] = std::uint32_t((h1 >> 32) % dims.y);
    c2[n] = std::uint32_t((h2 >> 32) % dims.z);
    v[n] = 0.5f + float(mix(4 * n + 3) >> 40) * (1.0f / 16777216.0f);
  }
}

__global__ void fill_factor(std::int64_t count, std::uint64_t salt, float* f, __half* h) {
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < count;
       k += std::int64_t(gridDim.x) * blockDim.x) {
    const float x = 0.5f + float(mix(salt * 0x100000000ull + k) >> 40) * (1.0f / 16777216.0f);
    f[k] = x;
    h[k] = __float2half_rn(x);
  }
}

// Reference: one thread per (nonzero, column), float atomics.
__global__ void reference(std::int64_t nnz, const std::uint32_t* cm, const std::uint32_t* ca,
                          const std::uint32_t* cb, const float* v, const float* fa, const float* fb,
                          float* out) {
  for (std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; t < nnz * R;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = t / R;
    const int r = int(t % R);
    atomicAdd(out + std::size_t(cm[n]) * R + r,
              v[n] * fa[std::size_t(ca[n]) * R + r] * fb[std::size_t(cb[n]) * R + r]);
  }
}

__global__ void make_keys(std::int64_t nnz, const std::uint32_t* cm, const std::uint32_t* ca,
                          const std::uint32_t* cb, int T, int nbt, std::uint64_t* key,
                          std::uint32_t* idx) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < nnz;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t tile = std::uint64_t(ca[n] / T) * nbt + cb[n] / T;
    key[n] = (tile << 32) | cm[n];
    idx[n] = std::uint32_t(n);
  }
}

__global__ void make_stream(std::int64_t nnz, const std::uint64_t* key, const std::uint32_t* perm,
                            const std::uint32_t* ca, const std::uint32_t* cb, const float* v, int T,
                            std::uint32_t* oi, std::uint32_t* lab, float* val,
                            std::int64_t* tile_ptr, int ntiles) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < nnz;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint32_t p = perm[n];
    oi[n] = std::uint32_t(key[n]);
    lab[n] = (ca[p] % T) | ((cb[p] % T) << 16);
    val[n] = v[p];
    // tile_ptr[t] = first nonzero of tile t (tiles with none get the next one's start)
    const std::int64_t t = std::int64_t(key[n] >> 32);
    const std::int64_t prev = n == 0 ? -1 : std::int64_t(key[n - 1] >> 32);
    for (std::int64_t u = prev + 1; u <= t; ++u) tile_ptr[u] = n;
    if (n == nnz - 1)
      for (std::int64_t u = t + 1; u <= ntiles; ++u) tile_ptr[u] = nnz;
  }
}

// Lane q of kLanes lanes holds V groups of four columns of a row: group v is columns
// 4 (v kLanes + q) .. + 3, so the lanes of one nonzero read adjacent 16- or 8-byte pieces
// (no bank conflicts between the nonzeros of a step).
template <typename F, int V, int L>
struct Row;
template <int V, int L>
struct Row<float, V, L> {
  __device__ static void get(const float* base, std::uint32_t row, int q, float4 (&r)[V]) {
    const float4* p = reinterpret_cast<const float4*>(base + std::size_t(row) * R);
#pragma unroll
    for (int v = 0; v < V; ++v) r[v] = p[v * L + q];
  }
};
template <int V, int L>
struct Row<__half, V, L> {
  __device__ static void raw(const __half* base, std::uint32_t row, int q, uint2 (&u)[V]) {
    const uint2* p = reinterpret_cast<const uint2*>(base + std::size_t(row) * R);
#pragma unroll
    for (int v = 0; v < V; ++v) u[v] = p[v * L + q];
  }
  __device__ static void get(const __half* base, std::uint32_t row, int q, float4 (&r)[V]) {
    uint2 u[V];
    raw(base, row, q, u);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u[v].x));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u[v].y));
      r[v] = make_float4(lo.x, lo.y, hi.x, hi.y);
    }
  }
};

__device__ void add(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// Adds a row's sum, spread over the warp's lane groups of kLanes lanes, to the output.
template <int kSkip, int kLanes>
__device__ void flush(float4 (&acc)[R / kLanes / 4], std::uint32_t row, int g, int q, float* out) {
  constexpr int V = R / kLanes / 4;
#pragma unroll
  for (int v = 0; v < V; ++v)
    for (int o = kLanes; o < 32; o *= 2) {
      acc[v].x += __shfl_xor_sync(kFull, acc[v].x, o);
      acc[v].y += __shfl_xor_sync(kFull, acc[v].y, o);
      acc[v].z += __shfl_xor_sync(kFull, acc[v].z, o);
      acc[v].w += __shfl_xor_sync(kFull, acc[v].w, o);
    }
  if (kSkip & kSkipAtomics) {  // timing only: a plain store where the atomic would be
    if (g == 0 && acc[0].x == 1234.5f) out[q] = acc[0].y;
    return;
  }
  if (g == 0) {
    float4* p = reinterpret_cast<float4*>(out + std::size_t(row) * R);
#pragma unroll
    for (int v = 0; v < V; ++v) atomicAdd(p + v * kLanes + q, acc[v]);
  }
}

// kShared: the tile's rows of both inputs in shared memory; otherwise read from global.
// kLanes lanes take one nonzero (R / kLanes columns each); a warp takes 32 / kLanes
// nonzeros per step.
// kH2 (fp16 rows only): the two rows' product in half precision (__hmul2), then widened.
template <bool kShared, typename F, int kSkip = 0, int kLanes = 8, bool kH2 = false>
__global__ void __launch_bounds__(1024)
    tiled(const std::uint32_t* __restrict__ oi, const std::uint32_t* __restrict__ lab,
          const float* __restrict__ val, const std::int64_t* __restrict__ tile_ptr, int ntiles,
          int nbt, int T, const F* __restrict__ fa, std::uint32_t Da, const F* __restrict__ fb,
          std::uint32_t Db, float* __restrict__ out, std::int64_t nnz, int prefetch) {
  constexpr int C = R / kLanes;                  // columns per lane
  constexpr int V = C / 4;                       // float4 per lane and row
  constexpr int G = 32 / kLanes;                 // nonzeros per step
  constexpr int S = 32 / G;                      // steps per batch of 32 nonzeros
  constexpr int kChunk = S < 4 / V ? S : 4 / V;  // steps whose gathers are in flight together
  constexpr unsigned kStepBits = G == 32 ? 0xffffffffu : (1u << G) - 1u;
  extern __shared__ __align__(16) unsigned char smem[];
  F* sa = reinterpret_cast<F*>(smem);
  F* sb = sa + std::size_t(T) * R;
  const std::int64_t per = (nnz + gridDim.x - 1) / gridDim.x;
  const std::int64_t lo = blockIdx.x * per, hi = std::min<std::int64_t>(nnz, lo + per);
  if (lo >= hi) return;
  int t = 0, top = ntiles;  // last tile whose start <= lo
  while (top - t > 1) {
    const int mid = (t + top) / 2;
    if (tile_ptr[mid] <= lo)
      t = mid;
    else
      top = mid;
  }
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / kLanes, q = lane % kLanes;
  for (; t < ntiles && tile_ptr[t] < hi; ++t) {
    const std::int64_t s = std::max(lo, tile_ptr[t]), e = std::min(hi, tile_ptr[t + 1]);
    if (s >= e) continue;
    const F* A = fa;
    const F* B = fb;
    if constexpr (kShared) {
      const std::uint32_t a0 = std::uint32_t(t / nbt) * T, b0 = std::uint32_t(t % nbt) * T;
      const std::uint32_t na = std::min<std::uint32_t>(T, Da - a0);
      const std::uint32_t nb = std::min<std::uint32_t>(T, Db - b0);
      constexpr int kPer = 16 / sizeof(F);  // elements per uint4
      __syncthreads();
      const uint4* ga = reinterpret_cast<const uint4*>(fa + std::size_t(a0) * R);
      const uint4* gb = reinterpret_cast<const uint4*>(fb + std::size_t(b0) * R);
      for (std::uint32_t k = threadIdx.x; k < na * R / kPer; k += blockDim.x)
        reinterpret_cast<uint4*>(sa)[k] = ga[k];
      for (std::uint32_t k = threadIdx.x; k < nb * R / kPer; k += blockDim.x)
        reinterpret_cast<uint4*>(sb)[k] = gb[k];
      __syncthreads();
      A = sa;
      B = sb;
    }
    const std::int64_t len = e - s;
    const std::int64_t ws = s + len * warp / W, we = s + len * (warp + 1) / W;
    if (ws >= we) continue;
    std::uint32_t cur = oi[ws];
    float4 acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    // 32 nonzeros per batch: loaded by the warp's lanes (coalesced), then taken G at a time,
    // one per lane group; the rows of kChunk steps are gathered before any is added, so
    // several row loads are in flight per lane. `change` marks the nonzeros that start a row.
    for (std::int64_t base = ws; base < we; base += 32) {
      if (prefetch > 0 && lane < 3 && base + prefetch < we) {
        const void* p = lane == 0   ? static_cast<const void*>(oi + base + prefetch)
                        : lane == 1 ? static_cast<const void*>(lab + base + prefetch)
                                    : static_cast<const void*>(val + base + prefetch);
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
      }
      const std::int64_t nl = base + lane;
      const bool okl = nl < we;
      const std::uint32_t my_i = okl ? oi[nl] : 0xffffffffu;
      const std::uint32_t my_l = okl ? lab[nl] : 0u;
      const float my_v = okl ? val[nl] : 0.f;
      std::uint32_t prev_i = __shfl_up_sync(kFull, my_i, 1);
      if (lane == 0) prev_i = cur;
      const unsigned change = __ballot_sync(kFull, okl && my_i != prev_i);
#pragma unroll
      for (int c0 = 0; c0 < S; c0 += kChunk) {
        float4 h[kChunk][V];
#pragma unroll
        for (int s = 0; s < kChunk; ++s) {
          const int src = G * (c0 + s) + g;
          const std::uint32_t l = __shfl_sync(kFull, my_l, src);
          const float x = __shfl_sync(kFull, my_v, src);
          float4 ra[V], rb[V];
          if (kSkip & kSkipGathers) {
#pragma unroll
            for (int v = 0; v < V; ++v) ra[v] = rb[v] = make_float4(1.f, 1.f, 1.f, 1.f);
          } else if constexpr (kH2 && std::is_same_v<F, __half>) {
            uint2 ua[V], ub[V];
            Row<F, V, kLanes>::raw(A, l & 0xffffu, q, ua);
            Row<F, V, kLanes>::raw(B, l >> 16, q, ub);
#pragma unroll
            for (int v = 0; v < V; ++v) {
              const __half2 p0 = __hmul2(*reinterpret_cast<const __half2*>(&ua[v].x),
                                         *reinterpret_cast<const __half2*>(&ub[v].x));
              const __half2 p1 = __hmul2(*reinterpret_cast<const __half2*>(&ua[v].y),
                                         *reinterpret_cast<const __half2*>(&ub[v].y));
              const float2 f0 = __half22float2(p0), f1 = __half22float2(p1);
              ra[v] = make_float4(f0.x, f0.y, f1.x, f1.y);
              rb[v] = make_float4(1.f, 1.f, 1.f, 1.f);
            }
          } else {
            Row<F, V, kLanes>::get(A, l & 0xffffu, q, ra);
            Row<F, V, kLanes>::get(B, l >> 16, q, rb);
          }
#pragma unroll
          for (int v = 0; v < V; ++v) {
            if constexpr (kH2) {  // the product is in ra
              h[s][v] = make_float4(x * ra[v].x, x * ra[v].y, x * ra[v].z, x * ra[v].w);
            } else {
              h[s][v] = make_float4(x * ra[v].x * rb[v].x, x * ra[v].y * rb[v].y,
                                    x * ra[v].z * rb[v].z, x * ra[v].w * rb[v].w);
            }
          }
        }
#pragma unroll
        for (int s = 0; s < kChunk; ++s) {
          const int src = G * (c0 + s) + g;
          if (((change >> (G * (c0 + s))) & kStepBits) == 0) {  // no row starts in this step
#pragma unroll
            for (int v = 0; v < V; ++v) add(acc[v], h[s][v]);
            continue;
          }
          // A row ends in this step: the step's nonzeros are in ascending row order.
          const std::uint32_t i = __shfl_sync(kFull, my_i, src);
          const bool ok = base + src < we;
          bool done = !ok;
          if (ok && i == cur) {
#pragma unroll
            for (int v = 0; v < V; ++v) add(acc[v], h[s][v]);
            done = true;
          }
          for (;;) {
            const std::uint32_t next = __reduce_min_sync(kFull, done ? 0xffffffffu : i);
            if (next == 0xffffffffu) break;
            flush<kSkip, kLanes>(acc, cur, g, q, out);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
            cur = next;
            if (!done && i == cur) {
#pragma unroll
              for (int v = 0; v < V; ++v) acc[v] = h[s][v];
              done = true;
            }
          }
        }
      }
    }
    flush<kSkip, kLanes>(acc, cur, g, q, out);
  }
}

struct Stream {
  std::uint32_t* oi = nullptr;
  std::uint32_t* lab = nullptr;
  float* val = nullptr;
  std::int64_t* tile_ptr = nullptr;
  int ntiles = 0, nbt = 0, T = 0;
};

Stream build_stream(std::int64_t nnz, const std::uint32_t* cm, const std::uint32_t* ca,
                    const std::uint32_t* cb, const float* v, std::uint32_t Da, std::uint32_t Db,
                    int T) {
  Stream s;
  s.T = T;
  const int nat = int((Da + T - 1) / T);
  s.nbt = int((Db + T - 1) / T);
  s.ntiles = nat * s.nbt;
  std::uint64_t *key, *key2;
  std::uint32_t *idx, *perm;
  CHECK(cudaMalloc(&key, nnz * 8));
  CHECK(cudaMalloc(&key2, nnz * 8));
  CHECK(cudaMalloc(&idx, nnz * 4));
  CHECK(cudaMalloc(&perm, nnz * 4));
  make_keys<<<1024, 256>>>(nnz, cm, ca, cb, T, s.nbt, key, idx);
  int bits = 32;
  while ((std::uint64_t(1) << (bits - 32)) < std::uint64_t(s.ntiles)) ++bits;
  std::size_t tmp_bytes = 0;
  CHECK(cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, key, key2, idx, perm, nnz, 0, bits));
  void* tmp;
  CHECK(cudaMalloc(&tmp, tmp_bytes));
  CHECK(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, key, key2, idx, perm, nnz, 0, bits));
  CHECK(cudaMalloc(&s.oi, nnz * 4));
  CHECK(cudaMalloc(&s.lab, nnz * 4));
  CHECK(cudaMalloc(&s.val, nnz * 4));
  CHECK(cudaMalloc(&s.tile_ptr, (s.ntiles + 1) * 8));
  make_stream<<<1024, 256>>>(nnz, key2, perm, ca, cb, v, T, s.oi, s.lab, s.val, s.tile_ptr,
                             s.ntiles);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(tmp));
  CHECK(cudaFree(key));
  CHECK(cudaFree(key2));
  CHECK(cudaFree(idx));
  CHECK(cudaFree(perm));
  return s;
}

void free_stream(Stream& s) {
  CHECK(cudaFree(s.oi));
  CHECK(cudaFree(s.lab));
  CHECK(cudaFree(s.val));
  CHECK(cudaFree(s.tile_ptr));
}

// Device-to-device copy bandwidth (read + write bytes over time), as the bench measures it.
double copy_bandwidth() {
  const std::size_t bytes = std::size_t(1) << 31;
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  std::vector<float> ms;
  for (int k = 0; k < 7; ++k) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * double(bytes) / (ms[ms.size() / 2] * 1e-3);
}

double rel_error(const float* d_x, const float* d_ref, std::size_t count) {
  std::vector<float> x(count), r(count);
  CHECK(cudaMemcpy(x.data(), d_x, count * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(r.data(), d_ref, count * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (std::size_t k = 0; k < count; ++k) {
    num += (double(x[k]) - r[k]) * (double(x[k]) - r[k]);
    den += double(r[k]) * r[k];
  }
  return std::sqrt(num / den);
}

template <typename F>
using Kernel = void (*)(const std::uint32_t*, const std::uint32_t*, const float*,
                        const std::int64_t*, int, int, int, const F*, std::uint32_t, const F*,
                        std::uint32_t, float*, std::int64_t, int);

template <typename F, int L>
Kernel<F> pick(bool shared, int skip) {
  constexpr int kA = kSkipAtomics, kAG = kSkipAtomics | kSkipGathers;
  if (shared)
    return skip == 0    ? tiled<true, F, 0, L>
           : skip == kA ? tiled<true, F, kA, L>
                        : tiled<true, F, kAG, L>;
  return skip == 0    ? tiled<false, F, 0, L>
         : skip == kA ? tiled<false, F, kA, L>
                      : tiled<false, F, kAG, L>;
}

// TESSERA_PROBE_ONLY: run only the variants whose name contains one of its '|'-separated
// parts (for a profiler); TESSERA_PROBE_MODES: only these output modes (e.g. "0").
bool selected(const std::string& name) {
  const char* only = std::getenv("TESSERA_PROBE_ONLY");
  if (!only || !*only) return true;
  std::string rest = only;
  for (;;) {
    const std::size_t bar = rest.find('|');
    if (name.find(rest.substr(0, bar)) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    rest = rest.substr(bar + 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t nnz = argc > 1 ? std::int64_t(std::atof(argv[1])) : 76900000;
  std::uint32_t dims[3] = {12092, 9184, 28818};
  if (argc > 4)
    for (int k = 0; k < 3; ++k) dims[k] = std::uint32_t(std::atol(argv[2 + k]));
  const int repeats = 15;
  for (std::uint32_t d : dims)
    if (d >= 65536) {
      std::fprintf(stderr, "probe: in-tile coordinates are 16 bits: dims must be < 65536\n");
      return 2;
    }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth();
  std::printf(
      "mttkrp_tile_probe: %s, %d SMs; %u x %u x %u, %lld nonzeros, R %d; copy "
      "bandwidth %.3f TB/s\n",
      prop.name, prop.multiProcessorCount, dims[0], dims[1], dims[2], static_cast<long long>(nnz),
      R, bw * 1e-12);

  std::uint32_t* c[3];
  float* v;
  for (auto& p : c) CHECK(cudaMalloc(&p, nnz * 4));
  CHECK(cudaMalloc(&v, nnz * 4));
  generate<<<2048, 256>>>(nnz, make_uint3(dims[0], dims[1], dims[2]), c[0], c[1], c[2], v);
  float* f[3];
  __half* h[3];
  for (int k = 0; k < 3; ++k) {
    CHECK(cudaMalloc(&f[k], std::size_t(dims[k]) * R * 4));
    CHECK(cudaMalloc(&h[k], std::size_t(dims[k]) * R * 2));
    fill_factor<<<1024, 256>>>(std::int64_t(dims[k]) * R, k + 1, f[k], h[k]);
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<double> distinct(3);  // distinct indices per mode (for the floor)
  for (int k = 0; k < 3; ++k) {
    std::vector<std::uint32_t> hc(nnz);
    CHECK(cudaMemcpy(hc.data(), c[k], nnz * 4, cudaMemcpyDeviceToHost));
    std::vector<char> seen(dims[k], 0);
    for (std::uint32_t x : hc) seen[x] = 1;
    distinct[k] = double(std::count(seen.begin(), seen.end(), 1));
  }

  std::printf("%-5s %-24s %9s %9s %7s %10s\n", "mode", "variant", "ms", "floor_ms", "ratio",
              "rel_err");
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const char* modes = std::getenv("TESSERA_PROBE_MODES");
  for (int m = 0; m < 3; ++m) {
    if (modes && *modes && !std::strchr(modes, '0' + m)) continue;
    const int a = m == 0 ? 1 : 0, b = m == 2 ? 1 : 2;
    float *ref, *out;
    const std::size_t out_count = std::size_t(dims[m]) * R;
    CHECK(cudaMalloc(&ref, out_count * 4));
    CHECK(cudaMalloc(&out, out_count * 4));
    CHECK(cudaMemset(ref, 0, out_count * 4));
    reference<<<4096, 256>>>(nnz, c[m], c[a], c[b], v, f[a], f[b], ref);
    CHECK(cudaDeviceSynchronize());
    const double floor_bytes =
        16.0 * double(nnz) + (distinct[a] + distinct[b]) * R * 4 + double(dims[m]) * R * 4;
    const double floor_ms = floor_bytes / bw * 1e3;

    struct Variant {
      const char* name;
      bool shared;
      bool half;
      int T;
      int skip;         // kSkipAtomics | kSkipGathers: timing only
      int lanes;        // lanes per nonzero
      bool h2 = false;  // fp16 products (kH2)
    };
    const int whole = int(std::max(dims[a], dims[b]));
    constexpr int kA = kSkipAtomics, kAG = kSkipAtomics | kSkipGathers;
    const Variant variants[] = {
        {"global float", false, false, whole, 0, 8},
        {"global fp16", false, true, whole, 0, 8},
        {"shared float T=384", true, false, 384, 0, 8},
        {"shared float T=768", true, false, 768, 0, 8},
        {"shared fp16 T=768", true, true, 768, 0, 8},
        {"shared fp16 T=1536", true, true, 1536, 0, 8},
        {"global float -atom", false, false, whole, kA, 8},
        {"global float -atom -gath", false, false, whole, kAG, 8},
        {"shared float T=768 -atom", true, false, 768, kA, 8},
        {"shared fp16 T=1536 -atom", true, true, 1536, kA, 8},
        {"shared T=768 -atom -gath", true, false, 768, kAG, 8},
        {"shared T=1536 -atom -gath", true, true, 1536, kAG, 8},
        {"L4 global float", false, false, whole, 0, 4},
        {"L4 shared float T=768", true, false, 768, 0, 4},
        {"L4 shared fp16 T=1536", true, true, 1536, 0, 4},
        {"L4 global -atom -gath", false, false, whole, kAG, 4},
        {"L4 shared T=768 -atom -gath", true, false, 768, kAG, 4},
        {"L4 shared T=1536 -atom -gath", true, true, 1536, kAG, 4},
        {"L4 shared fp16 T=1536 -atom", true, true, 1536, kA, 4},
        {"h2 shared fp16 T=1536", true, true, 1536, 0, 8, true},
        {"h2 L4 shared fp16 T=1536", true, true, 1536, 0, 4, true},
        {"h2 L4 global fp16", false, true, whole, 0, 4, true},
    };
    for (const Variant& var : variants) {
      if (!selected(var.name)) continue;
      Stream s = build_stream(nnz, c[m], c[a], c[b], v, dims[a], dims[b], var.T);
      const std::size_t elem = var.half ? 2 : 4;
      const std::size_t smem = var.shared ? 2 * std::size_t(var.T) * R * elem : 0;
      auto launch = [&](auto kernel, const auto* fa, const auto* fb, int threads) {
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
        const int grid = std::max(1, per_sm) * prop.multiProcessorCount;
        std::vector<float> ms;
        for (int k = 0; k < repeats + 1; ++k) {
          CHECK(cudaEventRecord(e0));
          CHECK(cudaMemsetAsync(out, 0, out_count * 4));
          kernel<<<grid, threads, smem>>>(s.oi, s.lab, s.val, s.tile_ptr, s.ntiles, s.nbt, s.T, fa,
                                          dims[a], fb, dims[b], out, nnz, 1024);
          CHECK(cudaGetLastError());
          CHECK(cudaEventRecord(e1));
          CHECK(cudaEventSynchronize(e1));
          float t;
          CHECK(cudaEventElapsedTime(&t, e0, e1));
          if (k > 0) ms.push_back(t);  // the first is a warm-up
        }
        std::sort(ms.begin(), ms.end());
        return std::pair<double, int>(ms[ms.size() / 2], per_sm);
      };
      const int threads = 1024;
      const std::pair<double, int> r =
          var.h2 ? launch(var.lanes == 4 ? (var.shared ? tiled<true, __half, 0, 4, true>
                                                       : tiled<false, __half, 0, 4, true>)
                                         : (var.shared ? tiled<true, __half, 0, 8, true>
                                                       : tiled<false, __half, 0, 8, true>),
                          h[a], h[b], threads)
          : var.half ? launch(var.lanes == 4 ? pick<__half, 4>(var.shared, var.skip)
                                             : pick<__half, 8>(var.shared, var.skip),
                              h[a], h[b], threads)
                     : launch(var.lanes == 4 ? pick<float, 4>(var.shared, var.skip)
                                             : pick<float, 8>(var.shared, var.skip),
                              f[a], f[b], threads);
      char err[16] = "timing";
      if (!var.skip) std::snprintf(err, sizeof err, "%.2e", rel_error(out, ref, out_count));
      std::printf("%-5d %-24s %9.3f %9.3f %7.2f %10s  (%d tiles, %d blocks/SM)\n", m, var.name,
                  r.first, floor_ms, r.first / floor_ms, err, s.ntiles, r.second);
      free_stream(s);
    }
    CHECK(cudaFree(ref));
    CHECK(cudaFree(out));
  }
  return 0;
}
