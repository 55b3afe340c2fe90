"""The tessera Python module: input kinds, results, equality with the CLI, independent
NumPy references, errors, Ctrl-C, the GIL, leaks (docs/python.md)."""

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
from conftest import random_sparse, tessera, write_tns

CPU1 = dict(backend="cpu", threads=1)


def same_cp(a, b):
    assert np.array_equal(a.weights, b.weights)
    assert len(a.factors) == len(b.factors)
    for fa, fb in zip(a.factors, b.factors):
        assert np.array_equal(fa, fb)
    assert a.fit == b.fit


# ---- input kinds -------------------------------------------------------------------------


def test_every_input_kind_gives_the_same_cp(small, tmp_path):
    coords, vals, shape = small
    ref = tessera.cp_als((coords, vals, shape), rank=3, iters=8, **CPU1)
    assert 0 < ref.fit < 1 and ref.iterations == 8
    kinds = {
        "(N, nnz) uint16": (coords.T.astype(np.uint16), vals, shape),
        "(nnz, N) int32 strided": (np.asfortranarray(coords.astype(np.int32)), vals, shape),
        "pyttb fields": types.SimpleNamespace(subs=coords, vals=vals[:, None], shape=shape),
    }
    sparse = pytest.importorskip("sparse")
    kinds["pydata sparse.COO"] = sparse.COO(coords.T, vals, shape=shape)
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    kinds["path .tns"] = str(tns)
    kinds["PathLike .tns"] = tns
    gz = tmp_path / "x.tns.gz"
    with gzip.open(gz, "wb") as f:
        f.write(tns.read_bytes())
    kinds["path .tns.gz"] = str(gz)
    for name, X in kinds.items():
        got = tessera.cp_als(X, rank=3, iters=8, **CPU1)
        try:
            same_cp(got, ref)
        except AssertionError as e:
            raise AssertionError("input kind %s differs" % name) from e


def test_h5_store_input(small, tmp_path, tessera_bin):
    coords, vals, shape = small
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    h5 = tmp_path / "x.h5"
    subprocess.run([tessera_bin, "convert", str(tns), str(h5)], check=True,
                   stdout=subprocess.DEVNULL)
    ref = tessera.cp_als((coords, vals, shape), rank=3, iters=8, **CPU1)
    got = tessera.cp_als(h5, rank=3, iters=8, **CPU1)  # read in stored order (a handle)
    assert got.fit == pytest.approx(ref.fit, abs=1e-12)
    for a, b in zip(got.factors, ref.factors):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    t = tessera.read_tensor(h5)
    assert t.shape == shape and t.nnz == len(vals)
    np.testing.assert_array_equal(t.todense(), tessera.read_tensor(tns).todense())


def test_scipy_sparse_two_way():
    sp = pytest.importorskip("scipy.sparse")
    coords, vals, shape = random_sparse((9, 8), 30, seed=5)
    ref = tessera.cp_als((coords, vals, shape), rank=2, iters=6, **CPU1)
    m = sp.coo_matrix((vals, (coords[:, 0], coords[:, 1])), shape=shape)
    same_cp(tessera.cp_als(m, rank=2, iters=6, **CPU1), ref)
    if hasattr(sp, "coo_array"):
        a = sp.coo_array((vals, (coords[:, 0], coords[:, 1])), shape=shape)
        same_cp(tessera.cp_als(a, rank=2, iters=6, **CPU1), ref)
    same_cp(tessera.cp_als(m.tocsr(), rank=2, iters=6, **CPU1), ref)


# ---- equality with the CLI ---------------------------------------------------------------


