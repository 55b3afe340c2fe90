# GPU tests (label gpu): the CUDA backend against the reference backend, and the NCCL
# communicator against the MPI communicator at 1 and 2 ranks. Built only with
# TESSERA_WITH_CUDA; without a visible GPU (or with fewer GPUs than ranks) every test
# skips with a message, and ctest reports the run as skipped rather than passed.
set(_tessera_gpu_skip "no CUDA device visible|fewer GPUs than ranks")

tessera_test_executable(gpu_backend_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_backend.cpp
  LIBS tessera::kernels)
tessera_add_test(gpu_backend gpu_backend_tests LABELS gpu)
set_tests_properties(gpu_backend PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")

tessera_test_executable(gpu_nccl_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_nccl.cpp
  LIBS tessera::kernels tessera::comm)
foreach(np 1 2)
  tessera_add_mpi_test(gpu_nccl gpu_nccl_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_nccl_np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()

tessera_test_executable(gpu_cp_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_cp.cpp
  LIBS tessera::algo)
foreach(np 1 2)
  tessera_add_mpi_test(gpu_cp gpu_cp_tests RANKS ${np} LABELS gpu)
  set_tests_properties(gpu_cp_np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "${_tessera_gpu_skip}")
endforeach()
