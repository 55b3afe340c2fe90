# Memory tier 3 (DESIGN §8: the tensor streamed from its HDF5 store by a prefetch thread).

# DiskTensor against the tensor in memory, its StreamedOps hooks (through the kernels::ops
# dispatchers) against the host backends on the whole tensor, and bad stores, ranges and
# chunk sizes (tier3_disk_np<P>).
tessera_test_executable(tier3_disk_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/tier3_disk_test.cpp
  LIBS tessera::algo tessera::io hdf5::hdf5)
foreach(np 1 2 3)
  tessera_add_mpi_test(tier3_disk tier3_disk_test RANKS ${np} LABELS "io;algo")
endforeach()

# CP-ALS and Tucker-HOOI in tier 3 against tier 1 and one process (tier3_algo_np<P>).
tessera_test_executable(tier3_algo_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/tier3_algo_test.cpp
  LIBS tessera::algo tessera::io hdf5::hdf5)
foreach(np 1 2 3)
  tessera_add_mpi_test(tier3_algo tier3_algo_test RANKS ${np} LABELS "io;algo")
endforeach()

# End to end through the tessera binary: --host-budget / --mem-budget force tier 3 on a
# store; cp and tucker give the fits of tier 1 at 1 and 2 ranks; a killed tier-3 run
# resumes to the same fits; clear errors for text inputs and --comm-strategy layer.
add_executable(tier3_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/tier3_driver_test.cpp)
target_include_directories(tier3_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(tier3_driver_test PRIVATE tessera::io hdf5::hdf5 GTest::gtest
  GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(tier3_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(tier3_driver_test)
add_dependencies(tier3_driver_test tessera)
add_test(NAME tier3_driver_test COMMAND tier3_driver_test)
set_tests_properties(tier3_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;io" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})

# ops::mttkrp_accumulate on the host backends (their shared implementation): chunks
# that partition a tensor, added into a known output, give the whole tensor's MTTKRP.
tessera_test_executable(kernels_accumulate_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/kernels_accumulate.cpp LIBS tessera::kernels)
tessera_add_test(kernels_accumulate kernels_accumulate_test LABELS algo)
