#!/usr/bin/env python3
"""One table of the `latency` mode of jobs/gpu-node.sh (issue 21): every lat-*.json record
in the results folder, the base build's next to the new one's, and the ncu counters of the
MTTKRP kernels when the node had ncu.

    python3 jobs/latency_table.py RESULTS_DIR
"""
import csv
import glob
import json
import os
import statistics
import sys


def cp_row(j):
    """Median seconds per iteration (iterations 2..), kernel and solve shares."""
    if j.get("command") == "cp":
        its = j["per_iteration"][1:] or j["per_iteration"]
        med = statistics.median(x["seconds"] for x in its)
        tot = sum(x["seconds"] for x in its) or 1e-30
        k = sum(x.get("kernel", 0) for x in its) / tot
        s = sum(x.get("solve", 0) for x in its) / tot
        return med, k, s, None, j.get("fit"), j.get("iteration_engine", "-")
    med = j.get("median_seconds_per_iteration", j["seconds_per_iteration"])
    sh = j["share"]
    eng = j.get("iteration_engine") or j.get("constraints", {}).get("iteration_engine", "-")
    return med, sh["kernel"], sh["solve"], j.get("ratio_to_floor"), j.get("fit"), eng


def main(out):
    rows = []
    for p in sorted(glob.glob(os.path.join(out, "lat-*.json"))):
        name = os.path.basename(p)[4:-5]
        try:
            j = json.load(open(p))
        except (OSError, ValueError):
            rows.append(f"{name:34s} no result")
            continue
        if "einsum" in j:  # bench contract
            f = j["floor"]
            rows.append(f"{name:34s} {f['seconds'] * f['total_ratio'] * 1e3:8.3f} ms/contraction "
                        f"(median)  kernel/floor {f['kernel_ratio']:5.2f}  total/floor "
                        f"{f['total_ratio']:5.2f}  output nnz {j['output']['nnz']}")
        elif "modes" in j:  # bench mttkrp, bench ttmc
            per = "  ".join(
                f"m{m['mode']} {m['median_seconds']*1e3:.3f} ms x{m['ratio_to_floor']:.2f} "
                f"{m.get('achieved_bytes_per_s', 0)/1e9:.0f} GB/s" for m in j["modes"])
            rows.append(f"{name:34s} mean {j['mean_seconds_per_mode']*1e3:8.3f} ms/mode  "
                        f"floor-ratio {j['mean_ratio_to_floor']:5.2f}  bw "
                        f"{j.get('machine', {}).get('bandwidth_bytes_per_s', 0)/1e9:6.0f} GB/s  | {per}")
        elif "ttmc" in j.get("share", {}):  # bench tucker
            sp = j.get("svd_split", {})
            rows.append(f"{name:34s} {j['seconds_per_iteration']*1e3:8.3f} ms/iter  ttmc "
                        f"{j['share']['ttmc']*100:4.1f}%  svd {j['share']['svd']*100:4.1f}% "
                        f"(products {sp.get('products', 0)*1e3:.2f}, eigen {sp.get('eigen', 0)*1e3:.2f}, "
                        f"orth {sp.get('orthonormalize', 0)*1e3:.2f}, core {sp.get('core', 0)*1e3:.2f} ms)  "
                        f"floor-ratio {j['ratio_to_floor']:.2f}  fit {j['fit']:.6f}  "
                        f"{j.get('dense_stage', '-')}")
        else:
            med, k, s, ratio, fit, eng = cp_row(j)
            rt = f"floor-ratio {ratio:5.2f}" if ratio is not None else " " * 17
            rows.append(f"{name:34s} {med*1e3:8.3f} ms/iter (median)  kernel {k*100:4.1f}%  "
                        f"solve {s*100:4.1f}%  {rt}  fit {fit:.6f}  [{eng}]")
    print("---- latency (issue 21) ----")
    for r in rows:
        print(r)
    ncu = os.path.join(out, "ncu-mttkrp.csv")
    if os.path.exists(ncu):
        lines = open(ncu).read().splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
        if start is None:
            print("ncu: " + (lines[0] if lines else "no output"))
            return
        per = {}
        for r in csv.DictReader(lines[start:]):
            key = (r["ID"], r["Kernel Name"][:40])
            per.setdefault(key, {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
        for (i, kname), m in per.items():
            def v(n):
                return " ".join(m.get(n, ("?", "")))
            print(f"ncu launch {i:>2} {kname:40s} time {v('gpu__time_duration.sum')}  "
                  f"dram read {v('dram__bytes_read.sum')} write {v('dram__bytes_write.sum')}  "
                  f"L2 hit {v('lts__t_sector_hit_rate.pct')}  L1 hit {v('l1tex__t_sector_hit_rate.pct')}  "
                  f"dram {v('dram__throughput.avg.pct_of_peak_sustained_elapsed')} of peak  "
                  f"L2 bytes {v('lts__t_bytes.sum')} ({v('lts__throughput.avg.pct_of_peak_sustained_elapsed')} of peak)  "
                  f"L1 bytes {v('l1tex__t_bytes.sum')} ({v('l1tex__throughput.avg.pct_of_peak_sustained_elapsed')} of peak)  "
                  f"sm {v('sm__throughput.avg.pct_of_peak_sustained_elapsed')}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build-gpu/results")
