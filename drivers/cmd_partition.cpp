// tessera partition IN.h5 --grid 2x2x1 [--out OUT.h5]: stores a block partition in an HDF5
// tensor store, so that a run on as many ranks as blocks reads only its block by hyperslab.
//
// The grid cuts are those of the grid scheme (partition::detail::balanced_cuts: each mode cut
// into p_n index ranges balanced by nonzero count), so a run with --partition grid on the
// stored grid cuts the same chunks and moves no nonzero between ranks. The nonzeros are
// rewritten sorted by block (a stable sort: within a block they keep the stored order), to a
// new file, or in place through a temporary file renamed over the input.
//
// Streaming: the ranks split the stored nonzeros into equal shares. Memory per rank is one
// mode of its share (4 bytes per nonzero, for the cuts) and then one piece (--piece,
// default 16 Mi nonzeros) at a time: a counting pass gives every rank its positions in each
// block, a writing pass reads each piece again, buckets it by block and writes the buckets.
#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "partition/detail.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct PartitionArgs {
  std::string in, out, grid;
  int blocks = 0;
  double piece = 16.0 * (1 << 20);
  bool force = false;
  std::string json;  ///< --json: the run record
};

/// Block of every nonzero of a piece (row-major grid coordinates, mode 0 slowest).
void block_ids(const io::H5Partition& p, std::size_t n, index_t* const* idx,
               std::vector<std::int32_t>& out) {
  out.assign(n, 0);
  std::int32_t stride = 1;
  for (int m = static_cast<int>(p.grid.size()) - 1; m >= 0; --m) {
    const int g = p.grid[static_cast<std::size_t>(m)];
    if (g > 1) {
      const auto& b = p.cuts[static_cast<std::size_t>(m)];
      for (std::size_t k = 0; k < n; ++k) {
        const auto c =
            std::upper_bound(b.begin() + 1, b.end(), std::uint64_t(idx[m][k])) - (b.begin() + 1);
        out[k] += static_cast<std::int32_t>(c) * stride;
      }
    }
    stride *= g;
  }
}

