#!/usr/bin/env bash
# Builds (installing packages when missing) and runs the whole test suite with ctest.
# GPU tests (label gpu) skip with a message where no GPU is present.
#   jobs/test.sh [ctest args...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD:-$here/build}
"$here/jobs/setup.sh" "$build"
cd "$build"
ctest --output-on-failure --timeout 1200 "$@"
