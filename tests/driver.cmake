# End-to-end tests of the tessera binary (a plain process that launches mpiexec itself).
add_executable(driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/driver_test.cpp)
target_link_libraries(driver_test PRIVATE GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(driver_test)
add_dependencies(driver_test tessera)
add_test(NAME driver_test COMMAND driver_test)
set_tests_properties(driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
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
  LABELS "driver" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# The output policy end to end (src/base/io/output.hpp): outputs that are inputs, unwritable
# outputs found before any work, special files, --force, stale temporaries.
add_executable(output_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/output_driver_test.cpp)
target_link_libraries(output_driver_test PRIVATE GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(output_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(output_driver_test)
add_dependencies(output_driver_test tessera)
add_test(NAME output_driver_test COMMAND output_driver_test)
set_tests_properties(output_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver;io" TIMEOUT 600 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# CLI interop end to end (issue 19): export of CP/Tucker models as .npy and text read back
# bit for bit, info on models and checkpoints, pyttb sptensor text through convert.
add_executable(interop_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/interop_driver_test.cpp)
target_link_libraries(interop_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main)
target_compile_definitions(interop_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(interop_driver_test)
add_dependencies(interop_driver_test tessera)
add_test(NAME interop_driver_test COMMAND interop_driver_test)
set_tests_properties(interop_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver;io" TIMEOUT 300 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# Every subcommand's --json run record checked against the JSON Schema file
# docs/run-record.schema.json (docs/run-record.md); skipped without python3-jsonschema.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME run_record_schema
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/driver/run_record_test.py)
  set_tests_properties(run_record_schema PROPERTIES
    ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1;TESSERA_MPIEXEC=${MPIEXEC_EXECUTABLE};TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    LABELS "driver" TIMEOUT 300 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS} SKIP_RETURN_CODE 77)
else()
  add_test(NAME run_record_schema COMMAND ${CMAKE_COMMAND} -E echo
    "SKIP: python3 not found: the run records are not checked against docs/run-record.schema.json")
  set_tests_properties(run_record_schema PROPERTIES LABELS "driver" SKIP_REGULAR_EXPRESSION "SKIP:")
endif()
# The record's tensor-core split (src/engine/run/record.hpp tc_split_json, tc_split_line; issue 18),
# from hand-made values: the host backends have none.
tessera_test_executable(driver_record_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/driver_record.cpp LIBS tessera::run)
tessera_add_test(driver_record driver_record_test LABELS driver)
# The tuning knobs' table (kernels/tuning.hpp; issue 40) against the CLI options, --help, the
# run record and docs/run-record.schema.json.
tessera_test_executable(tuning_knobs_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/tuning_knobs.cpp LIBS tessera::cli)
target_compile_definitions(tuning_knobs_test PRIVATE TESSERA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
tessera_add_test(tuning_knobs tuning_knobs_test LABELS driver)
# Command-line habits (issue 20): oversubscription warning, -t as --threads, options a
# subcommand does not use refused, defaults in --help.
add_executable(cli_habits_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/cli_habits_driver_test.cpp)
target_link_libraries(cli_habits_driver_test PRIVATE GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(cli_habits_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(cli_habits_driver_test)
add_dependencies(cli_habits_driver_test tessera)
add_test(NAME cli_habits_driver_test COMMAND cli_habits_driver_test)
set_tests_properties(cli_habits_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 300 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# Threads per rank under mpirun (issue 36, point 6): the default (node CPUs / ranks on the
# node) at 2 ranks without --threads or OMP_NUM_THREADS (the commands unset it), recorded
# and not warned about; a count the user gave still warned about.
add_executable(threads_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/threads_driver_test.cpp)
target_link_libraries(threads_driver_test PRIVATE tessera::core GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(threads_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(threads_driver_test)
add_dependencies(threads_driver_test tessera)
add_test(NAME threads_driver_test_np2 COMMAND threads_driver_test)
set_tests_properties(threads_driver_test_np2 PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV}"
  LABELS "driver;mpi" TIMEOUT 300 PROCESSORS 2)
# Issue 41: a table of bad option values through the binary and tessera plan (seconds).
add_executable(validate_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/validate_driver_test.cpp)
target_link_libraries(validate_driver_test PRIVATE GTest::gtest GTest::gtest_main)
target_compile_definitions(validate_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(validate_driver_test)
add_dependencies(validate_driver_test tessera)
add_test(NAME validate_driver_test COMMAND validate_driver_test)
set_tests_properties(validate_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver" TIMEOUT 300 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
