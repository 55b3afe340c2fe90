"""Launching points: the tessera binary, local mpirun runs, Slurm job scripts,
submission and waiting.
(jobs/study.py, docs/studies.md)"""

import os
import shlex
import shutil
import subprocess
import time

from .spec import HERE, REPO, StudyError, slug, warn

# --------------------------------------------------------------------------------------------
# Launching


def tessera_binary(s):
    t = os.environ.get("TESSERA") or s.get("tessera") or os.path.join("build", "drivers",
                                                                      "tessera")
    t = os.path.expandvars(t)
    if not os.path.isabs(t):
        t = os.path.join(REPO, t)
    if not os.access(t, os.X_OK):
        raise StudyError(f"tessera binary {t} not found or not executable: build it "
                         "(jobs/setup.sh) or set TESSERA=/path/to/tessera or tessera = \"...\" "
                         "in the study file")
    return t


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def local_env(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NCCL_NVLS_ENABLE="0")
    if os.geteuid() == 0:  # OpenMPI refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def local_launch(r):
    """mpirun line for a point on this machine; says when it oversubscribes."""
    if r["nodes"] > 1:
        raise StudyError(f"resources nodes = {r['nodes']}: a local run has one node; use --slurm")
    P, T, cores = r["ranks"], r["threads"], usable_cpus()
    cmd = ["mpirun", "-np", str(P)]
    if P > cores:
        warn(f"{P} ranks on {cores} usable cores: adding --oversubscribe (timings are not "
             "meaningful)")
        cmd += ["--oversubscribe", "--bind-to", "none"]
    elif P * T > cores:
        warn(f"{P} ranks x {T} threads = {P * T} threads on {cores} usable cores: "
             "oversubscribed, binding off (timings are not meaningful)")
        cmd += ["--bind-to", "none"]
    elif T > 1:
        cmd += ["--map-by", f"slot:PE={T}", "--bind-to", "core"]
    return cmd


def slurm_script(s, p, tessera, argv, pdir):
    r = p["resources"]
    sl = s["slurm"]
    lines = ["#!/bin/bash", f"#SBATCH --job-name={slug('study-' + s['name'])}",
             f"#SBATCH --nodes={r['nodes']}", f"#SBATCH --ntasks-per-node={r['ranks_per_node']}",
             f"#SBATCH --cpus-per-task={r['threads']}"]
    if r["gpus_per_node"] > 0:
        lines.append(f"#SBATCH --gpus-per-node={r['gpus_per_node']}")
    # The study file's [slurm] keys, else STUDY_PARTITION / STUDY_ACCOUNT / STUDY_TIME;
    # sbatch itself lets SBATCH_PARTITION / SBATCH_ACCOUNT / SBATCH_TIMELIMIT override them.
    for key in ("partition", "account", "time"):
        v = sl.get(key) or os.environ.get(f"STUDY_{key.upper()}")
        if key == "time" and not v:
            v = "00:30:00"
        if v:
            lines.append(f"#SBATCH --{key}={v}")
    for x in sl.get("extra", []):
        lines.append(f"#SBATCH {x}")
    launcher = s["launcher"]
    bind = s.get("bind", "cores")
    # jobs/slurm/launch.sh: OMP_NUM_THREADS from --cpus-per-task, the launcher (srun
    # --mpi=pmix when offered, else mpirun inside the allocation), binding, root settings.
    lines += [f"#SBATCH --output={os.path.join(pdir, 'log.txt')}",
              f"#SBATCH --chdir={pdir}", "set -u",
              f"export TESSERA={shlex.quote(tessera)} TESSERA_LAUNCHER={launcher} "
              f"TESSERA_CPU_BIND={shlex.quote(bind)}",
              f"source {shlex.quote(os.path.join(HERE, 'slurm', 'launch.sh'))}"]
    lines += ['echo "study: point ' + p["id"] + ': ${launch[*]}"',
              '"${launch[@]}" "$tessera" ' + " ".join(shlex.quote(x) for x in argv),
              "rc=$?", 'echo "$rc" > rc', "exit $rc"]
    return "\n".join(lines) + "\n"


def run_point_local(s, p, tessera, argv, pdir, dry):
    launch = local_launch(p["resources"]) + [tessera] + argv
    log_path = os.path.join(pdir, "log.txt")
    print(f"study: {p['id']}: OMP_NUM_THREADS={p['resources']['threads']} {shlex.join(launch)}",
          flush=True)
    if dry:
        return
    with open(log_path, "w") as log:
        rc = subprocess.call(launch, cwd=pdir, env=local_env(p["resources"]["threads"]),
                             stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(pdir, "rc"), "w") as f:
        f.write(f"{rc}\n")


def slurm_answers():
    """True where the Slurm client is installed and a controller answers (sinfo)."""
    if not shutil.which("sbatch"):
        return False
    try:
        return subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True,
                              timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def sbatch(script_path):
    out = subprocess.run(["sbatch", "--parsable", script_path], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip() or out.stdout.strip()
    return out.stdout.strip().split(";")[0], None


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}


def wait_jobs(jobs, timeout):
    """Polls squeue until every job has ended (left the queue or in a final state) or the
    timeout passes; returns ({job: last state seen}, ids still queued or running)."""
    deadline = time.time() + timeout
    pending, states = set(jobs), {}
    while pending:
        out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(sorted(pending))],
                             capture_output=True, text=True)
        alive = set()
        if out.returncode == 0:
            for line in out.stdout.splitlines():
                f = line.split()
                if len(f) == 2 and f[0] in pending:
                    states[f[0]] = f[1]
                    if f[1] not in TERMINAL:
                        alive.add(f[0])
        elif "Invalid job id" not in out.stderr:
            warn(f"squeue failed: {out.stderr.strip()}")
            alive = pending
        pending = alive
        if not pending:
            break
        if time.time() > deadline:
            return states, pending
        time.sleep(2)
    return states, set()


def sacct_state(job):
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j", job],
                         capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip().splitlines()[0].replace("|", " exit ")
    return None
