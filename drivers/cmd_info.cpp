// tessera info: what a tensor file holds.
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tensor/stats.hpp"
#include "util/log.hpp"

namespace tessera::driver {
namespace {

struct InfoArgs {
  LoadOptions load;
};

void run_info(const InfoArgs& a, const comm::MpiCommunicator& world) {
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
  }
}

}  // namespace

void add_info(CLI::App& app, Runner& run) {
  auto a = std::make_shared<InfoArgs>();
  auto* sub =
      app.add_subcommand("info", "Order, dims, nonzeros and per-mode statistics of a tensor");
  sub->add_option("file", a->load.path, "Tensor (.tns or .tns.gz)")->required();
  sub->add_option("--index-base", a->load.index_base, "1 | 0 | auto")
      ->check(CLI::IsMember({"1", "0", "auto"}));
  sub->callback(
      [a, &run] { run = [a](const comm::MpiCommunicator& world) { run_info(*a, world); }; });
}

}  // namespace tessera::driver
