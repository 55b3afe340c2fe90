// The adapter of the tuning knobs' table (kernels/tuning.hpp, kKnobs) on the command line:
// every knob's option comes from the table, none is written here by name. Its "tuning"
// record key and schema entry: run/record.hpp (knobs_json, knobs_schema).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kernels/tuning.hpp"

namespace tessera::driver {

/// Registers every knob of kernels::kKnobs as an option of `sub` writing into `t`, in
/// `group`: an enumeration as TEXT:{names} (parsed to the enum here, once), a bool as on|off
/// (or a bare flag), a number with the table's check; the default shown is t's value now.
void add_knob_options(CLI::App* sub, kernels::Tuning& t, const std::string& group);

}  // namespace tessera::driver
