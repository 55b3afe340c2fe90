# Per-target warnings and host tuning; no directory-wide flags.
#
# Every Tessera target compiles with -Wall -Wextra (host C++) and nvcc -Xcompiler -Wall (the
# host side of .cu files). -DTESSERA_WERROR=ON makes every warning an error: -Werror for C++,
# -Werror all-warnings for nvcc (its own warnings and the host compiler's). CI turns it on
# (jobs/test.sh, jobs/hardening.sh, jobs/gpu-node.sh; docs/reliability.md, "What CI
# enforces"); it is off by default so a newer compiler with new warnings never breaks a
# user's build.
#
# Third-party headers never fail the build: they come through imported targets (MPI::MPI_CXX,
# hdf5::hdf5, CUDA::cudart, NCCL::nccl, GTest::gtest, CLI11::CLI11, nlohmann_json, pybind11),
# whose include directories CMake passes as -isystem, and nvcc's own include directory (CUDA,
# CCCL: Thrust, CUB, libcu++) is a system directory of the host compiler.
option(TESSERA_WERROR
  "Treat warnings as errors (CI: ON; default OFF so a newer compiler does not break a build)" OFF)

function(tessera_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
  if(TESSERA_WERROR)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>)
  endif()
  # A unity build (-DCMAKE_UNITY_BUILD=ON, as CI builds: docs/reliability.md, "CI time")
  # compiles several .cpp files as one, and GCC then takes a class of one file with a member
  # of another file's anonymous-namespace type for a header's (-Wsubobject-linkage).
  if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  tessera_hardening_flags(${target})  # TESSERA_SANITIZE / TESSERA_FUZZ (TesseraHardening.cmake)
endfunction()
