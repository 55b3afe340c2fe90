#!/usr/bin/env bash
# jobs/slurm/launch.sh without Slurm (docs/studies.md, "Multi-node GPU jobs"): the launch
# lines cp.sbatch and resumable.sbatch print under TESSERA_DRY_RUN=1 for given allocations
# (SLURM_* variables as Slurm sets them in a batch job: 1 node x 1 task, 2 x 4 GPUs, 4 x 8
# GPUs, under srun-pmix, srun and mpirun), the NCCL settings passed on, the errors for
# allocations that do not run one rank per GPU, and the node emulation
# (TESSERA_EMULATE_NODES): its hostfile and, run for real under mpirun with a probe in place
# of tessera, the NCCL_HOSTID every rank gets; then a real CPU run through the emulation.
# A second or two. Environment: TESSERA_BIN (set by ctest, tests/slurm.cmake; without it the
# real run is left out).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
say() { echo "launch_test: $*"; }
fail() { say "FAILED: $*"; exit 1; }
tmp=$(mktemp -d /tmp/tessera-launch-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "no $tmp"
mkdir sub

# job SCRIPT RC VAR=VALUE...: runs jobs/slurm/SCRIPT in a clean environment (only PATH and
# the given variables) as Slurm would start it, submitted from $tmp/sub; the output goes to
# $out. Fails unless the exit code is RC.
job() {
  local script=$1 want=$2 args
  shift 2
  case $script in
    cp.sbatch) args=(t.tns 8 --iters 5) ;;
    resumable.sbatch) args=(cp run1 t.tns --rank 8) ;;
  esac
  out=$(cd sub && env -i PATH="$PATH" HOME="$tmp" TESSERA_SLURM_DIR="$repo/jobs/slurm" TESSERA=/opt/tessera/bin/tessera \
    SLURM_SUBMIT_DIR="$tmp/sub" TESSERA_DRY_RUN=1 "$@" bash "$repo/jobs/slurm/$script" "${args[@]}" 2>&1)
  local rc=$?
  [ "$rc" = "$want" ] || { echo "$out"; fail "$script with $*: exit $rc, expected $want"; }
}
expect() {  # LINE: $out has this exact line
  grep -qxF -- "$1" <<<"$out" || { echo "$out"; fail "no line: $1"; }
}
expect_in() {  # TEXT: $out contains it
  grep -qF -- "$1" <<<"$out" || { echo "$out"; fail "no '$1' in the output"; }
}
bin=/opt/tessera/bin/tessera
cp_tail="$bin cp t.tns --rank 8 --out cp-11.h5 --json cp-11.json --iters 5"
alloc() {  # JOBID NODES TASKS_PER_NODE GPUS CPUS: the variables of `sbatch --nodes=NODES
  # --ntasks-per-node=TASKS_PER_NODE [--gpus-per-node=GPUS] --cpus-per-task=CPUS`
  local v=(SLURM_JOB_ID="$1" SLURM_JOB_NUM_NODES="$2" SLURM_NNODES="$2"
    SLURM_NTASKS=$(($2 * $3)) SLURM_NTASKS_PER_NODE="$3" SLURM_CPUS_PER_TASK="$5"
    SLURM_JOB_NODELIST="n[1-$2]")
  if [ "$2" = 1 ]; then v+=(SLURM_TASKS_PER_NODE="$3"); else v+=(SLURM_TASKS_PER_NODE="$3(x$2)"); fi
  [ "$4" = 0 ] || v+=(SLURM_GPUS_ON_NODE="$4" SLURM_GPUS_PER_NODE="$4")
  echo "${v[@]}"
}

# --- 1 node x 1 task, CPUs only: unchanged from the one-node scripts --------------------------
# shellcheck disable=SC2046  # alloc's words are VAR=VALUE without spaces
job cp.sbatch 0 $(alloc 11 1 1 0 2) TESSERA_LAUNCHER=srun-pmix
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=2 --cpu-bind=cores $cp_tail"
expect "NCCL: NCCL_NVLS_ENABLE=0"
expect "dry run (TESSERA_DRY_RUN=1): nothing started"
expect_in ": job 11 on n[1-1]: 1 node(s), 1 rank(s) x 2 thread(s), 0 GPU(s) per node, launcher srun-pmix"
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 1 1 0 2) TESSERA_LAUNCHER=mpirun
expect "launch: mpirun -np 1 --map-by slot:PE=2 --bind-to core -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE $cp_tail"
# What jobs/readme-gpu.sh sets for `sbatch --ntasks=4 --gpus-per-task=1` where no Slurm is.
job resumable.sbatch 0 SLURM_JOB_ID=11 SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=2 SLURM_GPUS_ON_NODE=4 \
  TESSERA_LAUNCHER=mpirun
expect "launch: mpirun -np 4 --map-by ppr:4:node:PE=2 --bind-to core -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE $bin cp t.tns --out run1.h5 --checkpoint run1.ckpt.h5 --checkpoint-every 5 --json run1-11-0.json --rank 8"
# 1 node x 1 GPU.
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 1 1 1 4) TESSERA_LAUNCHER=srun-pmix
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=1 --cpus-per-task=4 --cpu-bind=cores $cp_tail"
expect "GPUs: one rank per GPU, 1 rank(s) per node, binding local-rank"

