"""ctest's entry for the Python tests: pytest on this folder, or return code 77 (skipped)
with the reason when pytest or the built module is missing."""

import importlib.util
import os
import sys

if importlib.util.find_spec("pytest") is None:
    print("SKIP: pytest is not installed for %s (Debian: python3-pytest)" % sys.executable)
    sys.exit(77)
if importlib.util.find_spec("tessera") is None:
    print("SKIP: the tessera module is not on PYTHONPATH (build with TESSERA_PYTHON=ON)")
    sys.exit(77)
import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-x" if "-x" in sys.argv else "-ra",
                      here] + [a for a in sys.argv[1:] if a != "-x"]))
