#!/usr/bin/env python3
"""Scaling studies of tessera: run a sweep of points (locally or under Slurm), collect their
run records, and write a CSV, a Markdown table and PNG plots (docs/studies.md).

  jobs/study.py run STUDY.toml [--local|--slurm] [--resume] [--out DIR] [--dry-run]
  jobs/study.py report DIR

A study file (TOML or JSON) names inputs (files, or shapes made with `tessera generate`),
commands (cp, tucker, contract, bench mttkrp|cp|tucker|contract), a parameter grid and the
resource sweep; `run` runs every point of commands x grid x resources, then `report`.
Python 3.11+ standard library; the plots need matplotlib (python3-matplotlib).
"""

import argparse
import csv
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COMMANDS = ("cp", "tucker", "contract", "bench mttkrp", "bench cp", "bench tucker",
            "bench contract")
LAUNCHERS = ("auto", "srun-pmix", "srun", "mpirun")
SPLIT_KEYS = ("kernel", "comm", "solve", "io", "other")


class StudyError(Exception):
    """A study file or option that cannot be used; the message says what to fix."""


def warn(msg):
    print(f"study: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Study file


def load_study(path):
    """Reads a TOML (.toml) or JSON (.json) study file and checks its keys."""
    try:
        with open(path, "rb") as f:
            if path.endswith(".json"):
                s = json.load(f)
            else:
                import tomllib  # Python 3.11+
                s = tomllib.load(f)
    except (OSError, ValueError) as e:
        raise StudyError(f"{path}: cannot read the study file: {e}")
    base = os.path.dirname(os.path.abspath(path))
    s.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    s.setdefault("scaling", "strong")
    if s["scaling"] not in ("strong", "weak"):
        raise StudyError(f"{path}: scaling = {s['scaling']!r}: use \"strong\" or \"weak\"")
    inputs = {}
    for i, inp in enumerate(s.get("inputs", [])):
        name = inp.get("name") or f"input{i}"
        if ("file" in inp) == ("generate" in inp):
            raise StudyError(f"{path}: input {name!r}: give exactly one of file = \"...\" or "
                             "generate = {{dims = \"AxBxC\", nnz = 1e6}}")
        if "file" in inp:
            f = expand_path(inp["file"], base)
            inp = dict(inp, file=f)
        else:
            g = inp["generate"]
            if "nnz" not in g:
                raise StudyError(f"{path}: input {name!r}: generate needs nnz")
        inputs[name] = dict(inp, name=name)
    s["inputs"] = inputs
    cmds = s.get("commands")
    if not cmds:
        raise StudyError(f"{path}: no [[commands]]: add e.g. [[commands]] command = \"cp\" "
                         "input = \"NAME\"")
    for c in cmds:
        if c.get("command") not in COMMANDS:
            raise StudyError(f"{path}: command = {c.get('command')!r}: use one of "
                             + ", ".join(COMMANDS))
        names = c.get("inputs", [c["input"]] if "input" in c else [])
        for n in names:
            if n not in inputs:
                raise StudyError(f"{path}: command {c['command']!r}: unknown input {n!r} "
                                 f"(inputs: {', '.join(inputs) or 'none'})")
        c["inputs"] = names
        c.setdefault("args", [])
    res = s.get("resources")
    if not res:
        raise StudyError(f"{path}: no [[resources]]: add e.g. [[resources]] ranks = 1")
    s["resources"] = [normalize_resources(r, path) for r in res]
    if s["scaling"] == "weak":
        for c in cmds:
            for n in c["inputs"]:
                if "file" in inputs[n]:
                    raise StudyError(f"{path}: weak scaling needs generated inputs (their nnz "
                                     f"grows with the ranks); input {n!r} is a file")
    launcher = s.get("launcher", "auto")
    if launcher not in LAUNCHERS:
        raise StudyError(f"{path}: launcher = {launcher!r}: use one of {', '.join(LAUNCHERS)}")
    s["launcher"] = launcher
    s.setdefault("grid", {})
    s.setdefault("slurm", {})
    s["_path"] = os.path.abspath(path)
    s["_base"] = base
    return s


def expand_path(p, base):
    if "TESSERA_SHARED_DATA" not in os.environ:
        os.environ["TESSERA_SHARED_DATA"] = os.path.normpath(os.path.join(REPO, "..", "shared",
                                                                          "data"))
    p = os.path.expandvars(os.path.expanduser(p))
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))