# --- 2 nodes x 4 GPUs: srun, srun with a GPU per task, mpirun; NCCL from the environment -----
nccl=("NCCL_SOCKET_IFNAME=ib0,ib1" NCCL_IB_HCA=mlx5_0:1 NCCL_IB_DISABLE=0 NCCL_NET_GDR_LEVEL=PHB
  NCCL_DEBUG=INFO)
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 2 4 4 16) TESSERA_LAUNCHER=srun-pmix "${nccl[@]}"
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=4 --cpus-per-task=16 --cpu-bind=cores $cp_tail"
expect "NCCL: NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=ib0,ib1 NCCL_IB_HCA=mlx5_0:1 NCCL_IB_DISABLE=0 NCCL_NET_GDR_LEVEL=PHB NCCL_DEBUG=INFO"
expect_in ": 2 node(s), 8 rank(s) x 16 thread(s), 4 GPU(s) per node, launcher srun-pmix"
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 2 4 4 16) TESSERA_LAUNCHER=srun TESSERA_GPU_BIND=task TESSERA_CPU_BIND=none
expect "launch: srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --cpus-per-task=16 $cp_tail"
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 2 4 4 16) TESSERA_LAUNCHER=mpirun "${nccl[@]}"
expect "launch: mpirun -np 8 --map-by ppr:4:node:PE=16 --bind-to core -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME -x NCCL_IB_HCA -x NCCL_IB_DISABLE -x NCCL_NET_GDR_LEVEL -x NCCL_DEBUG $cp_tail"
# Slurm's typed GPU count (--gpus-per-node=h100:4) and resumable.sbatch.
# shellcheck disable=SC2046
job resumable.sbatch 0 $(alloc 11 2 4 4 16) SLURM_GPUS_PER_NODE=h100:4 TESSERA_LAUNCHER=srun-pmix
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=4 --cpus-per-task=16 --cpu-bind=cores $bin cp t.tns --out run1.h5 --checkpoint run1.ckpt.h5 --checkpoint-every 5 --json run1-11-0.json --rank 8"

# --- 4 nodes x 8 GPUs -----------------------------------------------------------------------
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 4 8 8 8) TESSERA_LAUNCHER=srun-pmix
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --nodes=4 --ntasks-per-node=8 --cpus-per-task=8 --cpu-bind=cores $cp_tail"
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 4 8 8 8) TESSERA_LAUNCHER=mpirun
expect "launch: mpirun -np 32 --map-by ppr:8:node:PE=8 --bind-to core -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE $cp_tail"
# 2 nodes x 2 CPU-only tasks (the slurm_multinode test's job).
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 2 2 0 1) TESSERA_LAUNCHER=mpirun TESSERA_CPU_BIND=none
expect "launch: mpirun -np 4 --map-by slot --bind-to none -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE $cp_tail"

# --- allocations that do not run one rank per GPU ---------------------------------------------
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 2 1 4 16) TESSERA_LAUNCHER=srun-pmix  # --ntasks-per-node forgotten
expect "launch.sh: the allocation has 2 node(s) x 4 GPU(s) but 2 task(s) (SLURM_TASKS_PER_NODE=1(x2)): Tessera runs one rank per GPU; submit with --nodes=2 --ntasks-per-node=4 --gpus-per-node=4 (or without GPUs for a CPU run)"
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 2 8 4 4) TESSERA_LAUNCHER=mpirun  # 8 tasks on 4 GPUs per node
expect_in "but 16 task(s)"
# --ntasks=7 over 2 nodes of 4 GPUs: 4 and 3 tasks.
job cp.sbatch 2 SLURM_JOB_ID=11 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=7 \
  SLURM_TASKS_PER_NODE=4,3 SLURM_GPUS_ON_NODE=4 TESSERA_LAUNCHER=srun-pmix
expect_in "but 7 task(s) (SLURM_TASKS_PER_NODE=4,3)"
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 2 4 4 4) SLURM_GPUS_PER_NODE=gpu:2 TESSERA_LAUNCHER=srun-pmix
expect "launch.sh: the allocation disagrees with itself: SLURM_GPUS_ON_NODE=4, SLURM_GPUS_PER_NODE=gpu:2"
job cp.sbatch 2 SLURM_JOB_ID=11 SLURM_JOB_NUM_NODES=2 "SLURM_TASKS_PER_NODE=2(x" \
  TESSERA_LAUNCHER=mpirun
expect "launch.sh: tasks per node '2(x' (SLURM_TASKS_PER_NODE): expected N or N(xM),..."
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 1 1 0 1) TESSERA_LAUNCHER=pbs
expect "launch.sh: TESSERA_LAUNCHER=pbs: use srun-pmix, srun, mpirun or auto"
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 1 1 0 1) TESSERA_DRY_RUN=0  # the binary must exist for a real run
expect_in "tessera binary $bin not found"

