// tessera convert IN OUT: between FROSTT text (.tns, .tns.gz) and the HDF5 tensor store
// (.h5), in either direction, in parallel over the ranks (text is parsed and formatted on
// every rank; the store is read and written by every rank). A store written by convert has
// unique coordinates (has_duplicates = 0): repeated coordinates of a text input, or of a
// store with has_duplicates != 0 (streamed piece by piece), are summed in input order by
// io::UniqueWriter. Reports the throughput in nonzeros (data lines) per second and MB/s,
// next to a plain sequential read of the input when asked (--compare-sequential-read).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "io/dedup.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "io/tns.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct ConvertArgs {
  std::string in, out, index_base = "1", value_type = "float64", json, dedup_memory, scratch;
  std::uint64_t chunk = io::kDefaultChunkElems;
  double piece = 4.0 * (1 << 20);
  int compress = 0;
  bool compare_sequential = false;
  bool force = false;
};

/// Rank 0 reads the whole file with plain read() calls of 64 MiB and discards the bytes:
/// the floor a parser is measured against. Returns {bytes, seconds}; collective.
std::pair<double, double> sequential_read(const std::string& path, const comm::Communicator& c) {
  double r[2] = {0, 0};
  comm::run_collectively(c, [&] {
    if (c.rank() != 0) return;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
    std::vector<char> buf(std::size_t(64) << 20);
    Timer t;
    std::uint64_t total = 0;
    while (true) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        ::close(fd);
        throw InputError(path + ": read error: " + std::strerror(e));
      }
      if (n == 0) break;
      total += static_cast<std::uint64_t>(n);
    }
    r[1] = t.seconds();
    r[0] = static_cast<double>(total);
    ::close(fd);
  });
  c.broadcast(r, 2, 0);
  return {r[0], r[1]};
}

