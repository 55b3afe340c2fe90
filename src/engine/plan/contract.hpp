// The memory plan of one sparse tensor contraction (algo::contract, docs/sptc.md "Pieces"):
// a pure function of the counts the backend's plan gives (after the inputs are read, routed
// and matched) and the limits (plan/limits.hpp). The inputs, their routed copies and the
// matching workspace stay resident; the output is made in k pieces when one does not fit,
// each piece's output, exchange and merge within the room left.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/limits.hpp"

namespace tessera::plan {

/// Per-rank bytes and entries of a contraction (the busiest rank's value of each, taken
/// over ranks by the caller) and the global output count.
struct ContractCounts {
  std::uint64_t input_bytes = 0;            ///< the caller's X and Y shares
  std::uint64_t routed_bytes = 0;           ///< routed copies of X and Y (0 on one rank)
  std::uint64_t workspace_bytes = 0;        ///< the backend's plan and run workspace (whole output)
  std::uint64_t output_entries = 0;         ///< local (partial) output entries before the exchange
  std::uint64_t output_bytes = 0;           ///< their bytes as the backend holds them
  std::uint64_t global_output_entries = 0;  ///< partial entries summed over ranks
  std::uint64_t entry_bytes = 0;            ///< one output entry: N coordinates and the value
  std::uint64_t send_entry_bytes = 0;       ///< one entry of the send buffer (max(index, value))
  /// Bytes of the input that is split into pieces (its routed copy on the busiest rank):
  /// each piece copies its share of it.
  std::uint64_t split_bytes = 0;
  /// Streaming sink only: bytes per entry while a piece is written (the double copy and
  /// the redistribution of algo::write_sorted: 3 x (4N + 8)); 0 = nothing written per piece.
  std::uint64_t write_entry_bytes = 0;
  int ranks = 1;
  bool device = false;  ///< the backend multiplies in device memory (cuda)
};

/// Where finished pieces go.
enum class ContractSinkKind {
  memory,  ///< kept in host memory (this rank's share grows piece by piece)
  stream,  ///< handed to a sink (a file) and freed: memory holds one piece
};

struct ContractLimits {
  Limit host;    ///< host bytes per rank (unknown: no limit)
  Limit device;  ///< device bytes per rank (cuda; unknown: no limit)
};

struct ContractPiecePlan {
  bool fits = false;
  int pieces = 1;                          ///< output pieces (1: the whole output at once)
  std::uint64_t resident_bytes = 0;        ///< host: inputs + routed + workspace (every piece)
  std::uint64_t host_bytes = 0;            ///< host data peak with `pieces` pieces
  std::uint64_t one_piece_host_bytes = 0;  ///< host data peak in one piece
  std::uint64_t device_bytes = 0;          ///< device data peak with `pieces` pieces (cuda)
  std::uint64_t one_piece_device_bytes = 0;
  bool host_short = false;    ///< one piece is over the host limit
  bool device_short = false;  ///< one piece is over the device limit
  ContractSinkKind sink = ContractSinkKind::memory;
  /// Why pieces (or none), which limit decided it and its source; or, when !fits, the
  /// refusal: one message naming the limit and its source and what would fit.
  std::string reason;
  nlohmann::json to_json() const;
};

/// Host data bytes of a contraction done in `pieces` pieces with the given sink (the peak
/// of: the count, each piece's multiplication, output exchange, merge and write). For one
/// piece it is the one-piece model of algo::contract (ContractMemory::total_bytes).
std::uint64_t contract_host_bytes(const ContractCounts& c, int pieces, ContractSinkKind sink);
/// Device data bytes (cuda): the contracted inputs, the workspace and one piece's output.
std::uint64_t contract_device_bytes(const ContractCounts& c, int pieces);
/// Host and device data bytes of one piece of a contraction made in several pieces, from
/// that piece's own counts (`piece`: output entries and bytes, global entries, workspace,
/// split_bytes = the piece's copy of the split input); `whole` gives the resident inputs
/// and the kept output (memory sink).
std::uint64_t contract_piece_host_bytes(const ContractCounts& whole, const ContractCounts& piece,
                                        ContractSinkKind sink);
std::uint64_t contract_piece_device_bytes(const ContractCounts& whole, const ContractCounts& piece);

/// The smallest number of pieces (at most `max_pieces`) whose host and device peaks fit
/// the limits. Refused (fits = false) when even the resident part (the inputs, their
/// routed copies and the workspace, plus the kept output for the memory sink) does not
/// fit, or when no piece count up to max_pieces does. Pure: no I/O, no collectives.
ContractPiecePlan plan_contract_pieces(const ContractCounts& c, const ContractLimits& lim,
                                       ContractSinkKind sink, int max_pieces = 1 << 16);

}  // namespace tessera::plan
