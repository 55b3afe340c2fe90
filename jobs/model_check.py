#!/usr/bin/env python3
"""The multi-node time model of `tessera plan` against what was measured (issue 38).

    python3 jobs/model_check.py [--tessera build/drivers/tessera] [--data ../shared/data]
    python3 jobs/model_check.py --tables        # the predicted multi-node tables

Check: for every point measured on 1, 2 and 4 H200s (docs/perf/gpu-h200-scaling*.csv) runs
`tessera plan --nprocs 1,2,4` and prints predicted against measured ms per iteration and the
ratio. The kernel term is calibrated once per tensor on its one-GPU point (--kernel-ratio =
measured kernel time over the model's bytes floor) and the dense work (--dense-ms) is that
point's time outside kernels and comm (the model divides all but --dense-fixed-ms of it by
the rows a rank solves); the points on 2 and 4 GPUs are then predictions.
Tables: amazon and reddit shapes on 1..64 nodes of 4 and 8 GPUs at 25 and 50 GB/s, both CP
strategies, with amazon's one-GPU calibration. Python standard library only.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.path.join(HERE, "..", "docs", "perf")
AMAZON = "4821207x1774269x1805187"
NELL2 = "12092x9184x28818"
REDDIT = "8211298x176962x8116559"

# case in the CSVs -> (how to plan it, CP rank or Tucker ranks, strategy key in the record)
CASES = {
    "amazon-cp-r32": (["--shape", AMAZON, "--nnz", "1.74e9"], "cp", "32", "predicted"),
    "amazon-store-cp-r32-dealt": (["--shape", AMAZON, "--nnz", "1.74e9"], "cp", "32", "predicted"),
    "nell2-cp-r32-allreduce": (["--shape", NELL2, "--nnz", "76.9e6"], "cp", "32", "predicted"),
    "nell2-cp-r32-layer": (["--shape", NELL2, "--nnz", "76.9e6"], "cp", "32", "predicted_layer"),
    "congress-cp-r16": (["@congress"], "cp", "16", "predicted"),
    "nell2-tucker-16": (["--shape", NELL2, "--nnz", "76.9e6"], "tucker", "16,16,16", "predicted"),
    "reddit-cp-r32": (["--shape", REDDIT, "--nnz", "4.7e9"], "cp", "32", "predicted"),
}
# A case without a one-GPU point borrows the calibration of another (same kernels).
CALIBRATE_FROM = {"nell2-cp-r32-layer": "nell2-cp-r32-allreduce", "reddit-cp-r32": "amazon-cp-r32"}
FILES = ["gpu-h200-scaling-call3.csv", "gpu-h200-scaling.csv", "gpu-h200-scaling-session14.csv"]


def num(x):
    try:
        v = float(x)
        return None if v != v else v
    except (TypeError, ValueError):
        return None


def measured():
    """{(file, case, gpus): row} from the CSVs."""
    out = {}
    for f in FILES:
        with open(os.path.join(PERF, f)) as fh:
            for row in csv.DictReader(fh):
                out[(f, row["case"], int(row["gpus"]))] = row
    return out


def plan(tessera, data, spec, workload, rank, extra, counts_opt):
    args = []
    for a in spec:
        args.append(os.path.join(data, "congress-cosponsor_leg-leg-year.tns.gz")
                    if a == "@congress" else a)
    args += ["--workload", workload]
    args += ["--ranks", rank] if workload == "tucker" else ["--rank", rank]
    with tempfile.TemporaryDirectory() as d:
        j = os.path.join(d, "p.json")
        cmd = [tessera, "plan"] + args + ["--backend", "cuda", "--device-budget", "135G",
                                          "--precision", "float", "-q", "--json", j, "--force"]
        cmd += counts_opt + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if not os.path.exists(j):
            sys.exit("tessera plan failed: " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
        with open(j) as fh:
            return cmd, json.load(fh)["plans_per_ranks"]


def check(a):
    meas = measured()
    calib = {}  # case -> (kernel ratio, dense ms, from which point)
    rows = []
    for f in FILES:
        for case, (spec, wl, rank, key) in CASES.items():
            points = sorted(g for (ff, c, g) in meas if ff == f and c == case)
            if not points:
                continue
            base = CALIBRATE_FROM.get(case, case)
            one = meas.get((f, base, 1)) or next(
                (meas[k] for k in meas if k[1] == base and k[2] == 1), None)
            if one is None:
                continue
            if (f, case) not in calib:
                _, p1 = plan(a.tessera, a.data, CASES[base][0], CASES[base][1], CASES[base][2],
                             [], ["--nprocs", "1"])
                floor_ms = 1e3 * p1[0]["predicted"]["kernel_floor_seconds"]
                k_ms, c_ms, it_ms = num(one["kernel_ms"]), num(one["comm_ms"]) or 0, num(
                    one["ms_per_iter"])
                calib[(f, case)] = (k_ms / floor_ms, max(it_ms - k_ms - c_ms, 0.0))
            ratio, dense = calib[(f, case)]
            cmd, p = plan(a.tessera, a.data, spec, wl, rank,
                          ["--kernel-ratio", "%.4g" % ratio, "--dense-ms", "%.4g" % dense],
                          ["--nprocs", ",".join(str(g) for g in points)])
            for e, g in zip(p, points):
                m = meas[(f, case, g)]
                pr = e.get(key)
                if pr is None:
                    continue
                pred, got = 1e3 * pr["seconds_per_iteration"], num(m["ms_per_iter"])
                rows.append((f, case, g, pred, got, 1e3 * pr["mttkrp_seconds"],
                             num(m["kernel_ms"]), 1e3 * pr["comm_seconds"], num(m["comm_ms"]),
                             ratio, dense, base == case and g == 1))
    # SpTC (bench contract --generate --nnz 2e7 --products 1.2e9, double): the products rate
    # from the one-GPU kernel time.
    for f in FILES:
        pts = sorted(g for (ff, c, g) in meas if ff == f and c == "sptc-gen")
        if 1 not in pts:
            continue
        one = meas[(f, "sptc-gen", 1)]
        rate = 1.2e9 / (1e-3 * num(one["kernel_ms"]))
        calib[(f, "sptc-gen")] = (rate, 0.0)
        with tempfile.TemporaryDirectory() as d:
            j = os.path.join(d, "s.json")
            subprocess.run([a.tessera, "plan", "--workload", "contract", "--contract-nnz",
                            "2e7,2e7", "--products", "1.2e9", "--products-rate", "%.4g" % rate,
                            "--precision", "double", "--nprocs", ",".join(map(str, pts)),
                            "--json", j], capture_output=True, text=True, check=True)
            with open(j) as fh:
                p = json.load(fh)["predicted"]
        for e, g in zip(p, pts):
            m = meas[(f, "sptc-gen", g)]
            got, k = num(m["ms_per_iter"]), num(m["kernel_ms"])
            rows.append((f, "sptc-gen", g, 1e3 * e["seconds"], got, 1e3 * e["kernel_seconds"], k,
                         1e3 * e["comm_seconds"], got - k if got and k else None, rate, 0.0,
                         g == 1))
    print("| csv | case | GPUs | predicted ms | measured ms | pred/meas | kernel pred/meas ms |"
          " comm pred/meas ms | within 25% |")
    print("|---|---|---|---|---|---|---|---|---|")
    f2 = lambda x: "-" if x is None else "%.3g" % x
    for (f, case, g, pred, got, kp, km, cp, cm, ratio, dense, cal) in rows:
        r = pred / got if got else float("nan")
        ok = "calibration point" if cal else ("yes" if abs(r - 1) <= 0.25 else "**no**")
        print("| %s | %s | %d | %.4g | %.4g | %.2f | %s / %s | %s / %s | %s |" %
              (f.replace("gpu-h200-scaling", "").replace(".csv", "") or "(call 4)", case, g,
               pred, got, r, f2(kp), f2(km), f2(cp), f2(cm), ok))
    print()
    print("calibration (kernel ratio, dense ms per iteration) per csv and case:")
    for (f, case), (ratio, dense) in sorted(calib.items()):
        if case == "sptc-gen":
            print("  %s sptc-gen: --products-rate %.4g (1.2e9 products over the one-GPU kernel)"
                  % (f, ratio))
            continue
        print("  %s %s: --kernel-ratio %.4g --dense-ms %.4g (from %s on 1 GPU)" %
              (f, case, ratio, dense, CALIBRATE_FROM.get(case, case)))


def tables(a):
    meas = measured()
    one = meas[("gpu-h200-scaling-call3.csv", "amazon-cp-r32", 1)]
    _, p1 = plan(a.tessera, a.data, CASES["amazon-cp-r32"][0], "cp", "32", [], ["--nprocs", "1"])
    ratio = num(one["kernel_ms"]) / (1e3 * p1[0]["predicted"]["kernel_floor_seconds"])
    dense = num(one["ms_per_iter"]) - num(one["kernel_ms"]) - num(one["comm_ms"])
    print("calibration: amazon R32 on one H200 (call 3): kernel %.4g ms -> --kernel-ratio %.4g;"
          " --dense-ms %.3g" % (num(one["kernel_ms"]), ratio, dense))
    nodes = "1,2,4,8,16,32,64"
    for name, shape, nnz in (("amazon", AMAZON, "1.74e9"), ("reddit", REDDIT, "4.7e9")):
        for G in (4, 8):
            for gbps in (25, 50):
                cmd, p = plan(a.tessera, a.data, ["--shape", shape, "--nnz", nnz], "cp", "32",
                              ["--kernel-ratio", "%.4g" % ratio, "--dense-ms", "%.3g" % dense,
                               "--link-gbps", str(gbps)],
                              ["--nodes", nodes, "--gpus-per-node", str(G)])
                print("\n%s R32, %d GPUs per node, %d GB/s per GPU between nodes" %
                      (name, G, gbps))
                shown, skip = [], 0
                for x in cmd[1:]:  # the command without its temporary record
                    if skip or x in ("--json", "-q", "--force"):
                        skip = 1 if x == "--json" else 0
                        continue
                    shown.append(x)
                print("`tessera " + " ".join(shown) + "`\n")
                print("| nodes | GPUs | kernel ms | allreduce comm ms | allreduce ms/iter | "
                      "comm share | layer grid | layer kernel ms | layer comm ms | grid cost ms |"
                      " layer ms/iter | comm share |")
                print("|---|---|---|---|---|---|---|---|---|---|---|---|")
                cross = {}
                for e in p:
                    for key in ("predicted", "predicted_layer"):
                        x = e.get(key)
                        if x and key not in cross and x["comm_seconds"] > x["mttkrp_seconds"]:
                            cross[key] = "%d nodes (%d GPUs)" % (x["nodes"], e["ranks"])
                for e in p:
                    pr, ly = e["predicted"], e.get("predicted_layer")
                    lcells = ("-", "-", "-", "-", "-", "-") if ly is None else (
                        "x".join(str(x) for x in ly["grid"]), "%.3g" % (1e3 * ly["mttkrp_seconds"]),
                        "%.3g" % (1e3 * ly["comm_seconds"]),
                        "%.3g" % (1e3 * ly["grid_cost_seconds"]),
                        "%.3g" % (1e3 * ly["seconds_per_iteration"]),
                        "%.0f%%" % (100 * ly["comm_share"]))
                    print("| %d | %d | %.3g | %.3g | %.3g | %.0f%% | %s | %s | %s | %s | %s | %s |" %
                          ((pr["nodes"], e["ranks"], 1e3 * pr["mttkrp_seconds"],
                            1e3 * pr["comm_seconds"], 1e3 * pr["seconds_per_iteration"],
                            100 * pr["comm_share"]) + lcells))
                print("\ncomm over kernel time (crossover) from: allreduce %s; layer %s" %
                      (cross.get("predicted", "none listed"),
                       cross.get("predicted_layer", "none listed")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--tessera", default=os.path.join(HERE, "..", "build", "drivers", "tessera"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--tables", action="store_true", help="print the predicted node tables")
    a = ap.parse_args()
    tables(a) if a.tables else check(a)


if __name__ == "__main__":
    main()
