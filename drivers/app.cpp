// The tessera command line (drivers/app.hpp).
#include "app.hpp"

namespace tessera::driver {

void build_app(CLI::App& app, Runner& run, int& verbosity) {
  app.name("tessera");
  app.description(
      "Tessera: distributed sparse tensor decomposition (CP-ALS, Tucker-HOOI) on CPUs and GPUs.\n"
      "Run under mpirun -np P (or srun), one rank per GPU.");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  app.add_flag_callback(
      "-q,--quiet", [&verbosity] { verbosity = 0; }, "Only errors and warnings");
  app.add_flag_callback(
      "-v,--verbose", [&verbosity] { verbosity = 2; }, "More detail");
  // -q/-v also after the subcommand (tessera cp X.h5 -q): subcommands created below inherit
  // this and pass options they do not know to the main app.
  app.fallthrough();
  add_cp(app, run);
  add_contract(app, run);
  add_generate(app, run);
  add_info(app, run);
  add_bench(app, run);
  add_tucker(app, run);
  add_convert(app, run);
  add_partition(app, run);
  add_plan(app, run);
}

}  // namespace tessera::driver
