#!/usr/bin/env python3
"""One PNG of one cp or tucker run record (`tessera cp|tucker --json RUN.json`, or the Python
module's `m.record` saved as JSON; docs/run-record.md):

    python3 jobs/plot-run.py RUN.json [-o OUT.png]

Top: the fit per iteration and, where the record has it (`--holdout`), the held-out
validation RMSE on a second axis. Bottom: each iteration's time split into the record's own
parts (cp: MTTKRP kernel, comm, solve; tucker: TTMc, comm, SVD), stacked, with the rest of the
iteration as "other". The comm of one iteration includes the wait for slower ranks; where the
record tells them apart over the run (`kernel_per_rank`, `comm_floor`) the panel says how much
of it was waiting. The title names the command, input, backend, ranks, machine and commit.
Default output: RUN.png beside the record. Exit status 2 with a one-line message for a
file that cannot be plotted. Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from studylib.records import comm_parts  # noqa: E402

PROG = "plot-run"
# The per-iteration time keys of each command, in stacking order, with their legend labels.
PARTS = {
    "cp": (("kernel", "kernel (MTTKRP)"), ("comm", "comm (incl. waiting)"), ("solve", "solve")),
    "tucker": (("ttmc", "TTMc"), ("comm", "comm (incl. waiting)"), ("svd", "SVD / eigen-solve")),
}


class PlotError(Exception):
    """A record that cannot be plotted; the message says why."""


def load_record(path):
    """The run record at path, checked for what the plot needs."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        raise PlotError(f"{path}: no such file")
    except OSError as e:
        raise PlotError(f"{path}: cannot read it: {e.strerror or e}")
    try:
        j = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise PlotError(f"{path}: not JSON ({e})")
    if not isinstance(j, dict) or not (j.get("schema") == "tessera-run-record"
                                       or isinstance(j.get("command"), str)):
        raise PlotError(f"{path}: not a tessera run record (no \"schema\": "
                        "\"tessera-run-record\"; write one with tessera cp|tucker --json FILE)")
    its = j.get("per_iteration")
    if not isinstance(its, list) or not any(isinstance(r, dict) for r in its):
        raise PlotError(f"{path}: the {j.get('command', '?')!r} record has no per_iteration "
                        "rows (plot-run plots cp and tucker runs)")
    return j


def short_commit(c):
    c = str(c or "unknown")
    return c[:12] if len(c) == 40 and all(x in "0123456789abcdef" for x in c) else c


