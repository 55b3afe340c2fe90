# cmake --install of this build tree into a temporary folder (cmake/TesseraInstall.cmake):
# bin/tessera runs from there, the Python module imports from there, the Slurm scripts,
# LICENSE and the module's headers are in place, and every #include "..." of those headers
# resolves inside the installed include/tessera. It installs what the build made and
# builds nothing (a few seconds); run it after the build, as ctest does.
# It checks the install rules, not memory safety: sanitizer builds (jobs/hardening.sh, no
# Python module) leave it out.
if(NOT TESSERA_SANITIZE STREQUAL "")
  return()
endif()
if(TESSERA_PYTHON_BUILT)
  set(_tessera_install_module "${TESSERA_PYTHON_INSTALL_DIR}")
else()
  set(_tessera_install_module "")
endif()
add_test(NAME install_tree
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/install_test.sh ${PROJECT_BINARY_DIR}
          ${PROJECT_SOURCE_DIR} "${_tessera_install_module}" "${TESSERA_PYTHON_EXECUTABLE}")
set_tests_properties(install_tree PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV};OMP_NUM_THREADS=1"
  LABELS "install" TIMEOUT 300)

# jobs/setup-nccl.sh (NCCL for the CUDA backend) against a fake toolkit and a fake apt: the
# install from NVIDIA's repository, the hint without it, nothing when NCCL is present.
add_test(NAME setup_nccl COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/setup_nccl_test.sh)
set_tests_properties(setup_nccl PROPERTIES LABELS "install" TIMEOUT 60)
