// How a plan is reported (docs/planner.md): the run record's "memory_plan" object
// (Plan::to_json), the one-line summary and the table `tessera plan` and --dry-run print.
// make_plan (planner.cpp) decides; this file only prints what it decided.
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>

#include "plan/planner.hpp"
#include "plan/planner_detail.hpp"

namespace tessera::plan {

namespace {
using detail::gb;
using u64 = std::uint64_t;
const char* backend_name(Backend b) {
  return b == Backend::cuda ? "cuda" : b == Backend::cpu ? "cpu" : "reference";
}
}  // namespace

nlohmann::json Plan::to_json() const {
  nlohmann::json comps = nlohmann::json::array();
  for (const auto& c : components) {
    nlohmann::json j = {{"name", c.name}, {"host_bytes", c.host}, {"device_bytes", c.device}};
    if (c.disk) j["disk_bytes"] = c.disk;
    if (!c.note.empty()) j["note"] = c.note;
    comps.push_back(j);
  }
  auto lim = [](const Limit& l) {
    return nlohmann::json{{"bytes", l.bytes}, {"source", l.source}};
  };
  return {{"tier", tier},
          {"tier_name", tier_name},
          {"fits", fits},
          {"refusal", refusal},
          {"workload", to_string(workload)},
          {"backend", backend_name(backend)},
          {"block_nnz", block_nnz},
          {"chunk_nnz", chunk_nnz},
          {"read_ahead", read_ahead},
          {"read_cache",
           tier == 3 ? nlohmann::json(drop_behind ? "drop" : "keep") : nlohmann::json(nullptr)},
          {"read_cache_why", read_cache_why},
          {"chunks_per_pass", chunks},
          {"planned_peak_host_bytes", host_peak},
          {"planned_data_host_bytes", host_peak > limits.baseline_host + kHostSlackBytes
                                          ? host_peak - limits.baseline_host - kHostSlackBytes
                                          : 0},
          {"planned_peak_device_bytes", device_peak},
          {"device_budget_bytes", device_budget},
          {"read_bytes_per_iteration", read_bytes_per_iteration},
          {"copy_bytes_per_iteration", copy_bytes_per_iteration},
          {"components", comps},
          {"limits",
           {{"host", lim(limits.host)},
            {"device", lim(limits.device)},
            {"disk", lim(limits.disk)},
            {"baseline_host_bytes", limits.baseline_host},
            {"notes", limits.notes}}},
          {"reasons", reasons}};
}

std::string Plan::summary() const {
  char line[400];
  if (!fits) return "plan: " + refusal;
  std::snprintf(
      line, sizeof(line), "plan: tier %d (%s), block of %lld nonzeros, planned peak %s host%s%s%s",
      tier, tier_name.c_str(), static_cast<long long>(block_nnz), gb(host_peak).c_str(),
      backend == Backend::cuda ? (", " + gb(device_peak) + " device").c_str() : "",
      chunk_nnz > 0 ? (", " + std::to_string(chunks) + " chunks of " + std::to_string(chunk_nnz) +
                       " nonzeros")
                          .c_str()
                    : "",
      tier == 3
          ? (", " + gb(static_cast<u64>(read_bytes_per_iteration)) + " read per iteration").c_str()
          : "");
  return line;
}

std::string Plan::describe() const {
  std::ostringstream os;
  os << "memory plan (per rank, largest block: " << block_nnz << " nonzeros; workload "
     << to_string(workload) << ", backend " << backend_name(backend) << ")\n";
  os << "  limits:\n";
  os << "    host    " << (limits.host.known() ? gb(limits.host.bytes) : std::string("unknown"))
     << "  (" << limits.host.source << ")\n";
  if (backend == Backend::cuda)
    os << "    device  "
       << (limits.device.known() ? gb(limits.device.bytes) : std::string("unknown")) << "  ("
       << limits.device.source << ")\n";
  os << "    disk    " << (limits.disk.known() ? gb(limits.disk.bytes) : std::string("unknown"))
     << "  (" << limits.disk.source << ")\n";
  os << "  tiers considered:\n";
  for (const auto& r : reasons) os << "    " << r << "\n";
  if (!fits) {
    os << "  REFUSED: " << refusal << "\n";
    return os.str();
  }
  os << "  chosen: tier " << tier << " (" << tier_name << ")";
  if (chunk_nnz > 0) os << ", " << chunks << " chunk(s) of " << chunk_nnz << " nonzeros per pass";
  os << "\n  memory at the peak:\n";
  for (const auto& c : components) {
    char line[256];
    std::snprintf(line, sizeof(line), "    %-52s host %10s  device %10s", c.name.c_str(),
                  gb(c.host).c_str(), gb(c.device).c_str());
    os << line;
    if (!c.note.empty()) os << "  (" << c.note << ")";
    os << "\n";
  }
  os << "    " << std::string(52, ' ') << "host " << std::string(1, ' ') << gb(host_peak);
  if (backend == Backend::cuda) os << "  device " << gb(device_peak);
  os << "  (planned peaks)\n";
  if (read_bytes_per_iteration > 0)
    os << "  disk reads per iteration: " << gb(static_cast<u64>(read_bytes_per_iteration)) << "\n";
  if (tier == 3)
    os << "  page cache: " << (drop_behind ? "dropped behind the reads" : "kept") << " ("
       << read_cache_why << ")\n";
  if (backend == Backend::cuda && tier == 1)
    os << "  tensor limit given to the backend: " << gb(device_budget)
       << " (the device limit less the loop and the CUDA libraries: the tensor-core tile sets "
          "are built only under it)\n";
  if (copy_bytes_per_iteration > 0)
    os << "  host-to-device copies per iteration: "
       << gb(static_cast<u64>(copy_bytes_per_iteration)) << "\n";
  return os.str();
}

}  // namespace tessera::plan
