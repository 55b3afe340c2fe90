"""``pip install --no-build-isolation .`` into a fresh virtual environment (docs/python.md,
"Install into your environment"), reusing the build folder under test (TESSERA_BUILD_DIR:
the folder whose python/ is on PYTHONPATH), so nothing recompiles: seconds, not minutes.
Then the venv's interpreter imports tessera from a folder outside the checkout, without
PYTHONPATH, runs a small CP-ALS and ``python -m tessera``.

It installs nothing on the machine: it skips, naming the Debian package, when the venv
module, pip, setuptools or wheel is missing (jobs/setup.sh installs them). With
TESSERA_REQUIRE_PIP=1 (CI's .ci/run sets it) it fails instead of skipping, so a CI that
passes has installed the module with pip. The venv is made
``--without-pip`` and uses the system's pip (visible through --system-site-packages), so
python3-venv's bundled wheels are not needed and making it takes well under a second."""

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import tessera

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("TESSERA_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))


def skip(why):
    if os.environ.get("TESSERA_REQUIRE_PIP") == "1":
        pytest.fail(why + " (TESSERA_REQUIRE_PIP=1: this run must install with pip)")
    pytest.skip(why)


def build_dir():
    """The CMake build folder of the tessera under test (<build>/python/tessera)."""
    b = os.environ.get("TESSERA_BUILD_DIR")
    if not b:
        b = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(tessera.__file__))))
    if not os.path.exists(os.path.join(b, "CMakeCache.txt")):
        skip("the tessera under test (%s) is not in a CMake build folder; set "
             "TESSERA_BUILD_DIR" % tessera.__file__)
    return b


def require(module, package):
    if importlib.util.find_spec(module) is None:
        skip("%s is not available to %s (Debian: %s; jobs/setup.sh installs it)"
             % (module, sys.executable, package))


def test_pip_install_into_a_venv(tmp_path):
    require("venv", "python3-venv")
    require("pip", "python3-pip")
    require("setuptools", "python3-setuptools")
    require("wheel", "python3-wheel")
    build = build_dir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(TESSERA_BUILD_DIR=build, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1")
    r = subprocess.run([py, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-index",
                        SOURCE], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "Successfully installed tessera" in r.stdout

    # From another folder, without PYTHONPATH: the venv's own copy.
    script = (
        "import os, sys, numpy as np, tessera\n"
        "assert tessera.__file__.startswith(sys.prefix), tessera.__file__\n"
        "c = np.array([[0, 0, 0], [1, 2, 0], [2, 1, 1], [0, 1, 1]])\n"
        "m = tessera.cp_als((c, np.array([1.0, 2.0, 3.0, 4.0]), (3, 3, 2)), rank=2, iters=5,\n"
        "                   backend='cpu', threads=1)\n"
        "assert 0 < m.fit <= 1 and m.iterations >= 1\n"
        "print('fit', m.fit, tessera.__file__)\n"
    )
    r = subprocess.run([py, "-c", script], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(venv) in r.stdout, r.stdout
    r = subprocess.run([py, "-m", "tessera"], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BLAS" in r.stdout and str(venv) in r.stdout
