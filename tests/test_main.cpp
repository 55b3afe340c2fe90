// GoogleTest main for every Tessera test binary: initialises MPI, prints only on rank 0,
// and makes the exit code agree across ranks (a failure on any rank fails all).
#include <gtest/gtest.h>
#include <mpi.h>

#include "util/log.hpp"
#include "util/mpi_env.hpp"
#include "util/sanitizer.hpp"

namespace {
// Silences GoogleTest's default printer on ranks other than 0.
void quiet_other_ranks(int rank) {
  if (rank == 0) return;
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
}
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  {
    const tessera::util::MpiInitEnv env;        // as the tessera binary does (util/mpi_env.hpp)
    const tessera::util::LeakCheckPause pause;  // OpenMPI's own allocations
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tessera::log::set_rank(rank, size);
  tessera::log::set_verbosity(0);
  ::testing::InitGoogleTest(&argc, argv);
  quiet_other_ranks(rank);
  int rc = RUN_ALL_TESTS();
  int any = rc != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && rank == 0 && rc == 0) std::fprintf(stderr, "a test failed on another rank\n");
  tessera::util::leak_check_before_mpi_finalize();  // sanitizer builds (util/sanitizer.hpp)
  MPI_Finalize();
  return any;
}
