"""The study's report: collecting the points' records into rows, scaling columns,
results.csv, results.md and the PNG plots.
(jobs/study.py, docs/studies.md)"""

import csv
import json
import os
import re
import sys

from .spec import SPLIT_KEYS, StudyError, warn
from .records import peak_bytes, read_record, seconds_per_unit, split_seconds

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
