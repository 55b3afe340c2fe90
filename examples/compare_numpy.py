"""Tessera's CP-ALS against a plain NumPy/SciPy CP-ALS on a small tensor, from the same
initial factors: the fits agree iteration by iteration (docs/python.md).

    PYTHONPATH=build/python python3 examples/compare_numpy.py
"""
import time

import numpy as np
import scipy.linalg

import tessera


def numpy_cp_als(X, factors, iters):
    """Textbook CP-ALS on a dense 3-way tensor: A_n = X_(n) (Khatri-Rao of the others) V^+."""
    A = [f.copy() for f in factors]
    specs = ["abc,br,cr->ar", "abc,ar,cr->br", "abc,ar,br->cr"]
    fits = []
    for _ in range(iters):
        for n in range(3):
            others = [A[m] for m in range(3) if m != n]
            M = np.einsum(specs[n], X, *others)
            V = (others[0].T @ others[0]) * (others[1].T @ others[1])
            A[n] = scipy.linalg.solve(V, M.T, assume_a="pos").T
        model = np.einsum("ar,br,cr->abc", *A)
        fits.append(1 - np.linalg.norm(X - model) / np.linalg.norm(X))
    return fits


rng = np.random.default_rng(1)
shape, R = (20, 15, 10), 4
truth = [rng.random((s, R)) for s in shape]
X = np.einsum("ar,br,cr->abc", *truth) * (rng.random(shape) < 0.3)  # a sparse tensor
coords = np.argwhere(X)  # (nnz, N)
init = [rng.random((s, R)) for s in shape]

t = time.perf_counter()
ref = numpy_cp_als(X, init, 25)
t_np = time.perf_counter() - t
t = time.perf_counter()
m = tessera.cp_als((coords, X[tuple(coords.T)], shape), rank=R, iters=25, tol=0, init=init)
t_ts = time.perf_counter() - t
fits = [h["fit"] for h in m.history]
diff = max(abs(a - b) for a, b in zip(fits, ref))
print(f"NumPy fit {ref[-1]:.8f} ({t_np:.3f} s), tessera fit {fits[-1]:.8f} ({t_ts:.3f} s)")
print(f"largest difference over {len(fits)} iterations: {diff:.2e}")
assert diff < 1e-6, "the fits differ"
print("the fits agree")
