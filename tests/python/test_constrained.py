"""Constrained, regularised and weighted CP (docs/constrained-cp.md) against independent
float64 NumPy implementations on dense copies of small tensors: nonnegative CP by HALS with
L1/L2 penalties, completion (loss over the stored entries, row-wise normal equations) with a
held-out set, and the nvecs start."""

import numpy as np
import pytest
from conftest import random_sparse, tessera

CPU1 = dict(backend="cpu", threads=1)


def unfold_mttkrp(X, A, n):
    N = X.ndim
    letters = "abcdefghij"[:N]
    others = [m for m in range(N) if m != n]
    spec = letters + "," + ",".join(letters[m] + "r" for m in others) + "->" + letters[n] + "r"
    return np.einsum(spec, X, *[A[m] for m in others])


def full(lam, A):
    letters = "abcdefghij"[:len(A)]
    return np.einsum("r," + ",".join(l + "r" for l in letters) + "->" + letters, lam, *A)


def normalise(A, it):
    """The loop's normalisation: 2-norm on the first iteration, max-norm (at least 1) after."""
    lam = np.sqrt((A * A).sum(axis=0)) if it == 0 else np.maximum(np.abs(A).max(axis=0), 1.0)
    scale = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), 1.0)
    return A * scale, lam


def numpy_hals(X, init, iters, sweeps, l1=0.0, l2=0.0, nonneg=True):
    """Nonnegative (or L1) CP by HALS: each mode's update runs `sweeps` cyclic passes over
    the columns r, a_r = max(0, m_r - A V_r + a_r V_rr - l1) / (V_rr + l2), from the current
    factor times the weights, the other factors normalised."""
    N = X.ndim
    A = [f.copy() for f in init]
    R = A[0].shape[1]
    lam = np.ones(R)
    fits = []
    for it in range(iters):
        for n in range(N):
            others = [m for m in range(N) if m != n]
            M = unfold_mttkrp(X, A, n)
            V = np.ones((R, R))
            for m in others:
                V *= A[m].T @ A[m]
            B = A[n] * lam
            for _ in range(sweeps):
                for r in range(R):
                    z = M[:, r] - B @ V[:, r] + B[:, r] * V[r, r]
                    d = V[r, r] + l2
                    if nonneg:
                        B[:, r] = np.maximum(0.0, z - l1) / d if d > 0 else 0.0
                    else:
                        B[:, r] = np.sign(z) * np.maximum(np.abs(z) - l1, 0.0) / d if d > 0 else 0.0
            A[n], lam = normalise(B, it)
        fits.append(1 - np.linalg.norm(X - full(lam, A)) / np.linalg.norm(X))
    return lam, A, fits


def numpy_completion(X, W, init, iters, l2=0.0):
    """CP of the entries where W == 1 only: each row of each mode solves
    (sum_j k_j k_j^T + l2 I) a = sum_j x_j k_j over its observed entries j."""
    N = X.ndim
    A = [f.copy() for f in init]
    R = A[0].shape[1]
    lam = np.ones(R)
    fits = []
    for it in range(iters):
        for n in range(N):
            others = [m for m in range(N) if m != n]
            Xn = np.moveaxis(X * W, n, 0).reshape(X.shape[n], -1)
            Wn = np.moveaxis(W, n, 0).reshape(X.shape[n], -1)
            K = np.ones((Xn.shape[1], R))
            # Khatri-Rao rows in the C order of the remaining modes.
            grids = np.meshgrid(*[np.arange(X.shape[m]) for m in others], indexing="ij")
            for m, g in zip(others, grids):
                K *= A[m][g.ravel()]
            B = np.zeros((X.shape[n], R))
            for i in range(X.shape[n]):
                obs = Wn[i] != 0
                G = K[obs].T @ K[obs] + l2 * np.eye(R)
                B[i] = np.linalg.solve(G, K[obs].T @ Xn[i, obs])
            A[n], lam = normalise(B, it)
        model = full(lam, A)
        fits.append(1 - np.linalg.norm(W * (X - model)) / np.linalg.norm(W * X))
    return lam, A, fits


def low_rank(shape, R, seed, noise=0.01):
    rng = np.random.default_rng(seed)
    true = [rng.random((s, R)) for s in shape]
    letters = "abcdefghij"[:len(shape)]
    X = np.einsum(",".join(l + "r" for l in letters) + "->" + letters, *true)
    return X + noise * rng.random(shape)


@pytest.mark.parametrize("sweeps,l1,l2", [(1, 0.0, 0.0), (3, 0.0, 0.0), (3, 0.05, 0.2)])
def test_nonneg_matches_numpy_hals(sweeps, l1, l2):
    shape, R = (6, 5, 4), 3
    X = low_rank(shape, R, seed=5)
    coords = np.argwhere(X != 0)
    rng = np.random.default_rng(8)
    init = [rng.random((s, R)) for s in shape]
    lam, A, fits = numpy_hals(X, init, 12, sweeps, l1, l2)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=12, tol=0, init=init,
                         nonneg=True, inner_sweeps=sweeps, l1=l1, l2=l2, **CPU1)
    np.testing.assert_allclose([h["fit"] for h in got.history], fits, atol=1e-6, rtol=0)
    for f in got.factors:
        assert (f >= 0).all()
    np.testing.assert_allclose(got.full(), full(lam, A), atol=1e-6 * np.abs(X).max())
    assert got.record["options"]["nonneg"] == [0, 1, 2]
    assert got.record["options"]["l1"] == [l1] * 3


