// tessera generate: synthetic low-rank-plus-noise tensors, written as FROSTT text, or
// streamed straight to an HDF5 tensor store (--out X.h5) without holding the tensor.
#include <cmath>
#include <memory>

#include "algo/generate.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "io/dedup.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "io/tns.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct GenArgs {
  std::string dims, out, dist = "uniform", structure = "blocks";
  double nnz = 0;
  int rank = 5;
  double noise = 0.0, alpha = 1.0;
  std::uint64_t seed = 1;
  double chunk_nnz = 16.0 * (1 << 20);
  std::string value_type = "float64";
  std::string dedup_memory, scratch;
  bool force = false;
  std::string json;  ///< --json: the run record
};

/// Rounds of draws of `--structure sampled` (the first included) before giving up on the
/// target: each round draws about the missing count over the last round's rate of new
/// coordinates, so a few rounds reach it unless the coordinates are nearly exhausted.
constexpr int kMaxDrawRounds = 8;

/// --out X.h5: each rank generates its range of entry ids piece by piece (algo::
/// EntryGenerator) and adds every piece to an io::UniqueWriter, which routes entries to the
/// owners of their coordinates, merges repeats (blocks: summed, the tensor's meaning;
/// sampled: the first draw kept, the model's value there) and writes a store without
/// repeated coordinates (has_duplicates = 0). Sampled draws more entries (ids after the first
/// batch) until the target count of distinct coordinates is reached. Memory per rank: one
/// piece plus the writer's limit (--dedup-memory; over it, sorted runs spill to --scratch).
/// What the run record of generate tells: nonzeros written and seconds writing.
struct GenOutcome {
  nnz_t nnz = 0;
  double write_seconds = 0;
};