def normalize_resources(r, path):
    """{nodes, gpus_per_node, ranks_per_node | ranks, threads} -> a full record."""
    nodes = int(r.get("nodes", 1))
    gpn = int(r.get("gpus_per_node", 0))
    threads = int(r.get("threads", 1))
    if "ranks" in r:
        ranks = int(r["ranks"])
        if ranks % nodes:
            raise StudyError(f"{path}: resources {r}: ranks must be a multiple of nodes")
        rpn = ranks // nodes
    else:
        rpn = int(r.get("ranks_per_node", gpn if gpn > 0 else 1))
        ranks = rpn * nodes
    if min(nodes, rpn, threads) < 1 or gpn < 0:
        raise StudyError(f"{path}: resources {r}: nodes, ranks and threads must be >= 1")
    return {"nodes": nodes, "ranks": ranks, "ranks_per_node": rpn, "gpus_per_node": gpn,
            "gpus": gpn * nodes, "threads": threads}


def grid_combos(grid):
    """Cartesian product of the grid's lists: rank, ranks, precision, backend, tier, extra."""
    keys = [k for k in ("rank", "ranks", "precision", "backend", "tier", "extra") if k in grid]
    unknown = set(grid) - set(keys)
    if unknown:
        raise StudyError(f"unknown grid key(s) {', '.join(sorted(unknown))}: use rank, ranks, "
                         "precision, backend, tier, extra")
    lists = []
    for k in keys:
        v = grid[k]
        if k == "extra":
            v = v if v and isinstance(v[0], list) else [v]
        elif not isinstance(v, list):
            v = [v]
        lists.append(v)
    for combo in itertools.product(*lists):
        yield dict(zip(keys, combo))


def grid_args(cmd, g):
    a = []
    if "rank" in g and cmd in ("cp", "bench mttkrp", "bench cp", "bench tucker"):
        a += ["--rank", str(g["rank"])]
    if "ranks" in g and cmd in ("tucker", "bench tucker"):
        a += ["--ranks", str(g["ranks"])]
    for k in ("precision", "backend", "tier"):
        if k in g:
            a += [f"--{k}", str(g[k])]
    a += [str(x) for x in g.get("extra", [])]
    return a


def label_of(g):
    parts = []
    for k, v in g.items():
        if k == "extra":
            if v:
                parts.append(" ".join(str(x) for x in v))
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def points_of(s):
    """Every point: command x grid combination x resources (inputs are per command)."""
    pts = []
    for c in s["commands"]:
        for g in grid_combos(dict(s["grid"], **c.get("grid", {}))):
            series = " ".join([c["command"]] + c["inputs"] + ([label_of(g)] if g else []))
            for r in s["resources"]:
                rid = f"n{r['nodes']}-r{r['ranks']}-t{r['threads']}" + (
                    f"-g{r['gpus']}" if r["gpus"] else "")
                pid = slug(f"{series}-{rid}")
                pts.append({"id": pid, "series": series, "command": c["command"],
                            "inputs": c["inputs"], "grid": g, "resources": r,
                            "args": grid_args(c["command"], g) + [str(x) for x in c["args"]]})
    ids = [p["id"] for p in pts]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise StudyError(f"two points share an id ({', '.join(sorted(dup))}): make the commands "
                         "or grid entries differ")
    return pts


