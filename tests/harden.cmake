# Issue 22, points 2-3 (no crash, hang or silent wrong result; one error line per failure).

# Library level, alone and on 3 ranks: thread caps (affinity, cgroup fixtures), CP-ALS and
# Tucker on values near 1e200 / 1e-200, single-precision range, gzip trailing data, FIFOs,
# dims of 2^32 in the planner, all-zero tensors, comm::FirstFailure.
tessera_test_executable(harden_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/harden_test.cpp
  LIBS tessera::algo tessera::plan tessera::io ZLIB::ZLIB)
tessera_add_test(harden_unit harden_test LABELS harden)
tessera_add_mpi_test(harden_mpi harden_test RANKS 3 LABELS harden)

# End to end through the tessera binary (a plain process that launches mpiexec itself).
add_executable(harden_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/harden_driver_test.cpp)
# src/: io/h5/handle.hpp (header-only) for h5store_test_util.hpp; no Tessera library linked.
target_include_directories(harden_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/driver ${PROJECT_SOURCE_DIR}/src/base)
target_link_libraries(harden_driver_test PRIVATE hdf5::hdf5 ZLIB::ZLIB GTest::gtest
  GTest::gtest_main)
target_compile_definitions(harden_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(harden_driver_test)
add_dependencies(harden_driver_test tessera)
add_test(NAME harden_driver_test COMMAND harden_driver_test)
set_tests_properties(harden_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;harden" TIMEOUT 900
  PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
