// Internal to kernels/cpu/mttkrp.cpp, which includes this file once per instruction set:
// no include guard on purpose. Before each inclusion the includer defines
//   TESSERA_CPU_ISA_NS  the namespace to define the kernels in (base, avx2, avx512),
//   TESSERA_CPU_VB      the wide vector width in bytes (16, 32 or 64),
// and switches the target (#pragma GCC target) so every function below is compiled
// for that instruction set. The file defines
//   template <typename T> void root_range(const Ctx<T>&, csf_ptr_t cb, csf_ptr_t ce, T* out);
// out[0..R) = sum over the level-1 children [cb, ce) of one root node of (value of the
// child) * (its factor row): the output row of the root node when [cb, ce) is all of
// its children, a partial row otherwise.
//
// Columns are processed in register tiles of NVT vectors (8, 4, 2, 1 wide vectors, then
// 2, 1 16-byte vectors, then < 4 scalars), one walk of the root's subtree per tile; the
// fiber sums of a tile live in registers. GCC/Clang vector extensions keep the code
// independent of the instruction set.

namespace TESSERA_CPU_ISA_NS {

#define TESSERA_CPU_INLINE inline __attribute__((always_inline))

template <typename T, int VB>
struct VecOf;
template <>
struct VecOf<float, TESSERA_CPU_VB> {
  typedef float type __attribute__((vector_size(TESSERA_CPU_VB)));
};
template <>
struct VecOf<double, TESSERA_CPU_VB> {
  typedef double type __attribute__((vector_size(TESSERA_CPU_VB)));
};
#if TESSERA_CPU_VB != 16
template <>
struct VecOf<float, 16> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct VecOf<double, 16> {
  typedef double type __attribute__((vector_size(16)));
};
#endif

/// NVT vectors of VB bytes: the columns [c0, c0 + NVT * lanes) of one row.
template <typename T, int VB, int NVT>
struct Tile {
  using vec = typename VecOf<T, VB>::type;
  static constexpr int kLanes = VB / static_cast<int>(sizeof(T));
  static constexpr int kCols = NVT * kLanes;
  vec v[NVT];

  static TESSERA_CPU_INLINE vec load(const T* p) {
    vec r;
    __builtin_memcpy(&r, p, sizeof(vec));
    return r;
  }
  static TESSERA_CPU_INLINE Tile zero() {
    Tile t;
    for (int j = 0; j < NVT; ++j) t.v[j] = vec{};
    return t;
  }
  /// this += s * row[0 .. kCols)
  TESSERA_CPU_INLINE void axpy(T s, const T* row) {
#pragma GCC unroll 8
    for (int j = 0; j < NVT; ++j) v[j] += s * load(row + j * kLanes);
  }
  /// this += x .* row[0 .. kCols)
  TESSERA_CPU_INLINE void fma_rows(const Tile& x, const T* row) {
#pragma GCC unroll 8
    for (int j = 0; j < NVT; ++j) v[j] += x.v[j] * load(row + j * kLanes);
  }
  TESSERA_CPU_INLINE void add(const Tile& x) {
#pragma GCC unroll 8
    for (int j = 0; j < NVT; ++j) v[j] += x.v[j];
  }
  TESSERA_CPU_INLINE void store(T* p) const {
#pragma GCC unroll 8
    for (int j = 0; j < NVT; ++j) __builtin_memcpy(p + j * kLanes, &v[j], sizeof(vec));
  }
};

/// Sum over the leaves [kb, ke) of val * leaf-factor row, columns from c0. Narrow tiles
/// use U independent accumulators so the adds/FMAs of consecutive nonzeros overlap.
template <typename T, int VB, int NVT>
TESSERA_CPU_INLINE Tile<T, VB, NVT> leaf_sum(const Ctx<T>& c, csf_ptr_t kb, csf_ptr_t ke, int c0) {
  using TL = Tile<T, VB, NVT>;
  constexpr int U = NVT >= 8 ? 1 : NVT >= 4 ? 2 : 4;
  const index_t* __restrict id = c.fids[c.N - 1];
  const T* __restrict val = c.vals;
  const T* __restrict B = c.A[c.N - 1] + c0;
  const std::size_t R = c.R;
  TL a[U];
  for (int u = 0; u < U; ++u) a[u] = TL::zero();
  csf_ptr_t k = kb;
  for (; k + U <= ke; k += U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) a[u].axpy(val[k + u], B + static_cast<std::size_t>(id[k + u]) * R);
  }
  for (; k < ke; ++k) a[0].axpy(val[k], B + static_cast<std::size_t>(id[k]) * R);
  for (int u = 1; u < U; ++u) a[0].add(a[u]);
  return a[0];
}

/// Value of node f at level l (1 <= l <= N-2), columns from c0, into *out. (Written
/// through memory: returning vector aggregates from out-of-line functions compiled for a
/// different ISA than the baseline is fragile across compilers.)
template <typename T, int VB, int NVT>
void node_value(const Ctx<T>& c, int l, csf_ptr_t f, int c0, Tile<T, VB, NVT>* out) {
  using TL = Tile<T, VB, NVT>;
  const csf_ptr_t cb = c.fptr[l][f], ce = c.fptr[l][f + 1];
  if (l == c.N - 2) {
    *out = leaf_sum<T, VB, NVT>(c, cb, ce, c0);
    return;
  }
  const index_t* __restrict id = c.fids[l + 1];
  const T* __restrict A = c.A[l + 1] + c0;
  TL acc = TL::zero();
  TL t;
  for (csf_ptr_t ch = cb; ch < ce; ++ch) {
    node_value<T, VB, NVT>(c, l + 1, ch, c0, &t);
    acc.fma_rows(t, A + static_cast<std::size_t>(id[ch]) * c.R);
  }
  *out = acc;
}