def scale_nnz(s, p, inp):
    nnz = float(inp["generate"]["nnz"])
    if s["scaling"] == "weak":
        nnz *= p["resources"]["ranks"]
    return nnz


def input_args(s, p, out):
    """Positional/`--generate` arguments of a point and the files to generate first."""
    args, gens = [], []
    bench = p["command"].startswith("bench")
    for n in p["inputs"]:
        inp = s["inputs"][n]
        if "file" in inp:
            args.append(inp["file"])
            continue
        g = inp["generate"]
        nnz = scale_nnz(s, p, inp)
        if bench and p["command"] == "bench contract":
            args += ["--generate", "--nnz", f"{nnz:g}"]
        elif bench:
            args += ["--generate", g["dims"], "--nnz", f"{nnz:g}"]
        else:
            ext = g.get("format", "tns")
            f = os.path.join(out, "inputs", slug(f"{n}-{g['dims']}-{nnz:.0f}") + f".{ext}")
            gen = ["generate", "--dims", g["dims"], "--nnz", f"{nnz:g}", "--out", f]
            for k in ("rank", "noise", "seed", "dist", "alpha", "structure"):
                if k in g:
                    gen += [f"--{k}", str(g[k])]
            gens.append((f, gen))
            args.append(f)
    return args, gens


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


# --------------------------------------------------------------------------------------------
# Records


def read_record(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(j, dict) or "command" not in j:
        return None
    return j


def valid_record(path):
    j = read_record(path)
    return j is not None and seconds_per_unit(j)[0] is not None


def _mean(rows, key):
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals) if vals else None


def seconds_per_unit(j):
    """(seconds, unit) of a record: the versioned envelope's timing, else the older fields."""
    t = j.get("timing")
    if isinstance(t, dict) and isinstance(t.get("seconds_per_unit"), (int, float)):
        return float(t["seconds_per_unit"]), t.get("unit", "?")
    if isinstance(j.get("seconds_per_iteration"), (int, float)):
        return float(j["seconds_per_iteration"]), "iteration"
    if isinstance(j.get("mean_seconds_per_mode"), (int, float)):
        return float(j["mean_seconds_per_mode"]), "mode"
    its = j.get("per_iteration")
    if isinstance(its, list) and its:
        rows = its[1:] if len(its) > 1 else its  # the first iteration warms caches
        m = _mean(rows, "seconds")
        if m is not None:
            return m, "iteration"
    ph = j.get("phases_seconds")
    if isinstance(ph, dict) and isinstance(ph.get("total"), (int, float)):
        return float(ph["total"]), "run"
    return None, None


def split_seconds(j, total):
    """Seconds per unit in kernel/comm/solve/io/other (those the record has)."""
    t = j.get("timing")
    if isinstance(t, dict) and isinstance(t.get("split"), dict):
        return {k: float(v) for k, v in t["split"].items() if isinstance(v, (int, float))}
    if isinstance(j.get("share"), dict) and total:
        sh = j["share"]
        m = {"kernel": sh.get("kernel", sh.get("ttmc")), "comm": sh.get("comm"),
             "solve": sh.get("solve", sh.get("svd"))}
        return {k: v * total for k, v in m.items() if isinstance(v, (int, float))}
    its = j.get("per_iteration")
    if isinstance(its, list) and its:
        rows = its[1:] if len(its) > 1 else its
        m = {"kernel": _mean(rows, "kernel") or _mean(rows, "ttmc"), "comm": _mean(rows, "comm"),
             "solve": _mean(rows, "solve") or _mean(rows, "svd")}
        out = {k: v for k, v in m.items() if v is not None}
        if total and out:
            out["other"] = max(0.0, total - sum(out.values()))
        return out
    ph = j.get("phases_seconds")
    if isinstance(ph, dict) and "multiply" in ph:  # contract
        g = lambda *ks: sum(float(ph.get(k, 0) or 0) for k in ks)
        out = {"kernel": g("multiply"), "comm": g("route_inputs", "route_output"),
               "io": g("read", "write"), "other": g("plan", "merge")}
        if total:
            out["other"] += max(0.0, total - sum(out.values()))
        return out
    return {}


