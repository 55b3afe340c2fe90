# shellcheck shell=bash
# Sourced by tests/slurm/slurm_ci.sh and slurm_multinode.sh (docs/studies.md, "Testing under
# Slurm"): installs Slurm and munge when missing (apt-get, as root or with sudo) and starts a
# Slurm cluster of CLUSTER_NODES nodes (default 1) on this host from a slurm.conf in a
# temporary folder: munged on a private socket, slurmctld, and one slurmd per node. Two or
# more nodes are several slurmd on this host, each with its own port, spool folder and TmpFS
# (`slurmd -N NODE`; Debian 12's Slurm 22.05 runs them), all with this host's CPUs and memory.
# The caller defines say, skip (exit 77) and fail, and sets tmp_prefix and, optionally,
# CLUSTER_NODES and cluster_extra_packages; it gets tmp (the folder, with work/ in it), host,
# node (slurmd -C's line), cluster_nodes (the node names), python (a python3 with matplotlib
# and tomllib when cluster_extra_packages has python3-matplotlib) and SLURM_CONF, and calls
# cluster_stop on exit (scancel, then the daemons; removes tmp unless KEEP_SLURM_CI=1).

# --- Slurm and munge ----------------------------------------------------------------------
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo -n"
need=()
for p in slurmctld slurmd slurm-client munge ${cluster_extra_packages:-}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || skip "missing ${need[*]} and no apt-get to install them"
  if [ -n "$sudo" ] && ! sudo -n true 2>/dev/null; then
    skip "missing ${need[*]}; installing needs root or passwordless sudo"
  fi
  say "installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq \
      "${need[@]}" >/dev/null; }; then
    skip "apt-get could not install ${need[*]}"
  fi
fi
for c in slurmctld slurmd sbatch squeue scontrol munged; do
  command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || skip "$c not found after installing"
done
export PATH=$PATH:/usr/sbin
[ "$(id -u)" -eq 0 ] || skip "the daemons of the test cluster run as root (SlurmUser=root)"
python=""  # for the caller (shellcheck: SC2034)
for py in python3 /usr/bin/python3; do
  # shellcheck disable=SC2034  # the caller uses it
  if "$py" -c "import matplotlib, tomllib" 2>/dev/null; then python=$py; break; fi
done

# --- the cluster in a temporary folder -----------------------------------------------------
tmp=$(mktemp -d "/tmp/${tmp_prefix:?}.XXXXXX")
chmod 755 "$tmp"
pids=()
cluster_stop() {
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --user="$(id -un)" 2>/dev/null
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.3; done
    kill -9 "$pid" 2>/dev/null
  done
  if [ "${KEEP_SLURM_CI:-0}" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cluster_stop EXIT  # the caller's own trap, set later, calls cluster_stop too
trap 'exit 1' INT TERM
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/work"
chmod 700 "$tmp/munge"
head -c 1024 /dev/urandom > "$tmp/munge/munge.key"
chmod 400 "$tmp/munge/munge.key"
munged --force --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/seed" \
  --log-file="$tmp/log/munged.log" || fail "munged did not start ($(cat "$tmp/log/munged.log"))"
for _ in $(seq 50); do [ -s "$tmp/munge/munged.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$tmp/munge/munged.pid")")

host=$(hostname -s)
node=$(slurmd -C 2>/dev/null | head -1)  # NodeName=... CPUs=... RealMemory=...
cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node")
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
[ -n "$cpus" ] && [ -n "$mem" ] || fail "slurmd -C did not describe this node: $node"
base=$((20000 + RANDOM % 20000))
n_nodes=${CLUSTER_NODES:-1}
if [ "$n_nodes" = 1 ]; then
  cluster_nodes=("$host")
  node_lines="SlurmdPort=$((base + 1))
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  spool=$tmp/spool
else  # several slurmd here: a port each, %n (the node name) in their own files' paths
  cluster_nodes=()
  node_lines=""
  for ((i = 1; i <= n_nodes; i++)); do
    cluster_nodes+=("ci$i")
    node_lines+="NodeName=ci$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + i))"
    node_lines+=" CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
    mkdir -p "$tmp/spool/ci$i" "$tmp/tmpfs/ci$i"
  done
  spool=$tmp/spool/%n
fi
cat > "$tmp/slurm.conf" <<EOF
ClusterName=tessera-ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$base
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock,cred_expire=10
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$spool
TmpFS=$tmp/tmpfs/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
ReturnToService=2
JobRequeue=1
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
MessageTimeout=10
PlugStackConfig=$tmp/plugstack.conf
$node_lines
PartitionName=ci Nodes=$(IFS=,; echo "${cluster_nodes[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
: > "$tmp/plugstack.conf"
mkdir -p "$tmp/tmpfs/$host"
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
if [ "$n_nodes" = 1 ]; then
  slurmd -D -f "$SLURM_CONF" > "$tmp/log/slurmd.out" 2>&1 &
  pids+=($!)
else
  for n in "${cluster_nodes[@]}"; do
    slurmd -D -N "$n" -f "$SLURM_CONF" > "$tmp/log/slurmd-$n.out" 2>&1 &
    pids+=($!)
  done
fi
up=0
for _ in $(seq 60); do
  if [ "$(sinfo -h -N -o %T 2>/dev/null | grep -cx idle)" = "$n_nodes" ]; then up=1; break; fi
  sleep 0.5
done
if [ $up = 0 ]; then
  tail -n 20 "$tmp/log/slurmctld.log" "$tmp/log/slurmd"*.log "$tmp/log/"*.out 2>/dev/null
  fail "the $n_nodes-node cluster did not come up within 30 s"
fi
