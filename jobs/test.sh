#!/usr/bin/env bash
# Builds (installing packages when missing) and runs the whole test suite with ctest, one
# test per CPU at a time (ctest -j; an MPI test counts its ranks, tests/*.cmake).
# GPU tests (label gpu) skip with a message where no GPU is present. It configures build/
# with the flags of jobs/demo.sh, so after the demo it builds only what the demo left out.
#   jobs/test.sh [ctest args...]
# Environment: TESSERA_BUILD (build folder, default build), TESSERA_WERROR (default ON),
# TESSERA_TEST_JOBS (ctest -j, default nproc), and those of jobs/setup.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD:-$here/build}
# Warnings are errors here (CI runs this script; docs/reliability.md, "What CI enforces");
# TESSERA_WERROR=OFF turns that off, e.g. with a compiler newer than CI's GCC 12.
TESSERA_CMAKE_ARGS="-DTESSERA_WERROR=${TESSERA_WERROR:-ON} ${TESSERA_CMAKE_ARGS:-}" \
  "$here/jobs/setup.sh" "$build"
cd "$build"
ctest --output-on-failure --timeout 1200 -j "${TESSERA_TEST_JOBS:-$(nproc)}" "$@"
