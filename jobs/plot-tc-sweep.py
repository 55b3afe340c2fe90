#!/usr/bin/env python3
"""Plots of `tessera bench mttkrp --tc-sweep --json SWEEP.json` (issue 18):

  OUT-speedup.png   speedup t_off / t_tc against the block density, one line per rank R
                    (solid: the largest tile fraction, dashed/dotted: smaller ones), one
                    panel per tensor-core precision; dashed lines at 1.0 and at 1.5 (the
                    target). Real tensors (no density) are drawn against R instead.
  OUT-roofline.png  the tile kernels' achieved TFLOP/s against their arithmetic intensity
                    (roofline flops / bytes), with the measured bandwidth line and the
                    nominal tensor-core peak of each precision (from the record).

    python3 jobs/plot-tc-sweep.py SWEEP.json [--out PREFIX] [--mode sum|N]

--mode sum (default): a case's speedup is the sum over the modes of t_off over the sum of
t_tc (one CP-ALS sweep of MTTKRPs); --mode N: the rows of mode N only.
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        j = json.load(f)
    s = j.get("tc_sweep")
    if s is None:
        sys.exit(f"{path}: no 'tc_sweep' object (not a bench mttkrp --tc-sweep record)")
    rows = [r for r in s["rows"] if r.get("precision", "off") != "off"]
    if not rows:
        sys.exit(f"{path}: no tensor-core rows (the sweep ran on backend "
                 f"{s.get('backend')}; it needs the cuda backend)")
    return s, rows


def speedups(rows, mode):
    """(precision, tensor, density, fraction, R) -> speedup, by --mode."""
    off = collections.defaultdict(float)
    tc = collections.defaultdict(float)
    for r in rows:
        if mode != "sum" and r["mode"] != int(mode):
            continue
        k = (r["precision"], r["tensor"], r["density"], r["tile_fraction"], r["R"])
        off[k] += r["t_off_seconds"]
        tc[k] += r["t_tc_seconds"]
    return {k: off[k] / tc[k] for k in off if tc[k] > 0}


def plot_speedup(rows, mode, out):
    sp = speedups(rows, mode)
    precs = sorted({k[0] for k in sp})
    fig, axes = plt.subplots(1, len(precs), figsize=(5.5 * len(precs), 4.2), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, p in zip(axes[0], precs):
        keys = [k for k in sp if k[0] == p]
        blocky = [k for k in keys if k[2] is not None]
        real = [k for k in keys if k[2] is None]
        fracs = sorted({k[3] for k in blocky}, reverse=True)
        ranks = sorted({k[4] for k in keys})
        colors = {R: plt.cm.viridis(i / max(1, len(ranks) - 1)) for i, R in enumerate(ranks)}
        if blocky:
            for fi, fr in enumerate(fracs):
                for R in ranks:
                    pts = sorted((k[2], sp[k]) for k in blocky if k[3] == fr and k[4] == R)
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], styles[fi % 4],
                                marker="o", color=colors[R],
                                label=f"R={R}" + (f", frac {fr:g}" if len(fracs) > 1 else ""))
            ax.set_xscale("log")
            ds = sorted({k[2] for k in blocky})
            ax.set_xticks(ds, [f"{d:g}" for d in ds])
            ax.minorticks_off()
            ax.set_xlabel("block density (nonzeros / 256 per tile)")
        else:
            for ti, t in enumerate(sorted({k[1] for k in real})):
                pts = sorted((k[4], sp[k]) for k in real if k[1] == t)
                ax.plot([x for x, _ in pts], [y for _, y in pts], styles[ti % 4], marker="o",
                        label=t)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("rank R")
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.axhline(1.5, color="r", ls="--", lw=0.8, label="target 1.5")
        ax.set_ylabel("speedup t_off / t_tc" + ("" if mode == "sum" else f" (mode {mode})"))
        ax.set_title(p)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def plot_roofline(s, rows, out):
    bw = s["bandwidth_bytes_per_s"]
    peaks = s.get("peak_flops_per_s", {})
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    precs = sorted({r["precision"] for r in rows})
    marks = dict(zip(precs, "os^Dv"))
    xs = []
    for p in precs:
        pts = [(r["roofline"]["tile_intensity_flops_per_byte"],
                r["roofline"]["tile_flops_per_s"] / 1e12) for r in rows
               if r["precision"] == p and r["roofline"]["tile_flops_per_s"] > 0]
        if pts:
            xs += [x for x, _ in pts]
            ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marks[p], s=16,
                       alpha=0.7, color="C%d" % precs.index(p), label=f"{p} tiles")
    lo = min(xs + [0.1]) / 2
    hi = max(xs + [100.0]) * 2
    ax.plot([lo, hi], [bw * lo / 1e12, bw * hi / 1e12], "k-", lw=1,
            label=f"measured bandwidth {bw / 1e9:.0f} GB/s")
    by_peak = collections.defaultdict(list)  # one line per peak value (tf32 = 3xtf32)
    for p in precs:
        if p in peaks:
            by_peak[peaks[p]].append(p)
    for peak, ps in sorted(by_peak.items()):
        ax.axhline(peak / 1e12, ls="--", lw=0.8, color="C%d" % precs.index(ps[0]),
                   label=f"{'/'.join(ps)} peak {peak / 1e12:.1f} TFLOP/s (nominal)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flops / roofline byte)")
    ax.set_ylabel("achieved TFLOP/s (tile kernel)")
    ax.set_title("tensor-core MTTKRP tiles: roofline")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--out", help="prefix of the PNGs (default: the JSON's name)")
    ap.add_argument("--mode", default="sum", help="sum (default) or a mode number")
    a = ap.parse_args()
    s, rows = load(a.json)
    prefix = a.out or os.path.splitext(a.json)[0]
    plot_speedup(rows, a.mode, prefix + "-speedup.png")
    plot_roofline(s, rows, prefix + "-roofline.png")


if __name__ == "__main__":
    main()
