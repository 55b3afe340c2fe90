"""mpirun -np 1/2/3 python3 mpi_script.py: the same results on every rank count (within
rounding: sums over ranks change order), on every rank."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import mpi_env

pytest.importorskip("mpi4py")
HERE = os.path.dirname(os.path.abspath(__file__))


def run(np_, out):
    mpiexec = os.environ.get("TESSERA_MPIEXEC") or shutil.which("mpiexec")
    if not mpiexec:
        pytest.skip("no mpiexec")
    env = mpi_env()
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([mpiexec, "-n", str(np_), "--oversubscribe", sys.executable,
                    os.path.join(HERE, "mpi_script.py"), str(out)], check=True, env=env,
                   timeout=120)
    return np.load(out)


def test_mpirun_1_2_3_agree(tmp_path):
    res = {p: run(p, tmp_path / ("np%d.npz" % p)) for p in (1, 2, 3)}
    ref = res[1]
    for p in (2, 3):
        r = res[p]
        np.testing.assert_allclose(r["fit"], ref["fit"], atol=1e-12)
        np.testing.assert_allclose(r["tucker_fit"], ref["tucker_fit"], atol=1e-12)
        np.testing.assert_allclose(r["weights"], ref["weights"], rtol=1e-9)
        for k in ("arr_0", "arr_1", "arr_2"):
            np.testing.assert_allclose(r[k], ref[k], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(r["z"], ref["z"], rtol=1e-12)
