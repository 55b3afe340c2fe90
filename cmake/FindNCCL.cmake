# FindNCCL: locates nccl.h and libnccl (system package or CUDA toolkit tree).
# Provides NCCL::nccl, NCCL_VERSION. Hints: NCCL_ROOT (variable or environment), NCCL_HOME,
# the CUDA toolkit's folders, NCCL_EXTRA_HINTS (the top CMakeLists: beside nvcc). A cached
# NCCL_INCLUDE_DIR or NCCL_LIBRARY that does not hold NCCL counts as not found.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_EXTRA_HINTS}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR} ${NCCL_EXTRA_HINTS}
  PATH_SUFFIXES lib lib64)
set(NCCL_VERSION "")
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_major REGEX "^#define NCCL_MAJOR")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_minor REGEX "^#define NCCL_MINOR")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_patch REGEX "^#define NCCL_PATCH")
  string(REGEX REPLACE "[^0-9]" "" _nccl_major "${_nccl_major}")
  string(REGEX REPLACE "[^0-9]" "" _nccl_minor "${_nccl_minor}")
  string(REGEX REPLACE "[^0-9]" "" _nccl_patch "${_nccl_patch}")
  set(NCCL_VERSION "${_nccl_major}.${_nccl_minor}.${_nccl_patch}")
endif()
include(FindPackageHandleStandardArgs)
# A cached path that holds no NCCL (-DNCCL_INCLUDE_DIR=/elsewhere) is not found: shadowed
# by a NOTFOUND value for the check only; the cache keeps what was given.
if(NCCL_INCLUDE_DIR AND NOT EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  set(NCCL_INCLUDE_DIR "NCCL_INCLUDE_DIR-NOTFOUND")
endif()
if(NCCL_LIBRARY AND NOT EXISTS "${NCCL_LIBRARY}")
  set(NCCL_LIBRARY "NCCL_LIBRARY-NOTFOUND")
endif()
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
unset(NCCL_INCLUDE_DIR)
unset(NCCL_LIBRARY)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
