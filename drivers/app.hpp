// The tessera command line, built in one place: main() parses it and runs what it chose;
// the option-parser fuzz harness (tests/fuzz/fuzz_options.cpp) parses fuzzed argv with it.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace tessera::driver {

/// Sets the name, description and global flags (-q, -v, --version) of `app` and adds every
/// subcommand. Parsing only records options: a parsed subcommand's callback sets `run`,
/// -q/-v set `verbosity` (0 quiet, 1 default, 2 verbose); nothing is read or written.
void build_app(CLI::App& app, Runner& run, int& verbosity);

}  // namespace tessera::driver