def test_cp_equals_cli_bitwise(small, tmp_path, tessera_bin):
    coords, vals, shape = small
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    out = tmp_path / "m.h5"
    subprocess.run([tessera_bin, "cp", str(tns), "-r", "4", "-i", "12", "-s", "7", "--backend",
                    "cpu", "--threads", "1", "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    cli = tessera.load_model(out)
    assert isinstance(cli, tessera.CPResult) and cli.record["options"]["seed"] == 7
    for X in [(coords, vals, shape), str(tns)]:
        py = tessera.cp_als(X, rank=4, iters=12, seed=7, **CPU1)
        np.testing.assert_array_equal(py.weights, cli.weights)
        for a, b in zip(py.factors, cli.factors):
            np.testing.assert_array_equal(a, b)
        assert py.fit == cli.fit
        assert [h["fit"] for h in py.history] == [h["fit"] for h in cli.history]


def test_cp_stop_reason_time_limit_and_print_every(small, capfd):
    coords, vals, shape = small
    X = (coords, vals, shape)
    full = tessera.cp_als(X, rank=3, iters=5, tol=0, **CPU1)
    assert full.stop_reason == "iteration limit" and full.iterations == 5
    assert full.record["stop_reason"] == "iteration limit"
    # A limit every iteration passes: one iteration, then "time limit".
    cut = tessera.cp_als(X, rank=3, iters=5, tol=0, max_seconds=1e-9, **CPU1)
    assert cut.stop_reason == "time limit" and cut.iterations == 1
    assert cut.record["options"]["max_seconds"] == 1e-9
    assert cut.history[0]["fit"] == full.history[0]["fit"]
    conv = tessera.cp_als(X, rank=3, iters=200, tol=1e-1, **CPU1)
    assert conv.stop_reason == "converged" and conv.converged
    capfd.readouterr()
    tessera.cp_als(X, rank=3, iters=5, tol=0, verbose=True, print_every=2, **CPU1)
    out = capfd.readouterr()
    text = out.out + out.err
    assert "iter   2 " in text and "iter   4 " in text and "iter   5 " in text, text
    assert "iter   1 " not in text and "iter   3 " not in text, text
    for bad in [dict(max_seconds=-1), dict(print_every=0)]:
        with pytest.raises(ValueError, match=list(bad)[0]):
            tessera.cp_als(X, rank=3, iters=2, **bad, **CPU1)


def test_tucker_equals_cli_bitwise(small, tmp_path, tessera_bin):
    coords, vals, shape = small
    tns = tmp_path / "x.tns"
    write_tns(tns, coords, vals)
    out = tmp_path / "t.h5"
    subprocess.run([tessera_bin, "tucker", str(tns), "-r", "3,2,2", "-i", "6", "--backend",
                    "cpu", "--threads", "1", "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    cli = tessera.load_model(out)
    assert isinstance(cli, tessera.TuckerResult)
    py = tessera.tucker_hooi((coords, vals, shape), [3, 2, 2], iters=6, **CPU1)
    np.testing.assert_array_equal(py.core, cli.core)
    for a, b in zip(py.factors, cli.factors):
        np.testing.assert_array_equal(a, b)
    assert py.fit == cli.fit


# ---- independent NumPy references --------------------------------------------------------


def numpy_cp_als(X, factors, iters):
    """Plain float64 CP-ALS on a dense tensor (no normalisation: the model, and so the fit,
    after every mode update does not depend on column scaling)."""
    N = X.ndim
    A = [f.copy() for f in factors]
    R = A[0].shape[1]
    letters = "abcdefghij"[:N]
    fits = []
    for _ in range(iters):
        for n in range(N):
            others = [m for m in range(N) if m != n]
            spec = letters + "," + ",".join(letters[m] + "r" for m in others) + "->" + \
                letters[n] + "r"
            M = np.einsum(spec, X, *[A[m] for m in others])
            V = np.ones((R, R))
            for m in others:
                V *= A[m].T @ A[m]
            A[n] = M @ np.linalg.pinv(V)
        model = np.einsum(",".join(l + "r" for l in letters) + "->" + letters, *A)
        fits.append(1 - np.linalg.norm(X - model) / np.linalg.norm(X))
    return fits


def test_cp_matches_numpy_reference_fit():
    rng = np.random.default_rng(11)
    shape, R = (6, 5, 4), 3
    true = [rng.random((s, R)) for s in shape]
    X = np.einsum("ar,br,cr->abc", *true) + 0.01 * rng.random(shape)
    coords = np.argwhere(X != 0)
    vals = X[tuple(coords.T)]
    init = [rng.random((s, R)) for s in shape]
    ref = numpy_cp_als(X, init, 15)
    got = tessera.cp_als((coords, vals, shape), rank=R, iters=15, tol=0, init=init, **CPU1)
    fits = [h["fit"] for h in got.history]
    assert len(fits) == 15
    np.testing.assert_allclose(fits, ref, atol=1e-6, rtol=0)
    np.testing.assert_allclose(got.fit, 1 - np.linalg.norm(X - got.full()) / np.linalg.norm(X),
                               atol=1e-9)


def numpy_normalize(weights, factors):
    """The conventional CP normalisation, written from Tensor Toolbox's and TensorLy's
    documented definition (normalize, arrange, fixsigns) and docs/formats.md's sign rule:
    unit 2-norm columns, weights absorbing the norms, components by weight descending, the
    largest-magnitude entry of each column positive in modes 0..N-2 (mode N-1 compensates)."""
    w = np.array(weights, dtype=float)
    F = [np.array(f, dtype=float) for f in factors]
    for f in F:
        n = np.linalg.norm(f, axis=0)
        w = w * n
        f /= np.where(n > 0, n, 1.0)
    for r in range(w.size):
        flip = 1.0
        for f in F[:-1]:
            if f[np.argmax(np.abs(f[:, r])), r] < 0:
                f[:, r] *= -1
                flip = -flip
        F[-1][:, r] *= flip
    order = np.argsort(-w, kind="stable")
    return w[order], [f[:, order] for f in F]


def test_cp_model_is_normalised_conventionally():
    rng = np.random.default_rng(5)
    shape, R = (7, 6, 5), 4
    true = [rng.random((s, R)) - 0.3 for s in shape]
    X = np.einsum("ar,br,cr->abc", *true) + 0.01 * rng.random(shape)
    coords = np.argwhere(X != 0)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=30, tol=0, **CPU1)
    w, F = got.weights, got.factors
    assert np.all(np.diff(w) <= 0) and np.all(w >= 0), w
    for n, f in enumerate(F):
        np.testing.assert_allclose(np.linalg.norm(f, axis=0), 1.0, atol=1e-12)
        if n < len(F) - 1:
            assert np.all(f[np.argmax(np.abs(f), axis=0), np.arange(R)] > 0)
    # The same model scaled, permuted and sign-flipped in pairs normalises back to it.
    perm = rng.permutation(R)
    s = [rng.uniform(0.5, 2.0, R) * rng.choice([-1.0, 1.0], R) for _ in shape]
    s[-1] = np.abs(s[-1]) * np.sign(s[0]) * np.sign(s[1])  # flips in pairs: the same model
    scrambled = [f[:, perm] * si for f, si in zip(F, s)]
    ws = w[perm] / np.prod([np.abs(si) for si in s], axis=0)
    w2, F2 = numpy_normalize(ws, scrambled)
    np.testing.assert_allclose(w2, w, rtol=1e-12)
    for a, b in zip(F2, F):
        np.testing.assert_allclose(a, b, atol=1e-12)
    # The values, and so the fit, are the last iteration's.
    np.testing.assert_allclose(got.fit, 1 - np.linalg.norm(X - got.full()) / np.linalg.norm(X),
                               atol=1e-9)


def numpy_hooi(X, ranks, iters):
    N = X.ndim
    U = [np.linalg.svd(X.reshape(X.shape[0], -1) if n == 0 else
                       np.moveaxis(X, n, 0).reshape(X.shape[n], -1),
                       full_matrices=False)[0][:, :ranks[n]] for n in range(N)]
    for _ in range(iters):
        for n in range(N):
            Y = X
            for m in range(N):
                if m != n:
                    Y = np.moveaxis(np.tensordot(U[m].T, Y, axes=(1, m)), 0, m)
            U[n] = np.linalg.svd(np.moveaxis(Y, n, 0).reshape(X.shape[n], -1),
                                 full_matrices=False)[0][:, :ranks[n]]
    G = X
    for m in range(N):
        G = np.moveaxis(np.tensordot(U[m].T, G, axes=(1, m)), 0, m)
    return 1 - np.sqrt(max(np.linalg.norm(X) ** 2 - np.linalg.norm(G) ** 2, 0)) / np.linalg.norm(X)


def test_tucker_matches_numpy_hooi_fit():
    rng = np.random.default_rng(4)
    shape, ranks = (7, 6, 5), (3, 2, 2)
    G = rng.standard_normal(ranks)
    Us = [np.linalg.qr(rng.standard_normal((s, r)))[0] for s, r in zip(shape, ranks)]
    X = np.einsum("abc,ia,jb,kc->ijk", G, *Us) + 0.01 * rng.standard_normal(shape)
    coords = np.argwhere(X != 0)
    ref = numpy_hooi(X, ranks, 60)
    got = tessera.tucker_hooi((coords, X[tuple(coords.T)], shape), list(ranks), iters=60,
                              tol=1e-13, **CPU1)
    assert abs(got.fit - ref) < 1e-6
    for U in got.factors:
        np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-10)
    np.testing.assert_allclose(got.fit, 1 - np.linalg.norm(X - got.full()) / np.linalg.norm(X),
                               atol=1e-9)


# ---- contraction -------------------------------------------------------------------------


def test_contract_matches_einsum():
    xc, xv, xs = random_sparse((4, 3, 2), 15, seed=1)
    yc, yv, ys = random_sparse((5, 3, 2), 20, seed=2)
    z = tessera.contract((xc, xv, xs), (yc, yv, ys), "ijy,kjy->ik", **CPU1)
    X = np.zeros(xs)
    X[tuple(xc.T)] = xv
    Y = np.zeros(ys)
    Y[tuple(yc.T)] = yv
    ref = np.einsum("ijy,kjy->ik", X, Y)
    assert z.shape == (4, 5)
    np.testing.assert_allclose(z.todense(), ref, rtol=1e-12)
    np.testing.assert_allclose(z.to_scipy().toarray(), ref, rtol=1e-12)
    sparse = pytest.importorskip("sparse")
    np.testing.assert_allclose(z.to_sparse().todense(), ref, rtol=1e-12)
    # self-contraction: the same object twice
    s = tessera.contract((xc, xv, xs), (xc, xv, xs), "ijk,ljk->il", **CPU1)
    x = (xc, xv, xs)
    s2 = tessera.contract(x, x, "ijk,ljk->il", **CPU1)
    np.testing.assert_allclose(s.todense(), np.einsum("ijk,ljk->il", X, X), rtol=1e-12)
    np.testing.assert_array_equal(s.todense(), s2.todense())
    del sparse


# ---- results, models ---------------------------------------------------------------------


def test_results_and_model_round_trip(small, tmp_path):
    r = tessera.cp_als(small, rank=3, iters=5, **CPU1)
    assert set(r.history[0]) >= {"iter", "fit", "seconds", "kernel", "comm", "solve"}
    assert r.record["command"] == "cp" and r.record["options"]["rank"] == 3
    assert r.record["tensor"]["nnz"] == 60 and len(r.record["per_iteration"]) == 5
    # The same record fields as `tessera cp --json` (src/engine/run/record.hpp): time per iteration
    # over the iterations run, split as the history says.
    timing, its = r.record["timing"], r.record["per_iteration"]
    assert timing["unit"] == "iteration" and r.record["fits"] == [h["fit"] for h in its]
    iters_s = sum(h["seconds"] for h in its)
    assert r.record["phases_seconds"]["iterations"] == pytest.approx(iters_s)
    assert timing["seconds_per_unit"] == pytest.approx(iters_s / 5)
    assert r.record["partition"]["scheme"] == "nnz"
    w, f = r.to_tensorly()
    np.testing.assert_array_equal(np.asarray(w), r.weights)
    kt = r.to_pyttb()
    if isinstance(kt, dict):
        assert set(kt) == {"factors", "weights"}
    path = tmp_path / "m.h5"
    tessera.save_model(r, path)
    back = tessera.load_model(path)
    same_cp(back, r)
    t = tessera.tucker_hooi(small, 2, iters=3, **CPU1)
    assert t.record["timing"]["unit"] == "iteration" and len(t.record["per_iteration"]) == 3
    tessera.save_model(t, tmp_path / "t.h5")
    tb = tessera.load_model(tmp_path / "t.h5")
    np.testing.assert_array_equal(tb.core, t.core)
    assert tb.fit == t.fit


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad,match", [
    (lambda c, v, s: (c[:, :2], v, s), r"coords has shape \(60, 2\)"),
    (lambda c, v, s: (c, v[:-1], s), "values has 59"),
    (lambda c, v, s: (np.where(np.arange(60)[:, None] == 5, -1, c), v, s),
     r"coords\[5, 0\] = -1 is negative"),
    (lambda c, v, s: (c, v, (7, 6, 4)), r"out of range for mode 2 of length 4"),
    (lambda c, v, s: (c, np.where(np.arange(60) == 9, np.nan, v), s), r"values\[9\] = nan"),
    (lambda c, v, s: (c, v, (7, 0, 5)), "at least 1"),
])
def test_bad_input_raises_value_error(small, bad, match):
    # Coordinates of a float dtype are a TypeError (tests/python/test_guards.py).
    with pytest.raises(ValueError, match=match):
        tessera.cp_als(bad(*small), rank=2, iters=2, **CPU1)


