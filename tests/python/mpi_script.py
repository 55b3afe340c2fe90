"""Run under mpirun by test_mpi.py: CP-ALS, Tucker and a contraction with the input on
rank 0, and CP-ALS with every rank's share; rank 0 saves the results, and every rank checks
that it holds the same result as rank 0."""

import sys

import numpy as np
from mpi4py import MPI

import tessera
from conftest import random_sparse

comm = MPI.COMM_WORLD
me, P = comm.Get_rank(), comm.Get_size()
coords, vals, shape = random_sparse((9, 8, 7), 150, seed=21)
X = (coords, vals, shape) if me == 0 else None

cp = tessera.cp_als(X, rank=3, iters=10, tol=0, backend="cpu", threads=1)
share = slice(me * len(vals) // P, (me + 1) * len(vals) // P)
cps = tessera.cp_als((coords[share], vals[share], shape), rank=3, iters=10, tol=0,
                     backend="cpu", threads=1, distributed="share")
tk = tessera.tucker_hooi(X, [3, 2, 2], iters=5, backend="cpu", threads=1)
z = tessera.contract(X, X, "ijk,ljk->il", backend="cpu", threads=1)

for r in (cp, cps):  # results on every rank, identical to rank 0's
    for f in r.factors:
        f0 = comm.bcast(f if me == 0 else None, root=0)
        assert np.array_equal(f, f0), "rank %d holds other factors than rank 0" % me
z0 = comm.bcast(z.values if me == 0 else None, root=0)
assert np.array_equal(z.values, z0)
np.testing.assert_allclose(cps.fit, cp.fit, atol=1e-12)
# Bad input on rank 0 only: every rank raises the same ValueError (no rank hangs).
bad = (np.where(coords == 0, -1, coords), vals, shape) if me == 0 else None
try:
    tessera.cp_als(bad, rank=2, backend="cpu", threads=1)
    raise AssertionError("no error for a negative coordinate")
except ValueError as e:
    assert "is negative" in str(e), str(e)
if me == 0:
    np.savez(sys.argv[1], weights=cp.weights, fit=cp.fit, tucker_fit=tk.fit, core=tk.core,
             z=z.todense(), *cp.factors)
