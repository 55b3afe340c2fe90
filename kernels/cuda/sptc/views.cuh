// Internal to the CUDA SpTC (kernels/cuda/sptc/): the device views the
// row-accumulation and tensor-core kernels read, and their launchers. Not a public header.
//
// Terms (docs/sptc.md, "CUDA kernel"): the row side X is grouped into output rows (its
// output coordinates: free and batch letters, in output order, packed into a 64-bit row
// code); Y's output coordinates (its free letters) are packed into a column code and
// ranked (column c = rank among Y's distinct column codes). Only X nonzeros with at least
// one matching Y nonzero are kept ("matched X", sorted by row code, ties in input order);
// matched X nonzero x multiplies the run [mx_first[x], mx_first[x] + count) of Y sorted by
// matched key, and its products are [mx_off[x], mx_off[x + 1]) in the global product order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sptc.hpp"

namespace tessera::kernels::cuda::sptc {

using u32 = std::uint32_t;
using u64 = std::uint64_t;
using i64 = std::int64_t;

inline constexpr u32 kNone = 0xffffffffu;

// ---- error bits of the internal consistency checks (RowsView::err) ----
inline constexpr unsigned kErrCapacity = 1;  ///< a group's list outgrew its shared buffer
inline constexpr unsigned kErrCount = 2;     ///< the run wrote another count than the count pass
inline constexpr unsigned kErrTcCell = 4;    ///< a tensor-core cell missing from its row
inline constexpr unsigned kErrSpill = 8;     ///< spill rows: entries differ from the count

// ---- sizes of the row kernels ----
/// Rows of at most kSmallRow products are grouped (consecutive rows whose first product
/// falls in the same kSmallRow-aligned window of the product order), so a group holds at
/// most 2 kSmallRow - 1 products, sorted in shared memory (kGroupCap slots).
inline constexpr int kSmallRow = 1024;
inline constexpr int kGroupCap = 2 * kSmallRow;
inline constexpr int kGroupBlock = 256;
/// Dense rows: one block per (row, column tile), a double accumulator and a byte flag per
/// column of the tile in shared memory (with values also a chunk's products and sort keys); tiles
/// of at most kDenseTileMax columns, at most kDenseTilesMax tiles per row; rows with fewer products
/// than columns / kDenseRatio (and more than kSmallRow) spill to the global sort.
inline constexpr int kDenseBlock = 512;
inline constexpr int kDenseChunk = 1024;  ///< products per step (X offsets staged in shared)
inline constexpr int kDenseTileMax = 10240;
inline constexpr int kDenseTilesMax = 8;
inline constexpr int kDenseRatio = 4;
/// Dynamic shared memory of the dense-row kernel for tiles of W columns.
inline std::size_t dense_shared_bytes(int W, bool values) {
  return static_cast<std::size_t>(kDenseChunk + 1) * 8 +
         static_cast<std::size_t>(W) * (values ? 9 : 1) +
         (values ? static_cast<std::size_t>(kDenseChunk) * 12 : 0);
}

// ---- tensor-core blocks: 16 x 16, coordinates as codes / 16 (rows, keys, columns) ----
inline constexpr int kTile = 16;

/// What the tensor-core path adds to the rows (all null when it is off).
struct TcView {
  i64 nout = 0;                  ///< output blocks (row block, column block) with a block pair
  const u64* otkey = nullptr;    ///< per output block: row block << 32 | column block, sorted
  const u32* ostart = nullptr;   ///< nout + 1: its block pairs [ostart[o], ostart[o + 1])
  const u32* pa = nullptr;       ///< per pair: dense X block (A, rows x keys, row-major)
  const u32* pb = nullptr;       ///< per pair: dense Y block (B, keys x columns, row-major)
  const void* atiles = nullptr;  ///< 256 values per A block, of the precision's type
  const void* btiles = nullptr;
  const u32* smask = nullptr;   ///< nout x 16: bit cc of row rr set when the cell has a product
  const u32* irow = nullptr;    ///< row block x 16 + rr -> row (kNone: no such row)
  const u32* jcol = nullptr;    ///< column block x 16 + cc -> column (kNone: none)
  const u32* rowblk = nullptr;  ///< per row: its row block
  const unsigned char* rowlo = nullptr;  ///< per row: row code % 16
  const u32* xtile = nullptr;            ///< per matched X: its dense A block, else kNone
  const u32* ytile = nullptr;            ///< per sorted Y: its dense B block, else kNone
};

/// The matched structure the row kernels read (device pointers).
struct RowsView {
  i64 nrows = 0;
  i64 ncols = 0;
  const u32* rowstart = nullptr;   ///< nrows + 1: matched X of row r
  const i64* rowp = nullptr;       ///< nrows + 1: products of row r
  const i64* mx_off = nullptr;     ///< nmx + 1
  const u32* mx_first = nullptr;   ///< nmx: first sorted-Y position of the run
  const u32* mx_row = nullptr;     ///< nmx: row
  const double* mx_val = nullptr;  ///< nmx
  const u32* ysc = nullptr;        ///< ny, sorted-Y order: column
  const double* ysv = nullptr;     ///< ny, sorted-Y order: value
  TcView tc;                       ///< products of two dense blocks are skipped (tc.xtile set)
  unsigned* err = nullptr;         ///< error bits (kErr*)
};

/// Where the row kernels count (count pass) or write (run).
struct RowsOut {
  i64* rowcnt = nullptr;         ///< count pass: entries per row (atomically added)
  i64* itemcnt = nullptr;        ///< count pass: entries per dense item (row, column tile)
  const i64* rowoff = nullptr;   ///< run: nrows + 1, first entry of each row
  const i64* itemoff = nullptr;  ///< run: exclusive scan of itemcnt
  u32* ecol = nullptr;           ///< run: column of each entry (ascending within a row)
  double* eval = nullptr;        ///< run: value of each entry (sum in double)
};

/// Grouped small rows (rows_kernels.cu): one block per group of rows [gfirst[g], gend[g]).
void launch_row_groups(cudaStream_t s, const RowsView& v, const u32* gfirst, const u32* gend,
                       i64 ngroups, bool values, const RowsOut& out);
/// Dense rows (rows_kernels.cu): item k is row drows[k / ntiles], columns
/// [(k % ntiles) W, min(ncols, (k % ntiles + 1) W)).
void launch_dense_rows(cudaStream_t s, const RowsView& v, const u32* drows, i64 nitems, int ntiles,
                       int W, bool values, const RowsOut& out);
/// Tensor-core block products (tc_kernels.cu): one warp per output block; adds every
/// structural cell's value to its entry (found by binary search in its row).
void launch_tc_products(cudaStream_t s, TensorCorePrecision p, const TcView& tc, const i64* rowoff,
                        const u32* ecol, double* eval, unsigned* err);
/// Converts n doubles to the storage type of precision p (float for tf32, __nv_bfloat16,
/// __half) at dst (tc_kernels.cu). fp64 needs no conversion.
void launch_convert_tiles(cudaStream_t s, TensorCorePrecision p, i64 n, const double* src,
                          void* dst);
/// Bytes of one value of the storage type of precision p.
inline std::size_t tile_value_bytes(TensorCorePrecision p) {
  return p == TensorCorePrecision::fp64 ? 8 : p == TensorCorePrecision::tf32 ? 4 : 2;
}

}  // namespace tessera::kernels::cuda::sptc