def test_bad_options_and_files(small, tmp_path):
    with pytest.raises(ValueError, match="rank=0"):
        tessera.cp_als(small, rank=0)
    # An integer its C++ type cannot hold: the range, not "expected an integer".
    with pytest.raises(ValueError, match=r"rank=1000000000000: expected an integer from "
                                         r"-2147483648 to 2147483647"):
        tessera.cp_als(small, rank=10**12)
    with pytest.raises(ValueError, match="backend"):
        tessera.cp_als(small, rank=2, backend="tpu")
    with pytest.raises(ValueError, match="ranks"):
        tessera.tucker_hooi(small, [3, 2], iters=2, **CPU1)
    with pytest.raises(ValueError, match="no such file"):
        tessera.cp_als(str(tmp_path / "missing.tns"), rank=2)
    bad = tmp_path / "bad.tns"
    bad.write_text("1 1 1 1.0\n1 2 x 2.0\n")
    with pytest.raises(ValueError, match="bad.tns:2"):  # FILE:LINE, as the CLI says it
        tessera.cp_als(str(bad), rank=2, **CPU1)
    with pytest.raises(ValueError):
        tessera.contract(small, small, "ijk,ljm->il", **CPU1)
    with pytest.raises(TypeError, match="unsupported input"):
        tessera.cp_als([1, 2, 3], rank=2)
    # Arrays are planned as the CLI plans a file: a factor over memory is the planner's
    # line, not a bare "out of memory" (a 2^32-row mode's factor at R 8 takes 256 GiB).
    huge = (np.array([[0, 0, 0], [1, 2, 0]]), np.array([1.0, 2.0]), (2**32, 3, 2))
    with pytest.raises(ValueError, match="no memory tier fits .*mode 0 has 4294967296 rows"):
        tessera.cp_als(huge, rank=8, **CPU1)
    if not tessera.cuda_built():
        with pytest.raises(ValueError, match="without CUDA"):
            tessera.cp_als(small, rank=2, backend="cuda")


