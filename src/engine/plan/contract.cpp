#include "plan/contract.hpp"

#include <algorithm>
#include <sstream>

namespace tessera::plan {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? a : (a + b - 1) / b;
}

std::string limit_text(const Limit& l) {
  return human_bytes(static_cast<double>(l.bytes)) + " per rank (" + l.source + ")";
}

const char* sink_name(ContractSinkKind s) {
  return s == ContractSinkKind::stream ? "written piece by piece" : "kept in host memory";
}

/// The busiest rank's share of the summed output (entries): what it receives in the
/// output exchange, hashing spreading output coordinates evenly.
std::uint64_t share_entries(std::uint64_t local, std::uint64_t global, int P) {
  return P > 1 ? std::max(local, ceil_div(global, static_cast<std::uint64_t>(P))) : local;
}

}  // namespace

std::uint64_t contract_host_bytes(const ContractCounts& c, int pieces, ContractSinkKind sink) {
  const int P = std::max(c.ranks, 1);
  const auto k = static_cast<std::uint64_t>(std::max(pieces, 1));
  constexpr std::uint64_t kSortPerEntry = 2 * (8 + 4);  // keys and permutation, doubled
  const std::uint64_t e = ceil_div(c.output_entries, k), out_b = ceil_div(c.output_bytes, k),
                      g = ceil_div(c.global_output_entries, k);
  const std::uint64_t recv_e = share_entries(e, g, P), recv_b = recv_e * c.entry_bytes;
  const std::uint64_t send_b = e * c.send_entry_bytes;
  if (k == 1) {
    // The routed inputs are freed after the multiplication.
    std::uint64_t peak = c.input_bytes + c.routed_bytes + c.workspace_bytes + out_b;
    if (P > 1) {
      peak = std::max(peak, c.input_bytes + out_b + send_b + recv_b);
      peak = std::max(peak, c.input_bytes + 2 * recv_b + recv_e * kSortPerEntry);
    }
    return peak;
  }
  ContractCounts q = c;
  q.output_entries = e;
  q.output_bytes = out_b;
  q.global_output_entries = g;
  q.split_bytes = ceil_div(c.split_bytes, k);
  return contract_piece_host_bytes(c, q, sink);
}

std::uint64_t contract_piece_host_bytes(const ContractCounts& whole, const ContractCounts& q,
                                        ContractSinkKind sink) {
  const int P = std::max(whole.ranks, 1);
  constexpr std::uint64_t kSortPerEntry = 2 * (8 + 4);
  const std::uint64_t recv_e = share_entries(q.output_entries, q.global_output_entries, P),
                      recv_b = recv_e * whole.entry_bytes;
  const std::uint64_t send_b = q.output_entries * whole.send_entry_bytes;
  // The inputs and their routed copies stay for every piece; the whole-output plan
  // (counting) is released before the first piece, which plans its share again.
  const std::uint64_t res = whole.input_bytes + whole.routed_bytes;
  const std::uint64_t final_e = share_entries(whole.output_entries, whole.global_output_entries, P);
  const std::uint64_t kept = sink == ContractSinkKind::memory ? final_e * whole.entry_bytes : 0;
  std::uint64_t peak = res + whole.workspace_bytes;  // the count of the whole output
  peak = std::max(peak, res + q.split_bytes + q.workspace_bytes + q.output_bytes + kept);
  if (P > 1) {
    peak = std::max(peak, res + q.output_bytes + send_b + recv_b + kept);
    peak = std::max(peak, res + 2 * recv_b + recv_e * kSortPerEntry + kept);
  }
  if (sink == ContractSinkKind::stream && whole.write_entry_bytes > 0)
    peak = std::max(peak, res + recv_b + recv_e * whole.write_entry_bytes);
  if (sink == ContractSinkKind::memory)  // the pieces joined, one array at a time
    peak = std::max(peak, res + kept + final_e * 8);
  return peak;
}

std::uint64_t contract_piece_device_bytes(const ContractCounts& whole, const ContractCounts& q) {
  if (!whole.device) return 0;
  const std::uint64_t in = whole.ranks > 1 ? whole.routed_bytes : whole.input_bytes;
  return in + q.split_bytes + q.workspace_bytes + q.output_bytes;
}

std::uint64_t contract_device_bytes(const ContractCounts& c, int pieces) {
  if (!c.device) return 0;
  const auto k = static_cast<std::uint64_t>(std::max(pieces, 1));
  const std::uint64_t in = c.ranks > 1 ? c.routed_bytes : c.input_bytes;
  return in + c.workspace_bytes + ceil_div(c.output_bytes, k) +
         (k > 1 ? ceil_div(c.split_bytes, k) : 0);
}