void generate_h5(const GenArgs& a, const algo::GenerateOptions& o,
                 const comm::MpiCommunicator& world, GenOutcome* outcome) {
  Timer total;
  std::unique_ptr<algo::EntryGenerator> gen;
  nnz_t piece = 0;
  io::UniqueWriterOptions uo;
  io::H5WriteOptions wo;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(a.chunk_nnz >= 1 && a.chunk_nnz < 1e12,
                        "--chunk-nnz must be at least 1 (got " << a.chunk_nnz << ")");
    piece = static_cast<nnz_t>(a.chunk_nnz);
    if (!a.dedup_memory.empty()) uo.memory_limit = parse_bytes(a.dedup_memory, "--dedup-memory");
    wo.value_type = io::parse_value_type(a.value_type);
    gen = std::make_unique<algo::EntryGenerator>(o);
  });
  if (a.dedup_memory.empty()) uo.memory_limit = default_memory_limit(world) / 2;
  const bool sampled = o.structure == algo::Structure::sampled;
  uo.policy = sampled ? io::MergePolicy::keep_first : io::MergePolicy::sum;
  uo.scratch_dir = a.scratch;
  const int P = world.size(), me = world.rank();
  const int N = static_cast<int>(o.dims.size());
  uo.sort_mode = io::longest_mode(o.dims);  // tier 3 then skips that mode's device sort
  io::UniqueWriter u(a.out, N, world, uo);
  std::vector<std::vector<index_t>> idx(static_cast<std::size_t>(N));
  std::vector<double> vals;
  const double sigma = gen->noise_sigma();
  double sums[2] = {0, 0};  // ||signal||^2, ||noise||^2 over the drawn entries
  double gen_s = 0;
  // Draws ids [from, to): an equal share per rank, piece by piece.
  auto draw = [&](std::int64_t from, std::int64_t to) {
    u.expect(static_cast<std::uint64_t>(to - from));
    const std::int64_t T = to - from;
    const auto lo = from + static_cast<std::int64_t>(static_cast<__int128>(T) * me / P);
    const auto hi = from + static_cast<std::int64_t>(static_cast<__int128>(T) * (me + 1) / P);
    const nnz_t rounds =
        world.allreduce_value<nnz_t>((hi - lo + piece - 1) / piece, comm::ReduceOp::max);
    for (nnz_t r = 0; r < rounds; ++r) {
      Timer tg;
      const std::int64_t first = lo + r * piece;
      const std::int64_t n = first < hi ? std::min<std::int64_t>(piece, hi - first) : 0;
      index_t* ptr[kMaxOrder] = {};
      for (int m = 0; m < N; ++m) {
        idx[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(n));
        ptr[m] = idx[static_cast<std::size_t>(m)].data();
      }
      vals.resize(static_cast<std::size_t>(n));
      if (n > 0) {
        gen->fill(first, n, ptr, vals.data());
        double s2 = 0, e2 = 0;
#pragma omp parallel for schedule(static) reduction(+ : s2, e2)
        for (std::int64_t k = 0; k < n; ++k) {
          double& v = vals[static_cast<std::size_t>(k)];
          s2 += v * v;
          if (sigma > 0) {
            const double e = sigma * gen->noise01(first + k);
            v += e;
            e2 += e * e;
          }
        }
        sums[0] += s2;
        sums[1] += e2;
      }
      gen_s += tg.seconds();
      u.add(n, ptr, vals.data(), static_cast<std::uint64_t>(first));
    }
  };
  const std::int64_t T = gen->total();
  draw(0, T);
  std::int64_t end = T;
  int draw_rounds = 1;
  std::uint64_t cutoff = io::UniqueWriter::kNoCutoff;
  // Sampled: the target is o.nnz distinct coordinates (or all there are).
  double space = 1;
  for (auto d : o.dims) space *= static_cast<double>(d);
  const nnz_t target =
      sampled ? static_cast<nnz_t>(std::min<double>(static_cast<double>(o.nnz), space)) : 0;
  nnz_t distinct = 0;
  if (sampled) {
    distinct = u.count_unique();
    nnz_t before = 0;
    std::int64_t drawn = T;
    while (distinct < target && draw_rounds < kMaxDrawRounds) {
      // New coordinates per draw in the last round (they only get rarer).
      const double rate =
          std::max(static_cast<double>(distinct - before) / static_cast<double>(drawn), 1e-3);
      const double want = 1.1 * static_cast<double>(target - distinct) / rate + 64;
      const auto m = static_cast<std::int64_t>(std::min(want, std::max<double>(T, 1 << 20)));
      before = distinct;
      drawn = m;
      draw(end, end + m);
      end += m;
      ++draw_rounds;
      distinct = u.count_unique();
      if (distinct > target) {
        // Keep the target coordinates drawn first: the store is the tensor of the draws
        // with ids below the cutoff.
        cutoff = u.id_cutoff(target, static_cast<std::uint64_t>(end - m),
                             static_cast<std::uint64_t>(end));
        distinct = target;
      }
    }
  }
  io::H5Header h;
  h.dims = o.dims;
  char src[400];
  std::snprintf(src, sizeof(src),
                "tessera generate --dims %s --nnz %lld --rank %d --noise %.17g --dist %s "
                "--alpha %.17g --structure %s --seed %llu",
                format_dims(o.dims).c_str(), static_cast<long long>(o.nnz), o.rank, o.noise,
                a.dist.c_str(), o.alpha, a.structure.c_str(),
                static_cast<unsigned long long>(o.seed));
  h.source = src;
  const io::UniqueStats st = u.write(h, wo, cutoff);
  world.allreduce(sums, 2);
  gen_s = world.allreduce_value(gen_s, comm::ReduceOp::max);
  const double secs = total.seconds();
  const double bytes =
      static_cast<double>(st.unique) * (4.0 * N + (a.value_type == "float32" ? 4.0 : 8.0));
  char what[400];
  if (sampled) {
    std::snprintf(
        what, sizeof(what),
        "%lld distinct nonzeros (%lld repeated draws dropped; %d round(s) of draws%s)",
        static_cast<long long>(st.unique), static_cast<long long>(st.repeats), draw_rounds,
        st.unique < static_cast<nnz_t>(o.nnz) ? (", short of the target " + std::to_string(o.nnz) +
                                                 ": the coordinates repeat too often")
                                                    .c_str()
                                              : "");
  } else {
    std::snprintf(what, sizeof(what), "%lld distinct nonzeros (%lld repeated coordinates summed)",
                  static_cast<long long>(st.unique), static_cast<long long>(st.repeats));
  }
  char line[1024];
  std::snprintf(line, sizeof(line),
                "generated %s: dims %s, %s, rank %d %s, %s indices, noise %.3g "
                "(||noise||/||signal|| over the draws = %.3g); %.2f s in all (%.2f s generating "
                "per rank, %.2f s sorting, %.2f s merging, %.2f s writing), %.3g nonzeros/s, "
                "%.1f MB/s written (%s) on %d rank(s)",
                a.out.c_str(), format_dims(o.dims).c_str(), what, o.rank, a.structure.c_str(),
                a.dist.c_str(), a.noise, sums[0] > 0 ? std::sqrt(sums[1] / sums[0]) : 0.0, secs,
                gen_s, st.sort_seconds, st.merge_seconds, st.write_seconds,
                secs > 0 ? static_cast<double>(st.unique) / secs : 0.0,
                secs > 0 ? bytes / 1e6 / secs : 0.0, st.write_mode.c_str(), P);
  log::info(line);
  outcome->nnz = st.unique;
  outcome->write_seconds = st.write_seconds;
  if (st.runs > 0)
    log::info("  sorted runs spilled to scratch files: " + std::to_string(st.runs) + ", " +
              human_bytes(static_cast<double>(st.spilled_bytes)) + " (--dedup-memory " +
              human_bytes(static_cast<double>(uo.memory_limit)) + " per rank)");
}