def test_l1_without_nonneg_is_soft_thresholding():
    shape, R = (5, 4, 4), 2
    X = low_rank(shape, R, seed=6) - 0.3  # entries of both signs
    coords = np.argwhere(X != 0)
    rng = np.random.default_rng(2)
    init = [rng.standard_normal((s, R)) for s in shape]
    lam, A, fits = numpy_hals(X, init, 8, 2, l1=0.1, nonneg=False)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=8, tol=0, init=init,
                         inner_sweeps=2, l1=0.1, **CPU1)
    np.testing.assert_allclose([h["fit"] for h in got.history], fits, atol=1e-6, rtol=0)
    assert any((f < 0).any() for f in got.factors)


def test_nonneg_on_some_modes_only():
    shape, R = (5, 4, 3), 2
    X = low_rank(shape, R, seed=9) - 0.2
    coords = np.argwhere(X != 0)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=10, nonneg=[1],
                         **CPU1)
    assert (got.factors[1] >= 0).all()
    assert got.record["options"]["nonneg"] == [1]
    with pytest.raises(ValueError, match="--nonneg 3"):
        tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, nonneg=[3], **CPU1)
    with pytest.raises(ValueError, match="--l2"):
        tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, l2=[1, 2], **CPU1)


def test_completion_matches_numpy_row_wise_normal_equations():
    shape, R = (6, 5, 4), 2
    X = low_rank(shape, R, seed=12)
    rng = np.random.default_rng(3)
    W = (rng.random(shape) < 0.6).astype(float)
    coords = np.argwhere(W != 0)
    init = [rng.random((s, R)) for s in shape]
    l2 = 1e-3
    lam, A, fits = numpy_completion(X, W, init, 10, l2=l2)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=10, tol=0, init=init,
                         observed_only=True, l2=l2, **CPU1)
    np.testing.assert_allclose([h["fit"] for h in got.history], fits, atol=1e-6, rtol=0)
    np.testing.assert_allclose(got.full(), full(lam, A), atol=1e-6 * np.abs(X).max())
    # The model predicts the missing entries of the low-rank tensor.
    miss = W == 0
    assert np.sqrt(np.mean((got.full()[miss] - X[miss]) ** 2)) < 0.05 * np.abs(X).max()


def test_holdout_rmse_matches_numpy_and_beats_the_baselines():
    shape, R = (8, 7, 6), 2
    X = low_rank(shape, R, seed=21)
    coords = np.argwhere(X != 0)
    vals = X[tuple(coords.T)]
    got = tessera.cp_als((coords, vals, shape), rank=R, iters=30, observed_only=True,
                         holdout=0.2, seed=4, **CPU1)
    h = got.record["holdout"]
    assert h["held_out_entries"] + h["training_entries"] == len(vals)
    assert 0.1 < h["held_out_entries"] / len(vals) < 0.3
    # RMSE over the held-out set: recomputed from the model, the set being the entries whose
    # training copy is absent (the model is then evaluated on them).
    zeros = tessera.cp_als((coords, vals, shape), rank=R, iters=30, holdout=0.2, seed=4, **CPU1)
    assert got.validation_rmse < got.mean_predictor_rmse
    assert got.validation_rmse < zeros.validation_rmse
    assert got.history[-1]["validation_rmse"] == pytest.approx(got.validation_rmse)
    # Same held-out set whatever the decomposition: both runs report the same mean RMSE.
    assert zeros.mean_predictor_rmse == pytest.approx(got.mean_predictor_rmse, rel=1e-12)
    # Completion without l2 gets the CLI's default ridge (0.01 per mode); plain CP none.
    assert got.record["options"]["l2"] == [0.01, 0.01, 0.01]
    assert zeros.record["options"]["l2"] == [0.0, 0.0, 0.0]
    # Every row keeps training entries in this dense tensor: no held-out entry is cold.
    assert h["cold_entries"] == 0


def test_nvecs_start_is_recorded_and_converges():
    # The start itself is compared with LAPACK's singular vectors in algo_cp_test (C++).
    shape, R = (7, 6, 5), 2
    X = low_rank(shape, R, seed=31, noise=0.0)
    coords = np.argwhere(X != 0)
    got = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=200, tol=1e-12,
                         init="nvecs", **CPU1)
    assert got.record["options"]["init"] == "nvecs"
    assert got.fit > 0.999
    with pytest.raises(ValueError, match="nvecs"):
        tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, init="svd", **CPU1)
