# Unique stores (io::UniqueWriter, src/base/io/dedup.*): repeated coordinates merged while writing.

# Across ranks: the std::map reference (sum and keep-first), the same file on every rank
# count and memory limit (spills to scratch files), the id cutoff, failures (dedup_mpi_np<P>).
tessera_test_executable(dedup_mpi
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/dedup_mpi_test.cpp
  LIBS tessera::io hdf5::hdf5)
foreach(np 1 2 3)
  tessera_add_mpi_test(dedup_mpi dedup_mpi RANKS ${np} LABELS io)
endforeach()

# End to end through the tessera binary: generate sampled/blocks --out X.h5, convert of text
# and of stores with has_duplicates != 0, the tier-3 refusal of a store that may hold repeats.
add_executable(dedup_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/dedup_driver_test.cpp)
target_include_directories(dedup_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dedup_driver_test PRIVATE tessera::io hdf5::hdf5 GTest::gtest
  GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(dedup_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(dedup_driver_test)
add_dependencies(dedup_driver_test tessera)
add_test(NAME dedup_driver_test COMMAND dedup_driver_test)
set_tests_properties(dedup_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;io" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
