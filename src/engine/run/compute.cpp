#include "run/compute.hpp"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "io/h5store.hpp"
#include "io/output.hpp"
#include "kernels/factories.hpp"
#include "plan/limits.hpp"
#include "plan/measure.hpp"
#include "run/checkpoint.hpp"
#include "run/input.hpp"
#include "run/record.hpp"
#include "util/cpus.hpp"
#include "util/log.hpp"

namespace tessera::run {

template <typename T>
partition::Distributed<T> load_and_distribute(const LoadOptions& o, partition::Scheme scheme,
                                              const comm::Communicator& world, Loaded* info) {
  Timer t;
  io::TnsReadOptions ro;
  ro.base = io::parse_index_base(o.index_base);
  // Single precision: values float cannot hold are refused with FILE:LINE (or /values[k]).
  ro.float_values = std::is_same_v<T, float>;
  io::H5ReadOptions ho;
  ho.float_values = ro.float_values;
  // HDF5 tensor stores are recognised by name (.h5, .hdf5) or signature bytes (rank 0 looks,
  // so every rank takes the same path); the index base does not apply (stored 0-based).
  std::vector<int> stored_grid;  // grid of the store's partition when each rank read a block
  io::TnsReadResult rr;
  if (io::is_tensor_store(o.path, world)) {
    auto hr = io::read_h5(o.path, world, ho);
    if (hr.by_block) stored_grid = hr.info.partition->grid;
    rr = std::move(hr);
  } else {
    rr = io::read_tns(o.path, world, ro);
  }
  const double read_s = t.seconds();
  log::info("read " + o.path + ": " + std::to_string(rr.global_nnz) + " nonzeros, order " +
            std::to_string(rr.local.order()) + ", dims " + format_dims(rr.local.dims) + ", " +
            human_bytes(static_cast<double>(rr.bytes)) + " in " + std::to_string(read_s) + " s");
  t.reset();
  std::vector<int> grid;
  // The same options and order on every rank: an error is agreed (one line, no abort).
  if (!o.grid.empty())
    comm::run_collectively(
        world, [&] { grid = partition::parse_grid(o.grid, rr.local.order(), world.size()); });
  // A store partitioned for this many ranks: each rank read its block, and the grid scheme
  // on the stored grid cuts the same chunks (partition::detail::balanced_cuts on the same
  // nonzeros), so the redistribution below keeps every nonzero on its rank.
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(!(o.deal && o.relabel),
                        "--deal and --relabel are two relabellings: give one");
  });
  const bool deal = deal_applies(o, scheme);
  if (!stored_grid.empty() && grid.empty() && keeps_stored_grid(o, scheme)) {
    grid = stored_grid;
    log::info("using the partition stored in " + o.path + " (each rank read its block)");
  }
  SparseTensor<T> local;
  if constexpr (std::is_same_v<T, double>) {
    local = std::move(rr.local);
  } else {
    local = rr.local.template cast<T>();
  }
  rr.local = SparseTensor<double>();
  auto d = o.relabel ? partition::distribute_relabelled(std::move(local), scheme, grid, world,
                                                        partition::kRelabelSeed)
           : deal    ? partition::distribute_dealt(std::move(local), grid, world)
                     : partition::distribute(std::move(local), scheme, grid, world);
  const double dist_s = t.seconds();
  log::info(d.dist.describe());
  if (d.dist.duplicates > 0)
    log::warn(std::to_string(d.dist.duplicates) +
              " repeated coordinates were summed into other nonzeros");
  if (info) {
    info->read_seconds = read_s;
    info->distribute_seconds = dist_s;
    info->read = std::move(rr);
  }
  return d;
}

template partition::Distributed<float> load_and_distribute<float>(const LoadOptions&,
                                                                  partition::Scheme,
                                                                  const comm::Communicator&,
                                                                  Loaded*);
template partition::Distributed<double> load_and_distribute<double>(const LoadOptions&,
                                                                    partition::Scheme,
                                                                    const comm::Communicator&,
                                                                    Loaded*);

