# Under a real Slurm (tests/slurm/slurm_ci.sh, docs/studies.md): a one-node cluster on this
# host runs jobs/slurm/cp.sbatch, resumable.sbatch (requeued once, resumed from its
# checkpoint) and a 2-point jobs/study.py study. Installs Slurm when missing (root/sudo and
# apt-get); skipped (77) where it cannot. Both tests check scripts and Slurm, not Tessera's
# memory safety: sanitizer builds (jobs/hardening.sh) leave them out.
if(NOT TESSERA_SANITIZE STREQUAL "")
  return()
endif()
add_executable(model_compare ${CMAKE_CURRENT_SOURCE_DIR}/slurm/model_compare.cpp)
target_link_libraries(model_compare PRIVATE tessera::io)
tessera_target_defaults(model_compare)
add_dependencies(model_compare tessera)
add_test(NAME slurm_ci COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/slurm_ci.sh)
set_tests_properties(slurm_ci PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};TESSERA_MODEL_COMPARE=$<TARGET_FILE:model_compare>"
  LABELS "slurm" RUN_SERIAL TRUE SKIP_RETURN_CODE 77 TIMEOUT 420)
# jobs/study.py and jobs/scaling.sh run locally (mpirun), no Slurm, a few seconds.
add_test(NAME study_local COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/study_test.sh)
set_tests_properties(study_local PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV}"
  LABELS "study" TIMEOUT 300 PROCESSORS 2)
