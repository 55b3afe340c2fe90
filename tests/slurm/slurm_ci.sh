#!/usr/bin/env bash
# CI test under a real Slurm (docs/studies.md, "Testing under Slurm"): installs Slurm and
# munge when missing (apt-get, as root or with sudo), starts munged, slurmctld and slurmd for
# a one-node cluster on this host from a slurm.conf in a temporary folder (tests/slurm/
# cluster.sh, shared with slurm_multinode.sh), and submits
#   1. jobs/slurm/cp.sbatch without GPUs (CP rank 8 on congress),
#   2. jobs/slurm/resumable.sbatch with a one-minute time limit (--time=1
#      --signal=B:USR1@26): Slurm itself signals the job before the limit, the job requeues
#      itself, resumes from its checkpoint and must end with the model of an uninterrupted
#      run. TESSERA_SLURM_REAL_TIMELIMIT=0 sends the USR1 from the test instead, once the
#      first checkpoint exists (quicker: no wait for Slurm's 30 s time-limit check),
#   3. a 2-point study (1 and 2 ranks) through jobs/study.py run --slurm,
# then checks the run records, results.csv and the PNGs, and always stops the daemons it
# started and removes its folder. Exit 77 (skipped) where Slurm cannot be installed or run.
# Environment: TESSERA_BIN (tessera binary), TESSERA_MODEL_COMPARE (tests/slurm/
# model_compare), TESSERA_SHARED_DATA (the real tensors); set by ctest (tests/slurm.cmake).
#   ctest -R slurm_ci --output-on-failure
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
say() { echo "slurm_ci: $*"; }
skip() { say "SKIPPED: $*"; exit 77; }
fail() { say "FAILED: $*"; exit 1; }
t0=$(date +%s)
tessera=${TESSERA_BIN:?set TESSERA_BIN to the tessera binary}
compare=${TESSERA_MODEL_COMPARE:?set TESSERA_MODEL_COMPARE to the model_compare binary}
data=${TESSERA_SHARED_DATA:-$repo/../shared/data}
tensor=$data/congress-cosponsor_leg-leg-year.tns.gz
[ -r "$tensor" ] || skip "no $tensor (set TESSERA_SHARED_DATA to the folder of the real tensors)"

# --- Slurm, munge and a one-node cluster (tests/slurm/cluster.sh) --------------------------
tmp_prefix="tessera-slurm-ci"
cluster_extra_packages=python3-matplotlib
# shellcheck source=tests/slurm/cluster.sh
source "$repo/tests/slurm/cluster.sh"
[ -n "$python" ] || fail "no python3 with matplotlib and tomllib (python3-matplotlib)"
cleanup() {
  for pid in ${study_pid:-} ${ref_pid:-}; do kill "$pid" 2>/dev/null; done
  cluster_stop
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mpis=$(srun --mpi=list 2>&1 | tr '\n' ' ')
say "cluster up after $(( $(date +%s) - t0 )) s: $node; srun --mpi=list: $mpis"

# --- jobs ------------------------------------------------------------------------------------
cd "$tmp/work" || fail "no $tmp/work"
export TESSERA=$tessera TESSERA_SLURM_DIR=$repo/jobs/slurm
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
restarts() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p'; }
wait_done() {  # JOB TIMEOUT_S: waits until the job is in a final state; prints it
  local end=$(( $(date +%s) + $2 )) s
  while :; do
    s=$(job_state "$1")
    case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)
      echo "$s"; return ;; esac
    [ "$(date +%s)" -lt "$end" ] || { echo "TIMEOUT_WAITING($s)"; return; }
    sleep 1
  done
}

# 1. cp.sbatch on CPUs only (no --gpus-per-node anywhere).
cp_job=$(sbatch --parsable --ntasks=1 --cpus-per-task=2 --time=5 \
  "$repo/jobs/slurm/cp.sbatch" "$tensor" 8 --iters 5 --backend cpu --seed 3) ||
  fail "sbatch refused cp.sbatch"
