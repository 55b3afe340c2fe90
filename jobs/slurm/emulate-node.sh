#!/usr/bin/env bash
# One rank of an emulated multi-node run (TESSERA_EMULATE_NODES, jobs/slurm/launch.sh):
#   emulate-node.sh HOSTFILE COMMAND [ARGS...]
# reads this rank's emulated host from line RANK+1 of HOSTFILE (RANK from the launcher:
# OMPI_COMM_WORLD_RANK under mpirun, PMIX_RANK under srun --mpi=pmix, else SLURM_PROCID),
# sets NCCL_HOSTID (NCCL's host identity: ranks with different ones never use P2P or shared
# memory between them, only the network transport) and TESSERA_EMULATED_NODE to it, and
# runs COMMAND in its place.
set -euo pipefail
hostfile=${1:?usage: emulate-node.sh HOSTFILE COMMAND [ARGS...]}
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-}}}
[[ $rank =~ ^[0-9]+$ ]] || {
  echo "emulate-node.sh: no rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or SLURM_PROCID)" >&2
  exit 2
}
host=$(sed -n "$((rank + 1))p" "$hostfile")
[ -n "$host" ] || { echo "emulate-node.sh: rank $rank has no line in $hostfile" >&2; exit 2; }
export NCCL_HOSTID=$host TESSERA_EMULATED_NODE=$host
exec "$@"