void generate_text(const GenArgs& a, const algo::GenerateOptions& o,
                   const comm::MpiCommunicator& world, GenOutcome* outcome);

void run_generate(const GenArgs& a, const comm::MpiCommunicator& world) {
  {
    // The output checked before any work (io/output.hpp).
    io::OutputSet outputs;
    outputs.add_output("--out", a.out,
                       io::has_h5_extension(a.out) ? io::OutputKind::store : io::OutputKind::text);
    outputs.add_output("--json", a.json, io::OutputKind::record);
    outputs.validate(a.force, world);
  }
  Timer total;
  algo::GenerateOptions o;
  // The same options on every rank: an error is agreed (one line, no abort).
  comm::run_collectively(world, [&] {
    o.dims = parse_dims(a.dims);
    TESSERA_INPUT_CHECK(
        a.nnz >= 1 && a.nnz < 0x1p63 && a.nnz == std::floor(a.nnz),
        "--nnz: expected a whole number of nonzeros, 1 or more and below 2^63, found " << a.nnz);
  });
  o.nnz = static_cast<std::int64_t>(a.nnz);
  o.rank = a.rank;
  o.noise = a.noise;
  o.alpha = a.alpha;
  o.dist = algo::parse_index_dist(a.dist);
  o.structure = algo::parse_structure(a.structure);
  o.seed = a.seed;
  GenOutcome outcome;
  if (io::has_h5_extension(a.out)) {
    generate_h5(a, o, world, &outcome);
  } else {
    generate_text(a, o, world, &outcome);
  }
  if (!a.json.empty()) {
    nlohmann::json j = record_envelope("generate", nlohmann::json::object(), world, "io", 0);
    j["tensor"] = {{"dims", o.dims}, {"nnz", outcome.nnz}};
    j["output"] = a.out;
    const double all_s = total.seconds();
    j["phases_seconds"] = {{"write", outcome.write_seconds}, {"total", all_s}};
    j["timing"] = timing_record("run", all_s, {{"io", outcome.write_seconds}});
    write_json(a.json, j, world);
  }
}

