// CUDA MTTKRP on per-mode sorted COO copies, without per-nonzero atomics.
//
// Format: for every mode n one copy of the nonzeros sorted by (i_n, i_{n+1 mod N}),
// stored as uint32 coordinate arrays (structure of arrays) followed by the values.
//
// Kernel: each warp owns a contiguous tile of kTileNnz nonzeros of the copy sorted by the
// output mode, and lanes own output columns (32 per pass; R > 32 loops over column
// blocks). A batch of 32 nonzeros is loaded cooperatively (lane j loads nonzero j's
// coordinates and value; coalesced) and broadcast with __shfl_sync. Each lane keeps the
// Khatri-Rao products of the batch in registers and accumulates them while the output
// row stays the same. A finished row is written once: rows wholly inside the tile with a
// plain store (no other tile touches them), the first and last row of the tile (which a
// neighbouring tile may share) with atomicAdd. So a tile costs at most two atomics per
// column, whatever the skew of the tensor, and every warp does the same amount of work.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernels/cuda/detail.cuh"
#include "kernels/mttkrp.hpp"

namespace tessera::kernels::cuda {

namespace {

constexpr int kWarp = 32;
/// Batches of 32 nonzeros per warp tile. Larger tiles mean fewer boundary atomics and
/// launch blocks; smaller tiles mean more parallelism on small tensors.
constexpr int kBatchesPerTile = 8;
constexpr int kTileNnz = kWarp * kBatchesPerTile;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------
// Host side: sorting and the handle
// ---------------------------------------------------------------------------

/// Stable sort of the permutation `perm` by key[perm[k]] (keys < dim): one counting-sort
/// pass when the key range is small, else two LSD radix passes of 16 bits (any uint32).
void stable_sort_by_key(const index_t* key, std::uint64_t dim, std::vector<nnz_t>& perm,
                        std::vector<nnz_t>& tmp) {
  const std::size_t n = perm.size();
  tmp.resize(n);
  auto pass = [&](std::uint64_t buckets, auto digit) {
    std::vector<nnz_t> count(buckets + 1, 0);
    for (std::size_t k = 0; k < n; ++k) ++count[digit(key[perm[k]]) + 1];
    for (std::uint64_t b = 0; b < buckets; ++b) count[b + 1] += count[b];
    for (std::size_t k = 0; k < n; ++k) tmp[count[digit(key[perm[k]])]++] = perm[k];
    perm.swap(tmp);
  };
  if (dim <= std::max<std::uint64_t>(std::uint64_t(1) << 16, 2 * n)) {
    pass(std::max<std::uint64_t>(dim, 1), [](index_t v) { return static_cast<std::uint64_t>(v); });
  } else {
    pass(std::uint64_t(1) << 16, [](index_t v) { return static_cast<std::uint64_t>(v & 0xffffu); });
    pass(std::uint64_t(1) << 16, [](index_t v) { return static_cast<std::uint64_t>(v >> 16); });
  }
}

template <typename T>
class CudaTensorHandle final : public TensorHandle<T> {
 public:
  CudaTensorHandle(std::vector<std::uint64_t> dims, nnz_t nnz)
      : dims_(std::move(dims)), nnz_(nnz), copies_(dims_.size()) {}

  int order() const override { return static_cast<int>(dims_.size()); }
  const std::vector<std::uint64_t>& dims() const override { return dims_; }
  nnz_t nnz() const override { return nnz_; }
  std::size_t bytes() const override {
    std::size_t b = 0;
    for (const auto& c : copies_) b += c.bytes();
    return b;
  }
  std::size_t mttkrp_stream_bytes(int mode) const override {
    TESSERA_EXPECTS(mode >= 0 && mode < order(),
                    "mode " << mode << " of an order-" << order() << " tensor");
    return (static_cast<std::size_t>(order()) * sizeof(index_t) + sizeof(T)) *
           static_cast<std::size_t>(nnz_);
  }

  /// Layout of one copy: order() index arrays of nnz uint32, then nnz values.
  std::size_t values_offset() const {
    const std::size_t idx_bytes =
        static_cast<std::size_t>(order()) * static_cast<std::size_t>(nnz_) * sizeof(index_t);
    return (idx_bytes + 255) / 256 * 256;
  }
  std::size_t copy_bytes() const {
    return values_offset() + static_cast<std::size_t>(nnz_) * sizeof(T);
  }

