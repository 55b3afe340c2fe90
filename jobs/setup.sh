#!/usr/bin/env bash
# Installs what Tessera needs (Debian packages) when missing, then configures and builds.
#   jobs/setup.sh [BUILD_DIR]        (default: build)
#   jobs/setup.sh --packages [PKG...] only installs what is missing (these packages too)
# Environment: TESSERA_CMAKE_ARGS (extra cmake arguments), TESSERA_JOBS (build jobs).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
packages_only=0
extra=()
if [ "${1:-}" = "--packages" ]; then
  packages_only=1
  shift
  extra=("$@")
  set --
fi
build=${1:-$here/build}

pkgs=(cmake ninja-build g++ pkg-config openmpi-bin libopenmpi-dev libhdf5-dev zlib1g-dev
      liblapack-dev libblas-dev libscalapack-openmpi-dev libcli11-dev nlohmann-json3-dev
      libgtest-dev
      # the Python module and its tests (python/, tests/python, docs/python.md)
      python3-dev pybind11-dev python3-numpy python3-scipy python3-pytest python3-mpi4py
      python3-sparse python3-h5py
      # run records checked against docs/run-record.schema.json (tests/driver/run_record_test.py)
      python3-jsonschema
      # plots of jobs/study.py (docs/studies.md)
      python3-matplotlib
      ${extra[@]+"${extra[@]}"})
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ "$packages_only" = 1 ] && exit 0

# nvcc is often outside PATH; CMake finds it through CUDACXX.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

jobs=${TESSERA_JOBS:-$(nproc)}
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TESSERA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
