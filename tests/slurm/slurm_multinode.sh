#!/usr/bin/env bash
# 2-node CPU jobs under a real Slurm (docs/studies.md, "Testing under Slurm"): two slurmd on
# this host (tests/slurm/cluster.sh, CLUSTER_NODES=2: a port, spool folder and TmpFS each) and
# jobs/slurm/cp.sbatch submitted with --nodes=2 --ntasks-per-node=1, once under mpirun (Open
# MPI starts its daemon on the second node through srun) and, where srun offers PMIx, once
# under srun --mpi=pmix. Checks that rank 0 ran on node ci1 and rank 1 on ci2 (each rank
# writes SLURMD_NODENAME through a wrapper in place of tessera), that the job log shows the
# allocation and the launch line, and that the model and fit equal those of the same 2-rank
# run started here by mpirun, outside Slurm. Exit 77 (skipped) where Slurm cannot be
# installed or run. Environment: TESSERA_BIN, TESSERA_MODEL_COMPARE, TESSERA_SHARED_DATA
# (set by ctest, tests/slurm.cmake). KEEP_SLURM_CI=1 keeps the cluster's folder.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
say() { echo "slurm_multinode: $*"; }
skip() { say "SKIPPED: $*"; exit 77; }
fail() { say "FAILED: $*"; exit 1; }
t0=$(date +%s)
tessera=${TESSERA_BIN:?set TESSERA_BIN to the tessera binary}
compare=${TESSERA_MODEL_COMPARE:?set TESSERA_MODEL_COMPARE to the model_compare binary}
data=${TESSERA_SHARED_DATA:-$repo/../shared/data}
tensor=$data/congress-cosponsor_leg-leg-year.tns.gz
[ -r "$tensor" ] || skip "no $tensor (set TESSERA_SHARED_DATA to the folder of the real tensors)"

tmp_prefix="tessera-slurm-multinode"
CLUSTER_NODES=2
# shellcheck source=tests/slurm/cluster.sh
source "$repo/tests/slurm/cluster.sh"
trap 'kill ${ref_pid:-} 2>/dev/null; cluster_stop' EXIT
trap 'exit 1' INT TERM
say "2-node cluster (${cluster_nodes[*]}) up after $(( $(date +%s) - t0 )) s;" \
  "$(slurmd -V); $(scontrol show config | grep -o 'MULTIPLE_SLURMD *= *[A-Za-z]*' || echo 'no MULTIPLE_SLURMD')"

cd "$tmp/work" || fail "no $tmp/work"
# Each rank notes its node, then becomes tessera.
cat > tessera-on-node.sh <<EOF
#!/usr/bin/env bash
echo "rank \${OMPI_COMM_WORLD_RANK:-\${PMIX_RANK:-?}} node \${SLURMD_NODENAME:-?}" >> "\$RANKS_FILE"
exec "$tessera" "\$@"
EOF
chmod +x tessera-on-node.sh
args=(--iters 5 --tol 0 --backend cpu --seed 3)
# One job per launcher: mpirun (Open MPI starts its daemon on the second node through srun)
# and, where Slurm offers PMIx, srun --mpi=pmix (Slurm starts every rank).
launchers=(mpirun)
if srun --mpi=list 2>&1 | grep -qw pmix; then
  launchers+=(srun-pmix)
else
  say "no PMIx in srun --mpi=list: srun-pmix left out"
fi
jobs=()
for l in "${launchers[@]}"; do
  j=$(TESSERA="$tmp/work/tessera-on-node.sh" TESSERA_SLURM_DIR="$repo/jobs/slurm" \
    TESSERA_LAUNCHER=$l TESSERA_CPU_BIND=none RANKS_FILE="$tmp/work/ranks-$l.txt" \
    sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --time=5 \
    "$repo/jobs/slurm/cp.sbatch" "$tensor" 8 "${args[@]}") ||
    fail "sbatch refused the 2-node job ($l)"
  jobs+=("$j")
done
# The same 2 ranks here, outside Slurm, beside the jobs.
(OMP_NUM_THREADS=1 mpirun -np 2 --bind-to none "$tessera" cp "$tensor" \
  --rank 8 "${args[@]}" --out ref.h5 --json ref.json > ref.log 2>&1) &
ref_pid=$!
wait "$ref_pid" || { cat ref.log; fail "the reference run (mpirun -np 2) failed"; }
ref_pid=""
for i in "${!jobs[@]}"; do
  job=${jobs[$i]} l=${launchers[$i]}
  state=""
  end=$(( $(date +%s) + 120 ))
  while :; do
    state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
    [ "$(date +%s)" -lt "$end" ] || break
    sleep 0.5
  done
  out=tessera-cp-$job.out
  [ "$state" = COMPLETED ] || { cat "$out"; fail "2-node job $job ($l): ${state:-unknown}"; }
  case $l in
    mpirun) line="launch: mpirun -np 2 --map-by slot --bind-to none " ;;
    srun-pmix) line="launch: srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1 " ;;
  esac
  if ! grep -qF ": job $job on ci[1-2]: 2 node(s), 2 rank(s) x 1 thread(s), 0 GPU(s) per node, launcher $l" \
      "$out" || ! grep -q "^$line" "$out"; then
    cat "$out"
    fail "the log of job $job ($l) lacks the allocation or the launch line"
  fi
  [ "$(sort "ranks-$l.txt")" = "$(printf 'rank 0 node ci1\nrank 1 node ci2')" ] ||
    { cat "ranks-$l.txt" "$out"; fail "job $job ($l): the ranks did not land one on each node"; }
  python3 - "cp-$job.json" ref.json <<'PY' || fail "job $job ($l) differs from the 1-node run"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["machine"]["ranks"] == b["machine"]["ranks"] == 2, (a["machine"], b["machine"])
assert abs(a["fit"] - b["fit"]) <= 1e-12 * abs(b["fit"]), (a["fit"], b["fit"])
PY
  "$compare" "cp-$job.h5" ref.h5 1e-12 || fail "job $job ($l): the model differs from the 1-node run"
  say "job $job ($l): rank 0 on ci1, rank 1 on ci2; fit $(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["fit"])' "cp-$job.json") as on one node"
done
say "passed in $(( $(date +%s) - t0 )) s"
