// Subcommand registration: each adds its options to the CLI and sets `run`.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "comm/mpi_communicator.hpp"

namespace tessera::driver {

using Runner = std::function<void(const comm::MpiCommunicator& world)>;

void add_cp(CLI::App& app, Runner& run);
void add_contract(CLI::App& app, Runner& run);
void add_generate(CLI::App& app, Runner& run);
void add_info(CLI::App& app, Runner& run);
void add_bench(CLI::App& app, Runner& run);
/// `bench contract` under the `bench` subcommand (drivers/bench/contract.cpp; add_bench calls it).
void add_bench_contract(CLI::App* bench, Runner& run);
void add_tucker(CLI::App& app, Runner& run);
void add_convert(CLI::App& app, Runner& run);
void add_partition(CLI::App& app, Runner& run);
void add_plan(CLI::App& app, Runner& run);
void add_export(CLI::App& app, Runner& run);

}  // namespace tessera::driver
