# tests for plan: the memory planner's measured limits (tessera::plan).

# One process: cgroup v1/v2, /proc/meminfo and Slurm facts from fixture trees and variables,
# host_limit, parse_bytes / human_bytes, this process's VmRSS / VmHWM.
tessera_test_executable(plan_limits_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/plan_limits_test.cpp
  LIBS tessera::plan)
tessera_add_test(plan_limits_test plan_limits_test LABELS plan)

# Across ranks: ranks_on_node (MPI_Comm_split_type) on 2 ranks of one host.
tessera_test_executable(plan_limits_mpi
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/plan_limits_mpi_test.cpp
  LIBS tessera::plan)
tessera_add_mpi_test(plan_limits_mpi plan_limits_mpi RANKS 2 LABELS plan)

# The planner's choices (plan::make_plan is pure): tiers under budgets, refusals, chunks,
# the issue's amazon shape on an H100 node.
tessera_test_executable(plan_planner_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/plan_planner_test.cpp
  LIBS tessera::plan)
tessera_add_test(plan_planner_test plan_planner_test LABELS plan)

# The planner end to end (`tessera plan`, --dry-run, refusals, every tier on the reference
# and cpu backends: equal fits, measured peak within the plan).
add_executable(plan_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/plan_driver_test.cpp)
target_include_directories(plan_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/driver)
target_link_libraries(plan_driver_test PRIVATE GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(plan_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(plan_driver_test)
add_dependencies(plan_driver_test tessera)
add_test(NAME plan_driver_test COMMAND plan_driver_test)
set_tests_properties(plan_driver_test PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "driver;plan" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})

# Plans for N ranks (tessera plan --nprocs; issue 36): shares, tiers and bytes per rank for
# 1, 2, 4 ranks, the CP iteration model, the tensor-core tile sets per rank on H200s.
tessera_test_executable(plan_ranks_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/plan_ranks_test.cpp
  LIBS tessera::plan)
tessera_add_test(plan_ranks_test plan_ranks_test LABELS plan)

# `tessera plan --nprocs` end to end: per-rank shares and bytes for 1, 2, 4 ranks from a
# store, a partitioned store and text; a cuda card planned where no GPU is visible.
add_executable(plan_ranks_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/plan_ranks_driver_test.cpp)
target_include_directories(plan_ranks_driver_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/driver)
target_link_libraries(plan_ranks_driver_test PRIVATE GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(plan_ranks_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(plan_ranks_driver_test)
add_dependencies(plan_ranks_driver_test tessera)
add_test(NAME plan_ranks_driver_test COMMAND plan_ranks_driver_test)
set_tests_properties(plan_ranks_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver;plan" TIMEOUT 300
  PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})

# --comm-strategy auto: the model's choice on the measured shapes (issue 36, point 2).
tessera_test_executable(cp_strategy_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/cp_strategy_test.cpp
  LIBS tessera::algo)
tessera_add_test(cp_strategy_test cp_strategy_test LABELS plan)
