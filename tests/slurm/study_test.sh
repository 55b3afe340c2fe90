#!/usr/bin/env bash
# jobs/study.py and jobs/scaling.sh without Slurm (docs/studies.md): a small generated tensor
# through cp, tucker, contract and bench contract at 1 and 2 ranks (scaling.sh used to fail
# with a TypeError on every command but bench cp/mttkrp), --resume skipping finished points,
# and a failing point listed with its exit code and log, with a non-zero exit status.
# Environment: TESSERA_BIN (set by ctest, tests/slurm.cmake).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export TESSERA=${TESSERA_BIN:?set TESSERA_BIN to the tessera binary} STUDY_NO_REEXEC=1
fail() { echo "study_test: FAILED: $*"; exit 1; }
tmp=$(mktemp -d /tmp/tessera-study-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
OMP_NUM_THREADS=1 "$TESSERA" -q generate --dims 40x30x20 --nnz 3000 --rank 3 --seed 1 \
  --out small.tns

# The issue's case: scaling.sh with cp (a relative file name) at 1 and 2 ranks.
SCALING_OUT=sc jobs=1 "$repo/jobs/scaling.sh" "1 2" cp small.tns --rank 4 --iters 3 > sc.log 2>&1 ||
  { cat sc.log; fail "scaling.sh cp"; }
cat > study.toml <<'TOML'
name = "t"
[[inputs]]
name = "small"
file = "small.tns"
[[inputs]]
name = "gen"
generate = { dims = "30x20x10", nnz = 2000, rank = 2, seed = 2 }
[[commands]]
command = "tucker"
input = "gen"
args = ["--ranks", "3", "--iters", "2"]
[[commands]]
command = "contract"
inputs = ["small", "small"]
args = ["--einsum", "ijk,ljk->il"]
[[commands]]
command = "bench contract"
args = ["--generate", "--nnz", "500"]
[[resources]]
ranks = 1
[[resources]]
ranks = 2
TOML
python3 "$repo/jobs/study.py" run study.toml --local --out st > st.log 2>&1 || { cat st.log; fail "study"; }
python3 - <<'PY' || { cat sc.log st.log; fail "results"; }
import csv
for d, n, cmds in (("sc", 2, {"cp"}), ("st", 6, {"tucker", "contract", "bench contract"})):
    rows = list(csv.DictReader(open(f"{d}/results.csv")))
    assert len(rows) == n and {r["command"] for r in rows} == cmds, rows
    for r in rows:
        assert r["status"] == "ok" and float(r["seconds_per_unit"]) > 0, r
        assert float(r["efficiency"]) > 0 and r["exit_code"] == "0", r
        assert r["ranks"] in ("1", "2") and r["threads"] == "1", r
    assert {float(r["speedup"]) for r in rows if r["ranks"] == "1"} == {1.0}, rows
md = open("st/results.md").read()
assert md.count("| tucker-gen") == 2 and "s/iteration" in md, md
PY
# --resume: every point has a valid record, nothing runs again.
python3 "$repo/jobs/study.py" run study.toml --local --out st --resume > re.log 2>&1 ||
  { cat re.log; fail "resume"; }
[ "$(grep -c 'skipped (--resume)' re.log)" = 6 ] || { cat re.log; fail "--resume ran points"; }
grep -q "mpirun" re.log && { cat re.log; fail "--resume ran points"; }
# A failing point: listed in the table and on stderr with its exit code and log; exit 1.
cat > bad.toml <<'TOML'
[[inputs]]
name = "small"
file = "small.tns"
[[commands]]
command = "cp"
input = "small"
args = ["--iters", "0"]
[[resources]]
ranks = 1
TOML
set +e
python3 "$repo/jobs/study.py" run bad.toml --local --out bad > bad.log 2> bad.err
rc=$?
set -e
[ "$rc" = 1 ] || { cat bad.log bad.err; fail "a failed point gave exit $rc"; }
grep -q "failed (exit [1-9]" bad/results.md || { cat bad/results.md; fail "table"; }
grep -q "iters" bad.err || { cat bad.err; fail "stderr lacks the log tail"; }
grep -q "1 of 1 point(s) failed" bad.err || { cat bad.err; fail "no failure count"; }
echo "study_test: passed"
