"""CP-ALS under MPI: every rank runs this script, rank 0 holds the input, every rank gets
the result.

    mpirun -np 4 python3 examples/cp_distributed.py [TENSOR.tns|.h5]

With a file name every rank passes the path and the library reads it in parallel; without
one, rank 0 builds a random tensor (other ranks pass None). distributed="share" instead
takes each rank's own share of the nonzeros (global coordinates).
"""
import sys

import numpy as np
from mpi4py import MPI  # initialises MPI (tessera would do it otherwise)

import tessera

comm = MPI.COMM_WORLD
if len(sys.argv) > 1:
    X = sys.argv[1]  # the same path on every rank
elif comm.rank == 0:
    rng = np.random.default_rng(0)
    coords = rng.integers(0, [200, 150, 100], size=(20000, 3))
    X = (coords, rng.random(20000), (200, 150, 100))
else:
    X = None  # the input lives on rank 0 only

m = tessera.cp_als(X, rank=8, iters=20, backend="auto", verbose=True)
if comm.rank == 0:
    per_iter = np.mean([h["seconds"] for h in m.history])
    print(f"{comm.size} rank(s): fit {m.fit:.5f}, {per_iter * 1e3:.2f} ms per iteration")
# Every rank holds the whole model:
assert m.factors[0].shape[1] == 8
