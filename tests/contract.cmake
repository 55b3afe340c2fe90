# Sparse tensor contraction (SpTC): the kernels on every host backend against brute force,
# the distributed contraction under MPI at 1, 2, 3 and 4 ranks, and `tessera contract`
# end to end.
tessera_test_executable(kernels_sptc_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_sptc.cpp LIBS tessera::kernels)
tessera_add_test(kernels_sptc kernels_sptc_test)

tessera_test_executable(algo_contract_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/mpi/algo_contract_test.cpp LIBS tessera::algo)
foreach(np 1 2 3 4)
  tessera_add_mpi_test(algo_contract algo_contract_test RANKS ${np})
endforeach()

# Output in pieces under a small memory limit (same Z as one piece; VmHWM under the plan;
# refusal below the resident part) and the planner's piece model, at 1 and 2 ranks.
tessera_test_executable(contract_pieces_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/mpi/contract_pieces_test.cpp LIBS tessera::algo tessera::plan)
foreach(np 1 2)
  tessera_add_mpi_test(contract_pieces contract_pieces_test RANKS ${np})
endforeach()

# End-to-end tests of `tessera contract` and `tessera bench contract` (mpiexec -n 2).
add_executable(contract_driver_test ${CMAKE_CURRENT_LIST_DIR}/driver/contract_driver_test.cpp)
target_link_libraries(contract_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(contract_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(contract_driver_test)
add_dependencies(contract_driver_test tessera)
add_test(NAME contract_driver_test COMMAND contract_driver_test)
set_tests_properties(contract_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})

# The cpu kernel on real tensors: the output of 1, 2 and 3 threads and of every accumulator
# is the same, bitwise, and agrees with the reference.
tessera_test_executable(kernels_sptc_real_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_sptc_real.cpp
  LIBS tessera::kernels tessera::io tessera::comm)
tessera_add_test(kernels_sptc_real kernels_sptc_real_test)
