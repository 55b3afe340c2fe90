# The Python module's tests (tests/python/test_*.py, pytest), docs/python.md. One ctest
# entry runs them all with PYTHONPATH on the build tree's package; it is skipped (return
# code 77, with the reason printed) when the module was not built or pytest is missing.
if(TESSERA_PYTHON_BUILT)
  add_test(NAME python_module
    COMMAND ${CMAKE_COMMAND} -E env
      "PYTHONPATH=${PROJECT_BINARY_DIR}/python"
      ${TESSERA_PYTHON_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/run_pytest.py)
  set_tests_properties(python_module PROPERTIES
    ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1;TESSERA_MPIEXEC=${MPIEXEC_EXECUTABLE};TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    LABELS "python" TIMEOUT 600 PROCESSORS 2 SKIP_RETURN_CODE 77)
else()
  add_test(NAME python_module COMMAND ${CMAKE_COMMAND} -E echo
    "SKIP: the Python module was not built (TESSERA_PYTHON=OFF: pybind11-dev or python3-dev missing)")
  set_tests_properties(python_module PROPERTIES LABELS "python"
    SKIP_REGULAR_EXPRESSION "SKIP:")
endif()