void run_convert(const ConvertArgs& a, const comm::MpiCommunicator& world) {
  Timer total;
  {
    // Every output checked before any work (io/output.hpp).
    io::OutputSet outputs;
    outputs.add_input("the input", a.in);
    outputs.add_output("output", a.out,
                       io::has_h5_extension(a.out) ? io::OutputKind::store : io::OutputKind::text);
    outputs.add_output("--json", a.json, io::OutputKind::record);
    outputs.validate(a.force, world);
  }
  io::H5WriteOptions wo;
  io::UniqueWriterOptions uo;
  comm::run_collectively(world, [&] {
    wo.value_type = io::parse_value_type(a.value_type);
    TESSERA_INPUT_CHECK(a.compress >= 0 && a.compress <= 9,
                        "--compress must be 0 (off) to 9, got " << a.compress);
    TESSERA_INPUT_CHECK(a.chunk >= 1 && a.chunk <= (std::uint64_t(1) << 28),
                        "--chunk must be 1 to 2^28 nonzeros, got " << a.chunk);
    TESSERA_INPUT_CHECK(a.piece >= 1 && a.piece < 1e12,
                        "--piece must be at least 1 (got " << a.piece << ")");
    if (!a.dedup_memory.empty()) uo.memory_limit = parse_bytes(a.dedup_memory, "--dedup-memory");
  });
  if (a.dedup_memory.empty()) uo.memory_limit = default_memory_limit(world) / 2;
  uo.policy = io::MergePolicy::sum;
  uo.scratch_dir = a.scratch;
  const auto piece = static_cast<nnz_t>(a.piece);
  wo.deflate = a.compress;
  wo.chunk_elems = a.chunk;

  std::pair<double, double> seq{0, 0};
  if (a.compare_sequential) {
    seq = sequential_read(a.in, world);
    char line[200];
    std::snprintf(line, sizeof(line),
                  "plain sequential read of %s (rank 0, 64 MiB read() calls): %s in %.3f s, "
                  "%.1f MB/s",
                  a.in.c_str(), human_bytes(seq.first).c_str(), seq.second,
                  seq.second > 0 ? seq.first / 1e6 / seq.second : 0.0);
    log::info(line);
  }

  // Read. A store is written with unique coordinates: a text input, or a store that may
  // hold repeats, goes through the unique writer (a store is streamed into it piece by
  // piece, a text file after the parallel parse).
  const bool in_store = io::is_tensor_store(a.in, world);
  const bool out_store = io::has_h5_extension(a.out);
  std::optional<io::H5TensorInfo> in_info;
  if (in_store) in_info = io::read_h5_info(a.in, world);
  const bool dedup = out_store && (!in_store || in_info->has_duplicates != 0);
  Timer t;
  io::TnsReadResult rr;
  io::H5Header meta;
  std::unique_ptr<io::UniqueWriter> uw;
  // Adds this rank's nonzeros, entry ids (input positions) from first_id, in rounds of
  // `piece` (every rank the same number of add() calls).
  auto add_all = [&](const SparseTensor<double>& x, nnz_t first_id) {
    const nnz_t rounds =
        world.allreduce_value<nnz_t>((x.nnz() + piece - 1) / piece, comm::ReduceOp::max);
    for (nnz_t r = 0; r < rounds; ++r) {
      const nnz_t at = std::min(r * piece, x.nnz());
      const nnz_t n = std::min(piece, x.nnz() - at);
      const index_t* ptr[kMaxOrder] = {};
      for (int m = 0; m < x.order(); ++m) ptr[m] = x.idx[static_cast<std::size_t>(m)].data() + at;
      uw->add(n, ptr, x.vals.data() + at, static_cast<std::uint64_t>(first_id + at));
    }
  };
  if (in_store && dedup) {
    const io::H5TensorInfo& h = *in_info;
    log::info(a.in + " has " +
              (h.has_duplicates == 1 ? std::string("repeated coordinates")
                                     : std::string("not been checked for repeated coordinates")) +
              " (has_duplicates = " + std::to_string(h.has_duplicates) +
              "): summing repeats while writing " + a.out);
    meta.source_index_base = h.source_index_base;
    meta.source = h.source;
    uo.sort_mode = io::longest_mode(h.dims);
    uw = std::make_unique<io::UniqueWriter>(a.out, h.order, world, uo);
    uw->expect(static_cast<std::uint64_t>(h.nnz));
    const int P = world.size(), me = world.rank();
    const auto lo = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * me / P);
    const auto hi = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * (me + 1) / P);
    std::unique_ptr<io::H5TensorReader> rd;
    comm::run_collectively(world, [&] { rd = std::make_unique<io::H5TensorReader>(a.in); });
    const nnz_t rounds =
        world.allreduce_value<nnz_t>((hi - lo + piece - 1) / piece, comm::ReduceOp::max);
    SparseTensor<double> x;
    for (nnz_t r = 0; r < rounds; ++r) {
      const nnz_t first = std::min(lo + r * piece, hi);
      const nnz_t n = std::min(piece, hi - first);
      comm::run_collectively(world, [&] {
        x = SparseTensor<double>(h.dims);
        if (n > 0) rd->read(first, n, &x);
      });
      const index_t* ptr[kMaxOrder] = {};
      for (int m = 0; m < h.order; ++m) ptr[m] = x.idx[static_cast<std::size_t>(m)].data();
      uw->add(n, ptr, x.vals.data(), static_cast<std::uint64_t>(first));
    }
    rr.global_nnz = h.nnz;
    rr.bytes = h.file_bytes;
    rr.local = SparseTensor<double>(h.dims);
  } else if (in_store) {
    io::H5ReadOptions ro;
    ro.by_block = false;  // keep the stored order
    auto hr = io::read_h5(a.in, world, ro);
    meta.source_index_base = hr.info.source_index_base;
    meta.has_duplicates = hr.info.has_duplicates;
    meta.sorted_mode = hr.info.sorted_mode;  // the stored order is kept
    meta.source = hr.info.source;
    rr = std::move(hr);
  } else {
    io::TnsReadOptions ro;
    ro.base = io::parse_index_base(a.index_base);
    rr = io::read_tns(a.in, world, ro);
    meta.source_index_base = rr.index_base;
    meta.source = "converted from " + a.in;
    if (dedup) {
      // Entry ids: positions in the file (the ranks hold consecutive runs of lines).
      const nnz_t mine = rr.local.nnz();
      std::vector<nnz_t> counts(static_cast<std::size_t>(world.size()), 0);
      world.allgather(&mine, counts.data(), 1);
      nnz_t first = 0;
      for (int q = 0; q < world.rank(); ++q) first += counts[static_cast<std::size_t>(q)];
      uo.sort_mode = io::longest_mode(rr.local.dims);
      uw = std::make_unique<io::UniqueWriter>(a.out, rr.local.order(), world, uo);
      uw->expect(static_cast<std::uint64_t>(rr.global_nnz));
      add_all(rr.local, first);
      const std::vector<std::uint64_t> dims = rr.local.dims;
      rr.local = SparseTensor<double>(dims);  // held by the writer now
    }
  }
  const double read_s = t.seconds();
  const nnz_t nnz = rr.global_nnz;
  const double in_bytes = static_cast<double>(rr.bytes);
  const double text_bytes = static_cast<double>(rr.text_bytes);
  {
    char line[320];
    std::snprintf(
        line, sizeof(line),
        "read %s: %lld nonzeros, order %d, dims %s, %s in %.3f s: %.3g nonzeros/s "
        "(data lines/s), %.1f MB/s%s",
        a.in.c_str(), static_cast<long long>(nnz), rr.local.order(),
        format_dims(rr.local.dims).c_str(), human_bytes(in_bytes).c_str(), read_s,
        read_s > 0 ? static_cast<double>(nnz) / read_s : 0.0,
        read_s > 0 ? in_bytes / 1e6 / read_s : 0.0,
        text_bytes > in_bytes
            ? (", " + human_bytes(text_bytes) + " of text at " +
               std::to_string(static_cast<long long>(text_bytes / 1e6 / read_s)) + " MB/s")
                  .c_str()
            : "");
    log::info(line);
  }

  // Write.
  t.reset();
  std::string mode = "text";
  io::UniqueStats us;
  nnz_t out_nnz = nnz;
  if (dedup) {
    meta.dims = rr.local.dims;
    us = uw->write(meta, wo);
    uw.reset();
    mode = us.write_mode;
    out_nnz = us.unique;
  } else if (out_store) {
    meta.dims = rr.local.dims;
    io::write_h5(a.out, rr.local, world, meta, wo);
    mode = wo.deflate > 0 ? "turns" : "direct";
  } else {
    io::write_tns(a.out, rr.local, world);
  }
  const double write_s = t.seconds();
  double out_bytes = 0;
  if (world.rank() == 0) {
    struct stat st {};
    if (::stat(a.out.c_str(), &st) == 0) out_bytes = static_cast<double>(st.st_size);
  }
  world.broadcast(&out_bytes, 1, 0);
  // A store's file may be larger than its data (the last chunk is allocated whole).
  const double data_bytes =
      out_store ? static_cast<double>(out_nnz) *
                      (4.0 * rr.local.order() + (wo.value_type == io::ValueType::float32 ? 4 : 8))
                : out_bytes;
  const double all_s = total.seconds();
  {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "wrote %s: %s (%s of data) in %.3f s, %.1f MB/s (%s); convert %.3f s in all on "
                  "%d rank(s): %.3g nonzeros/s, %.1f MB/s of input",
                  a.out.c_str(), human_bytes(out_bytes).c_str(), human_bytes(data_bytes).c_str(),
                  write_s, write_s > 0 ? data_bytes / 1e6 / write_s : 0.0, mode.c_str(),
                  read_s + write_s, world.size(),
                  read_s + write_s > 0 ? static_cast<double>(nnz) / (read_s + write_s) : 0.0,
                  read_s + write_s > 0 ? in_bytes / 1e6 / (read_s + write_s) : 0.0);
    log::info(line);
  }
  if (dedup) {
    char line[400];
    std::snprintf(line, sizeof(line),
                  "%s has unique coordinates (has_duplicates = 0): %lld nonzeros, %lld repeated "
                  "coordinates of the input summed (%.2f s sorting, %.2f s merging and writing%s)",
                  a.out.c_str(), static_cast<long long>(us.unique),
                  static_cast<long long>(us.repeats), us.sort_seconds, us.write_seconds,
                  us.runs > 0 ? (", " + std::to_string(us.runs) + " sorted runs, " +
                                 human_bytes(static_cast<double>(us.spilled_bytes)) +
                                 " spilled to scratch files")
                                    .c_str()
                              : "");
    log::info(line);
  }
  if (a.compare_sequential && seq.second > 0 && read_s > 0) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "parallel read ran at %.2fx the plain sequential read (%.1f vs %.1f MB/s)",
                  (in_bytes / read_s) / (seq.first / seq.second), in_bytes / 1e6 / read_s,
                  seq.first / 1e6 / seq.second);
    log::info(line);
  }
  if (!a.json.empty()) {
    nlohmann::json j = record_envelope("convert",
                                       {{"in", a.in},
                                        {"out", a.out},
                                        {"index_base", a.index_base},
                                        {"value_type", a.value_type},
                                        {"chunk", a.chunk},
                                        {"compress", a.compress},
                                        {"dedup_memory", uo.memory_limit},
                                        {"scratch", a.scratch},
                                        {"piece", piece}},
                                       world, "io", 0);
    j["tensor"] = {{"dims", rr.local.dims}, {"nnz", nnz}};
    if (dedup)
      j["dedup"] = {{"unique_nnz", us.unique},          {"repeats_summed", us.repeats},
                    {"sorted_runs", us.runs},           {"spilled_bytes", us.spilled_bytes},
                    {"memory_limit", uo.memory_limit},  {"sort_seconds", us.sort_seconds},
                    {"write_seconds", us.write_seconds}};
    j["read"] = {{"seconds", read_s},
                 {"bytes", in_bytes},
                 {"text_bytes", text_bytes},
                 {"nnz_per_s", read_s > 0 ? static_cast<double>(nnz) / read_s : 0.0},
                 {"bytes_per_s", read_s > 0 ? in_bytes / read_s : 0.0}};
    j["write"] = {{"seconds", write_s},
                  {"file_bytes", out_bytes},
                  {"data_bytes", data_bytes},
                  {"mode", mode},
                  {"bytes_per_s", write_s > 0 ? data_bytes / write_s : 0.0}};
    if (a.compare_sequential)
      j["sequential_read"] = {{"bytes", seq.first},
                              {"seconds", seq.second},
                              {"bytes_per_s", seq.second > 0 ? seq.first / seq.second : 0.0}};
    j["seconds_total"] = all_s;
    j["timing"] = timing_record("run", all_s, {{"io", read_s + write_s}});
    write_json(a.json, j, world);
  }
}

}  // namespace

