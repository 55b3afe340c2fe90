# Under a real Slurm (tests/slurm/slurm_ci.sh, docs/studies.md): a one-node cluster on this
# host runs jobs/slurm/cp.sbatch, resumable.sbatch (requeued once, resumed from its
# checkpoint) and a 2-point jobs/study.py study; slurm_multinode runs 2-node jobs on two
# slurmd. Installs Slurm when missing (root/sudo and apt-get); skipped (77) where it cannot.
# These tests check scripts and Slurm, not Tessera's memory safety: sanitizer builds
# (jobs/hardening.sh) leave them out.
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
# Two slurmd on this host (tests/slurm/cluster.sh): jobs/slurm/cp.sbatch on 2 nodes x 1 rank
# under mpirun and srun --mpi=pmix; ranks on both nodes, the fit and model of a 1-node run.
add_test(NAME slurm_multinode COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/slurm_multinode.sh)
set_tests_properties(slurm_multinode PROPERTIES
  ENVIRONMENT "${TESSERA_TEST_ENV};TESSERA_MODEL_COMPARE=$<TARGET_FILE:model_compare>"
  LABELS "slurm" RUN_SERIAL TRUE SKIP_RETURN_CODE 77 TIMEOUT 240)
# jobs/study.py and jobs/scaling.sh run locally (mpirun), no Slurm, a few seconds.
add_test(NAME study_local COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/study_test.sh)
set_tests_properties(study_local PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV}"
  LABELS "study" TIMEOUT 300 PROCESSORS 2)
# jobs/slurm/launch.sh without Slurm: the launch lines of TESSERA_DRY_RUN=1 for 1 x 1,
# 2 x 4 and 4 x 8 GPU allocations, their errors, and the node emulation run on CPUs
# (tests/slurm/launch_test.sh, docs/studies.md "Multi-node GPU jobs"). A few seconds.
add_test(NAME slurm_launch COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/launch_test.sh)
set_tests_properties(slurm_launch PROPERTIES ENVIRONMENT "${TESSERA_TEST_ENV}"
  LABELS "slurm" TIMEOUT 120 PROCESSORS 2)
