#!/usr/bin/env python3
"""CPU contraction of real tensors: tessera's cpu backend (1 and 2 threads) against SciPy's
sparse matrix product (one thread), on the same inputs (docs/perf/cpu-contract-scipy.md).

  jobs/contract-vs-scipy.py [--data DIR] [--build DIR] [--repeats N] [--cases NAME,...]

DIR defaults: --data ../shared/data beside the repository, --build build-cpu in the
repository (relative paths are taken from the repository root). The build needs the Python
module (build-dir/python). Every case is a self-contraction X x X of one tensor.

What each timing covers (median of --repeats runs after one warm-up round; every run starts
with the previous run's output of the same kind freed):
- tessera: the kernel from the two input COO tensors (in memory, as tessera.read_tensor
  gives them) to the sorted output COO tensor: planning (keys, sorts, the match, the count
  pass) plus the run (output allocation, products, accumulation, output arrays), i.e. the
  run record's phases "plan" + "multiply". Reading the file and converting the result to
  NumPy arrays are outside it.
- SciPy: the matricization (row and column indices of both matrices from the COO
  coordinates; an index space over 2^22 is compressed with numpy.unique, as SciPy needs to
  keep its row pointers and work arrays small), building the two CSR matrices
  (coo -> csr) and the product A @ B, whose result SciPy leaves with the column indices of
  a row unsorted. "SciPy sorted" adds what tessera's output also has: sorted order (the
  faster of C.sort_indices() and C.tocsc().tocsr()) and COO coordinates (tocoo and the
  matricized indices unravelled into the output modes): the same result as tessera's.
The ratios are tessera 1T / SciPy and tessera 1T / SciPy sorted.
Each case runs in its own process (OMP_NUM_THREADS = the largest thread count,
OMP_WAIT_POLICY=PASSIVE unless set), which reads the tensor once, outside the timings, and
runs the variants in turn, round by round (tessera with each thread count, SciPy's product,
SciPy sorted both ways), so that all of them see the same load: the machine may be shared.
The load average at the start and end of each case is printed.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# name -> (file, spec, what it computes)
CASES = {
    "fb15k-rel-tail": (
        "kg-fb15k-237_head-rel-tail.tns.gz", "ijk,ljk->il",
        "FB15k-237: heads sharing (relation, tail), contracted over relation and tail"),
    "icews-rel-day": (
        "tkg-icews14_subj-rel-obj-day.tns.gz", "ijkt,ljmt->iklm",
        "ICEWS14: event pairs of one relation on one day, 4-way (subj, obj, subj, obj)"),
    "icews-subj-rel": (
        "tkg-icews14_subj-rel-obj-day.tns.gz", "ijkt,ijmu->ktmu",
        "ICEWS14: event pairs of one subject and relation, 4-way (obj, day, obj, day)"),
}


def parse_args():
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n")[:3]))
    p.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"),
                   help="folder of the .tns.gz files (default ../shared/data beside the repo)")
    p.add_argument("--build", default="build-cpu",
                   help="build directory with python/tessera (default build-cpu; relative to "
                        "the repository root)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per point (median)")
    p.add_argument("--cases", default=",".join(CASES),
                   help="comma-separated case names: " + ", ".join(CASES))
    p.add_argument("--threads", default="1,2", help="tessera thread counts (first one is the "
                   "base of the speed-up; default 1,2)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p.parse_args()


def build_dir(args):
    return args.build if os.path.isabs(args.build) else os.path.join(REPO, args.build)


def split_spec(spec):
    ins, out = spec.split("->")
    x, y = ins.split(",")
    return x, y, out


# ---- SciPy ---------------------------------------------------------------------------

def scipy_contract(np, sp, coords, vals, shape, spec, sort_by):
    """Z = X x X by spec through a CSR product. sort_by: None (the product as SciPy leaves
    it: CSR, column indices unsorted within a row), "sort_indices" or "tocsc" (sorted order
    through C.sort_indices() or C.tocsc().tocsr(), then COO coordinates). Returns
    (seconds, (coords, vals) or None, nnz); coords of the output as an (nnz, N) int64 array
    in lexicographic order when sorted."""
    xs, ys, out = split_spec(spec)
    length = {}
    for sub in (xs, ys):
        for m, ch in enumerate(sub):
            length[ch] = int(shape[m])
    row_letters = [ch for ch in out if ch in xs]
    col_letters = [ch for ch in out if ch not in xs]
    key_letters = [ch for ch in xs if ch in ys and ch not in out]
    assert row_letters + col_letters == list(out), "output must list X's letters first"

    t0 = time.perf_counter()

    def linear(sub, letters):
        """Row-major linear index of the letters' coordinates and the space's size."""
        idx = np.zeros(len(vals), dtype=np.int64)
        size = 1
        for ch in letters:
            idx *= length[ch]
            idx += coords[:, sub.index(ch)]
            size *= length[ch]
        return idx, size

    def compress(idx, size):
        """Dense ranks of the present values (order kept) when the space is large."""
        if size <= (1 << 22):
            return idx, size, None
        uniq, inv = np.unique(idx, return_inverse=True)
        return inv, len(uniq), uniq

    rows, nrows = linear(xs, row_letters)
    rows, nrows, row_values = compress(rows, nrows)
    cols, ncols = linear(ys, col_letters)
    cols, ncols, col_values = compress(cols, ncols)
    kx, nk = linear(xs, key_letters)
    ky, _ = linear(ys, key_letters)
    if nk > (1 << 22):
        uniq, inv = np.unique(np.concatenate([kx, ky]), return_inverse=True)
        kx, ky, nk = inv[:len(vals)], inv[len(vals):], len(uniq)
    A = sp.csr_matrix((vals, (rows, kx)), shape=(nrows, nk))
    B = sp.csr_matrix((vals, (ky, cols)), shape=(nk, ncols))
    C = A @ B
    t1 = time.perf_counter()
    if sort_by is None:
        return t1 - t0, None, C.nnz
    if sort_by == "sort_indices":
        C.sort_indices()
    else:
        C = C.tocsc().tocsr()
    Z = C.tocoo()
    r = Z.row.astype(np.int64) if row_values is None else row_values[Z.row]
    c = Z.col.astype(np.int64) if col_values is None else col_values[Z.col]
    outc = np.empty((Z.nnz, len(out)), dtype=np.int64)
    for letters, lin in ((row_letters, r), (col_letters, c)):
        for ch in reversed(letters):
            outc[:, out.index(ch)] = lin % length[ch]
            lin = lin // length[ch]
    t2 = time.perf_counter()
    return t2 - t0, (outc, Z.data), Z.nnz


# ---- the worker: one process per case, the variants interleaved round by round --------

def worker(args):
    """Runs one case: every round times tessera with each thread count, SciPy's product and
    SciPy's sorted result, in turn, so that all of them see the same load over time (the
    machine may be shared). Checks the results and prints their medians."""
    name = args.worker
    fname, spec, _ = CASES[name]
    import numpy as np  # noqa: PLC0415
    sys.path.insert(0, os.path.join(build_dir(args), "python"))
    import tessera  # noqa: PLC0415
    try:
        import scipy.sparse as sp  # noqa: PLC0415
    except ImportError:
        sp = None

    coords, vals, shape = tessera.read_tensor(os.path.join(args.data, fname))
    X = (coords, vals, shape)
    c64 = np.ascontiguousarray(coords, dtype=np.int64)
    v64 = np.ascontiguousarray(vals, dtype=np.float64)
    threads = [int(t) for t in args.threads.split(",")]
    times = {t: [] for t in threads}
    sci = {"product": [], "sort_indices": [], "tocsc": []}
    last = {}
    res = None
    load0 = os.getloadavg()[0]
    for rep in range(args.repeats + 1):
        for t in threads:
            z = last.pop(t, None)
            del z  # every run starts with the previous output freed
            z = tessera.contract(X, X, spec, backend="cpu", threads=t)
            ph = z.record["phases_seconds"]
            if rep > 0:
                times[t].append(ph["plan"] + ph["multiply"])
            last[t] = z
        if sp is None:
            continue
        for how in sci:
            res = None
            s, res, nnz = scipy_contract(np, sp, c64, v64, shape, spec,
                                         None if how == "product" else how)
            if rep > 0:
                sci[how].append(s)
    z0 = last[threads[0]]
    for t in threads[1:]:
        if not (np.array_equal(last[t].coords, z0.coords)
                and np.array_equal(last[t].values, z0.values)):
            raise SystemExit(f"{name}: tessera with {t} threads differs from {threads[0]}")
    out = {"seconds": [statistics.median(times[t]) for t in threads], "nnz": len(z0.values),
           "products": int(z0.record["products"]), "load": (load0, os.getloadavg()[0])}
    if sp is not None:
        if res[0].shape != z0.coords.shape or not np.array_equal(res[0], z0.coords):
            raise SystemExit(f"{name}: SciPy gives {len(res[1])} nonzeros, tessera "
                             f"{len(z0.values)} (or other coordinates)")
        if not np.allclose(res[1], z0.values, rtol=1e-12, atol=0):
            raise SystemExit(f"{name}: values differ from SciPy's beyond 1e-12")
        best = min(("sort_indices", "tocsc"), key=lambda h: statistics.median(sci[h]))
        out.update({"scipy": statistics.median(sci["product"]),
                    "scipy_sorted": statistics.median(sci[best]), "sorted_by": best})
    print("RESULT", repr(out), flush=True)


def run_worker(args, name):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(max(int(t) for t in args.threads.split(",")))
    env["OPENBLAS_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as jobs/demo.sh: the cores may be shared
    cmd = [sys.executable, os.path.abspath(__file__), "--data", args.data, "--build",
           build_dir(args), "--repeats", str(args.repeats), "--threads", args.threads,
           "--worker", name]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"contract-vs-scipy: case {name} failed")
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")][-1]
    import ast  # noqa: PLC0415
    return ast.literal_eval(line[len("RESULT "):])


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    import importlib.util  # noqa: PLC0415
    if importlib.util.find_spec("numpy") is None:
        raise SystemExit(f"contract-vs-scipy: NumPy is not importable by {sys.executable} "
                         "(Debian: apt-get install python3-numpy; or run it with /usr/bin/python3)")
    have_scipy = importlib.util.find_spec("scipy") is not None
    if not have_scipy:
        print("SciPy is not importable: the SciPy columns are skipped")
    if not os.path.isdir(os.path.join(build_dir(args), "python", "tessera")):
        raise SystemExit(f"contract-vs-scipy: no Python module in {build_dir(args)}/python "
                         "(build the _tessera target)")
    threads = [int(t) for t in args.threads.split(",")]
    rows = []
    for name in args.cases.split(","):
        fname, spec, what = CASES[name]
        print(f"{name}: {fname} {spec}  ({what})", flush=True)
        r = run_worker(args, name)
        agree = ("; SciPy agrees: same nonzeros and coordinates, values within 1e-12"
                 if have_scipy else "")
        print(f"  {r['products']:,} products, {r['nnz']:,} nonzeros; the outputs of "
              f"{args.threads} threads are identical{agree}; load average "
              f"{r['load'][0]:.2f} -> {r['load'][1]:.2f}", flush=True)
        rows.append((name, spec, r))
    head = ["case", "spec", "products", "output nnz"]
    head += [f"tessera {t}T s" for t in threads]
    head += [f"{t}T speed-up" for t in threads[1:]]
    head += ["SciPy s", "SciPy sorted s", f"tessera {threads[0]}T / SciPy",
             f"tessera {threads[0]}T / SciPy sorted"]
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, spec, r in rows:
        ts = r["seconds"]
        cells = [name, f"`{spec}`", f"{r['products']:,}", f"{r['nnz']:,}"]
        cells += [f"{s:.4f}" for s in ts] + [f"{ts[0] / s:.2f}" for s in ts[1:]]
        if "scipy" in r:
            cells += [f"{r['scipy']:.4f}", f"{r['scipy_sorted']:.4f} ({r['sorted_by']})",
                      f"{ts[0] / r['scipy']:.2f}", f"{ts[0] / r['scipy_sorted']:.2f}"]
        else:
            cells += ["skipped", "skipped", "-", "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
