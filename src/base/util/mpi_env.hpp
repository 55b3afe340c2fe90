// The environment Tessera's processes set for MPI before MPI_Init (docs/reliability.md,
// "Session 38").
#pragma once

#include <cstdlib>

namespace tessera::util {

/// Call before MPI_Init. A process started without a launcher (`tessera cp ...`, `python3`,
/// a test binary) is an MPI singleton; Open MPI 4 then starts a helper daemon (orted) and
/// waits for it, about 0.2 s of every such start on a 2-core machine. The daemon serves a
/// singleton only for MPI_Comm_spawn and name publishing, which Tessera never uses, so this
/// asks Open MPI not to start it (`ess_singleton_isolated`). A value already in the
/// environment is kept (OMPI_MCA_ess_singleton_isolated=0 restores the daemon); a process
/// started by mpiexec or srun is not a singleton and is not affected; other MPI libraries
/// do not read the variable.
inline void set_mpi_singleton_env() {
  ::setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
}

}  // namespace tessera::util