nlohmann::json report_memory_tier(int tier, const std::string& description, double copy_s,
                                  double compute_s, double overlap, int iterations,
                                  const TierFloor& floor, double iteration_s) {
  const int it = std::max(iterations, 1);
  const double floor_s = floor.bandwidth > 0 ? floor.bytes_per_iteration / floor.bandwidth : 0;
  const double bound = std::max(floor_s, compute_s / it);
  if (tier >= 2) {
    char line[512];
    std::snprintf(line, sizeof(line),
                  "memory tier %d: per iteration %.4f s %s, %.4f s computing; %.0f%% of the %s "
                  "time hidden behind compute; floor %.4f s (%s at %s/s, %s); iteration %.4f s "
                  "= %.2fx max(floor, compute)",
                  tier, copy_s / it,
                  tier == 3 ? "reading from disk (prefetch thread)" : "copying to the backend",
                  compute_s / it, 100 * overlap, tier == 3 ? "read" : "copy", floor_s,
                  human_bytes(floor.bytes_per_iteration).c_str(),
                  human_bytes(floor.bandwidth).c_str(), floor.what.c_str(), iteration_s,
                  bound > 0 ? iteration_s / bound : 0.0);
    log::info(line);
  }
  nlohmann::json j = {{"tier", tier},
                      {"description", description},
                      {"copy_seconds", copy_s},
                      {"copy_kind", tier == 3   ? "disk read"
                                    : tier == 2 ? "host to backend"
                                                : "none"},
                      {"compute_seconds", compute_s},
                      {"overlap_fraction", overlap}};
  if (tier >= 2) {
    j["floor"] = {{"bytes_per_iteration", floor.bytes_per_iteration},
                  {"bandwidth_bytes_per_s", floor.bandwidth},
                  {"what", floor.what},
                  {"seconds_per_iteration", floor_s}};
    j["seconds_per_iteration"] = iteration_s;
    j["ratio_to_max_floor_compute"] = bound > 0 ? iteration_s / bound : 0.0;
  }
  return j;
}

template <typename T>
TierFloor tier_floor(const plan::Plan& p, const std::string& path, kernels::Backend<T>& be,
                     int threads, const comm::Communicator& world) {
  TierFloor f;
  if (p.tier == 3) {
    f.bytes_per_iteration = p.read_bytes_per_iteration;
    // The whole file when it is under 8 GiB, else its first 8 GiB (the rate, not the
    // volume, is what the floor needs).
    // With drop-behind the probe is cold too (evicted first, each block dropped once read):
    // the disk's rate, as the run's passes see it.
    f.bandwidth = io::measure_read_bandwidth(path, std::uint64_t(8) << 30,
                                             effective_threads(threads), p.drop_behind);
    f.what = p.drop_behind
                 ? "the store read by pread() just before the run, evicted from the page cache "
                   "first and dropped behind the reads (the disk)"
                 : "the store read by pread() just before the run, through the page cache";
  } else if (p.tier == 2 && be.kind() == kernels::BackendKind::cuda) {
    f.bytes_per_iteration = p.copy_bytes_per_iteration;
    // Host -> device from page-locked memory, as the chunks are copied: best of 3.
    const std::size_t n = (std::size_t(256) << 20) / sizeof(T);
    std::vector<T> h(n, T(1));
    auto pin = be.pin_host(h.data(), n * sizeof(T));
    auto d = be.allocate(n);
    double best = 1e30;
    for (int k = 0; k < 3; ++k) {
      Timer t;
      be.upload(h.data(), n, d.data());
      be.synchronize();
      best = std::min(best, t.seconds());
    }
    f.bandwidth = static_cast<double>(n * sizeof(T)) / best;
    f.what = pin ? "host to device from page-locked memory" : "host to device (not page-locked)";
  } else if (p.tier == 2) {
    // Host backends: the chunks are prepared per pass in host memory; no link to measure.
    f.what = "not measured on host backends";
  }
  world.allreduce(&f.bandwidth, 1, comm::ReduceOp::min);
  return f;
}
template TierFloor tier_floor<float>(const plan::Plan&, const std::string&,
                                     kernels::Backend<float>&, int, const comm::Communicator&);
