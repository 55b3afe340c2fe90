# cmake --install (README, "Install"): what goes where under the prefix.
#
#   bin/tessera                           the binary (drivers/)
#   <TESSERA_PYTHON_INSTALL_DIR>/tessera  the Python module (python/CMakeLists.txt)
#   include/tessera/...                   the headers the Python module's sources include,
#                                         directly or through each other: the run layer's
#                                         API and what it reaches, by include-root path
#                                         (-I<prefix>/include/tessera, then "run/cp.hpp")
#   share/tessera/slurm/                  jobs/slurm: cp.sbatch, resumable.sbatch, launch.sh,
#                                         emulate-node.sh
#   share/doc/tessera/                    LICENSE, README.md, docs/, examples/
#
# The static libraries are not installed: the binary and the module contain them and
# nothing outside links them. tests/install checks that every #include "..." of the
# installed headers and of python/src resolves inside the installed include/tessera, so a
# new include among them fails there until its header is listed below.
include(GNUInstallDirs)

# Installed binaries find the libraries linked from outside the system folders (NCCL and the
# CUDA runtime under the CUDA toolkit, HDF5's serial folder) through their RUNPATH. cuBLAS
# and cuSOLVER are not linked: the cuda backend opens them on first use by soname (the same
# search, RUNPATH included), else from the folder CMake found them in
# (kernels/cuda/runtime/math_libs.cpp).
install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set_target_properties(tessera PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
if(TARGET _tessera)
  set_target_properties(_tessera PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

# tessera_install_headers(ROOT HEADER...): ROOT/HEADER to include/tessera/HEADER.
function(tessera_install_headers root)
  foreach(_h IN LISTS ARGN)
    get_filename_component(_dir "${_h}" DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${root}/${_h}
      DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/${_dir})
  endforeach()
endfunction()
tessera_install_headers(src/engine
  run/checkpoint.hpp run/compute.hpp run/contract.hpp run/contract_inputs.hpp run/cp.hpp
  run/build_info.hpp run/cp_options.hpp run/input.hpp run/record.hpp run/tucker.hpp
  algo/cp_als.hpp algo/disk_tier.hpp algo/streamed.hpp algo/tucker.hpp
  plan/comm_model.hpp plan/limits.hpp plan/planner.hpp)
tessera_install_headers(src/base
  io/checkpoint.hpp io/h5store.hpp io/model_io.hpp io/output.hpp io/tns.hpp
  linalg/dense.hpp linalg/row_update.hpp model/kruskal.hpp model/tucker.hpp
  tensor/sparse_tensor.hpp tensor/synthetic.hpp
  util/cpus.hpp util/error.hpp util/log.hpp util/memory_space.hpp util/mpi_env.hpp util/relabel.hpp
  util/rng.hpp util/stop_request.hpp util/timer.hpp)
tessera_install_headers(.
  comm/communicator.hpp comm/hierarchy.hpp comm/mpi_communicator.hpp
  kernels/backend.hpp kernels/cp_device.hpp kernels/factories.hpp kernels/ops/streamed.hpp
  kernels/sptc.hpp kernels/tuning.hpp
  partition/partition.hpp)

# The Slurm scripts. From an install: TESSERA_SLURM_DIR=<prefix>/share/tessera/slurm and
# TESSERA=<prefix>/bin/tessera (jobs/slurm/launch.sh).
install(PROGRAMS jobs/slurm/cp.sbatch jobs/slurm/resumable.sbatch jobs/slurm/launch.sh
  jobs/slurm/emulate-node.sh
  DESTINATION ${CMAKE_INSTALL_DATADIR}/tessera/slurm)

install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(FILES examples/compare_numpy.py examples/cp_basic.py examples/cp_distributed.py
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
