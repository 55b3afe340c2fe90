// tessera: one binary, many subcommands. Run under mpirun/srun, one rank per GPU.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "comm/mpi_communicator.hpp"
#include "commands.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

int main(int argc, char** argv) {
  using namespace tessera;
  comm::MpiRuntime mpi(&argc, &argv);
  comm::MpiCommunicator world(MPI_COMM_WORLD);

  CLI::App app{
      "Tessera: distributed sparse tensor decomposition (CP-ALS, Tucker-HOOI) on CPUs and GPUs.\n"
      "Run under mpirun -np P (or srun), one rank per GPU.",
      "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  int verbosity = 1;
  app.add_flag_callback(
      "-q,--quiet", [&] { verbosity = 0; }, "Only errors and warnings");
  app.add_flag_callback(
      "-v,--verbose", [&] { verbosity = 2; }, "More detail");
  // -q/-v also after the subcommand (tessera cp X.h5 -q): subcommands created below inherit
  // this and pass options they do not know to the main app.
  app.fallthrough();
  driver::Runner run;
  driver::add_cp(app, run);
  driver::add_contract(app, run);
  driver::add_generate(app, run);
  driver::add_info(app, run);
  driver::add_bench(app, run);
  driver::add_tucker(app, run);
  driver::add_convert(app, run);
  driver::add_partition(app, run);
  driver::add_plan(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same arguments: rank 0 reports, all exit with the same code.
    int rc = 0;
    if (world.rank() == 0) {
      rc = app.exit(e);
    } else {
      rc = e.get_exit_code();
    }
    return rc;
  }
  log::set_verbosity(verbosity);

  try {
    run(world);
  } catch (const CollectiveError& e) {
    // All ranks agreed on this error: rank 0 reports it, every rank exits non-zero.
    if (world.rank() == 0) std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // This rank alone failed: report with rank and host, and end the whole job so no
    // rank waits forever in a collective.
    log::error_here(e.what());
    if (world.size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  return 0;
}
