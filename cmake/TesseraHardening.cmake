# Hardening builds (docs/reliability.md, "Sanitizers and fuzzing"):
#   -DTESSERA_SANITIZE=address,undefined   compile and link every Tessera target (libraries,
#                                          the tessera binary, test binaries) with these
#                                          sanitizers; UB aborts (no recovery).
#   -DTESSERA_FUZZ=ON                      (clang only) libFuzzer harnesses in tests/fuzz;
#                                          every Tessera library and the harnesses get
#                                          libFuzzer's coverage instrumentation (the other
#                                          executables do not); implies address,undefined
#                                          when TESSERA_SANITIZE is empty.
# The flags go on Tessera's own targets through tessera_target_defaults (no directory-wide
# flags); system libraries (MPI, HDF5, GoogleTest) are not instrumented.
set(TESSERA_SANITIZE "" CACHE STRING
  "Sanitizers for every Tessera target, e.g. address,undefined (empty: none)")
option(TESSERA_FUZZ "Build the libFuzzer harnesses in tests/fuzz (clang only)" OFF)

if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
      "configure with -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "
      "(Debian: apt-get install clang libclang-rt-14-dev libomp-14-dev)")
  endif()
  if(TESSERA_SANITIZE STREQUAL "")
    set(TESSERA_SANITIZE "address,undefined" CACHE STRING
      "Sanitizers for every Tessera target, e.g. address,undefined (empty: none)" FORCE)
  endif()
endif()

set(TESSERA_SANITIZE_COMPILE_FLAGS "")
set(TESSERA_SANITIZE_LINK_FLAGS "")
if(NOT TESSERA_SANITIZE STREQUAL "")
  if(TESSERA_WITH_CUDA)
    message(FATAL_ERROR "TESSERA_SANITIZE is for CPU builds: configure with -DTESSERA_WITH_CUDA=OFF "
      "(GPU code is checked with compute-sanitizer instead)")
  endif()
  set(TESSERA_SANITIZE_COMPILE_FLAGS -fsanitize=${TESSERA_SANITIZE} -fno-omit-frame-pointer)
  if(TESSERA_SANITIZE MATCHES "undefined")
    list(APPEND TESSERA_SANITIZE_COMPILE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  set(TESSERA_SANITIZE_LINK_FLAGS -fsanitize=${TESSERA_SANITIZE})
endif()
# libFuzzer's coverage instrumentation goes on the libraries (what the harnesses link) and
# on the harnesses (tests/fuzz/CMakeLists.txt), not on the other executables: test binaries
# and the tessera binary are never fuzzed, and the instrumentation costs 20-33% of their
# compile time (docs/reliability.md, "CI time").
set(TESSERA_FUZZ_COVERAGE_FLAGS "")
if(TESSERA_FUZZ)
  set(TESSERA_FUZZ_COVERAGE_FLAGS -fsanitize=fuzzer-no-link)
endif()
# clang cannot vectorize an `omp simd` loop once the sanitizers instrument it and says so
# (-Wpass-failed=transform-warning, "loop not vectorized"), an error with TESSERA_WERROR. It
# is about the instrumentation, not the code: the same loops vectorize in builds without
# sanitizers (clang 14 at -O1, -O2 and -O3 gives no such warning), so it is off here only.
if(TESSERA_SANITIZE_COMPILE_FLAGS AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND TESSERA_SANITIZE_COMPILE_FLAGS -Wno-pass-failed)
endif()

# Runtime options the tests run with (cmake/TesseraTesting.cmake) and jobs/hardening.sh
# exports: leaks inside OpenMPI (PMIx, hwloc, libevent) and HDF5 are suppressed by library
# name in tests/sanitizers/lsan.supp (never a Tessera frame); src/base/util/sanitizer.hpp says how
# leaks are checked around MPI_Init and MPI_Finalize.
#
# intercept_tls_get_addr=0: up to LLVM 16 (Debian 12 has clang 14) the runtime's
# __tls_get_addr interceptor takes a dynamic TLS block whose address is 16 bytes past a page
# boundary for a glibc-2.19-style block with a header in front, and reads its start and size
# from the 16 bytes before it. No glibc since 2.25 has that header; a block of OpenMPI's
# (MPI_Init dlopens components with TLS) that ASan's allocator happens to place there gives
# the leak check a made-up range, and LeakSanitizer's tracer dies at exit on it ("Tracer
# caught signal 11", CI of 2026-11-28: kernels_mttkrp, after all its tests had passed). With
# the interceptor off, dynamic TLS blocks are heap blocks reached through the thread's DTV
# (static TLS, still scanned), so the same leaks are found: docs/reliability.md.
set(TESSERA_ASAN_OPTIONS
  "detect_leaks=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0")
set(TESSERA_LSAN_OPTIONS
  "suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp:print_suppressions=0")
set(TESSERA_UBSAN_OPTIONS "print_stacktrace=1:halt_on_error=1")

# tessera_hardening_flags(TARGET): called by tessera_target_defaults. Link flags are PUBLIC so
# every executable linking a sanitized library links the sanitizer runtime too.
function(tessera_hardening_flags target)
  if(TESSERA_SANITIZE_COMPILE_FLAGS)
    target_compile_options(${target} PRIVATE ${TESSERA_SANITIZE_COMPILE_FLAGS})
  endif()
  get_target_property(_type ${target} TYPE)
  if(TESSERA_FUZZ_COVERAGE_FLAGS AND NOT _type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE ${TESSERA_FUZZ_COVERAGE_FLAGS})
  endif()
  if(TESSERA_SANITIZE_LINK_FLAGS)
    target_link_options(${target} PUBLIC ${TESSERA_SANITIZE_LINK_FLAGS})
  endif()
endfunction()
