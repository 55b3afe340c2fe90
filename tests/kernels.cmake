# Kernel tests: every host backend (reference, cpu) against brute-force dense results and
# against the reference backend; float and double; fresh random inputs each run
# (TESSERA_TEST_SEED=<n> replays a failing seed).
tessera_test_executable(kernels_mttkrp_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_mttkrp.cpp LIBS tessera::kernels)
tessera_add_test(kernels_mttkrp kernels_mttkrp_test)

tessera_test_executable(kernels_dense_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_dense.cpp LIBS tessera::kernels)
tessera_add_test(kernels_dense kernels_dense_test)

tessera_test_executable(kernels_gcp_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_gcp.cpp LIBS tessera::kernels)
tessera_add_test(kernels_gcp kernels_gcp_test)

tessera_test_executable(kernels_backend_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_backend.cpp LIBS tessera::kernels)
tessera_add_test(kernels_backend kernels_backend_test)

tessera_test_executable(kernels_ttmc_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_ttmc.cpp LIBS tessera::kernels)
tessera_add_test(kernels_ttmc kernels_ttmc_test)

tessera_test_executable(kernels_tucker_dense_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_tucker_dense.cpp LIBS tessera::kernels)
tessera_add_test(kernels_tucker_dense kernels_tucker_dense_test)

# The per-operation layer (kernels/ops/): the dispatchers against each host backend's own
# function called directly (bit for bit), an executor of no known kind, the cuda stubs of a
# build without CUDA, and a streamed handle's hooks taking the handle operations.
tessera_test_executable(kernels_ops_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/unit/kernels_ops.cpp LIBS tessera::kernels)
tessera_add_test(kernels_ops kernels_ops_test)
# Every operation of kernels/ops/ has, in every backend's folder, a definition that writes its
# signature out (found by tags, clangd, grep) followed by its instantiation (issue 40, point 4).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME kernels_ops_definitions
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/jobs/check-ops.py --tags)
  set_tests_properties(kernels_ops_definitions PROPERTIES LABELS "unit")
endif()
