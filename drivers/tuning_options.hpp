// The adapters of the tuning knobs' table (kernels/tuning.hpp, kKnobs) on the command line
// and in the run record: every knob's option, its "tuning" record key and its schema entry
// come from the table, none is written here by name.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/tuning.hpp"

namespace tessera::driver {

/// Registers every knob of kernels::kKnobs as an option of `sub` writing into `t`, in
/// `group`: an enumeration as TEXT:{names} (parsed to the enum here, once), a bool as on|off
/// (or a bare flag), a number with the table's check; the default shown is t's value now.
void add_knob_options(CLI::App* sub, kernels::Tuning& t, const std::string& group);

/// The run record's "tuning" object: every knob under its key (enumerations by name).
nlohmann::json knobs_json(const kernels::Tuning& t);

/// The JSON Schema of the "tuning" object ({"type", "required", "properties"}) as the
/// table describes it; docs/run-record.schema.json holds the same (tests/unit/tuning_knobs.cpp).
nlohmann::json knobs_schema();

}  // namespace tessera::driver
