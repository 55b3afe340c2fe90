"""Shared helpers of the Python module's tests (tests/python.cmake runs them with pytest).

Environment (set by ctest): PYTHONPATH=<build>/python, TESSERA_BIN (the tessera binary),
TESSERA_MPIEXEC (mpiexec), TESSERA_SOURCE_DIR (the repository, for examples/)."""

import os

import numpy as np
import pytest

import tessera  # noqa: E402  (a module that does not import is a failure, not a skip)


def random_sparse(shape, nnz, seed=0, every_index=True):
    """Unique 0-based coordinates (nnz, N) int64 and values in [0.1, 1.1); with
    every_index, the last index of every mode occurs (so a .tns file has these dims)."""
    rng = np.random.default_rng(seed)
    total = int(np.prod(shape))
    lin = rng.choice(total, size=nnz, replace=False)
    if every_index:
        last = np.ravel_multi_index(tuple(s - 1 for s in shape), shape)
        if last not in lin:
            lin[0] = last
    lin.sort()
    coords = np.stack(np.unravel_index(lin, shape), axis=1).astype(np.int64)
    vals = rng.random(nnz) + 0.1
    return coords, vals, tuple(shape)


def write_tns(path, coords, vals):
    with open(path, "w") as f:
        for c, v in zip(coords, vals):
            f.write(" ".join(str(int(i) + 1) for i in c) + " " + repr(float(v)) + "\n")


@pytest.fixture
def small():
    return random_sparse((7, 6, 5), 60, seed=3)


@pytest.fixture
def tessera_bin():
    b = os.environ.get("TESSERA_BIN")
    if not b or not os.path.exists(b):
        pytest.skip("TESSERA_BIN (the tessera binary) is not set")
    return b


def mpi_env():
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMP_NUM_THREADS": "1",
    })
    return env
