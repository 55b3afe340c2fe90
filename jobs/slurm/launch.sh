# shellcheck shell=bash
# Sourced by jobs/slurm/*.sbatch (bash): threads, the tessera binary and the MPI launcher for
# the allocation the job got. Settings (environment; docs/studies.md, "Slurm scripts"):
#   TESSERA           binary (default build/drivers/tessera under $SLURM_SUBMIT_DIR)
#   TESSERA_LAUNCHER  auto (default) | srun-pmix | srun | mpirun
#                     auto: `srun --mpi=pmix` when `srun --mpi=list` offers pmix, else mpirun
#                     inside the allocation (Open MPI reads the allocation from Slurm)
#   TESSERA_CPU_BIND  core binding: cores (default) | none
# Sets OMP_NUM_THREADS from --cpus-per-task and the array `launch` (prefix of the command).
submit_dir=${SLURM_SUBMIT_DIR:-$PWD}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared nodes
if [ "$(id -u)" = 0 ]; then  # Open MPI refuses root without these (containers, CI)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tessera=${TESSERA:-build/drivers/tessera}
case $tessera in /*) ;; *) tessera=$submit_dir/$tessera ;; esac
if [ ! -x "$tessera" ]; then
  echo "tessera binary $tessera not found: submit from the repository root after building," \
    "or set TESSERA=/path/to/tessera (sbatch --export=ALL,TESSERA=...)" >&2
  exit 2
fi
launcher=${TESSERA_LAUNCHER:-auto}
if [ "$launcher" = auto ]; then
  if srun --mpi=list 2>&1 | grep -qw pmix; then launcher=srun-pmix; else launcher=mpirun; fi
fi
bind=${TESSERA_CPU_BIND:-cores}
# srun gets --cpus-per-task again: Slurm 22.05 to 23.02 do not pass the job's value on to
# srun, which then gives each rank one CPU.
srun_opts=(--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")
[ "$bind" = none ] || srun_opts+=(--cpu-bind="$bind")
case $launcher in
  srun-pmix) launch=(srun --mpi=pmix "${srun_opts[@]}") ;;
  srun) launch=(srun "${srun_opts[@]}") ;;  # the site's MpiDefault must suit the MPI library
  mpirun)
    # mpirun passes SIGTERM (a time limit, scancel, a requeue) to the ranks and SIGKILLs
    # them this many seconds later (OpenMPI's default: 1): time for tessera cp/tucker to
    # finish the iteration and write the model and checkpoint, under Slurm's KillWait (30 s
    # by default). docs/reliability.md, "Stopping a run".
    export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-25}
    launch=(mpirun -np "${SLURM_NTASKS:-1}")
    if [ "$bind" = none ]; then
      launch+=(--bind-to none)
    else
      launch+=(--map-by "slot:PE=${SLURM_CPUS_PER_TASK:-1}" --bind-to core)
    fi ;;
  *)
    echo "TESSERA_LAUNCHER=$launcher: use srun-pmix, srun, mpirun or auto" >&2
    exit 2 ;;
esac
echo "$(date): job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-1} rank(s) x" \
  "$OMP_NUM_THREADS thread(s), ${SLURM_GPUS_ON_NODE:-0} GPU(s) per node, launcher $launcher"