  const index_t* idx(int sorted_by, int m) const {
    return static_cast<const index_t*>(copies_[sorted_by].get()) +
           static_cast<std::size_t>(m) * static_cast<std::size_t>(nnz_);
  }
  const T* vals(int sorted_by) const {
    return reinterpret_cast<const T*>(static_cast<const char*>(copies_[sorted_by].get()) +
                                      values_offset());
  }
  DeviceMemory& copy(int sorted_by) { return copies_[sorted_by]; }

 private:
  std::vector<std::uint64_t> dims_;
  nnz_t nnz_;
  std::vector<DeviceMemory> copies_;
};

// ---------------------------------------------------------------------------
// Device side
// ---------------------------------------------------------------------------

template <typename T>
struct MttkrpParams {
  const index_t* idx[kMaxOrder];  ///< coordinate arrays of the copy sorted by `mode`
  const T* factors[kMaxOrder];    ///< factors[m]: dims[m] x R row-major (unused for `mode`)
  const T* vals;
  T* out;  ///< dims[mode] x R row-major, zeroed before the launch
  std::int64_t nnz;
  int order;
  int mode;
  int R;
};

template <typename T>
__device__ __forceinline__ void write_row(T* out, index_t row, int R, int col, bool col_ok, T value,
                                          bool shared_row) {
  if (!col_ok) return;
  T* p = out + static_cast<std::size_t>(row) * static_cast<std::size_t>(R) + col;
  if (shared_row)
    atomicAdd(p, value);
  else
    *p = value;
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    mttkrp_tile_kernel(const __grid_constant__ MttkrpParams<T> p) {
  const int lane = static_cast<int>(threadIdx.x) & (kWarp - 1);
  const std::int64_t warp =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x / kWarp);
  const std::int64_t begin = warp * kTileNnz;
  if (begin >= p.nnz) return;  // whole warp leaves together
  const std::int64_t end = min(begin + static_cast<std::int64_t>(kTileNnz), p.nnz);
  const index_t* rows = p.idx[p.mode];
  const index_t first_row = rows[begin];

  for (int c0 = 0; c0 < p.R; c0 += kWarp) {
    const int col = c0 + lane;
    const bool col_ok = col < p.R;
    index_t cur = first_row;
    bool cur_shared = true;  // the tile's first row may continue from the previous tile
    T acc = T(0);

    for (std::int64_t base = begin; base < end; base += kWarp) {
      const int cnt = static_cast<int>(min(static_cast<std::int64_t>(kWarp), end - base));
      const std::int64_t k = base + lane;
      const bool valid = lane < cnt;
      // Cooperative, coalesced loads: lane j holds nonzero base + j.
      const T my_val = valid ? p.vals[k] : T(0);
      const index_t my_row = valid ? rows[k] : 0;

      T prod[kWarp];
#pragma unroll
      for (int j = 0; j < kWarp; ++j) prod[j] = __shfl_sync(kFullMask, my_val, j);

      for (int m = 0; m < p.order; ++m) {
        if (m == p.mode) continue;
        const index_t my_c = valid ? p.idx[m][k] : 0;
        const T* A = p.factors[m] + col;
#pragma unroll
        for (int j = 0; j < kWarp; ++j) {
          const index_t cj = __shfl_sync(kFullMask, my_c, j);
          if (col_ok && j < cnt)
            prod[j] *= __ldg(A + static_cast<std::size_t>(cj) * static_cast<std::size_t>(p.R));
        }
      }

#pragma unroll
      for (int j = 0; j < kWarp; ++j) {
        const index_t rj = __shfl_sync(kFullMask, my_row, j);
        if (j < cnt) {  // warp-uniform
          if (rj != cur) {
            write_row(p.out, cur, p.R, col, col_ok, acc, cur_shared);
            cur = rj;
            cur_shared = false;
            acc = T(0);
          }
          acc += prod[j];
        }
      }
    }
    // The tile's last row may continue in the next tile.
    write_row(p.out, cur, p.R, col, col_ok, acc, true);
  }
}

}  // namespace

template <typename T>
std::unique_ptr<TensorHandle<T>> prepare_tensor(Context& ctx, const SparseTensor<T>& x) {
  check_kernel_input(x);  // order, ragged arrays, coordinates < dims < 2^32
  const int N = x.order();
  const nnz_t nnz = x.nnz();

  auto h = std::make_unique<CudaTensorHandle<T>>(x.dims, nnz);
  if (nnz == 0) return h;

  std::vector<char> staging(h->copy_bytes());
  std::vector<nnz_t> perm(static_cast<std::size_t>(nnz)), tmp;
  for (int n = 0; n < N; ++n) {
    // Lexicographic by (i_n, i_{n+1}): LSD order, secondary key first. The secondary
    // key groups a row's nonzeros by their next-mode factor row (cache reuse).
    std::iota(perm.begin(), perm.end(), nnz_t(0));
    if (N > 1) {
      const int s = (n + 1) % N;
      stable_sort_by_key(x.idx[s].data(), x.dims[s], perm, tmp);
    }
    stable_sort_by_key(x.idx[n].data(), x.dims[n], perm, tmp);

    auto* hidx = reinterpret_cast<index_t*>(staging.data());
    for (int m = 0; m < N; ++m) {
      const index_t* src = x.idx[m].data();
      index_t* dst = hidx + static_cast<std::size_t>(m) * static_cast<std::size_t>(nnz);
      for (nnz_t k = 0; k < nnz; ++k) dst[k] = src[perm[k]];
    }
    auto* hval = reinterpret_cast<T*>(staging.data() + h->values_offset());
    for (nnz_t k = 0; k < nnz; ++k) hval[k] = x.vals[perm[k]];

    DeviceMemory& dm = h->copy(n);
    dm.reserve(h->copy_bytes());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dm.get(), staging.data(), h->copy_bytes(),
                                       cudaMemcpyHostToDevice, ctx.stream));
    ctx.sync();  // staging is reused for the next mode
  }
  return h;
}

