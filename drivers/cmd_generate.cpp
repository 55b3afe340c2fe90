// tessera generate: synthetic low-rank-plus-noise tensors, written as FROSTT text.
#include <cmath>
#include <memory>

#include "algo/generate.hpp"
#include "commands.hpp"
#include "common.hpp"
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
};

void run_generate(const GenArgs& a, const comm::MpiCommunicator& world) {
  algo::GenerateOptions o;
  o.dims = parse_dims(a.dims);
  TESSERA_INPUT_CHECK(a.nnz >= 1 && a.nnz < 9.2e18 && a.nnz == std::floor(a.nnz),
                      "--nnz must be a positive integer (got " << a.nnz << ")");
  o.nnz = static_cast<std::int64_t>(a.nnz);
  o.rank = a.rank;
  o.noise = a.noise;
  o.alpha = a.alpha;
  o.dist = algo::parse_index_dist(a.dist);
  o.structure = algo::parse_structure(a.structure);
  o.seed = a.seed;
  Timer t;
  algo::GenerateInfo gi;
  auto d = algo::generate(o, world, &gi);
  const double gen_s = t.seconds();
  t.reset();
  io::write_tns(a.out, d.block, world);
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
      "generate", "Write a synthetic tensor: exact rank-R structure plus noise (FROSTT text)");
  sub->add_option("--dims", a->dims, "Mode lengths, e.g. 200x300x400")->required();
  sub->add_option("--nnz", a->nnz, "Target number of nonzeros (e.g. 1e6)")->required();
  sub->add_option("-r,--rank", a->rank, "Rank R of the planted structure")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--noise", a->noise, "Relative noise level (0.01 = 1%)")
      ->check(CLI::NonNegativeNumber);
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
  sub->add_option("-s,--seed", a->seed, "Random seed");
  sub->add_option("-o,--out", a->out, "Output file (.tns or .tns.gz)")->required();
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_generate(*a, world); }; });
}

}  // namespace tessera::driver
