// The benchmark harness of `tessera bench` (harness.hpp).
#include "bench/harness.hpp"

#include <cstdarg>
#include <cstdio>

#include "common.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

namespace tessera::driver::bench {

void Table::header() const {
  if (log::rank() != 0) return;
  for (std::size_t c = 0; c < columns_.size(); ++c)
    std::printf(columns_[c].left ? "%s%-*s" : "%s%*s", c ? " " : "", columns_[c].width,
                columns_[c].name);
  std::printf("\n");
}

void Table::row(const std::vector<std::string>& cells) const {
  if (log::rank() != 0) return;
  for (std::size_t c = 0; c < cells.size(); ++c)
    std::printf(columns_.at(c).left ? "%s%-*s" : "%s%*s", c ? " " : "", columns_[c].width,
                cells[c].c_str());
  std::printf("\n");
}

std::string cell(const char* fmt, ...) {
  char buf[128];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

void flush() {
  if (log::rank() == 0) std::fflush(stdout);
}

double median_seconds(const comm::Communicator& world, int warmup, int repeat,
                      const std::function<void()>& run, const std::function<void()>& sync) {
  return median_run<double>(warmup, repeat, [&](bool timed) {
    if (!timed) {
      run();
      sync();
      return 0.0;
    }
    world.barrier();
    Timer t;
    run();
    sync();
    return world.allreduce_value(t.seconds(), comm::ReduceOp::max);  // slowest rank
  });
}

Floor floor_of(double bytes, double bw, const comm::Communicator& world) {
  Floor f;
  f.bytes = world.allreduce_value(bytes, comm::ReduceOp::max);
  f.seconds = f.bytes / bw;
  return f;
}

ModeSums run_modes(const PerModeOp& op, int modes, int repeat, double bw,
                   const comm::Communicator& world, nlohmann::json& j) {
  const Table table(op.columns);
  table.header();
  nlohmann::json records = nlohmann::json::array();
  ModeSums sum;
  sum.modes = modes;
  for (int n = 0; n < modes; ++n) {
    if (op.begin) op.begin(n);
    ModeResult r;
    r.mode = n;
    r.seconds = median_seconds(
        world, 1, repeat, [&] { op.step(n); }, op.sync);
    const auto [bytes, noreuse] = op.bytes(n);
    r.floor = floor_of(bytes, bw, world);
    r.noreuse = floor_of(noreuse, bw, world);
    nlohmann::json rec = {{"mode", n},
                          {"median_seconds", r.seconds},
                          {"bytes", r.floor.bytes},
                          {"floor_seconds", r.floor.seconds},
                          {"ratio_to_floor", r.floor.ratio(r.seconds)},
                          {"noreuse_floor_seconds", r.noreuse.seconds},
                          {"ratio_to_noreuse_floor", r.noreuse.ratio(r.seconds)}};
    table.row(op.row(r, rec));
    records.push_back(rec);
    sum.seconds += r.seconds;
    sum.floor += r.floor.seconds;
    sum.noreuse += r.noreuse.seconds;
  }
  table.row(op.mean_row(sum));
  flush();
  const double per_mode = sum.seconds / modes;
  j["modes"] = records;
  j["mean_seconds_per_mode"] = per_mode;
  j["mean_ratio_to_floor"] = sum.seconds / sum.floor;
  j["mean_ratio_to_noreuse_floor"] = sum.seconds / sum.noreuse;
  // Every mode's kernel alone, timed by the slowest rank: the mean per mode.
  j["timing"] = timing_record("mode", per_mode, {{"kernel", per_mode}});
  return sum;
}

IterationResult iteration_vs_floor(double seconds, double bytes, double bw,
                                   const comm::Communicator& world) {
  IterationResult r;
  r.seconds = world.allreduce_value(seconds, comm::ReduceOp::max);
  r.floor = floor_of(bytes, bw, world);
  return r;
}

void iteration_record(nlohmann::json& j, const IterationResult& r, int iterations, double fit) {
  j["iterations"] = iterations;
  j["seconds_per_iteration"] = r.seconds;
  j["bytes_per_iteration"] = r.floor.bytes;
  j["floor_seconds"] = r.floor.seconds;
  j["ratio_to_floor"] = r.floor.ratio(r.seconds);
  j["fit"] = fit;
}

void write_record(const std::string& path, const std::string& command, const nlohmann::json& body,
                  const comm::Communicator& world, const std::string& backend, int threads,
                  const kernels::Tuning& tuning, std::uint64_t device_peak) {
  if (path.empty()) return;
  nlohmann::json rec = record_envelope(command, nlohmann::json::object(), world, backend, threads,
                                       &tuning, device_peak);
  rec.merge_patch(body);
  write_json(path, rec, world);
}

void bandwidth_record(nlohmann::json& j, double bw, bool given) {
  j["machine"]["bandwidth_bytes_per_s"] = bw;
  j["machine"]["bandwidth_source"] = given ? "given" : "measured";
}

void log_setup(const std::string& what, const std::string& backend, int ranks, int threads,
               const std::string& precision, const std::string& extra, double bw, bool given) {
  log::info("bench " + what + ": backend " + backend + ", " + std::to_string(ranks) +
            " rank(s) x " + std::to_string(effective_threads(threads)) + " thread(s), " +
            precision + extra +
            (given ? ", copy bandwidth (--bandwidth) " : ", measured copy bandwidth ") +
            human_bytes(bw) + "/s per rank");
}

}  // namespace tessera::driver::bench
