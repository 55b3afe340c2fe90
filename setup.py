"""``pip install .``: the tessera Python module for the interpreter running pip
(docs/python.md, "Install into your environment"). setuptools drives CMake; nothing is
downloaded, so build with ``--no-build-isolation`` in an environment that has setuptools,
wheel and NumPy (a venv made with ``--system-site-packages`` sees Debian's).

    python3 -m venv --system-site-packages ~/venvs/tessera
    ~/venvs/tessera/bin/pip install --no-build-isolation .

Environment:
  TESSERA_BUILD_DIR   a CMake build folder to use. One that is configured already is only
                      brought up to date (``cmake --build DIR --target _tessera``: nothing
                      recompiles when it is current) and must have been configured for an
                      interpreter of the same ABI as this one. Default: build/pip-<tag>
                      (e.g. build/pip-cp311), configured here on first use.
  TESSERA_CMAKE_ARGS  extra arguments of that first configure (e.g. -DTESSERA_WITH_CUDA=OFF).
  TESSERA_JOBS        parallel build jobs (default: the CPU count).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
TAG = "cp%d%d" % sys.version_info[:2]


def _version():
    text = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    return re.search(r"project\(\s*tessera\s+VERSION\s+([0-9.]+)", text).group(1)


def _build_dir():
    return os.path.abspath(os.environ.get("TESSERA_BUILD_DIR") or
                           os.path.join(ROOT, "build", "pip-" + TAG))


def _run(args):
    print("tessera setup.py: " + " ".join(shlex.quote(a) for a in args), flush=True)
    subprocess.run(args, check=True)


def _cache_value(build, key):
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split("=", 1)[1].strip()
    return None


class CMakeBuild(build_ext):
    """Builds the extension `_tessera` with CMake and copies it into the wheel."""

    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            sys.exit("tessera setup.py: cmake not found (Debian: apt-get install cmake ninja-build; "
                     "jobs/setup.sh installs every build dependency)")
        build = _build_dir()
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            args = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DTESSERA_PYTHON=ON", "-DTESSERA_BUILD_TESTS=OFF",
                    "-DPython3_EXECUTABLE=" + sys.executable,
                    "-DPython_EXECUTABLE=" + sys.executable]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            _run(args + shlex.split(os.environ.get("TESSERA_CMAKE_ARGS", "")))
        elif _cache_value(build, "TESSERA_PYTHON") in ("OFF", "0", "FALSE", "NO"):
            sys.exit("tessera setup.py: %s was configured with TESSERA_PYTHON=OFF" % build)
        jobs = os.environ.get("TESSERA_JOBS") or str(os.cpu_count() or 1)
        _run(["cmake", "--build", build, "--target", "_tessera", "-j", jobs])
        built = os.path.join(build, "python", "tessera", "_tessera" + suffix)
        if not os.path.exists(built):
            folder = os.path.dirname(built)
            found = sorted(f for f in os.listdir(folder) if f.startswith("_tessera")) \
                if os.path.isdir(folder) else []
            sys.exit("tessera setup.py: %s has no _tessera%s for %s (found: %s); the build was "
                     "configured for %s. Use a build folder of this interpreter: unset "
                     "TESSERA_BUILD_DIR, or configure one with -DPython3_EXECUTABLE=%s" % (
                         build, suffix, sys.executable, ", ".join(found) or "nothing",
                         _cache_value(build, "Python3_EXECUTABLE"), sys.executable))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)
        shutil.copymode(built, dest)


try:  # pip builds through bdist_wheel: the wheel package (setuptools >= 70.1 has its own)
    import wheel  # noqa: F401
except ImportError:
    try:
        import setuptools.command.bdist_wheel  # noqa: F401
    except ImportError:
        sys.exit("tessera setup.py: %s has no 'wheel' package (pip's bdist_wheel): install it "
                 "into this environment (pip install wheel, conda install wheel), or use a venv "
                 "made with --system-site-packages over Debian's python3-wheel" % sys.executable)

# setuptools' own intermediate folders (build/lib.*, bdist.*, egg-info) next to CMake's.
_staging = os.path.join(_build_dir(), "setuptools")
os.makedirs(_staging, exist_ok=True)

setup(
    version=_version(),
    packages=["tessera"],
    package_dir={"": "python"},
    ext_modules=[Extension("tessera._tessera", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": _staging}, "egg_info": {"egg_base": _staging}},
    zip_safe=False,
)