def test_tuning_keywords_reach_the_backend_and_the_record(small):
    # The CLI's "Kernel tuning" options as keyword arguments of the same names.
    py = tessera.cp_als(small, rank=3, iters=4, cpu_isa="base", cuda_layout="smem",
                        cuda_l2_hint=False, ttmc_tile=128, nccl_timeout=60, **CPU1)
    t = py.record["tuning"]
    assert set(t) == set(tessera.TUNING) - {"nccl_timeout"}
    assert t["cpu_isa"] == "base" and t["cuda_layout"] == "smem"
    assert t["cuda_l2_hint"] is False and t["ttmc_tile"] == 128
    assert t["mttkrp_kernel"] == "auto" and t["sptc_tc_threshold"] == -1  # defaults
    ref = tessera.cp_als(small, rank=3, iters=4, **CPU1)  # the ISA changes rounding only
    assert abs(py.fit - ref.fit) < 1e-10
    assert tessera.tucker_hooi(small, [2, 2, 2], iters=2, ttmc_kernel="cores",
                               **CPU1).record["tuning"]["ttmc_kernel"] == "cores"
    assert tessera.contract(small, small, "ijk,ijl->kl", sptc_pool=False,
                            **CPU1).record["tuning"]["sptc_pool"] is False
    with pytest.raises(TypeError, match="cuda_layot"):
        tessera.cp_als(small, rank=2, cuda_layot="smem", **CPU1)
    with pytest.raises(ValueError, match="--cuda-layout"):
        tessera.cp_als(small, rank=2, cuda_layout="bogus", **CPU1)
    with pytest.raises(ValueError, match="ttmc_tile"):
        tessera.cp_als(small, rank=2, ttmc_tile="big", **CPU1)
    with pytest.raises(ValueError, match="nccl_timeout"):
        tessera.cp_als(small, rank=2, nccl_timeout=-1, **CPU1)


