"""The study's report: collecting the points' records into rows, scaling columns,
results.csv, results.md and the PNG plots.
(jobs/study.py, docs/studies.md)"""

import csv
import json
import os
import re
import sys

from .spec import SPLIT_KEYS, StudyError, warn
from .records import (comm_floor_seconds, comm_parts, peak_bytes, read_record, seconds_per_unit,
                      split_seconds)

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
        parts = comm_parts(j, split)  # comm = moving data + waiting for slower ranks
        if parts is not None:
            row["comm_transfer_seconds"], row["comm_wait_seconds"], row["comm_wait_from"] = parts
        floor = comm_floor_seconds(j)  # the NCCL all-reduce of the same bytes, timed on the node
        if floor is not None:
            row["comm_floor_seconds"] = floor
            if floor > 0 and isinstance(split.get("comm"), (int, float)):
                row["comm_over_floor"] = split["comm"] / floor
        o = j.get("options") if isinstance(j.get("options"), dict) else {}
        row["input"] = os.path.basename(str(o["file"])) if o.get("file") else ""
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


def ms(seconds):
    """Seconds as a short time: '2.27 ms', '41.3 us', '1.20 s'."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


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
                                                   "peak_device_bytes_per_rank", "fit",
                                                   "comm_transfer_seconds", "comm_wait_seconds",
                                                   "comm_wait_from", "comm_floor_seconds",
                                                   "comm_over_floor", "input", "backend",
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
                                                    "time is constant)." if weak else "."),
             "comm includes waiting for slower ranks; results.csv splits it into "
             "comm_transfer_seconds and comm_wait_seconds where the record tells them apart "
             "(comm_wait_from). Where the record has it (bench cp on NCCL), the comm cell "
             "also gives the comm time per unit beside the NCCL floor: an all-reduce of the "
             "same bytes timed on the node after the run (comm_floor_seconds, comm_over_floor).",
             "",
             "| point | resources | s per unit | speedup | efficiency | kernel | comm | solve "
             "| io | other | peak mem/rank | fit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['point']} | {res_text(r)} | **{r['status']}** | | | | | | | | | |")
            continue
        sh = [fmt(r.get(f"{k}_share") and 100 * r[f"{k}_share"], ".1f") + (
            "%" if r.get(f"{k}_share") is not None else "") for k in SPLIT_KEYS]
        if r.get("comm_floor_seconds") is not None and r.get("comm_seconds") is not None:
            sh[SPLIT_KEYS.index("comm")] += (
                f" ({ms(r['comm_seconds'])}, floor {ms(r['comm_floor_seconds'])}"
                + (f", {r['comm_over_floor']:.2f}x" if r.get("comm_over_floor") is not None
                   else "") + ")")
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


def unit_label(rows):
    """The unit of the points' times: one ("iteration"), or the list where they differ
    ("iteration or contraction"), "unit" when none is known."""
    units = sorted({r["unit"] for r in rows if r.get("unit")})
    return " or ".join(units) if units else "unit"


def short_commit(c):
    c = str(c or "")
    return c[:12] if len(c) == 40 and all(x in "0123456789abcdef" for x in c) else c


def study_title(study, rows, limit=90):
    """Two lines over every plot: the study and its inputs; machine(s), backend(s), commit(s)."""
    inputs = []
    for name, inp in (study.get("inputs") or {}).items():
        if not isinstance(inp, dict):
            continue
        if inp.get("file"):
            inputs.append(f"{name} ({os.path.basename(str(inp['file']))})")
        elif isinstance(inp.get("generate"), dict):
            g = inp["generate"]
            inputs.append(f"{name} (generated {g.get('dims', '?')}, nnz {g.get('nnz', '?'):g})"
                          if isinstance(g.get("nnz"), (int, float)) else f"{name} (generated)")
    if not inputs:  # a study.json without inputs: the records' input files
        inputs = sorted({r["input"] for r in rows if r.get("input")})
    head = f"study {study.get('name', '?')}: " + (", ".join(inputs) or "no input file")
    if len(head) > limit:
        head = head[:limit - 3] + "..."
    ok = [r for r in rows if r["status"] == "ok"]
    join = lambda vals: "/".join(sorted({v for v in vals if v})) or "?"
    hosts = sorted({h for r in ok for h in str(r.get("host", "")).split(",") if h})
    host = (hosts[0] + (f" (+{len(hosts) - 1} more)" if len(hosts) > 1 else "")) if hosts else "?"
    parts = [f"host {host}"]
    gpu = join(r.get("gpu_model", "") for r in ok)
    if gpu != "?":
        parts.append(gpu)
    parts.append(f"backend {join(r.get('backend', '') for r in ok)}")
    commits = sorted({short_commit(r.get("commit")) for r in ok if r.get("commit")})
    parts.append("commit " + (commits[0] if len(commits) == 1 else
                              f"mixed ({len(commits)})" if commits else "?"))
    return head + "\n" + ", ".join(parts)


def plots(rows, series, out, weak, study=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warn("no PNGs: matplotlib is missing (apt-get install python3-matplotlib, or pip "
             "install matplotlib)")
        return []
    files = []
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
                         "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 9})
    title = study_title(study or {}, rows)

    def save(fig, name):
        p = os.path.join(out, name)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(p, dpi=100, metadata={"Title": title.replace("\n", " | "),
                                          "Software": "tessera jobs/study.py"})
        plt.close(fig)
        files.append(p)

    size = (7.5, 5.2)
    xlabel = "GPUs" if any(r["gpus"] for r in rows) else "MPI ranks"
    xs = sorted({resources_of(r) for r in rows if r.get("seconds_per_unit")})

    def resource_axis(ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        if len(xs) == 1:
            ax.set_xlim(xs[0] / 1.5, xs[0] * 1.5)
        ax.set_xlabel(xlabel)
    fig, ax = plt.subplots(figsize=size)
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
    ax.set_ylabel(f"seconds per {unit_label(rows)} (dashed: ideal)")
    ax.set_title(f"time vs resources ({'weak' if weak else 'strong'} scaling)")
    ax.legend()
    save(fig, "time.png")

    fig, ax = plt.subplots(figsize=size)
    for name, rs in series.items():
        rs = sorted(rs, key=resources_of)
        ax.plot([resources_of(r) for r in rs], [100 * r["efficiency"] for r in rs], "o-",
                label=name)
    ax.axhline(100, color="gray", ls="--", lw=1)
    ax.set_ylim(bottom=0)
    resource_axis(ax)
    ax.set_ylabel(f"{'weak' if weak else 'strong'} scaling efficiency (%)")
    ax.set_title("parallel efficiency")
    ax.legend()
    save(fig, "efficiency.png")

    ok = [r for r in rows if r.get("seconds_per_unit")]
    many = len(series) > 1
    # Many points of several series: one label line each, turned upright, a figure as wide
    # as they need and the legend beside the bars.
    upright = many and len(ok) > 6
    fig, ax = plt.subplots(figsize=(max(size[0], 2.5 + 0.42 * len(ok)), size[1] + 1.6)
                           if upright else size)
    bottom = [0.0] * len(ok)
    unit_word = "GPU" if xlabel == "GPUs" else "rank"
    labels = [(f"{r['series'][:48]}, " if many else "")
              + f"{resources_of(r)} {unit_word}{'s' if resources_of(r) > 1 else ''}" for r in ok]
    # Times far apart (a 0.3 ms and a 0.1 s point): each bar as shares of its own time, so
    # the small points' split shows too.
    times = [r["seconds_per_unit"] for r in ok]
    relative = bool(times) and max(times) > 10 * min(times)
    # comm splits into moving data and waiting for slower ranks where the record tells them
    # apart (records.comm_parts); elsewhere it is one part that says it includes the wait.
    parts = [("kernel", "kernel", lambda r: r.get("kernel_seconds")),
             ("comm transfer", "comm: transfer", lambda r: r.get("comm_transfer_seconds")),
             ("comm wait", "comm: waiting for slower ranks",
              lambda r: r.get("comm_wait_seconds")),
             ("comm", "comm (incl. waiting)",
              lambda r: None if "comm_wait_seconds" in r else r.get("comm_seconds"))]
    parts += [(k, k, lambda r, k=k: r.get(f"{k}_seconds")) for k in SPLIT_KEYS[2:]]
    for _, label, get in parts:
        vals = [(get(r) or 0.0) * (100 / r["seconds_per_unit"] if relative else 1) for r in ok]
        if any(vals):
            ax.bar(range(len(ok)), vals, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(ok)), labels, fontsize=9 if not many else 8.5,
                  rotation=90 if upright else 20 if many else 0,
                  ha="right" if many and not upright else "center")
    ax.set_ylabel(f"% of each point's time per {unit_label(ok)}" if relative
                  else f"seconds per {unit_label(ok)}")
    ax.set_title("time split" + (f": {next(iter(series))}" if len(series) == 1 else ""))
    ax.legend(**({"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)} if upright else {}))
    save(fig, "split.png")

    fig, ax = plt.subplots(figsize=size)
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
    ax.legend()
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
    pngs = plots(rows, series, out, weak, study) if series else []
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