# ... and started by mpirun inside the allocation (no PMIx needed). Both with 2 threads.
cp2_job=$(TESSERA_LAUNCHER=mpirun sbatch --parsable --ntasks=1 --cpus-per-task=2 --time=5 \
  "$repo/jobs/slurm/cp.sbatch" "$tensor" 8 --iters 5 --backend cpu --seed 3) ||
  fail "sbatch refused cp.sbatch (mpirun)"
# 2. resumable.sbatch: many cheap iterations, a checkpoint every 20.
# Real time limit (default): slurmctld checks time limits every 30 s (PERIODIC_TIMEOUT, fixed
# at build time) and sends --signal=B:USR1@W at the first check at most W + 30 s before the
# end, so with --time=1 and W=26 the signal comes 4 to 34 s after the job starts. The run is
# sized from a short calibration run to take at least ~48 s (at the calibration's fastest
# iterations: 10th percentile), so the first run cannot finish before the signal; once a
# requeued run has resumed, its time limit is raised so that it ends without a second
# requeue (one more would be correct too, only slower). A requeued job may start again
# cred_expire + 1 s later, at the next scheduling pass (sched_interval=2).
real=${TESSERA_SLURM_REAL_TIMELIMIT:-1}
iters=600
if [ "$real" = 1 ]; then
  OMP_NUM_THREADS=1 "$tessera" cp "$tensor" --rank 8 --iters 100 --tol 0 --seed 5 \
    --backend cpu --json calib.json > calib.log 2>&1 || { cat calib.log; fail "calibration run"; }
  iters=$("$python" -c 'import json, math, sys
t = sorted(i["seconds"] for i in json.load(open(sys.argv[1]))["per_iteration"])
print(min(20000, max(600, math.ceil(48 / t[len(t) // 10]))))' calib.json) ||
    fail "no per-iteration times in calib.json"
  res_limit=(--time=1 --signal=B:USR1@26)
else
  res_limit=(--time=5)
fi
res_args=("$tensor" --rank 8 --iters "$iters" --tol 0 --seed 5 --backend cpu)
res_job=$(CHECKPOINT_EVERY=20 sbatch --parsable --ntasks=1 --cpus-per-task=1 "${res_limit[@]}" \
  "$repo/jobs/slurm/resumable.sbatch" cp res "${res_args[@]}") ||
  fail "sbatch refused resumable.sbatch"
say "submitted cp.sbatch as jobs $cp_job and $cp2_job (mpirun), resumable.sbatch as job $res_job"

# 3. the 2-point study, submitted at once (its jobs queue behind these two).
cat > study.toml <<EOF
name = "ci"
launcher = "auto"
wait_timeout = 240
[slurm]
time = "00:05:00"
[[inputs]]
name = "congress"
file = "$tensor"
[[commands]]
command = "cp"
input = "congress"
args = ["--iters", "4", "--tol", "0", "--backend", "cpu"]
[grid]
rank = [8]
[[resources]]
ranks = 1
[[resources]]
ranks = 2
EOF
STUDY_NO_REEXEC=1 "$python" "$repo/jobs/study.py" run study.toml --slurm --out study \
  > study.log 2>&1 &
study_pid=$!

# The uninterrupted reference run of the resumable job, here, beside the jobs.
OMP_NUM_THREADS=1 "$tessera" cp "${res_args[@]}" --out ref.h5 --json ref.json > ref.log 2>&1 &
ref_pid=$!

res_out=tessera-resumable-$res_job.out
if [ "$real" != 1 ]; then
  # Once the first checkpoint exists, send USR1 to the batch shell: what Slurm sends
  # --signal=B:USR1@120 before the time limit. The trap requeues the job.
  end=$(( $(date +%s) + 90 ))
  until [ -f res.ckpt.h5 ]; do
    [ "$(date +%s)" -lt "$end" ] || { tail -n 30 "$res_out"; fail "no checkpoint in 90 s"; }
    case $(job_state "$res_job") in COMPLETED|FAILED|CANCELLED)
      tail -n 30 "$res_out"; fail "resumable job ended before its first checkpoint" ;; esac
    sleep 0.2
  done
  scancel --batch --signal=USR1 "$res_job" || fail "scancel --signal=USR1 failed"
  say "checkpoint written; sent USR1 to job $res_job"
  end=$(( $(date +%s) + 60 ))
  until [ "$(restarts "$res_job")" = 1 ]; do
    [ "$(date +%s)" -lt "$end" ] || { tail -n 30 "$res_out"; fail "job was not requeued"; }
    sleep 0.5
  done
fi

st=$(wait_done "$cp_job" 120)
[ "$st" = COMPLETED ] || { cat tessera-cp-"$cp_job".out; fail "cp.sbatch job $cp_job: $st"; }
st=$(wait_done "$cp2_job" 120)
[ "$st" = COMPLETED ] || { cat tessera-cp-"$cp2_job".out; fail "cp.sbatch job $cp2_job: $st"; }
if [ "$real" = 1 ]; then
  # Nothing is sent from here: Slurm signals the job near its one-minute limit. Once a
  # requeued run has resumed from the checkpoint, give it time to finish.
  say "resumable job $res_job: $iters iterations, ${res_limit[*]}"
  end=$(( $(date +%s) + 240 ))
  raised=0
  while :; do
    s=$(job_state "$res_job")
    case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)
      break ;; esac
    if [ $raised = 0 ] && [ "$(restarts "$res_job")" -ge 1 ] 2>/dev/null &&
        grep -q "resuming res from res.ckpt.h5" "$res_out" 2>/dev/null; then
      scontrol update JobId="$res_job" TimeLimit=10 || fail "scontrol update TimeLimit failed"
      raised=1
      started=$(sed -n "s/: job $res_job on .*//p" "$res_out" | head -1)
      signalled=$(sed -n "s/: time limit near, requeueing job .*//p" "$res_out" | head -1)
      secs=$(( $(date -d "$signalled" +%s) - $(date -d "$started" +%s) ))
      say "Slurm signalled job $res_job $secs s after it started (limit 60 s); the requeued" \
        "run resumed; its time limit raised to 10 min"
    fi
    [ "$(date +%s)" -lt "$end" ] ||
      { tail -n 30 "$res_out"; fail "resumable job $res_job: $s after 240 s"; }
    sleep 0.5
  done
  st=$s
else
  st=$(wait_done "$res_job" 150)
fi
[ "$st" = COMPLETED ] || { tail -n 30 "$res_out"; fail "resumable job $res_job: $st"; }
res_restarts=$(restarts "$res_job")
wait $ref_pid || { cat ref.log; fail "the reference run failed"; }
wait $study_pid
study_rc=$?
say "jobs done after $(( $(date +%s) - t0 )) s"

# --- checks ---------------------------------------------------------------------------------
check_record() {  # FILE [RANKS [THREADS]]: a cp run record with a fit and per-iteration times
  "$python" - "$1" "${2:-1}" "${3:-1}" <<'PY' || fail "bad run record $1"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["command"] == "cp", j["command"]
assert j["machine"]["ranks"] == int(sys.argv[2]), j["machine"]
assert j["machine"]["threads_per_rank"] == int(sys.argv[3]), j["machine"]
if "slurm" in j["machine"]:  # the versioned record (docs/run-record.md) names the job
    assert j["machine"]["slurm"] and j["machine"]["slurm"].get("job_id"), j["machine"]
assert 0 < j["fit"] <= 1, j["fit"]
assert j.get("per_iteration") or j.get("timing"), "no per-iteration times"
PY
}
[ -s "cp-$cp_job.h5" ] || fail "cp.sbatch wrote no model cp-$cp_job.h5"
check_record "cp-$cp_job.json" 1 2
grep -q "launcher mpirun" tessera-cp-"$cp2_job".out || fail "job $cp2_job did not use mpirun"
check_record "cp-$cp2_job.json" 1 2
log=$(cat "$res_out")
# Every restart was the trap's requeue (>= 1), and a requeued run resumed from the checkpoint.
n=$(grep -c "requeueing job $res_job" <<<"$log")
if [ "$n" = 0 ] && [ "$real" = 1 ]; then
  grep -E "on $host:|done:" <<<"$log"
  fail "job $res_job ended before Slurm's time-limit signal ($iters iterations from the" \
    "calibration were too few: it ran faster than calib.json says)"
fi
[ "$n" -ge 1 ] && [ "$n" = "$res_restarts" ] || {
  grep -E "requeueing|resuming|CANCELLED|on $host:" <<<"$log"
  fail "$n requeue(s) by the trap, $res_restarts restart(s) by Slurm"
}
grep -q "resuming res from res.ckpt.h5 (restart [1-9]" <<<"$log" ||
  { grep -E "requeueing|resuming|CANCELLED|on $host:" <<<"$log"
    fail "the requeued job did not resume from the checkpoint"; }
say "resumable job $res_job: $res_restarts requeue(s), resumed from its checkpoint"
check_record "res-$res_job-$res_restarts.json"
"$python" - "res-$res_job-$res_restarts.json" "$iters" <<'PY' ||
  fail "the resumed run did not finish"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["iterations"] == int(sys.argv[2]), (j["iterations"], sys.argv[2])
PY
"$compare" res.h5 ref.h5 1e-9 || fail "the resumed model differs from the uninterrupted run"

[ "$study_rc" = 0 ] || { cat study.log; fail "study.py exited with $study_rc"; }
"$python" - study <<'PY' || { cat study.log; fail "study outputs"; }
import csv, glob, json, os, struct, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "results.csv"))))
assert len(rows) == 2, rows
assert sorted(int(r["ranks"]) for r in rows) == [1, 2], rows
for r in rows:
    assert r["status"] == "ok", r
    assert float(r["seconds_per_unit"]) > 0 and r["job_id"], r
    assert 0 < float(r["fit"]) <= 1 and float(r["peak_host_bytes_per_rank"]) > 0, r
    assert float(r["kernel_share"]) > 0, r
