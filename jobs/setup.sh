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
      # an optimised BLAS/LAPACK: Debian's alternatives make libblas.so.3 and liblapack.so.3
      # OpenBLAS (priority 95 over the reference's 10), so the build and every binary use it.
      # Its OpenMP build, not the pthread one libopenblas-dev pulls in: it runs on the OpenMP
      # threads Tessera sets per rank (--threads), so ranks x threads never oversubscribe a
      # node and a run's dense products are the same whichever front end started it
      libopenblas-openmp-dev
      # pip install . and virtual environments (docs/python.md)
      python3-pip python3-venv
      # the Python module and its tests (python/, tests/python, docs/python.md)
      python3-dev pybind11-dev python3-numpy python3-scipy python3-pytest python3-mpi4py
      python3-sparse python3-h5py
      # run records checked against docs/run-record.schema.json (tests/driver/run_record_test.py)
      python3-jsonschema
      # plots of jobs/study.py (docs/studies.md)
      python3-matplotlib
      ${extra[@]+"${extra[@]}"})
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do
  installed "$p" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  updated=1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc is often outside PATH; CMake finds it through CUDACXX.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# Where a CUDA toolkit is present, the CUDA backend also needs NCCL: jobs/setup-nccl.sh
# (installs it from apt where apt knows it, else says how; never fails set-up).
SUDO=$sudo UPDATED=$updated bash "$here/jobs/setup-nccl.sh"
[ "$packages_only" = 1 ] && exit 0

jobs=${TESSERA_JOBS:-$(nproc)}
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TESSERA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
