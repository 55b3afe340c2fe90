# End-to-end tests of the tessera binary (a plain process that launches mpiexec itself).
add_executable(driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/driver_test.cpp)
target_link_libraries(driver_test PRIVATE GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
add_dependencies(driver_test tessera)
add_test(NAME driver_test COMMAND driver_test)
set_tests_properties(driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver" TIMEOUT 900 PROCESSORS 2)