nlohmann::json ContractPiecePlan::to_json() const {
  return {{"fits", fits},
          {"pieces", pieces},
          {"sink", sink_name(sink)},
          {"resident_bytes", resident_bytes},
          {"host_bytes", host_bytes},
          {"one_piece_host_bytes", one_piece_host_bytes},
          {"device_bytes", device_bytes},
          {"one_piece_device_bytes", one_piece_device_bytes},
          {"host_short", host_short},
          {"device_short", device_short},
          {"reason", reason}};
}

ContractPiecePlan plan_contract_pieces(const ContractCounts& c, const ContractLimits& lim,
                                       ContractSinkKind sink, int max_pieces) {
  ContractPiecePlan p;
  p.sink = sink;
  const bool hl = lim.host.known(), dl = c.device && lim.device.known();
  p.resident_bytes = c.input_bytes + c.routed_bytes + c.workspace_bytes;
  p.one_piece_host_bytes = contract_host_bytes(c, 1, sink);
  p.one_piece_device_bytes = contract_device_bytes(c, 1);
  p.host_short = hl && p.one_piece_host_bytes > lim.host.bytes;
  p.device_short = dl && p.one_piece_device_bytes > lim.device.bytes;
  const int P = std::max(c.ranks, 1);
  std::ostringstream why;
  if (!p.host_short && !p.device_short) {
    p.fits = true;
    p.host_bytes = p.one_piece_host_bytes;
    p.device_bytes = p.one_piece_device_bytes;
    why << "one piece: " << human_bytes(static_cast<double>(p.host_bytes)) << " of host memory";
    if (hl) why << " within " << limit_text(lim.host);
    if (c.device)
      why << ", " << human_bytes(static_cast<double>(p.device_bytes)) << " of device memory";
    if (dl) why << " within " << limit_text(lim.device);
    p.reason = why.str();
    return p;
  }
  // What every piece holds: the inputs, their routed copies, the workspace.
  const std::uint64_t dev_res = (c.ranks > 1 ? c.routed_bytes : c.input_bytes) + c.workspace_bytes;
  auto refuse = [&](const std::string& what, std::uint64_t need, const Limit& l) {
    const double scale = static_cast<double>(need) / static_cast<double>(l.bytes);
    const int ranks = std::max(P + 1, static_cast<int>(P * scale * 1.1 + 0.999));
    std::ostringstream m;
    m << what << " need about " << human_bytes(static_cast<double>(need))
      << " on the busiest rank, over the limit of " << limit_text(l)
      << "; the output can be made in pieces but these stay resident for every piece; about "
      << ranks << " ranks would fit if the work spreads evenly, or raise the limit to at least "
      << human_bytes(static_cast<double>(need));
    p.fits = false;
    p.reason = m.str();
    return p;
  };
  if (hl && p.resident_bytes > lim.host.bytes)
    return refuse("the inputs (" + human_bytes(static_cast<double>(c.input_bytes)) +
                      "), their routed copies (" +
                      human_bytes(static_cast<double>(c.routed_bytes)) +
                      ") and the matching workspace (" +
                      human_bytes(static_cast<double>(c.workspace_bytes)) + ") alone",
                  p.resident_bytes, lim.host);
  if (dl && dev_res > lim.device.bytes)
    return refuse("the inputs on the device and the matching workspace alone", dev_res, lim.device);
  const int kmax =
      static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(max_pieces, 2)),
                                               std::max<std::uint64_t>(c.output_entries, 2)));
  for (int k = 2; k <= kmax; ++k) {
    const std::uint64_t h = contract_host_bytes(c, k, sink), d = contract_device_bytes(c, k);
    if ((!hl || h <= lim.host.bytes) && (!dl || d <= lim.device.bytes)) {
      p.fits = true;
      p.pieces = k;
      p.host_bytes = h;
      p.device_bytes = d;
      why << k << " output pieces (" << sink_name(sink) << "): one piece would need "
          << human_bytes(static_cast<double>(p.host_short ? p.one_piece_host_bytes
                                                          : p.one_piece_device_bytes))
          << ", over " << limit_text(p.host_short ? lim.host : lim.device) << "; each piece "
          << human_bytes(static_cast<double>(h)) << " of host memory";
      if (c.device) why << ", " << human_bytes(static_cast<double>(d)) << " of device memory";
      p.reason = why.str();
      return p;
    }
  }
  const bool host_side = hl && contract_host_bytes(c, kmax, sink) > lim.host.bytes;
  return refuse(
      std::string("even ") + std::to_string(kmax) + " output pieces (" + sink_name(sink) + ")",
      host_side ? contract_host_bytes(c, kmax, sink) : contract_device_bytes(c, kmax),
      host_side ? lim.host : lim.device);
}

}  // namespace tessera::plan
