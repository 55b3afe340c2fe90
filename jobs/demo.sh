#!/usr/bin/env bash
# The main job on an embedded default: generate a rank-8 tensor with 1% noise and
# decompose it with CP-ALS on 2 MPI ranks, printing the fit per iteration.
#   jobs/demo.sh            (sets up and brings the build up to date first)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${TESSERA_BUILD:-$here/build}
"$here/jobs/setup.sh" "$build"  # installs what is missing; incremental build
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
