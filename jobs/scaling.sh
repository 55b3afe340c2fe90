#!/usr/bin/env bash
# Strong-scaling sweep: runs one tessera command at several rank counts and prints a
# table (seconds per iteration or per mode, speedup, efficiency, communication share).
#   jobs/scaling.sh "1 2 4 8" bench cp --generate 12092x9184x28818 --nnz 76.9e6 --rank 32 --backend cuda
# Uses srun inside a Slurm allocation, else mpirun. Results: scaling-<P>.json.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
counts=${1:?usage: jobs/scaling.sh "P1 P2 ..." tessera-args...}
shift
T=${TESSERA:-$here/build/drivers/tessera}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
for p in $counts; do
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    srun -n "$p" "$T" "$@" --json "scaling-$p.json"
  else
    mpirun -np "$p" --oversubscribe "$T" "$@" --json "scaling-$p.json"
  fi
done
python3 - $counts <<'PY'
import json, sys
rows = []
for p in sys.argv[1:]:
    j = json.load(open(f"scaling-{p}.json"))
    t = j.get("seconds_per_iteration", j.get("mean_seconds_per_mode"))
    comm = j.get("share", {}).get("comm", float("nan"))
    rows.append((int(p), t, comm))
base_p, base_t, _ = rows[0]
print(f"{'ranks':>6} {'seconds':>12} {'speedup':>9} {'efficiency':>11} {'comm share':>11}")
for p, t, c in rows:
    s = base_t / t
    print(f"{p:6d} {t:12.5f} {s:9.2f} {s * base_p / p:11.2%} {c:11.1%}")
PY
