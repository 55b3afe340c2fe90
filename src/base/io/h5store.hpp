// HDF5 tensor store: format "tessera-tensor" version 1 (docs/formats.md, DESIGN §7).
//
// Layout (readable with h5py and h5dump):
//   attributes on /: format ("tessera-tensor"), format_version (1), order, dims (uint64[N]),
//                    nnz (uint64), value_type ("float64" | "float32"), index_base (0: the
//                    stored coordinates are 0-based), source_index_base (base of the text
//                    file it was converted from, -1 when none), has_duplicates (0 no: every
//                    store convert/generate write, io/dedup.hpp; 1 yes; -1 not checked;
//                    tiers 1-2 sum repeats, tier 3 refuses 1 and -1),
//                    source (free text), complete (1 once every writer finished),
//                    sorted_mode (optional: m when the nonzeros are stored in non-decreasing
//                    order of their mode-m index, as convert and generate write them;
//                    absent or -1: no such order)
//   /coords/mode<n>  uint32[nnz]   0-based coordinates of mode n, chunked 1-D
//   /values          float64[nnz] (or float32), chunked like the coordinates
//   /checksums       uint32[N+1][nchunks]: CRC-32 (zlib) of every chunk's little-endian
//                    bytes, rows /coords/mode0.. then /values (optional; verified on read)
//   /partition       optional block partition written by `tessera partition`: grid
//                    (uint32[N]), cuts/mode<n> (uint64[grid[n]+1]), offsets
//                    (uint64[nblocks+1]); the nonzeros are stored sorted by block, block b
//                    (row-major grid coordinates, mode 0 slowest) is [offsets[b],
//                    offsets[b+1]).
//
// Parallel writes with serial or parallel HDF5 builds: only independent I/O. Rank 0 creates
// the file with full-size datasets (early allocation) and closes it; then, for unfiltered
// datasets, every rank writes its nonzeros straight into the allocated chunks with pwrite()
// at the chunk addresses HDF5 reports (all ranks at once); for compressed datasets the ranks
// take turns writing through HDF5 (rank order). Reads are concurrent (every rank opens the
// file read-only). Files are written to PATH.tmp-HOST_PID and renamed by rank 0 once
// complete, so an interrupted write never leaves PATH.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "io/tns.hpp"
#include "tensor/sparse_tensor.hpp"

