# shellcheck shell=bash
# Sourced by jobs/slurm/*.sbatch (bash): threads, the tessera binary and the MPI launcher for
# the allocation the job got, on one node or many. Settings (environment; docs/studies.md,
# "Slurm scripts" and "Multi-node GPU jobs"):
#   TESSERA           binary (default build/drivers/tessera under $SLURM_SUBMIT_DIR)
#   TESSERA_LAUNCHER  auto (default) | srun-pmix | srun | mpirun
#                     auto: `srun --mpi=pmix` when `srun --mpi=list` offers pmix, else mpirun
#                     inside the allocation (Open MPI reads the allocation from Slurm)
#   TESSERA_CPU_BIND  core binding: cores (default) | none
#   TESSERA_GPU_BIND  GPU jobs under srun: local-rank (default: every rank sees its node's
#                     GPUs and takes the one of its local rank) | task (srun --gpus-per-task=1:
#                     Slurm gives each rank one GPU)
#   NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_IB_HCA NCCL_IB_DISABLE NCCL_NET_GDR_LEVEL
#   NCCL_DEBUG NCCL_DEBUG_SUBSYS   passed on to every rank when set (mpirun: -x), printed
#   TESSERA_EMULATE_NODES  N: run this one node's ranks as N nodes (NCCL_HOSTID per group, so
#                     NCCL uses its network transport between groups; socket over loopback
#                     unless NCCL_SOCKET_IFNAME/NCCL_IB_DISABLE say otherwise)
#   TESSERA_EMULATE_TRANSPORT  hostid (default) | net (also NCCL_P2P_DISABLE=1 and
#                     NCCL_SHM_DISABLE=1: every pair of ranks over the network)
#   TESSERA_DRY_RUN   1: print the launch line and the settings, then end the job (exit 0)
#                     without starting anything; the binary need not exist
#   Outside a Slurm job (no SLURM_JOB_ID): TESSERA_GPUS (GPUs of this host, default 0) and
#   TESSERA_RANKS (default: the GPUs, else 1) stand for the allocation.
# GPU jobs (GPUs per node > 0) run one rank per GPU: the tasks per node must equal the GPUs
# per node on every node, else the job stops here saying what to submit instead.
# Sets OMP_NUM_THREADS from --cpus-per-task, the array `launch` (prefix of the command) and
# the function `announce` (prints the whole launch line; ends a dry run).
submit_dir=${SLURM_SUBMIT_DIR:-$PWD}
slurm_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dry=${TESSERA_DRY_RUN:-0}
launch_error() {
  echo "launch.sh: $*" >&2
  exit 2
}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared nodes
if [ "$(id -u)" = 0 ]; then  # Open MPI refuses root without these (containers, CI)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tessera=${TESSERA:-build/drivers/tessera}
case $tessera in /*) ;; *) tessera=$submit_dir/$tessera ;; esac
if [ ! -x "$tessera" ] && [ "$dry" != 1 ]; then
  echo "tessera binary $tessera not found: submit from the repository root after building," \
    "or set TESSERA=/path/to/tessera (sbatch --export=ALL,TESSERA=...)" >&2
  exit 2
fi

# --- the allocation: nodes, tasks per node, GPUs per node --------------------------------
# "4(x2),3" (SLURM_TASKS_PER_NODE) -> "4 4 3"; fails on anything else.
expand_counts() {
  local part n r i out=()
  local -a parts
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ $part =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
      n=${BASH_REMATCH[1]} r=${BASH_REMATCH[2]}
    elif [[ $part =~ ^[0-9]+$ ]]; then
      n=$part r=1
    else
      return 1
    fi
    for ((i = 0; i < r; i++)); do out+=("$n"); done
  done
  echo "${out[*]}"
}
if [ -n "${SLURM_JOB_ID:-}" ]; then
  nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
  gpus=${SLURM_GPUS_ON_NODE:-}
  if [ -n "${SLURM_GPUS_PER_NODE:-}" ]; then  # 4, gpu:4, h100:4 or gpu:h100:4
    per_node=${SLURM_GPUS_PER_NODE##*:}
    [[ $per_node =~ ^[0-9]+$ ]] ||
      launch_error "SLURM_GPUS_PER_NODE=$SLURM_GPUS_PER_NODE: expected a count (4 or TYPE:4)"
    [ -z "$gpus" ] || [ "$gpus" = "$per_node" ] ||
      launch_error "the allocation disagrees with itself: SLURM_GPUS_ON_NODE=$gpus," \
        "SLURM_GPUS_PER_NODE=$SLURM_GPUS_PER_NODE"
    gpus=$per_node
  fi
  gpus=${gpus:-0}
  ntasks=${SLURM_NTASKS:-${SLURM_NPROCS:-}}
  tasks_given=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-}}
  # Slurm always sets SLURM_TASKS_PER_NODE; an environment made by hand (jobs/readme-gpu.sh)
  # may give only SLURM_NTASKS.
  [ -n "$tasks_given" ] || [ -z "$ntasks" ] || tasks_given=$((ntasks / nodes))
else  # outside Slurm: this host, TESSERA_GPUS GPUs, TESSERA_RANKS ranks
  nodes=1
  gpus=${TESSERA_GPUS:-0}
  ntasks=${TESSERA_RANKS:-$((gpus > 0 ? gpus : 1))}
  tasks_given=$ntasks
fi
[[ $nodes =~ ^[1-9][0-9]*$ ]] || launch_error "node count '$nodes' (SLURM_JOB_NUM_NODES)"
[[ $gpus =~ ^[0-9]+$ ]] || launch_error "GPUs per node '$gpus' (SLURM_GPUS_ON_NODE)"
tasks_list=$(expand_counts "${tasks_given:-1}") ||
  launch_error "tasks per node '$tasks_given' (SLURM_TASKS_PER_NODE): expected N or N(xM),..."
read -ra tasks_per <<<"$tasks_list"
ntasks=${ntasks:-$((tasks_per[0] * nodes))}
tasks_uniform=${tasks_per[0]}
for t in "${tasks_per[@]}"; do
  [ "$t" = "$tasks_uniform" ] || tasks_uniform=""
done
cpt=${SLURM_CPUS_PER_TASK:-1}

emulate=${TESSERA_EMULATE_NODES:-1}
[[ $emulate =~ ^[1-9][0-9]*$ ]] ||
  launch_error "TESSERA_EMULATE_NODES=$emulate: expected a node count (2, 4, ...)"
if [ "$emulate" -gt 1 ]; then
  [ "$nodes" = 1 ] || launch_error "TESSERA_EMULATE_NODES=$emulate emulates nodes on one" \
    "node; this allocation has $nodes nodes (submit with --nodes=1)"
  units=$((gpus > 0 ? gpus : ntasks))  # GPUs, or on CPUs the ranks, to share out
  if [ $((units % emulate)) != 0 ] || [ "$units" -lt "$emulate" ]; then
    launch_error "TESSERA_EMULATE_NODES=$emulate does not divide the node's" \
      "$units $([ "$gpus" -gt 0 ] && echo GPU || echo rank)(s)"
  fi
fi

if [ "$gpus" -gt 0 ]; then  # one rank per GPU on every node
  if [ -z "$tasks_uniform" ] || [ "$tasks_uniform" != "$gpus" ] ||
      [ "$ntasks" != $((nodes * gpus)) ]; then
    launch_error "the allocation has $nodes node(s) x $gpus GPU(s) but" \
      "$ntasks task(s) (SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-?}): Tessera runs one" \
      "rank per GPU; submit with --nodes=$nodes --ntasks-per-node=$gpus" \
      "--gpus-per-node=$gpus (or without GPUs for a CPU run)"
  fi
fi

# --- NCCL's settings: the user's, and those of the emulation ------------------------------
nccl_vars=(NCCL_NVLS_ENABLE NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_IB_HCA NCCL_IB_DISABLE
  NCCL_NET_GDR_LEVEL NCCL_DEBUG NCCL_DEBUG_SUBSYS)
emulate_prefix=()
if [ "$emulate" -gt 1 ]; then
  # Socket transport over loopback between the emulated nodes unless the user chose.
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
  case ${TESSERA_EMULATE_TRANSPORT:-hostid} in
    hostid) ;;
    net) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
      nccl_vars+=(NCCL_P2P_DISABLE NCCL_SHM_DISABLE) ;;
    *) launch_error "TESSERA_EMULATE_TRANSPORT=$TESSERA_EMULATE_TRANSPORT: use hostid or net" ;;
  esac
  per=$((units / emulate))
  # The hostfile: line r is the emulated host of rank r; emulate-node.sh reads it per rank
  # and sets NCCL_HOSTID (and TESSERA_EMULATED_NODE) to it before it starts tessera.
  hostfile=${TESSERA_EMULATE_HOSTFILE:-$submit_dir/tessera-emulated-${SLURM_JOB_ID:-$$}.hosts}
  emulated_hosts=$(for ((r = 0; r < ntasks; r++)); do
    echo "emu$((r / per))-${SLURM_JOB_ID:-$$}"
  done)
  [ "$dry" = 1 ] || printf '%s\n' "$emulated_hosts" > "$hostfile"
  emulate_prefix=("$slurm_dir/emulate-node.sh" "$hostfile")
fi
nccl_set=()
for v in "${nccl_vars[@]}"; do
  [ -n "${!v:-}" ] && export "${v?}" && nccl_set+=("$v=${!v}")
done

# --- the launcher -----------------------------------------------------------------------
launcher=${TESSERA_LAUNCHER:-auto}
if [ "$launcher" = auto ]; then
  if srun --mpi=list 2>&1 | grep -qw pmix; then launcher=srun-pmix; else launcher=mpirun; fi
fi
bind=${TESSERA_CPU_BIND:-cores}
gpu_bind=${TESSERA_GPU_BIND:-local-rank}
case $gpu_bind in local-rank|task) ;; *)
  launch_error "TESSERA_GPU_BIND=$gpu_bind: use local-rank or task" ;; esac
# srun gets --cpus-per-task again: Slurm 22.05 to 23.02 do not pass the job's value on to
# srun, which then gives each rank one CPU.
# A rank that ends with an error (or is killed) ends the whole step (docs/reliability.md,
# "Faults on several ranks"): no rank of another node is left waiting in a collective.
srun_opts=(--kill-on-bad-exit=1)
if [ "$gpus" -gt 0 ]; then
  srun_opts+=(--nodes="$nodes" --ntasks-per-node="$gpus")
  [ "$gpu_bind" = local-rank ] || srun_opts+=(--gpus-per-task=1)
fi
srun_opts+=(--cpus-per-task="$cpt")
[ "$bind" = none ] || srun_opts+=(--cpu-bind="$bind")
case $launcher in
  srun-pmix) launch=(srun --mpi=pmix "${srun_opts[@]}") ;;
  srun) launch=(srun "${srun_opts[@]}") ;;  # the site's MpiDefault must suit the MPI library
  mpirun)
    # mpirun passes SIGTERM (a time limit, scancel, a requeue) on to the ranks this many
    # seconds after it gets it and SIGKILLs them as long again (OpenMPI 4.1.4, measured;
    # OpenMPI's default: 1), and stops reading their output meanwhile, so a rank that prints
    # every iteration can block and be killed without its model: prefer srun (the tasks get
    # the signal at once). docs/reliability.md, "Stopping a run".
    export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-25}
    launch=(mpirun -np "$ntasks")
    map=slot
    [ "$gpus" -gt 0 ] && map=ppr:$gpus:node
    if [ "$bind" = none ]; then
      launch+=(--map-by "$map" --bind-to none)
    else
      launch+=(--map-by "$map:PE=$cpt" --bind-to core)
    fi
    # Ranks on other nodes get these from mpirun, whatever their daemons' environment.
    for v in OMP_NUM_THREADS "${nccl_vars[@]}"; do
      [ -n "${!v:-}" ] && launch+=(-x "$v")
    done ;;
  *) launch_error "TESSERA_LAUNCHER=$launcher: use srun-pmix, srun, mpirun or auto" ;;
esac
[ "$gpus" -gt 0 ] && [ "$launcher" = mpirun ] && [ "$gpu_bind" = task ] &&
  echo "launch.sh: TESSERA_GPU_BIND=task is for srun; under mpirun each rank takes the GPU" \
    "of its local rank" >&2
launch+=(${emulate_prefix[@]+"${emulate_prefix[@]}"})

echo "$(date): job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-$(hostname -s)}: $nodes node(s)," \
  "$ntasks rank(s) x $OMP_NUM_THREADS thread(s), $gpus GPU(s) per node, launcher $launcher"
[ "$gpus" -gt 0 ] && echo "GPUs: one rank per GPU, $gpus rank(s) per node, binding $gpu_bind"
echo "NCCL: ${nccl_set[*]}"
if [ "$emulate" -gt 1 ]; then
  echo "emulated: $emulate nodes x $per $([ "$gpus" -gt 0 ] && echo GPU || echo rank)(s) on" \
    "this node, transport ${TESSERA_EMULATE_TRANSPORT:-hostid}, hostfile $hostfile:" \
    "$(echo "$emulated_hosts" | uniq -c | awk '{printf "%s%s x %s", s, $1, $2; s=", "}')"
fi

# Prints the launch line of the command "$@" (the tessera call) into the job log; under
# TESSERA_DRY_RUN=1 ends the job there (exit 0).
announce() {
  local line
  printf -v line '%q ' "${launch[@]}" "$@"
  echo "launch: ${line% }"
  if [ "$dry" = 1 ]; then
    echo "dry run (TESSERA_DRY_RUN=1): nothing started"
    exit 0
  fi
}
