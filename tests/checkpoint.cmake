# Checkpoint and restart (--checkpoint-every, --resume): resumed runs equal uninterrupted
# ones (CP-ALS and Tucker-HOOI, at 1, 2 and 3 ranks, with checkpoints taken at another rank
# count), the checkpoint file (round trip, damaged files, atomic replacement) and the checks
# that a checkpoint matches the run resuming it.
tessera_test_executable(checkpoint_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi/checkpoint_test.cpp
  LIBS tessera::algo tessera::io)
foreach(np 1 2 3)
  tessera_add_mpi_test(checkpoint checkpoint_test RANKS ${np})
endforeach()
# End to end: `tessera cp|tucker --checkpoint-every 2` killed after iteration 3 (test hook
# TESSERA_TEST_KILL_AFTER_ITERATION), then --resume: the same model as an uninterrupted run.
add_executable(checkpoint_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/checkpoint_driver_test.cpp)
target_link_libraries(checkpoint_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main)
target_compile_definitions(checkpoint_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(checkpoint_driver_test)
add_dependencies(checkpoint_driver_test tessera)
add_test(NAME checkpoint_driver_test COMMAND checkpoint_driver_test)
set_tests_properties(checkpoint_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 900 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# tessera cp with --nonneg, --l1/--l2, --observed-only, --holdout, --init nvecs.
add_executable(constrained_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/constrained_driver_test.cpp)
target_link_libraries(constrained_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(constrained_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(constrained_driver_test)
add_dependencies(constrained_driver_test tessera)
add_test(NAME constrained_driver_test COMMAND constrained_driver_test)
set_tests_properties(constrained_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 600 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# Stopping by a signal: `tessera cp|tucker` signalled (SIGTERM, SIGINT; 1 rank, and 2 ranks
# through mpiexec) write the model, the checkpoint and the record (stop_reason "signal"),
# exit 128 + signal, and --resume continues. About 10 s, most of it mpiexec's kill grace.
add_executable(signal_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/signal_driver_test.cpp)
target_link_libraries(signal_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(signal_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(signal_driver_test)
add_dependencies(signal_driver_test tessera)
add_test(NAME signal_driver_test COMMAND signal_driver_test)
set_tests_properties(signal_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 300 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# Faults on several ranks (docs/reliability.md): one rank of `tessera cp` under mpiexec killed
# or stopped at its MTTKRP or in a collective (--inject-fault), or failing with an error of its
# own: the job ends with one message naming the rank, within --watchdog (3 s here) for a
# stopped rank, the model and checkpoint stay whole and --resume gives the uninterrupted fit.
# On the cpu backend here; gpu_faults_np2/np4 run the same tests on the cuda backend (NCCL),
# with a GPU out of memory too.
add_executable(fault_driver_test ${CMAKE_CURRENT_SOURCE_DIR}/driver/fault_driver_test.cpp)
target_link_libraries(fault_driver_test PRIVATE tessera::io GTest::gtest GTest::gtest_main
  nlohmann_json::nlohmann_json)
target_compile_definitions(fault_driver_test PRIVATE
  TESSERA_BIN_PATH="$<TARGET_FILE:tessera>" MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
tessera_target_defaults(fault_driver_test)
add_dependencies(fault_driver_test tessera)
add_test(NAME fault_driver_test COMMAND fault_driver_test)
set_tests_properties(fault_driver_test PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1" LABELS "driver" TIMEOUT 400 PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
# 4 ranks: rank 0 forwards the end to the others (a kill, a stop, one rank's own error); rank 0
# stopped: rank 1 reports, ranks 2-3 wait for it.
add_test(NAME fault_driver_np4 COMMAND fault_driver_test
  --gtest_filter=*KilledInACollective*:*StoppedInACollective*:*RankZeroStopped*:*ErrorOnOneRank*)
set_tests_properties(fault_driver_np4 PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1;TESSERA_FAULT_NP=4" LABELS "driver" TIMEOUT 300
  PROCESSORS ${TESSERA_DRIVER_TEST_PROCESSORS})
if(TESSERA_WITH_CUDA)
  foreach(np 2 4)
    add_test(NAME gpu_faults_np${np} COMMAND fault_driver_test)
    set_tests_properties(gpu_faults_np${np} PROPERTIES
      ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1;TESSERA_FAULT_BACKEND=cuda;TESSERA_FAULT_NP=${np}"
      LABELS "gpu" TIMEOUT 600 SKIP_REGULAR_EXPRESSION "no CUDA device visible|fewer GPUs than ranks")
  endforeach()
endif()
