"""Seeded random fuzzing of the public entry points (tessera.__all__): bad arrays (shapes,
dtypes, byte orders, NaN/inf, negative and huge indices, empty, non-contiguous, 0-d) and bad
keyword values (wrong types, out of range, unknown names). Every call must return or raise
ValueError, TypeError or OSError (FileExistsError, ...) with a one-line message; anything
else, and above all a crash of the interpreter, fails with the seed and the case.

The calls run in a child process (this file run as a script), so a crash is seen and
reported with its seed and the last case started. Cheap by design (a few seconds); for a
longer local run: python3 tests/python/test_fuzz_entry.py --seed 7 --cases 5000."""

import os
import random
import subprocess
import sys

import pytest

SEED = int(os.environ.get("TESSERA_FUZZ_SEED", "20261129"))
CASES = int(os.environ.get("TESSERA_FUZZ_CASES", "1000"))


def test_fuzz_entry_points(tmp_path):
    cmd = [sys.executable, os.path.abspath(__file__), "--seed", str(SEED), "--cases",
           str(CASES), "--dir", str(tmp_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    lines = out.stdout.splitlines()
    last = next((ln for ln in reversed(lines) if ln.startswith("CASE ")), "(none)")
    if out.returncode < 0:
        pytest.fail("the interpreter crashed (signal %d) at seed %d; last case started: %s\n%s"
                    % (-out.returncode, SEED, last, out.stderr[-3000:]))
    fails = [ln for ln in lines if ln.startswith("FUZZ-FAIL")]
    assert out.returncode == 0 and not fails, "seed %d:\n%s\n%s" % (
        SEED, "\n".join(fails[:20]), out.stderr[-3000:])
    assert "FUZZ-DONE %d" % CASES in out.stdout


# ---- the fuzz body (the child process) ------------------------------------------------------

ALLOWED = (ValueError, TypeError, OSError)


def _fuzz(seed, cases, folder):
    import warnings

    import numpy as np

    import tessera

    warnings.simplefilter("ignore")  # threads caps, dense notes: not the subject here
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    int_dtypes = [e + t for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")
                  for e in ("<", ">")]
    odd_dtypes = ["<f8", ">f4", "?", "O", "c16", "U3", "M8[s]"]

    def pick(*xs):
        return xs[rng.randrange(len(xs))]

    def tensor():
        order = pick(1, 2, 3, 3, 3, 4)
        shape = [rng.randint(1, 6) for _ in range(order)]
        nnz = pick(0, 1, 5, 20)
        coords = np.stack([nrng.integers(0, s, nnz) for s in shape], axis=1) if nnz else \
            np.zeros((0, order), dtype=np.int64)
        values = nrng.random(nnz) + 0.1
        what = rng.randrange(16)
        if what == 0:
            coords = coords.astype(pick(*int_dtypes))
        elif what == 1:
            coords = coords.astype(pick(*odd_dtypes)) if coords.size else coords
        elif what == 2 and nnz:
            coords[rng.randrange(nnz), rng.randrange(order)] = pick(-1, -2**63, 2**40, 2**63 - 1)
        elif what == 3:
            coords = pick(coords.T, coords[:, :-1], coords.ravel(), coords[None], np.int64(3))
        elif what == 4 and nnz:
            values = values.copy()
            values[rng.randrange(nnz)] = pick(np.nan, np.inf, -np.inf, 1e308, 1e-320)
        elif what == 5:
            values = values.astype(pick(">f8", "<f4", ">i4", "?", "O", "c8", "U2", "f2"))
        elif what == 6:
            values = pick(values[:-1] if nnz else values, values[:, None], values[None],
                          np.float64(1.0), [])
        elif what == 7:
            shape = pick([], [0] * order, [-3] * order, [2**70] * order, [2.5] * order,
                         ["a"] * order, None, 5, "abc", shape + [4], shape[:-1], [1] * 17,
                         [2**32 + 1] * order, [True] * order)
        elif what == 8 and nnz > 1:  # non-contiguous views
            coords = np.asfortranarray(coords)[::2]
            values = values[::2]
        elif what == 9:
            return pick(None, 5, 2.5, "missing.tns", os.path.join(folder, "garbage.tns"),
                        b"x\0y", [1, 2, 3], {"coords": 1}, (1, 2), object(), np.float64(1.0))
        elif what == 10:
            dense = nrng.random(tuple(rng.randint(1, 4) for _ in range(pick(0, 1, 2, 3, 4))))
            if dense.size and rng.random() < 0.5:
                dense.flat[0] = pick(np.nan, np.inf)
            return dense.astype(pick("<f8", ">f8", ">i2", "?", "c16"))
        return (coords, values, shape)

    def value():
        return pick(None, True, False, 0, -1, 1, 2, 3, 100000, 2**31, 2**63, 2**70, -2**70, 0.5,
                    -0.5, float("nan"), float("inf"), "x", "", "auto", "1", b"1", [1], [],
                    (1, 2), {}, object(), np.int32(2), np.float32(0.5), np.array([1, 2]))

    tuning = list(tessera.TUNING)
    cp_keys = [k for k in tessera.CP_OPTIONS if k != "rank"] + [
        "backend", "init", "precision", "threads", "comm_strategy", "index_base",
        "checkpoint_every", "callback", "distributed", "nonneg", "l1", "l2", "force",
        "no_such_keyword"]
    tk_keys = ["iters", "tol", "seed", "init", "svd", "subspace_steps", "max_mem", "backend",
               "precision", "threads", "index_base", "checkpoint_every", "callback",
               "distributed", "force", "no_such_keyword"]
    ct_keys = ["backend", "precision", "threads", "extend_dims", "mem_limit", "index_base",
               "distributed", "no_such_keyword"]
    safe = {"backend": "cpu", "threads": 1}

    def kwargs(keys):
        kw = dict(safe)
        if rng.random() < 0.6:
            for _ in range(rng.randint(1, 2)):
                k = pick(*(keys + tuning))
                kw[k] = value()
        if kw.get("backend") in ("auto", "cuda"):
            kw["backend"] = "cpu"  # no GPU hunt on a CPU machine; "cuda" is refused anyway
        kw.setdefault("iters", 2) if "iters" in keys else None
        return kw

    with open(os.path.join(folder, "garbage.tns"), "wb") as f:
        f.write(bytes(nrng.integers(0, 256, 200, dtype=np.uint8)))
    with open(os.path.join(folder, "user.h5"), "w") as f:
        f.write("a user's file\n")
    good = tessera.cp_als((np.array([[0, 0, 0], [1, 1, 1]]), np.ones(2), (2, 2, 2)), rank=1,
                          iters=1, **safe)

    def one(i):
        kind = rng.randrange(7)
        if kind <= 1:
            X, kw = tensor(), kwargs(cp_keys)
            rank = pick(1, 2, 0, -1, 2**40, 1.5, "2", None) if rng.random() < 0.3 else 2
            return "cp_als", lambda: tessera.cp_als(X, rank, **kw), (X, rank, kw)
        if kind == 2:
            X, kw = tensor(), kwargs(tk_keys)
            ranks = pick(2, [2, 2, 2], 0, [-1], "a,b", 2**70, 2.5, [1.5], None, (2,), "2x2x2")
            return "tucker_hooi", lambda: tessera.tucker_hooi(X, ranks, **kw), (X, ranks, kw)
        if kind == 3:
            X, Y, kw = tensor(), tensor(), kwargs(ct_keys)
            spec = pick("ijk,ljk->il", "ij,jk->ik", "ijk,ijk->", "i,i->i", "ab,cd->",
                        "".join(rng.choice("ijk,->xyzA. ") for _ in range(rng.randint(0, 12))),
                        5, None)
            same = rng.random() < 0.3
            return "contract", lambda: tessera.contract(X, X if same else Y, spec, **kw), \
                (X, spec, kw)
        if kind == 4:
            res = pick(good, good, None, 5, tessera.CPResult(np.ones(2), [np.ones((3, 1))], 0.1),
                       tessera.CPResult([np.nan], [np.ones((2, 1))] * 3, 0.1),
                       tessera.TuckerResult(np.ones((1, 1)), [np.ones((2, 1))] * 3, 0.1))
            path = pick(os.path.join(folder, "m%d.h5" % (i % 3)), os.path.join(folder, "user.h5"),
                        folder, os.path.join(folder, "no", "m.h5"), 5, None, "a\0b", b"b.h5")
            force = pick(False, True, "yes", None, 1)
            return "save_model", lambda: tessera.save_model(res, path, force=force), (path, force)
        if kind == 5:
            path = pick(os.path.join(folder, "m0.h5"), os.path.join(folder, "user.h5"),
                        os.path.join(folder, "garbage.tns"), folder, "missing.h5", 5, None,
                        "a\0b")
            return "load_model", lambda: tessera.load_model(path), (path,)
        path = pick(os.path.join(folder, "garbage.tns"), os.path.join(folder, "m0.h5"), folder,
                    "missing.tns", 5, None)
        base = pick("1", "0", "auto", "2", 5, None)
        return "read_tensor", lambda: tessera.read_tensor(path, index_base=base), (path, base)

    bad = 0
    tally = {}
    for i in range(cases):
        name, call, args = one(i)
        print("CASE %d %s %s" % (i, name, repr(args)[:400].replace("\n", " ")), flush=True)
        try:
            call()
            tally["ok"] = tally.get("ok", 0) + 1
        except ALLOWED as e:
            tally[type(e).__name__] = tally.get(type(e).__name__, 0) + 1
            if os.environ.get("TESSERA_FUZZ_VERBOSE"):
                print("  -> %s: %s" % (type(e).__name__, str(e)[:300]), flush=True)
            msg = str(e)
            if "\n" in msg.strip() or not msg.strip():
                bad += 1
                print("FUZZ-FAIL seed=%d case=%d %s: %s with a message of %d line(s): %r"
                      % (seed, i, name, type(e).__name__, len(msg.splitlines()), msg[:600]),
                      flush=True)
        except Exception as e:  # noqa: BLE001  (what the test is for)
            bad += 1
            print("FUZZ-FAIL seed=%d case=%d %s: %s: %s"
                  % (seed, i, name, type(e).__name__, str(e)[:600].replace("\n", " | ")),
                  flush=True)
    print("FUZZ-DONE %d (%d bad) %s" % (cases, bad, sorted(tally.items())), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import argparse
    import tempfile

    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--cases", type=int, default=CASES)
    p.add_argument("--dir")
    a = p.parse_args()
    if a.dir:
        sys.exit(_fuzz(a.seed, a.cases, a.dir))
    with tempfile.TemporaryDirectory() as d:
        sys.exit(_fuzz(a.seed, a.cases, d))