template TierFloor tier_floor<double>(const plan::Plan&, const std::string&,
                                      kernels::Backend<double>&, int, const comm::Communicator&);

std::size_t parse_bytes(const std::string& s, const char* what) {
  return static_cast<std::size_t>(plan::parse_bytes(s, what));
}

template <typename T>
Compute<T> make_compute(const ComputeOptions& o, const comm::MpiCommunicator& world) {
  // Every rank sees the same options: failures here are agreed, so the job ends cleanly.
  Compute<T> c;
  comm::run_collectively(world, [&] {
    c.kind = kernels::parse_backend(o.backend);
    if (c.kind == kernels::BackendKind::cuda) {
      TESSERA_INPUT_CHECK(kernels::cuda_built(),
                          "--backend cuda: this tessera was built without CUDA (reconfigure with "
                          "-DTESSERA_WITH_CUDA=ON where the CUDA toolkit and NCCL are installed)");
      TESSERA_INPUT_CHECK(kernels::cuda_device_count() > 0,
                          "--backend cuda: no GPU is visible to rank "
                              << world.rank()
                              << " (tessera plan --device-budget SIZE plans for a card without "
                                 "seeing one)");
    }
  });
  if (o.threads > 0) omp_set_num_threads(o.threads);
  c.data = &world;
  if (c.kind == kernels::BackendKind::cuda) {
    comm::NcclOptions no;
    no.timeout_s = o.nccl_timeout_s;
    c.nccl = comm::make_nccl_communicator(world, no);
    c.data = c.nccl.get();
  }
  comm::run_collectively(
      world, [&] { c.backend = kernels::make_backend<T>(c.kind, o.threads, o.tuning); });
  return c;
}
template Compute<float> make_compute<float>(const ComputeOptions&, const comm::MpiCommunicator&);
template Compute<double> make_compute<double>(const ComputeOptions&, const comm::MpiCommunicator&);

std::size_t peak_rss_bytes() {
  return static_cast<std::size_t>(plan::process_memory().hwm);
}

nlohmann::json machine_json(const comm::Communicator& world, const std::string& backend,
                            int threads) {
  nlohmann::json j;
  j["host"] = log::hostname();
  j["ranks"] = world.size();
  j["threads_per_rank"] = effective_threads(threads);
  j["backend"] = backend;
  return j;
}

void write_json(const std::string& path, const nlohmann::json& j, const comm::Communicator& world) {
  if (path.empty() || world.rank() != 0) return;
  // io/output.hpp: a temporary renamed by commit() and removed on error; a character
  // device or FIFO is written directly.
  io::AtomicOutput out(path);
  nlohmann::json rec = j;
  rec[io::kRecordKey] = io::kRecordValue;
  {
    std::ofstream f(out.write_path());
    TESSERA_INPUT_CHECK(f.good(), "--json: cannot write '" << out.write_path() << "'");
    f << rec.dump(2) << "\n";
    f.close();
    TESSERA_INPUT_CHECK(!f.fail(), "--json: cannot write '" << out.write_path() << "'");
  }
  out.commit();
}

int effective_threads(int requested) {
  return requested > 0 ? requested : std::min(omp_get_max_threads(), util::usable_cpus().cpus);
}

std::string cap_threads_option(const std::string& value) {
  int n = 0;
  const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec == std::errc::result_out_of_range && !value.empty() && value[0] != '-')
    n = std::numeric_limits<int>::max();
  else if (ec != std::errc() || p != value.data() + value.size())
    return value;  // not a number: the option's own check reports it
  std::string warning;
  const int capped = util::cap_threads(n, "--threads " + value, &warning);
  if (!warning.empty()) log::warn(warning);
  return std::to_string(capped);
}

