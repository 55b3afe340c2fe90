#!/usr/bin/env bash
# The main job on an embedded default: generate a rank-8 tensor with 1% noise and
# decompose it with CP-ALS on 2 MPI ranks, printing the fit per iteration.
#   jobs/demo.sh            (sets up and brings the `tessera` binary up to date first)
# Environment: TESSERA_BUILD (build folder, default build), TESSERA_WERROR (default ON),
# TESSERA_CMAKE_ARGS, TESSERA_JOBS, as jobs/test.sh.
#
# It builds only what it runs, the `tessera` binary (not the tests nor the Python module),
# in build/ configured exactly as jobs/test.sh configures it (generator, build type, cache
# flags: keep the cmake line below in step with jobs/setup.sh and the flags with
# jobs/test.sh), so that jobs/test.sh afterwards reconfigures nothing and reuses every
# object. With a CUDA toolkit and NCCL the binary includes the CUDA backend, as in the test
# build: building it costs minutes, but a CPU-only demo build would be a second build that
# jobs/test.sh could not reuse (README; the measured split is in the commit message).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD:-$here/build}
"$here/jobs/setup.sh" --packages  # installs what is missing
# As jobs/setup.sh: nvcc is often outside PATH; CMake finds it through CUDACXX.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
# The flags of jobs/test.sh (warnings are errors there: the same objects serve both).
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DTESSERA_WERROR=${TESSERA_WERROR:-ON}" ${TESSERA_CMAKE_ARGS:-}
cmake --build "$build" -j "${TESSERA_JOBS:-$(nproc)}" --target tessera
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # ranks may share cores
mpirun=(mpirun -np 2 --oversubscribe)
tns="$build/demo/lowrank-200x300x400.tns"
mkdir -p "$build/demo"
"${mpirun[@]}" "$build/drivers/tessera" generate --dims 200x300x400 --nnz 500000 --rank 8 \
  --noise 0.01 --seed 42 --out "$tns"
"${mpirun[@]}" "$build/drivers/tessera" cp "$tns" --rank 8 --iters 50 --tol 1e-6 \
  --out "$build/demo/model.h5" --json "$build/demo/run.json"
echo "model: $build/demo/model.h5   run record: $build/demo/run.json"