void run_partition(const PartitionArgs& a, const comm::MpiCommunicator& world) {
  Timer total;
  const std::string out = a.out.empty() ? a.in : a.out;
  {
    // The output checked before any work (io/output.hpp): without --out the input is
    // rewritten in place (asked for); an --out that is the input is refused.
    io::OutputSet outputs;
    outputs.add_input("the input", a.in);
    if (a.out.empty())
      outputs.add_output("the input (rewritten in place)", a.in, io::OutputKind::store,
                         "the input");
    else
      outputs.add_output("--out", a.out, io::OutputKind::store, "",
                         "leave out --out to rewrite the input in place");
    outputs.add_output("--json", a.json, io::OutputKind::record);
    outputs.validate(a.force, world);
  }
  const io::H5TensorInfo info = io::read_h5_info(a.in, world);
  const int N = info.order;
  const int P = world.size(), me = world.rank();
  std::vector<int> grid;
  nnz_t piece = 0;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(io::has_h5_extension(out),
                        "partition writes an HDF5 store: the output '"
                            << out << "' must end in .h5 (convert text files first)");
    TESSERA_INPUT_CHECK(
        a.grid.empty() || a.blocks == 0,
        "give the grid (--grid 2x2x1) or the number of blocks (--blocks 8), not both");
    TESSERA_INPUT_CHECK(!a.grid.empty() || a.blocks != 0,
                        "give the grid (--grid 2x2x1) or the number of blocks (--blocks 8)");
    TESSERA_INPUT_CHECK(a.piece >= 1 && a.piece < 1e12, "--piece must be at least 1");
    piece = static_cast<nnz_t>(a.piece);
    if (!a.grid.empty()) {
      const auto g = parse_dims(a.grid, "grid");
      TESSERA_INPUT_CHECK(static_cast<int>(g.size()) == N, "grid " << a.grid << " has " << g.size()
                                                                   << " entries but the tensor has "
                                                                   << N << " modes");
      std::uint64_t prod = 1;
      for (std::size_t n = 0; n < g.size(); ++n) {
        TESSERA_INPUT_CHECK(g[n] <= info.dims[n],
                            "grid " << a.grid << ": mode " << n << " has length " << info.dims[n]
                                    << " and cannot be cut into " << g[n] << " ranges");
        prod *= g[n];
        TESSERA_INPUT_CHECK(prod <= (std::uint64_t(1) << 20),
                            "grid " << a.grid << ": more than 2^20 blocks");
        grid.push_back(static_cast<int>(g[n]));
      }
    } else {
      TESSERA_INPUT_CHECK(a.blocks >= 1 && a.blocks <= (1 << 20),
                          "--blocks must be 1 to 2^20, got " << a.blocks);
      grid = partition::choose_grid(info.dims, a.blocks);
    }
  });
  io::H5Partition part;
  part.grid = grid;
  const int nblocks = std::accumulate(grid.begin(), grid.end(), 1, std::multiplies<int>());

  const nnz_t first = static_cast<nnz_t>(static_cast<__int128>(info.nnz) * me / P);
  const nnz_t count = static_cast<nnz_t>(static_cast<__int128>(info.nnz) * (me + 1) / P) - first;
  std::unique_ptr<io::H5TensorReader> rd;
  comm::run_collectively(world, [&] { rd = std::make_unique<io::H5TensorReader>(a.in); });

  // 1. Cuts: the grid scheme's, from one mode of this rank's share at a time.
  Timer t;
  for (int n = 0; n < N; ++n) {
    const int g = grid[static_cast<std::size_t>(n)];
    if (g == 1) {
      part.cuts.push_back({0, info.dims[static_cast<std::size_t>(n)]});
      continue;
    }
    std::vector<index_t> col;
    comm::run_collectively(world, [&] {
      col.resize(static_cast<std::size_t>(count));
      for (nnz_t done = 0; done < count; done += piece)
        rd->read_mode(n, first + done, std::min(piece, count - done),
                      col.data() + static_cast<std::size_t>(done));
    });
    part.cuts.push_back(partition::detail::balanced_cuts(
        col.data(), col.size(), info.dims[static_cast<std::size_t>(n)], g, world));
  }
  const double cut_s = t.seconds();

  // 2. Counting pass: this rank's nonzeros per block, then everyone's positions.
  t.reset();
  std::vector<std::int64_t> mine(static_cast<std::size_t>(nblocks), 0);
  {
    std::vector<std::vector<index_t>> cols(static_cast<std::size_t>(N));
    std::vector<std::int32_t> ids;
    comm::run_collectively(world, [&] {
      index_t* p[kMaxOrder] = {};
      for (nnz_t done = 0; done < count; done += piece) {
        const nnz_t n = std::min(piece, count - done);
        for (int m = 0; m < N; ++m) {
          if (grid[static_cast<std::size_t>(m)] == 1) continue;
          cols[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(n));
          p[m] = cols[static_cast<std::size_t>(m)].data();
          rd->read_mode(m, first + done, n, p[m]);
        }
        block_ids(part, static_cast<std::size_t>(n), p, ids);
        for (std::int32_t b : ids) ++mine[static_cast<std::size_t>(b)];
      }
    });
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(nblocks) * static_cast<std::size_t>(P));
  world.allgather(mine.data(), all.data(), mine.size());
  part.offsets.assign(static_cast<std::size_t>(nblocks) + 1, 0);
  std::vector<std::int64_t> cursor(static_cast<std::size_t>(nblocks), 0);
  for (int b = 0; b < nblocks; ++b) {
    std::int64_t before = 0, sum = 0;
    for (int q = 0; q < P; ++q) {
      const std::int64_t v = all[static_cast<std::size_t>(q) * nblocks + b];
      if (q < me) before += v;
      sum += v;
    }
    part.offsets[static_cast<std::size_t>(b) + 1] =
        part.offsets[static_cast<std::size_t>(b)] + static_cast<std::uint64_t>(sum);
    cursor[static_cast<std::size_t>(b)] =
        static_cast<std::int64_t>(part.offsets[static_cast<std::size_t>(b)]) + before;
  }
  const double count_s = t.seconds();

  // 3. Writing pass: each piece bucketed by block (stable), each bucket at its position.
  t.reset();
  io::H5Header h;
  h.dims = info.dims;
  h.nnz = info.nnz;
  h.source_index_base = info.source_index_base;
  h.has_duplicates = info.has_duplicates;
  h.source = info.source;
  io::H5WriteOptions wo;
  wo.value_type = info.value_type;
  wo.deflate = info.deflate;
  if (info.chunk_elems > 0) wo.chunk_elems = info.chunk_elems;
  io::H5TensorWriter w(out, h, world, wo);
  const nnz_t rounds =
      world.allreduce_value<nnz_t>((count + piece - 1) / piece, comm::ReduceOp::max);
  SparseTensor<double> x(info.dims), sorted(info.dims);
  std::vector<std::int32_t> ids;
  for (nnz_t r = 0; r < rounds; ++r) {
    const nnz_t at = r * piece;
    const nnz_t n = at < count ? std::min(piece, count - at) : 0;
    std::vector<io::H5Piece> pieces;
    comm::run_collectively(world, [&] {
      x.clear();
      if (n > 0) rd->read(first + at, n, &x);
      index_t* p[kMaxOrder];
      for (int m = 0; m < N; ++m) p[m] = x.idx[static_cast<std::size_t>(m)].data();
      block_ids(part, static_cast<std::size_t>(n), p, ids);
      std::vector<std::int64_t> start(static_cast<std::size_t>(nblocks) + 1, 0);
      for (std::int32_t b : ids) ++start[static_cast<std::size_t>(b) + 1];
      for (int b = 0; b < nblocks; ++b)
        start[static_cast<std::size_t>(b) + 1] += start[static_cast<std::size_t>(b)];
      for (int m = 0; m < N; ++m)
        sorted.idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(n));
      sorted.vals.resize(static_cast<std::size_t>(n));
      std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
      for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
        const auto to = static_cast<std::size_t>(fill[static_cast<std::size_t>(ids[k])]++);
        for (int m = 0; m < N; ++m)
          sorted.idx[static_cast<std::size_t>(m)][to] = x.idx[static_cast<std::size_t>(m)][k];
        sorted.vals[to] = x.vals[k];
      }
      for (int b = 0; b < nblocks; ++b) {
        const std::int64_t s0 = start[static_cast<std::size_t>(b)];
        const std::int64_t len = start[static_cast<std::size_t>(b) + 1] - s0;
        if (len == 0) continue;
        io::H5Piece pc;
        pc.first = cursor[static_cast<std::size_t>(b)];
        pc.count = len;
        for (int m = 0; m < N; ++m) pc.idx[m] = sorted.idx[static_cast<std::size_t>(m)].data() + s0;
        pc.vals = sorted.vals.data() + s0;
        pieces.push_back(pc);
        cursor[static_cast<std::size_t>(b)] += len;
      }
    });
    w.write(pieces);
  }
  rd.reset();  // the input may be the output: close it before the rename
  w.commit(&part);
  const double write_s = t.seconds();

  nnz_t mn = info.nnz, mx = 0;
  for (int b = 0; b < nblocks; ++b) {
    const nnz_t c = part.block_range(b).second;
    mn = std::min(mn, c);
    mx = std::max(mx, c);
  }
  const double mean = static_cast<double>(info.nnz) / nblocks;
  std::string g;
  for (std::size_t n = 0; n < grid.size(); ++n) g += (n ? "x" : "") + std::to_string(grid[n]);
  char line[400];
  std::snprintf(line, sizeof(line),
                "partitioned %s -> %s: grid %s (%d blocks), nonzeros per block min %lld, mean "
                "%.1f, max %lld (imbalance %.3f); %.2f s cuts, %.2f s counting, %.2f s writing "
                "(%s), %.2f s in all on %d rank(s)",
                a.in.c_str(), out.c_str(), g.c_str(), nblocks, static_cast<long long>(mn), mean,
                static_cast<long long>(mx), mean > 0 ? static_cast<double>(mx) / mean : 1.0, cut_s,
                count_s, write_s, w.mode().c_str(), total.seconds(), P);
  log::info(line);
  if (!a.json.empty()) {
    nlohmann::json j = record_envelope("partition", nlohmann::json::object(), world, "io", 0);
    j["tensor"] = {{"dims", info.dims}, {"nnz", info.nnz}};
    j["partition"] = {{"grid", grid},
                      {"blocks", nblocks},
                      {"min_block_nnz", mn},
                      {"max_block_nnz", mx},
                      {"imbalance", mean > 0 ? static_cast<double>(mx) / mean : 1.0}};
    j["output"] = out;
    const double all_s = total.seconds();
    j["phases_seconds"] = {
        {"cuts", cut_s}, {"count", count_s}, {"write", write_s}, {"total", all_s}};
    j["timing"] = timing_record("run", all_s, {{"io", write_s}});
    write_json(a.json, j, world);
  }
}

}  // namespace

void add_partition(CLI::App& app, Runner& run) {
  auto a = std::make_shared<PartitionArgs>();
  auto* sub = app.add_subcommand(
      "partition",
      "Store a block partition in an HDF5 tensor store (nonzeros rewritten sorted by block), so "
      "each rank of a run reads only its block");
  sub->add_option("in", a->in, "HDF5 tensor store (.h5; convert text files first)")->required();
  sub->add_option("--grid", a->grid,
                  "Block grid, e.g. 2x2x1: mode n cut into p_n ranges balanced by nonzero count "
                  "(a run on prod(p_n) ranks reads one block each)");
  sub->add_option("--blocks", a->blocks,
                  "Number of blocks; the grid shape is chosen as the runs' automatic grid");
  sub->add_option("-o,--out", a->out, "Output store (default: rewrite the input in place)");
  sub->add_option("--piece", a->piece,
                  "Nonzeros each rank reads and writes at a time (default 16Mi)");
  sub->add_option("--json", a->json, "Write the run record (JSON) here (docs/run-record.md)");
  add_force_option(sub, a->force);
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_partition(*a, world); }; });
}

}  // namespace tessera::driver
