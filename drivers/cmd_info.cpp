// tessera info: what a tensor or model file holds. FROSTT text (and Tensor Toolbox sptensor
// text): read, distribute and describe. HDF5 tensor store: its attributes, layout and
// partition balance from the metadata alone (no nonzero is read); --verify reads and checks
// every nonzero, --stats adds the statistics the text files get. Model files and
// checkpoints (tessera cp/tucker --out, --checkpoint-every): kind, shape, ranks, precision,
// fit, iterations and the run's options. --json FILE: the same as a run record
// (docs/run-record.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "common.hpp"
#include "io/checkpoint.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"
#include "io/output.hpp"
#include "tensor/stats.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct InfoArgs {
  LoadOptions load;
  bool stats = false;
  bool verify = false;
  bool force = false;
  std::string json;  ///< --json: the run record
  /// --verify's count of distinct coordinates (where the stored order does not prove them
  /// unique): host memory per rank and the folder of its scratch files.
  std::string dedup_memory, scratch;
};

/// The statistics as record fields.
nlohmann::json stats_json(const TensorStats& s) {
  nlohmann::json modes = nlohmann::json::array();
  for (const ModeStats& m : s.modes)
    modes.push_back({{"dim", m.dim},
                     {"nonempty_slices", m.nonempty_slices},
                     {"max_slice_nnz", m.max_slice_nnz},
                     {"mean_slice_nnz", m.mean_slice_nnz}});
  return {{"order", s.order},
          {"dims", s.dims},
          {"nnz", s.nnz},
          {"density", s.density},
          {"min_value", s.min_value},
          {"max_value", s.max_value},
          {"norm", s.norm},
          {"modes", modes}};
}

/// Reads the tensor, prints its statistics (rank 0) and, when `rec` is given, adds them to
/// it (rank 0): `stats`, `read`, `duplicates_summed`; returns the read seconds.
double print_stats(const InfoArgs& a, const comm::MpiCommunicator& world, nlohmann::json* rec) {
  Loaded li;
  auto d = load_and_distribute<double>(a.load, partition::Scheme::nnz, world, &li);
  // Gather the (deduplicated) tensor on rank 0 for the statistics.
  const int P = world.size();
  const int N = d.block.order();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(P), 0);
  counts[0] = d.block.nnz();
  SparseTensor<double> all(d.dist.dims);
  for (int n = 0; n < N; ++n)
    all.idx[static_cast<std::size_t>(n)] =
        world.alltoallv(d.block.idx[static_cast<std::size_t>(n)], counts);
  all.vals = world.alltoallv(d.block.vals, counts);
  if (world.rank() == 0) {
    auto s = compute_stats(all);
    std::printf("%s", format_stats(s).c_str());
    std::printf("file: %s (%s, %s of text), index base %d, read in %.3f s\n", a.load.path.c_str(),
                human_bytes(static_cast<double>(li.read.bytes)).c_str(),
                human_bytes(static_cast<double>(li.read.text_bytes)).c_str(), li.read.index_base,
                li.read_seconds);
    std::printf("repeated coordinates summed: %lld\n", static_cast<long long>(d.dist.duplicates));
    std::fflush(stdout);
    if (rec != nullptr) {
      (*rec)["stats"] = stats_json(s);
      (*rec)["read"] = {{"bytes", li.read.bytes},
                        {"text_bytes", li.read.text_bytes},
                        {"index_base", li.read.index_base},
                        {"seconds", li.read_seconds}};
      (*rec)["duplicates_summed"] = d.dist.duplicates;
    }
  }
  return li.read_seconds;
}

std::string join(const std::vector<std::uint64_t>& v) {
  std::ostringstream os;
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  return os.str();
}

std::string grid_text(const std::vector<int>& g) {
  std::ostringstream os;
  for (std::size_t i = 0; i < g.size(); ++i) os << (i ? "x" : "") << g[i];
  return os.str();
}

