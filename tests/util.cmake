# tests for util: progress reports (text of lines and bars, quiet mode); the environment
# set around MPI_Init (a singleton without Open MPI's helper daemon); TESSERA_SHARE_GPU's values.
tessera_test_executable(util_unit
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/progress_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/mpi_env_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/share_gpu_test.cpp
  LIBS tessera::core tessera::comm)
tessera_add_test(util_unit util_unit LABELS util)
# The thread default under mpirun/srun (issue 36): node CPUs / ranks on the node, the
# node's CPUs from the masks, the cgroup quota and Slurm's grant.
tessera_test_executable(threads_default_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/threads_default_test.cpp
  LIBS tessera::core)
tessera_add_test(threads_default threads_default_test LABELS util)
