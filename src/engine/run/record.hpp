// The run record's envelope: the keys every --json record starts with, whatever the
// subcommand (docs/run-record.md; JSON Schema in docs/run-record.schema.json).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algo/cp_als.hpp"
#include "algo/tucker.hpp"
#include "comm/communicator.hpp"
#include "kernels/backend.hpp"
#include "kernels/tuning.hpp"

namespace tessera::run {

/// The run record's "tuning" object: every knob of kernels::kKnobs under its key
/// (enumerations by name).
nlohmann::json knobs_json(const kernels::Tuning& t);

/// The JSON Schema of the "tuning" object ({"type", "required", "properties"}) as the
/// table describes it; docs/run-record.schema.json holds the same (tests/unit/tuning_knobs.cpp).
nlohmann::json knobs_schema();

/// Version of the record layout: adding a field keeps it, renaming or removing one bumps it.
inline constexpr int kRunRecordVersion = 1;
/// The record's "schema" value.
inline constexpr const char* kRunRecordSchema = "tessera-run-record";

/// Who asked for the run: what the front end (the CLI's main, the Python module) knows and
/// the run layer does not. Passed explicitly to every record; no process global holds it.
struct RecordContext {
  std::vector<std::string> argv;  ///< the command line; empty: /proc/self/cmdline
  /// When the run started (the record's "timestamp" and default timing); none: when the
  /// process was loaded (process_start()).
  std::optional<std::chrono::system_clock::time_point> start;
  /// The front end's own options (the CLI: every option of the subcommand with its value or
  /// default), merged under the run's options (which win).
  nlohmann::json front_end_options = nlohmann::json::object();
  std::string interface;  ///< "" (the CLI: no key) | "python" (the record's "interface")
  /// The kernel tuning the run's backend holds (Backend::tuning()); none: no "tuning" key.
  std::optional<kernels::Tuning> tuning;
  /// This rank's measured device memory peak (PeakSampler::device_peak()), for
  /// memory.peak_device_bytes_per_rank on cuda runs.
  std::uint64_t device_peak = 0;
};

/// When this process was loaded (the default RecordContext::start).
std::chrono::system_clock::time_point process_start();

/// The envelope every run record starts with (docs/run-record.md). Collective (gathers the
/// GPU models and host names of all ranks).
nlohmann::json record_envelope(const std::string& command, const nlohmann::json& options,
                               const comm::Communicator& world, const std::string& backend,
                               int threads, const RecordContext& ctx);

/// The record's "timing" object: `unit` ("iteration" | "mode" | "contraction" | "run"), the
/// seconds per unit and their split (seconds per unit; names from kernel, comm, solve, io);
/// "other" is the rest of seconds_per_unit, never negative.
nlohmann::json timing_record(const std::string& unit, double seconds_per_unit,
                             const std::vector<std::pair<std::string, double>>& split = {});

/// One object per iteration of a cp run (iter, fit, delta, seconds, kernel, comm, solve) or
/// of a tucker run (iter, fit, delta, core_norm, seconds, ttmc, comm, svd): the records'
/// "per_iteration".
nlohmann::json cp_iterations_json(const std::vector<algo::CpIteration>& history);
nlohmann::json tucker_iterations_json(const std::vector<algo::TuckerIteration>& history);

/// "tensor" and "partition" of a decomposition's run record, from its loaded input
/// (run::Input<T>; cp and tucker, in the CLI and in the Python module).
template <typename In>
void add_input_fields(nlohmann::json& j, const In& in) {
  j["tensor"] = {{"dims", in.dims}, {"nnz", in.global_nnz}, {"duplicates_summed", in.duplicates}};
  j["partition"] = {{"scheme", in.partition_scheme},
                    {"grid", in.grid},
                    {"imbalance", in.imbalance},
                    {"min_block_nnz", in.min_block_nnz},
                    {"max_block_nnz", in.max_block_nnz}};
}

/// The iteration fields of a cp or tucker record: "per_iteration" (one object per iteration
/// with at least "fit" and "seconds"), "fits", "phases_seconds"."iterations" (the seconds of
/// the last `ran` iterations: those this process ran, after a resume) and "timing" per
/// iteration, whose split is given as totals over those iterations.
void add_iteration_fields(nlohmann::json& j, const nlohmann::json& per_iteration, int ran,
                          const std::vector<std::pair<std::string, double>>& split_totals);

/// The run record's "tuning" object: every field of kernels::Tuning under its own name
/// (cuda_layout, cuda_block_rows, cuda_l2_hint, mttkrp_kernel, tensor_cores, tc_precision,
/// tc_tile_density, ttmc_kernel, ttmc_tile, sptc_pool, sptc_tc_threshold, cpu_isa, trace),
/// typed as in the struct.
nlohmann::json tuning_json(const kernels::Tuning& t);

/// The records' "tc_split": one object per mode with every field of kernels::TcSplit under
/// its own name (mode, built, tile_mode, tiles, tile_nnz, fraction, padding, bytes,
/// predicted_speedup, used, precision, tile_seconds, rest_seconds, why); [] for an empty
/// split (docs/tensor-core-mttkrp.md).
nlohmann::json tc_split_json(const std::vector<kernels::TcSplit>& split);

/// One log line for one mode's split: "mode 0: tensor cores on 46.2% of nonzeros, 1234
/// tiles (mode 0 x mode 2), padding 31%, 12 MB, predicted speedup 1.80x; last MTTKRP hybrid
/// (3xtf32): tiles ... s + rest ... s", or "mode 0: no tensor-core tiles (why)".
std::string tc_split_line(const kernels::TcSplit& s);

}  // namespace tessera::run
