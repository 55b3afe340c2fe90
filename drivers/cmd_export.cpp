// tessera export: a model file's factors, weights and core as .npy or text files, for NumPy,
// MATLAB and SPLATT users (docs/formats.md, "Exporting a model").
//
//   CP:     mode1..modeN (dims[n] x R), lambda (R)
//   Tucker: mode1..modeN (dims[n] x R_n), core (R_1 x ... x R_N)
//
// --format npy: NumPy format 1.0, float64 by default (bitwise the model's values);
// --format txt / mat: header-free text, one matrix row per line, values "%.17g" separated
// by one space (SPLATT's mode1.mat style; lambda one value per line; the core as
// prod(R_1..R_{N-1}) lines of R_N values, row-major). `mat` names the files as SPLATT
// does (mode1.mat, ..., lambda.mat); `txt` uses the .txt extension.
//
// --json FILE: a run record (docs/run-record.md) naming the files written and their shapes.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "io/model_io.hpp"
#include "io/npy.hpp"
#include "io/output.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct ExportArgs {
  std::string model;
  std::string format = "npy";
  std::string out_dir;
  std::string prefix;
  std::string dtype = "f8";
  bool force = false;
  std::string json;  ///< --json: the run record
};

/// One array to write: its file name stem, shape and row-major values.
struct Array {
  std::string stem;
  std::vector<std::uint64_t> shape;
  const std::vector<double>* values = nullptr;
};

/// Text: rows of the last dimension's length ("%.17g", one space between values).
std::string text_of(const Array& a) {
  const std::size_t cols =
      a.shape.size() == 1 ? 1 : static_cast<std::size_t>(a.shape.back());  // 1-D: a column
  std::string s;
  char buf[40];
  const auto& v = *a.values;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const int n = std::snprintf(buf, sizeof(buf), "%.17g", v[i]);
    s.append(buf, static_cast<std::size_t>(n));
    s += (i + 1) % cols == 0 ? '\n' : ' ';
  }
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  io::AtomicOutput out(path);
  std::FILE* f = std::fopen(out.write_path().c_str(), "wb");
  TESSERA_INPUT_CHECK(f != nullptr, "export: cannot open '" << out.write_path() << "' for writing");
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  TESSERA_INPUT_CHECK(ok && closed, "export: cannot write '" << path << "' (disk full?)");
  out.commit();
}