def peak_bytes(j, key):
    m = j.get("memory")
    v = m.get(key) if isinstance(m, dict) else None
    if v is None and key == "peak_host_bytes_per_rank":
        v = j.get("peak_memory_bytes_per_rank")
    if isinstance(v, list):
        v = max((x for x in v if isinstance(x, (int, float))), default=None)
    return float(v) if isinstance(v, (int, float)) else None


# --------------------------------------------------------------------------------------------
# run


def cmd_run(a):
    s = load_study(a.study)
    pts = points_of(s)
    out = os.path.abspath(a.out or os.path.join("studies", s["name"]))
    mode = "slurm" if a.slurm else "local" if a.local else (
        "slurm" if slurm_answers() and not os.environ.get("SLURM_JOB_ID") else "local")
    tessera = tessera_binary(s)
    if not a.dry_run:
        os.makedirs(os.path.join(out, "points"), exist_ok=True)
        with open(os.path.join(out, "study.json"), "w") as f:
            json.dump({k: v for k, v in s.items() if not k.startswith("_")} | {
                "study_file": s["_path"], "mode": mode, "tessera": tessera,
                "argv": sys.argv}, f, indent=1)
    print(f"study: {s['name']}: {len(pts)} point(s), {mode}, results in {out}", flush=True)

    todo, generated = [], {}
    for p in pts:
        pdir = os.path.join(out, "points", p["id"])
        rec = os.path.join(pdir, "record.json")
        if a.resume and valid_record(rec):
            print(f"study: {p['id']}: record exists, skipped (--resume)", flush=True)
            continue
        if not a.dry_run:  # a dry run changes nothing on disk
            os.makedirs(pdir, exist_ok=True)
            for stale in ("rc", "record.json", "job_id", "job_state", "log.txt"):
                if os.path.exists(os.path.join(pdir, stale)):
                    os.remove(os.path.join(pdir, stale))
        ia, gens = input_args(s, p, out)
        for f, gen in gens:
            if f in generated or os.path.exists(f):
                continue
            print(f"study: generating {f}: tessera {shlex.join(gen)}", flush=True)
            if not a.dry_run:  # under a temporary name, so that a killed run leaves no stub
                os.makedirs(os.path.dirname(f), exist_ok=True)
                stem, ext = os.path.splitext(f)
                part = f"{stem}-partial{ext}"
                gen_part = [part if x == f else x for x in gen]
                r = subprocess.run([tessera] + gen_part + ["--force"], env=local_env(1),
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    raise StudyError(f"tessera generate failed ({r.returncode}):\n"
                                     + (r.stderr or r.stdout)[-2000:])
                os.replace(part, f)
            generated[f] = True
        argv = [*p["command"].split(), *ia, *p["args"], "--json", "record.json"]
        if p["command"] in ("cp", "tucker") and "--out" not in p["args"]:
            argv += ["--out", "model.h5"]
        if p["command"] == "contract" and "--out" not in p["args"]:
            argv += ["--out", "out.h5"]
        p["argv"] = argv
        if not a.dry_run:
            with open(os.path.join(pdir, "point.json"), "w") as f:
                json.dump(p, f, indent=1)
        todo.append((p, pdir))

    if mode == "local":
        for p, pdir in todo:
            run_point_local(s, p, tessera, p["argv"], pdir, a.dry_run)
    else:
        if not shutil.which("sbatch") and not a.dry_run:
            raise StudyError("--slurm: sbatch not found (no Slurm client here); use --local")
        jobs = {}
        for p, pdir in todo:
            script = slurm_script(s, p, tessera, p["argv"], pdir)
            sp = os.path.join(pdir, "job.sbatch")
            if a.dry_run:
                print(f"study: {p['id']}: would submit {sp}:\n{script}", flush=True)
                continue
            with open(sp, "w") as f:
                f.write(script)
            job, err = sbatch(sp)
            if job is None:
                warn(f"{p['id']}: sbatch refused the job: {err}")
                with open(os.path.join(pdir, "log.txt"), "w") as f:
                    f.write(f"sbatch refused the job: {err}\n")
                continue
            with open(os.path.join(pdir, "job_id"), "w") as f:
                f.write(job + "\n")
            jobs[job] = pdir
            print(f"study: {p['id']}: submitted job {job}", flush=True)
        timeout = a.timeout or float(s.get("wait_timeout", 3600))
        if jobs:
            states, left = wait_jobs(list(jobs), timeout)
            for job in left:
                warn(f"job {job} still queued or running after {timeout:.0f} s; cancelling it "
                     "(raise --timeout or wait_timeout, then run again with --resume)")
                subprocess.run(["scancel", job])
                with open(os.path.join(jobs[job], "log.txt"), "a") as f:
                    f.write(f"study: cancelled after the {timeout:.0f} s wait timeout\n")
            for job, pdir in jobs.items():
                st = sacct_state(job) or states.get(job)
                if st:
                    with open(os.path.join(pdir, "job_state"), "w") as f:
                        f.write(st + "\n")
    if a.dry_run:
        return 0
    return report(out)


# --------------------------------------------------------------------------------------------
# report


def tail(path, n=10):
    """The last n lines of a log, without mpirun's framed (-----) banners."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ["(no log)"]
    kept, framed = [], False
    for line in lines:
        if re.fullmatch(r"-{20,}", line.strip()):
            framed = not framed
            continue
        if not framed:
            kept.append(line)
    return (kept or lines)[-n:]


def collect(out):
    rows = []
    pdirs = sorted(os.path.join(out, "points", d) for d in os.listdir(os.path.join(out, "points")))
    for pdir in pdirs:
        try:
            with open(os.path.join(pdir, "point.json")) as f:
                p = json.load(f)
        except (OSError, ValueError):
            continue
        r = p["resources"]
        row = {"point": p["id"], "series": p["series"], "command": p["command"],
               "nodes": r["nodes"], "ranks": r["ranks"], "gpus": r["gpus"],
               "threads": r["threads"], "job_id": "", "exit_code": "", "status": "ok"}
        for k, fn in (("job_id", "job_id"), ("exit_code", "rc"), ("job_state", "job_state")):
            try:
                with open(os.path.join(pdir, fn)) as f:
                    row[k] = f.read().strip()
            except OSError:
                pass
        j = read_record(os.path.join(pdir, "record.json"))
        sec, unit = seconds_per_unit(j) if j else (None, None)
        if j is not None and j.get("status", "ok") != "ok":
            row["record_status"] = str(j.get("status"))
        if (j is None or sec is None or row["exit_code"] not in ("", "0")
                or "record_status" in row):
            why = []
            if row["job_id"]:
                why.append(f"job {row['job_id']}")
            if row.get("job_state"):
                why.append(row["job_state"])
            why.append(f"exit {row['exit_code']}" if row["exit_code"] else "no exit code")
            if j is None:
                why.append("no valid record")
            elif "record_status" in row:
                why.append(f"record status {row['record_status']}")
            row["status"] = "failed (" + ", ".join(why) + ")"
            row["log_tail"] = tail(os.path.join(pdir, "log.txt"))
            rows.append(row)
            continue
        split = split_seconds(j, sec)
        row.update({"unit": unit, "seconds_per_unit": sec,
                    "peak_host_bytes_per_rank": peak_bytes(j, "peak_host_bytes_per_rank"),
                    "peak_device_bytes_per_rank": peak_bytes(j, "peak_device_bytes_per_rank"),
                    "fit": j.get("fit") if isinstance(j.get("fit"), (int, float)) else None})
        for k in SPLIT_KEYS:
            row[f"{k}_seconds"] = split.get(k)
            row[f"{k}_share"] = split[k] / sec if k in split and sec else None
        m = j.get("machine", {})
        row["host"] = ",".join(m["hosts"]) if isinstance(m.get("hosts"), list) else m.get(
            "host", "")
        row["backend"] = m.get("backend", "")
        tv = j.get("tessera") if isinstance(j.get("tessera"), dict) else {}
        row["commit"] = tv.get("commit", "")
        gpus = m.get("gpus") if isinstance(m.get("gpus"), list) else []
        row["gpu_model"] = ",".join(sorted({str(g.get("model", "")) for g in gpus
                                            if isinstance(g, dict)}))
        sl = m.get("slurm") if isinstance(m.get("slurm"), dict) else {}
        row["slurm_job"] = str(sl.get("job_id", "") or "")
        rows.append(row)
    return rows


def resources_of(row):
    return row["gpus"] if row["gpus"] else row["ranks"]


def add_scaling(rows, weak):
    series = {}
    for r in rows:
        if r.get("seconds_per_unit"):
            series.setdefault(r["series"], []).append(r)
    for rs in series.values():
        base = min(rs, key=resources_of)
        p0, t0 = resources_of(base), base["seconds_per_unit"]
        for r in rs:
            p, t = resources_of(r), r["seconds_per_unit"]
            if weak:  # work grows with P: ideal time is constant
                r["speedup"] = t0 * p / (t * p0)
                r["efficiency"] = t0 / t
            else:
                r["speedup"] = t0 / t
                r["efficiency"] = t0 * p0 / (t * p)
    return series


def fmt_bytes(b):
    if b is None:
        return ""
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or u == "TiB":
            return f"{b:.0f} {u}" if u == "B" else f"{b:.1f} {u}"
        b /= 1024


def fmt(v, f):
    return "" if v is None else format(v, f)


def res_text(r):
    t = f"{r['ranks']} rank{'s' if r['ranks'] > 1 else ''} x {r['threads']} thr"
    if r["nodes"] > 1:
        t = f"{r['nodes']} nodes, " + t
    if r["gpus"]:
        t += f", {r['gpus']} GPU{'s' if r['gpus'] > 1 else ''}"
    return t


def write_csv(rows, path):
    cols = ["point", "status", "series", "command", "nodes", "ranks", "gpus", "threads", "unit",
            "seconds_per_unit", "speedup", "efficiency"] + [f"{k}_share" for k in SPLIT_KEYS] + [
            f"{k}_seconds" for k in SPLIT_KEYS] + ["peak_host_bytes_per_rank",
                                                   "peak_device_bytes_per_rank", "fit", "backend",
                                                   "gpu_model", "host", "commit", "slurm_job",
                                                   "job_id", "exit_code"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})


def write_md(rows, path, study, weak):
    lines = [f"# Study {study.get('name', '')}", "",
             f"Scaling: {'weak' if weak else 'strong'}. Speedup and efficiency are against the "
             "smallest resources of each series" + (" (weak: work grows with the ranks, ideal "
                                                    "time is constant)." if weak else "."), "",
             "| point | resources | s per unit | speedup | efficiency | kernel | comm | solve "
             "| io | other | peak mem/rank | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['point']} | {res_text(r)} | **{r['status']}** | | | | | | | | | |")
            continue
        sh = [fmt(r.get(f"{k}_share") and 100 * r[f"{k}_share"], ".1f") + (
            "%" if r.get(f"{k}_share") is not None else "") for k in SPLIT_KEYS]
        mem = fmt_bytes(r.get("peak_host_bytes_per_rank"))
        if r.get("peak_device_bytes_per_rank"):
            mem += f" (GPU {fmt_bytes(r['peak_device_bytes_per_rank'])})"
        lines.append(
            f"| {r['point']} | {res_text(r)} | {r['seconds_per_unit']:.4g} s/{r['unit']} | "
            f"{fmt(r.get('speedup'), '.2f')} | {fmt(r.get('efficiency') and 100 * r['efficiency'], '.0f')}% | "
            + " | ".join(sh) + f" | {mem} | {fmt(r.get('fit'), '.4f')} |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failed points", ""]
        for r in failed:
            lines += [f"- {r['point']}: {r['status']}", "", "  ```"]
            lines += ["  " + x for x in r.get("log_tail", [])] + ["  ```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plots(rows, series, out, weak):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warn("no PNGs: matplotlib is missing (apt-get install python3-matplotlib, or pip "
             "install matplotlib)")
        return []
    files = []
    plt.rcParams.update({"font.size": 8})

    def save(fig, name):
        p = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(p, dpi=90)
        plt.close(fig)
        files.append(p)

    xlabel = "GPUs" if any(r["gpus"] for r in rows) else "MPI ranks"
    xs = sorted({resources_of(r) for r in rows if r.get("seconds_per_unit")})

    def resource_axis(ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        if len(xs) == 1:
            ax.set_xlim(xs[0] / 1.5, xs[0] * 1.5)
        ax.set_xlabel(xlabel)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, rs in series.items():
        rs = sorted(rs, key=resources_of)
        x = [resources_of(r) for r in rs]
        y = [r["seconds_per_unit"] for r in rs]
        line, = ax.plot(x, y, "o-", label=name)
        ideal = [y[0] if weak else y[0] * x[0] / p for p in x]
        ax.plot(x, ideal, "--", color=line.get_color(), alpha=0.5, lw=1)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    resource_axis(ax)
    ax.set_ylabel(f"seconds per {rows[0].get('unit') or 'unit'} (dashed: ideal)")
    ax.set_title(f"time vs resources ({'weak' if weak else 'strong'} scaling)")
    ax.legend(fontsize=6)
    save(fig, "time.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, rs in series.items():
        rs = sorted(rs, key=resources_of)
        ax.plot([resources_of(r) for r in rs], [100 * r["efficiency"] for r in rs], "o-",
                label=name)
    ax.axhline(100, color="gray", ls="--", lw=1)
    ax.set_ylim(bottom=0)
    resource_axis(ax)
    ax.set_ylabel(f"{'weak' if weak else 'strong'} scaling efficiency (%)")
    ax.set_title("parallel efficiency")
    ax.legend(fontsize=6)
    save(fig, "efficiency.png")

    ok = [r for r in rows if r.get("seconds_per_unit")]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    bottom = [0.0] * len(ok)
    unit_word = "GPU" if xlabel == "GPUs" else "rank"
    labels = [f"{resources_of(r)} {unit_word}{'s' if resources_of(r) > 1 else ''}" + (f"\n{r['series'][:32]}" if len(series) > 1
                                                      else "") for r in ok]
    for k in SPLIT_KEYS:
        vals = [r.get(f"{k}_seconds") or 0.0 for r in ok]
        if any(vals):
            ax.bar(range(len(ok)), vals, bottom=bottom, label=k)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(ok)), labels, fontsize=6, rotation=20 if len(series) > 1 else 0,
                  ha="right" if len(series) > 1 else "center")
    ax.set_ylabel("seconds per unit")
    ax.set_title("time split" + (f": {next(iter(series))}" if len(series) == 1 else ""))
    ax.legend(fontsize=6)
    save(fig, "split.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, rs in series.items():
        rs = sorted(rs, key=resources_of)
        x = [resources_of(r) for r in rs]
        h = [(r.get("peak_host_bytes_per_rank") or 0) / 2**20 for r in rs]
        line, = ax.plot(x, h, "o-", label=f"{name} (host)")
        d = [(r.get("peak_device_bytes_per_rank") or 0) / 2**20 for r in rs]
        if any(d):
            ax.plot(x, d, "s--", color=line.get_color(), label=f"{name} (GPU)")
    ax.set_ylim(bottom=0)
    resource_axis(ax)
    ax.set_ylabel("peak memory per rank (MiB)")
    ax.set_title("memory per rank")
    ax.legend(fontsize=6)
    save(fig, "memory.png")
    return files


def report(out):
    out = os.path.abspath(out)
    if not os.path.isdir(os.path.join(out, "points")):
        raise StudyError(f"{out}: not a study folder (no points/): give the --out folder of "
                         "`study.py run`")
    try:
        with open(os.path.join(out, "study.json")) as f:
            study = json.load(f)
    except (OSError, ValueError):
        study = {}
    weak = study.get("scaling") == "weak"
    rows = collect(out)
    series = add_scaling(rows, weak)
    write_csv(rows, os.path.join(out, "results.csv"))
    write_md(rows, os.path.join(out, "results.md"), study, weak)
    pngs = plots(rows, series, out, weak) if series else []
    with open(os.path.join(out, "results.md")) as f:
        print(f.read(), end="")
    print(f"study: wrote {os.path.join(out, 'results.csv')}, results.md"
          + (", " + ", ".join(os.path.basename(p) for p in pngs) if pngs else ""), flush=True)
    failed = [r for r in rows if r["status"] != "ok"]
    for r in failed:
        warn(f"point {r['point']} {r['status']}; last lines of its log "
             f"({os.path.join(out, 'points', r['point'], 'log.txt')}):")
        for line in r.get("log_tail", []):
            print(f"    {line}", file=sys.stderr)
    if failed:
        warn(f"{len(failed)} of {len(rows)} point(s) failed")
        return 1
    if not rows:
        warn("no points found")
        return 1
    return 0


def reexec_with_matplotlib():
    """The plots need matplotlib; when this interpreter lacks it (a pyenv or venv python),
    run again under the system python3 that has it (python3-matplotlib)."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") or os.environ.get("STUDY_NO_REEXEC"):
        return
    for cand in (shutil.which("python3"), "/usr/bin/python3"):
        if not cand or os.path.realpath(cand) == os.path.realpath(sys.executable):
            continue
        ok = subprocess.run([cand, "-c", "import matplotlib, tomllib"], capture_output=True)
        if ok.returncode == 0:
            warn(f"{sys.executable} has no matplotlib: running under {cand}")
            os.environ["STUDY_NO_REEXEC"] = "1"
            os.execv(cand, [cand, os.path.abspath(__file__)] + sys.argv[1:])


