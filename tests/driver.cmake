# End-to-end tests of the tessera binary (a plain process that launches mpiexec itself).
add_executable(driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/driver_test.cpp)
target_link_libraries(driver_test PRIVATE GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
add_dependencies(driver_test tessera)
add_test(NAME driver_test COMMAND driver_test)
set_tests_properties(driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver" TIMEOUT 900 PROCESSORS 2)
# End-to-end tests of `tessera tucker` (reads the model file through tessera::io).
add_executable(tucker_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/tucker_driver_test.cpp)
target_link_libraries(tucker_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(tucker_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(tucker_driver_test)
add_dependencies(tucker_driver_test tessera)
add_test(NAME tucker_driver_test COMMAND tucker_driver_test)
set_tests_properties(tucker_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver" TIMEOUT 900 PROCESSORS 2)
# The output policy end to end (src/io/output.hpp): outputs that are inputs, unwritable
# outputs found before any work, special files, --force, stale temporaries.
add_executable(output_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/output_driver_test.cpp)
target_link_libraries(output_driver_test PRIVATE GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(output_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
add_dependencies(output_driver_test tessera)
add_test(NAME output_driver_test COMMAND output_driver_test)
set_tests_properties(output_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver;io" TIMEOUT 600 PROCESSORS 2)