void add_convert(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ConvertArgs>();
  auto* sub = app.add_subcommand(
      "convert",
      "Convert between FROSTT text (.tns, .tns.gz) and the HDF5 tensor store (.h5), in parallel");
  sub->add_option("in", a->in,
                  "Input tensor (.tns, .tns.gz or .h5; pyttb / Tensor Toolbox export_data "
                  "sptensor text is read as .tns, docs/formats.md)")
      ->required();
  sub->add_option("out", a->out,
                  "Output: .h5/.hdf5 writes the store; otherwise FROSTT text (.gz: compressed)")
      ->required();
  sub->add_option("--index-base", a->index_base, "Coordinate base of a text input: 1 | 0 | auto")
      ->check(CLI::IsMember({"1", "0", "auto"}));
  sub->add_option("--value-type", a->value_type, "Values in the store: float64 | float32")
      ->check(CLI::IsMember({"float64", "float32"}));
  sub->add_option("--chunk", a->chunk, "Nonzeros per HDF5 chunk (default 1048576)");
  sub->add_option("--compress", a->compress,
                  "Deflate level of the store, 0 (off, default: parallel writes) to 9 (ranks "
                  "then take turns writing)");
  sub->add_option("--dedup-memory", a->dedup_memory,
                  "To a store: host memory per rank for summing repeated coordinates (\"8G\"; "
                  "default: half of 3/4 of the node's memory shared by its ranks); over it, "
                  "sorted runs spill to the scratch folder");
  sub->add_option("--scratch", a->scratch,
                  "To a store: folder of the scratch files of sorted runs (default: the "
                  "output's folder)");
  sub->add_option("--piece", a->piece,
                  "Nonzeros each rank passes to the deduplication at a time (4Mi)");
  sub->add_flag("--compare-sequential-read", a->compare_sequential,
                "First time a plain sequential read of the input (rank 0) as the floor to "
                "compare the parallel read with");
  sub->add_option("--json", a->json, "Write the throughput record (JSON) here");
  add_force_option(sub, a->force);
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_convert(*a, world); }; });
}

}  // namespace tessera::driver
