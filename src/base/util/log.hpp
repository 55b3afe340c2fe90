// Rank-aware logging: info on rank 0, warnings and errors tagged with rank and host.
#pragma once

#include <string>

namespace tessera::log {

/// Set once after MPI init; before that everything prints as rank 0.
void set_rank(int rank, int size);
int rank();
/// 0 = quiet (errors only), 1 = normal, 2 = verbose.
void set_verbosity(int v);
int verbosity();

/// Printed by rank 0 only (stdout).
void info(const std::string& msg);
/// Printed by rank 0 only when verbosity >= 2.
void debug(const std::string& msg);
/// Printed by rank 0 only, to stderr, prefixed "warning: ".
void warn(const std::string& msg);
/// Printed by the calling rank, to stderr, prefixed with rank and host.
void error_here(const std::string& msg);
/// Host name of this process.
std::string hostname();
/// True when stderr, where progress bars are drawn, is a terminal (bars only then; log
/// lines otherwise). stderr, not stdout: OpenMPI gives launched processes a pseudo-terminal
/// for stdout even when mpirun's output goes to a file or a pipe.
bool stderr_is_tty();

}  // namespace tessera::log