def test_tensor_core_keywords(small):
    # The cuda MTTKRP on tensor cores (issue 18): the keywords of --tensor-cores,
    # --tc-precision and --tc-tile-density reach the record; a host backend runs as without
    # them and has no "tc_split".
    assert tessera.TUNING["tensor_cores"] == "auto"
    assert tessera.TUNING["tc_precision"] == "auto"
    assert tessera.TUNING["tc_tile_density"] == 0.25
    r = tessera.cp_als(small, rank=3, iters=3, tensor_cores="on", tc_precision="tf32",
                       tc_tile_density=0.5, **CPU1)
    t = r.record["tuning"]
    assert t["tensor_cores"] == "on" and t["tc_precision"] == "tf32"
    assert t["tc_tile_density"] == 0.5
    assert "tc_split" not in r.record
    d = tessera.cp_als(small, rank=3, iters=3, **CPU1).record["tuning"]
    assert (d["tensor_cores"], d["tc_precision"], d["tc_tile_density"]) == ("auto", "auto", 0.25)
    assert tessera.cp_als(small, rank=2, iters=1, tc_tile_density=1,  # an int, the closed end
                          **CPU1).record["tuning"]["tc_tile_density"] == 1.0
    for kw, option in [({"tensor_cores": "maybe"}, "--tensor-cores"),
                       ({"tc_precision": "fp8"}, "--tc-precision"),
                       ({"tc_tile_density": 0}, "--tc-tile-density"),
                       ({"tc_tile_density": 1.5}, "--tc-tile-density"),
                       ({"tc_tile_density": float("nan")}, "--tc-tile-density")]:
        with pytest.raises(ValueError, match=option):
            tessera.cp_als(small, rank=2, **kw, **CPU1)
    with pytest.raises(ValueError, match="--tensor-cores"):
        tessera.tucker_hooi(small, [2, 2, 2], tensor_cores="maybe", **CPU1)
    # The wrong type names the keyword.
    with pytest.raises(ValueError, match="tensor_cores"):
        tessera.cp_als(small, rank=2, tensor_cores=True, **CPU1)
    with pytest.raises(ValueError, match="tc_tile_density"):
        tessera.cp_als(small, rank=2, tc_tile_density="dense", **CPU1)