template <typename T>
void mttkrp(Context& ctx, const TensorHandle<T>& xh, int mode, const std::vector<const T*>& factors,
            int R, T* out) {
  const auto* x = dynamic_cast<const CudaTensorHandle<T>*>(&xh);
  TESSERA_EXPECTS(x != nullptr, "the tensor handle was prepared by a different backend");
  const int N = x->order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " of an order-" << N << " tensor");
  TESSERA_EXPECTS(R >= 1, "rank R = " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  factors.size() << " factors for an order-" << N << " tensor");
  const std::size_t out_elems =
      static_cast<std::size_t>(x->dims()[mode]) * static_cast<std::size_t>(R);
  if (out_elems > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(out, 0, out_elems * sizeof(T), ctx.stream));
  const nnz_t nnz = x->nnz();
  if (nnz == 0) return;

  MttkrpParams<T> p{};
  for (int m = 0; m < N; ++m) {
    TESSERA_EXPECTS(m == mode || factors[m] != nullptr, "factor " << m << " is null");
    p.idx[m] = x->idx(mode, m);
    p.factors[m] = factors[m];
  }
  p.vals = x->vals(mode);
  p.out = out;
  p.nnz = nnz;
  p.order = N;
  p.mode = mode;
  p.R = R;

  const std::int64_t tiles = (nnz + kTileNnz - 1) / kTileNnz;
  const std::int64_t blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  TESSERA_EXPECTS(blocks <= std::numeric_limits<int>::max(),
                  nnz << " nonzeros exceed one launch; split the block");
  mttkrp_tile_kernel<T>
      <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, ctx.stream>>>(p);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template std::unique_ptr<TensorHandle<float>> prepare_tensor<float>(Context&,
                                                                    const SparseTensor<float>&);
template std::unique_ptr<TensorHandle<double>> prepare_tensor<double>(Context&,
                                                                      const SparseTensor<double>&);
template void mttkrp<float>(Context&, const TensorHandle<float>&, int,
                            const std::vector<const float*>&, int, float*);
template void mttkrp<double>(Context&, const TensorHandle<double>&, int,
                             const std::vector<const double*>&, int, double*);

}  // namespace tessera::kernels::cuda