for r in rows:
    j = json.load(open(os.path.join(d, "points", r["point"], "record.json")))
    assert j["command"] == "cp" and j["machine"]["ranks"] == int(r["ranks"]), r
    if "slurm" in j["machine"]:
        assert str(j["machine"]["slurm"]["job_id"]) == r["job_id"], (j["machine"], r)
md = open(os.path.join(d, "results.md")).read()
assert md.count("| cp-congress") == 2, md
for png in ("time", "efficiency", "split", "memory"):
    p = os.path.join(d, png + ".png")
    b = open(p, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", p
    w, h = struct.unpack(">II", b[16:24])
    assert len(b) > 5000 and w >= 300 and h >= 200, (p, len(b), w, h)
    import matplotlib.image
    img = matplotlib.image.imread(p)
    assert img.std() > 0.01, f"{p} is blank"
print("study: 2 points, CSV, table and 4 PNGs checked")
PY
# A point the cluster cannot run (a GPU on a node without any): sbatch refuses it, the
# study lists it as failed with sbatch's message and exits 1.
sed -e 's/^name = "ci"/name = "ci-gpu"/' -e 's/^ranks = 2$/ranks = 1\ngpus_per_node = 1/' \
  study.toml > gpu.toml
STUDY_NO_REEXEC=1 "$python" "$repo/jobs/study.py" run gpu.toml --slurm --out gpu \
  > gpu.log 2> gpu.err
rc=$?
[ "$rc" = 1 ] || { cat gpu.log gpu.err; fail "a refused point gave exit $rc"; }
grep -q "sbatch refused" gpu.err && grep -q "1 of 2 point(s) failed" gpu.err &&
  grep -q "failed (no exit code, no valid record)" gpu/results.md ||
  { cat gpu.log gpu.err gpu/results.md; fail "the refused point is not reported"; }
say "passed in $(( $(date +%s) - t0 )) s"
