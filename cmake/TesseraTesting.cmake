# Test helpers. Tests are registered with plain add_test (no discovery at build time).
find_package(GTest REQUIRED)

# Environment for every test: allow mpiexec as root (containers, CI) and oversubscription
# (4 ranks on a 2-core machine); one OpenMP thread per rank unless a test says otherwise.
# OpenMPI's ob1 messaging layer (shared memory and TCP, what ranks on one host use): left to
# choose, every process start also opens the cm layer's PSM and libfabric providers, which
# costs about 0.2 s per `mpiexec -n 2` (0.44 -> 0.23 s for `tessera --version` on 2 cores),
# and the driver tests start the tessera binary hundreds of times (docs/reliability.md,
# "CI time"). Tessera's own code does not depend on it.
# No grace period between mpiexec's SIGTERM and SIGKILL (odls_base_sigkill_timeout, default
# 1 s): Open MPI 4.1 waits it out whenever a job ends with a non-zero exit, even when every
# rank has already exited, so each of the driver tests' refused inputs on 2 ranks took 1.4 s
# instead of 0.4 (docs/reliability.md, "Session 38"). The tests of the signal and fault paths
# set their own (signal_driver_test 5 s; fault_driver_test Open MPI's default 1 s, in which
# the surviving ranks print the job's one message); jobs/slurm/launch.sh gives user jobs 25 s.
set(TESSERA_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1"
  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "OMPI_MCA_rmaps_base_oversubscribe=1"
  "OMPI_MCA_pml=ob1"
  "OMPI_MCA_btl_vader_single_copy_mechanism=none"
  "OMPI_MCA_odls_base_sigkill_timeout=0"
  "OMP_WAIT_POLICY=PASSIVE"
  "TESSERA_SHARED_DATA=${PROJECT_SOURCE_DIR}/../shared/data"
  "TESSERA_BIN=$<TARGET_FILE:tessera>")
# Sanitizer builds (TESSERA_SANITIZE): leaks inside OpenMPI/HDF5 are suppressed by name
# (tests/sanitizers/lsan.supp), never Tessera frames; UB stops the test with a stack.
if(NOT TESSERA_SANITIZE STREQUAL "")
  list(APPEND TESSERA_TEST_ENV
    "ASAN_OPTIONS=${TESSERA_ASAN_OPTIONS}"
    "LSAN_OPTIONS=${TESSERA_LSAN_OPTIONS}"
    "UBSAN_OPTIONS=${TESSERA_UBSAN_OPTIONS}")
endif()

# Driver tests (tests/driver: the tessera binary under mpiexec, mostly on 2 ranks) count as
# one processor for `ctest -j`: they spend most of their time waiting on process start-up
# (mpiexec, MPI_Init) and the file system, not computing. Measured on 2 cores:
# cli_habits_driver_test used 12.5 CPU-seconds in 42 s, output_driver_test 14 in 52 s. So
# two of them, or one beside a unit test, share the 2 cores of CI without slowing each other
# much (docs/reliability.md, "CI time").
set(TESSERA_DRIVER_TEST_PROCESSORS 1)

# The main and helpers every tessera_test_executable shares (tests/test_main.cpp: MPI,
# output on rank 0 only, one exit code for all ranks; tests/test_util.cpp), compiled once.
# main() comes out of the archive because the executable's start-up code asks for it.
add_library(tessera_test_support STATIC ${PROJECT_SOURCE_DIR}/tests/test_main.cpp
  ${PROJECT_SOURCE_DIR}/tests/test_util.cpp)
target_include_directories(tessera_test_support PUBLIC ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(tessera_test_support PUBLIC tessera::core GTest::gtest MPI::MPI_CXX)
tessera_target_defaults(tessera_test_support)

# tessera_test_executable(NAME SOURCES ... [LIBS ...]): a GoogleTest binary whose main
# initialises MPI (tessera_test_support), so the same binary runs alone or under mpiexec.
function(tessera_test_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} tessera_test_support)
  tessera_target_defaults(${name})
endfunction()

# tessera_add_test(NAME EXE [ARGS ...] [LABELS ...]): one process.
function(tessera_add_test name exe)
  cmake_parse_arguments(A "" "" "ARGS;LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${exe} ${A_ARGS})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=2"
    LABELS "unit;${A_LABELS}" TIMEOUT 600)
endfunction()

# tessera_add_mpi_test(NAME EXE RANKS n [ARGS ...] [LABELS ...]): registered as NAME_np<n>.
function(tessera_add_mpi_test name exe)
  cmake_parse_arguments(A "" "RANKS" "ARGS;LABELS" ${ARGN})
  set(full "${name}_np${A_RANKS}")
  add_test(NAME ${full}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${A_RANKS} --oversubscribe
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${exe}> ${MPIEXEC_POSTFLAGS} ${A_ARGS})
  set_tests_properties(${full} PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
    LABELS "mpi;${A_LABELS}" TIMEOUT 900 PROCESSORS ${A_RANKS})
endfunction()