# ---- callback, Ctrl-C, GIL ---------------------------------------------------------------


def test_callback_and_its_exception(small):
    seen = []
    r = tessera.cp_als(small, rank=2, iters=4, tol=0, callback=seen.append, **CPU1)
    assert [s["iteration"] for s in seen] == [1, 2, 3, 4]
    assert seen[-1]["fit"] == r.fit

    def stop(info):
        if info["iteration"] == 2:
            raise StopIteration("enough")

    with pytest.raises(StopIteration, match="enough"):
        tessera.cp_als(small, rank=2, iters=10, tol=0, callback=stop, **CPU1)


def medium():
    return random_sparse((60, 50, 40), 20000, seed=9, every_index=False)


def test_ctrl_c_interrupts_cleanly():
    X = medium()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        tessera.cp_als(X, rank=4, iters=1000000, tol=0, **CPU1)
    assert time.time() - t0 < 20
    timer.cancel()
    assert tessera.cp_als(X, rank=2, iters=2, **CPU1).iterations == 2  # still usable


def spins_during(call):
    """How often another Python thread ran (yielding with sleep(0)) while call() ran."""
    state = {"calling": False, "returned": False}
    spins = [0]

    def spin():
        while not state["calling"]:
            time.sleep(0)
        while not state["returned"]:
            spins[0] += 1
            time.sleep(0)

    th = threading.Thread(target=spin)
    th.start()
    state["calling"] = True
    call()
    state["returned"] = True
    th.join()
    return spins[0]