NodeCpus node_cpus(const comm::MpiCommunicator& world) {
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(),
                                        MPI_INFO_NULL, &node));
  NodeCpus n;
  MPI_Comm_size(node, &n.ranks);
  // The node's CPUs: the union of the ranks' affinity masks (bound ranks see their own
  // cores only), then the container's quota and Slurm's grant.
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  CPU_ZERO(&all);
  int mask = 0;
  std::string mask_source;
  // Every rank takes part in the reduction (a failed read contributes an empty mask).
  const bool have = sched_getaffinity(0, sizeof(mine), &mine) == 0;
  int all_have = have ? 1 : 0;
  MPI_Allreduce(&mine, &all, static_cast<int>(sizeof(cpu_set_t)), MPI_BYTE, MPI_BOR, node);
  MPI_Allreduce(MPI_IN_PLACE, &all_have, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (all_have == 1) {
    mask = CPU_COUNT(&all);
    mask_source = "the CPUs in the affinity masks of this node's ranks";
  } else {
    mask = util::affinity_cpus();
    mask_source = "this node's CPUs";
  }
  std::string quota_src;
  const auto quota = util::cgroup_cpu_quota("/", &quota_src);
  n.limit =
      util::node_cpu_limit(mask, mask_source, quota, quota_src, std::getenv("SLURM_CPUS_ON_NODE"));
  return n;
}

int default_threads(const comm::MpiCommunicator& world) {
  const NodeCpus n = node_cpus(world);
  return util::default_threads_per_rank(n.limit.cpus, n.ranks, util::usable_cpus().cpus);
}

std::string warn_oversubscription(const comm::MpiCommunicator& world, int threads) {
  const NodeCpus n = node_cpus(world);
  MPI_Comm node = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(),
                                        MPI_INFO_NULL, &node));
  int total = std::max(threads, 1);
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT, MPI_SUM, node);
  MPI_Comm_free(&node);
  const int cpus = n.limit.cpus, ranks = n.ranks;
  if (total <= cpus) return {};
  const int fit = std::max(1, cpus / ranks);
  std::string line =
      std::to_string(total) + " threads on this node (" + std::to_string(ranks) + " rank(s) x " +
      std::to_string(threads) + " thread(s)) but only " + std::to_string(cpus) + " CPU(s) (" +
      n.limit.source + "): they will take turns and slow every rank; run --threads " +
      std::to_string(fit) + " (or OMP_NUM_THREADS=" + std::to_string(fit) +
      ") or fewer ranks per node, or give neither (the default is the node's CPUs divided by "
      "its ranks)";
  log::warn(line);
  return line;
}

std::string human_bytes(double b) {
  return plan::human_bytes(b);
}

std::size_t default_memory_limit(const comm::MpiCommunicator& world) {
  // The planner's measured host limit (MemAvailable, cgroup, Slurm; shared by the node's
  // ranks), agreed over the ranks.
  return static_cast<std::size_t>(
      plan::measure_limits(world, plan::Backend::cpu, std::string()).host.bytes);
}

template <typename T>
double measure_bandwidth(kernels::Backend<T>& be, int threads, std::size_t bytes,
                         const comm::Communicator* together) {
  if (bytes == 0)
    bytes = be.memory_space() == comm::MemorySpace::host ? (std::size_t(512) << 20)
                                                         : (std::size_t(2) << 30);
  const std::size_t n = bytes / sizeof(T);
  auto a = be.allocate(n), b = be.allocate(n);
  be.fill(a.data(), n, T(1));
  be.fill(b.data(), n, T(0));
  be.synchronize();
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    if (together != nullptr) together->barrier();
    Timer t;
    if (be.memory_space() == comm::MemorySpace::host) {
      // All of the rank's threads, as the kernels use them.
      const T* src = a.data();
      T* dst = b.data();
#pragma omp parallel for schedule(static) num_threads(effective_threads(threads))
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) dst[i] = src[i];
    } else {
      be.copy(a.data(), n, b.data());
      be.synchronize();
    }
    double s = t.seconds();
    if (together != nullptr) s = together->allreduce_value(s, comm::ReduceOp::max);
    best = std::min(best, s);
  }
  return 2.0 * static_cast<double>(n * sizeof(T)) / best;
}
template double measure_bandwidth<float>(kernels::Backend<float>&, int, std::size_t,
                                         const comm::Communicator*);
template double measure_bandwidth<double>(kernels::Backend<double>&, int, std::size_t,
                                          const comm::Communicator*);

}  // namespace tessera::run
