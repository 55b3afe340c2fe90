# `tessera bench mttkrp --tc-sweep` on the host backends (mpiexec -n 1): the sweep's rows, the
# error against the FP64 reference and the "needs the cuda backend" line (its GPU numbers
# come from jobs/, not from tests).
add_executable(mttkrp_tc_sweep_test ${CMAKE_CURRENT_LIST_DIR}/bench/mttkrp_tc_sweep_test.cpp)
target_link_libraries(mttkrp_tc_sweep_test PRIVATE tessera::cli GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)  # tessera::cli: the generator (generate_tc_blocky)
target_compile_definitions(mttkrp_tc_sweep_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(mttkrp_tc_sweep_test)
add_dependencies(mttkrp_tc_sweep_test tessera)
add_test(NAME mttkrp_tc_sweep_test COMMAND mttkrp_tc_sweep_test)
set_tests_properties(mttkrp_tc_sweep_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;bench" TIMEOUT 300 PROCESSORS 1)
# `tessera bench comm --backend cpu` at 1 and 2 ranks (MPI's blocking calls on host buffers):
# the rows, nccl-tests' bus factors and the record against docs/run-record.schema.json. The
# NCCL path is timed on a GPU node (jobs/), not here.
if(Python3_Interpreter_FOUND)
  foreach(np 1 2)
    add_test(NAME bench_comm_np${np}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/bench/bench_comm_test.py ${np})
    set_tests_properties(bench_comm_np${np} PROPERTIES
      ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1;TESSERA_MPIEXEC=${MPIEXEC_EXECUTABLE};TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      LABELS "driver;bench;mpi" TIMEOUT 120 PROCESSORS ${np} SKIP_RETURN_CODE 77)
  endforeach()
endif()