void generate_text(const GenArgs& a, const algo::GenerateOptions& o,
                   const comm::MpiCommunicator& world, GenOutcome* outcome) {
  Timer t;
  algo::GenerateInfo gi;
  auto d = algo::generate(o, world, &gi);
  const double gen_s = t.seconds();
  t.reset();
  io::write_tns(a.out, d.block, world);
  outcome->nnz = static_cast<nnz_t>(gi.nnz);
  outcome->write_seconds = t.seconds();
  char line[512];
  std::snprintf(line, sizeof(line),
                "generated %s: dims %s, %lld nonzeros (%lld repeated coordinates dropped), "
                "rank %d %s, %s indices, noise %.3g (||noise||/||signal|| = %.3g); "
                "%.2f s to generate, %.2f s to write",
                a.out.c_str(), format_dims(o.dims).c_str(), static_cast<long long>(gi.nnz),
                static_cast<long long>(gi.repeats), o.rank, a.structure.c_str(), a.dist.c_str(),
                a.noise, gi.signal_norm > 0 ? gi.noise_norm / gi.signal_norm : 0.0, gen_s,
                t.seconds());
  log::info(line);
}

}  // namespace

void add_generate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenArgs>();
  auto* sub = app.add_subcommand(
      "generate",
      "Write a synthetic tensor: exact rank-R structure plus noise (FROSTT text, or streamed "
      "to an HDF5 tensor store of any size with --out X.h5)");
  sub->add_option("--dims", a->dims, "Mode lengths, e.g. 200x300x400")->required();
  sub->add_option("--nnz", a->nnz, "Target number of nonzeros (e.g. 1e6)")->required();
  sub->add_option("-r,--rank", a->rank, "Rank R of the planted structure")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--noise", a->noise, "Relative noise level (0.01 = 1%)")
      ->check(non_negative<decltype(a->noise)>());
  sub->add_option("--dist", a->dist, "Index distribution: uniform | powerlaw")
      ->check(CLI::IsMember({"uniform", "powerlaw"}));
  sub->add_option("--alpha", a->alpha,
                  "Power-law exponent (--dist powerlaw): P(index = i) ~ (i + 1)^-alpha, "
                  "a Zipf-like law (1: Zipf)")
      ->check(CLI::Range(0.05, 100.0));
  sub->add_option("--structure", a->structure,
                  "blocks: exact rank-R (components are dense blocks on random index sets); "
                  "sampled: random coordinates with values of a dense rank-R model")
      ->check(CLI::IsMember({"blocks", "sampled"}));
  sub->add_option("-s,--seed", a->seed, "Random seed")->check(non_negative<decltype(a->seed)>());
  sub->add_option("-o,--out", a->out,
                  "Output file (.tns or .tns.gz; .h5: streamed to an HDF5 tensor store of "
                  "unique coordinates)")
      ->required();
  sub->add_option("--value-type", a->value_type,
                  "--out X.h5: stored value type, float64 | float32 (halves the values' bytes)")
      ->check(CLI::IsMember({"float64", "float32"}));
  sub->add_option("--chunk-nnz", a->chunk_nnz,
                  "--out X.h5: nonzeros each rank generates and adds at a time (16Mi)");
  sub->add_option("--dedup-memory", a->dedup_memory,
                  "--out X.h5: host memory per rank for merging repeated coordinates (\"8G\"; "
                  "default: half of 3/4 of the node's memory shared by its ranks); over it, "
                  "sorted runs spill to the scratch folder");
  sub->add_option("--scratch", a->scratch,
                  "--out X.h5: folder of the scratch files of sorted runs (default: the output's "
                  "folder)");
  sub->add_option("--json", a->json, "Write the run record (JSON) here (docs/run-record.md)");
  add_force_option(sub, a->force);
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_generate(*a, world); }; });
}

}  // namespace tessera::driver