def title_of(j):
    """Two lines: command, input and rank; backend, ranks x threads, machine, commit, date."""
    o = j.get("options") if isinstance(j.get("options"), dict) else {}
    m = j.get("machine") if isinstance(j.get("machine"), dict) else {}
    t = j.get("tessera") if isinstance(j.get("tessera"), dict) else {}
    cmd = j.get("command", "?")
    head = f"tessera {cmd} {os.path.basename(str(o.get('file', '?')))}"
    if cmd == "cp" and "rank" in o:
        head += f", rank {o['rank']}"
    if cmd == "tucker" and "ranks" in o:
        r = o["ranks"]
        head += f", ranks {'x'.join(str(x) for x in r) if isinstance(r, list) else r}"
    ranks = m.get("ranks", "?")
    where = [f"backend {m.get('backend', o.get('backend', '?'))}",
             f"{ranks} rank{'' if ranks == 1 else 's'} x {m.get('threads_per_rank', '?')} thr"]
    hosts = m.get("hosts") if isinstance(m.get("hosts"), list) else []
    host = m.get("host", "?")
    where.append(f"host {host}" + (f" (+{len(hosts) - 1} more)" if len(hosts) > 1 else ""))
    gpus = [g.get("model") for g in m.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        models = sorted({str(g) for g in gpus})
        where.append(f"{len(gpus)}x {'/'.join(models)}")
    where.append(f"commit {short_commit(t.get('commit'))}")
    if isinstance(j.get("timestamp"), str):
        where.append(j["timestamp"][:10])
    return head + "\n" + ", ".join(where)


def time_unit(seconds):
    top = max(seconds, default=0.0)
    if top >= 1:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "\u00b5s"


def wait_note(j):
    """A line on the run's comm: how much of it was waiting, where the record can tell."""
    split = (j.get("timing") or {}).get("split") if isinstance(j.get("timing"), dict) else None
    if not isinstance(split, dict):
        return None
    parts = comm_parts(j, split)
    if parts is None:
        return None
    transfer, wait, source = parts
    if j.get("machine", {}).get("ranks", 1) <= 1:
        return None  # one rank waits for no one
    comm = transfer + wait
    if comm <= 0:
        return None
    scale, unit = time_unit([comm])
    return (f"mean over the run: comm {comm * scale:.3g} {unit} per iteration = transfer "
            f"{transfer * scale:.3g} + waiting {wait * scale:.3g} {unit} ({source})")


def plot(j, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("matplotlib is missing (Debian: apt-get install python3-matplotlib)")
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
                         "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 9})
    its = [r for r in j["per_iteration"] if isinstance(r, dict)]
    x = [r.get("iter", i + 1) for i, r in enumerate(its)]
    cmd = j.get("command", "")
    parts = PARTS.get(cmd)
    if parts is None:  # another command with per_iteration rows: the known keys it has
        keys = [k for k in ("kernel", "ttmc", "comm", "solve", "svd")
                if any(isinstance(r.get(k), (int, float)) for r in its)]
        parts = tuple((k, k) for k in keys)
    num = lambda r, k: float(r[k]) if isinstance(r.get(k), (int, float)) else 0.0
    series = [(label, [num(r, k) for r in its]) for k, label in parts]
    series = [(label, v) for label, v in series if any(v)]  # (tucker on one rank: comm 0)
    total = [num(r, "seconds") for r in its]
    other = [max(0.0, t - sum(v[i] for _, v in series)) for i, t in enumerate(total)]
    if any(other):
        series.append(("other", other))
    scale, unit = time_unit([max(t, sum(v[i] for _, v in series)) for i, t in enumerate(total)])

    title = title_of(j)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True,
                                 gridspec_kw={"height_ratios": [1, 1.15]})
    fig.suptitle(title, fontsize=10)
    fx = [xi for xi, r in zip(x, its) if isinstance(r.get("fit"), (int, float))]
    fy = [r["fit"] for r in its if isinstance(r.get("fit"), (int, float))]
    handles = []
    if fy:
        handles += ax.plot(fx, fy, "o-", color="C0", ms=4, label="fit")
    ax.set_ylabel("fit")
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(alpha=0.3)
    vx = [xi for xi, r in zip(x, its) if isinstance(r.get("validation_rmse"), (int, float))]
    if vx:
        vy = [r["validation_rmse"] for r in its if isinstance(r.get("validation_rmse"),
                                                              (int, float))]
        ax2 = ax.twinx()
        handles += ax2.plot(vx, vy, "s--", color="C3", ms=4, label="validation RMSE (held out)")
        ax2.set_ylabel("validation RMSE")
    if handles:
        ax.legend(handles=handles, loc="best")
    stop = j.get("stop_reason") or ("converged" if j.get("converged") else None)
    ax.set_title("fit per iteration" + (f" ({len(its)} iterations, {stop})" if stop else ""))

    bottom = [0.0] * len(its)
    for i, (label, vals) in enumerate(series):
        v = [s * scale for s in vals]
        bx.bar(x, v, bottom=bottom, label=label, color=f"C{i}", width=0.8)
        bottom = [b + s for b, s in zip(bottom, v)]
    bx.set_ylabel(f"{unit} per iteration")
    bx.set_xlabel("iteration")
    bx.set_title("time per iteration (rank 0)")
    if series:
        bx.set_ylim(0, max(bottom, default=0) * 1.4 or 1)  # room for the legend
        bx.legend(loc="upper right", ncol=min(3, len(series)))
    note = wait_note(j)
    if note:
        bx.annotate(note, (0, 0), xycoords="axes fraction", xytext=(0, -34),
                    textcoords="offset points", fontsize=8.5, va="top")
    if len(x) <= 30:
        bx.set_xticks(x)
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png",
                metadata={"Title": title.replace("\n", " | "), "Software": "tessera plot-run"})
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="plot-run.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("record", metavar="RUN.json", help="run record of tessera cp or tucker")
    ap.add_argument("-o", "--out", metavar="OUT.png", help="output (default: RUN.png beside "
                    "the record)")
    a = ap.parse_args(argv)
    out = a.out or os.path.splitext(a.record)[0] + ".png"
    try:
        if os.path.exists(out) and os.path.exists(a.record) and os.path.samefile(out, a.record):
            raise PlotError(f"{out}: the output is the input record; give another -o")
        if not out.lower().endswith(".png"):
            raise PlotError(f"{out}: the output is a PNG; give a name ending in .png")
        j = load_record(a.record)
        d = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(d):
            raise PlotError(f"{out}: no folder {d}")
        try:
            plot(j, out)
        except OSError as e:
            raise PlotError(f"{out}: cannot write it: {e.strerror or e}")
    except PlotError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"{PROG}: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
