// The environment Tessera's processes set for MPI_Init (docs/reliability.md, "Session 38").
#pragma once

#include <cstdlib>

namespace tessera::util {

/// Lives around MPI_Init. A process started without a launcher (`tessera cp ...`, `python3`,
/// a test binary) is an MPI singleton; Open MPI 4 then starts a helper daemon (orted) and
/// waits for it, about 0.2 s of every such start on a 2-core machine. The daemon serves a
/// singleton only for MPI_Comm_spawn and name publishing, which Tessera never uses, so this
/// asks Open MPI not to start it (`ess_singleton_isolated`), for this MPI_Init only: the
/// variable is removed again when this ends, so programs the process starts later (a
/// Python script's subprocesses) do not inherit it. A value already in the environment is
/// kept (OMPI_MCA_ess_singleton_isolated=0 brings the daemon back). A process started by
/// mpiexec or srun is not a singleton and is not affected; other MPI libraries do not read
/// the variable.
class MpiInitEnv {
 public:
  MpiInitEnv() {
    if (std::getenv(kName) == nullptr) set_ = ::setenv(kName, "1", 1) == 0;
  }
  ~MpiInitEnv() {
    if (set_) ::unsetenv(kName);
  }
  MpiInitEnv(const MpiInitEnv&) = delete;
  MpiInitEnv& operator=(const MpiInitEnv&) = delete;

 private:
  static constexpr const char* kName = "OMPI_MCA_ess_singleton_isolated";
  bool set_ = false;
};

}  // namespace tessera::util