/// The store's metadata as text (rank 0 prints it); `rec` (optional) gets the same as
/// record fields: `tensor` and `store`.
std::string describe_store(const io::H5TensorInfo& s, nlohmann::json* rec) {
  std::ostringstream os;
  char buf[256];
  os << "file: " << s.path << " (HDF5 tensor store, format " << io::kTensorStoreFormat << " v"
     << s.format_version << ", " << human_bytes(static_cast<double>(s.file_bytes)) << ")\n";
  os << "order " << s.order << ", dims " << format_dims(s.dims) << ", " << s.nnz
     << " nonzeros, values " << io::to_string(s.value_type) << "\n";
  double cells = 1;
  for (auto d : s.dims) cells *= static_cast<double>(d);
  std::snprintf(buf, sizeof(buf), "density %.3e\n", static_cast<double>(s.nnz) / cells);
  os << buf;
  os << "coordinates stored 0-based";
  if (s.source_index_base >= 0) os << " (the source file was " << s.source_index_base << "-based)";
  os << "; repeated coordinates: "
     << (s.has_duplicates == 0   ? "none"
         : s.has_duplicates == 1 ? "present (summed by every consumer)"
                                 : "not checked (summed by every consumer)")
     << "\n";
  if (s.sorted_mode >= 0)
    os << "stored order: non-decreasing mode-" << s.sorted_mode
       << " indices (memory tier 3 skips that mode's sort on the GPU)\n";
  if (!s.source.empty()) os << "source: " << s.source << "\n";
  if (s.chunk_elems > 0) {
    const std::uint64_t nchunks =
        (static_cast<std::uint64_t>(s.nnz) + s.chunk_elems - 1) / s.chunk_elems;
    os << "layout: chunks of " << s.chunk_elems << " nonzeros (" << nchunks << " per dataset), ";
  } else {
    os << "layout: contiguous, ";
  }
  os << (s.deflate > 0 ? "shuffle + deflate level " + std::to_string(s.deflate)
                       : std::string("uncompressed"))
     << ", " << (s.has_checksums ? "CRC-32 per chunk" : "no checksums") << "\n";
  nlohmann::json store;
  if (rec != nullptr) {
    (*rec)["tensor"] = {{"order", s.order}, {"dims", s.dims}, {"nnz", s.nnz}};
    store = {{"format", io::kTensorStoreFormat},
             {"format_version", s.format_version},
             {"file_bytes", s.file_bytes},
             {"value_type", io::to_string(s.value_type)},
             {"density", static_cast<double>(s.nnz) / cells},
             {"source_index_base", s.source_index_base >= 0 ? nlohmann::json(s.source_index_base)
                                                            : nlohmann::json(nullptr)},
             {"duplicates", s.has_duplicates == 0   ? "none"
                            : s.has_duplicates == 1 ? "present"
                                                    : "not checked"},
             {"source", s.source},
             {"sorted_mode",
              s.sorted_mode >= 0 ? nlohmann::json(s.sorted_mode) : nlohmann::json(nullptr)},
             {"chunk_elems", s.chunk_elems},
             {"deflate", s.deflate},
             {"checksums", s.has_checksums},
             {"partition", nullptr}};
  }
  if (!s.partition) {
    os << "partition: none (ranks read equal shares; `tessera partition` stores blocks)\n";
    if (rec != nullptr) (*rec)["store"] = store;
    return os.str();
  }
  const io::H5Partition& p = *s.partition;
  const int nb = p.nblocks();
  nnz_t mn = s.nnz, mx = 0;
  for (int b = 0; b < nb; ++b) {
    const nnz_t c = p.block_range(b).second;
    mn = std::min(mn, c);
    mx = std::max(mx, c);
  }
  const double mean = static_cast<double>(s.nnz) / nb;
  std::snprintf(buf, sizeof(buf),
                "partition: grid %s (%d blocks; a run on %d ranks reads one block per rank)\n"
                "  nonzeros per block: min %lld, mean %.1f, max %lld (imbalance %.3f)\n",
                grid_text(p.grid).c_str(), nb, nb, static_cast<long long>(mn), mean,
                static_cast<long long>(mx), mean > 0 ? static_cast<double>(mx) / mean : 1.0);
  os << buf;
  for (std::size_t n = 0; n < p.cuts.size(); ++n)
    os << "  mode " << n << " cuts: " << join(p.cuts[n]) << "\n";
  if (nb <= 64) {
    for (int b = 0; b < nb; ++b) {
      const auto [first, count] = p.block_range(b);
      os << "  block " << b << " (" << grid_text(p.block_coords(b)) << "): nonzeros " << first
         << ".." << first + count << " (" << count << ")\n";
    }
  }
  if (rec != nullptr) {
    nlohmann::json blocks = nlohmann::json::array();
    for (int b = 0; b < nb; ++b) blocks.push_back(p.block_range(b).second);
    store["partition"] = {
        {"grid", p.grid},      {"blocks", nb},
        {"cuts", p.cuts},      {"block_nnz", blocks},
        {"min_block_nnz", mn}, {"mean_block_nnz", mean},
        {"max_block_nnz", mx}, {"imbalance", mean > 0 ? static_cast<double>(mx) / mean : 1.0}};
    (*rec)["store"] = store;
  }
  return os.str();
}

