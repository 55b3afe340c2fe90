# tests for the HDF5 tensor store (tessera::io h5store, tessera convert/partition/info/generate).

# Across ranks: exact round trips, range and block reads, streamed generator entries,
# interrupted writes, every class of bad file (h5store_mpi_np<P>).
tessera_test_executable(h5store_mpi
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/h5store_mpi_test.cpp
  LIBS tessera::io tessera::algo hdf5::hdf5)
foreach(np 1 2 3 4)
  tessera_add_mpi_test(h5store_mpi h5store_mpi RANKS ${np} LABELS io)
endforeach()

# End to end through the tessera binary under mpiexec (a plain process).
add_executable(h5store_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/h5store_driver_test.cpp)
target_include_directories(h5store_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(h5store_driver_test PRIVATE tessera::io hdf5::hdf5 GTest::gtest
  GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(h5store_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(h5store_driver_test)
add_dependencies(h5store_driver_test tessera)
add_test(NAME h5store_driver_test COMMAND h5store_driver_test)
set_tests_properties(h5store_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;io" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})

# One process: H5TensorReader::read_direct (parallel pread) bit for bit against the HDF5
# path, the same errors, fallback for deflated stores; measure_read_bandwidth.
tessera_test_executable(h5store_direct
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/h5store_direct_test.cpp
  LIBS tessera::io hdf5::hdf5 ZLIB::ZLIB)
tessera_add_test(h5store_direct h5store_direct LABELS io)

# One process: corrupt stores the fuzz harness found (tests/fuzz/corpus/h5store/crash-*.h5)
# are refused at open; the seed stores still read.
tessera_test_executable(h5store_corrupt
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/h5store_corrupt_test.cpp
  LIBS tessera::io hdf5::hdf5 ZLIB::ZLIB)
target_compile_definitions(h5store_corrupt PRIVATE
  TESSERA_FUZZ_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus")
tessera_add_test(h5store_corrupt h5store_corrupt LABELS io)
