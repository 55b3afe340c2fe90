#include "common.hpp"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "comm/nccl_communicator.hpp"
#include "io/h5store.hpp"
#include "kernels/factories.hpp"
#include "util/log.hpp"

namespace tessera::driver {

template <typename T>
partition::Distributed<T> load_and_distribute(const LoadOptions& o, partition::Scheme scheme,
                                              const comm::Communicator& world, Loaded* info) {
  Timer t;
  io::TnsReadOptions ro;
  ro.base = io::parse_index_base(o.index_base);
  // HDF5 tensor stores are recognised by name (.h5, .hdf5) or signature bytes (rank 0 looks,
  // so every rank takes the same path); the index base does not apply (stored 0-based).
  std::vector<int> stored_grid;  // grid of the store's partition when each rank read a block
  io::TnsReadResult rr;
  if (io::is_tensor_store(o.path, world)) {
    auto hr = io::read_h5(o.path, world);
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
  if (!o.grid.empty()) grid = partition::parse_grid(o.grid, rr.local.order(), world.size());
  // A store partitioned for this many ranks: each rank read its block, and the grid scheme
  // on the stored grid cuts the same chunks (partition::detail::balanced_cuts on the same
  // nonzeros), so the redistribution below keeps every nonzero on its rank.
  if (!stored_grid.empty() && scheme == partition::Scheme::grid && grid.empty() && !o.relabel) {
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
  // The relabelling key is fixed: results do not depend on it (initial factors are keyed
  // by original rows and the model is written in original indices).
  constexpr std::uint64_t kRelabelSeed = 0x7E55E2A5EEDull;
  auto d = o.relabel ? partition::distribute_relabelled(std::move(local), scheme, grid, world,
                                                        kRelabelSeed)
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

template <typename T>
io::TensorFingerprint Input<T>::fingerprint(const comm::Communicator& world) const {
  if (disk) return io::finish_fingerprint(disk->fingerprint_part(), dims, world);
  return io::tensor_fingerprint(dist->block, original_index_of(dist->dist), world);
}

template <typename T>
Input<T> load_input(const LoadOptions& o, const ComputeOptions& run, partition::Scheme scheme,
                    bool allreduce, kernels::BackendKind kind, const comm::MpiCommunicator& world,
                    Loaded* info) {
  Input<T> in;
  const bool store = io::is_tensor_store(o.path, world);
  const bool host_backend = kind != kernels::BackendKind::cuda;
  std::size_t limit = 0;
  bool forced = false;
  comm::run_collectively(world, [&] {
    TESSERA_INPUT_CHECK(store || run.host_budget.empty(),
                        "--host-budget: " << o.path
                                          << " is a text file; memory tier 3 streams HDF5 "
                                             "stores: convert it first (tessera convert "
                                          << o.path << " OUT.h5)");
    TESSERA_INPUT_CHECK(run.stream_chunk >= 0, "--stream-chunk must be >= 0");
    if (!run.host_budget.empty()) {
      limit = parse_bytes(run.host_budget, "--host-budget");
      forced = true;
    } else if (host_backend && !run.mem_budget.empty()) {
      limit = parse_bytes(run.mem_budget, "--mem-budget");
      forced = true;
    }
  });
  if (store) {
    const io::H5TensorInfo h = io::read_h5_info(o.path, world);
    const int P = world.size(), me = world.rank();
    const int N = static_cast<int>(h.dims.size());
    const bool by_block = h.partition && h.partition->nblocks() == P;
    auto range_of = [&](int r) -> std::pair<nnz_t, nnz_t> {
      if (by_block) return h.partition->block_range(r);
      const nnz_t a = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * r / P);
      const nnz_t b = static_cast<nnz_t>(static_cast<__int128>(h.nnz) * (r + 1) / P);
      return {a, b - a};
    };
    nnz_t max_block = 0, min_block = h.nnz;
    for (int r = 0; r < P; ++r) {
      max_block = std::max(max_block, range_of(r).second);
      min_block = std::min(min_block, range_of(r).second);
    }
    const std::size_t per_nnz = static_cast<std::size_t>(N) * sizeof(index_t) + sizeof(T);
    // Tiers 1-2 hold about three copies of the block on the host at their peak (the read
    // buffer, the distributed block, the prepared format or its pinned staging).
    const double need = 3.0 * static_cast<double>(max_block) * static_cast<double>(per_nnz);
    if (!forced) limit = default_memory_limit(world);
    if (need > static_cast<double>(limit)) {
      comm::run_collectively(world, [&] {
        TESSERA_INPUT_CHECK(allreduce,
                            "memory tier 3 (the block of " << human_bytes(need)
                                                           << " is over the host limit of "
                                                           << human_bytes(limit)
                                                           << ") runs the allreduce strategy "
                                                              "only: drop --comm-strategy layer");
        TESSERA_INPUT_CHECK(!o.relabel, "memory tier 3 streams the stored order: --relabel is "
                                        "not available (balance the blocks with tessera "
                                        "partition instead)");
        TESSERA_INPUT_CHECK(h.has_duplicates != 1,
                            o.path << " has repeated coordinates (has_duplicates = 1): memory "
                                      "tier 3 cannot sum them before ||X|| is taken; run it "
                                      "within the host limit (--host-budget) instead");
      });
      if (!o.grid.empty() || o.partition != "auto")
        log::info("memory tier 3: --grid/--partition do not apply (each rank streams " +
                  std::string(by_block ? "its block of the stored partition" :
                                         "an equal share of the stored order") + ")");
      if (h.has_duplicates == -1)
        log::info("memory tier 3: " + o.path + " was not checked for repeated coordinates; the "
                  "MTTKRP sums them, but ||X|| (the fit) counts each stored copy");
      nnz_t chunk = run.stream_chunk;
      if (chunk == 0) {
        // Two raw chunks, the prepared chunk (up to order + 1 copies) and its output.
        const double c = static_cast<double>(limit) / (4.0 * per_nnz * (N + 1));
        chunk = static_cast<nnz_t>(std::clamp(c, 1024.0,
                                              static_cast<double>(algo::kDefaultDiskChunkNnz)));
        // Reads cover whole store chunks: a multiple of them reads each byte once.
        const auto sc = static_cast<nnz_t>(h.chunk_elems);
        if (sc > 0 && chunk >= sc) chunk -= chunk % sc;
      }
      char line[320];
      std::snprintf(line, sizeof(line),
                    "memory tier 3: a block needs about %s of host memory in tiers 1-2, over the "
                    "limit of %s per rank%s; streaming %s from disk in chunks of %lld nonzeros",
                    human_bytes(need).c_str(), human_bytes(static_cast<double>(limit)).c_str(),
                    forced ? " (--host-budget/--mem-budget)" : "", o.path.c_str(),
                    static_cast<long long>(chunk));
      log::info(line);
      Timer t;
      comm::run_collectively(world, [&] {
        algo::DiskTensorOptions d;
        d.path = o.path;
        if (by_block) {
          d.block = me;
        } else {
          d.first = range_of(me).first;
          d.count = range_of(me).second;
        }
        d.chunk_nnz = chunk;
        in.disk = std::make_unique<algo::DiskTensor<T>>(d);
      });
      const double open_s = world.allreduce_value(t.seconds(), comm::ReduceOp::max);
      in.dims = h.dims;
      in.global_nnz = h.nnz;
      in.grid.assign(static_cast<std::size_t>(N), 1);
      in.min_block_nnz = min_block;
      in.max_block_nnz = max_block;
      const double mean = P > 0 ? static_cast<double>(h.nnz) / P : 0.0;
      in.imbalance = mean > 0 ? static_cast<double>(max_block) / mean : 1.0;
      in.partition_scheme = by_block ? "store-blocks" : "store-order";
      log::info("first pass over " + o.path + " (checks, distinct rows, norm) in " +
                std::to_string(open_s) + " s; rank 0: " + in.disk->describe());
      if (info) {
        info->read_seconds = open_s;
        info->read.bytes = static_cast<std::size_t>(in.disk->mttkrp_stream_bytes(0));
      }
      return in;
    }
  }
  in.dist.emplace(load_and_distribute<T>(o, scheme, world, info));
  const auto& dd = in.dist->dist;
  in.dims = dd.dims;
  in.global_nnz = dd.global_nnz;
  in.duplicates = dd.duplicates;
  in.grid = dd.grid;
  in.imbalance = dd.imbalance;
  in.min_block_nnz = dd.min_block_nnz;
  in.max_block_nnz = dd.max_block_nnz;
  in.partition_scheme = partition::to_string(dd.scheme);
  return in;
}

#define TESSERA_LOAD_INPUT(T)                                                                   \
  template struct Input<T>;                                                                     \
  template Input<T> load_input<T>(const LoadOptions&, const ComputeOptions&, partition::Scheme, \
                                  bool, kernels::BackendKind, const comm::MpiCommunicator&,     \
                                  Loaded*);
TESSERA_LOAD_INPUT(float)
TESSERA_LOAD_INPUT(double)
#undef TESSERA_LOAD_INPUT

nlohmann::json report_memory_tier(int tier, const std::string& description, double copy_s,
                                  double compute_s, double overlap, int iterations) {
  const int it = std::max(iterations, 1);
  if (tier >= 2) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "memory tier %d: per iteration %.4f s %s, %.4f s computing; %.0f%% of the %s "
                  "time hidden behind compute",
                  tier, copy_s / it,
                  tier == 3 ? "reading from disk (prefetch thread)" : "copying to the GPU",
                  compute_s / it, 100 * overlap, tier == 3 ? "read" : "copy");
    log::info(line);
  }
  return {{"tier", tier},
          {"description", description},
          {"copy_seconds", copy_s},
          {"copy_kind", tier == 3 ? "disk read" : tier == 2 ? "host to device" : "none"},
          {"compute_seconds", compute_s},
          {"overlap_fraction", overlap}};
}

void add_compute_options(CLI::App* sub, ComputeOptions& o, LoadOptions& load) {
  sub->add_option("--comm-strategy", o.strategy,
                  "Factor update: allreduce (all-reduce whole MTTKRP outputs) | layer "
                  "(reduce-scatter/all-gather inside grid layers)")
      ->check(CLI::IsMember({"allreduce", "layer"}));
  sub->add_option("--backend", o.backend,
                  "auto (cuda when a GPU is present, else cpu) | reference | cpu | cuda")
      ->check(CLI::IsMember({"auto", "reference", "cpu", "cuda"}));
  sub->add_option("--threads", o.threads, "OpenMP threads per rank (0: OMP_NUM_THREADS)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--precision", o.precision, "double | float")
      ->check(CLI::IsMember({"double", "float"}));
  sub->add_option("--index-base", load.index_base, "Coordinate base of the file: 1 | 0 | auto")
      ->check(CLI::IsMember({"1", "0", "auto"}));
  sub->add_option("--mem-budget", o.mem_budget,
                  "Backend memory the tensor may occupy, e.g. 2G or 512M (K/M/G/T = 1024^k); "
                  "a smaller budget forces the GPU to stream the tensor from host memory "
                  "(tier 2); on host backends an HDF5 input over it is streamed from disk "
                  "(tier 3). Default: all free memory");
  sub->add_option("--host-budget", o.host_budget,
                  "Host memory this rank's block may occupy, e.g. 64G; an HDF5 input whose "
                  "block would not fit is streamed from disk by a prefetch thread (memory tier "
                  "3). On host backends --mem-budget does the same. Default: 3/4 of the node's "
                  "memory shared by its ranks");
  sub->add_option("--stream-chunk", o.stream_chunk,
                  "Memory tier 3: nonzeros per streamed chunk (default: from the budget, at "
                  "most 16 Mi)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--json", o.json, "Write the run record (JSON) here");
}

std::size_t parse_bytes(const std::string& s, const char* what) {
  TESSERA_INPUT_CHECK(!s.empty(), what << " is empty");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1;
  std::string suffix = end ? std::string(end) : "";
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix == "K" || suffix == "k")
    mult = 1024.0;
  else if (suffix == "M" || suffix == "m")
    mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    TESSERA_INPUT_CHECK(suffix.empty(),
                        "bad " << what << " '" << s << "': expected a size like 8G, 512M or 1e9");
  TESSERA_INPUT_CHECK(
      errno == 0 && end != s.c_str() && v > 0 && std::isfinite(v * mult) && v * mult < 1.8e19,
      "bad " << what << " '" << s << "': expected a positive size like 8G, 512M or 1e9");
  return static_cast<std::size_t>(v * mult);
}