namespace tessera::io {

inline constexpr const char* kTensorStoreFormat = "tessera-tensor";
inline constexpr int kTensorStoreVersion = 1;
/// Default chunk length of the nonzero datasets (elements): 4 MiB of coordinates.
inline constexpr std::uint64_t kDefaultChunkElems = std::uint64_t(1) << 20;

enum class ValueType { float64, float32 };
/// "float64" | "float32".
std::string to_string(ValueType t);
/// "float64"/"double" | "float32"/"float"; throws InputError.
ValueType parse_value_type(const std::string& s);

/// Block partition stored under /partition.
struct H5Partition {
  std::vector<int> grid;                         ///< p_n, product = number of blocks
  std::vector<std::vector<std::uint64_t>> cuts;  ///< cuts[n]: grid[n]+1 bounds, 0..dims[n]
  std::vector<std::uint64_t> offsets;            ///< nblocks+1 positions, 0..nnz
  int nblocks() const { return offsets.empty() ? 0 : static_cast<int>(offsets.size()) - 1; }
  /// Block b's nonzeros: {first, count}.
  std::pair<nnz_t, nnz_t> block_range(int b) const;
  /// Grid coordinates of block b (row-major, mode 0 slowest: the rank order of
  /// partition::Distribution).
  std::vector<int> block_coords(int b) const;
};

/// What a store holds (its metadata, checked for consistency).
struct H5TensorInfo {
  std::string path;
  int format_version = kTensorStoreVersion;
  int order = 0;
  std::vector<std::uint64_t> dims;
  nnz_t nnz = 0;
  ValueType value_type = ValueType::float64;
  int source_index_base = -1;     ///< base of the text file converted from; -1 none/unknown
  int has_duplicates = -1;        ///< 0: no repeated coordinates, 1: some, -1: not checked
  int sorted_mode = -1;           ///< m: stored in non-decreasing mode-m index order; -1 none
  std::string source;             ///< where the tensor came from (free text)
  std::uint64_t chunk_elems = 0;  ///< chunk length of the nonzero datasets; 0 = contiguous
  int deflate = 0;                ///< deflate level of the nonzero datasets (0: none)
  bool has_checksums = false;     ///< /checksums present (verified on read)
  std::uint64_t file_bytes = 0;
  std::optional<H5Partition> partition;
};

/// True when the file starts with the HDF5 signature (at offset 0, 512, 1024, ...). Local.
bool is_hdf5_file(const std::string& path);
/// Collective: rank 0 looks, every rank gets its answer (so all ranks take the same path).
bool is_hdf5_file(const std::string& path, const comm::Communicator& c);
/// True when the name ends in .h5 or .hdf5 (any case).
bool has_h5_extension(const std::string& path);
/// Collective: is_hdf5_file(path, c) or has_h5_extension(path): read as a store (a file
/// named .h5 without the signature then fails with "not an HDF5 file").
bool is_tensor_store(const std::string& path, const comm::Communicator& c);

/// Which checks a read runs (H5TensorReader::read_direct). Every one is on by default;
/// turn one off only for data already checked (e.g. a later pass over a store whose first
/// pass verified everything): unchecked coordinates reach the kernels as they are.
struct H5ReadChecks {
  /// CRC-32 of every chunk the range touches (the chunks at the range ends are read whole
  /// for it). Only where the reader was opened with verify_checksums and the store has
  /// /checksums.
  bool checksums = true;
  bool coordinates = true;  ///< every coordinate < dims
  bool values = true;       ///< every value finite (and in float range when read as float)
  bool blocks = true;       ///< partitioned store: every nonzero inside its block's ranges
};

/// Reads ranges of nonzeros of one store; the building block of the collective readers
/// and of streaming (memory tier 3: a rank reads its block piece by piece). Local (not
/// collective); one thread at a time. Every range read is checked: the CRC of every chunk
/// it touches (whole chunks are read at the range ends when the store has checksums and
/// verification is on), coordinates < dims, finite values, and in a partitioned store that
/// every nonzero lies in its block's index ranges. Problems throw InputError naming the
/// file, the dataset and the position.
class H5TensorReader {
 public:
  /// Opens `path` read-only and validates its metadata (format, version, attributes
  /// against datasets, partition); throws InputError with what was expected and found.
  /// chunk_cache_bytes: HDF5's chunk cache per dataset (64 MiB by default, so compressed
  /// chunks are not inflated twice); streaming readers that read every chunk once pass 0.
  explicit H5TensorReader(const std::string& path, bool verify_checksums = true,
                          std::size_t chunk_cache_bytes = std::size_t(64) << 20);
  ~H5TensorReader();
  H5TensorReader(const H5TensorReader&) = delete;
  H5TensorReader& operator=(const H5TensorReader&) = delete;

  const H5TensorInfo& info() const;

  /// Nonzeros [first, first + count) (0 <= first, first + count <= nnz): idx[n] (n <
  /// order) and vals have room for `count` elements. T = double or float (float32 stores
  /// read into double exactly; float64 into float rounds).
  template <typename T>
  void read(nnz_t first, nnz_t count, index_t* const* idx, T* vals);
  /// Coordinates of one mode only, for [first, first + count).
  void read_mode(int mode, nnz_t first, nnz_t count, index_t* out);
  /// Appends nonzeros [first, first + count) to `out` (dims and order set if empty).
  void read(nnz_t first, nnz_t count, SparseTensor<double>* out);
  /// Nonzeros [first, first + count) of block b of the stored partition (first counted
  /// from the block's start).
  template <typename T>
  void read_block(int block, nnz_t first, nnz_t count, index_t* const* idx, T* vals);

