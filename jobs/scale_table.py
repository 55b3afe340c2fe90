#!/usr/bin/env python3
"""The table of jobs/gpu-node.sh's `scale` mode (issue 36): one row per case and GPU count.

    python3 jobs/scale_table.py OUT_DIR [--csv FILE] [--png FILE [--title TEXT]]

Reads OUT_DIR/scale-<case>-np<P>.json (tessera cp, bench cp, bench tucker and bench
contract records, and bench comm records) and prints, per case: ms per iteration (the
median over the iterations after the first for `tessera cp`, the bench's own figure for
`bench cp` and `bench tucker`, the whole contraction for `bench contract`), the speedup over
the same case on one GPU, kernel and comm ms per iteration, the comm floor where the record
has one (an NCCL all-reduce of the same bytes, measured in the same run) and comm over it,
the fit and how the iterations ran. Cases missing a record are left out.
"""
import glob
import json
import os
import re
import statistics
import sys


def per_iteration(j):
    """ms per iteration, kernel ms, comm ms and the comm floor (ms or None) of one record."""
    floor = None
    cf = j.get("comm_floor")
    if isinstance(cf, dict) and cf.get("seconds_per_iteration"):
        floor = cf["seconds_per_iteration"] * 1e3
    if "per_iteration" in j:  # tessera cp
        its = j["per_iteration"][1:] or j["per_iteration"]
        med = lambda k: statistics.median(x[k] for x in its) * 1e3
        return med("seconds"), med("kernel"), med("comm"), floor
    if "runs" in j:  # bench contract: the benchmarked backend's whole contraction
        r = j["runs"][0]
        tot = r["total_seconds"] * 1e3
        return tot, r.get("kernel_seconds", float("nan")) * 1e3, float("nan"), floor
    it = j["seconds_per_iteration"] * 1e3
    s = j.get("share", {})
    kern = s.get("kernel", s.get("ttmc", 0))  # bench cp: kernel; bench tucker: ttmc
    return it, it * kern, it * s.get("comm", 0), floor


def kernel_balance(j):
    """Kernel time per iteration of the slowest rank over the mean of the ranks (nan: none)."""
    kp = j.get("kernel_per_rank")
    if not isinstance(kp, dict) or not kp.get("mean_seconds_per_iteration"):
        return float("nan")
    return kp["max_seconds_per_iteration"] / kp["mean_seconds_per_iteration"]


def main():
    out = sys.argv[1]
    csv = sys.argv[sys.argv.index("--csv") + 1] if "--csv" in sys.argv else None
    rows = {}
    comm = []
    for path in sorted(glob.glob(os.path.join(out, "scale-*-np*.json"))):
        m = re.match(r"scale-(.*)-np(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        case, p = m.group(1), int(m.group(2))
        try:
            j = json.load(open(path))
        except (OSError, ValueError):
            continue
        if case == "comm":
            comm.append((p, j))
            continue
        rows.setdefault(case, {})[p] = j
    lines = []
    header = (f"{'case':34s} {'GPUs':>4s} {'ms/iter':>9s} {'speedup':>7s} {'kernel':>8s} "
              f"{'comm':>8s} {'floor':>8s} {'comm/fl':>7s} {'kmax/mean':>9s}  fit       engine")
    print(header)
    lines.append("case,gpus,ms_per_iter,speedup,kernel_ms,comm_ms,comm_floor_ms,comm_over_floor,"
                 "kernel_max_over_mean,fit,engine")
    for case in sorted(rows):
        base = rows[case].get(1)
        base_it = per_iteration(base)[0] if base else None
        for p in sorted(rows[case]):
            j = rows[case][p]
            it, k, c, fl = per_iteration(j)
            sp = base_it / it if base_it else float("nan")
            ratio = c / fl if fl else float("nan")
            eng = j.get("iteration_engine", "")
            fit = j.get("fit", float("nan"))
            kb = kernel_balance(j)
            print(f"{case:34s} {p:4d} {it:9.3f} {sp:7.2f} {k:8.3f} {c:8.3f} "
                  f"{(fl if fl else float('nan')):8.3f} {ratio:7.2f} {kb:9.3f}  {fit:.6f}  {eng}")
            lines.append(f"{case},{p},{it:.6g},{sp:.4g},{k:.6g},{c:.6g},"
                         f"{fl if fl else ''},{ratio:.4g},{kb:.4g},{fit:.8g},\"{eng}\"")
    for p, j in sorted(comm, key=lambda x: x[0]):
        for r in j.get("rows", []):
            if r.get("bytes", 0) in (1 << 20, 1 << 26, 1 << 30):
                print(f"nccl floor np{p} {r.get('op', '?'):15s} {r['bytes'] / 2**20:8.0f} MiB "
                      f"{r.get('seconds', 0) * 1e6:10.1f} us  busbw {r.get('busbw_bytes_per_s', float('nan')) / 1e9:7.1f} GB/s")
    if csv:
        with open(csv, "w") as f:
            f.write("\n".join(lines) + "\n")
    if "--png" in sys.argv:
        plot(rows, sys.argv[sys.argv.index("--png") + 1],
             sys.argv[sys.argv.index("--title") + 1] if "--title" in sys.argv else "")


def plot(rows, path, title):
    """Speedup over one GPU and ms per iteration against the GPU count, one line per case."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.8))
    for k, case in enumerate(sorted(rows)):
        ps = sorted(rows[case])
        its = [per_iteration(rows[case][p])[0] for p in ps]
        color = f"C{k}"  # one colour per case in both panels
        b.plot(ps, its, marker="o", color=color, label=case)
        if 1 in rows[case]:
            a.plot(ps, [its[0] / t for t in its], marker="o", color=color, label=case)
    top = max((max(r) for r in rows.values()), default=4)
    a.plot([1, top], [1, top], "k:", label="ideal")
    a.set(xlabel="GPUs", ylabel="speedup over one GPU", xticks=[1, 2, 4])
    b.set(xlabel="GPUs", ylabel="ms per iteration", yscale="log", xticks=[1, 2, 4])
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
