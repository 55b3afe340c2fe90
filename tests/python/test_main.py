"""``python -m tessera`` (python/tessera/__main__.py) and tessera.build_info()."""

import json
import os
import subprocess
import sys

from conftest import tessera


def test_build_info_fields():
    info = tessera.build_info()
    assert info["version"] == tessera.__version__
    assert info["cuda"]["built"] == tessera.cuda_built()
    assert info["mpi"]["library"] and info["mpi"]["standard"]
    assert info["blas"]["vendor"] and info["lapack"]["vendor"]
    assert info["openmp"]["max_threads"] >= 1
    assert info["hdf5"]["version"].count(".") == 2


def test_python_m_tessera_prints_the_capabilities():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "tessera"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for key in ("tessera", "CUDA", "NCCL", "MPI", "BLAS", "LAPACK", "OpenMP", "HDF5", "module",
                "python"):
        assert any(line.startswith(key + " ") for line in r.stdout.splitlines()), r.stdout
    assert sys.executable in r.stdout
    r = subprocess.run([sys.executable, "-m", "tessera", "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["python"]["executable"] == sys.executable
    assert os.path.samefile(j["module"], os.path.dirname(tessera.__file__))
