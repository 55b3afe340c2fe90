#!/usr/bin/env python3
"""Sum the kernel durations of an Nsight Compute CSV by kernel name.

Usage: ncu --clock-control none --metrics gpu__time_duration.sum --csv PROGRAM ... > run.csv
       python3 jobs/probes/ncu_sum.py run.csv [--top N]

The program's own output may be mixed into the CSV (ncu writes both to stdout): lines that
are not rows of ncu's table are skipped. Prints, per kernel name (templates cut at '<' or
'('), the launches, the total and mean milliseconds and the share of all profiled kernel
time, largest first. ncu serialises the launches, so the figures are each kernel's own time,
not the run's wall time.
"""
import csv
import sys
from collections import defaultdict

UNIT = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    top = 12
    if "--top" in argv:
        top = int(argv[argv.index("--top") + 1])
    header = None
    total = defaultdict(float)
    count = defaultdict(int)
    with open(argv[1], newline="", errors="replace") as f:
        for row in csv.reader(f):
            if header is None:
                if "Kernel Name" in row and "Metric Value" in row:
                    header = {name: i for i, name in enumerate(row)}
                continue
            if len(row) != len(header) or row[header["Metric Name"]] != "gpu__time_duration.sum":
                continue
            name = row[header["Kernel Name"]]
            for cut in ("<", "("):
                name = name.split(cut)[0]
            unit = UNIT.get(row[header["Metric Unit"]], None) if "Metric Unit" in header else 1e-6
            try:
                value = float(row[header["Metric Value"]].replace(",", ""))
            except ValueError:
                continue
            total[name] += value * (unit if unit is not None else 1e-6)
            count[name] += 1
    if not total:
        sys.exit(f"{argv[1]}: no kernel durations found")
    whole = sum(total.values())
    print(f"{'kernel':48s} {'launches':>8s} {'total ms':>10s} {'mean ms':>9s} {'share':>6s}")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name[:48]:48s} {count[name]:8d} {t:10.3f} {t / count[name]:9.4f} {100 * t / whole:5.1f}%")
    print(f"{'all kernels':48s} {sum(count.values()):8d} {whole:10.3f}")


if __name__ == "__main__":
    main(sys.argv)
