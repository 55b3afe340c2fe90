// `tessera bench comm` (internal to drivers/bench/): the collectives timed the way nccl-tests
// times them, and the NCCL floor of the bytes a benchmarked algorithm moves (bench cp).
//
// A timed run on a communicator that can enqueue (NCCL, comm::Communicator::can_enqueue):
// K = --batch collectives enqueued back to back in the backend's stream
// (kernels::Backend::native_stream), then one wait_stream; the run's seconds / K is one
// collective, so the host's launch and wait overhead is amortised as in nccl-tests. On a
// host communicator (MPI) a timed run is one blocking call. Every run starts after a barrier;
// the time is the median over --repeat runs of the mean over ranks (nccl-tests' default
// "-a 1"), the slowest rank's the median of the maximum over ranks.
//
// Bandwidths (nccl-tests' PERFORMANCE.md): bytes = the whole buffer (allreduce: the reduced
// buffer; reduce_scatter: the send buffer of P blocks; allgather: the receive buffer of P
// blocks), algorithm bandwidth = bytes / time, bus bandwidth = algorithm bandwidth x
// 2(P-1)/P for allreduce and (P-1)/P for reduce_scatter and allgather (0 on one rank).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "commands.hpp"
#include "kernels/backend.hpp"

namespace tessera::driver {

/// `bench comm` under the `bench` subcommand (add_bench calls it).
void add_bench_comm(CLI::App* bench, Runner& run);

namespace bench {

/// The collectives `bench comm` times.
enum class Collective { allreduce, reduce_scatter, allgather };
/// The name of a collective ("allreduce", "reduce_scatter", "allgather"), from the one name
/// table that parse_collective reads.
const char* to_string(Collective c);
/// "allreduce" -> Collective::allreduce; InputError naming the choices otherwise.
Collective parse_collective(const std::string& name);
/// nccl-tests' bus-bandwidth factor on P ranks: allreduce 2(P-1)/P, reduce_scatter and
/// allgather (P-1)/P.
double bus_factor(Collective c, int P);

/// How a collective is timed: untimed runs, timed runs (the median is reported) and the
/// collectives per run on a communicator that can enqueue (1 on a host communicator).
struct CommTiming {
  int warmup = 5, repeat = 20, batch = 20;
};

/// One collective's time: seconds of one call (median over runs of the mean over ranks) and
/// the slowest rank's (median over runs of the maximum over ranks); `batch` calls per run.
struct CollectiveTime {
  double seconds = 0, slowest_seconds = 0;
  int batch = 1;
  bool stream_ordered = false;  ///< enqueued in the backend's stream (else blocking calls)
};

/// Collective over `world` and `data` (the same ranks in the same order): times `c` on
/// `elements` values of T in the backend's memory (the whole buffer: allreduce in place on
/// `a`; reduce_scatter from `a` into `b`; allgather from `b` into `a`; both buffers hold at
/// least `elements`, a multiple of data.size() for reduce_scatter and allgather). The values
/// are left as they are (any finite values; the benchmark fills zeros).
template <typename T>
CollectiveTime time_collective(Collective c, std::size_t elements, T* a, T* b,
                               kernels::Backend<T>& be, const comm::Communicator& data,
                               const comm::Communicator& world, const CommTiming& t);

/// The NCCL floor of the bytes an iteration moves: per call (a collective and its elements
/// of T), that collective timed by time_collective; their sum.
struct CommFloor {
  double seconds = 0, bytes = 0;
  std::vector<double> seconds_per_call;
  std::vector<std::uint64_t> counts;  ///< elements per call (the largest over ranks)
  std::vector<Collective> ops;        ///< the collective of each call
  std::vector<int> modes;             ///< the tensor mode of each call (FloorCall::mode)
  CommTiming timing;
  /// `comm_s` (a run's comm per iteration) over the floor; 0 where the floor is 0.
  double ratio(double comm_s) const { return seconds > 0 ? comm_s / seconds : 0.0; }
};
/// One call of a floor: `elements` values of T through collective `op` (reduce_scatter and
/// allgather: rounded up to whole blocks, a multiple of the ranks).
struct FloorCall {
  Collective op = Collective::allreduce;
  std::uint64_t elements = 0;
  int mode = 0;  ///< the tensor mode whose rows or factor the call moves
};
/// Collective: the floor of `calls` (each count the largest over the ranks of `world`), or
/// nothing when `data` cannot enqueue (host communicators) or there is one rank.
template <typename T>
std::optional<CommFloor> collective_floor(std::vector<FloorCall> calls, kernels::Backend<T>& be,
                                          const comm::Communicator& data,
                                          const comm::Communicator& world,
                                          const CommTiming& t = {3, 10, 10});
/// collective_floor of in-place all-reduces of `counts` elements each.
template <typename T>
std::optional<CommFloor> allreduce_floor(const std::vector<std::uint64_t>& counts,
                                         kernels::Backend<T>& be, const comm::Communicator& data,
                                         const comm::Communicator& world,
                                         const CommTiming& t = {3, 10, 10}) {
  std::vector<FloorCall> calls;
  for (const std::uint64_t n : counts)
    calls.push_back({Collective::allreduce, n, static_cast<int>(calls.size())});
  return collective_floor<T>(std::move(calls), be, data, world, t);
}

/// The record "comm_floor" of bench cp and bench tucker (collective): the floor `f` of
/// `value_size`-byte values beside `comm_s`, this rank's comm per iteration (rank 0's is the
/// table's); the least and most over the ranks of `world` show the waiting. `communicator`
/// names the data communicator.
nlohmann::json floor_record(const CommFloor& f, double comm_s, std::size_t value_size,
                            const comm::Communicator& world, const std::string& communicator);

}  // namespace bench
}  // namespace tessera::driver
