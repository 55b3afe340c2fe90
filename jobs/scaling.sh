#!/usr/bin/env bash
# Strong-scaling sweep of one tessera command at several rank counts: a thin wrapper around
# jobs/study.py (docs/studies.md), which writes results.csv, results.md and PNG plots.
#   jobs/scaling.sh "1 2 4 8" bench cp --generate 12092x9184x28818 --nnz 76.9e6 --rank 32 --backend cuda
#   jobs/scaling.sh "1 2" cp congress.tns.gz --rank 16 --iters 20
# Runs here with mpirun -np P (OMP_NUM_THREADS=SCALING_THREADS, default 1; inside a Slurm
# allocation mpirun uses it). Environment: TESSERA (binary), SCALING_OUT (results folder,
# default scaling), SCALING_THREADS. For sweeps over nodes and GPUs, Slurm jobs, several
# commands or weak scaling, write a study file and run jobs/study.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage='usage: jobs/scaling.sh "P1 P2 ..." COMMAND [tessera options]   (COMMAND: cp, tucker, contract, bench KIND)'
counts=${1:?$usage}
cmd=${2:?$usage}
shift 2
if [ "$cmd" = bench ]; then
  cmd="bench ${1:?$usage}"
  shift
fi
out=${SCALING_OUT:-scaling}
mkdir -p "$out"
args=()
for a in "$@"; do  # points run in their own folders: files named relative to here get absolute
  if [ -e "$a" ] && [[ $a != /* ]]; then a=$(cd "$(dirname "$a")" && pwd)/$(basename "$a"); fi
  args+=("$a")
done
python3 - "$out/scaling-study.json" "$cmd" "$counts" "${SCALING_THREADS:-1}" "${args[@]}" <<'PY'
import json, sys
path, cmd, counts, threads, *args = sys.argv[1:]
json.dump({"name": "scaling", "scaling": "strong",
           "commands": [{"command": cmd, "args": args}],
           "resources": [{"ranks": int(p), "threads": int(threads)} for p in counts.split()]},
          open(path, "w"), indent=1)
PY
exec python3 "$here/study.py" run "$out/scaling-study.json" --local --out "$out"