template <typename T>
Compute<T> make_compute(const ComputeOptions& o, const comm::MpiCommunicator& world) {
  // Every rank sees the same options: failures here are agreed, so the job ends cleanly.
  Compute<T> c;
  std::size_t budget = 0;
  comm::run_collectively(world, [&] {
    c.kind = kernels::parse_backend(o.backend);
    if (!o.mem_budget.empty()) budget = parse_bytes(o.mem_budget, "--mem-budget");
    if (c.kind == kernels::BackendKind::cuda) {
      TESSERA_INPUT_CHECK(kernels::cuda_built(),
                          "--backend cuda: this tessera was built without CUDA (reconfigure with "
                          "-DTESSERA_WITH_CUDA=ON where the CUDA toolkit and NCCL are installed)");
      TESSERA_INPUT_CHECK(kernels::cuda_device_count() > 0,
                          "--backend cuda: no GPU is visible to rank " << world.rank());
    }
  });
  if (o.threads > 0) omp_set_num_threads(o.threads);
  c.data = &world;
  if (c.kind == kernels::BackendKind::cuda) {
    c.nccl = comm::make_nccl_communicator(world);
    c.data = c.nccl.get();
  }
  comm::run_collectively(world, [&] {
    c.backend = kernels::make_backend<T>(c.kind, o.threads);
    if (budget > 0) c.backend->set_memory_budget(budget);
  });
  return c;
}
template Compute<float> make_compute<float>(const ComputeOptions&, const comm::MpiCommunicator&);
template Compute<double> make_compute<double>(const ComputeOptions&, const comm::MpiCommunicator&);