/// A model file or checkpoint as text (rank 0 reads and prints it); `rec` (optional) gets
/// the same as record fields: `model`.
std::string describe_model(const std::string& path, const io::ModelFileKind& k,
                           nlohmann::json* rec_json) {
  std::ostringstream os;
  char buf[256];
  io::ModelRecord rec;
  io::CheckpointInfo ck;
  std::vector<std::uint64_t> dims;
  std::string shape_line;
  nlohmann::json model;
  const bool cp = k.format == "tessera-kruskal";
  if (cp) {
    const KruskalModel m =
        k.checkpoint ? io::read_cp_checkpoint(path, &ck) : io::read_kruskal_h5(path, &rec);
    dims = m.dims;
    shape_line = "rank " + std::to_string(m.rank);
    model["rank"] = m.rank;
  } else {
    const TuckerModel m =
        k.checkpoint ? io::read_tucker_checkpoint(path, &ck) : io::read_tucker_h5(path, &rec);
    dims = m.dims;
    shape_line = "ranks";
    for (std::size_t n = 0; n < m.ranks.size(); ++n)
      shape_line += (n ? "x" : " ") + std::to_string(m.ranks[n]);
    shape_line += " (core of " + std::to_string(m.core.size()) + " values)";
    model["ranks"] = m.ranks;
    model["core_values"] = m.core.size();
  }
  if (k.checkpoint) {
    rec.iterations = ck.iteration;
    rec.fit_history = ck.fit_history;
    rec.fit = ck.fit_history.empty() ? 0.0 : ck.fit_history.back();
    rec.options_json = ck.options_json;
  }
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  os << "file: " << path << " (" << (k.checkpoint ? "Tessera checkpoint" : "Tessera model")
     << ", format " << k.format << ", " << human_bytes(ec ? 0.0 : static_cast<double>(bytes))
     << ")\n";
  os << "kind: " << (cp ? "CP (Kruskal)" : "Tucker") << ", order " << dims.size() << ", dims "
     << format_dims(dims) << ", " << shape_line << "\n";
  nlohmann::json opts = nlohmann::json::parse(rec.options_json, nullptr, false);
  if (!opts.is_object()) opts = nlohmann::json::object();
  std::string precision = k.checkpoint ? ck.precision : "";
  if (precision.empty() && opts.contains("precision") && opts["precision"].is_string())
    precision = opts["precision"].get<std::string>();
  os << "precision: "
     << (precision.empty() ? std::string("not recorded") : precision + " (the run's)")
     << "; values stored as float64\n";
  std::snprintf(buf, sizeof(buf), "fit: %.6f after %d iteration(s)", rec.fit, rec.iterations);
  os << buf;
  if (k.checkpoint) os << (ck.converged ? ", converged" : ", not converged");
  os << "\n";
  if (k.checkpoint)
    os << "checkpoint of an input with " << ck.input.nnz << " nonzeros (resume with --resume "
       << path << ")\n";
  if (opts.empty()) {
    os << "options: not recorded\n";
  } else {
    os << "options:\n";
    for (const auto& [key, v] : opts.items())
      os << "  " << key << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  }
  if (rec_json != nullptr) {
    model["kind"] = cp ? "cp" : "tucker";
    model["format"] = k.format;
    model["checkpoint"] = k.checkpoint;
    model["file_bytes"] = ec ? 0 : static_cast<std::uint64_t>(bytes);
    model["order"] = dims.size();
    model["dims"] = dims;
    model["precision"] = precision.empty() ? nlohmann::json(nullptr) : nlohmann::json(precision);
    model["fit"] = rec.fit;
    model["iterations"] = rec.iterations;
    model["fit_history"] = rec.fit_history;
    if (k.checkpoint) {
      model["converged"] = ck.converged;
      model["input_nnz"] = ck.input.nnz;
    }
    model["run_options"] = opts;
    (*rec_json)["model"] = model;
  }
  return os.str();
}

