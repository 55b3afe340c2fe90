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
import json
import os
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from studylib.spec import (StudyError, dropped_text, input_args, load_study,  # noqa: E402
                           points_of, warn)
from studylib.launch import (local_env, run_point_local, sacct_state, sbatch,  # noqa: E402
                             slurm_answers, slurm_script, tessera_binary, wait_jobs)
from studylib.records import valid_record  # noqa: E402
from studylib.report import report  # noqa: E402


# --------------------------------------------------------------------------------------------
# run


def cmd_run(a):
    s = load_study(a.study)
    pts, dropped = points_of(s)
    out = os.path.abspath(a.out or os.path.join("studies", s["name"]))
    mode = "slurm" if a.slurm else "local" if a.local else (
        "slurm" if slurm_answers() and not os.environ.get("SLURM_JOB_ID") else "local")
    tessera = tessera_binary(s)
    if not a.dry_run:
        os.makedirs(os.path.join(out, "points"), exist_ok=True)
        with open(os.path.join(out, "study.json"), "w") as f:
            json.dump({k: v for k, v in s.items() if not k.startswith("_")} | {
                "study_file": s["_path"], "mode": mode, "tessera": tessera,
                "argv": sys.argv, "duplicates_dropped": len(dropped)}, f, indent=1)
    print(f"study: {s['name']}: {len(pts)} point(s)"
          + (f" ({len(dropped)} duplicate(s) dropped)" if dropped else "")
          + f", {mode}, results in {out}", flush=True)
    if dropped:
        print(f"study: {dropped_text(dropped)}", flush=True)

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
