// OpenMP MTTKRP on compressed sparse fiber trees (the SPLATT "CSF root" algorithm).
//
// For the tree rooted at the output mode, the value of a node is the sum over its
// subtree of val * (Hadamard product of the factor rows below it). Leaf parents sum
// val * leaf-factor row; every level above multiplies each child's value by that
// child's factor row and sums; a root node's value is its output row. The work per
// nonzero is one axpy of length R; the Hadamard products are paid once per fiber.
#include "kernels/mttkrp.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/cpu/csf.hpp"
#include "kernels/cpu/team.hpp"
#include "util/error.hpp"

// Run-time dispatch to AVX2 / AVX-512 copies of the inner loops needs x86-64 and the
// GCC/Clang target pragmas; elsewhere only the baseline copy is built.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_CPU_MULTI_ISA 1
#else
#define TESSERA_CPU_MULTI_ISA 0
#endif

namespace tessera::kernels::cpu {

namespace {

// ---------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------

int bits_for(std::uint64_t dim) {
  return dim <= 1 ? 0 : static_cast<int>(std::bit_width(dim - 1));
}

/// Below this many elements radix_sort compares instead: each radix pass clears and scans
/// a histogram of up to 2^16 counts (512 KiB), whatever the element count, and a tier-3
/// pass prepares every chunk it streams (a chunk can be a few nonzeros).
constexpr std::size_t kCompareSortBelow = 4096;

/// Stable LSD radix sort of `a` by bits [lo, hi) of key(a[k]), in passes of <= 16 bits;
/// a stable comparison sort by the same bits for short arrays.
template <typename U, typename KeyFn>
void radix_sort(std::vector<U>& a, std::vector<U>& tmp, int lo, int hi, KeyFn key) {
  const int bits = hi - lo;
  if (bits <= 0) return;
  if (a.size() < kCompareSortBelow) {
    const std::uint64_t field = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
    std::stable_sort(a.begin(), a.end(), [&](const U& x, const U& y) {
      return ((static_cast<std::uint64_t>(key(x)) >> lo) & field) <
             ((static_cast<std::uint64_t>(key(y)) >> lo) & field);
    });
    return;
  }
  const int passes = (bits + 15) / 16;
  const int width = (bits + passes - 1) / passes;
  const std::size_t n = a.size();
  tmp.resize(n);
  std::vector<std::size_t> hist(std::size_t{1} << width);
  for (int p = 0; p < passes; ++p) {
    const int shift = lo + p * width;
    const int w = std::min(width, hi - shift);
    const std::uint64_t mask = (std::uint64_t{1} << w) - 1;
    std::fill(hist.begin(), hist.end(), 0);
    for (std::size_t k = 0; k < n; ++k) ++hist[(key(a[k]) >> shift) & mask];
    std::size_t sum = 0;
    for (auto& h : hist) {
      const std::size_t c = h;
      h = sum;
      sum += c;
    }
    for (std::size_t k = 0; k < n; ++k) tmp[hist[(key(a[k]) >> shift) & mask]++] = a[k];
    a.swap(tmp);
  }
}

/// Appends the sorted nonzeros to the levels of `t`. coords(k, c) writes the level
/// coordinates of the k-th nonzero in sorted order into c; value(k) is its value.
template <typename T, typename CoordFn, typename ValueFn>
void build_levels(CsfTree<T>& t, std::size_t nnz, CoordFn coords, ValueFn value) {
  const int N = t.order;
  t.fids.assign(static_cast<std::size_t>(N), {});
  t.fptr.assign(static_cast<std::size_t>(N - 1), {});
  t.fids[static_cast<std::size_t>(N - 1)].reserve(nnz);
  t.vals.reserve(nnz);
  std::array<index_t, kMaxOrder> prev{}, cur{};
  for (std::size_t k = 0; k < nnz; ++k) {
    coords(k, cur.data());
    int d = 0;
    if (k > 0) {
      d = N - 1;  // a repeated coordinate is one more leaf under the same parent
      for (int l = 0; l < N - 1; ++l)
        if (cur[l] != prev[l]) {
          d = l;
          break;
        }
    }
    for (int l = d; l < N - 1; ++l) {
      t.fptr[l].push_back(static_cast<csf_ptr_t>(t.fids[l + 1].size()));
      t.fids[l].push_back(cur[l]);
    }
    t.fids[N - 1].push_back(cur[N - 1]);
    t.vals.push_back(value(k));
    prev = cur;
  }
  for (int l = 0; l < N - 1; ++l) t.fptr[l].push_back(static_cast<csf_ptr_t>(t.fids[l + 1].size()));
  for (auto& f : t.fids) f.shrink_to_fit();
  for (auto& p : t.fptr) p.shrink_to_fit();

  t.max_slice_nnz = 0;
  if (N == 1) {
    t.max_slice_nnz = static_cast<csf_ptr_t>(nnz);
  } else {
    auto leaf_start = [&](csf_ptr_t s) {
      for (int l = 0; l < N - 1; ++l) s = t.fptr[l][static_cast<std::size_t>(s)];
      return s;
    };
    const auto roots = static_cast<csf_ptr_t>(t.nodes(0));
    csf_ptr_t prev_start = 0;
    for (csf_ptr_t s = 0; s < roots; ++s) {
      const csf_ptr_t next = leaf_start(s + 1);
      t.max_slice_nnz = std::max(t.max_slice_nnz, next - prev_start);
      prev_start = next;
    }
  }
}

template <typename T>
CsfTree<T> build_tree(const SparseTensor<T>& x, int root) {
  const int N = x.order();
  const std::size_t nnz = static_cast<std::size_t>(x.nnz());
  CsfTree<T> t;
  t.order = N;
  std::vector<int> below;
  for (int m = 0; m < N; ++m)
    if (m != root) below.push_back(m);
  std::stable_sort(below.begin(), below.end(), [&](int a, int b) { return x.dims[a] < x.dims[b]; });
  t.mode_at_level[0] = root;
  for (int l = 1; l < N; ++l) t.mode_at_level[l] = below[static_cast<std::size_t>(l - 1)];

  // Bit layout of a packed sort key: level 0 most significant.
  std::array<int, kMaxOrder> bits{}, shift{};
  int key_bits = 0;
  for (int l = N - 1; l >= 0; --l) {
    bits[l] = bits_for(x.dims[t.mode_at_level[l]]);
    shift[l] = key_bits;
    key_bits += bits[l];
  }
  const int nnz_bits = bits_for(nnz);

  if (key_bits + nnz_bits <= 64) {
    // Fast path: coordinates packed above the nonzero's position in one 64-bit word, so
    // the sort and the level build read one sequential array.
    std::vector<std::uint64_t> keys(nnz), tmp;
    for (std::size_t k = 0; k < nnz; ++k) keys[k] = k;
    for (int l = 0; l < N; ++l) {
      if (bits[l] == 0) continue;
      const index_t* c = x.idx[static_cast<std::size_t>(t.mode_at_level[l])].data();
      const int s = shift[l] + nnz_bits;
      for (std::size_t k = 0; k < nnz; ++k) keys[k] |= static_cast<std::uint64_t>(c[k]) << s;
    }
    radix_sort(keys, tmp, nnz_bits, nnz_bits + key_bits, [](std::uint64_t v) { return v; });
    tmp = {};
    const std::uint64_t pos_mask = nnz_bits == 64 ? ~0ull : (std::uint64_t{1} << nnz_bits) - 1;
    build_levels(
        t, nnz,
        [&](std::size_t k, index_t* c) {
          const std::uint64_t v = keys[k] >> nnz_bits;
          for (int l = 0; l < N; ++l)
            c[l] =
                bits[l] == 0
                    ? 0
                    : static_cast<index_t>((v >> shift[l]) & ((std::uint64_t{1} << bits[l]) - 1));
        },
        [&](std::size_t k) { return x.vals[keys[k] & pos_mask]; });
    return t;
  }

  // General path: sort a permutation one level at a time, least significant level first.
  std::vector<std::uint64_t> perm(nnz), tmp;
  std::iota(perm.begin(), perm.end(), std::uint64_t{0});
  for (int l = N - 1; l >= 0; --l) {
    const index_t* c = x.idx[static_cast<std::size_t>(t.mode_at_level[l])].data();
    radix_sort(perm, tmp, 0, bits[l], [c](std::uint64_t p) -> std::uint64_t { return c[p]; });
  }
  tmp = {};
  build_levels(
      t, nnz,
      [&](std::size_t k, index_t* c) {
        for (int l = 0; l < N; ++l)
          c[l] = x.idx[static_cast<std::size_t>(t.mode_at_level[l])][perm[k]];
      },
      [&](std::size_t k) { return x.vals[perm[k]]; });
  return t;
}

}  // namespace

// Inner loops, compiled once per instruction set (see csf_kernels.hpp).
#define TESSERA_CPU_ISA_NS base
#define TESSERA_CPU_VB 16
#include "kernels/cpu/csf_kernels.hpp"
#undef TESSERA_CPU_ISA_NS
#undef TESSERA_CPU_VB

#if TESSERA_CPU_MULTI_ISA
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define TESSERA_CPU_ISA_NS avx2
#define TESSERA_CPU_VB 32
#include "kernels/cpu/csf_kernels.hpp"
#undef TESSERA_CPU_ISA_NS
#undef TESSERA_CPU_VB
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
#define TESSERA_CPU_ISA_NS avx512
#define TESSERA_CPU_VB 64
#include "kernels/cpu/csf_kernels.hpp"
#undef TESSERA_CPU_ISA_NS
#undef TESSERA_CPU_VB
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // TESSERA_CPU_MULTI_ISA

namespace {

// ---------------------------------------------------------------------------------------
// MTTKRP
// ---------------------------------------------------------------------------------------

template <typename T>
using RangeFn = void (*)(const Ctx<T>&, csf_ptr_t, csf_ptr_t, T*);

/// Order 1: out(i, :) = sum of the values at i (the Khatri-Rao product of no factors is a
/// row of ones). Tiny by nature; one thread.
template <typename T>
void mttkrp_order1(const CsfTree<T>& t, std::uint64_t rows, int R, T* out) {
  std::fill(out, out + rows * static_cast<std::uint64_t>(R), T(0));
  const auto& id = t.fids[0];
  for (std::size_t k = 0; k < id.size(); ++k) {
    T* o = out + static_cast<std::size_t>(id[k]) * static_cast<std::size_t>(R);
    for (int r = 0; r < R; ++r) o[r] += t.vals[k];
  }
}

/// Nonzeros before level-1 node `ch` (its first leaf).
template <typename T>
csf_ptr_t leaf_start(const Ctx<T>& c, csf_ptr_t ch) {
  for (int l = 1; l < c.N - 1; ++l) ch = c.fptr[l][ch];
  return ch;
}

template <typename T>
void run_slices(const Ctx<T>& c, RangeFn<T> range, csf_ptr_t nroots, std::uint64_t rows, T* out,
                int nt) {
  const std::size_t Rs = c.R;
  const index_t* root = c.fids[0];
  const csf_ptr_t* rp = c.fptr[0];
  const csf_ptr_t grain = std::max<csf_ptr_t>(1, nroots / (static_cast<csf_ptr_t>(nt) * 64));
#pragma omp parallel for num_threads(nt) schedule(dynamic, grain)
  for (csf_ptr_t s = 0; s < nroots; ++s) {
    // Rows without nonzeros between this root and the previous one (and after the last)
    // are zeroed by the thread that owns the root, so every row is written exactly once.
    const std::uint64_t row = root[s];
    const std::uint64_t gap0 = s == 0 ? 0 : std::uint64_t{root[s - 1]} + 1;
    if (row > gap0) std::memset(out + gap0 * Rs, 0, (row - gap0) * Rs * sizeof(T));
    if (s == nroots - 1 && row + 1 < rows)
      std::memset(out + (row + 1) * Rs, 0, (rows - row - 1) * Rs * sizeof(T));
    range(c, rp[s], rp[s + 1], out + row * Rs);
  }
}

template <typename T>
void run_chunks(const Ctx<T>& c, RangeFn<T> range, csf_ptr_t nroots, std::uint64_t rows, T* out,
                int nt) {
  // Chunks of level-1 nodes balanced by nonzeros. A root node whose children all fall in
  // one chunk is written directly by that chunk's thread; the (at most two) roots a chunk
  // shares with its neighbours get partial rows, summed after the parallel loop.
  const std::size_t Rs = c.R;
  const index_t* root = c.fids[0];
  const csf_ptr_t* rp = c.fptr[0];
  const csf_ptr_t n1 = rp[nroots];
  const csf_ptr_t nchunks = std::max<csf_ptr_t>(1, std::min<csf_ptr_t>(n1, 8 * nt));
  const std::vector<csf_ptr_t> bounds =
      balanced_chunks(n1, nchunks, [&](csf_ptr_t i) { return leaf_start(c, i); });
  std::vector<T> partial(static_cast<std::size_t>(nchunks) * 2 * Rs);
  std::vector<std::int64_t> partial_row(static_cast<std::size_t>(nchunks) * 2, -1);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (csf_ptr_t i = 0; i < nchunks; ++i) {
    const csf_ptr_t c0 = bounds[static_cast<std::size_t>(i)];
    const csf_ptr_t c1 = bounds[static_cast<std::size_t>(i) + 1];
    if (c0 >= c1) continue;
    csf_ptr_t s = static_cast<csf_ptr_t>(std::upper_bound(rp, rp + nroots + 1, c0) - rp) - 1;
    std::size_t slot = static_cast<std::size_t>(i) * 2;
    for (; s < nroots && rp[s] < c1; ++s) {
      const csf_ptr_t cb = std::max(rp[s], c0), ce = std::min(rp[s + 1], c1);
      const std::uint64_t row = root[s];
      if (cb == rp[s]) {
        // The chunk holding a root's first child zeroes the empty rows before it (and
        // after the last root), as in run_slices.
        const std::uint64_t gap0 = s == 0 ? 0 : std::uint64_t{root[s - 1]} + 1;
        if (row > gap0) std::memset(out + gap0 * Rs, 0, (row - gap0) * Rs * sizeof(T));
        if (s == nroots - 1 && row + 1 < rows)
          std::memset(out + (row + 1) * Rs, 0, (rows - row - 1) * Rs * sizeof(T));
      }
      if (cb == rp[s] && ce == rp[s + 1]) {
        range(c, cb, ce, out + row * Rs);
      } else {  // only the first and the last root of a chunk can be cut
        range(c, cb, ce, partial.data() + slot * Rs);
        partial_row[slot++] = static_cast<std::int64_t>(row);
      }
    }
  }
  // The pieces of a cut root sit in consecutive slots: the first assigns, the rest add.
  std::int64_t last = -1;
  for (std::size_t p = 0; p < partial_row.size(); ++p) {
    if (partial_row[p] < 0) continue;
    T* o = out + static_cast<std::size_t>(partial_row[p]) * Rs;
    const T* q = partial.data() + p * Rs;
    if (partial_row[p] != last)
      std::memcpy(o, q, Rs * sizeof(T));
    else
      for (std::size_t r = 0; r < Rs; ++r) o[r] += q[r];
    last = partial_row[p];
  }
}

Isa resolve_isa(Isa isa) {
  if (isa == Isa::automatic) return isa_selected();
  TESSERA_EXPECTS(isa_supported(isa), "instruction set " << to_string(isa)
                                                         << " (--cpu-isa) is not supported by "
                                                            "this CPU or this build");
  return isa;
}

template <typename T>
RangeFn<T> range_fn(Isa isa) {
  switch (isa) {
#if TESSERA_CPU_MULTI_ISA
    case Isa::avx512:
      return &avx512::root_range<T>;
    case Isa::avx2:
      return &avx2::root_range<T>;
#endif
    default:
      return &base::root_range<T>;
  }
}

}  // namespace

template <typename T>
std::unique_ptr<CsfSet<T>> build_csf(const SparseTensor<T>& x, int threads) {
  check_kernel_input(x);
  const int N = x.order();
  std::vector<CsfTree<T>> trees(static_cast<std::size_t>(N));
  const int nt = std::min(team_size(threads), N);
  // One tree per thread at a time: each sort is sequential, the modes are independent.
  std::exception_ptr err;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int m = 0; m < N; ++m) {
    try {
      trees[static_cast<std::size_t>(m)] = build_tree(x, m);
    } catch (...) {
#pragma omp critical(tessera_csf_build_error)
      err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  return std::make_unique<CsfSet<T>>(x.dims, x.nnz(), std::move(trees));
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::automatic:
    case Isa::base:
      return true;
#if TESSERA_CPU_MULTI_ISA
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") != 0;
#endif
    default:
      return false;
  }
}

Isa isa_selected() {
  static const Isa best = [] {
    if (isa_supported(Isa::avx512)) return Isa::avx512;
    if (isa_supported(Isa::avx2)) return Isa::avx2;
    return Isa::base;
  }();
  return best;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::automatic:
      return "automatic";
    case Isa::base:
      return "base";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

template <typename T>
void mttkrp(const CsfSet<T>& x, int mode, const std::vector<const T*>& factors, int R, T* out,
            const MttkrpOptions& options) {
  const int N = x.order();
  TESSERA_EXPECTS(mode >= 0 && mode < N, "mode " << mode << " outside 0.." << N - 1);
  TESSERA_EXPECTS(R >= 1, "rank R must be positive, got " << R);
  TESSERA_EXPECTS(static_cast<int>(factors.size()) == N,
                  "need one factor pointer per mode: " << factors.size() << " for order " << N);
  const CsfTree<T>& t = x.tree(mode);
  const std::uint64_t rows = x.dims()[static_cast<std::size_t>(mode)];
  const Isa isa = resolve_isa(options.isa);
  if (N == 1) {
    mttkrp_order1(t, rows, R, out);
    return;
  }
  Ctx<T> c;
  c.N = N;
  c.R = static_cast<std::size_t>(R);
  for (int l = 0; l < N; ++l) {
    c.fids[l] = t.fids[l].data();
    if (l < N - 1) c.fptr[l] = t.fptr[l].data();
    const int m = t.mode_at_level[l];
    c.A[l] = factors[static_cast<std::size_t>(m)];
    TESSERA_EXPECTS(l == 0 || c.A[l] != nullptr || x.nnz() == 0, "factor " << m << " is null");
  }
  c.vals = t.vals.data();
  const auto nroots = static_cast<csf_ptr_t>(t.nodes(0));
  int nt = team_size(options.threads);
  if (options.min_nnz_per_thread > 0)
    nt = static_cast<int>(std::clamp<std::int64_t>(x.nnz() / options.min_nnz_per_thread, 1, nt));
  bool slices = true;
  if (options.schedule == Schedule::chunks) {
    slices = false;
  } else if (options.schedule == Schedule::automatic && nt > 1) {
    // Too few or too unequal slices for dynamic scheduling to balance: split by nonzeros.
    const auto nnz = static_cast<csf_ptr_t>(x.nnz());
    slices = nroots >= 16 * static_cast<csf_ptr_t>(nt) &&
             t.max_slice_nnz * 4 * static_cast<csf_ptr_t>(nt) <= nnz;
  }
  const RangeFn<T> range = range_fn<T>(isa);
  if (nroots == 0) {  // no nonzeros (and out may be null when the mode has no rows)
    if (rows > 0) std::memset(out, 0, rows * c.R * sizeof(T));
  } else if (slices)
    run_slices(c, range, nroots, rows, out, nt);
  else
    run_chunks(c, range, nroots, rows, out, nt);
}

template std::unique_ptr<CsfSet<float>> build_csf<float>(const SparseTensor<float>&, int);
template std::unique_ptr<CsfSet<double>> build_csf<double>(const SparseTensor<double>&, int);
template void mttkrp<float>(const CsfSet<float>&, int, const std::vector<const float*>&, int,
                            float*, const MttkrpOptions&);
template void mttkrp<double>(const CsfSet<double>&, int, const std::vector<const double*>&, int,
                             double*, const MttkrpOptions&);

}  // namespace tessera::kernels::cpu