def main(argv=None):
    ap = argparse.ArgumentParser(prog="study.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run every point of a study, then report")
    r.add_argument("study", help="study file (.toml or .json), docs/studies.md")
    m = r.add_mutually_exclusive_group()
    m.add_argument("--local", action="store_true",
                   help="run here with mpirun -np P (default without a Slurm controller that "
                   "answers, and inside an allocation)")
    m.add_argument("--slurm", action="store_true",
                   help="submit one sbatch job per point and wait for them (default where "
                   "sinfo reaches a controller, outside an allocation)")
    r.add_argument("--resume", action="store_true",
                   help="skip points whose run record exists and is valid")
    r.add_argument("--out", help="results folder (default: studies/NAME)")
    r.add_argument("--timeout", type=float,
                   help="--slurm: seconds to wait for the jobs (default: the study's "
                   "wait_timeout, else 3600); jobs left are cancelled and reported as failed")
    r.add_argument("--dry-run", action="store_true",
                   help="print the commands or job scripts without running them")
    p = sub.add_parser("report", help="collect the records of DIR into results.csv, "
                       "results.md and PNG plots")
    p.add_argument("dir")
    a = ap.parse_args(argv)
    if argv is None:
        reexec_with_matplotlib()
    try:
        return cmd_run(a) if a.cmd == "run" else report(a.dir)
    except StudyError as e:
        warn(f"error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
