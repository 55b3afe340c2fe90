#!/usr/bin/env python3
"""The table of the `floors` mode of jobs/gpu-node.sh (issue 43): every fl-<build>-<case>.json
record in the results folder, the base build's next to the new one's, with each case's
time, its ratio to the floor and the issue's target.

    python3 jobs/floors_table.py RESULTS_DIR
"""
import glob
import json
import os
import sys

# case: (what is compared with the target, the target, how it reads)
TARGETS = {
    "nell2-mttkrp-r32": ("ratio", 2.0, "<= 2.0x floor"),
    "nell2-completion-r32": ("x plain", 5.0, "<= 5x plain"),
    "nell2-completion-r16": ("x plain", 3.0, "<= 3x plain"),
    "nell2-tucker-16": ("ms", 6.0, "<= 6 ms/iter"),
    "nell2-tucker-16-fp16": ("ms", 6.0, "<= 6 ms/iter (fp16 gathers)"),
    "nell2-tucker-16-bf16": ("ms", 6.0, "<= 6 ms/iter (bf16 gathers)"),
    "aminoacid-mttkrp-r256": ("ms", 0.2, "<= 0.2 ms/mode"),
}


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def seconds_and_ratio(j):
    """Seconds per iteration (or per mode for bench mttkrp) and the ratio to the floor."""
    if "modes" in j:
        return j["mean_seconds_per_mode"], j.get("mean_ratio_to_floor")
    return j["seconds_per_iteration"], j.get("ratio_to_floor")


def main(out):
    runs = {}
    for p in sorted(glob.glob(os.path.join(out, "fl-*.json"))):
        build, case = os.path.basename(p)[3:-5].split("-", 1)
        runs.setdefault(case, {})[build] = load(p)
    print(f"{'case':24s} {'build':5s} {'ms':>9s} {'floor x':>8s} {'x plain':>8s}  target")
    for case in sorted(runs):
        for build in ("base", "new"):
            if build not in runs[case]:
                continue
            j = runs[case][build]
            if j is None:
                print(f"{case:24s} {build:5s} no result")
                continue
            s, ratio = seconds_and_ratio(j)
            xplain = ""
            if case.startswith("nell2-completion-"):
                plain = runs.get("nell2-plain-gh-" + case.rsplit("-", 1)[1], {}).get(build)
                if plain:
                    xplain = f"{s / seconds_and_ratio(plain)[0]:8.2f}"
            target = ""
            if case in TARGETS:
                what, limit, text = TARGETS[case]
                value = {"ratio": ratio, "ms": s * 1e3,
                         "x plain": float(xplain) if xplain else None}[what]
                met = "met" if value is not None and value <= limit else "missed"
                target = f"{text}: {met}"
            r = f"{ratio:8.2f}" if ratio else f"{'-':>8s}"
            print(f"{case:24s} {build:5s} {s * 1e3:9.3f} {r} {xplain:>8s}  {target}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