# --- node emulation: 1 node x 4 GPUs as 2 x 2 ---------------------------------------------------
hosts="$tmp/sub/tessera-emulated-11.hosts"
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 1 4 4 2) TESSERA_LAUNCHER=mpirun TESSERA_EMULATE_NODES=2
expect "launch: mpirun -np 4 --map-by ppr:4:node:PE=2 --bind-to core -x OMP_NUM_THREADS -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE $repo/jobs/slurm/emulate-node.sh $hosts $cp_tail"
expect "NCCL: NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1"
expect "emulated: 2 nodes x 2 GPU(s) on this node, transport hostid, hostfile $hosts: 2 x emu0-11, 2 x emu1-11"
[ ! -e "$hosts" ] || fail "a dry run wrote $hosts"
# The user's interface wins over loopback; transport net turns P2P and SHM off.
# shellcheck disable=SC2046
job cp.sbatch 0 $(alloc 11 1 8 8 2) TESSERA_LAUNCHER=srun-pmix TESSERA_EMULATE_NODES=4 \
  TESSERA_EMULATE_TRANSPORT=net NCCL_SOCKET_IFNAME=eth0
expect "NCCL: NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"
expect_in "emulated: 4 nodes x 2 GPU(s) on this node, transport net"
expect "launch: srun --mpi=pmix --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=8 --cpus-per-task=2 --cpu-bind=cores $repo/jobs/slurm/emulate-node.sh $hosts $cp_tail"
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 2 4 4 2) TESSERA_LAUNCHER=mpirun TESSERA_EMULATE_NODES=2
expect "launch.sh: TESSERA_EMULATE_NODES=2 emulates nodes on one node; this allocation has 2 nodes (submit with --nodes=1)"
# shellcheck disable=SC2046
job cp.sbatch 2 $(alloc 11 1 4 4 2) TESSERA_LAUNCHER=mpirun TESSERA_EMULATE_NODES=3
expect "launch.sh: TESSERA_EMULATE_NODES=3 does not divide the node's 4 GPU(s)"
say "dry runs checked"

# --- the emulation run for real on CPUs: 4 ranks as 2 nodes, a probe in place of tessera -----
# Outside Slurm (TESSERA_RANKS); mpirun may place 4 ranks on fewer cores here.
cat > probe.sh <<'EOF'
#!/usr/bin/env bash
echo "probe rank $OMPI_COMM_WORLD_RANK host $NCCL_HOSTID node $TESSERA_EMULATED_NODE if $NCCL_SOCKET_IFNAME threads $OMP_NUM_THREADS"
EOF
chmod +x probe.sh
out=$(cd sub && env -i PATH="$PATH" HOME="$tmp" TESSERA_SLURM_DIR="$repo/jobs/slurm" TESSERA="$tmp/probe.sh" TESSERA_RANKS=4 \
  TESSERA_EMULATE_NODES=2 TESSERA_LAUNCHER=mpirun TESSERA_CPU_BIND=none \
  OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1 bash "$repo/jobs/slurm/cp.sbatch" t.tns 2>&1) ||
  { echo "$out"; fail "the emulated probe run"; }
host=$(sed -n 's/.*hostfile [^ ]*tessera-emulated-\([0-9]*\)\.hosts:.*/\1/p' <<<"$out")
[ -n "$host" ] || { echo "$out"; fail "no hostfile named"; }
for r in 0 1 2 3; do
  expect "probe rank $r host emu$((r / 2))-$host node emu$((r / 2))-$host if lo threads 1"
done
[ "$(cat "sub/tessera-emulated-$host.hosts")" = "$(printf 'emu%s-%s\n' 0 "$host" 0 "$host" \
  1 "$host" 1 "$host")" ] || fail "hostfile: $(cat "sub/tessera-emulated-$host.hosts")"
say "emulated run: ranks 0-1 on emu0, 2-3 on emu1"

# --- a real CPU run through the emulation: 2 ranks as 2 nodes ---------------------------------
if [ -n "${TESSERA_BIN:-}" ]; then
  "$TESSERA_BIN" -q generate --dims 30x20x10 --nnz 1500 --rank 3 --seed 1 --out sub/t.tns \
    > gen.log 2>&1 || { cat gen.log; fail "tessera generate"; }
  out=$(cd sub && env -i PATH="$PATH" HOME="$tmp" TESSERA_SLURM_DIR="$repo/jobs/slurm" TESSERA="$TESSERA_BIN" TESSERA_RANKS=2 \
    TESSERA_EMULATE_NODES=2 TESSERA_LAUNCHER=mpirun TESSERA_CPU_BIND=none \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_rmaps_base_oversubscribe=1 bash "$repo/jobs/slurm/cp.sbatch" t.tns 3 \
    --iters 3 --backend cpu 2>&1) || { echo "$out"; fail "the emulated tessera run"; }
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["machine"]["ranks"] == 2 and 0 < j["fit"] <= 1, j["machine"]' sub/cp-0.json ||
    { echo "$out"; fail "the emulated run's record"; }
  say "emulated tessera run: 2 ranks, fit $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fit"])' sub/cp-0.json)"
fi
say "passed"