/// --json: the envelope and what info found (rank 0's `rec`); `io_s` is the reading time.
void write_info_record(const InfoArgs& a, const comm::MpiCommunicator& world,
                       const nlohmann::json& rec, double total_s, double io_s) {
  if (a.json.empty()) return;
  nlohmann::json j = record_envelope("info", nlohmann::json::object(), world, "io", 0);
  for (const auto& [k, v] : rec.items()) j[k] = v;
  j["timing"] = timing_record("run", total_s, {{"io", std::min(io_s, total_s)}});
  write_json(a.json, j, world);
}

void run_info(const InfoArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_input("the input", a.load.path);
    outputs.add_output("--json", a.json, io::OutputKind::record);
    outputs.validate(a.force, world);
  }
  Timer total;
  nlohmann::json rec = {{"file", a.load.path}};
  nlohmann::json* out = a.json.empty() ? nullptr : &rec;
  // Model files and checkpoints (rank 0 reads; the error, if any, is every rank's).
  std::int32_t is_model = 0;
  std::string text;
  double io_s = 0;
  comm::run_collectively(world, [&] {
    if (world.rank() != 0) return;
    const io::ModelFileKind k = io::probe_model_file(a.load.path);
    if (k.format.empty()) return;
    is_model = 1;
    TESSERA_INPUT_CHECK(!a.verify && !a.stats, "--verify and --stats describe tensor stores; '"
                                                   << a.load.path << "' is a model file");
    Timer t;
    text = describe_model(a.load.path, k, out);
    io_s = t.seconds();
    rec["kind"] = k.checkpoint ? "checkpoint" : "model";
  });
  world.broadcast(&is_model, 1, 0);
  if (is_model != 0) {
    if (world.rank() == 0) {
      std::printf("%s", text.c_str());
      std::fflush(stdout);
    }
    write_info_record(a, world, rec, total.seconds(), io_s);
    return;
  }
  if (!io::is_tensor_store(a.load.path, world)) {
    rec["kind"] = "tensor";
    io_s = print_stats(a, world, out);
    if (out != nullptr && rec.contains("stats")) {
      const nlohmann::json& st = rec["stats"];
      rec["tensor"] = {{"order", st["order"]}, {"dims", st["dims"]}, {"nnz", st["nnz"]}};
    }
    write_info_record(a, world, rec, total.seconds(), io_s);
    return;
  }
  rec["kind"] = "store";
  Timer t_meta;
  const io::H5TensorInfo s = io::read_h5_info(a.load.path, world);
  io_s = t_meta.seconds();
  if (world.rank() == 0) {
    std::printf("%s", describe_store(s, out).c_str());
    std::fflush(stdout);
  }
  if (a.verify) {
    Timer t;
    // The sort that checks has_duplicates = 0 where the order does not: convert's memory.
    io::H5VerifyOptions vo;
    vo.memory_limit = default_memory_limit(world) / 2;
    vo.scratch_dir = a.scratch;
    comm::run_collectively(world, [&] {
      if (!a.dedup_memory.empty()) vo.memory_limit = parse_bytes(a.dedup_memory, "--dedup-memory");
    });
    const io::H5VerifyResult vr = io::verify_h5(a.load.path, world, {}, vo);
    const double verify_s = t.seconds();
    io_s += verify_s;
    const std::string unique =
        vr.unique_check == "order"  ? ", no repeated coordinate (stored order)"
        : vr.unique_check == "sort" ? ", no repeated coordinate (counted)"
        : s.has_duplicates != 0     ? "; repeated coordinates not checked (has_duplicates = " +
                                      std::to_string(s.has_duplicates) + ": runs sum them)"
                                : "";
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "verified: %lld nonzeros read on %d rank(s) in %.3f s (%scoordinates "
                  "< dims, finite values%s",
                  static_cast<long long>(s.nnz), world.size(), verify_s,
                  s.has_checksums ? "checksums, " : "no checksums stored: not checked; ",
                  s.partition && s.partition->nblocks() == world.size() ? ", block ranges" : "");
    log::info(buf + unique + ")");
    rec["verified"] = {{"nnz", s.nnz},
                       {"ranks", world.size()},
                       {"seconds", verify_s},
                       {"unique_check", vr.unique_check}};
  }
  if (a.stats) io_s += print_stats(a, world, out);
  write_info_record(a, world, rec, total.seconds(), io_s);
}

}  // namespace