std::size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::size_t>(u.ru_maxrss) * 1024;
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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    TESSERA_INPUT_CHECK(f.good(), "cannot write '" << tmp << "'");
    f << j.dump(2) << "\n";
    TESSERA_INPUT_CHECK(f.good(), "cannot write '" << tmp << "'");
  }
  TESSERA_INPUT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
                      "cannot rename '" << tmp << "' to '" << path << "'");
}

int effective_threads(int requested) {
  return requested > 0 ? requested : omp_get_max_threads();
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000 && i < 4) {
    b /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", b, u[i]);
  return buf;
}

std::size_t default_memory_limit(const comm::MpiCommunicator& world) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const double phys = pages > 0 && page > 0 ? static_cast<double>(pages) * page : 0.0;
  const std::uint64_t h = std::hash<std::string>{}(log::hostname());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world.size()));
  world.allgather(&h, all.data(), 1);
  int on_node = 0;
  for (auto x : all) on_node += x == h ? 1 : 0;
  double limit = phys > 0 ? 0.75 * phys / std::max(on_node, 1) : 0.0;
  world.allreduce(&limit, 1, comm::ReduceOp::min);
  return static_cast<std::size_t>(limit);
}

template <typename T>
double measure_bandwidth(kernels::Backend<T>& be, int threads) {
  const std::size_t bytes = be.memory_space() == comm::MemorySpace::host ? (std::size_t(512) << 20)
                                                                         : (std::size_t(2) << 30);
  const std::size_t n = bytes / sizeof(T);
  auto a = be.allocate(n), b = be.allocate(n);
  be.fill(a.data(), n, T(1));
  be.fill(b.data(), n, T(0));
  be.synchronize();
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
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
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(n * sizeof(T)) / best;
}
template double measure_bandwidth<float>(kernels::Backend<float>&, int);
template double measure_bandwidth<double>(kernels::Backend<double>&, int);

}  // namespace tessera::driver