  /// Fast read of nonzeros [first, first + count) (arguments as read(); T = double or
  /// float, converted from the stored value type exactly as read() converts): for stores
  /// whose nonzero datasets are unfiltered (no deflate) and allocated, chunked or
  /// contiguous, the byte ranges are computed from the datasets' file addresses (looked
  /// up once, at the first call, and kept) and read with pread() by `threads` threads
  /// (<= 0: one per hardware thread, at most one per MiB read; the calling thread is one of
  /// them) straight into
  /// the caller's buffers, which the same threads then check. The checks and their error
  /// messages are those of read() (file, dataset, position; when several elements are bad
  /// the one read() would report), restricted to `checks`. The result is bitwise
  /// identical to read(). Any other store (deflate or another filter, big-endian data, a
  /// user block, unallocated chunks, data past the end of the file) falls back to read()'s
  /// path (HDF5, one thread) with the same checks. Scratch: none when T is the stored
  /// type and checksums are off; else up to `threads` buffers of at most max(8 MiB (see
  /// set_direct_piece_bytes), one chunk). The first call costs (order + 1) x chunks HDF5
  /// index lookups. Several threads may call it at once on one reader (the tier-3 prefetch
  /// threads): the direct path's preads run side by side, every HDF5 call (the lookup,
  /// the fallback) one at a time under a lock of the reader. Other members are not
  /// thread-safe.
  template <typename T>
  void read_direct(nnz_t first, nnz_t count, index_t* const* idx, T* vals, int threads,
                   const H5ReadChecks& checks = {});
  /// Whether read_direct reads with pread (true) or falls back to read()'s path; looks the
  /// chunk addresses up if that was not done yet.
  bool direct_read_available();
  /// Why read_direct falls back ("" when it does not).
  std::string direct_read_fallback_reason();
  /// Bytes per read_direct task (one pread or one staged piece; with checksums, whole
  /// chunks): 8 MiB by default. Tuning and tests (small stores in many tasks).
  void set_direct_piece_bytes(std::uint64_t bytes);
  /// Drop-behind for read_direct's pread path: every range read is then dropped from the
  /// page cache (posix_fadvise DONTNEED), so a store larger than memory does not evict
  /// everything else, and repeated passes read the disk, not memory. Pages read before are
  /// not touched: evict_file drops (and first flushes) the whole file. Not for HDF5's
  /// fallback path.
  void set_drop_behind(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Collective: every rank opens and validates the store; a problem anywhere throws the
/// same CollectiveError on every rank.
H5TensorInfo read_h5_info(const std::string& path, const comm::Communicator& c);

struct H5ReadOptions {
  /// Rank 0 shows a progress bar on a terminal, log lines otherwise.
  bool progress = true;
  /// Threads per rank reading with H5TensorReader::read_direct; 0 = OpenMP's thread count
  /// (omp_get_max_threads()).
  int threads = 0;
  bool verify_checksums = true;
  /// When the store holds a partition of exactly c.size() blocks, rank r reads block r.
  bool by_block = true;
  /// Nonzeros read per call (progress granularity); 0 = 16 Mi.
  nnz_t piece = 0;
  /// The run computes in single precision (--precision float): a value float cannot
  /// represent (magnitude over 3.4e38, or a nonzero that would round to 0) is refused,
  /// naming /values[position], instead of becoming Inf or 0 later.
  bool float_values = false;
};

struct H5ReadResult : TnsReadResult {
  H5TensorInfo info;
  bool by_block = false;  ///< this rank holds block rank() of info.partition
};

/// Collective, like read_tns: this rank's share of the nonzeros (equal contiguous shares of
/// the stored order, or its block, see H5ReadOptions::by_block), global 0-based
/// coordinates, dims = the stored dims. Repeated coordinates are kept (consumers sum them).
/// Any problem (open, layout, checksum, coordinate >= dims, NaN/Inf, a block's nonzero
/// outside its index ranges) throws the same CollectiveError on every rank, naming the
/// file and, for data, the dataset and the position of the first bad element.
H5ReadResult read_h5(const std::string& path, const comm::Communicator& c,
                     const H5ReadOptions& opt = {});

/// verify_h5's check of the store's has_duplicates = 0.
struct H5VerifyOptions {
  /// Host memory per rank for the sort that counts distinct coordinates (a store not in a
  /// strictly increasing order; io::UniqueWriterOptions::memory_limit): over it, sorted runs
  /// spill to scratch files.
  std::uint64_t memory_limit = std::uint64_t(1) << 30;
  /// Folder of those scratch files; "": the store's folder if it is writable, else the
  /// system's temporary folder.
  std::string scratch_dir;
};

/// What verify_h5 found about repeated coordinates.
struct H5VerifyResult {
  /// How has_duplicates = 0 was checked: "order" (every range read is strictly increasing
  /// in the store's order, (mode sorted_mode, coordinate) or the coordinate's, so no
  /// coordinate repeats: no sort), "sort" (distinct coordinates counted by
  /// io::UniqueWriter) or "" (not checked: the store says it may hold repeats, which runs
  /// sum; has_duplicates 1 or -1).
  std::string unique_check;
};

/// Collective: reads and checks every nonzero (as read_h5) without keeping them; memory is
/// one piece per rank. A store that says has_duplicates = 0 is also checked for repeated
/// coordinates (a run trusts the attribute and would count a repeat twice): the order of
/// each rank's range first, and where that does not prove it, a count of the distinct
/// coordinates (a second read and a sort). A repeat throws the same InputError on every
/// rank, with the counts and the fix.
H5VerifyResult verify_h5(const std::string& path, const comm::Communicator& c,
                         const H5ReadOptions& opt = {}, const H5VerifyOptions& v = {});

/// Read floor of a file: reads its first min(max_bytes, file size) bytes (max_bytes 0: the
/// whole file) with sequential pread()s of 16 MiB blocks, the blocks handed out in order
/// to `threads` threads (<= 0: one per hardware thread), and returns bytes per second.
/// Warm (cold = false): through the page cache, so a file read (or written) recently is
/// served from memory and the result is the cache's bandwidth. Cold: the file is evicted
/// first (evict_file) and every block after it is read (drop-behind), so the result is the
/// disk's, where the system honours the eviction. Local (not collective). Throws InputError
/// when the file cannot be read; 0 for an empty file.
double measure_read_bandwidth(const std::string& path, std::uint64_t max_bytes, int threads,
                              bool cold = false);

/// Flushes the file's dirty pages and drops its pages from the page cache (fdatasync, then
/// posix_fadvise DONTNEED); true when both calls succeeded. Local; needs no privileges.
bool evict_file(const std::string& path);

struct H5WriteOptions {
  ValueType value_type = ValueType::float64;
  /// Chunk length of the nonzero datasets (elements; clamped to nnz), 1 .. 2^28.
  std::uint64_t chunk_elems = kDefaultChunkElems;
  /// 0: no compression (parallel direct writes); 1..9: shuffle + deflate at that level
  /// (the ranks take turns writing through HDF5).
  int deflate = 0;
  enum class Mode { automatic, direct, turns };
  /// automatic: direct when uncompressed, else turns. turns: always through HDF5.
  Mode mode = Mode::automatic;
  bool progress = true;
  /// write_h5: nonzeros per rank and round (progress granularity); 0 = 16 Mi.
  nnz_t piece = 0;
  /// Testing only: after this many write() rounds the last rank fails (an interrupted
  /// write). -1: never.
  int fail_after_rounds = -1;
};

/// Global description of a store to write. dims.size() is the order.
struct H5Header {
  std::vector<std::uint64_t> dims;
  nnz_t nnz = 0;
  int source_index_base = -1;
  int has_duplicates = -1;
  /// m >= 0: the writers promise the store's non-decreasing mode-m order (attribute
  /// sorted_mode; written only then). -1: no promise.
  int sorted_mode = -1;
  std::string source;
};

/// A run of nonzeros one rank writes: positions [first, first + count) of the store.
struct H5Piece {
  nnz_t first = 0;
  nnz_t count = 0;
  const index_t* idx[kMaxOrder] = {};  ///< idx[n][k]: mode n of nonzero first + k
  const double* vals = nullptr;
};

/// Collective streaming writer: every rank writes disjoint runs of positions, in as many
/// rounds as it likes (every rank calls write() the same number of times, possibly with no
/// pieces). Nothing appears at `path` until commit(); destruction without commit (an error
/// on any rank, agreed collectively) removes the temporary file.
class H5TensorWriter {
 public:
  /// Collective: rank 0 creates PATH.tmp-HOST_PID (io/output.hpp) with datasets of h.nnz
  /// nonzeros. A character device or FIFO at `path` is refused (CollectiveError).
  H5TensorWriter(const std::string& path, const H5Header& h, const comm::Communicator& c,
                 const H5WriteOptions& o = {});
  ~H5TensorWriter();
  H5TensorWriter(const H5TensorWriter&) = delete;
  H5TensorWriter& operator=(const H5TensorWriter&) = delete;

  /// Collective: writes this rank's pieces. Checks coordinates < dims, finite values
  /// (and float32 range), positions inside [0, nnz); problems throw CollectiveError.
  void write(const std::vector<H5Piece>& pieces);
  /// Collective: checks that every position was written exactly once, writes the
  /// checksums and the partition (validated), marks the file complete and renames it.
  void commit(const H5Partition* partition = nullptr);

  const std::string& temp_path() const;
  /// "direct" (parallel pwrite into the allocated chunks) or "turns" (ranks take turns).
  std::string mode() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Collective, like write_tns: writes every rank's nonzeros (rank order, then local order)
/// as a store at `path`. `meta.dims` empty: the allreduced dims of x; meta.nnz is ignored
/// (the global count). Coordinates must be < dims and values finite (CollectiveError).
void write_h5(const std::string& path, const SparseTensor<double>& x, const comm::Communicator& c,
              H5Header meta = {}, const H5WriteOptions& o = {});

}  // namespace tessera::io