void add_info(CLI::App& app, Runner& run) {
  auto a = std::make_shared<InfoArgs>();
  auto* sub = app.add_subcommand(
      "info",
      "Order, dims, nonzeros and per-mode statistics of a tensor; for an HDF5 store its "
      "attributes, layout and per-block balance; for a model file or checkpoint its kind "
      "(CP/Tucker), dims, rank(s), precision, fit, iterations and the run's options");
  sub->add_option("file", a->load.path,
                  "Tensor (.tns, .tns.gz, Tensor Toolbox sptensor text, or an .h5 store), or "
                  "a model file / checkpoint (.h5)")
      ->required();
  sub->add_option("--index-base", a->load.index_base, "1 | 0 | auto (text files)")
      ->check(CLI::IsMember({"1", "0", "auto"}));
  sub->add_flag("--verify", a->verify,
                "HDF5 store: read every nonzero and check checksums, coordinates and values, "
                "and, where the store says it has none (has_duplicates = 0), that no "
                "coordinate repeats");
  sub->add_flag("--stats", a->stats,
                "HDF5 store: also read the tensor and print the per-mode statistics");
  sub->add_option("--dedup-memory", a->dedup_memory,
                  "--verify: host memory per rank for counting the distinct coordinates of a "
                  "store whose order does not prove them unique (\"8G\"; default: half of 3/4 "
                  "of the node's memory shared by its ranks, as convert); over it, sorted runs "
                  "spill to the scratch folder");
  sub->add_option("--scratch", a->scratch,
                  "--verify: folder of that count's scratch files (default: the store's folder, "
                  "or the system's temporary folder where the store's is not writable)");
  sub->add_option("--json", a->json,
                  "Write what info found (kind of file, dims, nonzeros, statistics; for a "
                  "model its kind, rank(s), fit, iterations) as a run record (JSON) here "
                  "(docs/run-record.md)");
  add_force_option(sub, a->force);
  sub->callback([a, sub, &run] {
    for (const char* n : {"--dedup-memory", "--scratch"})
      if (sub->count(n) > 0 && !a->verify)
        throw CLI::ValidationError(n, "applies only with --verify");
    run = [a](const comm::MpiCommunicator& world) { run_info(*a, world); };
  });
}

}  // namespace tessera::driver
