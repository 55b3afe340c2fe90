// What this build of Tessera is and which libraries the process runs: the "versions" of
// every run record (record.cpp) and the whole of `python -m tessera` (docs/python.md).
#pragma once

#include <nlohmann/json.hpp>

namespace tessera::run {

/// Versions of the libraries loaded at run time: {"mpi", "hdf5", "cuda_runtime",
/// "cuda_driver", "nccl"}, strings or null (not built or not known). Needs no MPI_Init.
nlohmann::json library_versions();

/// The build and its libraries: {"version", "commit", "build_type", "compiler", "cuda":
/// {"built", "architectures", "runtime", "driver", "devices"}, "nccl", "mpi": {"library",
/// "standard"}, "blas" / "lapack": {"vendor", "path", "config"}, "scalapack", "openmp":
/// {"version", "max_threads", "usable_cpus"}, "hdf5": {"version", "parallel"}}. Local to
/// this process (no collective call; MPI need not be initialised).
nlohmann::json build_info();

}  // namespace tessera::run
