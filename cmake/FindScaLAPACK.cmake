# FindScaLAPACK: Debian's libscalapack-openmpi-dev (or SCALAPACK_ROOT). Provides ScaLAPACK::scalapack.
find_library(ScaLAPACK_LIBRARY NAMES scalapack-openmpi scalapack
  HINTS ${SCALAPACK_ROOT} $ENV{SCALAPACK_ROOT} PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ScaLAPACK REQUIRED_VARS ScaLAPACK_LIBRARY)
if(ScaLAPACK_FOUND AND NOT TARGET ScaLAPACK::scalapack)
  add_library(ScaLAPACK::scalapack UNKNOWN IMPORTED)
  set_target_properties(ScaLAPACK::scalapack PROPERTIES IMPORTED_LOCATION "${ScaLAPACK_LIBRARY}")
endif()
