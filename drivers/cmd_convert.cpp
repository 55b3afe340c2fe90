// tessera convert IN OUT: between FROSTT text (.tns, .tns.gz) and the HDF5 tensor store
// (.h5), in either direction, in parallel over the ranks (text is parsed and formatted on
// every rank; the store is read and written by every rank). Reports the throughput in
// nonzeros (data lines) per second and MB/s, next to a plain sequential read of the input
// when asked (--compare-sequential-read).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "io/h5store.hpp"
#include "io/tns.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct ConvertArgs {
  std::string in, out, index_base = "1", value_type = "float64", json;
  std::uint64_t chunk = io::kDefaultChunkElems;
  int compress = 0;
  bool compare_sequential = false;
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
  io::H5WriteOptions wo;
  comm::run_collectively(world, [&] {
    wo.value_type = io::parse_value_type(a.value_type);
    TESSERA_INPUT_CHECK(a.compress >= 0 && a.compress <= 9,
                        "--compress must be 0 (off) to 9, got " << a.compress);
    TESSERA_INPUT_CHECK(a.chunk >= 1 && a.chunk <= (std::uint64_t(1) << 28),
                        "--chunk must be 1 to 2^28 nonzeros, got " << a.chunk);
  });
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

  // Read.
  const bool in_store = io::is_tensor_store(a.in, world);
  const bool out_store = io::has_h5_extension(a.out);
  Timer t;
  io::TnsReadResult rr;
  io::H5Header meta;
  if (in_store) {
    io::H5ReadOptions ro;
    ro.by_block = false;  // keep the stored order
    auto hr = io::read_h5(a.in, world, ro);
    meta.source_index_base = hr.info.source_index_base;
    meta.has_duplicates = hr.info.has_duplicates;
    meta.source = hr.info.source;
    rr = std::move(hr);
  } else {
    io::TnsReadOptions ro;
    ro.base = io::parse_index_base(a.index_base);
    rr = io::read_tns(a.in, world, ro);
    meta.source_index_base = rr.index_base;
    meta.source = "converted from " + a.in;
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
  if (out_store) {
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
      out_store ? static_cast<double>(nnz) *
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
  if (a.compare_sequential && seq.second > 0 && read_s > 0) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "parallel read ran at %.2fx the plain sequential read (%.1f vs %.1f MB/s)",
                  (in_bytes / read_s) / (seq.first / seq.second), in_bytes / 1e6 / read_s,
                  seq.first / 1e6 / seq.second);
    log::info(line);
  }
  if (!a.json.empty()) {
    nlohmann::json j;
    j["command"] = "convert";
    j["options"] = {{"in", a.in},
                    {"out", a.out},
                    {"index_base", a.index_base},
                    {"value_type", a.value_type},
                    {"chunk", a.chunk},
                    {"compress", a.compress}};
    j["machine"] = machine_json(world, "io", 0);
    j["tensor"] = {{"dims", rr.local.dims}, {"nnz", nnz}};
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
    write_json(a.json, j, world);
  }
}

}  // namespace

void add_convert(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ConvertArgs>();
  auto* sub = app.add_subcommand(
      "convert",
      "Convert between FROSTT text (.tns, .tns.gz) and the HDF5 tensor store (.h5), in parallel");
  sub->add_option("in", a->in, "Input tensor (.tns, .tns.gz or .h5)")->required();
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
  sub->add_flag("--compare-sequential-read", a->compare_sequential,
                "First time a plain sequential read of the input (rank 0) as the floor to "
                "compare the parallel read with");
  sub->add_option("--json", a->json, "Write the throughput record (JSON) here");
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_convert(*a, world); }; });
}

}  // namespace tessera::driver