template <typename T, int VB, int NVT>
void tile_range(const Ctx<T>& c, csf_ptr_t cb, csf_ptr_t ce, int c0, T* out) {
  using TL = Tile<T, VB, NVT>;
  if (c.N == 2) {
    leaf_sum<T, VB, NVT>(c, cb, ce, c0).store(out + c0);
    return;
  }
  const index_t* __restrict id = c.fids[1];
  const T* __restrict A = c.A[1] + c0;
  TL acc = TL::zero();
  if (c.N == 3) {
    const csf_ptr_t* __restrict fp = c.fptr[1];
    for (csf_ptr_t ch = cb; ch < ce; ++ch) {
      const TL t = leaf_sum<T, VB, NVT>(c, fp[ch], fp[ch + 1], c0);
      acc.fma_rows(t, A + static_cast<std::size_t>(id[ch]) * c.R);
    }
  } else {
    TL t;
    for (csf_ptr_t ch = cb; ch < ce; ++ch) {
      node_value<T, VB, NVT>(c, 1, ch, c0, &t);
      acc.fma_rows(t, A + static_cast<std::size_t>(id[ch]) * c.R);
    }
  }
  acc.store(out + c0);
}

/// Fewer than 4 trailing columns [c0, c0 + w): plain loops.
template <typename T>
struct Narrow {
  T v[4];
};

template <typename T>
Narrow<T> scalar_node(const Ctx<T>& c, int l, csf_ptr_t f, int c0, int w) {
  Narrow<T> acc{};
  const csf_ptr_t cb = c.fptr[l][f], ce = c.fptr[l][f + 1];
  const index_t* __restrict id = c.fids[l + 1];
  const T* __restrict A = c.A[l + 1] + c0;
  for (csf_ptr_t ch = cb; ch < ce; ++ch) {
    const T* a = A + static_cast<std::size_t>(id[ch]) * c.R;
    if (l + 1 == c.N - 1) {
      for (int r = 0; r < w; ++r) acc.v[r] += c.vals[ch] * a[r];
    } else {
      const Narrow<T> t = scalar_node(c, l + 1, ch, c0, w);
      for (int r = 0; r < w; ++r) acc.v[r] += t.v[r] * a[r];
    }
  }
  return acc;
}

template <typename T>
void scalar_range(const Ctx<T>& c, csf_ptr_t cb, csf_ptr_t ce, int c0, int w, T* out) {
  Narrow<T> acc{};
  const index_t* __restrict id = c.fids[1];
  const T* __restrict A = c.A[1] + c0;
  for (csf_ptr_t ch = cb; ch < ce; ++ch) {
    const T* a = A + static_cast<std::size_t>(id[ch]) * c.R;
    if (c.N == 2) {
      for (int r = 0; r < w; ++r) acc.v[r] += c.vals[ch] * a[r];
    } else {
      const Narrow<T> t = scalar_node(c, 1, ch, c0, w);
      for (int r = 0; r < w; ++r) acc.v[r] += t.v[r] * a[r];
    }
  }
  for (int r = 0; r < w; ++r) out[c0 + r] = acc.v[r];
}

template <typename T>
void root_range(const Ctx<T>& c, csf_ptr_t cb, csf_ptr_t ce, T* out) {
  constexpr int VB = TESSERA_CPU_VB;
  constexpr int L = VB / static_cast<int>(sizeof(T));
  const int R = static_cast<int>(c.R);
  int c0 = 0;
  for (; R - c0 >= 8 * L; c0 += 8 * L) tile_range<T, VB, 8>(c, cb, ce, c0, out);
  if (R - c0 >= 4 * L) {
    tile_range<T, VB, 4>(c, cb, ce, c0, out);
    c0 += 4 * L;
  }
  if (R - c0 >= 2 * L) {
    tile_range<T, VB, 2>(c, cb, ce, c0, out);
    c0 += 2 * L;
  }
  if (R - c0 >= L) {
    tile_range<T, VB, 1>(c, cb, ce, c0, out);
    c0 += L;
  }
#if TESSERA_CPU_VB != 16
  constexpr int L16 = 16 / static_cast<int>(sizeof(T));
  if (R - c0 >= 2 * L16) {
    tile_range<T, 16, 2>(c, cb, ce, c0, out);
    c0 += 2 * L16;
  }
  if (R - c0 >= L16) {
    tile_range<T, 16, 1>(c, cb, ce, c0, out);
    c0 += L16;
  }
#endif
  if (R > c0) scalar_range(c, cb, ce, c0, R - c0, out);
}

template void root_range<float>(const Ctx<float>&, csf_ptr_t, csf_ptr_t, float*);
template void root_range<double>(const Ctx<double>&, csf_ptr_t, csf_ptr_t, double*);

#undef TESSERA_CPU_INLINE

}  // namespace TESSERA_CPU_ISA_NS
