"""Poisson CP (--loss poisson, CP-APR) against an independent NumPy CP-APR (cp_apr_numpy.py):
the same per-iteration log-likelihood, KKT violation and inner iteration counts, and the same
final model, from the same start model, on the reference and cpu backends, on 1, 2 and 3
ranks, from the CLI and from tessera.cp_apr; the count checks of the input; with --holdout,
the held-out loss and AUC (printed, recorded, the same on 1 and 3 ranks, below a random
model's)."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import mpi_env, write_tns
from cp_apr_numpy import cp_apr as numpy_cp_apr
from cp_apr_numpy import normalise_conventional

import tessera

SHAPE, R, ITERS = (20, 15, 10), 3, 4
# The CLI's defaults for the apr_* values; --tol 1e-4 (the KKT tolerance).
TOL = 1e-4
RTOL = 1e-10


def planted_counts(seed=5):
    """Poisson counts (about 400 in all) from a planted rank-3 nonnegative model, with the
    last index of every mode present (so the .tns file has SHAPE)."""
    rng = np.random.default_rng(seed)
    F = [rng.gamma(0.5, 1.0, (s, R)) for s in SHAPE]
    M = np.einsum("ir,jr,kr,r->ijk", *[f / f.sum(0) for f in F], np.array([3.0, 2.0, 1.0]))
    X = rng.poisson(M * (400 / M.sum()))
    X[tuple(s - 1 for s in SHAPE)] += 1
    coords = np.argwhere(X > 0)
    return coords, X[X > 0].astype(np.float64), M


def start_model(seed=11):
    """Positive factors and weights, but for three exact zeros (entries in rows that hold
    counts, so their Phi exceeds 1 and CP-APR's inadmissible-zero shift runs)."""
    rng = np.random.default_rng(seed)
    F = [rng.random((s, R)) + 0.1 for s in SHAPE]
    F[0][0, 0] = F[1][2, 1] = F[2][3, 2] = 0.0
    return np.array([1.0, 2.0, 0.5]), F


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    d = tmp_path_factory.mktemp("apr")
    coords, vals, _ = planted_counts()
    write_tns(d / "x.tns", coords, vals)
    lam0, F0 = start_model()
    tessera.save_model(tessera.CPResult(lam0, F0, 0.0), str(d / "init.h5"))
    lam, A, hist = numpy_cp_apr(coords, vals, SHAPE, lam0, F0, ITERS, tol=TOL)
    assert sum(h["shifted"] for h in hist) > 0, "the start model does not exercise the shift"
    return d, coords, vals, (lam0, F0), normalise_conventional(lam, A), hist


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def check_against_numpy(hist, weights, factors, expected_model, expected_hist):
    assert len(hist) == len(expected_hist)
    for h, e in zip(hist, expected_hist):
        assert abs(h["loglik"] - e["loglik"]) <= RTOL * abs(e["loglik"]), (h, e)
        assert abs(h["kkt_violation"] - e["kkt_violation"]) <= 1e-9, (h, e)
        assert h["inner_iterations"] == e["inner_iterations"], (h, e)
    ll = [h["loglik"] for h in hist]
    assert all(b >= a for a, b in zip(ll, ll[1:])), ll
    lam, F = expected_model
    assert rel(weights, lam) <= RTOL
    for a, b in zip(factors, F):
        assert rel(a, b) <= RTOL


def cli(d, tag, backend, ranks=1, extra=(), text=False):
    out, rec = d / ("m_%s.h5" % tag), d / ("r_%s.json" % tag)
    cmd = [os.environ["TESSERA_BIN"], "cp", str(d / "x.tns"), "-r", str(R), "-i", str(ITERS),
           "--tol", repr(TOL), "--loss", "poisson", "--precision", "double", "--backend",
           backend, "--threads", "1", "--init", "file:" + str(d / "init.h5"), "-o", str(out),
           "--json", str(rec), *extra]
    if ranks > 1:
        mpiexec = os.environ.get("TESSERA_MPIEXEC") or shutil.which("mpiexec")
        if not mpiexec:
            pytest.skip("no mpiexec")
        cmd = [mpiexec, "-n", str(ranks), "--oversubscribe"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(rec) as f:
        got = tessera.load_model(str(out)), json.load(f)
    return got + (r.stdout + r.stderr,) if text else got


@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_cli_equals_numpy(problem, tessera_bin, backend, ranks):
    d, _, _, _, model, hist = problem
    m, rec = cli(d, "%s%d" % (backend, ranks), backend, ranks)
    assert rec["options"]["loss"] == "poisson"
    check_against_numpy(rec["per_iteration"], m.weights, m.factors, model, hist)
    assert rec["poisson"]["loglik"] == rec["per_iteration"][-1]["loglik"]
    assert rec["poisson"]["inadmissible_zeros_shifted"] == sum(h["shifted"] for h in hist)


def test_python_cp_apr_equals_numpy(problem):
    d, coords, vals, (lam0, F0), _, _ = problem
    # init= takes factors with weights 1: fold the start weights into mode 0. A looser KKT
    # tolerance than the CLI tests' so that modes stop their inner iterations early and the
    # run converges (at iteration 18; 5 shifts on the way).
    F = [F0[0] * lam0] + F0[1:]
    lam, A, hist = numpy_cp_apr(coords, vals, SHAPE, np.ones(R), F, 60, tol=1e-2)
    assert len(hist) < 60 and hist[-1]["inner_iterations"] < 3 * 10
    X = (coords, vals, SHAPE)
    py = tessera.cp_apr(X, R, iters=60, tol=1e-2, init=F, backend="cpu", threads=1)
    assert py.converged and py.stop_reason == "converged"
    check_against_numpy(py.history, py.weights, py.factors, normalise_conventional(lam, A), hist)
    assert py.loglik == py.history[-1]["loglik"] and py.record["options"]["loss"] == "poisson"
    same = tessera.cp_als(X, R, iters=60, tol=1e-2, init=F, backend="cpu", threads=1,
                          loss="poisson")
    np.testing.assert_array_equal(same.weights, py.weights)
    assert tessera.cp_als(X, R, iters=2, backend="cpu", threads=1).loglik is None
    with pytest.raises(ValueError, match="loss"):
        tessera.cp_als(X, R, iters=2, loss="bogus")
    # tessera.read_tensor's result is an input as it stands (docs/counts.md's example).
    back = tessera.cp_apr(tessera.read_tensor(str(d / "x.tns")), R, iters=60, tol=1e-2, init=F,
                          backend="cpu", threads=1)
    np.testing.assert_allclose(back.weights, py.weights, rtol=1e-12)


def test_python_cp_apr_recovers_planted_model():
    coords, vals, M = planted_counts()
    py = tessera.cp_apr((coords, vals, SHAPE), R, iters=200, tol=1e-4, backend="cpu", threads=1)
    # Multiplicative updates never lower the log-likelihood; the inadmissible-zero shift may,
    # slightly (here once, by 2e-7 relative: NumPy's CP-APR does the same from this start).
    ll = [h["loglik"] for h in py.history]
    assert all(b >= a - 1e-6 * abs(a) for a, b in zip(ll, ll[1:])) and ll[-1] > ll[0]
    # The fitted model is close to the (scaled) planted means: total counts and shape.
    fit = py.full()
    truth = M * (vals.sum() / M.sum())
    assert abs(fit.sum() - vals.sum()) < 1e-6 * vals.sum()
    assert np.corrcoef(fit.ravel(), truth.ravel())[0, 1] > 0.9


def run_bad(tmp_path, lines, *extra):
    tns = tmp_path / "bad.tns"
    tns.write_text(lines)
    r = subprocess.run([os.environ["TESSERA_BIN"], "cp", str(tns), "-r", "2", "-i", "2",
                        "--loss", "poisson", "--backend", "reference", *extra],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).splitlines()


def test_cli_input_checks(tmp_path, tessera_bin):
    rc, lines = run_bad(tmp_path, "1 1 1 2\n2 1 2 -3\n2 2 2 1\n")
    assert rc != 0
    hits = [line for line in lines if "poisson" in line and "values >= 0" in line]
    assert len(hits) == 1, lines
    ok = "1 1 1 2\n2 1 2 3\n2 2 2 1\n"
    rc, lines = run_bad(tmp_path, ok, "--observed-only")
    assert rc != 0
    hits = [line for line in lines if "--loss poisson" in line and "--observed-only" in line]
    assert len(hits) == 1, lines
    # Zero penalties however written (Python's l1=0.0 is "0.0") are no penalties.
    assert run_bad(tmp_path, ok, "--l1", "0.0,0,0", "--l2", "0.0")[0] == 0
    rc, lines = run_bad(tmp_path, ok, "--l1", "0,0.1,0")
    assert rc != 0 and any("--l1/--l2" in line for line in lines), lines


def printed_holdout(text):
    """The (held-out loss, AUC) pairs of the iteration lines."""
    lines = [x for x in text.splitlines() if x.lstrip().startswith("iter") and "AUC" in x]
    return [(float(x.split("held-out loss")[1].split()[0]), float(x.split("AUC")[1].split()[0]))
            for x in lines]


def test_holdout_loss_printed_recorded_and_the_same_on_1_and_3_ranks(problem, tessera_bin):
    # The held-out entries are chosen from the original coordinates (detail::training_view)
    # and the zeros by hashed coordinates dealt over the ranks (detail::holdout_score).
    d, coords, _, _, _, _ = problem
    _, r1, text = cli(d, "hold1", "cpu", 1, ("--holdout", "0.2"), text=True)
    _, r3 = cli(d, "hold3", "cpu", 3, ("--holdout", "0.2"))
    h = r1["holdout"]
    assert h["held_out_entries"] > 0
    assert h["held_out_entries"] + h["training_entries"] == len(coords)
    assert r3["holdout"]["held_out_entries"] == h["held_out_entries"]
    printed = printed_holdout(text)
    assert len(printed) == len(r1["per_iteration"]) == ITERS, text
    for (loss, auc), it in zip(printed, r1["per_iteration"]):
        assert abs(loss - it["holdout_loss"]) <= 1e-5 * abs(it["holdout_loss"]), (loss, it)
        assert abs(auc - it["auc"]) <= 1e-4 and 0 <= it["auc"] <= 1, (auc, it)
    assert r1["poisson"]["holdout_loss"] == r1["per_iteration"][-1]["holdout_loss"]
    assert r1["poisson"]["auc"] == r1["per_iteration"][-1]["auc"]
    assert any("held-out entries: %d" % h["held_out_entries"] in line for line in text.splitlines())
    for a, b in zip(r1["per_iteration"], r3["per_iteration"]):
        assert abs(a["holdout_loss"] - b["holdout_loss"]) <= 1e-10 * abs(a["holdout_loss"]), (a, b)
        assert abs(a["loglik"] - b["loglik"]) <= 1e-10 * abs(a["loglik"]), (a, b)
        assert abs(a["auc"] - b["auc"]) <= 1e-6, (a, b)
    # Trained on the training entries only: not the full tensor's run.
    _, full = cli(d, "hold0", "cpu", 1)
    assert full["per_iteration"][-1]["loglik"] != r1["per_iteration"][-1]["loglik"]
    assert "holdout_loss" not in full["poisson"]


def expected_holdout_loss(M, coords, vals, eps=1e-10):
    """What the held-out loss estimates for a model M (dense): the mean Poisson loss
    m - x log(max(m, eps)) over the nonzeros, and over all entries taken as zeros, averaged."""
    m = M[tuple(coords.T)]
    return 0.5 * (np.mean(m - vals * np.log(np.maximum(m, eps))) + np.mean(M))


def test_python_holdout_loss_beats_a_random_model():
    coords, vals, M = planted_counts()
    X = (coords, vals, SHAPE)
    r = tessera.cp_apr(X, R, iters=60, tol=1e-4, holdout=0.2, backend="cpu", threads=1)
    assert r.holdout_loss is not None and r.auc is not None
    assert r.history[-1]["holdout_loss"] == r.holdout_loss == r.record["poisson"]["holdout_loss"]
    assert r.history[-1]["auc"] == r.auc and r.auc > 0.5
    # Random nonnegative models scaled to the counts' total (the scale of a fit): the held-out
    # loss of the fitted model is lower than what any of them scores on average.
    rng = np.random.default_rng(1)
    rand = []
    for _ in range(5):
        G = np.einsum("ir,jr,kr->ijk", *[rng.random((s, R)) for s in SHAPE])
        rand.append(expected_holdout_loss(G * (vals.sum() / G.sum()), coords, vals))
    truth = expected_holdout_loss(M * (vals.sum() / M.sum()), coords, vals)
    assert r.holdout_loss < min(rand), (r.holdout_loss, rand, truth)
    assert truth < min(rand)
    # cp_als(loss="poisson") is the same run.
    same = tessera.cp_als(X, R, iters=60, tol=1e-4, holdout=0.2, backend="cpu", threads=1,
                          loss="poisson")
    assert same.holdout_loss == r.holdout_loss
    assert tessera.cp_apr(X, R, iters=2, backend="cpu", threads=1).holdout_loss is None


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_cli_holdout_out_of_range(tmp_path, tessera_bin, value):
    rc, lines = run_bad(tmp_path, "1 1 1 2\n2 1 2 3\n2 2 2 1\n", "--holdout=" + value)
    assert rc != 0
    assert len([line for line in lines if "--holdout" in line]) == 1, lines