void run_export(const ExportArgs& a, const comm::MpiCommunicator& world) {
  {
    // --json checked before any work (io/output.hpp): never the model; an existing file
    // Tessera did not write only with --force.
    io::OutputSet outputs;
    outputs.add_input("the model", a.model);
    outputs.add_output("--json", a.json, io::OutputKind::record);
    outputs.validate(a.force, world);
  }
  Timer total;
  // The model, on rank 0 (export is small, serial work; other ranks wait for the result).
  std::vector<Array> arrays;
  KruskalModel cp;
  TuckerModel tk;
  std::string kind;
  comm::run_collectively(world, [&] {
    if (world.rank() != 0) return;
    TESSERA_INPUT_CHECK(a.dtype == "f8" || a.format == "npy",
                        "--dtype " << a.dtype << " applies to --format npy only (text is "
                                   << "written with 17 significant digits)");
    std::error_code ec;
    TESSERA_INPUT_CHECK(std::filesystem::is_regular_file(a.model, ec),
                        "export: cannot open '"
                            << a.model << "': "
                            << (std::filesystem::exists(a.model, ec) ? "not a regular file"
                                                                     : "no such file"));
    const io::ModelFileKind k = io::probe_model_file(a.model);
    TESSERA_INPUT_CHECK(!k.format.empty(),
                        "export: '" << a.model
                                    << "' is not a Tessera model file (expected an HDF5 file "
                                       "written by tessera cp/tucker --out or a checkpoint)");
    if (k.format == "tessera-kruskal") {
      kind = "CP";
      cp = io::read_kruskal_h5(a.model);
      for (int n = 0; n < cp.order(); ++n) {
        const auto& F = cp.factors[static_cast<std::size_t>(n)];
        arrays.push_back({"mode" + std::to_string(n + 1),
                          {static_cast<std::uint64_t>(F.rows), static_cast<std::uint64_t>(F.cols)},
                          &F.data});
      }
      arrays.push_back({"lambda", {static_cast<std::uint64_t>(cp.rank)}, &cp.lambda});
    } else {
      kind = "Tucker";
      tk = io::read_tucker_h5(a.model);
      for (int n = 0; n < tk.order(); ++n) {
        const auto& F = tk.factors[static_cast<std::size_t>(n)];
        arrays.push_back({"mode" + std::to_string(n + 1),
                          {static_cast<std::uint64_t>(F.rows), static_cast<std::uint64_t>(F.cols)},
                          &F.data});
      }
      std::vector<std::uint64_t> cs(tk.ranks.begin(), tk.ranks.end());
      arrays.push_back({"core", cs, &tk.core});
    }
  });

  // Output names, checked before any file is written (io/output.hpp).
  const std::string ext = a.format == "npy" ? ".npy" : a.format == "mat" ? ".mat" : ".txt";
  std::string base;
  if (!a.prefix.empty()) {
    base = a.prefix;
  } else if (!a.out_dir.empty()) {
    base = a.out_dir + (a.out_dir.back() == '/' ? "" : "/");
    comm::run_collectively(world, [&] {
      if (world.rank() != 0) return;
      std::error_code ec;
      std::filesystem::create_directories(a.out_dir, ec);
      TESSERA_INPUT_CHECK(!ec,
                          "--out-dir '" << a.out_dir << "': cannot create it: " << ec.message());
    });
  }
  std::vector<std::string> paths;
  for (const Array& x : arrays) paths.push_back(base + x.stem + ext);
  io::OutputSet outputs;
  outputs.add_input("the model", a.model);
  for (const auto& p : paths)
    outputs.add_output("export", p, io::OutputKind::text, "", "give another --out-dir or --prefix");
  outputs.add_output("--json", a.json, io::OutputKind::record);  // not one of the exports
  // Tessera cannot tell its own .npy or header-free text files from others: an existing
  // output is replaced only with --force (an input never is: OutputSet says so first).
  comm::run_collectively(world, [&] {
    if (world.rank() != 0 || a.force) return;
    struct stat sm {};
    const bool have_model = ::stat(a.model.c_str(), &sm) == 0;
    for (const auto& p : paths) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (have_model && st.st_dev == sm.st_dev && st.st_ino == sm.st_ino) continue;
      TESSERA_INPUT_CHECK(false, "export '" << p
                                            << "' exists: use --force to replace it, or give "
                                               "another --out-dir or --prefix");
    }
  });
  outputs.validate(true, world);
  // float32 output: every value must survive the narrowing (no inf, no NaN), checked before
  // the first file is written so a refused export leaves nothing behind.
  comm::run_collectively(world, [&] {
    if (world.rank() != 0 || a.dtype != "f4") return;
    for (const Array& x : arrays) {
      try {
        io::check_float32(x.stem, x.shape, x.values->data());
      } catch (const InputError& e) {
        throw InputError("export --dtype f4 of '" + a.model + "': " + e.what() +
                         "; no file written (export with --dtype f8)");
      }
    }
  });

  double write_s = 0;
  nlohmann::json files = nlohmann::json::array();
  comm::run_collectively(world, [&] {
    if (world.rank() != 0) return;
    Timer tw;
    const bool single = a.dtype == "f4";
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      const Array& x = arrays[i];
      const std::string bytes =
          a.format == "npy" ? io::npy_file(x.shape, x.values->data(), single, x.stem) : text_of(x);
      write_file(paths[i], bytes);
      files.push_back(
          {{"name", x.stem}, {"path", paths[i]}, {"shape", x.shape}, {"bytes", bytes.size()}});
    }
    write_s = tw.seconds();
    std::string names;
    for (const auto& p : paths) names += (names.empty() ? "" : ", ") + p;
    log::info("export: " + kind + " model '" + a.model + "' written as " + names);
  });

  if (!a.json.empty()) {
    nlohmann::json j = record_envelope("export", nlohmann::json::object(), world, "io", 0);
    j["file"] = a.model;
    j["kind"] = kind == "CP" ? "cp" : "tucker";
    j["format"] = a.format;
    j["dtype"] = a.format == "npy" ? (a.dtype == "f4" ? "float32" : "float64") : "text";
    j["files"] = files;
    const double all_s = total.seconds();
    j["timing"] = timing_record("run", all_s, {{"io", std::min(write_s, all_s)}});
    write_json(a.json, j, world);
  }
}

}  // namespace

void add_export(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ExportArgs>();
  auto* sub = app.add_subcommand(
      "export",
      "Write a model's factors, weights (CP: lambda) and core (Tucker) as NumPy .npy or text "
      "files: modeN and lambda or core, one file each (docs/formats.md)");
  sub->add_option("model", a->model, "Model file (.h5) written by cp/tucker --out, or a checkpoint")
      ->required();
  sub->add_option("-f,--format", a->format,
                  "npy: NumPy format 1.0 (np.load); txt: whitespace text, one matrix row per "
                  "line, %.17g (np.loadtxt); mat: the same text named as SPLATT names its "
                  "output (mode1.mat ... modeN.mat, lambda.mat), not MATLAB's binary .mat")
      ->check(CLI::IsMember({"npy", "txt", "mat"}));
  auto* dir = sub->add_option("--out-dir", a->out_dir,
                              "Folder for the files (created if missing; default: the current "
                              "folder): DIR/mode1.npy, ...");
  auto* pre = sub->add_option(
      "--prefix", a->prefix,
      "Prefix of every file name instead: --prefix out/run1_ writes out/run1_mode1.npy, ...");
  dir->excludes(pre);
  sub->add_option("--dtype", a->dtype,
                  "npy: f8 (float64, the model's values bit for bit) or f4 (float32, rounded)")
      ->check(CLI::IsMember({"f8", "f4"}));
  sub->add_option("--json", a->json,
                  "Write a run record (JSON) here: the format and the files written with "
                  "their shapes (docs/run-record.md)");
  sub->add_flag("--force", a->force,
                "Replace existing files of these names (Tessera cannot tell its own exports "
                "from other files, so an existing one is never replaced without it), and a --json "
                "file that is not a Tessera run record; the model itself is never replaced");
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_export(*a, world); }; });
}

}  // namespace tessera::driver
