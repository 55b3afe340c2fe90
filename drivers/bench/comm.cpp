// tessera bench comm: allreduce, reduce_scatter and allgather over every rank, timed as
// nccl-tests times them (comm.hpp); and collective_floor, the NCCL floor beside bench cp and
// bench tucker.
#include "bench/comm.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "bench/harness.hpp"
#include "common.hpp"
#include "io/output.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::driver {
namespace bench {

namespace {

constexpr std::array<std::pair<Collective, const char*>, 3> kCollectives = {{
    {Collective::allreduce, "allreduce"},
    {Collective::reduce_scatter, "reduce_scatter"},
    {Collective::allgather, "allgather"},
}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

const char* to_string(Collective c) {
  for (const auto& [k, name] : kCollectives)
    if (k == c) return name;
  return "?";
}

Collective parse_collective(const std::string& name) {
  for (const auto& [k, n] : kCollectives)
    if (name == n) return k;
  TESSERA_INPUT_CHECK(false, "--op: unknown collective '"
                                 << name << "': expected allreduce, reduce_scatter or allgather");
  return Collective::allreduce;
}

double bus_factor(Collective c, int P) {
  const double share = static_cast<double>(P - 1) / P;
  return c == Collective::allreduce ? 2 * share : share;
}

template <typename T>
CollectiveTime time_collective(Collective c, std::size_t elements, T* a, T* b,
                               kernels::Backend<T>& be, const comm::Communicator& data,
                               const comm::Communicator& world, const CommTiming& t) {
  const int P = data.size();
  const std::size_t block = elements / static_cast<std::size_t>(P);
  TESSERA_EXPECTS(c == Collective::allreduce || block * static_cast<std::size_t>(P) == elements,
                  "reduce_scatter and allgather time whole blocks (elements a multiple of ranks)");
  TESSERA_EXPECTS(be.memory_space() == data.memory_space(),
                  "the buffers live where the communicator expects them");
  CollectiveTime r;
  r.stream_ordered = data.can_enqueue();
  r.batch = r.stream_ordered ? std::max(1, t.batch) : 1;
  void* stream = be.native_stream();
  const auto run = [&] {
    if (r.stream_ordered) {
      for (int k = 0; k < r.batch; ++k) {
        switch (c) {
          case Collective::allreduce:
            data.enqueue_allreduce(a, elements, comm::ReduceOp::sum, stream);
            break;
          case Collective::reduce_scatter:
            data.enqueue_reduce_scatter(a, b, block, stream);
            break;
          case Collective::allgather:
            data.enqueue_allgather(b, a, block, stream);
            break;
        }
      }
      data.wait_stream(stream, to_string(c));
      return;
    }
    switch (c) {
      case Collective::allreduce:
        data.allreduce(a, elements);
        break;
      case Collective::reduce_scatter:
        data.reduce_scatter(a, b, block);
        break;
      case Collective::allgather:
        data.allgather(b, a, block);
        break;
    }
  };
  be.synchronize();  // the buffers' fills and earlier work are not timed
  for (int k = 0; k < t.warmup; ++k) run();
  std::vector<double> mean, slowest;
  for (int k = 0; k < std::max(1, t.repeat); ++k) {
    world.barrier();
    Timer timer;
    run();
    const double s = timer.seconds() / r.batch;
    mean.push_back(world.allreduce_value(s) / world.size());
    slowest.push_back(world.allreduce_value(s, comm::ReduceOp::max));
  }
  r.seconds = median(mean);
  r.slowest_seconds = median(slowest);
  return r;
}

template <typename T>
std::optional<CommFloor> collective_floor(std::vector<FloorCall> calls, kernels::Backend<T>& be,
                                          const comm::Communicator& data,
                                          const comm::Communicator& world, const CommTiming& t) {
  if (!data.can_enqueue() || world.size() < 2) return std::nullopt;
  // Every rank must call the same collectives: each count is the largest over the ranks.
  std::vector<std::uint64_t> counts;
  for (const FloorCall& c : calls) counts.push_back(c.elements);
  if (!counts.empty()) world.allreduce(counts.data(), counts.size(), comm::ReduceOp::max);
  const auto P = static_cast<std::uint64_t>(data.size());
  for (std::size_t k = 0; k < calls.size(); ++k)
    calls[k].elements =
        calls[k].op == Collective::allreduce ? counts[k] : (counts[k] + P - 1) / P * P;
  CommFloor f;
  f.timing = t;
  // a: the whole buffer of every call; b: reduce_scatter's and allgather's block.
  std::uint64_t most = 1, block = 1;
  for (const FloorCall& c : calls) {
    most = std::max(most, c.elements);
    if (c.op != Collective::allreduce) block = std::max(block, c.elements / P);
  }
  auto a = be.allocate(static_cast<std::size_t>(most));
  auto b = be.allocate(static_cast<std::size_t>(block));
  be.fill(a.data(), a.size(), T(0));  // sums of zeros stay finite however often repeated
  be.fill(b.data(), b.size(), T(0));
  std::map<std::pair<int, std::uint64_t>, double> timed;  // equal calls are timed once
  for (const FloorCall& c : calls) {
    double s = 0;
    if (c.elements > 0) {
      const auto key = std::make_pair(static_cast<int>(c.op), c.elements);
      auto it = timed.find(key);
      if (it == timed.end())
        it = timed
                 .emplace(key,
                          time_collective<T>(c.op, static_cast<std::size_t>(c.elements), a.data(),
                                             c.op == Collective::allreduce ? a.data() : b.data(),
                                             be, data, world, t)
                              .seconds)
                 .first;
      s = it->second;
    }
    f.counts.push_back(c.elements);
    f.ops.push_back(c.op);
    f.modes.push_back(c.mode);
    f.seconds_per_call.push_back(s);
    f.seconds += s;
    f.bytes += static_cast<double>(c.elements) * sizeof(T);
  }
  return f;
}

nlohmann::json floor_record(const CommFloor& f, double comm_s, std::size_t value_size,
                            const comm::Communicator& world, const std::string& communicator) {
  const double lo = world.allreduce_value(comm_s, comm::ReduceOp::min);
  const double hi = world.allreduce_value(comm_s, comm::ReduceOp::max);
  nlohmann::json calls = nlohmann::json::array();
  std::string ops;
  for (std::size_t n = 0; n < f.counts.size(); ++n) {
    calls.push_back({{"mode", f.modes[n]},
                     {"collective", to_string(f.ops[n])},
                     {"elements", f.counts[n]},
                     {"bytes", static_cast<double>(f.counts[n]) * static_cast<double>(value_size)},
                     {"seconds", f.seconds_per_call[n]}});
    if (ops.find(to_string(f.ops[n])) == std::string::npos)
      ops += (ops.empty() ? "" : ",") + std::string(to_string(f.ops[n]));
  }
  return {{"seconds_per_iteration", f.seconds},
          {"bytes_per_iteration", f.bytes},
          {"comm_seconds_per_iteration", comm_s},
          {"ratio", f.ratio(comm_s)},
          {"comm_seconds_min_over_ranks", lo},
          {"comm_seconds_max_over_ranks", hi},
          {"ratio_min_over_ranks", f.ratio(lo)},
          {"collective", ops},
          {"communicator", communicator},
          {"batch", f.timing.batch},
          {"repeat", f.timing.repeat},
          {"modes", calls}};
}

namespace {

struct BenchCommArgs {
  std::string bytes = "8:1G";
  std::string ops = "allreduce,reduce_scatter,allgather";
  CommTiming timing;
  ComputeOptions run;  ///< backend, precision, json, force, nccl timeout
};

/// "8:1G" (doubling from 8 bytes up to 1 GiB), or a comma-separated list ("1M,64M"), or one
/// size; K, M, G, T are powers of 1024 (parse_bytes).
std::vector<std::uint64_t> parse_sizes(const std::string& s) {
  std::vector<std::uint64_t> sizes;
  const auto colon = s.find(':');
  if (colon != std::string::npos) {
    const std::uint64_t lo = parse_bytes(s.substr(0, colon), "--bytes");
    const std::uint64_t hi = parse_bytes(s.substr(colon + 1), "--bytes");
    TESSERA_INPUT_CHECK(lo <= hi, "--bytes '" << s << "': MIN:MAX needs MIN <= MAX");
    for (std::uint64_t v = lo;; v *= 2) {
      sizes.push_back(v);
      if (v > hi / 2) break;  // the next size would pass MAX (or 2^64)
    }
    return sizes;
  }
  std::size_t from = 0;
  while (from <= s.size()) {
    const std::size_t to = std::min(s.find(',', from), s.size());
    sizes.push_back(parse_bytes(s.substr(from, to - from), "--bytes"));
    from = to + 1;
  }
  return sizes;
}

std::vector<Collective> parse_ops(const std::string& s) {
  std::vector<Collective> ops;
  std::size_t from = 0;
  while (from <= s.size()) {
    const std::size_t to = std::min(s.find(',', from), s.size());
    const Collective c = parse_collective(s.substr(from, to - from));
    if (std::find(ops.begin(), ops.end(), c) == ops.end()) ops.push_back(c);
    from = to + 1;
  }
  return ops;
}

/// Elements of T of a collective of `bytes` on P ranks (nccl-tests: whole elements, whole
/// blocks of P for reduce_scatter and allgather; at least one element per block).
std::size_t elements_of(Collective c, std::uint64_t bytes, std::size_t value_size, int P) {
  auto e = static_cast<std::size_t>(bytes / value_size);
  if (c == Collective::allreduce) return std::max<std::size_t>(e, 1);
  e -= e % static_cast<std::size_t>(P);
  return std::max(e, static_cast<std::size_t>(P));
}

template <typename T>
void run_bench_comm(const BenchCommArgs& a, const comm::MpiCommunicator& world) {
  {
    io::OutputSet outputs;  // --json checked before any work (io/output.hpp)
    outputs.add_output("--json", a.run.json, io::OutputKind::record);
    outputs.validate(a.run.force, world);
  }
  std::vector<std::uint64_t> sizes;
  std::vector<Collective> ops;
  comm::run_collectively(world, [&] {
    sizes = parse_sizes(a.bytes);
    ops = parse_ops(a.ops);
  });
  auto cx = make_compute<T>(a.run, world);
  PeakSampler peaks(cx.kind == kernels::BackendKind::cuda);
  auto& be = *cx.backend;
  const comm::Communicator& data = *cx.data;
  const int P = world.size();
  const std::size_t vs = sizeof(T);
  // Two buffers for every size: the whole buffer (a) and one block of it (b).
  std::size_t most = 1, most_block = 1;
  for (Collective c : ops)
    for (std::uint64_t s : sizes) {
      const std::size_t e = elements_of(c, s, vs, P);
      most = std::max(most, e);
      if (c != Collective::allreduce) most_block = std::max(most_block, e / P);
    }
  auto A = be.allocate(most);
  auto B = be.allocate(most_block);
  be.fill(A.data(), A.size(), T(0));  // sums of zeros stay finite however often repeated
  be.fill(B.data(), B.size(), T(0));
  const bool enqueue = data.can_enqueue();
  const std::string how = enqueue ? std::to_string(std::max(1, a.timing.batch)) +
                                        " stream-ordered calls per wait_stream"
                                  : "blocking calls";
  log::info("bench comm: backend " + kernels::to_string(cx.kind) + ", communicator " + data.name() +
            " (" + how + "), " + std::to_string(P) + " rank(s), " + a.run.precision + ", " +
            std::to_string(sizes.size()) + " size(s), warm-up " + std::to_string(a.timing.warmup) +
            ", median of " + std::to_string(a.timing.repeat));
  const std::string one_rank =
      "1 rank: nothing moves between ranks, so the times are the calls' own cost (about 0, a "
      "local copy at most) and the bus bandwidth is 0";
  const Table table({{"op", 15, true},
                     {"bytes", 12},
                     {"elements", 12},
                     {"time_us", 11},
                     {"algbw_GB/s", 11},
                     {"busbw_GB/s", 11},
                     {"slowest_us", 11},
                     {"slow_busbw", 11}});
  table.header();
  nlohmann::json rows = nlohmann::json::array(), summary = nlohmann::json::array();
  const auto rate = [](double bytes, double s) { return s > 0 ? bytes / s : 0.0; };
  for (Collective c : ops) {
    const double factor = bus_factor(c, P);
    std::size_t last = 0;
    double peak = 0, peak_bytes = 0, sum_busbw = 0;
    int n = 0;
    for (std::uint64_t s : sizes) {
      const std::size_t e = elements_of(c, s, vs, P);
      if (e == last) continue;  // the same call as the size before (rounded to elements)
      last = e;
      const CollectiveTime r =
          time_collective<T>(c, e, A.data(), B.data(), be, data, world, a.timing);
      const double bytes = static_cast<double>(e) * vs;
      const double algbw = rate(bytes, r.seconds), busbw = algbw * factor;
      const double slow_busbw = rate(bytes, r.slowest_seconds) * factor;
      table.row({to_string(c), cell("%.0f", bytes), cell("%zu", e), cell("%.2f", r.seconds * 1e6),
                 cell("%.2f", algbw / 1e9), cell("%.2f", busbw / 1e9),
                 cell("%.2f", r.slowest_seconds * 1e6), cell("%.2f", slow_busbw / 1e9)});
      rows.push_back({{"op", to_string(c)},
                      {"bytes", bytes},
                      {"elements", e},
                      {"seconds", r.seconds},
                      {"slowest_seconds", r.slowest_seconds},
                      {"algbw_bytes_per_s", algbw},
                      {"busbw_bytes_per_s", busbw},
                      {"slowest_busbw_bytes_per_s", slow_busbw},
                      {"bus_factor", factor},
                      {"batch", r.batch},
                      {"in_place", c == Collective::allreduce}});
      if (busbw >= peak) peak = busbw, peak_bytes = bytes;
      sum_busbw += busbw;
      ++n;
    }
    summary.push_back({{"op", to_string(c)},
                       {"sizes", n},
                       {"peak_busbw_bytes_per_s", peak},
                       {"peak_at_bytes", peak_bytes},
                       {"avg_busbw_bytes_per_s", n ? sum_busbw / n : 0.0}});
    if (log::rank() == 0)
      std::printf("# %s: peak bus bandwidth %.2f GB/s (at %s), average %.2f GB/s\n", to_string(c),
                  peak / 1e9, human_bytes(peak_bytes).c_str(), n ? sum_busbw / n / 1e9 : 0.0);
  }
  if (P == 1 && log::rank() == 0) std::printf("# %s\n", one_rank.c_str());
  flush();
  peaks.stop();
  nlohmann::json j;
  j["precision"] = a.run.precision;
  j["comm"] = {{"communicator", data.name()},
               {"stream_ordered", enqueue},
               {"batch", enqueue ? std::max(1, a.timing.batch) : 1},
               {"warmup", a.timing.warmup},
               {"repeat", a.timing.repeat},
               {"ranks", P},
               {"time", "median over the timed runs of the mean over ranks of one call"},
               {"bandwidth", "nccl-tests: algbw = bytes / time, busbw = algbw x bus_factor"}};
  if (P == 1) j["comm"]["note"] = one_rank;
  j["rows"] = rows;
  j["summary"] = summary;
  write_record(a.run.json, "bench comm", j, world, kernels::to_string(cx.kind), a.run.threads,
               cx.backend->tuning(), peaks.device_peak());
}

}  // namespace

template CollectiveTime time_collective(Collective, std::size_t, float*, float*,
                                        kernels::Backend<float>&, const comm::Communicator&,
                                        const comm::Communicator&, const CommTiming&);
template CollectiveTime time_collective(Collective, std::size_t, double*, double*,
                                        kernels::Backend<double>&, const comm::Communicator&,
                                        const comm::Communicator&, const CommTiming&);
template std::optional<CommFloor> collective_floor(std::vector<FloorCall>, kernels::Backend<float>&,
                                                   const comm::Communicator&,
                                                   const comm::Communicator&, const CommTiming&);
template std::optional<CommFloor> collective_floor(std::vector<FloorCall>,
                                                   kernels::Backend<double>&,
                                                   const comm::Communicator&,
                                                   const comm::Communicator&, const CommTiming&);

}  // namespace bench

void add_bench_comm(CLI::App* bench, Runner& run) {
  auto a = std::make_shared<bench::BenchCommArgs>();
  auto* sub = bench->add_subcommand(
      "comm",
      "Collectives over every rank, nccl-tests style: time, algorithm and bus bandwidth of "
      "allreduce, reduce_scatter and allgather per size (the NCCL floor of the cuda backend; "
      "MPI's blocking calls on host backends)");
  sub->add_option("--bytes", a->bytes,
                  "Sizes of the whole buffer: MIN:MAX doubling (8:1G), or a list (1M,64M); "
                  "K/M/G = 1024^k")
      ->capture_default_str();
  sub->add_option("--op", a->ops,
                  "Collectives, comma-separated: allreduce, reduce_scatter, allgather")
      ->capture_default_str();
  sub->add_option("--warmup", a->timing.warmup, "Untimed runs per size")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  sub->add_option("--repeat", a->timing.repeat, "Timed runs per size (the median is reported)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_option("--batch", a->timing.batch,
                  "Collectives enqueued back to back per timed run, then one wait (cuda backend: "
                  "NCCL's stream-ordered calls; host backends time one blocking MPI call)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_option("--backend", a->run.backend,
                  "auto (cuda when a GPU is present, else cpu) | reference | cpu | cuda: cuda "
                  "times NCCL on device buffers, the host backends MPI on host buffers")
      ->check(CLI::IsMember({"auto", "reference", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--precision", a->run.precision, "double | float")
      ->check(CLI::IsMember({"double", "float"}))
      ->capture_default_str();
  sub->add_option("--nccl-timeout", a->run.nccl_timeout_s,
                  "Seconds a NCCL wait may take before the job is aborted (0 = no limit)")
      ->check(non_negative<double>())
      ->capture_default_str();
  sub->add_option("--json", a->run.json, "Write the run record (JSON) here");
  add_force_option(sub, a->run.force);
  sub->callback([a, &run] {
    run = [a](const comm::MpiCommunicator& world) {
      with_precision(a->run, [&]<typename T>() { bench::run_bench_comm<T>(*a, world); });
    };
  });
}

}  // namespace tessera::driver