def test_gil_is_released_during_compute():
    # Counts, not rates, so a loaded machine slows both threads alike. A call that holds the
    # GIL in C (sum over a range, about 20 ms) lets the other thread run once or not at all;
    # cp_als (0.1-0.5 s here) let it run 500-1500 times when measured.
    held = spins_during(lambda: sum(range(3_000_000)))
    assert held < 20, held
    X = medium()
    released = spins_during(lambda: tessera.cp_als(X, rank=16, iters=300, tol=0, **CPU1))
    assert released >= 100, (released, held)


# ---- leaks -------------------------------------------------------------------------------


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_leak_over_100_calls(small):
    # Bound: 8 MiB over 100 calls after 20 warm-up calls (a leak of the inputs, factors or
    # record per call, ~10 KiB each here, would pass it only if under 80 bytes a call).
    for _ in range(20):
        tessera.cp_als(small, rank=3, iters=3, **CPU1)
    before = rss_kib()
    for _ in range(100):
        r = tessera.cp_als(small, rank=3, iters=3, **CPU1)
        tessera.contract(small, small, "ijk,ljk->il", **CPU1)
        try:
            tessera.cp_als((small[0], small[1], (1, 1, 1)), rank=2, **CPU1)
        except ValueError:
            pass
    after = rss_kib()
    assert r.iterations == 3
    assert after - before < 8 * 1024, (before, after)


# ---- examples ----------------------------------------------------------------------------


def test_example_cp_basic_runs():
    src = os.environ.get("TESSERA_SOURCE_DIR")
    if not src:
        pytest.skip("TESSERA_SOURCE_DIR is not set")
    out = subprocess.run([sys.executable, os.path.join(src, "examples", "cp_basic.py")],
                         check=True, capture_output=True, text=True, timeout=60)
    assert "fit" in out.stdout
    out = subprocess.run([sys.executable, os.path.join(src, "examples", "compare_numpy.py")],
                         check=True, capture_output=True, text=True, timeout=60)
    assert "agree" in out.stdout


# ---- checkpoints -------------------------------------------------------------------------


def test_checkpoint_and_resume_equal_an_uninterrupted_run(small, tmp_path):
    full = tessera.cp_als(small, rank=3, iters=8, tol=0, **CPU1)
    ck = tmp_path / "run.ckpt.h5"
    first = tessera.cp_als(small, rank=3, iters=4, tol=0, checkpoint=ck, checkpoint_every=2,
                           **CPU1)
    assert ck.exists() and first.iterations == 4
    resumed = tessera.cp_als(small, rank=3, iters=8, tol=0, resume=ck, **CPU1)
    same_cp(resumed, full)
    with pytest.raises(ValueError, match="rank"):  # a checkpoint of another rank
        tessera.cp_als(small, rank=2, iters=8, resume=ck, **CPU1)
