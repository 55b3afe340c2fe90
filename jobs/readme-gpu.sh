#!/usr/bin/env bash
# The README's GPU and cluster commands, run as written on a GPU node (issue 42): the
# fenced bash lines of "Run on GPUs" and "Run on a cluster" and the Python example of
# "From Python" are read from README.md itself, so what runs is what a user copies.
#
#   jobs/readme-gpu.sh          # from the repository root of a checkout on the GPU node
#
# X.tns and X.h5, the README's placeholders, are made first: X.tns is congress (from
# TESSERA_DATA, ../shared/data or .deps/data), X.h5 its store (`tessera convert`, once the
# README's own build has made the binary). Lines that cannot run here as written, and what
# runs instead (each said in the table):
#   - `mpirun -np N` with N above the node's GPUs runs as written (Tessera must refuse it in
#     one line), then again with N = the node's GPUs;
#   - `srun` needs a Slurm allocation: not run where there is none;
#   - `sbatch ... SCRIPT ARGS`: where no Slurm is present, SCRIPT runs with the variables
#     Slurm would set for that request on this node (SLURM_NTASKS = the GPUs asked for on one
#     node, at most the node's; SLURM_CPUS_PER_TASK; SLURM_JOB_ID), launched by mpirun
#     (TESSERA_LAUNCHER=mpirun): the batch script's body, not the scheduler. The scheduler
#     side runs in CI under a real Slurm on CPUs (tests/slurm/slurm_ci.sh).
# Carried packages: jobs/node-env.sh. Results and logs: $OUT (default build/readme-gpu);
# a table last. Exit status: the number of lines that did not end as expected.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${OUT:-$here/build/readme-gpu}
mkdir -p "$out"
# shellcheck source=jobs/node-env.sh
source "$here/jobs/node-env.sh"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
ncpu=$(nproc)
table=$out/readme-gpu.txt
: >"$table"
bad=0
n=0
note() { printf '%-3s %-6s %8s  %s\n      %s\n' "$1" "$2" "$3" "$4" "$5" >>"$table"; }

data=
for d in ${TESSERA_DATA:-} ../shared/data .deps/data; do
  [ -f "$d/congress-cosponsor_leg-leg-year.tns.gz" ] && { data=$(cd "$d" && pwd); break; }
done
[ -n "$data" ] || { echo "readme-gpu: congress not found (TESSERA_DATA, ../shared/data, .deps/data)"; exit 1; }
[ -f X.tns ] || gzip -dc "$data/congress-cosponsor_leg-leg-year.tns.gz" >X.tns

# The README's lines: fenced bash blocks of the two sections, comments and blanks left out.
python3 - README.md "$out/lines.txt" "$out/example.py" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def section(title):
    a = text.index("\n## " + title + "\n")
    b = text.find("\n## ", a + 1)
    return text[a:b if b > 0 else len(text)]
lines = []
for title in ("Run on GPUs", "Run on a cluster"):
    for block in re.findall(r"```bash\n(.*?)```", section(title), re.S):
        lines += [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
py = re.findall(r"```python\n(.*?)```", section("From Python"), re.S)
open(sys.argv[3], "w").write(py[0] if py else "")
PY

run_line() {  # what the README says, what runs, expectation (ok|refuse)
  local shown=$1 cmd=$2 expect=${3:-ok} t0 rc secs log
  n=$((n + 1))
  log=$out/line-$n.log
  t0=$(date +%s.%N)
  bash -c "$cmd" >"$log" 2>&1 </dev/null  # mpirun reads stdin: keep it off the list of lines
  rc=$?
  secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  local status="rc $rc"
  if [ "$expect" = refuse ]; then
    if [ $rc -ne 0 ] && grep -q "would share one GPU" "$log"; then status="refused"; else status="WRONG"; bad=$((bad + 1)); fi
  elif [ $rc -ne 0 ]; then
    bad=$((bad + 1))
  fi
  local last
  last=$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-150)
  note "$n" "$status" "${secs}s" "$shown" "${cmd:+ran: ${cmd:0:150}}  | ${last}"
  echo "[readme-gpu $(date +%H:%M:%S)] $n $status ${secs}s: $cmd"
}

while IFS= read -r line; do
  first=$(echo "$line" | awk '{print $1}')
  if grep -q "X.h5" <<<"$line" && [ ! -f X.h5 ] && [ -x build/drivers/tessera ]; then
    build/drivers/tessera convert X.tns X.h5 >"$out/convert.log" 2>&1 || echo "convert failed: $out/convert.log"
  fi
  case $first in
    mpirun)
      np=$(sed -nE 's/.*-np ([0-9]+).*/\1/p' <<<"$line")
      if [ -n "$np" ] && [ "$np" -gt "$ngpu" ] && grep -q -- "--backend cuda" <<<"$line"; then
        run_line "$line" "$line" refuse
        run_line "$line" "${line/-np $np/-np $ngpu}"
      else
        run_line "$line" "$line"
      fi
      ;;
    srun)
      if command -v srun >/dev/null && [ -n "${SLURM_JOB_ID:-}" ]; then run_line "$line" "$line"; else
        n=$((n + 1)); note "$n" "not run" "-" "$line" "no Slurm allocation on this node"; fi
      ;;
    sbatch)
      if command -v sbatch >/dev/null; then run_line "$line" "$line"; continue; fi
      # The batch script's body with the variables Slurm would set for this request here.
      read -r -a w <<<"${line%%#*}"
      tasks=1 cpt=1 gpus=0 i=1
      while [ $i -lt ${#w[@]} ] && [[ ${w[$i]} == --* ]]; do
        case ${w[$i]} in
          --ntasks=*) tasks=${w[$i]#*=} ;;
          --ntasks-per-node=*) tasks=${w[$i]#*=} ;;
          --cpus-per-task=*) cpt=${w[$i]#*=} ;;
          --gpus-per-node=*) gpus=${w[$i]#*=} ;;
          --gpus-per-task=*) gpus=$tasks ;;
        esac
        i=$((i + 1))
      done
      if [ "$gpus" -gt 0 ]; then tasks=$((gpus < ngpu ? gpus : ngpu)); gpus=$tasks; fi
      [ $((tasks * cpt)) -le "$ncpu" ] || cpt=$((ncpu / tasks))
      rest="${w[*]:$i}"
      env_=(SLURM_JOB_ID=$((900 + n)) SLURM_NTASKS=$tasks SLURM_CPUS_PER_TASK=$cpt SLURM_GPUS_ON_NODE=$gpus
        SLURM_SUBMIT_DIR=$here SLURM_JOB_NODELIST=$(hostname) TESSERA_LAUNCHER=mpirun)
      run_line "$line" "env ${env_[*]} bash $rest"
      ;;
    *) run_line "$line" "$line" ;;
  esac
done <"$out/lines.txt"

# The Python example, as the README says to run it, then the build's capabilities.
run_line "From Python: PYTHONPATH=build/python python3 script.py" \
  "PYTHONPATH=build/python python3 $out/example.py"
run_line "python -m tessera" "PYTHONPATH=build/python python3 -m tessera"

echo
echo "==== README commands on $(nvidia-smi -L | head -1 | cut -c1-40), $ngpu GPU(s), $ncpu CPUs ===="
cat "$table"
echo "lines not as expected: $bad"
exit "$bad"
